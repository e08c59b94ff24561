//! The PostgreSQL server away for a while in the middle of runs: a `reel run` whose steps
//! outlast the outage, and a `reel worker` waiting meanwhile, both go on when it is back,
//! with nothing lost or done twice. And sessions ended in the middle of a run's writes, at
//! chosen batches (the writer's own fault, `REEL_STORE_FAULT`) and wherever they fall: the run
//! goes on, each batch written once.
//!
//! The outage is the test database's alone, so that the other tests on the shared server go
//! on: every session of it is ended (`pg_terminate_backend`, the `FATAL` a server's restart
//! sends its sessions too) and new ones are refused (`ALLOW_CONNECTIONS false`) for two
//! seconds. A real restart of the whole server was checked by hand the same way (see
//! `docs/reliability.md`).

// edge: the test times a real outage, so it reads the real clock and sleeps.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::postgres::{admin, database, end_sessions, on_postgres};
use crate::support::{json, reel, reel_env, temp, write};

/// Two steps, each longer than half the outage, whose calls log their idempotency keys.
const SLOW: &str = r#"flow slow {
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; sleep 1.5; echo 1"]
  }
  step b = exec {
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; sleep 1.5; echo $(( $1 + 1 ))", "sh", to_string(a.json)]
  }
  output b.json
}
"#;

/// A run that waits for a signal, then makes an effect of its payload.
const SIGNALED: &str = r#"flow signaled {
  step go = signal { name: "go", timeout: 1d }
  step c = exec {
    cmd: ["sh", "-c", "echo \"c $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $1", "sh", to_string(go.v)]
  }
  output c.json
}
"#;

/// Ends every session of the test's database and refuses new ones, or lets them in again.
fn outage(url: &str, on: bool) {
    let (mut admin, name) = admin(url);
    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {}", !on))
        .unwrap();
    if on {
        end_sessions(&mut admin, &name);
    }
}

/// `reel ARGS` started on the store at `url`, its output to files in `dir`.
fn spawn(dir: &std::path::Path, url: &str, args: &[&str], name: &str) -> Child {
    reel(dir, args)
        .env("REEL_STORE_URL", url)
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.join(format!("{name}.out"))).unwrap())
        .stderr(fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .expect("reel starts")
}

