//! End-to-end tests of the `reel` binary: each runs the built command in a temporary directory
//! and checks its exit status, stdout and stderr against `docs/cli.md`.

mod build;
mod check;
mod clean;
mod crash;
mod deep;
mod fmt;
mod holes;
mod numbers;
mod replay;
mod replay_lineage;
mod runs;
mod signals;
mod store;
mod support;
mod tool_env;
