//! Where a project's store lives: the one rule the CLI and the language server share.
//!
//! The store is `.reel/` beside the nearest `reel.toml` found from a directory upward, else
//! `.reel/` in that directory; `REEL_HOME` names the store directory itself and overrides both.
//! A store URL (`REEL_STORE_URL`, else `[store] url` in `reel.toml`) puts the store on
//! PostgreSQL instead ([`locate_store`]), and [`StoreAt::open_read_only`] opens either.
//! `REEL_HOME` and `REEL_STORE_URL` are read where the program starts and handed in, so this
//! module reads no environment.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_store::{PgAuth, PgStore, SqliteStore, Store, StoreError};
use serde::Deserialize;

/// The environment variable that puts the store on PostgreSQL (it wins over `reel.toml`).
pub const REEL_STORE_URL: &str = "REEL_STORE_URL";

/// The project's settings from `reel.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[runs]`
    #[serde(default)]
    pub runs: RunsConfig,
    /// `[store]`
    #[serde(default)]
    pub store: StoreConfig,
}

/// `[store]` in `reel.toml`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `url = "postgres://…"`: the store on PostgreSQL.
    pub url: Option<String>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("StoreConfig")
            .field("url", &self.url.as_deref().map(reel_store::redact_url))
            .finish()
    }
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

/// Why a project's settings cannot be used (the message never holds a store URL's password).
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// `reel.toml` cannot be read.
    #[error("cannot read `{path}`: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// `reel.toml` is not valid TOML or has settings Reel does not know.
    #[error("`{path}` is not valid: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The store URL is not a PostgreSQL URL; `from` says where it came from.
    #[error(
        "{from} is not a PostgreSQL URL: write it as postgres://user@host/database \
         (without it, the store is SQLite under .reel/)"
    )]
    NotPostgres {
        /// `REEL_STORE_URL` or `` `[store] url` in reel.toml ``.
        from: &'static str,
    },
}

impl ProjectError {
    /// The stable code (`project.read`, `project.invalid`, `project.store-url`).
    pub fn code(&self) -> &'static str {
        match self {
            ProjectError::Read { .. } => "project.read",
            ProjectError::Invalid { .. } => "project.invalid",
            ProjectError::NotPostgres { .. } => "project.store-url",
        }
    }
}

/// The settings of the project around `dir`: its nearest `reel.toml`, else the defaults.
pub fn read_config(dir: &Path) -> Result<Config, ProjectError> {
    let Some(path) = project_file(dir) else {
        return Ok(Config::default());
    };
    let text = std::fs::read_to_string(&path).map_err(|e| ProjectError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| ProjectError::Invalid {
        path: path.display().to_string(),
        message: e.message().to_string(),
    })
}

/// Where a project's store is: a SQLite store directory, or a PostgreSQL database.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum StoreAt {
    /// SQLite under this directory (`.reel/`).
    Dir(PathBuf),
    /// PostgreSQL at this URL (which may hold a password: show it with [`StoreAt::shown`]).
    Url(String),
}

impl std::fmt::Debug for StoreAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreAt({})", self.shown())
    }
}

impl StoreAt {
    /// Where the store is, as it may be shown: the directory, or the URL without its password.
    pub fn shown(&self) -> String {
        match self {
            StoreAt::Dir(dir) => dir.display().to_string(),
            StoreAt::Url(url) => reel_store::redact_url(url),
        }
    }

    /// Opens the existing store for reading only; `auth` gives PostgreSQL's password when its
    /// URL has none.
    pub fn open_read_only(&self, auth: &PgAuth) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            StoreAt::Dir(dir) => SqliteStore::open_read_only(dir).map(|s| Arc::new(s) as _),
            StoreAt::Url(url) => PgStore::open_read_only_with(url, auth).map(|s| Arc::new(s) as _),
        }
    }
}

