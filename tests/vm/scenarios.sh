#!/bin/sh
# Scenarios on real VFs of an emulated igb NIC. Each prints "RESULT <name> PASS|FAIL <why>" and checks
# the kernel's view (ip link on the PF, the pod netns), not the plugin's own output.
. /vmlib.sh
. /rdmalib.sh
# include FILE: sources a scenario file; one that is missing or does not parse is a FAIL named after it (its
# scenarios are then also missing from the run, which tests/vm/results.sh counts). The run's list of scenario
# names is in tests/vm/results.sh: a scenario added here is added there.
include() { if E=$(sh -n "$1" 2>&1); then . "$1"; else fail "include-$(basename "$1" .sh)" "$E"; fi; }
# rdma_dev [NETNS]: the RDMA device names the kernel shows (RDMA netlink, `rdma dev`), on the host or in NETNS
rdma_dev() { if [ -n "${1:-}" ]; then ip netns exec "$1" /usr/sbin/rdma dev 2>&1; else rdma dev 2>&1; fi | sed -n 's/^[0-9]*: \([^:]*\):.*/\1/p' | sort | tr '\n' ' '; }
# steps PCI: the journal steps of the VF's record, in order
steps() { grep -o '"step": *"[a-z-]*"' /var/lib/cni/sriov-rdma/$1.json 2>/dev/null | sed 's/.*"\([a-z-]*\)"$/\1/' | tr '\n' ' '; }
KMAJ=$(uname -r | cut -d. -f1)
if [ "$KMAJ" -ge 7 ]; then
# 10a (7.x). Exclusive mode, where this kernel does move a software RDMA device between namespaces: the plugin
# moves rxe2 (on VF 2's netdev) into the pod, then the netdev, and the kernel destroys rxe2 as its netdev changes
# namespace (as 6.12 does). "isolated" must then fail, naming it, and roll back the netdev and the PF; "auto"
# goes on with the netdev. What the kernel did is asserted: rxe2 is gone from the host and from the pod.
V2=$(VFN 2); P2=$(VFP 2)
rdma link add rxe2 type rxe netdev "$V2" || echo "VMLOG rdma link add failed"
rdma system set netns exclusive || echo "VMLOG rdma system set failed"
echo "VMLOG $(rdma system show) $(rdma dev | tr '\n' ' ')"
PFX_BEFORE=$(ip link show "$PF"); V2_BEFORE=$(ip -o link show "$V2" | cut -d' ' -f2-5)
ip netns add pod10
C10='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'","rdma":"isolated","logLevel":"info","vlan":12,"ipam":{"type":"static","addresses":[{"address":"10.4.0.1/24"}]}}'
R=$(cni ADD c10 /var/run/netns/pod10 net1 "$C10"); E=$(cat /tmp/err)
echo "VMLOG 10a isolated: $R"
case "$R" in
  *"RDMA device rxe2 is not visible from /var/run/netns/pod10 after the netdev moved"*)
    [ "$PFX_BEFORE" = "$(ip link show "$PF")" ] && [ "$V2_BEFORE" = "$(ip -o link show "$V2" | cut -d' ' -f2-5)" ] \
      && [ ! -e /var/lib/cni/sriov-rdma/$P2.json ] && ! rdma dev show rxe2 >/dev/null 2>&1 \
      && [ -z "$(ip netns exec pod10 rdma dev 2>/dev/null)" ] \
      && pass "rdma-exclusive-isolated-rxe-dies-with-its-netdev(named, rolled back)" \
      || fail rdma-exclusive-isolated-rxe-dies-with-its-netdev "state changed: $(rdma dev) $(ip -o link show "$V2")" ;;
  *) fail rdma-exclusive-isolated-rxe-dies-with-its-netdev "$R $E" ;;
esac
rdma link add rxe2 type rxe netdev "$V2" || echo "VMLOG rdma link add failed"
R=$(cni ADD c10 /var/run/netns/pod10 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'","rdma":"auto","logLevel":"info"}')
E=$(cat /tmp/err)
case "$R" in
  *'"interfaces"'*) ip -n pod10 link show net1 >/dev/null 2>&1 && pass rdma-exclusive-auto-moves-and-goes-on || fail rdma-exclusive-auto-moves-and-goes-on "no net1: $E" ;;
  *) fail rdma-exclusive-auto-moves-and-goes-on "$R $E" ;;
esac
cni DEL c10 /var/run/netns/pod10 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'"}' || echo "VMLOG DEL10: $(cat /tmp/err)"
ip netns del pod10
rdma link delete rxe2 2>/dev/null
rdma system set netns shared || echo "VMLOG back to shared failed"
else
# 10a. Soft-RoCE in exclusive mode (switchable only while no other netns exists, so first): real RDMA
# netlink finds rxe on VF 2's netdev; the kernel refuses to move a software device: "isolated" fails and
# rolls back cleanly, "auto" falls back and says why.
V2=$(VFN 2); P2=$(VFP 2)
rdma link add rxe2 type rxe netdev "$V2" || echo "VMLOG rdma link add failed"
rdma system set netns exclusive || echo "VMLOG rdma system set failed"
echo "VMLOG $(rdma system show) $(rdma dev | tr '\n' ' ')"
PFX_BEFORE=$(ip link show "$PF"); V2_BEFORE=$(ip -o link show "$V2" | cut -d' ' -f2-5)
ip netns add pod10
R=$(cni ADD c10 /var/run/netns/pod10 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'","rdma":"isolated","logLevel":"debug"}')
E=$(cat /tmp/err)
echo "VMLOG 10a isolated: $R"
case "$R" in
  *"moving RDMA device rxe2"*) [ "$PFX_BEFORE" = "$(ip link show "$PF")" ] && [ "$V2_BEFORE" = "$(ip -o link show "$V2" | cut -d' ' -f2-5)" ] \
      && rdma dev show rxe2 >/dev/null 2>&1 && [ ! -e /var/lib/cni/sriov-rdma/$P2.json ] && pass rdma-exclusive-isolated-rolls-back \
      || fail rdma-exclusive-isolated-rolls-back "state changed" ;;
  *) fail rdma-exclusive-isolated-rolls-back "$R $E" ;;
