# Node B's scenarios (sourced by e2e.sh when K8S_NODE_B=crio, after every other scenario file): the second node of
# the cluster, sriov-b, whose runtime is CRI-O v1.36.3 (pinns makes its pods' namespaces, conmon watches its
# containers, runc runs them). Its one PF is pfb0 with 3 VFs (node A's are named by the kernel, 7 and 2 VFs); the
# one DaemonSet and the one config of the set-up serve it (the overlay lists pfb0 as sriov-rdma/pfb). It is tainted
# NoSchedule: what runs here tolerates the taint and is pinned to it (nodeSelector, or nodeName for its shell).
# Everything is checked in the API server or in the node's kernel (through a node shell on node B), not by the exit
# status of a command of ours.

NADC=sriov-rdma-crio
PODC=crio-a
MACC=02:00:00:0b:00:01
VLANC=200
TAINT_KEY=${NODEB_TAINT%%=*}
kb() { k get node "$NODEB" -o "jsonpath=$1" 2>/dev/null; }
capb() { kb "{.status.$1.${2//./\\.}}"; }
onb() { k -n kube-system exec node-debug-b -- chroot /host /bin/sh -c "$1"; }
# In the pod (this file runs without scenarios.sh's helpers in a K8S_ONLY run).
inpodc() { k exec "$PODC" -- sh -c "$1"; }
crio_fail_rest() { # crio_fail_rest NAME...: scenarios that cannot run after a failed one, each a FAIL ($CRIO_WHY)
  local n
  for n in "$@"; do fail "$n" "$CRIO_WHY"; done
}

# --- crio-node-ready: the kubelet on CRI-O registered node B, which is Ready, tainted, with its runtime named ---
ready=""
for _ in $(seq 1 600); do
  kill -0 "$qpidb" 2>/dev/null || break
  ready=$(kb '{.status.conditions[?(@.type=="Ready")].status}')
  [ "$ready" = True ] && break
  sleep 1
