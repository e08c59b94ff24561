//! Reel's language server: the compiler's view of the open `.reel` files, over LSP on stdio.
//!
//! Layout: `server.rs` (protocol, ordering, snapshots and cancellation), `position.rs` (the one
//! offset ⇄ position conversion), `diagnostics.rs` (compiler diagnostics as LSP ones), and
//! `ide/` (one module per feature, plain functions of a file view and an offset), and
//! `runs.rs` + `hints.rs` + `lenses.rs` (past runs from the store, read-only, as inlay hints,
//! hover and code lenses), and `wire.rs` (the base protocol's framing, for clients that drive the
//! server: the end-to-end tests and `lsp-bench`).

pub mod diagnostics;
pub mod hints;
pub mod ide;
pub mod lenses;
pub mod position;
pub mod runs;
pub mod server;
pub mod wire;

use std::ffi::OsString;
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
}

/// Serves the language server on stdin and stdout until the client exits.
pub async fn serve_stdio(given: Capabilities) {
    let (service, socket) = LspService::new(move |client| server::Backend::new(client, given));
    Server::new(tokio::io::stdin(), tokio::io::stdout(), socket)
        .serve(service)
        .await;
}
