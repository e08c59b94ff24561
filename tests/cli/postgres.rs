//! `reel` with its store on PostgreSQL (`REEL_STORE_URL`): the same flows give the same output
//! as on SQLite, and every command reads and writes the same runs there.
//!
//! These tests need the private server `scripts/test.sh` starts (it sets
//! `REEL_TEST_POSTGRES_URL`); without it they fail, saying so.

use std::path::Path;

use crate::support::{Run, json, reel_env, temp, write};

#[path = "../../runtime/store/tests/test_server/mod.rs"]
mod test_server;

/// A fresh database on the test server, as a store URL.
pub(crate) fn database() -> String {
    test_server::fresh_database("reel_cli")
}

/// An administrator's connection to the test server, and the name of the database of `url`
/// (a database of [`database`]).
pub(crate) fn admin(url: &str) -> (postgres::Client, String) {
    let (server, name) = url.rsplit_once('/').expect("a database in the URL");
    let client = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test server: {e}"));
    (client, name.to_string())
}

/// Ends every session of the database `name` (as a server's restart or an administrator
/// does, with `FATAL`); how many.
pub(crate) fn end_sessions(admin: &mut postgres::Client, name: &str) -> u64 {
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&name],
        )
        .unwrap()
}

/// Runs `reel ARGS` in `dir` with its store on the database at `url`.
pub(crate) fn on_postgres(dir: &Path, url: &str, args: &[&str]) -> Run {
    reel_env(dir, args, &[("REEL_STORE_URL", url)])
}

fn on_sqlite(dir: &Path, args: &[&str]) -> Run {
    let home = dir.join(".reel");
    reel_env(dir, args, &[("REEL_HOME", home.to_str().unwrap())])
}

