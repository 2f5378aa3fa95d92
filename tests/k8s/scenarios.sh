# The Kubernetes node scenarios (sourced by e2e.sh once the node is Ready, the installer ran and the device
# plugin offers the node's VFs): everything through kubectl; the kernel's view through the node shell pod
# (onnode), the API server's through kubectl.
#
# The VF each pod gets: the pod requests a resource of the project's device plugin (sriov-rdma/pf1 for rdma-a,
# sriov-rdma/pf2 for rdma-b); the kubelet allocates a VF; Multus reads the allocation from the kubelet's
# pod-resources API (the NAD's k8s.v1.cni.cncf.io/resourceName) and hands it to sriov-rdma as deviceID. Nothing
# in the pod names its VF.
# The RDMA traffic: Soft-RoCE (rxe) on net1, created from inside the pod, stands in for the VF's own RDMA
# function (an igb VF has none, and a Soft-RoCE device made on the node would die when its netdev moves into the
# pod); these pods are privileged for that (rdma link add needs CAP_NET_ADMIN) and mount the node's
# /dev/infiniband, as the uverbs device appears only after the container started. The device plugin's own
# handing out of RDMA character devices is shown by unprivileged pods without hostPath (rdma-dev-1/2 below).

NAD=sriov-rdma-test
NADB=sriov-rdma-test-b
nad() { # nad NAME RESOURCE EXTRA-KEYS [RANGE-START RANGE-END]: the NAD like deploy/nad.yaml (VLAN 100, QoS 3,
        # spoofchk, trust, MTU 9000; not link_state, which the emulated igb PF refuses with EOPNOTSUPP), its
        # resourceName the device plugin's resource, host-local IPAM (whereabouts.sh shows whereabouts), the
        # plugin's log in /var/log/sriov-rdma/sriov-rdma.log
  cat <<EOF
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: $1
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: $2
spec:
  config: '{"cniVersion":"1.0.0","name":"$1","type":"sriov-rdma","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true},"vlan":100,"vlanQoS":3,"spoofchk":"on","trust":"on","mtu":9000,"rdma":"auto","logLevel":"debug","logFile":"/var/log/sriov-rdma/sriov-rdma.log"$3,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.7.0.0/24","rangeStart":"10.7.0.${4:-10}","rangeEnd":"10.7.0.${5:-99}"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}}'
EOF
}
# What DEL must give back: the PF rows, every VF's netdev name, MAC and MTU, and the record store.
snapshot() {
  node_snap
  onnode "echo leases: \$(ls /var/lib/cni/sriov-rdma-ipam/$NAD /var/lib/cni/sriov-rdma-ipam/$NADB 2>/dev/null | grep '^10[.]' | tr '\n' ' ')" 2>&1
}
inpod() { k exec "$1" -- sh -c "$2"; }
ms() { date +%s%3N; }
# up NAME...: waits for each pod to be Ready and its net1 to have carrier; sets UP_MS_<name> (apply → both)
up() {
  local p start=$1; shift
  for p in "$@"; do
    k wait --for=condition=Ready "pod/$p" --timeout=240s >/dev/null 2>&1 || return 1
    [ "$(carrier_wait default "$p")" = 1 ] || return 1
    eval "UP_MS_${p//-/_}=$(( $(ms) - start ))"
  done
}
gone() { # gone NAME...: waits until the pods no longer exist
  local p
  for p in "$@"; do k wait --for=delete "pod/$p" --timeout=120s >/dev/null 2>&1 || return 1; done
}
addr_of() { inpod "$1" "ip -4 -o addr show net1" | awk '{ print $4 }' | cut -d/ -f1; }
# vf_of POD VAR: the VF the kubelet allocated to the pod's container, from the variable the device plugin set
# (read from the container's first process: a '-' of the resource name stays in the name, which sh drops)
vf_of() { inpod "$1" "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | sed -n "s/^$2=//p"; }
status_pci() { # status_pci POD: the pci-address in the pod's network-status annotation
  k get pod "$1" -o 'jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}' \
    | tr -d ' \n' | sed -n 's/.*"pci-address":"\([^"]*\)".*/\1/p'
}
two_pods() { pod rdma-a "$NAD" sriov-rdma/pf1; echo ---; pod rdma-b "$NADB" sriov-rdma/pf2; }
# allocated: sets VFA and VFB, the VFs the kubelet gave rdma-a and rdma-b
allocated() { VFA=$(vf_of rdma-a PCIDEVICE_SRIOV-RDMA_PF1); VFB=$(vf_of rdma-b PCIDEVICE_SRIOV-RDMA_PF2); }

{ nad "$NAD" sriov-rdma/pf1 ""; echo ---; nad "$NADB" sriov-rdma/pf2 "" 100 199; } | k apply -f - >/dev/null \
  || fail nad "kubectl apply of the NADs failed"
BEFORE=$(snapshot)
say "before: $(echo "$BEFORE" | tr '\n' ';')"

# --- two pods on VFs of different PFs, allocated by the device plugin, VLAN 100, MTU 9000 ---
t=$(ms)
two_pods | k apply -f - >/dev/null
if up "$t" rdma-a rdma-b; then
  say "pod start (kubectl apply → Ready with net1 carrier): rdma-a ${UP_MS_rdma_a} ms, rdma-b ${UP_MS_rdma_b} ms"
  for p in rdma-a rdma-b; do # where the pod start went: its conditions and events, seconds after its creation
    c=$(k get pod "$p" -o 'jsonpath={.metadata.creationTimestamp}{range .status.conditions[*]} {.type}={.lastTransitionTime}{end}' 2>/dev/null || true)
    e=$(k get events --field-selector "involvedObject.name=$p" --no-headers \
          -o 'custom-columns=R:.reason,T:.firstTimestamp,E:.eventTime' 2>/dev/null \
          | awk '{ print $1 "=" ($2 ~ /^<(none|nil)>$/ ? $3 : $2) }' || true)
    c0=$(date -d "${c%% *}" +%s 2>/dev/null || echo 0); line=""
    for kv in ${c#* } $e; do
      ts=$(date -d "${kv#*=}" +%s 2>/dev/null) && line="$line ${kv%%=*}+$((ts - c0))s"
    done
    say "pod start: $p, seconds after creation:$line"
    m=$(k get events --field-selector "involvedObject.name=$p,reason=FailedCreatePodSandBox" \
          -o 'jsonpath={.items[*].message}' 2>/dev/null | cut -c1-700)
    [ -z "$m" ] || say "pod start: $p's sandbox was retried: $m"
  done
  allocated
  why=""
  for p in rdma-a rdma-b; do
    mtu=$(inpod $p 'cat /sys/class/net/net1/mtu'); a=$(addr_of $p)
    [ "$mtu" = 9000 ] || why="$why $p net1 MTU $mtu;"
    case "$a" in 10.7.0.*) ;; *) why="$why $p net1 address '$a';" ;; esac
  done
  A=$(addr_of rdma-a); B=$(addr_of rdma-b)
  pass_or() { if [ -z "$why" ]; then pass "$1"; else fail "$1" "$why"; fi; }
  pass_or "pods-running(net1 carrier, MTU 9000: rdma-a $A, rdma-b $B)"
  # The chain: the kubelet's allocation (the device plugin's PCIDEVICE_ variable in the container), the VF on the
  # PF of that resource, and Multus's network-status (device-info) name the same VF, which is the pod's net1.
  why=""
  for p in a b; do
    v=$([ $p = a ] && echo "$VFA" || echo "$VFB"); pf=$([ $p = a ] && echo "$PF1" || echo "$PF2")
    st=$(status_pci rdma-$p)
    [ -n "$v" ] || why="$why rdma-$p has no PCIDEVICE_ variable;"
    [ "$st" = "$v" ] || why="$why rdma-$p network-status pci-address '$st' is not the allocated VF '$v';"
    onnode "ls -l /sys/class/net/$pf/device/ | grep -q '/$v\$'" 2>/dev/null || why="$why rdma-$p VF '$v' is not a VF of $pf;"
    [ -z "$(onnode "ls /sys/bus/pci/devices/$v/net 2>/dev/null")" ] || why="$why rdma-$p VF '$v' still has its netdev on the node;"
  done
  pass_or "device-plugin-allocation-to-multus(rdma-a $VFA of $PF1, rdma-b $VFB of $PF2: PCIDEVICE_ = network-status pci-address = the VF in the pod)"
  # The kernel's view of the PFs: the NAD's VLAN, QoS, spoofchk and trust on each pod's VF row.
  why=""
  idx() { onnode "for v in /sys/class/net/$1/device/virtfn*; do [ \$(basename \$(readlink \$v)) = $2 ] && echo \${v##*virtfn}; done"; }
  IA=$(idx "$PF1" "$VFA"); IB=$(idx "$PF2" "$VFB")
  rows=$(onnode "/usr/sbin/ip link show $PF1 | grep ' vf $IA '; /usr/sbin/ip link show $PF2 | grep ' vf $IB '")
  for r in "$(echo "$rows" | head -1)" "$(echo "$rows" | tail -1)"; do
    echo "$r" | grep -q 'vlan 100, qos 3' && echo "$r" | grep -q 'spoof checking on' && echo "$r" | grep -q 'trust on' \
      || why="$why row '$r';"
  done
  [ -n "$IA" ] && [ -n "$IB" ] || why="$why VF index of $VFA/$VFB not found;"
  pass_or "pf-rows($PF1 vf $IA, $PF2 vf $IB: vlan 100 qos 3, spoofchk on, trust on)"
  # doctor on the node names the pods that hold the VFs: the kubelet's checkpoint (pod UID) and its pod-resources
  # API (namespace/name, through the device plugin's binary).
  why=""
  out=$(onnode '/opt/cni/bin/sriov-rdma doctor' 2>&1)
  for p in a b; do
    v=$([ $p = a ] && echo "$VFA" || echo "$VFB"); uid=$(k get pod rdma-$p -o 'jsonpath={.metadata.uid}')
    echo "$out" | grep -q "VF $v (sriov-rdma/pf[12]) allocated by the kubelet to default/rdma-$p (uid $uid) container worker" \
      || why="$why no line for rdma-$p ($v, uid $uid);"
  done
  [ -z "$why" ] || why="$why doctor: $(echo "$out" | grep -E 'allocated by the kubelet|pod names unknown' | tr '\n' ' ')"
  pass_or "doctor-kubelet-holders($(echo "$out" | grep -m1 -o 'VF [^ ]* ([^)]*) allocated by the kubelet to default/rdma-a'))"
  # Traffic between the containers over the VFs and the wire between the PFs (VLAN 100 both ends).
  if out=$(inpod rdma-a "ping -c 3 -w 10 $B" 2>&1); then pass "ping(rdma-a → rdma-b over net1: $(echo "$out" | tail -1))"
  else fail ping "$(echo "$out" | tail -2 | tr '\n' ' ')"; fi
  if out=$(inpod rdma-a "ping -c 2 -w 10 -s 8000 $B" 2>&1); then pass "ping-jumbo(8000-byte payload at MTU 9000)"
  else fail ping-jumbo "$(echo "$out" | tail -2 | tr '\n' ' ')"; fi
  include rdma.sh
