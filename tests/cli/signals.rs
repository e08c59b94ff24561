//! What `reel run` does when it is told to stop by a signal: its tools stop with it.

// edge: these tests bound their own waits on real processes with the real clock.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

fn wait_for(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[cfg(unix)]
#[test]
fn sigterm_stops_the_run_and_its_tool_processes_and_the_run_stays_resumable() {
    let dir = temp();
    // The tool marks that it started, then takes its time before its effect.
    write(
        dir.path(),
        "slow.reel",
        "flow slow {\n  step effect = exec { cmd: [\"sh\", \"-c\", \"touch started; sleep 2; touch finished\"] }\n  output effect.stdout\n}\n",
    );
    let mut command = reel(dir.path(), &["run", "slow.reel", "--json"]);
    command
        .env("REEL_HOME", dir.path().join(".reel"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    assert!(
        wait_for(&dir.path().join("started"), Duration::from_secs(20)),
        "the tool never started"
    );
    // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("reel resume"), "{stderr}");
    // Had the tool outlived `reel`, it would finish its effect now.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !dir.path().join("finished").exists(),
        "the tool finished its effect after reel stopped"
    );
}

#[test]
fn a_worker_facing_a_run_it_cannot_continue_waits_it_out_and_until_idle_names_it() {
    let dir = temp();
    write(
        dir.path(),
        "guarded.reel",
        "flow guarded {\n  secret token\n  step go = signal { name: \"go\", timeout: 1d }\n  step sent = http.get { url: \"http://127.0.0.1:9/\", bearer: secret.token, after: [go] }\n  output go\n}\n",
    );
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let r = reel_env(
        dir.path(),
        &["run", "guarded.reel", "--json"],
        &[("REEL_HOME", home), ("REEL_SECRET_TOKEN", "hunter2")],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let id = json(&r)["run"].as_str().unwrap().to_string();
    let s = reel_env(dir.path(), &["signal", &id, "go"], &[("REEL_HOME", home)]);
    assert_eq!(s.status, 0, "{s:?}");

    // Without the secret the run cannot go on: the worker must neither spin nor hang.
    let mut command = reel(dir.path(), &["worker", "--until-idle", "--poll-ms", "20"]);
    command
        .env("REEL_HOME", home)
        .env_remove("REEL_SECRET_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("`reel worker --until-idle` did not stop with only a refused run left");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("run {id} could not be continued")) && stderr.contains("token"),
        "{stderr}"
    );
    assert!(
        stderr.lines().count() < 20,
        "the worker repeated itself: {} lines\n{stderr}",
        stderr.lines().count()
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let runs = json(&reel_env(
        dir.path(),
        &["runs", "--json"],
        &[("REEL_HOME", home)],
    ));
    assert_eq!(
        runs[0]["status"], "waiting",
        "the run is left as it was: {runs}"
    );
}

#[cfg(unix)]
#[test]
fn a_run_canceled_while_a_call_was_in_flight_is_redriven_to_its_end() {
    let dir = temp();
    write(
        dir.path(),
        "slow.reel",
        "flow slow {\n  step effect = exec { cmd: [\"sh\", \"-c\", \"touch started; sleep 1; echo done\"] }\n  output effect.stdout\n}\n",
    );
    let home = dir.path().join(".reel");
    let home = home.to_str().unwrap();
    let mut command = reel(dir.path(), &["run", "slow.reel", "--json"]);
    command
        .env("REEL_HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    assert!(
        wait_for(&dir.path().join("started"), Duration::from_secs(20)),
        "the tool never started"
    );
    let runs = json(&reel_env(
        dir.path(),
        &["runs", "--json"],
        &[("REEL_HOME", home)],
    ));
    let id = runs[0]["run"].as_str().unwrap().to_string();
    let c = reel_env(dir.path(), &["cancel", &id], &[("REEL_HOME", home)]);
    assert_eq!(c.status, 0, "{c:?}");
    let out = child.wait_with_output().unwrap();
    let ran: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ran["status"], "canceled", "{ran}");

    // The redrive runs the call again and is not canceled by the request that ended the run.
    let r = reel_env(
        dir.path(),
        &["resume", &id, "--json"],
        &[("REEL_HOME", home)],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let resumed = json(&r);
    assert_eq!(resumed["status"], "succeeded", "{resumed}");
    assert_eq!(resumed["output"], "done\n", "{resumed}");
}
