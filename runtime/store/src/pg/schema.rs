//! The PostgreSQL schema and its migrations: numbered, applied at open in one transaction by
//! whichever process comes first (an advisory lock makes the others wait, then find it done).

use postgres::Client;

use super::conn::{Connector, SCHEMA, pg};
use crate::api::StoreError;

/// Migrations in order; the schema version is how many have been applied.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10];

/// The schema version this binary writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key migrations take ("reel" in ASCII), so two processes never race.
const MIGRATION_LOCK: i64 = 0x7265_656c;

// The same tables as the SQLite store's, column for column, so that one can be copied into the
// other. Run ids sort bytewise (COLLATE "C") whatever the database's locale. Every value lives
// in `vals`, however large: all workers, on any machine, read it from here. The partial indexes
// serve the two questions workers ask: which waiting runs are due, whose lease ran out.
const V1: &str = r#"
CREATE TABLE runs (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    flow TEXT NOT NULL,
    flow_digest TEXT NOT NULL,
    source TEXT,
    source_abs TEXT,
    cwd TEXT NOT NULL,
    parent TEXT,
    status TEXT NOT NULL CHECK (status IN
        ('running', 'waiting', 'succeeded', 'failed', 'canceled', 'quarantined')),
    created_at BIGINT NOT NULL,
    ended_at BIGINT,
    due_at BIGINT,
    waiting_on TEXT NOT NULL DEFAULT '[]',
    signal_pending BOOLEAN NOT NULL DEFAULT FALSE,
    lease_owner TEXT,
    lease_pid BIGINT,
    lease_host TEXT,
    lease_started BIGINT,
    lease_expires_at BIGINT,
    lease_token BIGINT NOT NULL DEFAULT 0,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    output_digest TEXT,
    error TEXT,
    keep_for_ms BIGINT,
    durability TEXT NOT NULL CHECK (durability IN ('fast', 'durable')),
    next_seq BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX runs_waiting_due ON runs (due_at) WHERE status = 'waiting';
CREATE INDEX runs_running_lease ON runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_source_flow_created ON runs (source_abs, flow, created_at);
CREATE INDEX runs_flow_created ON runs (flow, created_at);
CREATE INDEX runs_created ON runs (created_at);

CREATE TABLE journal (
    run TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    step TEXT,
    idx BIGINT,
    attempt BIGINT,
    data TEXT NOT NULL,
    PRIMARY KEY (run, seq)
);

CREATE TABLE vals (
    digest TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    json TEXT NOT NULL,
    size BIGINT NOT NULL
);

CREATE TABLE specs (
    digest TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    json TEXT NOT NULL
);

CREATE TABLE signals (
    run TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    name TEXT NOT NULL,
    payload_digest TEXT NOT NULL,
    sent_at BIGINT NOT NULL,
    consumed_by BIGINT,
    PRIMARY KEY (run, seq)
);

CREATE TABLE logs (
    id BIGSERIAL PRIMARY KEY,
    run TEXT COLLATE "C" NOT NULL,
    step TEXT NOT NULL,
    idx BIGINT,
    attempt BIGINT NOT NULL,
    at BIGINT NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX logs_run ON logs (run, id);
"#;

// The views `reel sql` documents, column for column the SQLite store's (`schema.rs`, where
// their promise is written), so that one query answers alike on both stores.
const V2: &str = r#"
CREATE VIEW reel_runs AS
SELECT id, flow, status, parent, source, created_at, ended_at,
       error::json ->> 'code' AS error_code,
       error::json ->> 'step' AS error_step,
       error::json ->> 'message' AS error_message
FROM runs;

CREATE VIEW reel_events AS
SELECT run, seq, at, kind, step, idx, attempt, data FROM journal;

CREATE VIEW reel_steps AS
SELECT g.run, g.step,
       COALESCE((SELECT CASE e.kind WHEN 'step_succeeded' THEN 'succeeded'
                                    WHEN 'step_failed' THEN 'failed' ELSE 'skipped' END
                 FROM journal e WHERE e.run = g.run AND e.seq = g.end_seq), 'started') AS status,
       g.attempts, g.first_at, g.last_at,
       (SELECT e.data::json #>> '{error,code}' FROM journal e
        WHERE e.run = g.run AND e.seq = g.end_seq AND e.kind = 'step_failed') AS error_code,
       (SELECT (s.value #>> '{span,line}')::bigint
        FROM runs r JOIN specs sp ON sp.digest = r.flow_digest
             CROSS JOIN LATERAL jsonb_array_elements(sp.json::jsonb -> 'steps') s(value)
        WHERE r.id = g.run AND s.value ->> 'id' = g.step) AS line
FROM (SELECT run, step,
             MAX(CASE WHEN kind IN ('step_succeeded', 'step_failed', 'step_skipped')
                      THEN seq END) AS end_seq,
             MAX(attempt) AS attempts, MIN(at) AS first_at, MAX(at) AS last_at
      FROM journal WHERE step IS NOT NULL GROUP BY run, step) g;

CREATE VIEW reel_calls AS
SELECT c.run, c.step, c.idx, c.attempt,
       (SELECT s.value ->> 'tool'
        FROM runs r JOIN specs sp ON sp.digest = r.flow_digest
             CROSS JOIN LATERAL jsonb_array_elements(sp.json::jsonb -> 'steps') s(value)
        WHERE r.id = c.run AND s.value ->> 'id' = c.step) AS tool,
       c.started_at, c.ended_at,
       CASE WHEN c.succeeded = 1 THEN 'succeeded' WHEN c.failed = 1 THEN 'failed'
            WHEN c.unknown = 1 THEN 'unknown' ELSE 'started' END AS outcome,
       c.error_code, c.idempotency_key
FROM (SELECT run, step, idx, attempt,
             MIN(CASE WHEN kind IN ('step_started', 'call_reused') THEN at END) AS started_at,
             MAX(CASE WHEN kind IN ('call_succeeded', 'effect_recorded', 'call_failed')
                      THEN at END) AS ended_at,
             MAX(CASE WHEN kind IN ('call_succeeded', 'effect_recorded') THEN 1 ELSE 0 END)
                 AS succeeded,
             MAX(CASE WHEN kind = 'call_failed' THEN 1 ELSE 0 END) AS failed,
             MAX(CASE WHEN kind = 'unknown_outcome' THEN 1 ELSE 0 END) AS unknown,
             MAX(CASE WHEN kind = 'call_failed' THEN data::json #>> '{error,code}' END)
                 AS error_code,
             MAX(CASE WHEN kind IN ('step_started', 'effect_recorded', 'unknown_outcome')
                      THEN data::json ->> 'key' END) AS idempotency_key
      FROM journal
      WHERE step IS NOT NULL AND attempt IS NOT NULL AND kind IN ('step_started',
            'call_reused', 'call_succeeded', 'effect_recorded', 'call_failed', 'unknown_outcome')
      GROUP BY run, step, idx, attempt) c;
"#;

// The claim's candidates among the parked runs, found through an index rather than by reading
// every waiting run: one with a cancel asked for or a signal pending (the due timers and the
// leases that ran out already have theirs, `runs_waiting_due` and `runs_running_lease`). Its
// entries change only when a signal or a cancel is marked or taken, or such a run is claimed.
// Without it a claim read every parked run, however few were due.
const V3: &str = r#"
CREATE INDEX IF NOT EXISTS runs_waiting_flagged ON runs (id)
    WHERE status = 'waiting' AND (cancel_requested OR signal_pending);
"#;

// A worker's look asks when the next waiting run's holder lets go of it (`claim::next_due`):
// through this index it reads the few waiting runs a live process holds, not every waiting run
// (without it PostgreSQL read the whole table at every look once thousands of runs were parked:
// 3.8 ms a look with 20,000 runs waiting for signals). Its entries are the waiting runs that
// have a holder, which are few and short-lived.
const V4: &str = r#"
CREATE INDEX IF NOT EXISTS runs_waiting_held ON runs (lease_expires_at)
    WHERE status = 'waiting' AND lease_owner IS NOT NULL;
"#;

// A run's row is updated a dozen times or more over a short run, most often only to move its
// journal's length (`next_seq`) with an append, which no index reads: with room left on each
// page such an update stays on the page and adds no index entry (a HOT update); a full page
// makes every one a new entry in each of the table's eight indexes. Pages written from now on
// keep 30 % free.
const V5: &str = r#"
ALTER TABLE runs SET (fillfactor = 70);
"#;

// Version 6 changes what rows mean, not the tables, as the SQLite store's version 4 does
// (`schema.rs`): a short value is named in the journal by itself and has no row in `vals`, and
// an older reel must refuse the database rather than take such a name for a missing value.
const V6: &str = "-- short values are named by themselves";

// A FlowSpec's binary form beside its JSON, as the SQLite store's version 5 keeps it
// (`schema.rs`): a cache that reads several times faster, in the layout `layout` names.
const V7: &str = r#"
CREATE TABLE IF NOT EXISTS spec_binaries (
    digest TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    layout INTEGER NOT NULL,
    bytes BYTEA NOT NULL
);
"#;

// The rows of calls a resume found with an unknown outcome, which `reel runs` shows for every
// run it lists (`read::unknown_outcome_rows`), as the SQLite store's version 6 indexes them:
// the listing reads those few rows in one statement, not every run's journal.
const V8: &str = r#"
CREATE INDEX IF NOT EXISTS journal_unknown_outcome ON journal (run, seq)
    WHERE kind = 'unknown_outcome';
"#;

// What a clean keeps of the references of the ended runs it read, as the SQLite store's
// version 7 keeps it (see there): a clean reads the runs it removes, the runs that have not
// ended and the ended runs no clean has read, not every journal of the store. It finds the
// runs that have not ended through the partial indexes of each such status (quarantined runs
// had none), which no other run's writes touch.
const V9: &str = r#"
ALTER TABLE runs ADD COLUMN IF NOT EXISTS refs_kept BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX IF NOT EXISTS runs_refs_unkept ON runs (id)
    WHERE NOT refs_kept AND status IN ('succeeded', 'failed', 'canceled');
CREATE INDEX IF NOT EXISTS runs_quarantined ON runs (id) WHERE status = 'quarantined';
CREATE TABLE IF NOT EXISTS refs (
    digest TEXT COLLATE "C" NOT NULL,
    run TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (digest, run)
);
CREATE INDEX IF NOT EXISTS refs_run ON refs (run);
"#;

// A worker's look names the processes on its host that hold running runs, whichever of them
// died is taken over at once (`claim::look`'s `here`): through this index it reads one entry a
// holder, skipping from each to the next, where it read every running run's row (two rows a
// run in flight, at every look of every worker).
const V10: &str = r#"
CREATE INDEX IF NOT EXISTS runs_running_holders
    ON runs (lease_host, lease_owner, lease_pid, lease_started)
    WHERE status = 'running' AND lease_owner IS NOT NULL;
"#;

fn newer_message(version: i64) -> String {
    format!(
        "the store has schema version {version}, newer than this reel knows \
         ({SCHEMA_VERSION}); upgrade reel to use it"
    )
}

fn open_error(connector: &Connector, message: String) -> StoreError {
    StoreError::Open {
        path: connector.shown().to_string(),
        message,
    }
}

/// The stored schema version (0 for a database without the store's schema).
fn stored_version(client: &mut Client) -> Result<i64, postgres::Error> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("{SCHEMA}.meta")],
        )?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client.query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])?;
    Ok(row.map_or(0, |r| r.get(0)))
}

