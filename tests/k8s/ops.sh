# The operator's view of the running daemon (sourced by tenants.sh's caller chain, after the tenant scenarios; the
# node is as BEFORE): the device plugin's ConfigMap edited in place with kubectl (the kubelet swaps the mounted file;
# syncFrequency is 10 s on this node) changes the node's allocatable without a restart of the DaemonSet's pod, a
# bad edit changes nothing; a pod asking for two VFs of a resource that spans both PFs gets one VF per PF (the
# kubelet's Topology Manager policy is single-numa-node here; the emulated machine has one NUMA node and its VFs
# report none, so the hint is "any" and the device plugin's GetPreferredAllocation decides); the metrics endpoint
# on the node shows that allocation and a health change; and a network that still chains rdma-cni after the
# plugin is refused with the plugin's message.

dp_pod() { k -n kube-system get pods -l app.kubernetes.io/name=sriov-rdma -o 'jsonpath={.items[0].metadata.name}/{.items[0].status.containerStatuses[0].restartCount}' 2>/dev/null; }
metrics() { onnode 'curl -sS --max-time 5 http://127.0.0.1:9411/metrics' 2>/dev/null; }
# metric NAME LABELS: the value of one sample (empty when absent), e.g. metric sriov_rdma_vfs_allocated 'resource="sriov-rdma/rail"'
metric() { metrics | awk -v n="$1{$2}" 'index($0, n " ") == 1 { print $2 }'; }
allocatable() { echo "rail=$(cap allocatable sriov-rdma/rail) pf1=$(cap allocatable sriov-rdma/pf1) pf2=$(cap allocatable sriov-rdma/pf2) rxe=$(cap allocatable sriov-rdma/rxe) vfio=$(cap allocatable sriov-rdma/vfio)"; }
wait_allocatable() { # wait_allocatable WANT SECONDS: sets ALLOC
  for _ in $(seq 1 "$2"); do ALLOC=$(allocatable); [ "$ALLOC" = "$1" ] && return 0; sleep 1; done
  return 1
}
pf_pci() { onnode "basename \$(readlink /sys/class/net/$1/device)"; }

ORIG_CONFIG=$(config_json)
DP0=$(dp_pod)
# A resource of four VFs on two rails: PF1's VFs 2 and 3, PF2's VFs 0 and 1 (first in the list: first match wins).
RAIL="$(vf_pci "$PF1" 2) $(vf_pci "$PF1" 3) $(vf_pci "$PF2" 0) $(vf_pci "$PF2" 1)"
RAIL_CONFIG=$(python3 -c '
import json, sys
c = json.loads(sys.argv[1])
c["resources"].insert(0, {"name": "sriov-rdma/rail", "selectors": {"pciAddresses": sys.argv[2].split()},
                          "requireRdma": False, "allocation": "spread"})
print(json.dumps(c))' "$ORIG_CONFIG" "$RAIL")
set_config "$RAIL_CONFIG"
want="rail=4 pf1=2 pf2=0 rxe=2 vfio=1"
if wait_allocatable "$want" 150 && [ "$(dp_pod)" = "$DP0" ]; then
  pass "config-reload(ConfigMap edited with kubectl patch: node allocatable $ALLOC, device plugin pod $DP0 not restarted)"
else fail config-reload "want $want, allocatable $ALLOC; pod/restarts before $DP0 now $(dp_pod); $(k -n kube-system logs ds/sriov-rdma 2>&1 | tail -3 | tr '\n' ' ')"; fi

# --- a pod with two VFs of the rail resource, one network each (Multus hands them out in allocation order) ---
# In team-a: the node policy tenants.sh installed admits team-a and team-b only (VLAN 301, spoofchk on, trust off).
tnad team-a rail-net sriov-rdma/rail 301 60 79 | k apply -f - >/dev/null
cat <<EOF | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: rail-2
  namespace: team-a
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{"name":"rail-net","interface":"net1"},{"name":"rail-net","interface":"net2"}]'
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
    - name: worker
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sleep", "1000000"]
      resources:
        requests: { "sriov-rdma/rail": "2" }
        limits: { "sriov-rdma/rail": "2" }
