#!/bin/sh
# RDMA traffic and tenant isolation through VFs the plugin attached (sourced by scenarios.sh, after vmlib.sh).
# Real: the VFs, the wire between the two PFs, VLAN and admin-MAC enforcement by the emulated igb PF, RDMA verbs
# and rdma_cm over soft-RoCE on the VF netdevs. Stand-in: rxe for the VF's own RDMA function (a ConnectX VF
# brings one; none can be emulated). Debian 6.12's rdma_rxe is not netns-aware (its UDP socket lives in the
# initial netns), so RoCE traffic between pods needs a 7.x kernel; on 6.12 the limitation itself is asserted.
. /rdmalib.sh
KMAJ=$(uname -r | cut -d. -f1)
A=10.6.0.1; B=10.6.0.2
PA=$(VFP 4); VA=$(VFN 4)
PB=$(basename "$(readlink /sys/class/net/$PF2/device/virtfn1)"); VB=$(ls /sys/bus/pci/devices/$PB/net 2>/dev/null | head -1)
rconf() { # rconf PCI ADDR [extra keys]
  echo '{"cniVersion":"1.0.0","name":"rdmanet","type":"sriov-rdma","deviceID":"'$1'","logLevel":"info","mtu":9000'$3',"ipam":{"type":"static","addresses":[{"address":"'$2'/24"}]}}'; }
CA=$(rconf "$PA" $A ',"vlan":100,"spoofchk":"on","trust":"on"'); CB=$(rconf "$PB" $B ',"vlan":100,"spoofchk":"on","trust":"on"')
ROWA=$(vfline 4); ROWB=$(ip link show "$PF2" | grep "vf 1 ")
NA=$(ip -o link show "$VA" | cut -d' ' -f2-5; cat /sys/class/net/$VA/address)
NB=$(ip -o link show "$VB" | cut -d' ' -f2-5; cat /sys/class/net/$VB/address)
# The GID index the plugin reports (CHECK finds the RoCE v2 GID of the pod address), found again by CHECK until
# rxe has it; a failed lookup gives nothing (never a guessed index).
gid_of() { # gid_of CONTAINERID NETNS CONF RESULT ADDR DEV
  P=$(echo "$3" | sed 's/}$//')',"prevResult":'"$4"'}'
  for i in $(seq 1 20); do
    cni CHECK "$1" /var/run/netns/$2 net1 "$P" && sed -n "s/.*CHECK: RoCE v2 GID index \([0-9]*\) for $5 on $6.*/\1/p" /tmp/err | grep . && return 0
    sleep 0.2
  done; echo "VMLOG CHECK $1: $(cat /tmp/err)" >&2; return 1; }
# rc_oob SNS SDEV SGID SADDR CNS CDEV CGID CADDR NAME: ibv_rc_pingpong between two pods' rxe devices with the
# connection data exchanged out of band (a veth pair between the two namespaces, 192.168.77.0/30) and each side's
# neighbour entry for the other's net1 address pinned, so that the RoCE packets on net1 are the only thing the
# wire (and its VLANs) decides. Sets RC, OUT (rdmalib's pair_in) and RDMA: reached (5 iterations done), blocked
# (the exchange completed, then no RoCE traffic), or "no-exchange ..." (no evidence either way).
rc_oob() {
  ip link add oob1 netns "$1" type veth peer name oob2 netns "$5"
  ip -n "$1" addr add 192.168.77.1/30 dev oob1; ip -n "$1" link set oob1 up
  ip -n "$5" addr add 192.168.77.2/30 dev oob2; ip -n "$5" link set oob2 up
  ip -n "$1" neigh replace "$8" lladdr "$(ip netns exec "$5" cat /sys/class/net/net1/address)" dev net1 nud permanent
  ip -n "$5" neigh replace "$4" lladdr "$(ip netns exec "$1" cat /sys/class/net/net1/address)" dev net1 nud permanent
  pair_in "$1" "$5" "$9" 25 "stdbuf -oL ibv_rc_pingpong -d $2 -g $3 -n 5" 15 "stdbuf -oL ibv_rc_pingpong -d $6 -g $7 -n 5 192.168.77.1"
  if [ $RC = 0 ] && echo "$OUT" | grep -q 'iters in'; then RDMA=reached
  elif echo "$OUT" | grep -q 'remote address:' && echo "$SOUT" | grep -q 'remote address:'; then RDMA=blocked
  else RDMA="no-exchange($WHY)"; fi
  ip -n "$1" neigh del "$8" dev net1 2>/dev/null; ip -n "$5" neigh del "$4" dev net1 2>/dev/null
  ip -n "$1" link del oob1 2>/dev/null
}
ip netns add podA; ip netns add podB; ip netns add podC
okr=1

