//! The channel from callers to a store's writer, bounded twice: in commands, as a channel is,
//! and in the bytes they hold ([`Cmd::held`]: what they write, and the text of a value kept in
//! a blob file).
//!
//! A bound in commands alone let a run whose engine outpaces the writer hold much of its
//! journal in memory while it waited to be written: an append of a round of a wide `foreach`
//! weighs a thousand times a lone sync, and 4,096 of them are hundreds of MiB. A 1,000,000-call
//! `foreach` peaked at 300 MB that way, most of it journal rows queued (`bench/README.md`,
//! session 37). With the bytes bounded too, a caller past the bound waits for the writer, as it
//! waits for a full channel: nothing is dropped, and a writer that keeps up never makes anyone
//! wait.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::{Cmd, lock};
use crate::api::StoreError;

/// How many bytes of commands may wait for the writer before callers wait: a batch's worth
/// (what the SQLite writer commits at once at most, 8 MiB), so the writer finds its next batch
/// queued when it is done with one. A 1,000,000-call `foreach` took as long with 4, 8 or 16
/// MiB, and peaked at 171–181, 177 and 192 MB.
pub(crate) const QUEUED_BYTES_AT_MOST: usize = super::group_commit::MAX_BATCH_BYTES;

/// How long a caller waits for room before it looks again whether the writer is still there
/// (a writer that stops closes the room and wakes everyone; this is the backstop).
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// The bytes the commands in the channel hold, shared by both ends.
#[derive(Default)]
struct Room {
    queued: AtomicUsize,
    /// The receiver is gone: nothing will make room again.
    closed: AtomicBool,
    lock: Mutex<()>,
    freed: Condvar,
}

