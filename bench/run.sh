#!/usr/bin/env bash
# Builds the compiler benchmarks in release mode and runs them, printing the figures.
# Works from any directory. Extra arguments go to check-bench (e.g. --sizes 1000 --budget 1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

cd "$root"
cargo build --release -p reel-bench --bins

echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "host:   $(nproc) cores, $(uname -srm)"
echo "load:   $(uptime)"
"$CARGO_TARGET_DIR/release/check-bench" --explain "$@"
echo "load after: $(uptime)"
