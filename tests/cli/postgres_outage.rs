//! The PostgreSQL server away for a while in the middle of runs: a `reel run` whose steps
//! outlast the outage, and a `reel worker` waiting meanwhile, both go on when it is back,
//! with nothing lost or done twice.
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

use crate::postgres::{database, on_postgres};
use crate::support::{json, reel, temp, write};

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
    let (server, name) = url.rsplit_once('/').expect("a database in the URL");
    let mut admin = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test server: {e}"));
    admin
        .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {}", !on))
        .unwrap();
    if on {
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                &[&name],
            )
            .unwrap();
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
