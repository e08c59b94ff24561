//! `reel fork`: start a new run from a recorded one with a corrected flow, reusing the
//! parent's recorded results while the calls match.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use reel_runtime::{StartRequest, fork};
use reel_store::Durability;
use serde_json::{Map, Value};

use super::progress::StderrProgress;
use super::project::{Project, resolve_run};
use super::run::{DurabilityArg, compile_correction, parse_inputs};
use super::runtime::{
    new_run_id, refused, report_with, rider_config, run_deps, stop_on_ctrl_c, tokio_runtime,
    where_it_starts,
};
use super::ui::Ui;
use super::{Failure, Status};

/// Start a new run from a recorded one with a corrected flow.
///
/// The fork keeps the parent's inputs (override them with `--input`), seed and environment
/// snapshot; it has its own id, retention and idempotency keys, and records its parent. While
/// a call matches the parent's history (same step, `foreach` index, inputs and tool), the
/// recorded result is reused and no tool is called; any other call runs live. Preview what a
/// fork reuses with `reel replay RUN --flow FILE`.
///
/// Exit status: as `reel run`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel replay 01j9z3 --flow fixed.reel\n  \
    reel fork 01j9z3 --flow fixed.reel\n  \
    reel fork 01j9z3 --flow fixed.reel --input name=Ada --json")]
pub struct Args {
    /// The run to fork (its id, or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// The corrected .reel file.
    #[arg(long, value_name = "FILE")]
    flow: PathBuf,

    /// An input that replaces the parent's, NAME=VALUE (as `reel run --input`).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,

    /// How long to keep the run after it ends (default from reel.toml, else 7d).
    #[arg(long, value_name = "DUR")]
    keep_for: Option<String>,

    /// How hard writes are pushed to disk (default from reel.toml, else fast).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,

    /// Print {"run", "status", "output", "error", "parent", "reused", "live"} on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `reel fork`.
// edge: how long the command took, printed for people; nothing recorded depends on it.
#[allow(clippy::disallowed_methods)]
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    let project = Project::current()?;
    let store = project.open_store()?;
    let parent = resolve_run(store.as_ref(), &args.run)?;
    let parent_row = store
        .run(&parent)
        .map_err(|e| Failure::failed(e.to_string()))?
        .ok_or_else(|| Failure::usage(format!("there is no run `{parent}`")))?;
    let (source, name, spec) = compile_correction(&args.flow, &parent_row.flow, ui)?;
    let mut overrides = Map::<String, Value>::new();
    parse_inputs(&spec, &args.inputs, &mut overrides)?;
    let durability = project.durability(args.durability.map(Durability::from))?;
    let keep_for = project.keep_for(args.keep_for.as_deref())?;
    let (cwd, source_abs) = where_it_starts(&source.path)?;
    let request = StartRequest {
        run_id: new_run_id(),
        spec: Arc::new(spec),
        inputs: overrides,
        cwd,
        source: Some(source.display.clone()),
        source_abs,
        keep_for_ms: Some(keep_for),
        durability,
        // The parent's seed replaces it.
        seed: 0,
        parent: Some(parent.clone()),
    };
    let header = format!("run {} of `{name}`, a fork of run {parent}", request.run_id);
    let progress = Arc::new(
        StderrProgress::new(ui.colored(), Some(request.spec.steps.len())).announcing(header),
    );
    let rt = tokio_runtime()?;
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        fork(&deps, &rider_config(), request).await
    });
    progress.finish();
    let forked = outcome.map_err(refused)?;
    ui.line(&format!(
        "{} reused from run {parent}, {} made live",
        super::ui::plural(forked.reused, "call"),
        forked.live
    ));
    let extra = args.json.then(|| {
        let mut m = Map::new();
        m.insert("parent".into(), Value::from(parent.clone()));
        m.insert("reused".into(), Value::from(forked.reused));
        m.insert("live".into(), Value::from(forked.live));
        m
    });
    report_with(ui, &forked.outcome, extra, began.elapsed())
}
