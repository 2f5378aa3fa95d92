#!/usr/bin/env bash
# The verdict of one e2e run of the emulated machine, from its console log (run.sh calls it; it can be run on any
# saved console log):
#   results.sh CONSOLE-LOG KERNEL
# The run passes only if scenarios.sh printed exactly the scenario names it must print on that kernel (the list
# below: a name missing from the log is a failure, as is one not on the list), none of them FAIL, scenarios.sh ran
# to its last line (SCENARIOSDONE: a shell error that ends it early fails the run) and the machine finished
# (VMDONE: a hang is a failure, its console tail printed). Prints what went wrong, then
# "e2e[KERNEL]: P passed, F failed", the last line. Exit 0 only for a clean run.
set -uo pipefail
log=${1:?usage: results.sh CONSOLE-LOG KERNEL}; kernel=${2:?usage: results.sh CONSOLE-LOG KERNEL}

# The scenario names (a RESULT line's name up to its first "("), in the order scenarios.sh prints them.
expected() {
  echo setup
  if [ "$kernel" = 7 ]; then
    printf '%s\n' rdma-exclusive-isolated-rxe-dies-with-its-netdev rdma-exclusive-auto-moves-and-goes-on
  else
    printf '%s\n' rdma-exclusive-isolated-rolls-back rdma-exclusive-auto-falls-back
  fi
  printf '%s\n' rdma-shared-isolated-refused rdma-shared-auto-leaves rdma-gid-check doctor-netns-gids \
    add-vf-settings check del-restores rollback-refused-setting del-after-netns-del pfname-allocation gc parallel-7 \
    rollback-802.1ad doctor-host userspace-driver-vf cnitool-add-check-del rollback-ipam-failure status
  for _ in $(seq 1 16); do echo combo; done
  printf '%s\n' vf-works-after-del del-name-taken-by-another-device del-unopenable-netns-changes-nothing
  # rdma.sh
  printf '%s\n' rdma-gid-reported rdma-shared-mode-every-pod-sees-every-device
  if [ "$kernel" = 7 ]; then echo rdma-traffic; else echo rdma-traffic-needs-netns-aware-rxe; fi
  printf '%s\n' vlan-isolation vlan-gone-after-del rdma-pods-del-restores admin-mac-enforced
  printf '%s\n' orphan-reclaimed-by-pfname-add held-netns-vf-never-reclaimed-then-restored \
    check-mtu-is-what-add-left-after-a-rebind del-binds-a-vf-an-interrupted-rebind-left-unbound \
    sigkill-mid-add-then-del-restores-a-real-vf
  # lifecycle.sh
  printf '%s\n' del-vf-with-systemd-name-comes-back-under-a-free-name orphan-of-the-same-container-reclaimed-by-its-add \
    soft-roce-of-a-kubelet-vf-never-moved
  # doctor.sh
  printf '%s\n' doctor-pcie-link-of-the-emulated-igb doctor-roce-mtu-mismatch \
    doctor-vf-carrier-changes-when-its-pf-link-cycles doctor-rxe-counters-moved doctor-says-why-a-vf-is-unhealthy
  # anchors.sh: our column of the cases run on both plugins
  printf '%s\n' anchors-admin-mac-trust-off anchors-mtu-9000
  for _ in $(seq 1 8); do echo anchors-combo; done
  printf '%s\n' anchors-del-after-netns-gone anchors-ipam-fails-after-move anchors-del-twice \
    anchors-check-after-hand-made-vlan-change anchors-sigkill-mid-add-then-del anchors-parallel-4-adds-one-pf
}

[ -r "$log" ] || { echo "e2e[$kernel]: no console log $log"; echo "e2e[$kernel]: 0 passed, 1 failed"; exit 1; }
pass=0; failn=0; bad=0
names=$(mktemp); trap 'rm -f "$names"' EXIT
# A RESULT line is "RESULT <name>[(details)] PASS" or "RESULT <name> FAIL <why>"; anything else is malformed.
while IFS= read -r l; do
  n=$(echo "$l" | sed 's/^RESULT \([^ (]*\).*/\1/'); echo "$n" >> "$names"
  # A FAIL's name has no space (its second word is FAIL), whatever its reason says; a PASS line ends in PASS.
  if [ "$(echo "$l" | awk '{ print $3 }')" = FAIL ]; then failn=$((failn + 1)); echo "e2e[$kernel]: FAIL ${l#RESULT }"
  elif [ "${l% PASS}" != "$l" ]; then pass=$((pass + 1))
  else bad=$((bad + 1)); echo "e2e[$kernel]: malformed result line: $l"; fi
done < <(grep -a '^RESULT ' "$log")
missing=$(comm -23 <(expected | sort) <(sort "$names") | sort | uniq -c | awk '{ print $2 ($1 > 1 ? " x" $1 : "") }' | tr '\n' ' ')
extra=$(comm -13 <(expected | sort) <(sort "$names") | sort | uniq -c | awk '{ print $2 ($1 > 1 ? " x" $1 : "") }' | tr '\n' ' ')
more=0
if [ -n "$missing" ]; then
  more=$((more + $(comm -23 <(expected | sort) <(sort "$names") | wc -l)))
  echo "e2e[$kernel]: FAIL these scenarios printed no result: $missing"
fi
if [ -n "$extra" ]; then
  more=$((more + $(comm -13 <(expected | sort) <(sort "$names") | wc -l)))
  echo "e2e[$kernel]: FAIL results not on the list of this kernel's scenarios (tests/vm/results.sh), or printed once too often: $extra"
fi
if ! grep -aq '^SCENARIOSDONE' "$log"; then
  more=$((more + 1))
  echo "e2e[$kernel]: FAIL scenarios.sh did not reach its end (a shell error or a hang stopped it); last lines:"
  grep -a -B2 -A3 'scenarios.sh exit status\|^sh: \|/scenarios.sh: \|/rdma.sh: \|/doctor.sh: \|/vmlib.sh: ' "$log" | head -12 | sed 's/^/  console: /'
fi
if ! grep -aq '^VMDONE' "$log"; then
  more=$((more + 1))
  echo "e2e[$kernel]: FAIL the machine did not finish (a hang); the console's last lines:"
  tail -25 "$log" | sed 's/^/  console: /'
fi
echo "e2e[$kernel]: $pass passed, $((failn + bad + more)) failed"
[ $((failn + bad + more)) = 0 ] && [ "$pass" -gt 0 ]
