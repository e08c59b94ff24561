//! The commands the server executes (`workspace/executeCommand`), so that every lens and code
//! action works in any client: Neovim, a test client, VS Code.
//!
//! The server runs no flow itself (it links neither the engine nor the tool host): a command that
//! changes a run starts the `reel` binary, `reel run`, `reel signal`, `reel cancel`, `reel
//! resume` or `reel fork`, in the document's directory, detached from the server's stdio, its
//! output in a log file the user can open. The inline results then follow the run as they follow
//! a run started in a terminal (the live refresh in `server.rs`, `hints::fingerprint`). A command
//! that fails is reported to the client (`window/showMessage`) with `reel`'s own message.
//!
//! Every command takes the document's URI and a flow name first; see [`ALL`] for the list and
//! `docs/editor.md` for their arguments.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reel_store::{RunRow, RunStatus};
use serde_json::{Value, json};
use tower_lsp_server::Client;
use tower_lsp_server::jsonrpc::{Error, ErrorCode, Result};
use tower_lsp_server::lsp_types::{MessageActionItem, MessageType, Uri};

use crate::hints;
use crate::preview::Previews;
use crate::runs::{self, Pins, Stores};

/// `[uri, flow]` → the flow's recent runs, newest first, then its cassettes (for a run picker).
pub const LIST_RUNS: &str = "reel.server.listRuns";
/// `[uri, flow, id or null]`: the run, or the cassette (`cassette:PATH`), whose
/// results the hints show (`null`: the latest run).
pub const SHOW_RUN: &str = "reel.server.showRun";
/// `[uri, flow]`: asks the user which run to show (`window/showMessageRequest`), then shows it.
pub const PICK_RUN: &str = "reel.server.pickRun";
/// `[uri, flow, inputs?]`: runs the flow from the saved file (`reel run FILE --flow FLOW`).
pub const RUN: &str = "reel.server.run";
/// `[uri, flow, run?, name?, payload?]`: sends a run its signal, and continues it if it waits.
pub const SIGNAL: &str = "reel.server.signal";
/// `[uri, flow, run?]`: cancels a run (`reel cancel`).
pub const CANCEL: &str = "reel.server.cancel";
/// `[uri, flow, run?]`: continues a run (`reel resume`).
pub const RESUME: &str = "reel.server.resume";
/// `[uri, flow, run?]`: turns the fork preview on and answers the first check.
pub const PREVIEW_FORK: &str = "reel.server.previewFork";
/// `[uri, flow]`: turns the fork preview off.
pub const STOP_PREVIEW: &str = "reel.server.stopPreview";
/// `[uri, flow, run?]`: forks a run with the saved file (`reel fork RUN --flow FILE`).
pub const FORK: &str = "reel.server.fork";

/// Every command the server executes, as `initialize` announces them.
pub const ALL: [&str; 10] = [
    LIST_RUNS,
    SHOW_RUN,
    PICK_RUN,
    RUN,
    SIGNAL,
    CANCEL,
    RESUME,
    PREVIEW_FORK,
    STOP_PREVIEW,
    FORK,
];

/// How many runs the run picker lists.
const PICKER_RUNS: usize = 50;
/// How many runs a client without a picker of its own is offered (as message buttons).
const MESSAGE_RUNS: usize = 10;

/// Starts the `reel` binary for the server: in a given directory, with the store the server
/// reads, without a terminal's colours, its output to a log or returned.
#[derive(Clone)]
pub struct Launcher {
    exe: Option<PathBuf>,
    reel_home: Option<OsString>,
    scratch: PathBuf,
    /// Numbers the logs and preview files of this server.
    count: Arc<AtomicU64>,
}

impl Launcher {
    /// A launcher of `exe` (none: every command says the server cannot start `reel`), with
    /// `REEL_HOME` and the server's scratch directory.
    pub fn new(exe: Option<PathBuf>, reel_home: Option<OsString>, scratch: PathBuf) -> Self {
        Launcher {
            exe,
            reel_home,
            scratch,
            count: Arc::default(),
        }
    }

    /// A new path in the scratch directory, `NUMBER-name`, its directory made.
    pub fn scratch_file(&self, name: &str) -> std::result::Result<PathBuf, String> {
        std::fs::create_dir_all(&self.scratch)
            .map_err(|e| format!("cannot make the directory {}: {e}", self.scratch.display()))?;
        let n = self.count.fetch_add(1, Ordering::Relaxed);
        Ok(self.scratch.join(format!("{n:04}-{name}")))
    }

