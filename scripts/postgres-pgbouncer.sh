#!/usr/bin/env bash
# Reel behind PgBouncer, the connection pooler teams put in front of PostgreSQL: the figures of
# docs/reliability.md ("Behind a connection pooler"). Two poolers in front of one private
# server, in session mode and in transaction mode, each with a pool smaller than what the
# clients ask for; through each, RUNS `reel run`s of a 20-step flow at once, and through the
# session pool a `reel worker` woken by a signal. Session mode must run every run and wake the
# worker at once (LISTEN/NOTIFY); transaction mode, which Reel does not support, must fail
# every run it fails with an error that names the pooler's mode and says what to change.
# Installs pgbouncer from the system's packages when missing (as root). Uses its own private
# server (REEL_PG_NAME=pg-pgbouncer); a release build of `reel` (REEL_BIN to try another).
#   scripts/postgres-pgbouncer.sh [RUNS]   (default: 10)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
if [ -z "${REEL_BIN:-}" ]; then
  cargo build --release --quiet
  REEL_BIN="$PWD/target/release/reel"
fi
REEL_BIN=$(realpath "$REEL_BIN")
if ! command -v pgbouncer > /dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer > /dev/null
fi
pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
export REEL_PG_NAME=pg-pgbouncer
source scripts/postgres-for-tests.sh
work="$(mktemp -d)"
chmod 755 "$work"
# The poolers' and the server's stop: this trap takes the place of the one
# postgres-for-tests.sh set.
trap 'for p in "$work"/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2> /dev/null; done; sleep 0.2; rm -rf "$work"; reel_pg_stop' EXIT
port=${REEL_TEST_POSTGRES_URL##*:}
port=${port%%/*}
{
  echo "flow chain {"
  echo '  step s0 = echo { value: 0 }'
  for i in $(seq 1 19); do echo "  step s$i = echo { value: s$((i - 1)) + 1 }"; done
  echo "  output s19"
  echo "}"
} > "$work/chain.reel"
printf 'flow w {\n  step go = signal { name: "go", timeout: 1d }\n  output go\n}\n' > "$work/wait.reel"
echo '"postgres" ""' > "$work/users.txt"
failed=0
echo "| pool mode | pool size | runs | succeeded | failed, with the pooler named | other failures | signal to its run's end |"
echo "|---|---|---|---|---|---|---|"
for mode in session transaction; do
  listen=$(reel_pg_free_port)
  # A pool of 3 server sessions in transaction mode, so that clients' transactions mix; in
  # session mode each `reel` holds its sessions (two for a run, more for a worker), so the
  # pool is sized for them.
  size=3
  [ "$mode" = session ] && size=$((runs * 3 + 4))
  cat > "$work/$mode.ini" << EOF
[databases]
* = host=$REEL_PG_DIR port=$port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $listen
auth_type = trust
auth_file = $work/users.txt
pool_mode = $mode
default_pool_size = $size
max_client_conn = 1000
unix_socket_dir =
logfile = $work/$mode.log
pidfile = $work/$mode.pid
ignore_startup_parameters = extra_float_digits,options,application_name
EOF
  chmod 644 "$work/$mode.ini" "$work/users.txt"
  [ "$(id -u)" = 0 ] && chown postgres "$work"
  reel_pg_as "$pgbouncer" -d "$work/$mode.ini"
  db="pooled_$mode"
  "$REEL_PG_BIN/psql" -q "$REEL_TEST_POSTGRES_URL" -c "CREATE DATABASE $db"
  url="postgres://postgres@127.0.0.1:$listen/$db"
  for i in $(seq 1 "$runs"); do
    (
      cd "$work"
      rc=0
      REEL_STORE_URL="$url" timeout 120 "$REEL_BIN" run chain.reel --json \
        > "out.$mode.$i" 2> "err.$mode.$i" || rc=$?
      echo "$rc" > "rc.$mode.$i"
    ) &
  done
  wait
  ok=0 named=0 other=0
  for i in $(seq 1 "$runs"); do
    output=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("output"))' \
      "$work/out.$mode.$i" 2> /dev/null || echo "-")
    if [ "$(cat "$work/rc.$mode.$i")" = 0 ] && [ "$output" = 19 ]; then
      ok=$((ok + 1))
    elif grep -q "pool in session mode" "$work/err.$mode.$i"; then
      named=$((named + 1))
    else
      other=$((other + 1))
      tail -2 "$work/err.$mode.$i" >&2
    fi
  done
  woke="-"
  if [ "$mode" = session ]; then
    run=$(cd "$work" && REEL_STORE_URL="$url" "$REEL_BIN" run wait.reel --json 2> /dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["run"])')
    (cd "$work" && REEL_STORE_URL="$url" exec "$REEL_BIN" worker --poll-ms 60000 \
      > worker.log 2>&1) &
    worker=$!
    sleep 1.5
    began=$(date +%s%N)
    (cd "$work" && REEL_STORE_URL="$url" "$REEL_BIN" signal "$run" go 7 2> /dev/null)
    status=""
    for _ in $(seq 1 200); do
      status=$(cd "$work" && REEL_STORE_URL="$url" "$REEL_BIN" sql --json \
        "SELECT status FROM reel_runs WHERE id = '$run'" 2> /dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])')
      [ "$status" = succeeded ] && break
      sleep 0.02
    done
    woke="$(( ($(date +%s%N) - began) / 1000000 )) ms ($status; the worker polls every 60 s)"
    kill "$worker" 2> /dev/null || true
    wait "$worker" 2> /dev/null || true
    [ "$status" = succeeded ] || failed=$((failed + 1))
  fi
  echo "| $mode | $size | $runs | $ok | $named | $other | $woke |"
  if [ "$mode" = session ] && [ "$ok" != "$runs" ]; then failed=$((failed + 1)); fi
  if [ "$other" != 0 ]; then failed=$((failed + 1)); fi
done
echo "expectations not met: $failed"
[ "$failed" = 0 ]
