//! `reel store`: the store itself: bring its schema up to date, or copy every run from one
//! store to another (SQLite to PostgreSQL and back), every value checked against its digest.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use reel_store::{
    PgImporter, PgStore, RunExport, SqliteImporter, SqliteStore, Store, StoreError,
    is_postgres_url, redact_url,
};
use serde_json::json;

use super::project::Project;
use super::ui::{Ui, print_stdout};
use super::{Failure, Status};

/// Look after the store: `migrate` brings its schema up to date, `copy` moves every run.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Apply the schema migrations the project's store lacks (every command that writes does
    /// so too, at start); a store newer than this reel is refused.
    ///
    /// Example: `REEL_STORE_URL=postgres://reel@db/reel reel store migrate`.
    Migrate,
    /// Copy every run, with its journal, signals, logs, values and FlowSpec, from one store to
    /// another: a store directory (SQLite) or a postgres:// URL on either side. Runs the
    /// target already has are left as they are. Every value is checked against its digest, and
    /// every copied run is read back from the target and compared.
    ///
    /// Exit status: 0 copied, 1 a copy that did not read back the same.
    ///
    /// Example: `reel store copy --from .reel --to postgres://reel@db/reel`.
    Copy {
        /// The store to copy from: a store directory, or a postgres:// URL.
        #[arg(long, value_name = "STORE")]
        from: String,
        /// The store to copy to (created if needed): a store directory, or a postgres:// URL.
        #[arg(long, value_name = "STORE")]
        to: String,
        /// Print a JSON object {runs, skipped, values, specs} instead of words.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `reel store`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    match args.command {
        Command::Migrate => {
            let project = Project::current()?;
            drop(project.open_store()?);
            ui.line(&format!(
                "the store at {} is up to date",
                project.store_shown()
            ));
            Ok(Status::Success)
        }
        Command::Copy { from, to, json } => copy(&from, &to, json, ui),
    }
}

/// A store as `copy` needs it: the common interface and moving whole runs.
enum Either {
    Sqlite(Arc<SqliteStore>),
    Pg(Arc<PgStore>),
}

impl Either {
    fn open(given: &str) -> Result<Either, Failure> {
        let clock = Arc::new(super::capabilities::SystemClock);
        let failed = |e: StoreError| Failure::failed(e.to_string());
        if is_postgres_url(given) {
            PgStore::open(given, clock)
                .map(|s| Either::Pg(Arc::new(s)))
                .map_err(failed)
        } else {
            SqliteStore::open(&PathBuf::from(given), clock)
                .map(|s| Either::Sqlite(Arc::new(s)))
                .map_err(failed)
        }
    }

    fn store(&self) -> &dyn Store {
        match self {
            Either::Sqlite(s) => s.as_ref(),
            Either::Pg(s) => s.as_ref(),
        }
    }

    fn export_runs(
        &self,
        ids: &[String],
        max_events: u64,
    ) -> Result<(Vec<RunExport>, usize), StoreError> {
        match self {
            Either::Sqlite(s) => s.export_runs(ids, max_events),
            Either::Pg(s) => s.export_runs(ids, max_events),
        }
    }

    fn importer(&self) -> Result<Importer, StoreError> {
        Ok(match self {
            Either::Sqlite(s) => Importer::Sqlite(s.importer()?),
            Either::Pg(s) => Importer::Pg(s.importer()?),
        })
    }
}

/// The connection a copy writes whole runs through, opened once.
enum Importer {
    Sqlite(SqliteImporter),
    Pg(PgImporter),
}

impl Importer {
    fn import_runs(&mut self, runs: &[RunExport]) -> Result<Vec<bool>, StoreError> {
        match self {
            Importer::Sqlite(i) => i.import_runs(runs),
            Importer::Pg(i) => i.import_runs(runs),
        }
    }

    fn existing(&mut self, ids: &[String]) -> Result<HashSet<String>, StoreError> {
        match self {
            Importer::Sqlite(i) => i.existing(ids),
            Importer::Pg(i) => i.existing(ids),
        }
    }
}

/// How many runs a copy writes to the target in one transaction: a commit (a sync of the
/// target's disk) for many runs rather than one each.
const RUNS_A_COMMIT: usize = 100;

/// At most how many journal events those runs hold, unless one run alone holds more: what a
/// copy keeps in memory at once (twice, with the runs read back) stays bounded however long
/// the runs are.
const EVENTS_A_COMMIT: u64 = 20_000;

/// What a copy has done so far.
#[derive(Default)]
struct Copied {
    runs: u64,
    skipped: u64,
    /// The values and FlowSpecs copied, each once however many runs name it.
    values: HashSet<String>,
    specs: HashSet<String>,
}

