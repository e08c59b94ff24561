//! `reel run`: check a flow, start a run of it and follow it to its end or until it parks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use reel_compiler::{RootDb, build_flow, file_diagnostics, flow_names};
use reel_runtime::{Refusal, RunOutcome, StartRequest, parse_input_value, start};
use reel_store::Durability;
use serde_json::{Map, Value};

use super::progress::StderrProgress;
use super::project::Project;
use super::runtime::{
    new_run_id, refused, report, rider_config, run_deps, stop_on_ctrl_c, tokio_runtime,
    where_it_starts,
};
use super::ui::{Ui, plural};
use super::{Failure, Status, flows, sources};

/// The write modes of `--durability`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Survives a crash of the process (the default).
    Fast,
    /// Survives a power cut; waits for each record before each effect.
    Durable,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Fast => Durability::Fast,
            DurabilityArg::Durable => Durability::Durable,
        }
    }
}

/// Start a run of a flow and follow it to its end, or until it parks on a timer or a signal.
///
/// The flow is checked first (errors: exit 1, nothing runs). Inputs are checked against the
/// flow's declarations and secrets are resolved (REEL_SECRET_NAME) before anything is recorded.
/// Progress goes to stderr; the output, as JSON, to stdout when the run succeeds.
///
/// Exit status: 0 succeeded or parked (waiting), 1 failed or canceled (or the file has errors),
/// 2 bad usage or input (unreadable file, unknown or ill-typed input, missing secret),
/// 3 quarantined.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel run hello.reel\n  \
    reel run hello.reel --input name=Ada --input times=2\n  \
    reel run triage.reel --flow triage --inputs inputs.json --json")]
pub struct Args {
    /// The .reel file that declares the flow.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The flow to run; needed when the file declares more than one.
    #[arg(long, value_name = "NAME")]
    flow: Option<String>,

    /// An input, NAME=VALUE: verbatim for a string input, else JSON when it parses as JSON.
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,

    /// A JSON file holding an object of inputs; `--input` overrides it.
    #[arg(long = "inputs", value_name = "FILE.json")]
    inputs_file: Option<PathBuf>,

    /// How long to keep the run after it ends (such as 2h or 30d; default from reel.toml, else 7d).
    #[arg(long, value_name = "DUR")]
    keep_for: Option<String>,

    /// How hard writes are pushed to disk (default from reel.toml, else fast).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,

    /// The seed of random() and of retry jitter (default: drawn at random).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Print {"run", "status", "output", "error"} on stdout.
    #[arg(long)]
    json: bool,
}

/// Checks the flow file `file` (diagnostics on stderr; errors: exit 1, nothing runs) and builds
/// its flow `flow` (needed when the file declares more than one): the source, the flow's name
/// and its FlowSpec. `reel run`, `reel fork` and `reel replay --flow` start here.
pub fn compile(
    file: &std::path::Path,
    flow: Option<&str>,
    ui: &Ui,
) -> Result<(sources::Source, String, reel_flowspec::FlowSpec), Failure> {
    compile_source(read_source(file)?, flow, ui)
}

/// Reads the one `.reel` file `file` names (what `reel run FILE` compiles).
fn read_source(file: &std::path::Path) -> Result<sources::Source, Failure> {
    let files = sources::collect(&[file.to_path_buf()])?;
    Ok(sources::read_all(&files)?.remove(0))
}

/// As [`compile`], for a source already read.
fn compile_source(
    source: sources::Source,
    flow: Option<&str>,
    ui: &Ui,
) -> Result<(sources::Source, String, reel_flowspec::FlowSpec), Failure> {
    compile_choosing(source, ui, |display, names| {
        flows::select(display, names, flow)
    })
}

/// As [`compile`] for a corrected version of a recorded run's flow `recorded`: that flow when
/// the file declares it, else the file's only flow (a renamed flow is still the correction).
pub fn compile_correction(
    file: &std::path::Path,
    recorded: &str,
    ui: &Ui,
) -> Result<(sources::Source, String, reel_flowspec::FlowSpec), Failure> {
    compile_choosing(read_source(file)?, ui, |display, names| {
        if names.iter().any(|n| n == recorded) {
            Ok(recorded.to_string())
        } else {
            flows::select(display, names, None)
        }
    })
}

fn compile_choosing(
    source: sources::Source,
    ui: &Ui,
    choose: impl FnOnce(&str, &[String]) -> Result<String, Failure>,
) -> Result<(sources::Source, String, reel_flowspec::FlowSpec), Failure> {
    let db = RootDb::default();
    let loaded = source.load(&db);
    let diags = file_diagnostics(&db, loaded).to_vec();
    ui.diagnostics(&source.display, &source.text, &diags);
    let errors = diags.iter().filter(|d| d.is_error()).count();
    if errors > 0 {
        return Err(Failure::failed(format!(
            "`{}` has {}; nothing was run",
            source.display,
            plural(errors, "error")
        )));
    }
    let names = flow_names(&db, loaded).to_vec();
    let name = choose(&source.display, &names)?;
    let spec = build_flow(&db, loaded, &name).ok_or_else(|| {
        Failure::failed(format!(
            "flow `{name}` could not be built; this is a bug in reel"
        ))
    })?;
    drop_aside(db);
    Ok((source, name, spec))
}

