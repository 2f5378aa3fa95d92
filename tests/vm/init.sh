#!/bin/sh
# PID 1 of the emulated SR-IOV machine: mount, load the drivers, run the job named on the kernel command
# line (sriov_rdma=e2e|demo|bench|probe|k8s), power off (k8s: becomes the Kubernetes node, tests/k8s/node.sh).
export PATH=/bin:/usr/bin:/usr/sbin:/opt/cni/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mkdir -p /run/netns /var/lib
ok=0
for m in /mods/*; do insmod "$m" 2>/dev/null && ok=$((ok+1)) || echo "VMLOG insmod $m failed"; done
echo "VMLOG kernel $(uname -r), $ok/$(ls /mods | wc -l) modules loaded"
mode=e2e; rounds=20
for a in $(cat /proc/cmdline); do
  case "$a" in sriov_rdma=*) mode=${a#sriov_rdma=} ;; sriov_rdma_n=*) rounds=${a#sriov_rdma_n=} ;; esac
done
case "$mode" in
  # The Kubernetes node: the root is copied into a tmpfs and entered with switch_root (runc cannot pivot_root
  # out of the initramfs root; see tests/k8s/node.sh), which then is PID 1 until QEMU is stopped.
  k8s) umount /tmp /run
       mkdir /newroot && mount -t tmpfs -o size=75% root /newroot
       for d in /*; do case "$d" in /proc|/sys|/dev|/newroot) ;; *) cp -a "$d" /newroot/ ;; esac; done
       mkdir -p /newroot/proc /newroot/sys /newroot/dev
       for m in proc sys dev; do mount --move /$m /newroot/$m; done
       echo "VMLOG k8s: root copied into a tmpfs ($(du -sm /newroot | cut -f1) MiB), switch_root to /k8s/node.sh"
       exec switch_root /newroot /bin/sh /k8s/node.sh ;;
  demo) sh /demo.sh 2>&1 ;;
  probe) sh /rdma-probe.sh 2>&1 ;;
  # In a subshell: a failed setup exits it (not PID 1) and its RESULT line is printed.
  # rdma-cni (the chained anchor row) needs the RDMA subsystem in exclusive netns mode, which can be set only
  # while no netns but the host's exists: before cni-bench makes its pod namespaces.
  bench) ( . /vmlib.sh >/tmp/setup.log; grep '^RESULT setup' /tmp/setup.log
         /usr/sbin/rdma system set netns exclusive 2>&1 | sed 's/^/BENCH rdma system set netns exclusive: /'
         echo "BENCH RDMA $(/usr/sbin/rdma system show 2>&1 | head -1) (rdma system show); RDMA devices: $(/usr/sbin/rdma dev 2>&1 | wc -l)"
         /usr/sbin/cni-bench --vfs "$(VFP 1),$(VFP 0),$(VFP 2),$(VFP 3),$(VFP 4),$(VFP 5),$(VFP 6)" "$rounds" 2>&1 | sed 's/^/BENCH /' )
         grep -q '^RESULT setup PASS' /tmp/setup.log || grep '^RESULT setup FAIL' /tmp/setup.log ;;
  # scenarios.sh ends with SCENARIOSDONE; its exit status is said too (tests/vm/results.sh).
  *) sh /scenarios.sh 2>&1; echo "VMLOG scenarios.sh exit status $?" ;;
esac
echo "VMDONE"
# poweroff -f shuts the devices down and can block behind a hung kernel worker; a sysrq reboot skips that
# (QEMU runs with -no-reboot, so it exits either way).
poweroff -f &
sleep 10
echo "VMLOG poweroff -f still blocked after 10 s: sysrq reboot"
echo b > /proc/sysrq-trigger
