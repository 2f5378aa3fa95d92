# whereabouts as the NAD's IPAM (opt-in: K8S_ONLY=whereabouts.sh runs it after the set-up; not in the full run, where
# the node policy tenants.sh leaves on the node refuses the default namespace its pods are in): cluster-wide
# IPAM for a secondary network, its state in IPPool objects of the API server instead of files on one node, which
# is what pods of one training job on several nodes need (host-local would give two nodes' pods the same address).
# whereabouts v0.9.2 is built from its Go module (tests/k8s/build-components.sh) into the node's /opt/cni/bin, its
# CRDs and node configuration installed by e2e.sh's wb_install. This plugin execs it as it execs host-local.
# What is shown, each from the API server's IPPool and the pods' own addresses: every pod of the range gets an
# address of it and none twice, the IPPool holds one allocation per pod under its podRef with that address,
# a deleted pod's address is released (the allocation gone) and the next pod gets a free one, the last delete
# leaves the pool empty and every VF as it was. Not here: whereabouts' ip-control-loop (its garbage collection of
# allocations whose pod is gone without a DEL, after a node crash): cluster.sh's cluster-whereabouts-gc.
WB_POOL=10.78.0.0-29
a=""; b=""; c=""; d=""
wb_addr() { k exec "$1" -- sh -c "ip -4 -o addr show net1" 2>/dev/null | awk '{ print $4 }' | cut -d/ -f1; }
# the IPPool's allocations as lines "OFFSET PODREF" (OFFSET: the address's distance from the range's start)
wb_allocs() {
  k -n kube-system get ippools.whereabouts.cni.cncf.io "$WB_POOL" -o json 2>/dev/null \
    | python3 -c 'import json, sys
a = json.load(sys.stdin)["spec"].get("allocations") or {}
for o, v in sorted(a.items(), key=lambda i: int(i[0])): print(o, v.get("podref", ""))' 2>/dev/null
}
# wb_ready NAME...: each pod Ready (the kubelet makes it so only after every network of its sandbox was added)
wb_ready() {
  local p
  for p in "$@"; do k wait --for=condition=Ready "pod/$p" --timeout=240s >/dev/null 2>&1 || return 1; done
}
# wb_expect "OFFSET PODREF..." : the pool's allocations are exactly these (waits up to 30 s); sets WB_GOT
wb_expect() {
  local want
  want=$(printf '%s\n' "$@" | sort)
  for _ in $(seq 1 30); do
    WB_GOT=$(wb_allocs | sort)
    [ "$WB_GOT" = "$want" ] && return 0; sleep 1
  done
  return 1
}
# the offset of an address in 10.78.0.0/29
wb_off() { echo "${1##*.}"; }

why=$(wb_install onnode)
cat <<EOF | k apply -f - >/dev/null 2>&1 || why="$why kubectl apply of the NAD wb-net failed;"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: wb-net
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: sriov-rdma/pf1
spec:
  config: '{"cniVersion":"1.0.0","name":"wb-net","type":"sriov-rdma","vlan":120,"spoofchk":"on","mtu":9000,"logLevel":"debug","logFile":"/var/log/sriov-rdma/sriov-rdma.log","ipam":{"type":"whereabouts","range":"10.78.0.0/29"}}'
