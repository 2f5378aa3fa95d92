# The Kubernetes node scenarios (sourced by e2e.sh once the node is Ready and the installer ran): everything
# through kubectl; the kernel's view through the node shell pod (node), the API server's through kubectl.
#
# The VF each pod gets: the SR-IOV network device plugin's module is not served by the Go module proxy this
# project's machines reach, and the project's own device plugin (issue 16) does not exist yet, so no device
# plugin allocates VFs here: each pod names its VF in its network selection element ("deviceID"), which
# Multus hands to the plugin as runtimeConfig.deviceID, exactly where it puts a device plugin's allocation,
# and for which it creates the device-info file behind the network-status annotation.
# The RDMA device: soft-RoCE (rxe) on net1, created from inside the pod, stands in for the VF's own RDMA
# function (an igb VF has none); the pods are privileged for that (rdma link add needs CAP_NET_ADMIN) and to
# see /dev/infiniband, which a device plugin would mount for a VF's real RDMA device.

NAD=sriov-rdma-test
nad() { # nad NAME EXTRA-KEYS: the NAD like deploy/nad.yaml (VLAN 100, QoS 3, spoofchk, trust, MTU 9000; not
        # link_state, which the emulated igb PF refuses with EOPNOTSUPP),
        # host-local IPAM (whereabouts is not on the node), the plugin's log in /var/log/sriov-rdma/sriov-rdma.log
  cat <<EOF
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: $1
  namespace: default
spec:
  config: '{"cniVersion":"1.0.0","name":"$1","type":"sriov-rdma","capabilities":{"deviceID":true,"CNIDeviceInfoFile":true},"vlan":100,"vlanQoS":3,"spoofchk":"on","trust":"on","mtu":9000,"rdma":"auto","logLevel":"debug","logFile":"/var/log/sriov-rdma/sriov-rdma.log"$2,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.7.0.0/24"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}}'
EOF
}
pod() { # pod NAME VF-PCI [NAD]: a worker like deploy/pod-nccl.yaml on the VF
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{"name":"${3:-$NAD}","interface":"net1","deviceID":"$2"}]'
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
    - name: worker
      image: localhost/sriov-rdma-pod:1
      imagePullPolicy: Never
      command: ["sleep", "1000000"]
      env:
        - { name: NCCL_SOCKET_IFNAME, value: net1 }
        - { name: NCCL_IB_ROCE_VERSION_NUM, value: "2" }
      securityContext:
        privileged: true
      # Stand-in for the device plugin's mounts: the node's RDMA character devices (uverbsN appears when
      # the container creates its rxe device, after the container started).
      volumeMounts:
        - { name: infiniband, mountPath: /dev/infiniband }
  volumes:
    - name: infiniband
      hostPath: { path: /dev/infiniband, type: Directory }
EOF
}
# What DEL must give back: the PF rows, the VF netdevs' names, MAC and MTU, and the record store.
snapshot() {
  onnode "/usr/sbin/ip link show $PF1 | grep ' vf '; /usr/sbin/ip link show $PF2 | grep ' vf '
        for v in $VFA $VFB; do n=\$(ls /sys/bus/pci/devices/\$v/net 2>/dev/null); echo \"\$v \$n \$(cat /sys/class/net/\$n/address 2>/dev/null) \$(cat /sys/class/net/\$n/mtu 2>/dev/null)\"; done
        echo records: \$(ls /var/lib/cni/sriov-rdma 2>/dev/null | grep -v '[.]lock\$' | tr '\n' ' ')
        echo leases: \$(ls /var/lib/cni/sriov-rdma-ipam/$NAD 2>/dev/null | grep '^10[.]' | tr '\n' ' ')" 2>&1
}
inpod() { k exec "$1" -- sh -c "$2"; }
ms() { date +%s%3N; }
# up NAME...: waits for each pod to be Ready and its net1 to have carrier; sets UP_MS_<name> (apply → both)
up() {
  local p start=$1; shift
  for p in "$@"; do
    k wait --for=condition=Ready "pod/$p" --timeout=240s >/dev/null 2>&1 || return 1
    for _ in $(seq 1 100); do [ "$(inpod "$p" 'cat /sys/class/net/net1/carrier' 2>/dev/null)" = 1 ] && break; sleep 0.2; done
    [ "$(inpod "$p" 'cat /sys/class/net/net1/carrier' 2>/dev/null)" = 1 ] || return 1
    eval "UP_MS_${p//-/_}=$(( $(ms) - start ))"
  done
}
gone() { # gone NAME...: waits until the pods no longer exist
  local p
  for p in "$@"; do k wait --for=delete "pod/$p" --timeout=120s >/dev/null 2>&1 || return 1; done
}
addr_of() { inpod "$1" "ip -4 -o addr show net1" | awk '{ print $4 }' | cut -d/ -f1; }

