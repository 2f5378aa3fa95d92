# The Helm chart deploy/helm/sriov-rdma on the real node, with the helm CLI built from its Go module (sourced by
# e2e.sh after the set-up, before scenarios.sh; K8S_ONLY=helm.sh runs it alone). The node is as the set-up left it:
# the kustomize overlay's DaemonSet offers sriov-rdma/pf1, pf2, rxe and vfio, no node policy is installed.
# The chart replaces that DaemonSet (same names, the kustomize objects deleted first), with its config offering
# PF1's igbvf VFs as rdma/hca and a node policy from the values; a pod gets a VF; `helm upgrade` to the
# upgrade image (the same build with a marker appended, tests/k8s/build-images.sh) while the pod runs; a new pod
# on the new plugin; `helm uninstall` with that pod still running, then its delete; the overlay applied again,
# which the scenarios after this file use. Everything through kubectl and helm; the kernel's view through the
# node shell pod.

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
CHART=$top/deploy/helm/sriov-rdma
export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data
h() { "$HELM" --kubeconfig "$work/host.kubeconfig" -n kube-system "$@"; }
hpods() { k -n kube-system get pods -l app.kubernetes.io/name=sriov-rdma -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.status.containerStatuses[0].ready}{"\n"}{end}' 2>/dev/null; }
# hwait_dp IMAGE-TAG: the one daemon pod runs that image and is Ready (a rollout replaces the old pod first).
hwait_dp() {
  local i
  for i in $(seq 1 240); do
    [ "$(hpods | wc -l)" = 1 ] && hpods | grep -q " localhost/sriov-rdma:$1 true\$" && return 0
    sleep 1
  done
  return 1
}
hpod() { # hpod NAME: an unprivileged pod on the NAD helm-net asking for one rdma/hca
  local c="{\"name\":\"worker\",\"image\":\"localhost/sriov-rdma-pod:1\",\"imagePullPolicy\":\"Never\",\"command\":[\"sleep\",\"1000000\"],\"resources\":{\"limits\":{\"rdma/hca\":\"1\"}}}"
  k run "$1" --image=localhost/sriov-rdma-pod:1 --restart=Never \
    --annotations='k8s.v1.cni.cncf.io/networks=[{"name":"helm-net","interface":"net1"}]' \
    --overrides="{\"apiVersion\":\"v1\",\"spec\":{\"automountServiceAccountToken\":false,\"terminationGracePeriodSeconds\":2,\"containers\":[$c]}}"
}
# pod_vf NAME: the PCI address of the pod's net1 (its device link, as the pod's own sysfs shows it)
pod_vf() { k exec "$1" -- sh -c 'basename $(readlink /sys/class/net/net1/device)' 2>/dev/null; }
carrier() { carrier_wait default "$1"; }

VFA=""; VFB=""; UIDA=""; hca=""
H0=$(node_snap)
KUST_CONFIG=$(k -n kube-system get configmap sriov-rdma-config -o 'jsonpath={.data.config\.json}')
mkdir -p "$work/helm"
# The values: the overlay's resources with PF1's igbvf VFs under the default name (resourceName rdma/hca), as an
# object; a node policy letting "default" use both PFs on VLAN 100 and nothing else.
python3 -c '
import json, sys
c = json.loads(sys.argv[1])
v = {"resourceName": "rdma/hca", "config": c,
     "policy": {"pfs": [sys.argv[2], sys.argv[3]],
                "namespaces": {"default": {"vlans": [100], "spoofchk": "on"}, "*": {"pfs": []}}}}
print(json.dumps(v, indent=1))' "$KUST_CONFIG" "$PF1" "$PF2" > "$work/helm/values.json"

