#!/usr/bin/env bash
# Proves the capabilities lint is on: clippy must refuse every ambient clock and environment read
# in runtime/lint-probe (a crate outside the workspace that finds the same clippy.toml as the
# store, the journal and the engine) and let the one use marked as an edge through. Nothing in
# the tree is written (the probe builds into a temporary directory), so an interrupted run leaves
# nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh target directory every time: cargo replays a cached clippy result without noticing
# that clippy.toml came back after being absent, and the probe must never pass on a stale cache.
# The probe has no dependencies, so building it takes a second.
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
expected=(
  std::time::SystemTime::now
  std::time::Instant::now
  std::env::var
  std::env::var_os
  std::env::vars
  std::env::vars_os
)

if out=$(cargo clippy --quiet --locked --manifest-path runtime/lint-probe/Cargo.toml \
  --target-dir "$target" -- -D warnings 2>&1); then
  echo "lint-capabilities: clippy accepted runtime/lint-probe: the capabilities lint is off" >&2
  exit 1
fi

refused=$(grep -o 'use of a disallowed method `[^`]*`' <<<"$out" | sed 's/.*`\(.*\)`/\1/' | sort)
want=$(printf '%s\n' "${expected[@]}" | sort)
if [ "$refused" != "$want" ]; then
  echo "lint-capabilities: clippy refused other than expected" >&2
  echo "expected:" >&2
  echo "$want" >&2
  echo "clippy said:" >&2
  echo "$out" >&2
  exit 1
fi
echo "lint-capabilities: clippy refuses the ${#expected[@]} ambient reads and lets the marked edge through"
