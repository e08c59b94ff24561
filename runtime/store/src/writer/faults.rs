//! Write faults for tests: the writer refuses, delays or fails a batch as a full disk or a
//! read-only file would, at a chosen moment. Compiled into debug builds only (release builds
//! have none of it); `reel` hands a fault in from `REEL_STORE_FAULT` in debug builds, so the
//! end-to-end tests can make a real `reel run` meet a full disk.
//!
//! A fault is written `WHAT@WHEN`, optionally followed by `*N` (it strikes N batches, then the
//! disk has room again; without it, every batch from then on):
//!
//! - `WHAT`, for the SQLite store: `full` (SQLite's `SQLITE_FULL`, "database or disk is
//!   full"), `readonly` (`SQLITE_READONLY`), `refuse` (the matching command alone is refused,
//!   the rest of its batch commits), `delay=MS` (the commit waits MS milliseconds, then
//!   succeeds). For the PostgreSQL store, whose server ends the writer's session (it runs
//!   `pg_terminate_backend` on itself, as a restart or an administrator would):
//!   `session-ends` (before the batch is sent: nothing of it is committed) and `answer-lost`
//!   (once the batch is committed, before the writer has read that it was).
//! - `WHEN`: an event kind (`effect_recorded`): the first batch that appends an event of that
//!   kind; `signal` or `claim`: the first batch that sends a signal or claims a run (as
//!   `reel resume` does); `commit=N`: the N-th batch (from 1)
//!   this store commits; or, for the PostgreSQL faults, `look`: a worker's look (its claim of
//!   due runs), not a batch.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::ffi;

use super::command::Cmd;

/// What a fault does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultKind {
    /// The commit fails with `SQLITE_FULL`.
    Full,
    /// The commit fails with `SQLITE_READONLY`.
    ReadOnly,
    /// The matching command is refused on its own.
    Refuse,
    /// The commit waits this long, then goes on.
    Delay(Duration),
    /// PostgreSQL: the server ends the writer's session before the batch is sent.
    SessionEnds,
    /// PostgreSQL: the server ends the writer's session once the batch is committed, before
    /// the writer reads that it was.
    AnswerLost,
}

impl FaultKind {
    /// Whether the PostgreSQL store's writer has this fault (else the SQLite store's has).
    pub fn postgres(&self) -> bool {
        matches!(self, FaultKind::SessionEnds | FaultKind::AnswerLost)
    }
}

/// When a fault strikes first.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAt {
    /// The first batch appending an event of this kind (of this step, if named).
    Event(String, Option<String>),
    /// The N-th batch (from 1).
    Commit(u64),
    /// PostgreSQL: a worker's look (its claim of due runs, on a reader's session).
    Look,
    /// The first batch that sends a signal.
    Signal,
    /// The first batch that claims a run (`reel resume`'s claim).
    Claim,
}

/// One fault, and how often it has struck.
#[derive(Debug)]
pub struct WriteFault {
    kind: FaultKind,
    at: FaultAt,
    /// How many batches it strikes; `None`: all from the first on.
    times: Option<u32>,
    struck: AtomicU32,
    batches: AtomicU64,
}

impl WriteFault {
    /// Reads `WHAT@WHEN[*N]`; `Err` says what is wrong with it.
    pub fn parse(text: &str) -> Result<WriteFault, String> {
        let (spec, times) = match text.split_once('*') {
            Some((s, n)) => (
                s,
                Some(
                    n.parse()
                        .map_err(|_| format!("`*{n}`: a count of batches"))?,
                ),
            ),
            None => (text, None),
        };
        let (what, when) = spec
            .split_once('@')
            .ok_or_else(|| format!("`{text}`: a fault is WHAT@WHEN[*N]"))?;
        let kind = match what {
            "full" => FaultKind::Full,
            "readonly" => FaultKind::ReadOnly,
            "refuse" => FaultKind::Refuse,
            "session-ends" => FaultKind::SessionEnds,
            "answer-lost" => FaultKind::AnswerLost,
            _ => match what.strip_prefix("delay=").map(str::parse::<u64>) {
                Some(Ok(ms)) => FaultKind::Delay(Duration::from_millis(ms)),
                _ => {
                    return Err(format!(
                        "`{what}`: full, readonly, refuse or delay=MS (SQLite), session-ends \
                         or answer-lost (PostgreSQL)"
                    ));
                }
            },
        };
        let at = match when.strip_prefix("commit=") {
            Some(n) => FaultAt::Commit(n.parse().map_err(|_| format!("`{when}`: commit=N"))?),
            None if when == "look" => FaultAt::Look,
            None if when == "signal" => FaultAt::Signal,
            None if when == "claim" => FaultAt::Claim,
            None if !when.is_empty() => match when.split_once(':') {
                Some((kind, step)) => FaultAt::Event(kind.to_string(), Some(step.to_string())),
                None => FaultAt::Event(when.to_string(), None),
            },
            None => return Err(format!("`{text}`: WHEN is an event kind or commit=N")),
        };
        Ok(WriteFault {
            kind,
            at,
            times,
            struck: AtomicU32::new(0),
            batches: AtomicU64::new(0),
        })
    }

    /// What the fault does.
    pub fn kind(&self) -> &FaultKind {
        &self.kind
    }

