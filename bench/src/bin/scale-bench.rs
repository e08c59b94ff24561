//! `scale-bench`: how whole `reel` commands grow with the flow: `reel check`, `reel build` and
//! `reel run` of N sequential `echo` steps (in `fast` mode, and in `durable` mode: one fsync'd
//! commit per step) and of a `foreach` of N `echo` calls, each as a user
//! times it (a process of the release `reel`, a fresh store each time), with steps per second,
//! peak memory (`/usr/bin/time`'s maximum resident set) and the engine's own share of the run
//! (the run's record: from its creation to its end). DBOS figures (`bench/dbos/bench.py --out`)
//! are printed beside the rows of the same shape and size. Then `reel clean` in stores of N
//! ended runs: the first clean, which reads every run once, a clean of one run after it, which
//! should cost the same whatever N, and `reel clean --all`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use reel_bench::measure::reel_binary;
use reel_bench::shapes::{foreach_echo, sequential_echo};
use reel_store::{
    Durability, ManualClock, NewEvent, NewRun, Owner, RunFilter, RunStatus, RunUpdate, SqliteStore,
    Store, StoreRead,
};
use serde_json::{Value, json};

/// The growth of whole `reel` commands with the flow's size.
#[derive(Parser)]
#[command(about = "Time, steps per second and peak memory of whole reel commands, by size")]
struct Args {
    /// The `reel` binary (default: the one beside this program).
    #[arg(long)]
    reel: Option<PathBuf>,
    /// Sizes of the sequential shape (N `echo` steps, each reading the one before).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    seq_sizes: Vec<usize>,
    /// Sizes of the `foreach` shape (one step of N `echo` calls).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000,100000,1000000"
    )]
    fanout_sizes: Vec<usize>,
    /// Sizes of the sequential shape run with `--durability durable` (a fresh store on the
    /// disk of `--dir`, one fsync'd commit a step: what a step costs as the store grows).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    durable_sizes: Vec<usize>,
    /// Most calls of the `foreach` in flight at once.
    #[arg(long, default_value_t = 1000)]
    concurrency: usize,
    /// Samples of each command for sizes up to 10,000 (the median time is shown); larger
    /// sizes are measured once.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// DBOS figures (`bench/dbos/bench.py --steps N --out FILE.json`), one file per size.
    #[arg(long, value_name = "FILE.json")]
    dbos: Vec<PathBuf>,
    /// Where the flows and stores go (default: the system's temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Sizes of the stores `reel clean` is timed in (N ended runs of 8 events each).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    clean_sizes: Vec<usize>,
    /// Measures one table alone: `growth` (check, build, run and list by the flow's size) or
    /// `clean` (`reel clean` by the store's size).
    #[arg(long, value_parser = ["growth", "clean"])]
    only: Option<String>,
}

/// The shapes measured.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Sequential,
    Foreach,
    /// The sequential shape, run in `durable` mode.
    Durable,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Sequential => "sequential",
            Shape::Foreach => "foreach",
            Shape::Durable => "durable",
        }
    }

    /// The key of DBOS's figures for the same workload.
    fn dbos_key(self) -> &'static str {
        match self {
            Shape::Sequential => "sequential",
            Shape::Foreach => "fanout",
            Shape::Durable => "durable",
        }
    }
}

/// One command, measured.
#[derive(Clone, Copy)]
struct Sample {
    /// Wall time, as the user waits for it.
    wall: Duration,
    /// Peak resident set size (KiB).
    peak_kb: u64,
}

/// One row of the table.
struct Row {
    shape: Shape,
    n: usize,
    check: Sample,
    build: Sample,
    run: Sample,
    /// The engine's share of the run: the run's record, from its creation to its end.
    engine: Duration,
    /// `reel runs` on the store the run left: a listing that should cost the runs it lists,
    /// not their events.
    list: Sample,
}

