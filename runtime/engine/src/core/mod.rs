//! The engine's core: one run's state and every decision about it, as a pure, synchronous
//! state machine.
//!
//! The core does no I/O: no store, no tool host, no clock, no channel, no async. What happened
//! comes in as an [`Input`] with the time it happened at; what to do next comes out as
//! [`Command`]s, in the order they must be carried out, ending with one the driver answers
//! (values to load, calls to make, signals to look for, a wait) or with the run's end. The
//! driver (`crate::drive` for live runs) does the I/O; a replay, a fork or a test drives the
//! same core with other answers.

mod command;
mod decide;
mod input;
mod machine;

pub use command::{CallStart, Command, Ending, Stamped};
pub use decide::{Decided, Decision, check_decisions, never_repeated, unknown_calls};
pub use input::{ArrivedSignal, Input, Poll, Returned, ReusedFrom};
pub use machine::{Machine, Setup};
