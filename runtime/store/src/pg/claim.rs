//! Claiming due runs on PostgreSQL, for many workers on many machines, and the clock leases
//! are judged by.
//!
//! Workers claim in one statement that picks the due runs with `FOR UPDATE SKIP LOCKED` and
//! takes their leases: a row another worker is claiming at that moment is passed over rather
//! than waited for, and a row claimed and committed by another is seen as held. So each due
//! run goes to exactly one worker, and workers never wait for each other.
//!
//! Leases are judged by the database server's clock when the store's clock tells the real time
//! ([`crate::Clock::is_real_time`]): every holder's expiry is written and compared in the one
//! clock they all share, so a machine whose clock runs ahead cannot take a run over early, nor
//! one whose clock lags hold it past its lease. A clock of its own (a test's) is followed
//! instead, as the SQLite store always does.

use std::collections::{HashMap, HashSet};

use postgres::Client;

use super::conn::pg;
use super::read::{
    PageRow, Prepared, RUN_COLUMNS, event_from, hand_missing, hand_rows, owner_of, run_from,
    signal_from,
};
use crate::api::{DueClaim, Flow, Owner, ReadWithClaim, RunStatus, StoreError};
use crate::clock::Clock;

/// The database server's clock in ms since the epoch: `clock_timestamp()` rather than `now()`,
/// since a batch's transaction may have waited on locks since it began.
pub(crate) const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// The time leases are judged by, as an SQL parameter: `None` (SQL NULL) for the database's
/// clock, written `COALESCE($n::bigint, DB_NOW_MS)`, or the store's own clock's time.
pub(crate) fn lease_now(clock: &dyn Clock) -> Option<i64> {
    (!clock.is_real_time()).then(|| clock.now_ms())
}

/// `COALESCE($n::bigint, <the database's clock>)`: the lease time of parameter `n`.
pub(crate) fn lease_time(n: usize) -> String {
    format!("COALESCE(${n}::bigint, {DB_NOW_MS})")
}

/// The condition of a run (as `r`) a worker should take up, lease aside, with the timers'
/// time as parameter `n`: waiting with a due timer, a cancel asked for or a signal it waits
/// on, or running (its holder gone, which the caller judges).
fn due(n: usize) -> String {
    format!(
        "((r.status = 'waiting'
            AND (r.due_at <= ${n} OR r.cancel_requested
                 OR (r.signal_pending AND EXISTS (
                     SELECT 1 FROM signals s
                     WHERE s.run = r.id AND s.consumed_by IS NULL
                       AND jsonb_exists(r.waiting_on::jsonb, s.name)))))
          OR r.status = 'running')"
    )
}

/// The ids of the runs a claim may take (a superset: the claim checks [`due`] and the lease on
/// each), each part read through an index of the schema, so that a claim costs what is due,
/// not what is parked or what ended long ago: waiting runs whose timer is due (parameter 3 is
/// the timers' time), waiting runs with a cancel asked for or a signal pending, and running
/// runs whose lease ran out or that nobody holds. A lease's owner and expiry are set and
/// cleared together (a claim, a release, a new run's row), so a running run nobody holds has
/// no expiry. The lease time is read as a scalar (`SELECT now FROM clock`), which the generic
/// plan a prepared look keeps can bound the index by; joined with `clock` and one `OR` for
/// both, it read every running run's entry and row at every look.
///
/// With `$11` (see [`look`]'s `mine_too`), running runs the claimer itself holds too, found
/// through `runs_running_holders` by its host and id (a parameter false leaves the branch
/// unscanned).
const CANDIDATES: &str = "SELECT id FROM runs WHERE status = 'waiting' AND due_at <= $3
         UNION ALL
         SELECT id FROM runs WHERE status = 'waiting' AND (cancel_requested OR signal_pending)
         UNION ALL
         SELECT id FROM runs WHERE status = 'running' AND lease_expires_at IS NULL
         UNION ALL
         SELECT id FROM runs WHERE status = 'running'
           AND lease_expires_at <= (SELECT now FROM clock)
         UNION ALL
         SELECT id FROM runs
         WHERE $11 AND status = 'running' AND lease_host = $10 AND lease_owner = $5";