# VLAN isolation, first the positive half: pod C on VLAN 200 (VF 6 of PF 0) reaches a pod on VLAN 200 (pod B's VF,
# VF 1 of PF 1, across the wire), by ping and (7.x) by RDMA. Pod C stays on VLAN 200 for the negative half below.
PC=$(VFP 6); C=10.6.0.3
CC=$(rconf "$PC" $C ',"vlan":200,"spoofchk":"on","trust":"on"'); CB2=$(rconf "$PB" $B ',"vlan":200,"spoofchk":"on","trust":"on"')
p200="ADD failed"; rp200=-
if OC=$(cni ADD rc /var/run/netns/podC net1 "$CC") && carrier podC net1; then
  ip netns exec podC rdma link add rxeC type rxe netdev net1 || echo "VMLOG rdma link add rxeC failed"
  GC_=$(gid_of rc podC "$CC" "$OC" $C rxeC)
  if OB2=$(cni ADD rb2 /var/run/netns/podB net1 "$CB2") && carrier podB net1; then
    reach podC $B && p200=reached || p200=blocked
    if [ "$KMAJ" -ge 7 ]; then
      ip netns exec podB rdma link add rxeB type rxe netdev net1
      GB2=$(gid_of rb2 podB "$CB2" "$OB2" $B rxeB)
      if [ -n "$GC_" ] && [ -n "$GB2" ]; then rc_oob podB rxeB "$GB2" $B podC rxeC "$GC_" $C rc_vlan200; rp200=$RDMA
      else rp200="no GID index (podC '$GC_', podB '$GB2')"; fi
      ip netns exec podB rdma link delete rxeB
    fi
    cni DEL rb2 /var/run/netns/podB net1 "$CB2" || { okr=0; echo "VMLOG DEL B2: $(cat /tmp/err)"; }
  else p200="pod B on VLAN 200: ADD failed: $(cat /tmp/err)"; fi
else p200="pod C: ADD failed: $(cat /tmp/err)"; fi
echo "VMLOG vlan-isolation, same VLAN 200 (pod C -> pod B): ping $p200, RDMA $rp200"
OA=$(cni ADD ra /var/run/netns/podA net1 "$CA") || { okr=0; echo "VMLOG rdma ADD A: $(cat /tmp/err)"; }
OB=$(cni ADD rb /var/run/netns/podB net1 "$CB") || { okr=0; echo "VMLOG rdma ADD B: $(cat /tmp/err)"; }
carrier podA net1 && carrier podB net1 || { okr=0; echo "VMLOG rdma pods without carrier"; }
ip netns exec podA rdma link add rxeA type rxe netdev net1 || okr=0
ip netns exec podB rdma link add rxeB type rxe netdev net1 || okr=0

