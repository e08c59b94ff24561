//! `reel replay`: re-execute a recorded run from its journal, hermetically; with `--flow`,
//! check a corrected flow against the recorded history (a fork's dry run).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use reel_runtime::{
    Divergence, ForkPlan, Recording, Refusal, ReplayOptions, RerunRequest, plan_fork,
    replay_recording, rerun, resolve_inputs,
};
use reel_store::StoreRead;
use serde_json::{Map, Value, json};

use super::progress::StderrProgress;
use super::project::{Project, resolve_run};
use super::runtime::{
    new_run_id, refused, report_with, rider_config, run_deps, stop_on_ctrl_c, tokio_runtime,
};
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// Re-execute a recorded run from its journal: no network, no tool, no secret.
///
/// Every call, timer and signal is answered from the journal (a call by its step, `foreach`
/// index and attempt); pure steps are computed again. The store is only read. Progress goes to
/// stderr as `reel run` shows it, the output to stdout. `--verify` also compares every
/// recomputed step output and every call's inputs with the record and stops at the first
/// difference, naming the step, its source line and both values.
///
/// With `--flow FILE`, nothing is replayed: the corrected flow is checked against the recorded
/// history, and each step is shown as a fork would treat it (reused, or run live and why).
///
/// With `--rerun`, the run is made again as a new run whose parent it is: its reads (calls of
/// `pure` and `read` tools that match the record) are answered from the journal, its effects
/// are made live with the new run's idempotency keys, and its secrets are resolved fresh. Exit
/// status then as `reel run`.
///
/// Exit status: 0 the replay reproduces the record (with `--flow`: the whole history would be
/// reused), 1 it diverges (or the flow file has errors), 2 bad usage (unknown run).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel replay 01j9z3\n  \
    reel replay 01j9z3 --verify\n  \
    reel replay 01j9z3 --flow fixed.reel --json\n  \
    reel replay 01j9z3 --rerun")]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Compare every recomputed step output and call input with the record.
    #[arg(long)]
    verify: bool,

    /// A corrected flow file: show which steps a fork of the run would reuse.
    #[arg(long, value_name = "FILE", conflicts_with = "verify")]
    flow: Option<PathBuf>,

    /// Make the run again as a new run: reads answered from the journal, effects made live.
    #[arg(long, conflicts_with_all = ["verify", "flow"])]
    rerun: bool,

    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `reel replay`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    if args.rerun {
        return rerun_run(&project, &args.run, args.json, ui);
    }
    if !project.is_postgres() && !project.store_dir.join("reel.db").is_file() {
        return Err(Failure::usage(format!(
            "there is no run `{}`: no store at {}",
            args.run,
            project.store_dir.display()
        )));
    }
    let store = project.open_read_only()?;
    let store: &dyn StoreRead = store.as_ref();
    let id = resolve_run(store, &args.run)?;
    match &args.flow {
        Some(file) => check_flow(store, &id, file, args.json, ui),
        None => replay_run(store, &id, args.verify, args.json, ui),
    }
}

/// The builtins a test asks to change (`REEL_TEST_FAULT=builtin:NAME[,builtin:NAME]`): only in
/// debug builds, read here at the edge and handed to the engine as a value, for a replay, a
/// `reel test` and a live run alike (a resume that then diverges is quarantined).
// edge: a test's fault injection, read where the program starts; absent from release builds.
#[allow(clippy::disallowed_methods)]
pub fn test_faults() -> Vec<String> {
    #[cfg(debug_assertions)]
    {
        std::env::var("REEL_TEST_FAULT")
            .unwrap_or_default()
            .split(',')
            .filter_map(|f| f.trim().strip_prefix("builtin:").map(str::to_string))
            .collect()
    }
    #[cfg(not(debug_assertions))]
    Vec::new()
}

