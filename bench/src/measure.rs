//! Timing helpers the benchmark binaries share: sample summaries and human-readable durations.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The summary of a set of timed samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// How many samples.
    pub count: usize,
    /// The fastest sample.
    pub min: Duration,
    /// The median sample.
    pub median: Duration,
    /// The 95th percentile (nearest rank).
    pub p95: Duration,
}

impl Stats {
    /// Summarises `samples` (at least one).
    pub fn of(samples: &[Duration]) -> Stats {
        assert!(!samples.is_empty(), "no samples to summarise");
        let mut s = samples.to_vec();
        s.sort();
        let rank = |q: f64| {
            let r = (q * s.len() as f64).ceil() as usize;
            s[r.clamp(1, s.len()) - 1]
        };
        let median = if s.len() % 2 == 1 {
            s[s.len() / 2]
        } else {
            (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2
        };
        Stats {
            count: s.len(),
            min: s[0],
            median,
            p95: rank(0.95),
        }
    }
}

/// Runs `f` once and returns its result with how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// How long the calling thread has run on a CPU so far (Linux: `/proc/thread-self/schedstat`;
/// `None` elsewhere). Unlike a wall-clock time it does not count the time the thread waited
/// for a core, so it stays comparable on a loaded machine.
pub fn thread_cpu() -> Option<Duration> {
    schedstat_cpu(Path::new("/proc/thread-self/schedstat"))
}

/// How long all the threads of the processes `pids` (of any user) have run on a CPU so far,
/// from each thread's `/proc/PID/task/TID/schedstat`; a process or thread that cannot be read
/// counts nothing, and a thread that ended takes its time with it. Zero off Linux.
pub fn processes_cpu(pids: impl IntoIterator<Item = u32>) -> Duration {
    pids.into_iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flat_map(|tasks| tasks.flatten())
        .filter_map(|task| schedstat_cpu(&task.path().join("schedstat")))
        .sum()
}

/// The time on a CPU a Linux `schedstat` file tells (its first field, in ns).
fn schedstat_cpu(path: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(path).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// How long all the threads of this process, those that ended too, have run on a CPU so far
/// (`CLOCK_PROCESS_CPUTIME_ID`): the CPU a piece of work costs when it uses helper threads.
pub fn process_cpu() -> Option<Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer to a local.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    let secs = u64::try_from(t.tv_sec).ok()?;
    let nanos = u32::try_from(t.tv_nsec).ok()?;
    ok.then(|| Duration::new(secs, nanos))
}

/// `d` with a unit that keeps three or four significant digits: `812 µs`, `12.4 ms`, `1.52 s`.
pub fn show(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// The `reel` binary a benchmark starts: `given` (its `--reel`), else the one beside the
/// benchmark's own executable (cargo builds both into the same directory); absolute, because
/// benchmarks start it in directories of their own. `Err` says how to get one.
pub fn reel_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| format!("the benchmark cannot find its own path: {e}"))?
            .with_file_name("reel"),
    };
    std::fs::canonicalize(&path)
        .ok()
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "no `reel` binary at {} (build it with `cargo build --release -p reel --bin reel`, or give --reel)",
                path.display()
            )
        })
}

/// `a / b` as a factor: `12.3×`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_samples() {
        let ms = |n: u64| Duration::from_millis(n);
        let samples: Vec<Duration> = (1..=20).rev().map(ms).collect();
        let s = Stats::of(&samples);
        assert_eq!(s.count, 20);
        assert_eq!(s.min, ms(1));
        assert_eq!(s.median, Duration::from_micros(10_500));
        assert_eq!(s.p95, ms(19));
        assert_eq!(Stats::of(&[ms(3)]).p95, ms(3));
    }

    #[test]
    fn the_thread_cpu_time_grows_with_work() {
        if !cfg!(target_os = "linux") {
            // Nothing to read: the benchmarks print no CPU time.
            assert_eq!(thread_cpu(), None);
            return;
        }
        let before = thread_cpu().expect("Linux has /proc/thread-self/schedstat");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(thread_cpu().expect("still readable") > before);
    }

    #[test]
    fn the_process_cpu_time_counts_a_thread_that_ended() {
        let before = process_cpu().expect("the clock is readable");
        let mine = thread_cpu();
        std::thread::spawn(|| {
            let mut x = 0u64;
            for i in 0..20_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
            }
            std::hint::black_box(x);
        })
        .join()
        .unwrap();
        let spent = process_cpu().expect("still readable") - before;
        // The work was the other thread's: this one's clock barely moved, the process's did.
        if let (Some(a), Some(b)) = (mine, thread_cpu()) {
            assert!(spent > (b - a) * 2, "{spent:?} against {:?}", b - a);
        }
        assert!(spent > Duration::from_millis(1), "{spent:?}");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(show(Duration::from_nanos(812)), "812 ns");
        assert_eq!(show(Duration::from_micros(812)), "812.0 µs");
        assert_eq!(show(Duration::from_micros(12_400)), "12.40 ms");
        assert_eq!(show(Duration::from_millis(1520)), "1.520 s");
    }
}
