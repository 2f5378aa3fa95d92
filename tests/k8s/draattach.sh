# The DRA attach on the real node (sourced by e2e.sh: in a full run after dra.sh; K8S_ONLY=draattach.sh runs it
# after the set-up alone). The node's containerd has NRI on. The DaemonSet is switched to the DRA driver and the
# NRI plugin as docs/dra.md says (deploy/examples/dra/dra.yaml, daemonset-patch.yaml, ../nri/daemonset-patch.yaml),
# with a config whose first resource, "dra": true, takes PF2's VF 1 and PF1's VF 3 (igbvf VFs with no RDMA device:
# no Soft-RoCE device lives on their netdevs, which move). A pod claims PF2's through a ResourceClaimTemplate
# whose config asks VLAN 120, MTU 9000 and a static address; then, through kubectl and the node shell:
#   dra-attach-run-pod-sandbox  the pod has the VF's netdev as dra0 with the claim's MTU and address, carrier up;
#                               the PF's VF row has VLAN 120; the CNI's record carries the sandbox's ID; the
#                               daemon's attach record exists;
#   dra-attach-network-data     the claim's status.devices[0].networkData: dra0, the address, the MAC dra0 has;
#   dra-attach-restarts         the daemon's pod replaced, then the kubelet killed and started again: the same
#                               sandbox keeps dra0 with its address and carrier, the claim's config still kept;
#   dra-attach-node-crash       the node's daemons and pods SIGKILLed, their netns removed, the daemons started
#                               again: da-pod in a new sandbox has dra0 with its address again (attached at
#                               RunPodSandbox, or at the Synchronize after the plugin registered), the old
#                               sandbox's CNI and attach records are gone;
#   dra-attach-stop-gives-back  (through the new daemon) the pod deleted: the VF is back on the node under its name
#                               with its MAC and MTU, its row as before, no record of the CNI or the attach left;
#   dra-attach-rdma             two pods with a VF of PF2 and of PF1 (each claim selects the PF by the slice's
#                               pfName): the workers' NCCL variables from the NRI plugin name their Soft-RoCE
#                               device on dra0, and ib_write_bw between them runs with that GID index;
#   dra-attach-rdma-gives-back  both deleted: the node as before, no rxe device or record left;
#   dra-attach-off-again        the overlay's config and DaemonSet applied again: the node's allocatable as before,
#                               the DaemonSet's environment as before the file (in a full run: as dra.sh left it).
# The pod's namespace dra-attach gets a node policy entry of its own (VLAN untagged or 100-199); the node's policy
# file is put back as it was at the end.

