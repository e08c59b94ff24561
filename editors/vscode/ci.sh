#!/usr/bin/env bash
# Build, test and package the VS Code extension: editors/vscode/reel.vsix.
# Needs Node 20 and npm; everything else (TypeScript, vsce, the TextMate engine) is a
# devDependency pinned in package-lock.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

node --version
npm --version

# No install scripts: none of the dependencies needs one to build, test or package.
npm ci --ignore-scripts --no-audit --no-fund
npm run build
npm test
rm -f reel.vsix
npm run package

test -s reel.vsix
echo "packaged $(pwd)/reel.vsix ($(wc -c < reel.vsix) bytes)"
npx --no-install vsce ls --tree
