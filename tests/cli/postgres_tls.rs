//! `reel` reaching its PostgreSQL store over TLS (rustls) on a real server: the private test
//! server has `ssl = on` with a certificate signed by a CA of its own and takes only TLS
//! connections on its loopback port (`scripts/postgres-for-tests.sh`). A flow runs with
//! `sslmode=require` and with `sslmode=verify-full`, each against that CA (`sslrootcert=`);
//! a CA that did not sign the server's certificate is refused, with an error that says so and
//! does not show the URL's password.
//!
//! These tests need the server `scripts/test.sh` starts (it sets `REEL_TEST_POSTGRES_TLS_URL`,
//! `REEL_TEST_POSTGRES_CA` and `REEL_TEST_POSTGRES_OTHER_CA`); without them they fail, saying so.

use crate::postgres::database;
use crate::support::{Run, json, reel_env, temp, write};

/// The test server's TLS address (`postgres://postgres@localhost:PORT`, no database), its CA's
/// certificate, and another CA's.
// edge: the test server's address is the environment the test script set up.
#[allow(clippy::disallowed_methods)]
fn tls_server() -> (String, String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: this test needs the PostgreSQL server with TLS that \
                 scripts/postgres-for-tests.sh starts (it needs openssl). Run the tests with \
                 scripts/test.sh, or `source scripts/postgres-for-tests.sh` first"
            )
        })
    };
    let url = var("REEL_TEST_POSTGRES_TLS_URL");
    let (server, _) = url.rsplit_once('/').expect("a database in the URL");
    (
        server.to_string(),
        var("REEL_TEST_POSTGRES_CA"),
        var("REEL_TEST_POSTGRES_OTHER_CA"),
    )
}

/// A fresh database on the test server, reached over TLS with `query` (`sslmode=…`).
fn tls_database(query: &str) -> String {
    let (server, _, _) = tls_server();
    let fresh = database();
    let (_, name) = fresh.rsplit_once('/').unwrap();
    format!("{server}/{name}?{query}")
}

fn on(url: &str, dir: &std::path::Path, args: &[&str]) -> Run {
    reel_env(dir, args, &[("REEL_STORE_URL", url)])
}

#[test]
fn a_flow_runs_over_tls_with_require_and_with_verify_full_against_the_servers_ca() {
    let (_, ca, _) = tls_server();
    for mode in ["require", "verify-full"] {
        let url = tls_database(&format!("sslmode={mode}&sslrootcert={ca}"));
        let dir = temp();
        write(
            dir.path(),
            "greet.reel",
            include_str!("../../examples/greet.reel"),
        );
        let run = on(&url, dir.path(), &["run", "greet.reel", "--json"]);
        assert_eq!(run.status, 0, "sslmode={mode}: {run:?}");
        assert_eq!(json(&run)["output"]["greeted"], 3, "{run:?}");
        let runs = json(&on(&url, dir.path(), &["runs", "--json"]));
        assert_eq!(runs[0]["status"], "succeeded", "sslmode={mode}: {runs}");
        assert!(!dir.path().join(".reel").exists());
    }
    // The port takes TLS only, so the runs above went over TLS.
    let plain = tls_database("sslmode=disable");
    let r = on(&plain, temp().path(), &["runs"]);
    assert_ne!(r.status, 0, "{r:?}");
    assert!(r.stderr.contains("no encryption"), "{r:?}");
}

#[test]
fn a_server_certificate_another_ca_signed_is_refused_without_showing_the_password() {
    let (server, _, other_ca) = tls_server();
    let url = format!(
        "{}/postgres?sslmode=verify-full&sslrootcert={other_ca}",
        server.replacen("postgres@", "postgres:tls-hunter2@", 1)
    );
    let r = on(&url, temp().path(), &["runs"]);
    assert_ne!(r.status, 0, "{r:?}");
    // What failed, and where, without the password.
    assert!(
        r.stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{r:?}"
    );
    assert!(r.stderr.contains("postgres://postgres@localhost:"), "{r:?}");
    assert!(
        !r.stderr.contains("tls-hunter2") && !r.stdout.contains("tls-hunter2"),
        "{r:?}"
    );
}