done
rt=$(kb '{.status.nodeInfo.containerRuntimeVersion}')
taint=$(kb '{range .spec.taints[*]}{.key}={.value}:{.effect}{" "}{end}')
if [ "$ready" = True ] && [ "$rt" = cri-o://1.36.3 ] && echo " $taint" | grep -q " $NODEB_TAINT "; then
  pass "crio-node-ready($NODEB: kubelet $(kb '{.status.nodeInfo.kubeletVersion}') on $rt, taint $NODEB_TAINT, $((SECONDS - t0))s after start)"
else
  fail crio-node-ready "Ready=${ready:-none} runtime='$rt' taints='$taint': $(k get nodes -o wide 2>&1 | tr '\n' ';')"
  tail -30 "$consoleb" | sed 's/^/  console B: /'
  CRIO_WHY="node $NODEB is not Ready"
  crio_fail_rest $(expected_of crio.sh | grep -vx crio-node-ready)
  return 0
fi

# A shell on node B, as on node A, pinned to it by name (it tolerates every taint). Its /host sees the mounts made
# after it started (pinns's netns files) only with HostToContainer propagation.
sed -e 's/^  name: node-debug$/  name: node-debug-b/' -e "s/^spec:\$/spec:\\n  nodeName: $NODEB/" \
    -e 's/^\( *\)mountPath: \/host$/&\n\1mountPropagation: HostToContainer/' \
    "$here/manifests/node-debug.yaml" | k apply -f - >/dev/null
if ! k -n kube-system wait --for=condition=Ready pod/node-debug-b --timeout=240s >/dev/null; then
  CRIO_WHY="node shell pod on $NODEB not Ready: $(k -n kube-system describe pod node-debug-b 2>&1 | tail -6 | tr '\n' ' ')"
  crio_fail_rest $(expected_of crio.sh | grep -vx crio-node-ready)
  return 0
fi

# --- crio-daemonset-ready: the node labelled as node A is, the one DaemonSet runs its pod there (under CRI-O),
#     whose installer put our build into node B's /opt/cni/bin ---
k label node "$NODEB" feature.node.kubernetes.io/network-sriov.capable=true --overwrite >/dev/null
dsb=""; ok=""
for _ in $(seq 1 300); do
  dsb=$(daemon_pod "$NODEB")
  [ -n "$dsb" ] && [ "$(k -n kube-system get pod "$dsb" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] \
    && { ok=1; break; }
  sleep 1
done
want=$(sha256sum "$top/target/release/sriov-rdma" | cut -d' ' -f1)
got=$(onb 'sha256sum /opt/cni/bin/sriov-rdma' 2>/dev/null | cut -d' ' -f1)
cid=$(k -n kube-system get pod "$dsb" -o 'jsonpath={.status.containerStatuses[0].containerID}' 2>/dev/null)
nready=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.status.numberReady}' 2>/dev/null)
if [ -n "$ok" ] && [ "$got" = "$want" ] && [ "${cid%%://*}" = cri-o ] && [ "$nready" = 2 ]; then
  pass "crio-daemonset-ready($dsb Ready on $NODEB, container ${cid:0:20}…, DaemonSet numberReady 2, /opt/cni/bin/sriov-rdma = target/release/sriov-rdma)"
else
  fail crio-daemonset-ready "pod '${dsb:-none}' ready=${ok:-no} containerID='$cid' numberReady=$nready sha256 node=${got:-none} built=$want: $(k -n kube-system get pods -o wide 2>&1 | grep "$NODEB" | tr '\n' ' ') $(k -n kube-system logs "$dsb" --all-containers 2>&1 | tail -5 | tr '\n' ' ')"
fi

# --- crio-allocatable: node B's VFs in its allocatable, as many as its PF has, and none of node A's resources ---
numvfs=$(onb "cat /sys/class/net/$PFB/device/sriov_numvfs" 2>/dev/null)
alloc=""
for _ in $(seq 1 120); do alloc=$(capb allocatable sriov-rdma/pfb); [ "$alloc" = "$numvfs" ] && [ -n "$alloc" ] && break; sleep 1; done
others="pf1=$(capb allocatable sriov-rdma/pf1) pf2=$(capb allocatable sriov-rdma/pf2) rxe=$(capb allocatable sriov-rdma/rxe) vfio=$(capb allocatable sriov-rdma/vfio)"
# Node A's resources select nothing here (0, or not registered at all).
if [ -n "$numvfs" ] && [ "$numvfs" = "$PFB_VFS" ] && [ "$alloc" = "$numvfs" ] && ! echo "$others" | grep -q '=[1-9]'; then
  pass "crio-allocatable($NODEB allocatable sriov-rdma/pfb=$alloc = $PFB's sriov_numvfs; $others)"
else
  fail crio-allocatable "$PFB sriov_numvfs '${numvfs}', allocatable sriov-rdma/pfb '${alloc}', $others: $(k get node "$NODEB" -o 'jsonpath={.status.allocatable}' 2>&1)"
fi

# What DEL must give back on node B: pfb0's rows, every VF's netdev name, MAC and MTU, the records, the leases.
snapb() {
  onb "/usr/sbin/ip link show $PFB | grep ' vf '
       for v in /sys/class/net/$PFB/device/virtfn*; do
         p=\$(basename \$(readlink \$v)); n=\$(ls /sys/bus/pci/devices/\$p/net 2>/dev/null)
         echo \"\$p \$n \$(cat /sys/class/net/\$n/address 2>/dev/null) \$(cat /sys/class/net/\$n/mtu 2>/dev/null)\"; done
       echo records: \$(ls /var/lib/cni/sriov-rdma 2>/dev/null | grep -v '[.]lock\$' | tr '\n' ' ')
       echo leases: \$(ls /var/lib/cni/sriov-rdma-ipam/$NADC 2>/dev/null | grep '^10[.]' | tr '\n' ' ')" 2>&1
}
# nodes_differ SECONDS A B: waits up to SECONDS for node A's node_snap to be A and node B's snapb to be B (the files
# of both nodes, cluster.sh and collective.sh, which run after this one); prints what differs, nothing when both are
nodes_differ() {
  local a b
  for _ in $(seq 1 "$1"); do a=$(node_snap); b=$(snapb); [ "$a" = "$2" ] && [ "$b" = "$3" ] && return 0; sleep 1; done
  [ "$a" = "$2" ] || printf ' node A differs: %s;' "$(diff <(echo "$2") <(echo "$a") | tr '\n' ';')"
  [ "$b" = "$3" ] || printf ' node B differs: %s;' "$(diff <(echo "$3") <(echo "$b") | tr '\n' ';')"
}
BEFOREB=$(snapb)
say "node B before: $(echo "$BEFOREB" | tr '\n' ';')"

# --- crio-pod-vf: a pod on node B through Multus and a NAD (VLAN 200, a MAC) gets one of its VFs ---
mknad default "$NADC" sriov-rdma/pfb '"capabilities":{"deviceID":true,"CNIDeviceInfoFile":true},"vlan":'"$VLANC"',"mac":"'"$MACC"'","spoofchk":"on","mtu":9000,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.8.0.0/24","rangeStart":"10.8.0.10","rangeEnd":"10.8.0.99"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}' \
  | k apply -f - >/dev/null
# crio_pod NAME: a pod on node B with one VF of its resource, net1 on the NAD above
crio_pod() { PODNODE=$NODEB vf_pod "$1" "$NADC" sriov-rdma/pfb; }
crio_pod "$PODC" | k apply -f - >/dev/null
t=$(date +%s%3N)
up_ok=""
if k wait --for=condition=Ready "pod/$PODC" --timeout=300s >/dev/null 2>&1; then
  [ "$(carrier_wait default "$PODC")" = 1 ] && up_ok=1
fi
# crio_state: what node B's kernel and CRI-O show of the pod's VF; sets VFC (PCI), IDXC (its index on pfb0), ROWC
# (its row in pfb0's VF table), RECC (our record of it), NSC (the record's netns), LINKC (net1 in that netns),
# SBC (the pod's sandbox, from crictl on node B).
crio_state() {
  # The device plugin's variable, read from the container's first process ('-' stays in the name there).
  VFC=$(inpodc "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | sed -n 's/^PCIDEVICE_SRIOV-RDMA_PFB=//p')
  STC=$(k get pod "$PODC" -o 'jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}' 2>/dev/null \
        | tr -d ' \n' | sed -n 's/.*"pci-address":"\([^"]*\)".*/\1/p')
  IDXC=$(onb "for v in /sys/class/net/$PFB/device/virtfn*; do [ \$(basename \$(readlink \$v)) = '$VFC' ] && echo \${v##*virtfn}; done" 2>/dev/null)
  ROWC=$(onb "/usr/sbin/ip link show $PFB | grep ' vf $IDXC '" 2>/dev/null)
  RECC=$(onb "cat /var/lib/cni/sriov-rdma/$VFC.json" 2>/dev/null)
  NSC=$(echo "$RECC" | tr -d '\n' | sed -n 's/.*"netns": *"\([^"]*\)".*/\1/p')
  LINKC=$(onb "/usr/sbin/ip -n '${NSC##*/}' -o link show net1" 2>/dev/null)
  SBC=$(onb "crictl pods -q --name $PODC --state ready" 2>/dev/null)
}
if [ -n "$up_ok" ]; then
  say "pod start on $NODEB (kubectl apply → Ready with net1 carrier): $PODC $(( $(date +%s%3N) - t )) ms"
  crio_state
  uid=$(k get pod "$PODC" -o 'jsonpath={.metadata.uid}')
  node=$(k get pod "$PODC" -o 'jsonpath={.spec.nodeName}')
  why=""
  [ "$node" = "$NODEB" ] || why="$why scheduled to '$node';"
  [ -n "$VFC" ] || why="$why no PCIDEVICE_SRIOV-RDMA_PFB in the container;"
  [ "$STC" = "$VFC" ] || why="$why network-status pci-address '$STC' is not the allocated VF '$VFC';"
  [ -n "$IDXC" ] || why="$why '$VFC' is not a VF of $PFB;"
  echo "$ROWC" | grep -q "link/ether $MACC" || why="$why no MAC $MACC in the row;"
  echo "$ROWC" | grep -q "vlan $VLANC" || why="$why no vlan $VLANC in the row;"
  case "$NSC" in /var/run/netns/?*) ;; *) why="$why record netns '$NSC' is not pinns's /var/run/netns/<id>;" ;; esac
  echo "$LINKC" | grep -q 'LOWER_UP' || why="$why net1 in $NSC has no carrier: '$LINKC';"
  echo "$LINKC" | grep -q "link/ether $MACC" || why="$why net1 in $NSC has not MAC $MACC;"
  echo "$RECC" | grep -q "K8S_POD_UID=$uid" || why="$why our record has not K8S_POD_UID=$uid;"
  echo "$RECC" | tr -d '\n' | grep -q "\"container_id\": *\"$SBC\"" || why="$why record's container_id is not the sandbox '$SBC';"
  if [ -z "$why" ]; then
    pass "crio-pod-vf($PODC on $NODEB: $VFC = $PFB vf $IDXC, row '$(echo "$ROWC" | grep -o "vf $IDXC .*vlan $VLANC" | cut -c1-80)', net1 LOWER_UP in ${NSC}, record K8S_POD_UID=$uid, sandbox ${SBC:0:13})"
  else
    fail crio-pod-vf "$why row '$ROWC'; record: $(echo "$RECC" | tr -d '\n' | cut -c1-400)"
  fi
