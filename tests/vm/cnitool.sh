#!/usr/bin/env bash
# Builds cnitool from Debian's source package (Debian ships libcni but not cnitool) into the cache, once.
# The source and the Go toolchain come through fetch.sh's private apt state (its sources list has bookworm's
# deb-src line): nothing under /etc/apt is written.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHE:-$(cd "$here/../.." && pwd)/.cache/vm}
out=$cache/cnitool
[ -x "$out" ] && { echo "$out"; exit 0; }
papt() { CACHE=$cache "$here/fetch.sh" apt bookworm "$@"; }
missing=()
for p in golang-go golang-github-appc-cni-dev dpkg-dev; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive papt install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The _apt sandbox user cannot write into mktemp's directory: download as root, said explicitly.
(cd "$work" && papt source -qq --download-only -o APT::Sandbox::User=root golang-github-appc-cni >/dev/null \
   && dpkg-source -q -x ./*.dsc src >/dev/null 2>&1)  # (it cannot check the uploader signature: no debian-keyring; apt checked the hashes)
mkdir -p "$work/gopath/src/cnitool"
cp "$work"/src/cnitool/cnitool.go "$work/gopath/src/cnitool/"
(cd "$work/gopath/src/cnitool" && GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="$work/cache" CGO_ENABLED=0 go build -o "$out" .)
echo "$out"
