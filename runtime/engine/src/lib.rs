//! Reel's engine, the Rider: runs a FlowSpec as a DAG of tool calls, journals every event in the
//! store, and resumes from the journal after any crash, deploy or long sleep.
//!
//! Everything non-deterministic arrives through [`RunDeps`] (store, tools, clock, secrets,
//! environment, progress, shutdown), so the same engine runs live, in replay and in tests.
//! A run's decisions are made by [`crate::core::Machine`], which does no I/O; `drive` carries them
//! out live.

pub mod core;
pub mod deps;
mod drive;
pub mod error;
pub mod fold;
pub mod inputs;
pub mod journal;
pub mod rider;
pub mod scope;
pub mod worker;

pub use deps::{
    BoxFuture, Clock, EnvSecrets, Environment, NoProgress, ProcessEnvironment, Progress,
    ProgressSink, RunDeps, Secrets, SystemClock, Tools,
};
pub use error::RunError;
pub use inputs::{parse_input_value, resolve_inputs};
pub use rider::{
    CancelOutcome, Refusal, RiderConfig, RunOutcome, StartRequest, cancel, resume, start,
};
