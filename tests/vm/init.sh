#!/bin/sh
# PID 1 of the emulated SR-IOV machine: mount, load the NIC drivers, enable VFs, run the scenarios, power off.
export PATH=/bin:/usr/sbin:/opt/cni/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run; mkdir -p /run/netns /var/lib
for m in /mods/*; do insmod "$m" || echo "VMLOG insmod $m failed"; done
sh /scenarios.sh 2>&1
echo "VMDONE"
poweroff -f