    /// Whether `cmd` is one the fault waits for.
    fn matches(&self, cmd: &Cmd, batch_number: u64) -> bool {
        match &self.at {
            FaultAt::Commit(n) => batch_number >= *n,
            FaultAt::Look => false,
            FaultAt::Signal => matches!(cmd, Cmd::Signal { .. }),
            FaultAt::Claim => matches!(cmd, Cmd::Claim { .. }),
            FaultAt::Event(kind, step) => match cmd {
                Cmd::Append { rows, .. } | Cmd::Create { rows, .. } => rows
                    .iter()
                    .any(|r| &r.kind == kind && (step.is_none() || r.step == *step)),
                _ => false,
            },
        }
    }

    /// Whether the fault has begun (it struck once) and still strikes.
    fn live(&self) -> bool {
        self.times
            .is_none_or(|n| self.struck.load(Ordering::SeqCst) < n)
    }

    /// Called once per batch before its commands run: the index of the command to refuse
    /// (`refuse`), if any. Other kinds strike at the commit ([`WriteFault::at_commit`]).
    pub(super) fn refused(&self, batch: &[Cmd]) -> Option<usize> {
        let n = self.batches.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kind != FaultKind::Refuse || !self.live() {
            return None;
        }
        let i = batch.iter().position(|c| self.matches(c, n))?;
        self.struck.fetch_add(1, Ordering::SeqCst);
        Some(i)
    }

    /// Called before a batch commits: the SQLite error to fail it with, after any delay. Once
    /// a fault has struck, it strikes every batch after (the disk stays full) until it has
    /// struck `times` batches.
    pub(super) fn at_commit(&self, batch: &[Cmd]) -> Option<rusqlite::Error> {
        if self.kind == FaultKind::Refuse || self.kind.postgres() || !self.live() {
            return None;
        }
        let n = self.batches.load(Ordering::SeqCst);
        let begun = self.struck.load(Ordering::SeqCst) > 0;
        if !begun && !batch.iter().any(|c| self.matches(c, n)) {
            return None;
        }
        self.struck.fetch_add(1, Ordering::SeqCst);
        let (code, message) = match &self.kind {
            FaultKind::Full => (ffi::SQLITE_FULL, "database or disk is full"),
            FaultKind::ReadOnly => (ffi::SQLITE_READONLY, "attempt to write a readonly database"),
            FaultKind::Delay(d) => {
                std::thread::sleep(*d);
                return None;
            }
            FaultKind::Refuse | FaultKind::SessionEnds | FaultKind::AnswerLost => return None,
        };
        Some(rusqlite::Error::SqliteFailure(
            ffi::Error::new(code),
            Some(message.to_string()),
        ))
    }
}

impl WriteFault {
    /// Called once per batch the PostgreSQL writer writes: the session's end that strikes it,
    /// if any. As on SQLite, once struck it strikes every batch after until it has struck
    /// `times` batches.
    pub(crate) fn session_end(&self, batch: &[Cmd]) -> Option<FaultKind> {
        let n = self.batches.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.kind.postgres() || !self.live() {
            return None;
        }
        let begun = self.struck.load(Ordering::SeqCst) > 0;
        if !begun && !batch.iter().any(|c| self.matches(c, n)) {
            return None;
        }
        self.struck.fetch_add(1, Ordering::SeqCst);
        Some(self.kind.clone())
    }

    /// Called once per look of the PostgreSQL store: the session's end that strikes it (`@look`
    /// faults), if any.
    pub(crate) fn look_end(&self) -> Option<FaultKind> {
        if self.at != FaultAt::Look || !self.kind.postgres() || !self.live() {
            return None;
        }
        self.struck.fetch_add(1, Ordering::SeqCst);
        Some(self.kind.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_read_as_written_and_bad_ones_say_why() {
        let f = WriteFault::parse("full@effect_recorded*2").unwrap();
        assert_eq!(f.kind, FaultKind::Full);
        assert_eq!(f.at, FaultAt::Event("effect_recorded".into(), None));
        assert_eq!(f.times, Some(2));
        let f = WriteFault::parse("readonly@step_started:b").unwrap();
        assert_eq!(f.kind, FaultKind::ReadOnly);
        assert_eq!(
            f.at,
            FaultAt::Event("step_started".into(), Some("b".into()))
        );
        assert_eq!(f.times, None);
        let f = WriteFault::parse("delay=150@commit=3").unwrap();
        assert_eq!(f.kind, FaultKind::Delay(Duration::from_millis(150)));
        assert_eq!(f.at, FaultAt::Commit(3));
        assert_eq!(f.times, None);
        let f = WriteFault::parse("answer-lost@effect_recorded*3").unwrap();
        assert_eq!(f.kind, FaultKind::AnswerLost);
        assert!(f.kind.postgres() && !FaultKind::Full.postgres());
        assert_eq!(
            WriteFault::parse("session-ends@commit=2").unwrap().kind,
            FaultKind::SessionEnds
        );
        assert_eq!(
            WriteFault::parse("answer-lost@look").unwrap().at,
            FaultAt::Look
        );
        for bad in ["full", "wet@commit=1", "full@", "full@commit=x", "full@x*y"] {
            assert!(WriteFault::parse(bad).is_err(), "{bad}");
        }
    }
}
