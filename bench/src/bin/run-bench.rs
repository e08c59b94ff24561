//! `run-bench`: the runtime benchmark: steps per second of the engine in both write modes, the
//! disk's fsync rate (the ceiling of `durable` sequential steps), and the time and peak memory
//! of resuming runs of 10,000 to 100,000 journal events; the throughput of a hermetic replay
//! (`reel replay RUN`) of a run of 100,000 events and the time of the fork check
//! (`reel replay RUN --flow FILE`) of a 10,000-step flow.
//!
//! Everything runs in-process against a fresh SQLite store in a temporary directory, as
//! `reel run` does (same engine, same tool host, same store). `run-bench resume-child STORE RUN`
//! is the child process the resume measurement starts, so that its peak memory is its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use reel_bench::measure::{Stats, process_cpu, reel_binary, thread_cpu};
use reel_bench::shapes::{foreach_echo, sequential_echo};
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};
use reel_flowspec::FlowSpec;
use reel_runtime::{
    NoProgress, Recording, ReplayOptions, RiderConfig, RunDeps, StartRequest, plan_fork,
    replay_recording, resume, start,
};
use reel_store::{Durability, Owner, RunStatus, SqliteStore, Store, StoreRead};
use reel_tools::ToolHost;
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::FileExt;
use tokio_util::sync::CancellationToken;

// The capabilities `reel run` hands the engine, shared by path so the benchmark runs the same.
#[allow(dead_code)]
#[path = "../../../src/cli/capabilities.rs"]
mod capabilities;
use capabilities::{ProcessEnvironment, SystemClock};

/// The runtime benchmark.
#[derive(Parser)]
#[command(
    about = "Steps per second of Reel's engine in both write modes, and resume time and memory"
)]
struct Args {
    /// Samples of each workload (the median is shown).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Journal lengths of the resume measurement, in events.
    #[arg(long, value_delimiter = ',', default_value = "10000,50000,100000")]
    events: Vec<usize>,
    /// DBOS figures (`bench/dbos/bench.py --out`), to print the ratios side by side.
    #[arg(long, value_name = "FILE.json")]
    dbos: Option<PathBuf>,
    /// Where the stores go (default: the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Runs one part alone: `speed` (steps per second and the fsync probe), `resume`, or
    /// `replay` (replay throughput and the fork check).
    #[arg(long, value_parser = ["speed", "resume", "replay"])]
    only: Option<String>,
    /// Journal length of the replayed runs, in events.
    #[arg(long, default_value_t = 100_000)]
    replay_events: usize,
    /// Steps of the flow the fork check compares.
    #[arg(long, default_value_t = 10_000)]
    flow_steps: usize,
    /// The `reel` binary whose whole `reel replay` command is timed (default: the one beside
    /// this program; without one the replay table leaves that column out).
    #[arg(long)]
    reel: Option<PathBuf>,
    /// Leaves the stores in place (their directory is printed), to profile a resume of them
    /// with `run-bench resume-child STORE RUN` (or a replay with `replay-child STORE RUN`)
    /// afterwards.
    #[arg(long)]
    keep: bool,
    /// The resume workloads to measure.
    #[arg(long, value_delimiter = ',', default_value = "unread,read,chain",
          value_parser = ["unread", "read", "chain"])]
    workloads: Vec<String>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

// The variants name the subcommands (`spec-child`, `resume-child`, `replay-child`): each is
// a child process the benchmark, or a person profiling, starts.
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
enum Cmd {
    /// Only reads RUN's FlowSpec, as a resume does first (`StoreRead::flowspec`), and prints
    /// {"hwm_before_kb", "hwm_kb", "spec_bytes"}: the part of a resume's memory that is the flow.
    SpecChild {
        /// The store directory.
        store: PathBuf,
        /// The run.
        run: String,
    },
    /// Resumes RUN of the store STORE once and prints {"ms", "events", "hwm_before_kb", "hwm_kb"}.
    ResumeChild {
        /// The store directory.
        store: PathBuf,
        /// The run.
        run: String,
    },
    /// Replays RUN of the store STORE `--reps` times, as `--only replay` does, and prints each
    /// replay's wall and CPU time: a process that does nothing else, to profile or to count
    /// instructions of (`valgrind --tool=callgrind --toggle-collect='reel_runtime::replay::*'`).
    ReplayChild {
        /// The store directory.
        store: PathBuf,
        /// The run.
        run: String,
        /// Replays to make.
        #[arg(long, default_value_t = 1)]
        reps: usize,
        /// Replays with `--verify`.
        #[arg(long)]
        verify: bool,
    },
}

