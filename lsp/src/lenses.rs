//! Code lenses above each flow: run it, which run the hints show, pick another; for the shown
//! run, what can be done with it (send its signal, cancel, resume, preview a fork, fork); and,
//! while a fork preview is on, what the fork would do with each step, above the step.
//!
//! Every lens runs a command the server executes (`commands.rs`), so lenses work in any client;
//! the VS Code extension puts its own UI (a quick pick, an input box) in front of some of them.

use std::collections::BTreeMap;

use tower_lsp_server::lsp_types::{CodeLens, Command, Position, Range, Uri};

use reel_store::RunStatus;
use reel_syntax::ast::Member;
use serde_json::Value;

use crate::commands;
use crate::hints;
use crate::ide::Ctx;
use crate::preview::{Mark, Previews, Shown};
use crate::runs::{self, Pins, Stores, Views};

/// One lens above a flow, in the order they appear.
#[derive(Clone, Debug, PartialEq)]
pub enum Lens {
    /// Run the flow.
    Run,
    /// The run whose results the hints show: id, status, age, and whether the user pinned it.
    Shown {
        /// The run id.
        id: String,
        /// Its status.
        status: String,
        /// How long ago it started.
        age: String,
        /// Chosen by the user rather than the latest.
        pinned: bool,
    },
    /// The pinned cassette whose recorded results the hints show: its path under the project,
    /// and how its run ended, or why it cannot be read.
    Cassette {
        /// Its path relative to the project's folder.
        rel: String,
        /// How the recorded run ended (`succeeded`, …), or why the cassette cannot be shown.
        status: Result<String, String>,
    },
    /// No run of this flow from this file yet.
    NoRuns,
    /// Pick another run to show.
    Pick,
    /// Send the shown run the signal it waits for.
    Signal {
        /// The run.
        run: String,
        /// The signal's name.
        name: String,
    },
    /// Cancel the shown run.
    Cancel {
        /// The run.
        run: String,
    },
    /// Continue the shown run (it failed or was canceled).
    Resume {
        /// The run.
        run: String,
    },
    /// Turn on the fork preview of the shown run (it failed, or the text changed since).
    PreviewFork {
        /// The run.
        run: String,
    },
    /// Fork the shown run with the saved file.
    Fork {
        /// The run.
        run: String,
    },
    /// The fork preview is on: what it found.
    Preview {
        /// The run it compares with.
        run: String,
        /// What it shows.
        shown: Shown,
    },
    /// Turn the fork preview off.
    StopPreview,
}

impl Lens {
    /// The lens's title as the editor shows it.
    pub fn title(&self, flow: &str) -> String {
        match self {
            Lens::Run => format!("▶ Run {flow}"),
            Lens::Shown {
                id,
                status,
                age,
                pinned,
            } => {
                let pin = if *pinned { " · pinned" } else { "" };
                format!("Showing run {id} · {status} · {age}{pin}")
            }
            Lens::Cassette { rel, status } => match status {
                Ok(status) => format!("Showing cassette {rel} · {status} · pinned"),
                Err(why) => format!("Cassette {rel} cannot be read: {}", runs::cut(why, 160)),
            },
            Lens::NoRuns => "No runs yet".to_string(),
            Lens::Pick => "Pick run…".to_string(),
            Lens::Signal { name, .. } => format!("✉ Send signal `{name}`"),
            Lens::Cancel { .. } => "■ Cancel".to_string(),
            Lens::Resume { .. } => "↻ Resume".to_string(),
            Lens::PreviewFork { .. } => "Preview fork".to_string(),
            Lens::Fork { .. } => "Fork with these changes".to_string(),
            // The run is named by each step's mark (and is the shown one when the preview began).
            Lens::Preview { shown, .. } => match shown {
                Shown::Checking => "Fork preview: checking…".to_string(),
                Shown::Failed(why) => format!("Fork preview: {}", runs::cut(why, 80)),
                Shown::Plan(plan) => {
                    let [reused, live, new, removed] = plan.counts();
                    let mut parts = vec![format!("{reused} reused"), format!("{live} live")];
                    if new > 0 {
                        parts.push(format!("{new} new"));
                    }
                    if removed > 0 {
                        parts.push(format!("{removed} removed"));
                    }
                    format!("Fork preview: {}", parts.join(" · "))
                }
            },
            Lens::StopPreview => "Stop fork preview".to_string(),
        }
    }

