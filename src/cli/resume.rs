//! `reel resume`: continue a run from its journal, to its end or until it parks.

use std::sync::Arc;
use std::time::Instant;

use reel_runtime::{Decided, Decision, resume_deciding};

use super::progress::StderrProgress;
use super::project::{Project, resolve_run};
use super::runtime::{refused, report, rider_config, run_deps, stop_on_ctrl_c, tokio_runtime};
use super::ui::Ui;
use super::{Failure, Status};

/// Continue a run from its journal: after a crash, when it waits, or after it failed.
///
/// Nothing the journal records as finished runs again; a call whose start was recorded but not
/// its result is attempted again with the same idempotency key. A run whose process died is
/// taken over at once; one held by a live process is refused. A failed or canceled run is
/// redriven: its successes are kept and the failed step runs again. A succeeded run is not run
/// again: its result is printed.
///
/// A call of a tool declared `repeat: "never"` whose outcome is unknown fails the run with
/// `run.unknown-outcome` until a person decides: `--accept STEP=JSON` records JSON as the call's
/// result without calling the tool (checked against the step's result type), `--retry STEP`
/// attempts it again with the same idempotency key. `STEP[N]` names one call of a `foreach`.
///
/// Exit status: as `reel run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Print {"run", "status", "output", "error"} on stdout.
    #[arg(long)]
    json: bool,

    /// Record JSON as the result of STEP's call whose outcome is unknown, without calling its
    /// tool (repeatable).
    #[arg(long, value_name = "STEP=JSON")]
    accept: Vec<String>,

    /// Attempt STEP's call whose outcome is unknown again, with the same idempotency key
    /// (repeatable).
    #[arg(long, value_name = "STEP")]
    retry: Vec<String>,
}

/// `STEP` or `STEP[N]`.
fn call_name(text: &str) -> Result<(String, Option<u32>), Failure> {
    let text = text.trim();
    let (step, index) = match text.strip_suffix(']').and_then(|t| t.split_once('[')) {
        Some((step, n)) => {
            let n = n.parse().map_err(|_| {
                Failure::usage(format!("`{text}`: the index in STEP[N] is a number"))
            })?;
            (step, Some(n))
        }
        None => (text, None),
    };
    if step.is_empty() {
        return Err(Failure::usage(format!("`{text}` names no step")));
    }
    Ok((step.to_string(), index))
}

/// The decisions given with `--accept` and `--retry`.
fn decisions(args: &Args) -> Result<Vec<Decided>, Failure> {
    let mut out = Vec::new();
    for a in &args.accept {
        let Some((name, json)) = a.split_once('=') else {
            return Err(Failure::usage(format!(
                "--accept takes STEP=JSON, found `{a}`"
            )));
        };
        let (step, index) = call_name(name)?;
        let value = serde_json::from_str(json).map_err(|e| {
            Failure::usage(format!("--accept {name}=…: the result is not JSON: {e}"))
        })?;
        out.push(Decided {
            step,
            index,
            decision: Decision::Accept(value),
        });
    }
    for r in &args.retry {
        let (step, index) = call_name(r)?;
        out.push(Decided {
            step,
            index,
            decision: Decision::Retry,
        });
    }
    Ok(out)
}

/// Runs `reel resume`.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let decided = decisions(&args)?;
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let progress = Arc::new(StderrProgress::new(ui.colored(), None));
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        resume_deciding(&deps, &rider_config(), &id, "resume", decided).await
    });
    progress.finish();
    match outcome {
        Ok(outcome) => report(ui, &outcome, args.json, began.elapsed()),
        Err(refusal) => Err(refused(refusal)),
    }
}
