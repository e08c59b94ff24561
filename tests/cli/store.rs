//! The store's files on disk: private to their owner, and never silently replaced.

use std::fs;
use std::path::Path;

use crate::support::*;

const FLOW: &str = "flow hi {\n  step said = echo { value: \"hi\" }\n  output said\n}\n";

fn in_dir(dir: &Path, args: &[&str]) -> Run {
    reel_env(dir, args, &[("REEL_HOME", "")])
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `reel run` opens the store while the file compiles (see `docs/cli.md`): a file it cannot
/// read opens nothing, and a file with errors is reported as before, with nothing run.
#[test]
fn a_run_of_a_missing_file_creates_no_store_and_one_of_a_broken_file_runs_nothing() {
    let dir = temp();
    let r = in_dir(dir.path(), &["run", "missing.reel"]);
    assert_eq!(r.status, 2, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: `missing.reel` does not exist; check the path\n"
    );
    assert!(!dir.path().join(".reel").exists());
    write(
        dir.path(),
        "broken.reel",
        "flow b {\n  step a = echo { value: nowhere }\n  output a\n}\n",
    );
    let r = in_dir(dir.path(), &["run", "broken.reel"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains("nothing called `nowhere` is in scope"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .ends_with("error: `broken.reel` has 1 error; nothing was run\n"),
        "{}",
        r.stderr
    );
    let r = in_dir(dir.path(), &["runs", "--json"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(json(&r), serde_json::json!([]));
    write(dir.path(), "hi.reel", FLOW);
    let r = in_dir(dir.path(), &["run", "hi.reel", "--json"]);
    assert_eq!(json(&r)["output"], "hi", "{r:?}");
}

#[cfg(unix)]
#[test]
fn a_new_store_is_readable_by_its_owner_only_and_an_open_one_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp();
    write(dir.path(), "hi.reel", FLOW);
    let r = in_dir(dir.path(), &["run", "hi.reel"]);
    assert_eq!(r.status, 0, "{r:?}");
    let store = dir.path().join(".reel");
    assert_eq!(mode(&store), 0o700);
    assert_eq!(mode(&store.join("blobs")), 0o700);
    assert_eq!(mode(&store.join("reel.db")), 0o600);
    for entry in fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    let r = in_dir(dir.path(), &["runs"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);

    // A store made by an older reel (or by hand) that others can read is reported, with the fix.
    fs::set_permissions(&store, fs::Permissions::from_mode(0o755)).unwrap();
    let r = in_dir(dir.path(), &["runs"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert!(
        r.stderr.contains("can be read by other users")
            && r.stderr.contains("chmod -R go-rwx")
            && r.stdout.contains("succeeded"),
        "{r:?}"
    );
}

#[test]
fn a_truncated_database_is_refused_not_taken_for_a_new_store() {
    let dir = temp();
    write(dir.path(), "hi.reel", FLOW);
    let r = in_dir(dir.path(), &["run", "hi.reel"]);
    assert_eq!(r.status, 0, "{r:?}");
    let db = dir.path().join(".reel/reel.db");
    for side in ["reel.db-wal", "reel.db-shm"] {
        let _ = fs::remove_file(dir.path().join(".reel").join(side));
    }
    fs::File::create(&db).unwrap().set_len(0).unwrap();

    for args in [&["runs"][..], &["run", "hi.reel"][..]] {
        let r = in_dir(dir.path(), args);
        assert_ne!(r.status, 0, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("empty (0 bytes)") && r.stderr.contains("restore it from a backup"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert_eq!(
        fs::metadata(&db).unwrap().len(),
        0,
        "the truncated file is left as it was"
    );
}

/// A project whose store holds one run, and a connection of another program to its database.
fn a_store_with_a_run() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = temp();
    write(dir.path(), "hi.reel", FLOW);
    assert_eq!(in_dir(dir.path(), &["run", "hi.reel"]).status, 0);
    let db = rusqlite::Connection::open(dir.path().join(".reel/reel.db")).unwrap();
    (dir, db)
}

/// A store whose write lock another program holds (a `sqlite3` shell left in a transaction)
/// is waited for, then refused with a message that says who may hold it, not SQLite's bare
/// "database is locked"; once the lock goes, the store works as before.
#[test]
fn a_store_locked_by_another_program_says_so_and_works_once_it_is_let_go() {
    let (dir, shell) = a_store_with_a_run();
    shell.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let r = in_dir(dir.path(), &["run", "hi.reel"]);
    assert_eq!(r.status, 1, "{r:?}");
    assert!(
        r.stderr.contains(
            "database is locked: another process has held its write lock for more than 10 s"
        ) && r.stderr.contains("end that and try again"),
        "{}",
        r.stderr
    );

    shell.execute_batch("ROLLBACK").unwrap();
    let r = in_dir(dir.path(), &["run", "hi.reel"]);
    assert_eq!(r.status, 0, "{r:?}");
    let runs = json(&in_dir(dir.path(), &["runs", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
}

/// `reel sql` on a store whose schema predates the views: the read-only opening refuses it,
/// so the query opens it to write, which migrates it, and answers.
#[test]
fn a_query_on_a_store_older_than_the_views_migrates_it_and_answers() {
    let (dir, db) = a_store_with_a_run();
    for view in ["reel_runs", "reel_steps", "reel_calls", "reel_events"] {
        db.execute_batch(&format!("DROP VIEW {view}")).unwrap();
    }
    db.execute_batch("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
        .unwrap();
    drop(db);
    let r = in_dir(dir.path(), &["sql", "SELECT status FROM reel_runs"]);
    assert_eq!(r.status, 0, "{r:?}");
    assert_eq!(r.stdout, "status\nsucceeded\n");
}