else
  fail pods-running "rdma-a/rdma-b not Ready with net1 carrier: $(k get pods -o wide 2>&1 | tail -2 | tr '\n' ' ') $(k describe pod rdma-a | grep -A8 Events | tail -6 | tr '\n' ' ')"
fi
# The plugin's own share of the pod start: each ADD's duration from its log (first to last line of the
# process, timestamps in seconds).
onnode 'cat /var/log/sriov-rdma/sriov-rdma.log' > "$work/plugin.log" 2>/dev/null
for p in $(awk '$4 == "ADD" { print $2 }' "$work/plugin.log" | sort -u); do
  say "plugin ADD $p: $(proc_ms "$p" < "$work/plugin.log") from its first to its last log line: $(grep -F "$p" "$work/plugin.log" | cut -d' ' -f3- | tr '\n' '|' | cut -c1-600)"
done

# --- delete: every VF back on the node under its name, PF rows as before, no record left ---
k delete pod rdma-a rdma-b --wait=false >/dev/null
if gone rdma-a rdma-b; then
  after=$(snapshot)
  if [ "$after" = "$BEFORE" ]; then pass "delete-restores(VF names, MAC, MTU, PF rows, no record)"
  else fail delete-restores "before: $(echo "$BEFORE" | tr '\n' ';') after: $(echo "$after" | tr '\n' ';')"; fi
