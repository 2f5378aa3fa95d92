#!/usr/bin/env bash
# Builds the node's container images locally (no registry is reachable) and saves each as an OCI archive that
# the node imports with `ctr -n k8s.io images import`:
#   localhost/k8s-pause:1          the sandbox image: a static pause of our own (images/pause.c)
#   localhost/sriov-rdma-pod:1     the pods' image: static busybox, iproute2, rdma-core's tools (ibv_devinfo,
#                                  rping, ib_write_bw, ...) with their libraries and the rxe provider
#   localhost/sriov-rdma-mpi:1     the pods' image plus Open MPI 4.1 (Debian's openmpi-bin, libopenmpi3: orterun,
#                                  orted, their components), PMIx, hwloc, libevent, UCX 1.13 (libucx0) with its
#                                  transport modules, ucx_info, socat, our allreduce (images/allreduce.c, built
#                                  with mpicc) and the test-only remote shell agent (images/mpi-rsh, mpi-rshd):
#                                  collective.sh
#   localhost/sriov-rdma:VERSION   the installer image `make image` built (must exist)
#   localhost/sriov-rdma:VERSION-upgrade   the same build, each binary with a marker appended (a static ELF runs
#                                  with trailing bytes): helm.sh upgrades to it and tells it apart by checksum
#   localhost/sriovdp:v3.11.0      the SR-IOV network device plugin v3.11.0 (static, from scripts/anchors.sh) with
#                                  the PCI ID database it reads, as its own image has them: migration.sh
#   localhost/sriov-cni:v2.10.0    sriov-cni v2.10.0 and rdma-cni v1.6.0 (scripts/anchors.sh) and a static busybox,
#                                  for a DaemonSet that copies them into the node's /opt/cni/bin as sriov-cni's
#                                  own DaemonSet does: migration.sh
#   localhost/whereabouts-ip-control-loop:v0.9.2   whereabouts' ip-control-loop alone (static, from the whereabouts
#                                  component of build-components.sh): cluster.sh's cluster-whereabouts-gc, node A only
#   build-images.sh OUTDIR
set -euo pipefail
trap 'echo "build-images: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${1:?usage: build-images.sh OUTDIR}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
die() { echo "build-images: $*" >&2; exit 1; }
mkdir -p "$out"
PODMAN=${PODMAN:-podman}
"$PODMAN" image exists "localhost/sriov-rdma:$version" || die "no image localhost/sriov-rdma:$version (make image)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# pause
root=$work/pause
mkdir -p "$root"
gcc -O2 -static -o "$root/pause" "$here/images/pause.c" || die "compiling images/pause.c failed (gcc, libc6-dev)"
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENTRYPOINT ["/pause"]' - localhost/k8s-pause:1 >/dev/null

# the pods' image
root=$work/pod
. "$top/tests/vm/copylib.sh"
mkdir -p "$root"/{bin,usr/bin,usr/sbin,etc/libibverbs.d,tmp,proc,sys,dev}
cp /bin/busybox "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done
rm -f "$root/bin/ip"
copy_bin /usr/sbin/ip /usr/sbin/ip
copy_bin /usr/bin/rdma /usr/sbin/rdma
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
for so in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do copy_bin "$so" "$so"; done
for t in ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw ib_send_lat rping; do
  copy_bin "$(command -v "$t")" "/usr/bin/$t"
done
copy_libgcc_s
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENV PATH=/bin:/usr/bin:/usr/sbin' - localhost/sriov-rdma-pod:1 >/dev/null

