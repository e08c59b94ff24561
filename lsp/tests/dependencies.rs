//! The language server reads past runs; it never runs flows, never writes the store and never
//! talks HTTP. Its resolved dependency graph (`cargo tree`, normal dependencies only, for this
//! platform) is checked here: the engine, the tool host or an HTTP client showing up in it fails
//! the tests.

use std::collections::BTreeSet;
use std::process::Command;

/// Crates the language server must not reach: the engine, the tool host, HTTP clients and the
/// HTTP stacks they are built on.
const FORBIDDEN: [&str; 11] = [
    "reel-runtime",
    "reel-tools",
    "reqwest",
    "hyper",
    "hyper-util",
    "h2",
    "ureq",
    "isahc",
    "curl",
    "attohttpc",
    "surf",
];

/// The names of every package reel-lsp links (itself included): dev- and build-dependencies
/// are left out, as they are not in the program.
fn runtime_dependencies() -> BTreeSet<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-p", "reel-lsp", "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}", "--manifest-path"])
        .arg(manifest)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_language_server_reaches_neither_the_engine_nor_the_tool_host_nor_an_http_client() {
    let deps = runtime_dependencies();
    // The walk itself is checked: it must see what the server does use.
    for used in [
        "reel-store",
        "reel-journal",
        "reel-compiler",
        "tower-lsp-server",
    ] {
        assert!(deps.contains(used), "{used} missing from {deps:?}");
    }
    let found: Vec<&str> = FORBIDDEN
        .iter()
        .copied()
        .filter(|name| deps.contains(*name))
        .collect();
    assert!(
        found.is_empty(),
        "reel-lsp depends on {found:?}; it must not run flows or talk HTTP"
    );
}