fn main() {
    // Allocate as `reel` does (see `reel_alloc`).
    reel_bench::reel_alloc::tune();
    let args = Args::parse();
    match &args.command {
        Some(Cmd::ResumeChild { store, run }) => return resume_child(store, run),
        Some(Cmd::SpecChild { store, run }) => return spec_child(store, run),
        Some(Cmd::ReplayChild {
            store,
            run,
            reps,
            verify,
        }) => return replay_child(store, run, *reps, *verify),
        None => {}
    }
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("reel-run-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("a directory for the stores");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");

    let only = args.only.as_deref();
    let rates = if only.is_none_or(|o| o == "speed") {
        speed(&args, &rt, &root)
    } else {
        Vec::new()
    };
    if only.is_none_or(|o| o == "resume") {
        resumes(&args, &rt, &root);
    }
    if only.is_none_or(|o| o == "replay") {
        replays(&args, &rt, &root);
    }
    if let Some(path) = &args.dbos
        && !rates.is_empty()
    {
        print_ratios(path, &rates);
    }
    if args.keep {
        println!("\nstores kept in {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Steps per second of each workload in both modes, and the fsync probe; returns the rates
/// (workload, mode, steps/s) for the DBOS ratios.
fn speed(
    args: &Args,
    rt: &tokio::runtime::Runtime,
    root: &Path,
) -> Vec<(&'static str, &'static str, f64)> {
    println!(
        "\n== Reel engine: steps per second (median of {})",
        args.reps
    );
    println!(
        "{:<34} {:>8} {:>7} {:>11} {:>12} {:>11}",
        "workload", "mode", "steps", "time", "steps/s", "fsyncs/step"
    );
    let workloads = [
        ("1,000 sequential echo steps", sequential_echo(1000), 1000),
        (
            "foreach of 1,000 echo calls",
            foreach_echo(1000, 1000),
            1000,
        ),
        ("100 sequential exec true steps", sequential_exec(100), 100),
    ];
    let mut rates: Vec<(&'static str, &'static str, f64)> = Vec::new();
    for &(name, ref source, steps) in &workloads {
        let spec = Arc::new(compile(source));
        for mode in [Durability::Fast, Durability::Durable] {
            let dir = root.join(format!("{}-{}", short(name), mode_name(mode)));
            let sqlite = Arc::new(SqliteStore::open(&dir, Arc::new(SystemClock)).expect("a store"));
            let store: Arc<dyn Store> = sqlite.clone();
            // One untimed run warms the store and the page cache.
            rt.block_on(run_once(&store, &spec, mode, root));
            let syncs_before = sqlite.stats().full_syncs;
            let mut samples: Vec<Duration> = (0..args.reps)
                .map(|_| rt.block_on(run_once(&store, &spec, mode, root)))
                .collect();
            // Commits that waited for an fsync (a durable write in them), per step.
            let syncs = (sqlite.stats().full_syncs - syncs_before) as f64
                / (args.reps.max(1) * steps) as f64;
            samples.sort();
            let median = samples[samples.len() / 2];
            let rate = steps as f64 / median.as_secs_f64();
            rates.push((name, mode_name(mode), rate));
            println!(
                "{:<34} {:>8} {:>7} {:>11} {:>12.0} {:>11.2}",
                name,
                mode_name(mode),
                steps,
                show(median),
                rate,
                syncs
            );
        }
    }

    let probe = fsync_probe(root);
    println!(
        "\n== This disk: fdatasync rate (4 KiB write + fdatasync, same filesystem as the stores)"
    );
    let wal_like = wal_like_probe(root, COMMITS_PER_WAL * COMMIT_FRAMES * WAL_FRAME);
    let wal_like_small = wal_like_probe(root, 256 << 10);
    println!("{:<44} {:>12} {:>12}", "probe", "fsyncs/s", "ms each");
    for (name, rate) in [
        ("overwrite one block", probe.0),
        ("append a block (file grows)", probe.1),
        ("a commit's 2 WAL frames, through the WAL", wal_like),
        ("the same, through 256 KiB", wal_like_small),
    ] {
        println!("{name:<44} {rate:>12.0} {:>12.3}", 1000.0 / rate);
    }
    let durable_seq = rates
        .iter()
        .find(|(n, m, _)| *n == "1,000 sequential echo steps" && *m == "durable")
        .map_or(0.0, |r| r.2);
    let ceiling = probe.0.max(probe.1);
    println!(
        "durable sequential steps/s: {durable_seq:.0} = {:.0}% of the faster probe's {ceiling:.0} fsyncs/s \
         (one fsync'd commit per step is the contract's floor)",
        100.0 * durable_seq / ceiling
    );
    println!(
        "durable sequential steps/s: {durable_seq:.0} = {:.0}% of {wal_like:.0} syncs/s of what a \
         step's commit writes (2 WAL frames, through the {} KiB the WAL's commits go through between restarts)",
        100.0 * durable_seq / wal_like,
        COMMITS_PER_WAL * COMMIT_FRAMES * WAL_FRAME / 1024
    );
    durable_against_the_disk(args, rt, root);
    rates
}

/// Durable sequential steps against the disk's fsync rate, measured in pairs: this disk's sync
/// rate swings by a third between one second and the next, so a probe taken a minute away from
/// the run it is compared with can make the same code look 56 % or 84 % of it. Each pair is an
/// overwrite probe and, right after it, a 1,000-step durable run; the ratio is the median of the
/// pairs' ratios.
fn durable_against_the_disk(args: &Args, rt: &tokio::runtime::Runtime, root: &Path) {
    const PAIRS: usize = 7;
    let spec = Arc::new(compile(&sequential_echo(1000)));
    let dir = root.join("durable-against-the-disk");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(&dir, Arc::new(SystemClock)).expect("a store"));
    rt.block_on(run_once(&store, &spec, Durability::Durable, root));
    let pairs = PAIRS.max(args.reps);
    println!(
        "\n== Durable sequential steps against the disk, in pairs ({pairs} pairs: an overwrite probe, then a 1,000-step durable run)"
    );
    println!(
        "{:>5} {:>12} {:>12} {:>8} {:>14} {:>8} {:>10} {:>8}",
        "pair", "probe/s", "steps/s", "ratio", "SQLite rows/s", "ratio", "shaped/s", "ratio"
    );
    let mut ratios = Vec::new();
    let mut probes = Vec::new();
    let mut steps = Vec::new();
    let (mut rows, mut shapes, mut of_shaped) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 1..=pairs {
        let probe = sync_rate(root, false, Duration::from_millis(300));
        let took = rt.block_on(run_once(&store, &spec, Durability::Durable, root));
        let rate = 1000.0 / took.as_secs_f64();
        let sqlite = sqlite_commit_rate(root, false, Duration::from_millis(300));
        let shaped = sqlite_commit_rate(root, true, Duration::from_millis(300));
        println!(
            "{pair:>5} {probe:>12.0} {rate:>12.0} {:>7.0}% {sqlite:>14.0} {:>7.0}% {shaped:>10.0} {:>7.0}%",
            100.0 * rate / probe,
            100.0 * sqlite / probe,
            100.0 * shaped / probe
        );
        ratios.push(rate / probe);
        probes.push(probe);
        steps.push(rate);
        rows.push(sqlite / probe);
        shapes.push(shaped / probe);
        of_shaped.push(rate / shaped);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "durable sequential steps: median {:.0}/s against a median probe of {:.0} fsyncs/s; median of the pairs' ratios {:.0}%",
        median(&mut steps),
        median(&mut probes),
        100.0 * median(&mut ratios)
    );
    println!(
        "SQLite alone, no engine (its own database beside the store): one row per commit, median {:.0}% \
         of the probe; a durable step's writes per commit (\"shaped\"), median {:.0}% of the probe; \
         durable steps median {:.0}% of the shaped commits (the engine's share is the rest)",
        100.0 * median(&mut rows),
        100.0 * median(&mut shapes),
        100.0 * median(&mut of_shaped)
    );
}

/// Time and peak memory of resuming parked runs of `args.events` journal events, each in a
/// child process.
fn resumes(args: &Args, rt: &tokio::runtime::Runtime, root: &Path) {
    println!(
        "\n== Reel engine: resume of a parked run (child process; median time, peak RSS growth)"
    );
    println!("unread: a `foreach` of N/2 `echo` calls, then a signal wait `after` it; only the");
    println!("        output reads the list: the resume must hold no step value");
    println!("read:   the same, but the wait's `when` reads the list: the resume must hold it");
    println!(
        "chain:  N/3 sequential `echo` steps, each reading the one before, then a signal wait;"
    );
    println!("        no value must be held, but the flow itself has N/3 steps");
    println!(
        "{:<9} {:>9} {:>7} {:>10} {:>14} {:>13} {:>14} {:>16}",
        "workload",
        "events",
        "steps",
        "resume",
        "RSS before",
        "peak growth",
        "spec (as read)",
        "spec read alone"
    );
    let workloads: [(&str, FlowOfEvents); 3] = [
        ("unread", |events| parked_foreach(events.div_ceil(2), false)),
        ("read", |events| parked_foreach(events.div_ceil(2), true)),
        ("chain", |events| {
            chain_then_signal((events.saturating_sub(3) / 3).max(1))
        }),
    ];
    for (workload, make) in workloads {
        if !args.workloads.iter().any(|w| w == workload) {
            continue;
        }
        for &events in &args.events {
            let dir = root.join(format!("resume-{workload}-{events}"));
            let store: Arc<dyn Store> =
                Arc::new(SqliteStore::open(&dir, Arc::new(SystemClock)).expect("a store"));
            let spec = Arc::new(compile(&make(events)));
            let steps = spec.steps.len();
            let run = rt.block_on(async {
                let deps = deps(store.clone());
                let outcome = start(
                    &deps,
                    &RiderConfig::default(),
                    request(&spec, Durability::Fast, root),
                )
                .await
                .expect("the run starts");
                assert_eq!(outcome.status, RunStatus::Waiting, "{outcome:?}");
                outcome.run
            });
            drop(store);
            let mut samples: Vec<Value> = (0..args.reps.max(1))
                .map(|_| resume_in_child(&dir, &run))
                .collect();
            samples.sort_by_key(|s| s["ms"].as_f64().unwrap_or(0.0) as u64);
            let m = &samples[samples.len() / 2];
            let before = m["hwm_before_kb"].as_u64().unwrap_or(0);
            let peak = m["hwm_kb"].as_u64().unwrap_or(0);
            // What parsing the flow alone costs: the part of the growth that is the spec.
            let spec_only = in_child("spec-child", &dir, &run);
            let spec_growth = spec_only["hwm_kb"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(spec_only["hwm_before_kb"].as_u64().unwrap_or(0));
            println!(
                "{:<9} {:>9} {:>7} {:>7.1} ms {:>10} KiB {:>13} {:>10} KiB {:>16}",
                workload,
                m["events"],
                steps,
                m["ms"].as_f64().unwrap_or(0.0),
                before,
                format!("+{} KiB", peak.saturating_sub(before)),
                spec_only["spec_bytes"].as_u64().unwrap_or(0) / 1024,
                format!("+{spec_growth} KiB")
            );
        }
    }
}

/// Runs `spec` once to its end in a fresh store at `dir`; returns the run.
fn recorded(rt: &tokio::runtime::Runtime, dir: &Path, spec: &Arc<FlowSpec>) -> String {
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir, Arc::new(SystemClock)).expect("a store"));
    rt.block_on(async {
        let outcome = start(
            &deps(store.clone()),
            &RiderConfig::default(),
            request(spec, Durability::Fast, dir),
        )
        .await
        .expect("the run starts");
        assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
        outcome.run
    })
}

/// The median of `reps` timings of `f`.
fn median(reps: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut samples: Vec<Duration> = (0..reps.max(1)).map(|_| f()).collect();
    samples.sort();
    samples[samples.len() / 2]
}

/// Events per second of a hermetic replay of runs of `args.replay_events` events (with and
/// without `--verify`), and the time of the fork check of a corrected `args.flow_steps`-step
/// flow against a run of the original.
fn replays(args: &Args, rt: &tokio::runtime::Runtime, root: &Path) {
    println!("\n== Reel engine: hermetic replay (`reel replay RUN`, in-process, median)");
    // The whole command too, as a user waits for it: the process, the store's opening, the
    // progress display; without a `reel` binary the column is left out, and says why.
    let reel = reel_binary(args.reel.as_deref())
        .inspect_err(|e| println!("(no whole-command column: {e})"))
        .ok();
    println!("foreach: one `foreach` of N/2 `echo` calls");
    println!("chain:   N/3 sequential `echo` steps, each reading the one before");
    println!("mixed:   a generated flow of `echo`, `foreach` and pure steps (generate::runnable)");
    println!(
        "replay:  reading the record and replaying it, as `reel replay` does (which leaves the record for the process's exit to free)"
    );
    println!(
        "cpu:     the process's CPU time (median; the journal is read on a thread of its own), unaffected by waiting for a core"
    );
    println!(
        "command: the whole `reel replay RUN` process (REEL_HOME the store; stdout and stderr to /dev/null)"
    );
    println!(
        "{:<8} {:>8} {:>7} {:>10} {:>12} {:>10} {:>12} {:>10} {:>12} {:>10} {:>12}",
        "workload",
        "events",
        "steps",
        "replay",
        "events/s",
        "--verify",
        "events/s",
        "cpu",
        "events/s",
        "command",
        "events/s"
    );
    let workloads: [(&str, FlowOfEvents); 3] = [
        ("foreach", |events| {
            format!(
                "flow bench {{\n  step f = echo {{\n    foreach: range({})\n    concurrency: 1000\n    value: item\n  }}\n  output len(f)\n}}\n",
                events / 2
            )
        }),
        ("chain", |events| sequential_echo(events / 3)),
        // About 3.2 events per step (see `runnable`).
        ("mixed", |events| {
            reel_bench::generate::runnable(events * 10 / 32, 1, None)
        }),
    ];
    for (workload, make) in workloads {
        let dir = root.join(format!("replay-{workload}"));
        let spec = Arc::new(compile(&make(args.replay_events)));
        let run = recorded(rt, &dir, &spec);
        if args.keep {
            println!("({workload}: run {run} in {})", dir.display());
        }
        let store = SqliteStore::open_read_only(&dir).expect("the store opens to read");
        let mut events = 0;
        let mut cpu = Vec::new();
        let mut time = |verify: bool| {
            median(args.reps, || {
                let (took, spent) = replay_once(&store, &run, verify);
                if let Some(spent) = spent.filter(|_| !verify) {
                    cpu.push(spent);
                }
                took
            })
        };
        let plain = time(false);
        let verified = time(true);
        let command = reel.as_deref().map(|reel| {
            median(args.reps, || {
                let began = Instant::now();
                let status = std::process::Command::new(reel)
                    .args(["replay", &run, "--color", "never"])
                    .env("REEL_HOME", &dir)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .expect("`reel replay` starts");
                let took = began.elapsed();
                assert!(status.success(), "`reel replay {run}` ended {status}");
                took
            })
        });
        store
            .read_journal(&run, 0, &mut |_| {
                events += 1;
                reel_store::Flow::Continue
            })
            .expect("the journal reads");
        let rate = |d: Duration| events as f64 / d.as_secs_f64();
        let cpu = (!cpu.is_empty()).then(|| Stats::of(&cpu).median);
        println!(
            "{:<8} {:>8} {:>7} {:>10} {:>12.0} {:>10} {:>12.0} {:>10} {:>12} {:>10} {:>12}",
            workload,
            events,
            spec.steps.len(),
            show(plain),
            rate(plain),
            show(verified),
            rate(verified),
            cpu.map_or("-".into(), show),
            cpu.map_or("-".into(), |c| format!("{:.0}", rate(c))),
            command.map_or("-".into(), show),
            command.map_or("-".into(), |c| format!("{:.0}", rate(c)))
        );
    }

    println!(
        "\n== Reel: the fork check (`reel replay RUN --flow FILE`) of a {}-step flow, one step edited at 90%",
        args.flow_steps
    );
    let dir = root.join("fork-check");
    let original = Arc::new(compile(&reel_bench::generate::runnable(
        args.flow_steps,
        1,
        None,
    )));
    let run = recorded(rt, &dir, &original);
    let source = reel_bench::generate::runnable(args.flow_steps, 1, Some(args.flow_steps * 9 / 10));
    let store = SqliteStore::open_read_only(&dir).expect("the store opens to read");
    let compile_time = median(args.reps, || {
        let began = Instant::now();
        compile(&source);
        began.elapsed()
    });
    let corrected = Arc::new(compile(&source));
    let mut load_cpu = Vec::new();
    // The record is read on two threads (the journal beside the FlowSpec): the process's CPU.
    let load_time = median(args.reps, || {
        let cpu = process_cpu();
        let began = Instant::now();
        Recording::load(&store, &run).expect("the run loads");
        let took = began.elapsed();
        if let (Some(a), Some(b)) = (cpu, process_cpu()) {
            load_cpu.push(b - a);
        }
        took
    });
    let rec = Recording::load(&store, &run).expect("the run loads");
    let mut plan = None;
    let mut plan_cpu = Vec::new();
    let plan_time = median(args.reps, || {
        let cpu = thread_cpu();
        let began = Instant::now();
        plan = Some(
            plan_fork(&store, &rec, corrected.clone(), rec.inputs.clone()).expect("the plan runs"),
        );
        let took = began.elapsed();
        if let (Some(a), Some(b)) = (cpu, thread_cpu()) {
            plan_cpu.push(b - a);
        }
        took
    });
    let plan = plan.expect("a plan");
    let live = plan.steps.iter().filter(|s| !s.reused).count();
    println!(
        "{} steps, {} journal events; {} steps reused, {live} live (first: `{}`)",
        corrected.steps.len(),
        rec.length,
        plan.steps.len() - live,
        plan.first_divergence().map_or("none", |s| s.step.as_str())
    );
    println!(
        "{:<34} {:>10}",
        "check and build the corrected file",
        show(compile_time)
    );
    println!("{:<34} {:>10}", "read the run's record", show(load_time));
    println!(
        "{:<34} {:>10}",
        "compare (the fork's dry run)",
        show(plan_time)
    );
    println!(
        "{:<34} {:>10}",
        "the check (record + compare)",
        show(load_time + plan_time)
    );
    if !load_cpu.is_empty() && !plan_cpu.is_empty() {
        let (load, plan) = (Stats::of(&load_cpu).median, Stats::of(&plan_cpu).median);
        println!(
            "{:<34} {:>10} (record {} + compare {})",
            "the check's CPU time (median)",
            show(load + plan),
            show(load),
            show(plan)
        );
    }
}

/// Prints Reel's rates against DBOS's for the two shared workloads.
fn print_ratios(path: &Path, rates: &[(&str, &str, f64)]) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            println!("\n(no DBOS figures: cannot read {}: {e})", path.display());
            return;
        }
    };
    let dbos: Value = serde_json::from_str(&text).expect("DBOS figures are JSON");
    println!(
        "\n== Reel / DBOS Transact {} (Python {}, SQLite), same machine, same invocation",
        dbos["version"].as_str().unwrap_or("?"),
        dbos["python"].as_str().unwrap_or("?")
    );
    println!(
        "{:<34} {:>12} {:>12} {:>12} {:>9} {:>9}",
        "workload", "DBOS/s", "fast/s", "durable/s", "fast x", "durable x"
    );
    for (name, key) in [
        ("1,000 sequential steps", "sequential"),
        ("1,000-wide fan-out", "fanout"),
    ] {
        let ours = if key == "sequential" {
            "1,000 sequential echo steps"
        } else {
            "foreach of 1,000 echo calls"
        };
        let rate = |mode: &str| {
            rates
                .iter()
                .find(|(n, m, _)| *n == ours && *m == mode)
                .map_or(0.0, |r| r.2)
        };
        let theirs = dbos[key]["steps_per_s"].as_f64().unwrap_or(f64::NAN);
        let (fast, durable) = (rate("fast"), rate("durable"));
        println!(
            "{:<34} {:>12.0} {:>12.0} {:>12.0} {:>8.0}x {:>8.0}x",
            name,
            theirs,
            fast,
            durable,
            fast / theirs,
            durable / theirs
        );
    }
}

