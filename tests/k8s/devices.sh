# What the device plugin itself hands a container (sourced by scenarios.sh): pods that request a resource and
# nothing else — unprivileged, no hostPath, no NAD (their VF's netdev stays on the node).
#   rdma-dev-1, rdma-dev-2: one VF each of sriov-rdma/rxe, whose RDMA device is the Soft-RoCE device e2e.sh made on
#     the VF's netdev on the node (the stand-in for the VF's own RDMA function; Soft-RoCE would not survive its
#     netdev's move into a pod, so these VFs' netdevs stay where they are). Each container must see exactly its
#     VF's uverbs device (and rdma_cm), open it (ibv_devinfo -d), and not see or open the other's.
#   rdma-vfio: the VF of sriov-rdma/vfio (bound to vfio-pci): its container opens /dev/vfio/<group>.
# node_verbs PCI: "<rdma device> <uverbsN>" of the Soft-RoCE device on the VF's netdev, as the node shows it
node_verbs() {
  onnode "n=\$(ls /sys/bus/pci/devices/$1/net); for u in /sys/class/infiniband_verbs/uverbs*; do
            d=\$(cat \$u/ibdev); [ \"\$(cat /sys/class/infiniband/\$d/ports/1/gid_attrs/ndevs/0 2>/dev/null)\" = \"\$n\" ] \
              && echo \$d \$(basename \$u); done" 2>/dev/null
}
{ devpod rdma-dev-1 sriov-rdma/rxe; echo ---; devpod rdma-dev-2 sriov-rdma/rxe; echo ---; devpod rdma-vfio sriov-rdma/vfio; } \
  | k apply -f - >/dev/null
ok=1
for p in rdma-dev-1 rdma-dev-2 rdma-vfio; do k wait --for=condition=Ready "pod/$p" --timeout=180s >/dev/null 2>&1 || ok=""; done
if [ -n "$ok" ]; then
  why=""; seen=""
  for p in rdma-dev-1 rdma-dev-2; do
    v=$(vf_of $p PCIDEVICE_SRIOV-RDMA_RXE)
    set -- $(node_verbs "$v"); dev=${1:-}; uv=${2:-}
    [ -n "$dev" ] && [ -n "$uv" ] || { why="$why $p: VF '$v' has no Soft-RoCE device on the node;"; continue; }
    list=$(inpod $p 'ls /dev/infiniband' 2>&1 | sort | tr '\n' ' ')
    want=$(printf '%s\n' "$uv" $(onnode 'ls /dev/infiniband/rdma_cm 2>/dev/null | xargs -r basename' 2>/dev/null) | sort | tr '\n' ' ')
    [ "$list" = "$want" ] || why="$why $p /dev/infiniband is '$list', not '$want';"
    out=$(inpod $p "ibv_devinfo -d $dev" 2>&1)
    echo "$out" | grep -q 'PORT_ACTIVE' || why="$why $p ibv_devinfo -d $dev: $(echo "$out" | tail -2 | tr '\n' ' ');"
    eval "DEV_${p//-/_}=$dev UV_${p//-/_}=$uv"
    seen="$seen $p:$dev/$uv"
  done
  # Each pod cannot reach the other's device: no character device, and ibv_devinfo cannot open it.
  for pair in "rdma-dev-1 rdma-dev-2" "rdma-dev-2 rdma-dev-1"; do
    set -- $pair
    od=$(eval echo "\${DEV_${2//-/_}:-}"); ou=$(eval echo "\${UV_${2//-/_}:-}")
    [ -n "$od" ] || continue
    inpod "$1" "test -e /dev/infiniband/$ou" 2>/dev/null && why="$why $1 sees $2's /dev/infiniband/$ou;"
    inpod "$1" "ibv_devinfo -d $od" >/dev/null 2>&1 && why="$why $1 opened $2's $od;"
  done
  [ "$(eval echo "\${DEV_rdma_dev_1:-x}")" != "$(eval echo "\${DEV_rdma_dev_2:-x}")" ] || why="$why both pods got the same device;"
  # The device-info file the device plugin wrote for Multus names the VF's RDMA device.
  v=$(vf_of rdma-dev-1 PCIDEVICE_SRIOV-RDMA_RXE)
  di=$(onnode "cat /var/run/k8s.cni.cncf.io/devinfo/dp/sriov-rdma-rxe-$v-device.json" 2>/dev/null)
  echo "$di" | grep -q "\"rdma-device\":\"${DEV_rdma_dev_1:-none}\"" || why="$why device-info of $v: '$di';"
  if [ -z "$why" ]; then pass "device-plugin-rdma-chardevs(unprivileged, no hostPath:$seen; each opens its own, not the other's)"
  else fail device-plugin-rdma-chardevs "$why"; fi
  # vfio: the container gets /dev/vfio/vfio and its VF's group, and opens the group.
  v=$(vf_of rdma-vfio PCIDEVICE_SRIOV-RDMA_VFIO)
  g=$(onnode "basename \$(readlink /sys/bus/pci/devices/$v/iommu_group)" 2>/dev/null)
  list=$(inpod rdma-vfio 'ls /dev/vfio' 2>&1 | sort | tr '\n' ' ')
  out=$(inpod rdma-vfio "exec 3<>/dev/vfio/$g && echo opened" 2>&1)
  if [ "$v" = "$VFIO" ] && [ -n "$g" ] && [ "$list" = "$(printf '%s\n' "$g" vfio | sort | tr '\n' ' ')" ] && [ "$out" = opened ]; then
    pass "device-plugin-vfio(rdma-vfio got $v: /dev/vfio/{vfio,$g}, opened /dev/vfio/$g)"
  else fail device-plugin-vfio "VF '$v' (want $VFIO) group '$g', /dev/vfio '$list', open: $out"; fi
else
  fail device-plugin-pods "not Ready: $(k get pods -o wide 2>&1 | grep -E 'rdma-(dev|vfio)' | tr '\n' ' ') $(k describe pod rdma-dev-1 | grep -A6 Events | tail -4 | tr '\n' ' ')"
fi
k delete pod rdma-dev-1 rdma-dev-2 rdma-vfio --ignore-not-found --wait=false >/dev/null
gone rdma-dev-1 rdma-dev-2 rdma-vfio