fn replay_run(
    store: &dyn StoreRead,
    id: &str,
    verify: bool,
    json: bool,
    ui: &Ui,
) -> Result<Status, Failure> {
    ui.line(&format!(
        "replay of run {id}{}",
        if verify { " (verifying)" } else { "" }
    ));
    // Loaded once: the progress display's step count comes from the spec the replay runs.
    let rec = Recording::load(store, id).map_err(refused)?;
    let progress = Arc::new(StderrProgress::new(
        ui.colored(),
        Some(rec.spec.steps.len()),
    ));
    let opts = ReplayOptions {
        verify,
        faults: test_faults(),
    };
    let report = replay_recording(store, &rec, &opts, progress.as_ref());
    // The process ends after this command: freeing a big record's FlowSpec and index one
    // allocation at a time took a twentieth of a replay, and the system takes the memory back
    // at once.
    std::mem::forget(rec);
    progress.finish();
    let report = report.map_err(refused)?;
    if json {
        print_stdout(&format!(
            "{}\n",
            json!({
                "run": id,
                "status": report.status,
                "output": report.output,
                "error": report.error,
                "calls": report.calls,
                "divergence": report.divergence.as_ref().map(divergence_json),
            })
        ))?;
    } else if let Some(output) = report
        .output
        .as_ref()
        .filter(|_| report.divergence.is_none())
    {
        print_stdout(&format!("{}\n", pretty(output)))?;
    }
    match &report.divergence {
        None => {
            ui.line(&format!(
                "replay of run {id} reproduces its record ({} answered from the journal, ended {})",
                super::ui::plural(report.calls, "call"),
                report.status
            ));
            Ok(Status::Success)
        }
        Some(d) => {
            ui.error(&divergence_text(
                &format!("replay of run {id} diverged"),
                "replayed",
                d,
            ));
            Ok(Status::Failed)
        }
    }
}

/// `reel replay RUN --rerun`: a new run of the recorded flow, reads from the journal, effects
/// live.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
fn rerun_run(project: &Project, given: &str, json: bool, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let store = project.open_store()?;
    let parent = resolve_run(store.as_ref(), given)?;
    let row = store
        .run(&parent)
        .map_err(|e| Failure::failed(e.to_string()))?
        .ok_or_else(|| Failure::usage(format!("there is no run `{parent}`")))?;
    let steps = store
        .flowspec(&row.flow_digest)
        .ok()
        .flatten()
        .and_then(|(spec, _)| spec.ok())
        .map(|spec| spec.steps.len());
    let request = RerunRequest {
        run_id: new_run_id(),
        parent: parent.clone(),
        keep_for_ms: Some(project.keep_for(None)?),
        durability: project.durability(None)?,
    };
    let header = format!(
        "run {} of `{}`, a rerun of run {parent}",
        request.run_id, row.flow
    );
    let progress = Arc::new(StderrProgress::new(ui.colored(), steps).announcing(header));
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        rerun(&deps, &rider_config(), request).await
    });
    progress.finish();
    let rerun = outcome.map_err(refused)?;
    ui.line(&format!(
        "{} answered from run {parent}'s journal, {} made live",
        super::ui::plural(rerun.reused, "call"),
        rerun.live
    ));
    let extra = json.then(|| {
        let mut m = Map::new();
        m.insert("parent".into(), Value::from(parent.clone()));
        m.insert("reused".into(), Value::from(rerun.reused));
        m.insert("live".into(), Value::from(rerun.live));
        m
    });
    report_with(ui, &rerun.outcome, extra, began.elapsed())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
}

/// A divergence as `--json` gives it.
pub fn divergence_json(d: &Divergence) -> Value {
    json!({
        "step": d.step,
        "index": d.index,
        "what": d.what,
        "source": d.span.as_ref().map(|s| json!({ "file": s.file, "line": s.line })),
        "recorded": d.recorded,
        "replayed": d.replayed,
    })
}

