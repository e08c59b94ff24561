//! The live progress of a run on stderr: one line per step with its state, duration and attempts.
//!
//! On a terminal (indicatif), each finished step prints a line that stays, each running step
//! has a line below them with its elapsed time and, for a `foreach`, the calls done out of all
//! with a bar, and a last line counts what is running, finished and still pending. Drawing is
//! rate-limited (a few times a second, never more), so a step of 100,000 calls costs a counter
//! per call, not a redraw. Elsewhere each step's ending prints as one plain line; lines are
//! written a few at a time (see [`Plain`]).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use reel_runtime::{Progress, ProgressSink, StepEnd};

/// Redraws per second on a terminal.
const REDRAW_HZ: u8 = 8;
/// How often a running step's elapsed time moves on its own.
const TICK: Duration = Duration::from_millis(250);
/// Running steps shown with a line of their own; the others are counted in the last line.
const VISIBLE_RUNNING: usize = 16;

/// One step that is running.
struct Running {
    /// Its line, when it is among the visible ones.
    bar: Option<ProgressBar>,
}

/// What the display knows of the run.
struct State {
    running: HashMap<String, Running>,
    /// Steps that ended while this process drove the run.
    finished: usize,
}

/// The terminal's live part.
struct Live {
    multi: MultiProgress,
    /// The last line: counts of running, finished and pending steps.
    summary: ProgressBar,
}

/// How long a plain line may wait to be written with the lines after it.
const PLAIN_LINGER: Duration = Duration::from_millis(50);
/// How many bytes of plain lines are written at once at most.
const PLAIN_CHUNK: usize = 16 << 10;

/// Plain lines on their way to a file or a pipe: one system call per line cost a replay of a
/// 33,333-step flow a twelfth of its time writing to `/dev/null`, and on a pipe each wakes the
/// reader. Lines are gathered and written together once [`PLAIN_CHUNK`] bytes wait, or
/// [`PLAIN_LINGER`] after the first of them (by a thread of their own, so that the lines of
/// quick steps before a slow one are not held back until it ends), and at the run's end.
struct Plain {
    waiting: Mutex<Waiting>,
    wake: Condvar,
    out: Mutex<Box<dyn Write + Send>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// The plain lines not written yet.
#[derive(Default)]
struct Waiting {
    text: String,
    since: Option<Instant>,
    /// The run's end was reached: lines go out at once from then on.
    closed: bool,
}

impl Plain {
    /// Lines written to `out`, with the thread that writes lines that waited long enough.
    fn new(out: Box<dyn Write + Send>) -> Arc<Plain> {
        let plain = Arc::new(Plain {
            waiting: Mutex::new(Waiting::default()),
            wake: Condvar::new(),
            out: Mutex::new(out),
            writer: Mutex::new(None),
        });
        let lingering = Arc::clone(&plain);
        let writer = std::thread::Builder::new()
            .name("reel-progress".to_string())
            .spawn(move || lingering.write_late_lines())
            .ok();
        if writer.is_none() {
            // No thread: every line goes out at once, as it always did.
            lock(&plain.waiting).closed = true;
        }
        *lock(&plain.writer) = writer;
        plain
    }

    fn line(&self, line: &str) {
        let mut waiting = lock(&self.waiting);
        waiting.text.push_str(line);
        waiting.text.push('\n');
        if waiting.closed || waiting.text.len() >= PLAIN_CHUNK {
            self.write(&mut waiting);
        } else if waiting.since.is_none() {
            // edge: when a line goes out is I/O timing for the person reading, not a decision.
            #[allow(clippy::disallowed_methods)]
            let now = Instant::now();
            waiting.since = Some(now);
            self.wake.notify_one();
        }
    }

    /// Writes what waits; the lock on `waiting` keeps the lines in order.
    fn write(&self, waiting: &mut Waiting) {
        if !waiting.text.is_empty() {
            // A closed stderr leaves nobody to tell; the exit status still says how it went.
            let _ = lock(&self.out).write_all(waiting.text.as_bytes());
            waiting.text.clear();
        }
        waiting.since = None;
    }