# The GID index the plugin reports for each pod, and doctor's NCCL line.
GA=$(gid_of ra podA "$CA" "$OA" $A rxeA); GB=$(gid_of rb podB "$CB" "$OB" $B rxeB)
DA=$($PLUGIN doctor --netns /var/run/netns/podA 2>&1)
echo "$DA" | grep NCCL_ | log "doctor --netns podA"
NCCL_A=$(echo "$DA" | sed -n 's/.*net1 (10.6.0.1): NCCL_IB_HCA=rxeA:1 NCCL_IB_GID_INDEX=\([0-9]*\) NCCL_SOCKET_IFNAME=net1.*/\1/p')
if [ $okr = 1 ] && [ -n "$GA" ] && [ -n "$GB" ] && [ "$NCCL_A" = "$GA" ]; then
  pass "rdma-gid-reported(podA $GA, podB $GB, doctor NCCL_IB_GID_INDEX=$NCCL_A)"
else fail rdma-gid-reported "ok=$okr GA=$GA GB=$GB doctor=$NCCL_A"; fi

# Shared mode: every pod sees every RDMA device, and doctor says so.
DEVS=$(ip netns exec podA timeout 10 ibv_devices 2>&1)
echo "$DEVS" | log "ibv_devices in podA"
case "$DEVS" in *rxeA*rxeB*|*rxeB*rxeA*) echo "$DA" | grep -q "netns mode is shared" && pass rdma-shared-mode-every-pod-sees-every-device \
  || fail rdma-shared-mode-every-pod-sees-every-device "no doctor warning" ;;
  *) fail rdma-shared-mode-every-pod-sees-every-device "$DEVS" ;; esac

# Traffic between the pods with the GID index the plugin reported: RDMA verbs, rdma_cm, and a TCP baseline.
OUT=$(ip netns exec podB timeout 20 /bin/busybox ping -c 5 $A 2>&1); RC=$?; T_PING=$(ping_rtt_ms)
[ $RC = 0 ] || okr=0
pair_in podA podB iperf3 30 "iperf3 -s -1 -B $A" 20 "iperf3 -c $A -t 3 -f m"; T_TCP=$(iperf3_rate); R_TCP=$RC
# (stdbuf: the lines of a run that the timeout stops, its connection exchange among them, are kept)
pair_in podA podB ibv_rc_pingpong 60 "stdbuf -oL ibv_rc_pingpong -d rxeA -g $GA -n 500" 45 "stdbuf -oL ibv_rc_pingpong -d rxeB -g $GB -n 500 $A"
R_PP=$RC; T_PP=$(pingpong_figures); W_PP=$WHY
if [ "$KMAJ" -ge 7 ]; then
  pair_in podA podB ib_write_bw 60 "ib_write_bw -d rxeA -x $GA -n 1000 -F --report_gbits" 45 "ib_write_bw -d rxeB -x $GB -n 1000 -F --report_gbits $A"
  R_BW=$RC; T_BW=$(write_bw_gbits)
  pair_in podA podB ib_send_lat 60 "ib_send_lat -d rxeA -x $GA -n 200 -F" 45 "ib_send_lat -d rxeB -x $GB -n 200 -F $A"
  R_LAT=$RC; T_LAT=$(send_lat_us)
  pair_in podA podB rping 60 "rping -s -a $A -C 10 -v" 45 "rping -c -a $A -C 10 -v"
  R_RP=$RC; N_RP=$(echo "$OUT" | grep -c 'ping data')
  echo "VMLOG traffic podB -> podA through plugin-attached VFs (VLAN 100, MTU 9000), kernel $(uname -r), under emulation:"
  echo "VMLOG traffic   TCP throughput (iperf3)           ${T_TCP:-failed}"
  echo "VMLOG traffic   RDMA write bandwidth (ib_write_bw) ${T_BW:-failed} Gbit/s"
  echo "VMLOG traffic   RDMA send latency (ib_send_lat)    ${T_LAT:-failed} us (t_avg)"
  echo "VMLOG traffic   ICMP round trip (ping)             ${T_PING:-failed} ms (avg)"
  echo "VMLOG traffic   RC ping-pong (ibv_rc_pingpong)     ${T_PP:-failed}"
  echo "VMLOG traffic   rdma_cm (rping)                    ${N_RP}/10 round trips"
  if [ $okr = 1 ] && [ $R_TCP = 0 ] && [ $R_PP = 0 ] && [ $R_BW = 0 ] && [ -n "$T_BW" ] && [ $R_LAT = 0 ] && [ -n "$T_LAT" ] \
     && [ $R_RP = 0 ] && [ "$N_RP" = 10 ]; then
    pass "rdma-traffic(ibv_rc_pingpong,ib_write_bw,ib_send_lat,rping,iperf3,ping)"
  else fail rdma-traffic "tcp=$R_TCP pp=$R_PP bw=$R_BW lat=$R_LAT rping=$R_RP/$N_RP: $W_PP"; fi
