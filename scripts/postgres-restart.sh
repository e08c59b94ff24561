#!/usr/bin/env bash
# The whole PostgreSQL server restarted (`pg_ctl restart -m fast`: every session ended, new
# ones refused until it is back) in the middle of a `reel run` of many short steps, in both
# write modes, ROUNDS times: the figures of docs/reliability.md. Each run must succeed with
# the right output and every step's call made once. Uses its own private server
# (REEL_PG_NAME=pg-restart, see scripts/postgres-for-tests.sh), never the tests' one, since
# it restarts it; a release build of `reel` (REEL_BIN to try another).
#   scripts/postgres-restart.sh [ROUNDS [STEPS]]   (defaults: 3 and 400)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
steps="${2:-400}"
if [ -z "${REEL_BIN:-}" ]; then
  cargo build --release --quiet
  REEL_BIN="$PWD/target/release/reel"
fi
export REEL_PG_NAME=pg-restart
source scripts/postgres-for-tests.sh
work="$(mktemp -d)"
# The server's stop too: this trap takes the place of the one postgres-for-tests.sh set.
trap 'rm -rf "$work"; reel_pg_stop' EXIT
# A chain of steps, each a call that logs its idempotency key and adds one.
{
  echo "flow chain {"
  echo '  step s0 = exec { cmd: ["sh", "-c", "echo \"s0 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 0"] }'
  for i in $(seq 1 $((steps - 1))); do
    echo "  step s$i = exec { cmd: [\"sh\", \"-c\", \"echo \\\"s$i \$REEL_IDEMPOTENCY_KEY\\\" >> calls.log; echo \$(( \$1 + 1 ))\", \"sh\", to_string(s$((i - 1)).json)] }"
  done
  echo "  output s$((steps - 1)).json"
  echo "}"
} > "$work/chain.reel"
server="${REEL_TEST_POSTGRES_URL%/postgres}"
failed=0
echo "| round | mode | restart | run | status | calls (unique) | output |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq 1 "$rounds"); do
  for mode in durable fast; do
    db="restart_${mode}_${round}_$$"
    "$REEL_PG_BIN/psql" -q "$REEL_TEST_POSTGRES_URL" -c "CREATE DATABASE $db"
    rm -f "$work/calls.log"
    began=$(date +%s%N)
    (cd "$work" && REEL_STORE_URL="$server/$db" "$REEL_BIN" run chain.reel --durability "$mode" \
      --json > "out.$mode" 2> "err.$mode") &
    run=$!
    # Once a tenth of the calls were made: in the middle of the run's writes.
    made() { if [ -f "$work/calls.log" ]; then wc -l < "$work/calls.log"; else echo 0; fi; }
    while [ "$(made)" -lt $((steps / 10)) ] && kill -0 "$run" 2> /dev/null; do
      sleep 0.01
    done
    restart_began=$(date +%s%N)
    reel_pg_as "$REEL_PG_BIN/pg_ctl" -D "$REEL_PG_DIR/data" -l "$REEL_PG_DIR/server.log" \
      -m fast -w restart > /dev/null
    restart_ms=$(( ($(date +%s%N) - restart_began) / 1000000 ))
    status=0
    wait "$run" || status=$?
    run_ms=$(( ($(date +%s%N) - began) / 1000000 ))
    calls=$(made)
    unique=$(sort -u "$work/calls.log" 2> /dev/null | wc -l)
    output=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("output"))' \
      "$work/out.$mode" 2>/dev/null || echo "-")
    echo "| $round | $mode | $restart_ms ms | $run_ms ms | $status | $calls ($unique) | $output |"
    if [ "$status" != 0 ] || [ "$calls" != "$steps" ] || [ "$unique" != "$steps" ] ||
      [ "$output" != $((steps - 1)) ]; then
      failed=$((failed + 1))
      grep -v '✓' "$work/err.$mode" | tail -3 >&2
    fi
  done
done
echo "runs that did not succeed with every call once: $failed"
[ "$failed" = 0 ]
