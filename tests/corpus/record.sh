#!/usr/bin/env bash
# Records the corpus again from real runs: every flow here and every reference example, run
# live (a local HTTP service, a signal, a worker), then exported with `reel cassette`.
# Run it after raising the determinism epoch, review the diff, and commit it:
#   cargo build && tests/corpus/record.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
reel=${REEL:-$here/../../target/debug/reel}
work=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export REEL_HOME=$work/.reel
export REEL_SECRET_API_TOKEN=corpus-token-not-a-real-one
python3 "$here/server.py" "$work/port" &
server=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
base="http://127.0.0.1:$(cat "$work/port")"
cd "$work"
printf 'one two three\n' > a.txt
printf 'four five\n' > b.txt

run_id() { python3 -c 'import json,sys; print(json.load(sys.stdin)["run"])'; }
export_to() { "$reel" cassette "$1" -o "$here/$2.cassette.json"; }

id=$("$reel" run "$here/calls.reel" --input "base=$base" --seed 7 --json | run_id); export_to "$id" calls
id=$("$reel" run "$here/fails.reel" --seed 7 --json | run_id || true); export_to "$id" fails
id=$("$reel" run "$here/waits.reel" --seed 7 --json | run_id)
"$reel" signal "$id" approve '{"by": "ada"}'
"$reel" worker --until-idle --poll-ms 50 >/dev/null
export_to "$id" waits
id=$("$reel" run "$here/timeout.reel" --seed 7 --json | run_id)
"$reel" worker --until-idle --poll-ms 50 >/dev/null
export_to "$id" timeout

examples="$here/../../examples/reference"
id=$("$reel" run "$examples/hello.reel" --input name=Ada --input times=2 --json | run_id); export_to "$id" example-hello
id=$("$reel" run "$examples/files.reel" --input 'files=["a.txt", "b.txt"]' --json | run_id); export_to "$id" example-files
id=$("$reel" run "$examples/http.reel" --input "base=$base" --json | run_id); export_to "$id" example-http
rm -f /tmp/reel-flaky-corpus-*
id=$("$reel" run "$examples/tools.reel" --input marker=corpus --json | run_id); export_to "$id" example-tools
id=$("$reel" run "$examples/approval.reel" --input request=deploy --input cooldown=1s --json | run_id)
"$reel" signal "$id" approve '{"approved": true, "by": "ada"}'
"$reel" worker --until-idle --poll-ms 50 >/dev/null
export_to "$id" example-approval
"$reel" test "$here"
