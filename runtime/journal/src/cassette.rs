//! Cassettes: a run's calls, timers, signals and ending as a file people review, edit and keep
//! beside their flows, and the journal a cassette stands for.
//!
//! The file is pretty JSON with its keys sorted, one call per block, calls in the flow's step
//! order (then `foreach` index, then attempt) so that re-recording a run with the same results
//! changes nothing, whatever order concurrent calls finished in. A value whose canonical JSON
//! is longer than [`INLINE_LIMIT`] is kept apart, in `values` at the end, and named where it is
//! used by `{"$value": "sha256:…"}`, so a call's block stays short. Secrets never appear: the
//! journal it is exported from holds them as `{secret:NAME}` already.
//!
//! [`Cassette::journal`] turns a cassette back into the events and values of a run, so that the
//! engine replays a flow against it and the language server shows it with the one fold every
//! journal goes through.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use reel_flowspec::canonical::{canonical_json, digest_value, name_value};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::RunError;
use crate::journal::{DETERMINISM_EPOCH, Event, RunStarted};

/// The version of the cassette format this build reads and writes.
pub const FORMAT: u32 = 1;

/// Values whose canonical JSON is longer than this many bytes are kept apart, in `values`.
pub const INLINE_LIMIT: usize = 2048;

/// The key of a reference to a value kept apart: `{"$value": "sha256:…"}`.
pub const VALUE_REF: &str = "$value";

/// A recorded run as a reviewable, hand-editable file (`*.cassette.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(
    title = "Reel cassette",
    description = "A recorded run of a Reel flow: its inputs, every tool call with its result, the timers and signals it waited for, and how it ended. `reel test` runs the flow against it in virtual time."
)]
pub struct Cassette {
    /// The format's version (1).
    pub cassette: u32,
    /// The flow's name (a file may hold several flows).
    pub flow: String,
    /// The flow's source file, relative to the folder the cassette is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The run it was exported from, for people; nothing reads it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The determinism epoch of the engine that recorded it (absent: written by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u32>,
    /// The seed of `random()` and of retry jitter.
    #[serde(default)]
    pub seed: u64,
    /// When the run started (RFC 3339); `now()` starts here.
    pub started_at: String,
    /// The run's inputs, defaults filled in.
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// The declared environment variables as the run saw them.
    #[serde(default)]
    pub env: Map<String, Value>,
    /// Every attempt of every tool call, in the flow's step order.
    #[serde(default)]
    pub calls: Vec<Call>,
    /// The `sleep`s the run waited for.
    #[serde(default)]
    pub timers: Vec<Timer>,
    /// The signals its `signal` steps received (or waited for in vain).
    #[serde(default)]
    pub signals: Vec<Signal>,
    /// How the run ended.
    pub status: Ending,
    /// Its output, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its error, when it failed or was canceled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
    /// Values kept apart because they are large, by digest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, Value>,
}

/// How a recorded run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Ending {
    /// It finished with an output.
    Succeeded,
    /// It failed.
    Failed,
    /// It was canceled.
    Canceled,
    /// It was still waiting (a timer or a signal) when exported.
    Waiting,
}

impl Ending {
    /// The status as `reel runs` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Succeeded => "succeeded",
            Ending::Failed => "failed",
            Ending::Canceled => "canceled",
            Ending::Waiting => "waiting",
        }
    }
}

/// One attempt of one tool call and what it returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The step.
    pub step: String,
    /// The `foreach` element, for a step with `foreach`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The attempt, from 1.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The tool it called, for people (matching goes by step, index, attempt and inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// When it returned (RFC 3339); absent: when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Its arguments, secrets shown as `{secret:NAME}`.
    pub inputs: Value,
    /// What it returned, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why it failed, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CallError>,
}

fn first_attempt() -> u32 {
    1
}

/// A recorded error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallError {
    /// Its stable code (`tool.http.status`, …).
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// The step it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Whether another attempt may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// The value that explains it (an HTTP response, a command's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Value>,
}

/// A `sleep` the run waited for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Timer {
    /// The step.
    pub step: String,
    /// The `foreach` element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// When it was due (RFC 3339).
    pub until: String,
    /// When it fired, if later than due (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_at: Option<String>,
}

/// A signal a `signal` step received, or waited for until its deadline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Signal {
    /// The step.
    pub step: String,
    /// The `foreach` element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// The signal's name.
    pub name: String,
    /// When it arrived, or when the wait timed out (RFC 3339).
    pub at: String,
    /// Its payload; absent: the wait timed out (`signal.timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// A cassette that cannot be read, or turned into a journal.
