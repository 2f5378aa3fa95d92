#!/usr/bin/env bash
# The attach/detach of one VF, shown on this host with a stand-in: a veth end plays the VF netdev behind a
# small fake sysfs PCI tree (this kernel has no SR-IOV NIC). Needs root and a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/sriov-rdma
work=$(mktemp -d /tmp/sriov-rdma-demo.XXXXXX)
ns=sriov-rdma-demo
pf=demopf0; vf=demopf0v1; pci=0000:3b:02.1; pfpci=0000:3b:00.0
cleanup() { ip netns del $ns 2>/dev/null || true; ip link del $pf 2>/dev/null || true; ip link del $vf 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cleanup; mkdir -p "$work"

ip link add $pf type veth peer name ${pf}p
ip link add $vf type veth peer name ${vf}p
ip link set $vf mtu 1500
d=$work/sys/bus/pci/devices
mkdir -p $d/$pfpci/net/$pf $d/$pci/net/$vf $work/sys/class/net/$pf
echo "a test tree: no namespace-tagged view" > $work/sys/.sriov-rdma-fixture   # so the plugin reads it as it is
echo 8 > $d/$pfpci/sriov_totalvfs
ln -s ../$pfpci $d/$pci/physfn; ln -s ../$pci $d/$pfpci/virtfn1
ln -s ../../../bus/pci/drivers/igbvf $d/$pci/driver
ln -s ../../../bus/pci/devices/$pfpci $work/sys/class/net/$pf/device
ip netns add $ns

export SRIOV_RDMA_SYSFS=$work/sys SRIOV_RDMA_STATE_DIR=$work/state
export CNI_CONTAINERID=demo CNI_NETNS=/var/run/netns/$ns CNI_IFNAME=net1 CNI_PATH=/usr/lib/cni
conf='{"cniVersion":"1.1.0","name":"rdma-demo","type":"sriov-rdma","deviceID":"'$pci'","mtu":9000,
       "ipam":{"type":"static","addresses":[{"address":"10.56.217.10/24","gateway":"10.56.217.1"}]}}'

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say "host before ADD: VF $pci is $vf"
ip -o link show $vf | cut -d\\ -f1-5
say "ADD (CNI result on stdout)"
result=$(echo "$conf" | CNI_COMMAND=ADD $bin)
echo "$result" | python3 -m json.tool
say "pod's view (ip -n $ns addr)"
ip -n $ns -br addr
ip -n $ns -d link show net1 | head -2
say "host: $vf is gone"
ip -br link show $vf 2>&1 || true
say "attachment record"
cat $SRIOV_RDMA_STATE_DIR/$pci.json
say "CHECK"
check=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c["prevResult"]=json.loads(sys.argv[2]); print(json.dumps(c))' "$conf" "$result")
echo "$check" | CNI_COMMAND=CHECK $bin && echo "CHECK ok"
say "DEL"
echo "$conf" | CNI_COMMAND=DEL $bin && echo "DEL ok"
say "host after DEL: name, MTU, MAC as before"
ip -o link show $vf | cut -d\\ -f1-5
ip -br link show $vf
ls $SRIOV_RDMA_STATE_DIR
