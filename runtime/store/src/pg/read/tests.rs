//! What the PostgreSQL store's reads fetch, counted by the server itself (the rows of `journal`
//! a statement fetched, from `pg_stat_xact_user_tables`): counts, not timings.
//!
//! Needs `REEL_TEST_POSTGRES_URL` (`scripts/test.sh` sets it); without it the test fails,
//! saying so.

use super::unknown_outcome_rows;
use crate::pg::{rows_fetched, schema_database};

/// Journal rows of other kinds beside the few a read is about.
const OTHERS: i64 = 100_000;

/// `reel runs` shows every listed run's calls of unknown outcome: read through their index,
/// the statement fetches those rows, not the store's other events (with the server's
/// statistics of them, as autovacuum keeps).
#[test]
fn unknown_outcome_rows_fetch_only_themselves() {
    let (_, mut client) = schema_database("reel_unknown");
    client
        .batch_execute(&format!(
            "INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, durability,
                               next_seq)
             SELECT 'run-' || g, 'f', 'd', '/', 'succeeded', g, 'fast', 10
             FROM generate_series(1, {runs}) g;
             INSERT INTO journal (run, seq, at, kind, step, data)
             SELECT 'run-' || (g / 10 + 1), g % 10, 0,
                    CASE WHEN g % 5000 = 3 THEN 'unknown_outcome' ELSE 'call_succeeded' END,
                    's', CASE WHEN g % 5000 = 3 THEN '{{\"key\": \"k\", \"then\": \"repeated\"}}'
                              ELSE '{{}}' END
             FROM generate_series(0, {last}) g;
             ANALYZE journal;",
            runs = OTHERS / 10,
            last = OTHERS - 1,
        ))
        .unwrap();
    client.batch_execute("BEGIN").unwrap();
    let found = unknown_outcome_rows(&mut client).unwrap();
    let read = rows_fetched(&mut client, "journal");
    client.batch_execute("ROLLBACK").unwrap();
    let expected = (OTHERS / 5000) as usize;
    assert_eq!(found.len(), expected);
    assert!(
        found
            .iter()
            .all(|r| r.kind == "unknown_outcome" && r.seq == 3)
    );
    assert!(
        found.windows(2).all(|w| w[0].run < w[1].run),
        "by run: {found:?}"
    );
    assert_eq!(read, expected as i64, "journal rows fetched");
}
