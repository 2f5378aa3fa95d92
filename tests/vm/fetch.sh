#!/usr/bin/env bash
# Brings QEMU (bookworm-backports) and Debian's 6.12 backports kernel into the cache, once.
set -euo pipefail
cache=${CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache/vm}
mkdir -p "$cache"
if [ ! -f /etc/apt/sources.list.d/sriov-rdma-backports.sources ]; then
  cat > /etc/apt/sources.list.d/sriov-rdma-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports qemu-system-x86 >/dev/null
fi
for p in busybox-static kmod cpio xz-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
if [ ! -f "$cache/kernel/boot/vmlinuz" ]; then
  pkg=$(apt-cache depends -t bookworm-backports linux-image-amd64 | awk '/Depends: linux-image-6/{print $2; exit}')
  [ -n "$pkg" ] || { echo "fetch: no backports kernel package found" >&2; exit 1; }
  rm -rf "$cache/kernel" "$cache/deb"; mkdir -p "$cache/deb"
  (cd "$cache/deb" && apt-get download -t bookworm-backports "$pkg" >/dev/null)
  dpkg -x "$cache"/deb/*.deb "$cache/kernel"
  ln -sf "$(ls "$cache"/kernel/boot/vmlinuz-* | head -1)" "$cache/kernel/boot/vmlinuz"
fi
echo "$cache"
