//! A virtual-time driver of the engine's core, for tests: a fake tool host answering from a
//! table, a clock that jumps to the next thing due, an in-memory journal and value store.
//! Bounded in steps, so a livelock fails the test instead of hanging it.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use reel_flowspec::FlowSpec;
use reel_runtime::core::{
    ArrivedSignal, Command, Decided, Decision, Ending, Input, Machine, Poll, Returned, Setup,
    Stamped, check_decisions,
};
use reel_runtime::fold::fold_events;
use reel_store::Durability;
use reel_tools::{ToolError, ToolOutput};
use serde_json::{Map, Value};

/// What a call answers.
#[derive(Clone, Debug)]
pub enum Answer {
    /// It returns this value.
    Returns(Value),
    /// It fails with this code, retryable or not.
    Fails { code: String, retryable: bool },
}

/// A test's world: the answers of calls and what happens from outside, in virtual time.
#[derive(Clone, Debug, Default)]
pub struct Script {
    /// The flow's inputs.
    pub inputs: Map<String, Value>,
    /// `durable` mode.
    pub durable: bool,
    /// Answers by step id, `foreach` index and attempt, with how long the call takes (ms).
    pub answers: HashMap<(String, Option<u32>, u32), (Answer, i64)>,
    /// Signals sent: when, name, payload.
    pub signals: Vec<(i64, String, Value)>,
    /// When `reel cancel` is asked, if it is.
    pub cancel_at: Option<i64>,
    /// Calls whose launch the process does not survive (step, index, attempt): their starts
    /// are recorded, their results never are, and the run resumes from its journal.
    pub crashes: HashSet<(String, Option<u32>, u32)>,
    /// What a person decides when the run fails (`reel resume --accept`/`--retry`): given
    /// to the resume after the first failure.
    pub decisions: Vec<Decided>,
    /// The machine that resumes makes no idempotency keys, as a replay's does (it drives the
    /// record of a run that was resumed, and makes no call).
    pub resume_without_keys: bool,
}

impl Script {
    /// Reads the script part of a fixture: one line each, `#` comments.
    ///
    /// ```text
    /// inputs {"n": 2}
    /// durable
    /// a#1 fails tool.http.status retryable after 300
    /// a[2]#1 returns {"ok": true}
    /// signal go at 5000 = {"by": "ada"}
    /// cancel at 1500
    /// crash at a[2]#1
    /// accept a = {"ok": true}
    /// retry a[1]
    /// resume without keys
    /// ```
    pub fn parse(text: &str) -> Script {
        let mut script = Script::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(json) = line.strip_prefix("inputs ") {
                let Ok(Value::Object(m)) = serde_json::from_str(json) else {
                    panic!("inputs must be a JSON object: {line}");
                };
                script.inputs = m;
            } else if line == "durable" {
                script.durable = true;
            } else if line == "resume without keys" {
                script.resume_without_keys = true;
            } else if let Some(rest) = line.strip_prefix("cancel at ") {
                script.cancel_at = Some(rest.parse().expect("a time in ms"));
            } else if let Some(rest) = line.strip_prefix("crash at ") {
                let (call, attempt) = rest.split_once('#').expect("crash at STEP[INDEX]#ATTEMPT");
                let (step, index) = call_name(call);
                script
                    .crashes
                    .insert((step, index, attempt.parse().expect("an attempt")));
            } else if let Some(rest) = line.strip_prefix("accept ") {
                let (call, json) = rest.split_once(" = ").expect("accept STEP = JSON");
                let (step, index) = call_name(call);
                script.decisions.push(Decided {
                    step,
                    index,
                    decision: Decision::Accept(serde_json::from_str(json).expect("JSON")),
                });
            } else if let Some(call) = line.strip_prefix("retry ") {
                let (step, index) = call_name(call);
                script.decisions.push(Decided {
                    step,
                    index,
                    decision: Decision::Retry,
                });
            } else if let Some(rest) = line.strip_prefix("signal ") {
                let (head, payload) = rest.split_once(" = ").expect("signal NAME at MS = JSON");
                let (name, at) = head.split_once(" at ").expect("signal NAME at MS");
                let payload = serde_json::from_str(payload).expect("a JSON payload");
                script
                    .signals
                    .push((at.parse().expect("a time"), name.to_string(), payload));
            } else {
                let (call, rest) = line.split_once(' ').expect("CALL returns|fails ...");
                let (call, attempt) = call.split_once('#').expect("STEP[INDEX]#ATTEMPT");
                let (step, index) = match call.split_once('[') {
                    Some((s, i)) => (s, Some(i.trim_end_matches(']').parse().expect("an index"))),
                    None => (call, None),
                };
                let (rest, after) = match rest.rsplit_once(" after ") {
                    Some((r, ms)) => (r, ms.parse().expect("a duration in ms")),
                    None => (rest, 0),
                };
                let answer = if let Some(json) = rest.strip_prefix("returns ") {
                    Answer::Returns(serde_json::from_str(json).expect("a JSON value"))
                } else if let Some(code) = rest.strip_prefix("fails ") {
                    let (code, retryable) = match code.strip_suffix(" retryable") {
                        Some(c) => (c, true),
                        None => (code, false),
                    };
                    Answer::Fails {
                        code: code.to_string(),
                        retryable,
                    }
                } else {
                    panic!("a call returns or fails: {line}");
                };
                script.answers.insert(
                    (
                        step.to_string(),
                        index,
                        attempt.parse().expect("an attempt"),
                    ),
                    (answer, after),
                );
            }
        }
        script
    }
}

