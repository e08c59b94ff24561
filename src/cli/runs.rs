//! `reel runs`: list runs, newest first.

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
/// journal's unreadable rows (holes).
pub fn run_json(r: &RunRow, holes: usize) -> Value {
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
        "holes": holes,
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
    // Each listed run's journal is read for rows that cannot be read: a run with one cannot
    // resume, and nobody should learn that only from `reel resume`.
    let holes = runs
        .iter()
        .map(|r| reel_journal::fold::holes(store.as_ref(), &r.id).map(|h| h.len()))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|e| Failure::failed(e.to_string()))?;
    if args.json {
        let all: Vec<Value> = runs
            .iter()
            .zip(&holes)
            .map(|(r, h)| run_json(r, *h))
            .collect();
        print_stdout(&format!("{}\n", Value::Array(all)))?;
        return Ok(Status::Success);
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{:<26}  {:<16}  {:<11}  {:<20}  {}\n",
        "RUN", "FLOW", "STATUS", "STARTED", "ENDED"
    ));
    for r in &runs {
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
        out.push_str(&format!(
            "{:<26}  {:<16}  {:<11}  {:<20}  {}{parent}\n",
            r.id,
            r.flow,
            r.status.as_str(),
            t(Some(r.created_at)),
            t(r.ended_at)
        ));
    }
    print_stdout(&out)?;
    for (r, h) in runs.iter().zip(&holes).filter(|(_, h)| **h > 0) {
        ui.line(&format!(
            "note: run {} has {h} unreadable journal row{} (holes): it cannot be resumed; \
             `reel events {}` shows where",
            r.id,
            if *h == 1 { "" } else { "s" },
            r.id
        ));
    }
    Ok(Status::Success)
}
