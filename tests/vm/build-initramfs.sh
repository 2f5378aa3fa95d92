#!/usr/bin/env bash
# Builds the emulated SR-IOV machine's initramfs for the kernel named by KERNEL (6.12 default, or 7):
# busybox, the modules (igb, igbvf, veth, Soft-RoCE and the RDMA userspace interfaces, vfio-pci), iproute2,
# the RDMA userspace (libibverbs with the rxe provider, ibv_* tools, perftest, rping) and iperf3,
# sriov-rdma, the Debian IPAM plugins, the plugins it is compared with (sriov-cni v2.10.0 as /opt/cni/bin/sriov,
# its main 1b7acc5b as sriov-main, rdma-cni v1.6.0 as rdma; scripts/anchors.sh fetches and checks them), and the
# scenario scripts as PID 1's work. Prints its path.
set -euo pipefail
trap 'echo "build-initramfs: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=${CACHE:-$top/.cache/vm}
kernel=${KERNEL:-6.12}
kroot=$cache/kernel-$kernel
[ -d "$kroot/lib/modules" ] || { echo "build-initramfs: no $kroot (run fetch.sh with KERNEL=$kernel)" >&2; exit 1; }
kver=$(ls "$kroot/lib/modules" | head -1)
out=$cache/initrd-$kernel.gz
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,run,etc,mods,opt/cni/bin,usr/sbin,usr/bin,var/lib}
ln -s /run "$root/var/run"
cp /bin/busybox "$root/bin/busybox"
for a in sh mount umount mkdir cat echo grep sed awk sleep ls rm insmod xz poweroff cut tr head tail wc seq ln \
         test printf sort diff basename readlink ping timeout kill dmesg ps find expr uname true false mv chmod \
         stat sync date uptime; do
  ln -sf busybox "$root/bin/$a"
done
. "$here/copylib.sh"
copy_bin /usr/sbin/ip /usr/sbin/ip
copy_bin /usr/bin/rdma /usr/sbin/rdma
copy_bin "$top/target/release/sriov-rdma" /opt/cni/bin/sriov-rdma
for p in static host-local host-device; do copy_bin /usr/lib/cni/$p /opt/cni/bin/$p; done
for b in cni-bench netns-floor; do # built with the fixtures feature, not by cargo build --release
  [ -x "$top/target/release/$b" ] || { echo "build-initramfs: no target/release/$b (make bench-bins)" >&2; exit 1; }
done
copy_bin "$top/target/release/cni-bench" /usr/sbin/cni-bench
copy_bin "$top/target/release/netns-floor" /usr/sbin/netns-floor
[ -x "$cache/cnitool" ] && copy_bin "$cache/cnitool" /usr/sbin/cnitool
# The anchors (static Go builds): the behaviour table of tests/vm/anchors.sh and the anchor rows of make bench-vm.
anchors=$("$top/scripts/anchors.sh" sriov-cni-v2.10.0 sriov-cni-1b7acc5b rdma-cni-v1.6.0 | tail -1) \
  || { echo "build-initramfs: scripts/anchors.sh could not provide sriov-cni and rdma-cni" >&2; exit 1; }
copy_bin "$anchors/sriov-cni-v2.10.0" /opt/cni/bin/sriov
copy_bin "$anchors/sriov-cni-1b7acc5b" /opt/cni/bin/sriov-main
copy_bin "$anchors/rdma-cni-v1.6.0" /opt/cni/bin/rdma

# RDMA userspace: libibverbs finds the rxe provider through /etc/libibverbs.d/rxe.driver and dlopens it by
# full path; glibc dlopens libgcc_s.so.1 when a thread exits (rping aborts without it).
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
for so in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do copy_bin "$so" "$so"; done
for t in ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw ib_send_lat rping iperf3; do
  copy_bin "$(command -v "$t")" "/usr/bin/$t"
done
copy_libgcc_s
# stdbuf: ibv_rc_pingpong's lines (its connection exchange) must survive the timeout that stops a blocked run.
copy_bin "$(command -v stdbuf)" /usr/bin/stdbuf
copy_bin /usr/libexec/coreutils/libstdbuf.so /usr/libexec/coreutils/libstdbuf.so
cp "$here/rdma-probe.sh" "$root/rdma-probe.sh"

# Modules: the modprobe --show-depends closure, in load order. crc32_generic first where it exists
# (6.12: rdma_rxe fails with ENOENT without it; 7.x has none). Modules this kernel lacks are skipped.
depmod -b "$kroot" "$kver" 2>&1 | { grep -v "could not open modules\.\(order\|builtin\)" || true; } >&2
i=0
for m in crc32_generic igb igbvf rdma_rxe rdma_ucm ib_uverbs veth vfio-pci; do
  modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1 == "insmod" {print $2}' \
    || echo "build-initramfs: kernel $kver has no module $m, skipped" >&2
done | awk '!seen[$0]++' | while read -r ko; do
  i=$((i+1)); name=$(printf '%02d-%s' "$i" "$(basename "$ko")"); name=${name%.xz}; name=${name%.zst}
  case "$ko" in
    *.xz) xz -dc "$ko" > "$root/mods/$name" ;;
    *.zst) zstd -qdc "$ko" > "$root/mods/$name" ;;
    *) cp "$ko" "$root/mods/$name" ;;
  esac
done
# A script that does not parse would end the machine's job early: refused here, before a boot.
for f in init.sh scenarios.sh demo.sh vmlib.sh rdmalib.sh rdma.sh lifecycle.sh doctor.sh anchors.sh rdma-probe.sh; do
  /bin/busybox sh -n "$here/$f" || { echo "build-initramfs: $here/$f does not parse (busybox sh -n)" >&2; exit 1; }
done
cp "$here/init.sh" "$root/init"; chmod +x "$root/init"
for f in scenarios.sh demo.sh vmlib.sh rdmalib.sh rdma.sh lifecycle.sh doctor.sh anchors.sh; do cp "$here/$f" "$root/$f"; done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
echo "$out"
