//! Running the built `reel` and the small files the tests give it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The reference examples (`examples/reference`), which every version of reel must check and build.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/reference"))
}

/// Every `.reel` file of the reference examples, sorted.
pub fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(examples_dir())
        .expect("examples/reference is readable")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "reel"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "examples/reference holds .reel files");
    files
}

/// The database of the store in `dir/.reel`, opened directly: to look at rows no command
/// shows, or to damage one as a disk or a hand might.
pub fn store_db(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(".reel/reel.db")).unwrap()
}

/// Makes journal row `seq` of run `run` in the store in `dir/.reel` bytes that are not text:
/// a row no reel can read, a hole.
pub fn damage_journal_row(dir: &Path, run: &str, seq: i64) {
    let changed = store_db(dir)
        .execute(
            "UPDATE journal SET data = CAST(X'FFFE7B' AS TEXT) WHERE run = ?1 AND seq = ?2",
            rusqlite::params![run, seq],
        )
        .unwrap();
    assert_eq!(changed, 1, "run {run} has a row {seq}");
}

/// What one run of `reel` did.
#[derive(Debug)]
pub struct Run {
    /// The exit status.
    pub status: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// A command line for `reel`, run in `dir`, with no color variables from the test's environment.
pub fn reel(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reel"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE");
    command
}

/// Runs `command` with `stdin` as its standard input.
pub fn run_with_stdin(mut command: Command, stdin: &str) -> Run {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("reel starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    Run::from(child.wait_with_output().unwrap())
}

impl From<std::process::Output> for Run {
    fn from(output: std::process::Output) -> Run {
        Run {
            status: output.status.code().expect("reel exits normally"),
            stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        }
    }
}

/// Runs `command` with an empty standard input.
pub fn run(command: Command) -> Run {
    run_with_stdin(command, "")
}

/// Runs `reel ARGS` in `dir`.
pub fn reel_in(dir: &Path, args: &[&str]) -> Run {
    run(reel(dir, args))
}

/// Writes `text` to `dir/name` (creating directories) and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, text).unwrap();
    path
}

/// A fresh temporary directory.
pub fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// A well-formed file with one flow and no warnings.
pub const GOOD: &str =
    "flow hello {\n  input name: string = \"world\"\n  output \"hello, ${input.name}\"\n}\n";

/// A file with one flow whose pure step nothing uses: a warning, no error.
pub const WARNING: &str = "flow w {\n  step unused = \"x\"\n  output 1\n}\n";

/// A file with one syntax error.
pub const SYNTAX_ERROR: &str = "flow a {\n  output 1 +\n}\n";

/// A file with several syntax errors.
pub const SYNTAX_ERRORS: &str = "flow broken {\n  input n: int\n  step s = [1, 2\n  step t = \"open\n  step u = echo { timeout: 5q }\n  output { a: s, b: t, c: u, d: input.n }\n}\n";

/// A file with two flows.
pub const TWO_FLOWS: &str = "flow hello {\n  output 1\n}\n\nflow bye {\n  output 2\n}\n";

/// Whether `text` holds an ANSI escape sequence.
pub fn has_ansi(text: &str) -> bool {
    text.contains('\u{1b}')
}

/// Runs `reel ARGS` in `dir` with extra environment variables.
pub fn reel_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = reel(dir, args);
    for (k, v) in env {
        command.env(k, v);
    }
    run(command)
}

/// A request a [`TestServer`] received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The method.
    pub method: String,
    /// The path and query.
    pub url: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Received {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A local HTTP server on 127.0.0.1 that records every request and answers from a script.
pub struct TestServer {
    /// The base URL, `http://127.0.0.1:PORT`.
    pub base: String,
    /// What it received, in order.
    pub received: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
    server: std::sync::Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How the server answers one request: status and JSON body.
pub type Responder = Box<dyn Fn(&Received, usize) -> (u16, String) + Send>;

impl TestServer {
    /// Starts a server answering with `respond(request, how many requests came before)`.
    pub fn start(respond: Responder) -> TestServer {
        let server =
            std::sync::Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("a local port"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (srv, rec) = (server.clone(), received.clone());
        let thread = std::thread::spawn(move || {
            for mut request in srv.incoming_requests() {
                let mut body = String::new();
                let _ = request.as_reader().read_to_string(&mut body);
                let r = Received {
                    method: request.method().to_string(),
                    url: request.url().to_string(),
                    headers: request
                        .headers()
                        .iter()
                        .map(|h| {
                            (
                                h.field.as_str().as_str().to_lowercase(),
                                h.value.as_str().to_string(),
                            )
                        })
                        .collect(),
                    body,
                };
                let n = {
                    let mut all = rec.lock().unwrap();
                    all.push(r.clone());
                    all.len() - 1
                };
                let (status, text) = respond(&r, n);
                let header =
                    tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let _ = request.respond(
                    tiny_http::Response::from_string(text)
                        .with_status_code(status)
                        .with_header(header),
                );
            }
        });
        TestServer {
            base: format!("http://127.0.0.1:{port}"),
            received,
            server,
            thread: Some(thread),
        }
    }

    /// What it received so far.
    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Parses stdout as JSON.
pub fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("stdout is JSON ({e}): {run:?}"))
}

/// The idempotency keys `calls.log` in `dir` recorded, one per call of a test tool that logs
/// its `REEL_IDEMPOTENCY_KEY` there.
pub fn calls(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A user tool's script that logs its key and, the first time, kills the `reel` that called it
/// (`kill -9 $PPID`), so the kill lands between the effect's start and its record; else pays.
pub const KILLING_PAY_SH: &str = r#"read input
echo "$REEL_IDEMPOTENCY_KEY" >> calls.log
if [ ! -e fired ]; then touch fired; kill -9 $PPID; exit 1; fi
echo '{"paid": 5}'
"#;

/// Which store a test's processes share.
#[derive(Clone, Copy, Debug)]
pub enum Store {
    /// SQLite under the test's directory.
    Sqlite,
    /// A fresh database on the test server (`REEL_TEST_POSTGRES_URL`).
    Postgres,
}

/// A store, as the environment variable each process that uses it is given.
pub struct Home {
    /// `REEL_HOME` or `REEL_STORE_URL`.
    pub var: &'static str,
    /// The store's directory or URL.
    pub value: String,
}

impl Home {
    /// The store of kind `store` for a test in `dir`: `.reel` there, or a fresh database.
    pub fn new(store: Store, dir: &Path) -> Home {
        match store {
            Store::Sqlite => Home {
                var: "REEL_HOME",
                value: dir.join(".reel").to_str().unwrap().to_string(),
            },
            Store::Postgres => Home {
                var: "REEL_STORE_URL",
                value: crate::postgres::database(),
            },
        }
    }

    /// The variable and its value, for [`reel_env`].
    pub fn env(&self) -> (&str, &str) {
        (self.var, &self.value)
    }
}
