//! Crash points for tests: the named places at the runtime's edges (the store's writer, the
//! engine's driver, a takeover of a run) where a debug build stops its own process, as a crash
//! would, when a test asks it to. `reel` arms one point from `REEL_CRASH_AT=POINT[:N]` (the
//! N-th time the point is reached, from 1; the first by default) in debug builds; in release
//! builds [`reached`] is empty and nothing can arm it. The engine's pure core has none: every
//! point is where the driver or the store acts on a decision.
//!
//! The process stops with `std::process::abort` (SIGABRT): no destructor runs, no buffered
//! write is flushed, the writer's queue is lost, as with SIGKILL.

/// A place where a test may stop the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// A batch holding journal rows is written, not yet committed.
    BeforeCommit,
    /// A batch holding journal rows is committed, its writers not yet answered.
    AfterCommit,
    /// A tool call returned to the driver; nothing of its result is recorded yet.
    EffectReturned,
    /// A `foreach` step's calls are being launched: the first is out, the others not yet.
    FanOut,
    /// A retryable failure is recorded; the call waits out its backoff.
    Backoff,
    /// The run parks on a timer or signal: `run_waiting` is appended, its row not yet waiting.
    Park,
    /// A process (a worker, `reel resume`) has claimed a run; nothing recorded yet.
    Takeover,
}

impl CrashPoint {
    /// Every point, in the order the docs list them.
    pub const ALL: [CrashPoint; 7] = [
        CrashPoint::BeforeCommit,
        CrashPoint::AfterCommit,
        CrashPoint::EffectReturned,
        CrashPoint::FanOut,
        CrashPoint::Backoff,
        CrashPoint::Park,
        CrashPoint::Takeover,
    ];

    /// The name `REEL_CRASH_AT` uses.
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::BeforeCommit => "before-commit",
            CrashPoint::AfterCommit => "after-commit",
            CrashPoint::EffectReturned => "effect-returned",
            CrashPoint::FanOut => "fan-out",
            CrashPoint::Backoff => "backoff",
            CrashPoint::Park => "park",
            CrashPoint::Takeover => "takeover",
        }
    }
}

#[cfg(debug_assertions)]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::CrashPoint;

    /// The armed point and the hit that stops the process.
    pub(super) static ARMED: OnceLock<(CrashPoint, u64)> = OnceLock::new();
    /// How often the armed point was reached.
    pub(super) static HITS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn reached(point: CrashPoint) {
        if let Some((armed, n)) = ARMED.get()
            && *armed == point
            && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *n
        {
            std::process::abort();
        }
    }
}

/// Arms the point `POINT[:N]` names for this process (debug builds; a release build refuses).
/// `Err` says what is wrong with the text.
pub fn arm(text: &str) -> Result<(), String> {
    let (name, n) = match text.split_once(':') {
        Some((name, n)) => (
            name,
            n.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("`{n}`: N counts from 1"))?,
        ),
        None => (text, 1),
    };
    let point = CrashPoint::ALL
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = CrashPoint::ALL.iter().map(|p| p.name()).collect();
            format!("`{name}` is not a crash point ({})", names.join(", "))
        })?;
    #[cfg(debug_assertions)]
    {
        armed::ARMED
            .set((point, n))
            .map_err(|_| "a crash point is already armed".to_string())
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = (point, n);
        Err("crash points exist in debug builds only".to_string())
    }
}

/// Marks that `point` is reached: stops the process here if a test armed it for this hit.
#[inline]
pub fn reached(point: CrashPoint) {
    #[cfg(debug_assertions)]
    armed::reached(point);
    #[cfg(not(debug_assertions))]
    let _ = point;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_named_once_and_bad_texts_say_why() {
        let names: std::collections::BTreeSet<&str> =
            CrashPoint::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), CrashPoint::ALL.len());
        assert!(arm("nowhere").unwrap_err().contains("before-commit"));
        assert!(arm("park:0").is_err());
        assert!(arm("park:x").is_err());
    }
}