fn main() {
    let args = Args::parse();
    let reel = reel_binary(args.reel.as_deref()).unwrap_or_else(|e| {
        eprintln!("scale-bench: {e}");
        std::process::exit(2);
    });
    assert!(
        Path::new("/usr/bin/time").exists(),
        "peak memory is measured with /usr/bin/time (GNU time), which is missing"
    );
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("reel-scale-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("a directory for the flows and stores");
    if args.only.as_deref() != Some("clean") {
        growth(&args, &reel, &root);
    }
    if args.only.as_deref() != Some("growth") {
        cleans(&reel, &root, &args.clean_sizes);
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The growth table: check, build, run and list of each shape and size, and the aims.
fn growth(args: &Args, reel: &Path, root: &Path) {
    let dbos = read_dbos(&args.dbos);

    println!(
        "\n== Growth: whole `reel` commands, a fresh store each, {}",
        reel.display()
    );
    println!(
        "sequential: N `echo` steps, each reading the one before; foreach: one step of N `echo` \
         calls, concurrency {}; durable: the sequential flow, `reel run --durability durable`",
        args.concurrency
    );
    println!(
        "run = check + build + the run, as a user waits for it; engine = the run's record from \
         creation to end; peak = maximum resident set; list = `reel runs` on the store the run left"
    );
    println!(
        "{:<10} {:>9} | {:>8} {:>8} {:>6} | {:>8} {:>10} {:>8} | {:>8} {:>10} | {:>8} | {:>8} {:>10}",
        "shape",
        "N",
        "check",
        "build",
        "×check",
        "run",
        "steps/s",
        "peak MB",
        "engine",
        "steps/s",
        "list",
        "DBOS",
        "steps/s"
    );
    let mut rows = Vec::new();
    let shapes = [
        (Shape::Sequential, &args.seq_sizes),
        (Shape::Foreach, &args.fanout_sizes),
        (Shape::Durable, &args.durable_sizes),
    ];
    for (shape, sizes) in shapes {
        for &n in sizes {
            let row = measure(args, reel, root, shape, n);
            print_row(&row, dbos_figure(&dbos, shape, n));
            rows.push(row);
        }
    }
    print_aims(&rows);
}

/// The events of a run the clean table's stores hold: what a one-step run's journal names (its
/// inputs and result by digest, an idempotency key, which a clean reads like a digest).
const CLEAN_EVENTS: u64 = 8;

/// Times `reel clean` in stores of each size in `sizes`: N ended runs of [`CLEAN_EVENTS`]
/// events, each naming a value of its own and one value every run shares.
fn cleans(reel: &Path, root: &Path, sizes: &[usize]) {
    if sizes.is_empty() {
        return;
    }
    println!(
        "\n== `reel clean` in a store of N ended runs ({CLEAN_EVENTS} events each, a value of \
         its own and one all share)"
    );
    println!(
        "first = `reel clean RUN --dry-run` in the new store (it reads every run once); after = \
         `reel clean RUN` of another run then; all = `reel clean --all`"
    );
    println!(
        "{:>9} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8}",
        "N", "first", "peak MB", "after", "peak MB", "all", "peak MB"
    );
    let mut afters = Vec::new();
    for &n in sizes {
        let store = root.join(format!("clean-{n}"));
        ended_runs(&store, n);
        let first = timed_command(reel, &["clean", &clean_run(0), "--dry-run"], &store);
        let after = timed_command(reel, &["clean", &clean_run(1)], &store);
        let all = timed_command(reel, &["clean", "--all"], &store);
        let mb = |s: Sample| s.peak_kb as f64 / 1024.0;
        println!(
            "{n:>9} | {:>8} {:>8.0} | {:>8} {:>8.0} | {:>8} {:>8.0}",
            secs(first.wall),
            mb(first),
            secs(after.wall),
            mb(after),
            secs(all.wall),
            mb(all)
        );
        afters.push(after.wall);
        let _ = std::fs::remove_dir_all(&store);
    }
    if let (Some(least), Some(most)) = (afters.iter().min(), afters.iter().max()) {
        println!(
            "  a clean of one run after the first: {} to {} (no aim: it should not grow with \
             the store)",
            secs(*least),
            secs(*most)
        );
    }
}

/// The id of the clean table's run `i`.
fn clean_run(i: usize) -> String {
    format!("run-{i:07}")
}

/// Writes `n` ended runs into a new store at `dir` through the store's API, from four threads
/// so that the writer commits many at once.
fn ended_runs(dir: &Path, n: usize) {
    let store = Arc::new(
        SqliteStore::open(dir, Arc::new(ManualClock::at(1_000_000)))
            .expect("the clean table's store opens"),
    );
    let shared = store
        .put_value(&json!({ "shared": "by every run", "pad": "s".repeat(64) }))
        .expect("a value is stored");
    let threads = 4;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (store, shared) = (Arc::clone(&store), shared.clone());
            scope.spawn(move || {
                for i in (t..n).step_by(threads) {
                    ended_run(&*store, i, &shared);
                }
            });
        }
    });
}

