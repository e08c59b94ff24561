//! `pg-bench`: Reel and DBOS Transact for Python side by side on one PostgreSQL server.
//!
//! Reel runs as users run it on PostgreSQL: `reel worker` processes (1, 2 and 4, each in a
//! directory of its own, standing for machines) against one database, and runs started with
//! `reel run` that park at a signal. Each workload's runs are started first (untimed), then
//! the bench sends their signals through the store (as `reel signal` does, which wakes the idle
//! workers by `NOTIFY`) and the time runs from the first signal to the last run's end, as the
//! store records it. Workloads: one run of 1,000 sequential `echo` steps, one run of a
//! 1,000-wide `foreach` of `echo`, and 200 concurrent runs of 5 sequential `echo` steps; and
//! the time from a signal to its run's next step (its first journal event) with idle workers.
//!
//! DBOS runs `bench/dbos/bench.py --database-url` (the same workloads, its steps trivial
//! functions, `DBOS.send`/`DBOS.recv` for the signal) in its own database on the same server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use reel_bench::measure::{Stats, processes_cpu, reel_binary, show};
use reel_store::{Flow, PgStore, RunStatus, Store};
use serde_json::Value;

// The clock `reel` hands its store, shared by path so the bench's signals are stamped the same.
#[allow(dead_code)]
#[path = "../../../src/cli/capabilities.rs"]
mod capabilities;
use capabilities::SystemClock;

/// Reel with 1, 2 and 4 workers and DBOS, on one PostgreSQL server.
#[derive(Parser)]
#[command(about = "Reel (1, 2, 4 workers) and DBOS Transact for Python on one PostgreSQL server")]
struct Args {
    /// The server, as a store URL naming any database (`postgres://user@host/postgres`);
    /// each side gets fresh databases on it, dropped when the benchmark ends.
    #[arg(long, env = "REEL_BENCH_POSTGRES_URL")]
    url: String,
    /// The `reel` binary (default: the one beside this benchmark).
    #[arg(long)]
    reel: Option<PathBuf>,
    /// A Python with `dbos` installed, to run `bench/dbos/bench.py` on the same server.
    #[arg(long)]
    python: Option<PathBuf>,
    /// DBOS's figures from an earlier `bench/dbos/bench.py --database-url` run on the same
    /// server (its JSON output), instead of running it again with `--python`.
    #[arg(long, conflicts_with = "python")]
    dbos: Option<PathBuf>,
    /// Worker counts.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4", value_parser = positive())]
    workers: Vec<usize>,
    /// Write modes of Reel's runs.
    #[arg(long, value_delimiter = ',', default_value = "fast,durable",
          value_parser = ["fast", "durable"])]
    modes: Vec<String>,
    /// Steps of the sequential run and width of the fan-out.
    #[arg(long, default_value_t = 1000, value_parser = positive())]
    steps: usize,
    /// Concurrent short runs.
    #[arg(long, default_value_t = 200, value_parser = positive())]
    runs: usize,
    /// Sequential steps of each short run.
    #[arg(long, default_value_t = 5, value_parser = positive())]
    short_steps: usize,
    /// Samples of the signal's latency.
    #[arg(long, default_value_t = 10, value_parser = positive())]
    signals: usize,
    /// Runs parked in Reel's database before its workloads, each waiting a day for a signal
    /// that never comes: a store with a backlog, as a team's is after a while (DBOS's
    /// database has none). A worker's look must not read them.
    #[arg(long, default_value_t = 0)]
    parked: usize,
    /// Samples of each workload (the median is shown): one burst of short runs lasts a
    /// fifth of a second, and one such sample swung by a third between invocations.
    #[arg(long, default_value_t = 3, value_parser = positive())]
    reps: usize,
    /// Print what each burst of short runs asked the server, statement by statement (its
    /// workers', its signals' senders' and the bench's polls), from `pg_stat_statements`
    /// reset before each burst: the server must load it (`REEL_PG_STATEMENTS=on` when
    /// `scripts/postgres-for-tests.sh` starts it). Also the CPU time a burst took in the
    /// workers and in the server's processes (Linux's `/proc`), steadier than its wall time.
    #[arg(long)]
    statements: bool,
    /// Only one part: `commands` (the whole commands), `workloads` (the workers' table beside
    /// DBOS, and the ceiling) or `looks` (a worker's look with many runs in flight).
    #[arg(long, value_parser = ["commands", "workloads", "looks"])]
    only: Option<String>,
    /// Runs in flight for `--only looks` (and the whole bench), one table row each.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    in_flight: Vec<usize>,
    /// Samples of each whole command a user types (`reel run` of one step, `reel events`,
    /// `reel runs`), on PostgreSQL and on SQLite, the median shown; 0 leaves them out.
    #[arg(long, default_value_t = 20)]
    command_reps: usize,
}

