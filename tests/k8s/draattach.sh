# The DRA attach on the real node (sourced by e2e.sh: in a full run after dra.sh; K8S_ONLY=draattach.sh runs it
# after the set-up alone). The node's containerd has NRI on. The DaemonSet is switched to the DRA driver, the NRI plugin and the
# attach as docs/dra.md says (deploy/examples/dra/dra.yaml, daemonset-patch.yaml, ../nri/daemonset-patch.yaml),
# with a config whose first resource, "dra": true, takes PF2's VF 1 (an igbvf VF with no RDMA
# device: no Soft-RoCE device lives on its netdev, which moves). A pod claims it through a ResourceClaimTemplate
# whose config asks VLAN 120, MTU 9000 and a static address; then, through kubectl and the node shell:
#   dra-attach-run-pod-sandbox  the pod has the VF's netdev as dra0 with the claim's MTU and address, carrier up;
#                               the PF's VF row has VLAN 120; the CNI's record carries the sandbox's ID; the
#                               daemon's attach record exists;
#   dra-attach-network-data     the claim's status.devices[0].networkData: dra0, the address, the MAC dra0 has;
#   dra-attach-stop-gives-back  the pod deleted: the VF is back on the node under its name with its MAC and MTU,
#                               its row as before, no record of the CNI or the attach left;
#   dra-attach-off-again        the overlay's config and DaemonSet applied again: the node's allocatable as before.
# The pod's namespace dra-attach gets a node policy entry of its own (VLAN untagged or 100-199); the node's policy
# file is put back as it was at the end.

DA_DRIVER=sriov-rdma.k8s.io
DA_NS=dra-attach
dak() { k -n "$DA_NS" "$@"; }
dapy() { python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }
DA_VF=$(vf_pci "$PF2" 1)
DA_NAME=$(onnode "ls /sys/bus/pci/devices/$DA_VF/net" 2>/dev/null)
DA_ATTACHED=/var/lib/kubelet/plugins/$DA_DRIVER/attached
dalog() { k -n kube-system logs ds/sriov-rdma 2>&1; }
da_row() { onnode "/usr/sbin/ip link show $PF2 | grep ' vf 1 '" 2>/dev/null; }
da_before=$(node_snap)
k create namespace "$DA_NS" >/dev/null 2>&1
da_pol0=$(onnode 'cat /etc/sriov-rdma/policy.json 2>/dev/null' 2>/dev/null)
[ -n "$da_pol0" ] || da_pol0='{}'
da_pol=$(echo "$da_pol0" | dapy "
n = d.setdefault('namespaces', {'*': {}})
n['$DA_NS'] = {'vlans': [0, '100-199']}
print(json.dumps(d))")
onnode "mkdir -p /etc/sriov-rdma; if [ -e /etc/sriov-rdma/policy.json ]; then cp -p /etc/sriov-rdma/policy.json /etc/sriov-rdma/.policy.json.dra-attach; fi
        printf '%s' '$da_pol' > /etc/sriov-rdma/.policy.json.new && mv /etc/sriov-rdma/.policy.json.new /etc/sriov-rdma/policy.json" >/dev/null 2>&1

# --- switching the driver, the NRI plugin and the attach on ---
da_cfg=$(python3 -c "import json; print(json.dumps({'data': {'config.json': json.dumps({'resources': [
  {'name': 'sriov-rdma/dra', 'dra': True, 'selectors': {'pciAddresses': ['$DA_VF']}, 'requireRdma': False},
  {'name': 'sriov-rdma/rxe', 'selectors': {'pciAddresses': ['$RXE1', '$RXE2']}},
  {'name': 'sriov-rdma/vfio', 'selectors': {'pciAddresses': ['$VFIO'], 'drivers': ['vfio-pci']}},
  {'selectors': {'pfNames': ['$PF1'], 'drivers': ['igbvf']}, 'requireRdma': False},
  {'name': 'sriov-rdma/pf2', 'selectors': {'pfNames': ['$PF2'], 'drivers': ['igbvf']}, 'requireRdma': False}]})}}))")