/// The child that only reads the run's FlowSpec.
fn spec_child(dir: &Path, run: &str) {
    let store = SqliteStore::open(dir, Arc::new(SystemClock)).expect("the store");
    let hwm_before = vm_hwm_kb();
    let row = store.run(run).expect("the run reads").expect("the run");
    // As a resume reads it: its binary form, read where the store holds it.
    let (spec, spec_bytes) = store
        .flowspec(&row.flow_digest)
        .expect("the spec reads")
        .expect("the spec");
    let spec = spec.expect("the spec parses");
    println!(
        "{}",
        json!({
            "hwm_before_kb": hwm_before,
            "hwm_kb": vm_hwm_kb(),
            "spec_bytes": spec_bytes,
            "steps": spec.steps.len(),
        })
    );
}

/// Starts `run-bench resume-child` for `run` and reads what it printed.
fn resume_in_child(store: &Path, run: &str) -> Value {
    in_child("resume-child", store, run)
}

/// Starts `run-bench WHICH STORE RUN` and reads the JSON it printed.
fn in_child(which: &str, store: &Path, run: &str) -> Value {
    let exe = std::env::current_exe().expect("this executable");
    let out = std::process::Command::new(exe)
        .args([which, &store.display().to_string(), run])
        .output()
        .expect("the child starts");
    assert!(
        out.status.success(),
        "{which} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the child prints JSON")
}

