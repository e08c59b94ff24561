//! The server's past runs on a PostgreSQL store: `REEL_STORE_URL` handed to the server makes
//! every document's runs come from that database, read-only, the same as from `.reel/`.
//!
//! Needs the private server `scripts/test.sh` starts (`REEL_TEST_POSTGRES_URL`); fails without.

use std::sync::Arc;

use reel_store::{Durability, ManualClock, NewRun, Owner, PgAuth, PgStore, Store};

use super::{Stores, latest, recent};

#[test]
// edge: the test server's address is the environment the test script set up.
#[allow(clippy::disallowed_methods)]
fn past_runs_come_from_the_postgres_store_when_its_url_is_given() {
    let url = std::env::var("REEL_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "REEL_TEST_POSTGRES_URL is not set: this test needs a PostgreSQL server. Run the \
             tests with scripts/test.sh, or `source scripts/postgres-for-tests.sh` first"
        )
    });
    // A source path of its own, so that runs other tests leave in this database do not count.
    let source = format!("/lsp-test/{}/flow.reel", std::process::id());
    let writer = PgStore::open(&url, Arc::new(ManualClock::at(1_000))).unwrap();
    for (i, id) in ["01lsp-a", "01lsp-b"].iter().enumerate() {
        let id = format!("{id}-{}", std::process::id());
        writer
            .create_run(
                NewRun {
                    id,
                    flow: "deploy".to_string(),
                    flow_digest: "f".repeat(64),
                    source: Some("flow.reel".to_string()),
                    source_abs: Some(source.clone()),
                    cwd: "/lsp-test".to_string(),
                    parent: None,
                    keep_for_ms: None,
                    durability: Durability::Fast,
                    created_at: 1_000 + i as i64,
                    first_events: Vec::new(),
                    kept: Vec::new(),
                },
                &Owner::this_process(),
                60_000,
            )
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::new(None).with_store_url(Some(url), PgAuth::default());
    let key = stores.dir_for(dir.path()).unwrap();
    let store = stores.get(&key).expect("the PostgreSQL store opens");
    // Any document, in any directory, reads the same store, opened once.
    let elsewhere = stores.dir_for(&dir.path().join("elsewhere")).unwrap();
    assert_eq!(key, elsewhere);
    let again = stores.get(&elsewhere).unwrap();
    assert!(Arc::ptr_eq(&store, &again));
    let ids: Vec<String> = recent(store.as_ref(), &source, "deploy", 10)
        .into_iter()
        .map(|r| r.id)
        .collect();
    let pid = std::process::id();
    assert_eq!(ids, [format!("01lsp-b-{pid}"), format!("01lsp-a-{pid}")]);
    assert_eq!(
        latest(store.as_ref(), &source, "deploy").map(|r| r.id),
        Some(format!("01lsp-b-{pid}"))
    );
    // Read-only: it cannot write.
    assert!(!dir.path().join(".reel").exists());
}
