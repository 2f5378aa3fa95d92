#!/bin/sh
# The same cases on this plugin and on sriov-cni v2.10.0 (the plugin users migrate from, /opt/cni/bin/sriov, its
# network config with "type": "sriov"), on the same real igb VF, one plugin after the other. After each step the
# kernel's view is recorded: the PF's row for the VF (`ip link show <pf>`: admin MAC, VLAN, spoof checking,
# trust), the VF's netdev (where it is, its name, MAC and MTU), the plugin's records and the host-local leases of
# the network. Our column is asserted (a RESULT line per case, each named in tests/vm/results.sh); sriov-cni's is
# printed as found, in ANCHOR lines: "ANCHOR <case> | <plugin> | <step results> | <kernel after ADD> | <after DEL>".
# Sourced by scenarios.sh, last (every VF of PF 0 is free then).
AI=5; AP=$(VFP $AI)
ANET=anet
LEASES=/var/lib/cni/networks/$ANET
SRIOV=/opt/cni/bin/sriov
# bin WHO: the plugin binary; conf WHO EXTRA [VF-PCI]: the network config of WHO for the VF with EXTRA keys
bin() { if [ "$1" = ours ]; then echo "$PLUGIN"; else echo "$SRIOV"; fi; }
conf() {
  t=sriov-rdma; [ "$1" = sriov-cni ] && t=sriov
  echo '{"cniVersion":"1.0.0","name":"'$ANET'","type":"'$t'","deviceID":"'${3:-$AP}'"'"$2"'}'
}
# acni WHO CMD CID NETNS CONF: one invocation; stdout is the plugin's, stderr goes to /tmp/aerr, returns its status
acni() { echo "$5" | CNI_COMMAND=$2 CNI_CONTAINERID=$3 CNI_NETNS=$4 CNI_IFNAME=net1 $(bin "$1") 2>/tmp/aerr; }
HL=',"ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.1.0/24"}]]}'

