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
ip netns add podA; ip netns add podB
okr=1
OA=$(cni ADD ra /var/run/netns/podA net1 "$CA") || { okr=0; echo "VMLOG rdma ADD A: $(cat /tmp/err)"; }
OB=$(cni ADD rb /var/run/netns/podB net1 "$CB") || { okr=0; echo "VMLOG rdma ADD B: $(cat /tmp/err)"; }
carrier podA net1 && carrier podB net1 || { okr=0; echo "VMLOG rdma pods without carrier"; }
ip netns exec podA rdma link add rxeA type rxe netdev net1 || okr=0
ip netns exec podB rdma link add rxeB type rxe netdev net1 || okr=0

# The GID index the plugin reports (CHECK finds the RoCE v2 GID of the pod address), and doctor's NCCL line.
gid_of() { # gid_of CONTAINERID NETNS CONF RESULT ADDR DEV
  P=$(echo "$3" | sed 's/}$//')',"prevResult":'"$4"'}'
  for i in $(seq 1 20); do
    cni CHECK "$1" /var/run/netns/$2 net1 "$P" && sed -n "s/.*CHECK: RoCE v2 GID index \([0-9]*\) for $5 on $6.*/\1/p" /tmp/err | grep . && return 0
    sleep 0.2
  done; echo "VMLOG CHECK $1: $(cat /tmp/err)" >&2; return 1; }
GA=$(gid_of ra podA "$CA" "$OA" $A rxeA); GB=$(gid_of rb podB "$CB" "$OB" $B rxeB)
DA=$($PLUGIN doctor --netns /var/run/netns/podA 2>&1)
echo "$DA" | grep NCCL_ | log "doctor --netns podA"
NCCL_A=$(echo "$DA" | sed -n 's/.*net1 (10.6.0.1): NCCL_IB_HCA=rxeA:1 NCCL_IB_GID_INDEX=\([0-9]*\) NCCL_SOCKET_IFNAME=net1.*/\1/p')
if [ $okr = 1 ] && [ -n "$GA" ] && [ -n "$GB" ] && [ "$NCCL_A" = "$GA" ]; then
  pass "rdma-gid-reported(podA $GA, podB $GB, doctor NCCL_IB_GID_INDEX=$NCCL_A)"
else fail rdma-gid-reported "ok=$okr GA=$GA GB=$GB doctor=$NCCL_A"; GA=${GA:-1}; GB=${GB:-1}; fi

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
pair_in podA podB ibv_rc_pingpong 60 "ibv_rc_pingpong -d rxeA -g $GA -n 500" 45 "ibv_rc_pingpong -d rxeB -g $GB -n 500 $A"
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
  # 6.12: the GID table is right but no RoCE packet leaves the pod.
  [ $R_TCP = 0 ] && [ $R_PP != 0 ] && pass "rdma-traffic-needs-netns-aware-rxe(6.12: TCP ${T_TCP}, verbs: $W_PP)" \
    || fail rdma-traffic-needs-netns-aware-rxe "tcp=$R_TCP pingpong=$R_PP $T_PP"
fi

# Isolation on the wire: a pod on VLAN 200 reaches neither pod on VLAN 100, by ping or RDMA; an untagged pod
# does not reach them either; the same VLAN does (above).
PC=$(VFP 6)
ip netns add podC
CC=$(rconf "$PC" 10.6.0.3 ',"vlan":200,"spoofchk":"on","trust":"on"')
if OC=$(cni ADD rc /var/run/netns/podC net1 "$CC") && carrier podC net1; then
  ip netns exec podC rdma link add rxeC type rxe netdev net1
  reach podC $A && v200=reached || v200=blocked
  GC_=$(gid_of rc podC "$CC" "$OC" 10.6.0.3 rxeC 2>/dev/null || echo 1)
  pair_in podA podC ibv_rc_pingpong_vlan 25 "ibv_rc_pingpong -d rxeA -g $GA -n 5" 15 "ibv_rc_pingpong -d rxeC -g ${GC_:-1} -n 5 $A"
  [ $RC != 0 ] && r200=blocked || r200=reached
  ip netns exec podC rdma link delete rxeC
  cni DEL rc /var/run/netns/podC net1 "$CC" || echo "VMLOG DEL C: $(cat /tmp/err)"
else v200="ADD failed: $(cat /tmp/err)"; r200=-; fi
CU=$(rconf "$PC" 10.6.0.3 "")
if cni ADD ru /var/run/netns/podC net1 "$CU" >/dev/null && carrier podC net1; then
  reach podC $A && vnone=reached || vnone=blocked
  cni DEL ru /var/run/netns/podC net1 "$CU" || echo "VMLOG DEL U: $(cat /tmp/err)"
else vnone="ADD failed: $(cat /tmp/err)"; fi
ip netns del podC
if [ "$KMAJ" -ge 7 ]; then
  [ "$v200" = blocked ] && [ "$r200" = blocked ] && [ "$vnone" = blocked ] && pass "vlan-isolation(200 vs 100: ping and RDMA blocked; untagged vs 100: blocked)" \
    || fail vlan-isolation "vlan 200 ping $v200, RDMA $r200; untagged $vnone"
else
  # No RoCE between pods on 6.12 at all, so only the ping is evidence here.
  [ "$v200" = blocked ] && [ "$vnone" = blocked ] && pass "vlan-isolation(200 vs 100 and untagged vs 100: ping blocked)" \
    || fail vlan-isolation "vlan 200 ping $v200; untagged $vnone"
fi

ip netns exec podA rdma link delete rxeA; ip netns exec podB rdma link delete rxeB
cni DEL ra /var/run/netns/podA net1 "$CA" || { okr=0; echo "VMLOG DEL A: $(cat /tmp/err)"; }
# After DEL, a new pod on the same VF (untagged now) does not get the old pod's peer's traffic.
CN=$(rconf "$PA" $A "")
if cni ADD rn /var/run/netns/podA net1 "$CN" >/dev/null && carrier podA net1; then
  reach podB $A && after=reached || after=blocked
  cni DEL rn /var/run/netns/podA net1 "$CN" || echo "VMLOG DEL N: $(cat /tmp/err)"
else after="ADD failed: $(cat /tmp/err)"; fi
[ "$after" = blocked ] && pass "vlan-gone-after-del(peer on VLAN 100 no longer reaches the VF's next pod)" || fail vlan-gone-after-del "$after"
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
