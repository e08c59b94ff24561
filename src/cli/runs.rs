//! `reel runs`: list runs, newest first; with `--tree RUN`, a run with its forks and reruns.

use std::collections::{BTreeMap, HashSet};

use reel_journal::fold::Unknown;
use reel_store::{Flow, RunFilter, RunRow, RunStatus, StoreRead};
use serde_json::{Value, json};

use super::project::{Project, resolve_run};
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

    /// Also read each ended run's journal for rows that cannot be read (holes); a run that has
    /// not ended is always read.
    #[arg(long)]
    check: bool,

    /// Show RUN with its forks and reruns (and theirs), each with its status and what it reused.
    #[arg(long, value_name = "RUN", conflicts_with_all = ["status", "limit", "check"])]
    tree: Option<String>,
}

/// A time in ms since the epoch as RFC 3339, or null.
pub fn time_json(ms: Option<i64>) -> Value {
    ms.and_then(|m| jiff::Timestamp::from_millisecond(m).ok())
        .map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// What `reel runs` shows beside a run's row: how many rows of its journal cannot be read
/// (`None` when the journal was not read) and the calls a resume found with an unknown outcome.
#[derive(Default)]
struct Marks {
    holes: Option<usize>,
    unknown: Vec<Unknown>,
}

/// The JSON object of one run, as `reel runs --json` prints it, with the count of its
/// journal's unreadable rows (holes) and its calls found with an unknown outcome.
fn run_json(r: &RunRow, marks: &Marks) -> Value {
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
        "holes": marks.holes,
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
    if let Some(given) = &args.tree {
        let root = resolve_run(store.as_ref(), given)?;
        return tree(store.as_ref(), &root, args.json);
    }
    let runs = store
        .list_runs(&RunFilter {
            status,
            limit: args.limit,
            ..RunFilter::default()
        })
        .map_err(|e| Failure::failed(e.to_string()))?;
    // Calls whose outcome was unknown (an effect that may have happened twice, or waits for a
    // person) are shown for every run, from the store's index of such rows. The journal of a
    // run that has not ended is read for rows that cannot be read: such a run cannot resume,
    // and nobody should learn that only from `reel resume`. An ended run's is read only when
    // asked (`--check`), so that a listing costs the runs it lists, not every event they hold.
    let failed = |e: reel_store::StoreError| Failure::failed(e.to_string());
    let mut unknown = reel_journal::fold::unknown_outcomes(store.as_ref()).map_err(failed)?;
    let marks = runs
        .iter()
        .map(|r| {
            let holes = if args.check || !r.status.is_ended() {
                // A run a clean removed since it was listed has no journal left to count.
                match reel_journal::fold::holes(store.as_ref(), &r.id) {
                    Ok(holes) => Some(holes.len()),
                    Err(reel_store::StoreError::NotFound(_)) => None,
                    Err(e) => return Err(e),
                }
            } else {
                None
            };
            Ok(Marks {
                holes,
                unknown: unknown.remove(&r.id).unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<Marks>, _>>()
        .map_err(failed)?;
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
        .zip(marks.iter().map(|m| m.holes.unwrap_or(0)))
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

/// One run of a tree: what it is to its parent and what it took from it.
struct Node {
    row: RunRow,
    /// `run` (the root), `fork` or `rerun`.
    kind: &'static str,
    /// Calls (and signals) answered from the parent's record.
    reused: usize,
    /// Calls made live.
    live: usize,
    children: Vec<Node>,
}

/// What a run's journal says it reused: whether it is a rerun, calls reused (a signal carried
/// from the parent counts as one) and calls made live.
fn lineage(store: &dyn StoreRead, run: &str) -> Result<(bool, usize, usize), Failure> {
    type Call = (Option<String>, Option<u32>, Option<u32>);
    let mut rerun = false;
    let mut started: Vec<Call> = Vec::new();
    let mut reused: HashSet<Call> = HashSet::new();
    store
        .read_journal(run, 0, &mut |row| {
            let call = (row.step.clone(), row.index, row.attempt);
            match row.kind.as_str() {
                "run_started" => {
                    rerun = row.data.get("rerun").and_then(Value::as_bool) == Some(true);
                }
                "step_started" => started.push(call),
                "call_reused" => {
                    reused.insert(call);
                }
                _ => {}
            }
            Flow::Continue
        })
        .map_err(|e| Failure::failed(e.to_string()))?;
    let live = started.iter().filter(|c| !reused.contains(*c)).count();
    Ok((rerun, reused.len(), live))
}

/// `reel runs --tree RUN`: RUN and every run descended from it by fork or rerun, oldest first
/// under each parent.
fn tree(store: &dyn StoreRead, root: &str, json: bool) -> Result<Status, Failure> {
    let all = store
        .list_runs(&RunFilter::default())
        .map_err(|e| Failure::failed(e.to_string()))?;
    let mut children: BTreeMap<String, Vec<RunRow>> = BTreeMap::new();
    let mut root_row = None;
    for r in all {
        if r.id == root {
            root_row = Some(r.clone());
        }
        if let Some(p) = r.parent.clone() {
            children.entry(p).or_default().push(r);
        }
    }
    let root_row = root_row.ok_or_else(|| Failure::usage(format!("there is no run `{root}`")))?;
    fn build(
        store: &dyn StoreRead,
        row: RunRow,
        is_root: bool,
        children: &mut BTreeMap<String, Vec<RunRow>>,
    ) -> Result<Node, Failure> {
        let (rerun, reused, live) = lineage(store, &row.id)?;
        let mut kids = children.remove(&row.id).unwrap_or_default();
        // Run ids sort by the time the run started.
        kids.sort_by(|a, b| a.id.cmp(&b.id));
        let kids = kids
            .into_iter()
            .map(|k| build(store, k, false, children))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Node {
            kind: match (is_root, rerun) {
                (true, _) => "run",
                (false, true) => "rerun",
                (false, false) => "fork",
            },
            row,
            reused,
            live,
            children: kids,
        })
    }
    let node = build(store, root_row, true, &mut children)?;
    if json {
        print_stdout(&format!("{}\n", node_json(&node)))?;
    } else {
        let mut out = String::new();
        node_text(&node, "", "", &mut out);
        print_stdout(&out)?;
    }
    Ok(Status::Success)
}

fn node_json(n: &Node) -> Value {
    json!({
        "run": n.row.id,
        "flow": n.row.flow,
        "kind": n.kind,
        "status": n.row.status.as_str(),
        "parent": n.row.parent,
        "started_at": time_json(Some(n.row.created_at)),
        "ended_at": time_json(n.row.ended_at),
        "reused": n.reused,
        "live": n.live,
        "children": n.children.iter().map(node_json).collect::<Vec<_>>(),
    })
}

/// One line per run, its descendants drawn under it.
fn node_text(n: &Node, lead: &str, rest: &str, out: &mut String) {
    let took = if n.kind == "run" {
        String::new()
    } else {
        format!("{} reused, {} live", n.reused, n.live)
    };
    let line = format!(
        "{lead}{}  {:<5}  {:<16}  {:<11}{took}",
        n.row.id,
        n.kind,
        n.row.flow,
        n.row.status.as_str()
    );
    out.push_str(line.trim_end());
    out.push('\n');
    for (i, c) in n.children.iter().enumerate() {
        let last = i + 1 == n.children.len();
        let (l, r) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        node_text(c, &format!("{rest}{l}"), &format!("{rest}{r}"), out);
    }
}
