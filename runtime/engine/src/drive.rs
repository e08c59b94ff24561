//! The live driver: carries out a run's [`Command`]s with the real store, tools and clock, and
//! feeds what happens back to the run's [`Machine`] as [`Input`]s.
//!
//! One task owns the machine; tool calls run as spawned tasks that report back over a
//! channel. Commands are carried out in the order the machine gives them, so every event is
//! appended in the order it was decided, and a value before the event that names it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use reel_store::crash::{CrashPoint, reached};
use reel_store::{Claim, Kept, Lease, LogRow, RunStatus, RunUpdate, SignalRow, Store, StoreError};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::core::{
    ArrivedSignal, CallStart, Command, Ending, Input, Machine, Poll, Returned, Stamped,
};
use crate::deps::RunDeps;
use crate::error::RunError;
use crate::fork::Reuse;
use crate::journal::Event;
use crate::rider::{Refusal, RiderConfig, RunOutcome, blocking};

/// The run's pending signals with their payloads, as a claim read them with the run
/// (`reel_store::ReadWithClaim`).
pub(crate) type ReadSignals = Vec<(SignalRow, Option<Value>)>;

/// Drives `machine` from `first` (`Started` or `Resumed`) to its end, or until it parks. A
/// fork's driver also answers the calls its parent's record holds (`reuse`) with the recorded
/// results instead of calling the tool. `signals`, read with the run's claim, answer its first
/// look for signals, if it comes before the run first waits.
pub(crate) async fn drive(
    deps: &RunDeps,
    cfg: &RiderConfig,
    lease: Arc<Lease>,
    mut machine: Machine,
    first: Input,
    reuse: Option<&Reuse>,
    signals: Option<ReadSignals>,
) -> Result<RunOutcome, Refusal> {
    let (results_tx, results_rx) = mpsc::unbounded_channel();
    let mut driver = Driver {
        reuse,
        deps: deps.clone(),
        cfg: cfg.clone(),
        lease,
        calls_cancel: deps.shutdown.child_token(),
        results_tx,
        results_rx,
        unnamed: Vec::new(),
        read_signals: signals,
    };
    machine.handle(driver.now(), first);
    let result = driver.run(&mut machine).await;
    driver.calls_cancel.cancel();
    match result {
        Err(Refusal::Store(e)) if cannot_write(&e) => Ok(driver.stopped_by_the_store(e).await),
        other => other,
    }
}

/// Whether `e` is the store failing to write (a full disk, a read-only file, an I/O error), as
/// opposed to another process holding the run or a record that cannot be read.
fn cannot_write(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::DiskFull(_)
            | StoreError::Unwritable(_)
            | StoreError::Sqlite(_)
            | StoreError::Poisoned { .. }
            | StoreError::Io { .. }
    )
}

struct Driver<'r> {
    reuse: Option<&'r Reuse>,
    deps: RunDeps,
    cfg: RiderConfig,
    lease: Arc<Lease>,
    calls_cancel: CancellationToken,
    results_tx: mpsc::UnboundedSender<Returned>,
    results_rx: mpsc::UnboundedReceiver<Returned>,
    /// Values stored since the last append: the core names each in the events it appends
    /// next (the core's simulator, `tests/core/sim.rs`, checks it on every fixture), and the
    /// store commits them together (see `reel_store::Kept`).
    unnamed: Vec<Kept>,
    /// The pending signals the run's claim read with it, until the first look for signals
    /// takes them or the run first waits (after which more may have come).
    read_signals: Option<ReadSignals>,
}

/// How a command's execution went on.
enum Next {
    Continue,
    Return(Result<RunOutcome, Refusal>),
}

