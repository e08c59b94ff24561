//! The journal's events: what crossed the engine's boundary and what happened to each step.
//!
//! Every event is one row of the run's journal. Events hold the names of values
//! (`reel_flowspec::canonical::name_text`: a short value is named by itself, any other by the
//! digest it is stored apart under), so the journal stays small and each value is written once.
//! Fields documented as a "digest" hold such a name.

use reel_store::{EventRow, NewEvent, RawEventRow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::RunError;

/// The version of everything that could change what a replay computes (the evaluator, the
/// builtins, the scheduling rules). Recorded by every run.
pub const DETERMINISM_EPOCH: u32 = 1;

/// One journal event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The run began.
    RunStarted(RunStarted),
    /// A process took the run up again (resume, worker, redrive).
    RunResumed {
        /// `resume`, `worker` or `redrive`.
        reason: String,
        /// The process that took it up (`host:pid`).
        by: String,
    },
    /// A step was skipped (its `when` was false).
    StepSkipped {
        /// The step.
        step: String,
        /// Why, in words.
        reason: String,
    },
    /// A call began (one per attempt; a `foreach` step has one per element).
    StepStarted {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt, from 1.
        attempt: u32,
        /// Digest of the call's arguments, secrets shown as `{secret:NAME}`.
        inputs: String,
        /// The idempotency key, for effects.
        key: Option<String>,
    },
    /// A read or pure call succeeded.
    CallSucceeded {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt.
        attempt: u32,
        /// Digest of the result.
        output: String,
    },
    /// An effect's result was recorded: it never fires again for this key.
    EffectRecorded {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt.
        attempt: u32,
        /// The idempotency key it fired with.
        key: String,
        /// Digest of the result.
        result: String,
    },
    /// A fork reused its parent's recorded result for this call instead of calling the tool:
    /// the `call_succeeded` or `effect_recorded` that follows holds the result.
    CallReused {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt.
        attempt: u32,
        /// The run whose result was reused (the fork's parent).
        parent: String,
        /// The sequence number of the parent's event that recorded the result.
        seq: u64,
    },
    /// A resume found an effect call whose start was recorded but not its result (the process
    /// stopped in between): whether the tool acted is unknown. `then` says what was done.
    UnknownOutcome {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt whose outcome is unknown.
        attempt: u32,
        /// The idempotency key it started with (a repeat carries the same).
        key: String,
        /// What was done about it.
        then: Resolution,
    },
    /// A call failed; it may be tried again at `retry_at`.
    CallFailed {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The attempt.
        attempt: u32,
        /// What went wrong.
        error: RunError,
        /// When the next attempt starts (ms since epoch), if there is one.
        retry_at: Option<i64>,
    },
    /// A step finished with its value (for `foreach`, the list of results in index order).
    StepSucceeded {
        /// The step.
        step: String,
        /// Digest of its value.
        output: String,
        /// How many attempts it took, in all calls.
        attempts: u32,
    },
    /// A step failed for good.
    StepFailed {
        /// The step.
        step: String,
        /// Why.
        error: RunError,
    },
    /// A `sleep` began.
    TimerStarted {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// When it is due (ms since epoch).
        until: i64,
    },
    /// A `sleep` ended.
    TimerFired {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// When it was due (ms since epoch).
        until: i64,
    },
    /// A `signal` step began to wait.
    SignalAwaited {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The signal's name.
        name: String,
        /// When the wait fails with `signal.timeout` (ms since epoch).
        deadline: Option<i64>,
    },
    /// A signal was delivered to a waiting step.
    SignalReceived {
        /// The step.
        step: String,
        /// The `foreach` index.
        index: Option<u32>,
        /// The signal's name.
        name: String,
        /// Its number among the run's signals.
        signal: u64,
        /// Digest of its payload.
        payload: String,
    },
    /// The run parked: nothing can happen until a timer is due or a signal arrives.
    RunWaiting {
        /// The earliest timer or deadline (ms since epoch).
        due_at: Option<i64>,
        /// The signals it waits for.
        signals: Vec<String>,
    },
    /// The run ended.
    RunFinished {
        /// `succeeded`, `failed` or `canceled`.
        status: String,
        /// Digest of the output, when succeeded.
        output: Option<String>,
        /// The error, when failed or canceled.
        error: Option<RunError>,
    },
}

