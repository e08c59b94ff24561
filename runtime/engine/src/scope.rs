//! The scope expressions are evaluated in during a run: inputs, env, step values, `item`,
//! logical time and the run's seeded randomness.

use std::cell::RefCell;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reel_flowspec::canonical::{name_digest, sha256_hex, sha256_hex_parts};
// Step ids of the flow being run: a fast hash will do.
use rustc_hash::FxHashMap as HashMap;
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

/// What an evaluation's draws of `random()` are for: the text its generator is seeded with
/// ([`seeded_rng`]), made only when an expression draws (most never do, and seeding costs a
/// SHA-256).
#[derive(Clone, Copy, Debug)]
pub enum Purpose<'a> {
    /// A step's own expression, or its call without `foreach`: the step id.
    Step(&'a str),
    /// A part of a step (`when`, `foreach`): `id#part`.
    Part(&'a str, &'static str),
    /// The call of one `foreach` element: `id#index`.
    Element(&'a str, u32),
    /// Text given whole (the run's output: `#output`).
    Text(&'a str),
}

impl Purpose<'_> {
    /// The purpose as [`seeded_rng`] takes it.
    pub fn text(&self) -> String {
        match *self {
            Purpose::Step(id) | Purpose::Text(id) => id.to_string(),
            Purpose::Part(id, part) => format!("{id}#{part}"),
            Purpose::Element(id, index) => format!("{id}#{index}"),
        }
    }
}

/// Milliseconds since the epoch as RFC 3339 text (UTC), as the journal's values hold times.
pub use reel_journal::journal::rfc3339;

/// What is known of one step's value.
enum Slot {
    /// Not finished (or failed): no value.
    Unset,
    /// Skipped: its value is null.
    Null,
    /// Succeeded: the digest is all that is kept; the value itself only once handed in and
    /// while a step still to finish may read it.
    Stored {
        digest: String,
        value: Option<Arc<Value>>,
    },
}

/// Finished steps' values, as expressions read them. Each step keeps its output digest; a
/// value not in memory is never read here (the engine's core does no I/O): a read of it is
/// noted as a miss, the evaluation that needed it is discarded, and the driver hands the value
/// in ([`StepValues::fill`]) before the evaluation runs again. A value is dropped when no step
/// still to finish reads it, so a resumed run holds the values it needs, not every value its
/// journal names.
pub struct StepValues {
    index: Arc<HashMap<String, usize>>,
    slots: Vec<Slot>,
    /// Steps whose value an evaluation needed and did not find in memory.
    misses: RefCell<Vec<usize>>,
}

impl StepValues {
    /// No step finished yet; `index` gives each step's position.
    pub fn new(index: Arc<HashMap<String, usize>>) -> Self {
        let slots = (0..index.len()).map(|_| Slot::Unset).collect();
        StepValues {
            index,
            slots,
            misses: RefCell::new(Vec::new()),
        }
    }

    /// Step `i` succeeded with the value of `digest`; `value` is kept when given (a step that
    /// still has readers), else it has to be handed in when an expression needs it.
    pub fn succeeded(&mut self, i: usize, digest: String, value: Option<Value>) {
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = Slot::Stored {
                digest,
                value: value.map(Arc::new),
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
    /// so the output expression, or a redrive, can still have it loaded.
    pub fn release(&mut self, i: usize) {
        if let Some(Slot::Stored { value, .. }) = self.slots.get_mut(i) {
            *value = None;
        }
    }

    /// A finished step's value (null when skipped); `None` for a step that has no value, or
    /// whose value is not in memory (then noted as a miss, see [`StepValues::take_misses`]).
    pub fn get(&self, name: &str) -> Option<Arc<Value>> {
        let i = *self.index.get(name)?;
        match self.slots.get(i)? {
            Slot::Unset => None,
            Slot::Null => Some(Arc::new(Value::Null)),
            Slot::Stored { value: Some(v), .. } => Some(v.clone()),
            Slot::Stored { value: None, .. } => {
                self.misses.borrow_mut().push(i);
                None
            }
        }
    }

    /// The steps whose values the last evaluations missed, with their digests (each once).
    pub fn take_misses(&self) -> Vec<(usize, String)> {
        let mut misses = std::mem::take(&mut *self.misses.borrow_mut());
        misses.sort_unstable();
        misses.dedup();
        misses
            .into_iter()
            .filter_map(|i| match self.slots.get(i) {
                Some(Slot::Stored { digest, .. }) => Some((i, digest.clone())),
                _ => None,
            })
            .collect()
    }

    /// Hands in step `i`'s value, loaded by the driver after a miss.
    pub fn fill(&mut self, i: usize, v: Value) {
        if let Some(Slot::Stored { value, .. }) = self.slots.get_mut(i) {
            *value = Some(Arc::new(v));
        }
    }

    /// How many values are held in memory now.
    pub fn held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Stored { value: Some(_), .. }))
            .count()
    }
}

