# Across the two nodes (sourced by e2e.sh after crio.sh, whose shell on node B, onb and snapb it uses): node A
# (containerd 2.4, its PF2) and node B (CRI-O 1.36.3, pfb0) are joined by one Ethernet wire between their PF hubs
# (a UDP datagram socket on 127.0.0.1, e2e.sh). What a training job spread over two nodes needs:
#   - one IP range for both nodes' pods: whereabouts (its state in the API server's IPPool) instead of host-local,
#     which keeps its leases per node and would give two nodes' pods the same address;
#   - one node policy for both nodes from one ConfigMap (tenants.sh's: team-a on VLAN 301, team-b on 302);
#   - ping and jumbo ping, and RDMA (rping over rdma_cm, ib_write_bw with the GID index `sriov-rdma doctor --netns`
#     reports on each node) between a pod of each node, through their VFs and the wire; a pod of another
#     namespace on another VLAN reaches neither;
#   - pod start (kubectl apply → Ready with net1 carrier) per runtime, and the plugin's share of it from its log;
#   - kubectl drain of node B evicts its pods and gives their VFs back, the DaemonSet stays; uncordon, and the
#     Deployment's pod comes up there again.
#   - after node B crashes and stays down, whereabouts' ip-control-loop frees the address of its pod that was
#     force-deleted (no CNI DEL ran), and node B, once back, is as before.
# Soft-RoCE on each pod's net1 stands in for the VF's own RDMA function (an igb VF has none), as in rdma.sh.
# Everything is read from the API server (pods, IPPool, node) or from each node's kernel (its PF's VF table, the
# VFs' netdevs, the traffic), not from an exit status of ours.
XNS=team-b; YNS=team-a
XRANGE=10.79.0.0/28; XPOOL=10.79.0.0-28
CLUSTER_SCENARIOS=$(expected_of cluster.sh | tr '\n' ' ')
cl_fail_rest() { # cl_fail_rest WHY NAME...: scenarios that cannot run, each a FAIL
  local w=$1 n; shift
  for n in "$@"; do fail "$n" "$w"; done
}
# add_ms SHELL NS POD: the plugin's ADD for the pod's sandbox, first to last line of its log on that node
add_ms() {
  local sb log p
  sb=$("$1" "crictl pods -q --name $3 --namespace $2 --state ready" 2>/dev/null | head -1)
  [ -n "$sb" ] || { echo "no sandbox"; return 1; }
  log=$("$1" 'cat /var/log/sriov-rdma/sriov-rdma.log' 2>/dev/null)
  p=$(printf '%s\n' "$log" | awk -v sb="$sb" '$4 == "ADD" && index($5, sb) == 1 { p = $2 } END { print p }')
  [ -n "$p" ] || { echo "no ADD"; return 1; }
  printf '%s\n' "$log" | proc_ms "$p"
}
# xnad NS NAME RESOURCE VLAN: a NAD of the cross-node range (whereabouts), MTU 9000
xnad() { mknad "$1" "$2" "$3" '"vlan":'"$4"',"spoofchk":"on","mtu":9000,"ipam":{"type":"whereabouts","range":"'"$XRANGE"'"}'; }

# --- cluster-nodes: both nodes Ready, node B's shell there, one node policy on both (from one ConfigMap), whereabouts
#     on both, the RDMA character devices on node B (its pods mount /dev/infiniband as node A's do; both nodes load
#     ib_uverbs and rdma_ucm at boot) ---
why=$(two_nodes_why)
if [ -n "$why" ]; then
  cl_fail_rest "$why" $CLUSTER_SCENARIOS
  return 0
fi
k create namespace "$XNS" >/dev/null 2>&1; k create namespace "$YNS" >/dev/null 2>&1
k -n kube-system delete configmap sriov-rdma-policy --ignore-not-found >/dev/null 2>&1
k -n kube-system create configmap sriov-rdma-policy --from-literal=policy.json='{"namespaces":{
  "team-a":{"vlans":[301],"spoofchk":"on","trust":"off"},"team-b":{"vlans":[302],"spoofchk":"on","trust":"off"}}}' >/dev/null
pa=""; pb=""
for _ in $(seq 1 150); do
  pa=$(onnode 'sha256sum /etc/sriov-rdma/policy.json' 2>/dev/null | cut -d' ' -f1)
  pb=$(onb 'sha256sum /etc/sriov-rdma/policy.json' 2>/dev/null | cut -d' ' -f1)
  [ -n "$pb" ] && [ "$pa" = "$pb" ] && onb 'grep -q team-b /etc/sriov-rdma/policy.json' 2>/dev/null && break
  sleep 1
