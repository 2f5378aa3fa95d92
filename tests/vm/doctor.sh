#!/bin/sh
# doctor's link and bandwidth questions on real VFs (sourced by scenarios.sh, last: it takes the PF's link down).
# Each scenario compares what doctor says with what the kernel shows (sysfs of the PF, the VF's carrier,
# ibv_devinfo's active MTU, the rxe port's counters), not with doctor's own exit code alone.
V=$(VFN 5); P=$(VFP 5)
PFPCI=$(basename "$(readlink /sys/class/net/$PF/device)")
ip link set "$V" mtu 9000 up
carrier - "$V" || echo "VMLOG doctor: $V has no carrier"
rdma link add rxe5 type rxe netdev "$V" || echo "VMLOG doctor: rdma link add rxe5 failed"
sleep 0.5

# The PF's PCIe link as the kernel reports it for the emulated 82576: doctor's figures are sysfs's. QEMU puts the
# igb PFs on the root complex as integrated endpoints, whose link the kernel reports as "Unknown" (width 0 of 255):
# doctor must then show no PCIe figures and no "degraded" warning (a naive width comparison would give one).
D=$($PLUGIN doctor --interval 0 2>&1)
echo "$D" | sed -n '/^Bandwidth/,/^$/p' | sed 's/^/VMLOG doctor-bandwidth: /'
S=/sys/bus/pci/devices/$PFPCI
if [ -r $S/current_link_speed ]; then
  SP=$(cat $S/current_link_speed); MS=$(cat $S/max_link_speed)
  echo "VMLOG doctor: sysfs $PFPCI: $SP x$(cat $S/current_link_width) / $MS x$(cat $S/max_link_width)"
  case "$SP$MS" in
    *Unknown*)
      if echo "$D" | grep -qE "^  $PF $PFPCI  speed [0-9-]+ of max [0-9-]+ Mb/s  -  NUMA" && ! echo "$D" | grep -q "PCIe link runs at"; then
        pass "doctor-pcie-link-of-the-emulated-igb(kernel: $SP x$(cat $S/current_link_width) of $MS x$(cat $S/max_link_width); doctor: no figures, no warning)"
      else fail doctor-pcie-link-of-the-emulated-igb "kernel reports Unknown; doctor: $(echo "$D" | grep -E "^  $PF |PCIe")"; fi ;;
    *)
      W="PCIe $(awk '{printf "%g", $1}' $S/current_link_speed) GT/s x$(cat $S/current_link_width) of $(awk '{printf "%g", $1}' $S/max_link_speed) GT/s x$(cat $S/max_link_width)"
      case "$D" in *"$PF $PFPCI"*"$W"*) pass "doctor-pcie-link-of-the-emulated-igb($W)" ;; *) fail doctor-pcie-link-of-the-emulated-igb "wanted '$W'" ;; esac ;;
  esac
else
  fail doctor-pcie-link-of-the-emulated-igb "$S has no current_link_speed"
fi

# MTU: the netdev at 4096 leaves the rxe port at RoCE MTU 2048 (ibv_devinfo, the kernel's answer through verbs);
# doctor flags it with the fix; at 9000 the port runs 4096 and the warning is gone.
ip link set "$V" mtu 4096; sleep 0.3
A=$(ibv_devinfo -d rxe5 | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
D=$($PLUGIN doctor --interval 0 2>&1)
echo "$D" | grep -E "rxe5 port 1 (runs|netdev)" | sed 's/^/VMLOG doctor-mtu: /'
ip link set "$V" mtu 9000; sleep 0.3
A2=$(ibv_devinfo -d rxe5 | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
D2=$($PLUGIN doctor --interval 0 2>&1)
case "$D" in
  *"rxe5 port 1 runs RoCE MTU 2048 (it supports 4096) because its netdev $V has MTU 4096"*"ip link set dev $V mtu 4200"*)
    if [ "$A" = 2048 ] && [ "$A2" = 4096 ] && echo "$D2" | grep -q "rxe5 port 1  netdev $V MTU 9000  RoCE MTU 4096 of 4096 (ibv_devinfo)" \
       && ! echo "$D2" | grep -q "rxe5 port 1 runs RoCE MTU"; then pass "doctor-roce-mtu-mismatch(ibv_devinfo: $A at 4096, $A2 at 9000)"
    else fail doctor-roce-mtu-mismatch "ibv_devinfo $A/$A2; after: $(echo "$D2" | grep rxe5)"; fi ;;
  *) fail doctor-roce-mtu-mismatch "ibv_devinfo active_mtu $A; $(echo "$D" | grep -i mtu | tr '\n' ' ')" ;;
esac

