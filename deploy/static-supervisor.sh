#!/usr/bin/env bash
# Replaces the `cronrun-supervise` that cargo built beside `cronrun` with the same source
# built statically against musl. A runner execs it for every shell run; linked
# dynamically against glibc, starting it costs about 0.8 ms of CPU (the loader, and glibc
# asking the CPU for its features, which a VM answers slowly), static with musl 0.3 ms
# (docs/benchmarks.md). It behaves the same: same code, same protocol line.
#   deploy/static-supervisor.sh [release|debug]      (default release)
# Run it after the last `cargo build` (or test, run) of the cronrun package: each of
# those puts cargo's own build back beside `cronrun`. deploy/install.sh takes the static
# one from where this builds it (target/x86_64-unknown-linux-musl/release) either way.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${1:-release}"
case "$profile" in
  release) flag=--release ;;
  debug) flag= ;;
  *) echo "static-supervisor.sh: unknown profile '$profile': give release or debug" >&2; exit 2 ;;
esac
musl=x86_64-unknown-linux-musl
target_dir="${CARGO_TARGET_DIR:-target}"
beside="$target_dir/$profile/cronrun-supervise"
[ -x "$beside" ] || { echo "static-supervisor.sh: $beside not found; run cargo build${flag:+ $flag} first" >&2; exit 1; }
if ! rustup target list --installed | grep -qx "$musl"; then
  rustup target add "$musl" >/dev/null 2>&1 || {
    echo "static-supervisor.sh: cannot add the Rust target $musl (rustup target add $musl); $beside is left as cargo built it" >&2
    exit 1
  }
fi
cargo build $flag --quiet -p cronrun-supervisor --features bin --target "$musl"
built="$target_dir/$musl/$profile/cronrun-supervise"
# The same protocol as the runner's, or the runner would refuse it (and run `cronrun
# __supervise` instead): checked before it replaces the other.
ours="$("$beside" --protocol)"
[ -n "$ours" ] && [ "$("$built" --protocol)" = "$ours" ] || {
  echo "static-supervisor.sh: $built does not answer --protocol as $beside does ($ours)" >&2
  exit 1
}
install -m 0755 "$built" "$beside"
echo "static-supervisor.sh: $beside is now static ($musl, $(du -k "$beside" | cut -f1) KiB)"
