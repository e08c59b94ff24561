//! The real capabilities, built where the program starts and handed to the libraries: the
//! system clock, this process's environment and secrets, and `REEL_HOME`. The compiler, the
//! engine, the store, the journal and the language server read no clock or environment of their
//! own (a lint forbids it, see `clippy.toml`); this is the edge that does.
//!
//! `run-bench` includes this file too (by path), so that the benchmark runs the engine with the
//! capabilities `reel run` gives it.

#![allow(clippy::disallowed_methods)]

use std::ffi::OsString;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_runtime::{BoxFuture, Clock, EnvSecrets, Environment};

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        // edge: the wall clock, read once per question by the one clock the program hands out.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        let wait = u64::try_from(at_ms - self.now_ms()).unwrap_or(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }

    fn is_real_time(&self) -> bool {
        true
    }
}

/// This process's environment, for the variables a flow declares (`env NAME`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnvironment;

impl Environment for ProcessEnvironment {
    fn get(&self, name: &str) -> Option<String> {
        // edge: a flow's declared environment is read from this process, at run start.
        std::env::var(name).ok()
    }
}

/// Secrets from this process's `REEL_SECRET_<NAME>` variables (the default provider).
pub fn process_secrets() -> EnvSecrets {
    // edge: secrets come from the environment of the process that runs the flow.
    EnvSecrets::from_variables(std::env::vars())
}

/// `REEL_STORE_URL` as this process has it: it puts the store on PostgreSQL when set.
pub fn store_url() -> Option<String> {
    // edge: where the store lives is the user's setting, read once at start.
    std::env::var(STORE_URL).ok()
}

/// Where the PostgreSQL store's password comes from when its URL has none:
/// `REEL_STORE_PASSWORD`, else the password file `PGPASSFILE` names, else `~/.pgpass`.
pub fn store_auth() -> reel_store::PgAuth {
    // edge: credentials are the user's environment, read once at start.
    let passfile = std::env::var_os("PGPASSFILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pgpass")));
    reel_store::PgAuth {
        password: std::env::var("REEL_STORE_PASSWORD").ok(),
        passfile,
    }
}

/// The variable naming the PostgreSQL store.
pub const STORE_URL: &str = reel_journal::discover::REEL_STORE_URL;

/// `REEL_HOME` as this process has it: it names the store directory when set.
pub fn reel_home() -> Option<OsString> {
    // edge: where the store lives is the user's setting, read once at start.
    std::env::var_os(reel_journal::discover::REEL_HOME)
}