# --- helm-install: the chart replaces the kustomize DaemonSet ---
k -n kube-system delete ds/sriov-rdma configmap/sriov-rdma-config --wait=true --timeout=120s >/dev/null 2>&1
for _ in $(seq 1 120); do [ -z "$(hpods)" ] && break; sleep 1; done
out=$(h install sriov-rdma "$CHART" -f "$work/helm/values.json" --set "image.tag=$VERSION" --wait --timeout 5m 2>&1); rc=$?
why=""
[ "$rc" = 0 ] || why="$why helm install exit $rc: $(echo "$out" | tail -3 | tr '\n' ' ');"
hwait_dp "$VERSION" || why="$why daemon pod not Ready: $(hpods | tr '\n' ';');"
owner=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.metadata.annotations.meta\.helm\.sh/release-name} {.metadata.labels.app\.kubernetes\.io/managed-by}' 2>/dev/null)
[ "$owner" = "sriov-rdma Helm" ] || why="$why DaemonSet release/managed-by '$owner';"
# app.kubernetes.io labels on every object of the release (DaemonSet, the two ConfigMaps) and the pod.
objs=$(k -n kube-system get ds,configmap,pod -l app.kubernetes.io/instance=sriov-rdma -o 'jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.labels.app\.kubernetes\.io/name} {.metadata.labels.app\.kubernetes\.io/version} {.metadata.labels.app\.kubernetes\.io/component} {.metadata.labels.app\.kubernetes\.io/part-of} {.metadata.labels.app\.kubernetes\.io/managed-by}{"\n"}{end}' 2>/dev/null)
[ "$(echo "$objs" | grep -c "sriov-rdma $VERSION [a-z-]* sriov-rdma Helm\$")" = 4 ] || why="$why labels: $(echo "$objs" | tr '\n' ';');"
hca=""
for _ in $(seq 1 90); do hca=$(cap allocatable rdma/hca); [ "${hca:-0}" -gt 0 ] 2>/dev/null && break; sleep 1; done
[ "${hca:-0}" -gt 0 ] 2>/dev/null || why="$why allocatable rdma/hca '${hca}';"
pol=$(onnode 'cat /etc/sriov-rdma/policy.json' 2>/dev/null | tr -d ' \n')
echo "$pol" | grep -q "\"pfs\":\[\"$PF1\",\"$PF2\"\]" || why="$why node policy not the values': '$pol';"
if [ -z "$why" ]; then
  pass "helm-install(helm install: DaemonSet owned by release sriov-rdma, pod $(hpods | cut -d' ' -f1) Ready, allocatable rdma/hca=$hca, /etc/sriov-rdma/policy.json from the values, app.kubernetes.io labels on $(echo "$objs" | wc -l) objects)"
else fail helm-install "$why $(k -n kube-system get pods -o wide 2>&1 | tail -3 | tr '\n' ' ')"; fi

