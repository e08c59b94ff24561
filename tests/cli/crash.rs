//! The crash test: `reel run` of a 50-step flow killed with SIGKILL at random moments, in both
//! write modes, and resumed (from the run's directory and from another one) until it ends; on
//! SQLite and on PostgreSQL (a fresh database on the test server for each run).
//!
//! Every tool call of the flow appends `TAG KEY` to `calls.log` in the run's directory (`TAG` is
//! the step, `step#index` in a `foreach`; `KEY` its `REEL_IDEMPOTENCY_KEY`), so the test sees
//! every invocation, including those the journal never heard of. Before each resume it reads
//! the journal with `reel events --json` and the log, and afterwards checks what ran again.

// edge: the test kills a real process at random real moments (its seed from REEL_CRASH_SEED, or
// drawn at random and printed) and waits on deadlines: it measures real time.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::support::*;

/// How many steps the generated flow has.
const STEPS: usize = 50;
/// Crashed runs per write mode.
const RUNS_PER_MODE: usize = 6;
/// At most this many attempts of one run are killed; the next one runs to its end.
const KILLS_PER_RUN: usize = 3;

/// The user tool: logs its call, waits a little, answers `{tag, n}`.
const TOOL_PY: &str = r#"import json, os, sys, time
a = json.load(sys.stdin)
with open("calls.log", "a") as f:
    f.write("%s %s\n" % (a["tag"], os.environ.get("REEL_IDEMPOTENCY_KEY", "-")))
time.sleep(0.01)
print(json.dumps({"tag": a["tag"], "n": (a["n"] * 3 + 1) % 1000}))
"#;

/// A call of the flow: its step and `foreach` index.
type CallId = (String, Option<u32>);

/// The flow: 50 steps mixing `exec` effects, `foreach` effects, a user effect tool, `echo`,
/// pure expressions and `when` conditions; its output is deterministic.
fn flow_source() -> String {
    // `int_of[k]`: an int expression of step k's value, for the steps after it.
    let mut int_of: Vec<String> = Vec::new();
    let mut steps = String::new();
    for k in 0..STEPS {
        let name = format!("s{k:02}");
        let a = if k >= 2 {
            int_of[k - 2].clone()
        } else {
            format!("{}", k + 1)
        };
        let b = if k >= 5 {
            int_of[k - 5].clone()
        } else {
            format!("{}", k + 3)
        };
        let sleep = 1 + k % 4;
        let (body, int) = match k % 10 {
            0 | 8 => (
                format!(
                    "exec {{\n    cmd: [\"sh\", \"-c\", \"echo \\\"$1 $REEL_IDEMPOTENCY_KEY\\\" >> calls.log; sleep 0.0{sleep}; echo $(( ($2 + {k}) % 1000 ))\", \"sh\", \"{name}\", to_string({a})]\n  }}"
                ),
                format!("{name}.json"),
            ),
            1 | 7 => (format!("({a} + {b} * 7) % 1000"), name.clone()),
            2 => (
                format!("echo {{ value: {{ n: ({a} + {k}) % 1000, tag: \"{name}\" }} }}"),
                format!("{name}.n"),
            ),
            3 => (
                format!(
                    "exec {{\n    foreach: [1, 2, 3]\n    concurrency: 2\n    cmd: [\"sh\", \"-c\", \"echo \\\"$1 $REEL_IDEMPOTENCY_KEY\\\" >> calls.log; sleep 0.0{sleep}; echo $(( ($2 * $3) % 1000 ))\", \"sh\", \"{name}#${{index}}\", to_string({a}), to_string(item)]\n  }}"
                ),
                format!("({name}[0].json + {name}[2].json) % 1000"),
            ),
            4 => (
                format!("counter {{ tag: \"{name}\", n: ({a} + {b}) % 1000 }}"),
                format!("{name}.n"),
            ),
            5 => (
                format!(
                    "exec {{\n    when: {a} % 2 == {}\n    cmd: [\"sh\", \"-c\", \"echo \\\"$1 $REEL_IDEMPOTENCY_KEY\\\" >> calls.log; echo {k}\", \"sh\", \"{name}\"]\n  }}",
                    k % 3 % 2
                ),
                format!("({name}?.json ?? 500)"),
            ),
            6 => (
                format!(
                    "counter {{\n    foreach: [\"a\", \"b\"]\n    tag: \"{name}#${{index}}\"\n    n: ({b} + index) % 1000\n  }}"
                ),
                format!("({name}[0].n + {name}[1].n) % 1000"),
            ),
            _ => (
                format!(
                    "echo {{\n    foreach: [{a}, {b}, {k}]\n    value: (item + index) % 1000\n  }}"
                ),
                format!("({name}[0] + {name}[1] + {name}[2]) % 1000"),
            ),
        };
        steps.push_str(&format!("  step {name} = {body}\n"));
        int_of.push(int);
    }
    let values: Vec<String> = int_of.iter().map(|e| format!("    {e}")).collect();
    format!(
        "tool counter {{\n  kind: \"effect\"\n  exec: [\"python3\", \"counter.py\"]\n  input {{ tag: string, n: int }}\n  output {{ tag: string, n: int }}\n}}\n\nflow crash {{\n{steps}  output {{\n    values: [\n{}\n    ]\n    s02: s02\n    s03: [for x in s03: x.json]\n  }}\n}}\n",
        values.join(",\n")
    )
}

