//! `check-bench`: full check, FlowSpec building, the serde_json floor and incremental re-checks of
//! generated flows, side by side for several sizes, with the aims next to the figures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use reel_bench::generate::{Edit, FLOW_NAME, Generated, TYPED_STEP, generate};
use reel_bench::measure::{Stats, ratio, show, timed};
use reel_compiler::{RootDb, SourceFile, build_flow, file_diagnostics};
use reel_flowspec::FlowSpec;
use salsa::Setter;

/// Measures checking generated flows of each size: fresh, incrementally, and against serde_json.
#[derive(Parser)]
#[command(name = "check-bench")]
struct Args {
    /// The flow sizes, in steps.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,
    /// The generator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds to spend on each full-check measurement (at least 5 and at most 50 iterations).
    #[arg(long, default_value_t = 3.0)]
    budget: f64,
    /// Edits timed for each incremental measurement.
    #[arg(long, default_value_t = 101)]
    edits: usize,
    /// Also print which queries one edit re-executes, by query (an untimed pass).
    #[arg(long)]
    explain: bool,
    /// Run only this measurement, repeatedly for `--budget` seconds, and print its figure (for `perf record`).
    #[arg(long, value_enum)]
    only: Option<Phase>,
}

/// One measurement, for `--only`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Phase {
    /// The full check on a fresh database.
    Full,
    /// Parsing alone, group by group as the check parses (`reel_syntax::outline::parse_outlined`).
    Parse,
    /// `build_flow` after a check.
    Lower,
    /// `serde_json::from_str::<FlowSpec>` of the built spec.
    Floor,
    /// The literal edit, incrementally.
    Literal,
    /// The type-changing edit, incrementally.
    Typed,
    /// A new step typed key by key in the middle of the flow (what `lsp-bench --only typing`
    /// types): each key's `set_text` + `file_diagnostics`, as the language server checks a key
    /// before it answers anything; with `--explain`, the queries the slowest keys re-executed.
    Typing,
}

/// The figures of one flow size.
struct Figures {
    steps: usize,
    bytes: usize,
    lines: usize,
    full: Stats,
    parse: Stats,
    lower: Stats,
    build_fresh: Stats,
    json_bytes: usize,
    floor: Stats,
    literal: Stats,
    typed: Stats,
    typed_diagnostics: usize,
    explain: Option<Explain>,
}

/// How many times each query ran for one edit of each kind.
struct Explain {
    literal: BTreeMap<String, usize>,
    typed: BTreeMap<String, usize>,
}

/// Times `f` repeatedly (after one warm-up run) for about `budget` seconds: 5 to 50 samples.
fn sample(budget: f64, mut f: impl FnMut() -> Duration) -> Stats {
    f();
    let start = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < 5 || (samples.len() < 50 && start.elapsed().as_secs_f64() < budget) {
        samples.push(f());
    }
    Stats::of(&samples)
}

fn new_file(db: &dyn reel_compiler::Db, text: &Arc<str>) -> SourceFile {
    SourceFile::new(db, "bench.reel".into(), "/".into(), text.clone())
}

fn full_check(text: &Arc<str>) -> Duration {
    let db = RootDb::default();
    let file = new_file(&db, text);
    let (n, t) = timed(|| file_diagnostics(&db, file).len());
    assert_eq!(n, 0, "the generated flow must check cleanly");
    drop(db);
    t
}

/// Times `set_text` + `file_diagnostics` on a warm database, alternating `edit` and the original.
fn incremental(text: &Arc<str>, edit: &Edit, edits: usize) -> (Stats, usize) {
    let edited: Arc<str> = Arc::from(edit.apply(text));
    let mut db = RootDb::default();
    let file = new_file(&db, text);
    file_diagnostics(&db, file);
    let mut samples = Vec::with_capacity(edits);
    let mut edited_diagnostics = 0;
    // One untimed round trip first, so both versions have been seen once.
    for i in 0..edits + 2 {
        let next = if i % 2 == 0 { &edited } else { text };
        let start = Instant::now();
        file.set_text(&mut db).to(next.clone());
        let n = file_diagnostics(&db, file).len();
        let t = start.elapsed();
        if i % 2 == 0 {
            edited_diagnostics = n;
        } else {
            assert_eq!(n, 0, "undoing the edit must give a clean file again");
        }
        if i >= 2 {
            samples.push(t);
        }
    }
    (Stats::of(&samples), edited_diagnostics)
}