DA_DRIVER=sriov-rdma.k8s.io
DA_NS=dra-attach
dak() { k -n "$DA_NS" "$@"; }
dapy() { python3 -c "import json, sys; d = json.load(sys.stdin); $1"; }
DA_VF=$(vf_pci "$PF2" 1)
# dra-attach-rdma's second pod: PF1's VF 3 (an igbvf VF of PF1 that is neither rxe's nor vfio's)
DA_VF2=$(vf_pci "$PF1" 3)
DA_NAME=$(onnode "ls /sys/bus/pci/devices/$DA_VF/net" 2>/dev/null)
DA_ATTACHED=/var/lib/kubelet/plugins/$DA_DRIVER/attached
# the log of the daemon's pod on node A (ds/sriov-rdma may pick node B's)
dalog() { k -n kube-system logs "$(daemon_pod localhost)" 2>&1; }
da_row() { onnode "/usr/sbin/ip link show $PF2 | grep ' vf 1 '" 2>/dev/null; }
# da_gone POD...: deletes the pods and waits (up to 30 s after they are gone) for the node as before them and no
# attach record; sets after (node_snap) and left (the attach records and rxe_dra_* devices left)
da_gone() {
  local p
  dak delete pod "$@" --wait=false >/dev/null 2>&1
  for p in "$@"; do dak wait --for=delete "pod/$p" --timeout=120s >/dev/null 2>&1; done
  for _ in $(seq 1 30); do
    after=$(node_snap)
    [ "$after" = "$da_before" ] && onnode "test -z \"\$(ls $DA_ATTACHED 2>/dev/null)\"" >/dev/null 2>&1 && break
    sleep 1
  done
  left=$(onnode "ls $DA_ATTACHED 2>/dev/null; rdma link show 2>/dev/null | grep -o 'rxe_dra_[ab]'" 2>/dev/null | tr '\n' ' ')
}
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
  {'name': 'sriov-rdma/dra', 'dra': True, 'selectors': {'pciAddresses': ['$DA_VF', '$DA_VF2']}, 'requireRdma': False},
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
# its container's environment variables (names): in a full run dra.sh's patches are there already
da_env() { dapy "print(' '.join(e['name'] for e in d['spec']['template']['spec']['containers'][0].get('env', [])))"; }
da_env0=$(da_env < "$work/da-ds.json")
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
# da_tpl NAME PF ADDRESS: a ResourceClaimTemplate of one VF of PF (the slice's pfName attribute) with VLAN 120,
# MTU 9000 and a static address
da_tpl() {
  cat <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: { name: $1, namespace: $DA_NS }
spec:
  spec:
    devices:
      requests:
        - name: vf
          exactly:
            deviceClassName: sriov-rdma
            selectors: [{ cel: { expression: 'device.attributes["$DA_DRIVER"].pfName == "$2"' } }]
      config:
        - requests: [vf]
          opaque:
            driver: $DA_DRIVER
            parameters: { vlan: 120, mtu: 9000, ipam: { type: static, addresses: [{ address: "$3/24" }] } }
EOF
}
da_tpl attach-vf "$PF2" "$DA_ADDR" | k apply -f - >/dev/null
PODNS=$DA_NS devpod da-pod - attach-vf | k apply -f - >/dev/null
why=""
[ -n "$da_on" ] || why="the driver or the NRI plugin did not register: $(dalog | grep -E 'DRA|NRI|error' | tail -4 | tr '\n' ' ');"
if dak wait --for=condition=Ready pod/da-pod --timeout=180s >/dev/null 2>&1; then
  sb=$(onnode "crictl pods -q --name da-pod --namespace $DA_NS --state ready" 2>/dev/null | head -1)
  carrier_wait "$DA_NS" da-pod dra0 >/dev/null
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
  # --- dra-attach-restarts: the daemon's pod replaced, then the kubelet killed and started again, while da-pod
  # runs: the same sandbox keeps dra0 (its address, carrier), the claim stays prepared (its kept config), and the
  # new daemon is the one the next scenario's give-back goes through (its record read from the node) ---
  uid=$(dak get resourceclaim "$claim" -o 'jsonpath={.metadata.uid}' 2>/dev/null)
  old=$(daemon_pod localhost)
  why=""
  if k -n kube-system rollout restart ds/sriov-rdma >/dev/null && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null; then
    new=$(daemon_pod localhost)
    [ -n "$new" ] && [ "$new" != "$old" ] || why="$why the daemon's pod was not replaced ('$old' → '$new');"
    re=""
    for _ in $(seq 1 90); do
      nlog=$(k -n kube-system logs "$new" 2>&1)
      echo "$nlog" | grep -q "DRA: the kubelet registered driver $DA_DRIVER" && echo "$nlog" | grep -q "NRI: registered" && { re=1; break; }
      sleep 1
    done
    [ -n "$re" ] || why="$why the new daemon did not register the driver and the NRI plugin;"
  else why="$why the DaemonSet's restart did not finish;"; fi
  onnode 'kill $(pidof kubelet)' >/dev/null 2>&1
  sleep 3; node_ready; wait_exec
  sb2=$(onnode "crictl pods -q --name da-pod --namespace $DA_NS --state ready" 2>/dev/null | head -1)
  link2=$(dak exec da-pod -- ip -o link show dra0 2>&1)
  addr2=$(dak exec da-pod -- ip -o -4 addr show dra0 2>&1 | awk '{ print $4 }')
  [ -n "$sb" ] && [ "$sb2" = "$sb" ] || why="$why sandbox '$sb' → '$sb2';"
  echo "$link2" | grep -q LOWER_UP && [ "$addr2" = "$DA_ADDR/24" ] || why="$why dra0 after the restarts: '$(echo "$link2" | head -c 160)' '$addr2';"
  onnode "test -s /var/lib/kubelet/plugins/$DA_DRIVER/claims/$uid.json" >/dev/null 2>&1 || why="$why no kept config for claim $uid;"
  if [ -z "$why" ]; then pass "dra-attach-restarts(daemon pod $old → $new, kubelet restarted: sandbox ${sb:0:12} kept dra0 $addr2 LOWER_UP; claim $uid still prepared)"
  else fail dra-attach-restarts "$why $(dalog | grep -E 'DRA|NRI' | tail -3 | tr '\n' ' ')"; fi
  # --- dra-attach-node-crash: kubelet, containerd, the shims and the pods' processes SIGKILLed, the pods' netns
  # removed (the kernel returns the VF to the node), the daemons started again (scenarios.sh's node crash). The
  # kubelet runs da-pod in a new sandbox; the VF goes into it as dra0 again, by RunPodSandbox if the daemon's NRI
  # plugin is back first, else by the Synchronize that follows its registration; the old sandbox's records go. ---
  crash_node_a
  why=""; sb3=""
  for _ in $(seq 1 150); do
    sb3=$(onnode "crictl pods -q --name da-pod --namespace $DA_NS --state ready" 2>/dev/null | head -1)
    [ -n "$sb3" ] && [ "$sb3" != "$sb" ] && dak exec da-pod -- ip -o link show dra0 2>/dev/null | grep -q LOWER_UP && break
    sb3=""; sleep 2
  done
  if [ -n "$sb3" ]; then
    addr3=$(dak exec da-pod -- ip -o -4 addr show dra0 2>&1 | awk '{ print $4 }')
    [ "$addr3" = "$DA_ADDR/24" ] || why="$why dra0's address in the new sandbox: '$addr3';"
    left=""
    for _ in $(seq 1 60); do
      left=$(onnode "grep -l '$sb' /var/lib/cni/sriov-rdma/* 2>/dev/null; ls $DA_ATTACHED/$sb.json 2>/dev/null" 2>/dev/null | tr '\n' ' ')
      [ -z "$left" ] && break; sleep 1
    done
    [ -z "$left" ] || why="$why the old sandbox's records are left: $left;"
    onnode "grep -l '$sb3' /var/lib/cni/sriov-rdma/* >/dev/null 2>&1 && test -s $DA_ATTACHED/$sb3.json" >/dev/null 2>&1 \
      || why="$why no CNI record or attach record of the new sandbox ${sb3:0:12};"
    [ "$(da_row | grep -c 'vlan 120')" = 1 ] || why="$why PF2's VF 1 row: '$(da_row)';"
  else why="da-pod has no ready sandbox other than ${sb:0:12} with dra0 up: $(dak get pod da-pod -o wide 2>&1 | tail -1) $(dak describe pod da-pod 2>&1 | grep -A6 Events | tail -4 | tr '\n' ' ')"; fi
  how="RunPodSandbox"; dalog | grep -q "attached now (" && how="the Synchronize after the plugin registered"
  if [ -z "$why" ]; then pass "dra-attach-node-crash(sandbox ${sb:0:12} → ${sb3:0:12}: dra0 $addr3 LOWER_UP again, attached at $how; the old sandbox's records gone)"
  else fail dra-attach-node-crash "$why $(dalog | grep -E 'DRA attach|NRI' | tail -3 | tr '\n' ' ')"; fi
