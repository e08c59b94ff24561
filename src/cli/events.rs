//! `reel events`: a run's journal, event by event.

use reel_flowspec::canonical;
use reel_journal::journal::Event;
use reel_store::{EventRow, Flow, JournalRow, StoreRead};
use serde_json::{Value, json};

use super::project::{Project, resolve_run};
use super::runs::time_json;
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// Print a run's journal: every event, in order. With `--full`, the values the events refer to
/// by digest (inputs, outputs, results, payloads, causes) are shown in place; secrets show as
/// `{secret:NAME}`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Only the events of this step.
    #[arg(long, value_name = "S")]
    step: Option<String>,

    /// Show the values events refer to, not only their digests.
    #[arg(long)]
    full: bool,

    /// Print a JSON array of events.
    #[arg(long)]
    json: bool,
}

const DIGEST_FIELDS: [&str; 8] = [
    "inputs", "output", "result", "payload", "env", "cause", "flow", "digest",
];

fn resolve(store: &dyn StoreRead, data: &Value) -> Value {
    match data {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let resolved = match v {
                        // A name of either form: a digest, or the value itself.
                        Value::String(d)
                            if DIGEST_FIELDS.contains(&k.as_str())
                                && k != "flow"
                                && (d.len() == 64 || canonical::literal(d).is_some()) =>
                        {
                            store.get_value(d).ok().flatten().map_or_else(
                                || v.clone(),
                                |val| json!({ "digest": canonical::name_digest(d), "value": val }),
                            )
                        }
                        Value::Object(_) => resolve(store, v),
                        _ => v.clone(),
                    };
                    (k.clone(), resolved)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn event_json(store: &dyn StoreRead, e: &EventRow, full: bool) -> Value {
    json!({
        "seq": e.seq,
        "at": time_json(Some(e.at)),
        "kind": e.kind,
        "step": e.step,
        "index": e.index,
        "attempt": e.attempt,
        "data": if full { resolve(store, &e.data) } else { e.data.clone() },
    })
}

fn line(store: &dyn StoreRead, e: &EventRow, full: bool) -> String {
    let at = match time_json(Some(e.at)) {
        Value::String(s) => s,
        _ => String::new(),
    };
    let mut who = e.step.clone().unwrap_or_default();
    if let Some(i) = e.index {
        who.push_str(&format!("[{i}]"));
    }
    if let Some(a) = e.attempt.filter(|a| *a > 1) {
        who.push_str(&format!(" attempt {a}"));
    }
    let data = if full {
        resolve(store, &e.data)
    } else {
        e.data.clone()
    };
    let data = match &data {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    };
    format!("{:>5}  {at}  {:<16} {who}  {data}", e.seq, e.kind)
}

/// Runs `reel events`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let mut rows = Vec::new();
    store
        .read_journal_rows(&id, 0, &mut |row| {
            let row = match row {
                // A row that reads but whose event this version cannot make out is a hole too.
                JournalRow::Event(e) => match Event::from_row(&e) {
                    Ok(_) => JournalRow::Event(e),
                    Err(message) => JournalRow::Hole {
                        seq: e.seq,
                        message,
                    },
                },
                hole => hole,
            };
            // A hole is shown whatever `--step` asks for: which step it was is unknown.
            if let JournalRow::Event(e) = &row
                && args
                    .step
                    .as_ref()
                    .is_some_and(|s| e.step.as_ref() != Some(s))
            {
                return Flow::Continue;
            }
            rows.push(row);
            Flow::Continue
        })
        .map_err(|e| Failure::failed(e.to_string()))?;
    let holes = rows
        .iter()
        .filter(|r| matches!(r, JournalRow::Hole { .. }))
        .count();
    if args.json {
        let all: Vec<Value> = rows
            .iter()
            .map(|row| match row {
                JournalRow::Event(e) => event_json(store.as_ref(), e, args.full),
                JournalRow::Hole { seq, message } => json!({ "seq": seq, "hole": message }),
            })
            .collect();
        print_stdout(&format!("{}\n", Value::Array(all)))?;
    } else {
        let mut out = String::new();
        for row in &rows {
            match row {
                JournalRow::Event(e) => out.push_str(&line(store.as_ref(), e, args.full)),
                JournalRow::Hole { seq, message } => {
                    out.push_str(&format!(
                        "{seq:>5}  <hole: this row cannot be read: {message}>"
                    ));
                }
            }
            out.push('\n');
        }
        print_stdout(&out)?;
    }
    if holes > 0 {
        ui.warning(&format!(
            "run {id} has {holes} unreadable journal row{} (marked <hole>): it cannot be resumed",
            if holes == 1 { "" } else { "s" }
        ));
    }
    Ok(Status::Success)
}
