# RDMA traffic between the two pods' containers (sourced by scenarios.sh while rdma-a and rdma-b run, with
# A and B their net1 addresses). Soft-RoCE stands in for the VF's RDMA function: each container creates an rxe
# device on its own net1 (the 7.x guest kernel's rxe works per netns). The GID index each side uses is the
# one `sriov-rdma doctor --netns` reports on the node for the pod's netns (its NCCL_IB_GID_INDEX).
# gid_of POD ADDR: the GID index doctor reports on the node for net1 (ADDR) of the pod (e2e.sh's gid_at)
gid_of() { gid_at onnode "${PODNS:-default}" "$1" "$2"; }
# pair NAME SERVER-CMD CLIENT-CMD: the server in rdma-b, the client in rdma-a (e2e.sh's rpair); sets OUT and RC
pair() { rpair "$1" "${PODNS:-default}" rdma-b "${PODNS:-default}" rdma-a "$2" "$3"; }
why=""
inpod rdma-a 'rdma link add rxeA type rxe netdev net1' || why="rdma link add in rdma-a failed;"
inpod rdma-b 'rdma link add rxeB type rxe netdev net1' || why="$why rdma link add in rdma-b failed;"
GA=$(gid_of rdma-a "$A") || why="$why no GID index for rdma-a;"
GB=$(gid_of rdma-b "$B") || why="$why no GID index for rdma-b;"
if [ -z "$why" ]; then
  say "GID indexes from sriov-rdma doctor --netns: rdma-a $GA, rdma-b $GB"
  pair rping "rping -s -a $B -C 10 -v" "rping -c -a $B -C 10 -v"
  if rping_done "$OUT" "$RC" 10 "$work/rping.server"; then pass "rdma-rping(rdma_cm, 10/10 round trips over net1's rxe$RPING_NOTE)"
  else fail rdma-rping "rc=$RC $(echo "$OUT" | grep -c 'ping data')/10: $(echo "$OUT" | tail -3 | tr '\n' ' ') server: $(tail -2 "$work/rping.server" | tr '\n' ' ')"; fi
  pair ib_write_bw "ib_write_bw -d rxeB -x $GB -n 1000 -F --report_gbits" "ib_write_bw -d rxeA -x $GA -n 1000 -F --report_gbits $B"
  bw=$(echo "$OUT" | awk '/BW average/ { getline; print $4; exit }')
  if [ "$RC" = 0 ] && [ -n "$bw" ]; then pass "rdma-write-bw(ib_write_bw -x <doctor's GID index>: $bw Gbit/s under TCG)"
  else fail rdma-write-bw "rc=$RC: $(echo "$OUT" | tail -3 | tr '\n' ' ') server: $(tail -2 "$work/ib_write_bw.server" | tr '\n' ' ')"; fi
else
  fail rdma-setup "$why"
fi
