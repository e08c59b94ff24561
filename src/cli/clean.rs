//! `reel clean`: remove ended runs past their keep time, one ended run, or every ended run.

use reel_store::{CleanScope, Cleaned, StoreError};
use serde_json::json;

use super::project::{Project, resolve_run};
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// Remove ended runs (succeeded, failed, canceled) whose keep time has passed, with their
/// events, logs and signals, and the values, blob files and FlowSpecs no remaining run uses.
/// A run that has not ended (running, waiting, quarantined) is never removed.
///
/// Exit status: 0 done (also when nothing was due), 2 an unknown run or one that has not ended.
///
/// Examples: `reel clean`, `reel clean --dry-run`, `reel clean 01j9`, `reel clean --all --json`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Remove this run (its id or a unique prefix), whatever its keep time; it must have ended.
    #[arg(value_name = "RUN", conflicts_with = "all")]
    run: Option<String>,

    /// Remove every ended run, whatever its keep time.
    #[arg(long)]
    all: bool,

    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,

    /// Print a JSON object {dry_run, runs, events, values, blobs, specs, bytes, vacuumed}.
    #[arg(long)]
    json: bool,
}

/// Runs `reel clean`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let project = Project::current()?;
    if !project.store_exists() {
        return report(&args, &Cleaned::default(), ui);
    }
    let store = project.open_store()?;
    let scope = match &args.run {
        Some(given) => CleanScope::Run(resolve_run(store.as_ref(), given)?),
        None if args.all => CleanScope::AllEnded,
        None => CleanScope::Expired,
    };
    let cleaned = store.clean(&scope, args.dry_run).map_err(|e| match e {
        StoreError::NotEnded { .. } => Failure::usage(format!(
            "{e}; wait for it to end, or `reel cancel` it first"
        )),
        StoreError::NotFound(_) => Failure::usage(e.to_string()),
        e => Failure::failed(e.to_string()),
    })?;
    report(&args, &cleaned, ui)
}

fn report(args: &Args, cleaned: &Cleaned, ui: &Ui) -> Result<Status, Failure> {
    if args.json {
        let out = json!({
            "dry_run": args.dry_run,
            "runs": cleaned.runs,
            "events": cleaned.events,
            "values": cleaned.values,
            "blobs": cleaned.blobs,
            "specs": cleaned.specs,
            "bytes": cleaned.bytes,
            "runs_read": cleaned.runs_read,
            "vacuumed": cleaned.vacuumed,
        });
        print_stdout(&format!("{out}\n"))?;
        return Ok(Status::Success);
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for run in &cleaned.runs {
        ui.line(&format!("{verb} run {run}"));
    }
    ui.line(&summary(verb, cleaned));
    Ok(Status::Success)
}

/// One line of what went: `removed 2 runs (7 events), 3 values (1 blob file), 1 FlowSpec, 12.5 KiB`.
fn summary(verb: &str, c: &Cleaned) -> String {
    if c.runs.is_empty() {
        return "no ended run is due for removal".to_string();
    }
    let n = |count: u64, one: &str, many: &str| {
        format!("{count} {}", if count == 1 { one } else { many })
    };
    let mut line = format!(
        "{verb} {} ({}), {} ({}), {}, {}",
        n(c.runs.len() as u64, "run", "runs"),
        n(c.events, "event", "events"),
        n(c.values, "value", "values"),
        n(c.blobs, "blob file", "blob files"),
        n(c.specs, "FlowSpec", "FlowSpecs"),
        bytes(c.bytes)
    );
    if c.vacuumed {
        line.push_str("; the database file was compacted");
    }
    line
}

fn bytes(n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let f = n as f64;
    if n < 1024 {
        format!("{n} bytes")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", f / 1024.0)
    } else {
        format!("{:.1} MiB", f / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_in_words() {
        let c = Cleaned {
            runs: vec!["a".into(), "b".into()],
            events: 7,
            values: 1,
            blobs: 0,
            specs: 1,
            bytes: 12_800,
            runs_read: 3,
            vacuumed: true,
        };
        assert_eq!(
            summary("removed", &c),
            "removed 2 runs (7 events), 1 value (0 blob files), 1 FlowSpec, 12.5 KiB; \
             the database file was compacted"
        );
        assert_eq!(
            summary("would remove", &Cleaned::default()),
            "no ended run is due for removal"
        );
    }
}