# pfrow I: the PF's row for VF I, compact: mac=… vlan=… spoof=… trust=…
pfrow() {
  r=$(vfline "$1")
  m=$(echo "$r" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
  v=$(echo "$r" | sed -n 's/.*vlan \([0-9]*\).*/\1/p')
  s=$(echo "$r" | sed -n 's/.*spoof checking \([a-z]*\).*/\1/p')
  t=$(echo "$r" | sed -n 's/.*trust \([a-z]*\).*/\1/p')
  echo "pf[mac=$m vlan=${v:-0} spoof=$s trust=$t]"
}
# netdev PCI NETNS: where the VF's netdev is (host or the pod NETNS), its name, MAC and MTU; "none" if nowhere
netdev() {
  n=$(ls /sys/bus/pci/devices/$1/net 2>/dev/null | head -1)
  if [ -n "$n" ]; then
    echo "host:$n/$(cat /sys/class/net/$n/address)/$(cat /sys/class/net/$n/mtu)"
  elif [ -n "$2" ] && [ -e /var/run/netns/$2 ] && n=$(ip netns exec "$2" /bin/sh -c \
      'for d in /sys/class/net/*; do [ "$(basename "$(readlink $d/device 2>/dev/null)")" = "'$1'" ] && basename $d; done' | head -1) \
      && [ -n "$n" ]; then
    echo "pod:$n/$(ip netns exec "$2" cat /sys/class/net/$n/address)/$(ip netns exec "$2" cat /sys/class/net/$n/mtu)"
  else echo "netdev=none"; fi
}
# records and leases: the files of both plugins' stores, and the addresses host-local holds on the network
# (rec=<our records>+<sriov-cni's files under /var/lib/cni/sriov, by name>)
records() {
  echo "rec=$(ls /var/lib/cni/sriov-rdma 2>/dev/null | grep -c '\.json$')+$(find /var/lib/cni/sriov -type f 2>/dev/null \
    | sed 's|^/var/lib/cni/sriov/||' | sort | tr '\n' ',')"
}
leases() { echo "leases=$(ls "$LEASES" 2>/dev/null | grep -c '^[0-9]')"; }
# seen [NETNS] [I]: everything above for VF I (default $AI)
seen() { i=${2:-$AI}; echo "$(pfrow $i) $(netdev "$(VFP $i)" "$1") $(records) $(leases)"; }
# same BEFORE AFTER: "as-before", or what changed
same() { if [ "$1" = "$2" ]; then echo as-before; else echo "CHANGED: $2"; fi; }

# The VF's state before the first case, put back after each plugin's turn (sriov-cni may leave it otherwise):
# netdev name, MAC and MTU on the host, the PF row's MAC, VLAN 0, spoof checking and trust as they were.
snap_vf() { # snap_vf I → sets B_<I>_* variables through eval
  p=$(VFP $1); n=$(ls /sys/bus/pci/devices/$p/net 2>/dev/null | head -1)
  r=$(pfrow $1)
  eval "B_$1_N=$n B_$1_MAC=$(cat /sys/class/net/$n/address) B_$1_MTU=$(cat /sys/class/net/$n/mtu) \
    B_$1_PM=$(echo "$r" | sed 's/.*mac=\([^ ]*\).*/\1/') B_$1_SP=$(echo "$r" | sed 's/.*spoof=\([^ ]*\).*/\1/') \
    B_$1_TR=$(echo "$r" | sed 's/.*trust=\([^]]*\)].*/\1/')"
}
reset_vf() { # reset_vf I NETNS: the VF back on the host as snap_vf found it, no records or leases left
  p=$(VFP $1)
  [ -n "$2" ] && [ -e /var/run/netns/$2 ] && ip netns del "$2"
  for w in $(seq 1 30); do [ -n "$(ls /sys/bus/pci/devices/$p/net 2>/dev/null)" ] && break; sleep 0.1; done
  n=$(ls /sys/bus/pci/devices/$p/net 2>/dev/null | head -1)
  eval "rv_n=\$B_$1_N rv_m=\$B_$1_MAC rv_t=\$B_$1_MTU rv_pm=\$B_$1_PM rv_sp=\$B_$1_SP rv_tr=\$B_$1_TR"
  # Only what differs is set again: a MAC set by hand would change igb's view of the VF (a PF-set MAC).
  if [ -n "$n" ]; then
    ip link set "$n" down
    [ "$n" != "$rv_n" ] && ip link set "$n" name "$rv_n"
    [ "$(cat /sys/class/net/$rv_n/address)" = "$rv_m" ] || ip link set "$rv_n" address "$rv_m"
    [ "$(cat /sys/class/net/$rv_n/mtu)" = "$rv_t" ] || ip link set "$rv_n" mtu "$rv_t"
  fi
  rv_r=$(pfrow $1)
  case "$rv_r" in *"mac=$rv_pm "*) ;; *) ip link set "$PF" vf "$1" mac "$rv_pm" ;; esac
  case "$rv_r" in *" vlan=0 "*) ;; *) ip link set "$PF" vf "$1" vlan 0 ;; esac
  case "$rv_r" in *" spoof=$rv_sp "*) ;; *) ip link set "$PF" vf "$1" spoofchk "$rv_sp" ;; esac
  case "$rv_r" in *" trust=$rv_tr]"*) ;; *) ip link set "$PF" vf "$1" trust "$rv_tr" ;; esac
  rm -rf /var/lib/cni/sriov/* "$LEASES"
  rm -f /var/lib/cni/sriov-rdma/$p.json
}
# row CASE WHO STEPS AFTER-ADD AFTER-DEL: one line of the table
row() { echo "ANCHOR $1 | $2 | $3 | $4 | $5$([ "$B" = "$B0" ] || echo " (before this run: $B)")"; }
# verdict CASE-NAME WHY: our RESULT line
verdict() { if [ -z "$2" ]; then pass "$1"; else fail "$1" "$2"; fi; }

for i in 0 1 2 3 $AI; do snap_vf $i; done
B0=$(seen)
echo "ANCHOR before the cases, VF $AI ($AP) of $PF: $B0 (each plugin's run of a case is compared with what was there right before it)"
echo "ANCHOR case | plugin | steps (exit status) | kernel after ADD | after DEL, vs before"

# 1. An admin MAC with trust off: the PF row carries it, the pod's netdev has it; then the pod tries another MAC
# (trust off: igb refuses it). DEL: everything as before.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"mac":"02:00:00:00:dd:01","trust":"off","spoofchk":"on"')
  ip netns add apod
  acni $who ADD a1 /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr)
  A=$(seen apod)
  ip -n apod link set net1 address 02:00:00:00:dd:99 2>/dev/null && pm=pod-set-mac-allowed || pm=pod-set-mac-refused
  acni $who DEL a1 /var/run/netns/apod "$C" >/dev/null; rd=$?
  D=$(seen apod)
  row admin-mac-trust-off $who "add=$ra del=$rd $pm" "$A" "$(same "$B" "$D")"
  if [ $who = ours ]; then
    why=""
    [ $ra = 0 ] || why="ADD: $E"
    # The pod's MTU is the VF's own (igb's rebind for the admin MAC must not leave the driver's 1500).
    eval "vmtu=\$B_${AI}_MTU"
    case "$A" in *"pf[mac=02:00:00:00:dd:01 "*"trust=off]"*"pod:net1/02:00:00:00:dd:01/$vmtu "*) ;; *) why="$why after ADD: $A" ;; esac
    [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
    verdict "anchors-admin-mac-trust-off($pm)" "$why"
  fi
  reset_vf $AI apod
done

# 2. MTU 9000 (the PF's MTU is 9000): the pod's netdev has it; DEL puts the VF's own MTU back.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"mtu":9000')
  ip netns add apod
  acni $who ADD a2 /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr)
  A=$(seen apod)
  acni $who DEL a2 /var/run/netns/apod "$C" >/dev/null; rd=$?
  D=$(seen apod)
  row mtu-9000 $who "add=$ra del=$rd" "$A" "$(same "$B" "$D")"
  if [ $who = ours ]; then
    why=""; [ $ra = 0 ] || why="ADD: $E"
    case "$A" in *"pod:net1/"*"/9000 "*) ;; *) why="$why after ADD: $A" ;; esac
    [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
    verdict anchors-mtu-9000 "$why"
  fi
  reset_vf $AI apod
done

# 3. Every combination of VLAN 100 or none, spoofchk on or off, trust on or off: the PF row shows each; DEL: as
# before.
for c in 0 1 2 3 4 5 6 7; do
  X=""; vl=0; sp=off; tr=off
  [ $((c & 1)) = 1 ] && { X=',"vlan":100'; vl=100; }
  [ $((c & 2)) = 2 ] && sp=on
  [ $((c & 4)) = 4 ] && tr=on
  X="$X,\"spoofchk\":\"$sp\",\"trust\":\"$tr\""
  name="vlan$vl+spoof-$sp+trust-$tr"
  for who in ours sriov-cni; do
    B=$(seen)
    C=$(conf $who "$X")
    ip netns add apod
    acni $who ADD a3$c /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr)
    A=$(seen apod)
    acni $who DEL a3$c /var/run/netns/apod "$C" >/dev/null; rd=$?
    D=$(seen apod)
    row "combo($name)" $who "add=$ra del=$rd" "$A" "$(same "$B" "$D")"
    if [ $who = ours ]; then
      why=""; [ $ra = 0 ] || why="ADD: $E"
      case "$A" in *"vlan=$vl spoof=$sp trust=$tr]"*"pod:net1/"*) ;; *) why="$why after ADD: $A" ;; esac
      [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
      verdict "anchors-combo($name)" "$why"
    fi
    reset_vf $AI apod
  done
done

# 4. DEL after the pod's netns is gone (the kernel hands the VF back under its pod name, with the pod's
# settings on the PF): VF, PF row and lease as before.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"vlan":100,"mtu":9000'"$HL")
  ip netns add apod
  acni $who ADD a4 /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr)
  A=$(seen apod)
  ip netns del apod
  for w in $(seq 1 30); do [ -n "$(ls /sys/bus/pci/devices/$AP/net 2>/dev/null)" ] && break; sleep 0.1; done
  G=$(seen)
  acni $who DEL a4 /var/run/netns/apod "$C" >/dev/null; rd=$?; E2=$(cat /tmp/aerr | tr '\n' ' ' | cut -c1-160)
  D=$(seen)
  row del-after-netns-gone $who "add=$ra del=$rd ${E2:+(DEL said: $E2)}" "$A; netns gone: $G" "$(same "$B" "$D")"
  if [ $who = ours ]; then
    why=""; [ $ra = 0 ] || why="ADD: $E"
    case "$A" in *"vlan=100 "*"pod:net1/"*"/9000 "*"leases=1"*) ;; *) why="$why after ADD: $A" ;; esac
    [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
    verdict anchors-del-after-netns-gone "$why"
  fi
  reset_vf $AI apod
done

# 5. IPAM fails after the VF moved: host-local's one address is held by another container, so its ADD fails once
# the VF is in the pod with its settings. Everything rolled back; the other container's lease kept.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"vlan":100,"trust":"on","mtu":9000,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.2.0/24","rangeStart":"10.9.2.5","rangeEnd":"10.9.2.5"}]]}')
  mkdir -p "$LEASES"; printf 'other-container\r\neth0' > "$LEASES/10.9.2.5"
  BL=$(seen)
  ip netns add apod
  acni $who ADD a5 /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr | tr '\n' ' ')
  A=$(seen apod)
  OTHER=$(cat "$LEASES/10.9.2.5" 2>/dev/null | head -1 | tr -d '\r')
  row ipam-fails-after-move $who "add=$ra lease-holder=$OTHER" "$A" "$(same "$BL" "$A")"
  if [ $who = ours ]; then
    why=""; [ $ra != 0 ] || why="ADD succeeded"
    [ "$BL" = "$A" ] || why="$why after the failed ADD: $A (before: $BL)"
    [ "$OTHER" = other-container ] || why="$why the other container's lease is now '$OTHER'"
    verdict anchors-ipam-fails-after-move "$why"
  fi
  reset_vf $AI apod
done

# 6. DEL twice (the runtime retries a DEL it thinks failed): both succeed, the second changes nothing.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"vlan":100,"spoofchk":"off","mtu":9000'"$HL")
  ip netns add apod
  acni $who ADD a6 /var/run/netns/apod "$C" >/dev/null; ra=$?; E=$(cat /tmp/aerr)
  A=$(seen apod)
  acni $who DEL a6 /var/run/netns/apod "$C" >/dev/null; rd=$?
  D=$(seen apod)
  acni $who DEL a6 /var/run/netns/apod "$C" >/dev/null; rd2=$?; E2=$(cat /tmp/aerr | tr '\n' ' ' | cut -c1-160)
  D2=$(seen apod)
  row del-twice $who "add=$ra del=$rd del-again=$rd2 ${E2:+(said: $E2)}" "$A" "$(same "$B" "$D"); again: $(same "$B" "$D2")"
  if [ $who = ours ]; then
    why=""; [ $ra = 0 ] || why="ADD: $E"
    [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
    [ $rd2 = 0 ] && [ "$B" = "$D2" ] || why="$why second DEL=$rd2: $D2 $E2"
    verdict anchors-del-twice "$why"
  fi
  reset_vf $AI apod
done

# 7. CHECK after the VF's VLAN was changed by hand on the PF (100 → 200): CHECK must fail naming it; DEL then puts
# back what was there before ADD.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"vlan":100,"trust":"on"')
  ip netns add apod
  OUT=$(acni $who ADD a7 /var/run/netns/apod "$C"); ra=$?; E=$(cat /tmp/aerr)
  A=$(seen apod)
  acni $who CHECK a7 /var/run/netns/apod "$(echo "$C" | sed 's/}$//'),\"prevResult\":$OUT}" >/tmp/aout; rc0=$?
  ip link set "$PF" vf $AI vlan 200
  acni $who CHECK a7 /var/run/netns/apod "$(echo "$C" | sed 's/}$//'),\"prevResult\":$OUT}" >/tmp/aout; rc=$?
  SAID=$(cat /tmp/aout /tmp/aerr | tr '\n' ' ' | sed 's/.*"msg":"\([^"]*\)".*/\1/' | cut -c1-140)
  acni $who DEL a7 /var/run/netns/apod "$C" >/dev/null; rd=$?
  D=$(seen apod)
  row check-after-hand-made-vlan-change $who "add=$ra check=$rc0 check-after-vlan-200=$rc${SAID:+ ($SAID)} del=$rd" "$A" "$(same "$B" "$D")"
  if [ $who = ours ]; then
    why=""; [ $ra = 0 ] || why="ADD: $E"
    [ $rc0 = 0 ] || why="$why CHECK before the change failed: $(cat /tmp/aerr)"
    [ $rc != 0 ] || why="$why CHECK passed with VLAN 200 on the PF"
    case "$SAID" in *"does not show vlan 100"*) ;; *) why="$why CHECK said: $SAID" ;; esac
    [ $rd = 0 ] && [ "$B" = "$D" ] || why="$why DEL=$rd: $D"
    verdict anchors-check-after-hand-made-vlan-change "$why"
  fi
  reset_vf $AI apod
