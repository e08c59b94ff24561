//! The writer: the one connection that writes, committing queued commands in batches.
//!
//! Commands arrive on a bounded channel in the order callers enqueued them. Whoever commits
//! next takes whatever is queued and runs it all in one `BEGIN IMMEDIATE` transaction,
//! committing once before answering anyone. That is a caller waiting for its own command (a
//! sync, a release, a claim, …) when no one else is committing: it commits on its own thread
//! (no hand-off to the writer thread and back, which on a busy machine cost more than a
//! durable step's fsync); or else the writer thread, rung at once by such a caller, or, for
//! writes nobody waits for, after lingering ~2 ms for company. A durable write nobody waits
//! for lingers too: the engine appends a call's start and then waits on a sync, and
//! committing the append alone the moment it arrives would cost a second fsync when the sync
//! follows microseconds later. While one thread commits, what others queue goes into the next
//! batch together (group commit across runs); after a batch of fast writes, the writer thread
//! commits what came meanwhile at once, without lingering again, so it keeps up with a caller
//! that writes faster than one batch commits.
//!
//! Failure handling: a command fails alone only before it has written anything. Every command
//! is built so that whatever can refuse it (the fence of an append, a missing run, …) is
//! checked by its first write statement, and a statement is atomic, so a refused command
//! leaves nothing behind: no SAVEPOINT is needed (they copied every touched page per command).
//! A refused command answers its error and poisons its run (nothing later is written for that
//! run under that lease, which keeps its journal free of gaps) while the others commit. A
//! failure after a command's first write, or one that takes the transaction with it (I/O, a
//! failed commit, a value that cannot be inserted), fails every command of the batch and
//! poisons every run that had data in it; the batch's values are kept and written with the
//! next batch, because their callers were already told they are stored and later rows may
//! refer to them.
//!
//! The parts: [`command`] is what callers enqueue and how each command is answered;
//! [`group_commit`] is who commits when (the callers' queue, the writer thread's bell and
//! linger, one transaction per batch, the durable syncs, the outcome of each command);
//! [`queue`] is the channel commands wait in, bounded in bytes as well as in commands (both
//! stores' writers take from one);
//! [`statements`] is the SQL each command runs, but for the clean's, which is [`clean`].

mod clean;
mod command;
#[cfg(debug_assertions)]
pub mod faults;
mod group_commit;
pub(crate) mod queue;
mod statements;
#[cfg(test)]
pub(crate) use statements::FENCE_CHECKS;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::api::{Durability, Kept, StoreError};

pub(crate) use clean::{RUNS_A_READ, VALUES_REMOVED, digests_in, pages};
pub(crate) use command::{ClaimOut, Cmd, Reply, Row, Tag, Update, ValueText};
#[cfg(test)]
pub(crate) use group_commit::RESTART_EVERY;
pub(crate) use group_commit::{Queue, spawn};

/// Locks a mutex, going on when another thread panicked while holding it: every structure
/// behind these locks stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An SQLite failure as a store error; a full disk and a file that cannot be written are named
/// as such, so the person reading the error knows what to fix.
pub(crate) fn sqlite(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::DiskFull(e.to_string()),
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => {
            StoreError::Unwritable(e.to_string())
        }
        _ => StoreError::Sqlite(e.to_string()),
    }
}

/// A number as SQLite stores it; values past `i64::MAX` cannot be stored.
pub(crate) fn int(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Sqlite(format!("{n} is too large to store")))
}

/// The first failed write of a run under one lease.
pub(crate) struct Poison {
    token: u64,
    first: StoreError,
}

impl Poison {
    /// What later writes of the run are told.
    pub(crate) fn error(&self, run: &str) -> StoreError {
        match &self.first {
            // A lost lease stays a lost lease: the engine gives the run up rather than failing it.
            StoreError::LeaseLost { .. } => StoreError::LeaseLost {
                run: run.to_string(),
            },
            // The cause is what the person must fix: it is named as it was.
            first @ (StoreError::DiskFull(_) | StoreError::Unwritable(_)) => first.clone(),
            first => StoreError::Poisoned {
                run: run.to_string(),
                message: first.to_string(),
            },
        }
    }
}

