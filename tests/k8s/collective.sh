# A collective across four pods on two nodes, the way a training job communicates (sourced by e2e.sh after
# cluster.sh, or after crio.sh alone with K8S_ONLY=collective.sh: it sets up what it needs itself). Four pods of one
# job in team-b (the node policy gives VLAN 302), c0 and c1 on node A (containerd, PF2), c2 and c3 on node B (CRI-O,
# pfb0), each with a VF and an address from one whereabouts range of this file; an MPI_Allreduce of a vector with
# Open MPI 4.1 + UCX 1.13 (Debian's packages, in localhost/sriov-rdma-mpi:1) over the pods' RDMA devices, every
# rank's result checked, its time printed.
# What stands in:
#   - Soft-RoCE on each pod's net1 for the VF's own RDMA function (an igb VF has none), as in rdma.sh and cluster.sh;
#   - mpi-rsh / mpi-rshd (tests/k8s/images) for ssh or the kubectl exec an MPI operator's launcher uses: mpirun in
#     c0 starts each other pod's orted through a socat listener on that pod's net1 which runs the command line it
#     is sent. Test-only: no authentication.
# UCX is held to the RDMA device: pml ucx only (no TCP byte transfer layer), UCX_TLS the verbs transports and self,
# UCX_NET_DEVICES the pod's own rxe device, UCX_IB_GID_INDEX what `sriov-rdma doctor --netns` reports on the pod's
# node. That the bytes went over it is read from the kernel: every pod's rxe device counts the packets it sent and
# received (hw_counters), at least the vector's size in RoCE packets each way; a run without them fails.
CNS=team-b
CRANGE=10.80.0.0/28; CPOOL=10.80.0.0-28
# The vector (doubles) and how many times it is reduced.
COLL_N=262144; COLL_ITERS=5
COLL_T0=$SECONDS
COLLECTIVE_SCENARIOS=$(expected_of collective.sh | tr '\n' ' ')
co_fail_rest() { local w=$1 n; shift; for n in "$@"; do fail "$n" "$w"; done; } # co_fail_rest WHY NAME...
cin() { k -n "$CNS" exec "$1" -- sh -c "$2"; } # cin POD CMD
# rxe_pkts POD DEV: "SENT RECEIVED" packets of the pod's rxe device, from the pod's sysfs or else its node's
rxe_pkts() {
  local c="cat /sys/class/infiniband/$2/ports/1/hw_counters/sent_pkts /sys/class/infiniband/$2/ports/1/hw_counters/rcvd_pkts" o sh=onnode
  o=$(cin "$1" "$c" 2>/dev/null | tr '\n' ' ')
  case $1 in c2|c3) sh=onb ;; esac
  [ -n "$o" ] || o=$("$sh" "$c" 2>/dev/null | tr '\n' ' ')
  echo "$o"
}

# --- collective-pods: the policy (team-b on VLAN 302) on both nodes, whereabouts, the NADs; four pods, two per
#     node, each Ready with net1 carrier and an address of the range, none twice, the IPPool holding each ---
why=$(two_nodes_why)
if [ -n "$why" ]; then
  co_fail_rest "$why" $COLLECTIVE_SCENARIOS
  return 0
fi
k create namespace "$CNS" >/dev/null 2>&1
k -n kube-system delete configmap sriov-rdma-policy --ignore-not-found >/dev/null 2>&1
k -n kube-system create configmap sriov-rdma-policy --from-literal=policy.json='{"namespaces":{
  "team-a":{"vlans":[301],"spoofchk":"on","trust":"off"},"team-b":{"vlans":[302],"spoofchk":"on","trust":"off"}}}' >/dev/null
for _ in $(seq 1 150); do
  onnode 'grep -q team-b /etc/sriov-rdma/policy.json' 2>/dev/null && onb 'grep -q team-b /etc/sriov-rdma/policy.json' 2>/dev/null && break
  sleep 1
done
onnode 'grep -q team-b /etc/sriov-rdma/policy.json' 2>/dev/null && onb 'grep -q team-b /etc/sriov-rdma/policy.json' 2>/dev/null \
  || why="$why the node policy with team-b is not on both nodes;"
why="$why$(wb_install onnode)$(wb_install onb)"
# The RDMA modules are loaded at boot (the initramfs's); modprobe only where they are not (the node has no module tree).
for sh in onnode onb; do
  "$sh" 'test -c /dev/infiniband/rdma_cm || modprobe -a rdma_rxe ib_uverbs rdma_ucm; test -c /dev/infiniband/rdma_cm' >/dev/null 2>&1 \
    || why="$why no /dev/infiniband/rdma_cm ($sh);"
