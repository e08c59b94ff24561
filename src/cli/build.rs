//! `reel build`: check one file and write the FlowSpec of one of its flows as JSON.

use std::io::Write;
use std::path::PathBuf;

use reel_compiler::{RootDb, build_flow, file_diagnostics, flow_names};
use reel_flowspec::FlowSpec;
use reel_syntax::Diagnostic;

use super::sources::{self, write_atomically_with};
use super::ui::{Ui, plural, write_stdout};
use super::{Failure, Status, flows};

/// Compile a flow to its FlowSpec, the JSON the runtime executes.
///
/// Checks the file first: errors are printed on stderr and nothing is written (exit 1);
/// warnings are printed and the build goes on. A file with several flows needs `--flow NAME`.
///
/// Exit status: 0 when the FlowSpec was written, 1 when the file has errors, 2 for a file that
/// cannot be read, a file without flows, or a missing or unknown `--flow`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel build hello.reel\n  \
    reel build flows.reel --flow triage -o triage.flowspec.json")]
pub struct Args {
    /// The .reel file that declares the flow.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// The flow to build; needed when the file declares more than one.
    #[arg(long, value_name = "NAME")]
    flow: Option<String>,

    /// Write the FlowSpec to OUT (replaced atomically) instead of stdout; `-` means stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

/// Runs `reel build`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let files = sources::collect(std::slice::from_ref(&args.file))?;
    let source = sources::read_all(&files)?.remove(0);

    let db = RootDb::default();
    let file = source.load(&db);
    let diags: Vec<Diagnostic> = file_diagnostics(&db, file).to_vec();
    ui.diagnostics(&source.display, &source.text, &diags);
    let errors = diags.iter().filter(|d| d.is_error()).count();
    if errors > 0 {
        return Err(Failure::failed(format!(
            "could not build `{}` because of {}; fix them and build again",
            source.display,
            plural(errors, "error")
        )));
    }

    let names: Vec<String> = flow_names(&db, file).to_vec();
    let name = flows::select(&source.display, &names, args.flow.as_deref())?;
    let Some(spec) = build_flow(&db, file, &name) else {
        return Err(Failure::failed(format!(
            "flow `{name}` of `{}` could not be built although the checker found no errors; \
             this is a bug in reel, please report it with the file",
            source.display
        )));
    };
    // Written as it is made: a big flow's text would otherwise be held whole first.
    match &args.output {
        Some(out) if out.as_os_str() != "-" => {
            write_atomically_with(out, false, |out| write_spec(&spec, out)).map_err(|e| {
                Failure::usage(format!(
                    "cannot write `{}`: {e}; check that its directory exists and is writable",
                    out.display()
                ))
            })?;
        }
        _ => write_stdout(|out| write_spec(&spec, out))?,
    }
    // The process ends here: freeing every query's memo one by one took an eighth of a
    // 10,000-step build, and the system takes the memory back at once; the same for the spec.
    std::mem::forget(spec);
    std::mem::forget(db);
    Ok(Status::Success)
}

/// Writes `spec` as `reel build` prints it, with the spec's own writer: it leaves out what its
/// version leaves out (nested literals' types).
fn write_spec(spec: &FlowSpec, out: &mut impl Write) -> std::io::Result<()> {
    spec.write_json_pretty(&mut *out)?;
    out.write_all(b"\n")
}
