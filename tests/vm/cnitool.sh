#!/usr/bin/env bash
# Builds cnitool from Debian's source package (Debian ships libcni but not cnitool) into the cache, once.
set -euo pipefail
cache=${CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache/vm}
out=$cache/cnitool
[ -x "$out" ] && { echo "$out"; exit 0; }
if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/sriov-rdma-src.sources; then
  cat > /etc/apt/sources.list.d/sriov-rdma-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi
for p in golang-go golang-github-appc-cni-dev dpkg-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get source -qq --download-only golang-github-appc-cni >/dev/null 2>&1 && dpkg-source -q -x ./*.dsc src >/dev/null)
mkdir -p "$work/gopath/src/cnitool"
cp "$work"/src/cnitool/cnitool.go "$work/gopath/src/cnitool/"
(cd "$work/gopath/src/cnitool" && GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/cache" CGO_ENABLED=0 go build -o "$out" .)
echo "$out"
