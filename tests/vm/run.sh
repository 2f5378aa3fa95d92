#!/usr/bin/env bash
# Boots the emulated SR-IOV machine (QEMU igb PFs with real VFs, TCG) and runs one job in it:
#   run.sh e2e        the scenarios; fails on any failed or missing scenario or a hang (make e2e, results.sh)
#   run.sh demo       attach/detach one VF with cnitool, readable      (make demo)
#   run.sh bench [N]  ADD+DEL of a real VF against the kernel floor     (make bench-vm)
#   run.sh probe      RDMA traffic between two VFs in two netns, by hand (rdma-probe.sh)
#   run.sh k8s        the machine as a Kubernetes node, the scenarios driven with kubectl (make k8s-e2e;
#                     tests/k8s/e2e.sh runs the control plane on this host and boots the machine itself)
# KERNEL=6.12 (Debian bookworm-backports, default) or KERNEL=7 (trixie-backports) picks the guest kernel;
# a list (KERNEL="6.12 7") runs the job once per kernel, one after the other, and fails if any run fails.
# RESULT and PROBE lines are printed as RESULT[kernel] / PROBE[kernel]; e2e also prints the ANCHOR lines (the table
# of tests/vm/anchors.sh: what the kernel showed after each case on this plugin and on sriov-cni v2.10.0).
set -euo pipefail
mode=${1:-e2e}; n=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
kernels=${KERNEL:-6.12}
case "$mode" in
  e2e) filter='^(RESULT|VMLOG|ANCHOR)' ;;
  demo) filter='^DEMO' ;;
  bench) filter='^(BENCH|VMLOG|RESULT)' ;;
  probe) filter='^(PROBE|VMLOG)' ;;
  k8s) filter='^NODE' ;;
  *) echo "run.sh: unknown job $mode (e2e, demo, bench, probe, k8s)" >&2; exit 2 ;;
esac

if [ "$(echo $kernels | wc -w)" -gt 1 ]; then
  rc=0
  cache=${CACHE:-$(cd "$here/../.." && pwd)/.cache/vm}
  for k in $kernels; do rm -f "$cache/console-$mode-$k.log"; KERNEL=$k "$0" "$@" || rc=1; done
  if [ "$mode" = e2e ]; then
    # Each kernel's verdict again (tests/vm/results.sh): a kernel whose machine never ran counts as a failure.
    for k in $kernels; do "$here/results.sh" "$cache/console-e2e-$k.log" "$k" | tail -1 || true; done
  fi
  exit $rc
fi

kernel=$kernels
case "$kernel" in 6.12|7) ;; *) echo "run.sh: KERNEL=$kernel: 6.12 or 7" >&2; exit 2 ;; esac
export KERNEL=$kernel
trap 'echo "run.sh: KERNEL=$kernel: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
# The downloads and the initramfs, tried twice (a registry hiccup on a fresh machine must not fail the run),
# each failure said with the step that failed.
prepare() {
  cache=$("$here/fetch.sh" | tail -1) || { echo "run.sh: KERNEL=$kernel: fetching QEMU/the kernel failed" >&2; return 1; }
  CACHE=$cache "$here/cnitool.sh" >/dev/null || { echo "run.sh: building cnitool failed" >&2; return 1; }
  initrd=$(CACHE=$cache "$here/build-initramfs.sh" | tail -1) \
    || { echo "run.sh: KERNEL=$kernel: building the initramfs failed" >&2; return 1; }
}
prepare || { echo "run.sh: KERNEL=$kernel: preparing the machine failed; trying once more" >&2; prepare; }
kdir=$cache/kernel-$kernel
if [ "$mode" = k8s ]; then trap - ERR; exec "$here/../k8s/e2e.sh" "$kdir" "$initrd" "$cache"; fi
kver=$(ls "$kdir/lib/modules" | head -1)
log=$cache/console-$mode-$kernel.log
[ "$mode" = demo ] && echo "Booting the emulated SR-IOV machine (QEMU igb, Debian kernel $kver; ~15 s)..."
# -global q35-pcihost.pci-hole64-size=0 keeps the VF BARs below 4 GiB (the VF datapath and the PF mailbox
# need it); the two PFs share QEMU hub 0, a wire between them.
boot() {
  start=$(date +%s)
  raw=$log.raw
  : > "$raw"
  timeout 600 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 1024 -smp 2 -nographic -no-reboot \
    -machine q35 -global q35-pcihost.pci-hole64-size=0 -device intel-iommu,intremap=off \
    -netdev hubport,id=h0,hubid=0 -device igb,netdev=h0,addr=0x4 -netdev hubport,id=h1,hubid=0 -device igb,netdev=h1,addr=0x8 \
    -kernel "$kdir/boot/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 rdinit=/init intel_iommu=on sriov_rdma=$mode sriov_rdma_n=$n" >"$raw" 2>&1 </dev/null &
  qpid=$!
  tail -n +1 -f --pid=$qpid "$raw" | tr -d '\r' | sed -u -E 's/\x1b(\[[0-9;?]*[a-zA-Z]|c)//g' | tee "$log" \
    | grep -a --line-buffered -E "$filter" | sed -u -E -e 's/^(DEMO ?|BENCH )//' -e "s/^(RESULT|PROBE|ANCHOR) /\\1[$kernel] /" &
  fpid=$!
  # A TCG guest can wedge at boot (seen once: RCU stalls, a CPU's timer never firing): with no line from the
  # job after 180 s, it is stopped (by its PID) rather than left to the 600 s limit.
  while kill -0 $qpid 2>/dev/null; do
    sleep 2
    if [ $(( $(date +%s) - start )) -gt 180 ] && ! grep -aqE '(RESULT|DEMO|BENCH|PROBE) ' "$raw"; then
      echo "run.sh: the guest ($kver) printed nothing of its job in 180 s: stopping it" >&2
      kill $qpid 2>/dev/null; break
    fi
  done
  wait $qpid || true
  wait $fpid || true
  secs=$(( $(date +%s) - start ))
}
boot
# A run that did not finish is not booted again for e2e: a hang is a failure (results.sh prints the console's
# tail), and a second boot would only hide it. The other jobs are booted once more.
if [ "$mode" != e2e ] && ! grep -aq '^VMDONE' "$log"; then
  mv "$log" "$log.failed"
  echo "run.sh: the VM ($kver) did not finish after ${secs}s (console kept in $log.failed); booting it once more"
  boot
fi
if [ "$mode" = e2e ]; then
  echo "run.sh: e2e on $kver: ${secs}s (console log $log)"
  rc=0; "$here/results.sh" "$log" "$kernel" || rc=1
  exit $rc
fi
grep -aq '^VMDONE' "$log" || { echo "run.sh: the VM ($kver) did not finish after ${secs}s again (see $log)"; exit 1; }
[ "$mode" = demo ] || echo "run.sh: $mode on $kver: ${secs}s (console log $log)"
if [ "$mode" = bench ] && grep -aq '^RESULT setup FAIL' "$log"; then
  echo "run.sh: the emulated machine's setup failed; no benchmark"; exit 1
fi
