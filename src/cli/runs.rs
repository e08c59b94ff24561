//! `reel runs`: list runs, newest first.

use reel_journal::fold::Marks;
use reel_store::{RunFilter, RunRow, RunStatus};
use serde_json::{Value, json};

use super::project::Project;
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// List the runs in this project's store, newest first.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only runs with this status (running, waiting, succeeded, failed, canceled, quarantined).
    #[arg(long, value_name = "S")]
    status: Option<String>,

    /// Print a JSON array of {run, flow, status, started_at, ended_at, parent, …}.
    #[arg(long)]
    json: bool,

    /// At most this many runs.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

/// A time in ms since the epoch as RFC 3339, or null.
pub fn time_json(ms: Option<i64>) -> Value {
    ms.and_then(|m| jiff::Timestamp::from_millisecond(m).ok())
        .map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// The JSON object of one run, as `reel runs --json` prints it, with the count of its
/// journal's unreadable rows (holes) and its calls found with an unknown outcome.
pub fn run_json(r: &RunRow, marks: &Marks) -> Value {
    json!({
        "run": r.id,
        "flow": r.flow,
        "status": r.status.as_str(),
        "started_at": time_json(Some(r.created_at)),
        "ended_at": time_json(r.ended_at),
        "parent": r.parent,
        "source": r.source,
        "due_at": time_json(r.due_at),
        "waiting_on": r.waiting_on,
        "error": r.error,
        "holes": marks.holes.len(),
        "unknown_outcomes": marks
            .unknown
            .iter()
            .map(|(step, index, attempt, then)| json!({
                "step": step,
                "index": index,
                "attempt": attempt,
                "then": then.as_str(),
            }))
            .collect::<Vec<Value>>(),
    })
}

/// Runs `reel runs`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let status = match &args.status {
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            Failure::usage(format!(
                "`{s}` is not a run status: use running, waiting, succeeded, failed, canceled or quarantined"
            ))
        })?),
        None => None,
    };
    let project = Project::current()?;
    if !project.store_exists() {
        if args.json {
            print_stdout("[]\n")?;
        } else {
            eprintln!("no runs yet (no store at {})", project.store_shown());
        }
        return Ok(Status::Success);
    }
    if let Some(exposure) = project.exposure() {
        ui.warning(&exposure);
    }
    let store = project.open_store()?;
    let runs = store
        .list_runs(&RunFilter {
            status,
            limit: args.limit,
            ..RunFilter::default()
        })
        .map_err(|e| Failure::failed(e.to_string()))?;
    // Each listed run's journal is read for rows that cannot be read (a run with one cannot
    // resume, and nobody should learn that only from `reel resume`) and for calls whose outcome
    // was unknown (an effect that may have happened twice, or waits for a person).
    let marks = runs
        .iter()
        .map(|r| reel_journal::fold::marks(store.as_ref(), &r.id))
        .collect::<Result<Vec<Marks>, _>>()
        .map_err(|e| Failure::failed(e.to_string()))?;
    if args.json {
        let all: Vec<Value> = runs
            .iter()
            .zip(&marks)
            .map(|(r, m)| run_json(r, m))
            .collect();
        print_stdout(&format!("{}\n", Value::Array(all)))?;
        return Ok(Status::Success);
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{:<26}  {:<16}  {:<11}  {:<20}  {}\n",
        "RUN", "FLOW", "STATUS", "STARTED", "ENDED"
    ));
    for (r, m) in runs.iter().zip(&marks) {
        let t = |ms: Option<i64>| match time_json(ms) {
            Value::String(s) => s.chars().take(19).collect::<String>().replace('T', " "),
            _ => "-".to_string(),
        };
        // A fork names its parent after the columns, so other runs' lines stay as they were.
        let parent = r
            .parent
            .as_ref()
            .map(|p| format!("  fork of {p}"))
            .unwrap_or_default();
        let unknown = unknown_marker(m);
        out.push_str(&format!(
            "{:<26}  {:<16}  {:<11}  {:<20}  {}{parent}{unknown}\n",
            r.id,
            r.flow,
            r.status.as_str(),
            t(Some(r.created_at)),
            t(r.ended_at)
        ));
    }
    print_stdout(&out)?;
    for (r, h) in runs
        .iter()
        .zip(marks.iter().map(|m| m.holes.len()))
        .filter(|(_, h)| *h > 0)
    {
        ui.line(&format!(
            "note: run {} has {h} unreadable journal row{} (holes): it cannot be resumed; \
             `reel events {}` shows where",
            r.id,
            if h == 1 { "" } else { "s" },
            r.id
        ));
    }
    Ok(Status::Success)
}

/// After a run's columns, like a fork's parent: the calls a resume found with an unknown
/// outcome, which may have acted twice (`repeated`, `retried`) or wait for a person (`held`).
fn unknown_marker(m: &Marks) -> String {
    let calls: Vec<String> = m
        .unknown
        .iter()
        .map(|(step, index, _, then)| match index {
            Some(i) => format!("{step}[{i}] {}", then.as_str()),
            None => format!("{step} {}", then.as_str()),
        })
        .collect();
    if calls.is_empty() {
        String::new()
    } else {
        format!("  unknown outcome: {}", calls.join(", "))
    }
}
