#!/usr/bin/env bash
# A real single-node Kubernetes cluster on the emulated SR-IOV machine, driven with kubectl only
# (make k8s-e2e, through tests/vm/run.sh k8s, which prepares the kernel and the initramfs):
#   - the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs on this host on
#     loopback, at native speed; certificates are made with openssl for this run only;
#   - the node (containerd, runc, the kubelet, Multus) runs inside QEMU, where the igb PFs and their VFs are;
#     it reaches the API server at 10.0.2.2 through a user-mode NIC (the host's loopback), the API server
#     reaches the kubelet through a port QEMU forwards from 127.0.0.1;
#   - the scenarios apply the NAD CRD, the project's deploy/ manifests and pods, and check what the kernel
#     (through a node shell pod) and the API server show.
# Every daemon started here is stopped by its PID at the end.
#   e2e.sh KERNEL-ROOT INITRD CACHE
#   K8S_ONLY="helm.sh ops.sh" e2e.sh ...   the common set-up (node ready, installer, device plugin registered,
#       resources, doctor), then only these scenario files, in this order; a file that uses another's pods or
#       functions is listed after it. Such a partial run ends with a partial verdict and exits 3 when all that ran
#       passed (1 when not): it is never a full pass.
#   Node B: a second node, sriov-b, in the same cluster: another QEMU guest with one igb PF (pfb0, 3 VFs) whose
#       runtime is CRI-O v1.36.3 (conmon, pinns, the same runc), tainted NoSchedule so that every scenario of node A
#       stays there, joined to node A by one Ethernet wire (a UDP datagram socket on 127.0.0.1 between the two
#       guests' PF hubs). It boots after node A's scenario files, before crio.sh (its own scenarios) and cluster.sh
#       (across the two nodes), then collective.sh (four pods on both). A full run has it; K8S_ONLY has it when it names
#       crio.sh, cluster.sh or collective.sh; K8S_NODE_B=none leaves it and those three files out of a full run.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
kdir=${1:?usage: e2e.sh KERNEL-ROOT INITRD CACHE}
initrd=${2:?}
cache=${3:?}
die() { echo "k8s-e2e: $*" >&2; exit 1; }
# The scenario files of a full run, in order (scenarios.sh includes rdma.sh, devices.sh, tenants.sh and ops.sh).
FILES="helm.sh migration.sh nri.sh scenarios.sh rdma.sh devices.sh tenants.sh ops.sh dra.sh draattach.sh"
NODE_B=${K8S_NODE_B:-}
case "$NODE_B" in "" | crio | none) ;; *) die "K8S_NODE_B=$NODE_B: the second node's runtime can be crio only (or none)" ;; esac
# Node B: its name, its PF's name and VF count differ from node A's (real clusters are not uniform); the taint keeps
# every pod that does not tolerate it (all of node A's scenarios) off it.
NODEB=sriov-b; PFB=pfb0; PFB_VFS=3; NODEB_TAINT=sriov-rdma.test/runtime=crio:NoSchedule
# Node B's files, last: crio.sh (its shell, its DaemonSet pod), crionri.sh (the NRI plugin on CRI-O), then cluster.sh
# (across the nodes) and collective.sh (an all-reduce across four pods on both nodes).
NODE_B_FILES="crio.sh crionri.sh cluster.sh collective.sh"
# Scenario files a full run leaves out, run only when K8S_ONLY names them: whereabouts.sh, whose pods are in the
# default namespace, which the node policy tenants.sh leaves on the node refuses (cluster.sh and collective.sh
# show whereabouts across both nodes in namespaces the policy admits).
OPT_FILES="whereabouts.sh"
ONLY=""
if [ -n "${K8S_ONLY:-}" ]; then
  for f in $K8S_ONLY; do
    case " $FILES $NODE_B_FILES $OPT_FILES " in *" $f "*) ;; *) die "K8S_ONLY: $f is not a scenario file (one of: $FILES $NODE_B_FILES $OPT_FILES)" ;; esac
    # scenarios.sh runs its own includes; cluster.sh, collective.sh and crionri.sh use crio.sh's shell on node B.
    case $f in
      scenarios.sh) ONLY="$ONLY scenarios.sh rdma.sh devices.sh tenants.sh ops.sh" ;;
      cluster.sh | collective.sh | crionri.sh) ONLY="$ONLY crio.sh $f" ;;
      *) ONLY="$ONLY $f" ;;
    esac
  done
  ONLY=$(echo $ONLY | tr ' ' '\n' | awk '!seen[$0]++' | tr '\n' ' '); ONLY=" ${ONLY% }"
  # Node B boots only for its files.
  case "$ONLY " in
    *" crio.sh "*) [ "$NODE_B" != none ] || die "K8S_NODE_B=none: K8S_ONLY names a file of node B ($NODE_B_FILES)"; NODE_B=crio ;;
    *) NODE_B="" ;;
  esac
else
  [ -n "$NODE_B" ] || NODE_B=crio
  [ "$NODE_B" = none ] && NODE_B=""
fi
[ -z "$NODE_B" ] || FILES="$FILES $NODE_B_FILES"
t0=$SECONDS
say() { echo "k8s-e2e [$((SECONDS - t0))s] $*"; }

comp=$("$here/build-components.sh") || die "building the components failed"
echo "$comp" | grep -v '^component ' | sed 's/^/  /'
dir() { echo "$comp" | awk -v n="$1" '$1 == "component" && index($2, n "-") == 1 { print $3 }'; }
K8S=$(dir kubernetes); ETCD=$(dir etcd); HELM=$(dir helm)/helm
# The MPI image (and the packages it is made of) only for collective.sh: a full run with node B, or K8S_ONLY naming it.
case " ${ONLY:-$FILES} " in
  *" collective.sh "*) export SRIOV_RDMA_MPI=1
    "$top/scripts/install-deps.sh" >/dev/null || die "installing Open MPI and UCX (SRIOV_RDMA_MPI=1 scripts/install-deps.sh) failed" ;;
  *) export SRIOV_RDMA_MPI="" ;;
esac
say "building the node's archive (components, images, configuration)"
node_cpio=$("$here/build-node.sh" "$kdir" "$cache/k8s-node.cpio") || die "building the node archive failed"
if [ -n "$NODE_B" ]; then
  say "building node B's layer (CRI-O, pinns, conmon, containers/storage)"
  nodeb_cpio=$("$here/build-node-crio.sh" "$cache/k8s-node-crio.cpio") || die "building node B's layer failed"
fi

