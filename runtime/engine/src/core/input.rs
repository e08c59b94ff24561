//! What the core is told: each [`Input`] is something that happened, at a time given with it.

use reel_tools::{ToolError, ToolOutput};
use serde_json::Value;

use crate::fold::Folded;

/// Something that happened to a run.
#[derive(Debug)]
pub enum Input {
    /// A new run begins (its `run_started` is already recorded).
    Started,
    /// A run resumes from its folded journal; `run_resumed` is recorded with this reason and
    /// holder.
    Resumed {
        /// The journal's state.
        folded: Box<Folded>,
        /// Why it resumes (`redrive` after a failure or a cancel).
        reason: String,
        /// Who resumes it (`host:pid`).
        by: String,
    },
    /// The values asked for by [`crate::core::Command::LoadValues`], in the order asked.
    ValuesLoaded(Vec<Value>),
    /// The calls of [`crate::core::Command::Launch`] are made; these finished at once.
    Launched(Vec<Returned>),
    /// A call finished while the run waited.
    CallReturned(Returned),
    /// The answer to [`crate::core::Command::FetchSignals`]: the signals not yet consumed that
    /// match the names asked for, oldest first, with their payloads.
    Signals(Vec<ArrivedSignal>),
    /// The wait of [`crate::core::Command::Wait`] is over (a deadline passed, or calls
    /// returned); `poll` is set when the driver also looked at the run's row.
    Tick {
        /// What the look at the store found, if it looked.
        poll: Option<Poll>,
    },
    /// This process is stopping: what is recorded is handed over, the run stays resumable.
    Interrupted,
}

/// What a look at the run's row found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Poll {
    /// `reel cancel` asked the run to stop.
    pub cancel_requested: bool,
}

/// One attempt of one call, finished.
#[derive(Debug)]
pub struct Returned {
    /// The step's position in the flow.
    pub step: usize,
    /// The call's position in the step (its `foreach` index; 0 otherwise).
    pub index: usize,
    /// The attempt.
    pub attempt: u32,
    /// What the tool gave.
    pub outcome: Result<ToolOutput, ToolError>,
    /// Set when no tool was called: a fork took this result from its parent's record.
    pub reused: Option<ReusedFrom>,
    /// The digest the store keeps the result's value under, when the driver read it from
    /// there (a replay answering from the record): the core records it as it is instead of
    /// canonicalising and hashing the value again, and asks nobody to keep it. `None` for a
    /// result a tool just gave.
    pub digest: Option<String>,
}

/// Where a reused result was recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct ReusedFrom {
    /// The parent run.
    pub parent: String,
    /// The sequence number of the parent's event holding the result.
    pub seq: u64,
}

/// A signal sent to the run and not yet consumed.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrivedSignal {
    /// Its number among the run's signals.
    pub seq: u64,
    /// Its name.
    pub name: String,
    /// Its payload's digest.
    pub payload_digest: String,
    /// Its payload.
    pub payload: Value,
}