    /// The writer thread: writes lines [`PLAIN_LINGER`] after the first of them waits.
    fn write_late_lines(&self) {
        let mut waiting = lock(&self.waiting);
        loop {
            if waiting.closed {
                return;
            }
            let Some(since) = waiting.since else {
                waiting = self.wake.wait(waiting).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            #[allow(clippy::disallowed_methods)]
            let left = (since + PLAIN_LINGER).saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.write(&mut waiting);
            } else {
                waiting = match self.wake.wait_timeout(waiting, left) {
                    Ok((waiting, _)) => waiting,
                    Err(e) => e.into_inner().0,
                };
            }
        }
    }

    /// Writes what waits and stops the writer thread: later lines go out at once.
    fn close(&self) {
        {
            let mut waiting = lock(&self.waiting);
            self.write(&mut waiting);
            waiting.closed = true;
            self.wake.notify_one();
        }
        if let Some(writer) = lock(&self.writer).take() {
            let _ = writer.join();
        }
    }
}

/// Locks a mutex, going on when a thread panicked holding it (what it guards is text).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Draws a run's progress on stderr.
pub struct StderrProgress {
    color: bool,
    /// The flow's step count, when the whole run is ahead (`reel run`): pending steps are
    /// counted from it.
    total: Option<usize>,
    live: Option<Live>,
    /// Where lines go when nothing is drawn live.
    plain: Option<Arc<Plain>>,
    /// The line that names a new run, printed when the run is recorded
    /// ([`Progress::RunCreated`]): a run refused before (a bad input) is never named.
    header: Option<String>,
    state: Mutex<State>,
}

impl StderrProgress {
    /// Progress on stderr, live when stderr is a terminal; `total` is the flow's step count
    /// when every step is still ahead.
    pub fn new(color: bool, total: Option<usize>) -> Self {
        let target = std::io::stderr()
            .is_terminal()
            .then(|| ProgressDrawTarget::stderr_with_hz(REDRAW_HZ));
        StderrProgress::with_target(color, total, target)
    }

    /// Progress drawn live on `target`, or as plain lines on stderr when there is none.
    fn with_target(color: bool, total: Option<usize>, target: Option<ProgressDrawTarget>) -> Self {
        let plain = target
            .is_none()
            .then(|| Plain::new(Box::new(std::io::stderr())));
        Self::drawn(color, total, target, plain)
    }

    /// Progress drawn live on `target`, else as plain lines through `plain`.
    fn drawn(
        color: bool,
        total: Option<usize>,
        target: Option<ProgressDrawTarget>,
        plain: Option<Arc<Plain>>,
    ) -> Self {
        let live = target.map(|target| {
            let multi = MultiProgress::with_draw_target(target);
            let summary = multi.add(ProgressBar::new_spinner());
            summary.set_style(style("  {msg}"));
            Live { multi, summary }
        });
        let progress = StderrProgress {
            color,
            total,
            live,
            plain,
            header: None,
            state: Mutex::new(State {
                running: HashMap::new(),
                finished: 0,
            }),
        };
        if let Ok(state) = progress.state.lock() {
            progress.summarize(&state);
        }
        progress
    }

    /// Prints `header` once the run it names is recorded (see [`Progress::RunCreated`]).
    pub fn announcing(mut self, header: String) -> Self {
        self.header = Some(header);
        self
    }

    fn mark(&self, state: &str) -> String {
        let (mark, code) = match state {
            "succeeded" => ("✓", "32"),
            "failed" => ("✗", "31"),
            "skipped" => ("↷", "2"),
            "waiting" => ("⏸", "33"),
            "retrying" => ("↻", "33"),
            _ => ("•", "36"),
        };
        if self.color {
            format!("\u{1b}[{code}m{mark}\u{1b}[0m")
        } else {
            mark.to_string()
        }
    }

    /// Prints a line that stays: above the live lines on a terminal.
    fn print(&self, line: &str) {
        if let Some(live) = &self.live {
            let _ = live.multi.println(line);
        }
        if let Some(plain) = &self.plain {
            plain.line(line);
        }
    }