else
  # 6.12: the GID table is right but no RoCE packet leaves the pod. Evidence only if the attach and rxe worked
  # (okr), both GID indexes were found, and ibv_rc_pingpong's connection exchange completed on both sides before
  # the RDMA part failed.
  XCH=no; echo "$OUT" | grep -q 'remote address:' && echo "$SOUT" | grep -q 'remote address:' && XCH=yes
  [ $okr = 1 ] && [ -n "$GA" ] && [ -n "$GB" ] && [ $R_TCP = 0 ] && [ $XCH = yes ] && [ $R_PP != 0 ] \
    && pass "rdma-traffic-needs-netns-aware-rxe(6.12: TCP ${T_TCP}, exchange done, then verbs: $W_PP)" \
    || fail rdma-traffic-needs-netns-aware-rxe "ok=$okr GA=$GA GB=$GB tcp=$R_TCP exchange=$XCH pingpong=$R_PP $T_PP"
fi

# Isolation on the wire, the negative half: pod C, still on VLAN 200, reaches neither pod on VLAN 100 (A on its own
# PF, B across the wire), by ping or (7.x) by RDMA with the connection data exchanged out of band; then pod C's VF
# untagged reaches an untagged peer (PF 1's own address, 10.6.0.9) but neither pod on VLAN 100.
ip addr add 10.6.0.9/24 dev "$PF2"
neg=""; pos=""
if [ -n "$OC" ] && ip -n podC link show net1 >/dev/null 2>&1; then
  for t in A:podA:$A:rxeA:$GA B:podB:$B:rxeB:$GB; do
    IFS=: read n ns addr dev gid <<EOT
$t
EOT
    reach podC $addr && neg="$neg 200->$n:ping-reached"
    if [ "$KMAJ" -ge 7 ]; then
      if [ -n "$gid" ] && [ -n "$GC_" ]; then
        rc_oob $ns $dev "$gid" $addr podC rxeC "$GC_" $C rc_vlan_$n
        [ "$RDMA" = blocked ] || neg="$neg 200->$n:RDMA-$RDMA"
      else neg="$neg 200->$n:no-GID-index('$gid','$GC_')"; fi
    fi
  done
  ip netns exec podC rdma link delete rxeC
  cni DEL rc /var/run/netns/podC net1 "$CC" || echo "VMLOG DEL C: $(cat /tmp/err)"
else neg="$neg pod-C-not-attached"; fi
CU=$(rconf "$PC" $C "")
if cni ADD ru /var/run/netns/podC net1 "$CU" >/dev/null && carrier podC net1; then
  reach podC 10.6.0.9 || pos="$pos untagged->PF1:blocked"
  reach podC $A && neg="$neg untagged->A:reached"
  reach podC $B && neg="$neg untagged->B:reached"
  cni DEL ru /var/run/netns/podC net1 "$CU" || echo "VMLOG DEL U: $(cat /tmp/err)"