/// Drops the compiler's database on a thread of its own: freeing every query's memo took a
/// tenth of a 1,000-step `reel run` (a seventh of `reel build`'s), and nothing after the build
/// reads it.
fn drop_aside(db: RootDb) {
    // When no thread can be had, the closure, and the database with it, is dropped here.
    let _ = std::thread::Builder::new()
        .name("reel-drop-compiler".to_string())
        .spawn(move || drop(db));
}

/// Parses `--input NAME=VALUE` pairs against `spec`'s declared inputs.
pub fn parse_inputs(
    spec: &reel_flowspec::FlowSpec,
    pairs: &[String],
    into: &mut Map<String, Value>,
) -> Result<(), Failure> {
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(Failure::usage(format!(
                "`--input {pair}` needs the form NAME=VALUE"
            )));
        };
        into.insert(k.to_string(), parse_input_value(spec, k, v));
    }
    Ok(())
}

/// Runs `reel run`.
// edge: how long the command took (printed for people) and the run's seed when none is given:
// both are chosen here, at the entry point; the seed is handed to the engine, which records it.
#[allow(clippy::disallowed_methods)]
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let began = Instant::now();
    // The store is opened (on a fresh project, created and synced) while the file compiles:
    // neither needs the other, and on two cores it took a tenth of a 1,000-step `reel run`.
    // A file that cannot be read opens nothing.
    let source = read_source(&args.file)?;
    let opening = open_aside();
    let compiled = compile_source(source, args.flow.as_deref(), ui);
    // Joined even when the compile failed: the process never ends in the middle of making a
    // store.
    let opened = opening.join();
    let (source, name, spec) = compiled?;
    let mut given = Map::new();
    if let Some(path) = &args.inputs_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read `{}`: {e}", path.display())))?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => given.extend(m),
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "`{}` must hold one JSON object of inputs, such as {{\"name\": \"Ada\"}}",
                    path.display()
                )));
            }
            Err(e) => {
                return Err(Failure::usage(format!(
                    "`{}` is not JSON: {e}",
                    path.display()
                )));
            }
        }
    }
    parse_inputs(&spec, &args.inputs, &mut given)?;

    let (project, store) = opened?;
    let durability = project.durability(args.durability.map(Durability::from))?;
    let keep_for = project.keep_for(args.keep_for.as_deref())?;
    let (cwd, source_abs) = where_it_starts(&source.path)?;
    let store = store?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let request = StartRequest {
        run_id: new_run_id(),
        spec: Arc::new(spec),
        inputs: given,
        cwd,
        source: Some(source.display.clone()),
        source_abs,
        keep_for_ms: Some(keep_for),
        durability,
        seed,
        parent: None,
    };
    let header = format!("run {} of `{name}`", request.run_id);
    match start_live(store, request, Some(header), ui)? {
        Ok(outcome) => report(ui, &outcome, args.json, began.elapsed()),
        Err(refusal) => Err(refused(refusal)),
    }
}

/// The project, and its store opened for writing, on their way.
enum Opening {
    /// On a thread of its own.
    Aside(std::thread::JoinHandle<Opened>),
    /// Here, no thread being had.
    Here,
}

/// The project (or why it cannot be read) and, if it could, its store (or why not).
type Opened = Result<(Project, Result<Arc<dyn reel_store::Store>, Failure>), Failure>;

/// Finds the project and opens its store.
fn open_project() -> Opened {
    let project = Project::current()?;
    let store = project.open_store();
    Ok((project, store))
}

/// Starts opening the project's store on a thread of its own.
fn open_aside() -> Opening {
    std::thread::Builder::new()
        .name("reel-open-store".to_string())
        .spawn(open_project)
        .map_or(Opening::Here, Opening::Aside)
}

impl Opening {
    /// The project and its store, as [`open_project`] gives them.
    fn join(self) -> Opened {
        match self {
            Opening::Aside(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Opening::Here => open_project(),
        }
    }
}

/// Starts the run `request` asks for and follows it, progress on stderr, to its end or until
/// it parks: what `reel run` and `reel test --update` do. `header`, if any, names the run
/// once it is recorded.
pub fn start_live(
    store: Arc<dyn reel_store::Store>,
    request: StartRequest,
    header: Option<String>,
    ui: &Ui,
) -> Result<Result<RunOutcome, Refusal>, Failure> {
    let rt = tokio_runtime()?;
    let mut progress = StderrProgress::new(ui.colored(), Some(request.spec.steps.len()));
    if let Some(header) = header {
        progress = progress.announcing(header);
    }
    let progress = Arc::new(progress);
    let outcome = rt.block_on(async {
        let deps = run_deps(store, Some(progress.clone()));
        stop_on_ctrl_c(&deps);
        start(&deps, &rider_config(), request).await
    });
    progress.finish();
    Ok(outcome)
}