/// `STEP` or `STEP[INDEX]`.
fn call_name(text: &str) -> (String, Option<u32>) {
    match text.split_once('[') {
        Some((s, i)) => (
            s.to_string(),
            Some(i.trim_end_matches(']').parse().expect("an index")),
        ),
        None => (text.to_string(), None),
    }
}

/// The most commands one test may see: more is a livelock.
const MAX_STEPS: usize = 20_000;

/// A run of a flow against a script, in virtual time.
pub struct Sim {
    spec: Arc<FlowSpec>,
    script: Script,
    now: i64,
    machine: Machine,
    /// The journal, as appended.
    pub journal: Vec<Stamped>,
    values: HashMap<String, Value>,
    /// Values put since the last append: the driver hands them to the store with that append
    /// (see `reel_store::Kept`), so the append must name every one.
    unnamed: Vec<String>,
    consumed: HashSet<u64>,
    in_flight: Vec<(i64, Returned)>,
    /// Inputs and commands, one a line, for a snapshot.
    pub transcript: String,
    /// How the run ended, as the transcript shows it.
    pub ending: Option<Ending>,
}

impl Sim {
    /// A run of `spec` that starts at virtual time 0.
    pub fn new(spec: FlowSpec, script: Script) -> Sim {
        let spec = Arc::new(spec);
        let inputs = reel_runtime::resolve_inputs(&spec, &script.inputs).expect("valid inputs");
        let machine = Machine::new(setup(&spec, inputs, script.durable));
        Sim {
            spec,
            script,
            now: 0,
            machine,
            journal: Vec::new(),
            values: HashMap::new(),
            unnamed: Vec::new(),
            consumed: HashSet::new(),
            in_flight: Vec::new(),
            transcript: String::new(),
            ending: None,
        }
    }

    fn feed(&mut self, input: Input) {
        let _ = writeln!(self.transcript, "> @{} {}", self.now, show_input(&input));
        self.machine.handle(self.now, input);
    }