/// The child: opens the store and replays the run `reps` times as the replay table does
/// ([`replay_once`]), printing each replay's wall time and the process's CPU time.
fn replay_child(dir: &Path, run: &str, reps: usize, verify: bool) {
    let store = SqliteStore::open_read_only(dir).expect("the store opens to read");
    for _ in 0..reps {
        let (took, cpu) = replay_once(&store, run, verify);
        println!(
            "{{\"ms\": {:.1}, \"cpu_ms\": {}}}",
            took.as_secs_f64() * 1000.0,
            cpu.map_or("null".into(), |c| format!(
                "{:.1}",
                c.as_secs_f64() * 1000.0
            ))
        );
    }
}

/// One replay of `run` as `reel replay` spends it: the record read and replayed, checked to
/// reproduce the record; the record is freed after the clock stops, since the command leaves
/// that to the process's exit. Its wall time and the process's CPU time (the record's journal
/// and FlowSpec are read on two threads).
fn replay_once(store: &SqliteStore, run: &str, verify: bool) -> (Duration, Option<Duration>) {
    let cpu_began = process_cpu();
    let began = Instant::now();
    let opts = ReplayOptions {
        verify,
        faults: Vec::new(),
    };
    let rec = Recording::load(store, run).expect("the run loads");
    let report = replay_recording(store, &rec, &opts, &NoProgress).expect("the replay runs");
    let took = began.elapsed();
    let cpu = cpu_began.zip(process_cpu()).map(|(a, b)| b - a);
    rec.free();
    assert!(report.divergence.is_none(), "{:?}", report.divergence);
    assert_eq!(report.status, "succeeded");
    (took, cpu)
}