/// The first holder of a running run on this host (`$10`), in the order of their ids, after
/// what the caller adds: with the holder `h` below it, the next one. A look names the holders one
/// index entry each this way (a loose index scan of `runs_running_holders`) rather than reading
/// every running run to find a few processes; the running runs of a holder the worker drives
/// (`skip`) or just claimed name it too, which only costs it a look at whether it is alive
/// (the runs [`dead_runs`] takes leave those out).
const NEXT_HOLDER: &str = "SELECT r.lease_owner, r.lease_pid, r.lease_started FROM runs r
    WHERE r.status = 'running' AND r.lease_owner IS NOT NULL AND r.lease_host = $10";

/// What a look saw besides what it claimed.
pub(crate) struct Seen {
    /// The next due time after the claim, as [`next_due`] would tell it.
    pub(crate) next_due: Option<i64>,
    /// The processes on this host that hold due runs the look did not claim, other than those
    /// in its `skip`: whichever of them is dead, its runs are claimed one by one (see
    /// [`dead_runs`]). The OS is asked once per holder, not once per run.
    pub(crate) holders_here: Vec<Owner>,
}

/// A worker's look in one statement: claims up to `limit` due runs whose lease has run out (or
/// that nobody holds), other than those in `skip`, committed when it returns; and reads what
/// [`next_due`] would read after it, and who on this host holds due runs. Leases and timers
/// are judged on `clock` as [`next_due`] judges them; timers are due up to `timers_now`.
///
/// The statement's reads see the runs as they were before its claim, so they leave out the
/// runs it picked and count the leases it gives them. A run another claimer is taking at that
/// moment still reads as due: the worker then looks again soon, as after a look that found
/// something due it did not take.
///
/// `mine_too`: runs `owner` holds itself (and does not skip) are claimed again as well, as
/// though their lease had run out. A look whose session ended before its answer came may have
/// claimed runs its worker never heard of; they are the worker's, and nobody else's until
/// their lease runs out, so the worker's next look takes them up at once.
#[allow(clippy::too_many_arguments)]
pub(crate) fn look(
    client: &mut Client,
    clock: Option<&dyn Clock>,
    timers_now: i64,
    owner: &Owner,
    lease_ms: u64,
    limit: usize,
    skip: &HashSet<String>,
    mine_too: bool,
) -> Result<(Vec<DueClaim>, Seen), StoreError> {
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let run_columns = RUN_COLUMNS.split(',').count();
    // The candidates come from the indexes of what can be due (see `CANDIDATES`); the full
    // condition is then checked on each, so they need only include every run it holds for.
    let sql = format!(
        "WITH RECURSIVE clock AS (SELECT {now} AS now),
         picked AS (
            SELECT r.id, r.status FROM runs r, clock
            WHERE r.id IN ({candidates})
              AND r.id <> ALL($2::text[])
              AND (r.lease_owner IS NULL OR r.lease_expires_at IS NULL
                   OR r.lease_expires_at <= clock.now OR ($11 AND r.lease_owner = $5))
              AND {due}
            ORDER BY r.status = 'running', r.due_at IS NULL, r.due_at, r.created_at
            LIMIT $4
            FOR UPDATE OF r SKIP LOCKED),
         claimed AS (
            UPDATE runs SET lease_owner = $5, lease_pid = $6, lease_host = $7,
               lease_started = $8, lease_expires_at = clock.now + $9,
               lease_token = runs.lease_token + 1,
               status = CASE runs.status WHEN 'waiting' THEN 'running' ELSE runs.status END
            FROM picked, clock
            WHERE runs.id = picked.id
            RETURNING {columns}, picked.status AS was),
         seen AS (SELECT {next_due} FROM clock),
         holders(owner, pid, started) AS (
            ({next_holder} {holder_order})
            UNION ALL
            SELECT n.* FROM holders h, LATERAL (
               {next_holder}
                 AND (r.lease_owner, r.lease_pid, r.lease_started) > (h.owner, h.pid, h.started)
               {holder_order}) n),
         here AS (
            SELECT array_agg(h.lease_owner) AS owners, array_agg(h.lease_pid) AS pids,
                   array_agg(h.lease_host) AS hosts, array_agg(h.lease_started) AS starteds
            FROM (SELECT owner AS lease_owner, pid AS lease_pid, $10 AS lease_host,
                         started AS lease_started
                  FROM holders
                  UNION
                  SELECT r.lease_owner, r.lease_pid, r.lease_host, r.lease_started
                  FROM runs r
                  WHERE r.status = 'waiting' AND r.lease_owner IS NOT NULL
                    AND r.lease_host = $10 AND r.id <> ALL($2::text[])
                    AND r.id NOT IN (SELECT id FROM picked) AND {due}) h)
         SELECT claimed.*, seen.*, here.* FROM seen CROSS JOIN here LEFT JOIN claimed ON TRUE",
        now = lease_time(1),
        due = due(3),
        candidates = CANDIDATES,
        columns = RUN_COLUMNS
            .split(',')
            .map(|c| format!("runs.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", "),
        next_due = next_due_columns(Some(9)),
        next_holder = NEXT_HOLDER,
        holder_order = "ORDER BY r.lease_owner, r.lease_pid, r.lease_started LIMIT 1",
    );
    let rows = client
        .query_prepared(
            &sql,
            &[
                &clock.and_then(lease_now),
                &skip,
                &timers_now,
                &i64::try_from(limit).unwrap_or(i64::MAX),
                &owner.id,
                &i64::from(owner.pid),
                &owner.host,
                &i64::try_from(owner.started).unwrap_or(i64::MAX),
                &i64::try_from(lease_ms).unwrap_or(i64::MAX),
                &Owner::this_process().host,
                &mine_too,
            ],
        )
        .map_err(|e| pg(&e))?;
    // Every row carries what the look saw, after the claimed run's columns (NULL when it
    // claimed none) and the status it had.
    let first = rows
        .first()
        .ok_or_else(|| StoreError::Postgres("a look answered no row".to_string()))?;
    let seen_at = run_columns + 1;
    let next_due = next_due_from(first, seen_at, clock)?;
    let owners: Option<Vec<Option<String>>> = first.try_get(seen_at + 3).map_err(|e| pg(&e))?;
    let pids: Option<Vec<Option<i64>>> = first.try_get(seen_at + 4).map_err(|e| pg(&e))?;
    let hosts: Option<Vec<Option<String>>> = first.try_get(seen_at + 5).map_err(|e| pg(&e))?;
    let starteds: Option<Vec<Option<i64>>> = first.try_get(seen_at + 6).map_err(|e| pg(&e))?;
    let holders_here = owners
        .unwrap_or_default()
        .into_iter()
        .zip(pids.unwrap_or_default())
        .zip(hosts.unwrap_or_default())
        .zip(starteds.unwrap_or_default())
        .filter_map(|(((id, pid), host), started)| owner_of(id, pid, host, started))
        .collect();
    let mut claims = Vec::new();
    for r in &rows {
        let id: Option<String> = r.try_get(0).map_err(|e| pg(&e))?;
        if id.is_none() {
            continue;
        }
        let row = run_from(r)?;
        let was: String = r.try_get(run_columns).map_err(|e| pg(&e))?;
        claims.push(DueClaim {
            lease: super::new_lease(
                &row.id,
                row.lease_token,
                owner,
                row.durability,
                row.next_seq,
            ),
            was: RunStatus::parse(&was).unwrap_or(RunStatus::Running),
            row: Box::new(row),
            read: None,
        });
    }
    Ok((
        claims,
        Seen {
            next_due,
            holders_here,
        },
    ))
}

/// A claimed run's journal is read with its claim when it holds at most this many events (a
/// short run's, whose resume would otherwise spend two of its few statements reading it and
/// its signals)...
const READ_WITH_CLAIM_EVENTS: u64 = 256;
/// ...and while the claims' journals read so far hold at most this many: a worker claiming
/// hundreds of runs at once holds them all in memory until each is resumed.
const READ_WITH_CLAIMS_EVENTS: u64 = 16_384;

/// Reads the journals and pending signals of the short runs among `claims` (see
/// [`ReadWithClaim`]), in two statements for all of them, after the claim committed. On an
/// error none of them has its read.
pub(crate) fn read_with_claims(
    client: &mut Client,
    claims: &mut [DueClaim],
) -> Result<(), StoreError> {
    // Each run to read with its journal's length.
    let mut budget = READ_WITH_CLAIMS_EVENTS;
    let mut lengths: HashMap<String, u64> = HashMap::new();
    for claim in claims.iter() {
        let length = claim.row.next_seq;
        if length > READ_WITH_CLAIM_EVENTS || length > budget {
            continue;
        }
        budget -= length;
        lengths.insert(claim.lease.run.clone(), length);
    }
    if lengths.is_empty() {
        return Ok(());
    }
    let runs: Vec<&str> = lengths.keys().map(String::as_str).collect();
    // By the journal's index, run by run (a join with the lengths was planned as a scan of
    // the whole journal). No row is at or above a run's length (a row goes in with the
    // length's update, and the claim fenced out every earlier holder); one would be passed
    // over, as a read of the journal passes over rows past the length it read first.
    let rows = client
        .query_prepared(
            "SELECT j.run, j.seq, j.at, j.kind, j.step, j.idx, j.attempt, j.data
             FROM journal j WHERE j.run = ANY($1::text[])
             ORDER BY j.run, j.seq",
            &[&runs],
        )
        .map_err(|e| pg(&e))?;
    let mut journals: HashMap<String, Vec<PageRow>> = HashMap::new();
    for row in &rows {
        let run: String = row.try_get(0).map_err(|e| pg(&e))?;
        let seq: i64 = row.try_get(1).map_err(|e| pg(&e))?;
        let below = |&length: &u64| u64::try_from(seq).is_ok_and(|seq| seq < length);
        if lengths.get(&run).is_some_and(below) {
            let event = event_from(row, 1, &run, seq);
            journals.entry(run).or_default().push((seq, event));
        }
    }
    let signals = client
        .query_prepared(
            "SELECT s.run, s.seq, s.name, s.payload_digest, s.sent_at, s.consumed_by, v.json
             FROM signals s LEFT JOIN vals v ON v.digest = s.payload_digest
             WHERE s.run = ANY($1) AND s.consumed_by IS NULL
             ORDER BY s.run, s.seq",
            &[&runs],
        )
        .map_err(|e| pg(&e))?;
    let mut pending: HashMap<String, Vec<_>> = HashMap::new();
    for row in &signals {
        let signal = signal_from(row)?;
        let text: Option<String> = row.try_get(6).map_err(|e| pg(&e))?;
        let payload = text
            .map(|text| crate::read::parse_value(&signal.payload_digest, &text))
            .transpose()?;
        pending
            .entry(signal.run.clone())
            .or_default()
            .push((signal, payload));
    }
    for claim in claims.iter_mut() {
        let Some(&length) = lengths.get(&claim.lease.run) else {
            continue;
        };
        // As a read of the journal hands it over: a row that does not read, or is missing,
        // as a hole.
        let mut journal = Vec::new();
        let mut expected = 0;
        let rows = journals.remove(&claim.lease.run).unwrap_or_default();
        let mut keep = |row| {
            journal.push(row);
            Flow::Continue
        };
        hand_rows(rows, &mut expected, &mut keep);
        hand_missing(&mut expected, length, &mut keep);
        claim.read = Some(Box::new(ReadWithClaim {
            journal,
            signals: pending.remove(&claim.lease.run).unwrap_or_default(),
        }));
    }
    Ok(())
}

/// Due runs, other than those in `skip`, held by the processes `dead` on this host, which are
/// certainly dead though their leases have not run out (a worker killed here a moment ago):
/// their rows are not enough to tell, so a look names their holders ([`Seen::holders_here`])
/// and they are claimed one by one.
pub(crate) fn dead_runs(
    client: &mut Client,
    timers_now: i64,
    skip: &HashSet<String>,
    dead: &[String],
) -> Result<Vec<(String, RunStatus)>, StoreError> {
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let host = Owner::this_process().host;
    let runs = format!(
        "SELECT r.id, r.status FROM runs r
         WHERE r.lease_host = $1 AND r.lease_owner = ANY($4::text[]) AND r.id <> ALL($2::text[])
           AND {due}
         ORDER BY r.created_at",
        due = due(3),
    );
    let rows = client
        .query_prepared(&runs, &[&host, &skip, &timers_now, &dead])
        .map_err(|e| pg(&e))?;
    rows.iter()
        .map(|r| {
            let run: String = r.try_get(0).map_err(|e| pg(&e))?;
            let status: String = r.try_get(1).map_err(|e| pg(&e))?;
            Ok((run, RunStatus::parse(&status).unwrap_or(RunStatus::Running)))
        })
        .collect()
}

/// The columns `timer, left, now` that [`next_due_from`] reads, from a CTE `clock` whose `now`
/// is the lease time. With `Some(n)`, in a look: the runs of its CTE `picked` are left out
/// (the statement reads them as they were before its claim) and the leases it gives them, of
/// parameter `n` ms, counted.
///
/// Each part through a partial index (`runs_waiting_due`, `runs_running_lease`,
/// `runs_waiting_held`): a look reads the next timer and the held runs, not every parked run
/// or every run the store has kept (`tests::a_look_reads_what_is_due_or_held`).
fn next_due_columns(picked_lease: Option<usize>) -> String {
    let (not_picked, lease) = match picked_lease {
        Some(n) => (
            " AND r.id NOT IN (SELECT id FROM picked)".to_string(),
            format!(",\n (SELECT clock.now + ${n} FROM picked LIMIT 1)"),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        "(SELECT MIN(r.due_at) FROM runs r
          WHERE r.status = 'waiting' AND r.due_at IS NOT NULL{not_picked}) AS timer,
         LEAST(
            (SELECT MIN(r.lease_expires_at) FROM runs r
             WHERE r.status = 'running' AND r.lease_owner IS NOT NULL{not_picked}),
            (SELECT MIN(r.lease_expires_at) FROM runs r
             WHERE r.status = 'waiting' AND r.lease_owner IS NOT NULL
               AND r.lease_expires_at > clock.now){lease}) - clock.now AS left,
         clock.now AS now"
    )
}

/// The next due time from the columns of [`next_due_columns`] at `at` of `row`, on `clock`
/// (a lease's expiry is told as the time left on the database's clock, from the store's now;
/// without a clock, on the database's).
fn next_due_from(
    row: &postgres::Row,
    at: usize,
    clock: Option<&dyn Clock>,
) -> Result<Option<i64>, StoreError> {
    let timer: Option<i64> = row.try_get(at).map_err(|e| pg(&e))?;
    let left: Option<i64> = row.try_get(at + 1).map_err(|e| pg(&e))?;
    let db_now: Option<i64> = row.try_get(at + 2).map_err(|e| pg(&e))?;
    let from = clock.map(|c| c.now_ms()).or(db_now).unwrap_or(0);
    let lease = left.map(|left| from.saturating_add(left));
    Ok(match (timer, lease) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The earliest of the next due timer and the next lease to run out, on the store's `clock`
/// (see [`next_due_from`]). A running run's lease that ran out already counts: a claim passes
/// over its row while another transaction locks it (a holder frozen mid-write, until the
/// server ends that transaction), and the worker then looks again soon.
pub(crate) fn next_due(
    client: &mut Client,
    clock: Option<&dyn Clock>,
) -> Result<Option<i64>, StoreError> {
    let sql = format!(
        "WITH clock AS (SELECT {now} AS now) SELECT {columns} FROM clock",
        now = lease_time(1),
        columns = next_due_columns(None),
    );
    let row = client
        .query_one_prepared(&sql, &[&clock.and_then(lease_now)])
        .map_err(|e| pg(&e))?;
    next_due_from(&row, 0, clock)
}

#[cfg(test)]
mod tests;
