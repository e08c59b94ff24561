//! `reel logs`: what a run's tools printed, step by step.

use super::project::{Project, resolve_run};
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// Print what a run's tools printed on stderr, per step and attempt, in order.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,
}

/// Runs `reel logs`.
pub fn run(args: Args, _ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let logs = store
        .logs(&id)
        .map_err(|e| Failure::failed(e.to_string()))?;
    let mut out = String::new();
    for l in logs {
        let mut who = l.step.clone();
        if let Some(i) = l.index {
            who.push_str(&format!("[{i}]"));
        }
        if l.attempt > 1 {
            who.push_str(&format!(" attempt {}", l.attempt));
        }
        for text in l.text.lines() {
            out.push_str(&format!("{who} | {text}\n"));
        }
    }
    print_stdout(&out)?;
    Ok(Status::Success)
}
