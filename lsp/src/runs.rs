//! Past runs of the open flows: the store found as the CLI finds it (`reel_journal::discover`),
//! opened read-only, and the shown run of each flow folded from its journal by the one fold
//! (`reel_journal::fold`) into per-step views for inlay hints and hover, kept between requests
//! while the run does not change.
//!
//! The server holds stores only as [`StoreRead`], so that it never writes is checked by the
//! compiler.
//!
//! Cassettes beside a flow file (`*.cassette.json` under its project whose `source` is the file
//! and whose `flow` names the flow) are shown the same way: [`Cassette::journal`] gives the
//! events of the run a cassette stands for, and they go through the same fold into the same
//! views ([`cassette_view`]). A cassette's id is `cassette:PATH`, PATH relative to the project.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reel_journal::cassette::{Cassette, CassetteJournal, Ending};
use reel_journal::discover::{self, StoreAt};
use reel_journal::fold::{CallRecord, Folded, Holes, StepState, StepView};
use reel_journal::journal::{Event, woke_value};
use reel_store::{Durability, EventRow, Flow, RunFilter, RunRow, RunStatus, StoreRead};
use serde_json::Value;

/// A store the server reads (it has no way to write).
pub type ReadStore = Arc<dyn StoreRead>;

/// Stores opened so far, by key; a store that does not exist yet is tried again next time.
///
/// A document's store is found as the CLI finds it (`reel_journal::discover`): PostgreSQL when
/// `REEL_STORE_URL` or else `[store] url` in the project's `reel.toml` names one, else SQLite in
/// the store directory. Its key ([`Stores::dir_for`]) is that directory, or the URL without its
/// password, which every document of a project on PostgreSQL shares.
#[derive(Clone, Default)]
pub struct Stores {
    /// `REEL_HOME` as the program that started the server saw it.
    reel_home: Option<OsString>,
    /// `REEL_STORE_URL` as the program that started the server saw it (it wins over reel.toml).
    store_url: Option<String>,
    /// Where a PostgreSQL store's password comes from when its URL has none.
    store_auth: reel_store::PgAuth,
    /// The PostgreSQL stores met so far, by key (a key that is not here is a directory).
    urls: Arc<Mutex<HashMap<PathBuf, StoreAt>>>,
    opened: Arc<Mutex<HashMap<PathBuf, ReadStore>>>,
}

impl Stores {
    /// No store opened yet; `reel_home` is `REEL_HOME` as the server's starter read it.
    pub fn new(reel_home: Option<OsString>) -> Self {
        Stores {
            reel_home,
            ..Stores::default()
        }
    }

    /// Reads past runs from the PostgreSQL store at `url` (`REEL_STORE_URL`'s value), whatever
    /// the projects' `reel.toml` say; `auth` gives a password a URL lacks.
    pub fn with_store_url(mut self, url: Option<String>, auth: reel_store::PgAuth) -> Self {
        self.store_url = url.filter(|u| !u.is_empty());
        self.store_auth = auth;
        self
    }

    /// The key of the store for a document in `dir`: its store directory, or its PostgreSQL
    /// URL shown without the password; `None` when the project's `reel.toml` cannot be used
    /// (the CLI refuses it too).
    pub fn dir_for(&self, dir: &Path) -> Option<PathBuf> {
        let config = discover::read_config(dir).ok()?;
        let at = discover::locate_store(
            dir,
            self.reel_home.as_deref(),
            self.store_url.as_deref(),
            &config,
        )
        .ok()?;
        match at {
            StoreAt::Dir(dir) => Some(dir),
            StoreAt::Url(_) => {
                let key = PathBuf::from(at.shown());
                let mut urls = self.urls.lock().unwrap_or_else(|p| p.into_inner());
                urls.insert(key.clone(), at);
                Some(key)
            }
        }
    }

    /// The read-only store whose key is `key` ([`Stores::dir_for`]), if it exists.
    pub fn get(&self, key: &Path) -> Option<ReadStore> {
        let mut map = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get(key) {
            return Some(s.clone());
        }
        let at = self
            .urls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_else(|| StoreAt::Dir(key.to_path_buf()));
        let store: ReadStore = at.open_read_only(&self.store_auth).ok()?;
        map.insert(key.to_path_buf(), store.clone());
        Some(store)
    }
}

/// Runs the user chose to see instead of the latest, by (source's absolute path, flow name).
#[derive(Clone, Default)]
pub struct Pins(Arc<Mutex<HashMap<(String, String), String>>>);

impl Pins {
    /// The run pinned for `flow` of `source_abs`, if any.
    pub fn get(&self, source_abs: &str, flow: &str) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(source_abs.to_string(), flow.to_string()))
            .cloned()
    }

    /// Pins `run` for `flow` of `source_abs`; `None` follows the latest run again.
    pub fn set(&self, source_abs: &str, flow: &str, run: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = (source_abs.to_string(), flow.to_string());
        match run {
            Some(id) => map.insert(key, id),
            None => map.remove(&key),
        };
    }
}

/// The run to show for `flow` of `source_abs`: the pinned one while it exists and belongs to that
/// flow, else the latest. The flag says whether it is pinned.
pub fn shown(
    store: &dyn StoreRead,
    pins: &Pins,
    source_abs: &str,
    flow: &str,
) -> Option<(RunRow, bool)> {
    let pinned = pins.get(source_abs, flow);
    // A pinned cassette is shown instead of any run ([`pinned_cassette`]).
    if pinned.as_deref().is_some_and(is_cassette) {
        return None;
    }
    if let Some(id) = pinned
        && let Ok(Some(run)) = store.run(&id)
        && run.flow == flow
        && run.source_abs.as_deref() == Some(source_abs)
    {
        return Some((run, true));
    }
    latest(store, source_abs, flow).map(|run| (run, false))
}

/// The most recent runs of `flow` started from `source_abs`, newest first.
pub fn recent(store: &dyn StoreRead, source_abs: &str, flow: &str, limit: usize) -> Vec<RunRow> {
    let filter = RunFilter {
        source_abs: Some(source_abs.to_string()),
        flow: Some(flow.to_string()),
        limit: Some(limit),
        ..Default::default()
    };
    store.list_runs(&filter).unwrap_or_default()
}