esac
R=$(cni ADD c10 /var/run/netns/pod10 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'","rdma":"auto"}')
E=$(cat /tmp/err)
# The kernel's view: net1 in the pod, no RDMA device in the pod's (exclusive) view. (The journal keeps the rdma-in
# step written before the move was tried; 6.12 destroys rxe2 as its netdev leaves, so the host has none either.)
HOSTR=$(rdma_dev); PODR=$(rdma_dev pod10); ST=$(steps "$P2")
echo "VMLOG 10a auto: rdma dev on the host: $HOSTR; in pod10: $PODR; journal: $ST"
case "$E" in
  *"moving RDMA device rxe2"*"leaving it in the host namespace"*)
    why=""
    echo "$R" | grep -q '"interfaces"' || why="$why no-result"
    ip -n pod10 link show net1 >/dev/null 2>&1 || why="$why no-net1-in-pod"
    [ -z "$PODR" ] || why="$why pod-sees:$PODR"
    case " $ST " in *" netdev-in "*) ;; *) why="$why journal:$ST" ;; esac
    [ -z "$why" ] && pass "rdma-exclusive-auto-falls-back(net1 in the pod, its rdma dev empty; host: ${HOSTR:-none})" \
      || fail rdma-exclusive-auto-falls-back "$why" ;;
  *) fail rdma-exclusive-auto-falls-back "$R $E" ;;
esac
cni DEL c10 /var/run/netns/pod10 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'"}' || echo "VMLOG DEL10: $(cat /tmp/err)"
ip netns del pod10
rdma link delete rxe2 2>/dev/null
rdma system set netns shared || echo "VMLOG back to shared failed"
fi

# 10b. Shared mode: discovery finds rxe on VF 3's netdev; "isolated" fails before touching anything,
# naming the fix; "auto" leaves it and says why.
V3=$(VFN 3); P3=$(VFP 3)
rdma link add rxe3 type rxe netdev "$V3"
PFX_BEFORE=$(ip link show "$PF"); V3_BEFORE=$(ip -o link show "$V3" | cut -d' ' -f2-5)
ip netns add pod11
R=$(cni ADD c11 /var/run/netns/pod11 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P3'","rdma":"isolated","vlan":9}')
case "$R" in
  *'"code":7'*"rdma system set netns exclusive"*) [ "$PFX_BEFORE" = "$(ip link show "$PF")" ] && [ "$V3_BEFORE" = "$(ip -o link show "$V3" | cut -d' ' -f2-5)" ] \
      && pass rdma-shared-isolated-refused || fail rdma-shared-isolated-refused "state changed" ;;
  *) fail rdma-shared-isolated-refused "$R" ;;
esac
# The kernel's view: net1 in the pod, the record's journal without an rdma-in step, and the pod seeing what the
# host sees (rxe3 itself is destroyed by the kernel as its netdev leaves; a reference device on a VF that stays
# on the host, VF 5, is what the pod must see in shared mode).
V5=$(VFN 5); rdma link add rxeref type rxe netdev "$V5" || echo "VMLOG rdma link add rxeref failed"
R=$(cni ADD c11 /var/run/netns/pod11 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P3'"}')
E=$(cat /tmp/err)
sleep 0.5
HOSTR=$(rdma_dev); PODR=$(rdma_dev pod11); ST=$(steps "$P3")
echo "VMLOG 10b auto: rdma dev on the host: $HOSTR; in pod11: $PODR; journal: $ST"
case "$E" in
  *"shared netns mode: RDMA device rxe3 stays visible"*)
    why=""
    ip -n pod11 link show net1 >/dev/null 2>&1 || why="$why no-net1-in-pod"
    case " $PODR" in *" rxeref "*) ;; *) why="$why pod-does-not-see-rxeref:$PODR" ;; esac
    [ "$HOSTR" = "$PODR" ] || why="$why host-and-pod-views-differ"
    case " $ST " in *" netdev-in "*) ;; *) why="$why journal:$ST" ;; esac
    case " $ST " in *" rdma-in "*) why="$why journal-has-rdma-in" ;; esac
    [ -z "$why" ] && pass "rdma-shared-auto-leaves(net1 in the pod; rdma dev in the pod = on the host: $PODR)" \
      || fail rdma-shared-auto-leaves "$why" ;;
  *) fail rdma-shared-auto-leaves "$R $E" ;;
esac
rdma link delete rxeref 2>/dev/null
cni DEL c11 /var/run/netns/pod11 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P3'"}' || echo "VMLOG DEL11: $(cat /tmp/err)"
ip netns del pod11
rdma link delete rxe3 2>/dev/null

# 10c. Shared mode, rxe created on the VF inside the pod after ADD: a real GID table; CHECK finds the RoCE
# v2 GID of the pod address.
V4=$(VFN 4); P4=$(VFP 4)
ip netns add pod12
C12='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P4'","logLevel":"info","ipam":{"type":"static","addresses":[{"address":"10.1.0.2/24"}]}}'
OUT=$(cni ADD c12 /var/run/netns/pod12 net1 "$C12")
ip netns exec pod12 /usr/sbin/rdma link add rxe4 type rxe netdev net1 || echo "VMLOG rdma link add in pod failed"
PREV=$(echo "$C12" | sed 's/}$//')',"prevResult":'"$OUT"'}'
sleep 0.5
# The index CHECK reports must be the one the pod's sysfs shows the address at, as RoCE v2 on net1.
if cni CHECK c12 /var/run/netns/pod12 net1 "$PREV"; then
  GI=$(sed -n 's/.*CHECK: RoCE v2 GID index \([0-9]*\) for 10.1.0.2 on rxe4.*/\1/p' /tmp/err | head -1)
  echo "VMLOG $(grep 'GID index' /tmp/err)"
  why=""
  if [ -z "$GI" ]; then why="no GID line: $(cat /tmp/err)"
  else
    G=/sys/class/infiniband/rxe4/ports/1
    SG=$(ip netns exec pod12 cat $G/gids/$GI $G/gid_attrs/types/$GI $G/gid_attrs/ndevs/$GI 2>&1 | tr '\n' '|')
    echo "VMLOG rdma-gid-check: pod12 sysfs at index $GI: $SG"
    [ "$SG" = "0000:0000:0000:0000:0000:ffff:0a01:0002|RoCE v2|net1|" ] || why="$why sysfs-at-$GI:$SG"
  fi
  ip -n pod12 link show net1 >/dev/null 2>&1 || why="$why no-net1-in-pod"
  case " $(rdma_dev pod12)" in *" rxe4 "*) ;; *) why="$why pod-rdma-dev:$(rdma_dev pod12)" ;; esac
  case " $(rdma_dev)" in *" rxe4 "*) ;; *) why="$why host-rdma-dev:$(rdma_dev)" ;; esac
  [ -z "$why" ] && pass "rdma-gid-check(index $GI: ::ffff:10.1.0.2, RoCE v2, net1 in the pod's sysfs)" || fail rdma-gid-check "$why"
else fail rdma-gid-check "$(cat /tmp/err)"; fi
D=$($PLUGIN doctor --netns /var/run/netns/pod12 2>&1)
echo "$D" | sed 's/^/VMLOG doctor-netns: /'
case "$D" in
  *"rxe4 port 1"*"::ffff:10.1.0.2"*"RoCE v2"*"net1"*) pass doctor-netns-gids ;;
  *) fail doctor-netns-gids "$D" ;;
