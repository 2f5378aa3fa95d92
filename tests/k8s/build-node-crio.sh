#!/usr/bin/env bash
# Builds what makes node B (K8S_NODE_B=crio, tests/k8s/e2e.sh) a CRI-O node, as one more cpio archive unpacked over
# build-node.sh's (whose kubelet, runc, crictl, Multus and reference plugins it uses as they are):
#   - crio and pinns v1.36.3 through scripts/anchors.sh: built from their Go module where the module proxy serves
#     it, else the release build in ../shared/prebuilt checked against its SHA256SUMS (anchors.sh says which);
#   - conmon, Debian's package, with its shared libraries;
#   - CRI-O's configuration (node/crio.conf: vfs storage, runc, conmon, pinns, no host-port mapping), the image
#     policy, node B's CNI configuration (node/00-multus-crio.conf) and crictl's;
#   - the images the node needs, in containers/storage under /var/lib/containers/storage (vfs), loaded with podman
#     from the images build-images.sh made (the sandbox image, the pods' image, the MPI image, the installer image).
#   build-node-crio.sh OUT.cpio          (after build-node.sh: the images must exist)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:?usage: build-node-crio.sh OUT.cpio}
die() { echo "build-node-crio: $*" >&2; exit 1; }
PODMAN=${PODMAN:-podman}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
command -v conmon >/dev/null || die "no conmon (Debian package conmon: scripts/install-deps.sh)"
anchors=$("$top/scripts/anchors.sh" crio-v1.36.3 pinns-v1.36.3 | tail -1) || die "scripts/anchors.sh crio pinns failed"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{usr/bin,etc/crio,etc/containers,etc/cni/net.d,var/lib/containers/storage}
install -m 0755 "$anchors/crio-v1.36.3" "$root/usr/bin/crio"
install -m 0755 "$anchors/pinns-v1.36.3" "$root/usr/bin/pinns"
. "$top/tests/vm/copylib.sh"
copy_bin "$(command -v conmon)" /usr/bin/conmon
cp "$here/node/crio.conf" "$root/etc/crio/crio.conf"
cp "$here/node/crio-policy.json" "$root/etc/containers/policy.json"
cp "$here/node/crio-registries.conf" "$root/etc/containers/registries.conf"
cp "$here/node/00-multus-crio.conf" "$root/etc/cni/net.d/00-multus.conf"
cp "$here/node/crictl-crio.yaml" "$root/etc/crictl.yaml"
# containers/storage as CRI-O reads it: podman writes it with its own root and the vfs driver (its run root is
# thrown away; CRI-O makes its own under /run).
store=(--root "$root/var/lib/containers/storage" --runroot "$root/.runroot" --storage-driver vfs)
# The MPI image only for collective.sh (SRIOV_RDMA_MPI=1, set by e2e.sh).
mpi_image=""; [ "${SRIOV_RDMA_MPI:-}" = 1 ] && mpi_image=localhost/sriov-rdma-mpi:1
for img in localhost/k8s-pause:1 localhost/sriov-rdma-pod:1 $mpi_image "localhost/sriov-rdma:$version"; do
  "$PODMAN" image exists "$img" || die "no image $img (tests/k8s/build-images.sh, make image)"
  "$PODMAN" save -q --format oci-archive -o "$root/.img.tar" "$img" >/dev/null || die "podman save $img failed"
  "$PODMAN" "${store[@]}" load -q -i "$root/.img.tar" >/dev/null || die "podman load of $img into vfs storage failed"
  rm -f "$root/.img.tar"
done
"$PODMAN" "${store[@]}" image exists "localhost/sriov-rdma:$version" || die "the vfs storage lacks localhost/sriov-rdma:$version"
rm -rf "$root/.runroot" "$root/var/lib/containers/storage/libpod"
(cd "$root" && find . | cpio -o -H newc -R 0:0 --quiet) > "$out.new" || die "cpio failed"
mv "$out.new" "$out"
echo "$out"
