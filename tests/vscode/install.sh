#!/usr/bin/env bash
# Installs what the VS Code end-to-end test needs on a fresh Debian 12 machine, and nothing when
# it is already there (a few checks, well under a second).
#
#   apt:  chromium ripgrep libkrb5-dev build-essential pkg-config   (only the missing ones)
#   npm:  code-server@4.100.3 and playwright-core@1.65.1, from package-lock.json, into
#         tests/vscode/node_modules (a stamp file there records the lock file it was built from).
#
# code-server@4.100.3 is the newest that runs on Node 20. Its install needs, here:
#   - ripgrep served from the cache @vscode/ripgrep looks in (a tarball of Debian's rg 13.0.0),
#     since the install cannot download the prebuilt binary;
#   - npm_config_nodedir at the installed Node's prefix, so node-gyp does not fetch headers;
#   - npm_config_yes=true, so an npx step does not wait for a prompt;
#   - --unsafe-perm, since we run as root.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { printf '[install] %s\n' "$*" >&2; }

# --- apt -------------------------------------------------------------------------------------
apt_pkgs=(chromium ripgrep libkrb5-dev build-essential pkg-config)
missing=()
for p in "${apt_pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  sudo_=""
  [[ $(id -u) -ne 0 ]] && sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v node >/dev/null || { log "node is required (Node 20)"; exit 1; }

# --- npm -------------------------------------------------------------------------------------
stamp="node_modules/.reel-e2e-installed"
fingerprint() { echo "$(cat package.json package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1) $(node --version)"; }
want="$(fingerprint)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" \
      && -x node_modules/.bin/code-server && -d node_modules/playwright-core ]]; then
  log "npm packages already installed (tests/vscode/node_modules)"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The ripgrep cache: @vscode/ripgrep (1.15.11) fetches ripgrep v13.0.0-10 unless it is here.
rgcache="$tmp/vscode-ripgrep-cache-1.15.11"
mkdir -p "$rgcache/x"
cp "$(command -v rg)" "$rgcache/x/rg"
tar -C "$rgcache/x" -czf "$rgcache/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" rg

node_prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
log "npm ci (code-server, playwright-core) into tests/vscode/node_modules; about a minute"
start=$SECONDS
TMPDIR="$tmp" npm_config_nodedir="$node_prefix" npm_config_yes=true \
  npm "$([[ -f package-lock.json ]] && echo ci || echo install)" --unsafe-perm --no-audit --no-fund --loglevel=error
fingerprint > "$stamp"
log "npm packages installed in $((SECONDS - start)) s"