    /// Brings the last line up to date.
    fn summarize(&self, state: &State) {
        let Some(live) = &self.live else {
            return;
        };
        let running = state.running.len();
        let hidden = running - state.running.values().filter(|r| r.bar.is_some()).count();
        let mut parts = vec![format!("{running} running")];
        if hidden > 0 {
            parts[0].push_str(&format!(" ({hidden} not shown)"));
        }
        parts.push(format!("{} finished", state.finished));
        if let Some(total) = self.total {
            parts.push(format!(
                "{} pending",
                total.saturating_sub(state.finished + running)
            ));
        }
        live.summary.set_message(parts.join(" · "));
    }

    /// A line for a step that began, when there is room for one.
    fn running_line(&self, state: &State, step: &str, calls: Option<usize>) -> Option<ProgressBar> {
        let live = self.live.as_ref()?;
        let shown = state.running.values().filter(|r| r.bar.is_some()).count();
        if shown >= VISIBLE_RUNNING {
            return None;
        }
        let mark = self.mark("running");
        let bar = match calls {
            Some(n) => ProgressBar::new(n as u64).with_style(style(&format!(
                "  {mark} {{prefix}}  {{elapsed}}  [{{bar:24}}] {{pos}}/{{len}} calls{{msg}}"
            ))),
            None => ProgressBar::new_spinner()
                .with_style(style(&format!("  {mark} {{prefix}}  {{elapsed}}{{msg}}"))),
        };
        let bar = live
            .multi
            .insert_before(&live.summary, bar.with_prefix(step.to_string()));
        bar.enable_steady_tick(TICK);
        Some(bar)
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
}

/// `850ms`, `1.2s`, `3m04s`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

impl ProgressSink for StderrProgress {
    fn report(&self, progress: Progress) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match progress {
            Progress::RunCreated { .. } => {
                if let Some(header) = &self.header {
                    self.print(header);
                }
            }
            Progress::StepRunning { step, calls } => {
                if let Some(old) = state.running.remove(&step).and_then(|r| r.bar) {
                    old.finish_and_clear();
                }
                let bar = self.running_line(&state, &step, calls);
                state.running.insert(step, Running { bar });
                self.summarize(&state);
            }
            Progress::CallDone { step } => {
                if let Some(bar) = state.running.get(&step).and_then(|r| r.bar.as_ref()) {
                    bar.inc(1);
                }
            }
            Progress::Retrying {
                step,
                attempt,
                code,
            } => {
                if let Some(bar) = state.running.get(&step).and_then(|r| r.bar.as_ref()) {
                    bar.set_message(format!("  retrying after attempt {attempt} ({code})"));
                }
                self.print(&format!(
                    "  {} {step}  attempt {attempt} failed ({code}), retrying",
                    self.mark("retrying")
                ));
            }
            Progress::StepDone {
                step,
                state: end,
                duration_ms,
                attempts,
                calls,
                detail,
            } => {
                if let Some(bar) = state.running.remove(&step).and_then(|r| r.bar) {
                    bar.finish_and_clear();
                    if let Some(live) = &self.live {
                        live.multi.remove(&bar);
                    }
                }
                if end != StepEnd::Waiting {
                    state.finished += 1;
                }
                let took = if matches!(end, StepEnd::Skipped | StepEnd::Waiting) {
                    String::new()
                } else {
                    format!(
                        "  {}",
                        duration(Duration::from_millis(duration_ms.max(0) as u64))
                    )
                };
                let tries = match (calls, attempts) {
                    (c, a) if c > 1 && a > c => format!("  {c} calls, {} retries", a - c),
                    (c, _) if c > 1 => format!("  {c} calls"),
                    (_, a) if a > 1 => format!("  {a} attempts"),
                    _ => String::new(),
                };
                let detail = match (end, detail) {
                    (StepEnd::Skipped, Some(d)) => format!("  skipped: {d}"),
                    (StepEnd::Waiting, Some(d)) => format!("  waiting for {d}"),
                    (_, Some(d)) => format!("  {d}"),
                    (_, None) => String::new(),
                };
                self.print(&format!(
                    "  {} {step}{took}{tries}{detail}",
                    self.mark(end.as_str())
                ));
                self.summarize(&state);
            }
        }
    }
}

impl StderrProgress {
    /// Takes the live lines away, or writes the plain lines still waiting, before the run's
    /// last words are printed.
    pub fn finish(&self) {
        if let Some(plain) = &self.plain {
            plain.close();
        }
        if let Some(live) = &self.live {
            if let Ok(state) = self.state.lock() {
                for bar in state.running.values().filter_map(|r| r.bar.as_ref()) {
                    bar.finish_and_clear();
                }
            }
            live.summary.finish_and_clear();
            let _ = live.multi.clear();
        }
    }
}

impl Drop for StderrProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use indicatif::InMemoryTerm;

