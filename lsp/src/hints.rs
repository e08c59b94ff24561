//! Past runs shown in the document: an inlay hint at the end of each step's header line with the
//! shown run's result (the one the user pinned, else the latest), and the full recorded result
//! in a step's hover.
//!
//! Stale results are marked by comparing each step's `semantic_digest` in the spec the run
//! executed with the one the open text compiles to. When the text does not check clean there is
//! no current digest to compare with, so every hint is marked `(unverified)` rather than guessed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reel_syntax::ast::{Item, Member};
use tower_lsp_server::lsp_types::{InlayHint, InlayHintKind, InlayHintLabel, Uri};

use crate::ide::Ctx;
use crate::ide::names::{self, Kind};
use crate::runs::{self, Pins, RunView, Stores, Views};

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
    Some((abs.to_string_lossy().into_owned(), stores.dir_for(&dir)))
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
    let store = stores.get(&dir);
    for item in &cx.parsed().file.items {
        if let Item::Flow(f) = item {
            watched.push((dir.clone(), source.clone(), f.name.name.clone()));
            if let Some(store) = &store
                && let Some((run, _)) = runs::shown(store.as_ref(), pins, &source, &f.name.name)
            {
                shown.insert(f.name.name.clone(), views.get(&dir, store.as_ref(), run));
            }
        }
    }
    (watched, shown)
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
    for item in &cx.parsed().file.items {
        let Item::Flow(f) = item else { continue };
        let Some(view) = views.get(&f.name.name) else {
            continue;
        };
        let current: Option<BTreeMap<String, String>> =
            reel_compiler::build_flow(cx.db, cx.file, &f.name.name).map(|spec| {
                spec.steps
                    .into_iter()
                    .map(|s| (s.id, s.semantic_digest))
                    .collect()
            });
        for m in &f.members {
            let Member::Step(s) = m else { continue };
            let Some(step) = view.step(&s.name.name) else {
                continue;
            };
            let prefix = match &current {
                None => "(unverified) ",
                Some(now) if now.get(&s.name.name) != view.digests.get(&s.name.name) => "(stale) ",
                Some(_) => "",
            };
            let line = cx.lines.line_of(s.name.span.start as usize);
            out.push(InlayHint {
                position: cx.lines.position(cx.lines.line_end(line)),
                label: InlayHintLabel::String(format!("{prefix}{}", runs::hint(step))),
                kind: Some(InlayHintKind::TYPE),
                text_edits: None,
                tooltip: None,
                padding_left: Some(true),
                padding_right: None,
                data: None,
            });
        }
    }
    out
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
    let store = stores.get(&dir)?;
    let (run, _) = runs::shown(store.as_ref(), pins, &source, &f.name.name)?;
    let view = views.get(&dir, store.as_ref(), run);
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
