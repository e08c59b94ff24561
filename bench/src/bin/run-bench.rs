//! `run-bench`: the runtime benchmark: steps per second of the engine in both write modes, and
//! the time and peak memory of resuming runs of 10,000 to 100,000 journal events.
//!
//! Everything runs in-process against a fresh SQLite store in a temporary directory, as
//! `reel run` does (same engine, same tool host, same store). `run-bench resume-child STORE RUN`
//! is the child process the resume measurement starts, so that its peak memory is its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};
use reel_flowspec::FlowSpec;
use reel_runtime::{
    EnvSecrets, NoProgress, ProcessEnvironment, RiderConfig, RunDeps, StartRequest, SystemClock,
    resume, start,
};
use reel_store::{Durability, Owner, RunStatus, SqliteStore, Store};
use reel_tools::ToolHost;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Resumes RUN of the store STORE once and prints {"ms", "events", "hwm_before_kb", "hwm_kb"}.
    ResumeChild {
        /// The store directory.
        store: PathBuf,
        /// The run.
        run: String,
    },
}

fn main() {
    let args = Args::parse();
    if let Some(Cmd::ResumeChild { store, run }) = &args.command {
        resume_child(store, run);
        return;
    }
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("reel-run-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("a directory for the stores");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");

    println!(
        "\n== Reel engine: steps per second (median of {})",
        args.reps
    );
    println!(
        "{:<34} {:>8} {:>7} {:>11} {:>12}",
        "workload", "mode", "steps", "time", "steps/s"
    );
    let workloads = [
        ("1,000 sequential echo steps", sequential_echo(1000), 1000),
        ("foreach of 1,000 echo calls", foreach_echo(1000), 1000),
        ("100 sequential exec true steps", sequential_exec(100), 100),
    ];
    let mut rates: Vec<(&str, &str, f64)> = Vec::new();
    for (name, source, steps) in &workloads {
        let spec = Arc::new(compile(source));
        for mode in [Durability::Fast, Durability::Durable] {
            let dir = root.join(format!("{}-{}", short(name), mode_name(mode)));
            let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir).expect("a store"));
            // One untimed run warms the store and the page cache.
            rt.block_on(run_once(&store, &spec, mode, &root));
            let mut samples: Vec<Duration> = (0..args.reps)
                .map(|_| rt.block_on(run_once(&store, &spec, mode, &root)))
                .collect();
            samples.sort();
            let median = samples[samples.len() / 2];
            let rate = *steps as f64 / median.as_secs_f64();
            rates.push((name, mode_name(mode), rate));
            println!(
                "{:<34} {:>8} {:>7} {:>11} {:>12.0}",
                name,
                mode_name(mode),
                steps,
                show(median),
                rate
            );
        }
    }

    println!("\n== Reel engine: resume of a parked run (child process; median time, peak RSS)");
    println!(
        "{:<16} {:>11} {:>16} {:>16} {:>12}",
        "journal events", "resume", "RSS before (KiB)", "peak RSS (KiB)", "peak growth"
    );
    for &events in &args.events {
        let dir = root.join(format!("resume-{events}"));
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir).expect("a store"));
        let spec = Arc::new(compile(&parked_foreach(events.div_ceil(2))));
        let run = rt.block_on(async {
            let deps = deps(store.clone());
            let outcome = start(
                &deps,
                &RiderConfig::default(),
                request(&spec, Durability::Fast, &root),
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
        println!(
            "{:<16} {:>8.1} ms {:>16} {:>16} {:>12}",
            m["events"],
            m["ms"].as_f64().unwrap_or(0.0),
            before,
            peak,
            format!("+{} KiB", peak.saturating_sub(before))
        );
    }

    if let Some(path) = &args.dbos {
        print_ratios(path, &rates);
    }
    let _ = std::fs::remove_dir_all(&root);
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

/// Starts `run-bench resume-child` for `run` and reads what it printed.
fn resume_in_child(store: &Path, run: &str) -> Value {
    let exe = std::env::current_exe().expect("this executable");
    let out = std::process::Command::new(exe)
        .args(["resume-child", &store.display().to_string(), run])
        .output()
        .expect("the child starts");
    assert!(
        out.status.success(),
        "resume-child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the child prints JSON")
}

/// The child: opens the store, resumes the run (which reads its journal, rebuilds its state
/// and parks it again), and reports the time and this process's peak resident memory.
fn resume_child(dir: &Path, run: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir).expect("the store"));
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

/// The engine's dependencies, as `reel run` builds them (no progress display).
fn deps(store: Arc<dyn Store>) -> RunDeps {
    RunDeps {
        store,
        tools: Arc::new(ToolHost::new()),
        clock: Arc::new(SystemClock),
        secrets: Arc::new(EnvSecrets::from_process()),
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

/// `n` `echo` steps, each reading the one before.
fn sequential_echo(n: usize) -> String {
    let mut s = String::from("flow bench {\n  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        s.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    s.push_str(&format!("  output s{}\n}}\n", n - 1));
    s
}

/// One `foreach` step of `n` `echo` calls, all allowed in flight at once.
fn foreach_echo(n: usize) -> String {
    format!(
        "flow bench {{\n  step f = echo {{\n    foreach: range({n})\n    concurrency: {n}\n    value: item\n  }}\n  output len(f)\n}}\n"
    )
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

/// A `foreach` of `calls` `echo` calls (two journal events each), then a wait for a signal
/// that never comes: the run parks with about `2 × calls` events.
fn parked_foreach(calls: usize) -> String {
    format!(
        "flow bench {{\n  step f = echo {{\n    foreach: range({calls})\n    concurrency: 1000\n    value: index\n  }}\n  step w = signal {{\n    name: \"go\"\n    after: [f]\n  }}\n  output {{ n: len(f), w: w }}\n}}\n"
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