    /// Drives the run to its end, resuming it when it parks and something is due.
    pub fn run(mut self) -> Sim {
        self.feed(Input::Started);
        for _ in 0..MAX_STEPS {
            let Some(cmd) = self.machine.poll_command() else {
                panic!(
                    "the machine stopped without an ending:\n{}",
                    self.transcript
                );
            };
            let _ = writeln!(self.transcript, "  {}", shorten(&cmd.to_string()));
            match cmd {
                Command::PutValue { digest, text } => {
                    let value: Value = serde_json::from_str(&text).expect("canonical JSON");
                    self.unnamed.push(digest.clone());
                    self.values.insert(digest, value);
                }
                Command::Append(events) => {
                    let rows: String = events
                        .iter()
                        .map(|e| e.event.to_row(e.at).data.to_string())
                        .collect();
                    for digest in std::mem::take(&mut self.unnamed) {
                        assert!(
                            rows.contains(&digest),
                            "value {digest} was put but the next append does not name it:\n{}",
                            self.transcript
                        );
                    }
                    self.journal.extend(events);
                }
                Command::LoadValues(digests) => {
                    let values = digests
                        .iter()
                        .map(|d| value_named(d, &self.values))
                        .collect();
                    self.feed(Input::ValuesLoaded(values));
                }
                Command::FetchSignals(names) => {
                    let arrived = self.arrived(names);
                    self.feed(Input::Signals(arrived));
                }
                Command::ConsumeSignal { signal } => {
                    self.consumed.insert(signal);
                }
                Command::Launch(calls) => {
                    let crash = calls.iter().any(|c| {
                        let step = &self.spec.steps[c.step];
                        let index = step.foreach.as_ref().map(|_| c.index as u32);
                        self.script
                            .crashes
                            .remove(&(step.id.clone(), index, c.attempt))
                    });
                    if crash {
                        // The process dies as the calls are made: what was appended stays,
                        // nothing in flight is answered, and the run is resumed from its journal.
                        let _ = writeln!(self.transcript, "  ** the process dies **");
                        self.in_flight.clear();
                        self.resume("crash", Vec::new());
                        continue;
                    }
                    let mut at_once = Vec::new();
                    for c in calls {
                        let step = &self.spec.steps[c.step];
                        let index = step.foreach.as_ref().map(|_| c.index as u32);
                        let (outcome, after) = self.answer(&step.id, index, c.attempt, &c.call);
                        let r = Returned {
                            step: c.step,
                            index: c.index,
                            attempt: c.attempt,
                            outcome,
                            reused: None,
                            digest: None,
                        };
                        if after == 0 {
                            at_once.push(r);
                        } else {
                            self.in_flight.push((self.now + after, r));
                        }
                    }
                    self.feed(Input::Launched(at_once));
                }
                Command::CancelCalls => {
                    // The tool host stops what runs: each call ends now with `tool.canceled`.
                    for (due, r) in &mut self.in_flight {
                        *due = self.now;
                        r.outcome = Err(ToolError::new("tool.canceled", "canceled", false));
                    }
                }
                Command::Wait { deadline, at_once } => {
                    if !at_once {
                        let next = [
                            deadline,
                            self.in_flight.iter().map(|(t, _)| *t).min(),
                            self.next_outside(),
                        ]
                        .into_iter()
                        .flatten()
                        .min();
                        let Some(next) = next else {
                            panic!("the run waits for nothing:\n{}", self.transcript);
                        };
                        self.now = self.now.max(next);
                        self.in_flight.sort_by_key(|(t, _)| *t);
                        while self.in_flight.first().is_some_and(|(t, _)| *t <= self.now) {
                            let (_, r) = self.in_flight.remove(0);
                            self.feed(Input::CallReturned(r));
                        }
                    }
                    let cancel_requested = self.script.cancel_at.is_some_and(|t| t <= self.now);
                    self.feed(Input::Tick {
                        poll: Some(Poll { cancel_requested }),
                    });
                }
                Command::Finish(Ending::Waiting) => {
                    let due = self.journal.iter().rev().find_map(|e| match &e.event {
                        reel_runtime::journal::Event::RunWaiting { due_at, .. } => *due_at,
                        _ => None,
                    });
                    let outside = self.next_outside();
                    let Some(next) = [due, outside].into_iter().flatten().min() else {
                        self.ending = Some(Ending::Waiting);
                        return self;
                    };
                    self.now = self.now.max(next);
                    self.resume(
                        if outside == Some(next) {
                            "signal"
                        } else {
                            "due"
                        },
                        Vec::new(),
                    );
                }
                Command::Finish(Ending::Failed(_)) if !self.script.decisions.is_empty() => {
                    // A person decides, and resumes the failed run with the decisions.
                    let decisions = std::mem::take(&mut self.script.decisions);
                    self.resume("redrive", decisions);
                }
                Command::Finish(ending) => {
                    self.ending = Some(ending);
                    return self;
                }
                Command::Sync
                | Command::Log { .. }
                | Command::Progress(_)
                | Command::ClearSignalPending
                | Command::Park { .. } => {}
            }
        }
        panic!(
            "no ending after {MAX_STEPS} commands (a livelock):\n{}",
            self.transcript
        );
    }

    /// A new machine from the journal, as the worker resumes a parked run (or `reel resume` a
    /// crashed or failed one, with a person's decisions, checked as the Rider checks them).
    fn resume(&mut self, reason: &str, decisions: Vec<Decided>) {
        let folded = fold_events(self.journal.iter().map(|e| (e.at, e.event.clone())));
        let inputs =
            reel_runtime::resolve_inputs(&self.spec, &self.script.inputs).expect("valid inputs");
        check_decisions(&self.spec, &folded, &decisions).expect("the decisions are valid");
        for d in &decisions {
            let _ = writeln!(self.transcript, "> a person decides: {d:?}");
        }
        let mut setup = setup(&self.spec, inputs, self.script.durable);
        setup.idempotency_keys = !self.script.resume_without_keys;
        self.machine = Machine::new(setup);
        self.machine.decide(decisions);
        self.feed(Input::Resumed {
            folded: Box::new(folded),
            reason: reason.into(),
            by: "sim".into(),
        });
    }

    /// The next signal or cancel still to come from outside, after now.
    fn next_outside(&self) -> Option<i64> {
        let signals = self
            .script
            .signals
            .iter()
            .enumerate()
            .filter(|(seq, (at, _, _))| *at > self.now && !self.consumed.contains(&(*seq as u64)))
            .map(|(_, (at, _, _))| *at);
        signals
            .chain(self.script.cancel_at.filter(|t| *t > self.now))
            .min()
    }

