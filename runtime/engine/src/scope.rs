//! The scope expressions are evaluated in during a run: inputs, env, step values, `item`,
//! logical time and the run's seeded randomness.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reel_flowspec::canonical::sha256_hex;
use reel_store::{Store, StoreError};
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

/// Milliseconds since the epoch as RFC 3339 text (UTC), as the journal's values hold times.
pub use reel_journal::journal::rfc3339;

/// What is known of one step's value.
enum Slot {
    /// Not finished (or failed): no value.
    Unset,
    /// Skipped: its value is null.
    Null,
    /// Succeeded: the digest is all that is kept; the value itself only once read and while
    /// a step still to finish may read it.
    Stored {
        digest: String,
        value: OnceLock<Arc<Value>>,
    },
}

/// Finished steps' values, as expressions read them. Each step keeps its output digest; a
/// value is read from the store the first time an expression needs it and dropped when no
/// step still to finish reads it, so a resumed run holds the values it needs, not every
/// value its journal names.
pub struct StepValues {
    store: Arc<dyn Store>,
    index: Arc<HashMap<String, usize>>,
    slots: Vec<Slot>,
    /// The first failed read: the expression that needed it cannot be trusted, so the engine
    /// stops the run with this error instead of recording a failure of the step.
    failure: OnceLock<StoreError>,
    loads: AtomicU64,
}

impl StepValues {
    /// No step finished yet; `index` gives each step's position.
    pub fn new(store: Arc<dyn Store>, index: Arc<HashMap<String, usize>>) -> Self {
        let slots = (0..index.len()).map(|_| Slot::Unset).collect();
        StepValues {
            store,
            index,
            slots,
            failure: OnceLock::new(),
            loads: AtomicU64::new(0),
        }
    }

    /// Step `i` succeeded with the value of `digest`; `value` is kept when given (a step that
    /// still has readers), else it is read from the store when needed.
    pub fn succeeded(&mut self, i: usize, digest: String, value: Option<Value>) {
        let cell = OnceLock::new();
        if let Some(v) = value {
            let _ = cell.set(Arc::new(v));
        }
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Slot::Stored {
                digest,
                value: cell,
            };
        }
    }

    /// Step `i` was skipped: its value is null.
    pub fn skipped(&mut self, i: usize) {
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Slot::Null;
        }
    }

    /// Drops step `i`'s value from memory (nothing still to run reads it); its digest stays,
    /// so the output expression, or a redrive, can still read it from the store.
    pub fn release(&mut self, i: usize) {
        if let Some(Slot::Stored { value, .. }) = self.slots.get_mut(i) {
            value.take();
        }
    }

    /// A finished step's value (null when skipped), read from the store on first use; `None`
    /// for a step that has no value, or when the read failed (see [`StepValues::failure`]).
    pub fn get(&self, name: &str) -> Option<Arc<Value>> {
        let i = *self.index.get(name)?;
        match self.slots.get(i)? {
            Slot::Unset => None,
            Slot::Null => Some(Arc::new(Value::Null)),
            Slot::Stored { digest, value } => {
                if let Some(v) = value.get() {
                    return Some(v.clone());
                }
                self.loads.fetch_add(1, Ordering::Relaxed);
                match self.store.get_value(digest) {
                    Ok(Some(v)) => Some(value.get_or_init(|| Arc::new(v)).clone()),
                    Ok(None) => {
                        let _ = self.failure.set(StoreError::MissingValue {
                            digest: digest.clone(),
                        });
                        None
                    }
                    Err(e) => {
                        let _ = self.failure.set(e);
                        None
                    }
                }
            }
        }
    }

    /// The first read that failed, if any.
    pub fn failure(&self) -> Option<&StoreError> {
        self.failure.get()
    }

    /// Takes the first read that failed, if any.
    pub fn take_failure(&mut self) -> Option<StoreError> {
        self.failure.take()
    }

    /// How many values were read from the store so far.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// How many values are held in memory now.
    pub fn held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Stored { value, .. } if value.get().is_some()))
            .count()
    }
}

/// What an expression sees while a run executes.
pub struct RunScope<'a> {
    /// `input.*`
    pub inputs: &'a Map<String, Value>,
    /// `env.*`
    pub env: &'a Map<String, Value>,
    /// Values of finished steps (null for skipped ones), read on first use.
    pub steps: &'a StepValues,
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
        self.steps.get(name).map(|v| (*v).clone())
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
