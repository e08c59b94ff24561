//! `reel release` and `reel abandon`: end a run's quarantine, by trying again or by giving up.

use std::sync::Arc;
use std::time::Instant;

use super::progress::StderrProgress;
use super::project::{Project, resolve_run};
use super::runtime::{refused, report, rider_config, run_deps, stop_on_ctrl_c, tokio_runtime};
use super::ui::Ui;
use super::{Failure, Status};

/// End a run's quarantine by trying again.
///
/// A run is quarantined when resuming it diverged from its own journal with the same flow (a
/// call of unknown outcome computed other inputs than it was first made with): a fault of the
/// platform, so nothing was made again. After updating or fixing reel, `reel release` resumes
/// it as `reel resume` would; if it diverges again it is quarantined again.
///
/// Exit status: as `reel resume` (3 when quarantined again); 2 when the run is not quarantined.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  reel runs --status quarantined\n  reel release 01j9z3")]
pub struct ReleaseArgs {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Print {"run", "status", "output", "error"} on stdout.
    #[arg(long)]
    json: bool,
}

/// End a run's quarantine by giving up: it ends failed (`run.abandoned`), nothing made again.
///
/// Exit status: 1 (the run is now failed); 2 when the run is not quarantined.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  reel abandon 01j9z3")]
pub struct AbandonArgs {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Print {"run", "status", "output", "error"} on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `reel release`.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
pub fn release(args: ReleaseArgs, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let progress = Arc::new(StderrProgress::new(ui.colored(), None));
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        reel_runtime::release(&deps, &rider_config(), &id).await
    });
    progress.finish();
    match outcome {
        Ok(outcome) => report(ui, &outcome, args.json, began.elapsed()),
        Err(refusal) => Err(refused(refusal)),
    }
}

/// Runs `reel abandon`.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
pub fn abandon(args: AbandonArgs, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, None);
        reel_runtime::abandon(&deps, &rider_config(), &id).await
    });
    match outcome {
        Ok(outcome) => report(ui, &outcome, args.json, began.elapsed()),
        Err(refusal) => Err(refused(refusal)),
    }
}