# The MPI image: the pods' root and Open MPI + UCX at the paths Debian's builds look for them (their components are
# found from the compiled-in prefix), each shared object with its libraries, and a loader cache for the multiarch
# directories.
# Only with SRIOV_RDMA_MPI=1 (collective.sh: e2e.sh sets it for a full run with node B, or K8S_ONLY naming it).
mpi_image=""
if [ "${SRIOV_RDMA_MPI:-}" = 1 ]; then
  command -v mpicc >/dev/null && [ -x /usr/bin/orted ] && [ -e /usr/lib/x86_64-linux-gnu/libucp.so.0 ] && command -v socat >/dev/null \
    && command -v ucx_info >/dev/null \
    || die "no Open MPI / UCX / socat (Debian packages openmpi-bin, libopenmpi-dev, libucx0, ucx-utils, socat: SRIOV_RDMA_MPI=1 scripts/install-deps.sh)"
  cp -a "$root" "$work/mpi"
  root=$work/mpi
  mpicc -O2 -Wall -o "$work/allreduce" "$here/images/allreduce.c" || die "compiling images/allreduce.c with mpicc failed"
  copy_bin "$work/allreduce" /usr/bin/allreduce
  for b in orterun orted; do copy_bin "/usr/bin/$b" "/usr/bin/$b"; done
  ln -s orterun "$root/usr/bin/mpirun"
  copy_bin "$(command -v socat)" /usr/bin/socat
  copy_bin "$(command -v ucx_info)" /usr/bin/ucx_info
  install -m 0755 "$here/images/mpi-rsh" "$here/images/mpi-rshd" "$root/usr/bin/"
  for so in /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so \
            /usr/lib/x86_64-linux-gnu/ucx/*.so.0; do
    copy_bin "$so" "$so"
  done
  mkdir -p "$root/etc/openmpi" "$root/usr/share" "$root/usr/lib/x86_64-linux-gnu/pmix2"
  cp /etc/openmpi/openmpi-mca-params.conf "$root/etc/openmpi/"
  cp -r /usr/share/openmpi "$root/usr/share/"
  cp -r /usr/lib/x86_64-linux-gnu/pmix2/share "$root/usr/lib/x86_64-linux-gnu/pmix2/"
  # orterun asks for the user's shell and home (getpwuid); PMIx and the rank's UCX for the same.
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"; printf 'root:x:0:\n' > "$root/etc/group"; mkdir -p "$root/root"
  mkdir -p "$root/etc/ld.so.conf.d"; cp /etc/ld.so.conf "$root/etc/"; cp /etc/ld.so.conf.d/*.conf "$root/etc/ld.so.conf.d/" 2>/dev/null || true
  ldconfig -r "$root" || die "ldconfig for the MPI image failed"
  tar -C "$root" -c . | "$PODMAN" import -q --change 'ENV PATH=/bin:/usr/bin:/usr/sbin' - localhost/sriov-rdma-mpi:1 >/dev/null
  mpi_image=localhost/sriov-rdma-mpi:1
fi

# The upgrade image; helm.sh appends the same marker to compute the checksum it expects on the node.
root=$work/upgrade
mkdir -p "$root"
for b in sriov-rdma sriov-rdma-device-plugin; do
  { cat "$top/target/release/$b"; printf '\nsriov-rdma upgrade marker\n'; } > "$root/$b" || die "no target/release/$b (make release)"
  chmod 755 "$root/$b"
done
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENV PATH=/' --change 'ENTRYPOINT ["/sriov-rdma", "install"]' \
  - "localhost/sriov-rdma:$version-upgrade" >/dev/null

# The anchors' stack (their binaries only through scripts/anchors.sh; which source it used goes to stderr, the run's log).
anchors=$("$top/scripts/anchors.sh" sriovdp-v3.11.0 sriov-cni-v2.10.0 rdma-cni-v1.6.0 | tail -1) || die "scripts/anchors.sh failed"
root=$work/sriovdp
mkdir -p "$root"/{usr/bin,usr/share/hwdata,tmp,var/log,etc/pcidp}
install -m 0755 "$anchors/sriovdp-v3.11.0" "$root/usr/bin/sriovdp"
pciids=""
for f in /usr/share/hwdata/pci.ids /usr/share/misc/pci.ids; do [ -f "$f" ] && { pciids=$f; break; }; done
[ -n "$pciids" ] || die "no pci.ids (Debian package pci.ids) for the sriovdp image"
cp "$pciids" "$root/usr/share/hwdata/pci.ids"
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENTRYPOINT ["/usr/bin/sriovdp"]' - localhost/sriovdp:v3.11.0 >/dev/null
root=$work/sriov-cni
mkdir -p "$root"/{bin,usr/bin,tmp}
cp /bin/busybox "$root/bin/busybox"
for a in sh cp mv rm sleep sha256sum; do ln -s busybox "$root/bin/$a"; done
install -m 0755 "$anchors/sriov-cni-v2.10.0" "$root/usr/bin/sriov"
install -m 0755 "$anchors/rdma-cni-v1.6.0" "$root/usr/bin/rdma"
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENV PATH=/bin:/usr/bin' - localhost/sriov-cni:v2.10.0 >/dev/null

# whereabouts' garbage collection; the tag is the component's version (its directory whereabouts-VERSION-gc).
wb=$("$here/build-components.sh" whereabouts | awk '$1 == "component" { print $2, $3 }')
wb_tag=${wb%% *}; wb_tag=${wb_tag#whereabouts-}; wb_tag=${wb_tag%-gc}
root=$work/wbgc
mkdir -p "$root"
install -m 0755 "${wb#* }/ip-control-loop" "$root/ip-control-loop" || die "no ip-control-loop in the whereabouts component (${wb#* })"
tar -C "$root" -c . | "$PODMAN" import -q --change 'ENTRYPOINT ["/ip-control-loop"]' - "localhost/whereabouts-ip-control-loop:$wb_tag" >/dev/null

for img in localhost/k8s-pause:1 localhost/sriov-rdma-pod:1 $mpi_image "localhost/sriov-rdma:$version" "localhost/sriov-rdma:$version-upgrade" \
           localhost/sriovdp:v3.11.0 localhost/sriov-cni:v2.10.0 "localhost/whereabouts-ip-control-loop:$wb_tag"; do
  f=$out/$(echo "${img#localhost/}" | tr ':/' '__').tar
  rm -f "$f"
  "$PODMAN" save -q --format oci-archive -o "$f" "$img" >/dev/null || die "podman save $img failed"
  echo "$f"
done
