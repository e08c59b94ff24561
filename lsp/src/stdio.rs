//! The server's side of the base protocol: a guard between stdin and tower-lsp-server.
//!
//! tower-lsp-server decodes stdin with a framed codec that ends the stream at the first message
//! it cannot decode (a body that is not JSON, or not a JSON-RPC message): the server then exited
//! with status 0 and nothing on stderr, and the editor lost it. So the guard reads the frames
//! first and passes the server only messages it will decode. Anything else is answered here,
//! as JSON-RPC says (`-32700` for a body that is not JSON, `-32600` for JSON that is not a
//! request, notification or response), logged on stderr, and skipped; the next message is
//! served as usual. Requests with an unknown method or the wrong params reach the server, which
//! answers them (`-32601`, `-32602`).
//!
//! Framing mistakes are recovered where the bytes allow: a header without a usable
//! `Content-Length` is answered and skipped up to the next `Content-Length`; a body cut short
//! by a wrong length is answered, and a body that runs into the next message's header (a length
//! too long) is cut there, so the next message is still read, whether it arrived in the same
//! read or later; a header block that runs into the next message's header is answered and cut
//! there too (both found by the fuzzer, `fuzz/`).

use std::io;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Request, Response};

use crate::prepared::Prepared;

const HEADER: &[u8] = b"Content-Length";

/// What one frame read from the client holds.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A message the server will decode, as its body.
    Message(Vec<u8>),
    /// A malformed message, and the error response it gets.
    Refused(Value),
}

/// Splits a byte stream into frames, recovering from framing mistakes.
#[derive(Default)]
pub struct Deframer {
    buf: Vec<u8>,
    /// Bodies are passed as they are, not judged (the server's own output).
    trusted: bool,
    /// Bytes skipped outside any message since the caller last asked (see `take_notes`).
    skipped: usize,
    /// Why bodies were refused since the caller last asked.
    refusals: Vec<String>,
}

impl Deframer {
    /// A deframer for the server's output, whose bodies are passed without being judged.
    pub fn trusted() -> Deframer {
        Deframer {
            buf: Vec::new(),
            trusted: true,
            skipped: 0,
            refusals: Vec::new(),
        }
    }

    /// What a person may want to know of what came since the last call (bytes skipped
    /// outside any message, in all, and why each body was refused), for the caller to log:
    /// the deframer writes nowhere itself, so a fuzzer can feed it noise in silence.
    pub fn take_notes(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let skipped = std::mem::take(&mut self.skipped);
        if skipped > 0 {
            notes.push(format!("skipped {skipped} bytes outside any message"));
        }
        notes.append(&mut self.refusals);
        notes
    }

    /// Adds bytes read from the client.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, if the bytes so far hold one.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            // Bytes before a header are the rest of a message whose length was wrong (already
            // answered) or noise: skip them.
            let found = find(&self.buf, HEADER);
            // Without a header, keep what could be the start of one.
            let start = found.unwrap_or(self.buf.len().saturating_sub(HEADER.len() - 1));
            if start > 0 {
                self.skipped += start;
                self.buf.drain(..start);
            }
            found?;
            let end = find(&self.buf, b"\r\n\r\n")? + 4;
            // A header cut short runs into the next message's header: it is answered, and the
            // next message is read from its own header rather than swallowed.
            if let Some(next) = find_frame_header(&self.buf[1..end]) {
                self.buf.drain(..next + 1);
                return Some(refused(
                    json!(null),
                    -32700,
                    "Parse error: a header cut short by the next message",
                ));
            }
            let length = content_length(&self.buf[..end]);
            let Some(length) = length else {
                self.buf.drain(..end);
                return Some(refused(
                    json!(null),
                    -32700,
                    "Parse error: no valid Content-Length header",
                ));
            };
            let length = if self.buf.len() < end + length {
                // A body that already runs into another header is cut there: its length was
                // wrong, and waiting for the rest would swallow the next message.
                find_frame_header(&self.buf[end..])?
            } else {
                // The same cut when the whole length is there already: whether the next
                // message arrived in the same read must not decide whether it is swallowed.
                find_frame_header(&self.buf[end..end + length]).unwrap_or(length)
            };
            let body: Vec<u8> = self.buf.drain(..end + length).skip(end).collect();
            if body.is_empty() {
                continue;
            }
            return Some(self.judge(body));
        }
    }

    fn judge(&mut self, body: Vec<u8>) -> Frame {
        if self.trusted {
            return Frame::Message(body);
        }
        let (frame, why) = judge(body);
        self.refusals.extend(why);
        frame
    }
}

