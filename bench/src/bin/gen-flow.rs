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
    /// Prints the flow of the replay and fork-check benchmarks instead: builtin tools alone, so
    /// `reel run` runs it anywhere (`generate::runnable`).
    #[arg(long)]
    runnable: bool,
    /// With `--runnable`: changes this step's expression, as a correction would (the fork
    /// check's corrected file).
    #[arg(long, value_name = "STEP", requires = "runnable")]
    edit_at: Option<usize>,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let text = if args.runnable {
        reel_bench::generate::runnable(args.steps, args.seed, args.edit_at)
    } else {
        reel_bench::generate::generate(args.steps, args.seed).text
    };
    std::io::stdout().lock().write_all(text.as_bytes())
}
