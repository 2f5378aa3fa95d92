#!/bin/sh
# RDMA traffic helpers shared by the probe (rdma-probe.sh) and the scenarios (rdma.sh). Every tool runs under
# timeout; the server runs in one netns, the client in another.
ms() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }
since() { echo "$(( $(ms) - $1 ))ms"; }
log() { sed "s|^|VMLOG $1: |"; }

# pair_in SNS CNS NAME SERVER-TIMEOUT "SERVER-CMD" CLIENT-TIMEOUT "CLIENT-CMD": the server in SNS, the client
# in CNS; sets OUT (client output), RC (client exit), SOUT (server output), EL (client time), WHY (first error).
pair_in() {
  sns=$1; cns=$2; name=$3
  ip netns exec "$sns" timeout "$4" $5 > /tmp/$name.server 2>&1 &
  spid=$!
  sleep 1
  echo "$sns: timeout $4 $5" | log "$name cmd"; echo "$cns: timeout $6 $7" | log "$name cmd"
  t=$(ms)
  OUT=$(ip netns exec "$cns" timeout "$6" $7 2>&1); RC=$?
  EL=$(since $t)
  for i in $(seq 1 50); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  SOUT=$(cat /tmp/$name.server)
  echo "$OUT" | tail -6 | log "$name client"; echo "$SOUT" | tail -4 | log "$name server"
  WHY=$( { echo "$OUT" | grep -iE 'fail|error|unable|couldn|conflict|terminated'; echo "$SOUT" | grep -iE 'fail|error|unable|couldn' | sed 's/^/server: /'; echo "$OUT" | tail -1; } | head -1)
}

# The figures each tool prints, from OUT.
pingpong_figures() { echo "$(echo "$OUT" | sed -n 's/.*bytes in .* = \(.*\)/\1/p' | head -1), $(echo "$OUT" | sed -n 's/.*iters in .* = \(.*\)/\1/p' | head -1)"; }
write_bw_gbits() { echo "$OUT" | awk '/BW average/ { getline; print $4; exit }'; }
send_lat_us() { echo "$OUT" | awk '/t_avg/ { getline; print $6; exit }'; }
iperf3_rate() { echo "$OUT" | awk '/receiver/ { print $7, $8 }' | tail -1; }
ping_rtt_ms() { echo "$OUT" | sed -n 's|.*min/avg/max = [^/]*/\([^/]*\)/.*|\1|p'; }