# No kube-proxy on this node: the API server's own address instead of the service IP (as dra.sh).
da_api="{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"device-plugin\",\"env\":[
  {\"name\":\"KUBERNETES_SERVICE_HOST\",\"value\":\"10.0.2.2\"},{\"name\":\"KUBERNETES_SERVICE_PORT\",\"value\":\"$AP\"}]}]}}}}"
# The DaemonSet as it is, put back at the end (each patch is a revision of its own: no single rollout undo).
k -n kube-system get ds sriov-rdma -o json 2>/dev/null \
  | dapy "[d['metadata'].pop(f, None) for f in ('resourceVersion', 'managedFields', 'generation')]; d.pop('status', None); print(json.dumps(d))" > "$work/da-ds.json"
da_on=""
if k apply -f "$top/deploy/examples/dra/dra.yaml" >/dev/null \
   && k -n kube-system patch configmap sriov-rdma-config --type merge -p "$da_cfg" >/dev/null \
   && k -n kube-system patch ds sriov-rdma --patch-file "$top/deploy/examples/dra/daemonset-patch.yaml" >/dev/null \
   && k -n kube-system patch ds sriov-rdma --patch-file "$top/deploy/examples/nri/daemonset-patch.yaml" >/dev/null \
   && k -n kube-system patch ds sriov-rdma -p "$da_api" >/dev/null \
   && k -n kube-system rollout restart ds/sriov-rdma >/dev/null \
   && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; then
  for _ in $(seq 1 90); do
    dalog | grep -q "DRA: the kubelet registered driver $DA_DRIVER" && dalog | grep -q "NRI: registered" && { da_on=1; break; }
    sleep 1
  done
fi

# --- dra-attach-run-pod-sandbox ---
DA_ADDR=10.67.0.10
cat <<EOF | k apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: { name: attach-vf, namespace: $DA_NS }
spec:
  spec:
    devices:
      requests:
        - name: vf
          exactly: { deviceClassName: sriov-rdma }
      config:
        - requests: [vf]
          opaque:
            driver: $DA_DRIVER
            parameters: { vlan: 120, mtu: 9000, ipam: { type: static, addresses: [{ address: "$DA_ADDR/24" }] } }
EOF
PODNS=$DA_NS devpod da-pod - attach-vf | k apply -f - >/dev/null
why=""
[ -n "$da_on" ] || why="the driver or the NRI plugin did not register: $(dalog | grep -E 'DRA|NRI|error' | tail -4 | tr '\n' ' ');"
if dak wait --for=condition=Ready pod/da-pod --timeout=180s >/dev/null 2>&1; then
  sb=$(onnode "crictl pods -q --name da-pod --namespace $DA_NS --state ready" 2>/dev/null | head -1)
  link=$(dak exec da-pod -- ip -o link show dra0 2>&1)
  addr=$(dak exec da-pod -- ip -o -4 addr show dra0 2>&1 | awk '{ print $4 }')
  mac=$(dak exec da-pod -- cat /sys/class/net/dra0/address 2>&1)
  echo "$link" | grep -q 'mtu 9000' || why="$why dra0: '$(echo "$link" | head -c 200)';"
  echo "$link" | grep -q 'LOWER_UP' || why="$why dra0 has no carrier;"
  [ "$addr" = "$DA_ADDR/24" ] || why="$why dra0's address '$addr';"
  row=$(da_row)
  echo "$row" | grep -q 'vlan 120' || why="$why PF2's VF 1 row: '$row';"
  rec=$(onnode "grep -l '$sb' /var/lib/cni/sriov-rdma/* 2>/dev/null | head -1" 2>/dev/null)
  [ -n "$sb" ] && [ -n "$rec" ] || why="$why no CNI record with sandbox '${sb:-?}';"
  onnode "test -s $DA_ATTACHED/$sb.json" >/dev/null 2>&1 || why="$why no attach record $DA_ATTACHED/$sb.json;"
  if [ -z "$why" ]; then pass "dra-attach-run-pod-sandbox(da-pod's dra0: $DA_NAME, mtu 9000, $addr, LOWER_UP; PF2 row '$(echo "$row" | grep -o 'vf 1 .*vlan 120')'; CNI record and attach record under sandbox ${sb:0:12})"
  else fail dra-attach-run-pod-sandbox "$why $(dalog | grep -E 'DRA attach|NRI' | tail -3 | tr '\n' ' ')"; fi
  # --- dra-attach-network-data ---
  claim=$(dak get pod da-pod -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)
  nd=""
  for _ in $(seq 1 20); do
    nd=$(dak get resourceclaim "$claim" -o json 2>/dev/null | dapy "
n = (d.get('status', {}).get('devices') or [{}])[0].get('networkData', {})
print(n.get('interfaceName', ''), ','.join(n.get('ips', [])), n.get('hardwareAddress', ''))" 2>/dev/null)
    [ -n "${nd// /}" ] && break; sleep 1
  done
  if [ "$nd" = "dra0 $DA_ADDR/24 $mac" ]; then pass "dra-attach-network-data(claim $claim status.devices[0].networkData: $nd)"
  else fail dra-attach-network-data "networkData '$nd', want 'dra0 $DA_ADDR/24 $mac'; $(dalog | grep 'DRA attach' | tail -2 | tr '\n' ' ')"; fi
else
  fail dra-attach-run-pod-sandbox "$why not Ready: $(dak get pod da-pod -o wide 2>&1 | tail -1) $(dak describe pod da-pod 2>&1 | grep -A8 Events | tail -5 | tr '\n' ' ') $(dalog | grep -E 'DRA|NRI' | tail -4 | tr '\n' ' ')"
  fail dra-attach-network-data "not run: the pod did not come up"
fi

# --- dra-attach-stop-gives-back ---
dak delete pod da-pod --wait=false >/dev/null 2>&1
dak wait --for=delete pod/da-pod --timeout=120s >/dev/null 2>&1
after=""
for _ in $(seq 1 30); do
  after=$(node_snap)
  [ "$after" = "$da_before" ] && onnode "test -z \"\$(ls $DA_ATTACHED 2>/dev/null)\"" >/dev/null 2>&1 && break
  sleep 1
done
left=$(onnode "ls $DA_ATTACHED 2>/dev/null" 2>/dev/null | tr '\n' ' ')
if [ "$after" = "$da_before" ] && [ -z "$left" ]; then
  pass "dra-attach-stop-gives-back($DA_NAME back on the node with its MAC and MTU, PF rows as before, no record of the CNI or the attach)"
else fail dra-attach-stop-gives-back "attach records '$left'; node before/after: $(diff <(echo "$da_before") <(echo "$after") | tr '\n' ' ' | head -c 600)"; fi

# --- dra-attach-off-again: the overlay's config and the DaemonSet as they were (no DRA, no NRI, no mounts) ---
dak delete resourceclaimtemplate attach-vf --ignore-not-found >/dev/null 2>&1
if k apply -k "$work/overlay" >/dev/null && k replace -f "$work/da-ds.json" >/dev/null \
   && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null && wait_overlay_alloc 60; then
  env=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.spec.template.spec.containers[0].env[*].name}' 2>&1)
  case " $env " in
    *" SRIOV_RDMA_NRI "*|*" NODE_NAME "*) fail dra-attach-off-again "the DaemonSet still has '$env'" ;;
    *) pass "dra-attach-off-again(node allocatable: $got; DaemonSet env: ${env:-none})" ;;
  esac
else fail dra-attach-off-again "node allocatable: ${got:-?}, want $OVERLAY_ALLOC; $(dalog | tail -3 | tr '\n' ' ')"; fi
onnode "if [ -e /etc/sriov-rdma/.policy.json.dra-attach ]; then mv /etc/sriov-rdma/.policy.json.dra-attach /etc/sriov-rdma/policy.json
        else rm -f /etc/sriov-rdma/policy.json; fi" >/dev/null 2>&1
k delete namespace "$DA_NS" --wait=false >/dev/null 2>&1
