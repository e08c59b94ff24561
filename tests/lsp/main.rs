//! End-to-end tests of `reel lsp`: each starts the built binary and speaks JSON-RPC over stdio
//! as an editor does.

mod actions;
mod cassettes;
mod deep;
mod editing;
mod features;
mod malformed;
mod postgres;
mod robustness;
mod runs;
mod support;
