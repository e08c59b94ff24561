//! End-to-end tests of the `reel` binary: each runs the built command in a temporary directory
//! and checks its exit status, stdout and stderr against `docs/cli.md`.

mod bad_input;
mod build;
mod cassette;
mod check;
mod clean;
mod crash;
mod crash_points;
mod deep;
mod fmt;
mod holes;
mod many;
mod numbers;
mod postgres;
mod postgres_outage;
mod postgres_tls;
mod postgres_workers;
mod quarantine;
mod replay;
mod replay_lineage;
mod runs;
mod signals;
mod store;
mod store_faults;
mod support;
mod tool_env;
mod unknown_outcome;
mod upgrade;
