//! Where the store lives and what `reel.toml` says: the project around the current directory.
//!
//! The store is `.reel/` beside the nearest `reel.toml` found from the current directory
//! upward, else `.reel/` in the current directory; `REEL_HOME` names the store directory itself
//! and overrides both (the rule is `reel_journal::discover`, shared with the language server).
//! A store URL (`REEL_STORE_URL`, else `[store] url` in `reel.toml`) puts the store on
//! PostgreSQL instead, for every command.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_store::{Durability, PgStore, SqliteStore, Store, StoreRead};

use super::Failure;

use reel_journal::discover::{Config, StoreAt, locate_store, read_config};

/// The store directory and the project's settings.
pub struct Project {
    /// The store directory (`.reel/`), used when there is no store URL.
    pub store_dir: PathBuf,
    /// The settings (defaults when there is no `reel.toml`).
    pub config: Config,
    /// The PostgreSQL store's URL (`REEL_STORE_URL`, else `[store] url`), if any.
    store_url: Option<String>,
}

impl std::fmt::Debug for Project {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The store URL may hold a password: it is shown as every message shows it.
        f.debug_struct("Project")
            .field("store_dir", &self.store_dir)
            .field("config", &self.config)
            .field("store", &self.store_shown())
            .finish()
    }
}

impl Project {
    /// Finds the project around `cwd`, given `REEL_HOME`'s and `REEL_STORE_URL`'s values.
    pub fn find(
        cwd: &Path,
        reel_home: Option<&OsStr>,
        store_url: Option<String>,
    ) -> Result<Project, Failure> {
        // The rule the language server shares (`reel_journal::discover`).
        let fail = |e: reel_journal::discover::ProjectError| Failure::usage(e.to_string());
        let config = read_config(cwd).map_err(fail)?;
        let at = locate_store(cwd, reel_home, store_url.as_deref(), &config).map_err(fail)?;
        let store_dir = reel_journal::discover::store_dir(cwd, reel_home);
        let store_url = match at {
            StoreAt::Url(url) => Some(url),
            StoreAt::Dir(_) => None,
        };
        Ok(Project {
            store_dir,
            config,
            store_url,
        })
    }

    /// Finds the project around the current directory.
    pub fn current() -> Result<Project, Failure> {
        let cwd = std::env::current_dir()
            .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?;
        Project::find(
            &cwd,
            super::capabilities::reel_home().as_deref(),
            super::capabilities::store_url(),
        )
    }

    /// Opens (creating if needed) the store for writing: on PostgreSQL when a store URL is
    /// set, else SQLite under the store directory.
    pub fn open_store(&self) -> Result<Arc<dyn Store>, Failure> {
        let clock = Arc::new(super::capabilities::SystemClock);
        // A test's crash point (debug builds only), in the writer of either store and in the
        // driver, before the store is opened.
        arm_crash_point()?;
        match &self.store_url {
            Some(url) => {
                let store = PgStore::open_with(url, &super::capabilities::store_auth(), clock)
                    .map_err(|e| Failure::failed(e.to_string()))?;
                // A test's injected faults (debug builds only): the server ends the writer's
                // session.
                #[cfg(debug_assertions)]
                inject_store_fault(|f| store.inject_fault(f))?;
                Ok(Arc::new(store))
            }
            None => {
                let store = SqliteStore::open(&self.store_dir, clock)
                    .map_err(|e| Failure::failed(e.to_string()))?;
                // A test's injected disk faults (debug builds only).
                #[cfg(debug_assertions)]
                inject_store_fault(|f| store.inject_fault(f))?;
                Ok(Arc::new(store))
            }
        }
    }

    /// Opens an existing store for reading only (as the language server does).
    pub fn open_read_only(&self) -> Result<Arc<dyn Store>, Failure> {
        self.store_at()
            .open_read_only(&super::capabilities::store_auth())
            .map_err(|e| Failure::failed(e.to_string()))
    }

    /// Where the store is.
    fn store_at(&self) -> StoreAt {
        match &self.store_url {
            Some(url) => StoreAt::Url(url.clone()),
            None => StoreAt::Dir(self.store_dir.clone()),
        }
    }

    /// On PostgreSQL, listens for runs that may have become due (or timers set) and calls
    /// `wake` for each; `None` on SQLite, which has nothing to listen to.
    pub fn listen_for_due(
        &self,
        wake: impl Fn(reel_store::DueNotice) + Send + 'static,
    ) -> Result<Option<reel_store::PgListener>, Failure> {
        match &self.store_url {
            Some(url) => {
                reel_store::PgListener::start(url, &super::capabilities::store_auth(), wake)
                    .map(Some)
                    .map_err(|e| Failure::failed(e.to_string()))
            }
            None => Ok(None),
        }
    }