    /// The server command the lens runs (none for the preview's summary, which only tells).
    pub fn command(&self) -> &'static str {
        match self {
            Lens::Run => commands::RUN,
            Lens::Shown { .. } | Lens::Cassette { .. } | Lens::NoRuns | Lens::Pick => {
                commands::PICK_RUN
            }
            Lens::Signal { .. } => commands::SIGNAL,
            Lens::Cancel { .. } => commands::CANCEL,
            Lens::Resume { .. } => commands::RESUME,
            // The preview's summary checks the text again.
            Lens::PreviewFork { .. } | Lens::Preview { .. } => commands::PREVIEW_FORK,
            Lens::Fork { .. } => commands::FORK,
            Lens::StopPreview => commands::STOP_PREVIEW,
        }
    }

    /// The command's arguments: the document and flow, then the run (and the signal's name).
    pub fn arguments(&self, uri: &Uri, flow: &str) -> Vec<Value> {
        let mut args: Vec<Value> = vec![uri.as_str().into(), flow.into()];
        match self {
            Lens::Signal { run, name } => {
                args.push(run.as_str().into());
                args.push(name.as_str().into());
            }
            Lens::Cancel { run }
            | Lens::Resume { run }
            | Lens::PreviewFork { run }
            | Lens::Fork { run }
            | Lens::Preview { run, .. } => args.push(run.as_str().into()),
            _ => {}
        }
        args
    }
}

/// What a fork would do with a step, as its lens says it.
pub fn mark_title(mark: &Mark, run: &str) -> String {
    match mark {
        Mark::Reused => format!("✓ reused from run {run}"),
        Mark::Live(why) => format!("↻ runs live: {why}"),
        Mark::New => "+ new: runs live".to_string(),
        Mark::Removed => "− removed".to_string(),
    }
}

/// The lenses of one flow: above the flow, then above the steps a fork preview marks.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowLenses {
    /// The flow's item index in the file.
    pub item: usize,
    /// The flow's name.
    pub flow: String,
    /// The lenses above the flow, in order.
    pub lenses: Vec<Lens>,
    /// The fork preview's mark of each step, by step name, with the run compared with.
    pub marks: BTreeMap<String, (Mark, String)>,
}

