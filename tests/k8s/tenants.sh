# Tenant isolation on the node (sourced last by scenarios.sh: the node policy it installs stays on the node). A
# Kubernetes NetworkPolicy does not apply to a secondary network, and iptables never sees RoCE traffic the NIC
# handles: what isolates two namespaces is the node policy — each namespace its own VLAN, spoofchk forced on,
# trust forced off — applied by the PF to the VFs. Shown with the policy's ConfigMap as an operator applies it (the
# daemon installs it on the node when the kubelet updates the mounted ConfigMap), pods of team-a on VLAN 301 and
# team-b on VLAN 302: team-a's pods on the two PFs reach each other by ping and by RDMA (rping over rdma_cm), and
# neither reaches team-b's pod, nor it them. A ResourceQuota on the device plugin's resource caps team-a.
tns() { k -n "$1" exec "$2" -- sh -c "$3"; }
tnad() { mknad "$1" "$2" "$3" '"vlan":'"$4"',"mtu":9000,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24","rangeStart":"10.9.0.'"$5"'","rangeEnd":"10.9.0.'"$6"'"}]],"dataDir":"/var/lib/cni/sriov-rdma-ipam"}'; }
k create namespace team-a >/dev/null; k create namespace team-b >/dev/null
k -n kube-system create configmap sriov-rdma-policy --from-literal=policy.json='{"namespaces":{
  "team-a":{"vlans":[301],"spoofchk":"on","trust":"off"},"team-b":{"vlans":[302],"spoofchk":"on","trust":"off"}}}' >/dev/null
installed=""
for _ in $(seq 1 150); do
  onnode 'cat /etc/sriov-rdma/policy.json' 2>/dev/null | grep -q team-b && { installed=1; break; }; sleep 1
done
# host-local keeps a range per network name: each NAD its own part of the subnet, so no address is given twice.
{ tnad team-a net-a1 sriov-rdma/pf1 301 10 29; echo ---; tnad team-a net-a2 sriov-rdma/pf2 301 30 49; echo ---
  tnad team-b net-b1 sriov-rdma/pf1 302 50 99; } | k apply -f - >/dev/null
{ PODNS=team-a pod a1 net-a1 sriov-rdma/pf1; echo ---; PODNS=team-a pod a2 net-a2 sriov-rdma/pf2; echo ---
  PODNS=team-b pod b1 net-b1 sriov-rdma/pf1; } | k apply -f - >/dev/null
ready=1
for p in team-a/a1 team-a/a2 team-b/b1; do
  k -n "${p%/*}" wait --for=condition=Ready "pod/${p#*/}" --timeout=240s >/dev/null 2>&1 || ready=""
