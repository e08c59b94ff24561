//! What became of a batch whose session ended before the writer read its answer: a restart, a
//! failover or an administrator ends a session whenever it likes, and a `COMMIT` whose answer
//! never came may or may not have been made. Failing the batch then poisoned every run in it,
//! which is right only when nothing can tell; the runs' rows usually can.
//!
//! A batch commits all or nothing. A run it appends to, under a lease this process still holds
//! (the row's token is the batch's), is written by nobody else meanwhile: its `next_seq` is
//! where the batch's appends to it begin (nothing of the batch was committed: it is written
//! again) or where they end (all of it was: each command is answered as the rows say). A run
//! the batch creates is there or not; a claim took the lease if the row names this process;
//! a signal it sends is found by its run, name, payload and the time its first try took.
//! Anything else (the lease taken over, a `next_seq` elsewhere, as a `fast` commit the server
//! lost in a crash leaves it) cannot tell, and the batch's runs are poisoned as before. A batch
//! with nothing to tell by is written again only when every command in it may run twice (a
//! cancel among them) or is a claim that holds nothing.
//!
//! Before any of that, the writer knows whether the batch's `COMMIT` went out at all: a
//! session that ended before it did took its transaction with it ([`Xact::NotCommitted`]). A
//! batch the rows could not tell (a log line alone) reads its transaction's id in its first
//! round trip and commits in a later one, so when only the `COMMIT`'s answer was lost, the
//! server says what became of it (`txid_status`, [`Xact::Told`]).

use std::collections::HashMap;

use crate::api::StoreError;
use crate::writer::{ClaimOut, Cmd, Tag};

/// A run's row as the writer reads it after the session ended.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RunNow {
    /// The lease's fencing token.
    pub(super) token: u64,
    pub(super) next_seq: u64,
    /// The lease's holder, `None` when nobody holds it.
    pub(super) owner: Option<String>,
    /// As stored: a claim's answer holds the run's durability, a cancel's whether it ended.
    pub(super) status: String,
    pub(super) durability: String,
}

/// The statement that reads [`RunNow`] of the runs `$1` names.
pub(super) const RUNS_NOW: &str = "SELECT id, lease_token, next_seq, lease_owner, status,
    durability FROM runs WHERE id = ANY($1)";

/// What the writer knows of the batch's transaction after its session ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Xact {
    /// Its `COMMIT` never went out: the server rolled it back as the session ended.
    NotCommitted,
    /// Its `COMMIT` went out and, asked by the transaction's id, the server says whether it was
    /// made.
    Told(bool),
    /// Its `COMMIT` went out and its answer was lost; its rows tell, if anything does.
    Unknown,
}

/// The statement that asks the server what became of the transaction `$1` (its id as
/// `txid_current()` gave it): `committed`, `aborted` or `in progress` (its session not yet
/// gone), `NULL` when too old to tell.
pub(super) const XACT_STATUS: &str = "SELECT txid_status($1)";

/// The statement by which a batch reads its transaction's id (see [`Xact::Told`]).
pub(super) const XACT_ID: &str = "SELECT txid_current()";

/// What became of the batch.
#[derive(Debug)]
pub(super) enum Fate {
    /// Nothing of it was committed: it is written again.
    NotWritten,
    /// It was committed; each command's outcome, in the batch's order.
    Written(Vec<Result<(), StoreError>>),
    /// Nothing tells.
    Unknown,
}

/// The runs whose rows tell the batch's fate (see [`decide`]).
pub(super) fn runs_named(batch: &[Cmd]) -> Vec<String> {
    let mut runs: Vec<String> = batch
        .iter()
        .filter_map(|cmd| match cmd {
            Cmd::Create { run, .. } => Some(run.id.clone()),
            Cmd::Claim { run, .. } | Cmd::Cancel { run, .. } => Some(run.clone()),
            Cmd::Renew { tag, .. } | Cmd::Sync { tag, .. } => Some(tag.run.clone()),
            cmd => cmd.data_tag().map(|tag| tag.run.clone()),
        })
        .collect();
    runs.sort_unstable();
    runs.dedup();
    runs
}

/// Whether the batch's runs' rows could tell its fate should its session end on the way: it
/// appends to or creates a run, or every command in it may run twice or is a claim (which the
/// row's holder tells). One they could not reads its transaction's id (see [`Xact::Told`]).
pub(super) fn told_by_rows(batch: &[Cmd]) -> bool {
    batch
        .iter()
        .all(|cmd| runs_twice_alike(cmd) || matches!(cmd, Cmd::Claim { .. }))
        || batch.iter().any(|cmd| match cmd {
            Cmd::Append { rows, .. } => !rows.is_empty(),
            Cmd::Create { .. } => true,
            _ => false,
        })
}

