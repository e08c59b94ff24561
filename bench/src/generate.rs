//! Generates realistic flows of any size: typed inputs with defaults, a secret, env names, user
//! tools, and a DAG of tool, `foreach` and pure steps, every one of which type-checks cleanly.
//!
//! Each step refers to one to three earlier steps (the recent ones mostly, some far back, a few
//! hubs many steps read), so the graph has fan-in and fan-out and no cycle. The generator knows
//! the type of every step it wrote and derives well-typed expressions from it, so the file has
//! no diagnostic at all: pure and read steps nothing else reads end up in the output.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The name of the generated flow.
pub const FLOW_NAME: &str = "pipeline";

/// A one-place text edit the incremental benchmark makes (and undoes) in a generated file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// Byte offset of `original` in the generated text.
    pub at: usize,
    /// The text at that offset.
    pub original: String,
    /// What the edit puts in its place.
    pub variant: String,
}

impl Edit {
    /// `text` (the generated text) with this edit made.
    pub fn apply(&self, text: &str) -> String {
        let end = self.at + self.original.len();
        assert_eq!(&text[self.at..end], self.original, "the edit's place moved");
        let mut out = String::with_capacity(text.len() + self.variant.len());
        out.push_str(&text[..self.at]);
        out.push_str(&self.variant);
        out.push_str(&text[end..]);
        out
    }
}

/// A generated flow and the edits the incremental benchmark makes in it.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The `.reel` source.
    pub text: String,
    /// How many steps the flow has.
    pub steps: usize,
    /// Lengthens a string literal of a step in the middle; no type changes.
    pub literal_edit: Edit,
    /// Turns an int literal of a middle step many later steps read into a float: its type changes.
    pub type_edit: Edit,
}

/// The step the typing measurements type key by key (`lsp-bench --only typing`,
/// `check-bench --only typing`).
pub const TYPED_STEP: &str = "  step typed = len(\"abcdef\") + 1";

impl Generated {
    /// Where the typing measurements type [`TYPED_STEP`]: the start of the blank line before the
    /// literal edit's step, in the middle of the flow, between two steps.
    pub fn typing_point(&self) -> usize {
        self.text[..self.literal_edit.at]
            .rfind("\n\n")
            .expect("steps are separated by blank lines")
            + 1
    }

    /// The text after the first `keys` characters of [`TYPED_STEP`] were typed.
    pub fn typed(&self, keys: usize) -> String {
        let at = self.typing_point();
        let end = TYPED_STEP
            .char_indices()
            .nth(keys)
            .map_or(TYPED_STEP.len(), |(i, _)| i);
        let mut t = self.text.clone();
        t.insert_str(at, &TYPED_STEP[..end]);
        t
    }
}

/// The shape of a step's value, which decides the expressions that read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Str,
    Int,
    StrList,
    Rec,
    Http,
    Exec,
    FsRead,
    FsWrite,
    Score,
    Ticket,
    User,
    Json,
    Woke,
}

/// A step's value type: a shape, maybe skipped (`when`), maybe one per element (`foreach`).
#[derive(Clone, Copy, Debug)]
struct Val {
    shape: Shape,
    optional: bool,
    list: bool,
}

impl Val {
    fn plain(shape: Shape) -> Val {
        Val {
            shape,
            optional: false,
            list: false,
        }
    }
}

/// What the generator remembers of a step it wrote.
struct StepInfo {
    name: String,
    val: Val,
}

/// What kind of step to write next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    HttpGet,
    HttpPost,
    EchoRec,
    Exec,
    FsRead,
    FsWrite,
    ForeachFetch,
    ForeachEcho,
    ForeachScore,
    ForeachTicket,
    PureStr,
    PureInt,
    PureList,
    PureRec,
    PureJson,
    Score,
    Ticket,
    User,
    Sleep,
}

const KINDS: [(Kind, u32); 19] = [
    (Kind::HttpGet, 12),
    (Kind::HttpPost, 7),
    (Kind::EchoRec, 8),
    (Kind::Exec, 5),
    (Kind::FsRead, 4),
    (Kind::FsWrite, 4),
    (Kind::ForeachFetch, 3),
    (Kind::ForeachEcho, 3),
    (Kind::ForeachScore, 2),
    (Kind::ForeachTicket, 2),
    (Kind::PureStr, 10),
    (Kind::PureInt, 8),
    (Kind::PureList, 7),
    (Kind::PureRec, 3),
    (Kind::PureJson, 3),
    (Kind::Score, 4),
    (Kind::Ticket, 4),
    (Kind::User, 3),
    (Kind::Sleep, 1),
];

const TOOLS: &str = r#"/// Scores a text: its word count, a score in [0, 1] and the labels it suggests.
tool score_text {
  kind: "pure"
  exec: ["python3", "tools/score.py"]
  input { text: string, lang: string? }
  output { words: int, score: float, labels: list<string> }
}

/// Opens a ticket in the tracker (idempotent through REEL_IDEMPOTENCY_KEY).
tool create_ticket {
  kind: "effect"
  exec: ["./tools/ticket.sh", "--json"]
  input { title: string, priority: int, tags: list<string> }
  output { id: string, url: string, ok: bool }
}

/// Looks a user up in the company directory.
tool lookup_user {
  kind: "read"
  exec: ["python3", "tools/users.py"]
  input { login: string }
  output { name: string, email: string?, teams: list<string> }
}
"#;

const HEADER: &str = r#"  /// The repository, as owner/name.
  input repo: string
  /// The issue to start from.
  input number: int = 42
  input labels: list<string> = ["bug", "triage", "needs-review"]
  input owner: { name: string, team: string } = { name: "ops", team: "infra" }
  input dry_run: bool = false
  input base_url: string = "https://api.example.com"
  input threshold: int = 3
  input cooldown: duration = 2s
  secret api_token          // resolved at run start, never recorded
  env HOME
  env CI
