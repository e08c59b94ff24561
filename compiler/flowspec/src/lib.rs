//! The FlowSpec: the compiled form of one flow that the runtime executes and the language server reads.
//!
//! It is plain data (serde). Its canonical JSON is RFC 8785 (see [`canonical`]); the digest of a spec
//! is the SHA-256 of that text (see [`digests`]). Spans and doc comments live beside the semantics,
//! never inside the parts that a step's `semantic_digest` covers, so moving a step or editing a
//! comment changes no semantic digest. `docs/flowspec.md` documents the format and
//! `docs/flowspec.schema.json` ([`SCHEMA`]) its exact JSON shape.

pub mod args;
mod binary;
pub mod canonical;
mod de;
pub mod digests;
pub mod document;
pub mod schema;
pub mod spec;
pub mod types;

#[cfg(test)]
mod sample;

pub use args::Args;
pub use binary::LAYOUT as BINARY_LAYOUT;
pub use digests::step_semantic_digest;
pub use document::{FORMAT, MAX_JSON_DEPTH, SpecError};
pub use schema::SCHEMA;
pub use spec::*;
pub use types::Type;