fn resume_child(dir: &Path, run: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir, Arc::new(SystemClock)).expect("the store"));
    let hwm_before = vm_hwm_kb();
    let began = Instant::now();
    let outcome = rt
        .block_on(resume(
            &deps(store.clone()),
            &RiderConfig::default(),
            run,
            "resume",
        ))
        .expect("the run resumes");
    let took = began.elapsed();
    assert_eq!(outcome.status, RunStatus::Waiting, "{outcome:?}");
    let mut events = 0u64;
    store
        .read_journal(run, 0, &mut |_| {
            events += 1;
            reel_store::Flow::Continue
        })
        .expect("the journal reads");
    println!(
        "{}",
        json!({
            "ms": took.as_secs_f64() * 1000.0,
            "events": events,
            "hwm_before_kb": hwm_before,
            "hwm_kb": vm_hwm_kb(),
        })
    );
}

/// This process's peak resident set size (KiB), from /proc/self/status.
fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// One run of `spec` to its end; its wall time from start to outcome.
async fn run_once(
    store: &Arc<dyn Store>,
    spec: &Arc<FlowSpec>,
    mode: Durability,
    cwd: &Path,
) -> Duration {
    let deps = deps(store.clone());
    let began = Instant::now();
    let outcome = start(&deps, &RiderConfig::default(), request(spec, mode, cwd))
        .await
        .expect("the run starts");
    let took = began.elapsed();
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");
    took
}

