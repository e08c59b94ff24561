//! Running one command for `exec` and user tools: environment, stdin, output, timeout,
//! cancellation, and killing the command's whole process group so no process outlives its call.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{RESULT_LIMIT, ToolError, codes};
use crate::text::duration;

/// How long output pipes may stay open after the command exited before whatever still holds
/// them (a background process it left in its group) is killed.
const GRACE: Duration = Duration::from_millis(250);

/// Environment variables with this prefix (any case) hold secrets and are never passed on.
const SECRET_PREFIX: &[u8] = b"REEL_SECRET_";

/// The variables of `reel`'s own environment that every command sees, and no others: enough
/// to find programs and speak the user's language, so that a run does not depend on what the
/// launching shell happened to export and nothing leaks into a tool by accident.
pub const BASE_VARIABLES: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "TZ"];

/// What every command's environment starts from (see [`BASE_VARIABLES`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaseEnvironment(Vec<(OsString, OsString)>);

impl BaseEnvironment {
    /// The base variables as this process has them: built where the program starts.
    pub fn from_process() -> BaseEnvironment {
        BaseEnvironment::from_pairs(
            BASE_VARIABLES
                .iter()
                .filter_map(|name| std::env::var_os(name).map(|value| ((*name).into(), value))),
        )
    }

    /// A base of the given variables; any outside [`BASE_VARIABLES`] are left out.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (OsString, OsString)>) -> BaseEnvironment {
        BaseEnvironment(
            pairs
                .into_iter()
                .filter(|(name, _)| BASE_VARIABLES.iter().any(|b| name == b))
                .collect(),
        )
    }
}

/// One command to run.
pub(crate) struct Spawn {
    /// What the messages call it (``exec `wc -w a.txt` `` or ``tool `score` ``).
    pub label: String,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The working directory.
    pub dir: PathBuf,
    /// What the environment starts from.
    pub base: BaseEnvironment,
    /// Variables set over the base, later ones winning: the flow's declared `env`, then the
    /// step's own `env`.
    pub env: Vec<(String, String)>,
    /// Passed as `REEL_IDEMPOTENCY_KEY` unless `env` sets that variable itself.
    pub idempotency_key: Option<String>,
    /// Written to stdin, which is then closed; `None` gives the command no stdin at all.
    pub stdin: Option<Vec<u8>>,
    /// The attempt's time limit.
    pub timeout: Option<Duration>,
}

/// A command that ran to its end.
pub(crate) struct Finished {
    /// How it exited.
    pub status: ExitStatus,
    /// Its stdout, decoded as UTF-8 (invalid bytes replaced).
    pub stdout: String,
    /// Its stderr, decoded as UTF-8 (invalid bytes replaced).
    pub stderr: String,
}

/// Which variables a child must not see: every `REEL_SECRET_*`.
pub(crate) fn hidden_vars(inherited: impl Iterator<Item = OsString>) -> Vec<OsString> {
    inherited
        .filter(|name| {
            let bytes = name.as_encoded_bytes();
            bytes.len() >= SECRET_PREFIX.len()
                && bytes[..SECRET_PREFIX.len()].eq_ignore_ascii_case(SECRET_PREFIX)
        })
        .collect()
}

/// The program to start: a relative path with a slash is taken relative to `dir`, because
/// what the OS would resolve it against is not fixed (see `std::process::Command::new`); a bare
/// name is looked up on the base's `PATH`, the one the command itself sees.
///
/// Looking it up here, not in the child, also keeps spawning cheap: with a `PATH` of its own in
/// the child's environment, std cannot use `posix_spawn` for a bare name and forks the whole
/// process instead (twice as slow for a short command). A name not found is left as it is, so
/// the spawn fails with the system's own error.
fn program(argv0: &str, dir: &Path, base: &BaseEnvironment) -> PathBuf {
    let path = Path::new(argv0);
    if path.is_relative() && argv0.contains('/') {
        return dir.join(path);
    }
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let search = base
        .0
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, v)| v);
    search
        .and_then(|paths| which::which_in(argv0, Some(paths), dir).ok())
        .unwrap_or_else(|| path.to_path_buf())
}

