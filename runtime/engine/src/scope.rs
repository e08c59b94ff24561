//! The scope expressions are evaluated in during a run: inputs, env, step values, `item`,
//! logical time and the run's seeded randomness.

use std::collections::HashMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reel_flowspec::canonical::sha256_hex;
use serde_json::{Map, Value};

/// A generator seeded from the run's seed and a purpose (a step, its index, an attempt), so
/// every draw is the same on replay whatever order parallel steps ran in.
pub fn seeded_rng(seed: u64, purpose: &str) -> ChaCha8Rng {
    let digest = sha256_hex(format!("{seed}\u{1f}{purpose}").as_bytes());
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).unwrap_or(0);
    }
    ChaCha8Rng::from_seed(bytes)
}

/// Milliseconds since the epoch as RFC 3339 text (UTC).
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// What an expression sees while a run executes.
pub struct RunScope<'a> {
    /// `input.*`
    pub inputs: &'a Map<String, Value>,
    /// `env.*`
    pub env: &'a Map<String, Value>,
    /// Values of finished steps (null for skipped ones).
    pub steps: &'a HashMap<String, Arc<Value>>,
    /// `item`
    pub item: Option<Value>,
    /// `index`
    pub index: Option<u32>,
    /// The logical time, for `now()`.
    pub now_ms: i64,
    /// The draws of `random()`.
    pub rng: ChaCha8Rng,
}

impl reel_eval::Scope for RunScope<'_> {
    fn input(&self, name: &str) -> Option<Value> {
        self.inputs.get(name).cloned()
    }

    fn env(&self, name: &str) -> Option<Value> {
        self.env.get(name).cloned()
    }

    fn step(&self, name: &str) -> Option<Value> {
        self.steps.get(name).map(|v| (**v).clone())
    }

    fn item(&self) -> Option<Value> {
        self.item.clone()
    }

    fn index(&self) -> Option<Value> {
        self.index.map(Value::from)
    }

    fn now(&mut self) -> String {
        rfc3339(self.now_ms)
    }

    fn random(&mut self) -> f64 {
        self.rng.random::<f64>()
    }
}

/// The idempotency key of an effect call: the lowercase hex SHA-256 of the run id, the step id
/// with its `foreach` index, and the digest of the call's inputs (secrets redacted), joined by
/// the unit separator. Never the attempt: every attempt and every resume reuses it.
pub fn idempotency_key(run: &str, step: &str, index: Option<u32>, inputs_digest: &str) -> String {
    let step_id = match index {
        Some(i) => format!("{step}[{i}]"),
        None => step.to_string(),
    };
    sha256_hex(format!("{run}\u{1f}{step_id}\u{1f}{inputs_digest}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_nothing_but_the_attempt() {
        let k = idempotency_key("r1", "s", Some(2), "d");
        assert_eq!(k.len(), 64);
        assert_eq!(k, idempotency_key("r1", "s", Some(2), "d"));
        assert_ne!(k, idempotency_key("r2", "s", Some(2), "d"));
        assert_ne!(k, idempotency_key("r1", "s", Some(3), "d"));
        assert_ne!(k, idempotency_key("r1", "s", Some(2), "e"));
    }

    #[test]
    fn draws_depend_on_seed_and_purpose_only() {
        let a: f64 = seeded_rng(7, "s#0").random();
        let b: f64 = seeded_rng(7, "s#0").random();
        let c: f64 = seeded_rng(7, "s#1").random();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!((0.0..1.0).contains(&a));
    }

    #[test]
    fn time_is_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    }
}
