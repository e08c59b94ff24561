//! Reel's journal: what a run records and how it is read back.
//!
//! `journal` holds the events (one stored row each), `error` the run's error that events carry,
//! and `fold` the fold of a journal into a run's state.

pub mod error;
pub mod fold;
pub mod journal;

pub use error::RunError;
