//! What both stores share for `reel store copy`: the digests a run names. Each store reads
//! runs whole its own way (`sqlite/copy.rs` a run at a time, `pg/copy.rs` a batch in four
//! statements).

use crate::api::RunExport;

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