/// Copies `batch` (runs the target did not have when asked): their values and FlowSpecs,
/// then the runs in one transaction, each read back and compared.
fn copy_batch(
    source: &Either,
    target: &Either,
    importer: &mut Importer,
    batch: &[RunExport],
    to: &str,
    done: &mut Copied,
) -> Result<(), Failure> {
    let failed = |e: StoreError| Failure::failed(e.to_string());
    let mut digests: HashSet<String> = HashSet::new();
    let mut batch_specs = Vec::new();
    for run in batch {
        digests.extend(
            run.digests()
                .into_iter()
                .filter(|d| !done.values.contains(d)),
        );
        if !batch_specs.contains(&run.row.flow_digest) {
            batch_specs.push(run.row.flow_digest.clone());
        }
    }
    let digests: Vec<String> = digests.into_iter().collect();
    let names: Vec<&str> = digests.iter().map(String::as_str).collect();
    // Reading checks the bytes against the digest; storing computes it again.
    let read = source.store().get_values(&names).map_err(failed)?;
    for (digest, value) in digests.into_iter().zip(read) {
        let Some(value) = value else {
            continue;
        };
        // Stored under its digest as the source has it, even when short (a run recorded
        // before short values were named by themselves names it so).
        let text = reel_flowspec::canonical::canonical_json(&value);
        let stored = reel_flowspec::canonical::sha256_hex(text.as_bytes());
        if stored != digest {
            let run = batch.iter().find(|r| r.digests().contains(&digest));
            return Err(Failure::failed(format!(
                "value {digest} of run {} reads back as {stored}: not copied",
                run.map_or("?", |r| r.row.id.as_str())
            )));
        }
        target
            .store()
            .put_canonical(&digest, text)
            .map_err(failed)?;
        done.values.insert(digest);
    }
    for spec in &batch_specs {
        if let Some(json) = source.store().get_spec(spec).map_err(failed)? {
            // Blocking: once it returns, the values queued before it are committed too, so
            // no run commits naming a value that is not there yet.
            target.store().put_spec(spec, &json).map_err(failed)?;
            // And, the first time, its binary form, which a replay reads several times faster
            // than the JSON: else the copied runs' replays read the JSON until the flow runs
            // again.
            if done.specs.insert(spec.clone())
                && let Ok(parsed) = reel_flowspec::FlowSpec::from_json(&json)
                && parsed.digest == *spec
            {
                target.store().keep_spec_binary(&parsed).map_err(failed)?;
            }
        }
    }
    let written = importer.import_runs(batch).map_err(failed)?;
    let mut copied: Vec<&RunExport> = Vec::with_capacity(batch.len());
    for (run, written) in batch.iter().zip(written) {
        if written {
            copied.push(run);
        } else {
            done.skipped += 1;
        }
    }
    let ids: Vec<String> = copied.iter().map(|r| r.row.id.clone()).collect();
    let (back, _) = target.export_runs(&ids, u64::MAX).map_err(failed)?;
    for run in &copied {
        if back.iter().find(|b| b.row.id == run.row.id) != Some(*run) {
            return Err(Failure::failed(format!(
                "run {} did not read back the same from {}",
                run.row.id,
                shown(to)
            )));
        }
        done.runs += 1;
    }
    Ok(())
}

fn shown(given: &str) -> String {
    if is_postgres_url(given) {
        redact_url(given)
    } else {
        given.to_string()
    }
}

fn copy(from: &str, to: &str, as_json: bool, ui: &Ui) -> Result<Status, Failure> {
    if !is_postgres_url(from) && !PathBuf::from(from).join("reel.db").is_file() {
        return Err(Failure::usage(format!(
            "there is no Reel store at {from} (no reel.db there)"
        )));
    }
    let source = Either::open(from)?;
    let target = Either::open(to)?;
    let failed = |e: StoreError| Failure::failed(e.to_string());
    let mut importer = target.importer().map_err(failed)?;
    let mut done = Copied::default();
    let ids = source.store().find_runs("").map_err(failed)?;
    // A hundred runs at a time (fewer when their journals are long), each step a statement or
    // a few for them all: which the target already has, the others read from the source,
    // their values and FlowSpecs, the runs written in one transaction and read back.
    for chunk in ids.chunks(RUNS_A_COMMIT) {
        let there = importer.existing(chunk).map_err(failed)?;
        let wanted: Vec<String> = chunk
            .iter()
            .filter(|id| !there.contains(*id))
            .cloned()
            .collect();
        done.skipped += (chunk.len() - wanted.len()) as u64;
        let mut left = &wanted[..];
        while !left.is_empty() {
            let (batch, taken) = source.export_runs(left, EVENTS_A_COMMIT).map_err(failed)?;
            left = &left[taken..];
            copy_batch(&source, &target, &mut importer, &batch, to, &mut done)?;
        }
    }
    let Copied {
        runs,
        skipped,
        values,
        specs,
    } = done;
    if as_json {
        print_stdout(&format!(
            "{}\n",
            json!({ "runs": runs, "skipped": skipped, "values": values.len(), "specs": specs.len() })
        ))?;
    } else {
        ui.line(&format!(
            "copied {runs} runs ({} values, {} flows) from {} to {}; {skipped} \
             already there",
            values.len(),
            specs.len(),
            shown(from),
            shown(to)
        ));
    }
    Ok(Status::Success)
}
