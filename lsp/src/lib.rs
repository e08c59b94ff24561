//! Reel's language server: the compiler's view of the open `.reel` files, over LSP on stdio.
//!
//! Layout: `server.rs` (protocol, ordering, snapshots and cancellation), `position.rs` (the one
//! offset ⇄ position conversion), `diagnostics.rs` (compiler diagnostics as LSP ones), and
//! `ide/` (one module per feature, plain functions of a file view and an offset), and
//! `runs.rs` + `hints.rs` + `lenses.rs` (past runs from the store, read-only, as inlay hints,
//! hover and code lenses), `stdio.rs` (the guard that answers malformed input instead of
//! letting it end the session), and `wire.rs` (the base protocol's framing, for clients that drive the
//! server: the end-to-end tests and `lsp-bench`); `commands.rs` (the commands the server executes
//! for any client: run, signal, cancel, resume and fork, by starting the `reel` binary) and
//! `preview.rs` (what a fork of the shown run would reuse, from `reel replay --flow`).

pub mod commands;
pub mod diagnostics;
pub mod hints;
pub mod ide;
pub mod lenses;
pub mod position;
pub mod prepared;
pub mod preview;
pub mod runs;
pub mod server;
pub mod stdio;
pub mod wire;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use reel_store::Clock;
use tower_lsp_server::{LspService, Server};

/// What the program that starts the server hands it: the server reads no clock or environment
/// of its own.
#[derive(Clone)]
pub struct Capabilities {
    /// What time it is (for the ages of runs).
    pub clock: Arc<dyn Clock>,
    /// `REEL_HOME`, which names the store directory when set.
    pub reel_home: Option<OsString>,
    /// The `reel` binary the server starts for the commands it executes (run, signal, fork, …):
    /// the one serving (`reel lsp`), so the editor's runs are made by the same version.
    pub reel_exe: Option<PathBuf>,
    /// A directory of the server's own for the commands' logs and the preview's unsaved text.
    pub scratch_dir: PathBuf,
    /// `REEL_STORE_URL`, which puts the store on PostgreSQL when set.
    pub store_url: Option<String>,
    /// Where that store's password comes from when its URL has none.
    pub store_auth: reel_store::PgAuth,
}

/// Serves the language server on stdin and stdout until the client exits.
///
/// The server reads and writes through an in-memory pipe: `stdio` guards it from malformed
/// input, which would otherwise end its input stream (see there), and writes its output and
/// the guard's error replies to stdout whole frame by whole frame.
pub async fn serve_stdio(given: Capabilities) {
    let prepared = std::sync::Arc::new(prepared::Prepared::default());
    let held = prepared.clone();
    let (service, socket) =
        LspService::new(move |client| server::Backend::new(client, given).with_prepared(held));
    let (ours, theirs) = tokio::io::duplex(256 * 1024);
    let (server_in, server_out) = tokio::io::split(theirs);
    let (from_server, to_server) = tokio::io::split(ours);
    let (replies, replies_rx) = tokio::sync::mpsc::unbounded_channel();
    let input = tokio::spawn(stdio::guard_input(stdio::read_stdin(), to_server, replies));
    let serve = async {
        // Room for every request an editor has in flight: with tower-lsp-server's default of 4,
        // a few slow requests held back the next edit and the `$/cancelRequest`s that would
        // have stopped them.
        Server::new(server_in, server_out, socket)
            .concurrency_level(64)
            .serve(service)
            .await;
    };
    // The output ends when the server drops its end of the pipe, after its last message.
    let output = stdio::relay_output(from_server, tokio::io::stdout(), replies_rx, &prepared);
    let (_, written) = tokio::join!(serve, output);
    if let Err(e) = written {
        eprintln!("reel lsp: cannot write to stdout: {e}");
    }
    // The client may keep stdin open after `exit`; the guard stops with the server (and the
    // thread reading stdin with the process).
    input.abort();
}
