//! The tool host's interface and the plain types that cross it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reel_flowspec::{ToolKind, Type};
use serde::Serialize;
use serde_json::{Map, Value};

/// A user tool's command and contract, from the FlowSpec.
#[derive(Clone, Debug, PartialEq)]
pub struct UserTool {
    /// The command and its arguments.
    pub exec: Vec<String>,
    /// The directory the command runs in (the directory of the file that declares the tool).
    pub dir: PathBuf,
    /// The declared result type; a result that does not fit fails the call.
    pub output: Type,
}

/// One attempt of one call.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// The tool's name (`http.get`, `exec`, a user tool's name).
    pub tool: String,
    /// Its kind.
    pub kind: ToolKind,
    /// The arguments, secrets resolved to their values (never logged, never returned).
    pub args: Map<String, Value>,
    /// The idempotency key, for effects: sent as `Idempotency-Key` by http effects and as
    /// `REEL_IDEMPOTENCY_KEY` to commands.
    pub idempotency_key: Option<String>,
    /// The directory the run was started in: `exec` runs there (or in `cwd` relative to it),
    /// `fs.*` resolve relative paths against it.
    pub run_dir: PathBuf,
    /// The flow's declared `env` values from the run's snapshot (unset ones left out): every
    /// command the call starts sees them, and no other variable of the launching shell.
    pub env: Arc<[(String, String)]>,
    /// Set for a user tool.
    pub user: Option<UserTool>,
    /// The attempt's time limit.
    pub timeout: Option<Duration>,
    /// Secret values to scrub from anything the host returns (stderr, error messages).
    pub secrets: Arc<[(String, String)]>,
}

/// A call that succeeded.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    /// The result, already checked against the tool's result type.
    pub value: Value,
    /// What the tool printed on stderr (commands) — secrets scrubbed; empty for http.
    pub log: String,
}

/// A call that failed, with a stable code.
#[derive(Clone, Debug, PartialEq, Serialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Stable code: `tool.http.status`, `tool.http.timeout`, `tool.http.connect`,
    /// `tool.exec.exit`, `tool.exec.spawn`, `tool.output.json`, `tool.output.type`,
    /// `tool.fs.io`, `tool.args`, `tool.timeout`, `tool.canceled`, …
    pub code: &'static str,
    /// What went wrong, in words that say what to fix; secrets scrubbed.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// Details that explain the failure (status and body of an HTTP response, exit status and
    /// stdout of a command), secrets scrubbed; the engine stores it by digest.
    pub cause: Option<Value>,
    /// What the tool printed before failing — secrets scrubbed.
    pub log: String,
}

impl ToolError {
    /// An error with no cause and no log.
    pub fn new(code: &'static str, message: impl Into<String>, retryable: bool) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            retryable,
            cause: None,
            log: String::new(),
        }
    }
}

/// The most a tool's result may hold: a command's stdout, an HTTP response's body, a file
/// `fs.read` reads. Past it the call fails for good, so a command that prints without end, a
/// server that answers without end or a file that never ends (`/dev/zero`) cannot fill the
/// memory of `reel`, and of every run a worker drives beside it, or the store.
pub const RESULT_LIMIT: usize = 64 << 20;

/// The stable codes of [`ToolError`].
pub mod codes {
    /// An HTTP response with a status of 400 or more (retryable for 408, 429 and 5xx).
    pub const HTTP_STATUS: &str = "tool.http.status";
    /// An HTTP request that did not finish within the call's timeout (retryable).
    pub const HTTP_TIMEOUT: &str = "tool.http.timeout";
    /// No connection, or the connection failed during the exchange (retryable).
    pub const HTTP_CONNECT: &str = "tool.http.connect";
    /// The `url` is not an absolute http(s) URL.
    pub const HTTP_URL: &str = "tool.http.url";
    /// A `GET` was redirected more than 10 times.
    pub const HTTP_REDIRECT: &str = "tool.http.redirect";
    /// The HTTP client could not be set up (for example no usable TLS root certificates).
    pub const HTTP_CLIENT: &str = "tool.http.client";
    /// An HTTP response's body was longer than [`super::RESULT_LIMIT`].
    pub const HTTP_RESPONSE: &str = "tool.http.response-too-large";
    /// A command exited with a non-zero status (retryable for 75, EX_TEMPFAIL).
    pub const EXEC_EXIT: &str = "tool.exec.exit";
    /// A command could not be started.
    pub const EXEC_SPAWN: &str = "tool.exec.spawn";
    /// A command's arguments and environment are longer than the system lets one process
    /// have (`E2BIG`): the flow must hand the data over another way (`stdin`).
    pub const EXEC_TOO_LONG: &str = "tool.exec.too-long";
    /// A command printed more than its limit on stdout and was killed.
    pub const EXEC_OUTPUT: &str = "tool.exec.output-too-large";
    /// A user tool printed something that is not one JSON value.
    pub const OUTPUT_JSON: &str = "tool.output.json";
    /// A user tool's result does not fit its declared `output` type.
    pub const OUTPUT_TYPE: &str = "tool.output.type";
    /// `fs.read` or `fs.write` failed.
    pub const FS_IO: &str = "tool.fs.io";
    /// `fs.read` found more than [`super::RESULT_LIMIT`] in its file.
    pub const FS_TOO_LARGE: &str = "tool.fs.too-large";
    /// An argument has the wrong shape.
    pub const ARGS: &str = "tool.args";
    /// A command or file operation did not finish within the call's timeout (retryable).
    pub const TIMEOUT: &str = "tool.timeout";
    /// The call was canceled by its token.
    pub const CANCELED: &str = "tool.canceled";
    /// No built-in tool has that name and no user tool was given.
    pub const UNKNOWN: &str = "tool.unknown";
}

/// Replaces every secret value in `text` with `{secret:NAME}`.
pub fn scrub(text: &str, secrets: &[(String, String)]) -> String {
    let mut out = text.to_string();
    for (name, value) in secrets {
        if !value.is_empty() {
            out = out.replace(value.as_str(), &format!("{{secret:{name}}}"));
        }
    }
    out
}
