//! The worker: resumes every run whose timer is due, whose signal arrived, or whose process died.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use reel_store::RunStatus;

use crate::deps::RunDeps;
use crate::rider::{Refusal, RiderConfig, RunOutcome, blocking, resume_claimed};

/// How the worker behaves.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// How often it looks for due runs when idle.
    pub poll: Duration,
    /// Runs it drives at once.
    pub concurrency: usize,
    /// Stop when no run is running or waiting any more.
    pub until_idle: bool,
    /// Told when a run may have become due (the store heard of a signal or a cancel), so an
    /// idle worker looks at once instead of at its next poll, or of a new timer, so it looks
    /// when that comes if that is before its next look; polling stays the fallback.
    pub wake: Option<std::sync::Arc<Wake>>,
}

/// What wakes an idle worker before its next look: a run due now, or the earliest timer
/// heard of since it last woke. Told from any thread (the store's listener), read by the
/// worker's loop.
#[derive(Debug)]
pub struct Wake {
    notify: tokio::sync::Notify,
    now: AtomicBool,
    /// The earliest timer heard of (ms since the epoch), `i64::MAX` for none.
    timer: AtomicI64,
}

impl Default for Wake {
    fn default() -> Self {
        Wake {
            notify: tokio::sync::Notify::new(),
            now: AtomicBool::new(false),
            timer: AtomicI64::new(i64::MAX),
        }
    }
}