/// State shared by the callers and the writer thread.
#[derive(Default)]
pub(crate) struct Shared {
    /// Runs whose writes failed, by run id (for the lease token that failed).
    pub(crate) poison: Mutex<HashMap<String, Poison>>,
    /// Values enqueued but not committed yet, so they can be read back at once.
    pub(crate) pending: Mutex<HashMap<String, ValueText>>,
    /// Digests of values already written or enqueued by this store.
    pub(crate) seen: Mutex<HashSet<[u8; 32]>>,
    /// How many cleans had removed values when the writer last looked, which is what `seen`
    /// vouches for (changed only under its lock; callers read it under the lock).
    pub(crate) epoch: Epoch,
    /// Digests of FlowSpecs whose binary form this store found or enqueued: a run's start
    /// asks the database only the first time (on PostgreSQL, a round trip a run).
    pub(crate) binaries: Mutex<HashSet<String>>,
    /// Transactions attempted.
    pub(crate) batches: AtomicU64,
    /// Commands processed.
    pub(crate) commands: AtomicU64,
    /// Transactions attempted at `synchronous=FULL`.
    pub(crate) full_syncs: AtomicU64,
    /// Transactions attempted on the thread of a caller waiting for them.
    pub(crate) led: AtomicU64,
    /// Test hook: fails the append of this run that starts at this sequence number.
    #[cfg(test)]
    pub(crate) fail_append: Mutex<Option<(String, u64)>>,
    /// Test hook: fails every batch at its commit, as a full disk would.
    #[cfg(test)]
    pub(crate) fail_commit: std::sync::atomic::AtomicBool,
    /// A write fault handed in by a test (debug builds only).
    #[cfg(debug_assertions)]
    pub(crate) fault: std::sync::OnceLock<faults::WriteFault>,
}

/// A count of cleans that removed values, as the writer last read it; `i64::MIN` before its
/// first look, which no count equals, so whatever is vouched for then is written again.
pub(crate) struct Epoch(AtomicI64);

impl Default for Epoch {
    fn default() -> Self {
        Epoch(AtomicI64::new(i64::MIN))
    }
}

impl Shared {
    /// Hands the fault `text` (`WHAT@WHEN[*N]`, see [`faults`]) to this store's writer, the
    /// PostgreSQL store's when `postgres`, else the SQLite store's: `Err` says what is wrong
    /// with the text, names a fault of the other store's writer, or refuses a second fault.
    #[cfg(debug_assertions)]
    pub(crate) fn inject_fault(&self, text: &str, postgres: bool) -> Result<(), String> {
        let fault = faults::WriteFault::parse(text)?;
        if fault.kind().postgres() != postgres {
            let (other, this) = match postgres {
                true => ("SQLite", "PostgreSQL"),
                false => ("PostgreSQL", "SQLite"),
            };
            return Err(format!(
                "`{text}` is a fault of the {other} store's writer; this store is {this}'s"
            ));
        }
        self.fault
            .set(fault)
            .map_err(|_| "a fault is already injected".to_string())
    }

