# The DRA driver sriov-rdma.k8s.io on the real node (sourced by e2e.sh; opt-in: not part of a full run, only
# K8S_ONLY=dra.sh runs it, after the set-up). The node is as the set-up left it: the kustomize overlay's DaemonSet
# offers sriov-rdma/rxe (PF1's VFs 5 and 6 with Soft-RoCE devices rxe_vf5, rxe_vf6 on their netdevs), vfio, pf1
# and pf2. This file switches the driver on as docs/dra.md says (deploy/examples/dra: the DeviceClass and RBAC,
# the DaemonSet patch, a config whose first resource, marked "dra": true, takes PF1's VF 6), then checks through
# kubectl and the node shell: the kubelet registered the driver; the ResourceSlice lists the VF with its
# attributes; a pod with a ResourceClaimTemplate of the DeviceClass runs and its container has the VF's verbs
# device from the CDI spec (and opens it); deleting the pod removes the spec; the overlay's config applied again
# turns the driver off and gives the VF back to sriov-rdma/rxe.
# This node has no kube-proxy: the daemon's in-cluster address of the API server (the service IP) is replaced by
# the API server's own (10.0.2.2:$AP, in its certificate), the ServiceAccount token and RBAC are the example's.

DRA_DRIVER=sriov-rdma.k8s.io
dinpod() { k exec "$1" -- sh -c "$2"; }
# py EXPR-SCRIPT: python3 over the JSON on stdin (no jq on every host).
py() { python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }
dra_dev=$(echo "pci-$RXE2" | tr ':.' '--')

# --- switching the driver on ---
dra_cfg=$(python3 -c "import json, sys; print(json.dumps({'data': {'config.json': json.dumps({'resources': [
  {'name': 'sriov-rdma/dra', 'dra': True, 'selectors': {'pciAddresses': ['$RXE2']}},
  {'name': 'sriov-rdma/rxe', 'selectors': {'pciAddresses': ['$RXE1', '$RXE2']}},
  {'name': 'sriov-rdma/vfio', 'selectors': {'pciAddresses': ['$VFIO'], 'drivers': ['vfio-pci']}},
  {'selectors': {'pfNames': ['$PF1'], 'drivers': ['igbvf']}, 'requireRdma': False},
  {'name': 'sriov-rdma/pf2', 'selectors': {'pfNames': ['$PF2'], 'drivers': ['igbvf']}, 'requireRdma': False}]})}}))")
