//! Past runs shown in the document: an inlay hint at the end of each step's header line with the
//! shown run's result (the one the user pinned, else the latest), and the full recorded result
//! in a step's hover.
//!
//! A hint's label says the most useful thing first and fits in what VS Code shows
//! (`runs::hint`); its tooltip has the whole result (`runs::tooltip`). Steps a live run has not
//! reached yet show `pending`.
//!
//! Stale results are marked by comparing each step's `semantic_digest` in the spec the run
//! executed with the one the open text compiles to, and a step that reads a stale one is stale
//! too (its inputs changed; a step it only waits for with `after` gives it no input). When the text has errors, each step that checks on its own is
//! digested alone, as the spec would digest it, and only a step that does not check is marked
//! unverified (`(?)`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reel_compiler::queries::{flow_dag, step_check, step_named, step_syntax, user_tools};
use reel_compiler::step::step_mentions;
use reel_compiler::{Db, FlowId, file_flows};
use reel_flowspec::{FORMAT, FORMAT_VERSION, FlowSpec, SourceSpan, ToolSpec};
use reel_syntax::ast::{Item, Member};
use tower_lsp_server::lsp_types::{
    InlayHint, InlayHintKind, InlayHintLabel, InlayHintTooltip, MarkupContent, MarkupKind, Uri,
};

use crate::ide::Ctx;
use crate::ide::names::{self, Kind};
use crate::runs::{self, Pins, Recorded, RunView, Standing, Stores, Views};

/// What the live refresh watches: per document, the (store directory, source, flow) of its flows.
pub type Watched = Arc<Mutex<HashMap<Uri, Vec<WatchKey>>>>;

/// The document's canonical path and its store directory, when it is a file.
pub fn locate(cx: &Ctx<'_>, stores: &Stores) -> Option<(String, PathBuf)> {
    locate_path(Path::new(cx.file.path(cx.db)), stores)
}

/// A source file's canonical path (as runs record it) and its store directory.
pub fn locate_path(path: &Path, stores: &Stores) -> Option<(String, PathBuf)> {
    let abs = std::fs::canonicalize(path).ok()?;
    let dir = abs.parent()?.to_path_buf();
    Some((abs.to_string_lossy().into_owned(), stores.dir_for(&dir)?))
}

/// The shown run (pinned, else latest) of each flow of the document, by flow name.
fn shown_runs(
    cx: &Ctx<'_>,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
) -> (Vec<WatchKey>, BTreeMap<String, Arc<RunView>>) {
    let mut watched = Vec::new();
    let mut shown = BTreeMap::new();
    let Some((source, dir)) = locate(cx, stores) else {
        return (watched, shown);
    };
    for (_, f) in cx.flows() {
        watched.push((dir.clone(), source.clone(), f.name.clone()));
        if let Some(view) = shown_view(cx, stores, pins, views, (&source, &dir), &f.name) {
            shown.insert(f.name.clone(), view);
        }
    }
    (watched, shown)
}

/// The folded view `flow` of the document shows: its pinned cassette's (when it reads), else
/// its shown run's.
fn shown_view(
    cx: &Ctx<'_>,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
    (source, dir): (&str, &Path),
    flow: &str,
) -> Option<Arc<RunView>> {
    if let Some(file) = runs::pinned_cassette(pins, source, flow) {
        // The spec as the text builds, read in place (not copied) at every request.
        let spec = file_flows(cx.db, cx.file)
            .iter()
            .find(|id| *id.name(cx.db) == flow)
            .and_then(|&id| reel_compiler::flow_spec(cx.db, id).as_ref());
        // One that cannot be read says so in its lens; the hints show nothing of it.
        return runs::cassette_view(&file, source, spec, views)
            .ok()
            .map(Arc::new);
    }
    let store = stores.get(dir)?;
    let (run, _) = runs::shown(store.as_ref(), pins, source, flow)?;
    Some(views.get(dir, store.as_ref(), run))
}

