//! `reel fmt`: format files in place (atomically), check that they are formatted, or format stdin.

use std::path::PathBuf;

use reel_syntax::Diagnostic;

use super::sources::{self, Source, write_atomically};
use super::ui::{Ui, plural, print_stdout};
use super::{Failure, Status};

/// Format Reel files in the one canonical style.
///
/// Rewrites each file in place when its formatting changes; a file is replaced atomically (a
/// temporary file beside it is renamed over it), so an interrupted run loses nothing. A file
/// with syntax errors is left untouched and its errors are printed. `reel fmt -` reads stdin
/// and writes the formatted text to stdout, for editors.
///
/// Exit status: 0 when every file is formatted, 1 when a file has syntax errors or, with
/// `--check`, would be reformatted, 2 when a path cannot be read or a file cannot be written.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel fmt flows/\n  \
    reel fmt --check flows/\n  \
    reel fmt - < flow.reel")]
pub struct Args {
    /// Files or directories to format; a directory means every .reel file under it (hidden
    /// directories skipped). `-` alone formats stdin to stdout.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Write nothing: list the files that would be reformatted on stderr, and exit 1 if any would.
    #[arg(long)]
    check: bool,
}

/// What formatting did to one file.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Unchanged,
    Changed,
    SyntaxErrors,
    NotWritten,
}

/// Runs `reel fmt`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let stdin = args.paths.iter().any(|p| p.as_os_str() == "-");
    if stdin {
        if args.paths.len() > 1 {
            return Err(Failure::usage(
                "`-` (standard input) cannot be combined with other paths; format stdin alone",
            ));
        }
        return run_stdin(args.check, ui);
    }

    let files = sources::collect(&args.paths)?;
    let sources = sources::read_all(&files)?;
    let outcomes: Vec<Outcome> = sources
        .iter()
        .map(|source| format_file(source, args.check, ui))
        .collect();

    let count = |wanted: Outcome| outcomes.iter().filter(|o| **o == wanted).count();
    let (changed, unchanged) = (count(Outcome::Changed), count(Outcome::Unchanged));
    let (broken, unwritten) = (count(Outcome::SyntaxErrors), count(Outcome::NotWritten));
    let mut parts = vec![if args.check {
        format!("{} would be reformatted", plural(changed, "file"))
    } else {
        format!("{} reformatted", plural(changed, "file"))
    }];
    parts.push(format!("{} already formatted", plural(unchanged, "file")));
    if broken > 0 {
        parts.push(format!(
            "{} not formatted (syntax errors)",
            plural(broken, "file")
        ));
    }
    if unwritten > 0 {
        parts.push(format!(
            "{} could not be written",
            plural(unwritten, "file")
        ));
    }
    ui.line(&parts.join(", "));

    Ok(if unwritten > 0 {
        Status::Usage
    } else if broken > 0 || (args.check && changed > 0) {
        Status::Failed
    } else {
        Status::Success
    })
}

fn format_file(source: &Source, check: bool, ui: &Ui) -> Outcome {
    let formatted = match format_source(&source.text) {
        Ok(formatted) => formatted,
        Err(diags) => {
            ui.diagnostics(&source.display, &source.text, &diags);
            return Outcome::SyntaxErrors;
        }
    };
    if formatted == source.text {
        return Outcome::Unchanged;
    }
    if check {
        ui.line(&format!("would reformat {}", source.display));
        return Outcome::Changed;
    }
    let written = if source.bom {
        format!("{}{formatted}", sources::BOM)
    } else {
        formatted
    };
    match write_atomically(&source.path, written.as_bytes(), true) {
        Ok(()) => Outcome::Changed,
        Err(e) => {
            ui.error(&format!(
                "cannot write `{}`: {e}; the file is unchanged, check its permissions",
                source.display
            ));
            Outcome::NotWritten
        }
    }
}

fn run_stdin(check: bool, ui: &Ui) -> Result<Status, Failure> {
    let source = sources::read_stdin()?;
    match format_source(&source.text) {
        Err(diags) => {
            ui.diagnostics(&source.display, &source.text, &diags);
            Err(Failure::failed(
                "standard input has syntax errors and was not formatted; fix them and try again",
            ))
        }
        Ok(formatted) if check => {
            if formatted == source.text {
                Ok(Status::Success)
            } else {
                ui.line("would reformat <stdin>");
                Ok(Status::Failed)
            }
        }
        Ok(formatted) => {
            let bom = if source.bom { sources::BOM } else { "" };
            print_stdout(&format!("{bom}{formatted}"))?;
            Ok(Status::Success)
        }
    }
}

/// The formatted text, or the syntax diagnostics that stop formatting.
fn format_source(text: &str) -> Result<String, Vec<Diagnostic>> {
    reel_syntax::format::format(text).map_err(|e| e.diagnostics)
}