done
cnad() { mknad "$CNS" "$1" "$2" '"vlan":302,"spoofchk":"on","mtu":9000,"ipam":{"type":"whereabouts","range":"'"$CRANGE"'"}'; }
{ cnad net-ca sriov-rdma/pf2; echo ---; cnad net-cb sriov-rdma/pfb; } | k apply -f - >/dev/null 2>&1 || why="$why kubectl apply of the NADs failed;"
CA_BEFORE=$(node_snap); CB_BEFORE=$(snapb)
CPODS="c0 c1 c2 c3"
cup=""
if [ -z "$why" ]; then
  # Each pod's command: mpi-rshd on its net1 address (the CNI gave it before the container started).
  for p in c0/localhost/net-ca/sriov-rdma/pf2 c1/localhost/net-ca/sriov-rdma/pf2 c2/$NODEB/net-cb/sriov-rdma/pfb c3/$NODEB/net-cb/sriov-rdma/pfb; do
    IFS=/ read -r name node nadn res1 res2 <<< "$p"
    PODNS=$CNS PODNODE=$node PODIMAGE=localhost/sriov-rdma-mpi:1 \
      PODCMD='["sh", "-c", "exec mpi-rshd $(ip -4 -o addr show net1 | awk '"'"'{ print $4 }'"'"' | cut -d/ -f1)"]' \
      pod "$name" "$nadn" "$res1/$res2"
    echo ---
  done | k apply -f - >/dev/null 2>&1 || why="kubectl apply of the pods failed;"
  cup=1
  for p in $CPODS; do
    up_in "$CNS" "$p" && continue
    cup=""; why="$why $p not Ready with net1 carrier: $(k -n "$CNS" get pod "$p" -o wide 2>&1 | tail -1) $(k -n "$CNS" describe pod "$p" 2>&1 | grep -A8 Events | tail -4 | tr '\n' ' ');"
  done
fi
declare -gA CADDR
if [ -n "$cup" ]; then
  for p in $CPODS; do CADDR[$p]=$(xaddr "$CNS" "$p"); done
  for p in $CPODS; do case "${CADDR[$p]}" in 10.80.0.[1-9]|10.80.0.1[0-4]) ;; *) why="$why $p's address '${CADDR[$p]}' not in $CRANGE;" ;; esac; done
  [ "$(printf '%s\n' "${CADDR[@]}" | sort -u | wc -l)" = 4 ] || why="$why an address given twice: ${CADDR[*]};"
  nodes=$(for p in $CPODS; do k -n "$CNS" get pod "$p" -o 'jsonpath={.spec.nodeName}'; echo; done | tr '\n' ' ')
  [ "$nodes" = "localhost localhost $NODEB $NODEB " ] || why="$why the pods' nodes are '$nodes';"
  wb_allocs_are "$CPOOL" "${CADDR[c0]} $CNS/c0" "${CADDR[c1]} $CNS/c1" "${CADDR[c2]} $CNS/c2" "${CADDR[c3]} $CNS/c3" \
    || why="$why the IPPool $CPOOL holds '$(echo "$WB_GOT" | tr '\n' ';')';"
  [ "$(onnode "/usr/sbin/ip link show $PF2 | grep ' vf ' | grep -c 'vlan 302'" 2>/dev/null)" = 2 ] || why="$why not 2 rows with vlan 302 on node A's $PF2;"
  [ "$(onb "/usr/sbin/ip link show $PFB | grep ' vf ' | grep -c 'vlan 302'" 2>/dev/null)" = 2 ] || why="$why not 2 rows with vlan 302 on $PFB;"
fi
if [ -n "$cup" ] && [ -z "$why" ]; then
  pass "collective-pods(c0 ${CADDR[c0]}, c1 ${CADDR[c1]} on localhost/containerd; c2 ${CADDR[c2]}, c3 ${CADDR[c3]} on $NODEB/CRI-O: one range, the IPPool holds each; 2 VF rows vlan 302 on each node)"
else
  fail collective-pods "$why"; cup=""
fi

