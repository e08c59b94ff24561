//! Cassettes from runs, and flows tested against cassettes (`reel cassette`, `reel test`).
//!
//! A cassette is exported from a recorded run ([`export`]) and read back as the journal it
//! stands for (`reel_journal::cassette`); [`test`] replays a flow against that journal with
//! the replay driver in its test mode, so that a test, a replay and a live run decide with the
//! same core. Time is the recorded time: a ten-day `sleep` is answered at once.

use std::collections::HashMap;
use std::sync::Arc;

use reel_flowspec::FlowSpec;
use reel_journal::cassette::{
    Call, CallError, Cassette, CassetteError, Ending, FORMAT, Signal, Timer, time_text,
};
use reel_store::{
    EventRow, Flow, LogRow, RunFilter, RunRow, RunStatus, SignalRow, StoreError, StoreRead,
};
use serde_json::Value;

use crate::deps::ProgressSink;
use crate::error::RunError;
use crate::journal::Event;
use crate::replay::{Recording, ReplayReport, test_against};
use crate::rider::Refusal;

/// The cassette of run `run`: its inputs, calls, timers, signals and ending.
pub fn export(store: &dyn StoreRead, run: &str) -> Result<Cassette, Refusal> {
    let rec = Recording::load(store, run)?;
    let value = |digest: &str| -> Result<Value, Refusal> {
        store.get_value(digest)?.ok_or_else(|| {
            Refusal::Store(StoreError::MissingValue {
                digest: digest.to_string(),
            })
        })
    };
    let mut c = Cassette {
        cassette: FORMAT,
        flow: rec.run.flow.clone(),
        source: rec.run.source_abs.clone().or(rec.run.source.clone()),
        run: Some(rec.run.id.clone()),
        epoch: Some(rec.started.epoch),
        seed: rec.started.seed,
        started_at: time_text(rec.started_at),
        inputs: rec.inputs.clone(),
        env: rec.env.clone(),
        calls: Vec::new(),
        timers: Vec::new(),
        signals: Vec::new(),
        status: Ending::Waiting,
        output: None,
        error: None,
        values: Default::default(),
    };
    let tool = |step: &str| {
        rec.spec
            .steps
            .iter()
            .find(|s| s.id == step)
            .and_then(|s| s.tool.clone())
    };
    // The place of each call's block: (step, index, attempt) → position in `calls`.
    let mut calls: HashMap<(String, Option<u32>, u32), usize> = HashMap::new();
    let mut timer_until: HashMap<(String, Option<u32>), i64> = HashMap::new();
    let mut waits: HashMap<(String, Option<u32>), String> = HashMap::new();
    // The journal, read again as a stream: the recording keeps only its index.
    let mut events: Vec<(i64, Event)> = Vec::new();
    let mut hole = None;
    store.read_journal(run, 0, &mut |r| match Event::from_row(&r) {
        Ok(event) => {
            events.push((r.at, event));
            Flow::Continue
        }
        Err(message) => {
            hole = Some(StoreError::Hole {
                run: r.run.clone(),
                seq: r.seq,
                message,
            });
            Flow::Stop
        }
    })?;
    if let Some(h) = hole {
        return Err(h.into());
    }
    for (at, event) in &events {
        match event {
            Event::StepStarted {
                step,
                index,
                attempt,
                inputs,
                ..
            } => {
                let inputs = value(inputs)?;
                let inputs = c.keep(inputs);
                calls.insert((step.clone(), *index, *attempt), c.calls.len());
                c.calls.push(Call {
                    step: step.clone(),
                    index: *index,
                    attempt: *attempt,
                    tool: tool(step),
                    at: Some(time_text(*at)),
                    inputs,
                    result: None,
                    error: None,
                });
            }
            Event::CallSucceeded {
                step,
                index,
                attempt,
                output: digest,
            }
            | Event::EffectRecorded {
                step,
                index,
                attempt,
                result: digest,
                ..
            } => {
                let v = value(digest)?;
                let v = c.keep(v);
                if let Some(&i) = calls.get(&(step.clone(), *index, *attempt)) {
                    c.calls[i].result = Some(v);
                    c.calls[i].at = Some(time_text(*at));
                }
            }
            Event::CallFailed {
                step,
                index,
                attempt,
                error,
                ..
            } => {
                if error.code == "signal.timeout" {
                    let key = (step.clone(), *index);
                    c.signals.push(Signal {
                        step: step.clone(),
                        index: *index,
                        name: waits.get(&key).cloned().unwrap_or_default(),
                        at: time_text(*at),
                        payload: None,
                    });
                } else if let Some(&i) = calls.get(&(step.clone(), *index, *attempt)) {
                    let err = call_error(&mut c, error, &value)?;
                    c.calls[i].error = Some(err);
                    c.calls[i].at = Some(time_text(*at));
                }
            }
            Event::TimerStarted { step, index, until } => {
                timer_until.insert((step.clone(), *index), *until);
            }
            Event::TimerFired { step, index, until } => {
                let fired_at = (*at > *until).then(|| time_text(*at));
                timer_until.remove(&(step.clone(), *index));
                c.timers.push(Timer {
                    step: step.clone(),
                    index: *index,
                    until: time_text(*until),
                    fired_at,
                });
            }
            Event::SignalAwaited {
                step, index, name, ..
            } => {
                waits.insert((step.clone(), *index), name.clone());
            }
            Event::SignalReceived {
                step,
                index,
                name,
                payload,
                ..
            } => {
                let p = value(payload)?;
                let p = c.keep(p);
                c.signals.push(Signal {
                    step: step.clone(),
                    index: *index,
                    name: name.clone(),
                    at: time_text(*at),
                    payload: Some(p),
                });
            }
            Event::RunFinished {
                status,
                output,
                error,
            } => {
                c.status = match status.as_str() {
                    "succeeded" => Ending::Succeeded,
                    "canceled" => Ending::Canceled,
                    _ => Ending::Failed,
                };
                c.output = match output {
                    Some(d) => {
                        let v = value(d)?;
                        Some(c.keep(v))
                    }
                    None => None,
                };
                c.error = match error {
                    Some(e) => Some(call_error(&mut c, e, &value)?),
                    None => None,
                };
            }
            // A redrive or resume goes on with the same record.
            Event::RunResumed { .. } => {
                c.status = Ending::Waiting;
                c.output = None;
                c.error = None;
            }
            _ => {}
        }
    }
    // In the flow's step order, then element and attempt: a re-recording diffs only where
    // results changed, whatever order concurrent calls finished in.
    let order: HashMap<&str, usize> = rec
        .spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let place = |step: &str| order.get(step).copied().unwrap_or(usize::MAX);
    c.calls.sort_by(|a, b| {
        (place(&a.step), a.index, a.attempt).cmp(&(place(&b.step), b.index, b.attempt))
    });
    c.timers.sort_by_key(|t| (place(&t.step), t.index));
    c.signals
        .sort_by(|a, b| (place(&a.step), a.index, &a.at).cmp(&(place(&b.step), b.index, &b.at)));
    Ok(c)
}