/// The lenses of each flow of the document (`uri`).
pub fn flow_lenses(
    cx: &Ctx<'_>,
    uri: &Uri,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
    previews: &Previews,
    now_ms: i64,
) -> Vec<FlowLenses> {
    let located = hints::locate(cx, stores);
    let store = located.as_ref().and_then(|(_, dir)| stores.get(dir));
    let mut out = Vec::new();
    for (idx, f) in cx.flows() {
        let flow = f.name.clone();
        let shown = match (&located, &store) {
            (Some((source, _)), Some(store)) => runs::shown(store.as_ref(), pins, source, &flow),
            _ => None,
        };
        let mut lenses = vec![Lens::Run];
        let mut marks = BTreeMap::new();
        // A pinned cassette is shown instead of any run; a recording offers nothing to act on.
        let cassette = located
            .as_ref()
            .and_then(|(source, _)| runs::pinned_cassette(pins, source, &flow));
        if let Some(file) = cassette {
            lenses.push(Lens::Cassette {
                rel: file.rel.clone(),
                status: file.status().map(str::to_string),
            });
            lenses.push(Lens::Pick);
            out.push(FlowLenses {
                item: idx,
                flow,
                lenses,
                marks,
            });
            continue;
        }
        match shown {
            Some((run, pinned)) => {
                let id = run.id.clone();
                let changed = match (&located, &store) {
                    (Some((_, dir)), Some(store)) => {
                        let view = views.get(dir, store.as_ref(), run.clone());
                        changed_since(cx, &flow, &view.spec)
                    }
                    _ => false,
                };
                lenses.push(Lens::Shown {
                    id: id.clone(),
                    status: run.status.as_str().to_string(),
                    age: runs::age(now_ms, run.created_at),
                    pinned,
                });
                lenses.push(Lens::Pick);
                if run.status == RunStatus::Waiting {
                    for name in &run.waiting_on {
                        lenses.push(Lens::Signal {
                            run: id.clone(),
                            name: name.clone(),
                        });
                    }
                }
                if runs::is_live(run.status) {
                    lenses.push(Lens::Cancel { run: id.clone() });
                }
                if matches!(run.status, RunStatus::Failed | RunStatus::Canceled) {
                    lenses.push(Lens::Resume { run: id.clone() });
                }
                match previews.get(uri.as_str(), &flow) {
                    Some((compared, shown)) => {
                        if let Shown::Plan(plan) = &shown {
                            for v in &plan.steps {
                                marks.insert(v.step.clone(), (v.mark(), compared.clone()));
                            }
                        }
                        lenses.push(Lens::Preview {
                            run: compared.clone(),
                            shown,
                        });
                        lenses.push(Lens::StopPreview);
                        lenses.push(Lens::Fork { run: compared });
                    }
                    None if !runs::is_live(run.status)
                        && (run.status == RunStatus::Failed || changed) =>
                    {
                        lenses.push(Lens::PreviewFork { run: id.clone() });
                        lenses.push(Lens::Fork { run: id });
                    }
                    None => {}
                }
            }
            None => {
                lenses.push(Lens::NoRuns);
                lenses.push(Lens::Pick);
            }
        }
        out.push(FlowLenses {
            item: idx,
            flow,
            lenses,
            marks,
        });
    }
    out
}

/// Whether the text's flow differs from the run's in a way a fork would see: a step added,
/// removed or changed (by semantic digest: comments and formatting do not count). A text that
/// does not build is not compared.
fn changed_since(cx: &Ctx<'_>, flow: &str, recorded: &runs::Recorded) -> bool {
    if recorded.is_empty() {
        return false;
    }
    let Some(spec) = reel_compiler::build_flow(cx.db, cx.file, flow) else {
        return false;
    };
    spec.steps.len() != recorded.len()
        || spec
            .steps
            .iter()
            .any(|s| recorded.get(&s.id).map(|r| &r.digest) != Some(&s.semantic_digest))
}

/// The code lenses of the document: each flow's on its first line, a fork preview's marks each
/// on its step's first line.
pub fn code_lenses(
    cx: &Ctx<'_>,
    uri: &Uri,
    stores: &Stores,
    pins: &Pins,
    views: &Views,
    previews: &Previews,
    now_ms: i64,
) -> Vec<CodeLens> {
    let lens_at = |offset: usize, title: String, command: &str, arguments: Vec<Value>| {
        let at = cx.lines.position(offset);
        let start = Position::new(at.line, 0);
        CodeLens {
            range: Range::new(start, start),
            command: Some(Command {
                title,
                command: command.to_string(),
                arguments: Some(arguments),
            }),
            data: None,
        }
    };
    let mut out = Vec::new();
    for fl in flow_lenses(cx, uri, stores, pins, views, previews, now_ms) {
        let Some((_, f)) = cx.flows().find(|(idx, _)| *idx == fl.item) else {
            continue;
        };
        for lens in &fl.lenses {
            out.push(lens_at(
                f.span.start as usize,
                lens.title(&fl.flow),
                lens.command(),
                lens.arguments(uri, &fl.flow),
            ));
        }
        if fl.marks.is_empty() {
            continue;
        }
        for (offset, m) in f.members() {
            let Member::Step(s) = m else { continue };
            let Some((mark, run)) = fl.marks.get(&s.name.name) else {
                continue;
            };
            // A mark tells; a click on it only checks the text again.
            out.push(lens_at(
                (offset + s.span.start) as usize,
                mark_title(mark, run),
                commands::PREVIEW_FORK,
                vec![
                    uri.as_str().into(),
                    fl.flow.clone().into(),
                    run.as_str().into(),
                ],
            ));
        }
    }
    out
}