/// Makes the source of a flow that parks after about this many journal events.
type FlowOfEvents = fn(usize) -> String;

/// The engine's dependencies, as `reel run` builds them (no progress display).
fn deps(store: Arc<dyn Store>) -> RunDeps {
    RunDeps {
        store,
        tools: Arc::new(ToolHost::new()),
        clock: Arc::new(SystemClock),
        secrets: Arc::new(capabilities::process_secrets()),
        env: Arc::new(ProcessEnvironment),
        progress: Arc::new(NoProgress),
        shutdown: CancellationToken::new(),
        owner: Owner::this_process(),
    }
}

fn request(spec: &Arc<FlowSpec>, mode: Durability, cwd: &Path) -> StartRequest {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    StartRequest {
        run_id: format!("bench-{}-{n:06}", std::process::id()),
        spec: spec.clone(),
        inputs: serde_json::Map::new(),
        cwd: cwd.to_path_buf(),
        source: None,
        source_abs: None,
        keep_for_ms: None,
        durability: mode,
        seed: n,
        parent: None,
    }
}

/// Checks and builds the flow `bench` of `source`.
fn compile(source: &str) -> FlowSpec {
    let db = RootDb::default();
    let file = SourceFile::new(&db, "bench.reel".into(), "/".into(), Arc::from(source));
    let errors: Vec<_> = file_diagnostics(&db, file)
        .iter()
        .filter(|d| d.is_error())
        .cloned()
        .collect();
    assert!(
        errors.is_empty(),
        "the benchmark's flow has errors: {errors:?}"
    );
    build_flow(&db, file, "bench").expect("the benchmark's flow builds")
}

