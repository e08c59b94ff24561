//! Time as a capability: the one `Clock` trait, below the store so that the store (lease and
//! signal times), the engine and the language server all take time from the same thing.
//!
//! The real clock is built where the program starts (the `reel` command); libraries are handed
//! a `Arc<dyn Clock>`. [`ManualClock`] reads no real time, for tests and replays.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};

/// A boxed future, for object-safe async traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Time: what time it is, and waiting until a time.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Resolves at `at_ms` (at once when it has passed).
    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()>;
    /// Whether this clock tells the real time of day. A store shared by many machines then
    /// judges leases by its database server's clock, the one clock every holder shares, rather
    /// than by each machine's own; a clock that tells a time of its own (a test's, a replay's)
    /// is one the server knows nothing of, so leases follow it instead.
    fn is_real_time(&self) -> bool {
        false
    }
}

/// A clock that stands at a set time and moves only when told to or when slept on: a sleep
/// until a later time moves it there and resolves at once, so waits take no real time.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `ms` since the epoch.
    pub fn at(ms: i64) -> Self {
        ManualClock {
            now: AtomicI64::new(ms),
        }
    }

    /// Moves the clock `ms` forward.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at_ms: i64) -> BoxFuture<'static, ()> {
        self.now.fetch_max(at_ms, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_or_slept_on() {
        let clock = ManualClock::at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(500);
        assert_eq!(clock.now_ms(), 1_500);
        // A sleep into the past leaves it; a sleep into the future moves it there.
        drop(clock.sleep_until(1_200));
        assert_eq!(clock.now_ms(), 1_500);
        drop(clock.sleep_until(9_000));
        assert_eq!(clock.now_ms(), 9_000);
        assert!(!clock.is_real_time());
    }
}
