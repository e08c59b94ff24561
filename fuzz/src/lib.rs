//! A small mutational fuzzer that runs on stable Rust: seeded inputs from the repository
//! (`examples/`), mutated at random (bytes flipped, inserted, deleted, duplicated, spliced
//! between seeds, cut short, or Reel tokens dropped in) and handed to a target for a bounded
//! time. It is not coverage-guided (libFuzzer and AFL need an instrumented, nightly or
//! specially built toolchain, which this project's machines do not have); it makes up for it
//! with structure-aware seeds and many cheap executions.
//!
//! A target that panics fails the run with the seed that reproduces it and the input, written
//! to `target/fuzz-failures/`. The time per target comes from `REEL_FUZZ_SECS` (default a few
//! seconds, so the workspace's tests stay fast) and the seed from `REEL_FUZZ_SEED`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seconds per target when `REEL_FUZZ_SECS` is not set: the bounded run of CI.
pub const DEFAULT_SECS: u64 = 12;

/// Pieces of Reel text a mutation may drop in, so mutants reach past the lexer.
pub const TOKENS: &[&str] = &[
    "flow",
    "step",
    "input",
    "output",
    "secret",
    "env",
    "tool",
    "when",
    "foreach",
    "after",
    "retry",
    "timeout",
    "concurrency",
    "item",
    "index",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    ".",
    "?.",
    "??",
    "=",
    "==",
    "+",
    "-",
    "*",
    "/",
    "%",
    "&&",
    "||",
    "!",
    "<",
    ">",
    "${",
    "\"",
    "\"\"\"",
    "///",
    "//",
    "\n",
    " ",
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "1.5e308",
    "10s",
    "true",
    "null",
    "echo",
    "exec",
    "sleep",
    "signal",
    "http.get",
    "list<",
    "json",
    "string?",
    "if",
    "then",
    "else",
    "for",
    "in",
    "\u{0}",
    "\u{feff}",
    "é",
    "🦀",
];

/// What a fuzz run did, for the figures.
#[derive(Clone, Debug)]
pub struct Report {
    /// The target.
    pub target: &'static str,
    /// Inputs tried.
    pub executions: u64,
    /// How long it ran.
    pub elapsed: Duration,
    /// The seed (`REEL_FUZZ_SEED` repeats the run).
    pub seed: u64,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fuzz {}: {} executions in {:.1}s ({:.0}/s), seed {} (REEL_FUZZ_SEED={} repeats it)",
            self.target,
            self.executions,
            self.elapsed.as_secs_f64(),
            self.executions as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.seed,
            self.seed
        )
    }
}

/// The time budget per target and the seed, from the environment.
// edge: a test harness's own knobs, read where it starts; nothing of Reel reads them.
#[allow(clippy::disallowed_methods)]
pub fn budget() -> (Duration, u64) {
    let secs = std::env::var("REEL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS);
    let seed = std::env::var("REEL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    (Duration::from_secs(secs), seed)
}

/// The repository's directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.reel` file under `examples/`, as seeds.
pub fn example_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut dirs = vec![repo().join("examples")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "reel")
                && let Ok(bytes) = std::fs::read(&path)
            {
                out.push(bytes);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 5, "the examples seed the fuzzer");
    out
}

/// Every `*.cassette.json` under `tests/corpus/`, as seeds.
pub fn cassette_seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(repo().join("tests/corpus"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".cassette.json"))
        })
        .filter_map(|path| std::fs::read(path).ok())
        .collect();
    out.sort();
    assert!(out.len() >= 5, "the corpus's cassettes seed the fuzzer");
    out
}

/// One random change to `input`, drawing on `seeds` for splices.
pub fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = input.len();
    let at = |rng: &mut StdRng| {
        if len == 0 {
            0
        } else {
            rng.random_range(0..=len)
        }
    };
    match rng.random_range(0..9) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            input[i] ^= 1 << rng.random_range(0..8);
        }
        1 => {
            let i = at(rng);
            input.insert(i, rng.random());
        }
        2 if len > 0 => {
            let i = rng.random_range(0..len);
            let n = rng.random_range(1..=(len - i).min(64));
            input.drain(i..i + n);
        }
        3 if len > 0 => {
            // Duplicate a chunk: nesting and repetition.
            let i = rng.random_range(0..len);
            let n = rng.random_range(1..=(len - i).min(256));
            let chunk: Vec<u8> = input[i..i + n].to_vec();
            let j = at(rng);
            input.splice(j..j, chunk);
        }
        4 if !seeds.is_empty() => {
            // Splice a piece of another seed in.
            let other = &seeds[rng.random_range(0..seeds.len())];
            if !other.is_empty() {
                let i = rng.random_range(0..other.len());
                let n = rng.random_range(1..=(other.len() - i).min(512));
                let j = at(rng);
                input.splice(j..j, other[i..i + n].iter().copied());
            }
        }
        5 if len > 0 => input.truncate(rng.random_range(0..len)),
        _ => {
            let token = TOKENS[rng.random_range(0..TOKENS.len())].as_bytes();
            let j = at(rng);
            input.splice(j..j, token.iter().copied());
        }
    }
    // Inputs stay small, so a slow pass shows as few executions rather than a stall.
    input.truncate(64 * 1024);
}

/// Runs `target` on mutants of `seeds` for the budget; a panic fails with what reproduces it.
pub fn fuzz(target: &'static str, seeds: &[Vec<u8>], mut check: impl FnMut(&[u8])) -> Report {
    let (budget, seed) = budget();
    let mut rng = StdRng::seed_from_u64(seed);
    // edge: the harness's time budget; nothing of Reel reads this clock.
    #[allow(clippy::disallowed_methods)]
    let began = Instant::now();
    let mut executions = 0u64;
    // Every seed as it is, first.
    let mut queue: Vec<Vec<u8>> = seeds.to_vec();
    loop {
        let input = match queue.pop() {
            Some(i) => i,
            None => {
                if began.elapsed() >= budget {
                    break;
                }
                let mut input = seeds[rng.random_range(0..seeds.len())].clone();
                for _ in 0..rng.random_range(1..=8) {
                    mutate(&mut rng, &mut input, seeds);
                }
                input
            }
        };
        executions += 1;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&input))) {
            let dir = repo().join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{seed}-{executions}"));
            let _ = std::fs::write(&file, &input);
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!(
                "fuzz {target}: execution {executions} failed (seed {seed}; input in {}): {message}\ninput: {:?}",
                file.display(),
                String::from_utf8_lossy(&input)
            );
        }
    }
    let report = Report {
        target,
        executions,
        elapsed: began.elapsed(),
        seed,
    };
    eprintln!("{report}");
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_of_one_seed_differ_and_stay_bounded() {
        let seeds = vec![b"flow f {\n  output 1\n}\n".to_vec()];
        let mut rng = StdRng::seed_from_u64(7);
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..200 {
            let mut input = seeds[0].clone();
            for _ in 0..4 {
                mutate(&mut rng, &mut input, &seeds);
            }
            assert!(input.len() <= 64 * 1024);
            distinct.insert(input);
        }
        assert!(distinct.len() > 150, "{}", distinct.len());
    }
}
