//! `reel test`: run flows against their cassettes, every tool call answered from the cassette,
//! in virtual time; `--update` records them again from live runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_journal::cassette::Cassette;
use reel_journal::journal::DETERMINISM_EPOCH;
use reel_runtime::{NoProgress, ReplayReport, StartRequest};
use reel_store::RunStatus;
use serde_json::{Value, json};

use super::cassette::{absolute, read, relative_to};
use super::project::Project;
use super::replay::{divergence_json, divergence_text, test_faults};
use super::runtime::{new_run_id, where_it_starts};
use super::sources::{FileKind, collect_kind};
use super::ui::{Ui, plural, print_stdout};
use super::{Failure, Status};

/// Cassettes: `NAME.cassette.json`.
const CASSETTES: FileKind = FileKind {
    name: ".cassette.json",
    holds: "cassettes (`reel cassette RUN -o NAME.cassette.json` exports one)",
    matches: |p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".cassette.json"))
    },
};

/// Run flows against their cassettes, in virtual time.
///
/// Each cassette names its flow (the file, relative to the cassette's folder, and the flow's
/// name). The flow runs with the cassette's inputs, every tool call answered from the cassette
/// when the step, `foreach` index, attempt and inputs are the recorded ones, every timer and
/// signal at its recorded time: a ten-day `sleep` passes at once, no tool runs and nothing is
/// stored. A cassette fails when the flow makes a call it does not hold (named with its line,
/// its inputs and the nearest recorded call), when a recorded call is never made, or when the
/// run ends otherwise (a diff of the outputs). One line per cassette on stdout, then the
/// failures, then `N passed, N failed`.
///
/// `--update` records each cassette again from a live run of its flow with its inputs (tools
/// are called, the run is stored): for a deliberate change.
///
/// Exit status: 0 every cassette passed (or was updated), 1 one failed, 2 bad usage (no
/// cassettes where given).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel test\n  \
    reel test tests/charge.cassette.json --json\n  \
    reel test tests/ --update")]
pub struct Args {
    /// Cassettes, or folders searched for `*.cassette.json` (default: the current folder).
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Record each cassette again from a live run of its flow.
    #[arg(long)]
    update: bool,

    /// Print {"passed", "failed", "cassettes": [...]} on stdout.
    #[arg(long)]
    json: bool,
}

/// One cassette's verdict.
struct Verdict {
    path: PathBuf,
    flow: Option<String>,
    /// The determinism epoch the cassette was recorded with.
    epoch: Option<u32>,
    /// The replay's report, when it ran.
    report: Option<ReplayReport>,
    /// Why it failed before or instead of a replay, or what an update did.
    note: Option<String>,
    passed: bool,
}

/// Runs `reel test`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let files: Vec<PathBuf> = collect_kind(&paths, &CASSETTES)?
        .into_iter()
        // `./x.cassette.json`, found below the default `.`, is shown as `x.cassette.json`.
        .map(|p| p.strip_prefix(".").map(Path::to_path_buf).unwrap_or(p))
        .collect();
    let mut verdicts = Vec::new();
    for path in files {
        let verdict = if args.update {
            update(&path, ui)
        } else {
            test(&path, ui)
        };
        if !args.json {
            let word = match (verdict.passed, args.update) {
                (true, true) => "updated",
                (true, false) => "ok",
                (false, _) => "FAILED",
            };
            print_stdout(&format!("test {} ... {word}\n", path.display()))?;
        }
        verdicts.push(verdict);
    }
    let failed = verdicts.iter().filter(|v| !v.passed).count();
    let passed = verdicts.len() - failed;
    if args.json {
        let list: Vec<Value> = verdicts.iter().map(verdict_json).collect();
        print_stdout(&format!(
            "{}\n",
            json!({ "passed": passed, "failed": failed, "cassettes": list })
        ))?;
    } else {
        let mut text = String::new();
        for v in verdicts.iter().filter(|v| !v.passed) {
            text.push_str(&format!(
                "\n---- {} ----\n{}\n",
                v.path.display(),
                failure_text(v)
            ));
        }
        text.push_str(&format!("\n{passed} passed, {failed} failed\n"));
        print_stdout(&text)?;
    }
    let _ = ui;
    Ok(if failed == 0 {
        Status::Success
    } else {
        Status::Failed
    })
}

fn failure_text(v: &Verdict) -> String {
    match (&v.report, &v.note) {
        (Some(r), _) => match &r.divergence {
            Some(d) => {
                let flow = v.flow.as_deref().unwrap_or("?");
                let head = match &d.step {
                    Some(_) => format!("flow `{flow}` differs from its cassette"),
                    None => format!("flow `{flow}` ends otherwise than its cassette"),
                };
                let mut text = divergence_text(&head, "now", d);
                if let Some(epoch) = v.epoch.filter(|e| *e != DETERMINISM_EPOCH) {
                    text.push_str(&format!(
                        "\n  note: the cassette was recorded by a reel of determinism epoch {epoch}, this one is epoch {DETERMINISM_EPOCH}: what the engine computes changed; if the new result is right, record it again with `reel test --update`"
                    ));
                }
                text
            }
            None => "it passed".into(),
        },
        (None, Some(note)) => note.clone(),
        (None, None) => "it failed".into(),
    }
}

