#!/bin/sh
# run.sh probe: does RDMA traffic flow between two VFs of the emulated machine, each in its own netns?
# By hand, without the plugin: VFs on both PFs (PF MTUs 9000 first), one VF of each with carrier, moved
# into podA / podB, MTU 9000, 10.7.0.1/24 and 10.7.0.2/24, ping; Soft-RoCE on each VF inside its netns,
# the GID index of the pod address found by value, then ibv_rc_pingpong, ib_write_bw, ib_send_lat, rping
# and iperf3 between the pods. Prints "PROBE <name> PASS|FAIL <details>" (run.sh adds the kernel), every
# tool under timeout; VMLOG lines carry the commands and the tools' output.
ip() { /usr/sbin/ip "$@"; }
rdma() { /usr/sbin/rdma "$@"; }
export PATH=/bin:/usr/bin:/usr/sbin
. /rdmalib.sh
T0=$(ms)
probe() { echo "PROBE $1 $2 $3"; }
A=10.7.0.1; B=10.7.0.2

PF=""; PF2=""
for n in /sys/class/net/*; do
  [ "$(basename "$(readlink "$n/device/driver" 2>/dev/null)")" = igb ] || continue
  if [ -z "$PF" ]; then PF=$(basename "$n"); elif [ -z "$PF2" ]; then PF2=$(basename "$n"); fi
done
[ -n "$PF" ] && [ -n "$PF2" ] || { probe setup FAIL "two igb PFs wanted, found '$PF' '$PF2'"; exit 0; }

# The PF MTU first: changing it after the VFs exist resets the PF. Then the VFs, as vmlib.sh does.
t=$(ms)
for p in "$PF" "$PF2"; do ip link set "$p" mtu 9000; ip link set "$p" up; done
echo 7 > /sys/class/net/$PF/device/sriov_numvfs
echo 2 > /sys/class/net/$PF2/device/sriov_numvfs
vfnet() { ls /sys/class/net/$1/device/virtfn$2/net 2>/dev/null | head -1; }
VA=""; VB=""
for i in $(seq 1 100); do
  VA=$(vfnet "$PF" 0); VB=$(vfnet "$PF2" 0)
  [ -n "$VA" ] && [ -n "$VB" ] && break; sleep 0.1
done
if [ -n "$VA" ] && [ -n "$VB" ]; then
  probe vfs PASS "$PF: $(cat /sys/class/net/$PF/device/sriov_numvfs) VFs, $PF2: $(cat /sys/class/net/$PF2/device/sriov_numvfs) VFs; VF0 netdevs $VA $VB ($(since $t))"
else
  probe vfs FAIL "no VF0 netdev on $PF ('$VA') or $PF2 ('$VB') after 10 s"; exit 0
fi

# Carrier on both VF netdevs in the host netns (needs the VF BARs below 4 GiB: see run.sh).
t=$(ms)
for v in "$VA" "$VB"; do ip link set "$v" mtu 9000; ip link set "$v" up; done
for i in $(seq 1 200); do
  [ "$(cat /sys/class/net/$VA/carrier 2>/dev/null)" = 1 ] && [ "$(cat /sys/class/net/$VB/carrier 2>/dev/null)" = 1 ] && break
  sleep 0.1
done
ca=$(cat /sys/class/net/$VA/carrier 2>/dev/null); cb=$(cat /sys/class/net/$VB/carrier 2>/dev/null)
if [ "$ca" = 1 ] && [ "$cb" = 1 ]; then probe carrier PASS "$VA and $VB up with carrier ($(since $t))"
else probe carrier FAIL "carrier $VA=$ca $VB=$cb after 20 s"; dmesg | tail -20 | log dmesg; exit 0; fi

# Each VF into its own netns by hand, renamed net1, MTU 9000, an address; wait for carrier there.
t=$(ms)
ok=1
ip netns add podA; ip netns add podB
ip link set "$VA" netns podA || ok=0
ip link set "$VB" netns podB || ok=0
for x in "podA $VA $A" "podB $VB $B"; do
  set -- $x
  ip -n "$1" link set "$2" name net1 || ok=0
  ip -n "$1" link set net1 mtu 9000 || ok=0
  ip -n "$1" addr add "$3/24" dev net1 || ok=0
  ip -n "$1" link set net1 up || ok=0
  ip -n "$1" link set lo up
done
for i in $(seq 1 200); do
  ip -n podA -o link show net1 | grep -q LOWER_UP && ip -n podB -o link show net1 | grep -q LOWER_UP && break
  sleep 0.1
done
la=$(ip -n podA -o link show net1 2>&1); lb=$(ip -n podB -o link show net1 2>&1)
echo "$la" | log podA; echo "$lb" | log podB
case "$la$lb" in
  *LOWER_UP*LOWER_UP*) [ $ok = 1 ] && probe netns-move PASS "$VA->podA/net1 $A, $VB->podB/net1 $B, mtu $(echo "$la" | sed -n 's/.* mtu \([0-9]*\).*/\1/p'), carrier ($(since $t))" \
                       || probe netns-move FAIL "an ip command failed" ;;
  *) probe netns-move FAIL "no carrier in the pods after 20 s"; exit 0 ;;
