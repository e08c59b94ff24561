//! A flow's signature: the names and types its steps can refer to, free of spans so it survives edits.

use reel_flowspec::Type;

/// What a step's header says about it, enough to resolve references to it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StepHead {
    /// The step's name.
    pub name: String,
    /// The called tool, or `None` for a pure expression step.
    pub tool: Option<String>,
    /// Whether the step has `when` (its value is then optional).
    pub has_when: bool,
    /// Whether the step has `foreach` (its value is then a list).
    pub has_foreach: bool,
}

/// Everything a flow declares, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowSignature {
    /// Inputs and their declared types, in order (the first of duplicates).
    pub inputs: Vec<(String, Type)>,
    /// Declared secrets.
    pub secrets: Vec<String>,
    /// Declared environment variables.
    pub env: Vec<String>,
    /// Steps, in order (the first of duplicates).
    pub steps: Vec<StepHead>,
    /// Index of each step in `steps`, by name: lookups are per reference, so they must not scan.
    pub step_index: rustc_hash::FxHashMap<String, usize>,
    /// The names written in members that did not parse: such a member may have meant to declare
    /// any of them, so a reference to one is not reported unknown (its syntax error is the one
    /// error).
    pub broken_names: Vec<String>,
}

impl FlowSignature {
    /// The declared type of input `name`.
    pub fn input(&self, name: &str) -> Option<&Type> {
        self.inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&StepHead> {
        self.step_index.get(name).map(|&i| &self.steps[i])
    }

    /// Whether `name` is written in a member that did not parse.
    pub fn maybe_declared(&self, name: &str) -> bool {
        self.broken_names.iter().any(|n| n == name)
    }

    /// Adds a step (its name not declared before).
    pub fn push_step(&mut self, head: StepHead) {
        self.step_index.insert(head.name.clone(), self.steps.len());
        self.steps.push(head);
    }
}