/// A database that counts the queries it executes and, as `verified NAME`, the memos it checks
/// and reuses, for `--explain`.
#[salsa::db]
#[derive(Clone)]
struct CountingDb {
    storage: salsa::Storage<Self>,
    outlines: reel_compiler::OutlineCache,
}

#[salsa::db]
impl salsa::Database for CountingDb {}

#[salsa::db]
impl reel_compiler::Db for CountingDb {
    fn outlines(&self) -> &reel_compiler::OutlineCache {
        &self.outlines
    }
}

type Log = Arc<Mutex<BTreeMap<String, usize>>>;

impl CountingDb {
    fn new() -> (CountingDb, Log) {
        let log = Log::default();
        let sink = log.clone();
        let storage = salsa::Storage::new(Some(Box::new(move |event: salsa::Event| {
            let (database_key, verb) = match event.kind {
                salsa::EventKind::WillExecute { database_key } => (database_key, ""),
                salsa::EventKind::DidValidateMemoizedValue { database_key } => {
                    (database_key, "verified ")
                }
                _ => return,
            };
            let name = format!("{database_key:?}");
            let name = name.split('(').next().unwrap_or_default();
            if let Ok(mut log) = sink.lock() {
                *log.entry(format!("{verb}{name}")).or_default() += 1;
            }
        })));
        (
            CountingDb {
                storage,
                outlines: Default::default(),
            },
            log,
        )
    }
}

fn executed(text: &Arc<str>, edit: &Edit) -> BTreeMap<String, usize> {
    let (mut db, log) = CountingDb::new();
    let file = new_file(&db, text);
    file_diagnostics(&db, file);
    log.lock().expect("log").clear();
    file.set_text(&mut db).to(Arc::from(edit.apply(text)));
    file_diagnostics(&db, file);
    log.lock().expect("log").clone()
}

/// Runs one measurement alone and prints it.
fn only(g: &Generated, args: &Args, phase: Phase) {
    let text: Arc<str> = Arc::from(g.text.as_str());
    let stats = match phase {
        Phase::Full => sample(args.budget, || full_check(&text)),
        Phase::Parse => sample(args.budget, || {
            timed(|| reel_syntax::outline::parse_outlined(&text)).1
        }),
        Phase::Lower => sample(args.budget, || lower(&text)),
        Phase::Floor => {
            let json = spec_json(&text);
            sample(args.budget, || floor(&json))
        }
        Phase::Literal => incremental(&text, &g.literal_edit, args.edits).0,
        Phase::Typed => incremental(&text, &g.type_edit, args.edits).0,
        Phase::Typing => typing(g, args),
    };
    println!(
        "{phase:?}, {} steps: median {}, p95 {} ({} samples)",
        g.steps,
        show(stats.median),
        show(stats.p95),
        stats.count
    );
}

/// Types [`TYPED_STEP`] key by key into a warm database, timing each key's check; repeated until
/// `--budget` seconds are spent (each round starts again from the untouched flow). With
/// `--explain`, on a database that counts executions, and prints the slowest keys' queries.
fn typing(g: &Generated, args: &Args) -> Stats {
    if args.explain {
        let (db, log) = CountingDb::new();
        typing_on(db, Some(log), g, args)
    } else {
        typing_on(RootDb::default(), None, g, args)
    }
}

