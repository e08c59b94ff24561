//! `fs.read` and `fs.write`: UTF-8 text files, relative paths resolved against the run directory,
//! writes made atomic by writing a temporary file beside the target and renaming it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::api::{RESULT_LIMIT, ToolCall, ToolError, ToolOutput, codes};
use crate::args::Args;
use crate::text::Secrets;

/// Reads a text file.
pub(crate) async fn read(call: &ToolCall, secrets: &Secrets) -> Result<ToolOutput, ToolError> {
    let args = Args::new(&call.tool, &call.args, secrets);
    let path = args.string("path")?.to_string();
    let full = resolve(call, &path)?;
    // At most one byte past the limit is read, so a file that never ends (`/dev/zero`, a
    // pipe) or a huge one is refused without being held.
    let mut bytes = Vec::new();
    let file = tokio::fs::File::open(&full)
        .await
        .map_err(|e| io_error("read", &path, &full, &e))?;
    file.take(RESULT_LIMIT as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| io_error("read", &path, &full, &e))?;
    if bytes.len() > RESULT_LIMIT {
        return Err(ToolError::new(
            codes::FS_TOO_LARGE,
            format!(
                "`{path}` ({}) holds more than {} MiB, more than a result may hold; read a \
                 smaller file, or have a command process it and print a summary",
                full.display(),
                RESULT_LIMIT >> 20
            ),
            false,
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        ToolError::new(
            codes::FS_IO,
            format!(
                "`{path}` ({}) is not UTF-8 text: invalid bytes at offset {}; fs.read reads text \
                 files only",
                full.display(),
                e.utf8_error().valid_up_to()
            ),
            false,
        )
    })?;
    Ok(ToolOutput {
        value: json!({ "text": text }),
        log: String::new(),
    })
}

/// Writes a text file atomically, creating missing parent directories.
pub(crate) async fn write(call: &ToolCall, secrets: &Secrets) -> Result<ToolOutput, ToolError> {
    let args = Args::new(&call.tool, &call.args, secrets);
    let path = args.string("path")?.to_string();
    let text = args.string("text")?.to_string();
    let full = resolve(call, &path)?;
    let target = full.clone();
    let bytes = text.len();
    tokio::task::spawn_blocking(move || write_atomic(&target, text.as_bytes()))
        .await
        .map_err(|e| {
            ToolError::new(
                codes::FS_IO,
                format!("writing `{path}` stopped unexpectedly: {e}"),
                false,
            )
        })?
        .map_err(|e| io_error("write", &path, &full, &e))?;
    Ok(ToolOutput {
        value: json!({ "bytes": bytes }),
        log: String::new(),
    })
}

/// The absolute path of `path`; an empty path names no file.
fn resolve(call: &ToolCall, path: &str) -> Result<PathBuf, ToolError> {
    if path.is_empty() {
        return Err(ToolError::new(
            codes::ARGS,
            format!("argument `path` of `{}` is empty; name a file", call.tool),
            false,
        ));
    }
    Ok(call.run_dir.join(path))
}

fn io_error(action: &str, path: &str, full: &Path, error: &std::io::Error) -> ToolError {
    let hint = match error.kind() {
        std::io::ErrorKind::NotFound => {
            "; check the path (relative paths start at the run directory)"
        }
        std::io::ErrorKind::PermissionDenied => "; check the file's permissions",
        _ => "",
    };
    ToolError::new(
        codes::FS_IO,
        format!(
            "cannot {action} `{path}` ({}): {error}{hint}",
            full.display()
        ),
        false,
    )
}

/// Distinguishes temporary files of concurrent writes from one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `data` to a temporary file in the target's directory, then renames it over the target,
/// so readers see the old content or the new, never a part.
fn write_atomic(target: &Path, data: &[u8]) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path does not name a file",
        ));
    };
    fs::create_dir_all(dir)?;
    let temp = dir.join(format!(
        ".{}.reel-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(data)?;
        // Keep the permissions of a file being replaced, rather than the temp file's defaults.
        if let Ok(meta) = fs::metadata(target)
            && meta.is_file()
        {
            file.set_permissions(meta.permissions())?;
        }
        file.sync_all()?;
        fs::rename(&temp, target)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written?;
    // Persist the rename itself; a directory that cannot be synced is no reason to fail.
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use reel_flowspec::ToolKind;
    use serde_json::{Map, Value};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::ToolHost;

    fn fs_call(tool: &str, args: Value, dir: &Path) -> ToolCall {
        ToolCall {
            tool: tool.to_string(),
            kind: ToolKind::Read,
            args: args.as_object().cloned().unwrap_or_else(Map::new),
            idempotency_key: None,
            run_dir: dir.to_path_buf(),
            env: Default::default(),
            user: None,
            timeout: None,
            secrets: Default::default(),
        }
    }

    async fn run(call: ToolCall) -> Result<ToolOutput, ToolError> {
        ToolHost::new().call(call, CancellationToken::new()).await
    }

    #[tokio::test]
    async fn write_then_read_relative_to_the_run_directory() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(fs_call(
            "fs.write",
            json!({"path": "out/report.txt", "text": "héllo\n"}),
            dir.path(),
        ))
        .await
        .unwrap();
        assert_eq!(out.value, json!({"bytes": 7}));
        assert_eq!(
            fs::read_to_string(dir.path().join("out/report.txt")).unwrap(),
            "héllo\n"
        );
        let out = run(fs_call(
            "fs.read",
            json!({"path": "out/report.txt"}),
            dir.path(),
        ))
        .await
        .unwrap();
        assert_eq!(out.value, json!({"text": "héllo\n"}));
    }

    #[tokio::test]
    async fn write_replaces_atomically_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir.path().join("a.txt"), fs::Permissions::from_mode(0o640))
                .unwrap();
        }
        let handles: Vec<_> = (0..8)
            .map(|i| {
                tokio::spawn(run(fs_call(
                    "fs.write",
                    json!({"path": "a.txt", "text": format!("version {i}")}),
                    dir.path(),
                )))
            })
            .collect();
        for handle in handles {
            let result = handle.await.unwrap();
            assert!(result.is_ok(), "{result:?}");
        }
        let text = fs::read_to_string(dir.path().join("a.txt")).unwrap();
        assert!(text.starts_with("version "), "{text}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join("a.txt"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o640);
        }
    }

    #[tokio::test]
    async fn readers_never_see_a_partial_write() {
        let dir = tempfile::tempdir().unwrap();
        let size = 1 << 20;
        fs::write(dir.path().join("big.txt"), "a".repeat(size)).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (path, done) = (dir.path().join("big.txt"), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::Relaxed) {
                    let text = fs::read_to_string(&path).unwrap();
                    let first = text.chars().next().unwrap();
                    assert_eq!(text.len(), size);
                    assert!(text.chars().all(|c| c == first), "a mixed file was read");
                    reads += 1;
                }
                reads
            })
        };
        for round in 0..20 {
            let text = if round % 2 == 0 { "b" } else { "a" }.repeat(size);
            let call = fs_call(
                "fs.write",
                json!({"path": "big.txt", "text": text}),
                dir.path(),
            );
            run(call).await.unwrap();
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }

    /// A file that never ends, and one past the limit: refused without being held whole.
    #[tokio::test]
    async fn a_file_past_the_result_limit_is_refused_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("long.txt");
        File::create(&long)
            .unwrap()
            .set_len(RESULT_LIMIT as u64 + 1)
            .unwrap();
        for path in ["/dev/zero", "long.txt"] {
            let err = run(fs_call("fs.read", json!({ "path": path }), dir.path()))
                .await
                .unwrap_err();
            assert_eq!(err.code, codes::FS_TOO_LARGE, "{path}: {}", err.message);
            assert!(!err.retryable);
            assert!(err.message.contains("more than 64 MiB"), "{}", err.message);
        }
        // As long as the limit is a result.
        File::create(&long)
            .unwrap()
            .set_len(RESULT_LIMIT as u64)
            .unwrap();
        let out = run(fs_call(
            "fs.read",
            json!({ "path": "long.txt" }),
            dir.path(),
        ))
        .await
        .unwrap();
        assert_eq!(out.value["text"].as_str().unwrap().len(), RESULT_LIMIT);
    }

    #[tokio::test]
    async fn read_errors_say_which_file_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(fs_call(
            "fs.read",
            json!({"path": "missing.txt"}),
            dir.path(),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::FS_IO);
        assert!(!err.retryable);
        assert!(err.message.contains("missing.txt"), "{}", err.message);
        assert!(err.message.contains("No such file"), "{}", err.message);

        fs::write(dir.path().join("bin"), [b'o', b'k', 0xff, 0xfe]).unwrap();
        let err = run(fs_call("fs.read", json!({"path": "bin"}), dir.path()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::FS_IO);
        assert!(err.message.contains("not UTF-8"), "{}", err.message);
        assert!(err.message.contains("offset 2"), "{}", err.message);

        let err = run(fs_call("fs.read", json!({"path": ""}), dir.path()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::ARGS);
    }

    #[tokio::test]
    async fn writing_over_a_directory_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        let err = run(fs_call(
            "fs.write",
            json!({"path": "d", "text": "x"}),
            dir.path(),
        ))
        .await
        .unwrap_err();
        assert_eq!(err.code, codes::FS_IO);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the temp file was left behind");
    }
}
