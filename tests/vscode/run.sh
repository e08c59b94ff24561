#!/usr/bin/env bash
# End-to-end test of the Reel extension in a real VS Code (code-server 4.100.3 = VS Code 1.100.3),
# driven by headless Chromium through playwright-core (tests/vscode/e2e.mjs).
#
#   bash tests/vscode/run.sh
#
# Environment:
#   REEL_BIN          the reel binary to test; default: `cargo build --bin reel` (honours
#                     CARGO_TARGET_DIR) and its target/debug/reel
#   REEL_VSIX         the extension; default editors/vscode/reel.vsix (built with
#                     editors/vscode/ci.sh when absent)
#   REEL_E2E_SHOTS    where the screenshots go; default <repo>/target/vscode-e2e/screenshots
#   REEL_E2E_KEEP=1   keep the temp directory (workspace, code-server logs) afterwards
#   REEL_E2E_HEADED=1 not headless (needs a display)
#   REEL_E2E_BIG_STEPS the size of the big generated flow typed into (default 3000)
#
# Exit status 0 only when every assertion passed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
log() { printf '[e2e] %s\n' "$*" >&2; }
t0=$SECONDS

bash "$here/install.sh"

# --- the reel binary -------------------------------------------------------------------------
if [[ -z "${REEL_BIN:-}" ]]; then
  log "cargo build --bin reel"
  (cd "$repo" && cargo build --quiet --bin reel)
  target="${CARGO_TARGET_DIR:-$repo/target}"
  [[ "$target" = /* ]] || target="$repo/$target"
  REEL_BIN="$target/debug/reel"
fi
REEL_BIN="$(readlink -f "$REEL_BIN")"
[[ -x "$REEL_BIN" ]] || { log "no reel binary at $REEL_BIN"; exit 1; }
log "reel: $REEL_BIN"

# --- the extension ---------------------------------------------------------------------------
vsix="${REEL_VSIX:-$repo/editors/vscode/reel.vsix}"
if [[ "${REEL_E2E_NO_EXTENSION:-}" == 1 ]]; then
  log "REEL_E2E_NO_EXTENSION=1: no extension (only to work on the test itself)"
elif [[ ! -s "$vsix" ]]; then
  log "no $vsix: building it with editors/vscode/ci.sh"
  bash "$repo/editors/vscode/ci.sh" >&2
fi
if [[ "${REEL_E2E_NO_EXTENSION:-}" != 1 ]]; then
  [[ -s "$vsix" ]] || { log "no extension package at $vsix"; exit 1; }
  vsix="$(readlink -f "$vsix")"
fi

# --- a workspace holding two recorded runs ---------------------------------------------------
tmp="$(mktemp -d)"
cs_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$cs_pid" ]]; then
    kill -TERM -- "-$cs_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 -- "-$cs_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$cs_pid" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$tmp/code-server.log" ]]; then
    log "code-server log (last 30 lines):"
    tail -n 30 "$tmp/code-server.log" | cut -c1-300 >&2 || true
  fi
  if [[ "${REEL_E2E_KEEP:-}" == 1 ]]; then
    log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ws="$tmp/workspace"
mkdir -p "$ws"
# A big generated flow, run once so that its steps have recorded results (a few seconds).
big_steps="${REEL_E2E_BIG_STEPS:-3000}"
node "$here/fixtures/big-flow.mjs" "$big_steps" >"$ws/big.reel"
set +e
(cd "$ws" && "$REEL_BIN" --color never run big.reel) >"$tmp/big.log" 2>&1
rc=$?
set -e
big_id="$(sed -n 's/^run \([0-9a-z]*\) of `big`.*/\1/p' "$tmp/big.log" | head -n1)"
if [[ $rc -ne 0 || -z "$big_id" ]]; then
  log "reel run big.reel ($big_steps steps): expected a succeeded run, got exit $rc:"
  tail -n 30 "$tmp/big.log" >&2
  exit 1
fi
log "recorded run $big_id of big ($big_steps steps, $(wc -l <"$ws/big.reel") lines)"
cp "$here/fixtures/greet.reel" "$ws/greet.reel"
"$REEL_BIN" check "$ws/greet.reel" >&2
# An earlier run with another name, for the run picker to switch to.
set +e
(cd "$ws" && "$REEL_BIN" --color never run greet.reel --input name=earlier) >"$tmp/earlier.log" 2>&1
set -e
older_id="$(sed -n 's/^run \([0-9a-z]*\) of `greet`.*/\1/p' "$tmp/earlier.log" | head -n1)"
if [[ -z "$older_id" ]]; then
  log "reel run greet.reel --input name=earlier recorded no run:"
  cat "$tmp/earlier.log" >&2
  exit 1
fi
# The flow's last step fails on purpose, so `reel run` exits 1; anything else is a setup error.
set +e
(cd "$ws" && "$REEL_BIN" --color never run greet.reel) >"$tmp/run.log" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]] || ! grep -q 'failed at step `broken`' "$tmp/run.log"; then
  log "reel run greet.reel: expected exit 1 failing at step broken, got $rc:"
  cat "$tmp/run.log" >&2
  exit 1