    /// Whether the store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.store_url.is_some()
    }

    /// Whether there may be runs to read: a SQLite store directory that exists, or any
    /// PostgreSQL store (which opening creates).
    pub fn store_exists(&self) -> bool {
        self.store_url.is_some() || self.store_dir.exists()
    }

    /// Where the store is, as it may be shown: the directory, or the URL without its password.
    pub fn store_shown(&self) -> String {
        self.store_at().shown()
    }

    /// What others may read of a SQLite store (a PostgreSQL store's access is the server's).
    pub fn exposure(&self) -> Option<String> {
        match self.store_url {
            Some(_) => None,
            None => reel_store::exposure(&self.store_dir),
        }
    }

    /// The write mode from `--durability`, else `reel.toml`, else `fast`.
    pub fn durability(&self, flag: Option<Durability>) -> Result<Durability, Failure> {
        if let Some(d) = flag {
            return Ok(d);
        }
        match self.config.runs.durability.as_deref() {
            None | Some("fast") => Ok(Durability::Fast),
            Some("durable") => Ok(Durability::Durable),
            Some(other) => Err(Failure::usage(format!(
                "`[runs] durability = \"{other}\"` in reel.toml: write \"fast\" or \"durable\""
            ))),
        }
    }

    /// How long ended runs are kept, from `--keep-for`, else `reel.toml`, else a week (ms).
    pub fn keep_for(&self, flag: Option<&str>) -> Result<u64, Failure> {
        let Some(text) = flag.or(self.config.runs.keep_for.as_deref()) else {
            return Ok(reel_store::DEFAULT_KEEP_FOR_MS);
        };
        reel_flowspec::Duration::parse(text)
            .map(|d| d.millis())
            .ok_or_else(|| {
                Failure::usage(if reel_flowspec::Duration::is_too_long(text) {
                    format!(
                        "`{text}` is longer than Reel can count to keep runs for: write a \
                         shorter duration, such as 3650d"
                    )
                } else {
                    format!(
                        "`{text}` is not a duration for keeping runs: write it as 30m, 2h or 30d"
                    )
                })
            })
    }
}

/// Resolves a run id or a unique prefix of one.
pub fn resolve_run(store: &dyn StoreRead, given: &str) -> Result<String, Failure> {
    let found = store
        .find_runs(given)
        .map_err(|e| Failure::failed(e.to_string()))?;
    match found.as_slice() {
        [] => Err(Failure::usage(format!(
            "there is no run `{given}` in this store; `reel runs` lists them"
        ))),
        [one] => Ok(one.clone()),
        many => Err(Failure::usage(format!(
            "`{given}` names {} runs ({}); give more of the id",
            many.len(),
            many.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The write fault a test asks the store for (`REEL_STORE_FAULT=WHAT@WHEN[*N]`, such as
/// `full@effect_recorded` or, on PostgreSQL, `answer-lost@effect_recorded`): only in debug
/// builds, read at the edge ([`store_fault`]) and handed to the store's `inject`, which refuses
/// a fault the other store's writer has rather than ignoring it (a test must not pass without
/// the fault it meant).
#[cfg(debug_assertions)]
fn inject_store_fault(inject: impl FnOnce(&str) -> Result<(), String>) -> Result<(), Failure> {
    match store_fault() {
        Some(fault) => inject(&fault).map_err(|e| Failure::usage(format!("REEL_STORE_FAULT: {e}"))),
        None => Ok(()),
    }
}

/// `REEL_STORE_FAULT`, when set and not empty.
// edge: a test's fault injection, read where the program starts.
#[allow(clippy::disallowed_methods)]
#[cfg(debug_assertions)]
fn store_fault() -> Option<String> {
    std::env::var("REEL_STORE_FAULT")
        .ok()
        .filter(|f| !f.is_empty())
}

/// Arms the crash point a test asks for (`REEL_CRASH_AT=POINT[:N]`, see `reel_store::crash`):
/// only in debug builds, read here at the edge.
// edge: a test's crash point, read where the program starts; absent from release builds.
#[allow(clippy::disallowed_methods)]
fn arm_crash_point() -> Result<(), Failure> {
    #[cfg(debug_assertions)]
    if let Some(point) = std::env::var("REEL_CRASH_AT")
        .ok()
        .filter(|p| !p.is_empty())
    {
        reel_store::crash::arm(&point)
            .map_err(|e| Failure::usage(format!("REEL_CRASH_AT: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_sits_beside_the_nearest_reel_toml() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(dir.path().join("reel.toml"), "[runs]\nkeep_for = \"30d\"\n").unwrap();
        let p = Project::find(&nested, None, None).unwrap();
        assert_eq!(p.store_dir, dir.path().join(".reel"));
        assert_eq!(p.keep_for(None).unwrap(), 30 * 86_400_000);
        let home = Project::find(&nested, Some(OsStr::new("/elsewhere")), None).unwrap();
        assert_eq!(home.store_dir, PathBuf::from("/elsewhere"));
    }

    #[test]
    fn a_bad_reel_toml_says_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("reel.toml"), "[runs]\nkeepfor = 1\n").unwrap();
        let err = Project::find(dir.path(), None, None).unwrap_err();
        assert!(err.messages[0].contains("reel.toml"), "{:?}", err.messages);
    }

    #[test]
    fn a_store_url_comes_from_the_environment_before_reel_toml() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("reel.toml"),
            "[store]\nurl = \"postgres://team:hunter2@db.example/reel\"\n",
        )
        .unwrap();
        let p = Project::find(dir.path(), None, None).unwrap();
        assert_eq!(p.store_shown(), "postgres://team@db.example:5432/reel");
        assert!(!format!("{p:?}").contains("hunter2"));
        let env = Some("postgres://me@other.example/runs".to_string());
        let p = Project::find(dir.path(), None, env).unwrap();
        assert_eq!(p.store_shown(), "postgres://me@other.example:5432/runs");
        let err = Project::find(dir.path(), None, Some("mysql://x/y".to_string())).unwrap_err();
        assert!(
            err.messages[0].contains("REEL_STORE_URL"),
            "{:?}",
            err.messages
        );
        let none = Project::find(tempfile::tempdir().unwrap().path(), None, None).unwrap();
        assert!(none.store_shown().ends_with(".reel"));
    }
}