fn verdict_json(v: &Verdict) -> Value {
    json!({
        "cassette": v.path.display().to_string(),
        "flow": v.flow,
        "passed": v.passed,
        "status": v.report.as_ref().map(|r| r.status.clone()),
        "calls": v.report.as_ref().map(|r| r.calls),
        "divergence": v.report.as_ref().and_then(|r| r.divergence.as_ref()).map(divergence_json),
        "error": v.note,
    })
}

fn failed(path: &Path, flow: Option<String>, note: String) -> Verdict {
    Verdict {
        path: path.to_path_buf(),
        flow,
        epoch: None,
        report: None,
        note: Some(note),
        passed: false,
    }
}

/// The cassette at `path` and the flow it names, built.
/// Why a cassette could not be loaded: the flow it names (when it could be read) and what to
/// fix.
type LoadError = (Option<String>, String);

fn load(path: &Path, ui: &Ui) -> Result<(Cassette, PathBuf, reel_flowspec::FlowSpec), LoadError> {
    let cassette = read(path).map_err(|e| (None, e))?;
    let flow = Some(cassette.flow.clone());
    let Some(source) = cassette.source.clone() else {
        return Err((
            flow,
            "the cassette names no flow file: add `\"source\": \"PATH.reel\"` (relative to the cassette's folder)".into(),
        ));
    };
    let file = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() && folder != Path::new(".") => {
            folder.join(&source)
        }
        _ => PathBuf::from(&source),
    };
    if !file.is_file() {
        return Err((
            flow,
            format!(
                "its flow file `{}` is not there (the cassette's `source` is relative to its folder)",
                file.display()
            ),
        ));
    }
    let (_, name, spec) = super::run::compile(&file, Some(&cassette.flow), ui)
        .map_err(|e| (flow.clone(), e.message()))?;
    debug_assert_eq!(name, cassette.flow);
    Ok((cassette, file, spec))
}

fn test(path: &Path, ui: &Ui) -> Verdict {
    let (cassette, _, spec) = match load(path, ui) {
        Ok(loaded) => loaded,
        Err((flow, why)) => return failed(path, flow, why),
    };
    let flow = Some(cassette.flow.clone());
    match reel_runtime::cassette::test(&cassette, Arc::new(spec), &test_faults(), &NoProgress) {
        Ok(report) => Verdict {
            path: path.to_path_buf(),
            flow,
            epoch: cassette.epoch,
            passed: report.divergence.is_none(),
            report: Some(report),
            note: None,
        },
        Err(e) => failed(path, flow, e.to_string()),
    }
}

/// Records the cassette at `path` again from a live run of its flow with its inputs.
fn update(path: &Path, ui: &Ui) -> Verdict {
    let (cassette, file, spec) = match load(path, ui) {
        Ok(loaded) => loaded,
        Err((flow, why)) => return failed(path, flow, why),
    };
    let flow = Some(cassette.flow.clone());
    match record(path, &cassette, &file, spec, ui) {
        Ok(note) => Verdict {
            path: path.to_path_buf(),
            flow,
            epoch: None,
            report: None,
            note: Some(note),
            passed: true,
        },
        Err(e) => failed(path, flow, e),
    }
}

fn record(
    path: &Path,
    old: &Cassette,
    file: &Path,
    spec: reel_flowspec::FlowSpec,
    ui: &Ui,
) -> Result<String, String> {
    let project = Project::current().map_err(|e| e.message())?;
    let store = project.open_store().map_err(|e| e.message())?;
    let (cwd, source_abs) = where_it_starts(file).map_err(|e| e.message())?;
    let mut inputs = old.inputs.clone();
    inputs.retain(|k, _| spec.inputs.iter().any(|i| &i.name == k));
    let request = StartRequest {
        run_id: new_run_id(),
        spec: Arc::new(spec),
        inputs,
        cwd,
        source: Some(file.display().to_string()),
        source_abs,
        keep_for_ms: Some(project.keep_for(None).map_err(|e| e.message())?),
        durability: project.durability(None).map_err(|e| e.message())?,
        seed: old.seed,
        parent: None,
    };
    let outcome = super::run::start_live(store.clone(), request, None, ui)
        .map_err(|e| e.message())?
        .map_err(|r| super::runtime::refused(r).message())?;
    if outcome.status == RunStatus::Waiting {
        return Err(format!(
            "the live run {} is waiting (a timer or a signal): finish it (`reel signal`, `reel worker`) and export it with `reel cassette {} -o {}`",
            outcome.run,
            outcome.run,
            path.display()
        ));
    }
    let mut fresh = reel_runtime::cassette::export(store.as_ref(), &outcome.run)
        .map_err(|r| super::runtime::refused(r).message())?;
    let folder = absolute(path.parent().unwrap_or(Path::new(""))).map_err(|e| e.message())?;
    fresh.source = fresh
        .source
        .as_deref()
        .map(|src| relative_to(Path::new(src), &folder));
    super::sources::write_atomically(path, fresh.to_text().as_bytes(), true)
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    Ok(format!(
        "recorded again from run {} ({}, {})",
        outcome.run,
        plural(fresh.calls.len(), "call"),
        outcome.status.as_str()
    ))
}