done
[ -n "$pb" ] && [ "$pa" = "$pb" ] || why="$why the node policy differs: node A ${pa:-none}, node B ${pb:-none};"
why="$why$(wb_install onnode)$(wb_install onb)"
onb 'test -c /dev/infiniband/rdma_cm' >/dev/null 2>&1 || why="$why no /dev/infiniband/rdma_cm on $NODEB;"
{ xnad "$XNS" net-xa sriov-rdma/pf2 302; echo ---; xnad "$XNS" net-xb sriov-rdma/pfb 302; echo ---
  xnad "$YNS" net-yb sriov-rdma/pfb 301; } | k apply -f - >/dev/null 2>&1 || why="$why kubectl apply of the NADs failed;"
if [ -z "$why" ]; then pass "cluster-nodes(localhost and $NODEB Ready; one node policy on both, sha256 ${pa:0:12}; whereabouts on both)"
else
  fail cluster-nodes "$why"
  cl_fail_rest "not run: cluster-nodes failed" ${CLUSTER_SCENARIOS#cluster-nodes }
  return 0
fi
XA_BEFORE=$(node_snap); XB_BEFORE=$(snapb)

# --- cluster-policy-refused: the one node policy refuses on each node and runtime: team-a's NADs ask for VLAN 302
#     (team-b's), pa on node A (containerd, PF2) and pb on node B (CRI-O, pfb0). Each pod's events carry the plugin's
#     error naming the rule; while the kubelets retry, and once the pods are deleted, neither node's VF rows, VF
#     names, MACs, MTUs or records change, and whereabouts' IPPool holds nothing ---
{ xnad "$YNS" net-pa sriov-rdma/pf2 302; echo ---; xnad "$YNS" net-pb sriov-rdma/pfb 302; echo ---
  PODNS=$YNS PODNODE=localhost pod pa net-pa sriov-rdma/pf2; echo ---
  PODNS=$YNS PODNODE=$NODEB pod pb net-pb sriov-rdma/pfb; } | k apply -f - >/dev/null 2>&1
rule="rule namespaces.$YNS.vlans [301]"
pol_ev() { k -n "$YNS" get events --field-selector "involvedObject.name=$1" -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}' 2>/dev/null | grep -F "$rule" | head -1; }
eva=""; evb=""
for _ in $(seq 1 120); do eva=$(pol_ev pa); evb=$(pol_ev pb); [ -n "$eva" ] && [ -n "$evb" ] && break; sleep 1; done
why=""
[ -n "$eva" ] || why="$why no event of pa names '$rule': $(k -n "$YNS" get events --field-selector involvedObject.name=pa -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 300);"
[ -n "$evb" ] || why="$why no event of pb names '$rule': $(k -n "$YNS" get events --field-selector involvedObject.name=pb -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 300);"
for p in pa pb; do
  [ "$(k -n "$YNS" get pod "$p" -o 'jsonpath={.status.phase}' 2>/dev/null)" = Pending ] || why="$why $p is not Pending;"
done
[ "$(k -n "$YNS" get pod pb -o 'jsonpath={.spec.nodeName}' 2>/dev/null)" = "$NODEB" ] || why="$why pb not on $NODEB;"
d=$(nodes_differ 1 "$XA_BEFORE" "$XB_BEFORE"); [ -z "$d" ] || why="$why while refused:$d"
wb_allocs_are "$XPOOL" || why="$why the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')';"
k -n "$YNS" delete pod pa pb --ignore-not-found --wait=false >/dev/null 2>&1
k -n "$YNS" wait --for=delete pod/pa pod/pb --timeout=120s >/dev/null 2>&1 || why="$why pa or pb not deleted in 120 s;"
d=$(nodes_differ 30 "$XA_BEFORE" "$XB_BEFORE"); [ -z "$d" ] || why="$why after the pods' deletion:$d"
k -n "$YNS" delete net-attach-def net-pa net-pb --ignore-not-found >/dev/null 2>&1
[ -z "$why" ] && pass "cluster-policy-refused(node A/containerd: '$(echo "$eva" | grep -o "namespace $YNS may not use.*" | cut -c1-120)'; node B/CRI-O: '$(echo "$evb" | grep -o "may not use VLAN [0-9]*" | head -1)'; both nodes unchanged while the kubelets retried and after the deletion; the IPPool empty)" \
  || fail cluster-policy-refused "$why"

# --- cluster-whereabouts: xa on node A (containerd, PF2), xb on node B (CRI-O, pfb0), both of team-b (VLAN 302),
#     and ya of team-a (VLAN 301) on node B: every address out of the one range, none twice, the IPPool holds each
#     under its pod; each node's PF has the rows. Each pod applied alone, timed to Ready with net1 carrier. ---
declare -gA START_MS
xup=1
for p in "$XNS/xa/localhost/net-xa/sriov-rdma/pf2" "$XNS/xb/$NODEB/net-xb/sriov-rdma/pfb" "$YNS/ya/$NODEB/net-yb/sriov-rdma/pfb"; do
  IFS=/ read -r ns name node nad res1 res2 <<< "$p"
  t=$(date +%s%3N)
  PODNS=$ns PODNODE=$node pod "$name" "$nad" "$res1/$res2" | k apply -f - >/dev/null
  if up_in "$ns" "$name"; then START_MS[$name]=$(( $(date +%s%3N) - t ))
  else xup=""; fail cluster-whereabouts "$ns/$name not Ready with net1 carrier: $(k -n "$ns" get pod "$name" -o wide 2>&1 | tail -1) $(k -n "$ns" describe pod "$name" 2>&1 | grep -A8 Events | tail -5 | tr '\n' ' ')"; break; fi
done
if [ -n "$xup" ]; then
  XA=$(xaddr "$XNS" xa); XB=$(xaddr "$XNS" xb); YA=$(xaddr "$YNS" ya)
  why=""
  for a in "$XA" "$XB" "$YA"; do case "$a" in 10.79.0.[1-9]|10.79.0.1[0-4]) ;; *) why="$why address '$a' not in $XRANGE;" ;; esac; done
  [ "$(printf '%s\n' "$XA" "$XB" "$YA" | sort -u | wc -l)" = 3 ] || why="$why an address given twice: $XA $XB $YA;"
  [ "$(k -n "$XNS" get pod xa -o 'jsonpath={.spec.nodeName}')" = localhost ] || why="$why xa not on node A;"
  [ "$(k -n "$XNS" get pod xb -o 'jsonpath={.spec.nodeName}')" = "$NODEB" ] || why="$why xb not on node B;"
  wb_allocs_are "$XPOOL" "$XA $XNS/xa" "$XB $XNS/xb" "$YA $YNS/ya" || why="$why the IPPool $XPOOL holds '$(echo "$WB_GOT" | tr '\n' ';')';"
  rowa=$(onnode "/usr/sbin/ip link show $PF2 | grep ' vf '" 2>/dev/null); rowb=$(onb "/usr/sbin/ip link show $PFB | grep ' vf '" 2>/dev/null)
  echo "$rowa" | grep -q 'vlan 302.*spoof checking on.*trust off' || why="$why no row with vlan 302, spoofchk on, trust off on node A's $PF2;"
  echo "$rowb" | grep -q 'vlan 302.*spoof checking on.*trust off' || why="$why no row with vlan 302 on $PFB;"
  echo "$rowb" | grep -q 'vlan 301.*spoof checking on.*trust off' || why="$why no row with vlan 301 on $PFB;"
  [ -z "$why" ] && pass "cluster-whereabouts(xa $XA on localhost/containerd, xb $XB and ya $YA on $NODEB/CRI-O: one range, none twice; IPPool $XPOOL holds each under its pod; VF rows vlan 302 on $PF2 and $PFB, 301 on $PFB)" \
    || fail cluster-whereabouts "$why"
