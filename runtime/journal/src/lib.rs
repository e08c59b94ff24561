//! Reel's journal: what a run records and how it is read back.
//!
//! `journal` holds the events (one stored row each), `error` the run's error that events carry,
//! `fold` the one fold of a journal into a run's state (what the engine resumes from) and, on
//! request, into per-step views (what the language server shows), and `discover` where a
//! project's store lives. The engine, the CLI and the language server all read journals through
//! this crate, so a journal means the same thing to each of them.

pub mod cassette;
pub mod discover;
pub mod error;
pub mod fold;
pub mod journal;

pub use error::RunError;