else fail delete-restores "pods still there after 120 s: $(k get pods 2>&1 | tr '\n' ' ')"; fi

# --- what the device plugin hands a container by itself: RDMA character devices, vfio ---
include devices.sh

# Helpers of the scenarios below.
two_up() { # applies rdma-a and rdma-b and waits for both with net1 carrier
  local t; t=$(ms)
  two_pods | k apply -f - >/dev/null && up "$t" rdma-a rdma-b && allocated
}
restored() { # restored SECONDS: waits until the node shows BEFORE again; sets NOW
  for _ in $(seq 1 "$1"); do NOW=$(snapshot); [ "$NOW" = "$BEFORE" ] && return 0; sleep 1; done
  return 1
}
delete_and_check() { # delete_and_check NAME: deletes both pods, expects BEFORE back
  k delete pod rdma-a rdma-b --ignore-not-found --wait=false >/dev/null
  if gone rdma-a rdma-b && restored 60; then pass "$1"
  else fail "$1" "before: $(echo "$BEFORE" | tr '\n' ';') after: $(echo "$NOW" | tr '\n' ';')"; fi
}
carriers() { [ "$(inpod rdma-a 'cat /sys/class/net/net1/carrier' 2>/dev/null)$(inpod rdma-b 'cat /sys/class/net/net1/carrier' 2>/dev/null)" = 11 ]; }