nad "$NAD" "" | k apply -f - >/dev/null || fail nad "kubectl apply of the NAD failed"
BEFORE=$(snapshot)
say "before: $(echo "$BEFORE" | tr '\n' ';')"

# --- two pods on VFs of different PFs, VLAN 100, MTU 9000 ---
t=$(ms)
{ pod rdma-a "$VFA"; echo ---; pod rdma-b "$VFB"; } | k apply -f - >/dev/null
if up "$t" rdma-a rdma-b; then
  say "pod start (kubectl apply → Ready with net1 carrier): rdma-a ${UP_MS_rdma_a} ms, rdma-b ${UP_MS_rdma_b} ms"
  why=""
  for p in rdma-a rdma-b; do
    mtu=$(inpod $p 'cat /sys/class/net/net1/mtu'); a=$(addr_of $p)
    [ "$mtu" = 9000 ] || why="$why $p net1 MTU $mtu;"
    case "$a" in 10.7.0.*) ;; *) why="$why $p net1 address '$a';" ;; esac
  done
  A=$(addr_of rdma-a); B=$(addr_of rdma-b)
  pass_or() { if [ -z "$why" ]; then pass "$1"; else fail "$1" "$why"; fi; }
  pass_or "pods-running(net1 carrier, MTU 9000: rdma-a $A, rdma-b $B)"
  # The API server's view: Multus's network-status names the VF's PCI address (device-info).
  why=""
  for p in a b; do
    v=$([ $p = a ] && echo "$VFA" || echo "$VFB")
    st=$(k get pod rdma-$p -o 'jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}')
    echo "$st" | tr -d ' \n' | grep -q "\"pci-address\":\"$v\"" || why="$why rdma-$p network-status lacks pci-address $v: $st;"
  done
  pass_or "network-status(device-info pci-address of each pod's VF)"
  # The kernel's view of the PFs: the NAD's VLAN, QoS, spoofchk and trust on each pod's VF row.
  why=""
  rows=$(onnode "/usr/sbin/ip link show $PF1 | grep ' vf 2 '; /usr/sbin/ip link show $PF2 | grep ' vf 1 '")
  for r in "$(echo "$rows" | head -1)" "$(echo "$rows" | tail -1)"; do
    echo "$r" | grep -q 'vlan 100, qos 3' && echo "$r" | grep -q 'spoof checking on' && echo "$r" | grep -q 'trust on' \
      || why="$why row '$r';"
  done
  pass_or "pf-rows(vlan 100 qos 3, spoofchk on, trust on)"
  # Traffic between the containers over the VFs and the wire between the PFs (VLAN 100 both ends).
  if out=$(inpod rdma-a "ping -c 3 -w 10 $B" 2>&1); then pass "ping(rdma-a → rdma-b over net1: $(echo "$out" | tail -1))"
  else fail ping "$(echo "$out" | tail -2 | tr '\n' ' ')"; fi
  if out=$(inpod rdma-a "ping -c 2 -w 10 -s 8000 $B" 2>&1); then pass "ping-jumbo(8000-byte payload at MTU 9000)"
  else fail ping-jumbo "$(echo "$out" | tail -2 | tr '\n' ' ')"; fi
  . "$here/rdma.sh"
else
  fail pods-running "rdma-a/rdma-b not Ready with net1 carrier: $(k get pods -o wide 2>&1 | tail -2 | tr '\n' ' ') $(k describe pod rdma-a | grep -A8 Events | tail -6 | tr '\n' ' ')"
