#!/bin/sh
# The Kubernetes node inside the emulated SR-IOV machine: PID 1 after init.sh has copied the initramfs into a
# tmpfs and switch_root'ed into it (runc pivot_roots into each container's root, which the kernel refuses
# while the root is the initramfs itself; a tmpfs root needs no runc option and no disk image, and its
# contents are the same initramfs the other jobs boot).
# Runs containerd and the kubelet under a supervisor loop each (as a service manager would: a daemon that
# dies is started again after a second), prints NODE lines on the console, and waits until it is powered off
# (the host stops QEMU by its PID).
export PATH=/bin:/usr/bin:/usr/sbin:/opt/cni/bin
ip() { /usr/sbin/ip "$@"; }
say() { echo "NODE $*"; }
# PID 1 must not exit (the kernel panics): a node that cannot start says why and powers off.
die() { say "FAIL $*"; poweroff -f; sleep 60; }
mount -t tmpfs tmp /tmp 2>/dev/null; mount -t tmpfs run /run 2>/dev/null
mkdir -p /run/netns /var/log/sriov-rdma /var/lib/kubelet /var/lib/containerd /etc/cni/net.d
# cgroup v2 with the controllers the kubelet requires delegated to the tree.
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+cpu +cpuset +memory +pids +io" > /sys/fs/cgroup/cgroup.subtree_control
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts 2>/dev/null; mount -t tmpfs shm /dev/shm 2>/dev/null
# Mounts propagate into containers (kubelet volumes, containerd's snapshots): the root is a shared mount.
mount --make-rshared /
hostname localhost
echo "127.0.0.1 localhost" > /etc/hosts
echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd; echo "root:x:0:" > /etc/group
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id
echo 1 > /proc/sys/net/ipv4/ip_forward

. /k8s/run/env
# The management NIC (QEMU user-mode network): the API server is the host's loopback, reached as 10.0.2.2;
# the host reaches the kubelet through a forwarded port. No default route: nothing leaves 10.0.2.0/24.
MG=""
for n in /sys/class/net/*; do
  [ "$(basename "$(readlink "$n/device/driver" 2>/dev/null)")" = virtio_net ] && MG=$(basename "$n")
done
[ -n "$MG" ] || die "no management NIC (virtio_net)"
ip link set lo up; ip addr add 10.0.2.15/24 dev "$MG"; ip link set "$MG" up

# The SR-IOV PFs and their VFs (vmlib.sh: MTU 9000 before the VFs exist, 7 VFs on the first PF, 2 on the
# second; in a subshell, as it exits on a failed setup).
( . /vmlib.sh ) > /tmp/vmlib.log 2>&1
grep -q '^RESULT setup PASS' /tmp/vmlib.log || die "SR-IOV setup: $(tr '\n' ' ' < /tmp/vmlib.log)"
say "$(grep '^VMLOG PF=' /tmp/vmlib.log | sed 's/^VMLOG //'), management NIC $MG, kernel $(uname -r)"
# The node starts without the plugin: the installer DaemonSet puts it into /opt/cni/bin.
rm -f /opt/cni/bin/sriov-rdma

supervise() { # supervise NAME COMMAND...: runs it, starts it again a second after it exits (and after
                # /run/hold-NAME is gone: the node-crash scenario holds both daemons down for a while)
  name=$1; shift
  ( while :; do
      while [ -e /run/hold-$name ]; do sleep 0.5; done
      "$@" >> /var/log/$name.log 2>&1
      echo "supervise: $name exited ($?), starting again" >> /var/log/$name.log
      sleep 1
    done ) &
  echo $! > /run/supervise-$name.pid
}
supervise containerd containerd --config /etc/containerd/config.toml
for i in $(seq 1 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.3; done
[ -S /run/containerd/containerd.sock ] || die "containerd did not start: $(tail -5 /var/log/containerd.log)"
for t in /images/*.tar; do
  ctr -n k8s.io images import --local "$t" > /tmp/import.log 2>&1 \
    || die "importing $t: $(tr '\n' ' ' < /tmp/import.log)"
done
say "images: $(ctr -n k8s.io images ls -q | grep -v '^sha256' | tr '\n' ' ')"
supervise kubelet kubelet --config=/k8s/run/kubelet.yaml --kubeconfig=/k8s/run/kubeconfig \
  --hostname-override=localhost --node-ip=10.0.2.15 --v=2
say "READY containerd and kubelet started"
# The daemons' first errors on the console (the host sees nothing else of the node until the kubelet registers).
for d in containerd kubelet; do
  ( tail -n +1 -f /var/log/$d.log | awk -v d=$d '/^[EF][0-9][0-9][0-9][0-9] |level=(error|fatal)|command failed|Error:/ {
      print "NODE log " d ": " substr($0, 1, 400); fflush(); if (++n >= 15) exit }' ) &
done
while :; do sleep 3600; done