/// The inlay hints of the document, recording its flows for the live refresh.
pub fn inlay_hints(
    cx: &Ctx<'_>,
    uri: &Uri,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
    watched: &Watched,
) -> Vec<InlayHint> {
    let (flows, views) = shown_runs(cx, stores, pins, views);
    watched
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uri.clone(), flows);
    let mut out = Vec::new();
    for (_, f) in cx.flows() {
        let Some(view) = views.get(&f.name) else {
            continue;
        };
        let flow = file_flows(cx.db, cx.file)
            .iter()
            .copied()
            .find(|id| *id.name(cx.db) == f.name);
        let mut standings = Standings::new(cx, flow, &view.spec);
        let live = runs::is_live(view.run.status);
        for (offset, m) in f.members() {
            let Member::Step(s) = m else { continue };
            let name = &s.name.name;
            let (label, tooltip) = match view.step(name) {
                Some(step) => {
                    let standing = standings.of(name);
                    let tool = view.spec.get(name).and_then(|r| r.tool.as_deref());
                    (
                        runs::hint(step, tool, &standing),
                        runs::tooltip(&view.run, step, &standing),
                    )
                }
                // A step of the run's spec that the journal does not mention yet: the run
                // waits, or runs, upstream of it.
                None if live && view.spec.contains_key(name) => {
                    let standing = standings.of(name);
                    (
                        runs::pending_hint(&standing),
                        runs::pending_details(&view.run, &standing),
                    )
                }
                None => continue,
            };
            let line = cx.lines.line_of((offset + s.name.span.start) as usize);
            out.push(InlayHint {
                position: cx.lines.position(cx.lines.line_end(line)),
                label: InlayHintLabel::String(label),
                kind: Some(InlayHintKind::TYPE),
                text_edits: None,
                tooltip: Some(InlayHintTooltip::MarkupContent(MarkupContent {
                    kind: MarkupKind::Markdown,
                    value: tooltip,
                })),
                padding_left: Some(true),
                padding_right: None,
                data: None,
            });
        }
    }
    out
}

/// Where each step's recorded result stands against the open text, worked out once per step of
/// one flow: a step is stale when it changed or a step it depends on is stale, and unverified
/// only when it does not check itself.
struct Standings<'c, 'a> {
    cx: &'c Ctx<'a>,
    flow: Option<FlowId<'a>>,
    recorded: &'c Recorded,
    /// Each step's semantic digest when the text builds; `None` while it has errors.
    built: Option<BTreeMap<String, String>>,
    known: HashMap<String, Standing>,
}

/// What a step's own text says against the run, before its dependencies are looked at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Own {
    /// It computes what the run's step computed.
    Same,
    /// It computes something else.
    Changed,
    /// It does not check.
    Unknown,
}

impl<'c, 'a> Standings<'c, 'a> {
    fn new(cx: &'c Ctx<'a>, flow: Option<FlowId<'a>>, recorded: &'c Recorded) -> Self {
        let built = flow
            .and_then(|flow| reel_compiler::flow_spec(cx.db, flow).as_ref())
            .map(|spec| {
                spec.steps
                    .iter()
                    .map(|s| (s.id.clone(), s.semantic_digest.clone()))
                    .collect()
            });
        Standings {
            cx,
            flow,
            recorded,
            built,
            known: HashMap::new(),
        }
    }

    /// The standing of step `name`. Dependencies are walked with a stack of their own (a chain
    /// of ten thousand steps must not take ten thousand frames); a cycle counts as current.
    fn of(&mut self, name: &str) -> Standing {
        // Each step is on the stack first without its dependencies, then again with them, once
        // they have been decided.
        let mut todo: Vec<(String, Option<Vec<String>>)> = vec![(name.to_string(), None)];
        let mut visiting = HashSet::new();
        while let Some((step, deps)) = todo.pop() {
            if self.known.contains_key(&step) {
                continue;
            }
            let Some(deps) = deps else {
                let deps = self.dependencies(&step);
                visiting.insert(step.clone());
                let next: Vec<String> = deps
                    .iter()
                    .filter(|d| !self.known.contains_key(*d) && !visiting.contains(*d))
                    .cloned()
                    .collect();
                todo.push((step, Some(deps)));
                todo.extend(next.into_iter().map(|d| (d, None)));
                continue;
            };
            let standing = self.decide(&step, &deps);
            visiting.remove(&step);
            self.known.insert(step, standing);
        }
        self.known.get(name).cloned().unwrap_or(Standing::Current)
    }