/// Writes the flow and its tool into `dir`.
fn setup(dir: &Path) {
    write(dir, "flow.reel", &flow_source());
    write(dir, "counter.py", TOOL_PY);
}

/// The calls `calls.log` records, in order: (call, key).
fn read_log(dir: &Path) -> Vec<(CallId, String)> {
    let text = fs::read_to_string(dir.join("calls.log")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let (tag, key) = line.split_once(' ').expect("a log line is `TAG KEY`");
            let call = match tag.split_once('#') {
                Some((step, i)) => (step.to_string(), Some(i.parse().expect("an index"))),
                None => (tag.to_string(), None),
            };
            (call, key.to_string())
        })
        .collect()
}

/// Waits until `calls.log` stops growing: a killed `reel` leaves its tools running (each leads
/// its own process group), and their lines belong before the next resume.
fn settle_log(dir: &Path) {
    let path = dir.join("calls.log");
    let size = || fs::metadata(&path).map_or(0, |m| m.len());
    let mut last = size();
    let mut stable_since = Instant::now();
    let began = Instant::now();
    while stable_since.elapsed() < Duration::from_millis(300) {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "calls.log never settles"
        );
        std::thread::sleep(Duration::from_millis(25));
        let now = size();
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
    }
}

/// What a journal says, as far as the checks need.
#[derive(Default, Debug)]
struct Journal {
    /// Steps with `step_succeeded`.
    succeeded: BTreeSet<String>,
    /// Calls whose result was recorded (`effect_recorded` or `call_succeeded`).
    done: BTreeSet<CallId>,
    /// Calls with a `step_started`, and the keys they were started with.
    started: BTreeMap<CallId, BTreeSet<String>>,
    /// Whether `run_finished` is there.
    finished: bool,
    /// Calls a resume found with an unknown outcome and repeated (`unknown_outcome`), with the
    /// key they were marked with.
    repeated: BTreeMap<CallId, BTreeSet<String>>,
}

impl Journal {
    /// Calls started and not finished: in flight when the journal ends.
    fn in_flight(&self) -> BTreeSet<CallId> {
        self.started
            .keys()
            .filter(|c| !self.done.contains(*c))
            .cloned()
            .collect()
    }
}

/// The command `reel ARGS` in `dir` against the store `home`.
fn reel_cmd(dir: &Path, home: &Home, args: &[&str]) -> Command {
    let mut command = reel(dir, args);
    command.env(home.var, &home.value);
    command
}

fn read_journal(dir: &Path, home: &Home, run_id: &str) -> Journal {
    let r = run(reel_cmd(dir, home, &["events", run_id, "--json"]));
    assert_eq!(r.status, 0, "{r:?}");
    let events: Value = serde_json::from_str(&r.stdout).expect("events --json is JSON");
    let mut j = Journal::default();
    for e in events.as_array().expect("an array of events") {
        let step = e["step"].as_str().map(str::to_string);
        let index = e["index"].as_u64().map(|i| i as u32);
        match e["kind"].as_str().unwrap_or_default() {
            "step_succeeded" => {
                j.succeeded.insert(step.unwrap());
            }
            "effect_recorded" | "call_succeeded" => {
                j.done.insert((step.unwrap(), index));
            }
            "step_started" => {
                let key = e["data"]["key"].as_str().unwrap_or("-").to_string();
                j.started
                    .entry((step.unwrap(), index))
                    .or_default()
                    .insert(key);
            }
            "run_finished" => j.finished = true,
            "unknown_outcome" => {
                assert_eq!(e["data"]["then"], "repeated", "{e}");
                let key = e["data"]["key"].as_str().unwrap_or("-").to_string();
                j.repeated
                    .entry((step.unwrap(), index))
                    .or_default()
                    .insert(key);
            }
            _ => {}
        }
    }
    j
}