else
  fail crio-pod-vf "$PODC not Ready with net1 carrier: $(k get pod "$PODC" -o wide 2>&1 | tail -1) $(k describe pod "$PODC" 2>&1 | grep -A10 Events | tail -8 | tr '\n' ' ')"
fi
# The plugin's share of that pod start, from its log on node B.
onb 'cat /var/log/sriov-rdma/sriov-rdma.log' > "$work/plugin-b.log" 2>/dev/null
for p in $(awk '$4 == "ADD" { print $2 }' "$work/plugin-b.log" | sort -u); do
  say "plugin ADD on $NODEB $p: $(proc_ms "$p" < "$work/plugin-b.log") from its first to its last log line"
done

# --- crio-runtime-restart: CRI-O stopped and started again (its supervisor) while the pod runs: the same sandbox,
#     the VF still the pod's (net1 carrier in its netns, the row, the record) ---
if [ -n "$up_ok" ]; then
  sb=$SBC; pid=$(onb 'pidof crio' 2>/dev/null)
  # SIGTERM: CRI-O shuts down cleanly (a SIGKILL would make it treat its storage as unclean on the next start).
  onb 'kill $(pidof crio)' >/dev/null 2>&1
  pid2=""
  for _ in $(seq 1 120); do
    pid2=$(onb 'pidof crio' 2>/dev/null)
    [ -n "$pid2" ] && [ "$pid2" != "$pid" ] && onb 'crictl pods -q' >/dev/null 2>&1 && break
    sleep 1
  done
  for _ in $(seq 1 120); do
    [ "$(kb '{.status.conditions[?(@.type=="Ready")].status}')" = True ] && inpodc true >/dev/null 2>&1 && break
    sleep 1
  done
  row1=$ROWC
  crio_state
  car=$(inpodc 'cat /sys/class/net/net1/carrier' 2>/dev/null)
  if [ -n "$pid" ] && [ -n "$pid2" ] && [ "$pid2" != "$pid" ] && [ -n "$sb" ] && [ "$SBC" = "$sb" ] && [ "$car" = 1 ] \
     && [ "$ROWC" = "$row1" ] && echo "$LINKC" | grep -q LOWER_UP && [ -n "$RECC" ]; then
    pass "crio-runtime-restart(crio pid $pid → $pid2: same sandbox ${sb:0:13}, net1 carrier, $PFB vf $IDXC row unchanged, record kept)"
  else
    fail crio-runtime-restart "crio pid '$pid' → '$pid2', sandbox '$sb' → '$SBC', carrier '$car', row '$row1' → '$ROWC', net1 '$LINKC', record ${RECC:+present}"
  fi
