//! The salsa queries: how parse, declarations, steps, the DAG and the FlowSpec depend on each other.
//!
//! Steps and the output are checked on copies whose spans are relative to their own start, and
//! the signature a step is checked against holds no spans: an edit re-checks the edited step and
//! the steps whose inputs' types it changed, while every other step's result is reused.
//!
//! - [`layout`]: the file parsed a little at a time into a [`FileLayout`], reusing the parse of
//!   every stretch of text an edit did not touch.
//! - [`members`]: the interned ids of flows and steps, and each flow's members as the groups
//!   they were parsed in, with the table that finds a step's group.
//! - [`shards`]: the flow's declarations checked by shard (a hash of the name), each from the
//!   members named in it, so that typing a name rebuilds a few shards, not the flow's tables,
//!   and a per-step query reads the names it looks up without depending on every name.
//! - [`checks`]: the checking queries over those groups: declarations, the DAG, step and output
//!   checks, unused-name warnings and every diagnostic of a file.

pub mod checks;
pub mod layout;
pub mod members;
pub mod shards;

pub use checks::*;
pub use layout::*;
pub use members::*;
pub use shards::*;
