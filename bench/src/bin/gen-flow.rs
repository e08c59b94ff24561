//! `gen-flow`: prints a generated, realistic flow of N steps (see `reel_bench::generate`).

use std::io::Write;

use clap::Parser;

/// Prints a realistic Reel flow of `--steps` steps that checks without a diagnostic.
#[derive(Parser)]
#[command(name = "gen-flow")]
struct Args {
    /// How many steps the flow has.
    #[arg(long, default_value_t = 1000)]
    steps: usize,
    /// The seed of the generator: the same seed gives the same file.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let generated = reel_bench::generate::generate(args.steps, args.seed);
    std::io::stdout()
        .lock()
        .write_all(generated.text.as_bytes())
}
