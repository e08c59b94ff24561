#!/usr/bin/env bash
# The network between `reel` and its PostgreSQL server cut (packets silently lost, as a pulled
# cable, a dead switch or a partition leaves it, not a refused or reset connection) in the
# middle of a `reel run`, for each of CUTS seconds, then mended: the figures of
# docs/reliability.md. `reel` runs in a network namespace of its own, joined to the server by
# a virtual Ethernet pair whose link is set down for the cut, so it needs root (`ip netns`).
# Reports, for each cut, how the run ended, how long it took, whether every call was made
# once, and the last thing `reel` said; with `resume` when the run stopped, whether resuming
# it finishes it with every call once. Uses its own private server (REEL_PG_NAME=pg-cut, see
# scripts/postgres-for-tests.sh) on its own addresses; a release build of `reel` (REEL_BIN to
# try another).
#   scripts/postgres-network-cut.sh [CUT_SECONDS ...]   (default: 20 100)
set -euo pipefail
cd "$(dirname "$0")/.."
cuts=("$@")
[ ${#cuts[@]} -gt 0 ] || cuts=(20 100)
steps=400
if [ -z "${REEL_BIN:-}" ]; then
  cargo build --release --quiet
  REEL_BIN="$PWD/target/release/reel"
fi
export REEL_PG_NAME=pg-cut
source scripts/postgres-for-tests.sh
ns=reelcut$$
host_if=rch$$
ns_if=rcn$$
host_ip=10.231.0.1
work="$(mktemp -d)"
cleanup() {
  ip link del "$host_if" 2> /dev/null || true
  ip netns del "$ns" 2> /dev/null || true
  rm -rf "$work"
  reel_pg_stop
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$host_if" type veth peer name "$ns_if"
ip link set "$ns_if" netns "$ns"
ip addr add "$host_ip/24" dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add 10.231.0.2/24 dev "$ns_if"
ip netns exec "$ns" ip link set "$ns_if" up
ip netns exec "$ns" ip link set lo up
# The private server again, listening on the pair's address too.
port="${REEL_TEST_POSTGRES_URL##*:}"
port="${port%%/*}"
reel_pg_as "$REEL_PG_BIN/pg_ctl" -D "$REEL_PG_DIR/data" -m fast -w stop > /dev/null
# First: the tests' server refuses connections without TLS from anywhere else.
reel_pg_as sed -i '1i host all all 10.231.0.0/24 trust' "$REEL_PG_DIR/data/pg_hba.conf"
reel_pg_as "$REEL_PG_BIN/pg_ctl" -D "$REEL_PG_DIR/data" -l "$REEL_PG_DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=$host_ip -p $port -k $REEL_PG_DIR -c fsync=off -c ssl=off" \
  start > /dev/null
local_url="$REEL_TEST_POSTGRES_URL"
# A chain of steps, each a call that logs its idempotency key, waits a little and adds one.
{
  echo "flow chain {"
  echo '  step s0 = exec { cmd: ["sh", "-c", "echo \"s0 $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo 0"] }'
  for i in $(seq 1 $((steps - 1))); do
    echo "  step s$i = exec { cmd: [\"sh\", \"-c\", \"echo \\\"s$i \$REEL_IDEMPOTENCY_KEY\\\" >> calls.log; sleep 0.02; echo \$(( \$1 + 1 ))\", \"sh\", to_string(s$((i - 1)).json)] }"
  done
  echo "  output s$((steps - 1)).json"
  echo "}"
} > "$work/chain.reel"
made() { if [ -f "$work/calls.log" ]; then wc -l < "$work/calls.log"; else echo 0; fi; }
check() {
  local calls unique
  calls=$(made)
  unique=$(sort -u "$work/calls.log" 2> /dev/null | wc -l)
  echo "$calls ($unique)"
}
echo "| cut | run | status | calls (unique) | said last | resumed |"
echo "|---|---|---|---|---|---|"
for cut in "${cuts[@]}"; do
  db="cut_${cut}_$$"
  "$REEL_PG_BIN/psql" -q "$local_url" -c "CREATE DATABASE $db"
  url="postgres://postgres@$host_ip:$port/$db"
  rm -f "$work/calls.log"
  began=$(date +%s%N)
  (cd "$work" && REEL_STORE_URL="$url" ip netns exec "$ns" "$REEL_BIN" run chain.reel \
    --durability durable --json > "out.$cut" 2> "err.$cut") &
  run=$!
  while [ "$(made)" -lt $((steps / 10)) ] && kill -0 "$run" 2> /dev/null; do
    sleep 0.01
  done
  ip link set "$host_if" down
  sleep "$cut"
  ip link set "$host_if" up
  status=0
  wait "$run" || status=$?
  run_s=$(( ($(date +%s%N) - began) / 1000000000 ))
  said=$(grep -v '✓' "$work/err.$cut" | tail -1 | cut -c1-120)
  resumed="-"
  if [ "$status" != 0 ]; then
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run"])' "$work/out.$cut" \
      2> /dev/null || true)
    if [ -n "$id" ]; then
      (cd "$work" && REEL_STORE_URL="$url" ip netns exec "$ns" "$REEL_BIN" resume "$id" --json \
        > "resume.$cut" 2>&1) && resumed="succeeded, $(check)" || resumed="failed, $(check)"
    fi
  fi
  echo "| ${cut} s | ${run_s} s | $status | $(check) | $said | $resumed |"
done