/// `n` `exec true` steps, one after the other.
fn sequential_exec(n: usize) -> String {
    let mut s = String::from("flow bench {\n  step e0 = exec { cmd: [\"true\"] }\n");
    for i in 1..n {
        s.push_str(&format!(
            "  step e{i} = exec {{\n    cmd: [\"true\"]\n    after: [e{}]\n  }}\n",
            i - 1
        ));
    }
    s.push_str(&format!("  output e{}.stdout\n}}\n", n - 1));
    s
}

/// `n` small `echo` steps, each reading the one before, then a wait for a signal that never
/// comes: the run parks with `3n + 3` events (`step_started`, `effect_recorded`,
/// `step_succeeded` per step). A resume needs no step value to park again: the wait's
/// arguments read none, and the output (which reads the last step) is not computed yet.
fn chain_then_signal(n: usize) -> String {
    let mut s = String::from("flow bench {\n  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        s.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    s.push_str(&format!(
        "  step w = signal {{\n    name: \"go\"\n    after: [s{}]\n  }}\n  output {{ last: s{}, w: w }}\n}}\n",
        n - 1,
        n - 1
    ));
    s
}

/// How many 4 KiB write + `fdatasync` pairs per second this filesystem allows: overwriting one
/// block (no metadata changes), and appending (the file grows, as a WAL does between
/// checkpoints). Runs about half a second each, in `dir`.
fn fsync_probe(dir: &Path) -> (f64, f64) {
    let for_half_a_second = Duration::from_millis(500);
    (
        sync_rate(dir, false, for_half_a_second),
        sync_rate(dir, true, for_half_a_second),
    )
}