# --- helm-daemon-unprivileged: the spec the API server holds and the daemon's process on the node ---
sc=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.spec.template.spec.containers[0].securityContext}' 2>/dev/null)
sc_ok=$(python3 -c '
import json, sys
s = json.loads(sys.argv[1] or "{}")
ok = (s.get("privileged") is False and s.get("allowPrivilegeEscalation") is False and s.get("readOnlyRootFilesystem") is True
      and s.get("capabilities", {}).get("drop") == ["ALL"] and not s.get("capabilities", {}).get("add")
      and s.get("seccompProfile", {}).get("type") == "RuntimeDefault")
print("ok" if ok else "no")' "$sc" 2>/dev/null)
dpid=$(onnode 'for p in /proc/[0-9]*; do tr "\0" " " < $p/cmdline 2>/dev/null | grep -q "^/sriov-rdma-device-plugin --config" && basename $p; done' 2>/dev/null | head -1)
st=$(onnode "grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/$dpid/status" 2>/dev/null | tr -s '\t ' ' ' | tr '\n' ' ')
if [ "$sc_ok" = ok ] && [ -n "$dpid" ] && echo "$st" | grep -q 'CapPrm: 0000000000000000 CapEff: 0000000000000000 NoNewPrivs: 1 Seccomp: 2'; then
  pass "helm-daemon-unprivileged(pod spec: privileged false, drop ALL, no add, no privilege escalation, RuntimeDefault seccomp, read-only root; node /proc/$dpid/status: $st; allocatable rdma/hca=$hca)"
else fail helm-daemon-unprivileged "securityContext $sc ($sc_ok); daemon pid '${dpid}': $st"; fi

# --- helm-doctor-in-daemonset: doctor in the daemon's container sees the node's VFs and the kubelet's resources
#     (its checkpoint, which the kubelet may write a moment after the allocatable shows the resource: up to 30 s) ---
for _ in $(seq 1 30); do
  out=$(k -n kube-system exec ds/sriov-rdma -c device-plugin -- sriov-rdma doctor 2>&1); rc=$?
  why=""
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || why="$why exit $rc;"
  for p in "$PF1" "$PF2"; do echo "$out" | grep -q "$p" || why="$why no $p in it;"; done
  echo "$out" | grep -q "registered rdma/hca: $hca devices, $hca of them VFs of this node" \
    || why="$why no 'registered rdma/hca: $hca devices, $hca of them VFs of this node';"
  [ -z "$why" ] && break; sleep 1
done
if [ -z "$why" ]; then
  pass "helm-doctor-in-daemonset(kubectl exec ds/sriov-rdma -- sriov-rdma doctor, exit $rc: '$(echo "$out" | grep -m1 -o 'registered rdma/hca: .*')')"
else fail helm-doctor-in-daemonset "$why $(echo "$out" | head -12 | tr '\n' ' ')"; fi

# --- helm-pod-vf: a pod on the chart's resource gets a VF of PF1, net1 with carrier, VLAN 100 on its VF row ---
cat <<EOF | k apply -f - >/dev/null
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: helm-net
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: rdma/hca
spec:
  config: '{"cniVersion":"1.0.0","name":"helm-net","type":"sriov-rdma","vlan":100,"spoofchk":"on","rdma":"auto","logLevel":"debug","logFile":"/var/log/sriov-rdma/sriov-rdma.log","ipam":{"type":"host-local","ranges":[[{"subnet":"10.8.0.0/24","rangeStart":"10.8.0.10","rangeEnd":"10.8.0.99"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}}'
EOF
hpod helm-a >/dev/null
VFA=""
if k wait --for=condition=Ready pod/helm-a --timeout=240s >/dev/null 2>&1; then
  VFA=$(pod_vf helm-a); UIDA=$(k get pod helm-a -o 'jsonpath={.metadata.uid}')
  pfa=$(onnode "basename \$(readlink /sys/bus/pci/devices/$VFA/physfn)" 2>/dev/null)
  rows=$(onnode "/usr/sbin/ip link show $PF1 | grep -c 'vlan 100'" 2>/dev/null)
  if [ "$(carrier helm-a)" = 1 ] && [ -n "$VFA" ] && [ "$pfa" = "$(onnode "basename \$(readlink /sys/class/net/$PF1/device)" 2>/dev/null)" ] && [ "$rows" = 1 ]; then
    pass "helm-pod-vf(helm-a: net1 is VF $VFA of $PF1, carrier 1, one VLAN 100 row on $PF1)"
  else fail helm-pod-vf "VF '$VFA' on '$pfa', carrier '$(carrier helm-a)', VLAN 100 rows on $PF1: '$rows'"; fi
else
  fail helm-pod-vf "helm-a not Ready: $(k get events --field-selector involvedObject.name=helm-a -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 600)"
fi

# --- helm-upgrade-keeps-vf: helm upgrade to a new image tag while helm-a runs ---
DPA=$(hpods | cut -d' ' -f1)
out=$(h upgrade sriov-rdma "$CHART" -f "$work/helm/values.json" --set "image.tag=$VERSION-upgrade" --wait --timeout 5m 2>&1); rc=$?
why=""
[ "$rc" = 0 ] || why="$why helm upgrade exit $rc: $(echo "$out" | tail -3 | tr '\n' ' ');"
hwait_dp "$VERSION-upgrade" || why="$why daemon pod on the new tag not Ready: $(hpods | tr '\n' ';');"
DPB=$(hpods | cut -d' ' -f1)
[ -n "$DPB" ] && [ "$DPB" != "$DPA" ] || why="$why daemon pod not replaced ($DPA → $DPB);"
[ "$(k get pod helm-a -o 'jsonpath={.metadata.uid} {.status.containerStatuses[0].restartCount} {.status.phase}' 2>/dev/null)" = "$UIDA 0 Running" ] \
  || why="$why helm-a: $(k get pod helm-a -o 'jsonpath={.metadata.uid} {.status.containerStatuses[0].restartCount} {.status.phase}' 2>&1);"
[ -n "$VFA" ] && [ "$(pod_vf helm-a)" = "$VFA" ] && [ "$(carrier helm-a)" = 1 ] || why="$why helm-a's net1 now '$(pod_vf helm-a)' carrier '$(carrier helm-a)' (was $VFA);"
# The VF's netdev is still in the pod, not back on the node.
[ -z "$(onnode "ls /sys/bus/pci/devices/$VFA/net 2>/dev/null")" ] || why="$why VF $VFA's netdev is on the node;"
rev=$(h history sriov-rdma -o json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)[-1]["revision"])' 2>/dev/null)
if [ -z "$why" ]; then
  pass "helm-upgrade-keeps-vf(revision $rev, image :$VERSION-upgrade, daemon pod $DPA → $DPB; helm-a same UID, 0 restarts, net1 still VF $VFA with carrier)"