/// How long ago `then` was, seen at `now` (both ms since epoch): `just now`, `12 s ago`,
/// `5 min ago`, `3 h ago`, `2 d ago`.
pub fn age(now: i64, then: i64) -> String {
    let s = (now - then).max(0) / 1000;
    match s {
        0..5 => "just now".to_string(),
        5..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86_400 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86_400),
    }
}

/// The inputs `run` started with (defaults applied), from its first journal event; `None` when
/// the journal or the value is missing.
pub fn inputs(store: &dyn StoreRead, run: &str) -> Option<Value> {
    let mut digest = None;
    store
        .read_journal(run, 0, &mut |row| {
            if let Ok(Event::RunStarted(started)) = Event::from_row(&row) {
                digest = Some(started.inputs);
            }
            Flow::Stop
        })
        .ok()?;
    store.get_value(&digest?).ok()?
}

/// Inputs on one short line, to tell runs apart: `n: 5, name: "earlier"`.
pub fn inputs_line(inputs: &Value) -> String {
    match inputs {
        Value::Object(fields) if !fields.is_empty() => {
            let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            cut(&line.join(", "), 60)
        }
        _ => String::new(),
    }
}

/// One run as the run picker lists it: id, status, times (RFC 3339), its inputs, a label, its
/// age and a detail line (the client shows these as they are, so ages read the same
/// everywhere; the inputs are what tells one run of a flow from another).
pub fn picker_entry(run: &RunRow, inputs: Option<Value>, now_ms: i64) -> Value {
    let rfc3339 = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let took = run
        .ended_at
        .map(|end| format!(" · took {}", duration(end - run.created_at)))
        .unwrap_or_default();
    let given = inputs
        .as_ref()
        .map(inputs_line)
        .filter(|l| !l.is_empty())
        .map(|l| format!(" · {l}"))
        .unwrap_or_default();
    serde_json::json!({
        "id": run.id,
        "status": run.status.as_str(),
        "started_at": rfc3339(run.created_at),
        "ended_at": run.ended_at.map(rfc3339),
        "label": run.id,
        "age": age(now_ms, run.created_at),
        "inputs": inputs,
        "detail": format!("started {} UTC{took}{given}", day_time(run.created_at)),
    })
}

/// One step of a shown run: what the journal says of it, and its value when it succeeded.
#[derive(Clone, Copy, Debug)]
pub struct StepRun<'a> {
    /// The step's view, from the fold.
    pub view: &'a StepView,
    /// The value it succeeded with (`None` when not succeeded or not stored).
    pub value: Option<&'a Value>,
}

/// The latest run of one flow from one source file, folded.
#[derive(Clone, Debug)]
pub struct RunView {
    /// The run.
    pub run: RunRow,
    /// Its journal folded with per-step views, kept to be extended when the run grows.
    pub folded: Folded,
    /// The values of succeeded steps, by digest (`None`: not stored).
    pub values: HashMap<String, Option<Value>>,
    /// What the spec it ran says of each step, by step name (shared by the runs of one spec).
    pub spec: Arc<Recorded>,
}

/// What the hints need of one step of the spec a run executed.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedStep {
    /// Its semantic digest, compared with the open text's.
    pub digest: String,
    /// The tool it called (`None`: an expression step), which decides how its result is shown.
    pub tool: Option<String>,
}

/// The steps of the spec a run executed, by name (empty when the spec is missing or unreadable).
pub type Recorded = BTreeMap<String, RecordedStep>;

impl RunView {
    /// How many journal events were folded.
    pub fn events(&self) -> u64 {
        self.folded.events
    }

    /// The step named `name`, if the journal mentions it.
    pub fn step(&self, name: &str) -> Option<StepRun<'_>> {
        let view = self.folded.views.as_ref()?.get(name)?;
        let value = match &view.state {
            StepState::Succeeded { output } => self.values.get(output).and_then(Option::as_ref),
            _ => None,
        };
        Some(StepRun { view, value })
    }
}

/// The latest run of `flow` started from `source_abs`, if any.
pub fn latest(store: &dyn StoreRead, source_abs: &str, flow: &str) -> Option<RunRow> {
    let filter = RunFilter {
        source_abs: Some(source_abs.to_string()),
        flow: Some(flow.to_string()),
        limit: Some(1),
        ..Default::default()
    };
    store.list_runs(&filter).ok()?.into_iter().next()
}

/// Folds the whole journal of `run` into per-step views, reading its spec for its steps.
/// Requests go through [`Views`], which keeps the result while the run does not change.
pub fn view(store: &dyn StoreRead, run: RunRow) -> RunView {
    let spec = Arc::new(recorded(store, &run.flow_digest));
    let mut view = RunView {
        run,
        folded: Folded::with_views(),
        values: HashMap::new(),
        spec,
    };
    let _ = fold(store, &mut view);
    view
}