/// One ended run of the clean table: its inputs a value of its own, its output the shared one.
fn ended_run(store: &dyn Store, i: usize, shared: &str) {
    let event = |seq: u64, kind: &str, data: Value| NewEvent {
        at: 1_000_000 + i as i64,
        kind: kind.to_string(),
        step: (seq > 0).then(|| "s".to_string()),
        index: None,
        attempt: (seq > 0).then_some(1),
        data,
    };
    let own = store
        .put_value(&json!({ "run": i, "pad": "p".repeat(64) }))
        .expect("a value is stored");
    let lease = store
        .create_run(
            NewRun {
                id: clean_run(i),
                flow: "f".to_string(),
                flow_digest: "f".repeat(64),
                source: None,
                source_abs: None,
                cwd: "/".to_string(),
                parent: None,
                keep_for_ms: None,
                durability: Durability::Fast,
                created_at: 1_000_000 + i as i64,
                first_events: vec![event(0, "run_started", json!({ "inputs": own }))],
                kept: Vec::new(),
            },
            &Owner::this_process(),
            60_000,
        )
        .expect("a run is created");
    let events = (1..CLEAN_EVENTS)
        .map(|seq| {
            let key = format!("{:064x}", i as u64 * CLEAN_EVENTS + seq);
            event(
                seq,
                "effect_recorded",
                json!({ "key": key, "result": shared }),
            )
        })
        .collect();
    store
        .append(&lease, events)
        .expect("a run's events are appended");
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Succeeded),
                ended_at: Some(1_000_000 + i as i64),
                ..RunUpdate::default()
            },
        )
        .expect("a run ends");
    store
        .release(&lease)
        .0
        .blocking_recv()
        .expect("the writer answers")
        .expect("a run is let go");
}

/// Measures `reel check`, `reel build` and `reel run` of `shape` at size `n`.
fn measure(args: &Args, reel: &Path, root: &Path, shape: Shape, n: usize) -> Row {
    let dir = root.join(format!("{}-{n}", shape.name()));
    std::fs::create_dir_all(&dir).expect("a directory for the flow");
    let flow = dir.join("flow.reel");
    let text = match shape {
        Shape::Sequential | Shape::Durable => sequential_echo(n),
        Shape::Foreach => foreach_echo(n, args.concurrency),
    };
    std::fs::write(&flow, text).expect("the flow is written");
    let flow_arg = flow.to_string_lossy().to_string();
    let out = dir.join("flow.json").to_string_lossy().to_string();
    let reps = if n <= 10_000 { args.reps.max(1) } else { 1 };
    let mut checks = Vec::new();
    let mut builds = Vec::new();
    let mut runs = Vec::new();
    for rep in 0..reps {
        let store = dir.join(format!("store-{rep}"));
        checks.push(timed_command(reel, &["check", &flow_arg], &store));
        builds.push(timed_command(
            reel,
            &["build", &flow_arg, "-o", &out],
            &store,
        ));
        let run: &[&str] = match shape {
            Shape::Durable => &["run", &flow_arg, "--durability", "durable"],
            Shape::Sequential | Shape::Foreach => &["run", &flow_arg],
        };
        let ran = timed_command(reel, run, &store);
        runs.push((
            ran,
            engine_share(&store),
            timed_command(reel, &["runs"], &store),
        ));
        let _ = std::fs::remove_dir_all(&store);
    }
    runs.sort_by_key(|(s, _, _)| s.wall);
    let (run, engine, list) = runs[runs.len() / 2];
    Row {
        shape,
        n,
        check: median(checks),
        build: median(builds),
        run,
        engine,
        list,
    }
}

/// The sample of median wall time.
fn median(mut samples: Vec<Sample>) -> Sample {
    samples.sort_by_key(|s| s.wall);
    samples[samples.len() / 2]
}

/// Runs `reel ARGS` under `/usr/bin/time` with `store` as its store (`REEL_HOME`); its wall
/// time and peak memory. A command that fails stops the benchmark, with its output.
fn timed_command(reel: &Path, args: &[&str], store: &Path) -> Sample {
    let began = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg(reel)
        .args(args)
        .env("REEL_HOME", store)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("/usr/bin/time runs");
    let wall = began.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`reel {}` failed: {stderr}",
        args.join(" ")
    );
    let peak_kb = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory in /usr/bin/time's output: {stderr}"));
    Sample { wall, peak_kb }
}