esac

# ping: small and 8000-byte payloads (busybox ping).
for sz in 56 8000; do
  t=$(ms)
  out=$(ip netns exec podA timeout 20 ping -c 5 -s $sz $B 2>&1); rc=$?
  echo "$out" | tail -3 | log ping-$sz
  rtt=$(echo "$out" | sed -n 's|.*min/avg/max = [^/]*/\([^/]*\)/.*|\1|p')
  recv=$(echo "$out" | sed -n 's/.* \([0-9]*\) packets received.*/\1/p')
  [ $rc = 0 ] && [ "${recv:-0}" -gt 0 ] && probe ping-$sz PASS "podA->podB $recv/5 received, rtt avg ${rtt}ms ($(since $t))" \
    || probe ping-$sz FAIL "rc=$rc $(echo "$out" | tail -1)"
done

# Soft-RoCE on each VF inside its netns, and the GID index of the pod address (RoCE v2), by value.
t=$(ms)
ip netns exec podA rdma link add rxeA type rxe netdev net1 2>&1 | log rxeA
ip netns exec podB rdma link add rxeB type rxe netdev net1 2>&1 | log rxeB
gid_index() { # gid_index NETNS DEV IPv4: reads the GID table through the pod's own sysfs
  ip netns exec "$1" sh -c '
    want=$(echo "$2" | awk -F. "{ printf \"0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\", \$1, \$2, \$3, \$4 }")
    d=/sys/class/infiniband/$1/ports/1
    for g in $d/gids/*; do
      n=${g##*/}
      [ "$(cat $g 2>/dev/null)" = "$want" ] || continue
      case "$(cat $d/gid_attrs/types/$n 2>/dev/null)" in *"v2"*) echo $n; exit 0 ;; esac
    done; exit 1' gid "$2" "$3"
}
GA=""; GB=""
for i in $(seq 1 50); do
  GA=$(gid_index podA rxeA $A); GB=$(gid_index podB rxeB $B)
  [ -n "$GA" ] && [ -n "$GB" ] && break; sleep 0.1
done
ip netns exec podA rdma link 2>&1 | log "rdma link (podA)"
if [ -n "$GA" ] && [ -n "$GB" ]; then
  probe rxe PASS "rxeA on podA/net1, rxeB on podB/net1: $(ip netns exec podA rdma link show rxeA/1 2>&1 | sed -n 's/.* state \([A-Z]*\) .*/\1/p')/$(ip netns exec podB rdma link show rxeB/1 2>&1 | sed -n 's/.* state \([A-Z]*\) .*/\1/p'), RoCE v2 GID index $GA ($A) / $GB ($B) ($(since $t))"
else
  probe rxe FAIL "GID index of $A on rxeA '$GA', of $B on rxeB '$GB'"
  ip netns exec podA sh -c 'grep . /sys/class/infiniband/*/ports/1/gids/* /sys/class/infiniband/*/ports/1/gid_attrs/types/* 2>&1 | grep -v ":0000:0000:0000:0000:0000:0000:0000:0000"' | log gids
  GA=${GA:-1}; GB=${GB:-1}
fi
echo "$(ls /dev/infiniband/ 2>&1 | tr '\n' ' ')" | log /dev/infiniband

pair() { pair_in podA podB "$@"; }

