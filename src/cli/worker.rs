//! `reel worker`: resume every run whose timer is due or whose signal arrived, and keep doing so.

use std::time::Duration;

use reel_runtime::Refusal;
use reel_runtime::worker::{Wake, WorkerConfig, WorkerEvent, work};
use reel_store::{DueNotice, RunStatus};

use super::project::Project;
use super::runtime::{rider_config, run_deps, stop_on_ctrl_c, tokio_runtime};
use super::ui::Ui;
use super::{Failure, Status};

/// Resume runs as they become due: timers that are due, signals that arrived, and runs whose
/// process died (their lease is taken over). Each due run is taken by exactly one worker,
/// however many share the store. Runs until stopped (Ctrl-C), or with `--until-idle` until no
/// run is running or waiting.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Stop once no run is running or waiting.
    #[arg(long)]
    until_idle: bool,

    /// How many runs to drive at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    concurrency: usize,

    /// How often to look for due runs, in milliseconds (an idle worker also looks when the
    /// earliest timer is due; on PostgreSQL when the earliest lease runs out, and at once
    /// when a signal or cancel comes).
    #[arg(long, default_value_t = 250, value_name = "MS")]
    poll_ms: u64,
}

/// Runs `reel worker`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    let store = project.open_store()?;
    let rt = tokio_runtime()?;
    ui.line(&format!("worker on {}", project.store_shown()));
    // On PostgreSQL a signal or cancel wakes the worker at once (LISTEN/NOTIFY); the poll is
    // the fallback, and the only way on SQLite.
    let wake = std::sync::Arc::new(Wake::default());
    let heard = std::sync::Arc::clone(&wake);
    let listener = project.listen_for_due(move |notice| match notice {
        DueNotice::Now => heard.due_now(),
        DueNotice::At(at) => heard.timer_at(at),
    })?;
    let result = rt.block_on(async {
        let deps = run_deps(store, None);
        stop_on_ctrl_c(&deps);
        let config = WorkerConfig {
            poll: Duration::from_millis(args.poll_ms.max(10)),
            concurrency: args.concurrency.max(1),
            until_idle: args.until_idle,
            wake: listener.as_ref().map(|_| wake),
        };
        work(
            deps,
            rider_config(),
            config,
            |event: WorkerEvent| match event {
                WorkerEvent::Run { run, result } => show_run(&run, result),
                WorkerEvent::StoreAway { error, retry_in } => eprintln!(
                    "the store cannot be reached: {error}; looking again in {} (nothing is lost meanwhile)",
                    super::progress::duration(retry_in)
                ),
                WorkerEvent::StoreBack => eprintln!("the store answers again"),
            },
        )
        .await
    });
    drop(listener);
    let summary = result.map_err(|e| Failure::failed(e.to_string()))?;
    if summary.stuck.is_empty() {
        return Ok(Status::Success);
    }
    // Stopping is the point of `--until-idle`: the runs it could not continue are left as they
    // are, and named, so a script sees that something needs a person.
    let mut messages: Vec<String> = summary
        .stuck
        .iter()
        .map(|(run, why)| format!("run {run} could not be continued and was left as it is: {why}"))
        .collect();
    messages.push(
        "fix what each says, then continue it with `reel resume RUN` or another `reel worker`"
            .to_string(),
    );
    Err(Failure {
        status: Status::Failed,
        messages,
    })
}

/// What a person sees of a run the worker took up.
fn show_run(run: &str, result: Result<reel_runtime::RunOutcome, Refusal>) {
    match result {
        Ok(o) => {
            let detail = match (&o.status, &o.error) {
                (RunStatus::Failed | RunStatus::Canceled, Some(e)) => {
                    format!(": [{}] {}", e.code, e.message)
                }
                _ => String::new(),
            };
            eprintln!("run {} {}{detail}", o.run, o.status.as_str());
        }
        // Another live process drives it (the other worker, `reel resume`): nothing
        // for this worker to do, nor for a person.
        Err(Refusal::Held { .. }) => {}
        Err(e) => eprintln!("run {run}: {e}"),
    }
}
