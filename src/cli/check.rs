//! `reel check`: parse and check files, print their diagnostics for people, as JSON or as SARIF.

use std::path::PathBuf;

use clap::ValueEnum;
use reel_compiler::render::{to_json, to_sarif};
use reel_compiler::{RootDb, file_diagnostics};
use reel_syntax::Diagnostic;

use super::sources::{self, Source};
use super::ui::{Ui, plural, print_stdout};
use super::{Failure, Status};

/// Check Reel files for errors and warnings.
///
/// Parses each file and checks names, types, the step graph and the secret rule, then prints
/// every diagnostic with an excerpt of the source on stderr, and a summary line.
///
/// Exit status: 0 when there are no errors (warnings allowed, unless `--deny warnings`), 1 when
/// there are errors, 2 when a path cannot be used (missing, unreadable, not a .reel file, or a
/// directory without .reel files).
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel check flow.reel\n  \
    reel check flows/ --deny warnings\n  \
    reel check flows/ --format sarif > reel.sarif")]
pub struct Args {
    /// Files or directories to check; a directory means every .reel file under it (hidden
    /// directories skipped).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Where and how to print diagnostics: `human` on stderr, `json` (an array) or `sarif`
    /// (a SARIF 2.1.0 log) on stdout.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Format::Human)]
    format: Format,

    /// Make diagnostics of this kind fail the check (exit 1); `--deny warnings` fails on any warning.
    #[arg(long, value_enum, value_name = "KIND")]
    deny: Vec<Deny>,
}

/// The output formats of `reel check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Rendered with source excerpts on stderr.
    Human,
    /// One JSON array of all diagnostics on stdout.
    Json,
    /// One SARIF 2.1.0 log on stdout.
    Sarif,
}

/// What `--deny` can make fatal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Deny {
    /// Every warning.
    Warnings,
}

/// Runs `reel check`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let files = sources::collect(&args.paths)?;
    let sources = sources::read_all(&files)?;

    let db = RootDb::default();
    let checked: Vec<(&Source, Vec<Diagnostic>)> = sources
        .iter()
        .map(|source| {
            let file = source.load(&db);
            let diags = file_diagnostics(&db, file).to_vec();
            (source, diags)
        })
        .collect();

    match args.format {
        Format::Human => {
            for (source, diags) in &checked {
                ui.diagnostics(&source.display, &source.text, diags);
            }
        }
        Format::Json => {
            let all: Vec<serde_json::Value> = checked
                .iter()
                .flat_map(|(source, diags)| to_json(&source.display, &source.text, diags))
                .collect();
            print_json(&serde_json::Value::Array(all))?;
        }
        Format::Sarif => {
            let files: Vec<(&str, &str, &[Diagnostic])> = checked
                .iter()
                .map(|(source, diags)| {
                    (
                        source.display.as_str(),
                        source.text.as_str(),
                        diags.as_slice(),
                    )
                })
                .collect();
            print_json(&to_sarif(&files))?;
        }
    }

    let errors = checked
        .iter()
        .flat_map(|(_, diags)| diags)
        .filter(|d| d.is_error())
        .count();
    let warnings = checked.iter().map(|(_, diags)| diags.len()).sum::<usize>() - errors;
    let deny_warnings = args.deny.contains(&Deny::Warnings);
    let mut summary = format!(
        "checked {}: {}",
        plural(sources.len(), "file"),
        ui.counts(errors, warnings)
    );
    if deny_warnings && warnings > 0 {
        summary.push_str(" (warnings denied)");
    }
    ui.line(&summary);
    Ok(status(errors, warnings, deny_warnings))
}

fn print_json(value: &serde_json::Value) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::failed(format!("cannot encode the diagnostics as JSON: {e}")))?;
    text.push('\n');
    print_stdout(&text)
}

/// The exit status for these counts: errors fail, and warnings too when denied.
fn status(errors: usize, warnings: usize, deny_warnings: bool) -> Status {
    if errors > 0 || (deny_warnings && warnings > 0) {
        Status::Failed
    } else {
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_fail_and_warnings_only_when_denied() {
        assert_eq!(status(0, 0, false), Status::Success);
        assert_eq!(status(0, 0, true), Status::Success);
        assert_eq!(status(0, 2, false), Status::Success);
        assert_eq!(status(0, 2, true), Status::Failed);
        assert_eq!(status(1, 0, false), Status::Failed);
    }
}
