//! The worker: resumes every run whose timer is due, whose signal arrived, or whose process died.

use std::time::Duration;

use reel_store::RunStatus;

use crate::deps::RunDeps;
use crate::rider::{Refusal, RiderConfig, RunOutcome, resume};

/// How the worker behaves.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// How often it looks for due runs when idle.
    pub poll: Duration,
    /// Runs it drives at once.
    pub concurrency: usize,
    /// Stop when no run is running or waiting any more.
    pub until_idle: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll: Duration::from_millis(250),
            concurrency: 16,
            until_idle: false,
        }
    }
}

/// What happened to a run the worker took up.
#[derive(Debug)]
pub struct WorkerEvent {
    /// The run.
    pub run: String,
    /// How this part of it ended.
    pub result: Result<RunOutcome, Refusal>,
}

/// Resumes due runs until shut down (or idle, with `until_idle`). `on_event` hears each result.
pub async fn work(
    deps: RunDeps,
    cfg: RiderConfig,
    worker: WorkerConfig,
    on_event: impl Fn(WorkerEvent) + Send + Sync + 'static,
) -> Result<(), reel_store::StoreError> {
    let on_event = std::sync::Arc::new(on_event);
    let mut tasks = tokio::task::JoinSet::new();
    let mut active: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        if deps.shutdown.is_cancelled() {
            break;
        }
        while let Some(done) = tasks.try_join_next() {
            if let Ok(run) = done {
                active.remove(&run);
            }
        }
        let now = deps.clock.now_ms();
        let room = worker.concurrency.saturating_sub(active.len());
        let due = if room > 0 {
            deps.store.due_runs(now, room + active.len())?
        } else {
            Vec::new()
        };
        let mut started = 0;
        for run in due {
            if started >= room || active.contains(&run) {
                continue;
            }
            active.insert(run.clone());
            started += 1;
            let deps = deps.clone();
            let cfg = cfg.clone();
            let on_event = on_event.clone();
            tasks.spawn(async move {
                let result = resume(&deps, &cfg, &run, "worker").await;
                on_event(WorkerEvent {
                    run: run.clone(),
                    result,
                });
                run
            });
        }
        if worker.until_idle && active.is_empty() && started == 0 {
            let busy = deps
                .store
                .list_runs(&reel_store::RunFilter::default())?
                .iter()
                .any(|r| matches!(r.status, RunStatus::Running | RunStatus::Waiting));
            if !busy {
                break;
            }
        }
        let shutdown = deps.shutdown.clone();
        tokio::select! {
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok(run) = done {
                    active.remove(&run);
                }
            }
            _ = tokio::time::sleep(worker.poll) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok(run) = done {
            active.remove(&run);
        }
    }
    Ok(())
}
