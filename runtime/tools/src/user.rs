//! User tools: a declared command that reads its arguments as JSON on stdin and prints one JSON
//! value, checked against the declared output type.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::{ToolCall, ToolError, ToolOutput, UserTool, codes};
use crate::exec::{TEMPFAIL, exit_message};
use crate::process::{self, BaseEnvironment, Spawn};
use crate::text::{Secrets, clip};

/// Runs a user tool once.
pub(crate) async fn call(
    call: &ToolCall,
    user: &UserTool,
    base: &BaseEnvironment,
    secrets: &Secrets,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let label = format!("tool `{}`", call.tool);
    if user.exec.is_empty() {
        return Err(ToolError::new(
            codes::EXEC_SPAWN,
            format!(
                "{label} declares an empty `exec`; give the command to run, such as \
                 [\"python3\", \"tools/{}.py\"]",
                call.tool
            ),
            false,
        ));
    }
    let stdin = serde_json::to_vec(&Value::Object(call.args.clone())).map_err(|e| {
        ToolError::new(
            codes::ARGS,
            format!("the arguments of {label} cannot be written as JSON: {e}"),
            false,
        )
    })?;
    let done = process::run(
        Spawn {
            label: label.clone(),
            argv: user.exec.clone(),
            dir: user.dir.clone(),
            base: base.clone(),
            env: call.env.to_vec(),
            idempotency_key: call.idempotency_key.clone(),
            stdin: Some(stdin),
            timeout: call.timeout,
        },
        cancel,
    )
    .await?;
    let stdout = secrets.text(&done.stdout);
    let stderr = secrets.text(&done.stderr);
    let failed = |code, message: String| ToolError {
        log: stderr.clone(),
        ..ToolError::new(code, message, false)
    };
    if !done.status.success() {
        let exit_code = done.status.code();
        return Err(ToolError {
            cause: Some(json!({ "exit_code": exit_code, "stdout": stdout, "stderr": stderr })),
            retryable: exit_code == Some(TEMPFAIL),
            ..failed(codes::EXEC_EXIT, exit_message(&label, done.status, &stderr))
        });
    }
    let value = match serde_json::from_str::<Value>(&stdout) {
        Ok(value) => secrets.value(value),
        Err(e) => {
            let printed = if stdout.trim().is_empty() {
                "nothing".to_string()
            } else {
                format!("`{}`", clip(stdout.trim(), 500))
            };
            return Err(ToolError {
                cause: Some(json!({ "stdout": stdout })),
                ..failed(
                    codes::OUTPUT_JSON,
                    format!(
                        "{label} must print one JSON value on stdout, but it printed {printed} \
                         ({e}); print logs on stderr instead"
                    ),
                )
            });
        }
    };
    if let Err(mismatch) = reel_eval::check_value(&value, &user.output) {
        let at = if mismatch.path.is_empty() {
            "its result".to_string()
        } else {
            format!("`{}` of its result", mismatch.path)
        };
        return Err(ToolError {
            cause: Some(json!({ "value": value })),
            ..failed(
                codes::OUTPUT_TYPE,
                format!(
                    "{label} printed a result that does not fit its declared output: {at} \
                     should be {}, found {}; fix the tool or its `output` declaration",
                    mismatch.expected, mismatch.found
                ),
            )
        });
    }
    Ok(ToolOutput { value, log: stderr })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use reel_flowspec::{ToolKind, Type};
    use serde_json::Map;

    use super::*;
    use crate::ToolHost;

    fn script(dir: &Path, name: &str, body: &str) {
        std::fs::create_dir_all(dir.join("tools")).unwrap();
        std::fs::write(dir.join("tools").join(name), body).unwrap();
    }

    fn user_call(dir: &Path, name: &str, args: Value, output: Type) -> ToolCall {
        ToolCall {
            tool: name.to_string(),
            kind: ToolKind::Pure,
            args: args.as_object().cloned().unwrap_or_else(Map::new),
            idempotency_key: None,
            run_dir: std::env::temp_dir(),
            env: Default::default(),
            user: Some(UserTool {
                exec: vec!["python3".to_string(), format!("tools/{name}.py")],
                dir: dir.to_path_buf(),
                output,
            }),
            timeout: None,
            secrets: Default::default(),
        }
    }

    fn score_type() -> Type {
        Type::record([
            ("words".to_string(), Type::Int),
            ("score".to_string(), Type::Float),
        ])
    }

    async fn run(call: ToolCall) -> Result<ToolOutput, ToolError> {
        ToolHost::new().call(call, CancellationToken::new()).await
    }

    #[tokio::test]
    async fn a_tool_gets_its_arguments_and_returns_its_result() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "score.py",
            "import json, os, sys\n\
             args = json.load(sys.stdin)\n\
             print('scoring', file=sys.stderr)\n\
             w = len(args['text'].split())\n\
             print(json.dumps({'words': w, 'score': w / 2, 'key': os.environ.get('REEL_IDEMPOTENCY_KEY')}))\n",
        );
        let mut call = user_call(dir.path(), "score", json!({"text": "a b c"}), score_type());
        call.idempotency_key = Some("key-1".to_string());
        let out = run(call).await.unwrap();
        assert_eq!(out.value, json!({"words": 3, "score": 1.5, "key": "key-1"}));
        assert_eq!(out.log, "scoring\n");
    }

    #[tokio::test]
    async fn printing_something_else_than_json_fails() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "chatty.py",
            "print('hello there')\nprint('{}')\n",
        );
        let err = run(user_call(dir.path(), "chatty", json!({}), Type::Json))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::OUTPUT_JSON);
        assert!(!err.retryable);
        assert!(err.message.contains("hello there"), "{}", err.message);

        script(dir.path(), "long.py", "print('x' * 5000)\n");
        let err = run(user_call(dir.path(), "long", json!({}), Type::Json))
            .await
            .unwrap_err();
        assert!(err.message.len() < 800, "{}", err.message);
        assert!(err.message.contains("more characters"), "{}", err.message);

        script(dir.path(), "silent.py", "pass\n");
        let err = run(user_call(dir.path(), "silent", json!({}), Type::Json))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::OUTPUT_JSON);
        assert!(err.message.contains("printed nothing"), "{}", err.message);
    }

    #[tokio::test]
    async fn a_result_that_does_not_fit_the_output_type_fails() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "wrong.py",
            "print('{\"words\": \"three\", \"score\": 1}')\n",
        );
        let err = run(user_call(dir.path(), "wrong", json!({}), score_type()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::OUTPUT_TYPE);
        assert!(!err.retryable);
        assert!(err.message.contains(".words"), "{}", err.message);
        assert!(err.message.contains("int"), "{}", err.message);
        assert!(err.message.contains("three"), "{}", err.message);
    }

    #[tokio::test]
    async fn exit_75_may_be_retried_and_other_failures_not() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "flaky.py",
            "import sys\nprint('not yet', file=sys.stderr)\nsys.exit(75)\n",
        );
        let err = run(user_call(dir.path(), "flaky", json!({}), Type::Json))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::EXEC_EXIT);
        assert!(err.retryable);
        assert_eq!(err.log, "not yet\n");

        script(
            dir.path(),
            "broken.py",
            "import sys\nprint('line 1\\nline 2\\nfatal: broken', file=sys.stderr)\nsys.exit(3)\n",
        );
        let err = run(user_call(dir.path(), "broken", json!({}), Type::Json))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::EXEC_EXIT);
        assert!(!err.retryable);
        assert!(err.message.contains("status 3"), "{}", err.message);
        assert!(err.message.contains("fatal: broken"), "{}", err.message);
    }

    #[tokio::test]
    async fn a_secret_argument_printed_by_the_tool_is_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        script(
            dir.path(),
            "leaky.py",
            "import json, sys\n\
             args = json.load(sys.stdin)\n\
             print('token is ' + args['token'], file=sys.stderr)\n\
             print('not json ' + args['token'])\n",
        );
        let mut call = user_call(
            dir.path(),
            "leaky",
            json!({"token": "sk-live-42"}),
            Type::Json,
        );
        call.secrets = vec![("api_key".to_string(), "sk-live-42".to_string())].into();
        let err = run(call.clone()).await.unwrap_err();
        assert_eq!(err.code, codes::OUTPUT_JSON);
        let all = format!("{} | {} | {:?}", err.message, err.log, err.cause);
        assert!(!all.contains("sk-live-42"), "{all}");
        assert_eq!(err.log, "token is {secret:api_key}\n");
        assert!(err.message.contains("{secret:api_key}"), "{}", err.message);

        script(
            dir.path(),
            "leaky.py",
            "import json, sys\n\
             args = json.load(sys.stdin)\n\
             print('token is ' + args['token'], file=sys.stderr)\n\
             sys.exit(1)\n",
        );
        let err = run(call.clone()).await.unwrap_err();
        assert_eq!(err.code, codes::EXEC_EXIT);
        let all = format!("{} | {} | {:?}", err.message, err.log, err.cause);
        assert!(!all.contains("sk-live-42"), "{all}");
        assert!(
            err.message.contains("token is {secret:api_key}"),
            "{}",
            err.message
        );

        script(
            dir.path(),
            "leaky.py",
            "import json, sys\n\
             args = json.load(sys.stdin)\n\
             print('token is ' + args['token'], file=sys.stderr)\n\
             print(json.dumps({'echo': args['token']}))\n",
        );
        let out = run(call).await.unwrap();
        assert_eq!(out.log, "token is {secret:api_key}\n");
        assert_eq!(out.value, json!({"echo": "{secret:api_key}"}));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "slow.py", "import time\ntime.sleep(30)\n");
        let mut call = user_call(dir.path(), "slow", json!({}), Type::Json);
        call.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let err = run(call).await.unwrap_err();
        assert_eq!(err.code, codes::TIMEOUT);
        assert!(err.retryable);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn an_empty_exec_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut call = user_call(dir.path(), "nothing", json!({}), Type::Json);
        if let Some(user) = call.user.as_mut() {
            user.exec.clear();
        }
        let err = run(call).await.unwrap_err();
        assert_eq!(err.code, codes::EXEC_SPAWN);
        assert!(err.message.contains("empty `exec`"), "{}", err.message);
    }
}