else
  fail dra-attach-run-pod-sandbox "$why not Ready: $(dak get pod da-pod -o wide 2>&1 | tail -1) $(dak describe pod da-pod 2>&1 | grep -A8 Events | tail -5 | tr '\n' ' ') $(dalog | grep -E 'DRA|NRI' | tail -4 | tr '\n' ' ')"
  fail dra-attach-network-data "not run: the pod did not come up"
  fail dra-attach-restarts "not run: the pod did not come up"
  fail dra-attach-node-crash "not run: the pod did not come up"
fi

# --- dra-attach-stop-gives-back ---
da_gone da-pod
if [ "$after" = "$da_before" ] && [ -z "$left" ]; then
  pass "dra-attach-stop-gives-back($DA_NAME back on the node with its MAC and MTU, PF rows as before, no record of the CNI or the attach)"
else fail dra-attach-stop-gives-back "attach records '$left'; node before/after: $(diff <(echo "$da_before") <(echo "$after") | tr '\n' ' ' | head -c 600)"; fi

# --- dra-attach-rdma: two pods, each with a VF of another PF through DRA (PF2's VF 1, PF1's VF 3; the PFs share
# the node's wire), VLAN 120. Each pod's privileged init container makes a Soft-RoCE device on dra0 (the stand-in
# for the VF's own RDMA function, as nri.sh does on net1) and waits for its RoCE v2 GID; the worker then gets the
# NCCL variables from the daemon's NRI plugin (the attachment found by the sandbox's ID, as for a Multus pod), and
# ib_write_bw runs between the workers with the device and GID index from their environment. Then the pods are
# deleted: the node as before, no rxe device of theirs left. ---
# da_rpod NAME TEMPLATE RXE: such a pod
da_rpod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: { name: $1, namespace: $DA_NS }
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
$(rxe_init dra0 "$3")
  containers:
    - name: worker
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sleep", "1000000"]
      resources: { claims: [{ name: vf }] }
      # The Soft-RoCE device's /dev/infiniband/uverbsN: the claim's CDI spec would carry the VF's own (a
      # netdev-only igb VF has none), so the worker is privileged and mounts the node's, as e2e.sh's pods do.
      securityContext: { privileged: true }
      volumeMounts: [{ name: infiniband, mountPath: /dev/infiniband }]
  volumes: [{ name: infiniband, hostPath: { path: /dev/infiniband, type: Directory } }]
  resourceClaims:
    - name: vf
      resourceClaimTemplateName: $2