fi

if [ -n "$xup" ]; then
  # --- cluster-ping: xa ↔ xb across the wire, and a jumbo frame both ways: 8972 bytes of payload, one 9000-byte IP
  #     packet at net1's MTU, sent whole (the sender's IP FragCreates counter does not move; busybox's ping has no
  #     -M do) ---
  fragc() { xin "$XNS" "$1" "awk '/^Ip:/ { if (!h) { for (i = 1; i <= NF; i++) if (\$i == \"FragCreates\") c = i; h = 1 } else print \$c }' /proc/net/snmp" 2>/dev/null; }
  why=""
  out=$(xin "$XNS" xa "ping -c 3 -w 15 $XB" 2>&1) || why="$why xa→xb: $(echo "$out" | tail -2 | tr '\n' ' ');"
  out=$(xin "$XNS" xb "ping -c 3 -w 15 $XA" 2>&1) || why="$why xb→xa: $(echo "$out" | tail -2 | tr '\n' ' ');"
  fa=$(fragc xa); fb=$(fragc xb)
  out=$(xin "$XNS" xa "ping -c 3 -w 15 -s 8972 $XB" 2>&1) || why="$why jumbo xa→xb: $(echo "$out" | tail -2 | tr '\n' ' ');"
  out=$(xin "$XNS" xb "ping -c 3 -w 15 -s 8972 $XA" 2>&1) || why="$why jumbo xb→xa: $(echo "$out" | tail -2 | tr '\n' ' ');"
  rtt=$(echo "$out" | sed -n 's/.*= [0-9.]*\/\([0-9.]*\)\/.*/\1/p')
  fa2=$(fragc xa); fb2=$(fragc xb)
  [ -n "$fa" ] && [ "$fa" = "$fa2" ] && [ -n "$fb" ] && [ "$fb" = "$fb2" ] || why="$why IP fragments made: xa FragCreates '$fa' → '$fa2', xb '$fb' → '$fb2';"
  for p in xa xb; do
    [ "$(xin "$XNS" "$p" 'cat /sys/class/net/net1/mtu' 2>/dev/null)" = 9000 ] || why="$why $p's net1 MTU is not 9000;"
  done
  [ -z "$why" ] && pass "cluster-ping(xa $XA ↔ xb $XB across the wire; 9000-byte packets both ways, unfragmented (FragCreates unchanged), avg rtt ${rtt} ms under TCG)" \
    || fail cluster-ping "$why"

  # --- cluster-rdma-rping / cluster-rdma-write-bw: Soft-RoCE on each pod's net1, rdma_cm across the nodes, and
  #     ib_write_bw with the GID index doctor reports for each pod on its own node ---
  why=""
  xin "$XNS" xa 'rdma link add rxeXA type rxe netdev net1' >/dev/null 2>&1 || why="rdma link add in xa failed;"
  xin "$XNS" xb 'rdma link add rxeXB type rxe netdev net1' >/dev/null 2>&1 || why="$why rdma link add in xb failed;"
  GXA=$(gid_at onnode "$XNS" xa "$XA") || why="$why no GID index for xa on node A;"
  GXB=$(gid_at onb "$XNS" xb "$XB") || why="$why no GID index for xb on node B;"
  if [ -z "$why" ]; then
    say "GID indexes from sriov-rdma doctor --netns on each node: xa $GXA (node A), xb $GXB (node B)"
    # xpair NAME SERVER-CMD CLIENT-CMD: server in xb (node B), client in xa (node A); sets OUT, RC
    xpair() { rpair "$1" "$XNS" xb "$XNS" xa "$2" "$3"; }
    xpair x-rping "rping -s -a $XB -C 10 -v" "rping -c -a $XB -C 10 -v"
    if rping_done "$OUT" "$RC" 10 "$work/x-rping.server"; then pass "cluster-rdma-rping(xa on node A → xb on node B: rdma_cm, 10/10 round trips over the VFs and the wire$RPING_NOTE)"
    else fail cluster-rdma-rping "rc=$RC $(echo "$OUT" | grep -c 'ping data')/10: $(echo "$OUT" | tail -3 | tr '\n' ' ') server: $(tail -2 "$work/x-rping.server" | tr '\n' ' ')"; fi
    xpair x-write-bw "ib_write_bw -d rxeXB -x $GXB -n 1000 -F --report_gbits" "ib_write_bw -d rxeXA -x $GXA -n 1000 -F --report_gbits $XB"
    bw=$(echo "$OUT" | awk '/BW average/ { getline; print $4; exit }')
    if [ "$RC" = 0 ] && [ -n "$bw" ]; then pass "cluster-rdma-write-bw(ib_write_bw -x <doctor's GID index on each node>, node A → node B: $bw Gbit/s under TCG)"
    else fail cluster-rdma-write-bw "rc=$RC: $(echo "$OUT" | tail -3 | tr '\n' ' ') server: $(tail -2 "$work/x-write-bw.server" | tr '\n' ' ')"; fi
  else
    cl_fail_rest "$why" cluster-rdma-rping cluster-rdma-write-bw
  fi

  # --- cluster-vlan-isolation: ya (team-a, VLAN 301, node B) in the same IP range reaches neither xa (node A) nor xb
  #     (its own node), by ping or rdma_cm; xa does not reach it ---
  why=""
  xin "$YNS" ya "ping -c 2 -w 4 $XA" >/dev/null 2>&1 && why="$why ya pinged xa across the wire and the VLANs;"
  xin "$YNS" ya "ping -c 2 -w 4 $XB" >/dev/null 2>&1 && why="$why ya pinged xb on its own node;"
  xin "$XNS" xa "ping -c 2 -w 4 $YA" >/dev/null 2>&1 && why="$why xa pinged ya;"
  xin "$YNS" ya 'rdma link add rxeYA type rxe netdev net1' >/dev/null 2>&1 || why="$why rdma link add in ya failed;"
  k -n "$YNS" exec ya -- timeout 30 rping -s -a "$YA" -C 3 -v > "$work/y-rping.server" 2>&1 &
  spid=$!; sleep 2
  out=$(k -n "$XNS" exec xa -- timeout 15 rping -c -a "$YA" -C 3 -v 2>&1); rc=$?
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  n=$(echo "$out" | grep -c 'ping data')
  [ "$n" = 0 ] && [ "$rc" != 0 ] || why="$why rping xa→ya across VLANs: rc=$rc, $n round trips;"
  # The same ping that fails across VLANs works inside one (xa→xb was shown above; again now, so a dead wire
  # cannot pass this scenario).
  xin "$XNS" xa "ping -c 2 -w 10 $XB" >/dev/null 2>&1 || why="$why xa no longer reaches xb;"
  [ -z "$why" ] && pass "cluster-vlan-isolation(ya $YA of team-a on VLAN 301 reaches neither xa on node A nor xb on its own node, by ping or rping; xa still reaches xb)" \
    || fail cluster-vlan-isolation "$why"

  # --- pod-start-per-runtime: apply → Ready with net1 carrier, per node and runtime, and the plugin's ADD in it ---
  sa=$(add_ms onnode "$XNS" xa); sb=$(add_ms onb "$XNS" xb); sy=$(add_ms onb "$YNS" ya)
  case "$sa $sb $sy" in
    *"no "*) fail pod-start-per-runtime "the plugin's log: xa '$sa', xb '$sb', ya '$sy'" ;;
    *) pass "pod-start-per-runtime(containerd/node A: xa ${START_MS[xa]} ms, plugin ADD $sa; CRI-O/node B: xb ${START_MS[xb]} ms, plugin ADD $sb; ya ${START_MS[ya]} ms, plugin ADD $sy)" ;;
  esac
