//! Checkpoints: copying the WAL back into the database, off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the committing connection and fsyncs twice, which
//! would stall the writer (and everyone waiting on a commit) every few megabytes. Instead the
//! writer's automatic checkpoint is off, a thread of its own runs non-blocking (PASSIVE)
//! checkpoints at most every [`INTERVAL`] after commits, and the writer truncates the WAL
//! itself only when it holds more than [`WAL_LIMIT`] anyway (under steady load a passive
//! checkpoint rarely catches the WAL's end, so the file is never restarted otherwise).
//!
//! The writer knows the WAL's length after each of its commits from SQLite's WAL hook, and
//! tries to truncate after every commit that left it too long, not only now and then, and
//! past twice the limit waits for a background pass to end rather than skip: SQLite
//! runs one checkpoint at a time and refuses a second at once, and under a load of large
//! commits (a million-call `foreach` rewrites megabytes of the values' index a commit) a
//! background pass was under way at nearly every look, so the WAL grew to gigabytes. A
//! truncation copies on the writer's path what the background passes have not, so the limit
//! is high enough to leave most of the copying to them (at 64 MiB that million-call
//! `foreach` took a third longer; at 256 MiB a tenth, with its WAL file at about 0.5 GB at
//! most where it had grown to 4–7 GB: bench/README.md, session 33).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::schema::BUSY_TIMEOUT;

/// The least time between two background checkpoints.
const INTERVAL: Duration = Duration::from_millis(100);
/// A WAL holding more than this is checkpointed and truncated by the writer.
pub(crate) const WAL_LIMIT: u64 = 256 << 20;
/// How many commits go by after a truncation that could not finish (a reader held an old
/// snapshot) before the writer tries again.
pub(crate) const TRUNCATE_RETRY_AFTER: u32 = 16;
/// A WAL file larger than this when the writer stops is checkpointed and truncated then; a
/// smaller one is left for the next process, which reads its frames back when it opens the
/// store (about 0.2 ms a MiB: a 1,000-step run leaves 2 to 4 MiB).
pub(crate) const CLOSE_LIMIT: u64 = 8 << 20;

/// How a truncation of the WAL went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Truncated {
    /// The WAL was copied back whole and cut to nothing.
    Done,
    /// A background pass was under way; nothing was tried.
    Busy,
    /// A reader's old snapshot kept some frames in the WAL.
    Held,
}

/// The background checkpointer: nudge it after commits; it stops when dropped.
pub(crate) struct Checkpointer {
    nudge: Option<SyncSender<()>>,
    /// Something was committed since the thread's last checkpoint began: a commit wakes the
    /// thread only when it sets this, so a run of commits costs one wake-up per interval
    /// rather than one each (each a system call on the committing thread).
    committed: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    wal: PathBuf,
    /// Held by the background thread while it copies, so that the writer sees a pass under
    /// way and tries again after its next commit rather than have SQLite refuse it.
    copying: Arc<Mutex<()>>,
    /// Frames in the WAL after the writer's last commit, from SQLite's WAL hook.
    frames: Arc<AtomicU32>,
    /// The bytes of one frame: a page and its header.
    frame_bytes: u64,
    /// What the WAL may hold before the writer truncates it ([`WAL_LIMIT`] but in tests).
    limit: u64,
}

impl Checkpointer {
    /// Starts the thread for the database at `db`; without it (the thread or its connection
    /// could not be had) the writer falls back to checkpointing in line, which is slower but
    /// just as correct.
    pub(crate) fn start(db: &Path, limit: u64) -> Checkpointer {
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
                copying: Arc::default(),
                frames: Arc::default(),
                frame_bytes: FRAME_HEADER + 4096,
                limit,
            };
        };
        let (nudge, rx) = mpsc::sync_channel(1);
        let committed = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&committed);
        let copying: Arc<Mutex<()>> = Arc::default();
        let held = Arc::clone(&copying);
        let thread = std::thread::Builder::new()
            .name("reel-store-checkpoint".to_string())
            .spawn(move || run(&conn, &rx, &seen, &held))
            .ok();
        Checkpointer {
            nudge: thread.as_ref().map(|_| nudge),
            committed,
            thread,
            wal,
            copying,
            frames: Arc::default(),
            frame_bytes: FRAME_HEADER + 4096,
            limit,
        }
    }

    /// Counts the frames in the WAL after each commit of the writer's connection `conn`
    /// (which must have SQLite's automatic checkpoint off: that is a WAL hook too, and the
    /// two replace each other).
    pub(crate) fn watch(&mut self, conn: &mut Connection) -> rusqlite::Result<()> {
        let page: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        self.frame_bytes = FRAME_HEADER + u64::from(page);
        let frames = Arc::clone(&self.frames);
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            frames.store(u32::try_from(pages).unwrap_or(0), Ordering::Relaxed);
            Ok(())
        }))
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

    /// Truncates the WAL (see [`Self::truncate`]) when the writer's last commit left it longer
    /// than its limit; `None` when it was short enough. Past twice the limit it waits for a
    /// background pass under way, so that passes that keep coming at the wrong moments cannot
    /// leave the WAL to grow on.
    pub(crate) fn truncate_if_too_long(&self, conn: &Connection) -> Option<Truncated> {
        let held = u64::from(self.frames.load(Ordering::Relaxed)) * self.frame_bytes;
        (held > self.limit).then(|| self.truncate(conn, held > 2 * self.limit))
    }

    /// Copies the whole WAL back into the database and truncates it, on the writer's
    /// connection `conn` between two of its transactions. Unless told to `wait`, it does not
    /// when a background pass is under way (`Busy`: the writer tries again after its next
    /// commit rather than wait for a pass that may be copying tens of megabytes). It never
    /// waits for readers: a reader's old snapshot keeps it from finishing (`Held`), and what
    /// it copied stays copied.
    fn truncate(&self, conn: &Connection, wait: bool) -> Truncated {
        let _alone = if wait {
            self.copying.lock().unwrap_or_else(PoisonError::into_inner)
        } else {
            match self.copying.try_lock() {
                Ok(alone) => alone,
                Err(TryLockError::Poisoned(alone)) => alone.into_inner(),
                Err(TryLockError::WouldBlock) => return Truncated::Busy,
            }
        };
        if conn.busy_timeout(Duration::ZERO).is_err() {
            return Truncated::Held;
        }
        let done = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .is_ok_and(|busy| busy == 0);
        // Should this fail, the writer's next wait for another process's write lock ends at
        // once, and it retries its `BEGIN` as it does when a wait times out.
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        if done {
            self.frames.store(0, Ordering::Relaxed);
            Truncated::Done
        } else {
            Truncated::Held
        }
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

/// The bytes of a WAL frame's header.
const FRAME_HEADER: u64 = 24;

fn run(conn: &Connection, nudges: &Receiver<()>, committed: &AtomicBool, copying: &Mutex<()>) {
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
        {
            let _copying = copying.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
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
