//! Past runs from a store on PostgreSQL: a run made on SQLite, moved with `reel store copy`,
//! shows the same inlay hints when the server reads it from PostgreSQL, whether the project's
//! `reel.toml` (`[store] url`) or `REEL_STORE_URL` (which wins) names the database.
//!
//! Needs the private server `scripts/test.sh` starts (`REEL_TEST_POSTGRES_URL`); fails without.

use std::path::Path;

use crate::runs::{hints, reel};
use crate::support::{Client, uri};

#[path = "../../runtime/store/tests/test_server/mod.rs"]
mod test_server;

/// A fresh database on the test server, as a store URL.
fn database() -> String {
    test_server::fresh_database("reel_lsp")
}

const FLOW: &str = r#"flow pipeline {
  input n: int = 2

  step a = echo {
    value: { x: input.n }
  }

  step b = a.x + 1

  output b
}
"#;

/// The hints a fresh server started in `dir` (with `env`) shows for `path`.
fn hints_of(dir: &Path, home: &Path, env: &[(&str, &str)], path: &Path) -> String {
    let mut client = Client::start_env(dir, home, env);
    let uri = uri(path);
    client.open(&uri, FLOW);
    let shown = hints(&mut client, &uri, FLOW);
    client.shutdown();
    shown
}

fn set_store_url(dir: &Path, url: &str) {
    std::fs::write(dir.join("reel.toml"), format!("[store]\nurl = \"{url}\"\n")).unwrap();
}

#[test]
fn past_runs_show_the_same_from_sqlite_and_from_postgres_after_store_copy() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("store");
    let path = dir.path().join("pipe.reel");
    std::fs::write(&path, FLOW).unwrap();
    reel(dir.path(), &home, &["run", "pipe.reel"]);
    let from_sqlite = hints_of(dir.path(), &home, &[], &path);
    insta::assert_snapshot!(from_sqlite, @r#"
    flow pipeline {
      input n: int = 2

      step a = echo { ⟨✓ {"x":2}⟩
        value: { x: input.n }
      }

      step b = a.x + 1 ⟨✓ 3⟩

      output b
    }
    "#);

    let url = database();
    reel(
        dir.path(),
        &home,
        &[
            "store",
            "copy",
            "--from",
            home.to_str().unwrap(),
            "--to",
            &url,
        ],
    );
    // From here on the runs exist only on PostgreSQL.
    std::fs::remove_dir_all(&home).unwrap();
    assert_eq!(hints_of(dir.path(), &home, &[], &path), FLOW);

    // `[store] url` in reel.toml.
    set_store_url(dir.path(), &url);
    assert_eq!(hints_of(dir.path(), &home, &[], &path), from_sqlite);

    // `REEL_STORE_URL` wins over a reel.toml that names a server nobody listens on.
    set_store_url(dir.path(), "postgres://nobody@127.0.0.1:9/nothing");
    assert_eq!(hints_of(dir.path(), &home, &[], &path), FLOW);
    let env = [("REEL_STORE_URL", url.as_str())];
    assert_eq!(hints_of(dir.path(), &home, &env, &path), from_sqlite);
}