pair ibv_rc_pingpong 60 "ibv_rc_pingpong -d rxeA -g $GA -n 500" 45 "ibv_rc_pingpong -d rxeB -g $GB -n 500 $A"
bw=$(echo "$OUT" | sed -n 's/.*bytes in .* = \(.*\)/\1/p' | head -1); lat=$(echo "$OUT" | sed -n 's/.*iters in .* = \(.*\)/\1/p' | head -1)
[ $RC = 0 ] && [ -n "$bw" ] && probe ibv_rc_pingpong PASS "500 x 4096 B: $bw, $lat ($EL)" \
  || probe ibv_rc_pingpong FAIL "rc=$RC $WHY ($EL)"

pair ib_write_bw 60 "ib_write_bw -d rxeA -x $GA -n 1000 -F --report_gbits" 45 "ib_write_bw -d rxeB -x $GB -n 1000 -F --report_gbits $A"
row=$(echo "$OUT" | awk '/BW average/ { getline; print; exit }')
[ $RC = 0 ] && [ -n "$row" ] && probe ib_write_bw PASS "1000 x 65536 B: average $(echo $row | awk '{ print $4 }') Gbit/s, peak $(echo $row | awk '{ print $3 }') ($EL)" \
  || probe ib_write_bw FAIL "rc=$RC $WHY ($EL)"

pair ib_send_lat 60 "ib_send_lat -d rxeA -x $GA -n 200 -F" 45 "ib_send_lat -d rxeB -x $GB -n 200 -F $A"
row=$(echo "$OUT" | awk '/t_avg/ { getline; print; exit }')
[ $RC = 0 ] && [ -n "$row" ] && probe ib_send_lat PASS "200 x 2 B: t_typical $(echo $row | awk '{ print $5 }') us, t_avg $(echo $row | awk '{ print $6 }') us, t_min $(echo $row | awk '{ print $3 }') us ($EL)" \
  || probe ib_send_lat FAIL "rc=$RC $WHY ($EL)"

pair rping 60 "rping -s -a $A -C 10 -v" 45 "rping -c -a $A -C 10 -v"
n=$(echo "$OUT" | grep -c 'ping data')
[ $RC = 0 ] && [ "$n" = 10 ] && probe rping PASS "rdma_cm connect + 10 RDMA ping round trips ($EL)" \
  || probe rping FAIL "rc=$RC $n/10 pings: $WHY ($EL)"

pair iperf3 30 "iperf3 -s -1 -B $A" 20 "iperf3 -c $A -t 3 -f m"
r=$(echo "$OUT" | awk '/receiver/ { print $7, $8 }' | tail -1)
[ $RC = 0 ] && [ -n "$r" ] && probe iperf3 PASS "TCP 3 s podB->podA: $r receiver ($EL)" \
  || probe iperf3 FAIL "rc=$RC $WHY ($EL)"

# Clean up, each step bounded: a step blocked in the kernel is left behind and reported.
bounded() { # bounded SECS CMD...: runs CMD, gives up waiting after SECS (the process may stay in D state)
  s=$1; shift
  "$@" >/tmp/bounded.out 2>&1 &
  bp=$!
  for i in $(seq 1 $((s * 10))); do kill -0 $bp 2>/dev/null || { wait $bp; return $?; }; sleep 0.1; done
  return 124
}
ok=1; steps=""
for c in "podA rdma link delete rxeA" "podB rdma link delete rxeB"; do
  t=$(ms); set -- $c; ns=$1; shift
  bounded 30 ip netns exec $ns /usr/sbin/"$@"; rc=$?
  steps="$steps, $* in $ns: rc=$rc $(since $t)"; [ $rc = 0 ] || ok=0
done
for ns in podA podB; do
  t=$(ms); bounded 30 ip netns del $ns; rc=$?
  steps="$steps, netns del $ns: rc=$rc $(since $t)"; [ $rc = 0 ] || ok=0
done
[ $ok = 1 ] && probe cleanup PASS "${steps#, }" || { probe cleanup FAIL "${steps#, }"; echo w > /proc/sysrq-trigger; sleep 1; dmesg | tail -80 | log blocked; }
echo "VMLOG probe took $(since $T0) on $(uname -r)"