fi
# The plugin's own share of the pod start: each ADD's duration from its log (first to last line of the
# process, timestamps in seconds).
onnode 'cat /var/log/sriov-rdma/sriov-rdma.log' > "$work/plugin.log" 2>/dev/null
for p in $(awk '$4 == "ADD" { print $2 }' "$work/plugin.log" | sort -u); do
  say "plugin ADD $p: $(awk -v p="$p" '$2 == p { if (!f) f = $1; l = $1 } END { printf "%.0f ms", (l - f) * 1000 }' "$work/plugin.log") from its first to its last log line: $(grep -F "$p" "$work/plugin.log" | cut -d' ' -f3- | tr '\n' '|' | cut -c1-600)"
done

# --- delete: every VF back on the node under its name, PF rows as before, no record left ---
k delete pod rdma-a rdma-b --wait=false >/dev/null
if gone rdma-a rdma-b; then
  after=$(snapshot)
  if [ "$after" = "$BEFORE" ]; then pass "delete-restores(VF names, MAC, MTU, PF rows, no record)"
  else fail delete-restores "before: $(echo "$BEFORE" | tr '\n' ';') after: $(echo "$after" | tr '\n' ';')"; fi
else fail delete-restores "pods still there after 120 s: $(k get pods 2>&1 | tr '\n' ' ')"; fi

