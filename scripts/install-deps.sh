#!/usr/bin/env bash
# Installs the system packages the tests, the demo and the benchmark use (Debian 12, as root).
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
[ -x /usr/lib/cni/static ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/host-device ] || need+=(containernetworking-plugins)
# A real container runtime for tests/podman.rs and tests/install.rs (and `make image`), busybox for an image.
command -v podman >/dev/null || need+=(podman)
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
# containerd's CRI for tests/cri.rs (it brings ctr and the runc shim), and protoc, which the k8s-cri
# dev-dependency runs at build time to generate the CRI client.
command -v containerd >/dev/null && command -v ctr >/dev/null || need+=(containerd)
command -v protoc >/dev/null || need+=(protobuf-compiler)
# strace: tests/orphans.rs reads the kernel's record of the plugin's fsync calls.
[ -x /usr/bin/strace ] || need+=(strace)
# The release binaries link glibc statically (.cargo/config.toml): its static libraries.
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || need+=(libc6-dev)
# The Kubernetes node test (tests/k8s, Go >= 1.26 from the machine builds its components): runc links
# libseccomp statically.
[ -e /usr/lib/x86_64-linux-gnu/libseccomp.a ] || need+=(libseccomp-dev)
command -v gcc >/dev/null || need+=(gcc)
# curl scrapes the device plugin's metrics on the Kubernetes node.
[ -x /usr/bin/curl ] || need+=(curl)
# conmon, CRI-O's container monitor, for node B of the Kubernetes test (K8S_NODE_B=crio: tests/k8s/build-node-crio.sh).
[ -x /usr/bin/conmon ] || need+=(conmon)
# Only with SRIOV_RDMA_MPI=1 (tests/k8s/e2e.sh sets it for collective.sh: a full run with node B, or K8S_ONLY
# naming it): Open MPI 4.1 + UCX 1.13 (mpicc, orterun, orted, their components), ucx_info and socat for the MPI image of the
# Kubernetes test's all-reduce across four pods (tests/k8s/build-images.sh).
if [ "${SRIOV_RDMA_MPI:-}" = 1 ]; then
  command -v mpicc >/dev/null && [ -x /usr/bin/orted ] || need+=(openmpi-bin libopenmpi-dev)
  [ -e /usr/lib/x86_64-linux-gnu/libucp.so.0 ] || need+=(libucx0)
  command -v ucx_info >/dev/null || need+=(ucx-utils)
  command -v socat >/dev/null || need+=(socat)
fi
# The PCI ID database sriovdp reads, in its image on the Kubernetes node (tests/k8s/build-images.sh).
[ -e /usr/share/misc/pci.ids ] || need+=(pci.ids)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install ${need[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The reference plugins that speak CNI 1.1.0 (GC) for tests/spec.rs, built from their Go module into a cache
# outside the clone.
"$(dirname "$0")/build-cni-plugins.sh" >/dev/null
