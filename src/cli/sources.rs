//! Source files on disk: which `.reel` files the paths name, reading them, loading them into the
//! database, and writing files atomically.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reel_compiler::{RootDb, SourceFile};

use super::Failure;

/// The extension of Reel source files.
const EXTENSION: &str = "reel";

/// A source file read from disk (or stdin): the path as the user gave it and its text.
#[derive(Debug)]
pub struct Source {
    /// The path, as given or as found under a given directory.
    pub path: PathBuf,
    /// The path as diagnostics and FlowSpec spans show it.
    pub display: String,
    /// The UTF-8 text, without the byte order mark it may begin with.
    pub text: String,
    /// Whether the file began with a UTF-8 byte order mark (as some Windows editors save):
    /// it is no part of the text the compiler reads (columns are counted as editors count
    /// them, without it), and `reel fmt` writes it back.
    pub bom: bool,
}

impl Source {
    /// Loads this source into `db` as a new input, its tools running in the file's directory.
    pub fn load(&self, db: &RootDb) -> SourceFile {
        SourceFile::new(
            db,
            self.display.clone(),
            tool_dir(&self.path),
            Arc::from(self.text.as_str()),
        )
    }
}

/// The absolute directory of `path`, where the tools a file declares run.
fn tool_dir(path: &Path) -> String {
    let absolute = fs::canonicalize(path).unwrap_or_else(|_| {
        // The file was just read, so this is only reached for stdin or a file deleted meanwhile;
        // the current directory is the best guess left.
        std::env::current_dir()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    });
    absolute
        .parent()
        .unwrap_or(Path::new("/"))
        .to_string_lossy()
        .into_owned()
}

/// A kind of file a command looks for in the paths it is given.
pub struct FileKind {
    /// How people call it (`.reel`, `.cassette.json`).
    pub name: &'static str,
    /// What such files hold, for the hint of an error (`Reel flows`).
    pub holds: &'static str,
    /// Whether a path's name is of this kind.
    pub matches: fn(&Path) -> bool,
}

/// Reel flows.
pub const FLOWS: FileKind = FileKind {
    name: ".reel",
    holds: "Reel flows",
    matches: has_reel_extension,
};

/// The `.reel` files `paths` name: files as given, directories searched recursively (sorted).
///
/// Below a given directory, hidden entries (`.git`, the `.reel` store) and symbolic links to
/// directories are skipped. A path given twice is checked once. Every path that is missing,
/// unreadable, not a `.reel` file, or a directory without `.reel` files is reported (exit 2).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    collect_kind(paths, &FLOWS)
}

/// As [`collect`], for files of `kind`.
pub fn collect_kind(paths: &[PathBuf], kind: &FileKind) -> Result<Vec<PathBuf>, Failure> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        match fs::metadata(path) {
            Err(e) => problems.push(cannot_read(path, &e)),
            Ok(meta) if meta.is_dir() => {
                let mut found = Vec::new();
                match walk(path, kind, &mut found) {
                    Err(e) => problems.push(e),
                    Ok(()) if found.is_empty() => problems.push(format!(
                        "no {} files in directory `{}`; give a directory that holds {}",
                        kind.name,
                        path.display(),
                        kind.holds
                    )),
                    Ok(()) => {
                        found.sort();
                        files.extend(found);
                    }
                }
            }
            Ok(meta) if meta.is_file() => {
                if (kind.matches)(path) {
                    files.push(path.clone());
                } else {
                    problems.push(format!(
                        "`{}` is not a {name} file; give {name} files or directories that hold them",
                        path.display(),
                        name = kind.name
                    ));
                }
            }
            Ok(_) => problems.push(format!(
                "`{}` is neither a {} file nor a directory",
                path.display(),
                kind.name
            )),
        }
    }
    if !problems.is_empty() {
        return Err(Failure::usage_all(problems));
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(f.clone()));
    Ok(files)
}

fn has_reel_extension(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == EXTENSION)
}

fn walk(dir: &Path, kind: &FileKind, found: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir).map_err(|e| cannot_read(dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| cannot_read(dir, &e))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let ty = entry.file_type().map_err(|e| cannot_read(&path, &e))?;
        if ty.is_dir() {
            walk(&path, kind, found)?;
        } else if (kind.matches)(&path) && (ty.is_file() || (ty.is_symlink() && path.is_file())) {
            found.push(path);
        }
    }
    Ok(())
}

/// Reads every file in `paths`; all that cannot be read are reported together (exit 2).
pub fn read_all(paths: &[PathBuf]) -> Result<Vec<Source>, Failure> {
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        match read(path) {
            Ok(source) => sources.push(source),
            Err(message) => problems.push(message),
        }
    }
    if problems.is_empty() {
        Ok(sources)
    } else {
        Err(Failure::usage_all(problems))
    }
}

/// Reads one file as UTF-8 text.
fn read(path: &Path) -> Result<Source, String> {
    let bytes = fs::read(path).map_err(|e| cannot_read(path, &e))?;
    let display = path.display().to_string();
    let (text, bom) = utf8(bytes, &display)?;
    Ok(Source {
        path: path.to_path_buf(),
        display,
        text,
        bom,
    })
}

/// Reads all of stdin as UTF-8 text, shown as `<stdin>`.
pub fn read_stdin() -> Result<Source, Failure> {
    let mut bytes = Vec::new();
    io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::usage(format!("cannot read standard input: {e}")))?;
    let display = "<stdin>".to_string();
    let (text, bom) = utf8(bytes, &display).map_err(Failure::usage)?;
    Ok(Source {
        path: PathBuf::from("-"),
        display,
        text,
        bom,
    })
}

