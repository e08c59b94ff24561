//! Waking idle workers at once: the store notifies the channel `reel_due` when a run may have
//! become due (a signal sent, a cancel asked for, a run let go with either pending), and the
//! channel `reel_timer` with the due time when a run is let go waiting for a timer alone; a
//! [`PgListener`] hears both on a connection of its own. A timer a day away need not wake a
//! worker into a look, only move its next look earlier if it comes first. Polling stays the
//! fallback: a notification lost while the connection was down is made up by the next poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use super::conn::{Connector, PgAuth};
use crate::api::StoreError;

/// The channel the store notifies when a run may have become due.
pub(crate) const DUE_CHANNEL: &str = "reel_due";

/// The channel the store notifies, with the due time (ms since the epoch) as the payload, when
/// a run is let go waiting for a timer alone.
pub(crate) const TIMER_CHANNEL: &str = "reel_timer";

/// What a notification tells a listening worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DueNotice {
    /// A run may be due now (or a notification may have been missed): look.
    Now,
    /// A run's timer is due at this time (ms since the epoch), not before.
    At(i64),
}

impl DueNotice {
    /// The notice a notification on `channel` with `payload` gives; one that does not read is
    /// taken as `Now`, which costs a look at worst.
    fn of(channel: &str, payload: &str) -> DueNotice {
        match channel {
            TIMER_CHANNEL => payload.parse().map_or(DueNotice::Now, DueNotice::At),
            _ => DueNotice::Now,
        }
    }
}

/// How long the listener waits for a notification before it checks whether to stop.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// How long the listener waits before connecting again after losing its connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// Listens for runs that may have become due and calls its `wake` with each notification's
/// [`DueNotice`], until dropped.
pub struct PgListener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PgListener {
    /// Connects to the database `url` names (with `auth` for a password it lacks), listens,
    /// and calls `wake` on its own thread whenever a run may have become due, or a timer was
    /// set. The first connection's failure is returned; later ones are retried every second.
    pub fn start(
        url: &str,
        auth: &PgAuth,
        wake: impl Fn(DueNotice) + Send + 'static,
    ) -> Result<PgListener, StoreError> {
        let connector = Connector::new(url, auth)?;
        let first = listening(&connector)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("reel-store-pg-listener".to_string())
            .spawn(move || listen(first, &connector, &stopped, &wake))
            .map_err(|e| StoreError::Io {
                path: "reel-store-pg-listener".to_string(),
                message: e.to_string(),
            })?;
        Ok(PgListener {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PgListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for PgListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgListener").finish_non_exhaustive()
    }
}

/// A new connection that listens on the channel.
fn listening(connector: &Connector) -> Result<postgres::Client, StoreError> {
    let mut client = connector.connect()?;
    client
        .batch_execute(&format!("LISTEN {DUE_CHANNEL}; LISTEN {TIMER_CHANNEL}"))
        .map_err(|e| connector.error(&e))?;
    Ok(client)
}

/// The listener's loop: wait for notifications in short slices (to see `stop`), wake for
/// each, and connect again when the connection is lost, waking once then because a
/// notification may have been missed meanwhile.
fn listen(
    first: postgres::Client,
    connector: &Connector,
    stop: &AtomicBool,
    wake: &dyn Fn(DueNotice),
) {
    let mut client = Some(first);
    while !stop.load(Ordering::SeqCst) {
        let Some(c) = client.as_mut() else {
            std::thread::sleep(RECONNECT);
            if let Ok(c) = listening(connector) {
                client = Some(c);
                wake(DueNotice::Now);
            }
            continue;
        };
        let mut lost = false;
        {
            let mut notifications = c.notifications();
            let mut iter = notifications.timeout_iter(STOP_CHECK);
            loop {
                match iter.next() {
                    Ok(Some(n)) => wake(DueNotice::of(n.channel(), n.payload())),
                    Ok(None) => break,
                    Err(_) => {
                        lost = true;
                        break;
                    }
                }
            }
        }
        if lost || c.is_closed() {
            client = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_notice_carries_its_time_and_anything_else_means_look() {
        assert_eq!(
            DueNotice::of(TIMER_CHANNEL, "1700000000000"),
            DueNotice::At(1_700_000_000_000)
        );
        assert_eq!(DueNotice::of(TIMER_CHANNEL, "soon"), DueNotice::Now);
        assert_eq!(DueNotice::of(DUE_CHANNEL, "run-1"), DueNotice::Now);
    }
}
