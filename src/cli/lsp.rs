//! `reel lsp`: the language server, speaking LSP over stdin and stdout for an editor.

use std::sync::Arc;

use super::capabilities;
use super::runtime::tokio_runtime;
use super::ui::Ui;
use super::{Failure, Status};

/// Serve the language server on stdin/stdout (editors start it; people rarely run it by hand).
/// Diagnostics, hover, go to definition, references, rename, symbols, folding, formatting,
/// completion, signature help and quick fixes for `.reel` files.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `reel lsp` until the editor closes the connection.
pub fn run(_args: Args, _ui: &Ui) -> Result<Status, Failure> {
    let rt = tokio_runtime()?;
    let given = reel_lsp::Capabilities {
        clock: Arc::new(capabilities::SystemClock),
        reel_home: capabilities::reel_home(),
        reel_exe: current_exe(),
        scratch_dir: scratch_dir(),
        store_url: capabilities::store_url(),
        store_auth: capabilities::store_auth(),
    };
    rt.block_on(reel_lsp::serve_stdio(given));
    Ok(Status::Success)
}

/// This binary, which the server starts for the commands it executes (`reel run`, `reel fork`, …).
// edge: where the program was started from, read once at start.
fn current_exe() -> Option<std::path::PathBuf> {
    std::env::current_exe().ok()
}

/// The server's directory for its commands' logs and the fork preview's unsaved text: one per
/// server process, under the system's temporary directory.
// edge: the temporary directory is the system's setting (`TMPDIR`), read once at start.
fn scratch_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("reel-lsp-{}", std::process::id()))
}