/// What a resume does with a call whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Attempted again with the same key (the tool's default).
    Repeated,
    /// Not attempted again (`repeat: "never"`): the step fails with `run.unknown-outcome`
    /// until a person decides.
    Held,
    /// Attempted again because a person asked (`reel resume --retry`).
    Retried,
    /// A person gave its result (`reel resume --accept`): the `effect_recorded` that follows
    /// holds it; the tool was not called.
    Accepted,
}

impl Resolution {
    /// The word stored in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Repeated => "repeated",
            Resolution::Held => "held",
            Resolution::Retried => "retried",
            Resolution::Accepted => "accepted",
        }
    }

    /// The resolution a stored word names.
    pub fn parse(word: &str) -> Option<Resolution> {
        [
            Resolution::Repeated,
            Resolution::Held,
            Resolution::Retried,
            Resolution::Accepted,
        ]
        .into_iter()
        .find(|r| r.as_str() == word)
    }
}

/// What a run started with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    /// The FlowSpec's digest.
    pub flow: String,
    /// Digest of the inputs object (defaults applied).
    pub inputs: String,
    /// The seed of `random()` and of retry jitter.
    pub seed: u64,
    /// [`DETERMINISM_EPOCH`] of the engine that started it.
    pub epoch: u32,
    /// Digest of the snapshot of declared environment variables.
    pub env: String,
    /// The directory the run was started in.
    pub cwd: String,
    /// The source file, as given.
    pub source: Option<String>,
    /// `fast` or `durable`.
    pub durability: String,
    /// Set on a rerun (`reel replay --rerun`): the run replays its parent's reads and makes
    /// its effects again. Absent otherwise, so other runs' records are as they were.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rerun: bool,
}

fn opt_index(i: Option<u32>) -> Value {
    i.map_or(Value::Null, Value::from)
}

