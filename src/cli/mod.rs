//! The command line: the clap definition of `reel`, dispatch to one module per subcommand, and exit statuses.

mod build;
mod cancel;
mod capabilities;
mod cassette;
mod check;
mod clean;
mod events;
mod flows;
mod fmt;
mod fork;
mod logs;
mod lsp;
mod progress;
mod project;
mod quarantine;
mod replay;
mod resume;
mod run;
mod runs;
mod runtime;
mod signal;
mod sources;
mod sql;
mod store;
mod test;
mod ui;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use ui::Ui;

/// Check, build, format and run Reel flows.
#[derive(Debug, Parser)]
#[command(
    name = "reel",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    after_help = "Run `reel <COMMAND> --help` for the options of a command."
)]
struct Cli {
    /// When to color what is printed on stderr: `auto` colors a terminal unless NO_COLOR is set
    /// (CLICOLOR_FORCE colors a pipe too).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto, global = true)]
    color: ColorChoice,

    #[command(subcommand)]
    command: Command,
}

/// The subcommands; each lives in its own module with its `Args` and `run`.
#[derive(Debug, Subcommand)]
enum Command {
    Check(check::Args),
    Build(build::Args),
    Fmt(fmt::Args),
    Run(run::Args),
    Resume(resume::Args),
    Replay(replay::Args),
    Fork(fork::Args),
    Cassette(cassette::Args),
    Test(test::Args),
    Runs(runs::Args),
    Events(events::Args),
    Logs(logs::Args),
    Signal(signal::Args),
    Cancel(cancel::Args),
    Release(quarantine::ReleaseArgs),
    Abandon(quarantine::AbandonArgs),
    Clean(clean::Args),
    Worker(worker::Args),
    Store(store::Args),
    Sql(sql::Args),
    Lsp(lsp::Args),
}

/// The `--color` choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Color when NO_COLOR is unset or empty and either CLICOLOR_FORCE is set or stderr is a terminal.
    Auto,
    /// Always color, even when NO_COLOR is set.
    Always,
    /// Never color.
    Never,
}

/// How a command ended, as the exit status `docs/cli.md` fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Everything went well (0).
    Success,
    /// The command ran and found problems: errors in a file, a file that would be reformatted (1).
    Failed,
    /// Bad usage or input: a path that cannot be read, an unknown flow (2).
    Usage,
    /// The run is quarantined: a fault of the platform, not of the flow (3).
    Quarantined,
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> ExitCode {
        ExitCode::from(match status {
            Status::Success => 0,
            Status::Failed => 1,
            Status::Usage => 2,
            Status::Quarantined => 3,
        })
    }
}

/// Why a command stopped before finishing: what to tell the user and the exit status it implies.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// The exit status.
    pub status: Status,
    /// One or more messages, each printed after `error: `; each says what to fix.
    pub messages: Vec<String>,
}

impl Failure {
    /// Its messages as one line.
    pub fn message(&self) -> String {
        self.messages.join("; ")
    }

    /// Bad usage or input (exit 2) with one message.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            status: Status::Usage,
            messages: vec![message.into()],
        }
    }

    /// Bad usage or input (exit 2) with several messages.
    pub fn usage_all(messages: Vec<String>) -> Self {
        Failure {
            status: Status::Usage,
            messages,
        }
    }

    /// The command failed (exit 1) for the reason in `message`.
    pub fn failed(message: impl Into<String>) -> Self {
        Failure {
            status: Status::Failed,
            messages: vec![message.into()],
        }
    }
}

/// Parses the command line, runs the subcommand and turns its outcome into the exit status.
pub fn main() -> ExitCode {
    // clap prints its own usage errors (exit 2) and help (exit 0).
    let cli = Cli::parse();
    let ui = Ui::new(cli.color);
    let outcome = match cli.command {
        Command::Check(args) => check::run(args, &ui),
        Command::Build(args) => build::run(args, &ui),
        Command::Fmt(args) => fmt::run(args, &ui),
        Command::Run(args) => run::run(args, &ui),
        Command::Resume(args) => resume::run(args, &ui),
        Command::Replay(args) => replay::run(args, &ui),
        Command::Fork(args) => fork::run(args, &ui),
        Command::Cassette(args) => cassette::run(args, &ui),
        Command::Test(args) => test::run(args, &ui),
        Command::Runs(args) => runs::run(args, &ui),
        Command::Events(args) => events::run(args, &ui),
        Command::Logs(args) => logs::run(args, &ui),
        Command::Sql(args) => sql::run(args, &ui),
        Command::Signal(args) => signal::run(args, &ui),
        Command::Cancel(args) => cancel::run(args, &ui),
        Command::Release(args) => quarantine::release(args, &ui),
        Command::Abandon(args) => quarantine::abandon(args, &ui),
        Command::Clean(args) => clean::run(args, &ui),
        Command::Worker(args) => worker::run(args, &ui),
        Command::Store(args) => store::run(args, &ui),
        Command::Lsp(args) => lsp::run(args, &ui),
    };
    match outcome {
        Ok(status) => status.into(),
        Err(failure) => {
            for message in &failure.messages {
                ui.error(message);
            }
            failure.status.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exit_statuses_follow_the_contract() {
        assert_eq!(ExitCode::from(Status::Success), ExitCode::from(0));
        assert_eq!(ExitCode::from(Status::Failed), ExitCode::from(1));
        assert_eq!(ExitCode::from(Status::Usage), ExitCode::from(2));
    }
}
