#!/usr/bin/env bash
# Builds what the emulated machine needs beyond its initramfs to be a Kubernetes node, as a second
# (uncompressed) cpio archive the kernel unpacks over the first one: containerd, runc, the kubelet, crictl,
# Multus and the reference plugins for the cluster network, whereabouts, the images (build-images.sh), the node's
# configuration (node/), the modules the node adds (virtio_net for the management NIC, overlay for
# containerd's snapshots) and node.sh.
#   build-node.sh KERNEL-ROOT OUT.cpio       (components from build-components.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kroot=${1:?usage: build-node.sh KERNEL-ROOT OUT.cpio}
out=${2:?usage: build-node.sh KERNEL-ROOT OUT.cpio}
die() { echo "build-node: $*" >&2; exit 1; }
comp=$("$here/build-components.sh" | awk '$1 == "component" { print $2, $3 }')
dir() { echo "$comp" | awk -v n="$1" 'index($1, n "-") == 1 { print $2 }'; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{usr/bin,opt/cni/bin,images,etc/containerd,etc/cni/net.d,etc/kubernetes,k8s,mods,bin}
for b in kubelet; do cp "$(dir kubernetes)/$b" "$root/usr/bin/"; done
for b in containerd containerd-shim-runc-v2 ctr; do cp "$(dir containerd)/$b" "$root/usr/bin/"; done
cp "$(dir runc)/runc" "$(dir cri-tools)/crictl" "$root/usr/bin/"
cp "$(dir multus)/multus" "$(dir whereabouts)/whereabouts" "$root/opt/cni/bin/"
# The device plugin's binary on the node's PATH, as an operator installs it for `sriov-rdma doctor` to name the
# pods that hold VFs (it asks the kubelet's pod-resources API through it); the DaemonSet runs its own copy.
top=$(cd "$here/../.." && pwd)
cp "$top/target/release/sriov-rdma-device-plugin" "$root/usr/bin/" || die "no target/release/sriov-rdma-device-plugin (make release)"
# The stand-in GPU DRA driver dra.sh starts on the node (no GPU exists here; make k8s-e2e builds it), unless
# DRA_GPU=0.
if [ "${DRA_GPU:-1}" = 1 ]; then
  cp "$top/target/release/examples/standin-gpu" "$root/usr/bin/" \
    || die "no target/release/examples/standin-gpu (cargo build --release -p sriov-rdma-device-plugin --example standin-gpu)"
fi
# curl, to scrape the device plugin's metrics on the node as an operator would.
. "$top/tests/vm/copylib.sh"
copy_bin /usr/bin/curl /usr/bin/curl
# Debian's reference plugins (containernetworking-plugins) for the cluster network Multus delegates to.
for p in ptp host-local loopback; do cp /usr/lib/cni/$p "$root/opt/cni/bin/"; done
"$here/build-images.sh" "$root/images" >/dev/null
cp "$here/node/containerd.toml" "$root/etc/containerd/config.toml"
cp "$here/node/00-multus.conf" "$root/etc/cni/net.d/"
cp "$here/node/crictl.yaml" "$root/etc/crictl.yaml"
cp "$here/node.sh" "$root/k8s/node.sh"
# Applets the node uses beyond the initramfs's (switch_root and cp for init.sh; the kubelet runs mount, du, ...).
for a in cp switch_root du nsenter hostname pidof tee chroot env touch mknod df id nohup umount mount sha256sum \
         xargs; do
  ln -sf busybox "$root/bin/$a"
done
kver=$(ls "$kroot/lib/modules" | head -1)
i=90
for m in virtio_net overlay; do
  modprobe -d "$kroot" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  i=$((i + 1)); name=$(basename "$ko"); name=${name%.xz}; name=${name%.zst}
  case "$ko" in
    *.xz) xz -dc "$ko" > "$root/mods/$i-$name" ;;
    *.zst) zstd -qdc "$ko" > "$root/mods/$i-$name" ;;
    *) cp "$ko" "$root/mods/$i-$name" ;;
  esac
done
(cd "$root" && find . | cpio -o -H newc -R 0:0 --quiet) > "$out.new" || die "cpio failed"
mv "$out.new" "$out"
echo "$out"
