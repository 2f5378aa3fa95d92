#!/usr/bin/env bash
# make e2e: boots the emulated SR-IOV machine (QEMU igb, TCG), runs the scenarios, fails on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
cache=$("$here/fetch.sh" | tail -1)
initrd=$(CACHE=$cache "$here/build-initramfs.sh" | tail -1)
log=$cache/console.log
timeout 300 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 1024 -smp 2 -nographic -no-reboot \
  -machine q35 -device intel-iommu,intremap=off \
  -netdev user,id=n0 -device igb,netdev=n0,addr=0x4 -netdev user,id=n1 -device igb,netdev=n1,addr=0x8 \
  -kernel "$cache/kernel/boot/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init" > "$log" 2>&1 || true
grep -a -E '^(RESULT|VMLOG)' "$log" | tr -d '\r'
grep -aq '^VMDONE' "$log" || { echo "e2e: the VM did not finish (see $log)"; exit 1; }
pass=$(grep -ac '^RESULT .* PASS' "$log" || true); failn=$(grep -ac '^RESULT .* FAIL' "$log" || true)
echo "e2e: $pass passed, $failn failed"
[ "$failn" = 0 ] && [ "$pass" -gt 0 ]
