#!/usr/bin/env bash
# Builds the Python example jobs (plugins/python/*/app.py) into components of the `job`
# world with componentize-py (deploy/dev-deps.sh installs it, pinned) and prints the path
# of each .wasm, one per line. They carry no schedule yet: `cronrun manifest FILE
# --schedule EXPR` adds it. A component newer than its app.py and wit/ is kept.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$(dirname "$here")")"
out="${CARGO_TARGET_DIR:-$root/target}/wasm32-wasip2/python"
mkdir -p "$out"
for app in "$here"/*/app.py; do
  dir="$(dirname "$app")"
  wasm="$out/$(basename "$dir").wasm"
  if [[ ! -f "$wasm" || "$app" -nt "$wasm" || -n "$(find "$root/wit" -newer "$wasm" -print -quit)" ]]; then
    (cd "$dir" && componentize-py -d "$root/wit" -w job componentize app -o "$wasm.tmp" >&2)
    mv "$wasm.tmp" "$wasm"
  fi
  echo "$wasm"
done
