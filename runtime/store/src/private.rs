//! The store is its owner's alone: run data holds tool inputs and outputs, so `.reel/` is created
//! readable by its owner only (directories 0700, files 0600), and a store that others can read
//! is reported with the command that fixes it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::path::Path;

/// Creates `dir` (and its missing parents, as the umask says) with the store's own directory
/// made private. An existing directory is left as it is: `exposure` reports it.
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    match private_dir_builder().create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other,
    }
}

/// Creates one directory inside the store, private.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    private_dir_builder().create(dir)
}

/// Creates a new file that must not exist yet, readable and writable by its owner only.
pub(crate) fn create_new_file(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

fn private_dir_builder() -> DirBuilder {
    #[allow(unused_mut)]
    let mut builder = DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

/// What others than the owner may do with the store, if anything: the first of its directory
/// and its database that others can read, and the command that makes the store private.
pub fn exposure(dir: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for path in [dir.to_path_buf(), dir.join("reel.db")] {
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Some(format!(
                    "the store {} can be read by other users of this machine ({} has mode \
                     {mode:04o}), and run data holds tool inputs and outputs; make it private \
                     with `chmod -R go-rwx {}`",
                    dir.display(),
                    path.display(),
                    dir.display()
                ));
            }
        }
        None
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_store_is_private_and_an_open_one_is_reported_with_its_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("project/.reel");
        create_dir_all(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        let file = dir.join("reel.db");
        drop(create_new_file(&file).unwrap());
        assert_eq!(mode(&file), 0o600);
        assert_eq!(exposure(&dir), None);

        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let report = exposure(&dir).expect("a readable database is reported");
        assert!(report.contains("mode 0644"), "{report}");
        assert!(report.contains("chmod -R go-rwx"), "{report}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(exposure(&dir).unwrap().contains("mode 0755"));
    }
}
