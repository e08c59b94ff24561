//! The cost of an event does not grow with the flow's size: the core's loops, counted
//! ([`Machine::work`]), per call made, are the same for a small and a large flow of each shape.
//! Counted, not timed: the test fails on a scan of all steps or all calls per completion.

use std::collections::HashMap;
use std::sync::Arc;

use reel_runtime::core::{Command, Input, Machine, Returned};
use reel_tools::ToolOutput;
use serde_json::{Map, Value};

use crate::sim::setup;
use crate::support::compile;

/// Runs `source` to its end with every call answered at once by its `value` argument; returns
/// the machine's work and the calls made.
fn work_per_call(source: &str) -> (u64, u64) {
    let spec = Arc::new(compile(source));
    let inputs = reel_runtime::resolve_inputs(&spec, &Map::new()).expect("valid inputs");
    let mut m = Machine::new(setup(&spec, inputs, false));
    let mut values: HashMap<String, Value> = HashMap::new();
    let mut calls = 0u64;
    m.handle(0, Input::Started);
    while let Some(cmd) = m.poll_command() {
        match cmd {
            Command::PutValue { digest, value, .. } => {
                values.insert(digest, value);
            }
            Command::LoadValues(digests) => {
                let loaded = digests.iter().map(|d| values[d].clone()).collect();
                m.handle(0, Input::ValuesLoaded(loaded));
            }
            Command::Launch(started) => {
                calls += started.len() as u64;
                let returned = started
                    .into_iter()
                    .map(|c| Returned {
                        step: c.step,
                        index: c.index,
                        attempt: c.attempt,
                        outcome: Ok(ToolOutput {
                            value: c.call.args.get("value").cloned().unwrap_or(Value::Null),
                            log: String::new(),
                        }),
                        reused: None,
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
    (m.work(), calls)
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
