//! Reads of the ambient clock and environment, each of which the workspace's clippy.toml must
//! refuse, and one use marked as an allowed edge, which it must accept. Never built into
//! anything; scripts/lint-capabilities.sh runs clippy on it and expects exactly the refusals
//! listed there.

/// The wall clock, read directly.
pub fn wall_clock() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// The monotonic clock, read directly.
pub fn monotonic_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// One environment variable.
pub fn variable() -> Option<String> {
    std::env::var("HOME").ok()
}

/// One environment variable, as the OS has it.
pub fn variable_os() -> Option<std::ffi::OsString> {
    std::env::var_os("HOME")
}

/// The whole environment.
pub fn variables() -> usize {
    std::env::vars().count()
}

/// The whole environment, as the OS has it.
pub fn variables_os() -> usize {
    std::env::vars_os().count()
}

/// A use marked as an allowed edge: the lint must let it through.
// edge: the probe's own check that a marked use passes.
#[allow(clippy::disallowed_methods)]
pub fn allowed_edge() -> std::time::Instant {
    std::time::Instant::now()
}
