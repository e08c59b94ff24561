#!/usr/bin/env bash
# Installs what the tests need on a fresh machine and runs every test: the Rust workspace
# (cargo nextest, with a private PostgreSQL server for the store tests), the language server in
# Neovim 0.11 (headless, installed with pip under target/neovim/), the VS Code extension (build,
# grammar tests, .vsix), and the extension in a real VS Code (code-server + headless Chromium;
# screenshots in target/vscode-e2e/screenshots/).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v sh >/dev/null 2>&1 || need_apt+=(dash)
# The PostgreSQL test server speaks TLS with certificates openssl makes (tests/cli/postgres_tls.rs).
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi

# A private PostgreSQL server for the store's PostgreSQL tests (installed from the system's
# packages if missing, data under the target folder, stopped when this script exits); it sets
# REEL_TEST_POSTGRES_URL, without which those tests fail.
source scripts/postgres-for-tests.sh

# Snapshot mismatches fail instead of writing new snapshots.
export INSTA_UPDATE=no
cargo nextest run --workspace --no-fail-fast "$@"

target="${CARGO_TARGET_DIR:-target}"
# The language server in Neovim 0.11, against the reel binary the tests above built.
REEL_BIN="$target/debug/reel" bash tests/neovim/run.sh

# The extension: npm ci, TypeScript build, tokenization tests, editors/vscode/reel.vsix.
bash editors/vscode/ci.sh
# The extension in a real VS Code, against the reel binary the tests above built.
REEL_BIN="$target/debug/reel" REEL_VSIX=editors/vscode/reel.vsix bash tests/vscode/run.sh