else
  fail crio-runtime-restart "no pod to restart CRI-O under (crio-pod-vf)"
fi

# --- crio-kubelet-restart: the kubelet stopped and started again while the pod runs: the same sandbox, net1 carrier,
#     the row; the kubelet removed the device plugin's socket, the daemon registered again (a new socket) and the
#     node offers pfb0's VFs again ---
crio_exec_back() { for _ in $(seq 1 120); do onb true >/dev/null 2>&1 && return 0; sleep 1; done; return 1; }
crio_ready_back() {
  for _ in $(seq 1 180); do [ "$(kb '{.status.conditions[?(@.type=="Ready")].status}')" = True ] && return 0; sleep 1; done
  return 1
}
if [ -n "$up_ok" ]; then
  sb=$SBC; row1=$ROWC
  sock=$(onb 'ls /var/lib/kubelet/device-plugins/ | grep pfb' 2>/dev/null)
  ino=$(onb "stat -c %i /var/lib/kubelet/device-plugins/$sock" 2>/dev/null)
  kpid=$(onb 'pidof kubelet' 2>/dev/null)
  onb 'kill $(pidof kubelet)' >/dev/null 2>&1
  sleep 3; crio_ready_back; crio_exec_back
  ino2=""; alloc=""
  for _ in $(seq 1 90); do
    ino2=$(onb "stat -c %i /var/lib/kubelet/device-plugins/$sock" 2>/dev/null); alloc=$(capb allocatable sriov-rdma/pfb)
    [ -n "$ino2" ] && [ "$ino2" != "$ino" ] && [ "$alloc" = "$PFB_VFS" ] && break; sleep 1
  done
  crio_state
  kpid2=$(onb 'pidof kubelet' 2>/dev/null)
  car=$(inpodc 'cat /sys/class/net/net1/carrier' 2>/dev/null)
  if [ -n "$kpid2" ] && [ "$kpid2" != "$kpid" ] && [ "$SBC" = "$sb" ] && [ "$car" = 1 ] && [ "$ROWC" = "$row1" ] \
     && [ -n "$ino" ] && [ -n "$ino2" ] && [ "$ino2" != "$ino" ] && [ "$alloc" = "$PFB_VFS" ]; then
    pass "crio-kubelet-restart(kubelet pid $kpid → $kpid2: same sandbox ${sb:0:13}, net1 carrier, row unchanged; $sock registered again, allocatable sriov-rdma/pfb=$alloc)"
  else
    fail crio-kubelet-restart "kubelet '$kpid' → '$kpid2', sandbox '$sb' → '$SBC', carrier '$car', row '$row1' → '$ROWC', socket '$sock' inode '$ino' → '$ino2', allocatable '$alloc'"
  fi