impl Driver<'_> {
    fn now(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    fn run_id(&self) -> &str {
        &self.lease.run
    }

    /// Stores a value the core computed, ahead of the events that name it.
    fn put(&mut self, digest: &str, text: String) -> Result<(), StoreError> {
        let kept = self.deps.store.put_canonical(digest, text)?;
        self.unnamed.push(kept);
        Ok(())
    }

    /// Appends events with the values stored since the last append, which they name.
    fn append(&mut self, events: &[Stamped]) -> Result<(), StoreError> {
        let rows = events.iter().map(|e| e.event.to_row(e.at)).collect();
        let kept = std::mem::take(&mut self.unnamed);
        self.deps.store.append_kept(&self.lease, rows, kept)
    }

    async fn run(&mut self, m: &mut Machine) -> Result<RunOutcome, Refusal> {
        let mut timers = Timers {
            renew_at: self.now() + (self.cfg.lease_ms / 3) as i64,
            poll_at: self.now() + self.cfg.poll_ms as i64,
        };
        while let Some(cmd) = m.poll_command() {
            let appending = matches!(cmd, Command::Append(_));
            match self.execute(m, cmd, &mut timers).await {
                Ok(Next::Continue) => {}
                Ok(Next::Return(r)) => return r,
                Err(e) => {
                    // What was recorded is true still: it is handed over if the store will take
                    // it (not after a failed append, whose events would leave a hole).
                    if !appending {
                        let mut events = Vec::new();
                        while let Some(cmd) = m.poll_command() {
                            match cmd {
                                Command::Append(mut more) => events.append(&mut more),
                                Command::PutValue { digest, text, .. } => {
                                    let _ = self.put(&digest, text);
                                }
                                _ => {}
                            }
                        }
                        events.append(&mut m.take_unsaved());
                        if !events.is_empty() {
                            let _ = self.append(&events);
                        }
                    }
                    return Err(e);
                }
            }
        }
        Err(Refusal::Store(StoreError::Sqlite(
            "the engine stopped without an ending".into(),
        )))
    }

    async fn execute(
        &mut self,
        m: &mut Machine,
        cmd: Command,
        timers: &mut Timers,
    ) -> Result<Next, Refusal> {
        let store = &self.deps.store;
        match cmd {
            Command::PutValue { digest, text, .. } => {
                self.put(&digest, text)?;
            }
            Command::Append(events) => {
                // Only a crash point needs to know; release builds skip the look.
                let failed = cfg!(debug_assertions)
                    && events
                        .iter()
                        .any(|e| matches!(e.event, Event::CallFailed { .. }));
                self.append(&events)?;
                if failed {
                    reached(CrashPoint::Backoff);
                }
                if let Some(reuse) = self.reuse {
                    reuse.observe(&events);
                }
            }
            Command::Log {
                step,
                index,
                attempt,
                at,
                text,
            } => {
                let row = LogRow {
                    run: self.run_id().to_string(),
                    step,
                    index,
                    attempt,
                    at,
                    text,
                };
                store.append_log(&self.lease, row)?;
            }
            Command::Progress(p) => self.deps.progress.report(p),
            Command::Sync => store.sync(&self.lease).await?,
            Command::LoadValues(digests) => {
                let wanted: Vec<&str> = digests.iter().map(String::as_str).collect();
                let mut values = Vec::with_capacity(digests.len());
                for (value, digest) in store.get_values(&wanted)?.into_iter().zip(&digests) {
                    match value {
                        Some(v) => values.push(v),
                        None => {
                            let digest = digest.clone();
                            return Err(StoreError::MissingValue { digest }.into());
                        }
                    }
                }
                m.handle(self.now(), Input::ValuesLoaded(values));
            }
            Command::FetchSignals(names) => {
                let arrived = self.fetch_signals(names)?;
                m.handle(self.now(), Input::Signals(arrived));
            }
            Command::Launch(calls) => {
                let mut returned = Vec::new();
                let fan_out = calls.len() > 1;
                for (i, call) in calls.into_iter().enumerate() {
                    if fan_out && i == 1 {
                        reached(CrashPoint::FanOut);
                    }
                    if let Some(r) = self.launch(call)? {
                        returned.push(r);
                    }
                }
                m.handle(self.now(), Input::Launched(returned));
            }
            Command::CancelCalls => self.calls_cancel.cancel(),
            Command::ConsumeSignal { signal } => {
                // The event that consumed it is the last one appended.
                let by = self.lease.next_seq.load(Ordering::SeqCst).saturating_sub(1);
                store.consume_signal(&self.lease, signal, by)?;
            }
            Command::ClearSignalPending => store.update_run(
                &self.lease,
                RunUpdate {
                    clear_signal_pending: true,
                    ..RunUpdate::default()
                },
            )?,
            Command::Wait { deadline, at_once } => {
                self.read_signals = None;
                return self.wait(m, deadline, at_once, timers).await;
            }
            Command::Park { due_at, signals } => {
                reached(CrashPoint::Park);
                store.update_run(
                    &self.lease,
                    RunUpdate {
                        status: Some(RunStatus::Waiting),
                        due_at: Some(due_at),
                        waiting_on: Some(signals),
                        ..RunUpdate::default()
                    },
                )?
            }
            Command::Finish(ending) => return Ok(Next::Return(self.finish(ending).await)),
        }
        Ok(Next::Continue)
    }

    /// The pending signals the waiting calls can take (the first of each name, as many as
    /// calls wait for it), with their payloads.
    fn fetch_signals(&mut self, names: Vec<String>) -> Result<Vec<ArrivedSignal>, Refusal> {
        let read = self.read_signals.take();
        // A fork's or rerun's waits first take what the parent's record answered them with.
        let (mut arrived, names) = match self.reuse {
            Some(reuse) => {
                reuse.carry_signals(self.deps.store.as_ref(), &self.lease, self.now(), names)?
            }
            None => (Vec::new(), names),
        };
        // The signals and their payloads in one read, when a wait is left to answer.
        let mut pending = match read {
            _ if names.is_empty() => Vec::new(),
            Some(mut read) => {
                read.retain(|(s, _)| names.contains(&s.name));
                read
            }
            None => self
                .deps
                .store
                .pending_signals_with_payloads(self.run_id(), &names)?,
        };
        pending.retain(|(p, _)| !arrived.iter().any(|a| a.seq == p.seq));
        for name in names {
            let Some(pos) = pending.iter().position(|(s, _)| s.name == name) else {
                continue;
            };
            let (row, payload) = pending.remove(pos);
            let Some(payload) = payload else {
                return Err(StoreError::MissingValue {
                    digest: row.payload_digest,
                }
                .into());
            };
            arrived.push(ArrivedSignal {
                seq: row.seq,
                name: row.name,
                payload_digest: row.payload_digest,
                payload,
            });
        }
        arrived.sort_by_key(|s| s.seq);
        Ok(arrived)
    }

    /// Makes a call; a result that is there at once is returned, else it comes back on the
    /// results channel.
    fn launch(&self, r: CallStart) -> Result<Option<Returned>, Refusal> {
        if let Some(reuse) = self.reuse
            && let Some(returned) = reuse.answer(self.deps.store.as_ref(), &r)?
        {
            return Ok(Some(returned));
        }
        let tools = self.deps.tools.clone();
        let tx = self.results_tx.clone();
        let cancel = self.calls_cancel.child_token();
        let mut call = Box::pin(async move { tools.call(r.call, cancel).await });
        // A call that finishes without waiting (`echo`, a bad argument) is taken at once: a
        // task and a wake-up per step would cost more than the step.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(outcome) = call.as_mut().poll(&mut cx) {
            return Ok(Some(Returned {
                step: r.step,
                index: r.index,
                attempt: r.attempt,
                outcome,
                reused: None,
                digest: None,
            }));
        }
        tokio::spawn(async move {
            let outcome = call.await;
            let _ = tx.send(Returned {
                step: r.step,
                index: r.index,
                attempt: r.attempt,
                outcome,
                reused: None,
                digest: None,
            });
        });
        Ok(None)
    }

    /// Waits for a call to return, the machine's deadline, the lease's renewal or the next
    /// look at the store, then tells the machine.
    async fn wait(
        &mut self,
        m: &mut Machine,
        deadline: Option<i64>,
        at_once: bool,
        timers: &mut Timers,
    ) -> Result<Next, Refusal> {
        let now = self.now();
        let mut wake_at = timers.renew_at.min(timers.poll_at);
        if let Some(t) = deadline {
            wake_at = wake_at.min(t);
        }
        // Calls that finished at once may have made more work ready: no waiting then.
        if !(at_once || wake_at <= now) {
            let sleep = self.deps.clock.sleep_until(wake_at);
            let shutdown = self.deps.shutdown.clone();
            tokio::select! {
                Some(r) = self.results_rx.recv() => {
                    reached(CrashPoint::EffectReturned);
                    m.handle(self.now(), Input::CallReturned(r));
                    // Whatever else finished meanwhile goes into the same batch.
                    while let Ok(r) = self.results_rx.try_recv() {
                        m.handle(self.now(), Input::CallReturned(r));
                    }
                }
                _ = sleep => {}
                _ = shutdown.cancelled() => {
                    self.calls_cancel.cancel();
                    m.handle(self.now(), Input::Interrupted);
                    while let Some(cmd) = m.poll_command() {
                        let _ = match cmd {
                            Command::Append(events) => self.append(&events),
                            Command::PutValue { digest, text, .. } => self.put(&digest, text),
                            Command::Sync => self.deps.store.sync(&self.lease).await,
                            _ => Ok(()),
                        };
                    }
                    return Ok(Next::Return(Err(Refusal::Interrupted(
                        self.run_id().to_string(),
                    ))));
                }
            }
        }
        let now = self.now();
        if now >= timers.renew_at {
            timers.renew_at = now + (self.cfg.lease_ms / 3) as i64;
            let store = self.deps.store.clone();
            let lease = self.lease.clone();
            let ms = self.cfg.lease_ms;
            blocking(store, move |s| s.renew(&lease, ms)).await?;
        }
        let poll = if now >= timers.poll_at {
            timers.poll_at = now + self.cfg.poll_ms as i64;
            let cancel_requested = self
                .deps
                .store
                .run(self.run_id())?
                .is_some_and(|row| row.cancel_requested);
            Some(Poll { cancel_requested })
        } else {
            None
        };
        m.handle(now, Input::Tick { poll });
        Ok(Next::Continue)
    }

    /// The store failed to write: what it committed stays (its journal has no gap; a failed
    /// batch is dropped whole, and nothing later is written under the lease). The run is marked
    /// failed with the store's error, under a new lease, if the store can still take that
    /// record (a redrive then goes on from what was recorded); else it stays `running` and
    /// resumable. Either way the outcome says so, so `reel run --json` prints its object.
    async fn stopped_by_the_store(&mut self, e: StoreError) -> RunOutcome {
        let error = RunError::new(e.code(), e.to_string());
        let store = self.deps.store.clone();
        // The lease is poisoned in this process: it is given up, and a fresh one taken.
        let _ = store.release(&self.lease).await;
        let owner = self.deps.owner.clone();
        let lease_ms = self.cfg.lease_ms;
        let run = self.run_id().to_string();
        let now = self.now();
        let marked: Result<(), StoreError> = async {
            let id = run.clone();
            let claim = blocking(store.clone(), move |s| s.claim_run(&id, &owner, lease_ms));
            let Claim::Claimed(lease) = claim.await? else {
                return Err(StoreError::LeaseLost { run: run.clone() });
            };
            let ended = Event::RunFinished {
                status: "failed".into(),
                output: None,
                error: Some(error.clone()),
            };
            let written = async {
                store.append(&lease, vec![ended.to_row(now)])?;
                store.update_run(
                    &lease,
                    RunUpdate {
                        status: Some(RunStatus::Failed),
                        due_at: Some(None),
                        waiting_on: Some(Vec::new()),
                        ended_at: Some(now),
                        error: Some(serde_json::to_value(&error).unwrap_or(Value::Null)),
                        ..RunUpdate::default()
                    },
                )?;
                store.sync(&lease).await
            }
            .await;
            let _ = store.release(&lease).await;
            written
        }
        .await;
        RunOutcome {
            run,
            status: if marked.is_ok() {
                RunStatus::Failed
            } else {
                RunStatus::Running
            },
            output: None,
            error: Some(error),
        }
    }

    /// Marks the run as the machine ended it, makes it durable and lets it go.
    async fn finish(&mut self, ending: Ending) -> Result<RunOutcome, Refusal> {
        let store: &Arc<dyn Store> = &self.deps.store;
        let (status, output, error, digest) = match ending {
            Ending::Waiting => {
                store.release(&self.lease).await?;
                return Ok(RunOutcome {
                    run: self.run_id().to_string(),
                    status: RunStatus::Waiting,
                    output: None,
                    error: None,
                });
            }
            Ending::Succeeded { digest, output } => {
                (RunStatus::Succeeded, Some(output), None, Some(digest))
            }
            Ending::Failed(e) => (RunStatus::Failed, None, Some(e), None),
            Ending::Canceled(e) => (RunStatus::Canceled, None, Some(e), None),
            Ending::Quarantined(e) => (RunStatus::Quarantined, None, Some(e), None),
        };
        store.update_run(
            &self.lease,
            RunUpdate {
                status: Some(status),
                due_at: Some(None),
                waiting_on: Some(Vec::new()),
                ended_at: Some(self.now()),
                output_digest: digest,
                error: error
                    .clone()
                    .map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
                ..RunUpdate::default()
            },
        )?;
        store.release(&self.lease).await?;
        Ok(RunOutcome {
            run: self.run_id().to_string(),
            status,
            output,
            error,
        })
    }
}

/// The driver's own deadlines: the lease's renewal and the next look at the store.
struct Timers {
    renew_at: i64,
    poll_at: i64,
}
