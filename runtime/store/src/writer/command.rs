//! The commands callers enqueue for the writer thread, and how each is answered.

use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use tokio::sync::oneshot;

use crate::api::{CleanScope, Cleaned, Durability, Kept, LogRow, NewRun, Owner, StoreError};

/// A journal row ready to insert, its data already serialised by the caller.
pub(crate) struct Row {
    /// When it happened.
    pub(crate) at: i64,
    /// Its kind.
    pub(crate) kind: String,
    /// Its step.
    pub(crate) step: Option<String>,
    /// Its `foreach` index.
    pub(crate) index: Option<u32>,
    /// Its attempt.
    pub(crate) attempt: Option<u32>,
    /// The event's data as JSON text.
    pub(crate) data: String,
}

/// A run update with its JSON parts already serialised.
pub(crate) struct Update {
    /// A new status.
    pub(crate) status: Option<&'static str>,
    /// A new due time.
    pub(crate) due_at: Option<Option<i64>>,
    /// New signal names, as a JSON array.
    pub(crate) waiting_on: Option<String>,
    /// Recompute the pending-signal mark.
    pub(crate) clear_signal_pending: bool,
    /// The end time.
    pub(crate) ended_at: Option<i64>,
    /// The output's digest.
    pub(crate) output_digest: Option<String>,
    /// The error, as JSON.
    pub(crate) error: Option<String>,
}

impl Update {
    /// Whether it only recomputes the pending-signal mark (as after a signal is consumed).
    pub(crate) fn only_clears_signal_pending(&self) -> bool {
        let Update {
            status,
            due_at,
            waiting_on,
            clear_signal_pending,
            ended_at,
            output_digest,
            error,
        } = self;
        *clear_signal_pending
            && status.is_none()
            && due_at.is_none()
            && waiting_on.is_none()
            && ended_at.is_none()
            && output_digest.is_none()
            && error.is_none()
    }
}

/// A value's text as it waits to be committed.
#[derive(Clone)]
pub(crate) enum ValueText {
    /// Stored in the database row.
    Inline(Arc<str>),
    /// Kept in its blob file, which its putter wrote; the text stays at hand until the row
    /// commits, so the writer can write the file again should a clean have removed it since.
    External(Arc<str>),
}

impl ValueText {
    /// The value's canonical JSON.
    pub(crate) fn text(&self) -> &Arc<str> {
        match self {
            ValueText::Inline(t) | ValueText::External(t) => t,
        }
    }
}

/// Which run and lease a command writes for.
pub(crate) struct Tag {
    /// The run.
    pub(crate) run: String,
    /// The lease's fencing token.
    pub(crate) token: u64,
    /// Whether the run's writes must reach the disk at commit.
    pub(crate) durable: bool,
}

/// What a claim found, before it becomes a [`crate::Claim`].
#[derive(Debug, PartialEq)]
pub(crate) enum ClaimOut {
    /// Taken, with this token, from this sequence number.
    Claimed {
        token: u64,
        next_seq: u64,
        durability: Durability,
    },
    /// A live process holds it.
    HeldBy(Owner),
    /// No such run.
    NotFound,
}

/// How a command failed.
pub(super) enum Fail {
    /// Before it wrote anything: it fails alone.
    Command(StoreError),
    /// After it wrote something, or with the transaction: the batch fails.
    Batch(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Command(e)
    }
}

/// A reply to a blocking caller.
pub(crate) type Reply<T> = SyncSender<Result<T, StoreError>>;

