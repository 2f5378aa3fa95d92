#!/bin/sh
# Shared by the scenarios, the demo and the benchmark: finds the igb PFs, enables their VFs, helpers.
PLUGIN=/opt/cni/bin/sriov-rdma
# busybox sh prefers its own applets: iproute2 by full path.
ip() { /usr/sbin/ip "$@"; }
rdma() { /usr/sbin/rdma "$@"; }
export CNI_PATH=/opt/cni/bin
fail() { echo "RESULT $1 FAIL $2"; }
pass() { echo "RESULT $1 PASS"; }

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
ip link set "$PF" up
echo 7 > /sys/class/net/$PF/device/sriov_numvfs
[ -n "$PF2" ] && { ip link set "$PF2" up; echo 2 > /sys/class/net/$PF2/device/sriov_numvfs; }
for i in $(seq 1 100); do [ -d /sys/class/net/$PF/device/virtfn6/net ] && break; sleep 0.1; done
VF0=$(basename "$(readlink /sys/class/net/$PF/device/virtfn0)")
VF0NET=$(ls /sys/bus/pci/devices/$VF0/net 2>/dev/null | head -1)
echo "VMLOG PF=$PF VF0=$VF0 ($VF0NET) numvfs=$(cat /sys/class/net/$PF/device/sriov_numvfs)"
ip link show "$PF" | sed 's/^/VMLOG /' 
[ -n "$VF0NET" ] && pass setup || { fail setup "VF0 has no netdev"; exit 0; }


cni() { # cni CMD CONTAINERID NETNS IFNAME CONF
  echo "$5" | CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=$3 CNI_IFNAME=$4 $PLUGIN 2>/tmp/err; }
vfline() { ip link show "$PF" | grep "vf $1 " ; }

VFN() { ls /sys/bus/pci/devices/$(basename "$(readlink /sys/class/net/$PF/device/virtfn$1)")/net 2>/dev/null | head -1; }
VFP() { basename "$(readlink /sys/class/net/$PF/device/virtfn$1)"; }

