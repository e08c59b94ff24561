//! The built-in `exec` tool: one command in the run directory, its output as the result.

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::{ToolCall, ToolError, ToolOutput, codes};
use crate::args::Args;
use crate::process::{self, BaseEnvironment, Spawn, describe};
use crate::text::{Secrets, clip, tail};

/// Exit status that asks for another attempt (EX_TEMPFAIL).
pub(crate) const TEMPFAIL: i32 = 75;

/// Runs `exec` once.
pub(crate) async fn call(
    call: &ToolCall,
    base: &BaseEnvironment,
    secrets: &Secrets,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let args = Args::new(&call.tool, &call.args, secrets);
    let argv = args.string_list("cmd")?;
    let stdin = args.optional("stdin").map(|value| match value {
        Value::String(text) => text.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    });
    let dir = match args.opt_string("cwd")? {
        Some(cwd) => call.run_dir.join(cwd),
        None => call.run_dir.clone(),
    };
    let mut env = call.env.to_vec();
    env.extend(env_vars(&args)?);
    let label = format!("exec `{}`", clip(&secrets.text(&argv.join(" ")), 200));
    let done = process::run(
        Spawn {
            label: label.clone(),
            argv,
            dir,
            base: base.clone(),
            env,
            idempotency_key: call.idempotency_key.clone(),
            stdin,
            timeout: call.timeout,
        },
        cancel,
    )
    .await?;
    let stdout = secrets.text(&done.stdout);
    let stderr = secrets.text(&done.stderr);
    if !done.status.success() {
        let code = done.status.code();
        return Err(ToolError {
            cause: Some(json!({ "exit_code": code, "stdout": stdout, "stderr": stderr })),
            log: stderr.clone(),
            ..ToolError::new(
                codes::EXEC_EXIT,
                exit_message(&label, done.status, &stderr),
                code == Some(TEMPFAIL),
            )
        });
    }
    let parsed = serde_json::from_str::<Value>(&stdout).unwrap_or(Value::Null);
    Ok(ToolOutput {
        value: json!({ "stdout": stdout, "stderr": stderr, "json": parsed }),
        log: stderr,
    })
}

/// The message for a command that exited non-zero: its status and the end of its stderr.
pub(crate) fn exit_message(label: &str, status: std::process::ExitStatus, stderr: &str) -> String {
    let hint = if status.code() == Some(TEMPFAIL) {
        " (75 asks for another attempt)"
    } else {
        ""
    };
    let last = tail(stderr, 10, 1000);
    if last.is_empty() {
        format!(
            "{label} {}{hint}; it printed nothing on stderr",
            describe(status)
        )
    } else {
        format!(
            "{label} {}{hint}; the end of its stderr:\n{last}",
            describe(status)
        )
    }
}