    /// Signals sent by now and not consumed, the first of each name asked for.
    fn arrived(&self, names: Vec<String>) -> Vec<ArrivedSignal> {
        let mut pending: Vec<ArrivedSignal> = self
            .script
            .signals
            .iter()
            .enumerate()
            .filter(|(seq, (at, _, _))| *at <= self.now && !self.consumed.contains(&(*seq as u64)))
            .map(|(seq, (_, name, payload))| ArrivedSignal {
                seq: seq as u64,
                name: name.clone(),
                payload_digest: reel_flowspec::canonical::digest_value(payload),
                payload: payload.clone(),
            })
            .collect();
        let mut out = Vec::new();
        for name in names {
            if let Some(pos) = pending.iter().position(|s| s.name == name) {
                out.push(pending.remove(pos));
            }
        }
        out.sort_by_key(|s| s.seq);
        out
    }

    /// The table's answer; `echo` with no entry answers its value at once, like the real one.
    fn answer(
        &self,
        step: &str,
        index: Option<u32>,
        attempt: u32,
        call: &reel_tools::ToolCall,
    ) -> (Result<ToolOutput, ToolError>, i64) {
        let key = (step.to_string(), index, attempt);
        match self.script.answers.get(&key) {
            Some((Answer::Returns(v), after)) => (
                Ok(ToolOutput {
                    value: v.clone(),
                    log: String::new(),
                }),
                *after,
            ),
            Some((Answer::Fails { code, retryable }, after)) => {
                let code: &'static str = Box::leak(code.clone().into_boxed_str());
                (
                    Err(ToolError::new(
                        code,
                        format!("{code} (scripted)"),
                        *retryable,
                    )),
                    *after,
                )
            }
            None if call.tool == "echo" => (
                Ok(ToolOutput {
                    value: call.args.get("value").cloned().unwrap_or(Value::Null),
                    log: String::new(),
                }),
                0,
            ),
            None => panic!("no answer for {step}{index:?}#{attempt} ({})", call.tool),
        }
    }
}

/// The setup of a run of `spec` at virtual time 0 with `inputs`.
pub fn setup(spec: &Arc<FlowSpec>, inputs: Map<String, Value>, durable: bool) -> Setup {
    Setup {
        run_id: "r1".into(),
        spec: spec.clone(),
        seed: 1,
        started_at: 0,
        cwd: PathBuf::from("/run"),
        inputs,
        env: Map::new(),
        secrets: Default::default(),
        durability: if durable {
            Durability::Durable
        } else {
            Durability::Fast
        },
        max_parallel: 64,
        faults: Vec::new(),
        idempotency_keys: true,
    }
}

fn show_input(input: &Input) -> String {
    match input {
        Input::Started => "started".into(),
        Input::Resumed { reason, .. } => format!("resumed ({reason})"),
        Input::ValuesLoaded(v) => format!("values loaded: {}", v.len()),
        Input::Launched(r) if r.is_empty() => "launched".into(),
        Input::Launched(r) => {
            let r: Vec<String> = r.iter().map(show_returned).collect();
            format!("launched, at once: {}", r.join(", "))
        }
        Input::CallReturned(r) => format!("returned {}", show_returned(r)),
        Input::Signals(s) => {
            let s: Vec<String> = s
                .iter()
                .map(|s| format!("{}#{} {}", s.name, s.seq, s.payload))
                .collect();
            format!("signals [{}]", s.join(", "))
        }
        Input::Tick { poll: Some(p) } if p.cancel_requested => "tick, cancel requested".into(),
        Input::Tick { .. } => "tick".into(),
        Input::Interrupted => "interrupted".into(),
    }
}

fn show_returned(r: &Returned) -> String {
    match &r.outcome {
        Ok(o) => format!("{}/{} #{} ok {}", r.step, r.index, r.attempt, o.value),
        Err(e) => format!("{}/{} #{} err {}", r.step, r.index, r.attempt, e.code),
    }
}

/// Digests (64 hex digits) cut to their first 8, for reading.
pub fn shorten(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            .count();
        if run == 64 {
            out.push_str(&text[i..i + 8]);
            i += 64;
        } else if run > 0 {
            out.push_str(&text[i..i + run]);
            i += run;
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The value `name` names, as a store gives it: a short value's name is the value itself, any
/// other is one the machine put (`stored`, by digest).
pub(crate) fn value_named(name: &str, stored: &HashMap<String, Value>) -> Value {
    match reel_flowspec::canonical::literal(name) {
        Some(text) => serde_json::from_str(text).expect("canonical JSON"),
        None => stored.get(name).cloned().expect("a value that was put"),
    }
}