fn typing_on<D: reel_compiler::Db>(
    mut db: D,
    log: Option<Log>,
    g: &Generated,
    args: &Args,
) -> Stats {
    let keys = TYPED_STEP.chars().count();
    let texts: Vec<Arc<str>> = (0..=keys).map(|k| Arc::from(g.typed(k))).collect();
    let file = new_file(&db, &texts[0]);
    file_diagnostics(&db, file);
    let mut samples = Vec::new();
    let mut worst: Vec<(Duration, usize, BTreeMap<String, usize>)> = Vec::new();
    let start = Instant::now();
    while samples.is_empty() || start.elapsed().as_secs_f64() < args.budget {
        for (k, text) in texts.iter().enumerate().skip(1) {
            if let Some(log) = &log {
                log.lock().expect("log").clear();
            }
            let t = Instant::now();
            file.set_text(&mut db).to(text.clone());
            file_diagnostics(&db, file);
            let took = t.elapsed();
            samples.push(took);
            if let Some(log) = &log {
                worst.push((took, k, log.lock().expect("log").clone()));
            }
        }
        file.set_text(&mut db).to(texts[0].clone());
        file_diagnostics(&db, file);
    }
    // The slowest round of each key, in key order, with the queries that ran most.
    let mut slowest: BTreeMap<usize, (Duration, BTreeMap<String, usize>)> = BTreeMap::new();
    for (took, k, queries) in worst {
        if slowest.get(&k).is_none_or(|(t, _)| *t < took) {
            slowest.insert(k, (took, queries));
        }
    }
    for (k, (took, queries)) in &slowest {
        let typed: String = TYPED_STEP.chars().take(*k).collect();
        // What ran, most first, then the biggest counts of what was verified.
        let mut by_count: Vec<_> = queries.iter().collect();
        by_count.sort_by_key(|q| (q.0.starts_with("verified "), std::cmp::Reverse(*q.1)));
        let top: Vec<String> = by_count
            .iter()
            .filter(|(q, _)| !q.starts_with("verified "))
            .chain(
                by_count
                    .iter()
                    .filter(|(q, _)| q.starts_with("verified "))
                    .take(4),
            )
            .map(|(q, n)| format!("{n} {q}"))
            .collect();
        println!(
            "  key {k:>2} {:<36} {:>10}  {}",
            format!("{typed:?}"),
            show(*took),
            top.join(", ")
        );
    }
    Stats::of(&samples)
}

/// `build_flow` after a full check: lowering and sealing only.
fn lower(text: &Arc<str>) -> Duration {
    let db = RootDb::default();
    let file = new_file(&db, text);
    file_diagnostics(&db, file);
    let (spec, t) = timed(|| build_flow(&db, file, FLOW_NAME));
    assert!(spec.is_some(), "the generated flow builds");
    t
}

/// The JSON of the flow's FlowSpec, as `serde_json::to_string` writes it.
fn spec_json(text: &Arc<str>) -> String {
    let db = RootDb::default();
    let file = new_file(&db, text);
    let spec = build_flow(&db, file, FLOW_NAME).expect("the generated flow builds");
    serde_json::to_string(&spec).expect("a FlowSpec serializes")
}

/// Reading the FlowSpec back with serde_json: the same information, no checking.
fn floor(json: &str) -> Duration {
    let (parsed, t) = timed(|| serde_json::from_str::<FlowSpec>(json));
    assert!(parsed.is_ok(), "the FlowSpec JSON reads back");
    t
}

fn measure(g: &Generated, args: &Args) -> Figures {
    let text: Arc<str> = Arc::from(g.text.as_str());
    eprintln!("  {} steps: full check…", g.steps);
    let full = sample(args.budget, || full_check(&text));
    let parse = sample(args.budget / 2.0, || {
        timed(|| reel_syntax::outline::parse_outlined(&text)).1
    });

    eprintln!("  {} steps: build_flow and the serde_json floor…", g.steps);
    let lower = sample(args.budget / 2.0, || lower(&text));
    let build_fresh = sample(args.budget, || {
        let db = RootDb::default();
        let file = new_file(&db, &text);
        timed(|| build_flow(&db, file, FLOW_NAME)).1
    });
    let json = spec_json(&text);
    let floor = sample(args.budget / 2.0, || floor(&json));

    eprintln!("  {} steps: incremental re-checks…", g.steps);
    let (literal, literal_diagnostics) = incremental(&text, &g.literal_edit, args.edits);
    assert_eq!(
        literal_diagnostics, 0,
        "the literal edit keeps the flow clean"
    );
    let (typed, typed_diagnostics) = incremental(&text, &g.type_edit, args.edits);
    let explain = args.explain.then(|| Explain {
        literal: executed(&text, &g.literal_edit),
        typed: executed(&text, &g.type_edit),
    });
    Figures {
        steps: g.steps,
        bytes: g.text.len(),
        lines: g.text.lines().count(),
        full,
        parse,
        lower,
        build_fresh,
        json_bytes: json.len(),
        floor,
        literal,
        typed,
        typed_diagnostics,
        explain,
    }
}

fn bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

fn mb_per_s(bytes: usize, d: Duration) -> String {
    format!("{:.1} MB/s", bytes as f64 / 1e6 / d.as_secs_f64())
}

fn row(label: &str, cells: impl IntoIterator<Item = String>) {
    let mut line = format!("{label:<44}");
    for c in cells {
        line.push_str(&format!("{c:>20}"));
    }
    println!("{}", line.trim_end());
}

fn verdict(met: bool) -> &'static str {
    if met { "MET" } else { "NOT MET" }
}

