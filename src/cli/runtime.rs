//! What the run commands share: the tokio runtime, the engine's dependencies, run ids, and how
//! an outcome is printed and turned into an exit status.

use std::sync::Arc;

use reel_runtime::{NoProgress, ProgressSink, Refusal, RiderConfig, RunDeps, RunError, RunOutcome};
use reel_store::{Owner, RunStatus, Store};
use reel_tools::ToolHost;
use tokio_util::sync::CancellationToken;

use super::capabilities::{ProcessEnvironment, SystemClock, process_secrets};
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// A multi-threaded tokio runtime for one command.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))
}

/// The engine's dependencies for this process: the real clock, tools, secrets and environment.
pub fn run_deps(store: Arc<dyn Store>, progress: Option<Arc<dyn ProgressSink>>) -> RunDeps {
    let shutdown = CancellationToken::new();
    RunDeps {
        store,
        tools: Arc::new(ToolHost::new()),
        clock: Arc::new(SystemClock),
        secrets: Arc::new(process_secrets()),
        env: Arc::new(ProcessEnvironment),
        progress: progress.unwrap_or_else(|| Arc::new(NoProgress)),
        shutdown,
        owner: Owner::this_process(),
    }
}

/// Cancels `deps.shutdown` on Ctrl-C, SIGTERM or SIGHUP, so the run stops where it is and stays
/// resumable: its calls in flight are stopped with it (a tool's process group is killed), and
/// no tool goes on to finish an effect after `reel` is gone, which a resume would repeat.
pub fn stop_on_ctrl_c(deps: &RunDeps) {
    let shutdown = deps.shutdown.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut hangup)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                if tokio::signal::ctrl_c().await.is_ok() {
                    shutdown.cancel();
                }
                return;
            };
            tokio::select! {
                r = tokio::signal::ctrl_c() => if r.is_err() { return },
                _ = term.recv() => {}
                _ = hangup.recv() => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        shutdown.cancel();
    });
}

/// The engine's settings.
pub fn rider_config() -> RiderConfig {
    RiderConfig {
        faults: super::replay::test_faults(),
        ..RiderConfig::default()
    }
}

/// Where a new run starts: the current directory (its tools and paths resolve there, on every
/// resume too) and the absolute path of its source file, for the editor to find its runs.
pub fn where_it_starts(
    source: &std::path::Path,
) -> Result<(std::path::PathBuf, Option<String>), Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?;
    let source_abs = std::fs::canonicalize(source)
        .ok()
        .map(|p| p.display().to_string());
    Ok((cwd, source_abs))
}

/// A new run id: sortable by time, lowercase.
pub fn new_run_id() -> String {
    ulid::Ulid::new().to_string().to_lowercase()
}

/// Prints an outcome as the contract says and gives the exit status.
pub fn report(
    ui: &Ui,
    outcome: &RunOutcome,
    json: bool,
    took: std::time::Duration,
) -> Result<Status, Failure> {
    report_with(ui, outcome, json.then(serde_json::Map::new), took)
}

/// Whether a run's error is the flow's own doing (an expression, an argument, the output's
/// type): running it again cannot help, a corrected flow can.
fn flow_at_fault(e: &RunError) -> bool {
    [
        "eval.",
        "output.",
        "spec.",
        "tool.args",
        "tool.sleep.",
        "tool.exec.too-long",
    ]
    .iter()
    .any(|p| e.code.starts_with(p))
}

/// As [`report`]; with `json`, the printed object also holds these fields.
pub fn report_with(
    ui: &Ui,
    outcome: &RunOutcome,
    json: Option<serde_json::Map<String, serde_json::Value>>,
    took: std::time::Duration,
) -> Result<Status, Failure> {
    if let Some(extra) = json {
        let mut value = outcome.to_json();
        if let Some(object) = value.as_object_mut() {
            object.extend(extra);
        }
        print_stdout(&format!("{value}\n"))?;
    } else if let (RunStatus::Succeeded, Some(output)) = (outcome.status, &outcome.output) {
        let text = serde_json::to_string_pretty(output).unwrap_or_else(|_| "null".into());
        print_stdout(&format!("{text}\n"))?;
    }
    let took = super::progress::duration(took);
    match outcome.status {
        RunStatus::Succeeded => ui.line(&format!("run {} succeeded in {took}", outcome.run)),
        RunStatus::Waiting => ui.line(&format!(
            "run {} is waiting; `reel worker` continues it when its timer is due or its signal arrives",
            outcome.run
        )),
        RunStatus::Failed | RunStatus::Canceled => {
            let what = if outcome.status == RunStatus::Failed { "failed" } else { "was canceled" };
            match &outcome.error {
                Some(e) => {
                    let at = e.step.as_ref().map(|s| format!(" at step `{s}`")).unwrap_or_default();
                    ui.error(&format!("run {} {what}{at}: [{}] {}", outcome.run, e.code, e.message));
                    if outcome.status == RunStatus::Failed && flow_at_fault(e) {
                        ui.line(&format!(
                            "the flow is at fault: correct it and fork the run with `reel fork {} --flow FILE`, which reuses what still matches (preview it with `reel replay {} --flow FILE`)",
                            outcome.run, outcome.run
                        ));
                    } else if outcome.status == RunStatus::Failed
                        // Its message says what to run: a person decides, nothing is fixed.
                        && e.code != "run.unknown-outcome"
                    {
                        ui.line(&format!(
                            "fix the cause and continue it with `reel resume {}`: its finished steps are kept",
                            outcome.run
                        ));
                    }
                }
                None => ui.error(&format!("run {} {what}", outcome.run)),
            }
        }
        // The store stopped taking its record: nothing recorded is lost, and it is resumable.
        RunStatus::Running if outcome.error.is_some() => {
            if let Some(e) = &outcome.error {
                ui.error(&format!("run {} stopped: [{}] {}", outcome.run, e.code, e.message));
            }
            ui.line(&format!(
                "nothing recorded is lost: continue it with `reel resume {}` once the store can be written",
                outcome.run
            ));
        }
        RunStatus::Running => ui.line(&format!("run {} is still running", outcome.run)),
        RunStatus::Quarantined => match &outcome.error {
            Some(e) => ui.error(&format!(
                "run {} is quarantined{}: [{}] {}",
                outcome.run,
                e.step
                    .as_deref()
                    .map(|s| format!(" at step `{s}`"))
                    .unwrap_or_default(),
                e.code,
                e.message
            )),
            None => ui.error(&format!("run {} is quarantined", outcome.run)),
        },
    }
    Ok(match outcome.status {
        RunStatus::Running if outcome.error.is_some() => Status::Failed,
        RunStatus::Succeeded | RunStatus::Waiting | RunStatus::Running => Status::Success,
        RunStatus::Failed | RunStatus::Canceled => Status::Failed,
        RunStatus::Quarantined => Status::Quarantined,
    })
}

/// A refusal as a failure with the contract's exit status.
pub fn refused(refusal: Refusal) -> Failure {
    let message = refusal.to_string();
    match refusal {
        Refusal::Input(_) | Refusal::Secret(_) | Refusal::UnknownRun(_) | Refusal::Held { .. } => {
            Failure::usage(message)
        }
        Refusal::Quarantined(_) => Failure {
            status: Status::Quarantined,
            messages: vec![message],
        },
        Refusal::Store(_) | Refusal::Spec(_) | Refusal::Interrupted(_) => Failure::failed(message),
    }
}
