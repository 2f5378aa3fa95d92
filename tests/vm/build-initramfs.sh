#!/usr/bin/env bash
# Builds the emulated SR-IOV machine's initramfs: busybox, the igb/igbvf/veth modules, iproute2,
# sriov-rdma, the Debian IPAM plugins, and the scenario script as PID 1's work.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${CACHE:-$top/.cache/vm}
kroot=$cache/kernel
kver=$(ls "$kroot/lib/modules" | head -1)
out=$cache/initrd.gz
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,run,etc,mods,opt/cni/bin,usr/sbin,usr/bin,var/lib}
ln -s /run "$root/var/run"
cp /bin/busybox "$root/bin/busybox"
for a in sh mount mkdir cat echo grep sed awk sleep ls rm insmod xz poweroff cut tr head tail wc seq ln test printf sort diff basename readlink; do
  ln -sf busybox "$root/bin/$a"
done
copy_bin() { # copies a binary and its shared libraries
  local src=$1 dst=$2
  cp "$src" "$root$dst"
  { ldd "$src" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"
  done
}
copy_bin /usr/sbin/ip /usr/sbin/ip
copy_bin /usr/bin/rdma /usr/sbin/rdma
copy_bin "$top/target/release/sriov-rdma" /opt/cni/bin/sriov-rdma
for p in static host-local host-device; do copy_bin /usr/lib/cni/$p /opt/cni/bin/$p; done
copy_bin "$top/target/release/cni-bench" /usr/sbin/cni-bench
copy_bin "$top/target/release/netns-floor" /usr/sbin/netns-floor
[ -x "$cache/cnitool" ] && copy_bin "$cache/cnitool" /usr/sbin/cnitool
depmod -b "$kroot" "$kver"
i=0
# crc32_generic first: rdma_rxe fails with ENOENT without it.
for m in crc32_generic igb igbvf veth rdma_rxe vfio-pci; do
  modprobe -d "$kroot" -S "$kver" --show-depends $m | awk '{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  i=$((i+1)); name=$(printf '%02d-%s' "$i" "$(basename "$ko" .xz)")
  xz -dc "$ko" > "$root/mods/$name"
done
cp "$here/init.sh" "$root/init"; chmod +x "$root/init"
for f in scenarios.sh demo.sh vmlib.sh; do cp "$here/$f" "$root/$f"; done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
echo "$out"