/// The newest run of the store, if any was recorded.
fn newest_run(dir: &Path, home: &Home) -> Option<String> {
    let r = run(reel_cmd(dir, home, &["runs", "--json"]));
    assert_eq!(r.status, 0, "{r:?}");
    let runs: Value = serde_json::from_str(&r.stdout).expect("runs --json is JSON");
    runs.as_array()
        .and_then(|a| a.first())
        .map(|r| r["run"].as_str().expect("a run id").to_string())
}

/// Spawns `command` with its output going to files under `out`, named `name`.
fn spawn(mut command: Command, out: &Path, name: &str) -> (Child, PathBuf) {
    let stdout = out.join(format!("{name}.out"));
    let stderr = out.join(format!("{name}.err"));
    let child = command
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout).unwrap())
        .stderr(fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("reel starts");
    (child, stdout)
}

/// Lets `child` run for `delay`, then kills it with SIGKILL unless it has ended; true when it
/// was killed. Either way it has been waited for.
fn kill_after(child: &mut Child, delay: Duration) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2).min(until - Instant::now()));
    }
    if child.try_wait().unwrap().is_some() {
        return false;
    }
    // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed");
    child.wait().unwrap();
    true
}

/// The `--json` object an attempt printed, when it ran to its end.
fn outcome(child: &mut Child, stdout: &Path) -> Value {
    let status = child.wait().unwrap();
    let text = fs::read_to_string(stdout).unwrap();
    let stderr = fs::read_to_string(stdout.with_extension("err")).unwrap_or_default();
    assert!(
        status.success(),
        "reel exited with {status}: stdout {text}, stderr {stderr}"
    );
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}; stderr {stderr}"))
}

/// One uninterrupted run: its output, the calls it logged and how long it took.
fn reference(store: Store) -> (Value, Vec<(CallId, String)>, Duration) {
    let dir = temp();
    setup(dir.path());
    let home = Home::new(store, dir.path());
    let began = Instant::now();
    let (mut child, stdout) = spawn(
        reel_cmd(dir.path(), &home, &["run", "flow.reel", "--json"]),
        dir.path(),
        "ref",
    );
    let out = outcome(&mut child, &stdout);
    let took = began.elapsed();
    assert_eq!(out["status"], "succeeded", "{out}");
    (out["output"].clone(), read_log(dir.path()), took)
}

/// What happened to one crashed run, for the failure message.
struct Trace {
    lines: Vec<String>,
    /// Resumes of a run whose journal had begun and not ended: the crashes that mattered.
    resumed_mid_run: usize,
    /// Invocations repeated after a crash.
    repeated: usize,
}