else
  fail crio-kubelet-restart "no pod to restart the kubelet under (crio-pod-vf)"
fi

# --- crio-delete-restores: the pod deleted, every VF of pfb0 is back under its name, MAC and MTU, the PF's rows
#     are as before, no record, no lease ---
k delete pod "$PODC" --ignore-not-found --wait=false >/dev/null
if k wait --for=delete "pod/$PODC" --timeout=120s >/dev/null 2>&1; then
  nowb=""
  for _ in $(seq 1 60); do nowb=$(snapb); [ "$nowb" = "$BEFOREB" ] && break; sleep 1; done
  if [ "$nowb" = "$BEFOREB" ] && echo "$BEFOREB" | grep -q "^records: *$"; then
    pass "crio-delete-restores($PFB rows, VF names, MAC, MTU as before, no record, no lease)"
  else fail crio-delete-restores "before: $(echo "$BEFOREB" | tr '\n' ';') after: $(echo "$nowb" | tr '\n' ';')"; fi
else fail crio-delete-restores "$PODC still there after 120 s: $(k get pod "$PODC" -o wide 2>&1 | tail -1)"; fi
# crio_restored SECONDS: until node B shows BEFOREB again; sets NOWB
crio_restored() {
  for _ in $(seq 1 "$1"); do NOWB=$(snapb); [ "$NOWB" = "$BEFOREB" ] && return 0; sleep 1; done
  return 1
}
# crio_up NAME: applies a pod on node B, waits for Ready with net1 carrier
crio_up() {
  crio_pod "$1" | k apply -f - >/dev/null
  up_in default "$1"
}
crio_end() { # crio_end SCENARIO POD: POD deleted; SCENARIO-then-delete passes when node B is as before
  if crio_gone "$2"; then pass "$1-then-delete(node B as before)"
  else fail "$1-then-delete" "after: $(echo "$NOWB" | tr '\n' ';')"; fi
}
crio_not_up() { # crio_not_up SCENARIO POD: POD did not come up: SCENARIO and its -then-delete fail
  fail "$1" "$2 not Ready with net1 carrier: $(k get pod "$2" -o wide 2>&1 | tail -1)"
  fail "$1-then-delete" "not run"; crio_gone "$2"
}
crio_gone() { # crio_gone NAME...: deletes the pods, then node B as before
  k delete pod "$@" --ignore-not-found --wait=false >/dev/null 2>&1
  for p in "$@"; do k wait --for=delete "pod/$p" --timeout=120s >/dev/null 2>&1; done
  crio_restored 60
}

