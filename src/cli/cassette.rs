//! `reel cassette`: export a recorded run as a cassette, the file `reel test` runs its flow
//! against.

use std::path::{Path, PathBuf};

use reel_journal::cassette::Cassette;

use super::project::{Project, resolve_run};
use super::runtime::refused;
use super::sources::write_atomically;
use super::ui::{Ui, plural, print_stdout};
use super::{Failure, Status};

/// Export a recorded run as a cassette: its inputs, every tool call with its result, the timers
/// and signals it waited for, and how it ended.
///
/// The file is pretty JSON with sorted keys, one call per block, in the flow's step order, so
/// that it diffs well in review; large values are kept apart at its end, by digest. Secrets are
/// never in it (the journal holds them as `{secret:NAME}`). `reel test` runs the flow against
/// it in virtual time. Its format is described in docs/cassettes.md, with a JSON Schema.
///
/// Exit status: 0 written, 1 the run's record cannot be read, 2 bad usage (unknown run).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel cassette 01j9z3 -o tests/charge.cassette.json\n  \
    reel cassette 01j9z3 > charge.cassette.json")]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// Where to write it (`NAME.cassette.json`, so that `reel test` finds it); default stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `reel cassette`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let mut cassette = reel_runtime::cassette::export(store.as_ref(), &id).map_err(refused)?;
    // The flow is named relative to the cassette's folder, so the pair can move together.
    let folder = match &args.output {
        Some(file) => absolute(file.parent().unwrap_or(Path::new("")))?,
        None => absolute(Path::new(""))?,
    };
    cassette.source = cassette
        .source
        .as_deref()
        .map(|src| relative_to(Path::new(src), &folder));
    let text = cassette.to_text();
    match &args.output {
        None => print_stdout(&text)?,
        Some(file) => {
            write_atomically(file, text.as_bytes(), true)
                .map_err(|e| Failure::usage(format!("cannot write `{}`: {e}", file.display())))?;
            ui.line(&format!(
                "wrote {} ({}) from run {id}",
                file.display(),
                plural(cassette.calls.len(), "call")
            ));
        }
    }
    Ok(Status::Success)
}

/// `path` made absolute against the current directory.
pub fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    std::path::absolute(path)
        .map_err(|e| Failure::usage(format!("cannot resolve `{}`: {e}", path.display())))
}

/// `path` as seen from `folder`, with `/` between its parts (a cassette moves between machines).
pub fn relative_to(path: &Path, folder: &Path) -> String {
    let rel = pathdiff::diff_paths(path, folder).unwrap_or_else(|| path.to_path_buf());
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Reads the cassette at `path`.
pub fn read(path: &Path) -> Result<Cassette, String> {
    let text = std::fs::read_to_string(path).map_err(|e| super::sources::cannot_read(path, &e))?;
    Cassette::parse(&text).map_err(|e| format!("`{}` is not a cassette: {e}", path.display()))
}
