//! What the server does with the writer's statements, counted by the server itself (its
//! `pg_prepared_statements` view of the writer's session): counts, not timings.
//!
//! Needs `REEL_TEST_POSTGRES_URL` (`scripts/test.sh` sets it); without it the test fails,
//! saying so.

use super::{Appends, FirstTrip, Statements, Tx};
use crate::pg::conn::{Connector, PgAuth};
use crate::pg::{ended_runs, schema_database};

/// Runs kept in the store beside the ones the steps are of, as a team's store holds after a
/// while.
const KEPT: i64 = 20_000;

/// How many times the server plans the appends of `runs` (each an id and its lease's token)
/// over `batches` batches, each appending three rows to each run through a batch's opening as
/// the writer sends it (`Tx::begin`), in a store of `KEPT` ended runs (analyzed, as autovacuum
/// does); and how many times it runs a plan it keeps. The statement is the one whose text
/// holds `marked`.
fn plans_of_appends(runs: &[(&str, i64)], batches: i64, marked: &str) -> (i64, i64) {
    let (url, mut setup) = schema_database("reel_plans");
    let running: Vec<String> = runs
        .iter()
        .map(|(id, token)| format!("('{id}', 'f', 'd', '/', 'running', 0, 'durable', {token})"))
        .collect();
    setup
        .batch_execute(&format!(
            "{ended}
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, durability,
                               lease_token)
             VALUES {running};
             ANALYZE runs;",
            ended = ended_runs(KEPT),
            running = running.join(", ")
        ))
        .unwrap();
    let conn = Connector::new(&url, &PgAuth::default())
        .unwrap()
        .connect_pipelined()
        .unwrap();
    let st = Statements::prepare(&conn).unwrap();
    let data = r#"{"attempts":1,"output":"=0"}"#;
    let n = runs.len();
    for batch in 0..batches {
        let first = batch * 3;
        let seqs: Vec<i64> = (first..first + 3).collect();
        let trip = FirstTrip {
            durable: None,
            cleaning: false,
            values: None,
            appends: Some(Appends {
                guard: None,
                runs: runs.iter().map(|(id, _)| *id).collect(),
                tokens: runs.iter().map(|(_, token)| *token).collect(),
                firsts: vec![first; n],
                nexts: vec![first + 3; n],
                row_runs: runs.iter().flat_map(|(id, _)| [*id; 3]).collect(),
                seqs: seqs.repeat(n),
                at: vec![1; 3 * n],
                kind: ["step_succeeded", "step_started", "effect_recorded"].repeat(n),
                step: vec![Some("s"); 3 * n],
                idx: vec![None; 3 * n],
                attempt: [None, Some(1), Some(1)].repeat(n),
                data: vec![data; 3 * n],
            }),
            commit: true,
            xid: false,
        };
        let (_, _, written) = Tx::begin(&conn, &st, &trip).unwrap();
        assert_eq!(written.len(), n, "batch {batch}'s rows went in");
    }
    let counts = conn
        .block_on(conn.client().query_one(
            "SELECT custom_plans, generic_plans FROM pg_prepared_statements
             WHERE strpos(statement, $1) > 0
               AND statement NOT LIKE '%pg_prepared_statements%'",
            &[&marked],
        ))
        .unwrap();
    (counts.get(0), counts.get(1))
}

#[test]
fn a_runs_appends_are_planned_a_few_times_however_many_runs_the_store_holds() {
    let steps = 40;
    // `append_one`: its run found by its key.
    let (custom, generic) = plans_of_appends(&[("steps", 7)], steps, "AND next_seq = $3");
    // The server plans a prepared statement for its first five runs, then keeps one plan
    // for any parameters unless planning each time looks cheaper; planning each time is
    // what doubled a durable step's time in a store of 50,000 runs.
    assert!(
        custom <= 5 && generic == steps - custom,
        "{custom} plans made for the parameters of one step and {generic} runs of a kept \
         plan, over {steps} steps"
    );
}

#[test]
fn many_runs_appends_are_planned_once_however_many_runs_the_store_holds() {
    let batches = 40;
    // `append_many`: the runs' arrays joined with `runs`.
    let (custom, generic) = plans_of_appends(
        &[("a", 7), ("b", 8)],
        batches,
        "unnest($1::text[], $2::bigint[]",
    );
    // Left to choose, the server plans this statement again for every batch in such a store
    // (40 plans for the parameters at hand and none kept, checked by hand without the
    // session's generic plans, `conn::session_settings`).
    assert_eq!(
        (custom, generic),
        (0, batches),
        "plans made for the parameters of one batch, and runs of a kept plan"
    );
}
