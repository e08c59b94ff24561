//! What the engine is given: every non-deterministic thing reaches it through these.
//!
//! The engine reads no ambient clock, randomness, environment or network: the same engine runs
//! live, in replay and in tests with virtual time, depending on what it is handed here.

use std::collections::BTreeMap;
use std::sync::Arc;

use reel_store::{Owner, Store};
use reel_tools::{ToolCall, ToolError, ToolHost, ToolOutput};
use tokio_util::sync::CancellationToken;

/// Time comes from the one clock trait, which lives below the store (the store takes lease and
/// signal times from it too).
pub use reel_store::{BoxFuture, Clock, ManualClock};

/// Where secret values come from; resolved fresh at every start and resume, never stored.
pub trait Secrets: Send + Sync {
    /// The value of secret `name`, if it can be resolved.
    fn get(&self, name: &str) -> Option<String>;
}

/// Secrets from `REEL_SECRET_<NAME>` environment variables (the default provider).
#[derive(Clone, Debug, Default)]
pub struct EnvSecrets {
    vars: BTreeMap<String, String>,
}

impl EnvSecrets {
    /// Secrets from environment variables as they are named (`REEL_SECRET_<NAME>`, others are
    /// left out): the program's entry point hands in its process's variables.
    pub fn from_variables(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        EnvSecrets {
            vars: vars
                .into_iter()
                .filter(|(k, _)| k.starts_with("REEL_SECRET_"))
                .collect(),
        }
    }

    /// Secrets from explicit pairs (name as declared, value), for tests.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        EnvSecrets {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (secret_variable(&k), v))
                .collect(),
        }
    }
}

/// The environment variable that holds secret `name`.
pub fn secret_variable(name: &str) -> String {
    format!("REEL_SECRET_{}", name.to_uppercase())
}

impl Secrets for EnvSecrets {
    fn get(&self, name: &str) -> Option<String> {
        self.vars.get(&secret_variable(name)).cloned()
    }
}

/// The environment values a flow may declare (`env NAME`), read once at run start.
pub trait Environment: Send + Sync {
    /// The variable `name`, if set.
    fn get(&self, name: &str) -> Option<String>;
}

/// Performs one attempt of one tool call.
pub trait Tools: Send + Sync {
    /// Runs `call`, stopping early when `cancel` fires.
    fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>>;
}

impl Tools for ToolHost {
    fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(ToolHost::call(self, call, cancel))
    }
}

/// What the engine reports as a run progresses, for the CLI's live display.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// A new run is recorded (its beginning committed): from here it can be listed, followed
    /// and resumed. Never reported for a run refused before that (a bad input, a missing
    /// secret), so a display that names the run on this names no run that does not exist.
    RunCreated {
        /// The run.
        run: String,
    },
    /// A step began (or began again after a resume).
    StepRunning {
        /// The step.
        step: String,
        /// How many calls it makes (`foreach`), if known.
        calls: Option<usize>,
    },
    /// A call of a `foreach` step succeeded (one of its `calls`).
    CallDone {
        /// The step.
        step: String,
    },
    /// A call failed and will be tried again.
    Retrying {
        /// The step.
        step: String,
        /// The attempt that failed.
        attempt: u32,
        /// Its error code.
        code: String,
    },
    /// A step ended.
    StepDone {
        /// The step.
        step: String,
        /// How it ended (or that it now waits).
        state: StepEnd,
        /// How long it ran (ms).
        duration_ms: i64,
        /// Attempts in all.
        attempts: u32,
        /// Calls it made (one per `foreach` element; 1 otherwise).
        calls: u32,
        /// The error code or the skip reason or what it waits for.
        detail: Option<String>,
    },
}

/// How a step's part in a run ended, as progress reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepEnd {
    /// Its value is recorded.
    Succeeded,
    /// It failed for good.
    Failed,
    /// Its `when` was false.
    Skipped,
    /// It waits for a timer or a signal (the run parks).
    Waiting,
}

impl StepEnd {
    /// The word the display and docs use.
    pub fn as_str(self) -> &'static str {
        match self {
            StepEnd::Succeeded => "succeeded",
            StepEnd::Failed => "failed",
            StepEnd::Skipped => "skipped",
            StepEnd::Waiting => "waiting",
        }
    }
}

/// Receives progress; the CLI draws it, tests ignore it.
pub trait ProgressSink: Send + Sync {
    /// One progress event.
    fn report(&self, progress: Progress);
}

/// Ignores progress.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn report(&self, _: Progress) {}
}

/// Everything a run needs from the outside world.
#[derive(Clone)]
pub struct RunDeps {
    /// Where runs are recorded.
    pub store: Arc<dyn Store>,
    /// How calls are made.
    pub tools: Arc<dyn Tools>,
    /// What time it is.
    pub clock: Arc<dyn Clock>,
    /// Secret values.
    pub secrets: Arc<dyn Secrets>,
    /// Environment values.
    pub env: Arc<dyn Environment>,
    /// Progress display.
    pub progress: Arc<dyn ProgressSink>,
    /// Stops everything this process runs (Ctrl-C): the run stays resumable.
    pub shutdown: CancellationToken,
    /// This process, as a lease holder.
    pub owner: Owner,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_only_from_reel_secret_variables() {
        let secrets = EnvSecrets::from_variables([
            ("REEL_SECRET_TOKEN".to_string(), "t0k3n".to_string()),
            ("HOME".to_string(), "/home/me".to_string()),
        ]);
        assert_eq!(secrets.get("token").as_deref(), Some("t0k3n"));
        assert_eq!(secrets.get("home"), None);
        assert_eq!(secrets.vars.len(), 1);
    }
}
