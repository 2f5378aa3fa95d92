# The NRI plugin on a real node (sourced by e2e.sh). On node A (containerd 2.4, tests/k8s/node/containerd.toml has
# NRI on): in a full run after migration.sh, before scenarios.sh; K8S_ONLY=nri.sh runs it after the set-up. On node
# B (CRI-O 1.36.3, tests/k8s/node/crio.conf has enable_nri): crionri.sh sources it with NRI_NODE_B=1, after
# crio.sh and before cluster.sh, its scenarios then named crio-nri-*. The DaemonSet is patched
# as docs/nri.md says (deploy/examples/nri/daemonset-patch.yaml). A pod attached by the CNI through Multus (a VF of
# sriov-rdma/pf1 on node A, sriov-rdma/pfb on node B, on its own NAD) gets a Soft-RoCE device on net1 from its init
# container (privileged; an igb VF has no RDMA function and a Soft-RoCE device made on the node dies with its
# netdev's move), so the RDMA device and its RoCE v2 GID exist when the runtime creates the pod's other
# containers: then
#   nri-plugin-registered   the daemon's log on that node says the runtime configured and registered it;
#   nri-nccl-env            `kubectl exec env` of the worker shows NCCL_IB_HCA, NCCL_IB_GID_INDEX and
#                           NCCL_SOCKET_IFNAME, equal to what `sriov-rdma doctor --netns` shows for the pod;
#   nri-own-variable-kept   a second container that sets NCCL_IB_GID_INDEX itself keeps its value, gets the others;
#   nri-no-record-no-env    a pod without a NAD (no record) gets none of them;
#   nri-off-again           the patch rolled back: the daemon runs without NRI, the pods are deleted, no record left.

NRI_NAD=sriov-rdma-nri
if [ "${NRI_NODE_B:-}" = 1 ]; then
  NP=crio-nri; NRI_RES=sriov-rdma/pfb; NRI_HOST=$NODEB; nshell() { onb "$1"; }
else
  NP=nri; NRI_RES=sriov-rdma/pf1; NRI_HOST=localhost; nshell() { onnode "$1"; }
fi
ninpod() { k exec "$1" -c "$2" -- sh -c "$3"; }
nccl_of() { ninpod "$1" "$2" 'env' 2>/dev/null | grep '^NCCL_' | sort | tr '\n' ' '; }
# the log of the daemon's pod on this node (the newest: a replaced one may still be terminating)
nlog() { k -n kube-system logs "$(daemon_pod "$NRI_HOST")" 2>&1; }
# sleeper NAME [KEY: VALUE...]: a container of the pods' image that sleeps, in one line of YAML
sleeper() { local n=$1; shift; echo "    - { name: $n, image: localhost/sriov-rdma-pod:1, imagePullPolicy: Never, command: [sleep, \"1000000\"]${*:+, $*} }"; }
# The NAD: like scenarios.sh's, a VF of the node's resource, no VLAN, host-local addresses of its own.
mknad default "$NRI_NAD" "$NRI_RES" '"capabilities":{"deviceID":true},"spoofchk":"on","rdma":"auto","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24","rangeStart":"10.9.0.10","rangeEnd":"10.9.0.99"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}' \
  | k apply -f - >/dev/null

# --- switching the plugin on ---
if ! { k -n kube-system patch ds sriov-rdma --patch-file "$top/deploy/examples/nri/daemonset-patch.yaml" >/dev/null \
       && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; }; then
  fail $NP-plugin-registered "patching the DaemonSet failed: $(k -n kube-system get pods 2>&1 | tail -3 | tr '\n' ' ')"
fi

# --- nri-plugin-registered ---
PODNODE=""; [ "$NRI_HOST" = localhost ] || PODNODE=$NRI_HOST
reg=""
for _ in $(seq 1 60); do nlog | grep -q 'NRI: registered as 50-sriov-rdma' && nlog | grep -q 'NRI: configured by' && { reg=1; break; }; sleep 1; done
if [ -n "$reg" ]; then pass "$NP-plugin-registered($NRI_HOST: $(nlog | grep -m1 -o 'NRI: configured by.*'))"
else fail $NP-plugin-registered "daemon log: $(nlog | grep -E 'NRI|error' | tail -5 | tr '\n' ' ')"; fi