else
  cl_fail_rest "not run: the pods did not come up" cluster-ping cluster-rdma-rping cluster-rdma-write-bw cluster-vlan-isolation pod-start-per-runtime
fi
k -n "$XNS" delete pod xa xb --ignore-not-found --wait=false >/dev/null 2>&1; k -n "$YNS" delete pod ya --ignore-not-found --wait=false >/dev/null 2>&1
k -n "$XNS" wait --for=delete pod/xa pod/xb --timeout=120s >/dev/null 2>&1; k -n "$YNS" wait --for=delete pod/ya --timeout=120s >/dev/null 2>&1

# --- drain-evicts-and-restores: a Deployment's pod on node B (as a training job's worker would be), then
#     kubectl drain node B: the pod evicted, its VF back (pfb0's rows, the VFs' names, MACs, MTUs as before), the
#     DaemonSet's pod still there and Ready, the node unschedulable, the Deployment's new pod Pending ---
cat <<EOF | k apply -f - >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: $XNS
spec:
  replicas: 1
  selector: { matchLabels: { app: trainer } }
  template:
$(PODNS=$XNS PODNODE=$NODEB pod trainer net-xb sriov-rdma/pfb | sed -n '/^metadata:/,$p' | sed -e 's/^/    /' -e 's/^    metadata:$/    metadata:\n      labels: { app: trainer }/' | grep -v '^      name: trainer$' | grep -v "^      namespace: $XNS\$")
EOF
tpod() { k -n "$XNS" get pods -l app=trainer -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{"\n"}{end}' 2>/dev/null; }
T1=""
for _ in $(seq 1 240); do
  T1=$(tpod | awk -v n="$NODEB" '$2 == n && $3 == "Running" { print $1; exit }')
  [ -n "$T1" ] && up_in "$XNS" "$T1" && break; T1=""; sleep 1
done
dsb=$(daemon_pod "$NODEB")
if [ -n "$T1" ]; then
  trow=$(onb "/usr/sbin/ip link show $PFB | grep ' vf ' | grep 'vlan 302'" 2>/dev/null)
  out=$(k drain "$NODEB" --ignore-daemonsets --pod-selector app=trainer --timeout=120s 2>&1); rc=$?
  why=""
  [ "$rc" = 0 ] || why="$why kubectl drain rc=$rc: $(echo "$out" | tail -2 | tr '\n' ' ');"
  k -n "$XNS" wait --for=delete "pod/$T1" --timeout=120s >/dev/null 2>&1 || why="$why $T1 not evicted;"
  for _ in $(seq 1 60); do XB_NOW=$(snapb); [ "$XB_NOW" = "$XB_BEFORE" ] && break; sleep 1; done
  [ "$XB_NOW" = "$XB_BEFORE" ] || why="$why node B differs: $(diff <(echo "$XB_BEFORE") <(echo "$XB_NOW") | tr '\n' ';');"
  [ "$(k get node "$NODEB" -o 'jsonpath={.spec.unschedulable}')" = true ] || why="$why $NODEB not unschedulable;"
  [ "$(k -n kube-system get pod "$dsb" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] \
    || why="$why the DaemonSet's pod '$dsb' on $NODEB is not Ready;"
  pending=$(tpod | awk '$NF == "Pending" { print $1 }')
  [ -n "$pending" ] || why="$why no Pending pod of the Deployment: $(tpod | tr '\n' ';');"
  [ -n "$trow" ] || why="$why $T1 had no row with vlan 302 on $PFB before the drain;"
  [ -z "$why" ] && pass "drain-evicts-and-restores($T1 evicted from $NODEB, its VF's row gone ('$(echo "$trow" | grep -o 'vf [0-9]* .*vlan 302' | cut -c1-50)'), $PFB as before; $dsb Ready; the new pod $pending Pending)" \
    || fail drain-evicts-and-restores "$why"

  # --- uncordon-reschedules: the node schedulable again, the Deployment's pod runs there with its VF ---
  k uncordon "$NODEB" >/dev/null 2>&1
  T2=""
  for _ in $(seq 1 240); do
    T2=$(tpod | awk -v n="$NODEB" '$2 == n && $3 == "Running" { print $1; exit }')
    [ -n "$T2" ] && up_in "$XNS" "$T2" && break; T2=""; sleep 1
  done
  why=""
  [ -n "$T2" ] && [ "$T2" != "$T1" ] || why="no new pod Running with net1 carrier on $NODEB: $(tpod | tr '\n' ';');"
  onb "/usr/sbin/ip link show $PFB | grep ' vf ' | grep -q 'vlan 302'" 2>/dev/null || why="$why no row with vlan 302 on $PFB;"
  [ "$(k get node "$NODEB" -o 'jsonpath={.spec.unschedulable}')" != true ] || why="$why $NODEB still unschedulable;"
  [ -z "$why" ] && pass "uncordon-reschedules($T2 Running on $NODEB with net1 carrier and its VF on vlan 302)" \
    || fail uncordon-reschedules "$why"
else
  fail drain-evicts-and-restores "the Deployment's pod is not Running on $NODEB with net1 carrier: $(tpod | tr '\n' ';') $(k -n "$XNS" get events 2>&1 | tail -3 | tr '\n' ' ')"
  fail uncordon-reschedules "not run: drain-evicts-and-restores had no pod"
  k uncordon "$NODEB" >/dev/null 2>&1
fi

# --- cluster-delete-restores: everything deleted, both nodes' VFs as before, no record, the IPPool empty ---
k -n "$XNS" delete deployment trainer --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1
for _ in $(seq 1 120); do [ -z "$(tpod)" ] && break; sleep 1; done
why=""
wb_allocs_are "$XPOOL" || why="the IPPool still holds '$(echo "$WB_GOT" | tr '\n' ';')';"
why="$why$(nodes_differ 60 "$XA_BEFORE" "$XB_BEFORE")"
[ -z "$why" ] && pass "cluster-delete-restores(both nodes' VF rows, names, MACs and MTUs as before, no record; the IPPool empty)" \
  || fail cluster-delete-restores "$why"

# --- cluster-whereabouts-gc: whereabouts' ip-control-loop on node A (a Deployment; its reconcile every minute, from
#     the cron schedule its ConfigMap mounts at /cron-schedule) frees the address of a pod whose node crashed and
#     stays down, so that no CNI DEL ran: xg (team-b, net-xb) on node B gets an address and a reconcile keeps it
#     while xg lives; node B crashes (crash_b) with its kubelet and CRI-O held down, the pod object is force-deleted:
#     the IPPool still holds xg's address, node B's lease is not renewed, until a reconcile frees it (its log line
#     quoted). Then node B's daemons are let go (they wait for a ConfigMap in the API server, through the node's
#     kubeconfig), its kubelet tears the old sandbox down, and node B is as before: rows, names, MACs, no record ---
WB_GC_IMAGE=localhost/whereabouts-ip-control-loop:$(basename "$WB_DIR" | sed -e 's/^whereabouts-//' -e 's/-gc$//')
# wb_gc: the GC's ServiceAccount, ClusterRole (whereabouts' own rules, its doc/crds/daemonset-install.yaml) and
# binding, schedule and Deployment (host network: the API server is 10.0.2.2:$AP from the node, as in dra.sh)
wb_gc() {
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: { name: whereabouts-gc, namespace: kube-system }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: whereabouts-gc }
rules:
  - apiGroups: [whereabouts.cni.cncf.io]
    resources: [ippools, overlappingrangeipreservations, nodeslicepools]
    verbs: [get, list, watch, create, update, patch, delete]
  - { apiGroups: [coordination.k8s.io], resources: [leases], verbs: ["*"] }
  - { apiGroups: [""], resources: [pods], verbs: [list, watch, get] }
  - { apiGroups: [""], resources: [nodes], verbs: [get, list, watch] }
  - { apiGroups: [k8s.cni.cncf.io], resources: [network-attachment-definitions], verbs: [get, list, watch] }
  - { apiGroups: ["", events.k8s.io], resources: [events], verbs: [create, patch, update, get] }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: whereabouts-gc }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: whereabouts-gc }
