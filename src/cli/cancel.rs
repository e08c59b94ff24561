//! `reel cancel`: stop a run.

use reel_runtime::{CancelOutcome, cancel};

use super::project::{Project, resolve_run};
use super::runtime::{refused, rider_config, run_deps, tokio_runtime};
use super::ui::Ui;
use super::{Failure, Status};

/// Cancel a run. A waiting run (or one whose process died) is canceled at once; a run held by
/// a live process is stopped by it within a moment: its calls in flight are aborted and
/// recorded, and nothing new starts.
///
/// Exit status: 0 canceled or asked to stop, 2 unknown run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,
}

/// Runs `reel cancel`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, None);
        cancel(&deps, &rider_config(), &id).await
    });
    match outcome.map_err(refused)? {
        CancelOutcome::Canceled => ui.line(&format!("run {id} canceled")),
        CancelOutcome::Requested { pid } => ui.line(&format!(
            "run {id} is held by process {pid}; it was asked to stop and will record the cancellation"
        )),
        CancelOutcome::AlreadyEnded(status) => {
            ui.line(&format!("run {id} had already ended ({})", status.as_str()))
        }
    }
    Ok(Status::Success)
}
