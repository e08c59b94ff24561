//! Where the store lives and what `reel.toml` says: the project around the current directory.
//!
//! The store is `.reel/` beside the nearest `reel.toml` found from the current directory
//! upward, else `.reel/` in the current directory; `REEL_HOME` names the store directory itself
//! and overrides both (the rule is `reel_journal::discover`, shared with the language server).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_journal::discover;
use reel_store::{Durability, SqliteStore, Store, StoreRead};
use serde::Deserialize;

use super::Failure;

/// The project's settings from `reel.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[runs]`
    #[serde(default)]
    pub runs: RunsConfig,
}

/// `[runs]` in `reel.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsConfig {
    /// `durability = "fast" | "durable"`
    pub durability: Option<String>,
    /// `keep_for = "7d"`
    pub keep_for: Option<String>,
}

/// The store directory and the project's settings.
#[derive(Debug)]
pub struct Project {
    /// The store directory (`.reel/`).
    pub store_dir: PathBuf,
    /// The settings (defaults when there is no `reel.toml`).
    pub config: Config,
}

impl Project {
    /// Finds the project around `cwd`, given `REEL_HOME`'s value.
    pub fn find(cwd: &Path, reel_home: Option<&OsStr>) -> Result<Project, Failure> {
        let config_path = discover::project_file(cwd);
        let config = match &config_path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Failure::usage(format!("cannot read `{}`: {e}", path.display()))
                })?;
                toml::from_str(&text).map_err(|e| {
                    Failure::usage(format!(
                        "`{}` is not valid: {}",
                        path.display(),
                        e.message()
                    ))
                })?
            }
            None => Config::default(),
        };
        let store_dir = discover::store_dir(cwd, reel_home);
        Ok(Project { store_dir, config })
    }

    /// Finds the project around the current directory.
    pub fn current() -> Result<Project, Failure> {
        let cwd = std::env::current_dir()
            .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?;
        Project::find(&cwd, super::capabilities::reel_home().as_deref())
    }

    /// Opens (creating if needed) the store for writing.
    pub fn open_store(&self) -> Result<Arc<dyn Store>, Failure> {
        let store = SqliteStore::open(&self.store_dir, Arc::new(super::capabilities::SystemClock))
            .map_err(|e| Failure::failed(e.to_string()))?;
        inject_store_fault(&store)?;
        Ok(Arc::new(store))
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
                Failure::usage(format!(
                    "`{text}` is not a duration for keeping runs: write it as 30m, 2h or 30d"
                ))
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
/// `full@effect_recorded`): only in debug builds, read here at the edge and handed to the store.
// edge: a test's fault injection, read where the program starts; absent from release builds.
#[allow(clippy::disallowed_methods)]
fn inject_store_fault(store: &SqliteStore) -> Result<(), Failure> {
    #[cfg(debug_assertions)]
    if let Some(fault) = std::env::var("REEL_STORE_FAULT")
        .ok()
        .filter(|f| !f.is_empty())
    {
        store
            .inject_fault(&fault)
            .map_err(|e| Failure::usage(format!("REEL_STORE_FAULT: {e}")))?;
    }
    #[cfg(not(debug_assertions))]
    let _ = store;
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
        let p = Project::find(&nested, None).unwrap();
        assert_eq!(p.store_dir, dir.path().join(".reel"));
        assert_eq!(p.keep_for(None).unwrap(), 30 * 86_400_000);
        let home = Project::find(&nested, Some(OsStr::new("/elsewhere"))).unwrap();
        assert_eq!(home.store_dir, PathBuf::from("/elsewhere"));
    }

    #[test]
    fn a_bad_reel_toml_says_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("reel.toml"), "[runs]\nkeepfor = 1\n").unwrap();
        let err = Project::find(dir.path(), None).unwrap_err();
        assert!(err.messages[0].contains("reel.toml"), "{:?}", err.messages);
    }
}
