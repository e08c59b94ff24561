//! What both stores share for `reel store copy`: reading a run whole.

use crate::api::{EventRow, Flow, LogRow, RunExport, SignalRow, StoreError, StoreRead};

/// A run with its journal, signals and logs, read through `store`; `None` when there is no
/// such run. A journal with a hole cannot be exported (the copy would not be the run).
pub(crate) fn export_run(
    store: &dyn StoreRead,
    id: &str,
    signals: impl FnOnce(&str) -> Result<Vec<SignalRow>, StoreError>,
) -> Result<Option<RunExport>, StoreError> {
    let Some(row) = store.run(id)? else {
        return Ok(None);
    };
    let mut events: Vec<EventRow> = Vec::new();
    store.read_journal(id, 0, &mut |e| {
        events.push(e);
        Flow::Continue
    })?;
    let logs: Vec<LogRow> = store.logs(id)?;
    Ok(Some(RunExport {
        row,
        events,
        signals: signals(id)?,
        logs,
    }))
}

impl RunExport {
    /// The digests the run names (its journal, output, error and signals), which its values
    /// are stored under. A digest-shaped string that names no value (an idempotency key) is
    /// among them too: a copy looks each up and moves the ones that are values.
    pub fn digests(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let mut add = |text: &str| {
            crate::writer::digests_in(text, |d| {
                out.insert(d.to_string());
            })
        };
        for e in &self.events {
            add(&e.data.to_string());
        }
        if let Some(d) = &self.row.output_digest {
            add(&serde_json::Value::from(d.clone()).to_string());
        }
        if let Some(e) = &self.row.error {
            add(&e.to_string());
        }
        for s in &self.signals {
            add(&serde_json::Value::from(s.payload_digest.clone()).to_string());
        }
        out
    }
}