work=$(mktemp -d /tmp/k8s-e2e.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

freeport() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
EP=$(freeport); EPP=$(freeport); AP=$(freeport); KP=$(freeport); CMP=$(freeport); SCP=$(freeport)
# The wire between the nodes: each guest's end is a UDP datagram socket on 127.0.0.1 sending to the other's.
freeudp() { python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
WIRE_A=(); WIRE_B=()
if [ -n "$NODE_B" ]; then
  KPB=$(freeport); WA=$(freeudp); WB=$(freeudp)
  # -netdev hubport,netdev=: the datagram socket is one more port of the guest's hub, beside its PFs.
  WIRE_A=(-netdev "dgram,id=wire,local.type=inet,local.host=127.0.0.1,local.port=$WA,remote.type=inet,remote.host=127.0.0.1,remote.port=$WB"
          -netdev hubport,id=hw,hubid=0,netdev=wire)
  WIRE_B=(-netdev "dgram,id=wire,local.type=inet,local.host=127.0.0.1,local.port=$WB,remote.type=inet,remote.host=127.0.0.1,remote.port=$WA"
          -netdev hubport,id=hw,hubid=0,netdev=wire)
fi

# Certificates: one CA; the API server's serving certificate (loopback for the host, 10.0.2.2 for the node);
# one client certificate in system:masters for every component and kubectl; the service-account key pair.
# ECDSA P-256 keys: the node does its side of every TLS handshake under emulation (Multus, a new process per
# CNI call, gives its GET of the pod 250 ms, handshake included), and P-256 signs far faster there than RSA-2048.
pki=$work/pki; mkdir -p "$pki"
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=k8s-e2e-ca" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.0.2.2,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > api.ext
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout api.key -out api.csr -subj "/CN=kube-apiserver" 2>/dev/null
  openssl x509 -req -in api.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out api.crt -days 2 -extfile api.ext 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' > admin.ext
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 2 -extfile admin.ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
) || die "making the certificates with openssl failed"
kubeconfig() { # kubeconfig SERVER-URL
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $1
    certificate-authority-data: $(base64 -w0 < "$pki/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 < "$pki/admin.crt")
    client-key-data: $(base64 -w0 < "$pki/admin.key")
contexts:
- name: e2e
  context: { cluster: e2e, user: admin }
current-context: e2e
EOF
}
kubeconfig "https://127.0.0.1:$AP" > "$work/host.kubeconfig"
k() { "$K8S/kubectl" --kubeconfig "$work/host.kubeconfig" "$@"; }

logs=$work/logs; mkdir -p "$logs"
keep_logs() { mkdir -p "$cache/k8s-logs"; cp -r "$logs/." "$cache/k8s-logs/" 2>/dev/null; }
start() { # start NAME COMMAND...
  local name=$1; shift
  "$@" > "$logs/$name.log" 2>&1 &
  pids+=($!)
}
say "control plane on 127.0.0.1: etcd :$EP, kube-apiserver :$AP"
start etcd "$ETCD/etcd" --name e2e --data-dir "$work/etcd" --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
  --listen-peer-urls "http://127.0.0.1:$EPP" --initial-advertise-peer-urls "http://127.0.0.1:$EPP" \
  --initial-cluster "e2e=http://127.0.0.1:$EPP"
api_args=(--etcd-servers "http://127.0.0.1:$EP" \
  --bind-address 127.0.0.1 --secure-port "$AP" --advertise-address 10.0.2.2 \
  --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --authorization-mode Node,RBAC \
  --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/api.crt" --tls-private-key-file "$pki/api.key" \
  --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
  --kubelet-preferred-address-types Hostname \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" --profiling=false)
if [ -z "$NODE_B" ]; then
  start kube-apiserver "$K8S/kube-apiserver" "${api_args[@]}"
else
  # The API server reaches each kubelet by its node name (Hostname), at the port QEMU forwards from 127.0.0.1:
  # node B's name resolves to 127.0.0.1 through an /etc/hosts of the API server's own (a private mount namespace:
  # the host's file is not touched).
  { cat /etc/hosts; echo "127.0.0.1 $NODEB"; } > "$work/hosts"
  start kube-apiserver unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$work/hosts" \
    "$K8S/kube-apiserver" "${api_args[@]}"
fi
for _ in $(seq 1 120); do k get --raw /readyz >/dev/null 2>&1 && break; sleep 1; done
k get --raw /readyz >/dev/null 2>&1 || { keep_logs; die "the API server is not ready after 120 s (logs in $cache/k8s-logs)"; }
start kube-controller-manager "$K8S/kube-controller-manager" --kubeconfig "$work/host.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$CMP" --service-account-private-key-file "$pki/sa.key" \
  --root-ca-file "$pki/ca.crt" --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --use-service-account-credentials=false --profiling=false
start kube-scheduler "$K8S/kube-scheduler" --kubeconfig "$work/host.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCP" --profiling=false
say "control plane ready ($("$K8S/kubectl" version --kubeconfig "$work/host.kubeconfig" 2>/dev/null | tr '\n' ' '))"

# The run's part of the node: the kubeconfig (API server at 10.0.2.2), the CA, the kubelet's configuration.
run=$work/run; mkdir -p "$run/k8s/run"
kubeconfig "https://10.0.2.2:$AP" > "$run/k8s/run/kubeconfig"
cp "$pki/ca.crt" "$run/k8s/run/ca.crt"
echo "KUBELET_PORT=$KP" > "$run/k8s/run/env"
kubelet_yaml() { # kubelet_yaml PORT RUNTIME-ENDPOINT
cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 10.0.2.15
port: $1
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: /k8s/run/ca.crt }
authorization: { mode: AlwaysAllow }
cgroupDriver: cgroupfs
containerRuntimeEndpoint: $2
failSwapOn: false
resolvConf: ""
# The root is a tmpfs: no local-storage accounting, no disk-pressure eviction, no image garbage collection.
localStorageCapacityIsolation: false
evictionHard: { memory.available: "1Mi" }
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# A GPU node's setting: a pod's devices from one NUMA node (the device plugin's hints decide).
topologyManagerPolicy: single-numa-node
# Pods (and so mounted ConfigMaps) are synced every 10 s instead of every minute: the reload scenarios wait less.
syncFrequency: 10s
EOF
}
kubelet_yaml "$KP" unix:///run/containerd/containerd.sock > "$run/k8s/run/kubelet.yaml"
(cd "$run" && find . | cpio -o -H newc -R 0:0 --quiet) > "$work/run.cpio"
# One initrd: the emulated machine's, the node's archive, this run's; each part starts 4-byte aligned (the
# kernel looks for the next cpio archive only there), so the parts are padded to 512 bytes.
for part in "$initrd" "$node_cpio" "$work/run.cpio"; do
  cat "$part"; s=$(stat -c %s "$part"); pad=$(( (512 - s % 512) % 512 )); head -c "$pad" /dev/zero
done > "$work/initrd"
if [ -n "$NODE_B" ]; then
  # Node B's part: the same kubeconfig and CA, its own kubelet configuration (CRI-O's socket, its port) and env.
  runb=$work/runb; mkdir -p "$runb/k8s/run"
  cp "$run/k8s/run/kubeconfig" "$run/k8s/run/ca.crt" "$runb/k8s/run/"
  printf 'KUBELET_PORT=%s\nNODE_NAME=%s\nRUNTIME=crio\nPF_NAME=%s\nPF_VFS=%s\nKUBELET_ARGS=--register-with-taints=%s\n' \
    "$KPB" "$NODEB" "$PFB" "$PFB_VFS" "$NODEB_TAINT" > "$runb/k8s/run/env"
  kubelet_yaml "$KPB" unix:///var/run/crio/crio.sock > "$runb/k8s/run/kubelet.yaml"
  (cd "$runb" && find . | cpio -o -H newc -R 0:0 --quiet) > "$work/runb.cpio"
  for part in "$initrd" "$node_cpio" "$nodeb_cpio" "$work/runb.cpio"; do
    cat "$part"; s=$(stat -c %s "$part"); pad=$(( (512 - s % 512) % 512 )); head -c "$pad" /dev/zero
  done > "$work/initrd-b"
fi

say "booting the node (QEMU igb PFs + a user-mode NIC, kernel $(ls "$kdir/lib/modules" | head -1), 2.5 GiB)"
console=$logs/console.log
qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 2560 -smp 2 -nographic -no-reboot \
  -machine q35 -global q35-pcihost.pci-hole64-size=0 -device intel-iommu,intremap=off \
  -netdev hubport,id=h0,hubid=0 -device igb,netdev=h0,addr=0x4 -netdev hubport,id=h1,hubid=0 -device igb,netdev=h1,addr=0x8 \
  "${WIRE_A[@]}" -netdev "user,id=mg,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:$KP-10.0.2.15:$KP" -device virtio-net-pci,netdev=mg,addr=0x10 \
  -kernel "$kdir/boot/vmlinuz" -initrd "$work/initrd" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init intel_iommu=on apparmor=0 sriov_rdma=k8s" \
  > "$console" 2>&1 < /dev/null &
qpid=$!; pids+=($qpid)
# The node's console lines as they come.
tail -n +1 -f --pid=$qpid "$console" | sed -u 's/\r$//' | grep -a --line-buffered -E '^(NODE|VMLOG|RESULT setup)' &
pids+=($!)
# Node B: one igb PF (its own MAC: QEMU would give it node A's first PF's) on its hub, at another PCI slot than node
# A's PFs (so its VFs' addresses differ too), the other end of the wire on the same hub, its own user-mode NIC (the
# same 10.0.2.0/24 as node A's: each guest's is private) forwarding its kubelet's port. A full run boots it after
# node A's files (nothing of it then weighs on their figures), a partial run at once.
boot_node_b() {
  say "booting node B ($NODEB: CRI-O, one igb PF with $PFB_VFS VFs as $PFB, the wire to node A, 2.5 GiB)"
  consoleb=$logs/console-b.log
  qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 2560 -smp 2 -nographic -no-reboot \
    -machine q35 -global q35-pcihost.pci-hole64-size=0 -device intel-iommu,intremap=off \
    -netdev hubport,id=h0,hubid=0 -device igb,netdev=h0,addr=0x6,mac=52:54:00:0b:00:10 "${WIRE_B[@]}" \
    -netdev "user,id=mg,net=10.0.2.0/24,hostfwd=tcp:127.0.0.1:$KPB-10.0.2.15:$KPB" -device virtio-net-pci,netdev=mg,addr=0x10 \
    -kernel "$kdir/boot/vmlinuz" -initrd "$work/initrd-b" \
    -append "console=ttyS0 quiet panic=-1 rdinit=/init intel_iommu=on apparmor=0 sriov_rdma=k8s" \
    > "$consoleb" 2>&1 < /dev/null &
  qpidb=$!; pids+=($qpidb)
  tail -n +1 -f --pid=$qpidb "$consoleb" | sed -u 's/\r$//' | grep -a --line-buffered -E '^(NODE|VMLOG)' | sed -u 's/^/node B: /' &
  pids+=($!)
}
[ -z "$NODE_B" ] || [ -z "$ONLY" ] || boot_node_b

PASS=0; FAIL=0; NAMES=""; FAILED=""; FAILLINES=""
# Each result says when it came ([seconds since the start]): a failure is placed in the logs by it.
pass() { PASS=$((PASS + 1)); NAMES="$NAMES${1%%(*}"$'\n'; echo "k8s-e2e [$((SECONDS - t0))s]: $1 PASS"; }
fail() {
  FAIL=$((FAIL + 1)); NAMES="$NAMES${1%%(*}"$'\n'; FAILED="$FAILED${1%%(*}"$'\n'
  FAILLINES="$FAILLINES  ${1%%(*}: $(printf '%s' "$2" | head -c 600)"$'\n'
  echo "k8s-e2e [$((SECONDS - t0))s]: $1 FAIL: $2"
}
# The scenario names each part prints (a result's name up to its first "("). finish() compares the names of the
# set-up and of the files run (all of FILES, or K8S_ONLY's) with the names printed: one missing (a scenario file
# that ended early, a branch that skipped it) or not on the list is a failure.
expected_of() {
  case $1 in
    setup) set -- node-ready installer device-plugin-registered doctor-no-vf-registered device-plugin-resources \
      doctor-vfs-registered ;;
    helm.sh) set -- helm-install helm-daemon-unprivileged helm-doctor-in-daemonset helm-pod-vf helm-upgrade-keeps-vf \
      helm-upgrade-new-plugin helm-uninstall helm-uninstall-then-delete kustomize-after-helm ;;
    migration.sh) set -- mig-anchors mig-sriovdp-resources mig-sriov-cni-pods mig-sriovdp-figures mig-switch-to-ours \
      mig-old-pods-kept mig-old-pods-deleted-by-sriov-cni mig-ours-pods mig-forward-no-leak mig-ours-figures \
      mig-ours-pods-more mig-switch-back mig-ours-pods-deleted-by-ours mig-sriov-cni-pods-again mig-no-leak mig-node-restored ;;
    scenarios.sh) set -- pods-running device-plugin-allocation-to-multus pf-rows doctor-kubelet-holders ping \
      ping-jumbo delete-restores runtime-restarts device-plugin-re-registered runtime-restarts-then-delete \
      force-delete crictl-stopp-rmp crictl-stopp-rmp-then-delete node-crash node-crash-then-delete bad-rate \
      bad-not-a-vf bad-steal bad-then-gone ;;
    rdma.sh) set -- rdma-rping rdma-write-bw ;;
    devices.sh) set -- device-plugin-rdma-chardevs device-plugin-vfio ;;
    tenants.sh) set -- tenant-isolation resourcequota-on-the-vf-resource tenants-then-delete ;;
    dra.sh) set -- dra-driver-registered dra-resourceslice dra-pod-cdi dra-claim-config dra-beside-device-plugin \
      dra-unprepare dra-bad-config-vlan dra-bad-config-policy dra-off-again
      # GPU alignment with the stand-in GPU driver (DRA_GPU=0 leaves it out).
      [ "${DRA_GPU:-1}" = 1 ] && set -- "$@" dra-gpu-standin-registered dra-gpu-alignment \
        dra-gpu-alignment-unsatisfiable dra-gpu-standin-gone ;;
    nri.sh) set -- nri-plugin-registered nri-nccl-env nri-own-variable-kept nri-no-record-no-env nri-off-again ;;
    crionri.sh) set -- crio-nri-plugin-registered crio-nri-nccl-env crio-nri-own-variable-kept crio-nri-no-record-no-env \
      crio-nri-off-again ;;
    draattach.sh) set -- dra-attach-run-pod-sandbox dra-attach-network-data dra-attach-restarts dra-attach-node-crash \
      dra-attach-stop-gives-back dra-attach-rdma dra-attach-rdma-gives-back dra-attach-off-again ;;
    ops.sh) set -- config-reload two-vf-pod-one-per-pf metrics-allocation metrics-health-change config-bad-edit-kept \
      config-restored rdma-cni-chain-refused policy-configmap-deleted-keeps-node-policy ;;
    whereabouts.sh) set -- whereabouts-pods whereabouts-release-reuse whereabouts-delete-restores ;;
    crio.sh) set -- crio-node-ready crio-daemonset-ready crio-allocatable crio-pod-vf crio-runtime-restart \
      crio-kubelet-restart crio-delete-restores crio-force-delete crio-stopp-rmp crio-stopp-rmp-then-delete crio-bad-config \
      crio-node-crash crio-node-crash-then-delete crio-device-plugin-rdma-chardevs crio-device-plugin-config-restored ;;
    cluster.sh) set -- cluster-nodes cluster-policy-refused cluster-whereabouts cluster-ping cluster-rdma-rping cluster-rdma-write-bw \
      cluster-vlan-isolation pod-start-per-runtime drain-evicts-and-restores uncordon-reschedules cluster-delete-restores \
      cluster-whereabouts-gc ;;
    collective.sh) set -- collective-pods collective-allreduce collective-delete-restores ;;
  esac
  printf '%s\n' "$@"
}
expected() {
  local f
  expected_of setup
  for f in ${ONLY:-$FILES}; do expected_of "$f"; done
}
finish() {
  keep_logs
  local missing extra
  missing=$(comm -23 <(expected | sort) <(printf '%s' "$NAMES" | sort) | tr '\n' ' ')
  extra=$(comm -13 <(expected | sort) <(printf '%s' "$NAMES" | sort) | tr '\n' ' ')
  [ -z "$missing" ] || { FAIL=$((FAIL + $(echo $missing | wc -w))); echo "k8s-e2e: FAIL these scenarios printed no result: $missing"; }
  # A name off the list that passed means the list is out of date (a FAIL is counted already).
  for n in $extra; do
    printf '%s' "$NAMES" | grep -qx "$n" && ! printf '%s' "$FAILED" | grep -qx "$n" && { FAIL=$((FAIL + 1)); echo "k8s-e2e: FAIL $n is not on the list of scenarios (tests/k8s/e2e.sh expected)"; }
  done
  echo "k8s-e2e: logs of this run in $cache/k8s-logs (console.log, the control plane's, the node's)"
  # The failures once more at the end, where a log cut to its tail (CI's) still shows them.
  [ -z "$FAILLINES" ] || printf 'k8s-e2e: the failed scenarios of this run:\n%s' "$FAILLINES"
  if [ -n "$ONLY" ]; then
    echo "k8s-e2e: PARTIAL run (K8S_ONLY=$K8S_ONLY: the set-up and$ONLY): $PASS passed, $FAIL failed; not a full verdict"
    [ "$FAIL" = 0 ] && [ "$PASS" -gt 0 ] && exit 3
    exit 1
  fi
  echo "k8s-e2e: $PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ] && [ "$PASS" -gt 0 ]
  exit
}
# include FILE: sources a scenario file of this directory; one that is missing or does not parse is a FAIL named
# after it, not a `.` that returns 1 (its scenarios are then also missing from the run).
include() {
  local e
  if e=$(bash -n "$here/$1" 2>&1); then . "$here/$1"; else fail "include-${1%.sh}" "$here/$1: $e"; fi
}

