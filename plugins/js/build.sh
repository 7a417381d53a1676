#!/usr/bin/env bash
# Builds the JavaScript example jobs (plugins/js/*/app.js) into components of the `job`
# world with componentize-js (pinned in package.json and package-lock.json, installed
# into node_modules on first use; deploy/dev-deps.sh provides node and npm)
# and prints the path of each .wasm, one per line. They carry no schedule yet: `cronrun
# manifest FILE --schedule EXPR` adds it. A component newer than its app.js and wit/ is kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$(dirname "$here")")"
out="${CARGO_TARGET_DIR:-$root/target}/wasm32-wasip2/js"
mkdir -p "$out"
if [[ ! -x "$here/node_modules/.bin/componentize-js" || "$here/package-lock.json" -nt "$here/node_modules" ]]; then
  # `npm ci` refuses this lock (jco lists platform packages that do not exist); `install
  # --no-save` keeps to it and leaves it as it is.
  (cd "$here" && npm install --no-save --no-audit --no-fund --loglevel=error >&2 && touch node_modules)
fi
for app in "$here"/*/app.js; do
  dir="$(dirname "$app")"
  wasm="$out/$(basename "$dir").wasm"
  if [[ ! -f "$wasm" || "$app" -nt "$wasm" || -n "$(find "$root/wit" -newer "$wasm" -print -quit)" ]]; then
    "$here/node_modules/.bin/componentize-js" --wit "$root/wit" --world-name job -o "$wasm.tmp" "$app" >&2
    mv "$wasm.tmp" "$wasm"
  fi
  echo "$wasm"
done
