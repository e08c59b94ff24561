//! Answers the server writes as JSON itself, for the three whose size grows with the file.
//!
//! tower-lsp-server turns every result into a `serde_json::Value` tree before it writes it out.
//! For the full semantic tokens (850,000 integers at 10,000 steps), the document symbols
//! (10,000 nested objects) and the folding ranges (10,000 objects) building that tree and
//! printing it cost up to four times computing the answer. So, when the server runs behind the stdio relay, those handlers serialize the answer
//! straight to bytes, keep the bytes here under a ticket, and return a small stand-in that
//! carries the ticket; the relay (`stdio::relay_output`) puts the bytes in the stand-in's place
//! before the frame leaves. The client sees the same JSON either way (tested in `tests/lsp`).
//!
//! A stand-in whose request was cancelled never reaches the relay: its bytes are dropped when
//! more than [`KEPT`] answers wait, oldest first.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::Value;

/// What opens every ticket, inside a JSON string: a NUL cannot be in a flow's names or in a
/// result id of the server's, so no other text can look like one.
const MARK: &str = "\u{0}reel-prepared:";
/// The same as the relay sees it, escaped by JSON.
const MARK_JSON: &[u8] = b"\\u0000reel-prepared:";
/// Answers kept for the relay at most; the oldest goes first.
const KEPT: usize = 16;

/// Prepared answers waiting for the relay, by ticket.
#[derive(Default)]
pub struct Prepared {
    next: AtomicU64,
    waiting: Mutex<VecDeque<(u64, Vec<u8>)>>,
}

impl Prepared {
    /// Serializes `answer` and keeps it; returns the ticket to put in the stand-in's place.
    pub fn hold(&self, answer: &impl Serialize) -> Result<String, serde_json::Error> {
        Ok(self.hold_json(serde_json::to_vec(answer)?))
    }

    /// Keeps `bytes`, an answer already made JSON; returns the ticket to put in the stand-in's
    /// place.
    pub fn hold_json(&self, bytes: Vec<u8>) -> String {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if waiting.len() == KEPT {
            waiting.pop_front();
        }
        waiting.push_back((ticket, bytes));
        format!("{MARK}{ticket}")
    }

    /// `body`, a response of the server, with its prepared answer in place when it is a
    /// stand-in; else `body` as it is. As the pieces to write one after the other: the answer
    /// (megabytes) is not copied into a new body.
    pub fn swap(&self, body: Vec<u8>) -> Swapped {
        let ticket = {
            let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if waiting.is_empty() {
                return Swapped::Body(body);
            }
            match ticket_in(&body) {
                Some(ticket) => ticket,
                None => return Swapped::Body(body),
            }
        };
        let Some(id) = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("id").cloned())
        else {
            return Swapped::Body(body);
        };
        let bytes = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let Some(at) = waiting.iter().position(|(t, _)| *t == ticket) else {
                return Swapped::Body(body);
            };
            waiting.remove(at).map(|(_, bytes)| bytes)
        };
        let Some(answer) = bytes else {
            return Swapped::Body(body);
        };
        let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":").into_bytes();
        Swapped::Answer { head, answer }
    }
}

/// A response as the relay writes it (see [`Prepared::swap`]).
#[derive(Debug, PartialEq)]
pub enum Swapped {
    /// The server's body, as it was.
    Body(Vec<u8>),
    /// A prepared answer: `head`, then `answer`, then the closing `}`.
    Answer {
        /// The response up to its result.
        head: Vec<u8>,
        /// The result, as JSON.
        answer: Vec<u8>,
    },
}

impl Swapped {
    /// The pieces of the body, in order.
    pub fn pieces(&self) -> Vec<&[u8]> {
        match self {
            Swapped::Body(body) => vec![body],
            Swapped::Answer { head, answer } => vec![head, answer, b"}"],
        }
    }

    /// The body whole.
    #[cfg(test)]
    fn concat(&self) -> Vec<u8> {
        self.pieces().concat()
    }
}

/// The ticket a stand-in carries. Only a small body is a stand-in: a large one is a real
/// answer and is not searched.
fn ticket_in(body: &[u8]) -> Option<u64> {
    if body.len() > 4096 {
        return None;
    }
    let at = body.windows(MARK_JSON.len()).position(|w| w == MARK_JSON)? + MARK_JSON.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stand_in_gets_its_answer_and_other_bodies_pass_as_they_are() {
        let prepared = Prepared::default();
        let plain = br#"{"jsonrpc":"2.0","result":null,"id":3}"#.to_vec();
        assert_eq!(prepared.swap(plain.clone()).concat(), plain);
        let ticket = prepared.hold(&json!({ "data": [1, 2, 3] })).unwrap();
        let stand_in = serde_json::to_vec(
            &json!({ "jsonrpc": "2.0", "result": { "resultId": ticket, "data": [] }, "id": 7 }),
        )
        .unwrap();
        assert_eq!(prepared.swap(plain.clone()).concat(), plain);
        let swapped: Value =
            serde_json::from_slice(&prepared.swap(stand_in.clone()).concat()).unwrap();
        assert_eq!(
            swapped,
            json!({ "jsonrpc": "2.0", "id": 7, "result": { "data": [1, 2, 3] } })
        );
        // Taken once: the same stand-in again finds nothing.
        assert_eq!(prepared.swap(stand_in.clone()).concat(), stand_in);
    }

    #[test]
    fn answers_never_taken_do_not_pile_up() {
        let prepared = Prepared::default();
        for n in 0..100 {
            prepared.hold(&n).unwrap();
        }
        assert_eq!(prepared.waiting.lock().unwrap().len(), KEPT);
    }
}