# --- collective-allreduce: Soft-RoCE on each pod's net1, the GID index doctor reports on its node, mpirun in c0
#     over the four pods (one rank each), pml ucx on the pod's rxe device only; every rank's sum right, and every
#     pod's rxe device sent and received at least the vector's size in RoCE packets while it ran. The transports
#     are tried in turn (COLL_TLS: UCX_TLS values, the first that passes counts, each other's failure printed):
#     ud_verbs first, then rc_verbs with ud_verbs (rc alone has no auxiliary transport for its wireup: "no
#     auxiliary transport ... Destination is unreachable"). UCX's UD drops, silently, every received packet whose
#     destination GID it does not find in its own table (UCX_UD_ETH_DGID_CHECK); with it on, the run of 7 December
#     saw rank 0's rxe device count the 38 connection requests of the other three ranks and UCX answer none, until
#     their endpoints timed out (ud_ep.c "unhandled timeout error", SIGABRT): COLL_UCX_ENV (passed to every rank)
#     switches that check off.
#     What UCX sees of each pod's device (ucx_info -d), the GID it is given and each try's whole output are kept in
#     the logs (collective-*) ---
COLL_TLS=${COLL_TLS:-self,ud_verbs self,rc_verbs,ud_verbs}
COLL_UCX_ENV=${COLL_UCX_ENV-UCX_UD_ETH_DGID_CHECK=n}
if [ -n "$cup" ]; then
  why=""; i=0
  declare -gA CDEV CGID CPKT
  for p in $CPODS; do
    CDEV[$p]=rxeC$i; i=$((i + 1))
    case $p in c0|c1) sh=onnode ;; *) sh=onb ;; esac
    cin "$p" "rdma link add ${CDEV[$p]} type rxe netdev net1" >/dev/null 2>&1 || why="$why rdma link add in $p failed;"
    CGID[$p]=$(gid_at "$sh" "$CNS" "$p" "${CADDR[$p]}") || why="$why no GID index for $p;"
    # The rank's environment in its pod: its device and GID index; UCX_TLS comes from mpirun (-x).
    cin "$p" "printf '%s\n' '#!/bin/sh' 'export UCX_NET_DEVICES=${CDEV[$p]}:1 UCX_IB_GID_INDEX=${CGID[$p]}' \
      'ulimit -l unlimited 2>/dev/null' 'exec /usr/bin/allreduce \"\$@\"' > /tmp/rank && chmod 755 /tmp/rank" >/dev/null 2>&1 \
      || why="$why writing /tmp/rank in $p failed;"
  done
  if [ -z "$why" ]; then
    say "collective: rxe devices and GID indexes from doctor: $(for p in $CPODS; do printf '%s %s/%s ' "$p" "${CDEV[$p]}" "${CGID[$p]}"; done)"
    for p in $CPODS; do
      d=${CDEV[$p]}; g=${CGID[$p]}
      cin "$p" "echo gid $g: \$(cat /sys/class/infiniband/$d/ports/1/gids/$g /sys/class/infiniband/$d/ports/1/gid_attrs/types/$g); \
        ibv_devinfo -d $d 2>&1 | grep -E 'state|active_mtu|link_layer'; UCX_NET_DEVICES=$d:1 UCX_IB_GID_INDEX=$g ucx_info -d 2>&1" \
        > "$logs/collective-ucx_info-$p.txt" 2>&1
      echo "  $p: $(head -1 "$logs/collective-ucx_info-$p.txt"); UCX sees: $(grep -E 'Transport:|Device:' "$logs/collective-ucx_info-$p.txt" | awk '{ print $NF }' | tr '\n' ' ')"
    done
    hosts=$(printf '%s,' "${CADDR[c0]}" "${CADDR[c1]}" "${CADDR[c2]}" "${CADDR[c3]}"); hosts=${hosts%,}
    min=$(( COLL_N * 8 / 4096 ))
    tries=""; done_tls=""
    for tls in $COLL_TLS; do
      twhy=""
      for p in $CPODS; do CPKT[$p]=$(rxe_pkts "$p" "${CDEV[$p]}"); done
      t=$(date +%s%3N)
      # mpirun's output to a file in c0, not to the exec's stream: mpi-rsh processes left after a failed launch
      # would hold that open and kubectl exec would not return.
      out=$(cin c0 "SHELL=/bin/sh OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun -np 4 --host $hosts --map-by node \
        --mca plm_rsh_agent /usr/bin/mpi-rsh --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_if_include net1 \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca pml_ucx_verbose 2 --mca btl self \
        -x UCX_TLS=$tls -x UCX_LOG_LEVEL=info $(for e in $COLL_UCX_ENV; do printf -- '-x %s ' "$e"; done)/tmp/rank $COLL_N $COLL_ITERS > /tmp/mpirun.out 2>&1; rc=\$?; cat /tmp/mpirun.out; exit \$rc" 2>&1); rc=$?
      ms=$(( $(date +%s%3N) - t ))
      printf '%s\n' "$out" > "$logs/collective-mpirun-${tls//,/-}.txt"
      # what is left of a failed try (orted, ranks) in every pod, before the next
      for p in $CPODS; do cin "$p" "pkill -KILL -x orted; pkill -KILL -x allreduce" >/dev/null 2>&1; done
      ok=$(echo "$out" | grep -c "^allreduce rank [0-3] of 4 on c[0-3]: $COLL_N doubles x $COLL_ITERS, ok, ")
      ranks=$(echo "$out" | sed -n 's/^allreduce rank \([0-3]\) of 4 on \(c[0-3]\): .*, \([0-9.]*\) s$/\2:\3/p' | sort | tr '\n' ' ')
      [ "$rc" = 0 ] && [ "$ok" = 4 ] || twhy="$twhy mpirun rc=$rc, $ok/4 ranks ok: $(echo "$out" | grep -m8 'UCX \|Assert\|rror\|signal' | cut -c1-220 | tr '\n' ' ') ... $(echo "$out" | tail -3 | tr '\n' ' ');"
      [ "$(echo "$ranks" | grep -o 'c[0-3]:' | sort -u | wc -l)" = 4 ] || twhy="$twhy not one rank in each pod: '$ranks';"
      # At least the vector's bytes in 4096-byte RoCE packets, sent and received, in every pod.
      pk=""
      for p in $CPODS; do
        now=$(rxe_pkts "$p" "${CDEV[$p]}")
        read -r s0 r0 <<< "${CPKT[$p]}"; read -r s1 r1 <<< "$now"
        ds=$(( ${s1:-0} - ${s0:-0} )); dr=$(( ${r1:-0} - ${r0:-0} ))
        pk="$pk $p ${CDEV[$p]} +$ds/+$dr;"
        [ -n "$s0" ] && [ -n "$s1" ] && [ "$ds" -ge "$min" ] && [ "$dr" -ge "$min" ] \
          || twhy="$twhy $p's ${CDEV[$p]} sent/received '${CPKT[$p]}' → '$now' packets, fewer than $min each way;"
      done
      echo "  UCX_TLS=$tls $COLL_UCX_ENV: mpirun rc=$rc in $ms ms, $ok/4 ranks ok, rxe packets sent/received:$pk"
      if [ -z "$twhy" ]; then done_tls=$tls; break; fi
      tries="$tries [UCX_TLS=$tls:$twhy]"
    done
    if [ -n "$done_tls" ]; then
      pass "collective-allreduce(MPI_Allreduce of $COLL_N doubles x $COLL_ITERS across 4 pods on 2 nodes, Open MPI + UCX_TLS=$done_tls $COLL_UCX_ENV over Soft-RoCE on net1: every rank's sum right; mpirun $ms ms, ranks' time in s $ranks; rxe packets sent/received:$pk${tries:+; failed before it:$tries})"
    else
      fail collective-allreduce "no UCX_TLS of '$COLL_TLS' passed:$tries"
    fi
  else
    fail collective-allreduce "$why"
  fi
  for p in $CPODS; do cin "$p" "rdma link delete ${CDEV[$p]:-none}" >/dev/null 2>&1; done