#[test]
fn runs_and_a_worker_go_on_when_the_server_is_back_from_an_outage() {
    let dir = temp();
    let d = dir.path();
    write(d, "slow.reel", SLOW);
    write(d, "signaled.reel", SIGNALED);
    let url = database();
    let parked = on_postgres(d, &url, &["run", "signaled.reel", "--json"]);
    assert_eq!(parked.status, 0, "{parked:?}");
    let parked = json(&parked)["run"].as_str().unwrap().to_string();
    let mut worker = spawn(d, &url, &["worker", "--poll-ms", "50"], "worker");
    let runs: Vec<Child> = ["fast", "durable"]
        .iter()
        .map(|mode| {
            spawn(
                d,
                &url,
                &["run", "slow.reel", "--durability", mode, "--json"],
                &format!("run-{mode}"),
            )
        })
        .collect();
    // In the middle of step `a` of both runs (both calls began: their lines are in the log,
    // however slowly the machine started them), while the worker waits for its next look.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::read_to_string(d.join("calls.log")).map_or(0, |log| log.lines().count()) < 2 {
        assert!(
            Instant::now() < deadline,
            "the runs' first calls never began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    outage(&url, true);
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    outage(&url, false);

    for (mut run, mode) in runs.into_iter().zip(["fast", "durable"]) {
        let status = run.wait().unwrap();
        let err = fs::read_to_string(d.join(format!("run-{mode}.err"))).unwrap();
        assert!(
            status.success(),
            "the {mode} run after the outage: {status}\n{err}"
        );
        let out: Value =
            serde_json::from_str(&fs::read_to_string(d.join(format!("run-{mode}.out"))).unwrap())
                .unwrap();
        assert_eq!(out["status"], "succeeded", "{out}");
        assert_eq!(out["output"], 2, "{out}");
    }
    // The worker rode the outage out: it takes up the parked run once it is signaled.
    let sent = on_postgres(d, &url, &["signal", &parked, "go", r#"{"v": 7}"#]);
    assert_eq!(sent.status, 0, "{sent:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = on_postgres(d, &url, &["runs", "--json"]);
        let rows = json(&shown);
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run"] == parked.as_str())
            .unwrap()
            .clone();
        if row["status"] == "succeeded" {
            break;
        }
        assert!(
            worker.try_wait().unwrap().is_none(),
            "the worker stopped: {}",
            fs::read_to_string(d.join("worker.err")).unwrap()
        );
        assert!(Instant::now() < deadline, "the signaled run: {row}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill only sends a signal, to a child not yet waited for.
    let rc = unsafe { libc::kill(worker.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = worker.wait().unwrap();
    let said = fs::read_to_string(d.join("worker.err")).unwrap();
    assert!(status.success(), "worker: {status}\n{said}");
    assert!(!said.contains("panicked"), "{said}");

    // Every call made once, each journal without a gap, ended once.
    let log = fs::read_to_string(d.join("calls.log")).unwrap();
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(
        calls.len(),
        5,
        "two runs of two steps and the signaled one: {log}"
    );
    let keys: std::collections::BTreeSet<&str> =
        calls.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(keys.len(), calls.len(), "a call made twice: {log}");
    let all = json(&on_postgres(d, &url, &["runs", "--json", "--check"]));
    for row in all.as_array().unwrap() {
        let id = row["run"].as_str().unwrap();
        assert_eq!(row["status"], "succeeded", "{row}");
        assert_eq!(row["holes"], 0, "{row}");
        let events = json(&on_postgres(d, &url, &["events", id, "--json"]));
        let kinds: Vec<&str> = events
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, e)| {
                assert_eq!(e["seq"], i, "{id}: a gap or a repeat");
                e["kind"].as_str().unwrap()
            })
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "run_finished").count(),
            1,
            "{id}: {kinds:?}"
        );
    }
    eprintln!(
        "outage of 2 s ended {:?} ago; the worker said:\n{said}",
        began.elapsed()
    );
}

/// A flow of `n` steps one after another, each a call that logs its idempotency key.
fn chain(n: usize) -> String {
    let mut flow = String::from("flow chain {\n");
    flow.push_str(
        "  step s0 = exec { cmd: [\"sh\", \"-c\", \"echo \\\"s0 $REEL_IDEMPOTENCY_KEY\\\" >> calls.log; echo 0\"] }\n",
    );
    for i in 1..n {
        flow.push_str(&format!(
            "  step s{i} = exec {{ cmd: [\"sh\", \"-c\", \"echo \\\"s{i} $REEL_IDEMPOTENCY_KEY\\\" >> calls.log; echo $(( $1 + 1 ))\", \"sh\", to_string(s{p}.json)] }}\n",
            p = i - 1
        ));
    }
    flow.push_str(&format!("  output s{}.json\n}}\n", n - 1));
    flow
}

/// Checks that the `chain(n)` run `r` succeeded with every call made once and a journal
/// without a gap or a repeat, in `dir`'s store at `url`; `calls.log` is then emptied.
fn check_chain(dir: &std::path::Path, url: &str, r: &crate::support::Run, n: usize, what: &str) {
    assert_eq!(r.status, 0, "{what}: {r:?}");
    let out = json(r);
    assert_eq!(out["output"], n - 1, "{what}: {out}");
    let log = fs::read_to_string(dir.join("calls.log")).unwrap();
    let keys: std::collections::BTreeSet<&str> = log.lines().collect();
    assert_eq!(
        log.lines().count(),
        n,
        "{what}: a call missing or made twice"
    );
    assert_eq!(keys.len(), n, "{what}: a call made twice");
    let id = out["run"].as_str().unwrap();
    let events = json(&on_postgres(dir, url, &["events", id, "--json"]));
    for (i, e) in events.as_array().unwrap().iter().enumerate() {
        assert_eq!(e["seq"], i, "{what}: a gap or a repeat");
    }
    let succeeded = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "step_succeeded")
        .count();
    assert_eq!(succeeded, n, "{what}: each step ends once");
    fs::write(dir.join("calls.log"), "").unwrap();
}

#[test]
fn a_batch_whose_session_ended_is_written_once_whether_or_not_it_was_committed() {
    // The writer's session ends (as a restart, a failover or an administrator ends it) before
    // a batch goes out, or once it is committed but before the writer reads that it was, three
    // batches in a row, in the middle of a run, at its end, and at its first two batches (its
    // flow's spec and its creation): the writer reads the runs'
    // rows on a new connection, writes again what was not committed and answers what was.
    let dir = temp();
    let d = dir.path();
    write(d, "chain.reel", &chain(6));
    let url = database();
    for mode in ["durable", "fast"] {
        for fault in [
            "answer-lost@effect_recorded:s2*3",
            "session-ends@effect_recorded:s2*3",
            "answer-lost@run_finished*3",
            "session-ends@commit=1*2",
            "answer-lost@commit=1*2",
        ] {
            let r = reel_env(
                d,
                &["run", "chain.reel", "--durability", mode, "--json"],
                &[("REEL_STORE_URL", &url), ("REEL_STORE_FAULT", fault)],
            );
            check_chain(d, &url, &r, 6, &format!("{mode}, {fault}"));
        }
    }
}

#[test]
fn a_run_goes_on_while_its_sessions_are_ended_again_and_again() {
    // Wherever the ends fall: between batches, in the middle of one, at its commit.
    let dir = temp();
    let d = dir.path();
    let n = 120;
    write(d, "chain.reel", &chain(n));
    let url = database();
    for mode in ["durable", "fast"] {
        let mut running = reel(d, &["run", "chain.reel", "--durability", mode, "--json"])
            .env("REEL_STORE_URL", &url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("reel starts");
        let (mut admin, name) = admin(&url);
        // Once the run's calls began, its sessions are ended every 60 ms while it runs.
        let deadline = Instant::now() + Duration::from_secs(60);
        while fs::read_to_string(d.join("calls.log")).map_or(0, |log| log.lines().count()) < 3 {
            assert!(Instant::now() < deadline, "the run's calls never began");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut ended = 0;
        while running.try_wait().unwrap().is_none() && Instant::now() < deadline {
            ended += end_sessions(&mut admin, &name);
            std::thread::sleep(Duration::from_millis(60));
        }
        let r = crate::support::Run::from(running.wait_with_output().unwrap());
        check_chain(d, &url, &r, n, &format!("{mode}, {ended} sessions ended"));
        assert!(ended >= 3, "{mode}: only {ended} sessions were ended");
    }
}

#[test]
fn a_worker_whose_look_lost_its_answer_takes_up_what_it_claimed_at_its_next_look() {
    // The look's claim is committed and the session ends before the worker reads it: the
    // signaled run is the worker's, though it never heard so. Its next look, 250 ms later,
    // takes it up again, rather than leaving it until its 15 s lease runs out.
    let dir = temp();
    let d = dir.path();
    write(d, "signaled.reel", SIGNALED);
    let url = database();
    let parked = on_postgres(d, &url, &["run", "signaled.reel", "--json"]);
    assert_eq!(parked.status, 0, "{parked:?}");
    let parked = json(&parked)["run"].as_str().unwrap().to_string();
    let sent = on_postgres(d, &url, &["signal", &parked, "go", r#"{"v": 7}"#]);
    assert_eq!(sent.status, 0, "{sent:?}");
    let began = Instant::now();
    let worker = reel_env(
        d,
        &["worker", "--until-idle"],
        &[
            ("REEL_STORE_URL", &url),
            ("REEL_STORE_FAULT", "answer-lost@look*1"),
        ],
    );
    let took = began.elapsed();
    assert_eq!(worker.status, 0, "{worker:?}");
    assert!(
        worker.stderr.contains("cannot be reached") && worker.stderr.contains("answers again"),
        "the look's session ended: {worker:?}"
    );
    assert!(
        worker.stderr.contains(&format!("run {parked} succeeded")),
        "{worker:?}"
    );
    assert!(
        took < Duration::from_secs(15),
        "the run waited for its lease to run out: {took:?}"
    );
    let log = fs::read_to_string(d.join("calls.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "the call made once: {log}");
}
