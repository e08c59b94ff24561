//! `reel resume`: continue a run from its journal, to its end or until it parks.

use std::sync::Arc;
use std::time::Instant;

use reel_runtime::resume;

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
/// Exit status: as `reel run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Print {"run", "status", "output", "error"} on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `reel resume`.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let progress = Arc::new(StderrProgress::new(ui.colored(), None));
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        resume(&deps, &rider_config(), &id, "resume").await
    });
    progress.finish();
    match outcome {
        Ok(outcome) => report(ui, &outcome, args.json, began.elapsed()),
        Err(refusal) => Err(refused(refusal)),
    }
}