impl Event {
    /// The event's kind, as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => "run_started",
            Event::RunResumed { .. } => "run_resumed",
            Event::StepSkipped { .. } => "step_skipped",
            Event::StepStarted { .. } => "step_started",
            Event::CallSucceeded { .. } => "call_succeeded",
            Event::EffectRecorded { .. } => "effect_recorded",
            Event::CallReused { .. } => "call_reused",
            Event::UnknownOutcome { .. } => "unknown_outcome",
            Event::CallFailed { .. } => "call_failed",
            Event::StepSucceeded { .. } => "step_succeeded",
            Event::StepFailed { .. } => "step_failed",
            Event::TimerStarted { .. } => "timer_started",
            Event::TimerFired { .. } => "timer_fired",
            Event::SignalAwaited { .. } => "signal_awaited",
            Event::SignalReceived { .. } => "signal_received",
            Event::RunWaiting { .. } => "run_waiting",
            Event::RunFinished { .. } => "run_finished",
        }
    }

    /// The row to append, at time `at`.
    pub fn to_row(&self, at: i64) -> NewEvent {
        let (step, index, attempt, data) = match self {
            Event::RunStarted(s) => (
                None,
                None,
                None,
                serde_json::to_value(s).unwrap_or(Value::Null),
            ),
            Event::RunResumed { reason, by } => {
                (None, None, None, json!({ "reason": reason, "by": by }))
            }
            Event::StepSkipped { step, reason } => {
                (Some(step), None, None, json!({ "reason": reason }))
            }
            Event::StepStarted {
                step,
                index,
                attempt,
                inputs,
                key,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "inputs": inputs, "key": key }),
            ),
            Event::CallSucceeded {
                step,
                index,
                attempt,
                output,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "output": output }),
            ),
            Event::EffectRecorded {
                step,
                index,
                attempt,
                key,
                result,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "key": key, "result": result }),
            ),
            Event::CallReused {
                step,
                index,
                attempt,
                parent,
                seq,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "parent": parent, "seq": seq }),
            ),
            Event::UnknownOutcome {
                step,
                index,
                attempt,
                key,
                then,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "key": key, "then": then.as_str() }),
            ),
            Event::CallFailed {
                step,
                index,
                attempt,
                error,
                retry_at,
            } => (
                Some(step),
                *index,
                Some(*attempt),
                json!({ "error": error, "retry_at": retry_at }),
            ),
            Event::StepSucceeded {
                step,
                output,
                attempts,
            } => (
                Some(step),
                None,
                None,
                json!({ "output": output, "attempts": attempts }),
            ),
            Event::StepFailed { step, error } => {
                (Some(step), None, None, json!({ "error": error }))
            }
            Event::TimerStarted { step, index, until } => {
                (Some(step), *index, None, json!({ "until": until }))
            }
            Event::TimerFired { step, index, until } => {
                (Some(step), *index, None, json!({ "until": until }))
            }
            Event::SignalAwaited {
                step,
                index,
                name,
                deadline,
            } => (
                Some(step),
                *index,
                None,
                json!({ "name": name, "deadline": deadline }),
            ),
            Event::SignalReceived {
                step,
                index,
                name,
                signal,
                payload,
            } => (
                Some(step),
                *index,
                None,
                json!({ "name": name, "signal": signal, "payload": payload }),
            ),
            Event::RunWaiting { due_at, signals } => (
                None,
                None,
                None,
                json!({ "due_at": due_at, "signals": signals }),
            ),
            Event::RunFinished {
                status,
                output,
                error,
            } => (
                None,
                None,
                None,
                json!({ "status": status, "output": output, "error": error }),
            ),
        };
        NewEvent {
            at,
            kind: self.kind().to_string(),
            step: step.cloned(),
            index,
            attempt,
            data,
        }
    }

    /// Reads a stored row back; `Err` names what is wrong with it (the run then has a hole).
    pub fn from_row(row: &EventRow) -> Result<Event, String> {
        let d = &row.data;
        let s = |k: &str| -> Result<String, String> {
            d.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("`{}` event without `{k}`", row.kind))
        };
        let opt_s = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
        let opt_i = |k: &str| d.get(k).and_then(Value::as_i64);
        let step = || {
            row.step
                .clone()
                .ok_or_else(|| format!("`{}` event without a step", row.kind))
        };
        let attempt = || row.attempt.unwrap_or(1);
        let error = |k: &str| -> Result<RunError, String> {
            serde_json::from_value(d.get(k).cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("`{}` event with a bad error: {e}", row.kind))
        };
        Ok(match row.kind.as_str() {
            "run_started" => Event::RunStarted(
                serde_json::from_value(d.clone()).map_err(|e| format!("bad run_started: {e}"))?,
            ),
            "run_resumed" => Event::RunResumed {
                reason: s("reason")?,
                by: opt_s("by").unwrap_or_default(),
            },
            "step_skipped" => Event::StepSkipped {
                step: step()?,
                reason: opt_s("reason").unwrap_or_default(),
            },
            "step_started" => Event::StepStarted {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                inputs: s("inputs")?,
                key: opt_s("key"),
            },
            "call_succeeded" => Event::CallSucceeded {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                output: s("output")?,
            },
            "effect_recorded" => Event::EffectRecorded {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                key: s("key")?,
                result: s("result")?,
            },
            "call_reused" => Event::CallReused {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                parent: s("parent")?,
                seq: d.get("seq").and_then(Value::as_u64).unwrap_or(0),
            },
            "unknown_outcome" => Event::UnknownOutcome {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                key: s("key")?,
                then: s("then").and_then(|w| {
                    Resolution::parse(&w)
                        .ok_or_else(|| format!("`unknown_outcome` with `then` {w:?}"))
                })?,
            },
            "call_failed" => Event::CallFailed {
                step: step()?,
                index: row.index,
                attempt: attempt(),
                error: error("error")?,
                retry_at: opt_i("retry_at"),
            },
            "step_succeeded" => Event::StepSucceeded {
                step: step()?,
                output: s("output")?,
                attempts: d.get("attempts").and_then(Value::as_u64).unwrap_or(1) as u32,
            },
            "step_failed" => Event::StepFailed {
                step: step()?,
                error: error("error")?,
            },
            "timer_started" => Event::TimerStarted {
                step: step()?,
                index: row.index,
                until: opt_i("until").ok_or("timer_started without `until`")?,
            },
            "timer_fired" => Event::TimerFired {
                step: step()?,
                index: row.index,
                until: opt_i("until").ok_or("timer_fired without `until`")?,
            },
            "signal_awaited" => Event::SignalAwaited {
                step: step()?,
                index: row.index,
                name: s("name")?,
                deadline: opt_i("deadline"),
            },
            "signal_received" => Event::SignalReceived {
                step: step()?,
                index: row.index,
                name: s("name")?,
                signal: d.get("signal").and_then(Value::as_u64).unwrap_or(0),
                payload: s("payload")?,
            },
            "run_waiting" => Event::RunWaiting {
                due_at: opt_i("due_at"),
                signals: d
                    .get("signals")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            "run_finished" => Event::RunFinished {
                status: s("status")?,
                output: opt_s("output"),
                error: match d.get("error") {
                    Some(Value::Null) | None => None,
                    Some(_) => Some(error("error")?),
                },
            },
            other => return Err(format!("unknown event kind `{other}`")),
        })
    }
}