else
  fail collective-allreduce "not run: collective-pods failed"
fi

# --- collective-delete-restores: the pods deleted, both nodes' VFs as before, no rxe device of this file left, the
#     IPPool empty ---
k -n "$CNS" delete pod $CPODS --ignore-not-found --wait=false >/dev/null 2>&1
k -n "$CNS" wait --for=delete pod/c0 pod/c1 pod/c2 pod/c3 --timeout=120s >/dev/null 2>&1
why=""
wb_allocs_are "$CPOOL" || why="the IPPool still holds '$(echo "$WB_GOT" | tr '\n' ';')';"
why="$why$(nodes_differ 60 "$CA_BEFORE" "$CB_BEFORE")"
left=$( { onnode '/usr/sbin/rdma link show'; onb '/usr/sbin/rdma link show'; } 2>/dev/null | grep -o 'rxeC[0-9]' | tr '\n' ' ')
[ -z "$left" ] || why="$why rxe devices left: $left;"
[ -z "$why" ] && pass "collective-delete-restores(both nodes' VF rows, names, MACs and MTUs as before, no rxeC device, the IPPool empty)" \
  || fail collective-delete-restores "$why"
k -n "$CNS" delete networkattachmentdefinition net-ca net-cb --ignore-not-found >/dev/null 2>&1
say "collective.sh: $((SECONDS - COLL_T0)) s"