/// How a divergence is told after `head`: where, what, and both values (a line diff when they
/// are long). `then` names the recorded side's counterpart (`replayed`, `now`).
pub fn divergence_text(head: &str, then: &str, d: &Divergence) -> String {
    let mut out = head.to_string();
    if let Some(step) = &d.step {
        out.push_str(&format!(" at step `{step}`"));
        if let Some(i) = d.index {
            out.push_str(&format!("[{i}]"));
        }
    }
    if let Some(span) = &d.span {
        out.push_str(&format!(" ({}:{})", span.file, span.line));
    }
    out.push_str(&format!(": {}", d.what));
    let shown = |v: &Option<Value>| v.as_ref().map_or("(none)".to_string(), pretty);
    let (recorded, replayed) = (shown(&d.recorded), shown(&d.replayed));
    if recorded.lines().count() + replayed.lines().count() > 8 {
        out.push_str(&format!("\n  --- recorded\n  +++ {then}"));
        let diff = similar::TextDiff::from_lines(&recorded, &replayed);
        for change in diff.iter_all_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
                similar::ChangeTag::Equal => ' ',
            };
            out.push_str(&format!("\n  {sign} {}", change.value().trim_end()));
        }
    } else if d.recorded.is_some() || d.replayed.is_some() {
        let indent = |s: &str| s.replace('\n', "\n            ");
        out.push_str(&format!("\n  recorded: {}", indent(&recorded)));
        out.push_str(&format!("\n  {then:>8}: {}", indent(&replayed)));
    }
    out
}

/// `reel replay RUN --flow FILE`: the fork's dry run.
fn check_flow(
    store: &dyn StoreRead,
    id: &str,
    file: &std::path::Path,
    json: bool,
    ui: &Ui,
) -> Result<Status, Failure> {
    let row = store
        .run(id)
        .map_err(|e| refused(e.into()))?
        .ok_or_else(|| refused(Refusal::UnknownRun(id.to_string())))?;
    // The record loads on a thread of its own while the corrected file compiles: for a big
    // flow each takes a good part of the check. The record's error comes first, as it did
    // when it was read first.
    let (rec, compiled) = std::thread::scope(|scope| {
        let flow = row.flow.clone();
        let loading = scope.spawn(|| Recording::load_row(store, row));
        let compiled = super::run::compile_correction(file, &flow, ui);
        let rec = loading
            .join()
            .unwrap_or_else(|_| Err(Refusal::Spec("the run's record could not be read".into())));
        (rec, compiled)
    });
    let rec = rec.map_err(refused)?;
    let (_, _, spec) = compiled?;
    let mut given = rec.inputs.clone();
    given.retain(|k, _| spec.inputs.iter().any(|i| &i.name == k));
    let inputs = resolve_inputs(&spec, &given).map_err(Failure::usage)?;
    let plan = plan_fork(store, &rec, Arc::new(spec), inputs).map_err(refused)?;
    // As in `replay`: the process ends after this command, and the system frees the record.
    std::mem::forget(rec);
    if json {
        print_stdout(&format!("{}\n", plan_json(&plan)))?;
    } else {
        let mut text = String::new();
        for s in &plan.steps {
            let calls = match (s.reused_calls, s.live_calls) {
                (0, 0) => String::new(),
                (r, 0) => format!(" ({} reused)", super::ui::plural(r, "call")),
                (0, l) => format!(" ({} live)", super::ui::plural(l, "call")),
                (r, l) => format!(" ({r} calls reused, {l} live)"),
            };
            match &s.reason {
                None => text.push_str(&format!("  reuse  {}{calls}\n", s.step)),
                Some(why) => text.push_str(&format!("  live   {}{calls}: {why}\n", s.step)),
            }
        }
        print_stdout(&text)?;
    }
    match plan.first_divergence() {
        None => {
            ui.line(&format!(
                "a fork of run {id} with this flow reuses its whole history"
            ));
            Ok(Status::Success)
        }
        Some(first) => {
            ui.line(&format!(
                "a fork of run {id} with this flow diverges first at step `{}`: {}",
                first.step,
                first.reason.as_deref().unwrap_or_default()
            ));
            Ok(Status::Failed)
        }
    }
}

fn plan_json(plan: &ForkPlan) -> Value {
    json!({
        "parent": plan.parent,
        "compatible": plan.compatible(),
        "first_divergence": plan.first_divergence().map(|s| json!({ "step": s.step, "reason": s.reason })),
        "steps": plan.steps.iter().map(|s| json!({
            "step": s.step,
            "reuse": s.reused,
            "reason": s.reason,
            "reused_calls": s.reused_calls,
            "live_calls": s.live_calls,
        })).collect::<Vec<_>>(),
    })
}