impl Trace {
    fn note(&mut self, s: String) {
        self.lines.push(s);
    }
    fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// One run killed and resumed until it ends; checks every promise against the log and journal.
fn crashed_run(
    store: Store,
    mode: &str,
    rng: &mut StdRng,
    reference: &(Value, Vec<(CallId, String)>, Duration),
    span: &mut u64,
    trace: &mut Trace,
) {
    let dir = temp();
    let elsewhere = temp();
    let out = temp();
    setup(dir.path());
    let home = Home::new(store, dir.path());

    // The first attempt, killed; started again while it was killed before recording anything.
    let mut attempt = 0;
    let run_id = loop {
        let delay = Duration::from_millis(rng.random_range(0..*span));
        let began = Instant::now();
        let (mut child, stdout) = spawn(
            reel_cmd(
                dir.path(),
                &home,
                &["run", "flow.reel", "--durability", mode, "--json"],
            ),
            out.path(),
            &format!("a{attempt}"),
        );
        attempt += 1;
        let killed = kill_after(&mut child, delay);
        trace.note(format!("run: kill at {delay:?}, killed={killed}"));
        if !killed {
            let o = outcome(&mut child, &stdout);
            assert_eq!(o["status"], "succeeded", "{o}");
            // A whole run took this long: later kills are drawn within it, so that a reference
            // run slowed by the machine's load at the start does not send them past the end.
            *span = (*span).min(began.elapsed().as_millis() as u64).max(1);
            break o["run"].as_str().unwrap().to_string();
        }
        settle_log(dir.path());
        if let Some(id) = newest_run(dir.path(), &home) {
            break id;
        }
        assert!(
            read_log(dir.path()).is_empty(),
            "a call ran for a run that was never recorded"
        );
    };

    let mut final_output = None;
    let mut kills = 0;
    let mut round = 0;
    while final_output.is_none() {
        settle_log(dir.path());
        let before = read_journal(dir.path(), &home, &run_id);
        let log_before = read_log(dir.path());
        if before.finished {
            // The first attempt (or a resume) ran to its end before the kill.
            let r = run(reel_cmd(dir.path(), &home, &["resume", &run_id, "--json"]));
            assert_eq!(r.status, 0, "{r:?}");
            final_output = Some(json(&r));
            break;
        }
        trace.resumed_mid_run += 1;
        let cwd = if round % 2 == 0 {
            dir.path()
        } else {
            elsewhere.path()
        };
        let (mut child, stdout) = spawn(
            reel_cmd(cwd, &home, &["resume", &run_id, "--json"]),
            out.path(),
            &format!("r{round}"),
        );
        round += 1;
        let killed = if kills < KILLS_PER_RUN {
            kills += 1;
            let delay = Duration::from_millis(rng.random_range(0..*span));
            let killed = kill_after(&mut child, delay);
            trace.note(format!(
                "resume {round} from {}: kill at {delay:?}, killed={killed}",
                if cwd == dir.path() {
                    "the run's directory"
                } else {
                    "elsewhere"
                }
            ));
            killed
        } else {
            trace.note(format!("resume {round}: to the end"));
            false
        };
        if !killed {
            let o = outcome(&mut child, &stdout);
            assert_eq!(o["status"], "succeeded", "{o}\n{}", trace.text());
            final_output = Some(o);
        }
        settle_log(dir.path());
        let after = read_journal(dir.path(), &home, &run_id);
        check_resume(
            mode,
            &before,
            &after,
            &log_before,
            &read_log(dir.path()),
            trace,
        );
    }

    // The run ends with the output of an uninterrupted run.
    let final_output = final_output.unwrap();
    assert_eq!(
        final_output["output"],
        reference.0,
        "{mode}: the output differs from an uninterrupted run\n{}",
        trace.text()
    );

    // Every call ran, and every invocation of a call carried one key: the one its
    // `step_started` events record.
    let log = read_log(dir.path());
    let journal = read_journal(dir.path(), &home, &run_id);
    let calls: BTreeSet<&CallId> = log.iter().map(|(c, _)| c).collect();
    let expected: BTreeSet<&CallId> = reference.1.iter().map(|(c, _)| c).collect();
    assert_eq!(calls, expected, "{mode}: the calls made\n{}", trace.text());
    let mut keys: BTreeMap<&CallId, BTreeSet<&str>> = BTreeMap::new();
    for (c, k) in &log {
        keys.entry(c).or_default().insert(k);
    }
    for (call, ks) in keys {
        assert_eq!(
            ks.len(),
            1,
            "{mode}: {call:?} ran with several keys: {ks:?}\n{}",
            trace.text()
        );
        let key = *ks.iter().next().unwrap();
        assert_eq!(key.len(), 64, "{mode}: {call:?}: key {key}");
        let recorded = journal.started.get(call).unwrap_or_else(|| {
            panic!(
                "{mode}: {call:?} ran but has no step_started\n{}",
                trace.text()
            )
        });
        assert_eq!(
            recorded.iter().map(String::as_str).collect::<Vec<_>>(),
            vec![key],
            "{mode}: {call:?}: the keys of its step_started events and of its invocations\n{}",
            trace.text()
        );
    }
}

/// What one resume (and the kill before it) may have repeated.
fn check_resume(
    mode: &str,
    before: &Journal,
    after: &Journal,
    log_before: &[(CallId, String)],
    log_after: &[(CallId, String)],
    trace: &mut Trace,
) {
    let ran_before: BTreeSet<&CallId> = log_before.iter().map(|(c, _)| c).collect();
    if mode == "durable" {
        // Write-ahead: every call that ran had its start recorded first.
        for c in &ran_before {
            assert!(
                before.started.contains_key(*c),
                "durable: {c:?} ran without a recorded step_started\n{}",
                trace.text()
            );
        }
    }
    let in_flight = before.in_flight();
    for (call, _) in &log_after[log_before.len()..] {
        if ran_before.contains(call) {
            trace.repeated += 1;
        }
        assert!(
            !before.succeeded.contains(&call.0),
            "{mode}: step `{}` ran again after its success was recorded\n{}",
            call.0,
            trace.text()
        );
        assert!(
            !before.done.contains(call),
            "{mode}: {call:?} ran again after its result was recorded\n{}",
            trace.text()
        );
        if mode == "durable" && ran_before.contains(call) {
            assert!(
                in_flight.contains(call),
                "durable: {call:?} was repeated but was not in flight at the kill\n{}",
                trace.text()
            );
        }
        // A call made again whose start had landed is an unknown outcome: the journal says
        // so, with the key of that start. (In `durable` mode the mark is synced before the
        // call is made again; in `fast` mode a kill may land before it is committed, and the
        // next resume marks the call then.)
        if mode == "durable" && in_flight.contains(call) {
            assert_eq!(
                after.repeated.get(call),
                before.started.get(call),
                "{mode}: {call:?} was made again after an unknown outcome without its mark\n{}",
                trace.text()
            );
        }
    }
}

fn crash_mode(store: Store, mode: &str) {
    let seed: u64 = std::env::var("REEL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let reference = reference(store);
    assert!(
        reference.1.len() > 30,
        "the flow makes its calls: {:?}",
        reference.1
    );
    let (mut resumed, mut repeated) = (0, 0);
    // Kills are drawn within this many milliseconds of a start: the reference run's time at
    // first, then the shortest whole run seen (see `crashed_run`).
    let mut span = reference.2.as_millis() as u64 + 100;
    for i in 0..RUNS_PER_MODE {
        let mut trace = Trace {
            lines: vec![format!(
                "{store:?}, mode {mode}, seed {seed} (REEL_CRASH_SEED={seed} repeats it), run {i}"
            )],
            resumed_mid_run: 0,
            repeated: 0,
        };
        crashed_run(store, mode, &mut rng, &reference, &mut span, &mut trace);
        eprintln!("{}", trace.text());
        resumed += trace.resumed_mid_run;
        repeated += trace.repeated;
    }
    eprintln!(
        "{store:?}, {mode}: seed {seed}, reference run {:?}, kills drawn within {span} ms at the end, {resumed} resumes of interrupted runs, {repeated} invocations repeated",
        reference.2
    );
    // The kills must land inside runs, or this test tests nothing.
    assert!(
        resumed >= RUNS_PER_MODE / 2,
        "{store:?}, {mode}: only {resumed} resumes of interrupted runs (seed {seed})"
    );
}

#[test]
fn the_generated_flow_checks_clean() {
    let dir = temp();
    setup(dir.path());
    let r = reel_in(dir.path(), &["check", "flow.reel"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
}

#[test]
fn killed_fast_runs_resume_to_the_same_output_without_repeating_recorded_effects() {
    crash_mode(Store::Sqlite, "fast");
}

#[test]
fn killed_durable_runs_repeat_only_the_calls_in_flight() {
    crash_mode(Store::Sqlite, "durable");
}

#[test]
fn killed_fast_runs_on_postgres_resume_to_the_same_output() {
    crash_mode(Store::Postgres, "fast");
}

#[test]
fn killed_durable_runs_on_postgres_repeat_only_the_calls_in_flight() {
    crash_mode(Store::Postgres, "durable");
}

/// True while `pid` names a live process (a zombie waiting for its reaper counts as dead).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command's name, which is in parentheses and may hold spaces.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

#[test]
fn a_tool_process_dies_with_the_reel_that_started_it() {
    // Without this, a call in flight when `reel` is killed goes on and may make its effect
    // after a resume has made the same call again.
    let dir = temp();
    write(
        dir.path(),
        "hang.reel",
        "flow hang {\n  step wait = exec { cmd: [\"sh\", \"-c\", \"echo $$ > tool.pid; exec sleep 60\"] }\n  output wait.stdout\n}\n",
    );
    let home = dir.path().join(".reel");
    let mut command = reel(dir.path(), &["run", "hang.reel"]);
    command.env("REEL_HOME", &home);
    let (mut child, _) = spawn(command, dir.path(), "hang");
    let pid_file = dir.path().join("tool.pid");
    let started = Instant::now();
    let tool: u32 = loop {
        if let Some(pid) = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "reel ended before its tool started"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the tool never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(alive(tool), "the tool {tool} is not running");
    assert!(
        kill_after(&mut child, Duration::ZERO),
        "reel ended by itself"
    );
    // The kernel signals the tool as `reel` exits; give it the time to be reaped, not to act.
    let killed = Instant::now();
    while alive(tool) && killed.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !alive(tool),
        "the tool {tool} outlived the reel that started it"
    );
}