# --- the pods ---
cat <<EOF | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: nri-a
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{"name":"$NRI_NAD","interface":"net1"}]'
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
$(placement)
$(rxe_init net1 rxe_nri)
  containers:
$(sleeper worker "resources: { requests: { \"$NRI_RES\": \"1\" }, limits: { \"$NRI_RES\": \"1\" } }")
$(sleeper own 'env: [{ name: NCCL_IB_GID_INDEX, value: "99" }]')
---
apiVersion: v1
kind: Pod
metadata:
  name: nri-plain
  namespace: default
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
$(placement)
  containers:
$(sleeper worker)
EOF
ready=1
for p in nri-a nri-plain; do k wait --for=condition=Ready "pod/$p" --timeout=240s >/dev/null 2>&1 || ready=""; done
if [ -n "$ready" ]; then
  # --- nri-nccl-env: the worker's variables equal doctor --netns of the pod's namespace ---
  pid=$(nshell "crictl inspect -o go-template --template '{{.info.pid}}' \$(crictl ps -q --name worker --label io.kubernetes.pod.name=nri-a)" 2>/dev/null)
  doc=$(nshell "/opt/cni/bin/sriov-rdma doctor --netns /proc/$pid/ns/net" 2>&1)
  want=$(echo "$doc" | sed -n 's/^  net1 ([0-9.]*): \(NCCL_.*\)$/\1/p' | tr ' ' '\n' | sort | tr '\n' ' ')
  got=$(nccl_of nri-a worker)
  if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$(echo $got | wc -w)" = 3 ]; then
    pass "$NP-nccl-env(worker: $got= doctor --netns)"
  else fail $NP-nccl-env "worker env '$got', doctor '$want': $(echo "$doc" | grep -A3 'NCCL settings' | tr '\n' ' ') log: $(nlog | grep 'NRI' | tail -3 | tr '\n' ' ')"; fi
  # --- nri-own-variable-kept ---
  own=$(nccl_of nri-a own)
  hca=$(echo "$want" | tr ' ' '\n' | grep NCCL_IB_HCA); ifn=$(echo "$want" | tr ' ' '\n' | grep NCCL_SOCKET_IFNAME)
  if [ -n "$hca" ] && [ "$own" = "$(printf '%s\n' "$hca" NCCL_IB_GID_INDEX=99 "$ifn" | sort | tr '\n' ' ')" ]; then
    pass "$NP-own-variable-kept(own: $own)"
  else fail $NP-own-variable-kept "container own: '$own' (doctor: '$want')"; fi
  # --- nri-no-record-no-env ---
  plain=$(nccl_of nri-plain worker)
  if [ -z "$plain" ] && [ "$(ninpod nri-plain worker 'echo ok' 2>&1)" = ok ]; then pass "$NP-no-record-no-env(nri-plain has no NCCL_ variable)"
  else fail $NP-no-record-no-env "nri-plain: '$plain'"; fi
else
  why="not Ready: $(k get pods -o wide 2>&1 | grep nri- | tr '\n' ' ') $(k describe pod nri-a | grep -A8 Events | tail -6 | tr '\n' ' ')"
  fail $NP-nccl-env "$why"; fail $NP-own-variable-kept "$why"; fail $NP-no-record-no-env "$why"
fi

# --- nri-off-again: the DaemonSet as before the patch; the pods deleted, their records gone ---
k delete pod nri-a nri-plain --ignore-not-found --wait=false >/dev/null
ok=""
if k -n kube-system rollout undo ds/sriov-rdma >/dev/null && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; then
  for _ in $(seq 1 60); do
    k get pod nri-a >/dev/null 2>&1 || { [ -z "$(nshell 'ls /var/lib/cni/sriov-rdma' 2>/dev/null | grep -v '[.]lock$')" ] && { ok=1; break; }; }
    sleep 2
  done
fi
env=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.spec.template.spec.containers[0].env[*].name}' 2>&1)
if [ -n "$ok" ] && ! echo "$env" | grep -q SRIOV_RDMA_NRI && ! nlog | grep -q 'NRI: plugin'; then
  pass "$NP-off-again(DaemonSet env: $env; no record left)"
else fail $NP-off-again "ok=${ok:-no} env '$env'; records: $(nshell 'ls /var/lib/cni/sriov-rdma' 2>&1 | tr '\n' ' ')"; fi
k delete network-attachment-definitions "$NRI_NAD" --ignore-not-found >/dev/null
PODNODE=""