subjects: [{ kind: ServiceAccount, name: whereabouts-gc, namespace: kube-system }]
---
apiVersion: v1
kind: ConfigMap
metadata: { name: whereabouts-gc-schedule, namespace: kube-system }
data: { config: "* * * * *" }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: whereabouts-gc, namespace: kube-system }
spec:
  replicas: 1
  selector: { matchLabels: { app: whereabouts-gc } }
  template:
    metadata: { labels: { app: whereabouts-gc } }
    spec:
      serviceAccountName: whereabouts-gc
      hostNetwork: true
      nodeSelector: { kubernetes.io/hostname: localhost }
      terminationGracePeriodSeconds: 1
      containers:
        - name: ip-control-loop
          image: $WB_GC_IMAGE
          imagePullPolicy: Never
          env:
            - { name: NODENAME, valueFrom: { fieldRef: { fieldPath: spec.nodeName } } }
            - { name: WHEREABOUTS_NAMESPACE, valueFrom: { fieldRef: { fieldPath: metadata.namespace } } }
            - { name: KUBERNETES_SERVICE_HOST, value: 10.0.2.2 }
            - { name: KUBERNETES_SERVICE_PORT, value: "$AP" }
          volumeMounts: [{ name: schedule, mountPath: /cron-schedule }]
      volumes: [{ name: schedule, configMap: { name: whereabouts-gc-schedule, items: [{ key: config, path: config }] } }]