impl Wake {
    /// A run may be due now: the worker looks.
    pub fn due_now(&self) {
        self.now.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// A run's timer is due at `at` (ms since the epoch): the worker looks then, unless it
    /// looks sooner anyway.
    pub fn timer_at(&self, at: i64) {
        self.timer.fetch_min(at, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// What was told since the last take: whether a run is due now, and the earliest timer.
    fn take(&self) -> (bool, Option<i64>) {
        let now = self.now.swap(false, Ordering::SeqCst);
        let timer = self.timer.swap(i64::MAX, Ordering::SeqCst);
        (now, (timer != i64::MAX).then_some(timer))
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll: Duration::from_millis(250),
            concurrency: 16,
            until_idle: false,
            wake: None,
        }
    }
}

/// What a worker tells as it goes.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A run it took up, and how this part of it ended.
    Run {
        /// The run.
        run: String,
        /// How this part of it ended.
        result: Result<RunOutcome, Refusal>,
    },
    /// The store cannot be reached (its server restarts, or ended the connection): nothing
    /// is lost, and the worker looks again after `retry_in`, then after longer and longer
    /// waits while it stays away.
    StoreAway {
        /// Why, as the store said it.
        error: reel_store::StoreError,
        /// How long until the worker looks again.
        retry_in: Duration,
    },
    /// The store answered again after it was away.
    StoreBack,
}

/// What a worker that stopped by itself (`until_idle`) leaves behind.
#[derive(Debug, Default)]
pub struct WorkerSummary {
    /// Runs still running or waiting that this worker tried and could not continue (a secret
    /// missing, a value gone from the store, …), each with why at its last try.
    pub stuck: Vec<(String, String)>,
}

/// A run the worker could not take up: not tried again before `retry_at`.
struct Refused {
    /// Tries refused in a row.
    tries: u32,
    /// When it may be tried again (ms since the epoch).
    retry_at: i64,
    /// Why it was refused last.
    why: String,
}

/// How soon a worker looks again when something was due that its look did not take.
const DUE_AGAIN_MS: i64 = 1_000;

/// The first wait after a refusal; doubled with each refusal in a row, up to `REFUSED_MAX_MS`.
const REFUSED_FIRST_MS: i64 = 1_000;
/// The longest wait between tries of a refused run.
const REFUSED_MAX_MS: i64 = 60_000;

/// The first wait before looking again when the store could not be reached; doubled while it
/// stays away, up to `AWAY_MAX_MS`.
const AWAY_FIRST_MS: u64 = 250;
/// The longest wait between looks at a store that cannot be reached.
const AWAY_MAX_MS: u64 = 10_000;

/// Resumes due runs until shut down (or idle, with `until_idle`). `on_event` hears each result.
///
/// A run that cannot be taken up (its secret is missing, a value it needs is gone) is tried
/// again only after a wait that doubles with each refusal, from one second up to a minute, so
/// one broken run neither spins the worker nor floods its output; `until_idle` stops once
/// every run left is waiting for the future or is such a refused run, and names those.
pub async fn work(
    deps: RunDeps,
    cfg: RiderConfig,
    worker: WorkerConfig,
    on_event: impl Fn(WorkerEvent) + Send + Sync + 'static,
) -> Result<WorkerSummary, reel_store::StoreError> {
    let on_event = std::sync::Arc::new(on_event);
    let mut tasks = tokio::task::JoinSet::new();
    let mut active: HashSet<String> = HashSet::new();
    let mut refused: HashMap<String, Refused> = HashMap::new();
    let mut summary = WorkerSummary::default();
    // Whether to look at the store this time round: at the start, when woken or the nap is
    // over, and when a finished run may have left work behind. A run that ended leaves none,
    // so a worker driving many short runs does not query the store once per run it ends.
    let mut look = true;
    // Whether the last look filled every free place (more runs may be due than it took).
    let mut filled = false;
    // When the worker looks again without being woken (ms since the epoch).
    let mut look_at = deps.clock.now_ms();
    // While the store cannot be reached: the last wait before looking again (ms).
    let mut away: Option<u64> = None;
    loop {
        if deps.shutdown.is_cancelled() {
            break;
        }
        while let Some(done) = tasks.try_join_next() {
            look |= finished(done, &mut active, &mut refused, deps.clock.now_ms()) || filled;
        }
        if look {
            look = false;
            let now = deps.clock.now_ms();
            let room = worker.concurrency.saturating_sub(active.len());
            // The runs it drives and those it waits out are not claimed again; the store
            // hands each due run to one claimer, however many workers ask at once. With no
            // room, the look only tells when to look next.
            let skip: HashSet<String> = if room > 0 {
                active
                    .iter()
                    .cloned()
                    .chain(
                        refused
                            .iter()
                            .filter(|(_, r)| r.retry_at > now)
                            .map(|(run, _)| run.clone()),
                    )
                    .collect()
            } else {
                HashSet::new()
            };
            let (owner, lease_ms) = (deps.owner.clone(), cfg.lease_ms);
            let looked = blocking(deps.store.clone(), move |s| {
                s.look(now, &owner, lease_ms, room, &skip)
            })
            .await;
            // A store that cannot be reached is waited out, not a reason to stop: a server's
            // restart must not end every worker. The runs are safe in it meanwhile.
            let reel_store::Look {
                claims: claimed,
                next_due,
            } = match looked {
                Err(error) if error.is_transient() => {
                    let retry_in = away.map_or(AWAY_FIRST_MS, |w| (w * 2).min(AWAY_MAX_MS));
                    away = Some(retry_in);
                    on_event(WorkerEvent::StoreAway {
                        error,
                        retry_in: Duration::from_millis(retry_in),
                    });
                    look_at = deps
                        .clock
                        .now_ms()
                        .saturating_add(i64::try_from(retry_in).unwrap_or(i64::MAX));
                    continue;
                }
                looked => looked?,
            };
            if away.take().is_some() {
                on_event(WorkerEvent::StoreBack);
            }
            let started = claimed.len();
            filled = room == 0 || started >= room;
            for claim in claimed {
                let run = claim.lease.run.clone();
                active.insert(run.clone());
                let deps = deps.clone();
                let cfg = cfg.clone();
                let on_event = on_event.clone();
                tasks.spawn(async move {
                    let result = resume_claimed(&deps, &cfg, claim).await;
                    // Only a refusal that a later try might get past is waited out; a live
                    // holder is just busy.
                    let why = match &result {
                        Err(Refusal::Held { .. }) | Ok(_) => None,
                        Err(e) => Some(e.to_string()),
                    };
                    // A run that ended has nothing left for a worker; one that parked or
                    // stopped otherwise may be due again at once.
                    let ended = matches!(&result, Ok(outcome) if outcome.status.is_ended());
                    on_event(WorkerEvent::Run {
                        run: run.clone(),
                        result,
                    });
                    Finished { run, why, ended }
                });
            }
            if worker.until_idle && active.is_empty() && started == 0 {
                // The runs that have not ended, by their status: a look at each idle poll
                // reads those, not every run the store keeps.
                let mut left: Vec<String> = Vec::new();
                let mut read = true;
                for status in [RunStatus::Running, RunStatus::Waiting] {
                    let filter = reel_store::RunFilter {
                        status: Some(status),
                        ..reel_store::RunFilter::default()
                    };
                    match deps.store.list_runs(&filter) {
                        Ok(rows) => left.extend(rows.into_iter().map(|r| r.id)),
                        // Gone since the look: the next look finds out and waits it out.
                        Err(e) if e.is_transient() => read = false,
                        Err(e) => return Err(e),
                    }
                }
                if read && left.iter().all(|id| refused.contains_key(id)) {
                    summary.stuck = left
                        .into_iter()
                        .filter_map(|id| refused.remove(&id).map(|r| (id, r.why)))
                        .collect();
                    break;
                }
            }
            // Idle until the next poll, or until the earliest timer is due if that comes
            // first. Something due already that this look did not take (a run whose row a
            // frozen holder's transaction still locks until the server ends it, a run waited
            // out, no room) is looked at again within `DUE_AGAIN_MS`, not a whole poll later.
            let now = deps.clock.now_ms();
            let poll = i64::try_from(worker.poll.as_millis()).unwrap_or(i64::MAX);
            look_at = match next_due {
                Some(due) if due <= now => now.saturating_add(poll.min(DUE_AGAIN_MS)),
                Some(due) => due.min(now.saturating_add(poll)),
                None => now.saturating_add(poll),
            };
        }
        let nap = Duration::from_millis(
            u64::try_from(look_at.saturating_sub(deps.clock.now_ms())).unwrap_or(0),
        );
        let shutdown = deps.shutdown.clone();
        let wake = worker.wake.clone();
        let woken = async move {
            match wake {
                Some(wake) => wake.notify.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = woken => {
                // A timer only moves the next look earlier; it is looked for when it comes.
                let (due_now, timer) = worker.wake.as_ref().map_or((true, None), |w| w.take());
                look |= due_now;
                if let Some(at) = timer {
                    look_at = look_at.min(at);
                }
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                look |= finished(done, &mut active, &mut refused, deps.clock.now_ms()) || filled;
                // With nothing left to drive, a worker that stops when idle looks at once.
                look |= worker.until_idle && active.is_empty();
            }
            _ = tokio::time::sleep(nap) => look = true,
            _ = shutdown.cancelled() => break,
        }
    }
    while let Some(done) = tasks.join_next().await {
        finished(done, &mut active, &mut refused, deps.clock.now_ms());
    }
    Ok(summary)
}

/// What a task that drove a run hands back.
struct Finished {
    /// The run.
    run: String,
    /// Why it was refused, when a later try may get past the refusal.
    why: Option<String>,
    /// Whether the run ended (succeeded, failed or was canceled).
    ended: bool,
}

/// Books a finished task: the run is no longer active, and a refusal is waited out. True
/// when the worker should look at the store again: the run did not end (it may be due again
/// at once: a signal came while it was held), or the task failed.
fn finished(
    done: Result<Finished, tokio::task::JoinError>,
    active: &mut HashSet<String>,
    refused: &mut HashMap<String, Refused>,
    now: i64,
) -> bool {
    let Ok(Finished { run, why, ended }) = done else {
        return true;
    };
    active.remove(&run);
    let again = !ended;
    match why {
        None => {
            refused.remove(&run);
        }
        Some(why) => {
            let tries = refused.get(&run).map_or(0, |r| r.tries) + 1;
            let wait = REFUSED_FIRST_MS
                .saturating_mul(1 << (tries - 1).min(16))
                .min(REFUSED_MAX_MS);
            refused.insert(
                run,
                Refused {
                    tries,
                    retry_at: now + wait,
                    why,
                },
            );
        }
    }
    again
}