/// What an expression sees while a run executes.
pub struct RunScope<'a> {
    /// `input.*`
    pub inputs: &'a Map<String, Value>,
    /// `env.*`
    pub env: &'a Map<String, Value>,
    /// Values of finished steps (null for skipped ones); a value not in memory is a miss.
    pub steps: &'a StepValues,
    /// `item`
    pub item: Option<Value>,
    /// `index`
    pub index: Option<u32>,
    /// The logical time, for `now()`.
    pub now_ms: i64,
    /// The run's seed, which with `purpose` seeds the draws of `random()`.
    pub seed: u64,
    /// What this evaluation's draws are for.
    pub purpose: Purpose<'a>,
    /// The draws of `random()`, seeded at the first.
    pub rng: Option<ChaCha8Rng>,
    /// Builtins whose results a test changes on purpose (empty in real runs).
    pub faults: &'a [String],
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
        let (seed, purpose) = (self.seed, self.purpose);
        self.rng
            .get_or_insert_with(|| seeded_rng(seed, &purpose.text()))
            .random::<f64>()
    }

    fn perturbed(&self, builtin: &str) -> bool {
        self.faults.iter().any(|f| f == builtin)
    }
}

/// The idempotency key of an effect call: the lowercase hex SHA-256 of the run id, the step id
/// with its `foreach` index, and the digest of the call's inputs (secrets redacted), joined by
/// the unit separator. Never the attempt: every attempt and every resume reuses it. `inputs` is
/// the inputs' name in either form (`canonical::name_text`): the key is made from the digest,
/// so a call recorded before short values were named by themselves keeps its key.
pub fn idempotency_key(run: &str, step: &str, index: Option<u32>, inputs: &str) -> String {
    let inputs_digest = name_digest(inputs);
    // The digest of `run␟step[index]␟inputs` (`run␟step␟inputs` outside a `foreach`), hashed
    // in parts: every effect call makes a key, and formatting the text first cost two strings.
    const SEP: &[u8] = "\u{1f}".as_bytes();
    let index = index.map(|i| format!("[{i}]"));
    let index = index.as_deref().unwrap_or_default().as_bytes();
    sha256_hex_parts(&[
        run.as_bytes(),
        SEP,
        step.as_bytes(),
        index,
        SEP,
        inputs_digest.as_bytes(),
    ])
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
        // The text hashed is the one keys were always made of: a run started by an older reel
        // resumes with the same keys.
        assert_eq!(k, sha256_hex("r1\u{1f}s[2]\u{1f}d".as_bytes()));
        assert_eq!(
            idempotency_key("r1", "s", None, "d"),
            sha256_hex("r1\u{1f}s\u{1f}d".as_bytes())
        );
        // Inputs named by themselves make the key their digest would: a call recorded by a
        // reel that named them by digest keeps its key.
        let inputs = serde_json::json!({"value": 1});
        let digest = reel_flowspec::canonical::digest_value(&inputs);
        let name = reel_flowspec::canonical::name_value(&inputs);
        assert_ne!(name, digest);
        assert_eq!(
            idempotency_key("r1", "s", None, &name),
            idempotency_key("r1", "s", None, &digest)
        );
    }

    #[test]
    fn draws_depend_on_seed_and_purpose_only() {
        let a: f64 = seeded_rng(7, "s#0").random();
        let b: f64 = seeded_rng(7, "s#0").random();
        let c: f64 = seeded_rng(7, "s#1").random();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!((0.0..1.0).contains(&a));
        // The purposes an evaluation names spell what the seeds were always made of.
        assert_eq!(Purpose::Element("s", 0).text(), "s#0");
        assert_eq!(Purpose::Part("s", "when").text(), "s#when");
        assert_eq!(Purpose::Step("s").text(), "s");
        assert_eq!(Purpose::Text("#output").text(), "#output");
    }

    #[test]
    fn time_is_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    }
}
