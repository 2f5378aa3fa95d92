# The DRA driver sriov-rdma.k8s.io on the real node (sourced by e2e.sh: in a full run after scenarios.sh, whose
# files leave the overlay applied and tenants.sh's node policy on the node; K8S_ONLY=dra.sh runs it after the
# set-up alone). The node is as the set-up left it: the kustomize overlay's DaemonSet offers sriov-rdma/rxe (PF1's
# VFs 5 and 6 with Soft-RoCE devices rxe_vf5, rxe_vf6 on their netdevs), vfio, pf1 and pf2. This file switches the
# driver on as docs/dra.md says (deploy/examples/dra: the DeviceClass and RBAC, the DaemonSet patch, a config whose
# first resource, marked "dra": true, takes PF1's VF 6), then checks through kubectl and the node shell: the
# kubelet registered the driver; the ResourceSlice lists the VF with its attributes; a pod with a
# ResourceClaimTemplate of the DeviceClass whose config asks VLAN 120 and MTU 9000 runs, its container has the
# VF's verbs device from the CDI spec (and opens it), and the driver kept the checked config with the node
# policy's settings; beside it, a pod of the device plugin's sriov-rdma/rxe runs with the other VF, neither API
# offering the other's; deleting the pod removes the spec and the config; a claim whose config says vlan 5000,
# and one whose trust the node policy forbids, are refused with the key in the pod's events, the PF's VF table
# and the CDI directory unchanged; the overlay's config applied again turns the driver off and gives the VF back
# to sriov-rdma/rxe. The pods run in the namespace dra-e2e, which the node policy this file adds for its run
# limits (VLAN untagged or 100-199, trust off); the node's policy file is put back as it was at the end.
# This node has no kube-proxy: the daemon's in-cluster address of the API server (the service IP) is replaced by
# the API server's own (10.0.2.2:$AP, in its certificate), the ServiceAccount token and RBAC are the example's.