    use super::*;

    fn screen(term: &InMemoryTerm) -> String {
        // Lines move on their own a few times a second: wait for a redraw.
        std::thread::sleep(Duration::from_millis(400));
        term.contents()
            .lines()
            .map(|l| {
                // The elapsed time and the spinner differ from run to run.
                l.split_whitespace()
                    .filter(|w| {
                        let Some(number) = w.strip_suffix('s') else {
                            return true;
                        };
                        let digits = number.strip_suffix('m').unwrap_or(number);
                        digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit())
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn a_terminal_shows_finished_lines_running_steps_with_calls_done_and_what_is_pending() {
        let term = InMemoryTerm::new(12, 100);
        let progress = StderrProgress::with_target(
            false,
            Some(4),
            Some(ProgressDrawTarget::term_like(Box::new(term.clone()))),
        );
        progress.report(Progress::StepRunning {
            step: "first".into(),
            calls: None,
        });
        progress.report(Progress::StepDone {
            step: "first".into(),
            state: StepEnd::Succeeded,
            duration_ms: 5,
            attempts: 1,
            calls: 1,
            detail: None,
        });
        progress.report(Progress::StepRunning {
            step: "many".into(),
            calls: Some(30),
        });
        for _ in 0..12 {
            progress.report(Progress::CallDone {
                step: "many".into(),
            });
        }
        progress.report(Progress::StepRunning {
            step: "slow".into(),
            calls: None,
        });
        insta::assert_snapshot!(screen(&term), @r"
        ✓ first
        • many [=========> ] 12/30 calls
        • slow
        2 running · 1 finished · 1 pending
        ");
        progress.finish();
        // What stays is the finished steps' lines.
        insta::assert_snapshot!(screen(&term), @"✓ first");
    }

    /// What a plain display wrote: its text and how many writes it took.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<(String, usize)>>);

    impl Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut w = lock(&self.0);
            w.0.push_str(&String::from_utf8_lossy(buf));
            w.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn done(step: &str) -> Progress {
        Progress::StepDone {
            step: step.into(),
            state: StepEnd::Succeeded,
            duration_ms: 0,
            attempts: 1,
            calls: 1,
            detail: None,
        }
    }

    /// A display of plain lines, and what it writes.
    fn plain_progress() -> (StderrProgress, Written) {
        let written = Written::default();
        let plain = Plain::new(Box::new(written.clone()));
        (
            StderrProgress::drawn(false, None, None, Some(plain)),
            written,
        )
    }

    #[test]
    fn plain_lines_are_written_together_in_order_and_all_by_the_end() {
        let (progress, written) = plain_progress();
        for i in 0..2000 {
            progress.report(done(&format!("s{i}")));
        }
        progress.finish();
        let (text, writes) = lock(&written.0).clone();
        let expected: String = (0..2000).map(|i| format!("  ✓ s{i}  0ms\n")).collect();
        assert_eq!(text, expected);
        // 2,000 lines of about 14 bytes: two chunks, and whatever lingered that long (a
        // machine that stalls for the linger between two lines makes more, never one a line).
        assert!(writes < 200, "{writes} writes for 2,000 lines");
        // After the end, a line goes out at once.
        progress.report(done("late"));
        assert!(lock(&written.0).0.ends_with("  ✓ late  0ms\n"));
    }

    #[test]
    fn a_plain_line_does_not_wait_for_the_next_one() {
        let (progress, written) = plain_progress();
        progress.report(done("quick"));
        // No other line and no end: the writer thread writes it after the linger (waited
        // for here up to far longer than that).
        let mut waited = Duration::ZERO;
        while lock(&written.0).0.is_empty() && waited < Duration::from_secs(10) {
            std::thread::sleep(PLAIN_LINGER);
            waited += PLAIN_LINGER;
        }
        assert_eq!(lock(&written.0).0, "  ✓ quick  0ms\n");
        drop(progress);
    }
}