#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    /// Not JSON, or not this format.
    #[error("{0}")]
    Format(String),
    /// A format version this build does not know.
    #[error(
        "the cassette is format {found}, this reel reads format {FORMAT}: re-export it with `reel cassette` or update reel"
    )]
    Version {
        /// The version it says.
        found: u32,
    },
    /// A time that is not RFC 3339.
    #[error("`{field}` is not a time in RFC 3339 (`2026-12-01T09:30:00Z`): `{value}`")]
    Time {
        /// Where.
        field: String,
        /// What it says.
        value: String,
    },
    /// A `{"$value": …}` naming no kept value.
    #[error("`{0}` names a value that is not in the cassette's `values`")]
    MissingValue(String),
}

/// The events and values of the run a cassette stands for.
#[derive(Clone, Debug)]
pub struct CassetteJournal {
    /// Its `run_started`.
    pub started: RunStarted,
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// Its inputs.
    pub inputs: Map<String, Value>,
    /// Its environment snapshot.
    pub env: Map<String, Value>,
    /// Its events with their times, in journal order.
    pub events: Vec<(i64, Event)>,
    /// Every value the events name, by digest.
    pub values: HashMap<String, Value>,
}

impl Cassette {
    /// Reads a cassette from its text.
    pub fn parse(text: &str) -> Result<Cassette, CassetteError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| CassetteError::Format(format!("not JSON: {e}")))?;
        if let Some(found) = value.get("cassette").and_then(Value::as_u64)
            && found != u64::from(FORMAT)
        {
            return Err(CassetteError::Version {
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        serde_json::from_value(value).map_err(|e| CassetteError::Format(e.to_string()))
    }

    /// The file's text: pretty JSON, keys sorted, ending with a newline.
    pub fn to_text(&self) -> String {
        // Through `Value`, whose maps are sorted, so that the file diffs the same way always.
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The JSON Schema of the format.
    pub fn schema() -> Value {
        serde_json::to_value(schemars::schema_for!(Cassette)).unwrap_or(Value::Null)
    }

    /// `value` as the file shows it: inline when short, else kept in `values` and named.
    pub fn keep(&mut self, value: Value) -> Value {
        let text = canonical_json(&value);
        if text.len() <= INLINE_LIMIT {
            return value;
        }
        let digest = digest_value(&value);
        self.values.insert(digest.clone(), value);
        let mut r = Map::new();
        r.insert(VALUE_REF.into(), Value::String(digest));
        Value::Object(r)
    }

    /// `value` with a reference to a kept value replaced by that value.
    pub fn resolve(&self, value: &Value) -> Result<Value, CassetteError> {
        match value.as_object() {
            Some(m) if m.len() == 1 => match m.get(VALUE_REF) {
                Some(Value::String(d)) => self
                    .values
                    .get(d)
                    .cloned()
                    .ok_or_else(|| CassetteError::MissingValue(d.clone())),
                _ => Ok(value.clone()),
            },
            _ => Ok(value.clone()),
        }
    }

    /// The run this cassette stands for, as a journal. `foreach` tells, for a step of the flow
    /// it is read against, whether it has `foreach` (none: the flow has no such step), so that
    /// a tool step's end is recorded with its value as a live run records it.
    pub fn journal(
        &self,
        foreach: &dyn Fn(&str) -> Option<bool>,
    ) -> Result<CassetteJournal, CassetteError> {
        let mut b = Builder::default();
        let started_at = ms("started_at", &self.started_at)?;
        let inputs_digest = b.put(Value::Object(self.inputs.clone()));
        let env_digest = b.put(Value::Object(self.env.clone()));
        let started = RunStarted {
            flow: String::new(),
            inputs: inputs_digest,
            seed: self.seed,
            epoch: self.epoch.unwrap_or(DETERMINISM_EPOCH),
            env: env_digest,
            cwd: String::new(),
            source: self.source.clone(),
            durability: "fast".into(),
            rerun: false,
        };
        b.push(started_at, Event::RunStarted(started.clone()));
        // A tool step ends with its last call: per step, the latest result of each element.
        let mut ends: BTreeMap<String, StepEnd> = BTreeMap::new();
        for c in &self.calls {
            let at = match &c.at {
                Some(t) => ms("calls[].at", t)?,
                None => started_at,
            };
            let inputs = b.put(self.resolve(&c.inputs)?);
            b.push(
                at,
                Event::StepStarted {
                    step: c.step.clone(),
                    index: c.index,
                    attempt: c.attempt,
                    inputs,
                    key: None,
                },
            );
            let result = match (&c.result, &c.error) {
                (Some(r), _) => {
                    let output = b.put(self.resolve(r)?);
                    b.push(
                        at,
                        Event::CallSucceeded {
                            step: c.step.clone(),
                            index: c.index,
                            attempt: c.attempt,
                            output: output.clone(),
                        },
                    );
                    Some(output)
                }
                (None, Some(e)) => {
                    let error = self.run_error(e, &mut b)?;
                    b.push(
                        at,
                        Event::CallFailed {
                            step: c.step.clone(),
                            index: c.index,
                            attempt: c.attempt,
                            error,
                            retry_at: None,
                        },
                    );
                    None
                }
                // In flight when the run stopped.
                (None, None) => continue,
            };
            let end = ends.entry(c.step.clone()).or_insert((at, BTreeMap::new()));
            end.0 = end.0.max(at);
            let slot = end.1.entry(c.index).or_insert((0, None));
            if c.attempt >= slot.0 {
                *slot = (c.attempt, result);
            }
        }
        for (step, (at, elements)) in ends {
            let Some(is_foreach) = foreach(&step) else {
                continue;
            };
            let results: Option<Vec<String>> = elements.values().map(|(_, r)| r.clone()).collect();
            let Some(results) = results else {
                continue;
            };
            let attempts = elements.values().map(|(a, _)| *a).sum();
            let output = if is_foreach {
                let list = results
                    .iter()
                    .map(|d| b.values.get(d).cloned().unwrap_or(Value::Null))
                    .collect();
                b.put(Value::Array(list))
            } else {
                match results.first() {
                    Some(d) => d.clone(),
                    None => continue,
                }
            };
            b.push(
                at,
                Event::StepSucceeded {
                    step,
                    output,
                    attempts,
                },
            );
        }
        for t in &self.timers {
            let until = ms("timers[].until", &t.until)?;
            let fired = match &t.fired_at {
                Some(f) => ms("timers[].fired_at", f)?,
                None => until,
            };
            b.push(
                fired,
                Event::TimerFired {
                    step: t.step.clone(),
                    index: t.index,
                    until,
                },
            );
        }
        for (n, s) in self.signals.iter().enumerate() {
            let at = ms("signals[].at", &s.at)?;
            match &s.payload {
                Some(p) => {
                    let payload = b.put(self.resolve(p)?);
                    b.push(
                        at,
                        Event::SignalReceived {
                            step: s.step.clone(),
                            index: s.index,
                            name: s.name.clone(),
                            signal: n as u64 + 1,
                            payload,
                        },
                    );
                }
                None => b.push(
                    at,
                    Event::CallFailed {
                        step: s.step.clone(),
                        index: s.index,
                        attempt: 1,
                        error: RunError {
                            code: "signal.timeout".into(),
                            message: format!("no signal `{}` arrived before the deadline", s.name),
                            step: Some(s.step.clone()),
                            retryable: false,
                            cause: None,
                        },
                        retry_at: None,
                    },
                ),
            }
        }
        let last = b
            .timed
            .iter()
            .map(|(at, _, _)| *at)
            .max()
            .unwrap_or(started_at);
        match self.status {
            Ending::Waiting => {}
            status => {
                let output = match &self.output {
                    Some(o) => Some(b.put(self.resolve(o)?)),
                    None => None,
                };
                let error = match &self.error {
                    Some(e) => Some(self.run_error(e, &mut b)?),
                    None => None,
                };
                b.push(
                    last,
                    Event::RunFinished {
                        status: status.as_str().into(),
                        output,
                        error,
                    },
                );
            }
        }
        let Builder { mut timed, values } = b;
        timed.sort_by_key(|(at, n, _)| (*at, *n));
        Ok(CassetteJournal {
            started,
            started_at,
            inputs: self.inputs.clone(),
            env: self.env.clone(),
            events: timed.into_iter().map(|(at, _, e)| (at, e)).collect(),
            values,
        })
    }

    fn run_error(&self, e: &CallError, b: &mut Builder) -> Result<RunError, CassetteError> {
        let cause = match &e.cause {
            Some(c) => Some(b.put(self.resolve(c)?)),
            None => None,
        };
        Ok(RunError {
            code: e.code.clone(),
            message: e.message.clone(),
            step: e.step.clone(),
            retryable: e.retryable,
            cause,
        })
    }
}

/// When a tool step's last call returned, and per element its last attempt and result digest
/// (none: it failed).
type StepEnd = (i64, BTreeMap<Option<u32>, (u32, Option<String>)>);

/// The journal being built from a cassette: events with (time, order of generation), sorted
/// by time at the end with ties kept in generation order, and the values they name.
#[derive(Default)]
struct Builder {
    timed: Vec<(i64, usize, Event)>,
    values: HashMap<String, Value>,
}

impl Builder {
    fn put(&mut self, v: Value) -> String {
        let d = name_value(&v);
        self.values.insert(d.clone(), v);
        d
    }

    fn push(&mut self, at: i64, e: Event) {
        let n = self.timed.len();
        self.timed.push((at, n, e));
    }
}

/// `ms` since the epoch as the file writes a time.
pub fn time_text(ms: i64) -> String {
    Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ms.to_string())
}

fn ms(field: &str, text: &str) -> Result<i64, CassetteError> {
    text.parse::<Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| CassetteError::Time {
            field: field.to_string(),
            value: text.to_string(),
        })
}