/// The byte offset of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The offset in `body` of a `Content-Length: N` line ending in a raw line break, which no JSON
/// text can hold (a JSON string escapes its line breaks), so it starts the next message.
fn find_frame_header(body: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = find(&body[from..], HEADER).map(|i| from + i) {
        let rest = &body[at + HEADER.len()..];
        let digits_at = rest.iter().position(|b| !matches!(b, b':' | b' '))?;
        let digits = rest[digits_at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if rest.starts_with(b":") && digits > 0 && rest[digits_at + digits..].starts_with(b"\r\n") {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The `Content-Length` of a header block, if there is exactly one usable value.
fn content_length(headers: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(headers).ok()?;
    let mut lengths = text.split("\r\n").filter_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
    });
    let length = lengths.next()??;
    lengths.next().is_none().then_some(length)
}

/// A body the server will decode, or the error it gets instead and why, for the log.
fn judge(body: Vec<u8>) -> (Frame, Option<String>) {
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        let text = String::from_utf8_lossy(&body);
        let why = format!("not JSON: {}", clip(&text));
        return (
            refused(json!(null), -32700, "Parse error: the body is not JSON"),
            Some(why),
        );
    };
    if is_message(&value) {
        return (Frame::Message(body), None);
    }
    let why = format!("not a JSON-RPC message: {}", clip(&value.to_string()));
    let id = match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) if id.is_string() || id.is_i64() => {
            id.clone()
        }
        _ => json!(null),
    };
    (
        refused(
            id,
            -32600,
            "Invalid Request: not a JSON-RPC 2.0 request, notification or response",
        ),
        Some(why),
    )
}

/// Whether `value` is a JSON-RPC 2.0 request, notification or response, as the server reads
/// them (its own types must accept it, or its decoder would end the stream).
fn is_message(value: &Value) -> bool {
    let Some(object) = value.as_object() else {
        return false;
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return false;
    }
    let id_ok = match object.get("id") {
        None | Some(Value::Null | Value::String(_)) => true,
        Some(n) => n.is_i64(),
    };
    if !id_ok {
        return false;
    }
    match object.get("method") {
        Some(Value::String(_)) => {
            matches!(
                object.get("params"),
                None | Some(Value::Object(_) | Value::Array(_) | Value::Null)
            ) && serde_json::from_value::<Request>(value.clone()).is_ok()
        }
        Some(_) => false,
        None => {
            object.contains_key("id")
                && (object.contains_key("result") != object.contains_key("error"))
                && serde_json::from_value::<Response>(value.clone()).is_ok()
        }
    }
}

fn refused(id: Value, code: i64, message: &str) -> Frame {
    Frame::Refused(json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    }))
}

fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

fn log(message: &str) {
    eprintln!("reel lsp: {message}");
}

/// Reads stdin on a thread of its own, in chunks, until it ends. Not tokio's stdin: its reads
/// run on the runtime's blocking pool, and one still waiting when the client sends `exit` but
/// keeps stdin open would keep the runtime, and so the process, from ending.
pub fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match io::Read::read(&mut stdin, &mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    if tx.blocking_send(chunk[..n].to_vec()).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log(&format!("cannot read stdin: {e}"));
                    return;
                }
            }
        }
    });
    rx
}