    /// `reel ARGS` in `cwd`, stdin closed, output piped.
    pub fn command(
        &self,
        cwd: &Path,
        args: &[&OsStr],
    ) -> std::result::Result<tokio::process::Command, String> {
        let exe = self.exe.as_ref().ok_or_else(|| {
            "the language server does not know where the `reel` binary is".to_string()
        })?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("--color").arg("never").args(args).current_dir(cwd);
        if let Some(home) = &self.reel_home {
            cmd.env(reel_journal::discover::REEL_HOME, home);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(cmd)
    }

    /// Runs `reel ARGS` in `cwd` to its end; `Err` with `reel`'s message when it fails.
    pub async fn output(&self, cwd: &Path, args: &[&OsStr]) -> std::result::Result<String, String> {
        let out = self
            .command(cwd, args)?
            .output()
            .await
            .map_err(|e| format!("cannot start `reel`: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(message(&String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// Starts `reel ARGS` in `cwd` in the background, in a process group of its own (so that it
    /// outlives the editor's Ctrl-C), its stdout and stderr to a new log; the log's path.
    /// `client` is told when it ends with a failure, with `reel`'s message and the log.
    pub fn start_logged(
        &self,
        cwd: &Path,
        args: &[&OsStr],
        what: &str,
        client: Client,
    ) -> std::result::Result<PathBuf, String> {
        let log = self.scratch_file(&format!("{}.log", what.replace(' ', "-")))?;
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot write the log {}: {e}", log.display()))?;
        let err = file
            .try_clone()
            .map_err(|e| format!("cannot write the log {}: {e}", log.display()))?;
        let mut cmd = self.command(cwd, args)?;
        cmd.stdout(file).stderr(err);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start `reel`: {e}"))?;
        let (what, path) = (what.to_string(), log.clone());
        tokio::spawn(async move {
            let Ok(status) = child.wait().await else {
                return;
            };
            if status.success() {
                return;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Exit 1 is the flow's own failure (shown inline too); anything else is the command's.
            let typ = if status.code() == Some(1) {
                MessageType::WARNING
            } else {
                MessageType::ERROR
            };
            client
                .show_message(
                    typ,
                    format!("{what}: {} (log: {})", message(&text), path.display()),
                )
                .await;
        });
        Ok(log)
    }
}

/// What `reel` said went wrong, from its stderr: its `error:` lines, else its last line.
pub fn message(stderr: &str) -> String {
    let errors: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("error:"))
        .map(str::trim)
        .collect();
    if !errors.is_empty() {
        return errors.join("; ");
    }
    stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("it failed without a message")
        .to_string()
}

/// What a command is given besides its arguments: the server's state and how to reach the client.
pub struct Env {
    /// The client, for messages and refreshes.
    pub client: Client,
    /// The stores the server reads.
    pub stores: Stores,
    /// The runs the user pinned.
    pub pins: Pins,
    /// The fork previews.
    pub previews: Previews,
    /// How `reel` is started.
    pub launcher: Launcher,
    /// Now, for the ages of runs.
    pub now_ms: i64,
    /// The client asks for new inlay hints when told.
    pub refresh_hints: bool,
    /// The client asks for new code lenses when told.
    pub refresh_lenses: bool,
    /// The document's text as the editor holds it, when it is open.
    pub open_text: Option<Arc<str>>,
}

/// The document and flow a command is about, found on disk with its store.
struct Target {
    uri: Uri,
    flow: String,
    /// The document's path as given.
    path: PathBuf,
    /// Its canonical path, as runs record it.
    source: String,
    /// The directory `reel` is started in: the document's.
    cwd: PathBuf,
    /// The store directory.
    store_dir: PathBuf,
}

/// The arguments of a command: `[uri, flow, …]`.
struct Args<'a> {
    command: &'a str,
    values: &'a [Value],
}

impl Args<'_> {
    fn text(&self, i: usize) -> Option<String> {
        self.values
            .get(i)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn invalid(&self, what: &str) -> Error {
        Error::invalid_params(format!("`{}` takes {what}", self.command))
    }
}

/// Executes `command` with `arguments`.
pub async fn execute(env: &Env, command: &str, arguments: &[Value]) -> Result<Option<Value>> {
    let args = Args {
        command,
        values: arguments,
    };
    if !ALL.contains(&command) {
        return Err(Error::invalid_params(format!(
            "unknown command `{command}`; this server knows {}",
            ALL.iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let (Some(uri), Some(flow)) = (args.text(0), args.text(1)) else {
        return Err(args.invalid("the document's URI and a flow name"));
    };
    let target = target(env, &uri, flow)?;
    let answer = match command {
        LIST_RUNS => Ok(list_runs(env, target).await),
        SHOW_RUN => match args.text(2) {
            // A cassette is checked first: one that is not there, or of another flow, is an
            // error (one that cannot be read is shown, its lens saying why).
            Some(id) if runs::is_cassette(&id) => {
                match runs::cassette_at(&target.source, &target.flow, &id) {
                    Ok(_) => {
                        show_run(env, &target, Some(id)).await;
                        Ok(Value::Null)
                    }
                    Err(why) => Err(why),
                }
            }
            id => {
                show_run(env, &target, id).await;
                Ok(Value::Null)
            }
        },
        PICK_RUN => pick_run(env, &target).await,
        RUN => run(env, &target, args.values.get(2)).await,
        SIGNAL => signal(env, &target, &args).await,
        CANCEL => cancel(env, &target, args.text(2)).await,
        RESUME => resume(env, &target, args.text(2)),
        PREVIEW_FORK => preview(env, &target, args.text(2)).await,
        STOP_PREVIEW => {
            env.previews.stop(target.uri.as_str(), &target.flow);
            refresh(env).await;
            Ok(Value::Null)
        }
        FORK => fork(env, &target, args.text(2)).await,
        _ => unreachable!("every command of ALL is handled"),
    };
    match answer {
        Ok(v) => Ok(Some(v)),
        Err(message) => {
            env.client
                .show_message(MessageType::ERROR, format!("Reel: {message}"))
                .await;
            Err(Error {
                code: ErrorCode::ServerError(-32803),
                message: message.into(),
                data: None,
            })
        }
    }
}

fn target(env: &Env, uri: &str, flow: String) -> Result<Target> {
    let not_on_disk = || Error::invalid_params(format!("`{uri}` is not a file on disk"));
    let parsed = uri.parse::<Uri>().map_err(|_| not_on_disk())?;
    let path = tower_lsp_server::UriExt::to_file_path(&parsed)
        .map(|p| p.into_owned())
        .ok_or_else(not_on_disk)?;
    let (source, store_dir) = hints::locate_path(&path, &env.stores).ok_or_else(not_on_disk)?;
    let cwd = Path::new(&source)
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    Ok(Target {
        uri: parsed,
        flow,
        path,
        source,
        cwd,
        store_dir,
    })
}

/// The run `id` of the target's flow, or the one its hints show.
fn the_run(env: &Env, t: &Target, id: Option<String>) -> std::result::Result<RunRow, String> {
    let store = env
        .stores
        .get(&t.store_dir)
        .ok_or_else(|| format!("flow `{}` has no runs yet", t.flow))?;
    match id {
        Some(id) => store
            .run(&id)
            .ok()
            .flatten()
            .ok_or_else(|| format!("there is no run `{id}`")),
        None => runs::shown(store.as_ref(), &env.pins, &t.source, &t.flow)
            .map(|(run, _)| run)
            .ok_or_else(|| format!("flow `{}` has no runs yet", t.flow)),
    }
}

/// Asks the client for new hints and lenses (one that cannot asks again on its own).
async fn refresh(env: &Env) {
    if env.refresh_hints {
        let _ = env.client.inlay_hint_refresh().await;
    }
    if env.refresh_lenses {
        let _ = env.client.code_lens_refresh().await;
    }
}

async fn list_runs(env: &Env, t: Target) -> Value {
    let stores = env.stores.clone();
    let now = env.now_ms;
    let listed = tokio::task::spawn_blocking(move || {
        let mut listed = match stores.get(&t.store_dir) {
            Some(store) => runs::recent(store.as_ref(), &t.source, &t.flow, PICKER_RUNS)
                .into_iter()
                .map(|run| {
                    let inputs = runs::inputs(store.as_ref(), &run.id);
                    runs::picker_entry(&run, inputs, now)
                })
                .collect::<Vec<_>>(),
            None => Vec::new(),
        };
        listed.extend(
            runs::cassettes(&t.source, &t.flow)
                .iter()
                .map(runs::cassette_entry),
        );
        listed
    })
    .await
    .unwrap_or_default();
    Value::Array(listed)
}

async fn show_run(env: &Env, t: &Target, run: Option<String>) {
    env.pins.set(&t.source, &t.flow, run);
    refresh(env).await;
}

/// The run picker of a client without one: the recent runs as the buttons of a message.
async fn pick_run(env: &Env, t: &Target) -> std::result::Result<Value, String> {
    const LATEST: &str = "Follow the latest run";
    let store = env.stores.get(&t.store_dir);
    let recent = store
        .map(|s| runs::recent(s.as_ref(), &t.source, &t.flow, MESSAGE_RUNS))
        .unwrap_or_default();
    let cassettes = runs::cassettes(&t.source, &t.flow);
    if recent.is_empty() && cassettes.is_empty() {
        return Err(format!("flow `{}` has no runs yet", t.flow));
    }
    let mut choices: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut actions = vec![MessageActionItem {
        title: LATEST.into(),
        properties: Default::default(),
    }];
    choices.insert(LATEST.into(), None);
    for run in &recent {
        let title = format!(
            "{} · {} · {}",
            run.id,
            run.status.as_str(),
            runs::age(env.now_ms, run.created_at)
        );
        choices.insert(title.clone(), Some(run.id.clone()));
        actions.push(MessageActionItem {
            title,
            properties: Default::default(),
        });
    }
    for file in cassettes.iter().take(MESSAGE_RUNS) {
        let status = file.status().unwrap_or("unreadable");
        let title = format!("cassette {} · {status}", file.rel);
        choices.insert(title.clone(), Some(file.id()));
        actions.push(MessageActionItem {
            title,
            properties: Default::default(),
        });
    }
    let picked = env
        .client
        .show_message_request(
            MessageType::INFO,
            format!("Show which run of `{}` beside its steps?", t.flow),
            Some(actions),
        )
        .await
        .ok()
        .flatten();
    let Some(picked) = picked.and_then(|p| choices.get(&p.title).cloned()) else {
        return Ok(Value::Null);
    };
    show_run(env, t, picked.clone()).await;
    Ok(json!({ "run": picked }))
}

/// Warns that a command uses the saved file when the editor holds other text.
async fn warn_unsaved(env: &Env, t: &Target, what: &str) {
    let Some(open) = &env.open_text else { return };
    let saved = std::fs::read_to_string(&t.path).unwrap_or_default();
    if saved != **open {
        env.client
            .show_message(
                MessageType::WARNING,
                format!(
                    "Reel: {what} uses {} as saved; the unsaved changes are not in it",
                    t.path.display()
                ),
            )
            .await;
    }
}

/// The flow's inputs given to a command (`{"name": value}`), in a file for `reel run --inputs`.
fn inputs_file(
    launcher: &Launcher,
    inputs: Option<&Value>,
) -> std::result::Result<Option<PathBuf>, String> {
    match inputs {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(fields)) => {
            let path = launcher.scratch_file("inputs.json")?;
            std::fs::write(&path, Value::Object(fields.clone()).to_string())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(Some(path))
        }
        Some(other) => Err(format!("the inputs must be a JSON object, not {other}")),
    }
}

async fn run(env: &Env, t: &Target, inputs: Option<&Value>) -> std::result::Result<Value, String> {
    warn_unsaved(env, t, "the run").await;
    let mut args: Vec<OsString> = vec![
        "run".into(),
        t.path.clone().into(),
        "--flow".into(),
        t.flow.clone().into(),
    ];
    if let Some(file) = inputs_file(&env.launcher, inputs)? {
        args.extend(["--inputs".into(), file.into()]);
    }
    let started = start(env, t, &args, &format!("run {}", t.flow))?;
    // The hints follow the new run.
    show_run(env, t, None).await;
    Ok(started)
}

/// Starts `reel ARGS` for a command in the background: what the command answers, the log's path
/// and the command line (`reel ARGS`, for a client that shows it above the log).
fn start(
    env: &Env,
    t: &Target,
    args: &[OsString],
    what: &str,
) -> std::result::Result<Value, String> {
    let argv: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
    let log = env
        .launcher
        .start_logged(&t.cwd, &argv, what, env.client.clone())?;
    let mut line = vec![Value::from("reel")];
    line.extend(args.iter().map(|a| Value::from(a.to_string_lossy())));
    Ok(json!({ "log": log, "command": line, "cwd": t.cwd }))
}

async fn signal(env: &Env, t: &Target, args: &Args<'_>) -> std::result::Result<Value, String> {
    let run = the_run(env, t, args.text(2))?;
    let name = match args.text(3) {
        Some(name) => name,
        None => match run.waiting_on.as_slice() {
            [one] => one.clone(),
            [] => return Err(format!("run {} waits for no signal", run.id)),
            many => {
                return Err(format!(
                    "run {} waits for several signals ({}); name one",
                    run.id,
                    many.join(", ")
                ));
            }
        },
    };
    let payload = args.values.get(4).cloned().unwrap_or(Value::Null);
    let payload = payload.to_string();
    env.launcher
        .output(
            &t.cwd,
            &[
                OsStr::new("signal"),
                OsStr::new(&run.id),
                OsStr::new(&name),
                OsStr::new(&payload),
            ],
        )
        .await?;
    // A run that waits for it is continued now, as `reel worker` would.
    let mut answer = json!({ "run": run.id, "signal": name });
    if run.status == RunStatus::Waiting && run.waiting_on.contains(&name) {
        let args: Vec<OsString> = vec!["resume".into(), run.id.clone().into()];
        let started = start(env, t, &args, &format!("resume {}", run.id))?;
        merge(&mut answer, started);
    }
    Ok(answer)
}

async fn cancel(env: &Env, t: &Target, id: Option<String>) -> std::result::Result<Value, String> {
    let run = the_run(env, t, id)?;
    let said = env
        .launcher
        .output(&t.cwd, &[OsStr::new("cancel"), OsStr::new(&run.id)])
        .await;
    // `reel cancel` tells its outcome on stderr, and fails only when it could not.
    said?;
    refresh(env).await;
    Ok(json!({ "run": run.id }))
}

fn resume(env: &Env, t: &Target, id: Option<String>) -> std::result::Result<Value, String> {
    let run = the_run(env, t, id)?;
    let args: Vec<OsString> = vec!["resume".into(), run.id.clone().into()];
    let mut answer = json!({ "run": run.id });
    merge(
        &mut answer,
        start(env, t, &args, &format!("resume {}", run.id))?,
    );
    Ok(answer)
}

async fn preview(env: &Env, t: &Target, id: Option<String>) -> std::result::Result<Value, String> {
    let run = the_run(env, t, id)?;
    let text = match &env.open_text {
        Some(text) => text.to_string(),
        None => std::fs::read_to_string(&t.path)
            .map_err(|e| format!("cannot read {}: {e}", t.path.display()))?,
    };
    let key = (t.uri.as_str().to_string(), t.flow.clone());
    env.previews
        .start(key.clone(), run.id.clone(), t.cwd.clone());
    let shown = env
        .previews
        .check_now(&key, text, &env.launcher, &t.path)
        .await;
    refresh(env).await;
    shown
}

async fn fork(env: &Env, t: &Target, id: Option<String>) -> std::result::Result<Value, String> {
    let run = the_run(env, t, id)?;
    warn_unsaved(env, t, "the fork").await;
    let args: Vec<OsString> = vec![
        "fork".into(),
        run.id.clone().into(),
        "--flow".into(),
        t.path.clone().into(),
    ];
    let mut answer = json!({ "parent": run.id });
    merge(
        &mut answer,
        start(env, t, &args, &format!("fork {}", run.id))?,
    );
    env.previews.stop(t.uri.as_str(), &t.flow);
    // The hints follow the new run, the fork.
    show_run(env, t, None).await;
    Ok(answer)
}

/// `more`'s fields added to the object `into`.
fn merge(into: &mut Value, more: Value) {
    if let (Some(into), Value::Object(more)) = (into.as_object_mut(), more) {
        into.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_reels_error_lines_else_its_last_line() {
        assert_eq!(
            message("run 01 of `f`\nerror: there is no run `x`\n"),
            "there is no run `x`"
        );
        assert_eq!(message("a\nthe last\n\n"), "the last");
        assert_eq!(message(""), "it failed without a message");
    }

    #[test]
    fn inputs_go_to_a_file_as_one_object() {
        let dir = tempfile::tempdir().unwrap();
        let launcher = Launcher::new(None, None, dir.path().to_path_buf());
        let file = inputs_file(&launcher, Some(&json!({ "n": 5, "name": "ada" })))
            .unwrap()
            .unwrap();
        let written: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        assert_eq!(written, json!({ "n": 5, "name": "ada" }));
        assert!(inputs_file(&launcher, Some(&json!([1]))).is_err());
        assert_eq!(inputs_file(&launcher, None), Ok(None));
    }
}
