#!/usr/bin/env bash
# The long form of the crash harness, for the figures of docs/reliability.md: every crash point
# struck at passages 1..HITS of every process of every flow that passes it, in both write
# modes, on both stores (SQLite, and PostgreSQL on the private test server it starts), with second crashes during the repair drawn from a seed; then the many-process test
# with SIGKILLs on both stores, ROUNDS times with fresh seeds (REEL_KILL_WORKERS=N kills N workers a round). Prints the per-point table rows and each
# round's summary. Needs a debug build (crash points are compiled out of release builds).
#   scripts/crash-points.sh [HITS [ROUNDS [REPEATS]]]   (defaults: 6, 3 and 1)
# REPEATS runs the crash points again with fresh seeds: a point a process passes once (`park`,
# `takeover`, `backoff`, `fan-out`) gets a few strikes per repeat, so repeats are how it gets
# many.
#   REEL_CRASH_SEED=N scripts/crash-points.sh      repeats one seed
set -euo pipefail
cd "$(dirname "$0")/.."
hits="${1:-6}"
rounds="${2:-3}"
repeats="${3:-1}"
cargo test -p reel --test cli --no-run --quiet
# The PostgreSQL half strikes the same points with the store on the test server.
source scripts/postgres-for-tests.sh
echo "crash points: passages 1..$hits, both modes"
echo "| point | store | mode | crashed runs | not reached | repair processes | second crashes | right output | steps re-run after a recorded success | effects repeated |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for repeat in $(seq 1 "$repeats"); do
  REEL_CRASH_HITS="$hits" REEL_CRASH_MODES=both \
    cargo test -p reel --test cli crash_points::crash_ -- --nocapture --test-threads=2 2>&1 |
    grep -E '^\| `|seed|panicked|FAILED|test result' || true
done
for round in $(seq 1 "$rounds"); do
  echo "many processes with SIGKILLs, round $round"
  cargo test -p reel --test cli many::runs_and_a_worker_killed -- --nocapture 2>&1 |
    grep -E 'seed|panicked|test result' || true
done