esac
ip netns exec pod12 /usr/sbin/rdma link delete rxe4
cni DEL c12 /var/run/netns/pod12 net1 "$C12" || echo "VMLOG DEL12: $(cat /tmp/err)"
ip netns del pod12

# 1. ADD with VF settings, MTU, static IPAM: the PF and the pod show all of it.
ip link set "$PF" vf 0 spoofchk off
PF_BEFORE=$(ip link show "$PF")
VF_BEFORE=$(ip -o link show "$VF0NET" | cut -d' ' -f2-5; cat /sys/class/net/$VF0NET/address)
ip netns add pod1 || echo "VMLOG ip netns add failed"
C1='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$VF0'","vlan":100,"vlanQoS":3,
 "mac":"02:00:00:00:aa:01","spoofchk":"on","trust":"on","max_tx_rate":100,"mtu":9000,
 "ipam":{"type":"static","addresses":[{"address":"10.1.0.2/24"}]}}'
OUT=$(cni ADD c1 /var/run/netns/pod1 net1 "$C1")
echo "VMLOG ADD: $OUT $(cat /tmp/err)"
L=$(vfline 0); P=$(ip -n pod1 -o link show net1; ip -n pod1 -o addr show net1)
echo "VMLOG PF vf0: $L"
case "$L" in *"02:00:00:00:aa:01"*"vlan 100, qos 3"*"spoof checking on"*"trust on"*) ok1=1 ;; *) ok1=0 ;; esac
echo "$L" | grep -q "max_tx_rate 100Mbps" || ok1=0
echo "$P" | grep -q "mtu 9000" || ok1=0
echo "$P" | grep -q "02:00:00:00:aa:01" || ok1=0
echo "$P" | grep -q "10.1.0.2/24" || ok1=0
ip -o link show "$VF0NET" >/dev/null 2>&1 && ok1=0
[ $ok1 = 1 ] && pass add-vf-settings || fail add-vf-settings "PF: $L POD: $P"

# 2. CHECK passes, and fails naming the MTU once it is changed by hand.
PREV=$(echo "$C1" | sed 's/}$//')',"prevResult":'"$OUT"'}'
if cni CHECK c1 /var/run/netns/pod1 net1 "$PREV" >/dev/null; then
  ip -n pod1 link set net1 mtu 1500
  R=$(cni CHECK c1 /var/run/netns/pod1 net1 "$PREV")
  case "$R" in *"MTU of net1"*) pass check ;; *) fail check "$R" ;; esac
  ip -n pod1 link set net1 mtu 9000
else fail check "CHECK of a good attachment: $(cat /tmp/err)"; fi

# 3. DEL: VF settings, name, MAC, MTU as before; record gone.
ADDED=0; echo "$OUT" | grep -q '"interfaces"' && ADDED=1
cni DEL c1 /var/run/netns/pod1 net1 "$C1" || echo "VMLOG DEL failed: $(cat /tmp/err)"
PF_AFTER=$(ip link show "$PF")
VF_AFTER=$(ip -o link show "$VF0NET" | cut -d' ' -f2-5; cat /sys/class/net/$VF0NET/address 2>/dev/null)
if [ $ADDED = 0 ]; then
  fail del-restores "ADD did not succeed"
elif [ "$PF_BEFORE" = "$PF_AFTER" ] && [ "$VF_BEFORE" = "$VF_AFTER" ] && [ ! -e /var/lib/cni/sriov-rdma/$VF0.json ]; then
  pass del-restores
else
  fail del-restores "PF before/after differ or VF differs: $(echo "$PF_BEFORE" | grep 'vf 0 ') | $(echo "$PF_AFTER" | grep 'vf 0 ') | $VF_BEFORE | $VF_AFTER"
fi

# 8. A setting the NIC refuses (igb has no link_state): clear error naming it; PF table identical.
R=$(cni ADD c8 /var/run/netns/pod1 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$VF0'","vlan":7,"trust":"on","link_state":"enable"}')
PF_AFTER=$(ip link show "$PF")
case "$R" in
  *"link_state enable"*) [ "$PF_BEFORE" = "$PF_AFTER" ] && [ ! -e /var/lib/cni/sriov-rdma/$VF0.json ] && ip -o link show "$VF0NET" >/dev/null && pass rollback-refused-setting || fail rollback-refused-setting "state changed: $R" ;;
  *) fail rollback-refused-setting "$R" ;;
esac

# 4. DEL after the pod netns is deleted: the kernel returns the VF under its pod name; DEL restores it.
C4='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$VF0'","vlan":42,"mtu":9000}'
ip netns add pod4
if cni ADD c4 /var/run/netns/pod4 net4 "$C4" >/dev/null; then
  ip netns del pod4
  cni DEL c4 /var/run/netns/pod4 net4 "$C4" >/dev/null || echo "VMLOG DEL4: $(cat /tmp/err)"
  PF_AFTER=$(ip link show "$PF")
  VF_AFTER=$(ip -o link show "$VF0NET" | cut -d' ' -f2-5; cat /sys/class/net/$VF0NET/address 2>/dev/null)
  if [ "$PF_BEFORE" = "$PF_AFTER" ] && [ "$VF_BEFORE" = "$VF_AFTER" ] && [ ! -e /var/lib/cni/sriov-rdma/$VF0.json ]; then
    pass del-after-netns-del
  else
    fail del-after-netns-del "$(echo "$PF_AFTER" | grep 'vf 0 ') | $VF_AFTER | $(ls /sys/bus/pci/devices/$VF0/net)"
  fi
else fail del-after-netns-del "ADD: $(cat /tmp/err)"; fi

# 5. pfName: 7 ADDs get 7 distinct VFs, the 8th fails clearly; all DEL; host identical.
SNAP_BEFORE=$(ip -d link show | sed 's/^[0-9]*: //' | grep -v 'altname')
CP='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","pfName":"'$PF'","spoofchk":"on","vlan":51}'
ok5=1
for i in 1 2 3 4 5 6 7; do
  ip netns add p5$i
  cni ADD c5$i /var/run/netns/p5$i net1 "$CP" >/dev/null || { ok5=0; echo "VMLOG ADD5 $i: $(cat /tmp/err)"; }