# Helpers of the scenarios below.
two_up() { # applies rdma-a and rdma-b and waits for both with net1 carrier
  local t; t=$(ms)
  { pod rdma-a "$VFA"; echo ---; pod rdma-b "$VFB"; } | k apply -f - >/dev/null && up "$t" rdma-a rdma-b
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
wait_exec() { # waits until kubectl exec into the node shell works again (after containerd/kubelet restarts)
  for _ in $(seq 1 120); do onnode true >/dev/null 2>&1 && return 0; sleep 1; done; return 1
}
node_ready() {
  for _ in $(seq 1 180); do
    [ "$(k get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && return 0
    sleep 1
  done; return 1
}

# --- containerd restarted, then the kubelet restarted, while the pods run; then delete restores ---
if two_up; then
  sb=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  onnode 'kill $(pidof containerd)' >/dev/null 2>&1
  sleep 3; wait_exec
  onnode 'kill $(pidof kubelet)' >/dev/null 2>&1
  sleep 3; node_ready; wait_exec
  sb2=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  if [ -n "$sb" ] && [ "$sb" = "$sb2" ] && carriers && inpod rdma-a "ping -c 1 -w 5 $(addr_of rdma-b)" >/dev/null 2>&1; then
    pass "runtime-restarts(containerd and kubelet restarted: same sandbox, net1 carrier, ping)"
  else fail runtime-restarts "sandbox before '$sb' after '$sb2': $(k get pods 2>&1 | tr '\n' ' ')"; fi
  delete_and_check "runtime-restarts-then-delete(restored)"
else fail runtime-restarts "pods did not come up: $(k get pods 2>&1 | tr '\n' ' ')"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- kubectl delete --force --grace-period=0: the API object goes at once, the kubelet still tears down ---
if two_up; then
  k delete pod rdma-a rdma-b --force --grace-period=0 >/dev/null 2>&1
  if restored 90; then pass "force-delete(every VF back, PF rows as before, no record)"
  else fail force-delete "before: $(echo "$BEFORE" | tr '\n' ';') after: $(echo "$NOW" | tr '\n' ';')"; fi
else fail force-delete "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- a sandbox stopped and removed with crictl: DEL gives the VF back, the kubelet makes a new sandbox ---
if two_up; then
  sb=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  # Read right after StopPodSandbox returned (its CNI DEL is done then): the kubelet soon makes a new sandbox,
  # whose ADD takes the VF again.
  name=$(onnode "crictl stopp $sb >/dev/null && ls /sys/bus/pci/devices/$VFA/net; crictl rmp $sb >/dev/null" 2>/dev/null)
  back=""
  [ -n "$name" ] && [ "$name" = "$(echo "$BEFORE" | awk -v v="$VFA" '$1 == v { print $2 }')" ] && back=1
  sb2=""
  for _ in $(seq 1 120); do
    sb2=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null); [ -n "$sb2" ] && [ "$sb2" != "$sb" ] && break; sleep 1
  done
  k wait --for=condition=Ready pod/rdma-a --timeout=120s >/dev/null 2>&1
  if [ -n "$back" ] && [ -n "$sb2" ] && [ "$sb2" != "$sb" ] && carriers; then
    pass "crictl-stopp-rmp(VF back on the node, new sandbox with net1 carrier)"
  else fail crictl-stopp-rmp "VF back under its name=${back:-no} ('$name') sandbox '$sb' → '$sb2'"; fi
  delete_and_check "crictl-stopp-rmp-then-delete(restored)"
else fail crictl-stopp-rmp "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- node crash: kubelet, containerd, the shims and the pods' processes SIGKILLed, the pods' netns removed
# (the kernel returns the VFs), the daemons started again: the VFs go back into service in new sandboxes ---
if two_up; then
  sa=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  # Run from the node's root cgroup, detached: the node shell pod itself dies with the others.
  onnode 'echo $$ > /sys/fs/cgroup/cgroup.procs; touch /run/hold-kubelet /run/hold-containerd
    setsid sh -c "echo \$\$ > /sys/fs/cgroup/cgroup.procs
      kill -9 \$(pidof kubelet) \$(pidof containerd) 2>/dev/null; sleep 0.5
      kill -9 \$(pidof containerd-shim-runc-v2) 2>/dev/null
      for c in /sys/fs/cgroup/kubepods*; do [ -e \$c/cgroup.kill ] && echo 1 > \$c/cgroup.kill; done
      for n in /run/netns/cni-*; do umount \$n; rm -f \$n; done
      sleep 3; rm -f /run/hold-kubelet /run/hold-containerd" > /dev/null 2>&1 < /dev/null &' >/dev/null 2>&1
  sleep 10; node_ready; wait_exec
  ok=""
  for _ in $(seq 1 120); do
    [ "$(k get pod rdma-a rdma-b -o 'jsonpath={.items[*].status.containerStatuses[*].ready}' 2>/dev/null)" = "true true" ] && carriers && { ok=1; break; }
    sleep 2
  done
  sa2=$(onnode "crictl pods -q --name rdma-a --state ready" 2>/dev/null)
  if [ -n "$ok" ] && [ -n "$sa2" ] && [ "$sa2" != "$sa" ] && inpod rdma-a "ping -c 1 -w 5 $(addr_of rdma-b)" >/dev/null 2>&1; then
    pass "node-crash(new sandboxes get the VFs back: net1 carrier, ping)"
  else fail node-crash "ready=${ok:-no} sandbox '$sa' → '$sa2': $(k get pods 2>&1 | tr '\n' ' ')"; fi
  delete_and_check "node-crash-then-delete(restored)"
else fail node-crash "pods did not come up"; k delete pod rdma-a rdma-b --ignore-not-found >/dev/null; fi

# --- bad configurations: the pod's events carry the plugin's error, the node is unchanged ---
bad() { # bad NAME NAD-EXTRA-KEYS DEVICE EXPECTED-IN-EVENTS
  nad "bad-$1" "$2" | k apply -f - >/dev/null
  pod "bad-$1" "$3" "bad-$1" | k apply -f - >/dev/null
  local ev=""
  for _ in $(seq 1 90); do
    ev=$(k get events --field-selector "involvedObject.name=bad-$1" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null)
    echo "$ev" | grep -q "$4" && break; sleep 1
  done
  local now; now=$(snapshot)
  if echo "$ev" | grep -q "$4" && [ "$now" = "$BEFORE" ]; then
    pass "bad-$1(events: $(echo "$ev" | grep -m1 "$4" | cut -c1-160)…; node unchanged)"
  else fail "bad-$1" "events: $(echo "$ev" | tail -2 | tr '\n' ' ') node: $(echo "$now" | tr '\n' ';')"; fi
  k delete pod "bad-$1" --wait=false >/dev/null; k delete net-attach-def "bad-$1" >/dev/null
}
bad rate ',"max_tx_rate":"fast"' "$VFA" 'max_tx_rate'
PFPCI=$(onnode "basename \$(readlink /sys/class/net/$PF1/device)" 2>/dev/null)
bad not-a-vf '' "$PFPCI" 'deviceID'
gone bad-rate bad-not-a-vf
restored 30 && pass "bad-then-gone(node unchanged after the failed pods are deleted)" \
  || fail bad-then-gone "$(echo "$NOW" | tr '\n' ';')"