# Link: the PF's link cycled while doctor reads twice 6 s apart: the carrier changes of the PF and of the VF, and
# rxe's link_downed, are named, and they match the kernel's counters.
C0=$(cat /sys/class/net/$V/carrier_changes); L0=$(cat /sys/class/infiniband/rxe5/ports/1/hw_counters/link_downed 2>/dev/null)
$PLUGIN doctor --interval 6 >/tmp/doctor-link.txt 2>&1 &
dpid=$!
sleep 1.5
ip link set "$PF" down; sleep 1.5; ip link set "$PF" up
wait $dpid
C1=$(cat /sys/class/net/$V/carrier_changes); L1=$(cat /sys/class/infiniband/rxe5/ports/1/hw_counters/link_downed 2>/dev/null)
D=$(cat /tmp/doctor-link.txt)
echo "$D" | sed -n '/^Link/,/^$/p' | grep -E "^  ($PF|$V|rxe5) " | sed 's/^/VMLOG doctor-link: /'
echo "$D" | grep -E "changed carrier|counters moved" | sed 's/^/VMLOG doctor-link: /'
echo "VMLOG doctor-link: kernel: $V carrier_changes $C0 -> $C1, rxe5 link_downed $L0 -> $L1"
VL=$(echo "$D" | grep -E "^  $V +VF 5 of $PF ")
DA=$(echo "$VL" | sed -n "s/.*carrier_changes $C0→\([0-9]*\).*/\1/p")
if [ -n "$DA" ] && [ "$DA" -gt "$C0" ] && [ "$DA" -le "$C1" ] && echo "$D" | grep -q "$V (VF 5 of $PF) changed carrier"; then
  pass "doctor-vf-carrier-changes-when-its-pf-link-cycles(doctor $C0->$DA, kernel now $C1)"
else fail doctor-vf-carrier-changes-when-its-pf-link-cycles "kernel $C0->$C1; doctor: $VL"; fi
PL=$(echo "$D" | grep -E '^  rxe5 port 1 ')
LA=$(echo "$PL" | sed -n "s|.*hw_counters/link_downed $L0→\([0-9]*\).*|\1|p")
if [ -z "$L0" ]; then fail doctor-rxe-counters-moved "no hw_counters/link_downed on rxe5: $(ls /sys/class/infiniband/rxe5/ports/1/hw_counters 2>&1 | tr '\n' ' ')"
elif [ -n "$LA" ] && [ "$LA" -gt "$L0" ] && [ "$LA" -le "$L1" ] && echo "$D" | grep -q "rxe5 port 1: error counters moved.*link_downed"; then
  pass "doctor-rxe-counters-moved(link_downed $L0->$LA)"
else fail doctor-rxe-counters-moved "kernel link_downed $L0->$L1: $PL"; fi

# An unhealthy VF and why: the PF down, doctor says the VF has no carrier because of it, with the fix.
# The RDMA port follows the VF's carrier (rxe's netdev notifier): waited for, up to 5 s; doctor's word on the port
# must be the kernel's (sysfs state and RDMA netlink, `rdma link`).
ip link set "$PF" down
for i in $(seq 1 50); do grep -q DOWN /sys/class/infiniband/rxe5/ports/1/state 2>/dev/null && break; sleep 0.1; done
KS=$(cat /sys/class/infiniband/rxe5/ports/1/state 2>&1); KR=$(rdma link show rxe5/1 2>&1)
D=$($PLUGIN doctor --interval 0 2>&1)
echo "$D" | sed -n '/^Warnings/,$p' | sed 's/^/VMLOG doctor-unhealthy: /'
echo "VMLOG doctor-unhealthy: kernel: $V carrier $(cat /sys/class/net/$V/carrier 2>&1); rxe5 port 1 sysfs '$KS'; $KR"
why=""
[ "$(cat /sys/class/net/$V/carrier 2>/dev/null)" != 1 ] || why="$why VF-has-carrier"
echo "$D" | grep -q "$V (VF 5 of $PF) is up without carrier because its PF $PF has no link.*ip link set $PF up" || why="$why no-VF-warning"
case "$KR" in
  *"state DOWN"*) echo "$D" | grep -q "RDMA device rxe5 port 1 is DOWN" || why="$why kernel-port-DOWN-but-no-warning" ;;
  *"state ACTIVE"*) echo "$D" | grep -q "RDMA device rxe5 port 1 is" && why="$why kernel-port-ACTIVE-but-warned" ;;
  *) why="$why rdma-link-show:$KR" ;;
esac
[ -z "$why" ] && pass "doctor-says-why-a-vf-is-unhealthy(port ${KS#*: } in sysfs)" || fail doctor-says-why-a-vf-is-unhealthy "$why"
ip link set "$PF" up
carrier - "$V" || echo "VMLOG doctor: $V has no carrier after the PF came back"
rdma link delete rxe5
ip link set "$V" down