/// Runs the command to its end, or until the timeout or the token stops it.
pub(crate) async fn run(spawn: Spawn, cancel: &CancellationToken) -> Result<Finished, ToolError> {
    let Some((argv0, rest)) = spawn.argv.split_first() else {
        return Err(ToolError::new(
            codes::EXEC_SPAWN,
            format!(
                "{} has no command to run; give at least the program",
                spawn.label
            ),
            false,
        ));
    };
    if !spawn.dir.is_dir() {
        return Err(ToolError::new(
            codes::EXEC_SPAWN,
            format!(
                "{} cannot start: its working directory {} does not exist or is not a directory",
                spawn.label,
                spawn.dir.display()
            ),
            false,
        ));
    }
    let mut command = Command::new(program(argv0, &spawn.dir, &spawn.base));
    command
        .args(rest)
        .current_dir(&spawn.dir)
        .stdin(if spawn.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(target_os = "linux")]
    die_with_parent(&mut command);
    // Nothing of this process's environment but the base: only this call's key, and never a
    // secret's variable, whatever a flow declares.
    command.env_clear();
    command.envs(spawn.base.0.iter().map(|(k, v)| (k, v)));
    if let Some(key) = &spawn.idempotency_key {
        command.env("REEL_IDEMPOTENCY_KEY", key);
    }
    command.envs(spawn.env.iter().map(|(k, v)| (k, v)));
    for name in hidden_vars(spawn.env.iter().map(|(name, _)| OsString::from(name))) {
        command.env_remove(name);
    }

    let deadline = spawn.timeout.map(|t| Instant::now() + t);
    let mut child = command.spawn().map_err(|e| {
        if e.raw_os_error() == Some(libc::E2BIG) {
            // Not the program's absence, and not the machine's to fix: the same call fails
            // again however often it is tried.
            let bytes: usize = spawn.argv.iter().map(|a| a.len() + 1).sum::<usize>()
                + (spawn.base.0.iter())
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>()
                + (spawn.env.iter())
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>();
            return ToolError::new(
                codes::EXEC_TOO_LONG,
                format!(
                    "{} cannot start `{argv0}`: its arguments and environment ({bytes} bytes) \
                     are longer than this system lets one process have; give the data on \
                     `stdin` rather than in `cmd` or `env`",
                    spawn.label
                ),
                false,
            );
        }
        ToolError::new(
            codes::EXEC_SPAWN,
            format!(
                "{} cannot start `{argv0}` in {}: {e}; check that the program exists, is \
                 executable and is on PATH",
                spawn.label,
                spawn.dir.display()
            ),
            false,
        )
    })?;
    let mut group = Group(child.id());

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let too_much = tokio::sync::Notify::new();
    let ending = {
        let io = async {
            tokio::join!(
                drain(stdout, &mut out, Keep::Head(RESULT_LIMIT), &too_much),
                drain(stderr, &mut err, Keep::Tail(STDERR_KEPT), &too_much),
                feed(stdin, spawn.stdin.as_deref())
            )
        };
        tokio::pin!(io);
        let mut io_done = false;
        let ending = loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break Ending::Canceled,
                _ = until(deadline) => break Ending::TimedOut,
                _ = too_much.notified() => break Ending::TooMuchOutput,
                _ = &mut io, if !io_done => io_done = true,
                status = child.wait() => break Ending::Exited(status),
            }
        };
        match ending {
            Ending::Exited(Ok(_)) => {
                // The leader is reaped, so the group lives on only through processes it left
                // behind; those holding the output open still pin the id, so killing it is safe.
                let leftovers = group.0.take();
                if !io_done && tokio::time::timeout(GRACE, &mut io).await.is_err() {
                    kill_group(leftovers);
                    let _ = tokio::time::timeout(GRACE, &mut io).await;
                }
            }
            Ending::Exited(Err(_))
            | Ending::Canceled
            | Ending::TimedOut
            | Ending::TooMuchOutput => {
                // Kill before reaping, so the group id cannot yet belong to anyone else.
                group.kill();
                let _ = child.start_kill();
                let _ = child.wait().await;
                group.0 = None;
                if !io_done {
                    let _ = tokio::time::timeout(GRACE, &mut io).await;
                }
            }
        }
        ending
    };
    let stdout = String::from_utf8_lossy(&out).into_owned();
    let stderr = String::from_utf8_lossy(&err).into_owned();
    let stopped = |code, retryable, message: String| ToolError {
        log: stderr.clone(),
        ..ToolError::new(code, message, retryable)
    };
    match ending {
        Ending::Exited(Ok(status)) => Ok(Finished {
            status,
            stdout,
            stderr,
        }),
        Ending::Exited(Err(e)) => Err(stopped(
            codes::EXEC_SPAWN,
            false,
            format!("{} could not be waited for: {e}", spawn.label),
        )),
        Ending::TooMuchOutput => Err(stopped(
            codes::EXEC_OUTPUT,
            false,
            format!(
                "{} printed more than {} MiB on stdout and was killed; write a large result to \
                 a file and print its path, or a smaller summary",
                spawn.label,
                RESULT_LIMIT >> 20
            ),
        )),
        Ending::Canceled => Err(stopped(
            codes::CANCELED,
            false,
            format!("{} was canceled and killed before it finished", spawn.label),
        )),
        Ending::TimedOut => Err(stopped(
            codes::TIMEOUT,
            true,
            format!(
                "{} did not finish within its timeout of {} and was killed; raise the step's \
                 `timeout` if it needs longer",
                spawn.label,
                duration(spawn.timeout.unwrap_or_default())
            ),
        )),
    }
}

