#!/bin/sh
# make demo: one VF (and an RDMA device on it) given to a pod with cnitool, then given back.
. /vmlib.sh >/dev/null
. /rdmalib.sh
say() { echo "DEMO"; echo "DEMO == $*"; }
show() { sed 's/^/DEMO    /'; }
V=$(VFN 1); P=$(VFP 1)
mkdir -p /etc/cni/net.d
cat > /etc/cni/net.d/10-rdma-demo.conf <<CONF
{"cniVersion":"1.0.0","name":"rdma-demo","type":"sriov-rdma","deviceID":"$P",
 "vlan":100,"vlanQoS":3,"spoofchk":"on","trust":"on","max_tx_rate":500,"mtu":9000,
 "ipam":{"type":"static","addresses":[{"address":"10.56.217.10/24"}]}}
CONF
Q=$(basename "$(readlink /sys/class/net/$PF2/device/virtfn1)")
mkdir -p /etc/cni/peer.d
cat > /etc/cni/peer.d/10-rdma-peer.conf <<CONF
{"cniVersion":"1.0.0","name":"rdma-peer","type":"sriov-rdma","deviceID":"$Q","vlan":100,"spoofchk":"on","trust":"on","mtu":9000,
 "ipam":{"type":"static","addresses":[{"address":"10.56.217.11/24"}]}}
CONF
export NETCONFPATH=/etc/cni/net.d CNI_PATH=/opt/cni/bin CNI_IFNAME=net1

say "The host: PF $PF (emulated Intel 82576, igb) with $(cat /sys/class/net/$PF/device/sriov_numvfs) real VFs; VF 1 is $V at $P"
ip link show "$PF" | grep -E "^[0-9]|vf 1 " | show
ip -o link show "$V" | cut -d' ' -f2-5 | show
say "The network configuration ($NETCONFPATH/10-rdma-demo.conf)"
cat /etc/cni/net.d/10-rdma-demo.conf | show
ip netns add pod
say "cnitool add rdma-demo /var/run/netns/pod   (the CNI result)"
{ /usr/sbin/cnitool add rdma-demo /var/run/netns/pod 2>/tmp/err; echo; } | show
say "The pod's view: ip addr (VF renamed net1, MTU 9000, its address; LOWER_UP: the VF has carrier)"
for i in $(seq 1 100); do [ "$(ip netns exec pod cat /sys/class/net/net1/carrier 2>/dev/null)" = 1 ] && break; sleep 0.1; done
ip -n pod addr show net1 | show
say "A peer pod on the other PF (VF $Q of $PF2, same VLAN 100), attached the same way; ping across the wire"
ip netns add peer
NETCONFPATH=/etc/cni/peer.d /usr/sbin/cnitool add rdma-peer /var/run/netns/peer >/dev/null 2>/tmp/err || cat /tmp/err | show
for i in $(seq 1 100); do [ "$(ip netns exec peer cat /sys/class/net/net1/carrier 2>/dev/null)" = 1 ] && break; sleep 0.1; done
ip netns exec pod /bin/busybox ping -c 3 -w 5 10.56.217.11 2>&1 | show
say "The PF's view of VF 1: VLAN 100 QoS 3, rate 500, spoofchk on, trust on"
ip link show "$PF" | grep "vf 1 " | show
say "The host no longer has $V"
ip -o link show "$V" 2>&1 | show
say "Soft-RoCE on the pod's net1 stands in for the VF's RDMA function (a ConnectX VF brings its own): rdma dev in the pod"
ip netns exec pod /usr/sbin/rdma link add rxe0 type rxe netdev net1
ip netns exec pod /usr/sbin/rdma dev | show
say "sriov-rdma doctor --netns /var/run/netns/pod: the RoCE v2 GID of the pod address is NCCL_IB_GID_INDEX"
sleep 0.3
$PLUGIN doctor --netns /var/run/netns/pod 2>&1 | sed -n '/^RDMA/,/^Warnings/p' | grep -v '^Warnings' | show
say "cnitool check rdma-demo /var/run/netns/pod"
/usr/sbin/cnitool check rdma-demo /var/run/netns/pod 2>/tmp/err && echo "DEMO    CHECK passed: interface, MTU, MAC, addresses, PF settings, RoCE GID"
if [ "$(uname -r | cut -d. -f1)" -ge 7 ]; then
  say "RDMA between the two pods (kernel $(uname -r): per-netns soft-RoCE), with the GID indexes doctor reported"
  ip netns exec peer /usr/sbin/rdma link add rxe1 type rxe netdev net1
  sleep 0.5
  gidx() { $PLUGIN doctor --netns /var/run/netns/$1 2>/dev/null | sed -n "s/.*NCCL_IB_HCA=$2:1 NCCL_IB_GID_INDEX=\([0-9]*\).*/\1/p" | head -1; }
  GP=$(gidx pod rxe0); GQ=$(gidx peer rxe1)
  echo "DEMO    pod: NCCL_IB_HCA=rxe0:1 NCCL_IB_GID_INDEX=$GP   peer: NCCL_IB_HCA=rxe1:1 NCCL_IB_GID_INDEX=$GQ"
  S=10.56.217.10
  pair_in pod peer ibv_rc_pingpong 60 "ibv_rc_pingpong -d rxe0 -g $GP -n 200" 45 "ibv_rc_pingpong -d rxe1 -g $GQ -n 200 $S" >/dev/null
  PP=$( [ $RC = 0 ] && pingpong_figures || echo "failed: $WHY")
  pair_in pod peer ib_write_bw 60 "ib_write_bw -d rxe0 -x $GP -n 500 -F --report_gbits" 45 "ib_write_bw -d rxe1 -x $GQ -n 500 -F --report_gbits $S" >/dev/null
  BW=$( [ $RC = 0 ] && echo "$(write_bw_gbits) Gbit/s" || echo "failed: $WHY")
  pair_in pod peer ib_send_lat 60 "ib_send_lat -d rxe0 -x $GP -n 200 -F" 45 "ib_send_lat -d rxe1 -x $GQ -n 200 -F $S" >/dev/null
  LAT=$( [ $RC = 0 ] && echo "$(send_lat_us) us" || echo "failed: $WHY")
  pair_in pod peer rping 60 "rping -s -a $S -C 10 -v" 45 "rping -c -a $S -C 10 -v" >/dev/null
  RP="$(echo "$OUT" | grep -c 'ping data')/10 round trips"
  pair_in pod peer iperf3 30 "iperf3 -s -1 -B $S" 20 "iperf3 -c $S -t 3 -f m" >/dev/null
  TCP=$( [ $RC = 0 ] && iperf3_rate || echo "failed: $WHY")
  OUT=$(ip netns exec peer /bin/busybox ping -c 5 $S 2>&1); RTT="$(ping_rtt_ms) ms"
  echo "DEMO    peer -> pod, through the two plugin-attached VFs (VLAN 100, MTU 9000), under emulation (figures say"
  echo "DEMO    nothing about hardware; the point is that RDMA works through the configured VFs):"
  echo "DEMO      TCP throughput (iperf3)             $TCP"
  echo "DEMO      RDMA write bandwidth (ib_write_bw)  $BW"
  echo "DEMO      RDMA send latency (ib_send_lat)     $LAT"
  echo "DEMO      ICMP round trip (ping)              $RTT"
  echo "DEMO      RC ping-pong (ibv_rc_pingpong)      $PP"
  echo "DEMO      rdma_cm (rping)                     $RP"
  ip netns exec peer /usr/sbin/rdma link delete rxe1