/// A write to make, in queue order.
pub(crate) enum Cmd {
    /// Store a value (idempotent: `INSERT OR IGNORE`).
    Value {
        digest: String,
        text: ValueText,
        size: i64,
    },
    /// Store a FlowSpec.
    Spec {
        digest: String,
        json: Arc<str>,
        reply: Reply<()>,
    },
    /// Store a FlowSpec's binary form, replacing one of another layout.
    SpecBinary {
        digest: String,
        layout: u32,
        bytes: Vec<u8>,
    },
    /// Append journal rows starting at `first_seq`, with what they name (see [`Kept`]).
    Append {
        tag: Tag,
        first_seq: u64,
        rows: Vec<Row>,
        kept: Vec<Kept>,
    },
    /// Change the run's row.
    Update { tag: Tag, update: Update },
    /// Keep what a tool printed.
    Log { tag: Tag, log: LogRow },
    /// Mark a signal consumed.
    Consume { tag: Tag, seq: u64, by: u64 },
    /// Give the lease up.
    Release {
        tag: Tag,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Answer once everything before it is committed.
    Sync {
        tag: Tag,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Create a run leased to `owner`.
    Create {
        run: Box<NewRun>,
        rows: Vec<Row>,
        owner: Owner,
        lease_ms: u64,
        reply: Reply<()>,
    },
    /// Take a run's lease.
    Claim {
        run: String,
        owner: Owner,
        lease_ms: u64,
        out: ClaimOut,
        reply: Reply<ClaimOut>,
    },
    /// Extend a lease.
    Renew {
        tag: Tag,
        lease_ms: u64,
        reply: Reply<()>,
    },
    /// Record a signal.
    Signal {
        run: String,
        name: String,
        payload: Kept,
        seq: u64,
        /// When it was sent, as the first try to write it took the time: the PostgreSQL
        /// writer finds by it a signal whose batch's answer was lost (`pg/writer/fate.rs`).
        sent_at: Option<i64>,
        reply: Reply<u64>,
    },
    /// Ask a run to stop.
    Cancel {
        run: String,
        done: bool,
        reply: Reply<bool>,
    },
    /// Remove ended runs and what only they reference; the blob files to delete once
    /// committed come back with the report.
    Clean {
        scope: CleanScope,
        dry_run: bool,
        out: (Cleaned, Vec<String>),
        reply: Reply<(Cleaned, Vec<String>)>,
    },
    /// Delete the blob files of these values, each only if no row names it any more: judged
    /// in a write transaction, so a writer putting the value again (which writes its file in
    /// its own transaction) comes wholly before or wholly after.
    Unlink {
        digests: Vec<String>,
        reply: Reply<()>,
    },
}

impl Cmd {
    /// The run and lease of a command that writes a run's data (and so poisons it on failure).
    pub(crate) fn data_tag(&self) -> Option<&Tag> {
        match self {
            Cmd::Append { tag, .. }
            | Cmd::Update { tag, .. }
            | Cmd::Log { tag, .. }
            | Cmd::Consume { tag, .. }
            | Cmd::Release { tag, .. } => Some(tag),
            _ => None,
        }
    }

    /// Whether the command appends journal rows (a crash point watches such batches).
    pub(crate) fn journals(&self) -> bool {
        matches!(self, Cmd::Append { .. } | Cmd::Create { .. })
    }

    pub(crate) fn durable(&self) -> bool {
        match self {
            Cmd::Append { tag, .. }
            | Cmd::Update { tag, .. }
            | Cmd::Log { tag, .. }
            | Cmd::Consume { tag, .. }
            | Cmd::Release { tag, .. }
            | Cmd::Sync { tag, .. }
            | Cmd::Renew { tag, .. } => tag.durable,
            Cmd::Create { run, .. } => run.durability == Durability::Durable,
            // Signals and cancellations come from people, who expect them kept.
            Cmd::Signal { .. } | Cmd::Cancel { .. } | Cmd::Clean { .. } => true,
            Cmd::Value { .. }
            | Cmd::Spec { .. }
            | Cmd::SpecBinary { .. }
            | Cmd::Claim { .. }
            | Cmd::Unlink { .. } => false,
        }
    }

    /// Whether someone waits for this command (so the batch should not linger).
    pub(crate) fn awaited(&self) -> bool {
        !matches!(
            self,
            Cmd::Value { .. }
                | Cmd::SpecBinary { .. }
                | Cmd::Append { .. }
                | Cmd::Update { .. }
                | Cmd::Log { .. }
                | Cmd::Consume { .. }
        )
    }

    /// Roughly how many bytes it adds to a transaction.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Cmd::Value {
                text: ValueText::Inline(t),
                ..
            } => t.len() + 96,
            Cmd::Spec { json, .. } => json.len() + 96,
            Cmd::SpecBinary { bytes, .. } => bytes.len() + 96,
            Cmd::Append { rows, .. } => rows.iter().map(|r| r.data.len() + r.kind.len() + 64).sum(),
            Cmd::Log { log, .. } => log.text.len() + 64,
            _ => 128,
        }
    }

    /// Roughly how many bytes it holds while it waits for the writer: its [`Cmd::weight`], and
    /// the text of a value kept in a blob file, which its transaction does not write but the
    /// command keeps at hand until then.
    pub(crate) fn held(&self) -> usize {
        match self {
            Cmd::Value {
                text: ValueText::External(t),
                ..
            } => t.len() + 96,
            _ => self.weight(),
        }
    }

    /// Sends the command's outcome to whoever waits for it.
    pub(crate) fn answer(self, result: Result<(), StoreError>) {
        // A caller that stopped waiting is no reason to stop: send errors are ignored.
        match self {
            Cmd::Spec { reply, .. }
            | Cmd::Create { reply, .. }
            | Cmd::Renew { reply, .. }
            | Cmd::Unlink { reply, .. } => {
                let _ = reply.send(result);
            }
            Cmd::Release { reply, .. } | Cmd::Sync { reply, .. } => {
                let _ = reply.send(result);
            }
            Cmd::Claim { out, reply, .. } => {
                let _ = reply.send(result.map(|()| out));
            }
            Cmd::Signal { seq, reply, .. } => {
                let _ = reply.send(result.map(|()| seq));
            }
            Cmd::Cancel { done, reply, .. } => {
                let _ = reply.send(result.map(|()| done));
            }
            Cmd::Clean { out, reply, .. } => {
                let _ = reply.send(result.map(|()| out));
            }
            Cmd::Value { .. }
            | Cmd::SpecBinary { .. }
            | Cmd::Append { .. }
            | Cmd::Update { .. }
            | Cmd::Log { .. }
            | Cmd::Consume { .. } => {}
        }
    }
}