/// The fields any event's data may hold, decoded in one pass without a JSON tree: what
/// [`Event::from_raw`] reads before it falls back to [`Event::from_row`]'s reading.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Fields {
    reason: Option<String>,
    by: Option<String>,
    inputs: Option<String>,
    key: Option<String>,
    output: Option<String>,
    result: Option<String>,
    parent: Option<String>,
    seq: Option<u64>,
    then: Option<String>,
    error: Option<RunError>,
    retry_at: Option<i64>,
    attempts: Option<u64>,
    until: Option<i64>,
    name: Option<String>,
    deadline: Option<i64>,
    signal: Option<u64>,
    payload: Option<String>,
    due_at: Option<i64>,
    signals: Option<Vec<String>>,
    status: Option<String>,
}

impl Event {
    /// Reads a row as the store holds it, its data decoded straight into the event: the same
    /// event, or the same error, as [`Event::from_row`] of the row with its data parsed. A row
    /// the typed decoding does not take as it is (a field of another type, a repeated field,
    /// data that is not an object) is read the slow way, so the two never disagree.
    pub fn from_raw(row: &RawEventRow<'_>) -> Result<Event, String> {
        match Event::decode(row) {
            Some(event) => Ok(event),
            None => Event::from_row(&row.to_row("")?),
        }
    }