/// The byte order mark some editors begin a UTF-8 file with.
pub const BOM: &str = "\u{feff}";

/// The text of `bytes`, without a leading byte order mark, and whether there was one.
fn utf8(bytes: Vec<u8>, display: &str) -> Result<(String, bool), String> {
    let mut text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "`{display}` is not UTF-8 text (invalid byte at offset {}); save Reel files as UTF-8",
            e.utf8_error().valid_up_to()
        )
    })?;
    let bom = text.starts_with(BOM);
    if bom {
        text.drain(..BOM.len());
    }
    Ok((text, bom))
}

/// `cannot read `path`: reason`, with the reason in words rather than an OS error number.
pub fn cannot_read(path: &Path, error: &io::Error) -> String {
    let reason = match error.kind() {
        io::ErrorKind::NotFound => {
            return format!("`{}` does not exist; check the path", path.display());
        }
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => error.to_string(),
    };
    format!("cannot read `{}`: {reason}", path.display())
}

/// Bytes handed to one `write` by [`write_atomically`] and [`write_atomically_with`], and the
/// size of [`super::ui::write_stdout`]'s buffer.
pub const WRITTEN_AT_ONCE: usize = 64 << 10;

/// Replaces the contents of `path` with `contents` so that a reader sees the old file or the new
/// one, never a mix: the text goes to a temporary file beside it that is then renamed over it.
///
/// A symbolic link is followed, so the link stays and its target changes; an existing file keeps
/// its permissions. `durable`: the new text is on disk before it replaces the old (for what a
/// user wrote or recorded, which nothing can make again); a build's output is not synced, as no
/// compiler syncs its output: the sync of a 12 MB FlowSpec cost 7 ms on a quiet disk and up to
/// 150 ms on a busy one, and a crash can only leave a file that `reel build` makes again.
pub fn write_atomically(path: &Path, contents: &[u8], durable: bool) -> io::Result<()> {
    write_atomically_with(path, durable, |temp| {
        // In pieces: one `write` of a 100,000-step FlowSpec (120 MB) took the kernel 0.85-1.0 s
        // on the machine of `bench/README.md`'s session 21, where writes of 64 KiB each took
        // 0.15 s for the same bytes.
        for piece in contents.chunks(WRITTEN_AT_ONCE) {
            temp.write_all(piece)?;
        }
        Ok(())
    })
}

/// [`write_atomically`] of what `write` writes, for a text too big to assemble first: the
/// writer is buffered in pieces of [`WRITTEN_AT_ONCE`] (a concrete type, so that a serializer's
/// many small writes are copies into the buffer rather than calls through a `dyn Write`).
pub fn write_atomically_with(
    path: &Path,
    durable: bool,
    write: impl FnOnce(&mut io::BufWriter<&mut fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".reel-").suffix(".tmp");
    let existing = fs::metadata(&target).ok().map(|m| m.permissions());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // tempfile creates files readable by the owner only; a new output file should get the
        // usual permissions, which the umask then narrows.
        if existing.is_none() {
            builder.permissions(fs::Permissions::from_mode(0o666));
        }
    }
    let mut temp = builder.tempfile_in(&dir)?;
    {
        let mut buffered = io::BufWriter::with_capacity(WRITTEN_AT_ONCE, temp.as_file_mut());
        write(&mut buffered)?;
        buffered.flush()?;
    }
    if let Some(permissions) = existing {
        temp.as_file().set_permissions(permissions)?;
    }
    if durable {
        temp.as_file().sync_all()?;
    }
    temp.persist(&target).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "flow a {}\n").unwrap();
    }

    #[test]
    fn directories_are_searched_recursively_and_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in [
            "b.reel",
            "a/z.reel",
            "a/y/x.reel",
            "c.txt",
            ".hidden/h.reel",
        ] {
            touch(&root.join(name));
        }
        let files = collect(&[root.to_path_buf()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a/y/x.reel", "a/z.reel", "b.reel"]);
    }

    #[test]
    fn a_file_given_twice_is_collected_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.reel");
        touch(&file);
        assert_eq!(collect(&[file.clone(), file.clone()]).unwrap(), [file]);
    }

    #[test]
    fn every_bad_path_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let text = dir.path().join("notes.txt");
        fs::write(&text, "").unwrap();
        let missing = dir.path().join("missing.reel");
        let failure = collect(&[empty, text, missing]).unwrap_err();
        assert_eq!(failure.status, super::super::Status::Usage);
        assert_eq!(failure.messages.len(), 3);
        assert!(failure.messages[0].starts_with("no .reel files in directory"));
        assert!(failure.messages[1].contains("is not a .reel file"));
        assert!(failure.messages[2].contains("does not exist"));
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.reel");
        fs::write(&file, b"flow \xff").unwrap();
        let failure = read_all(&[file]).unwrap_err();
        assert!(failure.messages[0].contains("not UTF-8 text (invalid byte at offset 5)"));
    }

    #[test]
    fn atomic_writes_replace_the_contents_and_keep_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.reel");
        fs::write(&file, "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        }
        write_atomically(&file, b"new", true).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o640);
        }
        let leftovers = fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }

    #[cfg(unix)]
    #[test]
    fn atomic_writes_through_a_symlink_keep_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.reel");
        let link = dir.path().join("link.reel");
        fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomically(&link, b"new", true).unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
    }
}