/// The batch's fate from what is known of its transaction (`xact`), its runs' rows (`now`,
/// missing when the run has no row) and the signals of its signal commands found as they were
/// sent (`sent`: by the command's place in the batch, the signal's number; see
/// [`SIGNAL_SENT`]), `poisoned` answering for runs poisoned before the batch.
pub(super) fn decide(
    batch: &[Cmd],
    xact: Xact,
    now: &HashMap<String, RunNow>,
    sent: &HashMap<usize, u64>,
    poisoned: &dyn Fn(&str, u64) -> Option<StoreError>,
) -> Fate {
    let written = match xact {
        Xact::NotCommitted | Xact::Told(false) => return Fate::NotWritten,
        Xact::Told(true) => Some(true),
        Xact::Unknown => written(batch, now, sent, poisoned),
    };
    match written {
        Some(false) => Fate::NotWritten,
        Some(true) => outcomes(batch, now, sent, poisoned).map_or(Fate::Unknown, Fate::Written),
        None if batch
            .iter()
            .all(|cmd| runs_twice_alike(cmd) || claims_nothing(cmd, now)) =>
        {
            Fate::NotWritten
        }
        None => Fate::Unknown,
    }
}

/// Whether the batch was committed, as its runs' rows tell; `None` when none tells, or they
/// disagree.
fn written(
    batch: &[Cmd],
    now: &HashMap<String, RunNow>,
    sent: &HashMap<usize, u64>,
    poisoned: &dyn Fn(&str, u64) -> Option<StoreError>,
) -> Option<bool> {
    // Each run's appends in the batch: where they begin and end, under which token.
    let mut spans: Vec<(&Tag, u64, u64)> = Vec::new();
    let mut votes = Vec::new();
    for (at, cmd) in batch.iter().enumerate() {
        match cmd {
            // A signal never tried has no time, and so no row.
            Cmd::Signal { sent_at, .. } => {
                votes.push(sent_at.is_some() && sent.contains_key(&at));
            }
            Cmd::Append {
                tag,
                first_seq,
                rows,
                ..
            } if !rows.is_empty() && poisoned(&tag.run, tag.token).is_none() => {
                let end = first_seq + rows.len() as u64;
                match spans.iter_mut().find(|(t, _, _)| t.run == tag.run) {
                    Some((t, _, last)) if t.token == tag.token && *last == *first_seq => {
                        *last = end;
                    }
                    // Not one span under one lease: nothing to tell by.
                    Some(_) => return None,
                    None => spans.push((tag, *first_seq, end)),
                }
            }
            Cmd::Create { run, owner, .. } => votes.push(match now.get(&run.id) {
                None => false,
                Some(row) if row.token == 1 && row.owner.as_deref() == Some(&owner.id) => true,
                Some(_) => return None,
            }),
            // Only a claim of this process's sets its owner on the row. One that did not (not
            // written, or it found a live holder or no run) tells nothing, and changed nothing.
            Cmd::Claim { run, owner, .. } if holds(now, run, owner) => votes.push(true),
            _ => {}
        }
    }
    for (tag, first, end) in spans {
        match now.get(&tag.run) {
            Some(row) if row.token == tag.token => match row.next_seq {
                n if n == first => votes.push(false),
                n if n == end => votes.push(true),
                _ => return None,
            },
            // Taken over since, or gone: this run cannot tell.
            _ => {}
        }
    }
    let first = *votes.first()?;
    votes.iter().all(|v| *v == first).then_some(first)
}

/// Each command's outcome in a committed batch, as the writer would have answered it: a run
/// whose lease is no longer this token's lost it (and so the run's later commands are
/// refused), a run poisoned before answers with that. `None` when a command answers with what
/// only its own answer held (a clean's report, a signal not found, a claim of a run this
/// process does not hold).
fn outcomes(
    batch: &[Cmd],
    now: &HashMap<String, RunNow>,
    sent: &HashMap<usize, u64>,
    poisoned: &dyn Fn(&str, u64) -> Option<StoreError>,
) -> Option<Vec<Result<(), StoreError>>> {
    let mut refused: HashMap<(&str, u64), StoreError> = HashMap::new();
    let mut results = Vec::with_capacity(batch.len());
    for (at, cmd) in batch.iter().enumerate() {
        let tag = match cmd {
            // Its number is its answer ([`fill_answers`]).
            Cmd::Signal { .. } if sent.contains_key(&at) => {
                results.push(Ok(()));
                continue;
            }
            // Its lease is its answer ([`fill_answers`]): taken by this claim if this process
            // holds it (no other of its commands claims a run it holds).
            Cmd::Claim { run, owner, .. } => {
                // Not held: it found a live holder (whom only its answer named) or no run.
                if !holds(now, run, owner) {
                    return None;
                }
                results.push(Ok(()));
                continue;
            }
            Cmd::Cancel { run, .. } => {
                results.push(match now.get(run) {
                    Some(_) => Ok(()),
                    None => Err(StoreError::NotFound(run.clone())),
                });
                continue;
            }
            Cmd::Signal { .. } | Cmd::Clean { .. } => return None,
            Cmd::Value { .. }
            | Cmd::Spec { .. }
            | Cmd::SpecBinary { .. }
            | Cmd::Unlink { .. }
            | Cmd::Create { .. } => {
                results.push(Ok(()));
                continue;
            }
            Cmd::Renew { tag, .. } | Cmd::Sync { tag, .. } => tag,
            cmd => cmd.data_tag()?,
        };
        let before = poisoned(&tag.run, tag.token)
            .or_else(|| refused.get(&(tag.run.as_str(), tag.token)).cloned());
        let result = match (before, cmd) {
            (Some(e), _) => Err(e),
            (None, Cmd::Sync { .. }) => Ok(()),
            (None, _) => match now.get(&tag.run) {
                None => Err(StoreError::NotFound(tag.run.clone())),
                Some(row) if row.token != tag.token => Err(StoreError::LeaseLost {
                    run: tag.run.clone(),
                }),
                // Its appends went in: [`written`] found every such run's `next_seq` where
                // they end.
                Some(_) => Ok(()),
            },
        };
        if let Err(e) = &result
            && !matches!(cmd, Cmd::Sync { .. } | Cmd::Renew { .. })
        {
            refused
                .entry((tag.run.as_str(), tag.token))
                .or_insert_with(|| e.clone());
        }
        results.push(result);
    }
    Some(results)
}