    /// The typed decoding of [`Event::from_raw`]; `None` hands the row to the slow way.
    fn decode(row: &RawEventRow<'_>) -> Option<Event> {
        // A struct also decodes from an array, which the slow way reads as no fields at all.
        if !row.data.trim_start().starts_with('{') {
            return None;
        }
        if row.kind == "run_started" {
            return serde_json::from_str(row.data).ok().map(Event::RunStarted);
        }
        let d: Fields = serde_json::from_str(row.data).ok()?;
        let step = || row.step.map(str::to_string);
        let index = row.index;
        let attempt = row.attempt.unwrap_or(1);
        Some(match row.kind {
            "run_resumed" => Event::RunResumed {
                reason: d.reason?,
                by: d.by.unwrap_or_default(),
            },
            "step_skipped" => Event::StepSkipped {
                step: step()?,
                reason: d.reason.unwrap_or_default(),
            },
            "step_started" => Event::StepStarted {
                step: step()?,
                index,
                attempt,
                inputs: d.inputs?,
                key: d.key,
            },
            "call_succeeded" => Event::CallSucceeded {
                step: step()?,
                index,
                attempt,
                output: d.output?,
            },
            "effect_recorded" => Event::EffectRecorded {
                step: step()?,
                index,
                attempt,
                key: d.key?,
                result: d.result?,
            },
            "call_reused" => Event::CallReused {
                step: step()?,
                index,
                attempt,
                parent: d.parent?,
                seq: d.seq.unwrap_or(0),
            },
            "unknown_outcome" => Event::UnknownOutcome {
                step: step()?,
                index,
                attempt,
                key: d.key?,
                then: Resolution::parse(&d.then?)?,
            },
            "call_failed" => Event::CallFailed {
                step: step()?,
                index,
                attempt,
                error: d.error?,
                retry_at: d.retry_at,
            },
            "step_succeeded" => Event::StepSucceeded {
                step: step()?,
                output: d.output?,
                attempts: d.attempts.unwrap_or(1) as u32,
            },
            "step_failed" => Event::StepFailed {
                step: step()?,
                error: d.error?,
            },
            "timer_started" => Event::TimerStarted {
                step: step()?,
                index,
                until: d.until?,
            },
            "timer_fired" => Event::TimerFired {
                step: step()?,
                index,
                until: d.until?,
            },
            "signal_awaited" => Event::SignalAwaited {
                step: step()?,
                index,
                name: d.name?,
                deadline: d.deadline,
            },
            "signal_received" => Event::SignalReceived {
                step: step()?,
                index,
                name: d.name?,
                signal: d.signal.unwrap_or(0),
                payload: d.payload?,
            },
            "run_waiting" => Event::RunWaiting {
                due_at: d.due_at,
                signals: d.signals.unwrap_or_default(),
            },
            "run_finished" => Event::RunFinished {
                status: d.status?,
                output: d.output,
                error: d.error,
            },
            _ => return None,
        })
    }
}

/// A time in ms since the epoch as RFC 3339 (the epoch itself when out of range): how times
/// appear in values a run computes, such as a fired timer's `woke_at`.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// The value a fired `sleep` produces: when it woke.
pub fn woke_value(until: i64) -> Value {
    json!({ "woke_at": rfc3339(until) })
}