/// The `env` argument, checked to be names a process environment can hold.
fn env_vars(args: &Args) -> Result<Vec<(String, String)>, ToolError> {
    args.string_map("env")?
        .into_iter()
        .map(|(name, value)| {
            if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
                Err(ToolError::new(
                    codes::ARGS,
                    format!(
                        "argument `env` of `exec` has the variable `{name}`, which cannot be set: \
                         a name must be non-empty without `=`, and neither name nor value may \
                         hold a NUL character"
                    ),
                    false,
                ))
            } else {
                Ok((name.to_string(), value.to_string()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use reel_flowspec::ToolKind;
    use serde_json::Map;

    use super::*;
    use crate::ToolHost;
    use crate::process::{BASE_VARIABLES, alive};

    fn exec(args: Value, dir: &Path) -> ToolCall {
        ToolCall {
            tool: "exec".to_string(),
            kind: ToolKind::Effect,
            args: args.as_object().cloned().unwrap_or_else(Map::new),
            idempotency_key: None,
            run_dir: dir.to_path_buf(),
            env: Default::default(),
            user: None,
            timeout: None,
            secrets: Default::default(),
        }
    }

    async fn run(call: ToolCall) -> Result<ToolOutput, ToolError> {
        ToolHost::new().call(call, CancellationToken::new()).await
    }

    #[tokio::test]
    async fn stdout_stderr_and_json_are_returned() {
        let dir = tempfile::tempdir().unwrap();
        let call = exec(
            json!({"cmd": ["sh", "-c", "echo '{\"a\": 1}'; echo oops >&2"]}),
            dir.path(),
        );
        let out = run(call).await.unwrap();
        assert_eq!(
            out.value,
            json!({"stdout": "{\"a\": 1}\n", "stderr": "oops\n", "json": {"a": 1}})
        );
        assert_eq!(out.log, "oops\n");

        let out = run(exec(json!({"cmd": ["echo", "plain"]}), dir.path()))
            .await
            .unwrap();
        assert_eq!(out.value["json"], Value::Null);
    }

    #[tokio::test]
    async fn stdin_is_json_text_or_the_string_itself() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(exec(
            json!({"cmd": ["cat"], "stdin": {"k": [1]}}),
            dir.path(),
        ))
        .await;
        assert_eq!(out.unwrap().value["stdout"], "{\"k\":[1]}");
        let out = run(exec(json!({"cmd": ["cat"], "stdin": "raw\n"}), dir.path())).await;
        assert_eq!(out.unwrap().value["stdout"], "raw\n");
    }

    #[tokio::test]
    async fn exit_1_fails_for_good_and_exit_75_may_be_retried() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(exec(
            json!({"cmd": ["sh", "-c", "echo out; echo bad thing >&2; exit 1"]}),
            dir.path(),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::EXEC_EXIT);
        assert!(!err.retryable);
        assert!(
            err.message.contains("exited with status 1"),
            "{}",
            err.message
        );
        assert!(err.message.contains("bad thing"), "{}", err.message);
        assert_eq!(
            err.cause,
            Some(json!({"exit_code": 1, "stdout": "out\n", "stderr": "bad thing\n"}))
        );
        assert_eq!(err.log, "bad thing\n");

        let err = run(exec(json!({"cmd": ["sh", "-c", "exit 75"]}), dir.path()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::EXEC_EXIT);
        assert!(err.retryable);
    }

    #[tokio::test]
    async fn cwd_is_relative_to_the_run_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let out = run(exec(json!({"cmd": ["pwd"], "cwd": "sub"}), dir.path()))
            .await
            .unwrap();
        let pwd = out.value["stdout"].as_str().unwrap().trim().to_string();
        assert_eq!(
            Path::new(&pwd).canonicalize().unwrap(),
            dir.path().join("sub").canonicalize().unwrap()
        );
        let out = run(exec(json!({"cmd": ["pwd"]}), dir.path()))
            .await
            .unwrap();
        let pwd = out.value["stdout"].as_str().unwrap().trim().to_string();
        assert_eq!(
            Path::new(&pwd).canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
    }

    #[tokio::test]
    async fn env_is_added_and_the_idempotency_key_passed() {
        let dir = tempfile::tempdir().unwrap();
        let mut call = exec(
            json!({"cmd": ["sh", "-c", "echo $GREETING-$REEL_IDEMPOTENCY_KEY-$HOME"],
                   "env": {"GREETING": "hi"}}),
            dir.path(),
        );
        call.idempotency_key = Some("k123".to_string());
        let out = run(call).await.unwrap();
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(out.value["stdout"], format!("hi-k123-{home}\n"));

        let call = exec(
            json!({"cmd": ["sh", "-c", "echo ${REEL_IDEMPOTENCY_KEY-unset}"]}),
            dir.path(),
        );
        assert_eq!(run(call).await.unwrap().value["stdout"], "unset\n");
    }

    #[tokio::test]
    async fn a_command_sees_the_base_the_flow_env_and_its_own_env_and_nothing_else() {
        // Setting a variable in this process would race with the other tests, so the check
        // runs in a copy of this test binary started with the variables set.
        if std::env::var_os("REEL_TOOLS_ENV_CHILD").is_some() {
            let dir = tempfile::tempdir().unwrap();
            let mut call = exec(
                json!({"cmd": ["env"], "env": {"STEP_VAR": "step", "FLOW_VAR": "overridden"}}),
                dir.path(),
            );
            call.env = vec![
                ("FLOW_VAR".into(), "flow".into()),
                ("DECLARED".into(), "declared".into()),
                ("REEL_SECRET_SNEAKY".into(), "hunter2".into()),
            ]
            .into();
            call.idempotency_key = Some("k1".into());
            let out = run(call).await.unwrap();
            let env = out.value["stdout"].as_str().unwrap().to_string();
            let mut names: Vec<&str> = env
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, _)| k))
                .filter(|k| !["PWD", "SHLVL", "_", "OLDPWD"].contains(k))
                .collect();
            names.sort();
            let mut expected: Vec<&str> = BASE_VARIABLES
                .iter()
                .copied()
                .filter(|v| std::env::var_os(v).is_some())
                .chain(["DECLARED", "FLOW_VAR", "REEL_IDEMPOTENCY_KEY", "STEP_VAR"])
                .collect();
            expected.sort();
            assert_eq!(names, expected, "{env}");
            assert!(env.contains("FLOW_VAR=overridden\n"), "{env}");
            assert!(env.contains("DECLARED=declared\n"), "{env}");
            assert!(!env.contains("REEL_PLAIN"), "{env}");
            assert!(!env.contains("hunter2"), "{env}");
            return;
        }
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "exec::tests::a_command_sees_the_base_the_flow_env_and_its_own_env_and_nothing_else",
            ])
            .args(["--test-threads=1", "--nocapture"])
            .env("REEL_TOOLS_ENV_CHILD", "1")
            .env("REEL_SECRET_API_TOKEN", "hunter2")
            .env("reel_secret_lower", "hunter2")
            .env("REEL_PLAIN", "kept")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&child.stdout);
        assert!(child.status.success(), "{report}");
        assert!(report.contains("1 passed"), "{report}");
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_quickly() {
        let dir = tempfile::tempdir().unwrap();
        let mut call = exec(
            json!({"cmd": ["sh", "-c", "echo $$ > pids; sleep 30 & echo $! >> pids; wait"]}),
            dir.path(),
        );
        call.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        let err = run(call).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(err.code, codes::TIMEOUT);
        assert!(err.retryable);
        assert!(err.message.contains("300ms"), "{}", err.message);
        let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
        let pids: Vec<&str> = pids.lines().collect();
        assert_eq!(pids.len(), 2, "{pids:?}");
        // The shell was our child: reaped, so not even a zombie is left.
        assert!(!Path::new(&format!("/proc/{}", pids[0])).exists());
        assert!(!alive(pids[1]), "sleep {} still runs", pids[1]);
    }

    #[tokio::test]
    async fn a_plain_sleep_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut call = exec(json!({"cmd": ["sleep", "30"]}), dir.path());
        call.timeout = Some(Duration::from_millis(200));
        let started = Instant::now();
        let err = run(call).await.unwrap_err();
        assert_eq!(err.code, codes::TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn cancellation_kills_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let call = exec(
            json!({"cmd": ["sh", "-c", "echo $$ > pids; sleep 30 & echo $! >> pids; wait"]}),
            dir.path(),
        );
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        let pids_file = dir.path().join("pids");
        tokio::spawn(async move {
            // Cancel once both processes exist, so both must be killed.
            for _ in 0..200 {
                let text = std::fs::read_to_string(&pids_file).unwrap_or_default();
                if text.lines().count() == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            trigger.cancel();
        });
        let started = Instant::now();
        let err = ToolHost::new().call(call, cancel).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(err.code, codes::CANCELED);
        assert!(!err.retryable);
        let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
        for pid in pids.lines() {
            assert!(!alive(pid), "{pid} still runs");
        }
    }

    #[tokio::test]
    async fn spawn_failures_and_bad_arguments_are_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(exec(
            json!({"cmd": ["reel-no-such-program-xyz"]}),
            dir.path(),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::EXEC_SPAWN);
        assert!(!err.retryable);
        assert!(
            err.message.contains("reel-no-such-program-xyz"),
            "{}",
            err.message
        );
        assert!(err.message.contains("No such file"), "{}", err.message);

        let err = run(exec(json!({"cmd": "ls -l"}), dir.path()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::ARGS);
        assert!(err.message.contains("`cmd`"), "{}", err.message);

        let err = run(exec(
            json!({"cmd": ["true"], "env": {"A=B": "x"}}),
            dir.path(),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::ARGS);
    }

    #[tokio::test]
    async fn secrets_are_scrubbed_from_output_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut call = exec(
            json!({"cmd": ["sh", "-c", "echo tok-999; echo tok-999 >&2; exit 2"]}),
            dir.path(),
        );
        call.secrets = vec![("api".to_string(), "tok-999".to_string())].into();
        let err = run(call).await.unwrap_err();
        let text = format!("{} {} {:?}", err.message, err.log, err.cause);
        assert!(!text.contains("tok-999"), "{text}");
        assert!(err.log.contains("{secret:api}"), "{}", err.log);
    }
}
