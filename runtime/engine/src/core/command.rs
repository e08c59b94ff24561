//! What the core asks for: each [`Command`] is carried out by the driver, in order.

use std::fmt;

use reel_tools::ToolCall;
use serde_json::Value;

use crate::deps::Progress;
use crate::error::RunError;
use crate::journal::Event;

/// A journal event with the time it happened at.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamped {
    /// When (ms since the epoch).
    pub at: i64,
    /// What.
    pub event: Event,
}

/// One call to make.
#[derive(Clone, Debug)]
pub struct CallStart {
    /// The step's position in the flow.
    pub step: usize,
    /// The call's position in the step.
    pub index: usize,
    /// The attempt (its start is already recorded).
    pub attempt: u32,
    /// The digest of its inputs (secrets shown as `{secret:NAME}`), as its start records it.
    pub inputs: String,
    /// The call itself, with its idempotency key for effects.
    pub call: ToolCall,
}

/// How the run ends (or parks) in this process.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// It waits for a timer or a signal; its row is already marked (see `Park`).
    Waiting,
    /// It succeeded with this output.
    Succeeded {
        /// The output's digest.
        digest: String,
        /// The output.
        output: Value,
    },
    /// It failed.
    Failed(RunError),
    /// It was canceled.
    Canceled(RunError),
    /// Resuming it diverged from its own journal (a fault of the platform): it waits for a
    /// person to release it (try again) or abandon it.
    Quarantined(RunError),
}

/// Something for the driver to do.
#[derive(Clone, Debug)]
pub enum Command {
    /// Keep `value` under `digest` (before any event that names it is appended).
    PutValue {
        /// Its digest (`canonical::digest_value`).
        digest: String,
        /// Its canonical JSON, which the digest is of: written out once, here (the value itself
        /// stays with the machine, which may still read it).
        text: String,
    },
    /// Append these events to the journal, as one commit.
    Append(Vec<Stamped>),
    /// Keep what a call printed.
    Log {
        /// The step's id.
        step: String,
        /// Its `foreach` index.
        index: Option<u32>,
        /// The attempt.
        attempt: u32,
        /// When.
        at: i64,
        /// The text, secrets scrubbed.
        text: String,
    },
    /// Tell the progress display.
    Progress(Progress),
    /// Wait until everything appended is durable (`durable` mode: before an effect is made).
    Sync,
    /// Load the values of these digests and answer with `Input::ValuesLoaded`.
    LoadValues(Vec<String>),
    /// Look for signals with these names (one per waiting call) and answer with
    /// `Input::Signals`.
    FetchSignals(Vec<String>),
    /// Make these calls (their starts are appended already) and answer with `Input::Launched`;
    /// calls that do not finish at once answer later with `Input::CallReturned`.
    Launch(Vec<CallStart>),
    /// Stop the calls in flight (the run was canceled).
    CancelCalls,
    /// Mark signal `signal` consumed by the event appended last.
    ConsumeSignal {
        /// The signal's number.
        signal: u64,
    },
    /// Clear the run's mark of signals waiting (if none is left unconsumed).
    ClearSignalPending,
    /// Wait until `deadline` (or at once), or until a call returns; answer with `Input::Tick`.
    Wait {
        /// The earliest timer, signal timeout or retry (absolute ms).
        deadline: Option<i64>,
        /// Calls finished at once, so more work may be ready: no waiting.
        at_once: bool,
    },
    /// Mark the run waiting (its events are appended already).
    Park {
        /// When its earliest timer is due.
        due_at: Option<i64>,
        /// The signals it waits for.
        signals: Vec<String>,
    },
    /// The run ends (or parks) in this process: mark it, sync, release it.
    Finish(Ending),
}

impl fmt::Display for Stamped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = self.event.to_row(self.at);
        write!(f, "@{} {}", self.at, row.kind)?;
        if let Some(step) = &row.step {
            write!(f, " {step}")?;
        }
        if let Some(i) = row.index {
            write!(f, "[{i}]")?;
        }
        if let Some(a) = row.attempt {
            write!(f, " #{a}")?;
        }
        write!(f, " {}", row.data)
    }
}

/// A digest shortened for reading (its first 8 hex digits).
fn short(digest: &str) -> &str {
    digest.get(..8).unwrap_or(digest)
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::PutValue { digest, text } => write!(f, "put {} = {text}", short(digest)),
            Command::Append(events) => {
                write!(f, "append")?;
                for e in events {
                    write!(f, "\n    {e}")?;
                }
                Ok(())
            }
            Command::Log {
                step,
                index,
                attempt,
                at,
                text,
            } => write!(f, "log @{at} {step}{:?} #{attempt} {text:?}", index),
            Command::Progress(p) => write!(f, "progress {p:?}"),
            Command::Sync => write!(f, "sync"),
            Command::LoadValues(d) => {
                let d: Vec<&str> = d.iter().map(|d| short(d)).collect();
                write!(f, "load {}", d.join(" "))
            }
            Command::FetchSignals(names) => write!(f, "fetch signals {}", names.join(" ")),
            Command::Launch(calls) => {
                write!(f, "launch")?;
                for c in calls {
                    write!(
                        f,
                        "\n    {}/{} #{} {} {}",
                        c.step,
                        c.index,
                        c.attempt,
                        c.call.tool,
                        Value::Object(c.call.args.clone())
                    )?;
                    if let Some(k) = &c.call.idempotency_key {
                        write!(f, " key {}", short(k))?;
                    }
                    if let Some(t) = c.call.timeout {
                        write!(f, " timeout {}ms", t.as_millis())?;
                    }
                }
                Ok(())
            }
            Command::CancelCalls => write!(f, "cancel calls"),
            Command::ConsumeSignal { signal } => write!(f, "consume signal {signal}"),
            Command::ClearSignalPending => write!(f, "clear signal mark"),
            Command::Wait { deadline, at_once } => match (deadline, at_once) {
                (_, true) => write!(f, "wait (none: calls finished at once)"),
                (Some(d), false) => write!(f, "wait until @{d}"),
                (None, false) => write!(f, "wait"),
            },
            Command::Park { due_at, signals } => {
                write!(f, "park due {due_at:?} signals {signals:?}")
            }
            Command::Finish(e) => match e {
                Ending::Waiting => write!(f, "finish waiting"),
                Ending::Succeeded { output, .. } => write!(f, "finish succeeded {output}"),
                Ending::Failed(e) => write!(f, "finish failed {}: {}", e.code, e.message),
                Ending::Canceled(e) => write!(f, "finish canceled {}", e.code),
                Ending::Quarantined(e) => write!(f, "finish quarantined {}", e.code),
            },
        }
    }
}