# --- crio-force-delete: kubectl delete --force --grace-period=0: the API object goes at once, the kubelet and CRI-O
#     still tear the sandbox down and the DEL gives the VF back ---
if crio_up crio-f; then
  k delete pod crio-f --force --grace-period=0 >/dev/null 2>&1
  if crio_restored 90; then pass "crio-force-delete($PFB rows, VF names, MACs, MTUs as before, no record, no lease)"
  else fail crio-force-delete "before: $(echo "$BEFOREB" | tr '\n' ';') after: $(echo "$NOWB" | tr '\n' ';')"; fi
else fail crio-force-delete "crio-f not Ready with net1 carrier: $(k get pod crio-f -o wide 2>&1 | tail -1)"; crio_gone crio-f; fi

# --- crio-stopp-rmp: the sandbox stopped and removed with crictl on node B: the VF is back on the node under its
#     name when StopPodSandbox returns (its CNI DEL is done then: no record of the old sandbox), the kubelet makes a
#     new sandbox that gets a VF. If that sandbox took the VF before the check ran (seen once on 7 December: no
#     netdev of the VF on the node right after stopp, the new sandbox up with net1), the VF's record names it. ---
if crio_up crio-s; then
  PODC=crio-s; crio_state; vf=$VFC
  want=$(echo "$BEFOREB" | awk -v v="$vf" '$1 == v { print $2 }')
  stopp_rmp onb crio-s "$vf" "$want"; sp=$?
  car=$(carrier_wait default crio-s)
  if [ "$sp" = 0 ] && [ "$car" = 1 ]; then
    pass "crio-stopp-rmp($vf $SP_BACK after crictl stopp, no record of the old sandbox; new sandbox ${SP_SB2:0:13} with net1 carrier)"
  else fail crio-stopp-rmp "VF $vf after stopp: '$SP_NAME' (want '$want'), old sandbox's record left: $SP_OLDREC, sandbox '$SP_SB' → '$SP_SB2', carrier '$car'"; fi
  crio_end crio-stopp-rmp crio-s
else crio_not_up crio-stopp-rmp crio-s; fi
PODC=crio-a

# --- crio-bad-config: a NAD with a bad max_tx_rate: the pod's events (CRI-O's sandbox error) carry the plugin's
#     error naming the key, node B unchanged ---
mknad default crio-bad sriov-rdma/pfb '"max_tx_rate":"fast","ipam":{"type":"host-local","ranges":[[{"subnet":"10.8.0.0/24"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}' | k apply -f - >/dev/null
PODNODE=$NODEB vf_pod crio-bad crio-bad sriov-rdma/pfb | k apply -f - >/dev/null
ev=""
for _ in $(seq 1 90); do
  ev=$(k get events --field-selector involvedObject.name=crio-bad -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null)
  echo "$ev" | grep -q max_tx_rate && break; sleep 1
done
nowb=$(snapb)
if echo "$ev" | grep -q max_tx_rate && [ "$nowb" = "$BEFOREB" ]; then
  pass "crio-bad-config(events: $(echo "$ev" | grep -m1 max_tx_rate | grep -o 'max_tx_rate.*' | cut -c1-160)…; node B unchanged)"
else fail crio-bad-config "events: $(echo "$ev" | tail -2 | tr '\n' ' ') node B: $(echo "$nowb" | tr '\n' ';')"; fi
k delete pod crio-bad --ignore-not-found --wait=false >/dev/null 2>&1; k delete net-attach-def crio-bad --ignore-not-found >/dev/null 2>&1
k wait --for=delete pod/crio-bad --timeout=120s >/dev/null 2>&1