done
if [ -n "$installed" ] && [ -n "$ready" ]; then
  why=""
  a1=$(tns team-a a1 "ip -4 -o addr show net1" | awk '{ print $4 }' | cut -d/ -f1)
  a2=$(tns team-a a2 "ip -4 -o addr show net1" | awk '{ print $4 }' | cut -d/ -f1)
  b1=$(tns team-b b1 "ip -4 -o addr show net1" | awk '{ print $4 }' | cut -d/ -f1)
  [ -n "$a1" ] && [ -n "$a2" ] && [ -n "$b1" ] && [ "$a1" != "$a2" ] || why="$why addresses a1 '$a1' a2 '$a2' b1 '$b1';"
  rows=$(onnode "/usr/sbin/ip link show $PF1; /usr/sbin/ip link show $PF2" 2>/dev/null)
  for v in 301 302; do
    echo "$rows" | grep -q "vlan $v, spoof checking on, link-state auto, trust off" \
      || echo "$rows" | grep "vlan $v" | grep -q "spoof checking on.*trust off" || why="$why no VF row with vlan $v, spoofchk on, trust off;"
  done
  tns team-a a1 "ping -c 2 -w 10 $a2" >/dev/null 2>&1 || why="$why a1 cannot ping a2 (same namespace, VLAN 301);"
  tns team-a a1 "ping -c 2 -w 4 $b1" >/dev/null 2>&1 && why="$why a1 pinged b1 across namespaces;"
  tns team-b b1 "ping -c 2 -w 4 $a1" >/dev/null 2>&1 && why="$why b1 pinged a1 across namespaces;"
  tns team-b b1 "ping -c 2 -w 4 $a2" >/dev/null 2>&1 && why="$why b1 pinged a2 across namespaces;"
  # RDMA: Soft-RoCE on each pod's net1 (as rdma.sh); rping's rdma_cm resolves and connects through the VF.
  for p in team-a/a1 team-a/a2 team-b/b1; do
    tns "${p%/*}" "${p#*/}" "rdma link add rxe_${p#*/} type rxe netdev net1" || why="$why rdma link add in ${p#*/} failed;"
  done
  # The RoCE GID of each pod's address, as doctor reports it on the node for the pod's netns (e2e.sh's gid_at).
  gid_at onnode team-a a1 "$a1" >/dev/null || why="$why no GID for $a1 on rxe_a1;"
  gid_at onnode team-a a2 "$a2" >/dev/null || why="$why no GID for $a2 on rxe_a2;"
  gid_at onnode team-b b1 "$b1" >/dev/null || why="$why no GID for $b1 on rxe_b1;"
  rp() { # rp SERVER-NS SERVER CLIENT-NS CLIENT ADDR: rping's client output and rc (e2e.sh's rpair)
    rpair "rping-$2" "$1" "$2" "$3" "$4" "rping -s -a $5 -C 3 -v" "rping -c -a $5 -C 3 -v"
    RPOUT=$OUT; RPRC=$RC
  }
  for _ in 1 2 3; do
    rp team-a a2 team-a a1 "$a2"
    rping_done "$RPOUT" "$RPRC" 3 "$work/rping-a2.server" && break; sleep 2
  done
  rping_done "$RPOUT" "$RPRC" 3 "$work/rping-a2.server" ||
    why="$why rping a1→a2 rc=$RPRC $(echo "$RPOUT" | grep -c 'ping data')/3: $(echo "$RPOUT" | tail -2 | tr '\n' ' ');"
  rp team-b b1 team-a a1 "$b1"
  n=$(echo "$RPOUT" | grep -c 'ping data')
  [ "$n" = 0 ] && [ "$RPRC" != 0 ] || why="$why rping a1→b1 across namespaces: rc=$RPRC $n round trips;"
  if [ -z "$why" ]; then
    pass "tenant-isolation(team-a a1↔a2 ping and rping on VLAN 301; team-b b1 on 302 reaches neither, by ping nor rping; spoofchk on, trust off forced)"
  else fail tenant-isolation "$why"; fi
else
  fail tenant-isolation "policy installed: '${installed:-no}', pods ready: '${ready:-no}' $(k get pods -A 2>&1 | grep -E 'team-' | tr '\n' ' ')"
fi
# A ResourceQuota on the device plugin's resource works like any extended resource: team-a, with a1 and a2 each
# holding one VF, may request 2; a third pod is refused by the API server.
k -n team-a create quota rdma-vfs --hard=requests.sriov-rdma/pf1=1,requests.sriov-rdma/pf2=1 >/dev/null
# The API server admits against the usage the quota controller has computed: wait for it.
for _ in $(seq 1 60); do
  [ -n "$(k -n team-a get quota rdma-vfs -o 'jsonpath={.status.used.requests\.sriov-rdma/pf1}' 2>/dev/null)" ] && break; sleep 1
done
out=$(PODNS=team-a pod a3 net-a1 sriov-rdma/pf1 | k apply -f - 2>&1)
if echo "$out" | grep -q 'exceeded quota: rdma-vfs'; then pass "resourcequota-on-the-vf-resource(a third pod refused: exceeded quota)"
else fail resourcequota-on-the-vf-resource "$out"; fi
k -n team-a delete pod a1 a2 --ignore-not-found --wait=false >/dev/null; k -n team-b delete pod b1 --ignore-not-found --wait=false >/dev/null
k -n team-a wait --for=delete pod/a1 pod/a2 --timeout=120s >/dev/null 2>&1; k -n team-b wait --for=delete pod/b1 --timeout=120s >/dev/null 2>&1
restored 60 && pass "tenants-then-delete(every VF back, PF rows as before)" \
  || fail tenants-then-delete "$(echo "$NOW" | tr '\n' ';')"
