//! What a worker's look reads on PostgreSQL, counted by the server itself (the rows of `runs`
//! the look's statements fetched, from `pg_stat_xact_user_tables`): counts, not timings.
//!
//! Needs `REEL_TEST_POSTGRES_URL` (`scripts/test.sh` sets it); without it the test fails,
//! saying so.

use std::collections::HashSet;

use super::{look, next_due};
use crate::Owner;
use crate::pg::{ended_runs, rows_fetched, schema_database};

/// Runs kept in the store beside the few a look is about: ended ones and parked ones.
const KEPT: i64 = 5_000;

/// A store with `KEPT` ended runs, `KEPT` runs parked for a day on a signal, and two runs
/// each of the kinds a look is about: waiting runs a live process holds, running runs held.
fn crowded_store() -> postgres::Client {
    let (_, mut client) = schema_database("reel_look");
    let day = 86_400_000_i64;
    client
        .batch_execute(&format!(
            "{ended}
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, due_at,
                               waiting_on, durability)
             SELECT 'parked-' || g, 'f', 'd', '/', 'waiting', g,
                    (extract(epoch from clock_timestamp()) * 1000)::bigint + {day} + g,
                    '[\"go\"]', 'fast'
             FROM generate_series(1, {KEPT}) g;
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, due_at,
                               lease_owner, lease_pid, lease_host, lease_started,
                               lease_expires_at, durability)
             SELECT kind || '-' || g, 'f', 'd', '/', kind, g, NULL, 'holder', 1, 'elsewhere', 1,
                    (extract(epoch from clock_timestamp()) * 1000)::bigint + 60000 + g, 'fast'
             FROM generate_series(1, 2) g, (VALUES ('waiting'), ('running')) k(kind);
             ANALYZE runs;",
            ended = ended_runs(KEPT)
        ))
        .unwrap();
    client
}

/// The time now (ms since the epoch): a look's time is the real one, as a worker's is, since
/// the store's rows hold leases the database judges by its own clock.
// edge: a test's look at the real clock.
#[allow(clippy::disallowed_methods)]
fn real_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The rows of `runs` this connection's open transaction has fetched so far.
fn rows_read(client: &mut postgres::Client) -> i64 {
    rows_fetched(client, "runs")
}

#[test]
fn a_look_reads_what_is_due_or_held() {
    let mut client = crowded_store();
    let now = real_now_ms();
    let owner = Owner::this_process();
    let none = HashSet::new();
    let mut read = Vec::new();
    client.batch_execute("BEGIN").unwrap();
    let next = next_due(&mut client, None).unwrap();
    read.push(("next due", rows_read(&mut client)));
    let (claimed, seen) = look(&mut client, None, now, &owner, 60_000, 256, &none, false).unwrap();
    read.push(("look", rows_read(&mut client)));
    // A look after one whose answer was lost reads the running runs' rows too: here the few
    // held ones.
    look(&mut client, None, now, &owner, 60_000, 0, &none, true).unwrap();
    read.push(("look after a lost one", rows_read(&mut client)));
    client.batch_execute("ROLLBACK").unwrap();

    // The answers: the next due time is the first held lease's end (a minute away), before
    // the parked runs' timers (a day away), and the look tells the same; nothing is held by
    // a process here, and nothing is due.
    let next = next.expect("a lease runs out");
    assert!(next > now && next <= now + 60_000 + 1_000, "{next} {now}");
    assert_eq!(seen.next_due, Some(next));
    assert!(seen.holders_here.is_empty());
    assert!(claimed.is_empty(), "{} claimed", claimed.len());
    // The work: each statement reads the few held runs, not the thousands parked or ended.
    let mut before = 0;
    let per_statement: Vec<(&str, i64)> = read
        .into_iter()
        .map(|(what, total)| {
            let rows = total - before;
            before = total;
            (what, rows)
        })
        .collect();
    assert!(
        per_statement.iter().all(|&(_, rows)| rows <= 20),
        "rows read of a store of {} runs, of which 4 are held: {per_statement:?}",
        2 * KEPT + 4
    );
}

#[test]
fn a_look_reads_one_entry_a_holder_not_every_running_run() {
    // Many runs running under live leases beside many ended ones, as a busy team's store
    // holds, held by three processes on this host and one elsewhere, and two by the looking
    // worker itself: a look names the holders here through one index entry each and reads
    // none of their runs; the look after one whose answer was lost (`look`'s `mine_too`) takes
    // up the worker's own two, found by its host and id.
    let (_, mut client) = schema_database("reel_look_running");
    let owner = Owner::this_process();
    client
        .batch_execute(&format!(
            "{ended}
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at,
                               lease_owner, lease_pid, lease_host, lease_started,
                               lease_expires_at, durability)
             SELECT 'running-' || g, 'f', 'd', '/', 'running', g, 'holder-' || (g % 4),
                    g % 4, CASE g % 4 WHEN 0 THEN 'elsewhere' ELSE '{host}' END, 1,
                    (extract(epoch from clock_timestamp()) * 1000)::bigint + 60000 + g, 'fast'
             FROM generate_series(1, {RUNNING}) g;
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at,
                               lease_owner, lease_pid, lease_host, lease_started,
                               lease_expires_at, durability)
             SELECT 'mine-' || g, 'f', 'd', '/', 'running', g, '{id}', {pid}, '{host}',
                    {started}, (extract(epoch from clock_timestamp()) * 1000)::bigint + 60000,
                    'fast'
             FROM generate_series(1, 2) g;
             ANALYZE runs;",
            ended = ended_runs(2 * KEPT),
            host = owner.host,
            id = owner.id,
            pid = owner.pid,
            started = owner.started,
        ))
        .unwrap();
    let now = real_now_ms();
    let none = HashSet::new();
    client.batch_execute("BEGIN").unwrap();
    for mine_too in [false, true] {
        let before = rows_read(&mut client);
        let (claimed, seen) =
            look(&mut client, None, now, &owner, 60_000, 4, &none, mine_too).unwrap();
        let read = rows_read(&mut client) - before;
        let mut claimed: Vec<String> = claimed.into_iter().map(|c| c.lease.run).collect();
        claimed.sort_unstable();
        let expected: &[&str] = if mine_too { &["mine-1", "mine-2"] } else { &[] };
        assert_eq!(claimed, expected, "mine_too: {mine_too}");
        let mut holders: Vec<String> = seen.holders_here.into_iter().map(|h| h.id).collect();
        holders.sort_unstable();
        let mut named = vec![owner.id.clone()];
        named.extend(["holder-1", "holder-2", "holder-3"].map(String::from));
        named.sort_unstable();
        assert_eq!(holders, named, "mine_too: {mine_too}");
        eprintln!("a look (mine_too: {mine_too}) read {read} rows");
        assert!(
            read <= 20,
            "a look (mine_too: {mine_too}) read {read} rows of a store of {} running runs",
            RUNNING + 2
        );
    }
    client.batch_execute("ROLLBACK").unwrap();
}

/// Runs running under live leases in the test above.
const RUNNING: i64 = 2_000;