/// Copies the client's messages from `input` (chunks of its byte stream) to `server`,
/// answering malformed ones on `replies`, until `input` ends.
pub async fn guard_input(
    mut input: mpsc::Receiver<Vec<u8>>,
    mut server: impl AsyncWrite + Unpin,
    replies: mpsc::UnboundedSender<Value>,
) -> io::Result<()> {
    let mut deframer = Deframer::default();
    while let Some(chunk) = input.recv().await {
        deframer.push(&chunk);
        while let Some(frame) = deframer.next_frame() {
            match frame {
                Frame::Message(body) => write_frame(&mut server, &body).await?,
                Frame::Refused(reply) => {
                    let _ = replies.send(reply);
                }
            }
        }
        for note in deframer.take_notes() {
            log(&note);
        }
    }
    server.shutdown().await
}

/// Copies the server's output to `output` whole frame by whole frame, with the guard's replies
/// between frames and `prepared` answers in place of their stand-ins, until the server's output
/// ends.
pub async fn relay_output(
    mut server: impl AsyncRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
    mut replies: mpsc::UnboundedReceiver<Value>,
    prepared: &Prepared,
) -> io::Result<()> {
    let mut deframer = Deframer::trusted();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut replies_open = true;
    loop {
        tokio::select! {
            reply = replies.recv(), if replies_open => match reply {
                Some(reply) => write_frame(&mut output, reply.to_string().as_bytes()).await?,
                None => replies_open = false,
            },
            read = server.read(&mut chunk) => {
                let n = read?;
                if n == 0 {
                    return output.flush().await;
                }
                deframer.push(&chunk[..n]);
                while let Some(frame) = deframer.next_frame() {
                    // The server writes well-formed frames; each is passed on whole, a
                    // stand-in with its prepared answer in its place.
                    if let Frame::Message(body) = frame {
                        write_pieces(&mut output, &prepared.swap(body).pieces()).await?;
                    }
                }
                for note in deframer.take_notes() {
                    log(&format!("the server's output: {note}"));
                }
            }
        }
    }
}

async fn write_frame(output: &mut (impl AsyncWrite + Unpin), body: &[u8]) -> io::Result<()> {
    write_pieces(output, &[body]).await
}