EOF
}
gclog() { k -n kube-system logs deploy/whereabouts-gc 2>/dev/null; }
lease_b() { k -n kube-node-lease get lease "$NODEB" -o 'jsonpath={.spec.renewTime}' 2>/dev/null; }
# orip_of PODREF: the OverlappingRangeIPReservations (whereabouts' cluster-wide record of an address) held by PODREF
orip_of() {
  k get overlappingrangeipreservations.whereabouts.cni.cncf.io -A -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.podref}{"\n"}{end}' 2>/dev/null \
    | awk -v p="$1" '$2 == p { print $1 }'
}
why=""
wb_gc | k apply -f - >/dev/null 2>&1 || why="kubectl apply of whereabouts-gc failed;"
k -n kube-system rollout status deploy/whereabouts-gc --timeout=120s >/dev/null 2>&1 \
  || why="$why whereabouts-gc not available: $(k -n kube-system get pods -l app=whereabouts-gc -o wide 2>&1 | tail -1);"
for _ in $(seq 1 60); do gclog | grep -q 'using expression: \* \* \* \* \*' && break; sleep 1; done
gclog | grep -q 'using expression: \* \* \* \* \*' || why="$why ip-control-loop has not read its schedule: $(gclog | tail -3 | tr '\n' ' ');"
XG=""; down=""
if [ -z "$why" ]; then
  PODNS=$XNS PODNODE=$NODEB pod xg net-xb sriov-rdma/pfb | k apply -f - >/dev/null
  if up_in "$XNS" xg; then
    XG=$(xaddr "$XNS" xg)
    wb_allocs_are "$XPOOL" "$XG $XNS/xg" || why="$why the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')' with xg ($XG) up;"
    # A reconcile that saw xg alive (its address in xg's network-status) and kept its address.
    kept=""
    for _ in $(seq 1 100); do
      kept=$(gclog | grep -F "pod reference $XNS/xg matches allocation; Allocation IP: $XG;" | tail -1); [ -n "$kept" ] && break; sleep 1
    done
    for _ in $(seq 1 20); do gclog | sed -n "/pod reference $XNS\/xg matches/,\$p" | grep -q 'reconciler success' && break; sleep 1; done
    [ -n "$kept" ] || why="$why no reconcile of xg in 100 s: $(gclog | tail -3 | tr '\n' ' ');"
    wb_allocs_are "$XPOOL" "$XG $XNS/xg" || why="$why a reconcile freed xg's $XG while xg lives: the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')';"
    orip=$(orip_of "$XNS/xg")
  else why="$why xg not Ready with net1 carrier: $(k -n "$XNS" get pod xg -o wide 2>&1 | tail -1)"; fi
