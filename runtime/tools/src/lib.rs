//! Reel's tool host: runs one call of a built-in tool or a user tool and says how it ended.
//!
//! The engine decides what to call, when, how often and with which idempotency key; the host
//! only performs one attempt, honours the cancellation it is given (a child process is killed,
//! a request dropped), and reports an error with a stable code and whether it may be retried.
//! `sleep` and `signal` are not here: waiting is the engine's business.
//!
//! Everything the host returns (results, logs, messages, causes) has the call's secret values
//! replaced by `{secret:NAME}`.

mod api;
mod args;
mod exec;
mod fs;
mod http;
mod process;
mod text;
mod user;

use std::future::Future;

use tokio_util::sync::CancellationToken;

pub use api::*;
pub use process::{BASE_VARIABLES, BaseEnvironment};

use crate::args::Args;
use crate::text::{Secrets, duration};

/// Performs attempts of tool calls; cheap to clone, and shared by all calls of a process.
#[derive(Clone, Debug)]
pub struct ToolHost {
    /// The HTTP clients, built at the first `http.*` call.
    http: http::Clients,
    /// What every command's environment starts from.
    base: BaseEnvironment,
}

impl Default for ToolHost {
    fn default() -> Self {
        ToolHost::new()
    }
}

impl ToolHost {
    /// A host whose commands see the base variables of this process's environment (built
    /// where the program starts); its HTTP clients are set up when the first `http.*` call
    /// needs them.
    pub fn new() -> ToolHost {
        ToolHost::with_base(BaseEnvironment::from_process())
    }

    /// A host whose commands start from `base` (see [`BASE_VARIABLES`]).
    pub fn with_base(base: BaseEnvironment) -> ToolHost {
        ToolHost {
            http: http::Clients::default(),
            base,
        }
    }

    /// Performs one attempt of `call`; cancelling `cancel` stops it with `tool.canceled`.
    pub async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let secrets = Secrets::new(&call.secrets);
        let result = if cancel.is_cancelled() {
            Err(ToolError::new(
                codes::CANCELED,
                format!("the call of `{}` was canceled before it started", call.tool),
                false,
            ))
        } else {
            self.dispatch(&call, &secrets, &cancel).await
        };
        // Every path scrubs what it shortens; this catches anything left whole.
        match result {
            Ok(output) => Ok(secrets.output(output)),
            Err(error) => Err(secrets.error(error)),
        }
    }

    async fn dispatch(
        &self,
        call: &ToolCall,
        secrets: &Secrets,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(user) = &call.user {
            return user::call(call, user, &self.base, secrets, cancel).await;
        }
        if let Some(method) = http::method(&call.tool) {
            return http::call(&self.http, method, call, secrets, cancel).await;
        }
        match call.tool.as_str() {
            "exec" => exec::call(call, &self.base, secrets, cancel).await,
            "fs.read" => bounded(call, cancel, fs::read(call, secrets)).await,
            "fs.write" => bounded(call, cancel, fs::write(call, secrets)).await,
            "echo" => {
                let value =
                    Args::new(&call.tool, &call.args, secrets).required("value", "any value")?;
                Ok(ToolOutput {
                    value: value.clone(),
                    log: String::new(),
                })
            }
            "sleep" | "signal" => Err(ToolError::new(
                codes::UNKNOWN,
                format!(
                    "`{}` is waited for by the engine and never reaches the tool host",
                    call.tool
                ),
                false,
            )),
            other => Err(ToolError::new(
                codes::UNKNOWN,
                format!(
                    "there is no built-in tool `{other}` (the built-ins are http.get, http.post, \
                     http.put, http.delete, exec, fs.read, fs.write and echo), and no user tool \
                     was given for it; declare it with `tool {other} {{ … }}`"
                ),
                false,
            )),
        }
    }
}

/// Runs an in-process tool under the call's timeout and cancellation.
async fn bounded(
    call: &ToolCall,
    cancel: &CancellationToken,
    work: impl Future<Output = Result<ToolOutput, ToolError>>,
) -> Result<ToolOutput, ToolError> {
    let deadline = async {
        match call.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(ToolError::new(
            codes::CANCELED,
            format!("the call of `{}` was canceled before it finished", call.tool),
            false,
        )),
        _ = deadline => Err(ToolError::new(
            codes::TIMEOUT,
            format!(
                "`{}` did not finish within its timeout of {}; raise the step's `timeout`",
                call.tool,
                duration(call.timeout.unwrap_or_default())
            ),
            true,
        )),
        result = work => result,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use reel_flowspec::ToolKind;
    use serde_json::{Value, json};

    use super::*;

    fn call(tool: &str, args: Value) -> ToolCall {
        ToolCall {
            tool: tool.to_string(),
            kind: ToolKind::Effect,
            args: args.as_object().cloned().unwrap_or_default(),
            idempotency_key: None,
            run_dir: PathBuf::from("/"),
            env: Default::default(),
            user: None,
            timeout: None,
            secrets: Default::default(),
        }
    }

    #[tokio::test]
    async fn echo_returns_its_value_unchanged() {
        let host = ToolHost::new();
        let value = json!({"name": "a", "doubled": [2, 4.5, null]});
        let out = host
            .call(
                call("echo", json!({ "value": value })),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(out.value, value);
        let out = host
            .call(
                call("echo", json!({ "value": null })),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(out.value, Value::Null);
        let err = host
            .call(call("echo", json!({})), CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::ARGS);
    }

    #[tokio::test]
    async fn unknown_tools_are_reported() {
        let err = ToolHost::new()
            .call(call("http.patch", json!({})), CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::UNKNOWN);
        assert!(!err.retryable);
        assert!(err.message.contains("`http.patch`"), "{}", err.message);
    }

    #[tokio::test]
    async fn a_canceled_token_stops_the_call_before_it_starts() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let dir = tempfile::tempdir().unwrap();
        let mut write = call("fs.write", json!({"path": "x.txt", "text": "t"}));
        write.run_dir = dir.path().to_path_buf();
        let err = ToolHost::new().call(write, cancel).await.unwrap_err();
        assert_eq!(err.code, codes::CANCELED);
        assert!(!dir.path().join("x.txt").exists());
    }

    #[test]
    fn calls_can_run_on_any_worker_thread() {
        fn send<T: Send>(_: T) {}
        let host = ToolHost::new();
        send(host.call(call("echo", json!({"value": 1})), CancellationToken::new()));
        fn shared<T: Send + Sync>() {}
        shared::<ToolHost>();
    }
}