EOF
}
# nccl_in POD NAME: the worker's value of NCCL variable NAME (busybox has env, not printenv)
nccl_in() { dak exec "$1" -c worker -- env 2>/dev/null | sed -n "s/^$2=//p"; }
da_tpl attach-pf2 "$PF2" 10.67.0.11 | k apply -f - >/dev/null
da_tpl attach-pf1 "$PF1" 10.67.0.12 | k apply -f - >/dev/null
{ da_rpod da-ra attach-pf2 rxe_dra_a; echo ---; da_rpod da-rb attach-pf1 rxe_dra_b; } | k apply -f - >/dev/null
why=""
if dak wait --for=condition=Ready pod/da-ra pod/da-rb --timeout=240s >/dev/null 2>&1; then
  for p in da-ra:rxe_dra_a da-rb:rxe_dra_b; do
    hca=$(nccl_in "${p%%:*}" NCCL_IB_HCA); ifn=$(nccl_in "${p%%:*}" NCCL_SOCKET_IFNAME); gi=$(nccl_in "${p%%:*}" NCCL_IB_GID_INDEX)
    [ "$hca" = "${p#*:}:1" ] && [ "$ifn" = dra0 ] && [ -n "$gi" ] \
      || why="$why ${p%%:*}'s NCCL variables: HCA '$hca' IFNAME '$ifn' GID_INDEX '$gi';"
  done
  rows=$(onnode "/usr/sbin/ip link show $PF2 | grep -c ' vf 1 .*vlan 120'; /usr/sbin/ip link show $PF1 | grep -c ' vf 3 .*vlan 120'" 2>/dev/null | tr '\n' ' ')
  [ "$rows" = "1 1 " ] || why="$why VLAN 120 rows of PF2's VF 1 and PF1's VF 3: '$rows';"
  ga=$(nccl_in da-ra NCCL_IB_GID_INDEX); gb=$(nccl_in da-rb NCCL_IB_GID_INDEX)
  if [ -z "$why" ]; then
    rpair da-write-bw "$DA_NS" da-ra "$DA_NS" da-rb "ib_write_bw -d rxe_dra_a -x $ga -n 1000 -F --report_gbits" \
      "ib_write_bw -d rxe_dra_b -x $gb -n 1000 -F --report_gbits 10.67.0.11"
    bw=$(echo "$OUT" | awk '/BW average/ { getline; print $4; exit }')
    [ "$RC" = 0 ] && [ -n "$bw" ] || why="$why ib_write_bw rc=$RC: $(echo "$OUT" | tail -3 | tr '\n' ' ') server: $(tail -2 "$work/da-write-bw.server" | tr '\n' ' ');"
  fi
  if [ -z "$why" ]; then pass "dra-attach-rdma(da-ra on $PF2 VF 1, da-rb on $PF1 VF 3, VLAN 120; from NRI: NCCL_IB_HCA rxe_dra_a:1 / rxe_dra_b:1, NCCL_IB_GID_INDEX $ga / $gb, NCCL_SOCKET_IFNAME dra0; ib_write_bw -x \$NCCL_IB_GID_INDEX: $bw Gbit/s under TCG)"
  else fail dra-attach-rdma "$why $(dalog | grep -E 'NRI: dra-attach|DRA attach: dra-attach/da-r' | tail -4 | tr '\n' ' ')"; fi
