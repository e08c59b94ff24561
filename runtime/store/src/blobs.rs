//! Values kept apart from the database: one file per digest under `blobs/`, written atomically.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::api::StoreError;

/// Values whose canonical JSON is longer than this are stored as files.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// Whether `s` has the shape of a digest (64 lowercase hex digits), so it is safe in a path.
pub(crate) fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The 32 bytes a digest's hex stands for, used as a compact key in memory.
pub(crate) fn digest_key(digest: &str) -> Option<[u8; 32]> {
    if !is_digest(digest) {
        return None;
    }
    let mut key = [0u8; 32];
    for (byte, pair) in key.iter_mut().zip(digest.as_bytes().chunks_exact(2)) {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        *byte = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(key)
}

/// Where a value's file lives: `blobs/<first two hex digits>/<digest>`.
pub(crate) fn blob_path(blobs: &Path, digest: &str) -> PathBuf {
    blobs.join(&digest[..2]).join(digest)
}

fn io_error(path: &Path, e: io::Error) -> StoreError {
    // A full disk is named as such, as SQLite's is: it is what the person must fix.
    if e.kind() == io::ErrorKind::StorageFull {
        return StoreError::DiskFull(format!("{}: {e}", path.display()));
    }
    StoreError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Writes a value's file if it is not there yet: to a temporary file, synced, then renamed
/// into place, and the directory synced. It is always synced because the row that marks the
/// value external can reach the disk (at a checkpoint) independently of the file.
pub(crate) fn write_blob(blobs: &Path, digest: &str, text: &str) -> Result<(), StoreError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let sub = blobs.join(&digest[..2]);
    let path = sub.join(digest);
    if !sub.is_dir() {
        match crate::private::create_dir(&sub) {
            Ok(()) => sync_dir(blobs).map_err(|e| io_error(blobs, e))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error(&sub, e)),
        }
    }
    if path.is_file() {
        // Another writer renamed it into place, synced; its directory entry may not be yet.
        return sync_dir(&sub).map_err(|e| io_error(&sub, e));
    }
    let tmp = sub.join(format!(
        ".{digest}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = crate::private::create_new_file(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)
    })();
    if let Err(e) = written {
        // Best effort: a leftover temporary file is harmless, only untidy.
        let _ = fs::remove_file(&tmp);
        return Err(io_error(&path, e));
    }
    sync_dir(&sub).map_err(|e| io_error(&sub, e))
}

/// A value's file, or `None` when it does not exist.
pub(crate) fn read_blob(blobs: &Path, digest: &str) -> Result<Option<String>, StoreError> {
    let path = blob_path(blobs, digest);
    match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(&path, e)),
    }
}

/// Removes a value's file; one already gone is no error.
pub(crate) fn remove_blob(blobs: &Path, digest: &str) -> Result<(), StoreError> {
    let path = blob_path(blobs, digest);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(&path, e)),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn digests_are_checked_before_use_in_paths() {
        assert!(is_digest(D));
        assert!(!is_digest("../../etc/passwd"));
        assert!(!is_digest(&D.to_uppercase()));
        assert!(!is_digest(&D[1..]));
        let key = digest_key(D).unwrap();
        assert_eq!(key[0], 0x01);
        assert_eq!(key[31], 0xef);
        assert_eq!(digest_key("zz"), None);
    }

    #[test]
    fn writes_atomically_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("blobs")).unwrap();
        let blobs = dir.path().join("blobs");
        assert_eq!(read_blob(&blobs, D).unwrap(), None);
        write_blob(&blobs, D, "[1,2,3]").unwrap();
        write_blob(&blobs, D, "[1,2,3]").unwrap();
        assert_eq!(read_blob(&blobs, D).unwrap().as_deref(), Some("[1,2,3]"));
        let names: Vec<_> = fs::read_dir(blobs.join("01"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![D.to_string()]);
    }
}
