//! The engine's error: a stable code, the step, whether it can be retried, never a secret.

use serde::{Deserialize, Serialize};

/// Why a call, a step or a run failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RunError {
    /// Stable code (`tool.http.status`, `eval.type`, `signal.timeout`, `output.type`, …).
    pub code: String,
    /// What went wrong and what to do about it (secrets scrubbed).
    pub message: String,
    /// The step it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Whether another attempt may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// Digest of the value that explains it (an HTTP response, a command's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl RunError {
    /// An error with `code` and `message`, not retryable, about no step.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        RunError {
            code: code.into(),
            message: message.into(),
            step: None,
            retryable: false,
            cause: None,
        }
    }

    /// The same error, about `step`.
    pub fn at_step(mut self, step: &str) -> Self {
        self.step = Some(step.to_string());
        self
    }
}