/// The engine's share of the one run in `store`: from its record's creation to its end.
fn engine_share(store: &Path) -> Duration {
    let read = SqliteStore::open_read_only(store).expect("the run's store opens");
    let runs = read
        .list_runs(&RunFilter::default())
        .expect("the store lists its runs");
    let run = runs.first().expect("the store holds the run");
    let ended = run.ended_at.expect("the run ended");
    Duration::from_millis((ended - run.created_at).max(0) as u64)
}

/// DBOS's figures, each file of one size.
fn read_dbos(paths: &[PathBuf]) -> Vec<Value> {
    paths
        .iter()
        .filter_map(|p| match std::fs::read_to_string(p) {
            Ok(text) => serde_json::from_str(&text).ok(),
            Err(e) => {
                println!("(no DBOS figures from {}: {e})", p.display());
                None
            }
        })
        .collect()
}

/// DBOS's (seconds, steps per second) for `shape` at size `n`, if measured.
fn dbos_figure(dbos: &[Value], shape: Shape, n: usize) -> Option<(f64, f64)> {
    dbos.iter().find_map(|d| {
        let f = &d[shape.dbos_key()];
        (f["steps"].as_u64() == Some(n as u64))
            .then(|| Some((f["seconds"].as_f64()?, f["steps_per_s"].as_f64()?)))
            .flatten()
    })
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn print_row(r: &Row, dbos: Option<(f64, f64)>) {
    let (dbos_s, dbos_rate) = match dbos {
        Some((s, rate)) => (secs(Duration::from_secs_f64(s)), format!("{rate:.0}")),
        None => ("-".to_string(), "-".to_string()),
    };
    println!(
        "{:<10} {:>9} | {:>8} {:>8} {:>5.1}× | {:>8} {:>10.0} {:>8.0} | {:>8} {:>10.0} | {:>8} | {:>8} {:>10}",
        r.shape.name(),
        r.n,
        secs(r.check.wall),
        secs(r.build.wall),
        r.build.wall.as_secs_f64() / r.check.wall.as_secs_f64().max(1e-9),
        secs(r.run.wall),
        rate(r.n, r.run.wall),
        r.run.peak_kb as f64 / 1024.0,
        secs(r.engine),
        rate(r.n, r.engine),
        secs(r.list.wall),
        dbos_s,
        dbos_rate
    );
}

/// The aims, each against the table's figures.
fn print_aims(rows: &[Row]) {
    println!("\naims:");
    for shape in [Shape::Sequential, Shape::Foreach, Shape::Durable] {
        let aim = match shape {
            Shape::Durable => {
                "no aim: the disk's syncs set the rate; a step's own cost should not grow"
            }
            Shape::Sequential | Shape::Foreach => "aim: within 1.5×",
        };
        let of = |n: usize| rows.iter().find(|r| r.shape == shape && r.n == n);
        if let Some(small) = of(1_000) {
            let base = rate(small.n, small.run.wall);
            for large in rows.iter().filter(|r| r.shape == shape && r.n > 10_000) {
                let slower = base / rate(large.n, large.run.wall);
                println!(
                    "  {} steps/s at {} vs 1,000: {slower:.2}× slower ({aim})",
                    shape.name(),
                    large.n
                );
            }
        }
    }
    if let Some(r) = rows
        .iter()
        .find(|r| r.shape == Shape::Sequential && r.n == 1_000)
    {
        println!(
            "  1,000 sequential steps, whole `reel run`: {} (aim: under 60 ms)",
            secs(r.run.wall)
        );
    }
    if let Some(r) = rows
        .iter()
        .find(|r| r.shape == Shape::Foreach && r.n == 1_000_000)
    {
        println!(
            "  1,000,000-wide foreach, peak memory: {:.0} MB (aim: under 200 MB)",
            r.run.peak_kb as f64 / 1024.0
        );
    }
    let worst = rows
        .iter()
        .map(|r| r.build.wall.as_secs_f64() / r.check.wall.as_secs_f64().max(1e-9))
        .fold(0.0, f64::max);
    println!("  `reel build` / `reel check`, worst row: {worst:.1}× (aim: at most 2×)");
    let lists = rows.iter().map(|r| r.list.wall);
    if let (Some(least), Some(most)) = (lists.clone().min(), lists.max()) {
        println!(
            "  `reel runs` of the one run a store holds: {} to {} (no aim: it should not grow \
             with the run's events)",
            secs(least),
            secs(most)
        );
    }
}
