#!/bin/sh
# The Kubernetes node inside the emulated SR-IOV machine: PID 1 after init.sh has copied the initramfs into a
# tmpfs and switch_root'ed into it (runc pivot_roots into each container's root, which the kernel refuses
# while the root is the initramfs itself; a tmpfs root needs no runc option and no disk image, and its
# contents are the same initramfs the other jobs boot).
# Runs containerd and the kubelet under a supervisor loop each (as a service manager would: a daemon that
# dies is started again after a second), prints NODE lines on the console, and waits until it is powered off
# (the host stops QEMU by its PID).
# The run's /k8s/run/env may make it node B (tests/k8s/e2e.sh with K8S_NODE_B=crio): NODE_NAME, RUNTIME=crio
# (CRI-O, conmon, pinns and its images from tests/k8s/build-node-crio.sh's layer), PF_NAME and PF_VFS (its one igb
# PF renamed, with that many VFs), KUBELET_ARGS (its taint). Without them it is node A, as it always was.
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
. /k8s/run/env
NODE_NAME=${NODE_NAME:-localhost}; RUNTIME=${RUNTIME:-containerd}
hostname "$NODE_NAME"
if [ "$NODE_NAME" = localhost ]; then echo "127.0.0.1 localhost" > /etc/hosts
else echo "127.0.0.1 localhost $NODE_NAME" > /etc/hosts; fi
echo "root:x:0:0:root:/root:/bin/sh" > /etc/passwd; echo "root:x:0:" > /etc/group
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id
echo 1 > /proc/sys/net/ipv4/ip_forward

# The management NIC (QEMU user-mode network): the API server is the host's loopback, reached as 10.0.2.2;
# the host reaches the kubelet through a forwarded port. No default route: nothing leaves 10.0.2.0/24.
MG=""
for n in /sys/class/net/*; do
  [ "$(basename "$(readlink "$n/device/driver" 2>/dev/null)")" = virtio_net ] && MG=$(basename "$n")
done
[ -n "$MG" ] || die "no management NIC (virtio_net)"
ip link set lo up; ip addr add 10.0.2.15/24 dev "$MG"; ip link set "$MG" up

if [ -n "${PF_NAME:-}" ]; then
  # Node B: its one igb PF renamed PF_NAME (names differ between nodes, as on real clusters), MTU 9000 before
  # the VFs exist, PF_VFS VFs; the first VF must get carrier once up (its mailbox with the PF works).
  pf=""
  for n in /sys/class/net/*; do
    [ "$(basename "$(readlink "$n/device/driver" 2>/dev/null)")" = igb ] && pf=$(basename "$n")
  done
  [ -n "$pf" ] || die "no igb PF"
  ip link set "$pf" name "$PF_NAME" || die "renaming $pf to $PF_NAME failed"
  ip link set "$PF_NAME" mtu 9000; ip link set "$PF_NAME" up
  echo "$PF_VFS" > "/sys/class/net/$PF_NAME/device/sriov_numvfs" || die "$PF_VFS VFs on $PF_NAME refused"
  for i in $(seq 1 100); do [ -d "/sys/class/net/$PF_NAME/device/virtfn$((PF_VFS - 1))/net" ] && break; sleep 0.1; done
  vf0=$(ls "/sys/class/net/$PF_NAME/device/virtfn0/net" 2>/dev/null)
  [ -n "$vf0" ] || die "VF 0 of $PF_NAME has no netdev"
  ip link set "$vf0" up; car=""
  for i in $(seq 1 100); do car=$(cat "/sys/class/net/$vf0/carrier" 2>/dev/null); [ "$car" = 1 ] && break; sleep 0.1; done
  ip link set "$vf0" down
  [ "$car" = 1 ] || die "VF 0 of $PF_NAME ($vf0) has no carrier 10 s after link up"
  say "PF=$PF_NAME (was $pf) numvfs=$(cat "/sys/class/net/$PF_NAME/device/sriov_numvfs"), management NIC $MG, kernel $(uname -r)"
else
# The SR-IOV PFs and their VFs (vmlib.sh: MTU 9000 before the VFs exist, 7 VFs on the first PF, 2 on the
# second; in a subshell, as it exits on a failed setup).
( . /vmlib.sh ) > /tmp/vmlib.log 2>&1
grep -q '^RESULT setup PASS' /tmp/vmlib.log || die "SR-IOV setup: $(tr '\n' ' ' < /tmp/vmlib.log)"
say "$(grep '^VMLOG PF=' /tmp/vmlib.log | sed 's/^VMLOG //'), management NIC $MG, kernel $(uname -r)"
fi
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
if [ "$RUNTIME" = crio ]; then
  # CRI-O's images are in its containers/storage already: the containerd node's archives only take memory.
  rm -rf /images
  mkdir -p /var/lib/crio /var/log/crio
  supervise crio crio --config /etc/crio/crio.conf
  for i in $(seq 1 300); do [ -S /var/run/crio/crio.sock ] && break; sleep 0.3; done
  [ -S /var/run/crio/crio.sock ] || die "crio did not start: $(tail -5 /var/log/crio.log)"
  say "images: $(crictl images 2>&1 | awk 'NR > 1 { print $1 ":" $2 }' | tr '\n' ' ')"
else
supervise containerd containerd --config /etc/containerd/config.toml
for i in $(seq 1 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.3; done
[ -S /run/containerd/containerd.sock ] || die "containerd did not start: $(tail -5 /var/log/containerd.log)"
for t in /images/*.tar; do
  ctr -n k8s.io images import --local "$t" > /tmp/import.log 2>&1 \
    || die "importing $t: $(tr '\n' ' ' < /tmp/import.log)"
done
say "images: $(ctr -n k8s.io images ls -q | grep -v '^sha256' | tr '\n' ' ')"
fi
supervise kubelet kubelet --config=/k8s/run/kubelet.yaml --kubeconfig=/k8s/run/kubeconfig \
  --hostname-override="$NODE_NAME" --node-ip=10.0.2.15 --v=2 ${KUBELET_ARGS:-}
say "READY $RUNTIME and kubelet started"
# The daemons' first errors on the console (the host sees nothing else of the node until the kubelet registers).
for d in $RUNTIME kubelet; do
  ( tail -n +1 -f /var/log/$d.log | awk -v d=$d '/^[EF][0-9][0-9][0-9][0-9] |level=(error|fatal)|command failed|Error:/ {
      print "NODE log " d ": " substr($0, 1, 400); fflush(); if (++n >= 15) exit }' ) &
done
while :; do sleep 3600; done
