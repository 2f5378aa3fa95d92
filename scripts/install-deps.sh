#!/usr/bin/env bash
# Installs the system packages the tests and the benchmark use (Debian 12, as root).
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
[ -x /usr/lib/cni/static ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/host-device ] || need+=(containernetworking-plugins)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
