//! What the server does with the writer's statements, counted by the server itself (its
//! `pg_prepared_statements` view of the writer's session): counts, not timings.
//!
//! Needs `REEL_TEST_POSTGRES_URL` (`scripts/test.sh` sets it); without it the test fails,
//! saying so.

use super::{Appends, Statements};
use crate::pg::conn::{Connector, PgAuth};
use crate::pg::schema_database;

/// Runs kept in the store beside the one the steps are of, as a team's store holds after a
/// while.
const KEPT: i64 = 20_000;

/// How many times the server plans a run's appends over `steps` steps of one run, each
/// appending three rows in a store of `KEPT` ended runs (analyzed, as autovacuum does), and
/// how many times it runs a plan it keeps.
fn plans_of_one_runs_appends(steps: i64) -> (i64, i64) {
    let (url, mut setup) = schema_database("reel_plans");
    setup
        .batch_execute(&format!(
            "INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, ended_at,
                               durability)
             SELECT 'ended-' || g, 'f', 'd', '/', 'succeeded', g, g, 'durable'
             FROM generate_series(1, {KEPT}) g;
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, durability,
                               lease_token)
             VALUES ('steps', 'f', 'd', '/', 'running', 0, 'durable', 7);
             ANALYZE runs;"
        ))
        .unwrap();
    let conn = Connector::new(&url, &PgAuth::default())
        .unwrap()
        .connect_pipelined()
        .unwrap();
    let st = Statements::prepare(&conn).unwrap();
    let data = r#"{"attempts":1,"output":"=0"}"#;
    for step in 0..steps {
        let first = step * 3;
        let appends = Appends {
            guard: None,
            runs: vec!["steps"],
            tokens: vec![7],
            firsts: vec![first],
            nexts: vec![first + 3],
            row_runs: vec!["steps"; 3],
            seqs: vec![first, first + 1, first + 2],
            at: vec![1; 3],
            kind: vec!["step_succeeded", "step_started", "effect_recorded"],
            step: vec![Some("s"); 3],
            idx: vec![None; 3],
            attempt: vec![None, Some(1), Some(1)],
            data: vec![data; 3],
        };
        let (statement, params) = appends.statement(&st);
        let row = conn
            .block_on(conn.client().query_one(statement, &params))
            .unwrap();
        let fenced: Vec<String> = row.get(1);
        assert_eq!(fenced, ["steps"], "step {step}'s rows went in");
    }
    let counts = conn
        .block_on(conn.client().query_one(
            "SELECT custom_plans, generic_plans FROM pg_prepared_statements
             WHERE statement LIKE '%($12::bigint IS NULL%'
               AND statement NOT LIKE '%pg_prepared_statements%'",
            &[],
        ))
        .unwrap();
    (counts.get(0), counts.get(1))
}

#[test]
fn a_runs_appends_are_planned_a_few_times_however_many_runs_the_store_holds() {
    let steps = 40;
    let (custom, generic) = plans_of_one_runs_appends(steps);
    // The server plans a prepared statement for its first five runs, then keeps one plan
    // for any parameters unless planning each time looks cheaper; planning each time is
    // what doubled a durable step's time in a store of 50,000 runs.
    assert!(
        custom <= 5 && generic == steps - custom,
        "{custom} plans made for the parameters of one step and {generic} runs of a kept \
         plan, over {steps} steps"
    );
}