/// The store of the project around `dir`: PostgreSQL when `store_url` (`REEL_STORE_URL`'s
/// value) or else `[store] url` in its `config` names one, else the SQLite store directory
/// ([`store_dir`], given `REEL_HOME`'s value). Empty values count as unset.
pub fn locate_store(
    dir: &Path,
    reel_home: Option<&OsStr>,
    store_url: Option<&str>,
    config: &Config,
) -> Result<StoreAt, ProjectError> {
    let (url, from) = match store_url.filter(|u| !u.is_empty()) {
        Some(url) => (Some(url), REEL_STORE_URL),
        None => (
            config.store.url.as_deref().filter(|u| !u.is_empty()),
            "`[store] url` in reel.toml",
        ),
    };
    match url {
        Some(url) if reel_store::is_postgres_url(url) => Ok(StoreAt::Url(url.to_string())),
        Some(_) => Err(ProjectError::NotPostgres { from }),
        None => Ok(StoreAt::Dir(store_dir(dir, reel_home))),
    }
}

/// The environment variable that names the store directory.
pub const REEL_HOME: &str = "REEL_HOME";

/// The nearest `reel.toml` from `dir` upward, if any.
pub fn project_file(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join("reel.toml"))
        .find(|candidate| candidate.is_file())
}

/// The store directory for `dir`, given the value of `REEL_HOME` (an empty value counts as
/// unset).
pub fn store_dir(dir: &Path, reel_home: Option<&OsStr>) -> PathBuf {
    if let Some(home) = reel_home.filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    match project_file(dir) {
        Some(file) => file.parent().unwrap_or(dir).join(".reel"),
        None => dir.join(".reel"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_sits_beside_the_nearest_reel_toml_unless_reel_home_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(store_dir(&sub, None), sub.join(".reel"));
        assert_eq!(project_file(&sub), None);
        std::fs::write(dir.path().join("reel.toml"), "").unwrap();
        assert_eq!(store_dir(&sub, None), dir.path().join(".reel"));
        assert_eq!(project_file(&sub), Some(dir.path().join("reel.toml")));
        assert_eq!(
            store_dir(&sub, Some(OsStr::new(""))),
            dir.path().join(".reel")
        );
        assert_eq!(
            store_dir(&sub, Some(OsStr::new("/elsewhere"))),
            PathBuf::from("/elsewhere")
        );
    }

    #[test]
    fn a_store_url_comes_from_the_environment_before_reel_toml() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(
            locate_store(&sub, None, None, &read_config(&sub).unwrap()).unwrap(),
            StoreAt::Dir(sub.join(".reel"))
        );
        std::fs::write(
            dir.path().join("reel.toml"),
            "[store]\nurl = \"postgres://team:hunter2@db.example/reel\"\n",
        )
        .unwrap();
        let config = read_config(&sub).unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        let at = locate_store(&sub, Some(OsStr::new("/elsewhere")), None, &config).unwrap();
        assert_eq!(
            at,
            StoreAt::Url("postgres://team:hunter2@db.example/reel".into())
        );
        assert_eq!(at.shown(), "postgres://team@db.example:5432/reel");
        assert!(!format!("{at:?}").contains("hunter2"));
        let env = locate_store(&sub, None, Some("postgres://me@other/runs"), &config).unwrap();
        assert_eq!(env, StoreAt::Url("postgres://me@other/runs".into()));
        // An empty variable counts as unset.
        let empty = locate_store(&sub, None, Some(""), &config).unwrap();
        assert_eq!(empty.shown(), "postgres://team@db.example:5432/reel");
        let err = locate_store(&sub, None, Some("mysql://x/y"), &config).unwrap_err();
        assert_eq!(err.code(), "project.store-url");
        assert!(
            err.to_string().starts_with("REEL_STORE_URL is not"),
            "{err}"
        );
        std::fs::write(dir.path().join("reel.toml"), "[store]\nurl = \"/var/db\"\n").unwrap();
        let err = locate_store(&sub, None, None, &read_config(&sub).unwrap()).unwrap_err();
        assert!(err.to_string().contains("[store] url"), "{err}");
        std::fs::write(dir.path().join("reel.toml"), "[store]\nuri = 1\n").unwrap();
        let err = read_config(&sub).unwrap_err();
        assert_eq!(err.code(), "project.invalid");
        assert!(err.to_string().contains("reel.toml"), "{err}");
    }
}