# --- crio-node-crash: the kubelet, CRI-O, every conmon and the pods' processes SIGKILLed, the pods' netns (pinns's
#     /var/run/netns/<id>) removed, so the kernel returns the VF to the host; the daemons started again by the
#     node's supervisor: the VF goes back into service (the same pod in a new sandbox, or the pod failed by the
#     kubelet and a new one), and deleting it leaves node B as before ---
# crash_b THEN: node B (CRI-O, its conmons, pinns's netns under /var/run/netns) crashes, its daemons held down until
# THEN has run (e2e.sh's crash_node).
crash_b() { crash_node onb crio conmon '/var/run/netns/*' "$1"; }
if crio_up crio-c; then
  PODC=crio-c; crio_state; sb=$SBC
  crash_b 'sleep 3'
  sleep 10; crio_ready_back; crio_exec_back
  ok=""; how=""
  for _ in $(seq 1 120); do
    if [ "$(k get pod crio-c -o 'jsonpath={.status.containerStatuses[0].ready}' 2>/dev/null)" = true ] \
       && [ "$(inpodc 'cat /sys/class/net/net1/carrier' 2>/dev/null)" = 1 ]; then ok=1; how="the same pod in a new sandbox"; break; fi
    ph=$(k get pod crio-c -o 'jsonpath={.status.phase} {.status.reason}' 2>/dev/null)
    case "$ph" in *UnexpectedAdmissionError*|Failed*) how="the kubelet failed the old pod ($ph)"; break ;; esac
    sleep 2
  done
  if [ -z "$ok" ] && [ -n "$how" ]; then
    if crio_gone crio-c && crio_up crio-c; then ok=1; how="$how; node B restored, a new pod got a VF"
    else how="$how; then: $(k get pod crio-c -o wide 2>&1 | tail -1) node B: $(echo "$NOWB" | tr '\n' ';')"; fi
  fi
  crio_state
  if [ -n "$ok" ] && [ -n "$SBC" ] && [ "$SBC" != "$sb" ] && echo "$LINKC" | grep -q LOWER_UP; then
    pass "crio-node-crash($how: sandbox ${sb:0:13} → ${SBC:0:13}, net1 LOWER_UP)"
  else fail crio-node-crash "ready=${ok:-no} ${how:-pod neither back nor failed}, sandbox '$sb' → '$SBC': $(k get pod crio-c -o wide 2>&1 | tail -1)"; fi
  crio_end crio-node-crash crio-c
else crio_not_up crio-node-crash crio-c; fi

