//! Code lenses above each flow: run it, which run the hints show, and pick another.
//!
//! Each lens is one [`Lens`] kind, so replay and fork lenses can be added beside these later
//! without touching how they are placed or resolved.

use tower_lsp_server::lsp_types::{CodeLens, Command, Position, Range, Uri};

use reel_syntax::ast::Item;

use crate::hints;
use crate::ide::Ctx;
use crate::runs::{self, Pins, Stores};

/// The client-side command that runs a flow in a terminal; arguments `[uri, flow]`.
pub const RUN_FLOW: &str = "reel.runFlow";
/// The client-side command that lets the user pick the run to show; arguments `[uri, flow]`.
pub const PICK_RUN: &str = "reel.pickRun";

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
    /// No run of this flow from this file yet.
    NoRuns,
    /// Pick another run to show.
    Pick,
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
            Lens::NoRuns => "No runs yet".to_string(),
            Lens::Pick => "Pick run…".to_string(),
        }
    }

    /// The client command the lens invokes.
    pub fn command(&self) -> &'static str {
        match self {
            Lens::Run => RUN_FLOW,
            Lens::Shown { .. } | Lens::NoRuns | Lens::Pick => PICK_RUN,
        }
    }
}

/// The lenses of each flow of the document, as (flow item index, flow name, lenses).
pub fn flow_lenses(
    cx: &Ctx<'_>,
    stores: &Stores,
    pins: &Pins,
    now_ms: i64,
) -> Vec<(usize, String, Vec<Lens>)> {
    let located = hints::locate(cx, stores);
    let store = located.as_ref().and_then(|(_, dir)| stores.get(dir));
    let mut out = Vec::new();
    for (idx, item) in cx.parsed().file.items.iter().enumerate() {
        let Item::Flow(f) = item else { continue };
        let flow = f.name.name.clone();
        let shown = match (&located, &store) {
            (Some((source, _)), Some(store)) => runs::shown(store.as_ref(), pins, source, &flow),
            _ => None,
        };
        let middle = match shown {
            Some((run, pinned)) => Lens::Shown {
                id: run.id,
                status: run.status.as_str().to_string(),
                age: runs::age(now_ms, run.created_at),
                pinned,
            },
            None => Lens::NoRuns,
        };
        out.push((idx, flow, vec![Lens::Run, middle, Lens::Pick]));
    }
    out
}

/// The code lenses of the document, each on its flow's first line.
pub fn code_lenses(
    cx: &Ctx<'_>,
    uri: &Uri,
    stores: &Stores,
    pins: &Pins,
    now_ms: i64,
) -> Vec<CodeLens> {
    let mut out = Vec::new();
    for (idx, flow, lenses) in flow_lenses(cx, stores, pins, now_ms) {
        let Item::Flow(f) = &cx.parsed().file.items[idx] else {
            continue;
        };
        let at = cx.lines.position(f.span.start as usize);
        let start = Position::new(at.line, 0);
        for lens in lenses {
            out.push(CodeLens {
                range: Range::new(start, start),
                command: Some(Command {
                    title: lens.title(&flow),
                    command: lens.command().to_string(),
                    arguments: Some(vec![uri.as_str().into(), flow.clone().into()]),
                }),
                data: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(shown.command(), PICK_RUN);
        assert_eq!(Lens::Pick.title("x"), "Pick run…");
    }
}
