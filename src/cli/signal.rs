//! `reel signal`: deliver a signal to a run; kept until its wait takes it.

use reel_store::Store;
use serde_json::Value;

use super::project::{Project, resolve_run};
use super::ui::Ui;
use super::{Failure, Status};

/// Send a signal to a run. A run that waits for it is continued by `reel worker` (or
/// `reel resume`); a signal sent before the run reaches its wait is kept for it.
///
/// Exit status: 0 sent, 2 unknown run, ended run, or JSON that does not parse.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    reel signal 01jf3k approve '{\"approved\": true, \"by\": \"ada\"}'\n  \
    curl -s https://example.com/order/7 | reel signal 01jf3k order -")]
pub struct Args {
    /// The run's id (or a unique prefix of it).
    #[arg(value_name = "RUN")]
    run: String,

    /// The signal's name, as the flow's `signal` step names it.
    #[arg(value_name = "NAME")]
    name: String,

    /// The payload, as JSON (default: null); `-` reads it from standard input, for a payload
    /// longer than a command line holds or made by another program.
    #[arg(value_name = "JSON")]
    payload: Option<String>,
}

/// Runs `reel signal`.
pub fn run(args: Args, ui: &Ui) -> Result<Status, Failure> {
    let payload = match args.payload.as_deref() {
        Some("-") => {
            let text = std::io::read_to_string(std::io::stdin()).map_err(|e| {
                Failure::usage(format!(
                    "the payload cannot be read from standard input: {e}"
                ))
            })?;
            serde_json::from_str::<Value>(&text).map_err(|e| {
                Failure::usage(format!("the payload on standard input is not JSON ({e})"))
            })?
        }
        Some(text) => serde_json::from_str::<Value>(text).map_err(|e| {
            Failure::usage(format!(
                "the payload is not JSON ({e}); quote strings as JSON: '\"text\"'"
            ))
        })?,
        None => Value::Null,
    };
    let project = Project::current()?;
    let store = project.open_store()?;
    let id = resolve_run(store.as_ref(), &args.run)?;
    let row = store
        .run(&id)
        .map_err(|e| Failure::failed(e.to_string()))?
        .ok_or_else(|| Failure::usage(format!("there is no run `{id}`")))?;
    if row.status.is_ended() {
        return Err(Failure::usage(format!(
            "run {id} has ended ({}); a signal would never be taken",
            row.status.as_str()
        )));
    }
    send(store.as_ref(), &id, &args.name, &payload)?;
    let next = if row.waiting_on.contains(&args.name) {
        "it waits for it: `reel worker` (or `reel resume`) continues it"
    } else {
        "it is kept until the run's wait for it"
    };
    ui.line(&format!("signal `{}` sent to run {id}; {next}", args.name));
    Ok(Status::Success)
}

fn send(store: &dyn Store, id: &str, name: &str, payload: &Value) -> Result<(), Failure> {
    store
        .send_signal(id, name, payload)
        .map(|_| ())
        .map_err(|e| Failure::failed(e.to_string()))
}