/// How the wait for a command ended.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    Canceled,
    TimedOut,
    /// It printed more than [`RESULT_LIMIT`] on stdout.
    TooMuchOutput,
}

/// The command's process group, killed on drop unless its leader has been reaped (after which
/// the id could be reused).
struct Group(Option<u32>);

impl Group {
    fn kill(&self) {
        kill_group(self.0);
    }
}

/// Makes the command die (SIGKILL) when the thread of `reel` that started it dies, which on
/// the tool host's long-lived runtime threads means when `reel` itself dies, SIGKILL included.
/// A call in flight then dies with the process that made it, as it would in-process, instead of
/// making its effect late, after a resume has made the same call again; its outcome is unknown
/// and a resume makes it again with its first key, as for any call in flight at a crash.
/// Processes the command starts itself are not covered (the kernel clears the setting in
/// them); those the call's own cleanup reaches by its group.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only prctl, getppid and
    // _exit, which are async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // `reel` may have died between the fork and the prctl: then the signal will never
            // come, and the command must not start.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::_exit(137);
            }
            Ok(())
        });
    }
}

/// Sends SIGKILL to the process group `pgid`.
fn kill_group(pgid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pgid) = pgid.and_then(|id| libc::pid_t::try_from(id).ok()) {
        // SAFETY: killpg only sends a signal. Callers pass the group the child leads
        // (`process_group(0)`) while its id cannot have been reused: the leader is not reaped
        // yet, or processes left in the group still hold it.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pgid;
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How much of the end of a command's stderr is kept (its log): what came before is dropped.
pub const STDERR_KEPT: usize = 1 << 20;

/// What a drained pipe keeps.
#[derive(Clone, Copy)]
enum Keep {
    /// Everything up to this many bytes; more is too much (`too_much` is told).
    Head(usize),
    /// The last this many bytes.
    Tail(usize),
}

/// Reads a pipe to its end into `buf`, keeping what `keep` says; what was read stays in `buf`
/// if this is dropped early.
async fn drain(
    pipe: Option<impl AsyncRead + Unpin>,
    buf: &mut Vec<u8>,
    keep: Keep,
    too_much: &tokio::sync::Notify,
) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                match keep {
                    Keep::Head(limit) if buf.len() > limit => {
                        too_much.notify_one();
                        return;
                    }
                    // Dropped in halves, so that keeping the tail costs a copy per
                    // `limit` bytes read, not per chunk.
                    Keep::Tail(limit) if buf.len() > 2 * limit => {
                        buf.drain(..buf.len() - limit);
                    }
                    _ => {}
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Writes `data` to stdin and closes it; a command that exits without reading it all is fine.
async fn feed(stdin: Option<ChildStdin>, data: Option<&[u8]>) {
    if let (Some(mut stdin), Some(data)) = (stdin, data) {
        let _ = stdin.write_all(data).await;
        let _ = stdin.shutdown().await;
    }
}

/// Resolves at `deadline`, or never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How a command's exit reads in a message: `exited with status 3`, `was killed by signal 9`.
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended with {status}")
}

/// Whether a process still runs a second after it was killed (a zombie does not count: it is
/// dead, waiting to be reaped by whoever is its parent now).
#[cfg(test)]
pub(crate) fn alive(pid: &str) -> bool {
    let runs = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    };
    // A killed process closes its pipes before it turns into a zombie, so give it a moment.
    for _ in 0..100 {
        if !runs() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(argv: &[&str], dir: &Path) -> Spawn {
        Spawn {
            label: "test".to_string(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
            base: BaseEnvironment::from_process(),
            env: Vec::new(),
            idempotency_key: None,
            stdin: None,
            timeout: None,
        }
    }

    #[test]
    fn secret_variables_are_hidden_in_any_case() {
        let names = [
            "PATH",
            "REEL_SECRET_TOKEN",
            "reel_secret_x",
            "REEL_SECRE",
            "REEL_RUN",
        ];
        let hidden = hidden_vars(names.iter().map(OsString::from));
        assert_eq!(
            hidden,
            vec![OsString::from("REEL_SECRET_TOKEN"), "reel_secret_x".into()]
        );
    }

    #[test]
    fn relative_programs_with_a_slash_resolve_in_the_working_directory() {
        let dir = Path::new("/srv/flows");
        let none = BaseEnvironment::default();
        assert_eq!(
            program("./t.sh", dir, &none),
            PathBuf::from("/srv/flows/./t.sh")
        );
        assert_eq!(
            program("tools/t.py", dir, &none),
            PathBuf::from("/srv/flows/tools/t.py")
        );
        assert_eq!(program("python3", dir, &none), PathBuf::from("python3"));
        assert_eq!(program("/bin/sh", dir, &none), PathBuf::from("/bin/sh"));
    }

    #[test]
    fn bare_names_are_found_on_the_base_path_the_command_sees() {
        let bin = tempfile::tempdir().unwrap();
        let tool = bin.path().join("only-here");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let base = BaseEnvironment::from_pairs([("PATH".into(), bin.path().as_os_str().into())]);
        assert_eq!(program("only-here", Path::new("/"), &base), tool);
        // Not on that PATH: left as it is, for the spawn to fail with the system's error.
        assert_eq!(
            program("not-anywhere-zz", Path::new("/"), &base),
            PathBuf::from("not-anywhere-zz")
        );
    }

    #[tokio::test]
    async fn large_stdin_and_output_do_not_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spawn(&["cat"], dir.path());
        let data = vec![b'x'; 1 << 20];
        s.stdin = Some(data.clone());
        let done = run(s, &CancellationToken::new()).await.unwrap();
        assert!(done.status.success());
        assert_eq!(done.stdout.len(), data.len());
    }

    #[tokio::test]
    async fn a_command_that_prints_without_end_is_killed_past_the_stdout_limit() {
        let dir = tempfile::tempdir().unwrap();
        // `yes` never stops; its stderr says something first, which the log keeps.
        let s = spawn(&["sh", "-c", "echo starting >&2; exec yes"], dir.path());
        let Err(e) = run(s, &CancellationToken::new()).await else {
            panic!("a command printing without end must be stopped");
        };
        assert_eq!(e.code, codes::EXEC_OUTPUT, "{e:?}");
        assert!(!e.retryable);
        assert!(e.message.contains("64 MiB"), "{}", e.message);
        assert_eq!(e.log, "starting\n");
    }

    #[tokio::test]
    async fn only_the_end_of_a_long_stderr_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        // 3 MiB of `e` lines, then a last line: about 1 MiB is kept, ending with it.
        let s = spawn(
            &[
                "sh",
                "-c",
                "head -c 3145728 /dev/zero | tr '\\0' e >&2; echo last >&2",
            ],
            dir.path(),
        );
        let done = run(s, &CancellationToken::new()).await.unwrap();
        assert!(
            done.stderr.ends_with("last\n"),
            "{}",
            &done.stderr[done.stderr.len() - 10..]
        );
        assert!(done.stderr.len() >= STDERR_KEPT && done.stderr.len() <= 2 * STDERR_KEPT);
    }

    #[tokio::test]
    async fn background_processes_holding_the_output_are_killed_after_exit() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let s = spawn(
            &["sh", "-c", "sleep 30 & echo $! > bg; echo done"],
            dir.path(),
        );
        let done = run(s, &CancellationToken::new()).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(done.stdout, "done\n");
        let pid = std::fs::read_to_string(dir.path().join("bg")).unwrap();
        assert!(!alive(pid.trim()), "background sleep {pid} still runs");
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let s = spawn(
            &[
                "sh",
                "-c",
                "echo $$ > pids; sleep 30 & echo $! >> pids; wait",
            ],
            dir.path(),
        );
        let pids = dir.path().join("pids");
        let cancel = CancellationToken::new();
        let mut call = Box::pin(run(s, &cancel));
        for _ in 0..300 {
            if std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .count()
                == 2
            {
                break;
            }
            let _ = tokio::time::timeout(Duration::from_millis(10), &mut call).await;
        }
        drop(call);
        let pids = std::fs::read_to_string(&pids).unwrap();
        assert_eq!(pids.lines().count(), 2, "{pids}");
        for pid in pids.lines() {
            assert!(!alive(pid), "{pid} still runs");
        }
    }

    #[tokio::test]
    async fn a_command_line_past_the_system_limit_says_so_and_where_data_goes_instead() {
        // Four MiB of arguments: past Linux's limit of a quarter of the stack limit (and of
        // 128 KiB for one argument).
        let long = "a".repeat(100_000);
        let args: Vec<&str> = std::iter::once("true")
            .chain(std::iter::repeat_n(long.as_str(), 40))
            .collect();
        let s = spawn(&args, Path::new("/"));
        let err = run(s, &CancellationToken::new()).await.err().unwrap();
        assert_eq!(err.code, codes::EXEC_TOO_LONG, "{}", err.message);
        assert!(!err.retryable);
        assert!(
            err.message.contains(" bytes) are longer than"),
            "{}",
            err.message
        );
        assert!(err.message.contains("`stdin`"), "{}", err.message);
    }

    #[tokio::test]
    async fn a_missing_working_directory_is_a_spawn_error() {
        let s = spawn(&["true"], Path::new("/nonexistent/reel/dir"));
        let err = run(s, &CancellationToken::new()).await.err().unwrap();
        assert_eq!(err.code, codes::EXEC_SPAWN);
        assert!(
            err.message.contains("/nonexistent/reel/dir"),
            "{}",
            err.message
        );
    }
}
