//! The live progress of a run on stderr: one line per step with its state, duration and attempts.
//!
//! On a terminal, finished steps print as lines that stay and the steps still running are
//! redrawn below them; elsewhere each step's ending prints as one plain line.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reel_runtime::{Progress, ProgressSink};

struct Running {
    since: Instant,
    calls: Option<usize>,
    retries: u32,
}

struct State {
    running: BTreeMap<String, Running>,
    drawn: usize,
    last_draw: Instant,
}

/// Draws a run's progress on stderr.
pub struct StderrProgress {
    live: bool,
    color: bool,
    state: Mutex<State>,
}

impl StderrProgress {
    /// Progress on stderr; live redrawing when stderr is a terminal.
    // edge: the live display times steps for people watching; nothing recorded depends on it.
    #[allow(clippy::disallowed_methods)]
    pub fn new(color: bool) -> Self {
        StderrProgress {
            live: std::io::stderr().is_terminal(),
            color,
            state: Mutex::new(State {
                running: BTreeMap::new(),
                drawn: 0,
                last_draw: Instant::now() - Duration::from_secs(1),
            }),
        }
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

    fn clear(&self, state: &mut State, out: &mut impl Write) {
        if self.live && state.drawn > 0 {
            let _ = write!(out, "\u{1b}[{}A\u{1b}[J", state.drawn);
            state.drawn = 0;
        }
    }

    // edge: the live display times steps for people watching; nothing recorded depends on it.
    #[allow(clippy::disallowed_methods)]
    fn draw(&self, state: &mut State, out: &mut impl Write) {
        if !self.live {
            return;
        }
        for (step, r) in &state.running {
            let calls = r.calls.map(|n| format!("  {n} calls")).unwrap_or_default();
            let retries = if r.retries > 0 {
                format!("  attempt {}", r.retries + 1)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {} {step}  {}{calls}{retries}",
                self.mark("running"),
                duration(r.since.elapsed())
            );
        }
        state.drawn = state.running.len();
        state.last_draw = Instant::now();
    }
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
    // edge: the live display times steps for people watching; nothing recorded depends on it.
    #[allow(clippy::disallowed_methods)]
    fn report(&self, progress: Progress) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let mut out = std::io::stderr().lock();
        match progress {
            Progress::StepRunning { step, calls } => {
                state.running.insert(
                    step,
                    Running {
                        since: Instant::now(),
                        calls,
                        retries: 0,
                    },
                );
                if self.live && state.last_draw.elapsed() > Duration::from_millis(50) {
                    self.clear(&mut state, &mut out);
                    self.draw(&mut state, &mut out);
                }
            }
            Progress::Retrying {
                step,
                attempt,
                code,
            } => {
                if let Some(r) = state.running.get_mut(&step) {
                    r.retries += 1;
                }
                self.clear(&mut state, &mut out);
                let _ = writeln!(
                    out,
                    "  {} {step}  attempt {attempt} failed ({code}), retrying",
                    self.mark("retrying")
                );
                self.draw(&mut state, &mut out);
            }
            Progress::StepDone {
                step,
                state: end,
                duration_ms,
                attempts,
                calls,
                detail,
            } => {
                state.running.remove(&step);
                self.clear(&mut state, &mut out);
                let took = if end == "skipped" || end == "waiting" {
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
                    ("skipped", Some(d)) => format!("  skipped: {d}"),
                    ("waiting", Some(d)) => format!("  waiting for {d}"),
                    (_, Some(d)) => format!("  {d}"),
                    (_, None) => String::new(),
                };
                let _ = writeln!(out, "  {} {step}{took}{tries}{detail}", self.mark(end));
                self.draw(&mut state, &mut out);
            }
        }
    }
}