fn main() {
    // Allocate as `reel` does (see `reel_alloc`).
    reel_bench::reel_alloc::tune();
    let args = Args::parse();
    if let Some(phase) = args.only {
        for &n in &args.sizes {
            only(&generate(n, args.seed), &args, phase);
        }
        return;
    }
    let figures: Vec<Figures> = args
        .sizes
        .iter()
        .map(|&n| {
            eprintln!("generating {n} steps (seed {})…", args.seed);
            measure(&generate(n, args.seed), &args)
        })
        .collect();
    let all = |f: &dyn Fn(&Figures) -> String| figures.iter().map(f).collect::<Vec<_>>();

    println!();
    println!(
        "Reel check benchmark: generated flows (seed {}), medians unless noted",
        args.seed
    );
    println!();
    row("", all(&|f| format!("{} steps", f.steps)));
    row("source", all(&|f| bytes(f.bytes)));
    row("  lines", all(&|f| f.lines.to_string()));
    row(
        "full check, fresh db (file_diagnostics)",
        all(&|f| show(f.full.median)),
    );
    row(
        "  min .. p95",
        all(&|f| format!("{} .. {}", show(f.full.min), show(f.full.p95))),
    );
    row("  throughput", all(&|f| mb_per_s(f.bytes, f.full.median)));
    row(
        "  of which parsing alone (parse_outlined)",
        all(&|f| show(f.parse.median)),
    );
    row(
        "build_flow after the check (lower + seal)",
        all(&|f| show(f.lower.median)),
    );
    row(
        "build_flow on a fresh db (check + lower)",
        all(&|f| show(f.build_fresh.median)),
    );
    row("FlowSpec JSON", all(&|f| bytes(f.json_bytes)));
    row(
        "serde_json floor: from_str::<FlowSpec>",
        all(&|f| show(f.floor.median)),
    );
    row(
        "  throughput (of the .reel source)",
        all(&|f| mb_per_s(f.bytes, f.floor.median)),
    );
    row(
        "full check / floor",
        all(&|f| format!("{:.1}×", ratio(f.full.median, f.floor.median))),
    );
    row(
        "incremental, literal edit (set_text + check)",
        all(&|f| show(f.literal.median)),
    );
    row("  p95", all(&|f| show(f.literal.p95)));
    row(
        "  full / incremental",
        all(&|f| format!("{:.1}×", ratio(f.full.median, f.literal.median))),
    );
    row(
        "  parsing alone / incremental",
        all(&|f| format!("{:.0}%", 100.0 * ratio(f.parse.median, f.literal.median))),
    );
    row(
        "incremental, type-changing edit",
        all(&|f| show(f.typed.median)),
    );
    row("  p95", all(&|f| show(f.typed.p95)));
    row(
        "  full / incremental",
        all(&|f| format!("{:.1}×", ratio(f.full.median, f.typed.median))),
    );
    row(
        "  diagnostics while edited",
        all(&|f| f.typed_diagnostics.to_string()),
    );
    println!();
    println!(
        "(samples: full check {}, incremental {} edits per kind)",
        figures
            .iter()
            .map(|f| f.full.count.to_string())
            .collect::<Vec<_>>()
            .join("/"),
        args.edits
    );
    println!();
    println!("Aims");
    if let Some(big) = figures.iter().max_by_key(|f| f.steps) {
        let floor_ratio = ratio(big.full.median, big.floor.median);
        println!(
            "  {}-step file checked in under 10× the serde_json floor: {:.1}× → {}",
            big.steps,
            floor_ratio,
            verdict(floor_ratio < 10.0)
        );
    }
    for f in &figures {
        let r = ratio(f.full.median, f.literal.median);
        println!(
            "  incremental re-check at least 20× faster than a full one ({} steps, literal edit): {:.1}× → {}",
            f.steps,
            r,
            verdict(r >= 20.0)
        );
    }
    for f in figures.iter().filter(|f| f.explain.is_some()) {
        let e = f.explain.as_ref().expect("filtered");
        println!();
        println!("Queries one edit re-executes ({} steps)", f.steps);
        let names: std::collections::BTreeSet<&String> =
            e.literal.keys().chain(e.typed.keys()).collect();
        row("", ["literal edit".to_string(), "type edit".to_string()]);
        for n in names {
            let get = |m: &BTreeMap<String, usize>| m.get(n).copied().unwrap_or(0).to_string();
            row(&format!("  {n}"), [get(&e.literal), get(&e.typed)]);
        }
    }
}
