//! The engine's core in virtual time: a flow and a script of what happens (fixtures under
//! `fixtures/`: the flow, `---`, then the script) go in; the inputs the core was fed, with
//! their virtual times, and every command it gave come out as a snapshot, one a line. No
//! store, no tokio, no clock: each runs in microseconds.

mod scale;
mod sim;

use sim::{Script, Sim};

#[path = "../support/mod.rs"]
mod support;
use support::compile;

/// Runs fixture `name` and compares its transcript with the snapshot of the same name.
fn fixture(name: &str) {
    let path = format!(
        "{}/tests/core/fixtures/{name}.reel",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("the fixture reads");
    let (source, script) = text.split_once("\n---\n").expect("a flow, `---`, a script");
    let sim = Sim::new(compile(source), Script::parse(script)).run();
    insta::with_settings!({
        description => text.clone(),
        omit_expression => true,
        snapshot_path => "snapshots",
        prepend_module_to_snapshot => false,
    }, {
        insta::assert_snapshot!(name, sim.transcript);
    });
}

#[test]
fn retries_wait_with_backoff_and_jitter() {
    fixture("retries");
}

#[test]
fn a_call_that_times_out_is_tried_again() {
    fixture("timeout");
}

#[test]
fn a_sleep_parks_the_run_until_its_timer_is_due() {
    fixture("sleep");
}

#[test]
fn a_signal_wait_fails_at_its_deadline() {
    fixture("signal_deadline");
}

#[test]
fn a_signal_that_arrives_is_delivered() {
    fixture("signal_arrives");
}

#[test]
fn foreach_keeps_to_its_concurrency() {
    fixture("foreach_concurrency");
}

#[test]
fn a_failure_waits_for_the_calls_in_flight() {
    fixture("failure_in_flight");
}

#[test]
fn cancel_stops_the_calls_in_flight() {
    fixture("cancel");
}

#[test]
fn an_output_that_does_not_fit_its_type_fails_the_run() {
    fixture("output_type");
}

#[test]
fn durable_steps_sync_once_each() {
    fixture("durable");
}

#[test]
fn a_call_of_unknown_outcome_is_repeated_with_its_key_and_marked() {
    fixture("unknown_outcome");
}

#[test]
fn a_machine_without_keys_makes_none_and_repeats_an_unknown_outcome_as_recorded() {
    fixture("unknown_outcome_without_keys");
}

#[test]
fn a_call_of_unknown_outcome_of_a_never_repeated_tool_waits_for_an_accepted_result() {
    fixture("unknown_outcome_accept");
}

#[test]
fn a_call_of_unknown_outcome_of_a_never_repeated_tool_is_retried_when_a_person_says_so() {
    fixture("unknown_outcome_retry");
}

/// The core does no I/O: none of its modules names a way to reach the outside world (the
/// live driver, `drive.rs`, is where those go).
#[test]
fn the_core_names_no_io() {
    let dir = format!("{}/src/core", env!("CARGO_MANIFEST_DIR"));
    let forbidden = [
        "tokio",
        "async ",
        ".await",
        "dyn Store",
        "Store::",
        "ToolHost",
        "Clock",
        "SystemTime",
        "Instant",
        "std::fs",
        "std::env",
        "std::net",
        "std::thread",
        "std::process",
        "Mutex",
    ];
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("the core's directory") {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a module reads");
        for word in forbidden {
            assert!(
                !text.contains(word),
                "{} names `{word}`: the core does no I/O",
                path.display()
            );
        }
        files += 1;
    }
    assert!(files >= 4, "the core's modules are in {dir}");
}