fi
ip netns exec pod /usr/sbin/rdma link delete rxe0
say "cnitool del rdma-demo /var/run/netns/pod"
/usr/sbin/cnitool del rdma-demo /var/run/netns/pod 2>/tmp/err && echo "DEMO    DEL done" || cat /tmp/err | show
ip netns del pod
NETCONFPATH=/etc/cni/peer.d /usr/sbin/cnitool del rdma-peer /var/run/netns/peer 2>/tmp/err || cat /tmp/err | show
ip netns del peer
say "The host restored: VF 1's PF-side settings and $V as before"
ip link show "$PF" | grep "vf 1 " | show
ip -o link show "$V" | cut -d' ' -f2-5 | show
ls /var/lib/cni/sriov-rdma/*.json >/dev/null 2>&1 && echo "DEMO    (an attachment record is left!)" || echo "DEMO    no attachment record left"

say "Troubleshooting: VF 1 made unhealthy (its PF $PF loses link), and sriov-rdma doctor saying why"
ip link set "$V" up; for i in $(seq 1 100); do [ "$(cat /sys/class/net/$V/carrier 2>/dev/null)" = 1 ] && break; sleep 0.1; done
/usr/sbin/rdma link add rxe9 type rxe netdev "$V"
ip link set "$PF" down
for i in $(seq 1 50); do grep -q DOWN /sys/class/infiniband/rxe9/ports/1/state 2>/dev/null && break; sleep 0.1; done
echo "DEMO    ip link set $PF down; cat /sys/class/net/$V/carrier -> $(cat /sys/class/net/$V/carrier 2>&1)"
echo "DEMO    \$ sriov-rdma doctor --interval 2   (its warnings, each with the command that fixes it)"
$PLUGIN doctor --interval 2 2>&1 | sed -n '/^Warnings/,$p' | grep -E "$PF|$V|rxe9" | show
ip link set "$PF" up
for i in $(seq 1 100); do [ "$(cat /sys/class/net/$V/carrier 2>/dev/null)" = 1 ] && break; sleep 0.1; done
echo "DEMO    ip link set $PF up: $V carrier $(cat /sys/class/net/$V/carrier 2>&1); doctor now: $($PLUGIN doctor --interval 0 2>&1 | grep -cE "$V \\(VF 1|$PF is down|rxe9 port 1 is") warnings about them"
/usr/sbin/rdma link delete rxe9; ip link set "$V" down