# --- crio-device-plugin-rdma-chardevs: what the device plugin hands a container on CRI-O (devices.sh's check on node
#     A): a Soft-RoCE device made on node B on pfb0's last VF's netdev (the stand-in for the VF's own RDMA function;
#     the netdev stays on the node), the one ConfigMap given a resource sriov-rdma/rxeb first (pfb0's VFs that have
#     an RDMA device), reloaded by node B's daemon; an unprivileged pod on node B, no hostPath, no NAD, asking for
#     it: its /dev/infiniband is exactly that VF's uverbs device and rdma_cm, it opens the device (ibv_devinfo),
#     and the device-info file the plugin wrote for Multus names it ---
# --- crio-device-plugin-config-restored: the pod deleted, the config as it was, the Soft-RoCE device gone: node B
#     offers pfb0's 3 VFs as sriov-rdma/pfb again and none as rxeb, and is as before ---
RXEB_IDX=$(( PFB_VFS - 1 ))
rxeb_vf=$(onb "basename \$(readlink /sys/class/net/$PFB/device/virtfn$RXEB_IDX)" 2>/dev/null)
# Whether its netdev was up: it is left as it was.
rxeb_up=$(onb "/usr/sbin/ip -o link show \$(ls /sys/bus/pci/devices/$rxeb_vf/net) | grep -c '[<,]UP[,>]'" 2>/dev/null)
rxeb_made=$(onb "n=\$(ls /sys/bus/pci/devices/$rxeb_vf/net) && /usr/sbin/ip link set \$n up && /usr/sbin/rdma link add rxe_b$RXEB_IDX type rxe netdev \$n && echo \$n" 2>&1)
CONFIG0=$(config_json)
set_config "$(python3 -c '
import json, sys
c = json.loads(sys.argv[1])
c["resources"].insert(0, {"name": "sriov-rdma/rxeb", "selectors": {"pfNames": [sys.argv[2]], "drivers": ["igbvf"]}})
print(json.dumps(c))' "$CONFIG0" "$PFB")"
rxeb_alloc() { echo "rxeb=$(capb allocatable sriov-rdma/rxeb) pfb=$(capb allocatable sriov-rdma/pfb)"; }
want_alloc="rxeb=1 pfb=$RXEB_IDX"
ab=""
for _ in $(seq 1 150); do ab=$(rxeb_alloc); [ "$ab" = "$want_alloc" ] && break; sleep 1; done
why=""
[ "$ab" = "$want_alloc" ] || why="$why node B allocatable '$ab' after the config reload (want $want_alloc; Soft-RoCE: '$rxeb_made');"
if [ -z "$why" ]; then
  PODNODE=$NODEB devpod crio-dev sriov-rdma/rxeb | k apply -f - >/dev/null
  if k wait --for=condition=Ready pod/crio-dev --timeout=180s >/dev/null 2>&1; then
    PODC=crio-dev
    v=$(inpodc "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | sed -n 's/^PCIDEVICE_SRIOV-RDMA_RXEB=//p')
    uv=$(onb "for u in /sys/class/infiniband_verbs/uverbs*; do [ \"\$(cat \$u/ibdev)\" = rxe_b$RXEB_IDX ] && basename \$u; done" 2>/dev/null)
    list=$(inpodc 'ls /dev/infiniband' 2>&1 | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$uv" rdma_cm | sort | tr '\n' ' ')
    dinfo=$(onb "cat /var/run/k8s.cni.cncf.io/devinfo/dp/sriov-rdma-rxeb-$v-device.json" 2>/dev/null)
    out=$(inpodc "ibv_devinfo -d rxe_b$RXEB_IDX" 2>&1)
    [ "$v" = "$rxeb_vf" ] || why="$why PCIDEVICE_SRIOV-RDMA_RXEB '$v', not $rxeb_vf;"
    [ -n "$uv" ] && [ "$list" = "$want" ] || why="$why /dev/infiniband in the pod is '$list', not '$want';"
    echo "$out" | grep -q PORT_ACTIVE || why="$why ibv_devinfo -d rxe_b$RXEB_IDX: $(echo "$out" | tail -2 | tr '\n' ' ');"
    echo "$dinfo" | grep -q "\"rdma-device\":\"rxe_b$RXEB_IDX\"" || why="$why device-info of $v: '$dinfo';"
    PODC=crio-a
  else why="$why crio-dev not Ready: $(k get pod crio-dev -o wide 2>&1 | tail -1) $(k describe pod crio-dev 2>&1 | grep -A6 Events | tail -4 | tr '\n' ' ')"; fi
fi
[ -z "$why" ] && pass "crio-device-plugin-rdma-chardevs(unprivileged, no hostPath, on $NODEB/CRI-O: $v (pfb0 vf $RXEB_IDX, Soft-RoCE rxe_b$RXEB_IDX) → /dev/infiniband '$list', ibv_devinfo PORT_ACTIVE; device-info names rxe_b$RXEB_IDX)" \
  || fail crio-device-plugin-rdma-chardevs "$why"
k delete pod crio-dev --ignore-not-found --wait=false >/dev/null 2>&1
k wait --for=delete pod/crio-dev --timeout=120s >/dev/null 2>&1
set_config "$CONFIG0"
onb "/usr/sbin/rdma link delete rxe_b$RXEB_IDX" >/dev/null 2>&1
[ "$rxeb_up" = 1 ] || onb "/usr/sbin/ip link set \$(ls /sys/bus/pci/devices/$rxeb_vf/net) down" >/dev/null 2>&1
# The kubelet keeps a resource whose plugin went away at 0 for a while, then drops it: either is right.
ab=""; rxeb_gone=""
for _ in $(seq 1 150); do
  ab=$(rxeb_alloc); case "$ab" in "rxeb= pfb=$PFB_VFS" | "rxeb=0 pfb=$PFB_VFS") rxeb_gone=1; break ;; esac; sleep 1
done
if [ -n "$rxeb_gone" ] && crio_restored 30 \
   && [ "$(config_json)" = "$CONFIG0" ] && ! onb "/usr/sbin/rdma link show | grep -q rxe_b$RXEB_IDX" >/dev/null 2>&1; then
  pass "crio-device-plugin-config-restored(the config as before; node B allocatable $ab; no rxe_b$RXEB_IDX; node B as before)"
else fail crio-device-plugin-config-restored "allocatable '$ab'; node B: $(echo "$NOWB" | tr '\n' ';'); rdma links: $(onb '/usr/sbin/rdma link show' 2>&1 | tr '\n' ' ')"; fi
PODC=crio-a
k delete networkattachmentdefinition "$NADC" --ignore-not-found >/dev/null 2>&1