api_env="{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"device-plugin\",\"env\":[
  {\"name\":\"KUBERNETES_SERVICE_HOST\",\"value\":\"10.0.2.2\"},{\"name\":\"KUBERNETES_SERVICE_PORT\",\"value\":\"$AP\"}]}]}}}}"
if ! { k apply -f "$top/deploy/examples/dra/dra.yaml" >/dev/null \
       && k -n kube-system patch configmap sriov-rdma-config --type merge -p "$dra_cfg" >/dev/null \
       && k -n kube-system patch ds sriov-rdma --patch-file "$top/deploy/examples/dra/daemonset-patch.yaml" >/dev/null \
       && k -n kube-system patch ds sriov-rdma -p "$api_env" >/dev/null \
       && k -n kube-system rollout restart ds/sriov-rdma >/dev/null \
       && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; }; then
  fail dra-driver-registered "switching it on failed: $(k -n kube-system get pods 2>&1 | tail -3 | tr '\n' ' ')"
fi

# --- dra-driver-registered: the kubelet's plugin watcher called GetInfo, then NotifyRegistrationStatus(true) ---
dlog() { k -n kube-system logs ds/sriov-rdma 2>&1; }
reg=""
for _ in $(seq 1 90); do dlog | grep -q "DRA: the kubelet registered driver $DRA_DRIVER" && { reg=1; break; }; sleep 1; done
sock=$(onnode "ls /var/lib/kubelet/plugins_registry/ /var/lib/kubelet/plugins/$DRA_DRIVER/" 2>&1 | tr '\n' ' ')
if [ -n "$reg" ] && echo "$sock" | grep -q "$DRA_DRIVER-reg.sock" && echo "$sock" | grep -q 'dra.sock'; then
  pass "dra-driver-registered(the kubelet registered $DRA_DRIVER; node: $sock)"
else fail dra-driver-registered "sockets: $sock; log: $(dlog | grep -E 'DRA|error' | tail -5 | tr '\n' ' ')"; fi

# --- dra-resourceslice: the node's slice lists PF1's VF 6 with its attributes ---
slice=""
for _ in $(seq 1 60); do
  slice=$(k get resourceslices -o json 2>/dev/null | py "
s = [x for x in d['items'] if x['spec']['driver'] == '$DRA_DRIVER' and x['spec'].get('nodeName') == 'localhost']
print(json.dumps(s[0]) if len(s) == 1 else '')") && [ -n "$slice" ] && break
  sleep 1
done
[ -n "$slice" ] || slice='{}'
attrs=$(echo "$slice" | py "
devs = d.get('spec', {}).get('devices', [])
print(' '.join(x['name'] for x in devs))
for x in devs:
  if x['name'] == '$dra_dev':
    for k, v in sorted(x.get('attributes', {}).items()): print(k + '=' + str(list(v.values())[0]))" 2>&1)
why=""
[ "$(echo "$attrs" | head -1)" = "$dra_dev" ] || why="$why devices '$(echo "$attrs" | head -1)', want only $dra_dev;"
for want in "pciAddress=$RXE2" "resource.kubernetes.io/pciBusID=$RXE2" "pfName=$PF1" vfIndex=6 rdmaDevice=rxe_vf6 \
            kernelDriver=igbvf vendor=8086 linkType=ether; do
  echo "$attrs" | grep -qx "$want" || why="$why no $want;"
done
echo "$attrs" | grep -q '^resource.kubernetes.io/pcieRoot=pci[0-9a-f]*:[0-9a-f]*$' || why="$why no pcieRoot;"
if [ -z "$why" ]; then pass "dra-resourceslice($(echo "$attrs" | tr '\n' ' '))"
else fail dra-resourceslice "$why slice: $(echo "$slice" | head -c 600)"; fi

# --- dra-pod-cdi: a pod claims a VF through the DeviceClass; its container gets the VF's verbs device ---
k apply -f - >/dev/null <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: { name: one-vf, namespace: default }
spec:
  spec:
    devices:
      requests:
        - name: vf
          exactly: { deviceClassName: sriov-rdma }
---
apiVersion: v1
kind: Pod
metadata: { name: dra-pod, namespace: default }
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  resourceClaims:
    - name: vf
      resourceClaimTemplateName: one-vf
  containers:
    - name: worker
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sleep", "1000000"]
      securityContext: { privileged: false, allowPrivilegeEscalation: false }
      resources:
        claims: [{ name: vf }]
EOF
why=""
if k wait --for=condition=Ready pod/dra-pod --timeout=180s >/dev/null 2>&1; then
  claim=$(k get pod dra-pod -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)
  uid=$(k get resourceclaim "$claim" -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  got=$(k get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[0].driver}/{.status.allocation.devices.results[0].pool}/{.status.allocation.devices.results[0].device}' 2>/dev/null)
  [ "$got" = "$DRA_DRIVER/localhost/$dra_dev" ] || why="$why claim '$claim' allocated '$got';"
  spec=$(onnode "cat /var/run/cdi/$DRA_DRIVER-$uid.json" 2>&1)
  uv=$(onnode "for u in /sys/class/infiniband_verbs/uverbs*; do [ \"\$(cat \$u/ibdev)\" = rxe_vf6 ] && basename \$u; done" 2>/dev/null)
  echo "$spec" | grep -q "\"path\": \"/dev/infiniband/$uv\"" || why="$why CDI spec of $uid has no /dev/infiniband/${uv:-?}: $(echo "$spec" | tr -d ' \n' | head -c 300);"
  list=$(dinpod dra-pod 'ls /dev/infiniband' 2>&1 | sort | tr '\n' ' ')
  want=$(printf '%s\n' "$uv" $(onnode 'ls /dev/infiniband/rdma_cm 2>/dev/null | xargs -r basename' 2>/dev/null) | sort | tr '\n' ' ')
  [ -n "$uv" ] && [ "$list" = "$want" ] || why="$why /dev/infiniband in the pod is '$list', not '$want';"
  env=$(dinpod dra-pod "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | grep '^SRIOV_RDMA_DRA_')
  [ "$env" = "SRIOV_RDMA_DRA_$(echo "$dra_dev" | tr 'a-z-' 'A-Z_')=$RXE2" ] || why="$why environment '$env';"
  out=$(dinpod dra-pod 'ibv_devinfo -d rxe_vf6' 2>&1)
  echo "$out" | grep -q PORT_ACTIVE || why="$why ibv_devinfo -d rxe_vf6: $(echo "$out" | tail -2 | tr '\n' ' ');"
  # The other Soft-RoCE VF is not the pod's.
  uv5=$(onnode "for u in /sys/class/infiniband_verbs/uverbs*; do [ \"\$(cat \$u/ibdev)\" = rxe_vf5 ] && basename \$u; done" 2>/dev/null)
  dinpod dra-pod "test -e /dev/infiniband/$uv5" 2>/dev/null && why="$why the pod sees rxe_vf5's $uv5;"
  if [ -z "$why" ]; then pass "dra-pod-cdi(claim $claim: $got; CDI $DRA_DRIVER/vf=$uid-$dra_dev; pod /dev/infiniband: $list; ibv_devinfo -d rxe_vf6 PORT_ACTIVE)"
  else fail dra-pod-cdi "$why"; fi
else
  fail dra-pod-cdi "not Ready: $(k get pod dra-pod -o wide 2>&1 | tail -1) $(k describe pod dra-pod 2>&1 | grep -A8 Events | tail -5 | tr '\n' ' ') $(dlog | grep DRA | tail -3 | tr '\n' ' ')"
fi

# --- dra-unprepare: deleting the pod deletes its claim and the driver removes the claim's CDI spec ---
k delete pod dra-pod --wait=false >/dev/null 2>&1
k wait --for=delete pod/dra-pod --timeout=120s >/dev/null 2>&1
left=""; claims=""
for _ in $(seq 1 60); do
  left=$(onnode "ls /var/run/cdi/ 2>/dev/null | grep '^$DRA_DRIVER-'" 2>/dev/null)
  claims=$(k get resourceclaims -o name 2>/dev/null | tr '\n' ' ')
  [ -z "$left" ] && [ -z "$claims" ] && break
  sleep 1
done
if [ -z "$left" ] && [ -z "$claims" ] && dlog | grep -q "DRA: claim default/.* unprepared"; then
  pass "dra-unprepare(pod deleted: its claim gone, /var/run/cdi has no $DRA_DRIVER spec)"
else fail dra-unprepare "specs left: '$left', claims: '$claims'; $(dlog | grep DRA | tail -3 | tr '\n' ' ')"; fi
k delete resourceclaimtemplate one-vf --ignore-not-found >/dev/null 2>&1

# --- dra-off-again: the overlay's config turns the driver off; the VF is sriov-rdma/rxe's again ---
if k apply -k "$work/overlay" >/dev/null && k -n kube-system rollout restart ds/sriov-rdma >/dev/null \
   && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null && wait_overlay_alloc 60; then
  pass "dra-off-again(node allocatable: $got; no dra resource, no driver)"
else fail dra-off-again "node allocatable: ${got:-?}, want $OVERLAY_ALLOC; $(dlog | tail -3 | tr '\n' ' ')"; fi