fi
if [ -z "$why" ]; then
  # Node B's daemons, once crashed, wait until the API server has the ConfigMap node-b-back (600 s at most, so that
  # a run that stops here does not strand node B); the client certificate and key come from the node's kubeconfig.
  onb "sed -n 's/^ *client-certificate-data: //p' /k8s/run/kubeconfig | busybox base64 -d > /run/back.crt
       sed -n 's/^ *client-key-data: //p' /k8s/run/kubeconfig | busybox base64 -d > /run/back.key" >/dev/null 2>&1
  k -n kube-system delete configmap node-b-back --ignore-not-found >/dev/null 2>&1
  crash_b 'i=0; while [ \$i -lt 600 ] && ! curl -sf --cacert /k8s/run/ca.crt --cert /run/back.crt --key /run/back.key https://10.0.2.2:'"$AP"'/api/v1/namespaces/kube-system/configmaps/node-b-back > /dev/null 2>&1; do sleep 1; i=\$((i + 1)); done; rm -f /run/back.crt /run/back.key'
  down=1
  sleep 5; l1=$(lease_b)
  # Not at a minute's turn, when a reconcile may run: the IPPool is read right after the delete.
  for _ in $(seq 1 60); do s=$(date -u +%S); [ "${s#0}" -ge 5 ] && [ "${s#0}" -le 45 ] && break; sleep 1; done
  k -n "$XNS" delete pod xg --force --grace-period=0 >/dev/null 2>&1
  held=$(wb_allocs "$XPOOL")
  k -n "$XNS" get pod xg >/dev/null 2>&1 && why="$why pod xg still in the API server after the forced delete;"
  [ "$held" = "$XG $XNS/xg" ] || why="$why the IPPool right after the forced delete holds '$(echo "$held" | tr '\n' ';')', not xg's $XG;"
  t=$SECONDS; freed=""; line=""
  for _ in $(seq 1 180); do
    line=$(gclog | grep -F "successfully cleanup IPs: [$XG]" | tail -1)
    [ -n "$line" ] && k -n kube-system get ippools.whereabouts.cni.cncf.io "$XPOOL" >/dev/null 2>&1 && [ -z "$(wb_allocs "$XPOOL")" ] \
      && { freed=$((SECONDS - t)); break; }
    sleep 1
  done
  l2=$(lease_b); readyb=$(kb '{.status.conditions[?(@.type=="Ready")].status}')
  [ -n "$freed" ] || why="$why xg's $XG not freed in 180 s: the IPPool holds '$(wb_allocs "$XPOOL" | tr '\n' ';')'; log: $(gclog | grep -E 'cleanup|reconciler|rror' | tail -3 | tr '\n' ' ');"
  [ -n "$l1" ] && [ "$l1" = "$l2" ] || why="$why node B's lease renewed while it was down: '$l1' → '$l2';"
  orip_left=""; [ -z "$orip" ] || for _ in $(seq 1 10); do orip_left=$(orip_of "$XNS/xg"); [ -z "$orip_left" ] && break; sleep 1; done
  [ -z "$orip_left" ] || why="$why the OverlappingRangeIPReservation $orip_left of xg is left;"
