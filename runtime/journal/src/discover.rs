//! Where a project's store lives: the one rule the CLI and the language server share.
//!
//! The store is `.reel/` beside the nearest `reel.toml` found from a directory upward, else
//! `.reel/` in that directory; `REEL_HOME` names the store directory itself and overrides both.
//! `REEL_HOME` is read where the program starts and handed in, so this module reads no
//! environment.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

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
}
