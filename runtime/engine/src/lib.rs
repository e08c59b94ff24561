//! Reel's engine, the Rider: runs a FlowSpec as a DAG of tool calls, journals every event in the
//! store, and resumes from the journal after any crash, deploy or long sleep.
//!
//! Everything non-deterministic arrives through [`RunDeps`] (store, tools, clock, secrets,
//! environment, progress, shutdown), so the same engine runs live, in replay and in tests.
//! A run's decisions are made by [`crate::core::Machine`], which does no I/O; `drive` carries them
//! out live, `replay` answers them from a journal, and `fork` does both.

pub mod cassette;
pub mod core;
pub mod deps;
mod drive;
pub mod fork;
pub mod inputs;
pub mod replay;
pub mod rider;
pub mod scope;
pub mod worker;

// The journal's events, the run error and the fold live in `reel-journal`, shared with the CLI
// and the language server; they stay reachable here under their old paths.
pub use reel_journal::{error, fold, journal};

pub use core::{Decided, Decision};
pub use deps::{
    BoxFuture, Clock, EnvSecrets, Environment, ManualClock, NoProgress, Progress, ProgressSink,
    RunDeps, Secrets, StepEnd, Tools,
};
pub use error::RunError;
pub use fork::{ForkOutcome, Policy, RerunRequest, fork, rerun};
pub use inputs::{parse_input_value, resolve_inputs};
pub use replay::{
    CarriedSignal, Divergence, ForkPlan, History, Recording, ReplayOptions, ReplayReport, StepPlan,
    plan_fork, replay, replay_recording, test_against,
};
pub use rider::{
    CancelOutcome, Refusal, RiderConfig, RunOutcome, StartRequest, abandon, cancel, release,
    resume, resume_deciding, start,
};