# --- containerd restarted, then the kubelet restarted, while the pods run; then delete restores ---
if two_up; then
  sb=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  onnode 'kill $(pidof containerd)' >/dev/null 2>&1
  sleep 3; wait_exec
  sock=/var/lib/kubelet/device-plugins/sriov-rdma-sriov-rdma_pf1.sock
  ino=$(onnode "stat -c %i $sock" 2>/dev/null)
  onnode 'kill $(pidof kubelet)' >/dev/null 2>&1
  sleep 3; node_ready; wait_exec
  sb2=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  if [ -n "$sb" ] && [ "$sb" = "$sb2" ] && carriers && inpod rdma-a "ping -c 1 -w 5 $(addr_of rdma-b)" >/dev/null 2>&1; then
    pass "runtime-restarts(containerd and kubelet restarted: same sandbox, net1 carrier, ping)"
  else fail runtime-restarts "sandbox before '$sb' after '$sb2': $(k get pods 2>&1 | tr '\n' ' ')"; fi
  # The restarted kubelet removed the device plugin's sockets: the plugin registered again (a new socket), and
  # the node offers the resources again.
  ino2=""; got=""
  for _ in $(seq 1 120); do
    ino2=$(onnode "stat -c %i $sock" 2>/dev/null); got=$(cap allocatable sriov-rdma/pf1)/$(cap allocatable sriov-rdma/pf2)
    [ -n "$ino2" ] && [ "$ino2" != "$ino" ] && [ "$got" = 4/2 ] && break; sleep 1
  done
  if [ -n "$ino" ] && [ -n "$ino2" ] && [ "$ino2" != "$ino" ] && [ "$got" = 4/2 ]; then
    pass "device-plugin-re-registered(new socket after the kubelet restart, allocatable pf1/pf2 $got)"
  else fail device-plugin-re-registered "socket inode '$ino' → '$ino2', allocatable pf1/pf2 '$got'"; fi
  delete_and_check "runtime-restarts-then-delete(restored)"
else fail runtime-restarts "pods did not come up: $(k get pods 2>&1 | tr '\n' ' ')"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- kubectl delete --force --grace-period=0: the API object goes at once, the kubelet still tears down ---
if two_up; then
  k delete pod rdma-a rdma-b --force --grace-period=0 >/dev/null 2>&1
  if restored 90; then pass "force-delete(every VF back, PF rows as before, no record)"
  else fail force-delete "before: $(echo "$BEFORE" | tr '\n' ';') after: $(echo "$NOW" | tr '\n' ';')"; fi
else fail force-delete "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- a sandbox stopped and removed with crictl: DEL gives the VF back (no record of the old sandbox when
#     StopPodSandbox returns), the kubelet makes a new sandbox with net1 carrier. The kubelet may start that sandbox,
#     whose ADD takes the same VF again, before the check on the node runs (crio-stopp-rmp saw it on node B): the
#     VF is then in the new sandbox and its record names it. ---
if two_up; then
  want=$(echo "$BEFORE" | awk -v v="$VFA" '$1 == v { print $2 }')
  stopp_rmp onnode rdma-a "$VFA" "$want"; sp=$?
  car=$(carrier_wait default rdma-a)$(carrier_wait default rdma-b)
  if [ "$sp" = 0 ] && [ "$car" = 11 ]; then
    pass "crictl-stopp-rmp($VFA $SP_BACK after crictl stopp, no record of the old sandbox; new sandbox ${SP_SB2:0:13} with net1 carrier)"
  else fail crictl-stopp-rmp "VF $VFA after stopp: '$SP_NAME' (want '$want'), old sandbox's record left: $SP_OLDREC, sandbox '$SP_SB' → '$SP_SB2', carriers of rdma-a and rdma-b '$car'"; fi
  delete_and_check "crictl-stopp-rmp-then-delete(restored)"
