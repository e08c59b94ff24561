//! The `reel` command: check, build and format Reel flows (`shared/cli.md` is its contract).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