/// The flows of the document whose fork preview is on, as (item index, name).
pub fn previewed(cx: &Ctx<'_>, uri: &Uri, previews: &Previews) -> Vec<(usize, String)> {
    cx.flows()
        .filter(|(_, f)| previews.get(uri.as_str(), &f.name).is_some())
        .map(|(i, f)| (i, f.name.clone()))
        .collect()
}

/// The fork lenses of the flow around `offset`, of the document's `lenses` (from [`flow_lenses`]),
/// as code actions: preview (or stop previewing) and fork.
pub fn fork_actions(
    cx: &Ctx<'_>,
    uri: &Uri,
    offset: usize,
    lenses: Vec<FlowLenses>,
) -> Vec<Command> {
    let around = cx
        .flows()
        .find(|(_, f)| (f.span.start as usize..=f.span.end as usize).contains(&offset))
        .map(|(idx, _)| idx);
    let Some(around) = around else {
        return Vec::new();
    };
    lenses
        .into_iter()
        .filter(|fl| fl.item == around)
        .flat_map(|fl| {
            fl.lenses
                .iter()
                .filter(|l| {
                    matches!(
                        l,
                        Lens::PreviewFork { .. } | Lens::Fork { .. } | Lens::StopPreview
                    )
                })
                .map(|l| Command {
                    title: l.title(&fl.flow),
                    command: l.command().to_string(),
                    arguments: Some(l.arguments(uri, &fl.flow)),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preview::{Plan, Verdict};

    #[test]
    fn titles_say_what_the_lens_does() {
        assert_eq!(Lens::Run.title("deploy"), "▶ Run deploy");
        let shown = Lens::Shown {
            id: "01ABC".into(),
            status: "succeeded".into(),
            age: "5 min ago".into(),
            pinned: true,
        };
        assert_eq!(
            shown.title("deploy"),
            "Showing run 01ABC · succeeded · 5 min ago · pinned"
        );
        assert_eq!(shown.command(), commands::PICK_RUN);
        assert_eq!(Lens::Pick.title("x"), "Pick run…");
        let cassette = |status| Lens::Cassette {
            rel: "tests/nap.cassette.json".into(),
            status,
        };
        assert_eq!(
            cassette(Ok("succeeded".into())).title("nap"),
            "Showing cassette tests/nap.cassette.json · succeeded · pinned"
        );
        assert_eq!(
            cassette(Err("not JSON: EOF".into())).title("nap"),
            "Cassette tests/nap.cassette.json cannot be read: not JSON: EOF"
        );
        assert_eq!(cassette(Ok("waiting".into())).command(), commands::PICK_RUN);
        let plan = Plan {
            parent: "r1".into(),
            steps: vec![
                Verdict {
                    step: "a".into(),
                    reuse: true,
                    reason: None,
                },
                Verdict {
                    step: "b".into(),
                    reuse: false,
                    reason: Some("new step".into()),
                },
            ],
        };
        let preview = Lens::Preview {
            run: "r1".into(),
            shown: Shown::Plan(plan),
        };
        assert_eq!(
            preview.title("f"),
            "Fork preview: 1 reused · 0 live · 1 new"
        );
        let signal = Lens::Signal {
            run: "r1".into(),
            name: "go".into(),
        };
        let uri: Uri = "file:///a.reel".parse().unwrap();
        assert_eq!(
            signal.arguments(&uri, "f"),
            [
                Value::from("file:///a.reel"),
                "f".into(),
                "r1".into(),
                "go".into()
            ]
        );
        assert_eq!(
            mark_title(&Mark::Live("changed expression".into()), "r1"),
            "↻ runs live: changed expression"
        );
    }
}