/// The steps of the spec with `flow_digest`: each one's semantic digest and tool (empty when the
/// spec is missing or unreadable).
fn recorded(store: &dyn StoreRead, flow_digest: &str) -> Recorded {
    let spec = store.flowspec(flow_digest).ok().flatten();
    spec.and_then(|(spec, _)| spec.ok())
        .map(|spec| {
            spec.steps
                .into_iter()
                .map(|s| {
                    let step = RecordedStep {
                        digest: s.semantic_digest,
                        tool: s.tool,
                    };
                    (s.id, step)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Folds the journal events of `view.run` after those already folded into `view` (the one fold
/// goes on from a kept state), then reads the values of steps that succeeded since. Whether the
/// journal was read to its end (a view folded from a partial read must not be kept).
fn fold(store: &dyn StoreRead, view: &mut RunView) -> bool {
    // Rows that cannot be read are passed over: a view shows what can be read.
    let read = view.folded.read(store, &view.run.id, Holes::PassOver);
    // Values are read after the journal, so the journal's read is not held open meanwhile.
    let outputs: Vec<String> = view
        .folded
        .views
        .iter()
        .flat_map(|views| views.values())
        .filter_map(|step| match &step.state {
            StepState::Succeeded { output } => Some(output.clone()),
            _ => None,
        })
        .filter(|output| !view.values.contains_key(output))
        .collect();
    for digest in outputs {
        let value = store.get_value(&digest).ok().flatten();
        view.values.insert(digest, value);
    }
    read.is_ok()
}

/// Where a cassette's id starts: `cassette:PATH`, PATH relative to the flow's project folder.
pub const CASSETTE: &str = "cassette:";

/// How a cassette's file name ends.
const CASSETTE_SUFFIX: &str = ".cassette.json";

/// How deep below the project folder cassettes are looked for: a project is a few folders of
/// flows, not a home directory.
const CASSETTE_DEPTH: usize = 8;
/// How many directory entries are looked at in all, for the same reason.
const CASSETTE_ENTRIES: usize = 20_000;

/// Whether a pinned id names a cassette rather than a run.
pub fn is_cassette(id: &str) -> bool {
    id.starts_with(CASSETTE)
}

/// A cassette file of one flow, read (or why it cannot be).
#[derive(Clone, Debug)]
pub struct CassetteFile {
    /// Its path relative to the project folder, `/`-separated: its id is `cassette:` + this.
    pub rel: String,
    /// Its path.
    pub path: PathBuf,
    /// The cassette, or why it cannot be read.
    pub read: Result<Cassette, String>,
}

impl CassetteFile {
    /// Its id, as `listRuns` gives it and `showRun` takes it.
    pub fn id(&self) -> String {
        format!("{CASSETTE}{}", self.rel)
    }

    /// Its file name.
    pub fn name(&self) -> String {
        self.rel.rsplit('/').next().unwrap_or(&self.rel).to_string()
    }

    /// How the recorded run ended, or why the cassette cannot be shown (it does not read, or
    /// its times do not).
    pub fn status(&self) -> Result<&'static str, String> {
        let cassette = self.read.as_ref().map_err(Clone::clone)?;
        journal(cassette, None)?;
        Ok(cassette.status.as_str())
    }
}

/// The folder cassettes of a flow file are looked for under: its project's (the nearest
/// `reel.toml`'s folder), else the file's own.
fn project_root(source_abs: &Path) -> Option<PathBuf> {
    let dir = source_abs.parent()?;
    Some(
        reel_journal::discover::project_file(dir)
            .and_then(|f| f.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| dir.to_path_buf()),
    )
}

/// Reads the cassette at `path` (`rel` under the project) for `flow` of `source_abs`: `None`
/// when it is of another flow or file. One that cannot be read is kept when what can be read
/// of it names this flow and file, or, when it is not JSON at all, when it sits beside the file.
fn cassette_file(path: &Path, rel: String, source_abs: &Path, flow: &str) -> Option<CassetteFile> {
    let folder = path.parent()?;
    let names_this = |c_flow: Option<&str>, c_source: Option<&str>| {
        c_flow == Some(flow)
            && c_source.is_some_and(|src| {
                std::fs::canonicalize(folder.join(src)).is_ok_and(|p| p == source_abs)
            })
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            let beside = Some(folder) == source_abs.parent();
            return beside.then(|| CassetteFile {
                rel,
                path: path.to_path_buf(),
                read: Err(format!("cannot read it: {e}")),
            });
        }
    };
    let read = match Cassette::parse(&text) {
        Ok(c) if names_this(Some(&c.flow), c.source.as_deref()) => Ok(c),
        Ok(_) => return None,
        Err(e) => {
            let lenient: Option<Value> = serde_json::from_str(&text).ok();
            let field = |name: &str| {
                lenient
                    .as_ref()
                    .and_then(|v| v.get(name))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let ours = match &lenient {
                Some(_) => names_this(field("flow").as_deref(), field("source").as_deref()),
                None => Some(folder) == source_abs.parent(),
            };
            if !ours {
                return None;
            }
            Err(e.to_string())
        }
    };
    Some(CassetteFile {
        rel,
        path: path.to_path_buf(),
        read,
    })
}

/// The cassettes of `flow` of `source_abs` under its project, by path.
pub fn cassettes(source_abs: &str, flow: &str) -> Vec<CassetteFile> {
    let source = Path::new(source_abs);
    let Some(root) = project_root(source) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut todo = vec![(root.clone(), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > CASSETTE_ENTRIES {
                break;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            // Hidden folders (the store, `.git`) and build output hold no cassettes of the user's.
            if kind.is_dir() {
                if depth < CASSETTE_DEPTH
                    && !name.starts_with('.')
                    && !matches!(name.as_str(), "target" | "node_modules")
                {
                    todo.push((path, depth + 1));
                }
            } else if name.ends_with(CASSETTE_SUFFIX)
                && let Some(rel) = relative(&root, &path)
                && let Some(file) = cassette_file(&path, rel, source, flow)
            {
                out.push(file);
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

/// `path` relative to `root`, `/`-separated.
fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

/// Where the cassette `id` (`cassette:PATH`) of a flow file is: PATH under its project, a
/// plain relative path (no `..`) to a `*.cassette.json`; `None` when it is not such an id.
pub fn cassette_path(source_abs: &str, id: &str) -> Option<PathBuf> {
    let rel = id.strip_prefix(CASSETTE)?;
    let plain = rel.ends_with(CASSETTE_SUFFIX)
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    plain.then(|| project_root(Path::new(source_abs)).map(|root| root.join(rel)))?
}

/// The cassette `id` (`cassette:PATH`) of `flow` of `source_abs`: `Err` says why there is none
/// (a cassette that exists but cannot be read is `Ok`, its `read` saying why).
pub fn cassette_at(source_abs: &str, flow: &str, id: &str) -> Result<CassetteFile, String> {
    let rel = id.strip_prefix(CASSETTE).unwrap_or(id);
    let source = Path::new(source_abs);
    let path = cassette_path(source_abs, id).ok_or_else(|| {
        format!("`{id}` is not a cassette of this project: give `{CASSETTE}PATH.cassette.json`, PATH relative to the project's folder")
    })?;
    if !path.is_file() {
        return Err(format!("there is no cassette `{rel}`"));
    }
    cassette_file(&path, rel.to_string(), source, flow)
        .ok_or_else(|| format!("cassette `{rel}` is not of flow `{flow}` of this file"))
}

/// The cassette pinned for `flow` of `source_abs`, if one is: it is shown instead of any run.
pub fn pinned_cassette(pins: &Pins, source_abs: &str, flow: &str) -> Option<CassetteFile> {
    let id = pins.get(source_abs, flow).filter(|id| is_cassette(id))?;
    Some(
        cassette_at(source_abs, flow, &id).unwrap_or_else(|why| CassetteFile {
            rel: id.strip_prefix(CASSETTE).unwrap_or(&id).to_string(),
            path: PathBuf::new(),
            read: Err(why),
        }),
    )
}

/// One cassette as the run picker lists it: the fields of a run's entry ([`picker_entry`]), and
/// `kind: "cassette"` with its file name.
pub fn cassette_entry(file: &CassetteFile) -> Value {
    let read = file
        .status()
        .and_then(|status| Ok((status, file.read.as_ref().map_err(Clone::clone)?)));
    let (status, started, detail) = match read {
        Ok((status, c)) => {
            let given = inputs_line(&Value::Object(c.inputs.clone()));
            let given = if given.is_empty() {
                String::new()
            } else {
                format!(" · {given}")
            };
            (
                status.to_string(),
                Some(c.started_at.clone()),
                format!("cassette · recorded {}{given}", c.started_at),
            )
        }
        Err(why) => (
            "unreadable".to_string(),
            None,
            format!("cassette · cannot be read: {}", cut(&why, 120)),
        ),
    };
    serde_json::json!({
        "id": file.id(),
        "kind": "cassette",
        "file": file.name(),
        "status": status,
        "started_at": started,
        "ended_at": null,
        "label": format!("cassette {}", file.rel),
        "age": "recorded",
        "inputs": file.read.as_ref().ok().map(|c| Value::Object(c.inputs.clone())),
        "detail": detail,
    })
}

/// The journal of the run `cassette` stands for. A step ends as the flow says (`foreach` or
/// not) when `spec` has it, else as the cassette's calls say (with an index: `foreach`).
fn journal(
    cassette: &Cassette,
    spec: Option<&reel_flowspec::FlowSpec>,
) -> Result<CassetteJournal, String> {
    let foreach = |step: &str| match spec {
        Some(spec) => spec
            .steps
            .iter()
            .find(|s| s.id == step)
            .map(|s| s.foreach.is_some()),
        None => Some(
            cassette
                .calls
                .iter()
                .any(|c| c.step == step && c.index.is_some()),
        ),
    };
    cassette.journal(&foreach).map_err(|e| e.to_string())
}

/// `event` as the journal row it would be, at position `seq`.
fn row(event: &Event, at: i64, seq: u64) -> EventRow {
    let new = event.to_row(at);
    EventRow {
        run: String::new(),
        seq,
        at: new.at,
        kind: new.kind,
        step: new.step,
        index: new.index,
        attempt: new.attempt,
        data: new.data,
    }
}

/// The view of the run a cassette stands for, folded from [`Cassette::journal`]'s events by the
/// one fold, for `spec` (the flow as the open text builds, when it does). Nothing is written.
///
/// A cassette records calls, not the steps the engine would end from them: once the recorded
/// run has ended, a step whose call failed for good is ended failed, and a `sleep` or `signal`
/// step whose wait ended is ended with what it gave, as a live run's journal would have them.
/// Expression steps are computed by a run, not recorded, so a cassette shows none.
///
/// A cassette records no digests of the steps it ran, so its results are compared with the
/// text as it last built (kept in `views`): current while the text builds, and while it does
/// not, marked where the text changed since.
pub fn cassette_view(
    file: &CassetteFile,
    source_abs: &str,
    spec: Option<&reel_flowspec::FlowSpec>,
    views: &Views,
) -> Result<RunView, String> {
    let cassette = file.read.as_ref().map_err(Clone::clone)?;
    let journal = journal(cassette, spec)?;
    let mut values: HashMap<String, Option<Value>> = journal
        .values
        .into_iter()
        .map(|(d, v)| (d, Some(v)))
        .collect();
    let mut folded = Folded::with_views();
    for (at, event) in &journal.events {
        if let Event::TimerFired { until, .. } = event {
            let woke = woke_value(*until);
            values.insert(reel_flowspec::canonical::name_value(&woke), Some(woke));
        }
        // Events made from a cassette read back: one that did not would be passed over.
        let _ = folded.apply_row(&row(event, *at, folded.events));
    }
    let ended = cassette.status != Ending::Waiting;
    let last = journal
        .events
        .last()
        .map_or(journal.started_at, |(at, _)| *at);
    if ended {
        for event in ends(&folded) {
            // At the step's last event, so that its duration is its calls'.
            let at = match &event {
                Event::StepFailed { step, .. } | Event::StepSucceeded { step, .. } => folded
                    .views
                    .as_ref()
                    .and_then(|v| v.get(step))
                    .map_or(last, |v| v.last_at),
                _ => last,
            };
            let _ = folded.apply_row(&row(&event, at, folded.events));
        }
    }
    let built = spec.map(|spec| {
        spec.steps
            .iter()
            .map(|s| {
                let step = RecordedStep {
                    digest: s.semantic_digest.clone(),
                    tool: s.tool.clone(),
                };
                (s.id.clone(), step)
            })
            .collect()
    });
    let spec_steps = views.last_built((source_abs, &cassette.flow), built);
    let status = match cassette.status {
        Ending::Succeeded => RunStatus::Succeeded,
        Ending::Failed => RunStatus::Failed,
        Ending::Canceled => RunStatus::Canceled,
        Ending::Waiting => RunStatus::Waiting,
    };
    let run = RunRow {
        id: file.id(),
        flow: cassette.flow.clone(),
        flow_digest: spec.map(|s| s.digest.clone()).unwrap_or_default(),
        source: cassette.source.clone(),
        source_abs: Some(source_abs.to_string()),
        cwd: String::new(),
        parent: None,
        status,
        created_at: journal.started_at,
        ended_at: ended.then_some(last),
        due_at: None,
        waiting_on: Vec::new(),
        signal_pending: false,
        lease_owner: None,
        lease_expires_at: None,
        lease_token: 0,
        cancel_requested: false,
        output_digest: folded.output.clone(),
        error: None,
        keep_for_ms: None,
        durability: Durability::Fast,
        next_seq: folded.events,
    };
    Ok(RunView {
        run,
        folded,
        values,
        spec: spec_steps,
    })
}

/// The step ends a live run's journal would hold after the calls of an ended recorded run: a
/// step with a call that failed for good failed; a step without `foreach` whose one wait or
/// call is done succeeded with its result.
fn ends(folded: &Folded) -> Vec<Event> {
    let mut by_step: BTreeMap<&str, Vec<(Option<u32>, &CallRecord)>> = BTreeMap::new();
    for ((step, index), call) in &folded.calls {
        if !folded.steps.contains_key(step) {
            by_step.entry(step).or_default().push((*index, call));
        }
    }
    let mut out = Vec::new();
    for (step, mut calls) in by_step {
        calls.sort_by_key(|(index, _)| *index);
        let failed = calls.iter().find_map(|(_, c)| match c {
            CallRecord::Failed { error, .. } => Some(error.clone()),
            _ => None,
        });
        if let Some(error) = failed {
            out.push(Event::StepFailed {
                step: step.to_string(),
                error,
            });
        } else if let [(None, CallRecord::Done { output, attempt })] = calls.as_slice() {
            out.push(Event::StepSucceeded {
                step: step.to_string(),
                output: output.clone(),
                attempts: *attempt,
            });
        }
    }
    out
}

/// How many folded views [`Views`] keeps, and how many specs' steps: enough for the flows of
/// the open documents and a few pinned runs, without growing with every run looked at.
const VIEWS_KEPT: usize = 32;

/// Folded views of the runs shown, shared by inlay hints and hover, so that a request folds a
/// run's journal and parses its spec at most once per change of the run (not per keystroke).
#[derive(Clone, Default)]
pub struct Views(Arc<Mutex<ViewCache>>);

/// Entries by (store directory, a name within it), each stamped with its last use.
type Kept<V> = HashMap<(PathBuf, String), (u64, V)>;

/// What [`Views`] holds: entries stamped with their last use, so the oldest goes first.
#[derive(Default)]
struct ViewCache {
    clock: u64,
    /// By (store directory, run id).
    views: Kept<Arc<RunView>>,
    /// By (store directory, flow digest): a spec never changes, and runs of one flow share it.
    specs: Kept<Arc<Recorded>>,
    /// By (source path, flow name): the steps of the flow as its text last built, which a
    /// cassette's results are compared with.
    built: Kept<Arc<Recorded>>,
}

/// The entry of `key` in `map`, stamped as used now.
fn touch<V: Clone>(map: &mut Kept<V>, key: &(PathBuf, String), now: u64) -> Option<V> {
    map.get_mut(key).map(|(used, v)| {
        *used = now;
        v.clone()
    })
}

/// Puts `value` in `map`, dropping the least recently used entry past [`VIEWS_KEPT`].
fn put<V>(map: &mut Kept<V>, key: (PathBuf, String), value: V, now: u64) {
    map.insert(key, (now, value));
    while map.len() > VIEWS_KEPT {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, (used, _))| *used)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
}

impl Views {
    /// The steps of `flow` of `source_abs` as the text built now (`built`), kept; else as it
    /// last built (empty when it never did).
    pub fn last_built(
        &self,
        (source_abs, flow): (&str, &str),
        built: Option<Recorded>,
    ) -> Arc<Recorded> {
        let key = (PathBuf::from(source_abs), flow.to_string());
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cache.clock += 1;
        let now = cache.clock;
        match built {
            Some(built) => {
                let built = Arc::new(built);
                put(&mut cache.built, key, built.clone(), now);
                built
            }
            None => touch(&mut cache.built, &key, now).unwrap_or_default(),
        }
    }

    /// The folded view of `run` (as just read from the store in `dir`): the kept one while the
    /// run's status and event count are unchanged, else the kept one extended with the new events
    /// (a journal only grows), else a fold from the start.
    pub fn get(&self, dir: &Path, store: &dyn StoreRead, run: RunRow) -> Arc<RunView> {
        let key = (dir.to_path_buf(), run.id.clone());
        let spec_key = (dir.to_path_buf(), run.flow_digest.clone());
        let (old, spec) = {
            let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
            cache.clock += 1;
            let now = cache.clock;
            (
                touch(&mut cache.views, &key, now),
                touch(&mut cache.specs, &spec_key, now),
            )
        };
        if let Some(old) = &old
            && old.run.status == run.status
            && old.run.next_seq == run.next_seq
        {
            return old.clone();
        }
        // The fold runs without the lock: a long journal must not hold up other requests. Two
        // requests may then fold the same change; the later insert wins, both are right.
        let spec = spec
            .or_else(|| {
                old.as_ref()
                    .map(|o| o.spec.clone())
                    .filter(|d| !d.is_empty())
            })
            .unwrap_or_else(|| Arc::new(recorded(store, &run.flow_digest)));
        let mut view = match old {
            Some(old) => RunView {
                run,
                spec: spec.clone(),
                ..Arc::unwrap_or_clone(old)
            },
            None => RunView {
                run,
                folded: Folded::with_views(),
                values: HashMap::new(),
                spec: spec.clone(),
            },
        };
        let whole = fold(store, &mut view);
        let view = Arc::new(view);
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cache.clock += 1;
        let now = cache.clock;
        // An empty map may be a spec not readable yet; it is asked for again next time.
        if !spec.is_empty() {
            put(&mut cache.specs, spec_key, spec, now);
        }
        if whole {
            put(&mut cache.views, key, view.clone(), now);
        }
        view
    }
}

/// `1.2s`, `340ms`, `2m05s`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// `text` cut to `max` characters, with `…` when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// How many characters a hint's label may take: VS Code cuts a longer one
/// (`editor.inlayHints.maximumLength`, 43), so the label says the most useful thing first and
/// fits in this.
pub const HINT_WIDTH: usize = 43;

/// A step's duration is shown in its label from this long (ms): shorter is noise.
const SHOWN_DURATION_MS: i64 = 100;

/// How a step's recorded result stands against the open text, as its hint marks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The text still computes what the run computed.
    Current,
    /// The step changed since the run (`None`), or a step it reads did (that step's name).
    Stale(Option<String>),
    /// The step does not check, so what it computes now is not known.
    Unverified,
}

impl Standing {
    /// The label's prefix: nothing, `(stale) ` or the short `(?) `.
    pub fn mark(&self) -> &'static str {
        match self {
            Standing::Current => "",
            Standing::Stale(_) => "(stale) ",
            Standing::Unverified => "(?) ",
        }
    }

    /// What the mark means, for the tooltip (empty when there is no mark).
    pub fn note(&self) -> String {
        match self {
            Standing::Current => String::new(),
            Standing::Stale(None) => {
                "**Stale:** this step changed since the run; the result is what the run computed.\n\n"
                    .to_string()
            }
            Standing::Stale(Some(up)) => format!(
                "**Stale:** step `{up}`, which this step depends on, changed since the run.\n\n"
            ),
            Standing::Unverified => {
                "**Unverified:** this step, or a step it reads, has an error: it cannot be compared with the run.\n\n"
                    .to_string()
            }
        }
    }
}

/// The label of a step the shown run has not reached yet (it waits, or runs, upstream).
pub fn pending_hint(standing: &Standing) -> String {
    format!("{}◌ pending", standing.mark())
}

/// The tooltip of a step the shown run has not reached yet.
pub fn pending_details(run: &RunRow, standing: &Standing) -> String {
    format!(
        "{}{}\n\nNot started yet: the run has not reached this step.\n",
        standing.note(),
        header(run),
    )
}

/// A step's label: its mark, a glyph for its state, then what matters most for its tool (an
/// `http.*` result's status and body, an `exec` result's JSON or stdout, a failure's code and
/// first line), then calls, retries and a success's duration when it matters, all within
/// [`HINT_WIDTH`].
pub fn hint(step: StepRun<'_>, tool: Option<&str>, standing: &Standing) -> String {
    let StepRun { view: step, value } = step;
    let (glyph, main) = match &step.state {
        StepState::Succeeded { .. } => (
            "✓",
            value.map_or_else(|| "(value not stored)".to_string(), |v| result(tool, v)),
        ),
        StepState::Failed(e) => (
            "✗",
            format!("{}: {}", e.code, e.message.lines().next().unwrap_or("")),
        ),
        StepState::Skipped(reason) => ("↷", format!("skipped: {reason}")),
        StepState::WaitingSignal(name) => ("⏸", format!("waiting for signal `{name}`")),
        StepState::Sleeping(until) => ("⏸", format!("sleeping until {}", time(*until))),
        StepState::Running => ("…", "running".to_string()),
    };
    let mut tail = counts(step);
    // A call whose outcome was unknown at a resume: the effect may have happened twice, or the
    // run waits for a person (`held`); said first, as the counts go before it when room runs out.
    if let Some((_, _, then)) = step.unknown.last() {
        tail.insert(0, format!("⚠ {}", then.as_str()));
    }
    let took = step.last_at - step.first_at;
    // A failure's message needs the room more than its duration (the tooltip has both).
    if matches!(step.state, StepState::Succeeded { .. }) && took >= SHOWN_DURATION_MS {
        tail.push(duration(took));
    }
    let head = format!("{}{glyph} ", standing.mark());
    let joined = |tail: &[String]| -> String { tail.iter().map(|t| format!(" · {t}")).collect() };
    // The result keeps room for a dozen characters: the counts at the end go first (the
    // tooltip has them all).
    while !tail.is_empty()
        && head.chars().count() + joined(&tail).chars().count() + MIN_RESULT > HINT_WIDTH
    {
        tail.pop();
    }
    let tail = joined(&tail);
    let room = HINT_WIDTH.saturating_sub(head.chars().count() + tail.chars().count());
    // `cut` adds its `…` past the room it is given.
    format!("{head}{}{tail}", cut(&main, room.saturating_sub(1)))
}

/// The fewest characters of a step's result that its label keeps.
const MIN_RESULT: usize = 12;

/// A `foreach` step's calls (`3 calls`, `1 failed`) and any step's retries (`2 retries`), told
/// apart: a call is one element, a retry another attempt of a call.
fn counts(step: &StepView) -> Vec<String> {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut out = Vec::new();
    if let Some((ok, failed)) = step.calls {
        out.push(plural((ok + failed) as usize, "call", "calls"));
        if failed > 0 {
            out.push(format!("{failed} failed"));
        }
    }
    let retries = step
        .starts
        .iter()
        .filter(|(_, attempt, _)| *attempt > 1)
        .count();
    if retries > 0 {
        out.push(plural(retries, "retry", "retries"));
    }
    out
}

/// The most useful part of a step's value for its tool, on one line (cut later to fit): an
/// `http.*` result's status and body, an `exec` result's JSON or else its stdout, else the value.
fn result(tool: Option<&str>, v: &Value) -> String {
    let fields = v.as_object();
    let field = |name: &str| fields.and_then(|f| f.get(name));
    match tool {
        Some(t) if t.starts_with("http.") => {
            if let (Some(status), Some(body)) = (field("status"), field("body")) {
                return format!("{status} {}", json_head(body));
            }
        }
        Some("exec") => {
            if let Some(json) = field("json").filter(|j| !j.is_null()) {
                return json_head(json);
            }
            if let Some(Value::String(out)) = field("stdout") {
                return json_head(&Value::String(out.trim_end().to_string()));
            }
        }
        _ => {}
    }
    json_head(v)
}

/// The compact JSON of `v`, stopping soon after a hint's width: a value may be megabytes, and a
/// hint shows its first few dozen characters.
fn json_head(v: &Value) -> String {
    /// Keeps written bytes up to a bound, then refuses more (which ends the writing).
    struct Head(Vec<u8>);
    impl std::io::Write for Head {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // Four bytes a character at most: past this there are more than a hint can show.
            if self.0.len() > 4 * HINT_WIDTH + 8 {
                return Err(std::io::Error::other("enough for a hint"));
            }
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut head = Head(Vec::new());
    // Stopping early is the point; what was written so far is the head.
    let _ = serde_json::to_writer(&mut head, v);
    String::from_utf8_lossy(&head.0).into_owned()
}

/// A step's tooltip: what its mark means, then its recorded result in full ([`details`]).
pub fn tooltip(run: &RunRow, step: StepRun<'_>, standing: &Standing) -> String {
    format!("{}{}", standing.note(), details(run, step))
}

/// A time as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn day_time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// A time as `HH:MM:SS` UTC.
pub fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%H:%M:%S").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// The Markdown added to a step's hover: the recorded result in full (cut at a sensible size).
pub fn details(run: &RunRow, step: StepRun<'_>) -> String {
    let StepRun { view: step, value } = step;
    let mut out = format!("{}\n\n", header(run));
    match (&step.state, value) {
        (StepState::Succeeded { .. }, Some(v)) => {
            let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
            out.push_str(&format!("Output:\n```json\n{}\n```\n", cut(&pretty, 2000)));
        }
        (StepState::Succeeded { .. }, None) => out.push_str("Succeeded (value not stored)\n"),
        (StepState::Failed(e), _) => {
            out.push_str(&format!("Failed: `{}`: {}\n", e.code, e.message))
        }
        (StepState::Skipped(r), _) => out.push_str(&format!("Skipped: {r}\n")),
        (StepState::WaitingSignal(n), _) => out.push_str(&format!("Waiting for signal `{n}`\n")),
        (StepState::Sleeping(u), _) => out.push_str(&format!("Sleeping until {}\n", time(*u))),
        (StepState::Running, _) => out.push_str("Running\n"),
    }
    // Here every duration is told, short ones too: the tooltip is where the whole story goes.
    let mut facts = counts(step);
    if matches!(
        step.state,
        StepState::Succeeded { .. } | StepState::Failed(_)
    ) {
        facts.insert(
            0,
            format!("Took {}", duration(step.last_at - step.first_at)),
        );
    }
    if !facts.is_empty() {
        out.push_str(&format!("\n{}\n", facts.join(" · ")));
    }
    if !step.starts.is_empty() {
        out.push_str("\nAttempts:\n");
        for (index, attempt, at) in step.starts.iter().take(20) {
            let idx = index.map(|i| format!("[{i}] ")).unwrap_or_default();
            out.push_str(&format!("- {idx}attempt {attempt} at {}\n", time(*at)));
        }
    }
    for key in &step.keys {
        out.push_str(&format!("\nIdempotency key: `{key}`\n"));
    }
    if !step.effects.is_empty() {
        out.push_str(&format!("\nEffects recorded: {}\n", step.effects.len()));
    }
    out
}

/// The first line of a step's tooltip: the run, or the cassette, it shows, and its status.
fn header(run: &RunRow) -> String {
    match run.id.strip_prefix(CASSETTE) {
        Some(rel) => format!("**Cassette `{rel}`** ({})", run.status.as_str()),
        None => format!("**Run `{}`** ({})", run.id, run.status.as_str()),
    }
}

/// Whether a run may still change (its journal may grow).
pub fn is_live(status: RunStatus) -> bool {
    !status.is_ended()
}

#[cfg(test)]
mod postgres_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use reel_store::{SqliteStore, Store};

    #[test]
    fn inputs_fit_on_one_line() {
        let inputs = serde_json::json!({ "name": "earlier", "n": 5, "tags": ["a", "b"] });
        assert_eq!(
            inputs_line(&inputs),
            r#"n: 5, name: "earlier", tags: ["a","b"]"#
        );
        let long = serde_json::json!({ "text": "x".repeat(100) });
        assert_eq!(inputs_line(&long).chars().count(), 61);
        assert!(inputs_line(&long).ends_with('…'));
        assert_eq!(inputs_line(&serde_json::json!({})), "");
        assert_eq!(inputs_line(&Value::Null), "");
    }

    #[test]
    fn a_label_fits_the_width_and_tells_calls_from_retries() {
        let value = serde_json::json!({ "a": "x".repeat(600) });
        let mut s = StepView {
            state: StepState::Succeeded {
                output: "d".repeat(64),
            },
            first_at: 0,
            last_at: 1500,
            attempts: 2,
            calls: None,
            starts: vec![(None, 1, 0), (None, 2, 700)],
            keys: Vec::new(),
            effects: Vec::new(),
            unknown: Vec::new(),
        };
        let label = |s: &StepView, value, standing: &Standing| {
            hint(StepRun { view: s, value }, Some("echo"), standing)
        };
        let h = label(&s, Some(&value), &Standing::Unverified);
        assert_eq!(h.chars().count(), HINT_WIDTH, "{h}");
        assert!(h.starts_with("(?) ✓ {\"a\":\"xxx"), "{h}");
        assert!(h.ends_with("… · 1 retry · 1.5s"), "{h}");
        assert!(label(&s, None, &Standing::Current).starts_with("✓ (value not stored)"));
        s.starts = vec![(Some(0), 1, 0), (Some(1), 1, 0), (Some(2), 1, 0)];
        s.calls = Some((3, 0));
        s.last_at = 0;
        let list = serde_json::json!([1, 2, 3]);
        assert_eq!(
            label(&s, Some(&list), &Standing::Current),
            "✓ [1,2,3] · 3 calls"
        );
        // Many counts and a long mark: the last counts give way to the result.
        s.starts.extend((0..3).map(|i| (Some(i), 2, 5)));
        s.calls = Some((2, 1));
        s.state = StepState::Failed(reel_journal::error::RunError::new(
            "tool.exec.exit",
            "`test` exited with status 1",
        ));
        let upstream = Standing::Stale(Some("a".into()));
        let h = label(&s, None, &upstream);
        assert!(h.chars().count() <= HINT_WIDTH, "{h}");
        assert_eq!(h, "(stale) ✗ tool.exec.e… · 3 calls · 1 failed");
    }

    /// A store with one run whose step `a` started and waits for the signal `go`.
    fn waiting_run() -> (tempfile::TempDir, PathBuf, SqliteStore, reel_store::Lease) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".reel");
        let store = SqliteStore::open(&dir, Arc::new(reel_store::ManualClock::at(1_000))).unwrap();
        let first_events = [
            Event::StepStarted {
                step: "a".into(),
                index: None,
                attempt: 1,
                inputs: "i".into(),
                key: None,
            },
            Event::SignalAwaited {
                step: "a".into(),
                index: None,
                name: "go".into(),
                deadline: None,
            },
        ]
        .iter()
        .enumerate()
        .map(|(n, e)| e.to_row(1_000 + n as i64))
        .collect();
        let run = reel_store::NewRun {
            id: "r1".into(),
            flow: "f".into(),
            flow_digest: "d".repeat(64),
            source: None,
            source_abs: Some("/a.reel".into()),
            cwd: "/".into(),
            parent: None,
            keep_for_ms: None,
            durability: reel_store::Durability::Fast,
            created_at: 1_000,
            first_events,
            kept: Vec::new(),
        };
        let lease = store
            .create_run(run, &reel_store::Owner::this_process(), 60_000)
            .unwrap();
        (tmp, dir, store, lease)
    }

    #[test]
    fn a_view_is_kept_while_its_run_is_unchanged_and_extended_when_it_grows() {
        let (_tmp, dir, store, lease) = waiting_run();
        let views = Views::default();
        let row = || store.run("r1").unwrap().unwrap();
        let first = views.get(&dir, &store, row());
        assert_eq!(first.events(), 2);
        assert_eq!(
            first.step("a").unwrap().view.state,
            StepState::WaitingSignal("go".into())
        );
        assert!(Arc::ptr_eq(&first, &views.get(&dir, &store, row())));

        let payload = store.put_value(&serde_json::json!("hi")).unwrap();
        let output = store.put_value(&serde_json::json!({ "ok": 1 })).unwrap();
        let more = [
            Event::SignalReceived {
                step: "a".into(),
                index: None,
                name: "go".into(),
                signal: 0,
                payload,
            },
            Event::StepSucceeded {
                step: "a".into(),
                output,
                attempts: 1,
            },
        ];
        let rows = more.iter().map(|e| e.to_row(2_000)).collect();
        store.append(&lease, rows).unwrap();
        store.sync(&lease).0.blocking_recv().unwrap().unwrap();

        let grown = views.get(&dir, &store, row());
        assert!(!Arc::ptr_eq(&first, &grown));
        assert_eq!(grown.events(), 4);
        // Extending the kept view gives what a fold from the start gives.
        let fresh = view(&store, row());
        assert_eq!(grown.folded.views, fresh.folded.views);
        assert_eq!(grown.values, fresh.values);
        let a = grown.step("a").unwrap();
        assert_eq!(a.value, Some(&serde_json::json!({ "ok": 1 })));
        assert!(matches!(a.view.state, StepState::Succeeded { .. }));
        assert_eq!(a.view.first_at, 1_000);
        assert!(Arc::ptr_eq(&grown, &views.get(&dir, &store, row())));
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_past_its_bound() {
        let mut map = HashMap::new();
        let key = |n: usize| (PathBuf::from("/s"), format!("r{n}"));
        for n in 0..VIEWS_KEPT + 10 {
            put(&mut map, key(n), n, n as u64 * 2);
            // The first run is looked at all the time, so it stays.
            assert_eq!(touch(&mut map, &key(0), n as u64 * 2 + 1), Some(0));
        }
        assert_eq!(map.len(), VIEWS_KEPT);
        assert!(map.contains_key(&key(VIEWS_KEPT + 9)));
        assert!(!map.contains_key(&key(1)));
    }

    /// A cassette whose `foreach` step had one element fail for good, and whose single call
    /// succeeded on its second attempt, folds as a live run's journal would show them.
    #[test]
    fn a_cassette_folds_into_the_views_a_run_has() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("f.reel");
        std::fs::write(&source, "").unwrap();
        let cassette = serde_json::json!({
            "cassette": 1, "flow": "f", "source": "f.reel",
            "started_at": "2026-01-01T00:00:00Z",
            "calls": [
                { "step": "get", "attempt": 1, "inputs": {}, "at": "2026-01-01T00:00:01Z",
                  "error": { "code": "tool.http.status", "message": "503", "retryable": true } },
                { "step": "get", "attempt": 2, "inputs": {}, "at": "2026-01-01T00:00:03Z",
                  "result": { "status": 200 } },
                { "step": "each", "index": 0, "inputs": {}, "result": 1 },
                { "step": "each", "index": 1, "inputs": {},
                  "error": { "code": "tool.exec.exit", "message": "exited with 1" } }
            ],
            "status": "failed",
            "error": { "code": "tool.exec.exit", "message": "exited with 1", "step": "each" }
        });
        let path = dir.path().join("f.cassette.json");
        std::fs::write(&path, cassette.to_string()).unwrap();
        let abs = std::fs::canonicalize(&source).unwrap();
        let abs = abs.to_string_lossy();
        let files = cassettes(&abs, "f");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].id(), "cassette:f.cassette.json");
        assert!(cassettes(&abs, "other").is_empty());
        let view = cassette_view(&files[0], &abs, None, &Views::default()).unwrap();
        assert_eq!(view.run.status, RunStatus::Failed);
        assert_eq!(view.run.id, "cassette:f.cassette.json");
        let get = view.step("get").unwrap();
        assert!(matches!(get.view.state, StepState::Succeeded { .. }));
        assert_eq!(get.value, Some(&serde_json::json!({ "status": 200 })));
        assert_eq!(get.view.attempts, 2);
        assert_eq!(get.view.last_at - get.view.first_at, 2_000);
        let each = view.step("each").unwrap();
        assert!(
            matches!(&each.view.state, StepState::Failed(e) if e.code == "tool.exec.exit"),
            "{:?}",
            each.view.state
        );
        assert_eq!(each.view.calls, Some((1, 1)));
        assert!(details(&view.run, get).starts_with("**Cassette `f.cassette.json`** (failed)"));

        // Still waiting when exported: a call that failed may yet be tried again.
        let mut waiting = cassette.clone();
        waiting["status"] = "waiting".into();
        std::fs::write(&path, waiting.to_string()).unwrap();
        let files = cassettes(&abs, "f");
        let view = cassette_view(&files[0], &abs, None, &Views::default()).unwrap();
        assert_eq!(view.run.status, RunStatus::Waiting);
        assert_eq!(view.step("each").unwrap().view.state, StepState::Running);
    }

    #[test]
    fn the_store_is_found_like_the_cli_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(dir.path().join("reel.toml"), "").unwrap();
        assert_eq!(
            Stores::new(None).dir_for(&sub),
            Some(dir.path().join(".reel"))
        );
        let home = Stores::new(Some("/elsewhere".into()));
        assert_eq!(home.dir_for(&sub), Some(PathBuf::from("/elsewhere")));
        // `[store] url` in reel.toml puts it on PostgreSQL, keyed without the password.
        std::fs::write(
            dir.path().join("reel.toml"),
            "[store]\nurl = \"postgres://team:hunter2@db.example/reel\"\n",
        )
        .unwrap();
        let key = home.dir_for(&sub).unwrap();
        assert_eq!(key, PathBuf::from("postgres://team@db.example:5432/reel"));
        // A reel.toml the CLI refuses gives no store.
        std::fs::write(dir.path().join("reel.toml"), "[store]\nurl = 1\n").unwrap();
        assert_eq!(home.dir_for(&sub), None);
    }
}
