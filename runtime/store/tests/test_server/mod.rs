//! The PostgreSQL test server the store's tests share: a fresh database on it for each test.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where the test script puts the test server's URL.
pub const PG_URL: &str = "REEL_TEST_POSTGRES_URL";

/// Creates a fresh database named after `prefix`, this process and a counter on the test
/// server, and returns its URL (the server's query parameters kept). Process ids come round
/// again within one test run (a system whose `pid_max` is 32768 wraps them after as many
/// processes, and the suite starts more), so a name an earlier process with the same id took
/// is passed over for the next count rather than failing the test.
// edge: the test server's address is the environment the test script set up.
#[allow(clippy::disallowed_methods)]
pub fn fresh_database(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::var(PG_URL).unwrap_or_else(|_| {
        panic!(
            "{PG_URL} is not set: the PostgreSQL store tests need a server. Run the tests \
             with scripts/test.sh, or `source scripts/postgres-for-tests.sh` first"
        )
    });
    let mut admin = ::postgres::Client::connect(&base, ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test server at {PG_URL}: {e}"));
    let name = loop {
        let name = format!(
            "{prefix}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        match admin.batch_execute(&format!("CREATE DATABASE {name}")) {
            Ok(()) => break name,
            Err(e) if e.code() == Some(&::postgres::error::SqlState::DUPLICATE_DATABASE) => {}
            Err(e) => panic!("cannot create the test database {name}: {e}"),
        }
    };
    let (server, _db) = base
        .split_once('?')
        .map_or(base.as_str(), |(b, _)| b)
        .rsplit_once('/')
        .expect("a database in the URL");
    let query = base.split_once('?').map(|(_, q)| format!("?{q}"));
    format!("{server}/{name}{}", query.unwrap_or_default())
}