EOF
WB_BEFORE=$(node_snap)
if [ -z "$why" ]; then
  # Three pods, each on a VF of PF1 the device plugin allocated; the range has 6 addresses.
  { vf_pod wb-a wb-net sriov-rdma/pf1; echo ---; vf_pod wb-b wb-net sriov-rdma/pf1; echo ---; vf_pod wb-c wb-net sriov-rdma/pf1; } \
    | k apply -f - >/dev/null
  if wb_ready wb-a wb-b wb-c; then
    a=$(wb_addr wb-a); b=$(wb_addr wb-b); c=$(wb_addr wb-c)
    case "$a $b $c" in 10.78.0.[1-6]\ 10.78.0.[1-6]\ 10.78.0.[1-6]) ;; *) why="$why addresses '$a' '$b' '$c' not all in 10.78.0.1-6;" ;; esac
    [ "$(printf '%s\n' "$a" "$b" "$c" | sort -u | wc -l)" = 3 ] || why="$why an address given twice: $a $b $c;"
    wb_expect "$(wb_off "$a") default/wb-a" "$(wb_off "$b") default/wb-b" "$(wb_off "$c") default/wb-c" \
      || why="$why the IPPool $WB_POOL holds '$(echo "$WB_GOT" | tr '\n' ';')';"
    rows=$(onnode "/usr/sbin/ip link show $PF1" 2>/dev/null)
    [ "$(echo "$rows" | grep -c 'vlan 120')" = 3 ] || why="$why PF1's VF table has $(echo "$rows" | grep -c 'vlan 120') rows with vlan 120, not 3;"
    [ -z "$why" ] && pass "whereabouts-pods(wb-a $a, wb-b $b, wb-c $c: one range, no address twice; IPPool $WB_POOL holds each under its podRef; 3 VF rows with vlan 120)" \
      || fail whereabouts-pods "$why"
  else
    fail whereabouts-pods "not Ready: $(k get pods wb-a wb-b wb-c -o wide 2>&1 | tr '\n' ';') events: $(k get events --field-selector involvedObject.name=wb-a 2>&1 | tail -3 | tr '\n' ';') log: $(onnode 'tail -5 /var/log/whereabouts.log' 2>&1 | tr '\n' ';')"
  fi
  # A deleted pod's address is released; the next pod gets a free address, none twice among the live pods.
  why=""
  k delete pod wb-a --wait=true --timeout=120s >/dev/null 2>&1 || why="delete of wb-a did not finish;"
  wb_expect "$(wb_off "$b") default/wb-b" "$(wb_off "$c") default/wb-c" \
    || why="$why after wb-a's delete the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')';"
  vf_pod wb-d wb-net sriov-rdma/pf1 | k apply -f - >/dev/null
  if wb_ready wb-d; then
    d=$(wb_addr wb-d)
    case "$d" in 10.78.0.[1-6]) ;; *) why="$why wb-d's address '$d' is not in the range;" ;; esac
    [ "$d" != "$b" ] && [ "$d" != "$c" ] || why="$why wb-d got $d, held by another pod;"
    wb_expect "$(wb_off "$b") default/wb-b" "$(wb_off "$c") default/wb-c" "$(wb_off "$d") default/wb-d" \
      || why="$why with wb-d the IPPool holds '$(echo "$WB_GOT" | tr '\n' ';')';"
  else why="$why wb-d not Ready: $(k get pod wb-d 2>&1 | tail -1);"; fi
  [ -z "$why" ] && pass "whereabouts-release-reuse(wb-a's $a released on delete; wb-d got $d; the IPPool holds wb-b, wb-c, wb-d)" \
    || fail whereabouts-release-reuse "$why"
else
  fail whereabouts-pods "$why"
  fail whereabouts-release-reuse "not run: the set-up above failed"
fi
# Every pod deleted: the pool is empty, every VF back as it was, no record left.
k delete pod wb-a wb-b wb-c wb-d --ignore-not-found --wait=true --timeout=180s >/dev/null 2>&1
why=""
wb_expect || why="the IPPool still holds '$(echo "$WB_GOT" | tr '\n' ';')';"
for _ in $(seq 1 60); do WB_NOW=$(node_snap); [ "$WB_NOW" = "$WB_BEFORE" ] && break; sleep 1; done
[ "$WB_NOW" = "$WB_BEFORE" ] || why="$why the node differs: $(diff <(echo "$WB_BEFORE") <(echo "$WB_NOW") | tr '\n' ';');"
[ -z "$why" ] && pass "whereabouts-delete-restores(the IPPool empty; every VF's row, name, MAC and MTU as before; no record)" \
  || fail whereabouts-delete-restores "$why"
k delete networkattachmentdefinition wb-net --ignore-not-found >/dev/null 2>&1
