//! What an expression can see: the caller's inputs, env, step values, `foreach` item and index,
//! logical time and seeded randomness.

use std::collections::BTreeMap;

use serde_json::Value;

/// The values an expression reads, supplied by whoever evaluates it (runtime, language server,
/// compiler). Comprehension variables are not here: the evaluator keeps them itself.
pub trait Scope {
    /// `input.NAME`, or `None` when the flow has no such input.
    fn input(&self, name: &str) -> Option<Value>;
    /// `env.NAME`, or `None` when it was not declared.
    fn env(&self, name: &str) -> Option<Value>;
    /// A step's value; `Some(Value::Null)` for a skipped step, `None` for an unknown one.
    fn step(&self, name: &str) -> Option<Value>;
    /// `item`, when evaluating inside a `foreach` call.
    fn item(&self) -> Option<Value>;
    /// `index`, when evaluating inside a `foreach` call.
    fn index(&self) -> Option<Value>;
    /// The run's logical time as RFC 3339 text (the same on replay).
    fn now(&mut self) -> String;
    /// A float in [0, 1) from the run's seeded generator (the same on replay).
    fn random(&mut self) -> f64;
    /// Whether the results of builtin `name` are to be changed on purpose: a fault a test
    /// injects to prove that `reel replay --verify` catches a changed builtin. Handed in as a
    /// value by the caller; no real run sets it.
    fn perturbed(&self, _name: &str) -> bool {
        false
    }
}

/// A scope held in plain maps, for tests, tools and examples.
///
/// `now()` returns the `now` field and `random()` the `random` field, unchanged on every call:
/// a fixed clock and a fixed draw keep results reproducible without a generator.
#[derive(Clone, Debug, PartialEq)]
pub struct MapScope {
    /// Values of `input.NAME`.
    pub inputs: BTreeMap<String, Value>,
    /// Values of `env.NAME`.
    pub env: BTreeMap<String, Value>,
    /// Step values by step id (null for a skipped step).
    pub steps: BTreeMap<String, Value>,
    /// `item`, if in a `foreach`.
    pub item: Option<Value>,
    /// `index`, if in a `foreach`.
    pub index: Option<Value>,
    /// What `now()` returns.
    pub now: String,
    /// What `random()` returns.
    pub random: f64,
}

impl Default for MapScope {
    fn default() -> Self {
        MapScope {
            inputs: BTreeMap::new(),
            env: BTreeMap::new(),
            steps: BTreeMap::new(),
            item: None,
            index: None,
            now: "1970-01-01T00:00:00Z".into(),
            random: 0.0,
        }
    }
}

impl MapScope {
    /// An empty scope.
    pub fn new() -> Self {
        MapScope::default()
    }

    /// The scope with `input.NAME` set.
    pub fn with_input(mut self, name: &str, value: Value) -> Self {
        self.inputs.insert(name.into(), value);
        self
    }

    /// The scope with `env.NAME` set.
    pub fn with_env(mut self, name: &str, value: Value) -> Self {
        self.env.insert(name.into(), value);
        self
    }

    /// The scope with a step's value set.
    pub fn with_step(mut self, name: &str, value: Value) -> Self {
        self.steps.insert(name.into(), value);
        self
    }

    /// The scope inside call `index` of a `foreach` over `item`.
    pub fn with_item(mut self, item: Value, index: u64) -> Self {
        self.item = Some(item);
        self.index = Some(Value::from(index));
        self
    }
}

impl Scope for MapScope {
    fn input(&self, name: &str) -> Option<Value> {
        self.inputs.get(name).cloned()
    }

    fn env(&self, name: &str) -> Option<Value> {
        self.env.get(name).cloned()
    }

    fn step(&self, name: &str) -> Option<Value> {
        self.steps.get(name).cloned()
    }

    fn item(&self) -> Option<Value> {
        self.item.clone()
    }

    fn index(&self) -> Option<Value> {
        self.index.clone()
    }

    fn now(&mut self) -> String {
        self.now.clone()
    }

    fn random(&mut self) -> f64 {
        self.random
    }
}

/// The scope of constant folding: knows nothing. The evaluator refuses every reference before
/// asking it, so its clock and generator are never read.
pub(crate) struct EmptyScope;

impl Scope for EmptyScope {
    fn input(&self, _: &str) -> Option<Value> {
        None
    }

    fn env(&self, _: &str) -> Option<Value> {
        None
    }

    fn step(&self, _: &str) -> Option<Value> {
        None
    }

    fn item(&self) -> Option<Value> {
        None
    }

    fn index(&self) -> Option<Value> {
        None
    }

    fn now(&mut self) -> String {
        MapScope::default().now
    }

    fn random(&mut self) -> f64 {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn map_scope_answers_from_its_fields() {
        let mut scope = MapScope::new()
            .with_input("n", json!(3))
            .with_env("HOME", json!("/home/me"))
            .with_step("skipped", Value::Null)
            .with_item(json!("a"), 2);
        assert_eq!(scope.input("n"), Some(json!(3)));
        assert_eq!(scope.input("m"), None);
        assert_eq!(scope.env("HOME"), Some(json!("/home/me")));
        assert_eq!(scope.step("skipped"), Some(Value::Null));
        assert_eq!(scope.item(), Some(json!("a")));
        assert_eq!(scope.index(), Some(json!(2)));
        assert_eq!(scope.now(), "1970-01-01T00:00:00Z");
        assert_eq!(scope.random(), 0.0);
    }
}