/// Sets what a committed batch's commands answer besides success, as [`outcomes`] found it:
/// a signal's number (`sent`), a claim's lease, and whether a cancel was asked of a run still
/// going (one that ended since counts as done unless it ended otherwise than canceled).
pub(super) fn fill_answers(
    batch: &mut [Cmd],
    now: &HashMap<String, RunNow>,
    sent: &HashMap<usize, u64>,
) {
    for (at, cmd) in batch.iter_mut().enumerate() {
        match cmd {
            Cmd::Signal { seq, .. } => {
                if let Some(number) = sent.get(&at) {
                    *seq = *number;
                }
            }
            Cmd::Claim { run, out, .. } => {
                if let Some(row) = now.get(run.as_str()) {
                    *out = ClaimOut::Claimed {
                        token: row.token,
                        next_seq: row.next_seq,
                        durability: crate::writer::parse_durability(&row.durability),
                    };
                }
            }
            Cmd::Cancel { run, done, .. } => {
                *done = now.get(run.as_str()).is_some_and(|row| {
                    !matches!(row.status.as_str(), "succeeded" | "failed" | "quarantined")
                });
            }
            _ => {}
        }
    }
}

/// The statement that finds a signal as its command sent it (its run, name, payload and time,
/// `$1`–`$4`): its number, the latest of equal ones. Two signals equal in all four (the same
/// payload to the same run in the same millisecond) read as one here, and so a batch written
/// again after its session ended may take the earlier for the one it sent; nothing else can.
pub(super) const SIGNAL_SENT: &str = "SELECT seq FROM signals
    WHERE run = $1 AND name = $2 AND payload_digest = $3 AND sent_at = $4
    ORDER BY seq DESC LIMIT 1";

/// The signal commands of the batch that were tried (by place), with what [`SIGNAL_SENT`]
/// needs to find each: run, name, payload digest and time.
pub(super) fn signals_tried(batch: &[Cmd]) -> Vec<(usize, [&str; 3], i64)> {
    batch
        .iter()
        .enumerate()
        .filter_map(|(at, cmd)| match cmd {
            Cmd::Signal {
                run,
                name,
                payload,
                sent_at: Some(sent_at),
                ..
            } => Some((
                at,
                [run.as_str(), name.as_str(), payload.digest.as_str()],
                *sent_at,
            )),
            _ => None,
        })
        .collect()
}

/// Whether `owner` holds `run` now.
fn holds(now: &HashMap<String, RunNow>, run: &str, owner: &crate::api::Owner) -> bool {
    now.get(run)
        .is_some_and(|row| row.owner.as_deref() == Some(&owner.id))
}

/// Whether `cmd` is a claim that holds nothing now: whether or not it was written, it changed
/// nothing, and trying it again asks the same question.
fn claims_nothing(cmd: &Cmd, now: &HashMap<String, RunNow>) -> bool {
    matches!(cmd, Cmd::Claim { run, owner, .. } if !holds(now, run, owner))
}

/// Whether running `cmd` a second time leaves what once does (a value stored again, a row set
/// to the same fields, a lease given up or renewed again, a cancel asked again), so a batch of
/// such commands can be written again when nothing tells whether it was. (A cancel asked
/// again of a run that its first asking ended meanwhile answers that the run had ended.)
fn runs_twice_alike(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Value { .. }
            | Cmd::Spec { .. }
            | Cmd::SpecBinary { .. }
            | Cmd::Unlink { .. }
            | Cmd::Sync { .. }
            | Cmd::Update { .. }
            | Cmd::Release { .. }
            | Cmd::Renew { .. }
            | Cmd::Cancel { .. }
    )
}

#[cfg(test)]
mod tests;