EOF
why=""
if k -n team-a wait --for=condition=Ready pod/rail-2 --timeout=240s >/dev/null 2>&1; then
  vfs=$(k -n team-a exec rail-2 -- sh -c "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | sed -n 's/^PCIDEVICE_SRIOV-RDMA_RAIL=//p' | tr ',' ' ')
  pfs=""
  for v in $vfs; do pfs="$pfs $(onnode "basename \$(readlink /sys/bus/pci/devices/$v/physfn)")"; done
  set -- $pfs
  [ $# = 2 ] && [ "$1" != "$2" ] || why="$why VFs '$vfs' are on PFs '$pfs', not one per PF;"
  for n in net1 net2; do
    [ "$(carrier_wait team-a rail-2 $n)" = 1 ] || why="$why no $n with carrier in the pod;"
  done
  rows=$(onnode "/usr/sbin/ip link show $PF1 | grep -c 'vlan 301'; /usr/sbin/ip link show $PF2 | grep -c 'vlan 301'" 2>/dev/null | tr '\n' ' ')
  [ "$rows" = "1 1 " ] || why="$why VLAN 301 rows on PF1/PF2: $rows (want 1 1);"
  policy=$(onnode 'grep -o "topologyManagerPolicy: .*" /k8s/run/kubelet.yaml' 2>/dev/null)
  if [ -z "$why" ]; then pass "two-vf-pod-one-per-pf(team-a/rail-2 got $vfs on PFs$pfs; net1 and net2 up, VLAN 301 on each PF; kubelet $policy)"
  else fail two-vf-pod-one-per-pf "$why"; fi
else
  fail two-vf-pod-one-per-pf "rail-2 not Ready: $(k -n team-a get events --field-selector involvedObject.name=rail-2 -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 600)"
fi

# The metrics endpoint, scraped on the node with curl: the allocation, as the kubelet's checkpoint has it.
r='resource="sriov-rdma/rail"'
for _ in $(seq 1 90); do [ "$(metric sriov_rdma_vfs_allocated "$r")" = 2 ] && break; sleep 1; done
a=$(metric sriov_rdma_vfs_allocated "$r"); calls=$(metric sriov_rdma_allocate_calls_total "$r")
if [ "$a" = 2 ] && [ "${calls:-0}" -ge 1 ]; then
  pass "metrics-allocation(curl 127.0.0.1:9411/metrics on the node: sriov_rdma_vfs_allocated{$r} $a, sriov_rdma_allocate_calls_total{$r} $calls)"
else fail metrics-allocation "vfs_allocated=${a:-absent} allocate_calls=${calls:-absent}: $(metrics | grep rail | head -5 | tr '\n' ' ')"; fi
k -n team-a delete pod rail-2 --wait=false >/dev/null; k -n team-a wait --for=delete pod/rail-2 --timeout=120s >/dev/null 2>&1

# A health change: PF2's link down makes its two rail VFs Unhealthy (allocatable 4 → 2), up makes them Healthy.
down='health="Unhealthy",reason="pf_link_down"'; upl='health="Healthy",reason="ok"'
d0=$(metric sriov_rdma_health_transitions_total "$r,$down"); u0=$(metric sriov_rdma_health_transitions_total "$r,$upl")
# metric_settles NAME LABELS FROM: waits (30 s) for the counter to reach FROM + 2, then reads it again 3 s later (a
# third transition would show); prints that value
metric_settles() {
  local v
  for _ in $(seq 1 30); do v=$(metric "$1" "$2"); [ "$(( ${v:-0} - ${3:-0} ))" -ge 2 ] && break; sleep 1; done
  sleep 3; metric "$1" "$2"
}
onnode "/usr/sbin/ip link set $PF2 down" >/dev/null 2>&1
wait_allocatable "rail=2 pf1=2 pf2=0 rxe=2 vfio=1" 60; a_down=$ALLOC
d1=$(metric_settles sriov_rdma_health_transitions_total "$r,$down" "$d0")
onnode "/usr/sbin/ip link set $PF2 up" >/dev/null 2>&1
wait_allocatable "$want" 60; a_up=$ALLOC
u1=$(metric_settles sriov_rdma_health_transitions_total "$r,$upl" "$u0")
if [ "$a_down" = "rail=2 pf1=2 pf2=0 rxe=2 vfio=1" ] && [ "$a_up" = "$want" ] \
   && [ $(( ${d1:-0} - ${d0:-0} )) = 2 ] && [ $(( ${u1:-0} - ${u0:-0} )) = 2 ]; then
  pass "metrics-health-change(PF2 down: allocatable rail 4→2, health_transitions{$down} +2; up: back to 4, {$upl} +2)"
else fail metrics-health-change "down: $a_down ($down ${d0:-0}→${d1:-0}); up: $a_up ($upl ${u0:-0}→${u1:-0})"; fi

# A bad edit: the previous config stays (allocatable unchanged), the log and the reload-error metric say why.
e0=$(metric sriov_rdma_config_reload_errors_total 'file="config"')
set_config "${RAIL_CONFIG/spread/spred}"
for _ in $(seq 1 150); do e1=$(metric sriov_rdma_config_reload_errors_total 'file="config"'); [ "${e1:-0}" -gt "${e0:-0}" ] && break; sleep 1; done
# The daemon counts the error, then logs it; the runtime writes the log file a moment later.
log=""
for _ in $(seq 1 20); do log=$(k -n kube-system logs ds/sriov-rdma 2>&1 | grep -m1 'spred'); [ -n "$log" ] && break; sleep 0.5; done
sleep 3
ALLOC=$(allocatable)
if [ "${e1:-0}" -gt "${e0:-0}" ] && [ "$ALLOC" = "$want" ] && [ -n "$log" ] && [ "$(dp_pod)" = "$DP0" ]; then
  pass "config-bad-edit-kept(allocatable still $ALLOC; config_reload_errors_total ${e0:-0}→$e1; log: '$(echo "$log" | cut -c1-160)')"
else fail config-bad-edit-kept "errors ${e0:-0}→${e1:-absent}, allocatable $ALLOC, log '${log:-none}', pod $(dp_pod) (was $DP0)"; fi

set_config "$ORIG_CONFIG"
# The kubelet keeps a resource whose plugin went away at 0 for a while, then drops it: either is right.
for _ in $(seq 1 150); do ALLOC=$(allocatable); [ "${ALLOC#rail=0 }" = "pf1=4 pf2=2 rxe=2 vfio=1" ] || [ "${ALLOC#rail= }" = "pf1=4 pf2=2 rxe=2 vfio=1" ] && break; sleep 1; done
if [ "${ALLOC#rail=0 }" = "pf1=4 pf2=2 rxe=2 vfio=1" ] || [ "${ALLOC#rail= }" = "pf1=4 pf2=2 rxe=2 vfio=1" ]; then
  pass "config-restored(the original config.json back: allocatable $ALLOC, pod $(dp_pod))"
else fail config-restored "allocatable $ALLOC"; fi
k -n team-a delete nad rail-net >/dev/null 2>&1

# --- a NAD migrated from sriov-cni + rdma-cni by changing only the first type: refused by the plugin, nothing changed ---
cat <<EOF | k apply -f - >/dev/null
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: sriov-rdma-chain
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: sriov-rdma/pf1
spec:
  config: '{"cniVersion":"1.0.0","name":"sriov-rdma-chain","plugins":[{"type":"sriov-rdma","vlan":100,"spoofchk":"on","ipam":{"type":"host-local","ranges":[[{"subnet":"10.7.0.0/24","rangeStart":"10.7.0.230","rangeEnd":"10.7.0.240"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}},{"type":"rdma"}]}'
EOF
pod chain-1 sriov-rdma-chain sriov-rdma/pf1 | k apply -f - >/dev/null
ev=""
for _ in $(seq 1 120); do
  ev=$(k get events --field-selector involvedObject.name=chain-1 -o 'jsonpath={.items[*].message}' 2>/dev/null | grep -o 'chains rdma-cni.*remove the {"type": "rdma"} entry' | head -1)
  [ -n "$ev" ] && break; sleep 1
done
k delete pod chain-1 --wait=false >/dev/null; gone chain-1
if [ -n "$ev" ] && restored 60; then pass "rdma-cni-chain-refused(pod event: '$ev'; node as before)"
else fail rdma-cni-chain-refused "event '${ev:-none}': $(k get events --field-selector involvedObject.name=chain-1 -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 400); node: $(echo "${NOW:-}" | tr '\n' ';')"; fi
k delete nad sriov-rdma-chain >/dev/null 2>&1

# Deleting the node policy's ConfigMap (optional in the DaemonSet) empties the daemon's mount; the policy installed
# on the node stays, as docs/security.md says (deleting /etc/sriov-rdma/policy.json is how to go back to none).
sum0=$(onnode 'sha256sum /etc/sriov-rdma/policy.json' 2>/dev/null | cut -d' ' -f1)
uid=$(k -n kube-system get pods -l app.kubernetes.io/name=sriov-rdma -o 'jsonpath={.items[0].metadata.uid}')
k -n kube-system delete configmap sriov-rdma-policy >/dev/null
mounted=yes
for _ in $(seq 1 120); do
  onnode "test -e /var/lib/kubelet/pods/$uid/volumes/kubernetes.io~configmap/policy/policy.json" 2>/dev/null || { mounted=""; break; }
  sleep 1
done
sleep 5 # a round of the daemon after the swap
sum1=$(onnode 'sha256sum /etc/sriov-rdma/policy.json' 2>/dev/null | cut -d' ' -f1)
if [ -z "$mounted" ] && [ -n "$sum0" ] && [ "$sum1" = "$sum0" ] && [ "$(dp_pod)" = "$DP0" ]; then
  pass "policy-configmap-deleted-keeps-node-policy(the mount emptied by the kubelet; /etc/sriov-rdma/policy.json unchanged, sha256 ${sum0:0:12})"
else fail policy-configmap-deleted-keeps-node-policy "mount still there: ${mounted:-no}; sha256 before ${sum0:-none} after ${sum1:-none}; pod $(dp_pod) (was $DP0)"; fi
