#!/usr/bin/env bash
# Azurite (Microsoft's Azure Storage emulator) from a pinned npm version into
# ./.tools/azurite; the Azure Blob tests start .tools/azurite/node_modules/.bin/azurite-blob.
set -euo pipefail
cd "$(dirname "$0")/.."
AZURITE_VERSION="3.37.0"
dest=.tools/azurite
stamp="$dest/.l0gc-installed"
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$AZURITE_VERSION" ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "npm is needed to install azurite@$AZURITE_VERSION" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
(cd "$dest" && echo '{"private": true}' > package.json \
    && npm install --silent --no-audit --no-fund --save-exact "azurite@$AZURITE_VERSION" >/dev/null)
"$dest/node_modules/.bin/azurite-blob" --version >/dev/null
echo "$AZURITE_VERSION" > "$stamp"
