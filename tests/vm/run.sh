#!/usr/bin/env bash
# Boots the emulated SR-IOV machine (QEMU igb PFs with real VFs, TCG) and runs one job in it:
#   run.sh e2e        the scenarios; fails on any failed scenario       (make e2e)
#   run.sh demo       attach/detach one VF with cnitool, readable      (make demo)
#   run.sh bench [N]  ADD+DEL of a real VF against the kernel floor     (make bench-vm)
set -euo pipefail
mode=${1:-e2e}; n=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
cache=$("$here/fetch.sh" | tail -1)
CACHE=$cache "$here/cnitool.sh" >/dev/null
initrd=$(CACHE=$cache "$here/build-initramfs.sh" | tail -1)
log=$cache/console-$mode.log
case "$mode" in
  e2e) filter='^(RESULT|VMLOG)' ;;
  demo) filter='^DEMO' ;;
  bench) filter='^(BENCH|VMLOG)' ;;
  *) echo "run.sh: unknown job $mode (e2e, demo, bench)" >&2; exit 2 ;;
esac
[ "$mode" = demo ] && echo "Booting the emulated SR-IOV machine (QEMU igb, Debian 6.12 kernel; ~15 s)..."
timeout 600 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 1024 -smp 2 -nographic -no-reboot \
  -machine q35 -global q35-pcihost.pci-hole64-size=0 -device intel-iommu,intremap=off \
  -netdev hubport,id=h0,hubid=0 -device igb,netdev=h0,addr=0x4 -netdev hubport,id=h1,hubid=0 -device igb,netdev=h1,addr=0x8 \
  -kernel "$cache/kernel/boot/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init intel_iommu=on sriov_rdma=$mode sriov_rdma_n=$n" 2>&1 \
  | tr -d '\r' | sed -u -E 's/\x1b(\[[0-9;?]*[a-zA-Z]|c)//g' | tee "$log" | grep -a --line-buffered -E "$filter" | sed -u -E 's/^(DEMO ?|BENCH )//' || true
grep -aq '^VMDONE' "$log" || { echo "run.sh: the VM did not finish (see $log)"; exit 1; }
if [ "$mode" = e2e ]; then
  pass=$(grep -ac '^RESULT .* PASS' "$log" || true); failn=$(grep -ac '^RESULT .* FAIL' "$log" || true)
  echo "e2e: $pass passed, $failn failed"
  [ "$failn" = 0 ] && [ "$pass" -gt 0 ]
fi
