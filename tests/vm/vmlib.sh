#!/bin/sh
# Shared by the scenarios, the demo and the benchmark: finds the igb PFs, enables their VFs, helpers.
PLUGIN=/opt/cni/bin/sriov-rdma
# busybox sh prefers its own applets: iproute2 by full path.
ip() { /usr/sbin/ip "$@"; }
rdma() { /usr/sbin/rdma "$@"; }
export CNI_PATH=/opt/cni/bin
# A result starts a line of its own even after output without a trailing newline (a plugin's JSON on stdout), so
# run.sh, which counts lines that start with RESULT, never misses one.
fail() { printf '\nRESULT %s FAIL %s\n' "$1" "$2"; }
pass() { printf '\nRESULT %s PASS\n' "$1"; }

PF=""
for n in /sys/class/net/*; do
  d=$(basename "$(readlink "$n/device/driver" 2>/dev/null)")
  [ "$d" = igb ] && [ -z "$PF" ] && PF=$(basename "$n")
done
[ -n "$PF" ] || { echo "RESULT setup FAIL no igb PF"; exit 0; }
PF2=""
for n in /sys/class/net/*; do
  d=$(basename "$(readlink "$n/device/driver" 2>/dev/null)")
  [ "$d" = igb ] && [ "$(basename "$n")" != "$PF" ] && [ -z "$PF2" ] && PF2=$(basename "$n")
done
# PF MTUs first: changing a PF's MTU later resets it and its VFs lose carrier for seconds.
ip link set "$PF" mtu 9000; ip link set "$PF" up
echo 7 > /sys/class/net/$PF/device/sriov_numvfs
[ -n "$PF2" ] && { ip link set "$PF2" mtu 9000; ip link set "$PF2" up; echo 2 > /sys/class/net/$PF2/device/sriov_numvfs; }
for i in $(seq 1 100); do [ -d /sys/class/net/$PF/device/virtfn6/net ] && break; sleep 0.1; done
VF0=$(basename "$(readlink /sys/class/net/$PF/device/virtfn0)")
VF0NET=$(ls /sys/bus/pci/devices/$VF0/net 2>/dev/null | head -1)
echo "VMLOG PF=$PF VF0=$VF0 ($VF0NET) numvfs=$(cat /sys/class/net/$PF/device/sriov_numvfs)"
ip link show "$PF" | sed 's/^/VMLOG /' 
[ -n "$VF0NET" ] || { fail setup "VF0 has no netdev"; exit 0; }
# The VFs must have a datapath: a VF netdev brought up gets carrier once its mailbox with the PF works.
carrier() { # carrier NETNS|- IFNAME: waits up to 10 s for carrier
  for ci in $(seq 1 100); do
    if [ "$1" = - ]; then car=$(cat /sys/class/net/$2/carrier 2>/dev/null); else car=$(ip netns exec "$1" cat /sys/class/net/$2/carrier 2>/dev/null); fi
    [ "$car" = 1 ] && return 0; sleep 0.1
  done; return 1; }
ip link set "$VF0NET" up
if carrier - "$VF0NET"; then
  ip link set "$VF0NET" down; pass setup
else
  fail setup "VF $VF0 ($VF0NET) has no carrier 10 s after link up: $(ip -o link show "$VF0NET")"; exit 0
fi


cni() { # cni CMD CONTAINERID NETNS IFNAME CONF; stderr goes to $CNI_ERR (default /tmp/err)
  echo "$5" | CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=$3 CNI_IFNAME=$4 $PLUGIN 2>"${CNI_ERR:-/tmp/err}"; }
vfline() { ip link show "$PF" | grep "vf $1 " ; }

VFN() { ls /sys/bus/pci/devices/$(basename "$(readlink /sys/class/net/$PF/device/virtfn$1)")/net 2>/dev/null | head -1; }
VFP() { basename "$(readlink /sys/class/net/$PF/device/virtfn$1)"; }


# A peer pod: VF 1 of the second PF, attached by the plugin to netns "peer" as 10.5.0.1/24 (VLAN $1 if given).
peer_up() {
  PEERP=$(basename "$(readlink /sys/class/net/$PF2/device/virtfn1)")
  PV=${1:+,\"vlan\":$1}
  ip netns add peer
  PEERC="{\"cniVersion\":\"1.0.0\",\"name\":\"peernet\",\"type\":\"sriov-rdma\",\"deviceID\":\"$PEERP\"$PV,\"mtu\":9000,\"ipam\":{\"type\":\"static\",\"addresses\":[{\"address\":\"10.5.0.1/24\"}]}}"
  cni ADD cpeer /var/run/netns/peer net1 "$PEERC" >/dev/null || { echo "VMLOG peer ADD: $(cat /tmp/err)"; return 1; }
  carrier peer net1 || { echo "VMLOG peer has no carrier"; return 1; }
}
peer_down() { cni DEL cpeer /var/run/netns/peer net1 "$PEERC" || echo "VMLOG peer DEL: $(cat /tmp/err)"; ip netns del peer; }
# reach NETNS ADDR: one ping (3 tries) from a pod
reach() { ip netns exec "$1" /bin/busybox ping -c 1 -w 3 "$2" >/dev/null 2>&1; }