else
  fail dra-attach-rdma "not Ready: $(dak get pods -o wide 2>&1 | tail -2 | tr '\n' ' ') $(dak describe pod da-ra da-rb 2>&1 | grep -A6 Events | tail -4 | tr '\n' ' ')"
fi
da_gone da-ra da-rb
if [ "$after" = "$da_before" ] && [ -z "$left" ]; then
  pass "dra-attach-rdma-gives-back(both pods deleted: PF rows, VF names, MACs and MTUs as before, no rxe device or record left)"
else fail dra-attach-rdma-gives-back "left: '$left'; node before/after: $(diff <(echo "$da_before") <(echo "$after") | tr '\n' ' ' | head -c 600)"; fi
dak delete resourceclaimtemplate attach-pf1 attach-pf2 --ignore-not-found >/dev/null 2>&1

# --- dra-attach-off-again: the overlay's config and the DaemonSet as they were (no DRA, no NRI, no mounts) ---
dak delete resourceclaimtemplate attach-vf --ignore-not-found >/dev/null 2>&1
if k apply -k "$work/overlay" >/dev/null && k replace -f "$work/da-ds.json" >/dev/null \
   && k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null && wait_overlay_alloc 60; then
  env=$(k -n kube-system get ds sriov-rdma -o json 2>&1 | da_env)
  if [ "$env" = "$da_env0" ]; then pass "dra-attach-off-again(node allocatable: $got; DaemonSet env as before: ${env:-none})"
  else fail dra-attach-off-again "the DaemonSet's env is '$env', before the attach it was '$da_env0'"; fi
else fail dra-attach-off-again "node allocatable: ${got:-?}, want $OVERLAY_ALLOC; $(dalog | tail -3 | tr '\n' ' ')"; fi
onnode "if [ -e /etc/sriov-rdma/.policy.json.dra-attach ]; then mv /etc/sriov-rdma/.policy.json.dra-attach /etc/sriov-rdma/policy.json
        else rm -f /etc/sriov-rdma/policy.json; fi" >/dev/null 2>&1
k delete namespace "$DA_NS" --wait=false >/dev/null 2>&1