"#;

/// The inputs and env names the header declares, each of which must be read somewhere.
const READS: [(&str, &str); 10] = [
    ("repo", "input.repo"),
    ("number", "input.number"),
    ("labels", "input.labels"),
    ("owner", "input.owner.team"),
    ("dry_run", "input.dry_run"),
    ("base_url", "input.base_url"),
    ("threshold", "input.threshold"),
    ("cooldown", "input.cooldown"),
    ("home", "env.HOME"),
    ("ci", "env.CI"),
];

/// The names of the steps, by kind, with the doc comments they may carry.
fn naming(kind: Kind) -> (&'static str, &'static [&'static str]) {
    match kind {
        Kind::HttpGet => (
            "fetch",
            &[
                "Fetches the item from the API.",
                "Reads the current state before changing it.",
            ],
        ),
        Kind::HttpPost => (
            "notify",
            &[
                "Tells the hook what happened.",
                "Posts the result back to the service.",
            ],
        ),
        Kind::EchoRec => ("record", &["Records the summary with the run."]),
        Kind::Exec => ("run", &["Runs the local command on the data."]),
        Kind::FsRead => ("load", &["Loads the cached copy from disk."]),
        Kind::FsWrite => ("save", &["Writes the report next to the others."]),
        Kind::ForeachFetch => ("fetch_each", &["Fetches every page, four at a time."]),
        Kind::ForeachEcho => ("note_each", &["Records one note per label."]),
        Kind::ForeachScore => ("score_each", &["Scores every line."]),
        Kind::ForeachTicket => ("file_each", &["Files one ticket per finding."]),
        Kind::PureStr => (
            "title",
            &["The line people see.", "A stable key for the item."],
        ),
        Kind::PureInt => ("count", &["How much work is left."]),
        Kind::PureList => ("tags", &["The labels, cleaned up."]),
        Kind::PureRec => ("meta", &["Everything the report needs, in one record."]),
        Kind::PureJson => ("items", &["The items of the response, or none."]),
        Kind::Score => ("score", &["How urgent the text reads."]),
        Kind::Ticket => ("ticket", &["Opens a ticket when it matters."]),
        Kind::User => ("user", &["Who is responsible."]),
        Kind::Sleep => ("pause", &["Gives the service time to settle."]),
    }
}

/// Generates a flow with `steps` steps (at least 3) from `seed`; the same arguments give the same text.
pub fn generate(steps: usize, seed: u64) -> Generated {
    let steps = steps.max(3);
    let mut g = Gen {
        rng: StdRng::seed_from_u64(seed),
        steps: Vec::with_capacity(steps),
        needs_use: Vec::with_capacity(steps),
        used: Vec::with_capacity(steps),
        pending: Vec::new(),
        http_plain: Vec::new(),
        reads: BTreeSet::new(),
        hub: None,
    };
    let middle = (steps - 1) / 2;
    let mut out = String::with_capacity(steps * 260);
    let _ = writeln!(
        out,
        "// Generated by `gen-flow --steps {steps} --seed {seed}` (reel-bench).\n"
    );
    out.push_str(TOOLS);
    let _ = writeln!(
        out,
        "\n/// A generated pipeline of {steps} steps: fetches, enriches, files tickets and reports.\nflow {FLOW_NAME} {{"
    );
    out.push_str(HEADER);
    let mut literal_edit = None;
    let mut type_edit = None;
    for i in 0..steps {
        if i % 250 == 0 {
            let _ = writeln!(out, "\n  // ---- stage {} ----", i / 250 + 1);
        }
        let (text, marker) = if i == middle {
            g.forced_banner(i)
        } else if i == middle + 1 {
            g.forced_quota(i)
        } else {
            (g.step(i), None)
        };
        out.push('\n');
        if let Some((offset, original, variant)) = marker {
            let edit = Edit {
                at: out.len() + offset,
                original: original.to_string(),
                variant: variant.to_string(),
            };
            if i == middle {
                literal_edit = Some(edit);
            } else {
                type_edit = Some(edit);
            }
        }
        out.push_str(&text);
        if i == middle + 1 {
            g.hub = Some(i);
        }
    }
    out.push('\n');
    out.push_str(&g.output());
    out.push_str("}\n");
    Generated {
        text: out,
        steps,
        literal_edit: literal_edit.expect("the middle step is generated"),
        type_edit: type_edit.expect("the step after the middle is generated"),
    }
}

/// `text` with every `${"…"}` (a string literal without quotes inside, interpolated) replaced
/// by the literal's contents, as a person would write it: `"a ${"b ${x}"}"` is `"a b ${x}"`.
fn splice(text: &str) -> String {
    let mut out = text.to_string();
    loop {
        let mut changed = false;
        let mut from = 0;
        while let Some(p) = out[from..].find("${\"") {
            let start = from + p;
            let body = start + 3;
            match out[body..].find('"') {
                Some(q) if out[body + q + 1..].starts_with('}') => {
                    let inner = out[body..body + q].to_string();
                    out.replace_range(start..body + q + 2, &inner);
                    changed = true;
                    from = start + inner.len();
                }
                _ => from = body,
            }
        }
        if !changed {
            return out;
        }
    }
}

struct Gen {
    rng: StdRng,
    steps: Vec<StepInfo>,
    needs_use: Vec<bool>,
    used: Vec<bool>,
    /// Pure and read steps not read yet (some of them may have been read since: checked lazily).
    pending: Vec<usize>,
    /// Plain (no `when`, no `foreach`) `http.get` and `http.post` steps, for json steps.
    http_plain: Vec<usize>,
    /// Which of `READS` some expression reads.
    reads: BTreeSet<&'static str>,
    /// The step whose type the type edit changes; the next steps read it often.
    hub: Option<usize>,
}

/// The steps one step reads, and which of its three slots the expressions touched.
struct Slots {
    refs: Vec<(String, Val)>,
    touched: Vec<bool>,
}

impl Slots {
    /// The step in slot `k`, or `None` when the step reads fewer steps (an input stands there).
    fn at(&mut self, k: usize) -> Option<(String, Val)> {
        let r = self.refs.get(k)?.clone();
        self.touched[k] = true;
        Some(r)
    }

    fn untouched(&self) -> Vec<String> {
        self.refs
            .iter()
            .zip(&self.touched)
            .filter(|(_, t)| !**t)
            .map(|(r, _)| r.0.clone())
            .collect()
    }
}

impl Gen {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.rng.random_range(0..xs.len())]
    }

    fn read(&mut self, key: &'static str) -> &'static str {
        self.reads.insert(key);
        READS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, e)| *e)
            .expect("a declared read")
    }

    fn take_pending(&mut self) -> Option<usize> {
        while !self.pending.is_empty() {
            let at = if self.chance(0.6) {
                self.pending.len() - 1
            } else {
                self.rng.random_range(0..self.pending.len())
            };
            let s = self.pending.swap_remove(at);
            if !self.used[s] {
                return Some(s);
            }
        }
        None
    }

    /// One to three distinct earlier steps for step `i` to read.
    fn deps(&mut self, i: usize, want: usize) -> Vec<usize> {
        let want = want.min(i);
        let mut deps: Vec<usize> = Vec::with_capacity(want);
        if want == 0 {
            return deps;
        }
        if let Some(h) = self.hub
            && i <= h + 200
            && self.chance(0.25)
        {
            deps.push(h);
        }
        if deps.len() < want
            && self.chance(0.85)
            && let Some(p) = self.take_pending()
        {
            deps.push(p);
        }
        while deps.len() < want {
            let c = if self.chance(0.65) {
                i - 1 - self.rng.random_range(0..i.min(30))
            } else {
                self.rng.random_range(0..i)
            };
            if !deps.contains(&c) {
                deps.push(c);
            }
        }
        deps
    }

    fn slots(&mut self, deps: &[usize]) -> Slots {
        let refs: Vec<(String, Val)> = deps
            .iter()
            .map(|&d| (self.steps[d].name.clone(), self.steps[d].val))
            .collect();
        for &d in deps {
            self.used[d] = true;
        }
        Slots {
            touched: vec![false; refs.len()],
            refs,
        }
    }

    fn want(&mut self) -> usize {
        match self.rng.random_range(0..10) {
            0..=3 => 1,
            4..=7 => 2,
            _ => 3,
        }
    }

    fn push(&mut self, name: String, val: Val, needs_use: bool, http_plain: bool) {
        let i = self.steps.len();
        if needs_use {
            self.pending.push(i);
        }
        if http_plain {
            self.http_plain.push(i);
        }
        self.steps.push(StepInfo { name, val });
        self.needs_use.push(needs_use);
        self.used.push(false);
    }

    fn doc(&mut self, kind: Kind, out: &mut String) {
        let (_, docs) = naming(kind);
        if self.chance(0.25) {
            let d = *self.pick(docs);
            let _ = writeln!(out, "  /// {d}");
        } else if self.chance(0.08) {
            let c = *self.pick(&[
                "// keep in step with the dashboard's query",
                "// the service rate-limits: see the retry below",
                "// cheap: the result is cached by the API",
            ]);
            let _ = writeln!(out, "  {c}");
        }
    }

    // ---- expressions of a wanted type from a step's value ------------------------------------

    fn str_of(&mut self, base: &str, v: Val) -> String {
        if v.list {
            let inner = self.str_of("r", Val { list: false, ..v });
            return format!("join([for r in {base}: {inner}], \",\")");
        }
        if v.optional {
            return match v.shape {
                Shape::Rec => format!("({base}?.name ?? \"none\")"),
                Shape::Http => format!("\"status ${{{base}?.status ?? 0}}\""),
                Shape::Exec => format!("({base}?.stdout ?? \"\")"),
                Shape::FsWrite => format!("\"${{{base}?.bytes ?? 0}} bytes\""),
                Shape::Ticket => format!("({base}?.id ?? \"none\")"),
                _ => format!("\"${{{base}}}\""),
            };
        }
        match v.shape {
            Shape::Str => {
                if self.chance(0.3) {
                    format!("trim({base})")
                } else {
                    base.to_string()
                }
            }
            Shape::Int => {
                if self.chance(0.5) {
                    format!("to_string({base})")
                } else {
                    format!("\"#${{{base}}}\"")
                }
            }
            Shape::StrList => format!("join({base}, \",\")"),
            Shape::Rec => format!("{base}.name"),
            Shape::Http => {
                if self.chance(0.6) {
                    format!("\"${{{base}.body.title}}\"")
                } else {
                    format!("to_string({base}.status)")
                }
            }
            Shape::Exec => format!("trim({base}.stdout)"),
            Shape::FsRead => format!("{base}.text"),
            Shape::FsWrite => format!("\"${{{base}.bytes}} bytes\""),
            Shape::Score => {
                if self.chance(0.5) {
                    format!("\"${{{base}.score}}\"")
                } else {
                    format!("join({base}.labels, \"+\")")
                }
            }
            Shape::Ticket => {
                if self.chance(0.5) {
                    format!("{base}.id")
                } else {
                    format!("{base}.url")
                }
            }
            Shape::User => {
                if self.chance(0.5) {
                    format!("{base}.name")
                } else {
                    format!("({base}.email ?? \"nobody@example.com\")")
                }
            }
            Shape::Json => format!("to_string({base})"),
            Shape::Woke => format!("{base}.woke_at"),
        }
    }

    fn int_of(&mut self, base: &str, v: Val) -> String {
        if v.list {
            if self.chance(0.5) {
                return format!("len({base})");
            }
            let inner = self.int_of("r", Val { list: false, ..v });
            return format!("sum([for r in {base}: {inner}])");
        }
        if v.optional {
            return match v.shape {
                Shape::Rec => format!("({base}?.count ?? 0)"),
                Shape::Http => format!("({base}?.status ?? 0)"),
                Shape::Exec => format!("len({base}?.stdout ?? \"\")"),
                Shape::FsWrite => format!("({base}?.bytes ?? 0)"),
                Shape::Ticket => format!("len({base}?.id ?? \"\")"),
                _ => format!("len(\"${{{base}}}\")"),
            };
        }
        match v.shape {
            Shape::Str | Shape::StrList | Shape::Json => format!("len({base})"),
            Shape::Int => base.to_string(),
            Shape::Rec => format!("{base}.count"),
            Shape::Http => format!("{base}.status"),
            Shape::Exec => format!("len({base}.stdout)"),
            Shape::FsRead => format!("len({base}.text)"),
            Shape::FsWrite => format!("{base}.bytes"),
            Shape::Score => format!("{base}.words"),
            Shape::Ticket => format!("len({base}.id)"),
            Shape::User => format!("len({base}.teams)"),
            Shape::Woke => format!("len({base}.woke_at)"),
        }
    }

    fn list_of(&mut self, base: &str, v: Val) -> String {
        if v.list {
            if v.shape == Shape::Rec && self.chance(0.5) {
                return format!("flatten([for r in {base}: r.tags])");
            }
            let inner = self.str_of("r", Val { list: false, ..v });
            return format!("[for r in {base}: {inner}]");
        }
        if v.optional {
            return match v.shape {
                Shape::Rec => {
                    let labels = self.read("labels");
                    format!("({base}?.tags ?? {labels})")
                }
                Shape::Http => format!("[\"${{{base}?.status ?? 0}}\"]"),
                Shape::Exec => format!("split({base}?.stdout ?? \"\", \"\\n\")"),
                Shape::FsWrite => format!("[\"${{{base}?.bytes ?? 0}}\"]"),
                Shape::Ticket => format!("[{base}?.id ?? \"none\"]"),
                _ => format!("[\"${{{base}}}\"]"),
            };
        }
        match v.shape {
            Shape::Str => format!("split({base}, \",\")"),
            Shape::Int => format!("[for i in range({base} % 5): \"p${{i}}\"]"),
            Shape::StrList => base.to_string(),
            Shape::Rec => format!("{base}.tags"),
            Shape::Http => format!("keys({base}.headers)"),
            Shape::Exec => format!("split({base}.stdout, \"\\n\")"),
            Shape::FsRead => format!("split({base}.text, \"\\n\")"),
            Shape::FsWrite => format!("[\"${{{base}.bytes}}\"]"),
            Shape::Score => format!("{base}.labels"),
            Shape::Ticket => format!("[{base}.id, {base}.url]"),
            Shape::User => format!("{base}.teams"),
            Shape::Json => format!("[for x in {base}: to_string(x)]"),
            Shape::Woke => format!("[{base}.woke_at]"),
        }
    }

    fn bool_of(&mut self, base: &str, v: Val) -> String {
        if !v.list {
            match (v.shape, v.optional) {
                (Shape::Http, false) if self.chance(0.5) => {
                    return format!("{base}.status == 200");
                }
                (Shape::Ticket, false) if self.chance(0.5) => return format!("{base}.ok"),
                (Shape::Ticket, true) if self.chance(0.5) => {
                    return format!("({base}?.ok ?? false)");
                }
                (Shape::Score, false) if self.chance(0.5) => {
                    return format!("{base}.score > 0.5");
                }
                _ => {}
            }
        }
        match self.rng.random_range(0..3) {
            0 => {
                let l = self.list_of(base, v);
                let label = *self.pick(&["bug", "urgent", "ops"]);
                format!("contains({l}, \"{label}\")")
            }
            1 => {
                let s = self.str_of(base, v);
                let p = *self.pick(&["a", "ok", "2"]);
                format!("starts_with({s}, \"{p}\")")
            }
            _ => {
                let n = self.int_of(base, v);
                let k = self.rng.random_range(0..10);
                format!("{n} > {k}")
            }
        }
    }

    fn s(&mut self, sl: &mut Slots, k: usize) -> String {
        match sl.at(k) {
            Some((b, v)) => self.str_of(&b, v),
            None => match self.rng.random_range(0..4) {
                0 => self.read("repo").to_string(),
                1 => self.read("owner").to_string(),
                2 => format!("({} ?? \"/tmp\")", self.read("home")),
                _ => self.read("base_url").to_string(),
            },
        }
    }

    fn n(&mut self, sl: &mut Slots, k: usize) -> String {
        match sl.at(k) {
            Some((b, v)) => self.int_of(&b, v),
            None if self.chance(0.5) => self.read("number").to_string(),
            None => self.read("threshold").to_string(),
        }
    }

    fn l(&mut self, sl: &mut Slots, k: usize) -> String {
        match sl.at(k) {
            Some((b, v)) => self.list_of(&b, v),
            None => self.read("labels").to_string(),
        }
    }

    fn b(&mut self, sl: &mut Slots, k: usize) -> String {
        match sl.at(k) {
            Some((b, v)) => self.bool_of(&b, v),
            None => format!("!{}", self.read("dry_run")),
        }
    }

    // ---- steps -------------------------------------------------------------------------------

    fn kind(&mut self, i: usize) -> Kind {
        if i == 0 {
            return Kind::HttpGet;
        }
        let total: u32 = KINDS.iter().map(|(_, w)| w).sum();
        let mut r = self.rng.random_range(0..total);
        for (k, w) in KINDS {
            if r < w {
                return if k == Kind::PureJson && self.http_plain.is_empty() {
                    Kind::PureStr
                } else {
                    k
                };
            }
            r -= w;
        }
        Kind::PureStr
    }

    fn when(&mut self, sl: &mut Slots, p: f64) -> Option<String> {
        if !self.chance(p) {
            return None;
        }
        let cond = self.b(sl, 0);
        Some(match self.rng.random_range(0..3) {
            0 => {
                let dry = self.read("dry_run");
                format!("{cond} && !{dry}")
            }
            1 => {
                let ci = self.read("ci");
                format!("({ci} ?? \"false\") == \"true\" || {cond}")
            }
            _ => cond,
        })
    }

    fn retry(&mut self, p: f64) -> Option<&'static str> {
        if !self.chance(p) {
            return None;
        }
        Some(*self.pick(&[
            "{ max: 3, backoff: \"exp\", base: 200ms, jitter: true }",
            "{ max: 5, backoff: \"fixed\", base: 1s, jitter: false }",
            "{ max: 2, backoff: \"exp\", base: 500ms, jitter: true }",
        ]))
    }

    fn timeout(&mut self, p: f64) -> Option<&'static str> {
        if !self.chance(p) {
            return None;
        }
        Some(*self.pick(&["5s", "10s", "30s", "2m"]))
    }

    /// Writes a tool step: `args` are `(key, value)` lines; untouched dependencies go to `after`.
    fn call(
        &mut self,
        kind: Kind,
        name: &str,
        tool: &str,
        args: Vec<(&str, String)>,
        sl: &Slots,
        extra_after: Option<String>,
    ) -> String {
        let mut out = String::new();
        self.doc(kind, &mut out);
        let _ = writeln!(out, "  step {name} = {tool} {{");
        for (k, v) in args {
            let _ = writeln!(out, "    {k}: {v}");
        }
        let mut after = sl.untouched();
        after.extend(extra_after);
        if !after.is_empty() {
            let _ = writeln!(out, "    after: [{}]", after.join(", "));
        }
        out.push_str("  }\n");
        splice(&out)
    }

    fn pure(&mut self, kind: Kind, name: &str, expr: String) -> String {
        let mut out = String::new();
        self.doc(kind, &mut out);
        let _ = writeln!(out, "  step {name} = {expr}");
        splice(&out)
    }

    /// Writes step `i`: picks its kind and the steps it reads.
    fn step(&mut self, i: usize) -> String {
        let kind = self.kind(i);
        let (prefix, _) = naming(kind);
        let name = format!("{prefix}_{i}");
        let want = if kind == Kind::Sleep || kind == Kind::PureJson {
            1
        } else {
            self.want()
        };
        let deps = if kind == Kind::PureJson {
            let recent = self.http_plain.len().saturating_sub(40);
            let d = self.http_plain[self.rng.random_range(recent..self.http_plain.len())];
            self.used[d] = true;
            vec![d]
        } else {
            self.deps(i, want)
        };
        if deps.is_empty() {
            return self.first_step(name);
        }
        let mut sl = self.slots(&deps);
        // An `after` on an effect that does not read the step it waits for.
        let extra_after = if matches!(kind, Kind::HttpPost | Kind::Exec | Kind::FsWrite)
            && i > 3
            && self.chance(0.12)
        {
            let d = self.rng.random_range(0..i);
            (!deps.contains(&d)).then(|| {
                self.used[d] = true;
                self.steps[d].name.clone()
            })
        } else {
            None
        };
        let (text, val, needs_use, plain_http) = match kind {
            Kind::HttpGet => {
                let base = self.read("base_url");
                let repo = self.read("repo");
                let s0 = self.s(&mut sl, 0);
                let mut args = vec![
                    (
                        "url",
                        format!("\"${{{base}}}/repos/${{{repo}}}/items/${{{s0}}}\""),
                    ),
                    ("bearer", "secret.api_token".to_string()),
                ];
                if self.chance(0.5) {
                    let s1 = self.s(&mut sl, 1);
                    args.push((
                        "headers",
                        format!("{{ Accept: \"application/json\", \"X-Trace\": \"{prefix}-${{{s1}}}\" }}"),
                    ));
                }
                if self.chance(0.4) {
                    let n2 = self.n(&mut sl, 2);
                    args.push((
                        "query",
                        format!("{{ page: to_string({n2}), per_page: \"50\" }}"),
                    ));
                }
                if let Some(r) = self.retry(0.4) {
                    args.push(("retry", r.to_string()));
                }
                if let Some(t) = self.timeout(0.5) {
                    args.push(("timeout", t.to_string()));
                }
                let text = self.call(kind, &name, "http.get", args, &sl, extra_after);
                (text, Val::plain(Shape::Http), true, true)
            }
            Kind::HttpPost => {
                let when = self.when(&mut sl, 0.4);
                let base = self.read("base_url");
                let s0 = self.s(&mut sl, 0);
                let n1 = self.n(&mut sl, 1);
                let l2 = self.l(&mut sl, 2);
                let mut args = Vec::new();
                if let Some(w) = &when {
                    args.push(("when", w.clone()));
                }
                args.push(("url", format!("\"${{{base}}}/hooks/{prefix}\"")));
                args.push((
                    "json",
                    format!("{{ title: {s0}, count: {n1}, labels: {l2} }}"),
                ));
                args.push(("bearer", "secret.api_token".to_string()));
                if let Some(r) = self.retry(0.3) {
                    args.push(("retry", r.to_string()));
                }
                let text = self.call(kind, &name, "http.post", args, &sl, extra_after);
                let val = Val {
                    optional: when.is_some(),
                    ..Val::plain(Shape::Http)
                };
                (text, val, false, when.is_none())
            }
            Kind::EchoRec => {
                let when = self.when(&mut sl, 0.25);
                let s0 = self.s(&mut sl, 0);
                let n1 = self.n(&mut sl, 1);
                let l2 = self.l(&mut sl, 2);
                let mut args = Vec::new();
                if let Some(w) = &when {
                    args.push(("when", w.clone()));
                }
                args.push((
                    "value",
                    format!("{{ name: {s0}, count: {n1}, tags: {l2} }}"),
                ));
                let text = self.call(kind, &name, "echo", args, &sl, extra_after);
                let val = Val {
                    optional: when.is_some(),
                    ..Val::plain(Shape::Rec)
                };
                (text, val, false, false)
            }
            Kind::Exec => {
                let when = self.when(&mut sl, 0.2);
                let s0 = self.s(&mut sl, 0);
                let mut args = Vec::new();
                if let Some(w) = &when {
                    args.push(("when", w.clone()));
                }
                let cmd = if self.chance(0.5) {
                    format!("[\"wc\", \"-c\", {s0}]")
                } else {
                    let n1 = self.n(&mut sl, 1);
                    format!("[\"git\", \"log\", \"--oneline\", \"-n\", to_string({n1}), {s0}]")
                };
                args.push(("cmd", cmd));
                if self.chance(0.5) {
                    let l2 = self.l(&mut sl, 2);
                    args.push(("stdin", format!("{{ items: {l2} }}")));
                }
                if self.chance(0.2) {
                    let home = self.read("home");
                    args.push(("cwd", format!("{home} ?? \"/tmp\"")));
                }
                if self.chance(0.2) {
                    args.push(("env", "{ LANG: \"C\", TZ: \"UTC\" }".to_string()));
                }
                if let Some(t) = self.timeout(0.4) {
                    args.push(("timeout", t.to_string()));
                }
                let text = self.call(kind, &name, "exec", args, &sl, extra_after);
                let val = Val {
                    optional: when.is_some(),
                    ..Val::plain(Shape::Exec)
                };
                (text, val, false, false)
            }
            Kind::FsRead => {
                let s0 = self.s(&mut sl, 0);
                let args = vec![("path", format!("\"data/${{{s0}}}.txt\""))];
                let text = self.call(kind, &name, "fs.read", args, &sl, extra_after);
                (text, Val::plain(Shape::FsRead), true, false)
            }
            Kind::FsWrite => {
                let when = self.when(&mut sl, 0.2);
                let s0 = self.s(&mut sl, 0);
                let l1 = self.l(&mut sl, 1);
                let mut args = Vec::new();
                if let Some(w) = &when {
                    args.push(("when", w.clone()));
                }
                args.push(("path", format!("\"out/{prefix}-${{{s0}}}.txt\"")));
                args.push(("text", format!("join({l1}, \"\\n\") + \"\\n\"")));
                let text = self.call(kind, &name, "fs.write", args, &sl, extra_after);
                let val = Val {
                    optional: when.is_some(),
                    ..Val::plain(Shape::FsWrite)
                };
                (text, val, false, false)
            }
            Kind::ForeachFetch => {
                let l0 = self.l(&mut sl, 0);
                let s1 = self.s(&mut sl, 1);
                let base = self.read("base_url");
                let args = vec![
                    ("foreach", l0),
                    ("concurrency", "4".to_string()),
                    (
                        "url",
                        format!("\"${{{base}}}/items/${{item}}?page=${{index}}&from=${{{s1}}}\""),
                    ),
                    ("bearer", "secret.api_token".to_string()),
                    ("timeout", "5s".to_string()),
                ];
                let text = self.call(kind, &name, "http.get", args, &sl, extra_after);
                let val = Val {
                    list: true,
                    ..Val::plain(Shape::Http)
                };
                (text, val, true, false)
            }
            Kind::ForeachEcho => {
                let l0 = self.l(&mut sl, 0);
                let n1 = self.n(&mut sl, 1);
                let s2 = self.s(&mut sl, 2);
                let args = vec![
                    ("foreach", l0),
                    (
                        "value",
                        format!("{{ name: item, count: index + {n1}, tags: [item, {s2}] }}"),
                    ),
                ];
                let text = self.call(kind, &name, "echo", args, &sl, extra_after);
                let val = Val {
                    list: true,
                    ..Val::plain(Shape::Rec)
                };
                (text, val, false, false)
            }
            Kind::ForeachScore => {
                let l0 = self.l(&mut sl, 0);
                let s1 = self.s(&mut sl, 1);
                let args = vec![
                    ("foreach", l0),
                    ("concurrency", "2".to_string()),
                    ("text", format!("\"${{item}} ${{{s1}}}\"")),
                    ("lang", "\"en\"".to_string()),
                ];
                let text = self.call(kind, &name, "score_text", args, &sl, extra_after);
                let val = Val {
                    list: true,
                    ..Val::plain(Shape::Score)
                };
                (text, val, true, false)
            }
            Kind::ForeachTicket => {
                let l0 = self.l(&mut sl, 0);
                let s1 = self.s(&mut sl, 1);
                let l2 = self.l(&mut sl, 2);
                let args = vec![
                    ("foreach", l0),
                    ("concurrency", "1".to_string()),
                    ("title", format!("\"${{{s1}}}: ${{item}}\"")),
                    ("priority", "index % 3 + 1".to_string()),
                    ("tags", format!("[item] + {l2}")),
                    (
                        "retry",
                        "{ max: 4, backoff: \"exp\", base: 1s, jitter: true }".to_string(),
                    ),
                ];
                let text = self.call(kind, &name, "create_ticket", args, &sl, extra_after);
                let val = Val {
                    list: true,
                    ..Val::plain(Shape::Ticket)
                };
                (text, val, false, false)
            }
            Kind::PureStr => {
                let expr = match self.rng.random_range(0..5) {
                    0 => {
                        let (a, b, c) =
                            (self.s(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("\"${{{a}}}/${{{b}}}-${{{c}}}\"")
                    }
                    1 => {
                        let (c, a, b) =
                            (self.b(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("if {c} then upper({a}) else lower({b})")
                    }
                    2 => {
                        let (a, b, c) =
                            (self.s(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("join([{a}, trim({b}), {c}], \" | \")")
                    }
                    3 => {
                        let (a, b, c) =
                            (self.s(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("replace({a}, \"-\", \"_\") + \":\" + {b} + \":\" + {c}")
                    }
                    _ => {
                        let repo = self.read("repo");
                        let (n, a, b) =
                            (self.n(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("\"${{{repo}}}#${{{n}}}: ${{upper({a})}} (${{{b}}})\"")
                    }
                };
                (
                    self.pure(kind, &name, expr),
                    Val::plain(Shape::Str),
                    true,
                    false,
                )
            }
            Kind::PureInt => {
                let expr = match self.rng.random_range(0..5) {
                    0 => {
                        let (a, b, c) =
                            (self.n(&mut sl, 0), self.n(&mut sl, 1), self.n(&mut sl, 2));
                        format!("{a} + {b} * 2 - {c} % 7")
                    }
                    1 => {
                        let (a, b, c) =
                            (self.n(&mut sl, 0), self.n(&mut sl, 1), self.n(&mut sl, 2));
                        format!("max({a}, {b}, {c})")
                    }
                    2 => {
                        let (l, b, c) =
                            (self.l(&mut sl, 0), self.n(&mut sl, 1), self.n(&mut sl, 2));
                        format!("sum([for x in {l}: len(x)]) + {b} - {c}")
                    }
                    3 => {
                        let (l, c, b) =
                            (self.l(&mut sl, 0), self.b(&mut sl, 1), self.n(&mut sl, 2));
                        format!("len({l}) + (if {c} then {b} else 0)")
                    }
                    _ => {
                        let t = self.read("threshold");
                        let num = self.read("number");
                        let (a, b, c) =
                            (self.n(&mut sl, 0), self.n(&mut sl, 1), self.n(&mut sl, 2));
                        format!("({a} + {b} + {c}) / {t} + {num}")
                    }
                };
                (
                    self.pure(kind, &name, expr),
                    Val::plain(Shape::Int),
                    true,
                    false,
                )
            }
            Kind::PureList => {
                let expr = match self.rng.random_range(0..4) {
                    0 => {
                        let (l, n, m) =
                            (self.l(&mut sl, 0), self.n(&mut sl, 1), self.l(&mut sl, 2));
                        format!("[for x in {l} if len(x) > {n} % 5: upper(x)] + {m}")
                    }
                    1 => {
                        let (a, b, s) =
                            (self.l(&mut sl, 0), self.l(&mut sl, 1), self.s(&mut sl, 2));
                        format!("unique({a} + {b} + [{s}])")
                    }
                    2 => {
                        let (s, a, b) =
                            (self.s(&mut sl, 0), self.l(&mut sl, 1), self.l(&mut sl, 2));
                        format!("sort(split({s}, \",\") + {a} + {b})")
                    }
                    _ => {
                        let (l, s, t) =
                            (self.l(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
                        format!("[for x in {l}: \"${{x}}-${{{s}}}\"] + [{t}]")
                    }
                };
                (
                    self.pure(kind, &name, expr),
                    Val::plain(Shape::StrList),
                    true,
                    false,
                )
            }
            Kind::PureRec => {
                let (s, n, l) = (self.s(&mut sl, 0), self.n(&mut sl, 1), self.l(&mut sl, 2));
                let owner = self.read("owner");
                let expr = format!(
                    "{{\n    name: {s}\n    count: {n}\n    tags: {l}\n    team: {owner}\n  }}"
                );
                (
                    self.pure(kind, &name, expr),
                    Val::plain(Shape::Rec),
                    true,
                    false,
                )
            }
            Kind::PureJson => {
                let (b, _) = sl.at(0).expect("a json step reads one http step");
                let expr = if self.chance(0.5) {
                    format!("{b}.body.items ?? []")
                } else {
                    format!("{b}.body?.data?.results ?? {b}.body")
                };
                (
                    self.pure(kind, &name, expr),
                    Val::plain(Shape::Json),
                    true,
                    false,
                )
            }
            Kind::Score => {
                let s0 = self.s(&mut sl, 0);
                let mut args = vec![("text", s0)];
                if self.chance(0.5) {
                    args.push(("lang", "\"en\"".to_string()));
                }
                let text = self.call(kind, &name, "score_text", args, &sl, extra_after);
                (text, Val::plain(Shape::Score), true, false)
            }
            Kind::Ticket => {
                let when = self.when(&mut sl, 0.3);
                let s0 = self.s(&mut sl, 0);
                let n1 = self.n(&mut sl, 1);
                let l2 = self.l(&mut sl, 2);
                let mut args = Vec::new();
                if let Some(w) = &when {
                    args.push(("when", w.clone()));
                }
                args.push(("title", format!("\"[${{{s0}}}] needs attention\"")));
                args.push(("priority", format!("{n1} % 4 + 1")));
                args.push(("tags", l2));
                let text = self.call(kind, &name, "create_ticket", args, &sl, extra_after);
                let val = Val {
                    optional: when.is_some(),
                    ..Val::plain(Shape::Ticket)
                };
                (text, val, false, false)
            }
            Kind::User => {
                let s0 = self.s(&mut sl, 0);
                let args = vec![("login", format!("lower({s0})"))];
                let text = self.call(kind, &name, "lookup_user", args, &sl, extra_after);
                (text, Val::plain(Shape::User), true, false)
            }
            Kind::Sleep => {
                let cooldown = self.read("cooldown");
                let args = vec![("for", cooldown.to_string())];
                let text = self.call(kind, &name, "sleep", args, &sl, extra_after);
                (text, Val::plain(Shape::Woke), false, false)
            }
        };
        self.push(name, val, needs_use, plain_http);
        text
    }

    /// The first step reads only inputs.
    fn first_step(&mut self, name: String) -> String {
        let base = self.read("base_url");
        let repo = self.read("repo");
        let number = self.read("number");
        let text = format!(
            "  /// Fetches the issue the run starts from.\n  step {name} = http.get {{\n    url: \"${{{base}}}/repos/${{{repo}}}/issues/${{{number}}}\"\n    bearer: secret.api_token\n    headers: {{ Accept: \"application/json\" }}\n    retry: {{ max: 3, backoff: \"exp\", base: 200ms, jitter: true }}\n    timeout: 10s\n  }}\n"
        );
        self.push(name, Val::plain(Shape::Http), true, true);
        text
    }

    /// The middle step: a string step with the literal the literal edit lengthens.
    fn forced_banner(&mut self, i: usize) -> (String, Option<(usize, &'static str, &'static str)>) {
        let name = format!("banner_{i}");
        let want = self.want();
        let deps = self.deps(i, want);
        let mut sl = self.slots(&deps);
        let (a, b, c) = (self.s(&mut sl, 0), self.s(&mut sl, 1), self.s(&mut sl, 2));
        let text = format!(
            "  /// The banner of this stage (the benchmark edits its literal).\n  step {name} = \"${{{a}}}/${{{b}}}/${{{c}}}-release-abc\"\n"
        );
        let text = splice(&text);
        let at = text.find("release-abc").expect("the literal is written");
        self.push(name, Val::plain(Shape::Str), true, false);
        (text, Some((at, "release-abc", "release-abcd")))
    }

    /// The step after the middle: an int step many later steps read; the type edit makes it a float.
    fn forced_quota(&mut self, i: usize) -> (String, Option<(usize, &'static str, &'static str)>) {
        let name = format!("quota_{i}");
        let want = self.want();
        let deps = self.deps(i, want);
        let mut sl = self.slots(&deps);
        let (a, b) = (self.n(&mut sl, 0), self.n(&mut sl, 1));
        let c = self.n(&mut sl, 2);
        let text = format!(
            "  /// How many items this stage may touch (the benchmark edits its type).\n  step {name} = {a} + {b} + {c} + 7000\n"
        );
        let at = text.rfind("7000").expect("the literal is written");
        self.push(name, Val::plain(Shape::Int), true, false);
        (text, Some((at, "7000", "7000.5")))
    }

    /// The output: a summary, every input and env name nothing read, every pure or read step nothing read.
    fn output(&mut self) -> String {
        let mut out = String::from("  output {\n");
        let last = self.steps.len() - 1;
        let (lb, lv) = (self.steps[last].name.clone(), self.steps[last].val);
        let summary = self.str_of(&lb, lv);
        let repo = self.read("repo");
        let _ = writeln!(out, "    summary: \"${{{repo}}}: ${{{summary}}}\"");
        let _ = writeln!(out, "    steps: {}", self.steps.len());
        self.used[last] = true;
        for (key, expr) in READS {
            if !self.reads.contains(key) {
                let _ = writeln!(out, "    {key}: {expr}");
            }
        }
        for i in 0..self.steps.len() {
            if self.needs_use[i] && !self.used[i] {
                let _ = writeln!(out, "    {0}: {0}", self.steps[i].name);
            }
        }
        out.push_str("  }\n");
        splice(&out)
    }
}

/// A flow of `steps` steps that runs with builtin tools alone (`echo`, no process, no network),
/// for the runtime's replay and fork-check benchmarks: about half `echo` steps, a fifth
/// `foreach` steps of three `echo` calls, the rest pure expressions; each reads the step before
/// it and one earlier step (a recent one mostly, some far back). With `edit_at`, that step's
/// expression is changed, as a correction would change it: a fork of a run of the unedited flow
/// reuses everything but that step and what depends on it.
pub fn runnable(steps: usize, seed: u64, edit_at: Option<usize>) -> String {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut list = vec![false; steps];
    let mut out = String::from("flow bench {\n  step s0 = echo { value: 1 }\n");
    let read = |j: usize, list: &[bool]| {
        if list[j] {
            format!("len(s{j})")
        } else {
            format!("s{j}")
        }
    };
    for i in 1..steps {
        let a = read(i - 1, &list);
        let far = if rng.random_range(0..4) == 0 {
            rng.random_range(0..i)
        } else {
            i - 1 - rng.random_range(0..i.min(8))
        };
        let b = read(far, &list);
        let bump = if edit_at == Some(i) { " + 1" } else { "" };
        let _ = match rng.random_range(0..10) {
            0..=4 => writeln!(
                out,
                "  step s{i} = echo {{ value: ({a} + {b}{bump}) % 1000 }}"
            ),
            5..=6 => {
                list[i] = true;
                writeln!(
                    out,
                    "  step s{i} = echo {{\n    foreach: [{a}, {b}, {i}]\n    value: (item{bump}) % 1000\n  }}"
                )
            }
            _ => writeln!(out, "  step s{i} = ({a} * 3 + {b}{bump}) % 1000"),
        };
    }
    let _ = writeln!(out, "  output {}\n}}", read(steps - 1, &list));
    out
}

#[cfg(test)]
mod tests {
    use super::splice;

    #[test]
    fn splice_inlines_interpolated_literals() {
        assert_eq!(splice(r#""a ${"b ${x}"} c""#), r#""a b ${x} c""#);
        assert_eq!(splice(r##""${"${"#${n}"}"}""##), r##""#${n}""##);
        assert_eq!(splice(r#""${"a" + x}""#), r#""${"a" + x}""#);
        assert_eq!(splice(r#""${f("a")}""#), r#""${f("a")}""#);
    }
}
