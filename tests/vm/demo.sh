#!/bin/sh
# make demo: one VF (and an RDMA device on it) given to a pod with cnitool, then given back.
. /vmlib.sh >/dev/null
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