done

# 8. SIGKILL in the middle of ADD, then DEL (retried up to 3 times, as a runtime does): three delays; after each,
# the VF, its PF row, records and leases as before.
for who in ours sriov-cni; do
  B=$(seen)
  C=$(conf $who ',"mac":"02:00:00:00:dd:08","vlan":100,"spoofchk":"on","trust":"on","mtu":9000'"$HL")
  steps=""; after=""; why=""
  for d in 0.05 0.15 0.3; do
    ip netns add apod
    echo "$C" > /tmp/ak.json
    CNI_COMMAND=ADD CNI_CONTAINERID=a8 CNI_NETNS=/var/run/netns/apod CNI_IFNAME=net1 $(bin $who) </tmp/ak.json >/dev/null 2>/tmp/akerr &
    pid=$!
    sleep $d
    hit=ended; kill -9 $pid 2>/dev/null && hit=killed
    wait $pid 2>/dev/null
    K=$(seen apod)
    n=0; until acni $who DEL a8 /var/run/netns/apod "$C" >/dev/null; do n=$((n + 1)); [ $n -ge 3 ] && break; done
    [ $n -ge 3 ] && dl="DEL-failed-3x($(cat /tmp/aerr | tr '\n' ' ' | cut -c1-100))" || dl="del-ok"
    D=$(seen apod)
    ip netns del apod
    steps="$steps ${d}s:$hit,$dl"
    after="$after ${d}s: $(same "$B" "$D");"
    [ $who = ours ] && { [ "$dl" = del-ok ] && [ "$B" = "$D" ] || why="$why ${d}s($hit): $dl, after DEL: $D (after the kill: $K)"; }
    reset_vf $AI apod
  done
  row sigkill-mid-add-then-del $who "$steps" "-" "$after"
  [ $who = ours ] && verdict anchors-sigkill-mid-add-then-del "$why"