fi
if [ -n "$down" ]; then
  # Node B back: its daemons let go, Ready, its shell; the kubelet tears down the sandbox of the pod it no longer
  # has (the DEL gives the VF back and removes the record) and the device plugin registers again.
  k -n kube-system create configmap node-b-back >/dev/null 2>&1
  crio_ready_back || why="$why $NODEB not Ready again after its daemons were let go;"
  crio_exec_back || why="$why no shell on $NODEB again;"
  k -n kube-system delete configmap node-b-back --ignore-not-found >/dev/null 2>&1
  for _ in $(seq 1 150); do XB_NOW=$(snapb); [ "$XB_NOW" = "$XB_BEFORE" ] && break; sleep 1; done
  [ "$XB_NOW" = "$XB_BEFORE" ] || why="$why node B differs: $(diff <(echo "$XB_BEFORE") <(echo "$XB_NOW") | tr '\n' ';');"
  for _ in $(seq 1 120); do [ "$(capb allocatable sriov-rdma/pfb)" = "$PFB_VFS" ] && break; sleep 1; done
  [ "$(capb allocatable sriov-rdma/pfb)" = "$PFB_VFS" ] || why="$why allocatable sriov-rdma/pfb on $NODEB is '$(capb allocatable sriov-rdma/pfb)';"
  wb_allocs_are "$XPOOL" || why="$why the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')' after node B is back;"
fi
[ -z "$why" ] && pass "cluster-whereabouts-gc(xg $XG on $NODEB kept by a reconcile while alive; $NODEB crashed and held down (lease not renewed, Ready=$readyb), xg force-deleted: the IPPool still held $XG, then ip-control-loop on localhost freed it ${freed} s later ('$(echo "$line" | cut -c1-120)')${orip:+, its OverlappingRangeIPReservation $orip gone too}; $NODEB back: rows, VF names, MACs, MTUs as before, no record, the IPPool empty)" \
  || fail cluster-whereabouts-gc "$why"
k -n "$XNS" delete pod xg --ignore-not-found --force --grace-period=0 >/dev/null 2>&1
wb_gc | k delete -f - --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
k -n "$XNS" delete networkattachmentdefinition net-xa net-xb --ignore-not-found >/dev/null 2>&1
k -n "$YNS" delete networkattachmentdefinition net-yb --ignore-not-found >/dev/null 2>&1
