#!/usr/bin/env bash
# Builds every example job for wasm32-wasip2 (release profile: small) and prints the
# path of each .wasm component, one per line, on stdout (cargo's messages go to stderr).
#
# Output goes to the repository's target/ (target/wasm32-wasip2/release/NAME.wasm), the
# directory the cronrun binary is built in, unless CARGO_TARGET_DIR says otherwise.
# Extra arguments go to cargo, e.g. `plugins/build.sh -p hello` or `--locked`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(dirname "$here")/target}"
cd "$here"

if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2 >&2
fi
cargo build --release --target wasm32-wasip2 "$@" >&2

# One cdylib per member folder; its file is the package name with - turned into _.
for manifest in */Cargo.toml; do
  name="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1)"
  wasm="$CARGO_TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm"
  if [[ -f "$wasm" ]]; then
    echo "$wasm"
  fi
done