else pos="$pos untagged-ADD-failed:$(cat /tmp/err)"; fi
ip netns del podC
[ "$p200" = reached ] || pos="$pos 200->200:ping-$p200"
[ "$KMAJ" -lt 7 ] || [ "$rp200" = reached ] || pos="$pos 200->200:RDMA-$rp200"
R7=""; [ "$KMAJ" -ge 7 ] && R7=" and RDMA"
[ -z "$pos$neg" ] && pass "vlan-isolation(200->200 ping$R7 reached; 200->A, 200->B ping$R7 blocked; untagged->untagged reached, untagged->A/B blocked)" \
  || fail vlan-isolation "same VLAN:${pos:- ok}; other VLAN:${neg:- ok}"

ip netns exec podA rdma link delete rxeA; ip netns exec podB rdma link delete rxeB
cni DEL ra /var/run/netns/podA net1 "$CA" || { okr=0; echo "VMLOG DEL A: $(cat /tmp/err)"; }
# After DEL, a new pod on the same VF (untagged now) reaches an untagged peer (PF 1's address) and does not get
# the old pod's peer's traffic (pod B, VLAN 100), either way.
CN=$(rconf "$PA" $A "")
if cni ADD rn /var/run/netns/podA net1 "$CN" >/dev/null && carrier podA net1; then
  after=""
  reach podA 10.6.0.9 || after="$after untagged-peer-unreachable"
  reach podB $A && after="$after B->A:reached"
  reach podA $B && after="$after A->B:reached"
  cni DEL rn /var/run/netns/podA net1 "$CN" || echo "VMLOG DEL N: $(cat /tmp/err)"
else after="ADD failed: $(cat /tmp/err)"; fi
ip addr del 10.6.0.9/24 dev "$PF2"
[ -z "$after" ] && pass "vlan-gone-after-del(the VF's next pod, untagged, reaches an untagged peer; the old pod's peer on VLAN 100 and it do not reach each other)" || fail vlan-gone-after-del "$after"
cni DEL rb /var/run/netns/podB net1 "$CB" || { okr=0; echo "VMLOG DEL B: $(cat /tmp/err)"; }
ip netns del podA; ip netns del podB
[ "$ROWA" = "$(vfline 4)" ] && [ "$ROWB" = "$(ip link show "$PF2" | grep "vf 1 ")" ] \
  && [ "$NA" = "$(ip -o link show "$VA" | cut -d' ' -f2-5; cat /sys/class/net/$VA/address)" ] \
  && [ "$NB" = "$(ip -o link show "$VB" | cut -d' ' -f2-5; cat /sys/class/net/$VB/address)" ] && [ $okr = 1 ] \
  && pass rdma-pods-del-restores || fail rdma-pods-del-restores "A: $(vfline 4) B: $(ip link show "$PF2" | grep "vf 1 ")"

# Admin MAC enforced by the PF: with trust off the pod cannot change its MAC, with trust on it can.
ip netns add podM
for t in off on; do
  CM=$(rconf "$PA" $A ',"mac":"02:00:00:00:dd:01","trust":"'$t'"')
  if cni ADD rm$t /var/run/netns/podM net1 "$CM" >/dev/null; then
    ip -n podM link set net1 address 02:00:00:00:dd:02 2>/tmp/macerr && eval m_$t=changed || eval m_$t=refused
    echo "VMLOG trust $t: $(cat /tmp/macerr)"
    cni DEL rm$t /var/run/netns/podM net1 "$CM" || echo "VMLOG DEL M$t: $(cat /tmp/err)"
  else eval m_$t=\"ADD failed\"; echo "VMLOG ADD M$t: $(cat /tmp/err)"; fi
done
ip netns del podM
[ "$m_off" = refused ] && [ "$m_on" = changed ] && [ "$ROWA" = "$(vfline 4)" ] && pass "admin-mac-enforced(trust off: refused; trust on: allowed)" \
  || fail admin-mac-enforced "trust off: $m_off, trust on: $m_on, row: $(vfline 4)"