fi
run_id="$(sed -n 's/^run \([0-9a-z]*\) of `greet`.*/\1/p' "$tmp/run.log" | head -n1)"
log "recorded runs $older_id and $run_id of greet in $ws/.reel"

# --- code-server -----------------------------------------------------------------------------
cs="$tmp/code-server"
mkdir -p "$cs/user-data/User" "$cs/extensions" "$cs/xdg-config" "$cs/xdg-cache" "$cs/xdg-data"
printf 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n' >"$cs/config.yaml"
node -e '
  const [file, bin] = process.argv.slice(1);
  require("fs").writeFileSync(file, JSON.stringify({
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "workbench.enableExperiments": false,
    "workbench.welcomePage.walkthroughs.openOnInstall": false,
    "security.workspace.trust.enabled": false,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "extensions.ignoreRecommendations": true,
    "files.autoSave": "off",
    "editor.inlayHints.enabled": "on",
    "editor.codeLens": true,
    "editor.minimap.enabled": false,
    "editor.fontSize": 14,
    "editor.hover.delay": 200,
    "window.commandCenter": false,
    "files.exclude": { "**/.reel": true },
    "editor.acceptSuggestionOnCommitCharacter": false,
    "chat.commandCenter.enabled": false,
    "workbench.colorTheme": "Default Dark Modern",
    "reel.path": bin,
  }, null, 2));
' "$cs/user-data/User/settings.json" "$REEL_BIN"

cs_bin="$here/node_modules/.bin/code-server"
export XDG_CONFIG_HOME="$cs/xdg-config" XDG_CACHE_HOME="$cs/xdg-cache" XDG_DATA_HOME="$cs/xdg-data"
cs_args=(--config "$cs/config.yaml" --user-data-dir "$cs/user-data" --extensions-dir "$cs/extensions")

if [[ "${REEL_E2E_NO_EXTENSION:-}" != 1 ]]; then
  log "installing $vsix"
  "$cs_bin" "${cs_args[@]}" --install-extension "$vsix" --force >"$tmp/install-extension.log" 2>&1 || {
    cat "$tmp/install-extension.log" >&2
    exit 1
  }
fi

port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
# Its own process group (setsid), stopped whole by the trap. PATH leads to the binary under
# test as well, for anything that looks `reel` up by name.
PATH="$(dirname "$REEL_BIN"):$PATH" setsid "$cs_bin" "${cs_args[@]}" \
  --bind-addr "127.0.0.1:$port" --auth none --disable-telemetry --disable-update-check \
  --disable-workspace-trust --disable-getting-started-override \
  "$ws" >"$tmp/code-server.log" 2>&1 &
cs_pid=$!
url="http://127.0.0.1:$port/?folder=$ws"
log "code-server (pid $cs_pid) at $url"

# --- drive it --------------------------------------------------------------------------------
shots="${REEL_E2E_SHOTS:-$repo/target/vscode-e2e/screenshots}"
mkdir -p "$shots"
rm -f "$shots"/failure-*.png
export REEL_E2E_URL="$url" REEL_E2E_WORKSPACE="$ws" REEL_E2E_SHOTS="$shots" \
  REEL_E2E_RUN_ID="$run_id" REEL_E2E_OLDER_RUN_ID="$older_id" REEL_E2E_TMP="$tmp" \
  REEL_E2E_BIG_RUN_ID="$big_id" REEL_E2E_BIG_STEPS="$big_steps"
set +e
node "$here/e2e.mjs"
rc=$?
set -e
log "screenshots: $shots"
log "took $((SECONDS - t0)) s"
exit $rc