else fail helm-upgrade-keeps-vf "$why"; fi

# --- helm-upgrade-new-plugin: the node's plugin is the upgrade build; a new pod comes up on it ---
want=$({ cat "$top/target/release/sriov-rdma"; printf '\nsriov-rdma upgrade marker\n'; } | sha256sum | cut -d' ' -f1)
wantdp=$({ cat "$top/target/release/sriov-rdma-device-plugin"; printf '\nsriov-rdma upgrade marker\n'; } | sha256sum | cut -d' ' -f1)
got=$(onnode 'sha256sum /opt/cni/bin/sriov-rdma' 2>/dev/null | cut -d' ' -f1)
gotdp=$(onnode 'sha256sum /opt/cni/bin/sriov-rdma-device-plugin' 2>/dev/null | cut -d' ' -f1)
hpod helm-b >/dev/null
why=""
[ "$got" = "$want" ] || why="$why /opt/cni/bin/sriov-rdma sha256 ${got:-none}, the upgrade build's $want (first build's $(sha256sum "$top/target/release/sriov-rdma" | cut -c1-12));"
[ "$gotdp" = "$wantdp" ] || why="$why /opt/cni/bin/sriov-rdma-device-plugin sha256 ${gotdp:-none}, want $wantdp;"
if k wait --for=condition=Ready pod/helm-b --timeout=240s >/dev/null 2>&1; then
  VFB=$(pod_vf helm-b)
  [ "$(carrier helm-b)" = 1 ] && [ -n "$VFB" ] && [ "$VFB" != "$VFA" ] || why="$why helm-b: net1 VF '$VFB' carrier '$(carrier helm-b)';"
else why="$why helm-b not Ready: $(k get events --field-selector involvedObject.name=helm-b -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 400);"; fi
if [ -z "$why" ]; then
  pass "helm-upgrade-new-plugin(/opt/cni/bin/sriov-rdma and sriov-rdma-device-plugin are the upgrade build, sha256 ${got:0:12}/${gotdp:0:12}; helm-b got VF $VFB, carrier 1)"
else fail helm-upgrade-new-plugin "$why"; fi
k delete pod helm-b --wait=false >/dev/null 2>&1; k wait --for=delete pod/helm-b --timeout=120s >/dev/null 2>&1