    /// The steps whose values `step` reads, as the open text says: its inputs. A step it only
    /// waits for (`after`) gives it nothing, so a change there leaves its result as it was.
    fn dependencies(&self, step: &str) -> Vec<String> {
        let Some(flow) = self.flow else {
            return Vec::new();
        };
        let db = self.cx.db;
        let Some(syntax) = step_named(db, flow, step).and_then(|id| step_syntax(db, id)) else {
            return Vec::new();
        };
        let mut deps: Vec<String> = step_mentions(syntax)
            .0
            .into_iter()
            .filter(|n| n != step && step_named(db, flow, n).is_some())
            .collect();
        deps.sort();
        deps.dedup();
        deps
    }

    /// The standing of `step` once its dependencies' are known.
    fn decide(&self, step: &str, deps: &[String]) -> Standing {
        let of = |d: &String| self.known.get(d).cloned().unwrap_or(Standing::Current);
        let upstream_unknown = deps.iter().any(|d| of(d) == Standing::Unverified);
        match self.own(step) {
            Own::Unknown => return Standing::Unverified,
            // A step that checks may still read an unchecked one, whose type is unknown, which
            // changes what it computes: then it cannot be told apart from an edit.
            Own::Changed if upstream_unknown => return Standing::Unverified,
            Own::Changed => return Standing::Stale(None),
            Own::Same => {}
        }
        deps.iter()
            .find_map(|d| match of(d) {
                Standing::Stale(None) => Some(Standing::Stale(Some(d.clone()))),
                Standing::Stale(Some(up)) => Some(Standing::Stale(Some(up))),
                _ => None,
            })
            .unwrap_or(Standing::Current)
    }

    /// What `step`'s own text says: from the built spec when the text builds, else from the
    /// step's own check, digested as the spec would digest it.
    fn own(&self, step: &str) -> Own {
        let recorded = self.recorded.get(step).map(|r| r.digest.as_str());
        let now = match &self.built {
            Some(built) => built.get(step).cloned(),
            None => match self.flow.map(|flow| step_digest(self.cx.db, flow, step)) {
                Some(Ok(digest)) => Some(digest),
                Some(Err(NoDigest::Unchecked)) | None => return Own::Unknown,
                Some(Err(NoDigest::NoStep)) => None,
            },
        };
        if now.is_some() && now.as_deref() == recorded {
            Own::Same
        } else {
            Own::Changed
        }
    }
}

/// Why a step of a text with errors has no digest.
enum NoDigest {
    /// The flow has no such step.
    NoStep,
    /// The step does not check (or sits on a cycle).
    Unchecked,
}

/// The semantic digest of step `name` as the spec would have it, from the step's own check, for
/// a text that does not build as a whole: the step alone in a spec with the user tool it calls,
/// sealed (so the version, and with it how literals are written, is decided as for the whole).
fn step_digest(db: &dyn Db, flow: FlowId<'_>, name: &str) -> Result<String, NoDigest> {
    let Some(id) = step_named(db, flow, name) else {
        return Err(NoDigest::NoStep);
    };
    if flow_dag(db, flow).in_cycle.contains(name) {
        return Err(NoDigest::Unchecked);
    }
    let Some(check) = step_check(db, id).as_ref() else {
        return Err(NoDigest::Unchecked);
    };
    if check.diagnostics.iter().any(|d| d.is_error()) {
        return Err(NoDigest::Unchecked);
    }
    let tools = check
        .lowered
        .tool
        .as_ref()
        .and_then(|tool| {
            let user = user_tools(db, flow.file(db)).get(tool)?;
            Some(ToolSpec {
                name: tool.clone(),
                kind: user.contract.kind,
                exec: user.exec.clone(),
                dir: String::new(),
                input: user.input.clone(),
                output: user.output.clone(),
                repeat: user.repeat,
                doc: None,
                span: SourceSpan::default(),
            })
        })
        .map(|spec| (spec.name.clone(), spec))
        .into_iter()
        .collect();
    let step = check.step_spec(name.to_string());
    let mut spec = FlowSpec {
        format: FORMAT.to_string(),
        version: FORMAT_VERSION,
        name: flow.name(db).clone(),
        doc: None,
        span: SourceSpan::default(),
        inputs: Vec::new(),
        secrets: Vec::new(),
        env: Vec::new(),
        tools,
        steps: vec![step],
        output: None,
        digest: String::new(),
    };
    spec.seal();
    Ok(std::mem::take(&mut spec.steps[0].semantic_digest))
}