    /// Takes the count of cleans that removed values, read inside a batch's transaction:
    /// when it moved since `last`, the values `seen` remembers may be gone, so they are
    /// forgotten (and storing them again writes them again).
    ///
    /// The committer never waits for `seen`: a caller holds it while it enqueues a value, and
    /// with the queue full that caller waits for the committer to empty it, so waiting here
    /// would stop both for good. When `seen` is busy, `last` still takes the new count (the
    /// batch writes again every value vouched for before it: their `Kept::epoch` is older),
    /// the shared epoch stays behind, so what is vouched for meanwhile is written again too,
    /// and the next batch tries again.
    pub(crate) fn notice_removed_values(&self, count: i64, last: &mut Option<i64>) {
        *last = Some(count);
        if self.epoch.0.load(Ordering::SeqCst) == count {
            return;
        }
        let mut seen = match self.seen.try_lock() {
            Ok(seen) => seen,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        // Before anyone's first look, `seen` holds only values enqueued since the store opened,
        // which their batches write whatever a clean removed.
        if self.epoch.0.load(Ordering::SeqCst) != i64::MIN {
            seen.clear();
        }
        self.epoch.0.store(count, Ordering::SeqCst);
    }

    /// Runs `keep` (a store's look for the binary form of the FlowSpec `digest`, and its write
    /// when missing) unless this store found or enqueued that form already. A clean in another
    /// process may remove it since: the spec is then read from its JSON, as good if slower.
    pub(crate) fn keep_binary_once(
        &self,
        digest: &str,
        keep: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if lock(&self.binaries).contains(digest) {
            return Ok(());
        }
        keep()?;
        lock(&self.binaries).insert(digest.to_string());
        Ok(())
    }

    /// What this store vouches for the FlowSpec `json` under `digest`; its text is the one
    /// copy the spec's write shares (a 1,000-step flow's spec is 600 KB).
    pub(crate) fn kept_spec(&self, digest: &str, json: &str) -> Kept {
        let _seen = lock(&self.seen);
        self.kept(digest, std::sync::Arc::from(json), true)
    }

    /// What this store vouches for `text` under `digest` at this moment (call with `seen`
    /// locked, as the caller decides whether to write the value).
    pub(crate) fn kept(&self, digest: &str, text: std::sync::Arc<str>, spec: bool) -> Kept {
        Kept {
            digest: digest.to_string(),
            text,
            spec,
            epoch: self.epoch.0.load(Ordering::SeqCst),
        }
    }

    /// The error a write for `run` under `token` gets, if the run is poisoned.
    pub(crate) fn poisoned(&self, run: &str, token: u64) -> Option<StoreError> {
        lock(&self.poison)
            .get(run)
            .filter(|p| p.token == token)
            .map(|p| p.error(run))
    }

    /// Records the first failure of `run` under `token`; later ones keep the first.
    pub(crate) fn poison(&self, run: &str, token: u64, error: StoreError) {
        let mut map = lock(&self.poison);
        match map.get(run) {
            Some(p) if p.token == token => {}
            _ => {
                map.insert(
                    run.to_string(),
                    Poison {
                        token,
                        first: error,
                    },
                );
            }
        }
    }
}

/// The stored word for a durability.
pub(crate) fn durability_str(d: Durability) -> &'static str {
    match d {
        Durability::Fast => "fast",
        Durability::Durable => "durable",
    }
}

/// A stored durability word (the schema allows only the two).
pub(crate) fn parse_durability(s: &str) -> Durability {
    if s == "durable" {
        Durability::Durable
    } else {
        Durability::Fast
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A caller holding `seen` while it waits for room in a full queue must not stop the
    /// committer that would make that room: noticing a clean never waits for `seen`.
    #[test]
    fn noticing_a_clean_never_waits_for_a_caller_holding_seen() {
        let shared = Arc::new(Shared::default());
        let mut last = None;
        shared.notice_removed_values(0, &mut last);
        lock(&shared.seen).insert([7; 32]);
        let held = lock(&shared.seen);
        let (done, noticed) = std::sync::mpsc::channel();
        let committer = Arc::clone(&shared);
        std::thread::spawn(move || {
            let mut last = Some(0);
            committer.notice_removed_values(1, &mut last);
            let _ = done.send(last);
        });
        let last = noticed
            .recv_timeout(Duration::from_secs(10))
            .expect("the committer waited for `seen`, which a caller held");
        // The batch counts the clean (it writes again what was vouched for before it) …
        assert_eq!(last, Some(1));
        // … while the shared epoch stays behind, so what callers vouch for meanwhile is
        // written again as well, and `seen` is left as it is.
        assert_eq!(shared.epoch.0.load(Ordering::SeqCst), 0);
        drop(held);
        // The next batch catches up: `seen` forgotten, the epoch moved.
        let mut last = Some(1);
        shared.notice_removed_values(1, &mut last);
        assert_eq!(shared.epoch.0.load(Ordering::SeqCst), 1);
        assert!(lock(&shared.seen).is_empty());
    }

    #[test]
    fn the_first_look_keeps_what_was_enqueued_and_a_clean_after_it_forgets_it() {
        let shared = Shared::default();
        lock(&shared.seen).insert([1; 32]);
        let mut last = None;
        shared.notice_removed_values(3, &mut last);
        assert_eq!(shared.epoch.0.load(Ordering::SeqCst), 3);
        assert_eq!(lock(&shared.seen).len(), 1);
        shared.notice_removed_values(3, &mut last);
        assert_eq!(lock(&shared.seen).len(), 1);
        shared.notice_removed_values(4, &mut last);
        assert_eq!(last, Some(4));
        assert!(lock(&shared.seen).is_empty());
    }
}
