//! Checkpoints: copying the WAL back into the database, off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the committing connection and fsyncs twice, which
//! would stall the writer (and everyone waiting on a commit) every few megabytes. Instead the
//! writer's automatic checkpoint is off, a thread of its own runs non-blocking (PASSIVE)
//! checkpoints at most every [`INTERVAL`] after commits, and the writer truncates the WAL
//! itself only when it has grown past [`WAL_LIMIT`] anyway (under steady load a passive
//! checkpoint rarely catches the WAL's end, so the file is never restarted otherwise).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::schema::BUSY_TIMEOUT;

/// The least time between two background checkpoints.
const INTERVAL: Duration = Duration::from_millis(100);
/// A WAL file larger than this is checkpointed and truncated by the writer.
pub(crate) const WAL_LIMIT: u64 = 64 << 20;
/// A WAL file larger than this when the writer stops is checkpointed and truncated then; a
/// smaller one is left for the next process, which reads its frames back when it opens the
/// store (about 0.2 ms a MiB: a 1,000-step run leaves 2 to 4 MiB).
pub(crate) const CLOSE_LIMIT: u64 = 8 << 20;

/// The background checkpointer: nudge it after commits; it stops when dropped.
pub(crate) struct Checkpointer {
    nudge: Option<SyncSender<()>>,
    /// Something was committed since the thread's last checkpoint began: a commit wakes the
    /// thread only when it sets this, so a run of commits costs one wake-up per interval
    /// rather than one each (each a system call on the committing thread).
    committed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    wal: PathBuf,
}

impl Checkpointer {
    /// Starts the thread for the database at `db`; without it (the thread or its connection
    /// could not be had) the writer falls back to checkpointing in line, which is slower but
    /// just as correct.
    pub(crate) fn start(db: &Path) -> Checkpointer {
        let wal = PathBuf::from(format!("{}-wal", db.display()));
        let conn = crate::schema::connect(
            db,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            false,
        )
        .and_then(|c| c.busy_timeout(BUSY_TIMEOUT).map(|()| c))
        .and_then(|c| crate::schema::keep_wal_on_close(&c).map(|()| c));
        let Ok(conn) = conn else {
            return Checkpointer {
                nudge: None,
                committed: Arc::default(),
                thread: None,
                wal,
            };
        };
        let (nudge, rx) = mpsc::sync_channel(1);
        let committed = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&committed);
        let thread = std::thread::Builder::new()
            .name("reel-store-checkpoint".to_string())
            .spawn(move || run(&conn, &rx, &seen))
            .ok();
        Checkpointer {
            nudge: thread.as_ref().map(|_| nudge),
            committed,
            thread,
            wal,
        }
    }

    /// Whether the background thread runs (else the writer keeps SQLite's own checkpoints).
    pub(crate) fn is_running(&self) -> bool {
        self.nudge.is_some()
    }

    /// Tells the thread that something was committed.
    pub(crate) fn nudge(&self) {
        if let Some(nudge) = &self.nudge
            && !self.committed.swap(true, Ordering::SeqCst)
        {
            // Full means a nudge is already pending, which is all that is needed.
            let _ = nudge.try_send(());
        }
    }

    /// Whether the WAL file has grown past [`WAL_LIMIT`].
    pub(crate) fn wal_too_large(&self) -> bool {
        self.wal_longer_than(WAL_LIMIT)
    }

    fn wal_longer_than(&self, limit: u64) -> bool {
        std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > limit)
    }

    /// Stops the thread as the writer stops, and checkpoints and truncates a WAL longer than
    /// [`CLOSE_LIMIT`] on the writer's connection `conn`. No connection checkpoints as it
    /// closes (see `schema::keep_wal_on_close`), so this is what keeps the WAL that every
    /// next process reads back short. It does not wait: should another process be reading or
    /// checkpointing, the WAL stays as it is, and the next writer to stop tries again.
    pub(crate) fn finish(&mut self, conn: &Connection) {
        self.stop();
        if self.wal_longer_than(CLOSE_LIMIT) && conn.busy_timeout(Duration::ZERO).is_ok() {
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }

    fn stop(&mut self) {
        self.nudge.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(conn: &Connection, nudges: &Receiver<()>, committed: &AtomicBool) {
    let mut nudged = nudges.recv().is_ok();
    while nudged {
        // Commits from here on are for the next checkpoint (and the first of them nudges).
        committed.store(false, Ordering::SeqCst);
        // edge: spacing background checkpoints is I/O timing, not a decision (what is stored
        // never depends on it), so it reads the monotonic clock.
        #[allow(clippy::disallowed_methods)]
        let started = Instant::now();
        // PASSIVE never waits for readers or the writer; a failure (busy, I/O) only means the
        // frames stay in the WAL until the next attempt.
        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        // Commits within the interval fold into one next checkpoint; a closed channel (the
        // writer stopped) ends the thread at once rather than after the interval.
        loop {
            let left = INTERVAL.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            match nudges.recv_timeout(left) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        nudged = committed.load(Ordering::SeqCst);
        if !nudged {
            nudged = nudges.recv().is_ok();
        }
    }
}