/// The recorded result of the step named at `offset`, for its hover.
pub fn step_details(
    cx: &Ctx<'_>,
    offset: usize,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
) -> Option<String> {
    let occ = names::occurrence_at(&cx.parsed().file, offset)?;
    if occ.symbol.kind != Kind::Step {
        return None;
    }
    let Some(Item::Flow(f)) = occ.symbol.flow.and_then(|i| cx.parsed().file.items.get(i)) else {
        return None;
    };
    let (source, dir) = locate(cx, stores)?;
    let view = shown_view(cx, stores, pins, views, (&source, &dir), &f.name.name)?;
    let step = view.step(&occ.symbol.name)?;
    Some(runs::details(&view.run, step))
}

/// What the live refresh remembers of one watched flow: its store, source and name.
pub type WatchKey = (PathBuf, String, String);

/// A fingerprint of the watched flows' shown runs: run id, status and, while a run is live, the
/// length of its journal (empty when there is no run). A change means the hints are out of date.
pub fn fingerprint(stores: &Stores, pins: &Pins, watched: &Watched) -> BTreeMap<WatchKey, String> {
    let entries: Vec<WatchKey> = watched
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .flatten()
        .cloned()
        .collect();
    entries
        .into_iter()
        .map(|key| {
            let (dir, source, flow) = &key;
            // A pinned cassette changes when its file does.
            // Looked at every 300 ms: the file's time only, not its text.
            if let Some(id) = pins.get(source, flow).filter(|id| runs::is_cassette(id)) {
                let modified = runs::cassette_path(source, &id)
                    .and_then(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok());
                return (key, format!("{id} {modified:?}"));
            }
            let print = stores
                .get(dir)
                .and_then(|store| {
                    let (run, _) = runs::shown(store.as_ref(), pins, source, flow)?;
                    // The run's row counts its events, so a live run is not read to see it grew.
                    let len = if runs::is_live(run.status) {
                        run.next_seq
                    } else {
                        0
                    };
                    Some(format!("{} {} {len}", run.id, run.status.as_str()))
                })
                .unwrap_or_default();
            (key, print)
        })
        .collect()
}