fn call_error(
    c: &mut Cassette,
    e: &RunError,
    value: &dyn Fn(&str) -> Result<Value, Refusal>,
) -> Result<CallError, Refusal> {
    let cause = match &e.cause {
        Some(d) => {
            let v = value(d)?;
            Some(c.keep(v))
        }
        None => None,
    };
    Ok(CallError {
        code: e.code.clone(),
        message: e.message.clone(),
        step: e.step.clone(),
        retryable: e.retryable,
        cause,
    })
}

/// Why a cassette could not be tested.
#[derive(Debug, thiserror::Error)]
pub enum TestRefusal {
    /// The cassette cannot be read as a journal.
    #[error(transparent)]
    Cassette(#[from] CassetteError),
    /// The replay was refused.
    #[error(transparent)]
    Replay(#[from] Refusal),
}

/// Runs `spec` against `cassette`: every call answered from it, in its recorded time.
/// `faults` names builtins whose results are changed on purpose (a test's fault injection).
pub fn test(
    cassette: &Cassette,
    spec: Arc<FlowSpec>,
    faults: &[String],
    progress: &dyn ProgressSink,
) -> Result<ReplayReport, TestRefusal> {
    let foreach = |id: &str| {
        spec.steps
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.foreach.is_some())
    };
    let journal = cassette.journal(&foreach)?;
    let run = RunRow {
        id: "cassette".into(),
        flow: cassette.flow.clone(),
        flow_digest: String::new(),
        source: cassette.source.clone(),
        source_abs: None,
        cwd: String::new(),
        parent: None,
        status: RunStatus::Succeeded,
        created_at: journal.started_at,
        ended_at: None,
        due_at: None,
        waiting_on: Vec::new(),
        signal_pending: false,
        lease_owner: None,
        lease_expires_at: None,
        lease_token: 0,
        cancel_requested: false,
        output_digest: None,
        error: None,
        keep_for_ms: None,
        durability: Default::default(),
        next_seq: 0,
    };
    let rec = Recording::from_events(
        run,
        spec.clone(),
        journal.inputs,
        journal.env,
        journal.events,
    )?;
    let values = CassetteValues(journal.values);
    Ok(test_against(&values, &rec, spec, faults, progress)?)
}

/// A cassette's values, read as a store holding nothing else: all a test's replay reads.
struct CassetteValues(HashMap<String, Value>);

impl StoreRead for CassetteValues {
    fn stored_value(&self, digest: &str) -> Result<Option<Value>, StoreError> {
        Ok(self.0.get(digest).cloned())
    }
    fn get_spec(&self, _: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
    fn run(&self, _: &str) -> Result<Option<RunRow>, StoreError> {
        Ok(None)
    }
    fn find_runs(&self, _: &str) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    fn list_runs(&self, _: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        Ok(Vec::new())
    }
    fn read_journal(
        &self,
        _: &str,
        _: u64,
        _: &mut dyn FnMut(EventRow) -> Flow,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    fn logs(&self, _: &str) -> Result<Vec<LogRow>, StoreError> {
        Ok(Vec::new())
    }
    fn pending_signals(&self, _: &str) -> Result<Vec<SignalRow>, StoreError> {
        Ok(Vec::new())
    }
    fn due_runs(&self, _: i64, _: usize) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
}