done

# 9. Four ADDs at once on four VFs of the same PF (VLAN 300+i, spoofchk and trust on), then four DELs at once:
# every ADD succeeds and the PF shows each row; after the DELs the PF's VF table and the netdevs are as before.
for who in ours sriov-cni; do
  B=$(seen)
  B4=""; for i in 0 1 2 3; do B4="$B4 [$i] $(seen "" $i)"; done
  for i in 0 1 2 3; do ip netns add ap$i; done
  for i in 0 1 2 3; do
    C=$(conf $who ',"vlan":'$((300 + i))',"spoofchk":"on","trust":"on"' "$(VFP $i)")
    ( echo "$C" | CNI_COMMAND=ADD CNI_CONTAINERID=a9$i CNI_NETNS=/var/run/netns/ap$i CNI_IFNAME=net1 $(bin $who) >/dev/null 2>/tmp/a9err$i
      echo $? > /tmp/a9rc$i ) &
  done
  wait
  okn=0; rows=0; errs=""
  for i in 0 1 2 3; do
    [ "$(cat /tmp/a9rc$i)" = 0 ] && okn=$((okn + 1)) || errs="$errs [$i] $(cat /tmp/a9err$i | tr '\n' ' ' | cut -c1-100)"
    case "$(seen ap$i $i)" in *"vlan=$((300 + i)) spoof=on trust=on]"*"pod:net1/"*) rows=$((rows + 1)) ;; esac
  done
  for i in 0 1 2 3; do
    C=$(conf $who ',"vlan":'$((300 + i))',"spoofchk":"on","trust":"on"' "$(VFP $i)")
    ( echo "$C" | CNI_COMMAND=DEL CNI_CONTAINERID=a9$i CNI_NETNS=/var/run/netns/ap$i CNI_IFNAME=net1 $(bin $who) >/dev/null 2>/tmp/a9err$i
      echo $? > /tmp/a9rc$i ) &
  done
  wait
  deln=0; for i in 0 1 2 3; do [ "$(cat /tmp/a9rc$i)" = 0 ] && deln=$((deln + 1)); done
  D4=""; for i in 0 1 2 3; do D4="$D4 [$i] $(seen "" $i)"; done
  row parallel-4-adds-one-pf $who "adds-ok=$okn/4 dels-ok=$deln/4$errs" "$rows/4 pods with net1 and their PF row" "$(same "$B4" "$D4")"
  [ $who = ours ] && verdict "anchors-parallel-4-adds-one-pf" "$([ $okn = 4 ] && [ $rows = 4 ] && [ $deln = 4 ] && [ "$B4" = "$D4" ] || echo "adds $okn/4, rows $rows/4, dels $deln/4$errs; after: $D4")"
  for i in 0 1 2 3; do reset_vf $i ap$i; done
done
echo "ANCHOR end"
