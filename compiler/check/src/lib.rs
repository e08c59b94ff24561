//! Reel's incremental checker: names, types, the DAG, the taint rule, warnings, and FlowSpec lowering.
//!
//! Every stage is a salsa query over [`SourceFile`] inputs (see `docs/architecture.md`), so an
//! edit re-checks only what depends on it. Diagnostics are plain values returned by queries and
//! collected by [`file_diagnostics`]; [`render`] turns them into terminal text, JSON or SARIF.

pub mod contracts;
pub mod dag;
pub mod db;
pub mod declarations;
pub mod infer;
pub mod lower;
pub mod queries;
pub mod render;
pub mod signature;
pub mod step;
pub mod suggest;
pub mod tools;
pub mod types;

pub use db::{Db, OutlineCache, RootDb, SourceFile};
pub use lower::flow_spec;
pub use queries::{FlowId, StepId, file_diagnostics, file_flows, parse_file};
pub use reel_syntax::{Diagnostic, Label, Severity};

/// The names of the flows declared in `file`, in source order.
pub fn flow_names(db: &dyn Db, file: SourceFile) -> Vec<String> {
    file_flows(db, file)
        .iter()
        .map(|f| f.name(db).clone())
        .collect()
}

/// The sealed FlowSpec of flow `name` in `file`, or `None` when the file has errors or no such flow.
pub fn build_flow(db: &dyn Db, file: SourceFile, name: &str) -> Option<reel_flowspec::FlowSpec> {
    let flow = file_flows(db, file)
        .iter()
        .copied()
        .find(|f| f.name(db) == name)?;
    lower::lower_flow(db, flow)
}

#[cfg(test)]
mod tests;