/// Applies the migrations the database lacks, in one transaction under an advisory lock; a
/// database whose schema is newer than this binary's is refused, naming both versions.
pub(crate) fn migrate(client: &mut Client, connector: &Connector) -> Result<i64, StoreError> {
    // Nearly every opening finds the schema current: one statement in one round trip, where
    // the locked transaction below takes six. Anything else (no schema yet, another version,
    // an error) goes the locked way, which decides.
    if current_version(client) == Some(SCHEMA_VERSION) {
        return Ok(SCHEMA_VERSION);
    }
    // A session the server ended meanwhile (a restart) is `Unreachable`, which the opening
    // tries again on a new one; anything else is the store's and says so.
    let fail = |e: postgres::Error| match super::conn::ended(&e) {
        true => pg(&e),
        false => open_error(connector, super::conn::describe(&e)),
    };
    let mut tx = client.transaction().map_err(fail)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(fail)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
         CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (key TEXT PRIMARY KEY NOT NULL, value BIGINT);"
    ))
    .map_err(fail)?;
    let version: i64 = tx
        .query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])
        .map_err(fail)?
        .map_or(0, |r| r.get(0));
    if version > SCHEMA_VERSION {
        return Err(open_error(connector, newer_message(version)));
    }
    if version < SCHEMA_VERSION {
        for migration in MIGRATIONS
            .iter()
            .skip(usize::try_from(version).unwrap_or(0))
        {
            tx.batch_execute(migration).map_err(fail)?;
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&SCHEMA_VERSION],
        )
        .map_err(fail)?;
    }
    tx.commit().map_err(fail)?;
    Ok(SCHEMA_VERSION.max(version))
}

/// The stored schema version read in one round trip, or `None` when it cannot be (no schema).
fn current_version(client: &mut Client) -> Option<i64> {
    let sql = format!("SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'");
    client
        .simple_query(&sql)
        .ok()?
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
            _ => None,
        })
}

/// Checks, for a store opened read-only, that the schema is the one this binary reads.
pub(crate) fn check_version(client: &mut Client, connector: &Connector) -> Result<(), StoreError> {
    let version = match current_version(client) {
        Some(version) => version,
        None => stored_version(client).map_err(|e| open_error(connector, pg(&e).to_string()))?,
    };
    match version.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(open_error(connector, newer_message(version))),
        std::cmp::Ordering::Less if version == 0 => Err(open_error(
            connector,
            "there is no Reel store in this database yet".to_string(),
        )),
        std::cmp::Ordering::Less => Err(open_error(
            connector,
            format!(
                "the store has schema version {version}, older than this reel's \
                 {SCHEMA_VERSION}; run a reel command that writes (such as `reel runs`) to \
                 upgrade it"
            ),
        )),
    }
}