/// Writes one frame whose body is `pieces`, one after the other.
async fn write_pieces(output: &mut (impl AsyncWrite + Unpin), pieces: &[&[u8]]) -> io::Result<()> {
    let length: usize = pieces.iter().map(|p| p.len()).sum();
    let header = format!("Content-Length: {length}\r\n\r\n");
    output.write_all(header.as_bytes()).await?;
    for piece in pieces {
        output.write_all(piece).await?;
    }
    output.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(bytes: &[u8]) -> Vec<Frame> {
        let mut d = Deframer::default();
        d.push(bytes);
        std::iter::from_fn(|| d.next_frame()).collect()
    }

    fn framed(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    fn code(frame: &Frame) -> Option<i64> {
        match frame {
            Frame::Refused(reply) => reply["error"]["code"].as_i64(),
            Frame::Message(_) => None,
        }
    }

    #[test]
    fn good_messages_pass_whole_and_bad_ones_get_their_error() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#;
        let input = [
            framed(good),
            framed("{not json"),
            framed(r#"{"hello":"world"}"#),
            framed(r#"{"jsonrpc":"2.0","id":7,"method":5}"#),
            framed(r#"[1,2]"#),
            "Content-Length: x\r\n\r\n".to_string(),
            framed(good),
        ]
        .concat();
        let got = frames(input.as_bytes());
        let codes: Vec<Option<i64>> = got.iter().map(code).collect();
        assert_eq!(
            codes,
            [
                None,
                Some(-32700),
                Some(-32600),
                Some(-32600),
                Some(-32600),
                Some(-32700),
                None
            ]
        );
        assert_eq!(got[0], Frame::Message(good.as_bytes().to_vec()));
        let Frame::Refused(reply) = &got[3] else {
            panic!()
        };
        assert_eq!(reply["id"], 7, "the id of an invalid request is kept");
    }

    #[test]
    fn bytes_outside_messages_are_skipped_even_in_pieces() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#;
        let mut d = Deframer::default();
        d.push(b"garbage\r\n\r\nContent-Le");
        assert_eq!(d.next_frame(), None);
        d.push(&framed(good).as_bytes()["Content-Le".len()..]);
        assert_eq!(
            d.next_frame(),
            Some(Frame::Message(good.as_bytes().to_vec()))
        );
    }

    #[test]
    fn a_body_mentioning_the_header_is_not_cut() {
        let text = r#"{"jsonrpc":"2.0","method":"x","params":{"t":"Content-Length: 5\r\n"}}"#;
        let whole = framed(text);
        let mut d = Deframer::default();
        d.push(&whole.as_bytes()[..whole.len() - 3]);
        assert_eq!(d.next_frame(), None);
        d.push(&whole.as_bytes()[whole.len() - 3..]);
        assert_eq!(
            d.next_frame(),
            Some(Frame::Message(text.as_bytes().to_vec()))
        );
    }

    #[test]
    fn a_wrong_length_costs_one_message_only() {
        let good = r#"{"jsonrpc":"2.0","id":2,"method":"shutdown"}"#;
        // Too short: the cut body is refused, the rest skipped up to the next header.
        let short = format!("Content-Length: 10\r\n\r\n{good}{}", framed(good));
        let codes: Vec<Option<i64>> = frames(short.as_bytes()).iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None]);
        // Too long: the body ends where the next header starts, and both are served.
        let long = format!("Content-Length: 500\r\n\r\n{good}{}", framed(good));
        let codes: Vec<Option<i64>> = frames(long.as_bytes()).iter().map(code).collect();
        assert_eq!(codes, [None, None]);
        // A message arriving in pieces waits for its end.
        let mut d = Deframer::default();
        let whole = framed(good);
        d.push(&whole.as_bytes()[..30]);
        assert_eq!(d.next_frame(), None);
        d.push(&whole.as_bytes()[30..]);
        assert_eq!(
            d.next_frame(),
            Some(Frame::Message(good.as_bytes().to_vec()))
        );
    }

    /// Found by the fuzzer (`fuzz/`): a length too long swallowed the next message when both
    /// had arrived in one read, and a header cut short swallowed the next one's header.
    #[test]
    fn the_next_message_survives_whatever_came_in_the_same_read() {
        let good = r#"{"jsonrpc":"2.0","id":2,"method":"shutdown"}"#;
        let long = format!(
            "Content-Length: 80\r\n\r\n{{\"id\":2{}{}",
            framed(good),
            framed(good)
        );
        let codes: Vec<Option<i64>> = frames(long.as_bytes()).iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None, None]);
        let cut = format!(
            "Content-Length: 52\r\n\0\r\n{{\"jsonrpc\"}}{}{}",
            framed(good),
            framed(good)
        );
        let codes: Vec<Option<i64>> = frames(cut.as_bytes()).iter().map(code).collect();
        assert_eq!(codes, [Some(-32700), None, None]);
        // A header right after a header: the same in one read as in pieces.
        let twice = format!("Content-Length: 75\r\n\r\n{}", framed(good));
        let mut d = Deframer::default();
        let mut pieces = Vec::new();
        for piece in twice.as_bytes().chunks(7) {
            d.push(piece);
            pieces.extend(std::iter::from_fn(|| d.next_frame()));
        }
        assert_eq!(pieces, frames(twice.as_bytes()));
        assert_eq!(pieces, [Frame::Message(good.as_bytes().to_vec())]);
    }
}