done
N=$(ls /var/lib/cni/sriov-rdma/*.json 2>/dev/null | wc -l)
# The kernel's view: each pod has a net1 whose PCI device is a VF of the PF, seven different ones, and the PF's
# seven rows carry the VLAN.
IN=$(for i in 1 2 3 4 5 6 7; do basename "$(ip netns exec p5$i readlink /sys/class/net/net1/device 2>/dev/null)"; done | sort -u | grep -c .)
ALL=$(for i in 0 1 2 3 4 5 6; do VFP $i; done | sort | tr '\n' ' ')
GOT=$(for i in 1 2 3 4 5 6 7; do basename "$(ip netns exec p5$i readlink /sys/class/net/net1/device 2>/dev/null)"; done | sort | tr '\n' ' ')
ROWS=$(ip link show "$PF" | grep -c ' vf [0-6] .*vlan 51,')
echo "VMLOG pfname: the pods' net1 are $GOT; $ROWS PF rows with vlan 51"
[ "$IN" = 7 ] && [ "$GOT" = "$ALL" ] && [ "$ROWS" = 7 ] || ok5=0
ip netns add p58
R=$(cni ADD c58 /var/run/netns/p58 net1 "$CP")
case "$R" in *"no free VF"*) ;; *) ok5=0; echo "VMLOG 8th ADD: $R" ;; esac
for i in 1 2 3 4 5 6 7; do cni DEL c5$i /var/run/netns/p5$i net1 "$CP" || ok5=0; ip netns del p5$i; done
ip netns del p58
SNAP_AFTER=$(ip -d link show | sed 's/^[0-9]*: //' | grep -v 'altname')
[ "$SNAP_BEFORE" = "$SNAP_AFTER" ] || { ok5=0; echo "VMLOG snapshot differs"; }
[ $ok5 = 1 ] && [ "$N" = 7 ] && pass "pfname-allocation(7 pods, net1 on 7 distinct VFs of $PF, 7 PF rows with vlan 51)" \
  || fail pfname-allocation "records=$N pods' net1: $GOT PF rows with vlan 51: $ROWS"

# 9. GC with an empty valid-attachments list releases a live attachment and restores the VF.
ip netns add pod9
if cni ADD c9 /var/run/netns/pod9 net1 "$C4" >/dev/null && [ -e /var/lib/cni/sriov-rdma/$VF0.json ] \
   && vfline 0 | grep -q "vlan 42" && ip -n pod9 link show net1 >/dev/null 2>&1; then
  R=$(echo '{"cniVersion":"1.1.0","name":"vmnet","type":"sriov-rdma","cni.dev/valid-attachments":[]}' | CNI_COMMAND=GC $PLUGIN 2>/tmp/err)
  PF_AFTER=$(ip link show "$PF")
  if [ "$PF_BEFORE" = "$PF_AFTER" ] && ip -o link show "$VF0NET" >/dev/null 2>&1 && [ ! -e /var/lib/cni/sriov-rdma/$VF0.json ]; then
    pass gc
  else fail gc "$R $(cat /tmp/err)"; fi
else fail gc "its own ADD did not attach the VF: $(cat /tmp/err)"; fi
ip netns del pod9

# 6. Seven ADDs on seven VFs at once all succeed; DEL all; host identical (ip -d link and the PF's VF table).
SNAP_BEFORE=$(ip -d link show | sed 's/^[0-9]*: //' | grep -v 'altname')
for i in 0 1 2 3 4 5 6; do ip netns add p6$i; done
for i in 0 1 2 3 4 5 6; do
  V=$(basename "$(readlink /sys/class/net/$PF/device/virtfn$i)")
  C='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$V'","vlan":'$((200+i))',"trust":"on","mtu":9000}'
  ( CNI_ERR=/tmp/err6$i cni ADD c6$i /var/run/netns/p6$i net1 "$C" >/tmp/add6$i; echo $? > /tmp/rc6$i ) &
done
wait
ok6=1
for i in 0 1 2 3 4 5 6; do [ "$(cat /tmp/rc6$i)" = 0 ] || { ok6=0; echo "VMLOG ADD6 $i: $(cat /tmp/add6$i) $(cat /tmp/err6$i)"; }; done
[ "$(ip link show "$PF" | grep -c 'vlan 20[0-6]')" = 7 ] || ok6=0
for i in 0 1 2 3 4 5 6; do
  V=$(basename "$(readlink /sys/class/net/$PF/device/virtfn$i)")
  C='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$V'","vlan":'$((200+i))',"trust":"on","mtu":9000}'
  ( CNI_ERR=/tmp/derr6$i cni DEL c6$i /var/run/netns/p6$i net1 "$C" >/dev/null || echo "VMLOG DEL6 $i failed: $(cat /tmp/derr6$i)" ) &
done
wait
for i in 0 1 2 3 4 5 6; do ip netns del p6$i; done
SNAP_AFTER=$(ip -d link show | sed 's/^[0-9]*: //' | grep -v 'altname')
[ "$SNAP_BEFORE" = "$SNAP_AFTER" ] || { ok6=0; echo "VMLOG snapshot differs after parallel DEL"; }
[ $ok6 = 1 ] && pass parallel-7 || fail parallel-7 "see VMLOG"

# 8b. vlanProto 802.1ad is refused by igb (EPROTONOSUPPORT) after the admin MAC was applied: named, rolled back.
R=$(cni ADD c8b /var/run/netns/pod1 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$VF0'","mac":"02:00:00:00:bb:01","vlan":5,"vlanProto":"802.1ad"}')
PF_AFTER=$(ip link show "$PF")
case "$R" in
  *"vlanProto 802.1ad"*) [ "$PF_BEFORE" = "$PF_AFTER" ] && [ ! -e /var/lib/cni/sriov-rdma/$VF0.json ] && pass rollback-802.1ad || fail rollback-802.1ad "state changed: $R" ;;
  *) fail rollback-802.1ad "$R" ;;
esac

# doctor on the host: the PF, its 7 VFs with their PF-side settings, the RDMA mode; exit 0 (nothing blocks ADD).
ip link set "$PF" vf 1 vlan 77
D=$($PLUGIN doctor 2>&1); rc=$?
echo "$D" | head -12 | sed 's/^/VMLOG doctor: /'
J=$($PLUGIN doctor --json 2>/dev/null)
ip link set "$PF" vf 1 vlan 0
if [ $rc = 0 ] && echo "$D" | grep -q "VFs 7/7" && echo "$D" | grep -q "igbvf" && echo "$J" | grep -q '"vlan": 77' \
   && echo "$J" | grep -q '"netns_mode": "shared"'; then pass doctor-host; else fail doctor-host "rc=$rc"; fi

# 7. A VF bound to vfio-pci (PF 2's VF 0): ADD applies the PF-side settings without netdev work, the result
# carries pciID; DEL restores the PF's VF table and succeeds.
if [ -n "$PF2" ]; then
  Q=$(basename "$(readlink /sys/class/net/$PF2/device/virtfn0)")
  echo "$Q" > /sys/bus/pci/devices/$Q/driver/unbind 2>/dev/null
  echo vfio-pci > /sys/bus/pci/devices/$Q/driver_override
  echo "$Q" > /sys/bus/pci/drivers_probe 2>/dev/null
  DRV=$(basename "$(readlink /sys/bus/pci/devices/$Q/driver 2>/dev/null)")
  echo "VMLOG VF $Q of $PF2 is bound to ${DRV:-no driver}"
  P2_BEFORE=$(ip link show "$PF2")
  ip netns add pod7
  C7='{"cniVersion":"1.1.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$Q'","vlan":300,"trust":"on"}'
  R=$(cni ADD c7 /var/run/netns/pod7 net1 "$C7")
  L=$(ip link show "$PF2" | grep "vf 0 ")
  ok7=1
  [ "$DRV" = vfio-pci ] || ok7=0
  echo "$R" | grep -q "\"pciID\":\"$Q\"" || ok7=0
  echo "$L" | grep -q "vlan 300" || ok7=0
  cni DEL c7 /var/run/netns/pod7 net1 "$C7" || ok7=0
  [ "$P2_BEFORE" = "$(ip link show "$PF2")" ] || ok7=0
  [ -e /var/lib/cni/sriov-rdma/$Q.json ] && ok7=0
  ip netns del pod7
  [ $ok7 = 1 ] && pass "userspace-driver-vf($DRV)" || fail userspace-driver-vf "driver ${DRV:-none} | $R | $L | $(cat /tmp/err)"
else
  fail userspace-driver-vf "no second PF"
fi

# cnitool (libcni, as runtimes call plugins): add, check, del with a 1.0.0 config; host identical after.
V5=$(VFN 5); P5=$(VFP 5)
mkdir -p /tmp/netconf
echo '{"cniVersion":"1.0.0","name":"tooled","type":"sriov-rdma","deviceID":"'$P5'","vlan":55,"mtu":9000,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}]],"dataDir":"/tmp/ipam"}}' > /tmp/netconf/tooled.conf
PF_BEFORE5=$(ip link show "$PF"); V5_BEFORE=$(ip -o link show "$V5" | cut -d' ' -f2-5)
ip netns add podc
export NETCONFPATH=/tmp/netconf CNI_IFNAME=net1
okc=1
R=$(/usr/sbin/cnitool add tooled /var/run/netns/podc 2>/tmp/err) || { okc=0; echo "VMLOG cnitool add: $(cat /tmp/err)"; }
echo "$R" | grep -q '10.9.0.' || okc=0
ip -n podc -o link show net1 | grep -q "mtu 9000" || okc=0
ip link show "$PF" | grep "vf 5 " | grep -q "vlan 55" || okc=0
/usr/sbin/cnitool check tooled /var/run/netns/podc 2>/tmp/err || { okc=0; echo "VMLOG cnitool check: $(cat /tmp/err)"; }
/usr/sbin/cnitool del tooled /var/run/netns/podc 2>/tmp/err || { okc=0; echo "VMLOG cnitool del: $(cat /tmp/err)"; }
[ "$PF_BEFORE5" = "$(ip link show "$PF")" ] || okc=0
[ "$V5_BEFORE" = "$(ip -o link show "$V5" | cut -d' ' -f2-5)" ] || okc=0
ip netns del podc
unset NETCONFPATH CNI_IFNAME
[ $okc = 1 ] && pass cnitool-add-check-del || fail cnitool-add-check-del "$R"

# 8c. IPAM that fails after the VF settings and the move: everything rolled back, host identical.
V6=$(VFN 6); P6=$(VFP 6)
PF_BEFORE6=$(ip link show "$PF"); V6_BEFORE=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)
ip netns add pod8
R=$(cni ADD c8c /var/run/netns/pod8 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","vlan":61,"trust":"on","mtu":9000,"ipam":{"type":"static","addresses":[{"address":"not-an-ip"}]}}')
V6_AFTER=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address 2>/dev/null)
case "$R" in
  *"IPAM plugin static ADD"*) [ "$PF_BEFORE6" = "$(ip link show "$PF")" ] && [ "$V6_BEFORE" = "$V6_AFTER" ] \
      && [ ! -e /var/lib/cni/sriov-rdma/$P6.json ] && ! ip -n pod8 link show net1 >/dev/null 2>&1 \
      && pass rollback-ipam-failure || fail rollback-ipam-failure "state changed: $V6_AFTER" ;;
  *) fail rollback-ipam-failure "$R" ;;
esac
ip netns del pod8

# STATUS (1.1.0), invoked directly as libcni does: ready with pfName on a real PF, code 50 for a missing one.
S1=$(echo '{"cniVersion":"1.1.0","name":"vmnet","type":"sriov-rdma","pfName":"'$PF'"}' | CNI_COMMAND=STATUS $PLUGIN 2>/dev/null); r1=$?
S2=$(echo '{"cniVersion":"1.1.0","name":"vmnet","type":"sriov-rdma","pfName":"eth9"}' | CNI_COMMAND=STATUS $PLUGIN 2>/dev/null); r2=$?
if [ $r1 = 0 ] && [ -z "$S1" ] && [ $r2 = 1 ] && echo "$S2" | grep -q '"code":50'; then pass status; else fail status "$r1 $S1 / $r2 $S2"; fi

# Datapath and DEL restore, for every combination of mac, trust, spoofchk and vlan set or not, on one VF of PF 0
# whose peer is a VF of PF 1 (the two NICs share a wire). Each ADD: the pod's net1 has carrier and reaches the
# peer, the PF shows the settings. Each DEL: the PF's row for the VF and its netdev (name, MAC, MTU) are exactly
# as before, and the next combination re-attaches the same VF, so each DEL is also proven to leave it usable.
V1=$(VFN 1); P1=$(VFP 1)
ip link set "$PF" vf 1 spoofchk off   # so that "spoofchk on" is a change igb really applies
ROW_BEFORE=$(vfline 1); N1_BEFORE=$(ip -o link show "$V1" | cut -d' ' -f2-5; cat /sys/class/net/$V1/address)
okm=1; peer_vlan=none
for c in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
  X=""; want=""
  [ $((c & 1)) = 1 ] && { X="$X,\"mac\":\"02:00:00:00:cc:0$((c % 10))\""; want="$want 02:00:00:00:cc:0$((c % 10))"; }
  [ $((c & 2)) = 2 ] && { X="$X,\"trust\":\"on\""; want="$want trust_on"; }
  [ $((c & 4)) = 4 ] && { X="$X,\"spoofchk\":\"on\""; want="$want spoof_checking_on"; }
  vl=""; [ $((c & 8)) = 8 ] && { vl=100; X="$X,\"vlan\":100"; want="$want vlan_100"; }
  if [ "$peer_vlan" != "${vl:-untagged}" ]; then
    [ "$peer_vlan" != none ] && peer_down
    peer_up $vl || { okm=0; echo "VMLOG combo $c: no peer"; }
    peer_vlan=${vl:-untagged}
  fi
  CM='{"cniVersion":"1.0.0","name":"combo","type":"sriov-rdma","deviceID":"'$P1'","mtu":9000'$X',"ipam":{"type":"static","addresses":[{"address":"10.5.0.2/24"}]}}'
  ip netns add podm
  name="combo($(echo $want | tr ' ' '+'))"; [ -z "$want" ] && name="combo(none)"
  why=""
  if cni ADD cm$c /var/run/netns/podm net1 "$CM" >/dev/null; then
    carrier podm net1 || why="$why no-carrier-in-pod"
    reach podm 10.5.0.1 || why="$why peer-unreachable"
    ROW=$(vfline 1 | tr ' ' '_')
    for w in $want; do case "$ROW" in *"$w"*) ;; *) why="$why PF-row-lacks-$w" ;; esac; done
    cni DEL cm$c /var/run/netns/podm net1 "$CM" || why="$why DEL: $(cat /tmp/err)"
    # a DEL that failed is retried once, so one failure does not cascade into the next combinations
    [ -e /var/lib/cni/sriov-rdma/$P1.json ] && { cat /var/lib/cni/sriov-rdma/$P1.json | tr '\n' ' ' | sed 's/^/VMLOG rec /'; echo; cni DEL cm$c /var/run/netns/podm net1 "$(echo "$CM" | sed 's/"mtu"/"logLevel":"debug","mtu"/')"; echo "VMLOG retry DEL: $(cat /tmp/err | tr '\n' ' ')"; }
  else why="ADD: $(cat /tmp/err)"; fi
  ip netns del podm
  [ "$ROW_BEFORE" = "$(vfline 1)" ] || why="$why PF-row: $(vfline 1)"
  [ "$N1_BEFORE" = "$(ip -o link show "$V1" | cut -d' ' -f2-5; cat /sys/class/net/$V1/address 2>/dev/null)" ] || why="$why netdev: $(ip -o link show "$V1" 2>&1 | cut -d' ' -f2-5)"
  [ -e /var/lib/cni/sriov-rdma/$P1.json ] && why="$why record-left"
  if [ -z "$why" ]; then pass "$name"; else fail "$name" "$why"; okm=0; fi
done
# After the last DEL the VF works on the host too: carrier when brought up.
ip link set "$V1" up; carrier - "$V1" && pass vf-works-after-del || fail vf-works-after-del "$(ip -o link show "$V1")"
ip link set "$V1" down
peer_down

# A device that took the VF's host name while the pod ran is never touched: the VF comes back as <pf>v<n>
# with its own MAC and MTU, the other device keeps its own, and the record is removed.
V2=$(VFN 2); P2=$(VFP 2)
N2_BEFORE=$(ip -o link show "$V2" | cut -d' ' -f3-5; cat /sys/class/net/$V2/address)
ip netns add podi
CI='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P2'","mtu":9000}'
if cni ADD ci /var/run/netns/podi net1 "$CI" >/dev/null; then
  ip link add "$V2" mtu 1400 type veth peer name impostorp
  IMP_BEFORE=$(ip -o link show "$V2" | cut -d' ' -f3-5; cat /sys/class/net/$V2/address)
  cni DEL ci /var/run/netns/podi net1 "$CI" >/dev/null; rc=$?
  NOW=$(ls /sys/bus/pci/devices/$P2/net 2>/dev/null)
  IMP_AFTER=$(ip -o link show "$V2" | cut -d' ' -f3-5; cat /sys/class/net/$V2/address)
  VF_AFTER=$(ip -o link show "$NOW" | cut -d' ' -f3-5; cat /sys/class/net/$NOW/address)
  ip link del "$V2"; ip link set "$NOW" name "$V2"
  if [ $rc = 0 ] && [ "$NOW" = "${PF}v2" ] && [ "$IMP_BEFORE" = "$IMP_AFTER" ] && [ "$VF_AFTER" = "$N2_BEFORE" ] \
     && [ ! -e /var/lib/cni/sriov-rdma/$P2.json ] && grep -q "taken by another device" /tmp/err; then
    pass del-name-taken-by-another-device
  else fail del-name-taken-by-another-device "rc=$rc now=$NOW imp=$IMP_AFTER vf=$VF_AFTER $(cat /tmp/err)"; fi
else fail del-name-taken-by-another-device "ADD: $(cat /tmp/err)"; fi
ip netns del podi

# A pod namespace that exists but cannot be used (a path that is not a netns) is not "gone": DEL fails with
# code 5, changes nothing (the VF stays in the pod with its VLAN), keeps the record; a later DEL restores.
ROW3=$(vfline 3)
ip netns add podu
CU='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P3'","vlan":33}'
if cni ADD cu /var/run/netns/podu net1 "$CU" >/dev/null; then
  R=$(cni DEL cu /vmlib.sh net1 "$CU"); rc=$?
  if [ $rc != 0 ] && echo "$R" | grep -q '"code":5' && [ -e /var/lib/cni/sriov-rdma/$P3.json ] \
     && ip -n podu link show net1 >/dev/null 2>&1 && vfline 3 | grep -q "vlan 33" \
     && cni DEL cu /var/run/netns/podu net1 "$CU" && [ "$ROW3" = "$(vfline 3)" ]; then
    pass del-unopenable-netns-changes-nothing
  else fail del-unopenable-netns-changes-nothing "rc=$rc $R $(cat /tmp/err)"; fi
else fail del-unopenable-netns-changes-nothing "ADD: $(cat /tmp/err)"; fi
ip netns del podu

# RDMA traffic and isolation through plugin-attached VFs (rdma.sh).
include /rdma.sh

# Orphans heal themselves: a pod netns destroyed without a DEL (the kernel hands the VF back under its pod name
# with the pod's settings on the PF); `sriov-rdma gc --dry-run` lists it, and the next pfName ADD on that PF
# reclaims it — PF row and netdev restored — and gets it. Every other VF of PF 0 is held so the ADD must
# reclaim this one.
V6=$(VFN 6); P6=$(VFP 6)
ROW6=$(vfline 6); N6=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)
okp=1; held=""
for i in 0 1 2 3 4 5; do
  ip netns add ph$i
  cni ADD ch$i /var/run/netns/ph$i net1 '{"cniVersion":"1.0.0","name":"hold","type":"sriov-rdma","deviceID":"'$(VFP $i)'"}' >/dev/null \
    || { okp=0; echo "VMLOG hold $i: $(cat /tmp/err)"; }
done
ip netns add porph
CO='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","vlan":66,"trust":"on","mtu":9000}'
cni ADD corph /var/run/netns/porph net1 "$CO" >/dev/null || { okp=0; echo "VMLOG orphan ADD: $(cat /tmp/err)"; }
ip netns del porph
for i in $(seq 1 50); do [ -n "$(ls /sys/bus/pci/devices/$P6/net 2>/dev/null)" ] && break; sleep 0.1; done
D=$($PLUGIN gc --dry-run 2>&1); drc=$?
echo "$D" | grep "$P6" | sed 's/^/VMLOG gc --dry-run: /'
echo "$D" | grep "$P6" | grep -q "orphan" && [ $drc = 1 ] || okp=0
ip netns add pnew
CP6='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","pfName":"'$PF'"}'
R=$(cni ADD cnew /var/run/netns/pnew net1 "$CP6"); E=$(cat /tmp/err)
echo "$E" | grep -q "reclaiming it from corph/net1" || { okp=0; echo "VMLOG no reclaim: $E"; }
ip -n pnew link show net1 >/dev/null 2>&1 || okp=0
vfline 6 | grep -q "vlan 66" && okp=0   # the orphan's VLAN is gone
cni DEL cnew /var/run/netns/pnew net1 "$CP6" || { okp=0; echo "VMLOG DEL new: $(cat /tmp/err)"; }
ip netns del pnew
for i in 0 1 2 3 4 5; do cni DEL ch$i /var/run/netns/ph$i net1 '{"cniVersion":"1.0.0","name":"hold","type":"sriov-rdma","deviceID":"'$(VFP $i)'"}' || okp=0; ip netns del ph$i; done
[ "$ROW6" = "$(vfline 6)" ] || { okp=0; echo "VMLOG row6: $(vfline 6)"; }
[ "$N6" = "$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)" ] || { okp=0; echo "VMLOG netdev6: $(ip -o link show "$V6")"; }
[ -z "$(ls /var/lib/cni/sriov-rdma/*.json 2>/dev/null)" ] || { okp=0; echo "VMLOG records left: $(ls /var/lib/cni/sriov-rdma/)"; }
[ $okp = 1 ] && pass "orphan-reclaimed-by-pfname-add(gc --dry-run listed it)" || fail orphan-reclaimed-by-pfname-add "see VMLOG"

# A VF inside a namespace whose path is gone but which a process still holds is in use, not an orphan: gc leaves
# it (PF row and lease too), a second pod cannot take it, and DEL keeps the record until the kernel hands the VF
# back; once the holder exits, the VF comes back under its pod name and the retried DEL restores everything.
V6=$(VFN 6); P6=$(VFP 6)
ROW6=$(vfline 6); N6=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)
why=""
ip netns add phold
CH='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","vlan":67,"trust":"on","mtu":9000,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.6.7.0/24"}]],"dataDir":"/tmp/ipamh"}}'
if cni ADD chold /var/run/netns/phold net1 "$CH" >/dev/null; then
  # iproute2 itself (not the ip() function, whose subshell $! would name) execs the holder in the namespace.
  /usr/sbin/ip netns exec phold /bin/busybox sleep 300 &
  hpid=$!
  sleep 0.3
  ip netns del phold
  G=$($PLUGIN gc --json 2>/dev/null); grc=$?
  echo "$G" | tr -d '\n ' | grep -q '"pci":"'$P6'"[^}]*"state":"held"' || why="$why gc-not-held($grc):$(echo "$G" | tr -d '\n ')"
  vfline 6 | grep -q "vlan 67" || why="$why pf-row-restored-under-a-live-pod"
  [ -n "$(ls /tmp/ipamh/vmnet 2>/dev/null | grep '^10\.6\.7\.')" ] || why="$why lease-released"
  [ -z "$(ls /sys/bus/pci/devices/$P6/net 2>/dev/null)" ] || why="$why vf-on-host-while-held"
  ip netns add phold2
  cni ADD chold2 /var/run/netns/phold2 net1 '{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'"}' >/dev/null \
    && why="$why second-add-took-it"
  grep -q "still in use" /tmp/err || why="$why second-add-error:$(cat /tmp/err | tail -1)"
  ip netns del phold2
  cni DEL chold "" net1 "$CH" >/dev/null && why="$why del-succeeded-while-held"
  grep -q "has not come back" /tmp/err || why="$why del-error:$(tail -1 /tmp/err)"
  [ -e /var/lib/cni/sriov-rdma/$P6.json ] || why="$why record-dropped"
  vfline 6 | grep -q "vlan 67" || why="$why pf-row-restored-by-failed-del"
  kill $hpid; wait $hpid 2>/dev/null
  for i in $(seq 1 100); do [ -n "$(ls /sys/bus/pci/devices/$P6/net 2>/dev/null)" ] && break; sleep 0.1; done
  echo "VMLOG held VF back on the host as: $(ls /sys/bus/pci/devices/$P6/net 2>/dev/null)"
  cni DEL chold "" net1 "$CH" >/dev/null || why="$why retried-del:$(tail -1 /tmp/err)"
else why="ADD: $(cat /tmp/err)"; ip netns del phold; fi
[ "$ROW6" = "$(vfline 6)" ] || why="$why PF-row: $(vfline 6)"
[ "$N6" = "$(ip -o link show "$V6" 2>&1 | cut -d' ' -f2-5; cat /sys/class/net/$V6/address 2>&1)" ] || why="$why netdev: $(ls /sys/bus/pci/devices/$P6/net 2>&1)"
[ -e /var/lib/cni/sriov-rdma/$P6.json ] && why="$why record-left"
[ -n "$(ls /tmp/ipamh/vmnet 2>/dev/null | grep '^10\.6\.7\.')" ] && why="$why lease-left"
[ -z "$why" ] && pass held-netns-vf-never-reclaimed-then-restored || fail held-netns-vf-never-reclaimed-then-restored "$why"

# With an admin MAC and trust off igb's VF driver is rebound, and the netdev comes back with the driver's MTU: ADD
# gives the pod's interface the MTU the VF had on the host (as sriov-cni, which does not rebind, leaves it), and
# CHECK compares with that.
V6=$(VFN 6); P6=$(VFP 6)
M6=$(cat /sys/class/net/$V6/mtu)
ip link set "$V6" mtu 4000
X6=$(cat /sys/class/net/$V6/ifindex)
why=""
ip netns add pmtu
CM='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","mac":"02:00:00:00:dd:07","trust":"off"}'
if cni ADD cmtu /var/run/netns/pmtu net1 "$CM" >/dev/null; then
  # The rebind happened: the pod's net1 is a new netdev (a new ifindex; a move keeps it), with the MTU of 4000.
  X1=$(ip netns exec pmtu cat /sys/class/net/net1/ifindex); MP=$(ip netns exec pmtu cat /sys/class/net/net1/mtu)
  echo "VMLOG after the rebind net1 has MTU $MP, ifindex $X1 (the VF's netdev had $X6)"
  [ -n "$X1" ] && [ "$X1" != "$X6" ] || why="$why no-rebind:ifindex-$X6-kept"
  [ "$MP" = 4000 ] || why="$why pod-mtu-$MP-not-the-vfs-4000"
  cni CHECK cmtu /var/run/netns/pmtu net1 "$CM" >/dev/null || why="$why CHECK:$(tail -1 /tmp/err)"
  cni DEL cmtu /var/run/netns/pmtu net1 "$CM" >/dev/null || why="$why DEL:$(tail -1 /tmp/err)"
  [ "$(cat /sys/class/net/$V6/mtu)" = 4000 ] || why="$why mtu-not-restored:$(cat /sys/class/net/$V6/mtu)"
else why="ADD: $(cat /tmp/err)"; fi
ip netns del pmtu
ip link set "$V6" mtu "$M6"
[ -z "$why" ] && pass check-mtu-is-what-add-left-after-a-rebind || fail check-mtu-is-what-add-left-after-a-rebind "$why"

# An ADD killed between the unbind and the bind of its rebind (igb takes an admin MAC only when its VF driver is
# bound again, with trust off) leaves the VF bound to no driver, its netdev gone from the pod. Simulated exactly:
# ADD, then unbind the VF. DEL must bind it to its driver again and restore the PF row and the netdev.
V6=$(VFN 6); P6=$(VFP 6)
ROW6=$(vfline 6); N6=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)
ip netns add pub
CU='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","mac":"02:00:00:00:dd:06","vlan":61,"mtu":9000}'
why=""
if cni ADD cub /var/run/netns/pub net1 "$CU" >/dev/null; then
  echo "$P6" > /sys/bus/pci/drivers/igbvf/unbind
  [ -e /sys/bus/pci/devices/$P6/driver ] && why="$why still-bound"
  ip -n pub link show net1 >/dev/null 2>&1 && why="$why net1-still-in-pod"
  cni DEL cub /var/run/netns/pub net1 "$CU" >/dev/null || why="$why DEL: $(cat /tmp/err | tr '\n' ' ')"
  grep -q "bound to no driver" /tmp/err || why="$why no-bind-logged"
  [ "$(basename "$(readlink /sys/bus/pci/devices/$P6/driver)")" = igbvf ] || why="$why not-bound-to-igbvf"
else why="ADD: $(cat /tmp/err)"; fi
ip netns del pub
[ "$ROW6" = "$(vfline 6)" ] || why="$why PF-row: $(vfline 6)"
[ "$N6" = "$(ip -o link show "$V6" 2>&1 | cut -d' ' -f2-5; cat /sys/class/net/$V6/address 2>&1)" ] || why="$why netdev: $(ls /sys/bus/pci/devices/$P6/net 2>&1) $(ip -o link show "$V6" 2>&1 | cut -d' ' -f2-5)"
[ -e /var/lib/cni/sriov-rdma/$P6.json ] && why="$why record-left"
[ -z "$why" ] && pass del-binds-a-vf-an-interrupted-rebind-left-unbound || fail del-binds-a-vf-an-interrupted-rebind-left-unbound "$why"

# SIGKILL at a moment of ADD on a real VF with PF settings (MAC, VLAN, spoofchk, trust on every other trial, so
# igb's rebind is on the path too), 8 delays across the ADD: whatever step the journal had reached, DEL (retried
# at most 3 times) leaves the PF's row for the VF, its netdev (name, MAC, MTU) and the record store as before.
ROW6=$(vfline 6); N6=$(ip -o link show "$V6" | cut -d' ' -f2-5; cat /sys/class/net/$V6/address)
okk=1; killed=0; landed=0; t=0
for d in 0.01 0.03 0.06 0.1 0.15 0.2 0.3 0.5; do
  t=$((t + 1)); TR=""; [ $((t % 2)) = 0 ] && TR=',"trust":"on"'
  CK='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P6'","mac":"02:00:00:00:ee:0'$t'","vlan":62,"spoofchk":"on"'$TR',"mtu":9000,"ipam":{"type":"static","addresses":[{"address":"10.6.2.2/24"}]}}'
  ip netns add pk
  echo "$CK" > /tmp/ck.json
  CNI_COMMAND=ADD CNI_CONTAINERID=ck$t CNI_NETNS=/var/run/netns/pk CNI_IFNAME=net1 $PLUGIN </tmp/ck.json >/dev/null 2>/tmp/ckerr &
  pid=$!
  sleep $d
  hit=0; kill -9 $pid 2>/dev/null && { killed=$((killed + 1)); hit=1; }
  wait $pid 2>/dev/null
  at="$(steps "$P6" | awk '{ print $NF }')"
  # A kill counts only if it stopped a running ADD and left a record whose journal reached a PF setting or the
  # move into the pod (an ADD that had finished, or a kill before anything happened, proves nothing).
  [ $hit = 1 ] && case "$at" in admin-mac|vlan|spoofchk|trust|link-state|tx-rate|ib-guid|netdev-in) landed=$((landed + 1)) ;; esac
  n=0; until cni DEL ck$t /var/run/netns/pk net1 "$CK"; do n=$((n + 1)); [ $n -ge 3 ] && break; done
  [ $n -ge 3 ] && { okk=0; echo "VMLOG kill $t: DEL failed: $(cat /tmp/err | tr '\n' ' ')"; }
  ip netns del pk
  why=""
  [ "$ROW6" = "$(vfline 6)" ] || why="$why PF-row: $(vfline 6)"
  [ "$N6" = "$(ip -o link show "$V6" 2>&1 | cut -d' ' -f2-5; cat /sys/class/net/$V6/address 2>&1)" ] || why="$why netdev: $(ip -o link show "$V6" 2>&1 | cut -d' ' -f2-5)"
  [ -e /var/lib/cni/sriov-rdma/$P6.json ] && why="$why record-left"
  echo "VMLOG kill $t after ${d}s: $([ $hit = 1 ] && echo killed || echo "ADD had ended"), journal at ${at:-nothing}${why:+; FAILED:$why}"
  [ -z "$why" ] || okk=0
done
[ $okk = 1 ] && [ $landed -gt 0 ] && pass "sigkill-mid-add-then-del-restores-a-real-vf($landed of 8 killed at a PF setting or the move, $killed killed)" \
  || fail sigkill-mid-add-then-del-restores-a-real-vf "killed=$killed, at a PF setting or the move: $landed; see VMLOG"

# doctor's link and bandwidth questions (last: it cycles the PF's link).
include /lifecycle.sh
include /doctor.sh
# The same cases on sriov-cni v2.10.0, side by side with ours (anchors.sh; last: it resets the VFs it uses).
include /anchors.sh
echo SCENARIOSDONE
