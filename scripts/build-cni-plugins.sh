#!/usr/bin/env bash
# Builds the reference CNI plugins that speak CNI 1.1.0 (GC) from their published Go module, pinned, into a cache
# outside the clone; Debian's (v1.1.1) stop at 1.0.0. tests/spec.rs uses host-local from here.
#   build-cni-plugins.sh      prints the bin directory (last line)
set -euo pipefail
version=v1.10.0
cache=${SRIOV_RDMA_COMPONENTS:-/var/cache/sriov-rdma-cni/components}
bin=$cache/cni-plugins-$version/bin
if [ ! -x "$bin/host-local" ] || [ ! -x "$bin/static" ]; then
  command -v go >/dev/null || { echo "build-cni-plugins: go is not installed" >&2; exit 1; }
  mkdir -p "$bin"
  start=$(date +%s)
  for p in host-local static; do
    GOBIN=$bin CGO_ENABLED=0 GOFLAGS=-trimpath nice -n 10 go install "github.com/containernetworking/plugins/plugins/ipam/$p@$version" \
      || { echo "build-cni-plugins: building $p $version failed" >&2; exit 1; }
  done
  echo "build-cni-plugins: built host-local and static $version in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