/// The index as JSON (null outside `foreach`), for messages.
pub fn index_json(i: Option<u32>) -> Value {
    opt_index(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(event: &Event, seq: u64) -> EventRow {
        let new = event.to_row(5);
        EventRow {
            run: "r".into(),
            seq,
            at: new.at,
            kind: new.kind,
            step: new.step,
            index: new.index,
            attempt: new.attempt,
            data: new.data,
        }
    }

    #[test]
    fn a_reused_call_reads_back_as_written() {
        let reused = Event::CallReused {
            step: "s".into(),
            index: Some(2),
            attempt: 1,
            parent: "p".into(),
            seq: 17,
        };
        let r = row(&reused, 3);
        assert_eq!(r.kind, "call_reused");
        assert_eq!(r.data, json!({ "parent": "p", "seq": 17 }));
        assert_eq!(Event::from_row(&r), Ok(reused));
    }

    #[test]
    fn an_unknown_outcome_reads_back_as_written() {
        for then in [
            Resolution::Repeated,
            Resolution::Held,
            Resolution::Retried,
            Resolution::Accepted,
        ] {
            let event = Event::UnknownOutcome {
                step: "pay".into(),
                index: None,
                attempt: 2,
                key: "k".into(),
                then,
            };
            let r = row(&event, 4);
            // The kind the stores index for `reel runs`.
            assert_eq!(r.kind, reel_store::UNKNOWN_OUTCOME);
            assert_eq!(r.attempt, Some(2));
            assert_eq!(r.data, json!({ "key": "k", "then": then.as_str() }));
            assert_eq!(Event::from_row(&r), Ok(event));
        }
        let mut r = row(
            &Event::UnknownOutcome {
                step: "pay".into(),
                index: None,
                attempt: 1,
                key: "k".into(),
                then: Resolution::Held,
            },
            4,
        );
        r.data = json!({ "key": "k", "then": "shrugged" });
        assert!(Event::from_row(&r).is_err());
    }

    /// One event of every kind, as the engine writes them.
    fn every_kind() -> Vec<Event> {
        let error = RunError {
            code: "tool.http.status".into(),
            message: "500 \"bad\" \u{e9}".into(),
            step: Some("s".into()),
            retryable: true,
            cause: Some("c".repeat(64)),
        };
        vec![
            Event::RunStarted(RunStarted {
                flow: "f".repeat(64),
                inputs: "i".repeat(64),
                seed: u64::MAX,
                epoch: DETERMINISM_EPOCH,
                env: "e".repeat(64),
                cwd: "/tmp/a \"b\"".into(),
                source: Some("flow.reel".into()),
                durability: "fast".into(),
                rerun: true,
            }),
            Event::RunResumed {
                reason: "resume".into(),
                by: "h:1".into(),
            },
            Event::StepSkipped {
                step: "s".into(),
                reason: "`when` was false".into(),
            },
            Event::StepStarted {
                step: "s".into(),
                index: Some(3),
                attempt: 2,
                inputs: "i".repeat(64),
                key: Some("k".into()),
            },
            Event::StepStarted {
                step: "s".into(),
                index: None,
                attempt: 1,
                inputs: "i".repeat(64),
                key: None,
            },
            Event::CallSucceeded {
                step: "s".into(),
                index: Some(0),
                attempt: 1,
                output: "o".repeat(64),
            },
            Event::EffectRecorded {
                step: "s".into(),
                index: None,
                attempt: 4,
                key: "k".into(),
                result: "r".repeat(64),
            },
            Event::CallReused {
                step: "s".into(),
                index: Some(1),
                attempt: 1,
                parent: "p".into(),
                seq: 17,
            },
            Event::UnknownOutcome {
                step: "s".into(),
                index: None,
                attempt: 2,
                key: "k".into(),
                then: Resolution::Accepted,
            },
            Event::CallFailed {
                step: "s".into(),
                index: Some(2),
                attempt: 1,
                error: error.clone(),
                retry_at: Some(1_700_000_000_000),
            },
            Event::CallFailed {
                step: "s".into(),
                index: None,
                attempt: 3,
                error: RunError::new("signal.timeout", "no signal"),
                retry_at: None,
            },
            Event::StepSucceeded {
                step: "s".into(),
                output: "o".repeat(64),
                attempts: 7,
            },
            Event::StepFailed {
                step: "s".into(),
                error: error.clone(),
            },
            Event::TimerStarted {
                step: "t".into(),
                index: None,
                until: -5,
            },
            Event::TimerFired {
                step: "t".into(),
                index: Some(9),
                until: 12,
            },
            Event::SignalAwaited {
                step: "w".into(),
                index: None,
                name: "approve".into(),
                deadline: Some(99),
            },
            Event::SignalReceived {
                step: "w".into(),
                index: None,
                name: "approve".into(),
                signal: 3,
                payload: "p".repeat(64),
            },
            Event::RunWaiting {
                due_at: Some(5),
                signals: vec!["approve".into(), "deny".into()],
            },
            Event::RunWaiting {
                due_at: None,
                signals: Vec::new(),
            },
            Event::RunFinished {
                status: "succeeded".into(),
                output: Some("o".repeat(64)),
                error: None,
            },
            Event::RunFinished {
                status: "failed".into(),
                output: None,
                error: Some(error),
            },
        ]
    }

    /// `from_raw` of a row as stored, beside `from_row` of the same row parsed.
    fn both(r: &EventRow) -> (Result<Event, String>, Result<Event, String>) {
        let data = serde_json::to_string(&r.data).unwrap();
        let raw = RawEventRow {
            seq: r.seq,
            at: r.at,
            kind: &r.kind,
            step: r.step.as_deref(),
            index: r.index,
            attempt: r.attempt,
            data: &data,
        };
        (Event::from_raw(&raw), Event::from_row(r))
    }

    #[test]
    fn every_kind_decodes_the_fast_way_as_the_slow_way() {
        for event in every_kind() {
            let r = row(&event, 1);
            let data = serde_json::to_string(&r.data).unwrap();
            let raw = RawEventRow {
                seq: 1,
                at: r.at,
                kind: &r.kind,
                step: r.step.as_deref(),
                index: r.index,
                attempt: r.attempt,
                data: &data,
            };
            // The typed decoding itself takes every event the engine writes.
            assert_eq!(Event::decode(&raw), Some(event.clone()), "{}", r.kind);
            assert_eq!(both(&r), (Ok(event.clone()), Ok(event)));
        }
    }

    #[test]
    fn odd_rows_decode_the_fast_way_as_the_slow_way() {
        // Rows the engine never writes: each must read as `from_row` reads it, event or error.
        let cases: Vec<(&str, Option<&str>, Option<u32>, &str)> = vec![
            (
                "step_started",
                Some("s"),
                Some(1),
                r#"{"inputs":"d","key":7}"#,
            ),
            (
                "step_started",
                Some("s"),
                None,
                r#"{"inputs":"d","inputs":"e"}"#,
            ),
            ("step_started", None, None, r#"{"inputs":"d"}"#),
            ("step_started", Some("s"), None, r#"{"key":"k"}"#),
            ("step_started", Some("s"), None, r#"["d","k"]"#),
            ("step_started", Some("s"), None, "null"),
            ("step_started", Some("s"), None, "not json"),
            (
                "call_succeeded",
                Some("s"),
                None,
                r#"{"output":"o","extra":[1,{"x":2}]}"#,
            ),
            ("call_reused", Some("s"), None, r#"{"parent":"p","seq":-3}"#),
            ("call_reused", Some("s"), None, r#"{"parent":"p"}"#),
            (
                "unknown_outcome",
                Some("s"),
                None,
                r#"{"key":"k","then":"shrugged"}"#,
            ),
            ("call_failed", Some("s"), None, r#"{"retry_at":5}"#),
            (
                "call_failed",
                Some("s"),
                None,
                r#"{"error":{"code":"c","message":"m"},"retry_at":1.5}"#,
            ),
            (
                "step_succeeded",
                Some("s"),
                None,
                r#"{"output":"o","attempts":-1}"#,
            ),
            (
                "step_succeeded",
                Some("s"),
                None,
                r#"{"output":"o","attempts":5000000000}"#,
            ),
            ("timer_started", Some("s"), None, r#"{"until":1e3}"#),
            ("timer_fired", Some("s"), None, r#"{}"#),
            (
                "signal_received",
                Some("s"),
                None,
                r#"{"name":"n","payload":"p","signal":"x"}"#,
            ),
            (
                "run_waiting",
                None,
                None,
                r#"{"signals":["a",1,null],"due_at":"soon"}"#,
            ),
            ("run_waiting", None, None, r#"{"signals":null}"#),
            (
                "run_finished",
                None,
                None,
                r#"{"status":"failed","error":null,"output":3}"#,
            ),
            (
                "run_finished",
                None,
                None,
                r#"{"status":"failed","error":"boom"}"#,
            ),
            ("run_started", None, None, r#"{"flow":"f"}"#),
            (
                "run_resumed",
                None,
                None,
                r#"{"reason":"resume","by":null}"#,
            ),
            ("from_the_future", Some("s"), None, r#"{}"#),
            (
                "step_skipped",
                Some("s"),
                None,
                r#" {"reason":"w\u00e9\"hen\""} "#,
            ),
        ];
        for (kind, step, attempt, data) in cases {
            let raw = RawEventRow {
                seq: 2,
                at: 3,
                kind,
                step,
                index: None,
                attempt,
                data,
            };
            let slow = raw.to_row("").and_then(|r| Event::from_row(&r));
            assert_eq!(Event::from_raw(&raw), slow, "{kind} {data}");
        }
    }

    #[test]
    fn an_unknown_kind_is_a_hole_not_a_guess() {
        let mut r = row(
            &Event::RunResumed {
                reason: "resume".into(),
                by: "h:1".into(),
            },
            1,
        );
        r.kind = "from_the_future".into();
        assert_eq!(
            Event::from_row(&r),
            Err("unknown event kind `from_the_future`".to_string())
        );
    }
}