else fail crictl-stopp-rmp "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- node crash: kubelet, containerd, the shims and the pods' processes SIGKILLed, the pods' netns removed
# (the kernel returns the VFs), the daemons started again: the VFs go back into service in new sandboxes ---
if two_up; then
  sa=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  crash_node_a
  # The restarted kubelet admits the pods again before the device plugin (whose container died too) has
  # registered: it then fails them (UnexpectedAdmissionError, "no healthy devices present" — the kubelet's way,
  # its pods' VFs unknown to it for that moment) or, if the plugin was quicker, runs them in new sandboxes. Either
  # way the node must give the VFs back and new pods must get them.
  ok=""; how=""
  for _ in $(seq 1 120); do
    if [ "$(k get pod rdma-a rdma-b -o 'jsonpath={.items[*].status.containerStatuses[*].ready}' 2>/dev/null)" = "true true" ] && carriers; then
      ok=1; how="the same pods in new sandboxes"; break
    fi
    ph=$(k get pod rdma-a rdma-b -o 'jsonpath={.items[*].status.phase} {.items[*].status.reason}' 2>/dev/null)
    case "$ph" in *UnexpectedAdmissionError*) how="the kubelet failed the old pods ($ph)"; break ;; esac
    sleep 2
  done
  if [ -z "$ok" ] && [ -n "$how" ]; then
    k delete pod rdma-a rdma-b --ignore-not-found --wait=false >/dev/null
    if gone rdma-a rdma-b && restored 90; then
      sa=""; two_up && ok=1; how="$how; every VF back on the node, new pods got VFs"
    else how="$how; the node was not restored: $(echo "$NOW" | tr '\n' ';')"; fi
  fi
  sa2=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  if [ -n "$ok" ] && [ -n "$sa2" ] && [ "$sa2" != "$sa" ] && carriers && inpod rdma-a "ping -c 1 -w 5 $(addr_of rdma-b)" >/dev/null 2>&1; then
    pass "node-crash($how: net1 carrier, ping)"
  else fail node-crash "ready=${ok:-no} ${how:-pods neither back nor failed} sandbox '$sa' → '$sa2': $(k get pods 2>&1 | tr '\n' ' ')"; fi
  delete_and_check "node-crash-then-delete(restored)"
else fail node-crash "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- bad configurations: the pod's events carry the plugin's error, the node is unchanged ---
bad() { # bad NAME NAD-EXTRA-KEYS RESOURCE|- DEVICE-ID|"" EXPECTED-IN-EVENTS
  nad "bad-$1" sriov-rdma/pf1 "$2" | k apply -f - >/dev/null
  pod "bad-$1" "bad-$1" "$3" "$4" | k apply -f - >/dev/null
  local ev=""
  for _ in $(seq 1 90); do
    ev=$(k get events --field-selector "involvedObject.name=bad-$1" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null)
    echo "$ev" | grep -q "$5" && break; sleep 1
  done
  local now; now=$(snapshot)
  if echo "$ev" | grep -q "$5" && [ "$now" = "$BEFORE" ]; then
    pass "bad-$1(events: $(echo "$ev" | grep -m1 "$5" | grep -o "$5.*" | cut -c1-200)…; node unchanged)"
  else fail "bad-$1" "events: $(echo "$ev" | tail -2 | tr '\n' ' ') node: $(echo "$now" | tr '\n' ';')"; fi
  k delete pod "bad-$1" --wait=false >/dev/null; k delete net-attach-def "bad-$1" >/dev/null
}
bad rate ',"max_tx_rate":"fast"' sriov-rdma/pf1 "" 'max_tx_rate'
PFPCI=$(onnode "basename \$(readlink /sys/class/net/$PF1/device)" 2>/dev/null)
bad not-a-vf '' - "$PFPCI" 'not an SR-IOV VF (it has no physfn link)'
# A tenant's pod that requests no VF but names one (free, offered by the device plugin) in its network selection
# element: Multus hands that deviceID on; the plugin refuses a VF the kubelet manages but did not allocate to the pod
# (to no pod, or to another: bad-rate's pod, still being deleted, may hold it).
bad steal '' - "$(vf_pci "$PF1" 0)" 'the kubelet manages this VF as resource sriov-rdma/pf1 and allocated it to'
gone bad-rate bad-not-a-vf bad-steal
restored 30 && pass "bad-then-gone(node unchanged after the failed pods are deleted)" \
  || fail bad-then-gone "$(echo "$NOW" | tr '\n' ';')"
# Last: the node policy it installs stays on the node.
include tenants.sh
# Then the operator's view: config reload, two rails, metrics, a chained rdma-cni.
include ops.sh
