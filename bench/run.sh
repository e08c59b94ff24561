#!/usr/bin/env bash
# Builds the benchmarks in release mode and runs them, printing the figures: the compiler's
# (check-bench), the language server's (lsp-bench, through the real `reel lsp`), then the
# runtime's (run-bench, side by side with DBOS Transact for Python); the growth of whole `reel`
# commands with the flow's size (scale-bench), with DBOS beside; then Reel's workers and DBOS on
# one PostgreSQL server (pg-bench).
# BENCH_ONLY=compiler, lsp, runtime, scale or postgres runs one of the five. The PostgreSQL part
# uses the server REEL_BENCH_POSTGRES_URL names, else starts a private one with fsync on
# (scripts/postgres-for-tests.sh, under target/pg-bench).
# Works from any directory. Extra arguments go to check-bench (e.g. --sizes 1000 --budget 1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

cd "$root"
cargo build --release -p reel-bench -p reel --bins

echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "host:   $(nproc) cores, $(uname -srm)"
echo "load:   $(uptime)"
only="${BENCH_ONLY:-all}"
if [ "$only" = all ] || [ "$only" = compiler ]; then
  "$CARGO_TARGET_DIR/release/check-bench" --explain "$@"
fi
if [ "$only" = all ] || [ "$only" = lsp ]; then
  "$CARGO_TARGET_DIR/release/lsp-bench" --reel "$CARGO_TARGET_DIR/release/reel"
fi
# DBOS Transact for Python in a virtual environment; false when it cannot be installed.
venv="${DBOS_VENV:-$CARGO_TARGET_DIR/dbos-venv}"
dbos_installed() {
  { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } \
    && "$venv/bin/pip" install --quiet --disable-pip-version-check dbos
}
if [ "$only" = all ] || [ "$only" = runtime ]; then
  # The runtime benchmark: DBOS Transact for Python (SQLite), then Reel's engine, which prints
  # its figures and the ratios to DBOS's side by side.
  dbos_json="$(mktemp)"
  dbos_args=()
  if dbos_installed && "$venv/bin/python" "$here/dbos/bench.py" --out "$dbos_json"; then
    dbos_args=(--dbos "$dbos_json")
  else
    echo "DBOS could not be installed or run (see above): Reel's figures only" >&2
  fi
  "$CARGO_TARGET_DIR/release/run-bench" "${dbos_args[@]}"
  rm -f "$dbos_json"
fi
if [ "$only" = all ] || [ "$only" = scale ]; then
  # The growth table: `reel check`, `reel build` and `reel run` as whole commands of N
  # sequential steps (1k, 10k, 100k) and of a foreach of N calls (1k to 1M), with DBOS's figures
  # for 1,000 and 10,000 steps beside those rows.
  scale_args=()
  for steps in 1000 10000; do
    out="$(mktemp)"
    reps=3
    [ "$steps" -gt 1000 ] && reps=1
    if dbos_installed \
      && "$venv/bin/python" "$here/dbos/bench.py" --steps "$steps" --reps "$reps" --out "$out" >/dev/null; then
      scale_args+=(--dbos "$out")
    else
      echo "DBOS could not be installed or run for $steps steps (see above)" >&2
    fi
  done
  "$CARGO_TARGET_DIR/release/scale-bench" "${scale_args[@]}"
  for ((k = 1; k < ${#scale_args[@]}; k += 2)); do rm -f "${scale_args[$k]}"; done
fi

if [ "$only" = all ] || [ "$only" = postgres ]; then
  # Reel with 1, 2 and 4 `reel worker`s and DBOS (its native database) on one server.
  if [ -z "${REEL_BENCH_POSTGRES_URL:-}" ]; then
    REEL_PG_FSYNC=on REEL_PG_NAME=pg-bench source "$root/scripts/postgres-for-tests.sh"
    export REEL_BENCH_POSTGRES_URL="$REEL_TEST_POSTGRES_URL"
  fi
  pg_args=()
  if dbos_installed; then
    pg_args=(--python "$venv/bin/python")
  else
    echo "DBOS could not be installed (see above): Reel's figures only" >&2
  fi
  "$CARGO_TARGET_DIR/release/pg-bench" --reel "$CARGO_TARGET_DIR/release/reel" "${pg_args[@]}"
fi
echo "load after: $(uptime)"
