//! The cost of an event does not grow with the flow's size: the core's loops, counted
//! ([`Machine::work`]), per call made, are the same for a small and a large flow of each shape.
//! Counted, not timed: the test fails on a scan of all steps or all calls per completion.

use std::collections::HashMap;
use std::sync::Arc;

use reel_runtime::core::{Command, Input, Machine, Returned};
use reel_tools::ToolOutput;
use serde_json::{Map, Value};

use crate::sim::{setup, value_named};
use crate::support::compile;

/// Runs `source` to its end with every call answered at once by its `value` argument; returns
/// the machine's work and the calls made.
fn work_per_call(source: &str) -> (u64, u64) {
    let run = drive(source, false);
    (run.work, run.calls)
}

/// What a drive of a flow to its end did.
struct Driven {
    /// The machine's work.
    work: u64,
    /// The calls made.
    calls: u64,
    /// The values the machine canonicalised and hashed.
    digests: u64,
    /// Every event it recorded.
    events: Vec<reel_runtime::core::Stamped>,
    /// Values it asked the driver to read back from the store.
    loads: usize,
}

/// Runs `source` to its end with every call answered at once by its `value` argument; with
/// `digested`, each result comes with its digest, as a replay hands in a recorded one.
fn drive(source: &str, digested: bool) -> Driven {
    let spec = Arc::new(compile(source));
    let inputs = reel_runtime::resolve_inputs(&spec, &Map::new()).expect("valid inputs");
    let mut m = Machine::new(setup(&spec, inputs, false));
    let mut values: HashMap<String, Value> = HashMap::new();
    let mut calls = 0u64;
    let mut events = Vec::new();
    let mut loads = 0;
    m.handle(0, Input::Started);
    while let Some(cmd) = m.poll_command() {
        match cmd {
            Command::PutValue { digest, text } => {
                let value: Value = serde_json::from_str(&text).expect("canonical JSON");
                values.insert(digest, value);
            }
            Command::Append(mut appended) => events.append(&mut appended),
            Command::LoadValues(digests) => {
                loads += digests.len();
                let loaded = digests.iter().map(|d| value_named(d, &values)).collect();
                m.handle(0, Input::ValuesLoaded(loaded));
            }
            Command::Launch(started) => {
                calls += started.len() as u64;
                let returned = started
                    .into_iter()
                    .map(|c| {
                        let value = c.call.args.get("value").cloned().unwrap_or(Value::Null);
                        let digest = digested.then(|| {
                            let d = reel_flowspec::canonical::name_value(&value);
                            values.insert(d.clone(), value.clone());
                            d
                        });
                        Returned {
                            step: c.step,
                            index: c.index,
                            attempt: c.attempt,
                            outcome: Ok(ToolOutput {
                                value,
                                log: String::new(),
                            }),
                            reused: None,
                            digest,
                        }
                    })
                    .collect();
                m.handle(0, Input::Launched(returned));
            }
            Command::Wait { .. } => m.handle(0, Input::Tick { poll: None }),
            Command::Finish(ending) => {
                assert!(
                    matches!(ending, reel_runtime::core::Ending::Succeeded { .. }),
                    "{ending:?}"
                );
                break;
            }
            _ => {}
        }
    }
    Driven {
        work: m.work(),
        calls,
        digests: m.digests(),
        events,
        loads,
    }
}

fn sequential(n: usize) -> String {
    let mut text = String::from("flow seq {\n  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        text.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    text.push_str(&format!("  output s{}\n}}\n", n - 1));
    text
}

fn fan_out(n: usize) -> String {
    format!(
        "flow fan {{\n  step each = echo {{\n    foreach: range(0, {n})\n    concurrency: 100\n    value: item\n  }}\n  output len(each)\n}}\n"
    )
}

/// Work per call at `small` and at `large`, for a flow of each size.
fn per_call(shape: fn(usize) -> String, small: usize, large: usize) -> (f64, f64) {
    let (w1, c1) = work_per_call(&shape(small));
    let (w2, c2) = work_per_call(&shape(large));
    assert_eq!(
        (c1, c2),
        (small as u64, large as u64),
        "one call per step or element"
    );
    (w1 as f64 / c1 as f64, w2 as f64 / c2 as f64)
}

#[test]
fn sequential_steps_cost_the_same_per_step_at_any_length() {
    let (small, large) = per_call(sequential, 100, 3_000);
    assert!(
        large <= small * 1.2 && large < 20.0,
        "work per step grew from {small:.1} (100 steps) to {large:.1} (3,000 steps)"
    );
}

#[test]
fn a_foreach_costs_the_same_per_call_at_any_width() {
    let (small, large) = per_call(fan_out, 1_000, 30_000);
    assert!(
        large <= small * 1.2 && large < 20.0,
        "work per call grew from {small:.1} (1,000 wide) to {large:.1} (30,000 wide)"
    );
}

#[test]
fn a_result_is_digested_once_and_a_recorded_one_not_at_all() {
    let n = 200;
    // Live: each call's inputs and result; a step's output is its one call's result, whose
    // digest is taken as it is; then the run's output.
    let live = drive(&sequential(n), false);
    assert_eq!(live.calls, n as u64);
    assert_eq!(live.digests, 2 * n as u64 + 1);
    // Results handed in with their digests (a replay's): only the inputs and the output.
    let replayed = drive(&sequential(n), true);
    assert_eq!(replayed.digests, n as u64 + 1);
    // And the journal is the same, digest for digest.
    assert_eq!(
        format!("{:?}", live.events),
        format!("{:?}", replayed.events)
    );

    // A `foreach`: its calls' inputs and results, its list, the output; no result again when
    // handed in with its digest.
    let wide = drive(&fan_out(n), false);
    assert_eq!(wide.digests, 2 * n as u64 + 2);
    let wide_replayed = drive(&fan_out(n), true);
    assert_eq!(wide_replayed.digests, n as u64 + 2);
    assert_eq!(
        format!("{:?}", wide.events),
        format!("{:?}", wide_replayed.events)
    );
}

#[test]
fn a_live_run_reads_no_value_back_from_the_store() {
    // Each value stays in memory while a step still to run or the output reads it: a short
    // run on a database makes no read for its output.
    for source in [sequential(50), fan_out(50)] {
        assert_eq!(drive(&source, false).loads, 0, "{source}");
    }
}
