//! Calls whose outcome is unknown: an effect whose start the journal records but not its result
//! (the process stopped in between), and what a person decides about one
//! (`reel resume RUN --accept STEP=JSON` or `--retry STEP`).
//!
//! The decision itself is the machine's, when the step is activated again
//! ([`Machine::decide`](super::Machine::decide) hands it the person's decisions); this module
//! checks beforehand that each decision names such a call and that an accepted result fits the
//! step's result type, so a wrong decision refuses the resume before anything is recorded.

use reel_flowspec::{FlowSpec, Repeat, Type};
use serde_json::Value;

use crate::fold::{CallRecord, Folded};

/// What a person decided about a call whose outcome is unknown.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Record this value as the call's result; the tool is not called.
    Accept(Value),
    /// Attempt the call again (with the same idempotency key).
    Retry,
}

/// A decision about one step's call (`index` set) or every unknown call of the step.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    /// The step's id.
    pub step: String,
    /// The `foreach` index; `None` decides every call of the step whose outcome is unknown.
    pub index: Option<u32>,
    /// What to do.
    pub decision: Decision,
}

impl Decided {
    /// Whether this decision is about call `index` of `step`.
    pub fn covers(&self, step: &str, index: Option<u32>) -> bool {
        self.step == step && (self.index.is_none() || self.index == index)
    }
}

/// Whether the tool a step calls is declared `repeat: "never"`.
pub fn never_repeated(spec: &FlowSpec, step: &str) -> bool {
    spec.step(step)
        .and_then(|s| spec.tool_of(s))
        .is_some_and(|t| t.repeat == Repeat::Never)
}

/// The calls of `folded` whose outcome is unknown: (step, index, attempt), sorted.
pub fn unknown_calls(folded: &Folded) -> Vec<(String, Option<u32>, u32)> {
    let mut out: Vec<(String, Option<u32>, u32)> = folded
        .calls
        .iter()
        .filter_map(|((step, index), rec)| match rec {
            CallRecord::Started {
                attempt,
                key: Some(_),
            } => Some((step.clone(), *index, *attempt)),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// Checks `decisions` against the run's journal before the resume records anything: each must
/// name a step with a call whose outcome is unknown, and an accepted value must fit the step's
/// result type (the tool's output; for `foreach`, one element of the step's list). `Err` says
/// what is wrong, in words for the person who gave it.
pub fn check_decisions(
    spec: &FlowSpec,
    folded: &Folded,
    decisions: &[Decided],
) -> Result<(), String> {
    let unknown = unknown_calls(folded);
    for d in decisions {
        let shown = match d.index {
            Some(i) => format!("{}[{i}]", d.step),
            None => d.step.clone(),
        };
        let Some(step) = spec.step(&d.step) else {
            return Err(format!("the flow has no step `{}`", d.step));
        };
        if !unknown.iter().any(|(s, i, _)| d.covers(s, *i)) {
            let others: Vec<String> = unknown
                .iter()
                .map(|(s, i, _)| match i {
                    Some(i) => format!("`{s}[{i}]`"),
                    None => format!("`{s}`"),
                })
                .collect();
            return Err(format!(
                "`{shown}` has no call whose outcome is unknown ({})",
                if others.is_empty() {
                    "the run has none".to_string()
                } else {
                    format!("the run's are {}", others.join(", "))
                }
            ));
        }
        if let Decision::Accept(value) = &d.decision {
            let ty = match (&step.foreach, &step.ty) {
                (Some(_), Type::List { item }) => item.as_ref(),
                (_, ty) => ty,
            };
            reel_eval::check_value(value, ty).map_err(|m| {
                format!("the result given for `{shown}` does not fit its type {ty}: {m}")
            })?;
        }
    }
    Ok(())
}