/// A count of one or more: none of workers, steps, runs or samples leaves nothing to measure
/// (or nothing to run the runs), so zero is refused when the arguments are read.
fn positive() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..)
}

/// Steps per second of the three workloads and the signal's latency samples (ms).
#[derive(Default)]
struct Figures {
    sequential: f64,
    fanout: f64,
    concurrent: f64,
    signal_ms: Vec<f64>,
}

fn main() {
    let args = Args::parse();
    bench(&args);
    drop_databases(&args.url);
}

/// Every part of the benchmark `args` asks for.
fn bench(args: &Args) {
    let reel = reel_binary(args.reel.as_deref()).unwrap_or_else(|e| {
        eprintln!("pg-bench: {e}");
        std::process::exit(2);
    });
    let work = tempfile::tempdir().expect("a temporary directory");

    println!("== PostgreSQL: Reel workers and DBOS on one server");
    println!(
        "workloads: {} sequential steps (one run), a {}-wide fan-out (one run), {} concurrent runs \
         of {} steps; signal: from the signal to its run's next step, workers idle",
        args.steps, args.steps, args.runs, args.short_steps
    );
    if args.parked > 0 {
        println!(
            "Reel's database holds {} runs parked on a signal that never comes",
            args.parked
        );
    }
    let only = args.only.as_deref();
    if args.command_reps > 0 && matches!(only, None | Some("commands")) {
        whole_commands(&reel, work.path(), &args.url, args.command_reps);
    }
    if matches!(only, None | Some("looks")) {
        looks(&args.url, &args.in_flight);
    }
    if matches!(only, Some("commands" | "looks")) {
        return;
    }
    let saved = args.dbos.as_ref().map(|file| {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        serde_json::from_str::<Value>(text.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{} is not bench.py's JSON: {e}", file.display()))
    });
    let dbos = saved.or_else(|| {
        args.python.as_ref().and_then(|python| {
            let url = dbos_url(&args.url, &database(&args.url, "dbos"));
            match run_dbos(python, &url, args) {
                Ok(v) => Some(v),
                Err(e) => {
                    eprintln!("DBOS could not run: {e}");
                    None
                }
            }
        })
    });
    let mut rows = Vec::new();
    for mode in &args.modes {
        for &n in &args.workers {
            let figures = reel_side(&reel, work.path(), args, n, mode);
            rows.push((
                format!("Reel, {n} worker{}, {mode}", if n == 1 { "" } else { "s" }),
                figures,
            ));
        }
    }
    if let Some(d) = &dbos {
        let rate = |k: &str| d[k]["steps_per_s"].as_f64().unwrap_or(0.0);
        let signal_ms = d["signal_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let version = d["version"].as_str().unwrap_or("?");
        rows.push((
            format!("DBOS {version}"),
            Figures {
                sequential: rate("sequential"),
                fanout: rate("fanout"),
                concurrent: rate("concurrent"),
                signal_ms,
            },
        ));
    }
    print_table(&rows, dbos.is_some(), args);
    if args.modes.iter().any(|m| m == "durable") {
        let ceiling = commit_ceiling(&args.url, args.steps, args.reps, false);
        let shaped = commit_ceiling(&args.url, args.steps, args.reps, true);
        println!(
            "ceiling: one client's durable commits one after the other, each one statement in \
             one round trip (a row of about a journal event's size): {ceiling:.0}/s; each a \
             durable step's writes (its run's row moved on under its fence, three journal \
             rows): {shaped:.0}/s"
        );
        for (name, f) in rows.iter().filter(|(name, _)| name.ends_with("durable")) {
            println!(
                "{name}: {n} sequential steps at {:.0} % of the ceiling, {:.0} % of a step's",
                100.0 * f.sequential / ceiling,
                100.0 * f.sequential / shaped,
                n = args.steps
            );
        }
        if let Some((name, d)) = rows.last().filter(|_| dbos.is_some()) {
            println!(
                "{name}: 20× its sequential rate is {:.0} % of the ceiling, {:.0} % of a step's",
                100.0 * 20.0 * d.sequential / ceiling,
                100.0 * 20.0 * d.sequential / shaped
            );
        }
    }
}

/// Looks timed for each row of [`looks`] (the median is shown), after one untimed.
const LOOKS: usize = 50;

/// A worker's look at what is due (its claim of up to four runs, what is due next and who
/// holds runs on this host), through the store as `reel worker` makes it, with `n` runs in
/// flight for each `n`: running under live leases, held by four processes on this host (a few
/// workers each driving many), beside as many ended runs. Nothing is due, so each look only
/// looks: what it costs must not grow with what runs.
fn looks(url: &str, in_flight: &[usize]) {
    println!("\n== a worker's look with N runs in flight (median of {LOOKS})");
    println!("| runs in flight | look | per run in flight | vs the first row |");
    println!("|---|---|---|---|");
    let me = reel_store::Owner::this_process();
    let mut first = None;
    for &n in in_flight {
        let db = database(url, &format!("looks_{n}"));
        let store = PgStore::open(&db, Arc::new(SystemClock)).expect("the bench's database opens");
        let mut client = postgres::Client::connect(&db, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
        let count = i64::try_from(n).expect("a count of runs");
        client
            .execute(
                "INSERT INTO reel.runs (id, flow, flow_digest, cwd, status, created_at, ended_at,
                    durability)
                 SELECT 'ended-' || g, 'f', 'd', '/', 'succeeded', g, g, 'fast'
                 FROM generate_series(1, $1::bigint) g",
                &[&count],
            )
            .expect("the ended runs are written");
        client
            .execute(
                "INSERT INTO reel.runs (id, flow, flow_digest, cwd, status, created_at,
                    lease_owner, lease_pid, lease_host, lease_started, lease_expires_at,
                    durability)
                 SELECT 'running-' || g, 'f', 'd', '/', 'running', g, $2 || '-' || (g % 4), $3,
                    $4, $5, (extract(epoch from clock_timestamp()) * 1000)::bigint + 3600000,
                    'fast'
                 FROM generate_series(1, $1::bigint) g",
                &[
                    &count,
                    &me.id,
                    &i64::from(me.pid),
                    &me.host,
                    &i64::try_from(me.started).unwrap_or(i64::MAX),
                ],
            )
            .expect("the running runs are written");
        client
            .batch_execute("VACUUM ANALYZE reel.runs")
            .expect("the statistics are refreshed");
        let worker = reel_store::Owner {
            id: format!("{}-worker", me.id),
            ..me.clone()
        };
        let skip = std::collections::HashSet::new();
        let mut samples = Vec::with_capacity(LOOKS);
        for i in 0..=LOOKS {
            let began = Instant::now();
            let look = store
                .look(now_ms(), &worker, 60_000, 4, &skip)
                .expect("a look");
            assert!(look.claims.is_empty(), "nothing is due");
            if i > 0 {
                samples.push(began.elapsed().as_secs_f64() * 1e3);
            }
        }
        samples.sort_by(f64::total_cmp);
        let ms = samples[samples.len() / 2];
        let base = *first.get_or_insert(ms);
        println!(
            "| {n} | {ms:.2} ms | {:.1} ns | {:.2}× |",
            ms * 1e6 / n as f64,
            ms / base
        );
    }
}

/// What a user pays for the commands typed most, whole processes on a fresh store of each
/// kind: `reel run` of a one-step flow (in its default mode), `reel events RUN --json` of
/// such a run and `reel runs --limit 1`; the median of `reps` after one untimed, alternating
/// the stores sample by sample so that a slow moment of the machine meets both.
fn whole_commands(reel: &Path, work: &Path, url: &str, reps: usize) {
    let dir = work.join("commands");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("one.reel"),
        "flow one {\n  step a = echo { value: \"hi\" }\n  output a\n}\n",
    )
    .unwrap();
    let stores = [
        ("REEL_STORE_URL", database(url, "commands")),
        ("REEL_HOME", dir.join(".reel").display().to_string()),
    ];
    let command = |(var, value): &(&str, String), args: &[&str]| {
        let began = Instant::now();
        let out = Command::new(reel)
            .args(args)
            .current_dir(&dir)
            .env(var, value)
            .output()
            .expect("reel starts");
        let took = began.elapsed();
        assert!(
            out.status.success(),
            "reel {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.stdout, took)
    };
    let runs: Vec<String> = stores
        .iter()
        .map(|store| {
            let (out, _) = command(store, &["run", "one.reel", "--json"]);
            let v: Value = serde_json::from_slice(&out).expect("`reel run --json` answers JSON");
            v["run"].as_str().expect("a run id").to_string()
        })
        .collect();
    println!("whole commands, the median of {reps} processes each:");
    println!("| command | PostgreSQL | SQLite | PostgreSQL / SQLite |");
    println!("|---|---:|---:|---:|");
    let shown: [(&str, Vec<&str>); 3] = [
        ("`reel run` of one `echo` step", vec!["run", "one.reel"]),
        ("`reel events RUN --json`", vec!["events", "RUN", "--json"]),
        ("`reel runs --limit 1`", vec!["runs", "--limit", "1"]),
    ];
    for (name, args) in shown {
        let mut samples = [Vec::new(), Vec::new()];
        for rep in 0..=reps {
            for (i, store) in stores.iter().enumerate() {
                let args: Vec<&str> = args
                    .iter()
                    .map(|a| if *a == "RUN" { runs[i].as_str() } else { a })
                    .collect();
                let (_, took) = command(store, &args);
                if rep > 0 {
                    samples[i].push(took);
                }
            }
        }
        let [pg, sqlite] = samples.map(|s| Stats::of(&s).median);
        println!(
            "| {name} | {} | {} | {:.1}× |",
            show(pg),
            show(sqlite),
            pg.as_secs_f64() / sqlite.as_secs_f64()
        );
    }
}

/// What one client can commit durably one transaction after another on the server of `url`,
/// each one statement in one round trip followed by the server's flush of its log: the median
/// of `reps` passes of `n` commits, on a fresh database. Each commit is the least a durable
/// step can be, one row ([`row_commits`]): the ceiling of a sequential run's durable steps,
/// whatever the engine, as the SQLite bench's fsync probe is for its disk; or, with
/// `step_shaped`, what a durable step of Reel's journal must commit ([`step_commits`]).
fn commit_ceiling(url: &str, n: usize, reps: usize, step_shaped: bool) -> f64 {
    let url = database(url, if step_shaped { "shaped" } else { "ceiling" });
    let mut commit = if step_shaped {
        step_commits(&url)
    } else {
        row_commits(&url)
    };
    let mut rates: Vec<f64> = (0..reps)
        .map(|_| {
            let began = Instant::now();
            for _ in 0..n {
                commit();
            }
            n as f64 / began.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// A client of the database `url` committing durably.
fn durable_client(url: &str) -> postgres::Client {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
    client
        .batch_execute("SET synchronous_commit = on")
        .expect("the probe's session");
    client
}

/// Commits of one row of about a journal event's size, each its own transaction, in a table
/// of their own.
fn row_commits(url: &str) -> Box<dyn FnMut()> {
    let mut client = durable_client(url);
    client
        .batch_execute("CREATE TABLE probe (id BIGINT PRIMARY KEY, data TEXT NOT NULL)")
        .expect("the probe's table");
    let insert = client
        .prepare("INSERT INTO probe (id, data) VALUES ($1, $2)")
        .expect("the probe's statement");
    let data = "x".repeat(300);
    let mut id = 0i64;
    Box::new(move || {
        id += 1;
        client
            .execute(&insert, &[&id, &data])
            .expect("a probe's commit");
    })
}

/// Commits of what a durable sequential `echo` step writes, in the store's own tables (its
/// schema, made by opening a store): the run's row moved on under its fence and three journal
/// rows of the sizes such a step writes (the call's result, the step's end, the next step's
/// start), the store's own statement, planned once for any parameters as the store's writer's
/// session has it. No engine and no `reel`: the ceiling of durable sequential steps for an
/// engine that journals what Reel's does on this server. (`pgbench` running the same
/// statement, its arrays built from literals, on a fresh store's tables commits about as many
/// a second.)
fn step_commits(url: &str) -> Box<dyn FnMut()> {
    drop(PgStore::open(url, Arc::new(SystemClock)).expect("the probe's store opens"));
    let mut client = durable_client(url);
    client
        .batch_execute(
            "SET search_path TO reel; SET plan_cache_mode = force_generic_plan;
             INSERT INTO runs (id, flow, flow_digest, cwd, status, created_at, durability,
                lease_token, next_seq)
             VALUES ('run-01JDXYZABCDEFGHJKMNPQRSTVW', 'f', 'd', '/', 'running', 0, 'durable',
                7, 0)",
        )
        .expect("the probe's run");
    // The store's statement for one run's rows (`append_one`), its guard aside.
    let insert = client
        .prepare(
            "WITH fenced AS (
                UPDATE runs SET next_seq = $2 WHERE id = $1 AND lease_token = 7
                    AND next_seq = $3 RETURNING id)
             INSERT INTO journal (run, seq, at, kind, step, idx, attempt, data)
             SELECT fenced.id, u.* FROM fenced, unnest($4::bigint[], $5::bigint[],
                $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::text[])
                AS u(seq, at, kind, step, idx, attempt, data)",
        )
        .expect("the probe's statement");
    // A sequential `echo` step's events, by kind and length of their data (as `run-bench`'s
    // SQLite probe writes them).
    let kinds = vec!["effect_recorded", "step_succeeded", "step_started"];
    let datas = vec!["x".repeat(92), "x".repeat(32), "x".repeat(104)];
    let run = "run-01JDXYZABCDEFGHJKMNPQRSTVW";
    let mut seq = 0i64;
    Box::new(move || {
        let seqs = vec![seq, seq + 1, seq + 2];
        let at = vec![1_764_892_800_000i64 + seq; 3];
        let step = vec![Some(format!("s{}", seq / 3)); 3];
        let idx: Vec<Option<i64>> = vec![None; 3];
        let attempt = vec![Some(1i64); 3];
        let wrote = client
            .execute(
                &insert,
                &[
                    &run,
                    &(seq + 3),
                    &seq,
                    &seqs,
                    &at,
                    &kinds,
                    &step,
                    &idx,
                    &attempt,
                    &datas,
                ],
            )
            .expect("a probe's commit");
        assert_eq!(wrote, 3, "the probe's fence holds");
        seq += 3;
    })
}

/// Reel with `n` workers, runs in `mode`: the three workloads and the signal's latency.
fn reel_side(reel: &Path, work: &Path, args: &Args, n: usize, mode: &str) -> Figures {
    let url = database(&args.url, &format!("reel_{mode}_{n}w"));
    let dir = work.join(format!("{mode}-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let flows = [
        ("seq.reel", sequential_flow(args.steps)),
        ("fan.reel", fanout_flow(args.steps)),
        ("short.reel", sequential_flow(args.short_steps)),
        ("signal.reel", sequential_flow(1)),
    ];
    for (name, text) in &flows {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let store: Arc<dyn Store> =
        Arc::new(PgStore::open(&url, Arc::new(SystemClock)).expect("the bench's database opens"));
    let workers = Workers(
        (0..n)
            .map(|i| {
                let home = dir.join(format!("worker-{i}"));
                std::fs::create_dir_all(&home).unwrap();
                Command::new(reel)
                    .args(["worker", "--concurrency", "256"])
                    .current_dir(&home)
                    .env("REEL_STORE_URL", &url)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("reel worker starts")
            })
            .collect(),
    );
    let start = |file: &str, count: usize| start_runs(reel, &dir, &url, mode, file, count);
    if args.parked > 0 {
        park(&url, &start("signal.reel", 1)[0], args.parked);
    }
    // The workers have looked once and are idle.
    std::thread::sleep(Duration::from_millis(500));
    let timed = |ids: &[String], steps: usize| {
        let ms = signal_and_wait(store.as_ref(), &url, ids);
        steps as f64 / (ms.max(1) as f64 / 1000.0)
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let reps = args.reps;
    let sequential = median(
        (0..reps)
            .map(|_| timed(&start("seq.reel", 1), args.steps))
            .collect(),
    );
    let fanout = median(
        (0..reps)
            .map(|_| timed(&start("fan.reel", 1), args.steps))
            .collect(),
    );
    let mut asked = args.statements.then(|| Statements::new(&url));
    let worker_pids: Vec<u32> = workers.0.iter().map(Child::id).collect();
    let concurrent = median(
        (0..reps)
            .map(|_| {
                let ids = start("short.reel", args.runs);
                if let Some(asked) = &mut asked {
                    asked.reset(&worker_pids);
                }
                let rate = timed(&ids, args.runs * args.short_steps);
                if let Some(asked) = &mut asked {
                    asked.add(&worker_pids);
                }
                rate
            })
            .collect(),
    );
    if let Some(asked) = asked {
        asked.print(&format!("{n} worker(s), {mode}"), reps);
    }
    let signal_ms = (0..args.signals)
        .map(|_| {
            let ids = start("signal.reel", 1);
            // Idle again after the run's start, as a run that waits for hours finds them.
            std::thread::sleep(Duration::from_millis(300));
            signal_latency(store.as_ref(), &ids[0])
        })
        .collect();
    drop(workers);
    Figures {
        sequential,
        fanout,
        concurrent,
        signal_ms,
    }
}

/// What bursts asked the server, summed by statement over the bursts (`--statements`).
struct Statements {
    client: postgres::Client,
    /// Calls, rows and execution time (ms) by the statement's text.
    by_text: std::collections::BTreeMap<String, (i64, i64, f64)>,
    /// CPU time the workers and the server's processes had used at the last reset.
    cpu_before: (Duration, Duration),
    /// CPU time the workers and the server's processes used in the bursts, summed.
    cpu: (Duration, Duration),
}

/// The processes of the PostgreSQL server (by their name, `postgres`): the bench's own
/// private server is the only one on its machine.
fn server_pids() -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == "postgres")
        })
        .collect()
}

impl Statements {
    fn new(url: &str) -> Self {
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .unwrap_or_else(|e| {
                panic!("--statements: pg_stat_statements is not loaded ({e}); start the server with REEL_PG_STATEMENTS=on")
            });
        Statements {
            client,
            by_text: Default::default(),
            cpu_before: Default::default(),
            cpu: Default::default(),
        }
    }

    /// Forgets what the server counted so far (a burst's runs' starts, this bench's setup),
    /// and notes the CPU time the workers `pids` and the server's processes have used.
    fn reset(&mut self, pids: &[u32]) {
        self.client
            .batch_execute("SELECT pg_stat_statements_reset()")
            .expect("the statistics are reset");
        self.cpu_before = (
            processes_cpu(pids.iter().copied()),
            processes_cpu(server_pids()),
        );
    }

    /// Adds what the server counted since the reset, in this database, and the CPU time used
    /// since.
    fn add(&mut self, pids: &[u32]) {
        let (workers, server) = (
            processes_cpu(pids.iter().copied()),
            processes_cpu(server_pids()),
        );
        self.cpu.0 += workers.saturating_sub(self.cpu_before.0);
        self.cpu.1 += server.saturating_sub(self.cpu_before.1);
        let rows = self
            .client
            .query(
                "SELECT query, calls, rows, total_exec_time FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND query NOT LIKE '%pg_stat_statements%'",
                &[],
            )
            .expect("the statistics are read");
        for row in rows {
            let text: String = row.get(0);
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let e = self.by_text.entry(text).or_default();
            e.0 += row.get::<_, i64>(1);
            e.1 += row.get::<_, i64>(2);
            e.2 += row.get::<_, f64>(3);
        }
    }

    /// Prints the statements a burst asked, most called first, per burst.
    fn print(&self, label: &str, bursts: usize) {
        let per = |v: i64| v as f64 / bursts as f64;
        let mut all: Vec<_> = self.by_text.iter().collect();
        all.sort_by_key(|(_, v)| std::cmp::Reverse(v.0));
        let total: i64 = all.iter().map(|(_, v)| v.0).sum();
        let ms: f64 = all.iter().map(|(_, v)| v.2).sum();
        let cpu_ms = |d: Duration| d.as_secs_f64() * 1000.0 / bursts as f64;
        println!(
            "CPU a burst of short runs, {label}: workers {:.0} ms, PostgreSQL {:.0} ms",
            cpu_ms(self.cpu.0),
            cpu_ms(self.cpu.1)
        );
        println!(
            "statements a burst of short runs, {label}: {:.0} ({:.0} ms executing), by calls:",
            per(total),
            ms / bursts as f64
        );
        for (text, (calls, rows, ms)) in all.iter().take(20) {
            let short: String = text.chars().take(110).collect();
            println!(
                "  {:>7.1} calls {:>8.1} rows {:>7.1} ms  {short}",
                per(*calls),
                per(*rows),
                ms / bursts as f64
            );
        }
    }
}

/// The `reel worker` processes of one configuration, stopped when it is done, and also when
/// the bench fails part-way (a panic unwinds through here): left running, they would poll
/// their dropped database and take the next configuration's cores.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// Starts `count` runs of `file` with `reel run` (a few at a time), each parking at its signal.
fn start_runs(
    reel: &Path,
    dir: &Path,
    url: &str,
    mode: &str,
    file: &str,
    count: usize,
) -> Vec<String> {
    let one = || {
        let out = Command::new(reel)
            .args(["run", file, "--json", "--durability", mode])
            .current_dir(dir)
            .env("REEL_STORE_URL", url)
            .output()
            .expect("reel run starts");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
            panic!("reel run: {}", String::from_utf8_lossy(&out.stderr));
        });
        assert_eq!(v["status"], "waiting", "{v}");
        v["run"].as_str().unwrap().to_string()
    };
    let per_thread = count.div_ceil(4);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..count.min(4))
            .map(|t| {
                s.spawn(move || {
                    let n = per_thread.min(count.saturating_sub(t * per_thread));
                    (0..n).map(|_| one()).collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// Makes `count` copies of the parked run `id` (its row only, under new ids: no worker reads
/// their journals, since none of them is ever due), and refreshes the planner's statistics
/// as autovacuum would soon after.
fn park(url: &str, id: &str, count: usize) {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
    let count = i64::try_from(count).expect("a count of runs");
    client
        .execute(
            "INSERT INTO reel.runs
             SELECT (jsonb_populate_record(r, jsonb_build_object(
                         'id', r.id || '-parked-' || g, 'created_at', r.created_at + g))).*
             FROM reel.runs r, generate_series(1, $2::bigint) g WHERE r.id = $1",
            &[&id, &count],
        )
        .expect("the parked runs are written");
    client
        .batch_execute("ANALYZE reel.runs")
        .expect("the statistics are refreshed");
}

/// Sends `go` to each run (from up to 32 threads, as many senders would: each signal is
/// committed durably before `send_signal` returns, and the store commits the signals that
/// wait together at once) and waits until all have ended; the time in ms from the first signal
/// to the last run's end as the store recorded it.
///
/// It waits with one statement for all the runs every 5 ms (on a connection of its own, made
/// before the first signal), so that the bench's polling takes as little as it can of the
/// cores the workers and the server share.
fn signal_and_wait(store: &dyn Store, url: &str, ids: &[String]) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
    let began = now_ms();
    std::thread::scope(|s| {
        for chunk in ids.chunks(ids.len().div_ceil(32)) {
            s.spawn(move || {
                for id in chunk {
                    store
                        .send_signal(id, "go", &Value::Null)
                        .expect("the signal is sent");
                }
            });
        }
    });
    let deadline = Instant::now() + Duration::from_secs(600);
    let ended = loop {
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                        min(id) FILTER (WHERE status IN ('failed', 'canceled', 'quarantined')),
                        max(ended_at)
                 FROM reel.runs WHERE id = ANY($1)",
                &[&ids],
            )
            .expect("the runs are read");
        if let Some(id) = row.get::<_, Option<String>>(1) {
            let run = store.run(&id).unwrap().expect("the run exists");
            panic!("run {id} ended {}: {:?}", run.status.as_str(), run.error);
        }
        if usize::try_from(row.get::<_, i64>(0)).ok() == Some(ids.len()) {
            break row.get::<_, Option<i64>>(2).expect("an ended run's time");
        }
        assert!(Instant::now() < deadline, "the runs did not end");
        std::thread::sleep(Duration::from_millis(5));
    };
    ended - began
}

/// Polls until run `id` has succeeded; its end time (ms).
fn wait_for_end(store: &dyn Store, id: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let run = store.run(id).unwrap().expect("the run exists");
        match run.status {
            RunStatus::Succeeded => return run.ended_at.expect("an ended run's time"),
            RunStatus::Failed | RunStatus::Canceled | RunStatus::Quarantined => {
                panic!("run {id} ended {}: {:?}", run.status.as_str(), run.error)
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "run {id} did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Ms from sending `go` to the first journal event of the step after it.
fn signal_latency(store: &dyn Store, id: &str) -> f64 {
    let sent = now_ms();
    store
        .send_signal(id, "go", &Value::Null)
        .expect("the signal is sent");
    wait_for_end(store, id);
    let mut next = None;
    store
        .read_journal(id, 0, &mut |row| {
            if row.step.as_deref() == Some("s0") {
                next = Some(row.at);
                return Flow::Stop;
            }
            Flow::Continue
        })
        .unwrap();
    (next.expect("the step after the signal ran") - sent) as f64
}

/// A run that waits for `go`, then `n` `echo` steps, each reading the one before.
fn sequential_flow(n: usize) -> String {
    let mut s = String::from(
        "flow bench {\n  step go = signal { name: \"go\", timeout: 1d }\n  \
         step s0 = echo { value: 0, after: [go] }\n",
    );
    for i in 1..n {
        s.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    s.push_str(&format!("  output s{}\n}}\n", n - 1));
    s
}

/// A run that waits for `go`, then one `foreach` of `n` `echo` calls, all in flight at once.
fn fanout_flow(n: usize) -> String {
    format!(
        "flow bench {{\n  step go = signal {{ name: \"go\", timeout: 1d }}\n  \
         step s0 = echo {{\n    foreach: range({n})\n    concurrency: {n}\n    value: item\n    \
         after: [go]\n  }}\n  output len(s0)\n}}\n"
    )
}

/// The databases this benchmark made, dropped at its end (see [`drop_databases`]).
static MADE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Creates a fresh database named after `what` on the server of `url`; its URL. It is
/// dropped when the benchmark ends.
fn database(url: &str, what: &str) -> String {
    let name = format!("bench_{what}_{}", std::process::id());
    MADE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(name.clone());
    let mut admin = postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the server: {e}"));
    // Two statements: CREATE DATABASE cannot run inside the transaction a batch is.
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        admin
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let (server, rest) = url.rsplit_once('/').expect("a database in the URL");
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("{server}/{name}{query}")
}

/// The same database as SQLAlchemy's URL for DBOS (psycopg; a Unix socket as `host=`).
fn dbos_url(url: &str, db: &str) -> String {
    let config: postgres::Config = url.parse().expect("a PostgreSQL URL");
    let user = config.get_user().unwrap_or("postgres");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let name = db.rsplit_once('/').unwrap().1.split('?').next().unwrap();
    match config.get_hosts().first() {
        Some(postgres::config::Host::Unix(path)) => format!(
            "postgresql://{user}@/{name}?host={}&port={port}",
            path.display()
        ),
        Some(postgres::config::Host::Tcp(host)) => {
            format!("postgresql://{user}@{host}:{port}/{name}")
        }
        None => format!("postgresql://{user}@localhost:{port}/{name}"),
    }
}

/// Runs `bench/dbos/bench.py` against `url`; its figures.
fn run_dbos(python: &Path, url: &str, args: &Args) -> Result<Value, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("dbos/bench.py");
    let out = Command::new(python)
        .arg(&script)
        .args(["--database-url", url])
        .args(["--steps", &args.steps.to_string()])
        .args(["--reps", &args.reps.to_string()])
        .args(["--runs", &args.runs.to_string()])
        .args(["--short-steps", &args.short_steps.to_string()])
        .args(["--signals", &args.signals.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{} exited with {}", script.display(), out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).map_err(|e| format!("{e}: {last}"))
}

/// The table of figures, with each row's ratio to DBOS's when DBOS ran.
fn print_table(rows: &[(String, Figures)], with_dbos: bool, args: &Args) {
    let dbos = rows.last().filter(|_| with_dbos).map(|(_, f)| f);
    let ratio = |a: f64, b: Option<f64>| match b {
        // One decimal below 100, where it tells 0.4× from 1× and 19.6× (short of the aim)
        // from 20×.
        Some(b) if b > 0.0 && a / b < 100.0 => format!(" ({:.1}×)", a / b),
        Some(b) if b > 0.0 => format!(" ({:.0}×)", a / b),
        _ => String::new(),
    };
    println!(
        "\n| | {n} sequential steps/s | {n}-wide fan-out steps/s | {} runs × {} steps, steps/s | \
         signal → next step, median (max) |",
        args.runs,
        args.short_steps,
        n = args.steps
    );
    println!("|---|---|---|---|---|");
    for (name, f) in rows {
        let mut ms = f.signal_ms.clone();
        ms.sort_by(f64::total_cmp);
        let signal = match (ms.get(ms.len() / 2), ms.last()) {
            (Some(m), Some(max)) => format!("{m:.0} ms ({max:.0} ms)"),
            _ => "–".to_string(),
        };
        let is_dbos = with_dbos && std::ptr::eq(f, dbos.unwrap());
        let r = |a: f64, b: Option<f64>| if is_dbos { String::new() } else { ratio(a, b) };
        println!(
            "| {name} | {:.0}{} | {:.0}{} | {:.0}{} | {signal} |",
            f.sequential,
            r(f.sequential, dbos.map(|d| d.sequential)),
            f.fanout,
            r(f.fanout, dbos.map(|d| d.fanout)),
            f.concurrent,
            r(f.concurrent, dbos.map(|d| d.concurrent)),
        );
    }
    if with_dbos {
        println!("(×: Reel's rate over DBOS's on the same server; aims ≥ 20×, signal < 50 ms)");
    }
}

/// The wall clock in ms, as the store stamps its rows.
fn now_ms() -> i64 {
    use reel_store::Clock;
    SystemClock.now_ms()
}

/// Drops the databases the benchmark made, so that a server given by `--url` (a team's own,
/// not only the private one `bench/run.sh` starts and removes) is left as it was found. A
/// database still held by a process the benchmark could not end is dropped anyway
/// (`WITH (FORCE)`, PostgreSQL 13 and later); one that cannot be is named, not fatal.
fn drop_databases(url: &str) {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    if made.is_empty() {
        return;
    }
    let mut admin = match postgres::Client::connect(url, postgres::NoTls) {
        Ok(admin) => admin,
        Err(e) => {
            eprintln!("pg-bench: the databases it made are left on the server: {e}");
            return;
        }
    };
    for name in made {
        if let Err(e) = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        {
            eprintln!("pg-bench: database {name} is left on the server: {e}");
        }
    }
}