/// Whether the hints are out of date: a watched flow's run changed, or a flow seen for the first
/// time already has a run (its hints may have been computed before that run).
pub fn changed(before: &BTreeMap<WatchKey, String>, now: &BTreeMap<WatchKey, String>) -> bool {
    now.iter().any(|(key, print)| match before.get(key) {
        Some(old) => old != print,
        None => !print.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step digested alone (as while the text has errors) has the digest the whole built
    /// spec gives it, for every step of the repository's example flows.
    #[test]
    fn a_step_digested_alone_matches_the_built_spec() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut seen = 0;
        for example in [
            "examples/greet.reel",
            "examples/wait.reel",
            "examples/reference/tools.reel",
            "examples/reference/http.reel",
        ] {
            let text = std::fs::read_to_string(root.join(example)).unwrap();
            let db = reel_compiler::RootDb::default();
            let file =
                reel_compiler::SourceFile::new(&db, example.into(), "/t".into(), text.into());
            for &flow in file_flows(&db, file) {
                let spec = reel_compiler::flow_spec(&db, flow)
                    .clone()
                    .expect("it builds");
                for step in &spec.steps {
                    let alone = step_digest(&db, flow, &step.id).ok();
                    assert_eq!(
                        alone.as_deref(),
                        Some(step.semantic_digest.as_str()),
                        "{example}: {}",
                        step.id
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen > 10, "{seen} steps");
    }

    /// Staleness reaches the end of a long chain (walked without recursion) and names the step
    /// that changed; a cycle in a broken text ends the walk.
    #[test]
    fn staleness_flows_down_a_long_chain_to_its_end() {
        let n = 3_000;
        let mut text = String::from("flow f {\n  step s0 = 1\n");
        for i in 1..n {
            text.push_str(&format!("  step s{i} = s{} + 1\n", i - 1));
        }
        text.push_str("}\n");
        let db = reel_compiler::RootDb::default();
        let file = reel_compiler::SourceFile::new(&db, "/f.reel".into(), "/".into(), text.into());
        let cx = Ctx::new(&db, file);
        let flow = file_flows(&db, file)[0];
        let spec = reel_compiler::flow_spec(&db, flow)
            .clone()
            .expect("it builds");
        let mut recorded: Recorded = spec
            .steps
            .iter()
            .map(|s| {
                let step = runs::RecordedStep {
                    digest: s.semantic_digest.clone(),
                    tool: None,
                };
                (s.id.clone(), step)
            })
            .collect();
        let mut standings = Standings::new(&cx, Some(flow), &recorded);
        assert_eq!(standings.of(&format!("s{}", n - 1)), Standing::Current);
        recorded.get_mut("s0").unwrap().digest = "changed".into();
        let mut standings = Standings::new(&cx, Some(flow), &recorded);
        assert_eq!(
            standings.of(&format!("s{}", n - 1)),
            Standing::Stale(Some("s0".into()))
        );
        assert_eq!(standings.of("s0"), Standing::Stale(None));

        let cycle = "flow f {\n  step a = b + 1\n  step b = a + 1\n}\n";
        let file = reel_compiler::SourceFile::new(&db, "/c.reel".into(), "/".into(), cycle.into());
        let cx = Ctx::new(&db, file);
        let flow = file_flows(&db, file)[0];
        let mut standings = Standings::new(&cx, Some(flow), &recorded);
        assert_eq!(standings.of("a"), Standing::Unverified);
    }

    #[test]
    fn a_call_of_unknown_outcome_marks_its_step() {
        use reel_journal::fold::{StepState, StepView};
        use reel_journal::journal::Resolution;
        let label = |view: &StepView| {
            runs::hint(
                runs::StepRun { view, value: None },
                None,
                &runs::Standing::Current,
            )
        };
        let mut view = StepView {
            state: StepState::Running,
            first_at: 0,
            last_at: 0,
            attempts: 1,
            calls: None,
            starts: Vec::new(),
            keys: Vec::new(),
            effects: Vec::new(),
            unknown: Vec::new(),
        };
        assert_eq!(label(&view), "… running");
        view.unknown.push((None, 1, Resolution::Held));
        assert_eq!(label(&view), "… running · ⚠ held");
        view.unknown.push((None, 1, Resolution::Accepted));
        assert_eq!(label(&view), "… running · ⚠ accepted");
    }

    #[test]
    fn a_change_or_a_new_run_means_refresh() {
        let key = (PathBuf::from("/s"), "/a.reel".to_string(), "f".to_string());
        let none = BTreeMap::from([(key.clone(), String::new())]);
        let waiting = BTreeMap::from([(key.clone(), "r1 waiting 5".to_string())]);
        let grown = BTreeMap::from([(key.clone(), "r1 waiting 7".to_string())]);
        assert!(!changed(&BTreeMap::new(), &none));
        assert!(changed(&BTreeMap::new(), &waiting));
        assert!(changed(&none, &waiting));
        assert!(changed(&waiting, &grown));
        assert!(!changed(&grown, &grown));
    }
}