# --- node-ready: the kubelet registers and the node becomes Ready (containerd's CNI config loaded) ---
ready=""
for _ in $(seq 1 600); do
  kill -0 $qpid 2>/dev/null || break
  ready=$(k get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
  [ "$ready" = True ] && break
  sleep 1
done
if [ "$ready" != True ]; then
  fail node-ready "node not Ready after $((SECONDS - t0))s: $(k get node -o wide 2>&1 | tail -1)"
  tail -30 "$console" | sed 's/^/  console: /'
  finish
fi
pass "node-ready($(k get node localhost -o 'jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kernelVersion}'), $((SECONDS - t0))s after start)"

# A shell on the node (kubectl debug node/... would make the same pod).
if [ -z "$NODE_B" ]; then k apply -f "$here/manifests/node-debug.yaml" >/dev/null
# It tolerates every taint: with two nodes it is pinned to node A.
else sed 's/^spec:$/spec:\n  nodeName: localhost/' "$here/manifests/node-debug.yaml" | k apply -f - >/dev/null; fi
k -n kube-system wait --for=condition=Ready pod/node-debug --timeout=180s >/dev/null \
  || { fail node-debug "node shell pod not Ready: $(k -n kube-system describe pod node-debug | tail -5)"; finish; }
onnode() { k -n kube-system exec node-debug -- chroot /host /bin/sh -c "$1"; }
# rxe_init NETDEV RXE: a pod's initContainers block (privileged: rdma link add needs CAP_NET_ADMIN) that adds the
# Soft-RoCE device RXE on NETDEV and waits for its RoCE v2 GID of an IPv4 address (::ffff:a.b.c.d).
rxe_init() {
  cat <<EOF
  initContainers:
    - name: rxe
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sh", "-c", "rdma link add $2 type rxe netdev $1 && for i in \$(seq 1 100); do grep -qs ':ffff:' /sys/class/infiniband/$2/ports/1/gids/* && exit 0; sleep 0.1; done; exit 1"]
      securityContext: { privileged: true }
EOF
}
# daemon_pod NODE: the DaemonSet's pod on NODE, the newest (a replaced one may still be terminating)
daemon_pod() {
  k -n kube-system get pods -l app.kubernetes.io/name=sriov-rdma --field-selector "spec.nodeName=$1" \
    --sort-by=.metadata.creationTimestamp -o 'jsonpath={.items[-1:].metadata.name}' 2>/dev/null
}
wait_exec() { # waits until kubectl exec into the node shell works again (after containerd/kubelet restarts)
  for _ in $(seq 1 120); do onnode true >/dev/null 2>&1 && return 0; sleep 1; done; return 1
}
# crash_node SHELL RUNTIME SHIM NETNS THEN: a node crashes: the kubelet, the runtime RUNTIME, every SHIM (the
# runtime's per-container monitor) and the pods' processes SIGKILLed, the pods' netns (the glob NETNS) removed, so
# the kernel returns their VFs to the node; both daemons are held down until THEN (the node's shell, inside a
# double-quoted sh -c: \$ for $) has run, then the node's supervisor starts them again. From the node's root
# cgroup, detached: the node shell pod (SHELL: onnode or onb) dies with the others.
crash_node() {
  "$1" 'echo $$ > /sys/fs/cgroup/cgroup.procs; touch /run/hold-kubelet /run/hold-'"$2"'
    setsid sh -c "echo \$\$ > /sys/fs/cgroup/cgroup.procs
      kill -9 \$(pidof kubelet) \$(pidof '"$2"') 2>/dev/null; sleep 0.5
      kill -9 \$(pidof '"$3"') 2>/dev/null
      for c in /sys/fs/cgroup/kubepods*; do [ -e \$c/cgroup.kill ] && echo 1 > \$c/cgroup.kill; done
      for n in '"$4"'; do umount \$n; rm -f \$n; done
      '"$5"'; rm -f /run/hold-kubelet /run/hold-'"$2"'" > /dev/null 2>&1 < /dev/null &' >/dev/null 2>&1
}
# stopp_rmp SHELL POD VF WANT: POD's ready sandbox stopped and removed with crictl through SHELL (onnode, onb).
# Read as StopPodSandbox returns (its CNI DEL is done then): VF's netdev on the node and whether VF's record still
# names the old sandbox. Then waits (120 s) for the kubelet's new sandbox and the pod Ready. The kubelet may start
# that sandbox, whose ADD takes the same VF again, before the read on the node runs (seen on node B): the VF's record
# then names the new sandbox. Sets SP_SB, SP_SB2, SP_OLDREC (the old sandbox's record left: 0 or 1), SP_NAME (the
# VF's netdev name on the node, WANT when it is in the new sandbox) and SP_BACK (which of the two); returns 0 when no
# record of the old sandbox was left, the VF was WANT and a new sandbox came.
stopp_rmp() {
  local out
  SP_SB=$("$1" "crictl pods -q --name $2 --state ready" 2>/dev/null)
  out=$("$1" "crictl stopp $SP_SB >/dev/null && { echo name=\$(ls /sys/bus/pci/devices/$3/net 2>/dev/null); grep -qs $SP_SB /var/lib/cni/sriov-rdma/$3.json && echo old-record; }; crictl rmp $SP_SB >/dev/null" 2>/dev/null)
  SP_NAME=$(echo "$out" | sed -n 's/^name=//p')
  SP_OLDREC=$(echo "$out" | grep -c old-record)
  SP_SB2=""
  for _ in $(seq 1 120); do
    SP_SB2=$("$1" "crictl pods -q --name $2 --state ready" 2>/dev/null); [ -n "$SP_SB2" ] && [ "$SP_SB2" != "$SP_SB" ] && break; sleep 1
  done
  k wait --for=condition=Ready "pod/$2" --timeout=120s >/dev/null 2>&1
  SP_BACK="back as $SP_NAME"
  if [ -z "$SP_NAME" ] && [ -n "$SP_SB2" ] && "$1" "grep -qs $SP_SB2 /var/lib/cni/sriov-rdma/$3.json" >/dev/null 2>&1; then
    SP_NAME=$4; SP_BACK="already in the kubelet's new sandbox"
  fi
  [ "$SP_OLDREC" = 0 ] && [ -n "$SP_NAME" ] && [ "$SP_NAME" = "$4" ] && [ -n "$SP_SB2" ] && [ "$SP_SB2" != "$SP_SB" ]
}
# crash_node_a: node A (containerd, its shims, the CNI's netns under /run/netns) crashes, its daemons held down 3 s;
# returns once the node is Ready and its shell answers.
crash_node_a() {
  crash_node onnode containerd containerd-shim-runc-v2 '/run/netns/cni-*' 'sleep 3'
  sleep 10; node_ready; wait_exec
}
node_ready() { # waits until node A is Ready (after a kubelet restart or a node crash)
  for _ in $(seq 1 180); do
    [ "$(k get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && return 0
    sleep 1
  done; return 1
}
PFS=$(onnode 'for n in /sys/class/net/*; do [ "$(basename "$(readlink $n/device/driver 2>/dev/null)")" = igb ] && basename $n; done' 2>/dev/null | tr '\n' ' ')
set -- $PFS; PF1=${1:-}; PF2=${2:-}
[ -n "$PF1" ] && [ -n "$PF2" ] || { fail node-pfs "two igb PFs expected on the node, found '$PFS'"; finish; }
vf_pci() { onnode "basename \$(readlink /sys/class/net/$1/device/virtfn$2)"; }
# What a DEL must give back: the PF rows, every VF's netdev name, MAC and MTU, this plugin's records.
node_snap() {
  onnode "/usr/sbin/ip link show $PF1 | grep ' vf '; /usr/sbin/ip link show $PF2 | grep ' vf '
        for v in /sys/class/net/$PF1/device/virtfn* /sys/class/net/$PF2/device/virtfn*; do
          p=\$(basename \$(readlink \$v)); n=\$(ls /sys/bus/pci/devices/\$p/net 2>/dev/null)
          echo \"\$p \$n \$(cat /sys/class/net/\$n/address 2>/dev/null) \$(cat /sys/class/net/\$n/mtu 2>/dev/null)\"; done
        echo records: \$(ls /var/lib/cni/sriov-rdma 2>/dev/null | grep -v '[.]lock\$' | tr '\n' ' ')" 2>&1
}
# config_json: the device plugin's config as the ConfigMap has it; set_config JSON: patched in place (labels and other
# keys kept). The kubelet swaps the daemons' mounted file (syncFrequency 10 s) and each daemon reloads it.
config_json() { k -n kube-system get configmap sriov-rdma-config -o 'jsonpath={.data.config\.json}'; }
set_config() {
  k -n kube-system patch configmap sriov-rdma-config --type merge \
    -p "$(python3 -c 'import json, sys; print(json.dumps({"data": {"config.json": sys.argv[1]}}))' "$1")" >/dev/null
}
# placement: a pod spec's lines that put it on node PODNODE when that is set (node B's runtime taint tolerated, not
# cordon's), none when not
placement() {
  [ -z "${PODNODE:-}" ] || printf '  nodeSelector: { kubernetes.io/hostname: %s }\n  tolerations: [{ key: %s, operator: Exists, effect: NoSchedule }]\n' "$PODNODE" "${NODEB_TAINT%%=*}"
}
pod_top() { # pod_top NAME NAMESPACE NETWORKS: a Pod's lines down to its worker container's command (on node PODNODE
            # when set), net1 from the network selection elements NETWORKS; PODIMAGE and PODCMD (a JSON array)
            # replace its image and command
  local cmd=${PODCMD:-'["sleep", "1000000"]'}
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $2
  annotations:
    k8s.v1.cni.cncf.io/networks: '$3'
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
$(placement)
  containers:
    - name: worker
      image: ${PODIMAGE:-localhost/sriov-rdma-pod:1}
      imagePullPolicy: Never
      command: $cmd
EOF
}
vf_pod() { # vf_pod NAME NAD RESOURCE: an unprivileged pod in default asking for one VF of RESOURCE, net1 on NAD
           # (on node PODNODE when set)
  pod_top "$1" default "[{\"name\":\"$2\",\"interface\":\"net1\"}]"
  printf '      resources:\n        requests: { "%s": "1" }\n        limits: { "%s": "1" }\n' "$3" "$3"
}
pod() { # pod NAME NAD RESOURCE|- [DEVICE-ID]: a worker like deploy/pod-nccl.yaml requesting one VF of RESOURCE
        # (- requests none: the pod then names DEVICE-ID itself, as a tenant could), privileged (it makes its own
        # Soft-RoCE device); in namespace PODNS (default: default), on node PODNODE when set
  local net="{\"name\":\"$2\",\"interface\":\"net1\"${4:+,\"deviceID\":\"$4\"}}"
  pod_top "$1" "${PODNS:-default}" "[$net]"
  cat <<EOF
      env:
        - { name: NCCL_SOCKET_IFNAME, value: net1 }
        - { name: NCCL_IB_ROCE_VERSION_NUM, value: "2" }
      securityContext:
        privileged: true
$([ "$3" = - ] || printf '      resources:\n        requests: { "%s": "1" }\n        limits: { "%s": "1" }\n' "$3" "$3")
      volumeMounts:
        - { name: infiniband, mountPath: /dev/infiniband }
  volumes:
    - name: infiniband
      hostPath: { path: /dev/infiniband, type: Directory }
EOF
}
xin() { k -n "$1" exec "$2" -- sh -c "$3"; } # xin NS POD CMD
# xaddr NS POD: the pod's net1 IPv4 address
xaddr() { xin "$1" "$2" "ip -4 -o addr show net1" 2>/dev/null | awk '{ print $4 }' | cut -d/ -f1; }
# carrier_wait NS POD [IF]: waits (20 s) until IF (net1) in POD has carrier, which may come a moment after the pod
# is Ready; prints the last value read (1 when it came)
carrier_wait() {
  local c=""
  for _ in $(seq 1 100); do c=$(k -n "$1" exec "$2" -- cat "/sys/class/net/${3:-net1}/carrier" 2>/dev/null); [ "$c" = 1 ] && break; sleep 0.2; done
  echo "$c"
}
# up_in NS POD: Ready and net1 with carrier (up to 240 s)
up_in() {
  k -n "$1" wait --for=condition=Ready "pod/$2" --timeout=240s >/dev/null 2>&1 && [ "$(carrier_wait "$1" "$2")" = 1 ]
}
# two_nodes_why: what keeps a file of both nodes (cluster.sh, collective.sh) from running: a node not Ready, no
# shell on node B (crio.sh's); nothing when both are there
two_nodes_why() {
  local n
  for n in localhost "$NODEB"; do
    [ "$(k get node "$n" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] || printf ' node %s not Ready;' "$n"
  done
  [ "$(k -n kube-system get pod node-debug-b -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] \
    || printf ' no shell on %s (crio.sh);' "$NODEB"
}
# whereabouts v0.9.2 (cluster-wide IPAM; built from its Go module into the node's /opt/cni/bin):
# wb_install SHELL applies its CRDs from that module and writes its node configuration
# (/etc/cni/net.d/whereabouts.d/whereabouts.conf, which its install DaemonSet would write: the node's kubeconfig)
# through SHELL (onnode, or onb for node B); prints what failed, nothing when all went well.
WB_DIR=$(dir whereabouts)
wb_install() {
  local crd err=""
  [ -n "$WB_DIR" ] && [ -x "$WB_DIR/whereabouts" ] || err="no whereabouts component ($WB_DIR);"
  for crd in "$WB_DIR"/crds/*.yaml; do k apply -f "$crd" >/dev/null 2>&1 || err="$err kubectl apply -f $crd failed;"; done
  k wait --for=condition=Established crd/ippools.whereabouts.cni.cncf.io \
    crd/overlappingrangeipreservations.whereabouts.cni.cncf.io --timeout=60s >/dev/null 2>&1 \
    || err="$err the whereabouts CRDs are not established;"
  "$1" 'mkdir -p /etc/cni/net.d/whereabouts.d && printf "%s\n" "{\"datastore\":\"kubernetes\",\"kubernetes\":{\"kubeconfig\":\"/k8s/run/kubeconfig\"},\"log_file\":\"/var/log/whereabouts.log\",\"log_level\":\"debug\"}" > /etc/cni/net.d/whereabouts.d/whereabouts.conf && test -x /opt/cni/bin/whereabouts' \
    > "$work/wb-node-$1" 2>&1 || err="$err whereabouts on the node ($1): $(tr '\n' ' ' < "$work/wb-node-$1");"
  printf '%s' "$err"
}
# wb_allocs POOL: the whereabouts IPPool kube-system/POOL's allocations (POOL: ADDRESS-PREFIXLEN, as whereabouts
# names it) as sorted lines "ADDRESS PODREF"
wb_allocs() {
  k -n kube-system get ippools.whereabouts.cni.cncf.io "$1" -o json 2>/dev/null \
    | python3 -c 'import ipaddress, json, sys
a = json.load(sys.stdin)["spec"].get("allocations") or {}
for o, v in a.items(): print(ipaddress.ip_address(sys.argv[1].split("-")[0]) + int(o), v.get("podref", ""))' "$1" 2>/dev/null | sort
}
# wb_allocs_are POOL LINE...: the pool holds exactly these (waits up to 30 s); sets WB_GOT
wb_allocs_are() {
  local pool=$1 want
  shift
  want=$(printf '%s\n' "$@" | grep . | sort)
  for _ in $(seq 1 30); do WB_GOT=$(wb_allocs "$pool"); [ "$WB_GOT" = "$want" ] && return 0; sleep 1; done
  return 1
}
# gid_at SHELL NS POD ADDR: the GID index doctor reports on the pod's node for net1 (ADDR) of the pod's netns
# (the container's first process, found with crictl on that node: containerd and CRI-O both give its pid)
gid_at() {
  local pid out
  pid=$("$1" "crictl inspect -o go-template --template '{{.info.pid}}' \$(crictl ps -q --name worker --label io.kubernetes.pod.name=$3 --label io.kubernetes.pod.namespace=$2)" 2>/dev/null)
  for _ in $(seq 1 20); do
    out=$("$1" "/opt/cni/bin/sriov-rdma doctor --netns /proc/$pid/ns/net" 2>&1)
    echo "$out" | sed -n "s/.*net1 ($4): .*NCCL_IB_GID_INDEX=\([0-9]*\).*/\1/p" | grep . && return 0
    sleep 0.5
  done
  echo "doctor for $2/$3 (pid ${pid:-none}): $(echo "$out" | tail -3 | tr '\n' ' ')" >&2
  return 1
}
# proc_ms PID: the span of one plugin process in the plugin's log on stdin, from its first to its last line
# (timestamps in seconds, the PID in the second field): "N ms"
proc_ms() { awk -v p="$1" '$2 == p { if (!f) f = $1; l = $1 } END { printf "%.0f ms", (l - f) * 1000 }'; }
# rpair NAME SERVER-NS SERVER CLIENT-NS CLIENT SERVER-CMD CLIENT-CMD: SERVER-CMD in pod SERVER (its output in
# $work/NAME.server), then CLIENT-CMD in pod CLIENT once the server's process runs in its pod (up to 30 s: a
# kubectl exec into an emulated node may take longer than the 2 s it once got) and a second more to listen; sets
# OUT and RC of the client
rpair() {
  k -n "$2" exec "$3" -- timeout 60 $6 > "$work/$1.server" 2>&1 &
  local spid=$! prog=${6%% *}
  for _ in $(seq 1 60); do
    k -n "$2" exec "$3" -- sh -c "grep -qsx '${prog##*/}' /proc/[0-9]*/comm" >/dev/null 2>&1 && break
    kill -0 $spid 2>/dev/null || break; sleep 0.5
  done
  sleep 1
  OUT=$(k -n "$4" exec "$5" -- timeout 45 $7 2>&1); RC=$?
  for _ in $(seq 1 50); do kill -0 $spid 2>/dev/null || break; sleep 0.2; done
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
}
# rping_done OUT RC N SERVER-FILE: rping made its N round trips, counted on both sides. Debian bookworm's rping
# (rdma-core 44) may exit 255 after the last one: its CM thread calls rdma_get_cm_event once more on the channel
# the main thread has already destroyed ("rdma_get_cm_event: Bad file descriptor"), fixed upstream later
# (linux-rdma/rdma-core#1622). That exit, and only after all N round trips on both sides, counts as done;
# RPING_NOTE says so for the PASS line.
rping_done() {
  local c s errs
  c=$(printf '%s\n' "$1" | grep -c 'ping data')
  s=$(grep -c 'ping data' "$4" 2>/dev/null)
  RPING_NOTE=""
  [ "$c" = "$3" ] && [ "$s" = "$3" ] || return 1
  [ "$2" = 0 ] && return 0
  errs=$(printf '%s\n' "$1" | grep -v 'ping data' | grep -v '^command terminated with exit code 255$' | grep .)
  [ "$2" = 255 ] && [ "$errs" = "rdma_get_cm_event: Bad file descriptor" ] || return 1
  RPING_NOTE="; rping then exited 255 on its destroyed CM channel, rdma-core#1622"
}
# mknad NS NAME RESOURCE CONFIG: a NAD of this plugin for RESOURCE; CONFIG is the rest of its config's JSON object
# (its keys after name and type, the log's settings added)
mknad() {
  cat <<EOT
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: $2
  namespace: $1
  annotations:
    k8s.v1.cni.cncf.io/resourceName: $3
spec:
  config: '{"cniVersion":"1.0.0","name":"$2","type":"sriov-rdma",$4,"logLevel":"debug","logFile":"/var/log/sriov-rdma/sriov-rdma.log"}'
EOT
}
devpod() { # devpod NAME RESOURCE [TEMPLATE]: an unprivileged pod in $PODNS (default), no network, taking one
           # device of RESOURCE; with TEMPLATE (RESOURCE -) it claims one VF through that ResourceClaimTemplate; on
           # node PODNODE when set
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: { name: $1, namespace: ${PODNS:-default} }
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
$(placement)
  containers:
    - name: worker
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sleep", "1000000"]
      securityContext: { privileged: false, allowPrivilegeEscalation: false }
      resources:
EOF
  if [ -n "${3:-}" ]; then
    printf '        claims: [{ name: vf }]\n  resourceClaims:\n    - name: vf\n      resourceClaimTemplateName: %s\n' "$3"
  else
    printf '        requests: { "%s": "1" }\n        limits: { "%s": "1" }\n' "$2" "$2"
  fi
}
say "node PFs $PF1 $PF2"

# --- installer: the project's DaemonSet as shipped puts the plugin into the node's /opt/cni/bin ---
k label node localhost feature.node.kubernetes.io/network-sriov.capable=true --overwrite >/dev/null
k apply -f "$here/manifests/nad-crd.yaml" >/dev/null || fail nad-crd "kubectl apply of the NAD CRD failed"
k wait --for=condition=Established crd/network-attachment-definitions.k8s.cni.cncf.io --timeout=60s >/dev/null
# The one DaemonSet deploy/ ships: the installer as init container, the device plugin as the container.
k apply -f "$top/deploy/sriov-rdma.yaml" >/dev/null
ok=""
for _ in $(seq 1 180); do
  [ "$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.status.numberReady}' 2>/dev/null)" = 1 ] \
    && onnode 'test -x /opt/cni/bin/sriov-rdma' 2>/dev/null && { ok=1; break; }
  sleep 1
done
want=$(sha256sum "$top/target/release/sriov-rdma" | cut -d' ' -f1)
got=$(onnode 'sha256sum /opt/cni/bin/sriov-rdma' 2>/dev/null | cut -d' ' -f1)
if [ -n "$ok" ] && [ "$got" = "$want" ]; then pass "installer(DaemonSet Ready, /opt/cni/bin/sriov-rdma = target/release/sriov-rdma)"
else fail installer "ready=${ok:-no} sha256 node=${got:-none} built=$want: $(k -n kube-system get pods -o wide 2>&1 | tail -3)"; fi

# The device plugin registered its resource with the real kubelet: the API server shows it in the node's capacity
# (0 here: the shipped selectors ask for ConnectX VFs with an RDMA device, which the emulated igb has not).
cap() { k get node localhost -o "jsonpath={.status.$1.${2//./\\.}}" 2>/dev/null; }
# What the set-up's kustomize overlay offers, and the node's allocatable of those resources in the same form.
OVERLAY_ALLOC="rxe=2 vfio=1 pf1=4 pf2=2"
overlay_alloc() { echo "rxe=$(cap allocatable sriov-rdma/rxe) vfio=$(cap allocatable sriov-rdma/vfio) pf1=$(cap allocatable sriov-rdma/pf1) pf2=$(cap allocatable sriov-rdma/pf2)"; }
# wait_overlay_alloc SECONDS: until the node's allocatable is the overlay's (then 0) or SECONDS pass; sets got.
wait_overlay_alloc() {
  for _ in $(seq 1 "$1"); do got=$(overlay_alloc); [ "$got" = "$OVERLAY_ALLOC" ] && return 0; sleep 1; done
  return 1
}
reg=""
for _ in $(seq 1 60); do reg=$(cap capacity rdma/hca); [ -n "$reg" ] && break; sleep 1; done
if [ -n "$reg" ]; then pass "device-plugin-registered(node capacity rdma/hca=$reg)"
else fail device-plugin-registered "no rdma/hca in the node's capacity: $(k get node localhost -o 'jsonpath={.status.capacity}' 2>&1)"; fi
# doctor on the node, against the real kubelet's checkpoint: the resource offers none of this node's VFs.
out=$(onnode '/opt/cni/bin/sriov-rdma doctor' 2>&1); rc=$?
if [ "$rc" = 1 ] && echo "$out" | grep -q 'no resource the kubelet registered lists a VF of this node'; then
  pass "doctor-no-vf-registered(real kubelet: '$(echo "$out" | grep -m1 -o 'no resource the kubelet registered[^:]*')', exit 1)"
else fail doctor-no-vf-registered "rc=$rc: $(echo "$out" | grep -i -m3 'kubelet\|regist' | tr '\n' ' ')"; fi

# The operator's step for this node: the device plugin's config in an overlay of deploy/ (kubectl apply -k),
# then a rollout restart. The resources, each VF in the first that selects it:
#   sriov-rdma/rxe   PF1's VFs 5 and 6, each with a Soft-RoCE device made on the node on its netdev, which stays on
#                    the node (no NAD moves it): the stand-in for a VF's own RDMA function, which an igb VF has
#                    not. Soft-RoCE does not survive its netdev's move into a pod, so this is how a pod is given
#                    an RDMA device that exists before it starts;
#   sriov-rdma/vfio  PF1's VF 4, bound to vfio-pci here;
#   sriov-rdma/pf1   the rest of PF1's VFs (igbvf; no RDMA device required: those pods make theirs), the
#                    resourceName of the NAD sriov-rdma-test;
#   sriov-rdma/pf2   PF2's VFs, NAD sriov-rdma-test-b.
RXE1=$(vf_pci "$PF1" 5); RXE2=$(vf_pci "$PF1" 6); VFIO=$(vf_pci "$PF1" 4)
onnode "for i in 5 6; do n=\$(ls /sys/class/net/$PF1/device/virtfn\$i/net); /usr/sbin/ip link set \$n up
          /usr/sbin/rdma link add rxe_vf\$i type rxe netdev \$n; done
        q=$VFIO; echo \$q > /sys/bus/pci/devices/\$q/driver/unbind; echo vfio-pci > /sys/bus/pci/devices/\$q/driver_override
        echo \$q > /sys/bus/pci/drivers_probe" >/dev/null 2>&1
say "node: Soft-RoCE rxe_vf5 on $RXE1, rxe_vf6 on $RXE2; $VFIO bound to $(onnode "basename \$(readlink /sys/bus/pci/devices/$VFIO/driver)" 2>/dev/null)"
cp -r "$top/deploy" "$work/deploy"; mkdir -p "$work/overlay"
# With node B, the one config serves both nodes: node B's PF is one more resource (each node offers what it has).
PFB_RESOURCE=""
[ -z "$NODE_B" ] || PFB_RESOURCE=$',\n            {"name": "sriov-rdma/pfb", "selectors": {"pfNames": ["'"$PFB"$'"], "drivers": ["igbvf"]}, "requireRdma": false}'
cat > "$work/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../deploy]
patches:
  - target: { kind: ConfigMap, name: sriov-rdma-config }
    patch: |
      - op: replace
        path: /data/resourceName
        value: sriov-rdma/pf1
      - op: replace
        path: /data/config.json
        value: |
          {"resources": [
            {"name": "sriov-rdma/rxe", "selectors": {"pciAddresses": ["$RXE1", "$RXE2"]}},
            {"name": "sriov-rdma/vfio", "selectors": {"pciAddresses": ["$VFIO"], "drivers": ["vfio-pci"]}},
            {"selectors": {"pfNames": ["$PF1"], "drivers": ["igbvf"]}, "requireRdma": false},
            {"name": "sriov-rdma/pf2", "selectors": {"pfNames": ["$PF2"], "drivers": ["igbvf"]}, "requireRdma": false}$PFB_RESOURCE
          ]}
EOF
if ! { k apply -k "$work/overlay" >/dev/null && k -n kube-system rollout restart ds/sriov-rdma >/dev/null \
       && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; }; then
  fail device-plugin-config "kubectl apply -k / rollout failed: $(k -n kube-system get pods 2>&1 | tail -3 | tr '\n' ' ')"
fi
want=$OVERLAY_ALLOC
wait_overlay_alloc 60
if [ "$got" = "$want" ]; then pass "device-plugin-resources(node allocatable: $got)"
else fail device-plugin-resources "want $want, node allocatable: $got; $(k -n kube-system logs ds/sriov-rdma 2>&1 | tail -5 | tr '\n' ' ')"; fi
# doctor must run, exit 0 (nothing blocks ADD now) and count the node's VFs in each resource as the kubelet has them
# (its checkpoint, which the kubelet may write a moment after the node's allocatable shows a resource: up to 15 s).
for _ in $(seq 1 15); do
  out=$(onnode '/opt/cni/bin/sriov-rdma doctor' 2>&1); rc=$?
  why=""
  [ "$rc" = 0 ] || why="$why exit $rc;"
  echo "$out" | grep -q 'no resource the kubelet registered lists a VF' && why="$why blocker still there;"
  for r in pf1:4 pf2:2 rxe:2 vfio:1; do
    echo "$out" | grep -q "registered sriov-rdma/${r%:*}: ${r#*:} devices, ${r#*:} of them VFs of this node" \
      || why="$why no 'registered sriov-rdma/${r%:*}: ${r#*:} devices, ${r#*:} of them VFs of this node';"
  done
  [ -z "$why" ] && break; sleep 1
done
if [ -z "$why" ]; then pass "doctor-vfs-registered(exit 0: '$(echo "$out" | grep -m1 -o 'registered sriov-rdma/pf1: .*')')"
else fail doctor-vfs-registered "$why $(echo "$out" | grep -E 'registered|^  *-|blocker|Blocker' | head -8 | tr '\n' ' ')"; fi

# The scenario files must parse before the first of them runs (a syntax error found half-way ends the rest).
for f in $FILES $OPT_FILES; do bash -n "$here/$f" || fail "include-${f%.sh}" "$here/$f does not parse"; done
if [ -n "$ONLY" ]; then
  say "K8S_ONLY: running only$ONLY"
  for f in $K8S_ONLY; do
    case " $K8S_ONLY " in *" scenarios.sh "*) case $f in rdma.sh|devices.sh|tenants.sh|ops.sh) continue ;; esac ;; esac
    case " $K8S_ONLY " in *" crio.sh "*) ;; *) case $f in cluster.sh | collective.sh | crionri.sh) [ -n "${CRIO_DONE:-}" ] || include crio.sh; CRIO_DONE=1 ;; esac ;; esac
    include "$f"
  done
else
  # helm.sh first: it replaces the DaemonSet above with the chart's and ends with this kustomize overlay applied
  # again, which every scenario after it uses. migration.sh next: it replaces the DaemonSet with the anchors'
  # stack and back, and ends as helm.sh does (the overlay applied, no node policy, nothing of the anchors' left).
  include helm.sh
  include migration.sh
  # The NRI plugin switched on and off again: before scenarios.sh, whose tenants.sh leaves a node policy that
  # refuses the default namespace nri.sh's pods are in.
  include nri.sh
  include scenarios.sh
  # The DRA driver switched on beside the device plugin and off again; it adds its namespace to the node policy
  # scenarios.sh left and puts the node's file back, and ends with the overlay applied.
  include dra.sh
  # The DRA attach (the driver and the NRI plugin both on): its namespace gets a node policy entry of its own, the
  # node's file and the DaemonSet are put back as they were.
  include draattach.sh
  # Last: node B joins; crio.sh labels it, which brings the DaemonSet there (the files above count one DaemonSet
  # pod), cluster.sh uses both nodes, collective.sh four pods on both.
  if [ -n "$NODE_B" ]; then boot_node_b; include crio.sh; include crionri.sh; include cluster.sh; include collective.sh; fi
fi
finish