DRA_DRIVER=sriov-rdma.k8s.io
# py EXPR-SCRIPT: python3 over the JSON on stdin (no jq on every host).
py() { python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }
dra_dev=$(echo "pci-$RXE2" | tr ':.' '--')
DRA_NS=dra-e2e
kd() { k -n "$DRA_NS" "$@"; }
dinpod() { kd exec "$1" -- sh -c "$2"; }
DRA_CLAIMS=/var/lib/kubelet/plugins/$DRA_DRIVER/claims
# The node policy for this file's namespace, added to the node's (tenants.sh's in a full run; none after the
# set-up alone: then every other namespace stays unlimited, "*": {}); the node's file is kept aside and put back.
k create namespace "$DRA_NS" >/dev/null 2>&1
pol0=$(onnode 'cat /etc/sriov-rdma/policy.json 2>/dev/null' 2>/dev/null)
[ -n "$pol0" ] || pol0='{}'
dra_pol=$(echo "$pol0" | py "
n = d.setdefault('namespaces', {'*': {}})
n['$DRA_NS'] = {'vlans': [0, '100-199'], 'trust': 'off'}
print(json.dumps(d))")
onnode "mkdir -p /etc/sriov-rdma; if [ -e /etc/sriov-rdma/policy.json ]; then cp -p /etc/sriov-rdma/policy.json /etc/sriov-rdma/.policy.json.dra-e2e; fi
        printf '%s' '$dra_pol' > /etc/sriov-rdma/.policy.json.new && mv /etc/sriov-rdma/.policy.json.new /etc/sriov-rdma/policy.json" >/dev/null 2>&1
# claim_head NAME: a ResourceClaimTemplate up to its list of requests.
claim_head() {
  cat <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: { name: $1, namespace: $DRA_NS }
spec:
  spec:
    devices:
      requests:
EOF
}
# template NAME PARAMETERS: a ResourceClaimTemplate of one VF of the DeviceClass, with this driver's config.
template() {
  claim_head "$1"
  cat <<EOF
        - name: vf
          exactly: { deviceClassName: sriov-rdma }
      config:
        - requests: [vf]
          opaque:
            driver: $DRA_DRIVER
            parameters: $2
EOF
}
# claims_gone: until the namespace's claims and every spec and kept config of the driver are gone (60 s); sets left.
claims_gone() {
  for _ in $(seq 1 60); do
    left="$(kd get resourceclaims -o name 2>/dev/null | tr '\n' ' ')$(onnode "ls /var/run/cdi/ $DRA_CLAIMS/ 2>/dev/null | grep -e '^$DRA_DRIVER-' -e '[.]json\$'" 2>/dev/null | tr '\n' ' ')"
    [ -z "$left" ] && return 0
    sleep 1
  done
  return 1
}

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
{ template one-vf '{"vlan": 120, "mtu": 9000}'; echo ---; PODNS=$DRA_NS devpod dra-pod - one-vf; } | k apply -f - >/dev/null
why=""
if kd wait --for=condition=Ready pod/dra-pod --timeout=180s >/dev/null 2>&1; then
  claim=$(kd get pod dra-pod -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)
  uid=$(kd get resourceclaim "$claim" -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  got=$(kd get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[0].driver}/{.status.allocation.devices.results[0].pool}/{.status.allocation.devices.results[0].device}' 2>/dev/null)
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
  fail dra-pod-cdi "not Ready: $(kd get pod dra-pod -o wide 2>&1 | tail -1) $(kd describe pod dra-pod 2>&1 | grep -A8 Events | tail -5 | tr '\n' ' ') $(dlog | grep DRA | tail -3 | tr '\n' ' ')"
fi

# --- dra-claim-config: the claim's config, checked, kept with the prepared claim with the policy's settings ---
kept=$(onnode "cat $DRA_CLAIMS/${uid:-none}.json" 2>&1)
cfg=$(echo "$kept" | py "
c = d['devices'][0]['config']
print(' '.join('%s=%s' % (k, c.get(k)) for k in ('deviceID', 'vlan', 'mtu', 'trust')))" 2>&1)
if [ "$cfg" = "deviceID=$RXE2 vlan=120 mtu=9000 trust=off" ]; then
  pass "dra-claim-config($DRA_CLAIMS/$uid.json: $cfg; trust off from the node policy for $DRA_NS)"
else fail dra-claim-config "kept config: '$cfg'; file: $(echo "$kept" | tr -d ' \n' | head -c 400)"; fi

# --- dra-beside-device-plugin: a pod of the device plugin's sriov-rdma/rxe runs beside the DRA pod with the other
# VF; the node's allocatable offers one rxe VF (not the DRA one), the slice only the DRA one ---
PODNS=$DRA_NS devpod dp-pod sriov-rdma/rxe | k apply -f - >/dev/null
why=""
kd wait --for=condition=Ready pod/dp-pod --timeout=120s >/dev/null 2>&1 || why="$why dp-pod not Ready: $(kd get pod dp-pod 2>&1 | tail -1);"
phases=$(kd get pod dra-pod dp-pod -o 'jsonpath={.items[*].status.phase}' 2>/dev/null)
[ "$phases" = "Running Running" ] || why="$why phases '$phases';"
dp_list=$(dinpod dp-pod 'ls /dev/infiniband' 2>&1 | sort | tr '\n' ' ')
case " $dp_list " in *" ${uv5:-?} "*) ;; *) why="$why dp-pod's /dev/infiniband '$dp_list' has not rxe_vf5's ${uv5:-?};" ;; esac
case " $dp_list " in *" ${uv:-?} "*) why="$why dp-pod has rxe_vf6's ${uv:-?};" ;; esac
alloc="rxe=$(cap allocatable sriov-rdma/rxe) dra=$(cap allocatable sriov-rdma/dra)"
[ "$alloc" = "rxe=1 dra=" ] || why="$why node allocatable '$alloc', want 'rxe=1 dra=';"
sdevs=$(k get resourceslices -o json 2>/dev/null | py "
print(' '.join(x['name'] for s in d['items'] if s['spec']['driver'] == '$DRA_DRIVER' for x in s['spec'].get('devices', [])))")
[ "$sdevs" = "$dra_dev" ] || why="$why slice devices '$sdevs', want only $dra_dev;"
if [ -z "$why" ]; then pass "dra-beside-device-plugin(dra-pod $dra_dev and dp-pod Running; dp-pod /dev/infiniband: $dp_list; node allocatable $alloc; slice: $sdevs)"
else fail dra-beside-device-plugin "$why"; fi
kd delete pod dp-pod --wait=false >/dev/null 2>&1

# --- dra-unprepare: deleting the pod deletes its claim and the driver removes the claim's CDI spec and config ---
kd delete pod dra-pod --wait=false >/dev/null 2>&1
kd wait --for=delete pod/dra-pod --timeout=120s >/dev/null 2>&1
if claims_gone && dlog | grep -q "DRA: claim $DRA_NS/.* unprepared"; then
  pass "dra-unprepare(pod deleted: its claim gone, no $DRA_DRIVER spec in /var/run/cdi, no config in $DRA_CLAIMS)"
else fail dra-unprepare "left: '$left'; $(dlog | grep DRA | tail -3 | tr '\n' ' ')"; fi

# --- dra-bad-config-vlan, dra-bad-config-policy: a claim config the CNI's parser refuses (vlan 5000), one the
# node policy refuses for the namespace (trust on): the pod's events name the key; the PF's VF table, the CDI
# directory and the kept configs unchanged ---
dra_node() { onnode "/usr/sbin/ip link show $PF1 | grep ' vf '; ls /var/run/cdi/ $DRA_CLAIMS/" 2>&1; }
for bad in 'vlan|{"vlan": 5000}|invalid vlan 5000' "policy|{\"vlan\": 150, \"trust\": \"on\"}|rule namespaces.$DRA_NS.trust"; do
  name=${bad%%|*}; rest=${bad#*|}; params=${rest%%|*}; want=${rest#*|}
  before=$(dra_node)
  { template "bad-$name" "$params"; echo ---; PODNS=$DRA_NS devpod "bad-$name" - "bad-$name"; } | k apply -f - >/dev/null
  ev=""
  for _ in $(seq 1 90); do
    ev=$(kd get events --field-selector "involvedObject.name=bad-$name" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null | grep -F "$want" | head -1)
    [ -n "$ev" ] && break
    sleep 1
  done
  after=$(dra_node)
  phase=$(kd get pod "bad-$name" -o 'jsonpath={.status.phase}' 2>/dev/null)
  if [ -n "$ev" ] && [ "$before" = "$after" ] && [ "$phase" = Pending ]; then
    pass "dra-bad-config-$name(pod $phase, event ${ev%%:*}: '… $(echo "$ev" | grep -o "its config: .*" | head -c 200)'; VF table, CDI dir, kept configs unchanged)"
  else fail "dra-bad-config-$name" "phase '$phase'; event with '$want': '${ev:-none}'; node before/after differ: $([ "$before" = "$after" ] && echo no || echo "yes: $(echo "$after" | tr '\n' ' ')"); events: $(kd get events --field-selector "involvedObject.name=bad-$name" -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 300)"; fi
  kd delete pod "bad-$name" --wait=false >/dev/null 2>&1
  kd wait --for=delete "pod/bad-$name" --timeout=60s >/dev/null 2>&1
  claims_gone >/dev/null
done
kd delete resourceclaimtemplate one-vf bad-vlan bad-policy --ignore-not-found >/dev/null 2>&1

# --- dra-gpu-*: GPU alignment (DRA_GPU=0 leaves it out). No GPU exists on this node: the "GPU" is a stand-in DRA driver
# of the tests (device-plugin/examples/standin-gpu.rs, /usr/bin/standin-gpu on the node), started here on the node
# and stopped by its PID. It registers with the kubelet as gpu.standin.sriov-rdma.test and prepares claims with no
# CDI devices; its ResourceSlice, written here with kubectl, lists two fake GPUs: gpu-0 under the PCIe root the
# node's sysfs shows for the DRA VF (node A's igb PFs are integrated endpoints: every VF has the same root) and
# gpu-1 under pci0000:80, a root no VF has. A claim of one GPU and one VF with matchAttribute on
# resource.kubernetes.io/pcieRoot must get gpu-0 and the VF; one pinned to gpu-1 must stay unallocated. ---
if [ "${DRA_GPU:-1}" = 1 ]; then
  GPU_DRIVER=gpu.standin.sriov-rdma.test
  GPU_SOCKS="/var/lib/kubelet/plugins_registry/$GPU_DRIVER-reg.sock /var/lib/kubelet/plugins/$GPU_DRIVER/dra.sock"
  GPU_LOG=/run/standin-gpu.log
  ROOT_ATTR=resource.kubernetes.io/pcieRoot
  # The VF's root complex as the node's sysfs shows it (/sys/devices/pci<domain>:<bus>/...).
  vf_root=$(onnode "readlink -f /sys/bus/pci/devices/$RXE2" 2>/dev/null | cut -d/ -f4)
  # In the background of the node shell's sh (no terminal: no SIGHUP when it ends; the node's busybox has no nohup).
  gpu_pid=$(onnode "/usr/bin/standin-gpu > $GPU_LOG 2>&1 < /dev/null & echo \$!" 2>/dev/null)
  glog() { onnode "cat $GPU_LOG" 2>&1; }
  reg=""
  for _ in $(seq 1 60); do glog | grep -q "the kubelet registered driver $GPU_DRIVER" && { reg=1; break; }; sleep 1; done
  if [ -n "$reg" ] && [ -n "$gpu_pid" ] && onnode "kill -0 $gpu_pid" 2>/dev/null; then
    pass "dra-gpu-standin-registered(standin-gpu PID $gpu_pid on the node: the kubelet registered $GPU_DRIVER)"
  else fail dra-gpu-standin-registered "PID '${gpu_pid:-none}'; log: $(glog | tail -3 | tr '\n' ' ')"; fi
  cat <<EOF | k apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: { name: gpu-standin }
spec:
  selectors:
    - cel: { expression: 'device.driver == "$GPU_DRIVER"' }
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: { name: localhost-gpu-standin }
spec:
  driver: $GPU_DRIVER
  nodeName: localhost
  pool: { name: localhost, generation: 1, resourceSliceCount: 1 }
  devices:
    - name: gpu-0
      attributes:
        index: { int: 0 }
        $ROOT_ATTR: { string: "${vf_root:-none}" }
    - name: gpu-1
      attributes:
        index: { int: 1 }
        $ROOT_ATTR: { string: pci0000:80 }
EOF
  # gpu_template NAME [CEL]: a claim of one stand-in GPU (CEL: a selector on it; CEL sees attributes, not names) and one VF under the same root.
  gpu_template() {
    claim_head "$1"
    cat <<EOF
        - name: gpu
          exactly:
            deviceClassName: gpu-standin
EOF
    [ -z "${2:-}" ] || printf '            selectors: [{ cel: { expression: %s } }]\n' "'$2'"
    cat <<EOF
        - name: vf
          exactly: { deviceClassName: sriov-rdma }
      constraints:
        - requests: [gpu, vf]
          matchAttribute: $ROOT_ATTR
EOF
  }

  # --- dra-gpu-alignment: the pod runs; its claim has gpu-0 and the VF, whose slices give the same root ---
  { gpu_template gpu-vf; echo ---; PODNS=$DRA_NS devpod gpu-pod - gpu-vf; } | k apply -f - >/dev/null
  why=""
  kd wait --for=condition=Ready pod/gpu-pod --timeout=180s >/dev/null 2>&1 \
    || why="$why not Ready: $(kd get pod gpu-pod 2>&1 | tail -1) $(kd describe pod gpu-pod 2>&1 | grep -A8 Events | tail -4 | tr '\n' ' ');"
  claim=$(kd get pod gpu-pod -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)
  got=$(kd get resourceclaim "${claim:-none}" -o json 2>/dev/null | py "
r = d.get('status', {}).get('allocation', {}).get('devices', {}).get('results', [])
print(' '.join('%s=%s/%s/%s' % (x['request'], x['driver'], x['pool'], x['device']) for x in sorted(r, key=lambda x: x['request'])))" 2>&1)
  [ "$got" = "gpu=$GPU_DRIVER/localhost/gpu-0 vf=$DRA_DRIVER/localhost/$dra_dev" ] || why="$why claim '$claim' allocated '$got';"
  roots=$(k get resourceslices -o json 2>/dev/null | py "
want = {('$GPU_DRIVER', 'gpu-0'), ('$DRA_DRIVER', '$dra_dev')}
for s in d['items']:
  for x in s['spec'].get('devices', []):
    if (s['spec']['driver'], x['name']) in want: print(x['name'] + '=' + x.get('attributes', {}).get('$ROOT_ATTR', {}).get('string', '?'))" 2>&1 | sort | tr '\n' ' ')
  [ -n "$vf_root" ] && [ "$roots" = "gpu-0=$vf_root $dra_dev=$vf_root " ] || why="$why slices' $ROOT_ATTR '$roots', node's root of $RXE2 '$vf_root';"
  uid=$(kd get resourceclaim "${claim:-none}" -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  glog | grep -q "claim $DRA_NS/$claim ($uid) prepared" || why="$why the stand-in did not prepare $claim ($uid);"
  if [ -z "$why" ]; then pass "dra-gpu-alignment(pod Running; claim $claim: $got; $ROOT_ATTR ${roots% }; the stand-in prepared it)"
  else fail dra-gpu-alignment "$why"; fi
  kd delete pod gpu-pod --wait=false >/dev/null 2>&1
  kd wait --for=delete pod/gpu-pod --timeout=120s >/dev/null 2>&1
  claims_gone >/dev/null

  # --- dra-gpu-alignment-unsatisfiable: pinned to gpu-1 (its index; no VF under its root), the claim stays
  # unallocated, the pod Pending with the scheduler's reason; the PF's VF table and the CDI directory unchanged ---
  before=$(dra_node)
  { gpu_template gpu1-vf "device.attributes[\"$GPU_DRIVER\"].index == 1"; echo ---; PODNS=$DRA_NS devpod gpu1-pod - gpu1-vf; } | k apply -f - >/dev/null
  ev=""
  for _ in $(seq 1 60); do
    ev=$(kd get events --field-selector involvedObject.name=gpu1-pod -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null | grep '^FailedScheduling: .*claim' | tail -1)
    [ -n "$ev" ] && break
    sleep 1
  done
  sleep 3
  phase=$(kd get pod gpu1-pod -o 'jsonpath={.status.phase}' 2>/dev/null)
  claim=$(kd get pod gpu1-pod -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)
  alloc=$(kd get resourceclaim "${claim:-none}" -o 'jsonpath={.status.allocation}' 2>&1)
  after=$(dra_node)
  if [ -n "$ev" ] && [ "$phase" = Pending ] && [ -n "$claim" ] && [ -z "$alloc" ] && [ "$before" = "$after" ]; then
    pass "dra-gpu-alignment-unsatisfiable(pod Pending, claim $claim unallocated, event '$ev'; VF table, CDI dir unchanged)"
  else fail dra-gpu-alignment-unsatisfiable "phase '$phase'; claim '$claim' allocation '$alloc'; event '${ev:-none}'; node before/after differ: $([ "$before" = "$after" ] && echo no || echo "yes: $(echo "$after" | tr '\n' ' ')")"; fi
  kd delete pod gpu1-pod --wait=false >/dev/null 2>&1
  kd wait --for=delete pod/gpu1-pod --timeout=60s >/dev/null 2>&1
  claims_gone >/dev/null
  kd delete resourceclaimtemplate gpu-vf gpu1-vf --ignore-not-found >/dev/null 2>&1

  # --- dra-gpu-standin-gone: the stand-in stopped by its PID (it removes its sockets), its slice and class deleted ---
  [ -n "$gpu_pid" ] && onnode "kill $gpu_pid" >/dev/null 2>&1
  k delete resourceslice localhost-gpu-standin --ignore-not-found >/dev/null 2>&1
  k delete deviceclass gpu-standin --ignore-not-found >/dev/null 2>&1
  left=""
  for _ in $(seq 1 30); do
    left="$(onnode "kill -0 ${gpu_pid:-0} 2>/dev/null && echo process-$gpu_pid; ls $GPU_SOCKS 2>/dev/null" 2>/dev/null | tr '\n' ' ')$(k get resourceslices -o 'jsonpath={.items[*].spec.driver}' 2>/dev/null | tr ' ' '\n' | grep -x "$GPU_DRIVER" | head -1)$(k get deviceclass gpu-standin -o name 2>/dev/null)"
    [ -z "$left" ] && break
    sleep 1
  done
  if [ -z "$left" ] && [ -n "$gpu_pid" ]; then
    pass "dra-gpu-standin-gone(PID $gpu_pid ended: $(glog | tail -1); sockets, slice and DeviceClass gone)"
  else fail dra-gpu-standin-gone "left: '$left'"; fi
  onnode "rm -f $GPU_LOG" >/dev/null 2>&1
fi

# --- dra-off-again: the overlay's config turns the driver off; the VF is sriov-rdma/rxe's again ---
if k apply -k "$work/overlay" >/dev/null && k -n kube-system rollout restart ds/sriov-rdma >/dev/null \
   && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null && wait_overlay_alloc 60; then
  pass "dra-off-again(node allocatable: $got; no dra resource, no driver)"
else fail dra-off-again "node allocatable: ${got:-?}, want $OVERLAY_ALLOC; $(dlog | tail -3 | tr '\n' ' ')"; fi
# The node's policy file as it was (none after the set-up alone), the namespace gone.
onnode "if [ -e /etc/sriov-rdma/.policy.json.dra-e2e ]; then mv /etc/sriov-rdma/.policy.json.dra-e2e /etc/sriov-rdma/policy.json
        else rm -f /etc/sriov-rdma/policy.json; fi" >/dev/null 2>&1
k delete namespace "$DRA_NS" --wait=false >/dev/null 2>&1
