//! The `reel` command: check, build, format and run Reel flows (`docs/cli.md` is its contract).

mod cli;

fn main() -> std::process::ExitCode {
    // The process's allocator (mimalloc) comes with `reel_alloc`: set before any thread.
    reel_alloc::tune();
    cli::main()
}
