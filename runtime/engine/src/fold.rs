//! Rebuilding a run's state from its journal, streaming: only what is still needed is kept.
//!
//! Finished steps keep their output digest; calls of steps still in progress keep their last
//! state. The steps that succeeded are looked up first (`Store::succeeded_steps`), and their
//! calls' records are passed over, so memory follows the number of steps and of calls still
//! in progress, not the journal's length. No value is read here.

use std::collections::{HashMap, HashSet};

use reel_store::{Flow, Store, StoreError};

use crate::error::RunError;
use crate::journal::{Event, RunStarted};

/// What the journal says about one call (one `foreach` element, or a step's single call).
#[derive(Clone, Debug, PartialEq)]
pub enum CallRecord {
    /// Started and never finished (in flight when the process stopped).
    Started {
        /// The attempt.
        attempt: u32,
    },
    /// Finished with this result.
    Done {
        /// The result's digest.
        output: String,
        /// The attempt.
        attempt: u32,
    },
    /// Failed; tried again at `retry_at` if set, else failed for good.
    Failed {
        /// The attempt.
        attempt: u32,
        /// When the next attempt is due.
        retry_at: Option<i64>,
        /// Why.
        error: RunError,
    },
    /// A `sleep` waiting until `until`.
    Timer {
        /// Due time.
        until: i64,
    },
    /// A `signal` wait.
    Signal {
        /// The signal's name.
        name: String,
        /// When it times out.
        deadline: Option<i64>,
    },
}

/// What the journal says about one step.
#[derive(Clone, Debug, PartialEq)]
pub enum StepRecord {
    /// Finished with this value.
    Succeeded {
        /// The value's digest.
        output: String,
        /// When.
        at: i64,
        /// Attempts in all.
        attempts: u32,
    },
    /// Skipped.
    Skipped {
        /// When.
        at: i64,
    },
    /// Failed for good.
    Failed {
        /// Why.
        error: RunError,
    },
}

/// A run's state as its journal leaves it.
#[derive(Debug, Default)]
pub struct Folded {
    /// How it started.
    pub started: Option<(RunStarted, i64)>,
    /// Finished, skipped and failed steps.
    pub steps: HashMap<String, StepRecord>,
    /// Calls of steps that have not finished, by step and index.
    pub calls: HashMap<(String, Option<u32>), CallRecord>,
    /// Attempts made so far, by step.
    pub attempts: HashMap<String, u32>,
    /// How the run last ended, if it did: `succeeded`, `failed` or `canceled`.
    pub finished: Option<String>,
    /// The output digest, if it succeeded.
    pub output: Option<String>,
    /// The error it last ended with.
    pub error: Option<RunError>,
    /// Events read.
    pub events: u64,
    /// Steps whose success the journal records: their calls' records are not kept.
    done: HashSet<String>,
}

impl Folded {
    fn apply(&mut self, at: i64, event: Event) {
        self.events += 1;
        if let Some(step) = call_step(&event)
            && self.done.contains(step)
        {
            return;
        }
        let call_key = |step: &str, index: Option<u32>| (step.to_string(), index);
        match event {
            Event::RunStarted(s) => self.started = Some((s, at)),
            Event::RunResumed { .. } => self.finished = None,
            Event::StepSkipped { step, .. } => {
                self.steps.insert(step, StepRecord::Skipped { at });
            }
            Event::StepStarted {
                step,
                index,
                attempt,
                ..
            } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls
                    .insert(call_key(&step, index), CallRecord::Started { attempt });
            }
            Event::CallSucceeded {
                step,
                index,
                attempt,
                output,
            } => {
                self.calls
                    .insert(call_key(&step, index), CallRecord::Done { output, attempt });
            }
            Event::EffectRecorded {
                step,
                index,
                attempt,
                result,
                ..
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: result,
                        attempt,
                    },
                );
            }
            Event::CallFailed {
                step,
                index,
                attempt,
                error,
                retry_at,
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Failed {
                        attempt,
                        retry_at,
                        error,
                    },
                );
            }
            Event::StepSucceeded {
                step,
                output,
                attempts,
            } => {
                self.calls.retain(|(s, _), _| *s != step);
                // The record carries the count; a finished step keeps nothing else.
                self.attempts.remove(&step);
                self.steps.insert(
                    step,
                    StepRecord::Succeeded {
                        output,
                        at,
                        attempts,
                    },
                );
            }
            Event::StepFailed { step, error } => {
                self.steps.insert(step, StepRecord::Failed { error });
            }
            Event::TimerStarted { step, index, until } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls
                    .insert(call_key(&step, index), CallRecord::Timer { until });
            }
            Event::TimerFired { step, index, until } => {
                let woke = serde_json::json!({ "woke_at": crate::scope::rfc3339(until) });
                let digest = reel_flowspec::canonical::digest_value(&woke);
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: digest,
                        attempt: 1,
                    },
                );
            }
            Event::SignalAwaited {
                step,
                index,
                name,
                deadline,
            } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Signal { name, deadline },
                );
            }
            Event::SignalReceived {
                step,
                index,
                payload,
                ..
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: payload,
                        attempt: 1,
                    },
                );
            }
            Event::RunWaiting { .. } => {}
            Event::RunFinished {
                status,
                output,
                error,
            } => {
                self.finished = Some(status);
                self.output = output;
                self.error = error;
            }
        }
    }
}

/// The step of an event about one call (or one wait), which a finished step no longer needs.
fn call_step(event: &Event) -> Option<&str> {
    match event {
        Event::StepStarted { step, .. }
        | Event::CallSucceeded { step, .. }
        | Event::EffectRecorded { step, .. }
        | Event::CallFailed { step, .. }
        | Event::TimerStarted { step, .. }
        | Event::TimerFired { step, .. }
        | Event::SignalAwaited { step, .. }
        | Event::SignalReceived { step, .. } => Some(step),
        _ => None,
    }
}

/// Folds events held in memory (a test's journal, a replay's), oldest first, with their times.
pub fn fold_events(events: impl IntoIterator<Item = (i64, Event)>) -> Folded {
    let mut folded = Folded::default();
    for (at, event) in events {
        folded.apply(at, event);
    }
    folded
}

/// Reads a run's journal into its state. A row that cannot be read is a hole: the run cannot resume.
pub fn fold_journal(store: &dyn Store, run: &str) -> Result<Folded, StoreError> {
    let mut folded = Folded {
        done: store.succeeded_steps(run)?,
        ..Folded::default()
    };
    let mut hole: Option<StoreError> = None;
    store.read_journal(run, 0, &mut |row| match Event::from_row(&row) {
        Ok(event) => {
            folded.apply(row.at, event);
            Flow::Continue
        }
        Err(message) => {
            hole = Some(StoreError::Hole {
                run: row.run.clone(),
                seq: row.seq,
                message,
            });
            Flow::Stop
        }
    })?;
    match hole {
        Some(e) => Err(e),
        None => Ok(folded),
    }
}