# --- helm-uninstall: with helm-a still running ---
out=$(h uninstall sriov-rdma --wait --timeout 3m 2>&1); rc=$?
why=""
[ "$rc" = 0 ] || why="$why helm uninstall exit $rc: $(echo "$out" | tail -2 | tr '\n' ' ');"
for _ in $(seq 1 120); do [ -z "$(hpods)" ] && break; sleep 1; done
left=$(k -n kube-system get ds,configmap,pod -l app.kubernetes.io/instance=sriov-rdma -o name 2>/dev/null | tr '\n' ' ')
[ -z "$left" ] || why="$why left in the API server: $left;"
stays=$(onnode 'for f in /opt/cni/bin/sriov-rdma /opt/cni/bin/sriov-rdma-device-plugin /etc/sriov-rdma/policy.json; do test -f $f && echo $f; done' 2>/dev/null | tr '\n' ' ')
[ "$stays" = "/opt/cni/bin/sriov-rdma /opt/cni/bin/sriov-rdma-device-plugin /etc/sriov-rdma/policy.json " ] || why="$why on the node: '$stays';"
# Every VF but helm-a's is on the node with its netdev, and only helm-a's row carries VLAN 100.
now=$(node_snap)
# (A VF bound to vfio-pci has no netdev before or after: counted from the snapshot before this file.)
onhost=$(echo "$now" | awk -v a="$VFA" '$1 ~ /^0000:/ && $1 != a && NF == 4' | wc -l)
all=$(echo "$H0" | awk '$1 ~ /^0000:/ && NF == 4' | wc -l)
[ "$onhost" = $((all - 1)) ] || why="$why $onhost of the $((all - 1)) netdev VFs not held by helm-a are on the node;"
[ "$(echo "$now" | grep -c 'vlan 100')" = 1 ] || why="$why VLAN 100 rows: $(echo "$now" | grep -c 'vlan 100') (want 1, helm-a's);"
[ "$(carrier helm-a)" = 1 ] || why="$why helm-a lost net1's carrier;"
if [ -z "$why" ]; then
  pass "helm-uninstall(no object of the release left; $onhost VFs on the node, helm-a keeps $VFA; stays on the node: $stays)"
else fail helm-uninstall "$why"; fi

# --- helm-uninstall-then-delete: the pod that outlived the uninstall is deleted cleanly ---
k delete pod helm-a --wait=false >/dev/null 2>&1
k wait --for=delete pod/helm-a --timeout=120s >/dev/null 2>&1
ok=""
for _ in $(seq 1 60); do now=$(node_snap); [ "$now" = "$H0" ] && { ok=1; break; }; sleep 1; done
if [ -n "$ok" ]; then
  pass "helm-uninstall-then-delete(helm-a deleted without the daemon: every VF back under its name, MAC and MTU, PF rows and records as before)"
else fail helm-uninstall-then-delete "$(diff <(echo "$H0") <(echo "$now") | grep '^[<>]' | head -6 | tr '\n' ';')"; fi
k delete net-attach-def helm-net >/dev/null 2>&1

# --- kustomize-after-helm: the overlay of deploy/ applies again; the node goes back to no policy ---
# The node policy stays after an uninstall (docs/install.md); the run after this file starts without one.
onnode 'rm -f /etc/sriov-rdma/policy.json' >/dev/null 2>&1
why=""
k apply -k "$work/overlay" >/dev/null 2>&1 || why="$why kubectl apply -k failed: $(k apply -k "$work/overlay" 2>&1 | tail -2 | tr '\n' ' ');"
k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null 2>&1 || why="$why rollout: $(hpods | tr '\n' ';');"
want=$OVERLAY_ALLOC
wait_overlay_alloc 90
[ "$got" = "$want" ] || why="$why allocatable $got, want $want;"
mb=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}' 2>/dev/null)
[ "$mb" = kustomize ] || why="$why DaemonSet managed-by '$mb';"
if [ -z "$why" ]; then
  pass "kustomize-after-helm(kubectl apply -k of the overlay: DaemonSet managed-by kustomize Ready, node allocatable $got, no node policy)"
else fail kustomize-after-helm "$why"; fi
