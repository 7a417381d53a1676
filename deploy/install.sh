#!/usr/bin/env bash
# Installs cronrun on this host: the binaries (cronrun, and cronrun-supervise, the small
# first process of every shell run), /etc/cronrun/cronrun.toml (kept if present),
# a `cronrun` system user and the systemd unit. Run from a checkout as root:
#   cargo build --release && deploy/static-supervisor.sh && sudo deploy/install.sh
# (static-supervisor.sh is optional: it makes each shell run cost a third of the CPU.)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=target/release/cronrun
supervise=target/release/cronrun-supervise
for b in "$bin" "$supervise"; do
  [ -x "$b" ] || { echo "install.sh: $b not found; run cargo build --release first" >&2; exit 1; }
done
# The static build of deploy/static-supervisor.sh, when there is one of this build's
# protocol (cargo's next build puts its own back beside cronrun).
static=target/x86_64-unknown-linux-musl/release/cronrun-supervise
if [ -x "$static" ] && [ "$("$static" --protocol)" = "$("$supervise" --protocol)" ]; then
  supervise="$static"
fi
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root (sudo deploy/install.sh)" >&2; exit 1; }

install -m 0755 "$bin" /usr/local/bin/cronrun
# Beside cronrun, where the runner looks for it (without it, runs exec cronrun itself).
install -m 0755 "$supervise" /usr/local/bin/cronrun-supervise
id cronrun >/dev/null 2>&1 || useradd --system --home-dir /var/lib/cronrun --create-home --shell /usr/sbin/nologin cronrun
install -d -m 0755 /etc/cronrun
[ -f /etc/cronrun/cronrun.toml ] || install -m 0644 deploy/cronrun.toml /etc/cronrun/cronrun.toml
install -m 0644 deploy/cronrun-agent.service /etc/systemd/system/cronrun-agent.service
if command -v systemctl >/dev/null 2>&1; then
  systemctl daemon-reload
  echo "installed; edit /etc/cronrun/cronrun.toml, then: systemctl enable --now cronrun-agent"
else
  echo "installed; no systemd here: run /usr/local/bin/cronrun agent --config /etc/cronrun/cronrun.toml"
fi
