//! The `reel` command: check, build, format and run Reel flows (`docs/cli.md` is its contract).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