/// 4 KiB writes + `fdatasync` per second for about `time` (at least 50): at one offset, or
/// each past the last (`append`).
fn sync_rate(dir: &Path, append: bool, time: Duration) -> f64 {
    let block = [0x5au8; 4096];
    let path = dir.join(format!("fsync-probe-{append}"));
    let mut file = std::fs::File::create(&path).expect("a probe file");
    file.write_all(&block).expect("the probe writes");
    file.sync_all().expect("the probe syncs");
    let began = Instant::now();
    let mut n = 0u64;
    while began.elapsed() < time || n < 50 {
        let offset = if append { 4096 * (n + 1) } else { 0 };
        file.write_all_at(&block, offset).expect("the probe writes");
        file.sync_data().expect("the probe syncs");
        n += 1;
    }
    let rate = n as f64 / began.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// Bytes of a WAL frame: a 24-byte header and a 4 KiB page.
const WAL_FRAME: u64 = 24 + 4096;
/// The WAL frames a durable `echo` step's commit writes: the journal's last page and the run's
/// row. About one commit in three also rewrites pages the journal's index rebalances; the probe
/// leaves those out, so it stands a little above what the steps write.
const COMMIT_FRAMES: u64 = 2;
/// Durable commits between two restarts of the WAL from its beginning (the store's
/// `RESTART_EVERY`): the stretch of the file a run's commits go through, again and again.
const COMMITS_PER_WAL: u64 = 256;

/// How many commits per second this filesystem allows of what a durable step's commit writes
/// to the store's WAL: [`COMMIT_FRAMES`] frames in one write, each commit after the one before,
/// through the first `region` bytes of a file that already has them, then `fdatasync`. Runs
/// about half a second. On the disk of session 36 a region of 256 KiB synced 10–20 % faster
/// than one of 2 MiB, the WAL's (see `bench/README.md`).
fn wal_like_probe(dir: &Path, region: u64) -> f64 {
    let path = dir.join("fsync-probe-wal");
    let mut file = std::fs::File::create(&path).expect("a probe file");
    file.write_all(&vec![0u8; (32 + region) as usize])
        .expect("the probe writes");
    file.sync_all().expect("the probe syncs");
    let commit = vec![0x5au8; (WAL_FRAME * COMMIT_FRAMES) as usize];
    let began = Instant::now();
    let mut n = 0u64;
    let mut offset = 32;
    while began.elapsed() < Duration::from_millis(500) || n < 50 {
        if offset + WAL_FRAME * COMMIT_FRAMES > 32 + region {
            offset = 32;
        }
        file.write_all_at(&commit, offset)
            .expect("the probe writes");
        file.sync_data().expect("the probe syncs");
        offset += WAL_FRAME * COMMIT_FRAMES;
        n += 1;
    }
    let rate = n as f64 / began.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    rate
}

/// Commits per second of SQLite alone: a database of its own in `dir` (WAL,
/// `synchronous=FULL`, as the store's durable commits; checkpointed every 256 commits, as the
/// store restarts its WAL), one commit after another for about `time` (at least 50). With
/// `step_shaped`, each commit writes what a durable sequential `echo` step's commit writes
/// (the run's row moved on under its fence, and three journal rows of the store's columns and
/// sizes: the call's result, the step's end and the next step's start, as
/// `writer::statements` does); without, one 200-byte row, the least any durable record can
/// be. No engine: the rate of such commits is the ceiling of durable sequential steps on this
/// disk for an engine whose store is SQLite.
fn sqlite_commit_rate(dir: &Path, step_shaped: bool, time: Duration) -> f64 {
    let path = dir.join("sqlite-commit-probe.db");
    let db = rusqlite::Connection::open(&path).expect("a probe database");
    db.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA wal_autocheckpoint={};
         CREATE TABLE t (seq INTEGER PRIMARY KEY, body BLOB NOT NULL);
         CREATE TABLE runs (id TEXT PRIMARY KEY NOT NULL, next_seq INTEGER NOT NULL,
                            lease_token INTEGER NOT NULL) STRICT;
         CREATE TABLE journal (run TEXT NOT NULL, seq INTEGER NOT NULL, at INTEGER NOT NULL,
                               kind TEXT NOT NULL, step TEXT, idx INTEGER, attempt INTEGER,
                               data TEXT NOT NULL, PRIMARY KEY (run, seq)) STRICT, WITHOUT ROWID;
         INSERT INTO runs VALUES ('run-01JDXYZABCDEFGHJKMNPQRSTVW', 0, 7);",
        if step_shaped { 512 } else { 256 }
    ))
    .expect("the probe's tables");
    let body = [0x5au8; 200];
    let run = "run-01JDXYZABCDEFGHJKMNPQRSTVW";
    // A sequential `echo` step's events, by kind and length of their data (`reel sql "SELECT
    // kind, length(data) FROM reel_events"` of such a run).
    let events = [
        ("effect_recorded", "x".repeat(92)),
        ("step_succeeded", "x".repeat(32)),
        ("step_started", "x".repeat(104)),
    ];
    let mut seq = 0i64;
    let mut commit = |db: &rusqlite::Connection| {
        if step_shaped {
            db.execute_batch("BEGIN").expect("the probe begins");
            let moved = db
                .prepare_cached(
                    "UPDATE runs SET next_seq = ?1 WHERE id = ?2 AND lease_token = 7 AND next_seq = ?3",
                )
                .and_then(|mut u| u.execute(rusqlite::params![seq + 3, run, seq]))
                .expect("the probe moves the run's end");
            assert_eq!(moved, 1, "the probe's fence holds");
            let mut insert = db
                .prepare_cached(
                    "INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL, 1, ?6)",
                )
                .expect("the probe's insert");
            for (kind, data) in &events {
                insert
                    .execute(rusqlite::params![
                        run,
                        seq,
                        1_764_892_800_000i64 + seq,
                        kind,
                        format!("s{}", seq / 3),
                        data
                    ])
                    .expect("the probe appends");
                seq += 1;
            }
            db.execute_batch("COMMIT").expect("the probe commits");
        } else {
            db.prepare_cached("INSERT INTO t (body) VALUES (?1)")
                .and_then(|mut i| i.execute([&body[..]]))
                .expect("the probe inserts");
        }
    };
    // The first commits grow the WAL; a run's store has its WAL already.
    for _ in 0..600 {
        commit(&db);
    }
    let began = Instant::now();
    let mut n = 0u64;
    while began.elapsed() < time || n < 50 {
        commit(&db);
        n += 1;
    }
    let rate = n as f64 / began.elapsed().as_secs_f64();
    drop(db);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("sqlite-commit-probe.db{suffix}")));
    }
    rate
}

/// A `foreach` of `calls` `echo` calls (two journal events each), then a wait for a signal
/// that never comes: the run parks with about `2 × calls` events. With `read`, the wait's
/// `when` reads the list, and a resume evaluates it again, so the value it must hold grows with
/// the journal; without, only the output reads it, which a parked run does not compute, so the
/// journal grows while what the resume must hold does not. The flow is the same size either way.
fn parked_foreach(calls: usize, read: bool) -> String {
    let wait = if read {
        "when: len(f) > 0"
    } else {
        "after: [f]"
    };
    format!(
        "flow bench {{\n  step f = echo {{\n    foreach: range({calls})\n    concurrency: 1000\n    value: index\n  }}\n  step w = signal {{\n    name: \"go\"\n    {wait}\n  }}\n  output {{ n: len(f), w: w }}\n}}\n"
    )
}

fn mode_name(mode: Durability) -> &'static str {
    match mode {
        Durability::Fast => "fast",
        Durability::Durable => "durable",
    }
}

fn short(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_lowercase()
}

fn show(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.1} ms")
    }
}