impl Room {
    /// `bytes` were taken out of the channel; callers waiting for room are woken when the
    /// queue falls back within its bound.
    fn taken(&self, bytes: usize) {
        let before = self.queued.fetch_sub(bytes, Ordering::AcqRel);
        if before > QUEUED_BYTES_AT_MOST && before - bytes <= QUEUED_BYTES_AT_MOST {
            let _held = lock(&self.lock);
            self.freed.notify_all();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _held = lock(&self.lock);
        self.freed.notify_all();
    }
}

/// A channel of `capacity` commands, and of at most about [`QUEUED_BYTES_AT_MOST`] bytes.
pub(crate) fn channel(capacity: usize) -> (Sender, Receiver) {
    let (tx, rx) = mpsc::sync_channel(capacity);
    let room = Arc::new(Room::default());
    (
        Sender {
            tx,
            room: Arc::clone(&room),
        },
        Receiver {
            rx,
            room: Closer(room),
        },
    )
}

/// The callers' end.
pub(crate) struct Sender {
    tx: mpsc::SyncSender<Cmd>,
    room: Arc<Room>,
}

impl Sender {
    /// Enqueues `cmd`, first waiting while the queue holds more than its bound, then while
    /// the channel is full; `hurry` is called before either wait (it wakes a writer that waits
    /// for company). A command heavier than the bound goes in once the queue is within it.
    pub(crate) fn send(&self, cmd: Cmd, hurry: impl Fn()) -> Result<(), StoreError> {
        let bytes = cmd.held();
        self.wait_for_room(&hurry);
        self.room.queued.fetch_add(bytes, Ordering::AcqRel);
        let sent = match self.tx.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(cmd)) => {
                hurry();
                self.tx.send(cmd).map_err(|_| StoreError::Closed)
            }
            Err(TrySendError::Disconnected(_)) => Err(StoreError::Closed),
        };
        if sent.is_err() {
            // Never taken: it holds nothing in the queue any more.
            self.room.queued.fetch_sub(bytes, Ordering::AcqRel);
        }
        sent
    }

    fn wait_for_room(&self, hurry: &impl Fn()) {
        let room = &*self.room;
        let full = || {
            room.queued.load(Ordering::Acquire) > QUEUED_BYTES_AT_MOST
                && !room.closed.load(Ordering::Acquire)
        };
        if !full() {
            return;
        }
        let mut held = lock(&room.lock);
        while full() {
            hurry();
            held = match room.freed.wait_timeout(held, LOOK_AGAIN) {
                Ok((held, _)) => held,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// The writer's end; dropping it (the writer stopped, however it stopped) lets every waiting
/// caller go on to find the channel closed.
pub(crate) struct Receiver {
    rx: mpsc::Receiver<Cmd>,
    /// Dropped after `rx` (fields drop in order): a caller let go finds the channel closed,
    /// never one about to be.
    room: Closer,
}

/// Closes the room when dropped.
struct Closer(Arc<Room>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Receiver {
    fn took(&self, cmd: Cmd) -> Cmd {
        self.room.0.taken(cmd.held());
        cmd
    }

    /// The next command, waiting for one; an error once every sender is gone.
    pub(crate) fn recv(&self) -> Result<Cmd, mpsc::RecvError> {
        self.rx.recv().map(|c| self.took(c))
    }

    /// The next command if one is queued.
    pub(crate) fn try_recv(&self) -> Result<Cmd, TryRecvError> {
        self.rx.try_recv().map(|c| self.took(c))
    }

    /// The next command, waiting at most `wait` for one.
    pub(crate) fn recv_timeout(&self, wait: Duration) -> Result<Cmd, RecvTimeoutError> {
        self.rx.recv_timeout(wait).map(|c| self.took(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::ValueText;

    /// A command that holds `bytes` bytes (at least 96).
    fn value(bytes: usize) -> Cmd {
        let cmd = Cmd::Value {
            digest: String::new(),
            text: ValueText::Inline("x".repeat(bytes - 96).into()),
            size: 0,
        };
        assert_eq!(cmd.held(), bytes);
        cmd
    }

    #[test]
    fn a_caller_past_the_bytes_bound_waits_until_the_writer_takes_some() {
        let (tx, rx) = channel(1024);
        // Three commands of half the bound each: the queue holds more than its bound, and a
        // fourth waits until one is taken.
        for _ in 0..3 {
            tx.send(value(QUEUED_BYTES_AT_MOST / 2), || {}).unwrap();
        }
        let hurried = AtomicUsize::new(0);
        let sent = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                tx.send(value(100), || {
                    hurried.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
                sent.store(true, Ordering::SeqCst);
            });
            // The sender either waits for room (and hurries the writer first) or, were the
            // bound not kept, is done: no timing decides which.
            while hurried.load(Ordering::SeqCst) == 0 && !sent.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            assert!(!sent.load(Ordering::SeqCst), "sent past the bound");
            rx.try_recv().unwrap();
        });
        assert!(sent.load(Ordering::SeqCst));
        // Everything arrives, in order, and the queue holds nothing once it is empty.
        let mut left = 0;
        while rx.try_recv().is_ok() {
            left += 1;
        }
        assert_eq!(left, 3);
        assert_eq!(rx.room.0.queued.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_caller_waiting_for_room_is_let_go_when_the_writer_is_gone() {
        let (tx, rx) = channel(1024);
        for _ in 0..3 {
            tx.send(value(QUEUED_BYTES_AT_MOST / 2), || {}).unwrap();
        }
        std::thread::scope(|s| {
            let waiting = s.spawn(|| tx.send(value(100), || {}));
            drop(rx);
            assert!(matches!(waiting.join().unwrap(), Err(StoreError::Closed)));
        });
    }

    #[test]
    fn a_value_kept_in_a_blob_file_counts_its_text() {
        // Its row weighs little in a transaction, but the command holds its text until then.
        let text: Arc<str> = "x".repeat(QUEUED_BYTES_AT_MOST).into();
        let cmd = Cmd::Value {
            digest: String::new(),
            text: ValueText::External(text),
            size: 0,
        };
        assert!(cmd.weight() < 1024);
        let (tx, rx) = channel(16);
        tx.send(cmd, || {}).unwrap();
        assert!(rx.room.0.queued.load(Ordering::SeqCst) > QUEUED_BYTES_AT_MOST);
        rx.try_recv().unwrap();
        assert_eq!(rx.room.0.queued.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_command_heavier_than_the_bound_goes_into_an_empty_queue() {
        let (tx, rx) = channel(4);
        tx.send(value(QUEUED_BYTES_AT_MOST * 2), || {}).unwrap();
        assert!(rx.try_recv().is_ok());
        assert_eq!(rx.room.0.queued.load(Ordering::SeqCst), 0);
    }
}
