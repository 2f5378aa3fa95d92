#!/bin/sh
# DEL and ADD with a VF named as systemd names it (`<pf>v<n>`), on a real igb VF: the name DEL's spare would be.
# Sourced by scenarios.sh (after the other scenarios, VF 4 free; before doctor.sh, which cycles the PF's link).
P4=$(VFP 4); V4=$(VFN 4); SD=$(printf '%.12sv4' "$PF")
ip link set "$V4" down; ip link set "$V4" name "$SD"
MAC4=$(cat /sys/class/net/$SD/address)
C24='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P4'","rdma":"off","mtu":9000}'

# 1. While the VF is in the pod another device takes its host name: DEL brings the VF back under a free name
# (`<pf>v4r1`), never failing `File exists` for ever.
ip netns add pod24
R=$(cni ADD c24 /var/run/netns/pod24 net1 "$C24"); E=$(cat /tmp/err)
IN=$(ip -n pod24 -o link show net1 2>&1)
ip link add "$SD" type veth peer name "${SD}q"
cni DEL c24 /var/run/netns/pod24 net1 "$C24"; RC=$?; E2=$(cat /tmp/err)
NOW=$(ls /sys/bus/pci/devices/$P4/net 2>/dev/null)
case "$IN" in *net1*) ;; *) RC="no net1 in the pod after ADD: $R $E" ;; esac
if [ "$RC" = 0 ] && [ "$NOW" = "${SD}r1" ] && [ "$(cat /sys/class/net/${SD}r1/address)" = "$MAC4" ] \
   && ! ip -n pod24 link show net1 >/dev/null 2>&1 && [ ! -e /var/lib/cni/sriov-rdma/$P4.json ]; then
  pass "del-vf-with-systemd-name-comes-back-under-a-free-name($NOW)"
else
  fail del-vf-with-systemd-name-comes-back-under-a-free-name "rc=$RC, VF's netdev now '$NOW', $E2"
fi
ip link del "$SD" 2>/dev/null
ip link set "$NOW" name "$SD" 2>/dev/null
ip netns del pod24

# 2. The pod's namespace is destroyed without a DEL (the kernel hands the VF back as net1), and the same container
# is added again (podman restarts a container under its ID): ADD reclaims its own orphan and goes on.
ip netns add pod25
R=$(cni ADD c25 /var/run/netns/pod25 net1 "$C24"); E=$(cat /tmp/err)
ip netns del pod25
for i in $(seq 1 50); do [ -n "$(ls /sys/bus/pci/devices/$P4/net 2>/dev/null)" ] && break; sleep 0.1; done
BACK=$(ls /sys/bus/pci/devices/$P4/net 2>/dev/null)
ip netns add pod25b
R2=$(cni ADD c25 /var/run/netns/pod25b net1 "$C24"); E2=$(cat /tmp/err)
if ip -n pod25b link show net1 >/dev/null 2>&1 && [ -z "$(ls /sys/bus/pci/devices/$P4/net 2>/dev/null)" ] \
   && grep -q '"netns": *"/var/run/netns/pod25b"' /var/lib/cni/sriov-rdma/$P4.json 2>/dev/null; then
  pass "orphan-of-the-same-container-reclaimed-by-its-add(back as $BACK)"
else
  fail orphan-of-the-same-container-reclaimed-by-its-add "back as '$BACK'; first ADD: $R $E; second: $R2 $E2"
fi
cni DEL c25 /var/run/netns/pod25b net1 "$C24" || echo "VMLOG DEL c25: $(cat /tmp/err)"
ip netns del pod25b
NOW=$(ls /sys/bus/pci/devices/$P4/net 2>/dev/null)
[ "$NOW" = "$SD" ] || echo "VMLOG VF 4 is $NOW after DEL, not $SD"

# 3. A VF the kubelet manages (a checkpoint in its format stands in for the kubelet's) whose RDMA device is Soft-RoCE
# on its netdev: the device plugin gave the pod's containers that device's character devices, and moving the netdev
# destroys it, so ADD refuses (code 7) before any change: the netdev, its rxe and the PF row stay as they were.
KD=/tmp/kubelet-dp; mkdir -p $KD
printf '{"Data":{"PodDeviceEntries":[{"PodUID":"u26","ContainerName":"main","ResourceName":"rdma/rxe","DeviceIDs":{"-1":["%s"]},"AllocResp":"CgA="}],"RegisteredDevices":{"rdma/rxe":["%s"]}},"Checksum":2863311530}' \
  "$P4" "$P4" > $KD/kubelet_internal_checkpoint
rdma link add rxe_l4 type rxe netdev "$NOW" || echo "VMLOG rdma link add rxe_l4 failed"
ROW=$(vfline 4)
ip netns add pod26
C26='{"cniVersion":"1.0.0","name":"vmnet","type":"sriov-rdma","deviceID":"'$P4'","vlan":26}'
R=$(echo "$C26" | SRIOV_RDMA_KUBELET_DIR=$KD CNI_ARGS="K8S_POD_UID=u26" CNI_COMMAND=ADD CNI_CONTAINERID=c26 \
  CNI_NETNS=/var/run/netns/pod26 CNI_IFNAME=net1 $PLUGIN 2>/tmp/err)
case "$R" in
  *'"code":7'*Soft-RoCE*)
    if [ -e /sys/class/net/$NOW ] && rdma dev show rxe_l4 >/dev/null 2>&1 && [ "$ROW" = "$(vfline 4)" ] \
       && ! ip -n pod26 link show net1 >/dev/null 2>&1 && [ ! -e /var/lib/cni/sriov-rdma/$P4.json ]; then
      pass "soft-roce-of-a-kubelet-vf-never-moved(refused, netdev and rxe_l4 kept)"
    else fail soft-roce-of-a-kubelet-vf-never-moved "state changed: $(vfline 4) $(rdma dev | tr '\n' ' ')"; fi ;;
  *) fail soft-roce-of-a-kubelet-vf-never-moved "$R $(cat /tmp/err | tr '\n' ' ')" ;;
esac
rdma link delete rxe_l4 2>/dev/null
ip netns del pod26; rm -rf $KD
ip link set "$NOW" down 2>/dev/null; ip link set "$NOW" name "$V4" 2>/dev/null