#[test]
fn an_example_flow_gives_the_same_output_on_both_stores() {
    let example = include_str!("../../examples/greet.reel");
    let (a, b) = (temp(), temp());
    write(a.path(), "greet.reel", example);
    write(b.path(), "greet.reel", example);
    let url = database();
    let sqlite = on_sqlite(a.path(), &["run", "greet.reel"]);
    let pg = on_postgres(b.path(), &url, &["run", "greet.reel"]);
    assert_eq!(sqlite.status, 0, "{sqlite:?}");
    assert_eq!(pg.status, 0, "{pg:?}");
    assert_eq!(pg.stdout, sqlite.stdout);
    assert_eq!(
        std::fs::read_to_string(b.path().join("card.txt")).unwrap(),
        std::fs::read_to_string(a.path().join("card.txt")).unwrap()
    );
    // Nothing went to a SQLite store beside the flow.
    assert!(!b.path().join(".reel").exists());

    let runs = json(&on_postgres(b.path(), &url, &["runs", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["status"], "succeeded");
    let id = runs[0]["run"].as_str().unwrap().to_string();
    let events = on_postgres(b.path(), &url, &["events", &id]);
    assert_eq!(events.status, 0, "{events:?}");
    assert!(events.stdout.contains("run_finished"), "{events:?}");
    let logs = on_postgres(b.path(), &url, &["logs", &id]);
    assert_eq!(logs.status, 0, "{logs:?}");
    let replay = on_postgres(b.path(), &url, &["replay", &id]);
    assert_eq!(replay.status, 0, "{replay:?}");
    // The run kept its FlowSpec's binary form beside the JSON, and the clean takes both.
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let specs = |db: &mut postgres::Client| -> (i64, i64) {
        let row = db
            .query_one(
                "SELECT (SELECT COUNT(*) FROM reel.specs), (SELECT COUNT(*) FROM reel.spec_binaries)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(specs(&mut db), (1, 1));
    let clean = on_postgres(b.path(), &url, &["clean", "--all", "--json"]);
    assert_eq!(clean.status, 0, "{clean:?}");
    assert_eq!(json(&clean)["runs"], serde_json::json!([id]));
    assert_eq!(specs(&mut db), (0, 0));
    let runs = json(&on_postgres(b.path(), &url, &["runs", "--json"]));
    assert_eq!(runs, serde_json::json!([]));
}

/// A replay long enough to read its recorded values ahead on a thread of its own (1,024
/// results or more) reads them from PostgreSQL beside its own reads, and verifies.
#[test]
fn a_long_run_on_postgres_replays_and_verifies() {
    let dir = temp();
    let steps = 1100;
    let mut flow = String::from("flow chain {\n  step s0 = echo { value: 0 }\n");
    for i in 1..steps {
        flow.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    flow.push_str(&format!("  output s{}\n}}\n", steps - 1));
    write(dir.path(), "chain.reel", &flow);
    let url = database();
    let run = on_postgres(dir.path(), &url, &["run", "chain.reel", "--json"]);
    assert_eq!(run.status, 0, "{run:?}");
    let id = json(&run)["run"].as_str().unwrap().to_string();
    let replay = on_postgres(dir.path(), &url, &["replay", &id, "--verify", "--json"]);
    assert_eq!(replay.status, 0, "{replay:?}");
    let report = json(&replay);
    assert_eq!(report["status"], "succeeded", "{report}");
    assert_eq!(report["output"], steps - 1, "{report}");
    assert_eq!(report["calls"], steps, "{report}");
}

#[test]
fn a_run_parked_on_postgres_is_signaled_and_finished_by_a_worker_elsewhere() {
    let flow =
        "flow wait_for_go {\n  step go = signal { name: \"go\", timeout: 1d }\n  output go\n}\n";
    let (starter, worker) = (temp(), temp());
    write(starter.path(), "wait.reel", flow);
    let url = database();
    let started = on_postgres(starter.path(), &url, &["run", "wait.reel", "--json"]);
    assert_eq!(started.status, 0, "{started:?}");
    let id = json(&started)["run"].as_str().unwrap().to_string();
    let sent = on_postgres(worker.path(), &url, &["signal", &id, "go", "{\"ok\":true}"]);
    assert_eq!(sent.status, 0, "{sent:?}");
    // Another directory (standing for another machine) finishes it from the database alone.
    let done = on_postgres(
        worker.path(),
        &url,
        &["worker", "--until-idle", "--poll-ms", "20"],
    );
    assert_eq!(done.status, 0, "{done:?}");
    let runs = json(&on_postgres(worker.path(), &url, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    let events = on_postgres(starter.path(), &url, &["events", &id]);
    assert!(events.stdout.contains("signal_received"), "{events:?}");
}

#[test]
fn a_store_url_password_is_never_shown() {
    let dir = temp();
    let url = "postgres://reel:hunter2@127.0.0.1:9/nowhere?connect_timeout=2";
    let r = on_postgres(dir.path(), url, &["runs"]);
    assert_ne!(r.status, 0, "{r:?}");
    assert!(
        r.stderr.contains("postgres://reel@127.0.0.1:9/nowhere"),
        "{r:?}"
    );
    assert!(
        !r.stderr.contains("hunter2") && !r.stdout.contains("hunter2"),
        "{r:?}"
    );
    let bad = on_postgres(dir.path(), "mysql://reel:hunter2@x/y", &["runs"]);
    assert_eq!(bad.status, 2, "{bad:?}");
    assert!(bad.stderr.contains("REEL_STORE_URL"), "{bad:?}");
    assert!(!bad.stderr.contains("hunter2"), "{bad:?}");
}

/// A flow with `foreach` calls, logs and a wait for a signal, for the copy.
const MIXED: &str = "flow mixed {
  step counts = exec {
    foreach: [\"a\", \"b\"]
    cmd: [\"sh\", \"-c\", \"echo working on $0 >&2; echo done\", item]
  }
  step go = signal { name: \"go\", timeout: 1d, after: [counts] }
  output go
}
";

#[test]
fn store_copy_moves_every_run_to_postgres_and_back_unchanged() {
    let dir = temp();
    write(
        dir.path(),
        "greet.reel",
        include_str!("../../examples/greet.reel"),
    );
    let first = on_sqlite(dir.path(), &["run", "greet.reel", "--json"]);
    assert_eq!(first.status, 0, "{first:?}");
    let id = json(&first)["run"].as_str().unwrap().to_string();
    // A second run of the same flow: two runs copied, one FlowSpec.
    let second = on_sqlite(dir.path(), &["run", "greet.reel", "--json"]);
    assert_eq!(second.status, 0, "{second:?}");
    // And a run with what the greeting has not: `foreach` calls (by index), logs, and a
    // signal sent while it waits (not yet consumed).
    write(dir.path(), "mixed.reel", MIXED);
    let mixed = on_sqlite(dir.path(), &["run", "mixed.reel", "--json"]);
    assert_eq!(mixed.status, 0, "{mixed:?}");
    let mixed = json(&mixed)["run"].as_str().unwrap().to_string();
    let sent = on_sqlite(
        dir.path(),
        &["signal", &mixed, "go", r#"{"by": "the test"}"#],
    );
    assert_eq!(sent.status, 0, "{sent:?}");
    let url = database();
    let home = dir.path().join(".reel");
    let back = dir.path().join("back");
    let there = reel_env(
        dir.path(),
        &[
            "store",
            "copy",
            "--from",
            home.to_str().unwrap(),
            "--to",
            &url,
            "--json",
        ],
        &[],
    );
    assert_eq!(there.status, 0, "{there:?}");
    assert_eq!(
        (&json(&there)["runs"], &json(&there)["specs"]),
        (&serde_json::json!(3), &serde_json::json!(2)),
        "{there:?}"
    );
    let again = reel_env(
        dir.path(),
        &[
            "store",
            "copy",
            "--from",
            back.to_str().unwrap(),
            "--to",
            &url,
        ],
        &[],
    );
    assert_eq!(again.status, 2, "a missing source is refused: {again:?}");
    let home_back = reel_env(
        dir.path(),
        &[
            "store",
            "copy",
            "--from",
            &url,
            "--to",
            back.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(home_back.status, 0, "{home_back:?}");
    assert_eq!(json(&home_back)["runs"], 3, "{home_back:?}");
    // Each FlowSpec comes with its binary form, which replays read, on both targets.
    let mut there_db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let binaries: i64 = there_db
        .query_one("SELECT count(*) FROM reel.spec_binaries", &[])
        .unwrap()
        .get(0);
    assert_eq!(binaries, 2);
    let back_db = rusqlite::Connection::open(back.join("reel.db")).unwrap();
    let binaries: i64 = back_db
        .query_row("SELECT count(*) FROM spec_binaries", [], |r| r.get(0))
        .unwrap();
    assert_eq!(binaries, 2);

    // The same run, event for event and value for value, in all three stores.
    let events = |env: (&str, &str)| {
        let r = reel_env(dir.path(), &["events", &id, "--json", "--full"], &[env]);
        assert_eq!(r.status, 0, "{r:?}");
        r.stdout
    };
    let original = events(("REEL_HOME", home.to_str().unwrap()));
    assert_eq!(events(("REEL_STORE_URL", &url)), original);
    assert_eq!(events(("REEL_HOME", back.to_str().unwrap())), original);
    let shown = |args: &[&str], env: (&str, &str)| {
        let r = reel_env(dir.path(), args, &[env]);
        assert_eq!(r.status, 0, "{r:?}");
        (r.stdout, r.stderr)
    };
    for args in [
        &["events", &mixed, "--json", "--full"][..],
        &["logs", &mixed][..],
    ] {
        let original = shown(args, ("REEL_HOME", home.to_str().unwrap()));
        assert_eq!(shown(args, ("REEL_STORE_URL", &url)), original, "{args:?}");
        assert_eq!(
            shown(args, ("REEL_HOME", back.to_str().unwrap())),
            original,
            "{args:?}"
        );
    }
    let logs = shown(&["logs", &mixed], ("REEL_STORE_URL", &url));
    assert!(
        logs.0.contains("working on b") || logs.1.contains("working on b"),
        "{logs:?}"
    );
    let runs = |env: (&str, &str)| reel_env(dir.path(), &["runs", "--json"], &[env]).stdout;
    assert_eq!(
        runs(("REEL_STORE_URL", &url)),
        runs(("REEL_HOME", home.to_str().unwrap()))
    );
    let replay = reel_env(dir.path(), &["replay", &id], &[("REEL_STORE_URL", &url)]);
    assert_eq!(replay.status, 0, "{replay:?}");
    // Copying again leaves the runs the target has.
    let twice = reel_env(
        dir.path(),
        &[
            "store",
            "copy",
            "--from",
            home.to_str().unwrap(),
            "--to",
            &url,
            "--json",
        ],
        &[],
    );
    assert_eq!(json(&twice)["skipped"], 3, "{twice:?}");
    // The signal came with the run, still waiting for it: a worker on PostgreSQL finishes it.
    let worker = reel_env(
        dir.path(),
        &["worker", "--until-idle"],
        &[("REEL_STORE_URL", &url)],
    );
    assert_eq!(worker.status, 0, "{worker:?}");
    let ended = shown(&["runs", "--json"], ("REEL_STORE_URL", &url)).0;
    assert!(!ended.contains("\"waiting\""), "{ended}");
}

#[test]
fn two_workers_in_two_directories_finish_each_run_once() {
    let flow = "flow relay {\n  input n: int = 0\n  step go = signal { name: \"go\", timeout: 1d }\n  step nap = sleep { for: 50ms, after: [go] }\n  step said = echo { value: { n: input.n, go: go }, after: [nap] }\n  output said\n}\n";
    let (starter, one, two) = (temp(), temp(), temp());
    write(starter.path(), "relay.reel", flow);
    let url = database();
    let runs = 12;
    let mut ids = Vec::new();
    for n in 0..runs {
        let input = format!("n={n}");
        let r = on_postgres(
            starter.path(),
            &url,
            &["run", "relay.reel", "--input", &input, "--json"],
        );
        assert_eq!(r.status, 0, "{r:?}");
        ids.push(json(&r)["run"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let s = on_postgres(starter.path(), &url, &["signal", id, "go", "1"]);
        assert_eq!(s.status, 0, "{s:?}");
    }
    // Two machines: two directories, two processes, one database.
    let spawn = |dir: &Path| {
        crate::support::reel(dir, &["worker", "--until-idle", "--poll-ms", "20"])
            .env("REEL_STORE_URL", &url)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(one.path()), spawn(two.path()));
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (n, id) in ids.iter().enumerate() {
        let r = on_postgres(starter.path(), &url, &["events", id, "--json"]);
        let events: Vec<serde_json::Value> = json(&r).as_array().unwrap().clone();
        // Every journal's seq runs without a gap, and the run ended once.
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["seq"], i, "{id}: {events:?}");
        }
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "run_finished").count(),
            1,
            "{kinds:?}"
        );
        // Its one call was made and recorded once.
        assert_eq!(
            kinds.iter().filter(|k| **k == "effect_recorded").count(),
            1,
            "{kinds:?}"
        );
        let out = on_postgres(starter.path(), &url, &["runs", "--json"]);
        let row = json(&out)
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run"] == id.as_str())
            .cloned()
            .unwrap();
        assert_eq!(row["status"], "succeeded", "run {n}: {row}");
    }
}

/// Starts `reel run FLOW --json` in `dir` on the database at `url` and stops the process
/// (`SIGSTOP`) once its call has touched `started`: the process, when its call started, and
/// the run's id.
#[cfg(unix)]
// edge: the wait for the call reads the real monotonic clock.
#[allow(clippy::disallowed_methods)]
fn frozen_in_its_call(
    dir: &Path,
    url: &str,
    flow: &str,
) -> (std::process::Child, std::time::Instant, String) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let child = crate::support::reel(dir, &["run", flow, "--json"])
        .env("REEL_STORE_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.join("started").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGSTOP) },
        0
    );
    let runs = json(&on_postgres(dir, url, &["runs", "--json"]));
    let id = runs[0]["run"].as_str().unwrap().to_string();
    (child, start, id)
}

#[cfg(unix)]
#[test]
// edge: the test waits out a real lease, so it reads the real monotonic clock.
#[allow(clippy::disallowed_methods)]
fn a_worker_stopped_past_its_lease_writes_nothing_after_another_takes_its_run() {
    use std::time::Duration;

    let (first, second) = (temp(), temp());
    // The call logs its idempotency key, marks that it started, and takes its time.
    write(
        first.path(),
        "fenced.reel",
        "flow fenced {\n  step slow = exec { cmd: [\"sh\", \"-c\", \"echo $REEL_IDEMPOTENCY_KEY >> calls.log; touch started; sleep 3; echo done\"] }\n  step after = echo { value: slow.stdout }\n  output after\n}\n",
    );
    let url = database();
    let (stopped, start, id) = frozen_in_its_call(first.path(), &url, "fenced.reel");
    // Another machine's idle worker, which would look again only in ten minutes, wakes when
    // the lease runs out (15 s from its last renewal at most) and takes the run over.
    let took = on_postgres(
        second.path(),
        &url,
        &["worker", "--until-idle", "--poll-ms", "600000"],
    );
    assert_eq!(took.status, 0, "{took:?}");
    assert!(
        start.elapsed() < Duration::from_secs(300),
        "the worker took the run over at its poll, not when the lease ran out"
    );
    let journal = |dir: &Path| {
        json(&on_postgres(dir, &url, &["events", &id, "--json"]))
            .as_array()
            .unwrap()
            .clone()
    };
    let finished = journal(second.path());
    // The stopped process wakes up and finds its lease gone: it writes nothing more.
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::kill(stopped.id() as libc::pid_t, libc::SIGCONT) },
        0
    );
    let out = stopped.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("taken over by another process"), "{stderr}");
    let after = journal(second.path());
    assert_eq!(
        after, finished,
        "the stopped process wrote after the takeover: {stderr}"
    );
    for (i, e) in after.iter().enumerate() {
        assert_eq!(e["seq"], i, "{after:?}");
    }
    let kinds: Vec<&str> = after.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "run_finished").count(), 1);
    let runs = json(&on_postgres(second.path(), &url, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    // The call whose result had not landed ran again, with its first key.
    let calls = std::fs::read_to_string(first.path().join("calls.log")).unwrap();
    let keys: Vec<&str> = calls.lines().collect();
    assert_eq!(keys.len(), 2, "{calls}");
    assert_eq!(keys[0], keys[1], "{calls}");
}

#[cfg(unix)]
#[test]
// edge: the test waits out a real lease and a real lock, so it reads the real monotonic clock.
#[allow(clippy::disallowed_methods)]
fn a_run_whose_row_a_frozen_holder_still_locks_is_taken_soon_after_the_lock_goes() {
    use std::time::{Duration, Instant};

    let (first, second) = (temp(), temp());
    write(
        first.path(),
        "held.reel",
        "flow held {\n  step slow = exec { cmd: [\"sh\", \"-c\", \"touch started; sleep 3; echo done\"] }\n  output slow.stdout\n}\n",
    );
    let url = database();
    let (mut holder, _, id) = frozen_in_its_call(first.path(), &url, "held.reel");
    // The frozen holder's transaction, standing in for one caught in the middle of a write:
    // the run's row stays locked past its lease (15 s at most), for 25 s.
    let (locked, row_locked) = std::sync::mpsc::channel();
    let released = {
        let (url, id) = (url.clone(), id.clone());
        std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let mut lock = client.transaction().unwrap();
            lock.query("SELECT 1 FROM reel.runs WHERE id = $1 FOR SHARE", &[&id])
                .unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_secs(25));
            lock.rollback().unwrap();
            Instant::now()
        })
    };
    row_locked.recv().unwrap();
    // A worker that would look again only in ten minutes.
    let took = on_postgres(
        second.path(),
        &url,
        &["worker", "--until-idle", "--poll-ms", "600000"],
    );
    let released = released.join().unwrap();
    assert_eq!(took.status, 0, "{took:?}");
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "the worker took the run {:?} after the lock went, not within seconds",
        released.elapsed()
    );
    let runs = json(&on_postgres(second.path(), &url, &["runs", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A shop whose `charge` step calls `pay.sh`, which fails while `broken` exists.
const SHOP: &str = "tool pay {\n  kind: \"effect\"\n  exec: [\"sh\", \"pay.sh\"]\n  input { amount: int }\n  output { paid: int }\n}\n\nflow shop {\n  step charge = pay { amount: 5 }\n  output charge.paid\n}\n";
const PAY_SH: &str = "read input\nif [ -e broken ]; then echo 'card declined' >&2; exit 1; fi\necho '{\"paid\": 5}'\n";

/// Two project directories holding the shop, one for a SQLite store and one for PostgreSQL.
fn shops() -> (tempfile::TempDir, tempfile::TempDir) {
    let (a, b) = (temp(), temp());
    for dir in [a.path(), b.path()] {
        write(dir, "shop.reel", SHOP);
        write(dir, "pay.sh", PAY_SH);
    }
    (a, b)
}

#[test]
fn a_query_answers_the_same_on_both_stores_and_a_write_is_refused() {
    let url = database();
    let (a, b) = shops();
    let sqlite = |args: &[&str]| on_sqlite(a.path(), args);
    let pg = |args: &[&str]| on_postgres(b.path(), &url, args);
    for dir in [a.path(), b.path()] {
        write(dir, "broken", "");
    }
    for store in [&sqlite as &dyn Fn(&[&str]) -> Run, &pg] {
        assert_eq!(store(&["run", "shop.reel"]).status, 1);
    }
    for dir in [a.path(), b.path()] {
        std::fs::remove_file(dir.join("broken")).unwrap();
    }
    for store in [&sqlite as &dyn Fn(&[&str]) -> Run, &pg] {
        assert_eq!(store(&["run", "shop.reel"]).status, 0);
    }

    // Which runs failed at step `charge`, and how their calls went.
    let query = "SELECT r.status AS run_status, s.status, s.attempts, s.line, c.attempt, c.tool,
                        c.outcome, c.error_code, length(c.idempotency_key) AS key_length
                 FROM reel_runs r JOIN reel_steps s ON s.run = r.id
                      JOIN reel_calls c ON c.run = r.id AND c.step = s.step
                 WHERE s.step = 'charge' ORDER BY r.created_at, c.attempt";
    let on_sqlite = sqlite(&["sql", query]);
    let on_pg = pg(&["sql", query]);
    assert_eq!(on_sqlite.status, 0, "{on_sqlite:?}");
    assert_eq!(on_pg.stdout, on_sqlite.stdout);
    assert_eq!(
        on_sqlite.stdout,
        "run_status  status     attempts  line  attempt  tool  outcome    error_code      key_length\n\
         failed      failed     1         9     1        pay   failed     tool.exec.exit  64\n\
         succeeded   succeeded  1         9     1        pay   succeeded  NULL            64\n"
    );
    assert!(on_sqlite.stderr.contains("(2 rows)"), "{on_sqlite:?}");
    let failed = "SELECT r.flow, r.error_code, r.error_step FROM reel_runs r
                  WHERE r.status = 'failed'";
    let (one, other) = (
        json(&sqlite(&["sql", "--json", failed])),
        json(&pg(&["sql", "--json", failed])),
    );
    assert_eq!(one, other);
    assert_eq!(
        one,
        serde_json::json!([{ "flow": "shop", "error_code": "tool.exec.exit", "error_step": "charge" }])
    );

    // A write is refused on both, and a bad query gets the database's message: exit 2.
    for store in [&sqlite as &dyn Fn(&[&str]) -> Run, &pg] {
        let refused = store(&["sql", "DELETE FROM runs"]);
        assert_eq!(refused.status, 2, "{refused:?}");
        assert!(
            refused.stderr.contains("read-only queries only"),
            "{refused:?}"
        );
        let bad = store(&["sql", "SELECT nope FROM reel_runs"]);
        assert_eq!(bad.status, 2, "{bad:?}");
        assert!(bad.stderr.contains("nope"), "{bad:?}");
        let count = store(&["sql", "SELECT COUNT(*) AS n FROM reel_runs"]);
        assert_eq!(count.stdout, "n\n2\n", "{count:?}");
    }
}

/// A query that counts without end, as a typo in a recursive query gives; on PostgreSQL it
/// also fills the server's disk with temporary files while it runs.
const ENDLESS_COUNT: &str = "WITH RECURSIVE endless_count(x) AS \
     (SELECT 1 UNION ALL SELECT x + 1 FROM endless_count) SELECT count(*) FROM endless_count";

#[test]
// edge: the test waits, in real time, for the server to find the query's process gone.
#[allow(clippy::disallowed_methods)]
fn a_query_past_its_limits_is_stopped_and_a_killed_one_leaves_nothing_running() {
    let url = database();
    let (a, b) = shops();
    let sqlite = |args: &[&str]| on_sqlite(a.path(), args);
    let pg = |args: &[&str]| on_postgres(b.path(), &url, args);
    for store in [&sqlite as &dyn Fn(&[&str]) -> Run, &pg] {
        assert_eq!(store(&["run", "shop.reel"]).status, 0);
        let stopped = store(&["sql", "--timeout", "300ms", ENDLESS_COUNT]);
        assert_eq!(stopped.status, 2, "{stopped:?}");
        assert!(
            stopped
                .stderr
                .contains("the query was stopped after 300ms, its time limit"),
            "{stopped:?}"
        );
        let endless_rows = ENDLESS_COUNT.replace("count(*)", "x");
        let many = store(&["sql", "--max-rows", "2000", &endless_rows]);
        assert_eq!(many.status, 2, "{many:?}");
        assert!(
            many.stderr.contains("answers more than 2000 rows"),
            "{many:?}"
        );
        let within = store(&[
            "sql",
            "--max-rows",
            "2",
            "--timeout",
            "0",
            "SELECT status FROM reel_runs",
        ]);
        assert_eq!(within.stdout, "status\nsucceeded\n", "{within:?}");
        let bad = store(&["sql", "--timeout", "soon", "SELECT 1"]);
        assert_eq!(bad.status, 2, "{bad:?}");
        assert!(bad.stderr.contains("is not a duration"), "{bad:?}");
        let long = store(&["sql", "--timeout", "213503982335d", "SELECT 1"]);
        assert_eq!(long.status, 2, "{long:?}");
        assert!(
            long.stderr.contains("is longer than Reel can count"),
            "{long:?}"
        );
    }

    // `reel sql` killed in the middle of a query with no limit: the server finds it gone and
    // stops the query, rather than run it (and fill its disk) until someone notices.
    let (mut admin, name) = admin(&url);
    let running = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()",
                &[&name],
            )
            .unwrap()
            .get(0)
    };
    let mut query = crate::support::reel(b.path(), &["sql", "--timeout", "0", ENDLESS_COUNT])
        .env("REEL_STORE_URL", &url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    while running(&mut admin) == 0 && began.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(running(&mut admin), 1, "the query never started");
    query.kill().unwrap();
    query.wait().unwrap();
    let killed = std::time::Instant::now();
    while running(&mut admin) > 0 && killed.elapsed() < std::time::Duration::from_secs(15) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = running(&mut admin);
    if left > 0 {
        // Not left to fill the test server's disk for the tests after this one.
        admin
            .execute(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                 WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid()",
                &[&name],
            )
            .unwrap();
    }
    assert_eq!(
        left, 0,
        "the query still ran 15 s after its process was killed"
    );
}

#[test]
// edge: the test measures how soon, in real time, a real worker takes up a signal.
#[allow(clippy::disallowed_methods)]
fn an_idle_worker_takes_up_a_signal_at_once_not_at_its_next_poll() {
    let url = database();
    let dir = temp();
    write(
        dir.path(),
        "wait.reel",
        "flow w {\n  step go = signal { name: \"go\", timeout: 1d }\n  output go\n}\n",
    );
    let parked = json(&on_postgres(
        dir.path(),
        &url,
        &["run", "wait.reel", "--json"],
    ));
    assert_eq!(parked["status"], "waiting", "{parked}");
    let id = parked["run"].as_str().unwrap().to_string();

    // A worker that polls every 10 s; once it has looked and found nothing due, it is idle.
    let mut worker = crate::support::reel(dir.path(), &["worker", "--poll-ms", "10000"])
        .env("REEL_STORE_URL", &url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));

    let sent = std::time::Instant::now();
    let signal = on_postgres(dir.path(), &url, &["signal", &id, "go", "7"]);
    assert_eq!(signal.status, 0, "{signal:?}");
    let status = |id: &str| {
        let q = format!("SELECT status FROM reel_runs WHERE id = '{id}'");
        json(&on_postgres(dir.path(), &url, &["sql", "--json", &q]))[0]["status"].clone()
    };
    while status(&id) != "succeeded" && sent.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let took = sent.elapsed();
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(status(&id), "succeeded");
    // Far under the worker's 10 s poll: the signal woke it. (The time includes starting the
    // `reel` processes that send the signal and ask.)
    assert!(
        took < std::time::Duration::from_millis(800),
        "took {took:?}"
    );
}

#[test]
// edge: the test measures how soon, in real time, a real worker takes up a due timer.
#[allow(clippy::disallowed_methods)]
fn an_idle_worker_takes_up_a_timer_when_it_is_due_not_at_its_next_poll() {
    let url = database();
    let dir = temp();
    write(
        dir.path(),
        "nap.reel",
        "flow n {\n  step rest = sleep { for: 2s }\n  output rest.woke_at\n}\n",
    );
    // The worker is idle (nothing waits yet) and polls every 10 s.
    let mut worker = crate::support::reel(dir.path(), &["worker", "--poll-ms", "10000"])
        .env("REEL_STORE_URL", &url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let parked = json(&on_postgres(
        dir.path(),
        &url,
        &["run", "nap.reel", "--json"],
    ));
    let started = std::time::Instant::now();
    assert_eq!(parked["status"], "waiting", "{parked}");
    let id = parked["run"].as_str().unwrap().to_string();
    let status = |id: &str| {
        let q = format!("SELECT status FROM reel_runs WHERE id = '{id}'");
        json(&on_postgres(dir.path(), &url, &["sql", "--json", &q]))[0]["status"].clone()
    };
    while status(&id) != "succeeded" && started.elapsed() < std::time::Duration::from_secs(8) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let took = started.elapsed();
    let _ = worker.kill();
    let _ = worker.wait();
    assert_eq!(status(&id), "succeeded");
    // The 2 s timer, and not the 10 s poll: parking it told the worker when to look.
    assert!(
        took < std::time::Duration::from_millis(3000),
        "took {took:?}"
    );
}

#[test]
fn a_write_fault_asked_of_postgres_is_refused_not_ignored() {
    // Only SQLite's writer injects faults (debug builds): a test that asked PostgreSQL for one
    // must not pass without it.
    let dir = temp();
    write(
        dir.path(),
        "greet.reel",
        include_str!("../../examples/greet.reel"),
    );
    let url = database();
    let r = reel_env(
        dir.path(),
        &["run", "greet.reel"],
        &[
            ("REEL_STORE_URL", &url),
            ("REEL_STORE_FAULT", "full@commit"),
        ],
    );
    assert_eq!(r.status, 2, "{r:?}");
    assert!(
        r.stderr.contains("REEL_STORE_FAULT") && r.stderr.contains("SQLite"),
        "{r:?}"
    );
    // A crash point is armed on either store; one that does not exist is refused on both.
    let r = reel_env(
        dir.path(),
        &["run", "greet.reel"],
        &[("REEL_STORE_URL", &url), ("REEL_CRASH_AT", "nowhere")],
    );
    assert_eq!(r.status, 2, "{r:?}");
    assert!(r.stderr.contains("before-commit"), "{r:?}");
}
