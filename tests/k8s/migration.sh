# A live node taken from the anchors' stack to this project and back, as docs/migration.md tells it, with kubectl
# only (sourced by e2e.sh after helm.sh, before scenarios.sh; K8S_ONLY=migration.sh runs it alone). The node is as
# the set-up (or helm.sh) left it: the kustomize overlay's DaemonSet offers sriov-rdma/pf1, pf2, rxe and vfio, no
# node policy is installed; this file leaves it so again (the overlay applied, nothing of the anchors' on it).
#  1. the anchors from scripts/anchors.sh (their Go module, or the checked release build): sriov-cni v2.10.0 and
#     rdma-cni v1.6.0 copied into /opt/cni/bin by a DaemonSet as sriov-cni's own does (image localhost/sriov-cni),
#     sriovdp v3.11.0 in localhost/sriovdp (tests/k8s/build-images.sh);
#  2. this project's DaemonSet deleted; sriovdp deployed as its docs deploy it (ConfigMap sriovdp-config with its
#     config.json at /etc/pcidp/config.json, the kubelet's device-plugin directories, sysfs, /dev); NADs of
#     "type": "sriov" on its resource; two pods;
#  3. the switch: sriovdp's DaemonSet and ConfigMap deleted, this project's applied with the same config.json, the
#     NADs' "type" changed and nothing else; the old pods keep running and their delete is undone by sriov-cni
#     (Multus runs DEL with the delegate it cached at ADD), new pods come up on sriov-rdma;
#  4. the way back, the same in reverse; the node restored.
# Each stack's figures (pod start, the device plugin's RSS and idle CPU, allocatable after the device plugin's pod
# is deleted while pods hold VFs) are printed as lines of the run, not asserted.
# The resource: sriovdp's resourceList entry mig.example.com/pf1, PF1's igbvf VFs 0-3 ("pfNames": ["PF1#0-3"]):
# the VFs the overlay's sriov-rdma/pf1 offers (4 is bound to vfio-pci, 5 and 6 carry Soft-RoCE devices).

MIG=$work/migration; mkdir -p "$MIG"
MIG_RES=mig.example.com/pf1
MIG_ENV=PCIDEVICE_MIG_EXAMPLE_COM_PF1
MIG_IDLE=${MIG_IDLE:-60}
mig_overlay_config=$(k -n kube-system get configmap sriov-rdma-config -o 'jsonpath={.data.config\.json}' 2>/dev/null)
# node status of the resource: capacity/allocatable
mig_cap() { k get node localhost -o "jsonpath={.status.capacity.${MIG_RES//./\\.}}/{.status.allocatable.${MIG_RES//./\\.}}" 2>/dev/null; }
mig_alloc() { k get node localhost -o "jsonpath={.status.allocatable.${MIG_RES//./\\.}}" 2>/dev/null; }
mig_wait_alloc() { # mig_wait_alloc WANT SECONDS: sets MIG_A
  local i
  for i in $(seq 1 "$2"); do MIG_A=$(mig_alloc); [ "$MIG_A" = "$1" ] && return 0; sleep 1; done
  return 1
}
mig_pods_of() { k -n kube-system get pods -l "$1" -o 'jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].ready}{"\n"}{end}' 2>/dev/null; }
mig_ds_ready() { # mig_ds_ready DS SECONDS: one pod of the DaemonSet, Ready
  local i
  for i in $(seq 1 "$2"); do
    [ "$(k -n kube-system get ds "$1" -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null)" = 1/1 ] && return 0
    sleep 1
  done
  return 1
}
mig_no_pods() { local i; for i in $(seq 1 "$2"); do [ -z "$(mig_pods_of "$1")" ] && return 0; sleep 1; done; return 1; }
mig_ms() { date +%s%3N; }
mig_median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "none"; else if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
# What must come back: per VF of both PFs, its index, PCI address, netdev name and MTU on the node and its row in
# the PF's VF table (VLAN, spoof checking, trust, admin MAC); MACs apart (printed, not compared).
mig_snap() {
  onnode "for pf in $PF1 $PF2; do rows=\$(/usr/sbin/ip link show \$pf); for v in /sys/class/net/\$pf/device/virtfn*; do
      i=\${v##*virtfn}; p=\$(basename \$(readlink \$v)); n=\$(ls /sys/bus/pci/devices/\$p/net 2>/dev/null)
      r=\$(echo \"\$rows\" | awk -v i=\$i '\$1 == \"vf\" && \$2 == i' | tr -s ' ')
      echo \"\$pf vf\$i \$p name=\$n mtu=\$(cat /sys/class/net/\$n/mtu 2>/dev/null) row=\$r\"; done; done" 2>&1
}
mig_macs() { onnode "for v in /sys/class/net/$PF1/device/virtfn* /sys/class/net/$PF2/device/virtfn*; do p=\$(basename \$(readlink \$v)); n=\$(ls /sys/bus/pci/devices/\$p/net 2>/dev/null); echo \$p \$(cat /sys/class/net/\$n/address 2>/dev/null); done" 2>&1; }
mig_records() { onnode 'ls /var/lib/cni/sriov-rdma 2>/dev/null | grep -v "[.]lock$" | tr "\n" " "' 2>/dev/null; }
# sriov-cni's own files: the network config it saves at ADD for DEL (/var/lib/cni/sriov/<container>-<ifname>) and
# its allocation files (pci/<pci>); mig_sriov_confs counts the first
mig_sriov_cache() { onnode 'cd /var/lib/cni/sriov 2>/dev/null && ls -d * pci/0000* 2>/dev/null | grep -v "^pci$" | tr "\n" " "' 2>/dev/null; }
mig_sriov_confs() { echo "$1" | tr ' ' '\n' | grep -v -e '^pci/' -e '^$' | wc -l; }
# mig_row PCI: the PF1 VF table row of that VF ("" when it is no VF of PF1)
mig_row() { echo "$(mig_snap)" | awk -v p="$1" '$3 == p { sub(/.* row=/, ""); print }'; }
mig_line() { echo "$2" | awk -v p="$1" '$3 == p'; }
mig_pod_vf() { k exec "$1" -- sh -c "tr '\\0' '\\n' < /proc/1/environ" 2>/dev/null | sed -n "s/^$MIG_ENV=//p"; }
mig_net1() { k exec "$1" -- sh -c 'echo $(basename $(readlink /sys/class/net/net1/device)) $(cat /sys/class/net/net1/carrier)' 2>/dev/null; }
mig_nad() { # mig_nad NAME TYPE VLAN SPOOFCHK TRUST FIRST LAST: the NAD an sriov-cni user has (host-local IPAM)
  cat <<EOF
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: $1
  namespace: default
  annotations:
    k8s.v1.cni.cncf.io/resourceName: $MIG_RES
spec:
  config: '{"cniVersion":"1.0.0","name":"$1","type":"$2","vlan":$3,"spoofchk":"$4","trust":"$5","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24","rangeStart":"10.9.0.$6","rangeEnd":"10.9.0.$7"}]],"dataDir":"/var/lib/cni/mig-ipam"}}'
EOF
}
mig_pod() { vf_pod "$1" "$2" "$MIG_RES"; } # mig_pod NAME NAD: an unprivileged pod asking for one VF of the resource
# The settings each NAD asks for, as the PF's VF table prints them.
mig_want_row() { case $1 in mig-a) echo 'vlan 210,.*spoof checking on,.*trust on' ;; mig-b) echo 'vlan 211,.*spoof checking off,.*trust off' ;; esac; }
# mig_start STACK P1 P2: applies two pods (P1 on mig-a, P2 on mig-b), waits for Ready and net1 carrier, checks
# each pod's VF (the device plugin's variable = net1's device, one of PF1's VFs 0-3) and its PF row; sets
# MIG_WHY, MIG_VFS ("pod=pci ..."), appends the apply → Ready times to $MIG/start-STACK
mig_start() {
  local st=$1 p n t vf idx row i a0 a1
  MIG_WHY=""; MIG_VFS=""
  a0=$(mig_kubelet_alloc)
  t=$(mig_ms)
  { mig_pod "$2" mig-a; echo ---; mig_pod "$3" mig-b; } | k apply -f - >/dev/null
  for p in "$2" "$3"; do
    k wait --for=condition=Ready "pod/$p" --timeout=240s >/dev/null 2>&1 \
      || { MIG_WHY="$MIG_WHY $p not Ready: $(k get events --field-selector involvedObject.name=$p -o 'jsonpath={.items[*].message}' 2>&1 | tail -c 400);"; continue; }
    for i in $(seq 1 50); do [ "$(mig_net1 "$p" | cut -d' ' -f2)" = 1 ] && break; sleep 0.2; done
    echo $(( $(mig_ms) - t )) >> "$MIG/start-$st"
    vf=$(mig_pod_vf "$p"); n=$(mig_net1 "$p")
    [ -n "$vf" ] && [ "$n" = "$vf 1" ] || MIG_WHY="$MIG_WHY $p: $MIG_ENV='$vf', net1 device/carrier '$n';"
    idx=$(mig_line "$vf" "$(mig_snap)" | awk '{ print $2 }')
    case "$idx" in vf0|vf1|vf2|vf3) ;; *) MIG_WHY="$MIG_WHY $p: VF $vf is '$idx', not one of $PF1's VFs 0-3;" ;; esac
    case $p in "$2") n=mig-a ;; *) n=mig-b ;; esac
    row=$(mig_row "$vf")
    echo "$row" | grep -Eq "$(mig_want_row $n)" || MIG_WHY="$MIG_WHY $p ($n): $PF1 row of $vf '$row';"
    MIG_VFS="$MIG_VFS $p=$vf"
  done
  # The kubelet timed one Allocate per pod (one container, one VF each).
  a1=$(mig_kubelet_alloc)
  if [ -n "$a0" ] && [ -n "$a1" ]; then
    set -- $a0 $a1
    echo "$(( ${3%.*} - ${1%.*} )) $(awk -v a="$2" -v b="$4" 'BEGIN { printf "%.6f", b - a }')" >> "$MIG/alloc-$st"
    [ "$(( ${3%.*} - ${1%.*} ))" = 2 ] || MIG_WHY="$MIG_WHY the kubelet timed $(( ${3%.*} - ${1%.*} )) Allocate calls of $MIG_RES for two pods ($a0 → $a1);"
  else MIG_WHY="$MIG_WHY the kubelet's metrics (kubelet_device_plugin_alloc_duration_seconds) could not be read: '$a0' → '$a1';"; fi
}
mig_vf() { echo "$MIG_VFS" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
# mig_gone_check P...: after the pods are deleted, each one's VF is back as in the snapshot before (row, name, MTU)
mig_gone_check() {
  local p vf now i
  MIG_WHY=""
  k delete pod "$@" --wait=false >/dev/null 2>&1
  for p in "$@"; do k wait --for=delete "pod/$p" --timeout=120s >/dev/null 2>&1 || MIG_WHY="$MIG_WHY $p not deleted;"; done
  for i in $(seq 1 30); do
    now=$(mig_snap); MIG_WHY_VF=""
    for p in "$@"; do
      vf=$(mig_vf "$p")
      [ -n "$vf" ] && [ "$(mig_line "$vf" "$now")" = "$(mig_line "$vf" "$MIG0")" ] \
        || MIG_WHY_VF="$MIG_WHY_VF $p's VF '$vf': '$(mig_line "$vf" "$now")', before '$(mig_line "$vf" "$MIG0")';"
    done
    [ -z "$MIG_WHY_VF" ] && break; sleep 1
  done
  MIG_WHY="$MIG_WHY$MIG_WHY_VF"
}
mig_pid() { # mig_pid CMDLINE-PREFIX: the node's process whose command line starts so
  onnode "for p in /proc/[0-9]*; do tr '\\0' ' ' < \$p/cmdline 2>/dev/null | grep -q '^$1' && basename \$p; done" 2>/dev/null | head -1
}
# mig_idle PID: the process's CPU over MIG_IDLE idle seconds, sampled on the node every second with shell builtins
# only (nothing forked there while it runs): per thread, the time on a CPU in ns (/proc/PID/task/TID/schedstat)
# and the voluntary context switches (sleeps and wake-ups); a thread that ends keeps what it used until its last
# sample. Prints "CPU-MS WAKEUPS SECONDS BY-THREAD", BY-THREAD the threads' names with their ms and wake-ups
# (name=ms/wake-ups, comma-separated, those that used any).
mig_idle() {
  onnode "n=0; while [ \$n -le $MIG_IDLE ]; do read up x < /proc/uptime; echo U \$up
      for t in /proc/$1/task/*; do w=; while read k v; do [ \"\$k\" = voluntary_ctxt_switches: ] && w=\$v; done < \$t/status
        read c < \$t/comm; read ns x < \$t/schedstat && echo T \$n \${t##*/} \$ns \$w \$c; done
      n=\$((n + 1)); sleep 1; done" 2>/dev/null | awk '
    $1 == "U" { if (u0 == "") u0 = $2; u1 = $2 }
    $1 == "T" { if ($2 == 0) { f[$3] = $4; fw[$3] = $5 } l[$3] = $4; lw[$3] = $5; c[$3] = $6 }
    END {
      for (t in l) { d = l[t] - f[t]; e = lw[t] - fw[t]; ns += d; w += e; bn[c[t]] += d; bw[c[t]] += e }
      for (n in bn) if (bn[n] > 0 || bw[n] > 0) by = by (by == "" ? "" : ",") sprintf("%s=%.1f/%d", n, bn[n] / 1e6, bw[n])
      if (u0 != "") printf "%.1f %d %.0f %s\n", ns / 1e6, w, u1 - u0, by
    }'
}
# mig_kubelet_alloc: the kubelet's own timing of the Allocate calls for MIG_RES, from its /metrics (histogram
# kubelet_device_plugin_alloc_duration_seconds; asked as the API server asks the kubelet, with its client
# certificate on the forwarded port: the API server does not proxy to a node at a loopback address):
# "COUNT SUM-SECONDS", "0 0" before the first call, nothing when the kubelet's metrics cannot be read (three tries
# of 30 s: a body cut short by the time limit is not read, curl's exit says so)
mig_kubelet_alloc() {
  local body=""
  for _ in 1 2 3; do
    body=$(curl -fsk --max-time 30 --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$KP/metrics" 2>/dev/null) && break
    body=""; sleep 2
  done
  printf '%s\n' "$body" | awk -v r="resource_name=\"$MIG_RES\"" '
    /^kubelet_/ { seen = 1 }
    index($1, "kubelet_device_plugin_alloc_duration_seconds_count{") == 1 && index($1, r) { c = $2 }
    index($1, "kubelet_device_plugin_alloc_duration_seconds_sum{") == 1 && index($1, r) { s = $2 }
    END { if (seen) print (c == "" ? 0 : c), (s == "" ? 0 : s) }'
}
# mig_alloc_of STACK: the Allocate calls the kubelet timed for the stack's pods so far: "mean X ms over N calls"
mig_alloc_of() {
  [ -s "$MIG/alloc-$1" ] || { echo none; return; }
  awk '{ c += $1; s += $2 } END { if (c > 0) printf "mean %.1f ms over %d calls (%s)", s * 1000 / c, c, per; else print "none" }' \
    per="$(awk '$1 > 0 { printf "%s%.1f", (NR > 1 ? ", " : ""), $2 * 1000 / $1 }' "$MIG/alloc-$1" 2>/dev/null) ms per round" "$MIG/alloc-$1" 2>/dev/null
}
# mig_figures STACK CMDLINE-PREFIX: the device plugin's VmRSS and its CPU over MIG_IDLE idle seconds; sets MIG_FIG
mig_figures() {
  local pid idle rss
  MIG_FIG=""
  pid=$(mig_pid "$2")
  [ -n "$pid" ] || return 1
  idle=$(mig_idle "$pid")
  rss=$(onnode "grep VmRSS /proc/$pid/status" 2>/dev/null | awk '{ print $2 }')
  [ -n "$idle" ] && [ -n "$rss" ] || return 1
  set -- "$1" $idle
  MIG_FIG="pid $pid VmRSS $rss kB, CPU $2 ms and $3 wake-ups over $4 s idle (schedstat of its threads; by thread ms/wake-ups: ${5:-none}), Allocate as the kubelet timed it: $(mig_alloc_of "$1"), pod start median $(mig_median < "$MIG/start-$1") ms (apply → Ready with net1 carrier, $(wc -l < "$MIG/start-$1") pods: $(tr '\n' ' ' < "$MIG/start-$1"| sed 's/ $//') ms)"
}
# mig_dp_deleted SELECTOR: deletes the device plugin's pod while pods hold VFs and follows the node status
# (capacity/allocatable of the resource, the plugin's pods ready) for 50 s; sets MIG_TRACE
mig_dp_deleted() {
  local t0 s last="" r
  MIG_TRACE="before $(mig_cap)"
  t0=$(mig_ms)
  k -n kube-system delete pod -l "$1" --wait=false >/dev/null 2>&1
  while [ $(( $(mig_ms) - t0 )) -lt 50000 ]; do
    r=$(mig_pods_of "$1" | awk '{ print $2 }' | tr '\n' ',' | sed 's/,$//')
    s="$(mig_cap) pod-ready=${r:-none}"
    [ "$s" != "$last" ] && { MIG_TRACE="$MIG_TRACE; +$(( ($(mig_ms) - t0) / 1000 ))s $s"; last=$s; }
    sleep 1
  done
}
mig_uid() { k get pod "$1" -o 'jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}' 2>/dev/null; }
# mig_switch_nads TYPE: every NAD's spec.config with only "type" changed (kubectl replace); MIG_WHY says what else
# differs afterwards
mig_switch_nads() {
  local n before after
  MIG_WHY=""
  for n in mig-a mig-b; do
    before=$(k get net-attach-def "$n" -o 'jsonpath={.spec.config}')
    k get net-attach-def "$n" -o json | python3 -c '
import json, sys
o = json.load(sys.stdin); c = json.loads(o["spec"]["config"]); c["type"] = sys.argv[1]
o["spec"]["config"] = json.dumps(c, separators=(",", ":")); print(json.dumps(o))' "$1" | k replace -f - >/dev/null \
      || MIG_WHY="$MIG_WHY kubectl replace of $n failed;"
    after=$(k get net-attach-def "$n" -o 'jsonpath={.spec.config}')
    python3 -c '
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
t = b.pop("type"); a.pop("type")
sys.exit(0 if a == b and t == sys.argv[3] else 1)' "$before" "$after" "$1" || MIG_WHY="$MIG_WHY $n: '$before' → '$after';"
  done
}

# The sriovdp config.json, in its own format (resourceList, resourcePrefix, resourceName, a selector list with a
# #first-last VF range on pfNames, isRdma false), the one file both device plugins are given.
cat > "$MIG/config.json" <<EOF
{
  "resourceList": [
    {
      "resourceName": "pf1",
      "resourcePrefix": "mig.example.com",
      "selectors": [{
        "drivers": ["igbvf"],
        "pfNames": ["$PF1#0-3"],
        "isRdma": false
      }]
    }
  ]
}
EOF
MIG_SUM=$(sha256sum "$MIG/config.json" | cut -d' ' -f1)
mig_cm_sum() { k -n kube-system get configmap "$1" -o 'jsonpath={.data.config\.json}' 2>/dev/null | sha256sum | cut -d' ' -f1; }
sriovdp_manifests() { # the ConfigMap and the DaemonSet as sriovdp's deployments/ have them (image and log flags ours)
  k -n kube-system create configmap sriovdp-config --from-file=config.json="$MIG/config.json" --dry-run=client -o yaml
  cat <<'EOF'
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-sriov-device-plugin
  namespace: kube-system
  labels: { tier: node, app: sriovdp }
spec:
  selector:
    matchLabels: { name: sriov-device-plugin }
  template:
    metadata:
      labels: { name: sriov-device-plugin, tier: node, app: sriovdp }
    spec:
      hostNetwork: true
      nodeSelector: { kubernetes.io/os: linux }
      tolerations: [{ operator: Exists, effect: NoSchedule }]
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 10
      containers:
        - name: kube-sriovdp
          image: localhost/sriovdp:v3.11.0
          imagePullPolicy: Never
          command: ["/usr/bin/sriovdp", "--logtostderr", "-v", "10"]
          securityContext: { privileged: true }
          resources:
            requests: { cpu: 250m, memory: 40Mi }
            limits: { cpu: "1", memory: 200Mi }
          volumeMounts:
            - { name: devicesock, mountPath: /var/lib/kubelet/device-plugins }
            - { name: plugins-registry, mountPath: /var/lib/kubelet/plugins_registry }
            - { name: log, mountPath: /var/log }
            - { name: config-volume, mountPath: /etc/pcidp }
            - { name: device-info, mountPath: /var/run/k8s.cni.cncf.io/devinfo/dp }
            - { name: sysfs, mountPath: /sys }
            - { name: dev, mountPath: /dev }
      volumes:
        - { name: devicesock, hostPath: { path: /var/lib/kubelet/device-plugins } }
        - { name: plugins-registry, hostPath: { path: /var/lib/kubelet/plugins_registry, type: DirectoryOrCreate } }
        - { name: log, hostPath: { path: /var/log } }
        - { name: device-info, hostPath: { path: /var/run/k8s.cni.cncf.io/devinfo/dp, type: DirectoryOrCreate } }
        - { name: sysfs, hostPath: { path: /sys } }
        - { name: dev, hostPath: { path: /dev } }
        - name: config-volume
          configMap:
            name: sriovdp-config
            items: [{ key: config.json, path: config.json }]
EOF
}
# This project's DaemonSet with that same file: an overlay of deploy/ whose ConfigMap's config.json is it.
mkdir -p "$work/mig-overlay"
python3 -c '
import json, sys
cfg = open(sys.argv[1]).read()
print(json.dumps({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["../deploy"],
  "patches": [{"target": {"kind": "ConfigMap", "name": "sriov-rdma-config"},
               "patch": json.dumps([{"op": "replace", "path": "/data/config.json", "value": cfg}])}]}, indent=1))' \
  "$MIG/config.json" > "$work/mig-overlay/kustomization.yaml"
OURS=app.kubernetes.io/name=sriov-rdma
THEIRS=name=sriov-device-plugin
mig_socks() { onnode 'cd /var/lib/kubelet && ls device-plugins/*.sock plugins_registry/*.sock 2>/dev/null | grep -v "^device-plugins/kubelet[.]sock$" | tr "\n" " "' 2>/dev/null; }

# --- mig-anchors: the anchors from scripts/anchors.sh; sriov-cni and rdma-cni into /opt/cni/bin by a DaemonSet ---
anchors=$("$top/scripts/anchors.sh" sriovdp-v3.11.0 sriov-cni-v2.10.0 rdma-cni-v1.6.0 2>"$MIG/anchors.err" | tail -1)
while read -r l; do say "$l"; done < "$MIG/anchors.err"
# The emulated machine's initramfs carries sriov-cni and rdma-cni for the VM scenarios (tests/vm/anchors.sh): put
# aside for the duration, so that what runs here is what the DaemonSet installed, and put back at the end.
MIG_PRE=$(onnode 'cd /opt/cni/bin && sha256sum sriov rdma 2>/dev/null' 2>/dev/null)
onnode 'cd /opt/cni/bin && for b in sriov rdma; do test -e $b && mv $b .$b.pre-migration; done; test ! -e sriov && test ! -e rdma' >/dev/null 2>&1 \
  || fail mig-anchors-aside "could not put the node's sriov/rdma aside: $(onnode 'ls -la /opt/cni/bin' 2>&1 | tr '\n' ' ')"
[ -z "$MIG_PRE" ] || say "migration: on the node before (put aside until the end): $(echo "$MIG_PRE" | awk '{ printf "%s %s; ", $2, substr($1, 1, 12) }')"
cat <<'EOF' | k apply -f - >/dev/null
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-sriov-cni-ds
  namespace: kube-system
  labels: { tier: node, app: sriov-cni }
spec:
  selector:
    matchLabels: { name: sriov-cni }
  template:
    metadata:
      labels: { name: sriov-cni, tier: node, app: sriov-cni }
    spec:
      nodeSelector: { kubernetes.io/os: linux }
      tolerations: [{ operator: Exists, effect: NoSchedule }]
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
        - name: kube-sriov-cni
          image: localhost/sriov-cni:v2.10.0
          imagePullPolicy: Never
          command: ["sh", "-c", "for b in sriov rdma; do cp /usr/bin/$b /host/opt/cni/bin/.$b.new && mv -f /host/opt/cni/bin/.$b.new /host/opt/cni/bin/$b || exit 1; done; echo installed; while :; do sleep 3600; done"]
          securityContext:
            privileged: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: { drop: [ALL] }
          volumeMounts:
            - { name: cnibin, mountPath: /host/opt/cni/bin }
      volumes:
        - { name: cnibin, hostPath: { path: /opt/cni/bin } }
EOF
why=""
mig_ds_ready kube-sriov-cni-ds 180 || why="$why kube-sriov-cni-ds not Ready: $(mig_pods_of name=sriov-cni | tr '\n' ';');"
w1=$(sha256sum "$anchors/sriov-cni-v2.10.0" 2>/dev/null | cut -d' ' -f1); w2=$(sha256sum "$anchors/rdma-cni-v1.6.0" 2>/dev/null | cut -d' ' -f1)
g=$(onnode 'sha256sum /opt/cni/bin/sriov /opt/cni/bin/rdma' 2>/dev/null | awk '{ printf "%s ", $1 }')
[ -n "$w1" ] && [ "$g" = "$w1 $w2 " ] || why="$why node sha256 sriov/rdma '$g', anchors' '$w1 $w2';"
onnode 'test -e /var/lib/cni/sriov || test -e /var/lib/cni/mig-ipam' 2>/dev/null && why="$why /var/lib/cni/sriov or mig-ipam already on the node;"
src=$(sed 's/^anchors: //; s/sha256 \([0-9a-f]\{12\}\)[0-9a-f]*/sha256 \1/' "$MIG/anchors.err" | tr '\n' ';' | sed 's/;$//; s/;/; /g')
if [ -z "$why" ]; then
  pass "mig-anchors(scripts/anchors.sh: ${src% }; kube-sriov-cni-ds Ready, node /opt/cni/bin/sriov sha256 ${w1:0:12} = sriov-cni v2.10.0, /opt/cni/bin/rdma ${w2:0:12} = rdma-cni v1.6.0)"
else fail mig-anchors "$why $(cat "$MIG/anchors.err" | tr '\n' ' ')"; fi

MIG0=$(mig_snap); MIGMAC0=$(mig_macs); MIGREC0=$(mig_records)
say "migration: before: $(echo "$MIG0" | tr '\n' ';') records: '${MIGREC0}'"

# --- mig-sriovdp-resources: this project's DaemonSet deleted; sriovdp as its docs deploy it, with its config.json ---
k -n kube-system delete ds/sriov-rdma configmap/sriov-rdma-config --wait=true --timeout=120s >/dev/null 2>&1
why=""
mig_no_pods "$OURS" 120 || why="$why the project's daemon pod still there: $(mig_pods_of "$OURS" | tr '\n' ';');"
sriovdp_manifests | k apply -f - >/dev/null || why="$why kubectl apply of sriovdp's ConfigMap and DaemonSet failed;"
mig_ds_ready kube-sriov-device-plugin 180 || why="$why kube-sriov-device-plugin not Ready: $(mig_pods_of "$THEIRS" | tr '\n' ';') $(k -n kube-system logs ds/kube-sriov-device-plugin 2>&1 | tail -3 | tr '\n' ' ');"
mig_wait_alloc 4 120 || why="$why allocatable $MIG_RES '$MIG_A', want 4;"
[ "$(mig_cm_sum sriovdp-config)" = "$MIG_SUM" ] || why="$why ConfigMap sriovdp-config's config.json is not the file;"
socks=$(mig_socks)
if [ -z "$why" ]; then
  pass "mig-sriovdp-resources(DaemonSet sriov-rdma deleted, no pod of it; kube-sriov-device-plugin Ready with localhost/sriovdp:v3.11.0 and ConfigMap sriovdp-config config.json sha256 ${MIG_SUM:0:12} (resourceList, pfNames [\"$PF1#0-3\"], isRdma false); node allocatable $MIG_RES=$MIG_A; device-plugin sockets: ${socks% })"
else fail mig-sriovdp-resources "$why"; fi

# --- mig-sriov-cni-pods: NADs of "type": "sriov", two pods on sriovdp's VFs ---
{ mig_nad mig-a sriov 210 on on 10 49; echo ---; mig_nad mig-b sriov 211 off off 50 89; } | k apply -f - >/dev/null
mig_start sriov mig-s1 mig-s2
why=$MIG_WHY
mig_c=$(mig_sriov_cache); recs=$(mig_records)
[ "$(mig_sriov_confs "$mig_c")" = 2 ] || why="$why sriov-cni's cache /var/lib/cni/sriov: '$mig_c' (want two <container>-net1);"
[ "$recs" = "$MIGREC0" ] || why="$why records of sriov-rdma changed: '$recs';"
S1VF=$(mig_vf mig-s1); S2VF=$(mig_vf mig-s2)
if [ -z "$why" ]; then
  pass "mig-sriov-cni-pods(mig-s1 on NAD mig-a: $MIG_ENV=$S1VF = net1 with carrier, $PF1 row '$(mig_row "$S1VF")'; mig-s2 on mig-b: $S2VF, row '$(mig_row "$S2VF")'; sriov-cni's cache: ${mig_c% }; no sriov-rdma record)"
else fail mig-sriov-cni-pods "$why"; fi
MIG_S_VFS=$MIG_VFS
S1UID=$(mig_uid mig-s1); S2UID=$(mig_uid mig-s2)

# --- mig-sriovdp-figures: RSS and idle CPU of sriovdp; allocatable after its pod is deleted while pods hold VFs ---
why=""
if mig_figures sriov '/usr/bin/sriovdp '; then FIG_SRIOVDP=$MIG_FIG; say "figures: sriovdp v3.11.0 + sriov-cni v2.10.0: $MIG_FIG"
else why="$why no sriovdp process or /proc figures on the node;"; fi
mig_dp_deleted "$THEIRS"; TRACE_SRIOVDP=$MIG_TRACE
mig_ds_ready kube-sriov-device-plugin 120 || why="$why no sriovdp pod Ready after the delete;"
mig_wait_alloc 4 90; MIG_A_SRIOVDP=$MIG_A
say "figures: sriovdp v3.11.0 pod deleted while mig-s1 and mig-s2 hold VFs, node capacity/allocatable $MIG_RES: $TRACE_SRIOVDP; allocatable within 90 s: ${MIG_A_SRIOVDP:-none}"
[ "$(mig_uid mig-s1)" = "$S1UID" ] && [ "$(mig_uid mig-s2)" = "$S2UID" ] || why="$why mig-s1/s2 changed: $(mig_uid mig-s1), $(mig_uid mig-s2);"
if [ -z "$why" ]; then
  pass "mig-sriovdp-figures($FIG_SRIOVDP; pod deleted: $TRACE_SRIOVDP; then allocatable ${MIG_A_SRIOVDP:-none}; mig-s1/s2 Running, same UID)"
else fail mig-sriovdp-figures "$why"; fi

# --- mig-switch-to-ours: docs/migration.md: sriovdp's DaemonSet and ConfigMap deleted, this project's applied
#     with the same config.json; the NADs' "type" changed and nothing else ---
why=""
k -n kube-system delete ds/kube-sriov-device-plugin configmap/sriovdp-config --wait=true --timeout=120s >/dev/null 2>&1
mig_no_pods "$THEIRS" 120 || why="$why sriovdp's pod still there;"
k apply -k "$work/mig-overlay" >/dev/null 2>&1 || why="$why kubectl apply -k of the overlay failed: $(k apply -k "$work/mig-overlay" 2>&1 | tail -2 | tr '\n' ' ');"
k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null 2>&1 || why="$why rollout: $(mig_pods_of "$OURS" | tr '\n' ';');"
mig_ds_ready sriov-rdma 60 || why="$why the project's daemon pod not Ready;"
[ "$(mig_cm_sum sriov-rdma-config)" = "$MIG_SUM" ] || why="$why ConfigMap sriov-rdma-config's config.json is not sriovdp's file;"
mig_wait_alloc 4 120 || why="$why allocatable $MIG_RES '$MIG_A', want 4;"
socks=$(mig_socks)
echo "$socks" | grep -q 'sriov-rdma-mig_example_com_pf1[.]sock' || why="$why no socket of the project's plugin for $MIG_RES: '$socks';"
mig_switch_nads sriov-rdma; why="$why$MIG_WHY"
if [ -z "$why" ]; then
  pass "mig-switch-to-ours(kube-sriov-device-plugin and sriovdp-config deleted; kubectl apply -k with sriovdp's config.json unchanged (ConfigMap sriov-rdma-config sha256 ${MIG_SUM:0:12}): daemon Ready, allocatable $MIG_RES=$MIG_A, sockets ${socks% }; NADs mig-a, mig-b: only \"type\" sriov → sriov-rdma)"
else fail mig-switch-to-ours "$why $(k -n kube-system logs ds/sriov-rdma -c device-plugin 2>&1 | tail -4 | tr '\n' ' ')"; fi

# --- mig-old-pods-kept: the pods sriov-cni attached keep running, net1 the same VF with carrier, rows as they were ---
why=""; MIG_VFS=$MIG_S_VFS
for p in mig-s1 mig-s2; do
  u=$(mig_uid $p); [ "$u" = "$( [ $p = mig-s1 ] && echo "$S1UID" || echo "$S2UID")" ] || why="$why $p now '$u';"
  vf=$(mig_vf $p); [ "$(mig_net1 $p)" = "$vf 1" ] || why="$why $p net1 '$(mig_net1 $p)', was $vf;"
  echo "$(mig_row "$vf")" | grep -Eq "$(mig_want_row $([ $p = mig-s1 ] && echo mig-a || echo mig-b))" || why="$why $p row '$(mig_row "$vf")';"
done
if [ -z "$why" ]; then
  pass "mig-old-pods-kept(mig-s1 $S1VF and mig-s2 $S2VF: same UID, 0 restarts, Running, net1 with carrier, VLAN 210/211 rows kept)"
else fail mig-old-pods-kept "$why"; fi

# --- mig-old-pods-deleted-by-sriov-cni: their DEL runs the delegate Multus cached (sriov): sriov-cni's cache gone ---
why=""
onnode 'test -x /opt/cni/bin/sriov' 2>/dev/null || why="$why /opt/cni/bin/sriov gone before the old pods;"
c0=$(mig_sriov_cache)
MIG_VFS=$MIG_S_VFS; mig_gone_check mig-s1 mig-s2; why="$why$MIG_WHY"
c1=$(mig_sriov_cache); recs=$(mig_records)
[ "$(mig_sriov_confs "$c1")" = 0 ] || why="$why sriov-cni's cache still has '$c1';"
[ "$recs" = "$MIGREC0" ] || why="$why sriov-rdma records '$recs';"
leases=$(onnode 'ls /var/lib/cni/mig-ipam/mig-a /var/lib/cni/mig-ipam/mig-b 2>/dev/null | grep "^10[.]" | tr "\n" " "' 2>/dev/null)
[ -z "$leases" ] || why="$why leases left: $leases;"
if [ -z "$why" ]; then
  pass "mig-old-pods-deleted-by-sriov-cni(deleted after the switch: sriov-cni's cache '${c0% }' → '${c1% }', no sriov-rdma record made; $S1VF and $S2VF back as before: '$(mig_line "$S1VF" "$(mig_snap)")'; leases released)"
else fail mig-old-pods-deleted-by-sriov-cni "$why"; fi

# --- mig-ours-pods: new pods on the same NADs come up on sriov-rdma ---
mig_start ours mig-o1 mig-o2
why=$MIG_WHY
O1VF=$(mig_vf mig-o1); O2VF=$(mig_vf mig-o2); MIG_O_VFS=$MIG_VFS
for x in "mig-a:$O1VF" "mig-b:$O2VF"; do
  onnode "grep -Eq '\"network\": ?\"${x%%:*}\"' /var/lib/cni/sriov-rdma/${x#*:}.json" 2>/dev/null || why="$why no record /var/lib/cni/sriov-rdma/${x#*:}.json of network ${x%%:*};"
done
c2=$(mig_sriov_cache)
[ "$(mig_sriov_confs "$c2")" = 0 ] || why="$why sriov-cni cached '$c2' (it ran);"
if [ -z "$why" ]; then
  pass "mig-ours-pods(mig-o1 on mig-a: $O1VF = net1 with carrier, record /var/lib/cni/sriov-rdma/$O1VF.json, row '$(mig_row "$O1VF")'; mig-o2 on mig-b: $O2VF, row '$(mig_row "$O2VF")')"
else fail mig-ours-pods "$why"; fi
O1UID=$(mig_uid mig-o1); O2UID=$(mig_uid mig-o2)

# --- mig-forward-no-leak: every VF no pod holds is as before step 2 ---
now=$(mig_snap)
d=$(diff <(echo "$MIG0" | grep -v -e " $O1VF " -e " $O2VF ") <(echo "$now" | grep -v -e " $O1VF " -e " $O2VF ") | grep '^[<>]' | tr '\n' ';')
macs=$(diff <(echo "$MIGMAC0") <(mig_macs) | grep '^[<>]' | tr '\n' ';')
[ -z "$macs" ] || say "migration: VF MACs changed since the start (not compared): $macs"
if [ -z "$d" ]; then
  pass "mig-forward-no-leak($(echo "$now" | grep -c ' vf') VFs: all but mig-o1's and mig-o2's have the name, MTU and PF row of before; sriov-cni's files left: '$(mig_sriov_cache)')"
else fail mig-forward-no-leak "$d"; fi

# --- mig-ours-figures ---
why=""
if mig_figures ours '/sriov-rdma-device-plugin --config'; then FIG_OURS=$MIG_FIG; say "figures: sriov-rdma $(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1): $MIG_FIG"
else why="$why no sriov-rdma-device-plugin process or /proc figures on the node;"; fi
DPO=$(mig_pods_of "$OURS" | cut -d' ' -f1)
mig_dp_deleted "$OURS"; TRACE_OURS=$MIG_TRACE
mig_ds_ready sriov-rdma 120 || why="$why no daemon pod Ready after the delete;"
mig_wait_alloc 4 90; MIG_A_OURS=$MIG_A
say "figures: sriov-rdma pod deleted while mig-o1 and mig-o2 hold VFs, node capacity/allocatable $MIG_RES: $TRACE_OURS; allocatable within 90 s: ${MIG_A_OURS:-none}"
[ "$MIG_A_OURS" = 4 ] || why="$why allocatable after the new pod: '$MIG_A_OURS', want 4;"
[ "$(mig_uid mig-o1)" = "$O1UID" ] && [ "$(mig_uid mig-o2)" = "$O2UID" ] || why="$why mig-o1/o2 changed: $(mig_uid mig-o1), $(mig_uid mig-o2);"
if [ -z "$why" ]; then
  pass "mig-ours-figures($FIG_OURS; pod $DPO deleted: $TRACE_OURS; then allocatable 4; mig-o1/o2 Running, same UID)"
else fail mig-ours-figures "$why"; fi

# --- mig-ours-pods-more: two more pods on sriov-rdma (pod start and Allocate samples: four per stack), the node's
#     last two VFs of the resource, deleted again: their VFs back as before ---
mig_start ours mig-o3 mig-o4
why=$MIG_WHY; MIG_O34_VFS=$MIG_VFS
O3VF=$(mig_vf mig-o3); O4VF=$(mig_vf mig-o4)
mig_gone_check mig-o3 mig-o4; why="$why$MIG_WHY"
if [ -z "$why" ]; then
  pass "mig-ours-pods-more(mig-o3 $O3VF and mig-o4 $O4VF Ready with net1 carrier and their rows, then deleted: both back as before; pod start of all four: $(tr '\n' ' ' < "$MIG/start-ours" | sed 's/ $//') ms)"
else fail mig-ours-pods-more "$why"; fi
MIG_VFS=$MIG_O_VFS

# --- mig-switch-back: this project's DaemonSet deleted, sriovdp again with the same config.json, NADs back ---
why=""
k -n kube-system delete ds/sriov-rdma configmap/sriov-rdma-config --wait=true --timeout=120s >/dev/null 2>&1
mig_no_pods "$OURS" 120 || why="$why the project's daemon pod still there;"
sriovdp_manifests | k apply -f - >/dev/null || why="$why kubectl apply of sriovdp's ConfigMap and DaemonSet failed;"
mig_ds_ready kube-sriov-device-plugin 180 || why="$why kube-sriov-device-plugin not Ready;"
# sriovdp counts the VFs the project's pods hold as it finds them (printed): the two free ones are what matters.
mig_wait_alloc 4 120 || [ "${MIG_A:-0}" -ge 2 ] 2>/dev/null || why="$why allocatable $MIG_RES '$MIG_A', want 4 (at least the 2 free VFs);"
mig_switch_nads sriov; why="$why$MIG_WHY"
MIG_VFS=$MIG_O_VFS
for p in mig-o1 mig-o2; do
  vf=$(mig_vf $p)
  [ "$(mig_net1 $p)" = "$vf 1" ] || why="$why $p net1 '$(mig_net1 $p)', was $vf;"
done
[ "$(mig_uid mig-o1)" = "$O1UID" ] && [ "$(mig_uid mig-o2)" = "$O2UID" ] || why="$why mig-o1/o2 changed;"
if [ -z "$why" ]; then
  pass "mig-switch-back(DaemonSet sriov-rdma and its ConfigMap deleted; sriovdp again with config.json sha256 $(mig_cm_sum sriovdp-config | cut -c1-12), allocatable $MIG_RES=$MIG_A; NADs: only \"type\" sriov-rdma → sriov; mig-o1/o2 Running, same UID, net1 with carrier)"
else fail mig-switch-back "$why $(k -n kube-system logs ds/kube-sriov-device-plugin 2>&1 | tail -3 | tr '\n' ' ')"; fi

# --- mig-ours-pods-deleted-by-ours: the pods this project attached, deleted after the way back: its records undone ---
why=""
onnode 'test -x /opt/cni/bin/sriov-rdma' 2>/dev/null || why="$why /opt/cni/bin/sriov-rdma gone before its pods;"
r0=$(mig_records)
MIG_VFS=$MIG_O_VFS; mig_gone_check mig-o1 mig-o2; why="$why$MIG_WHY"
r1=$(mig_records)
[ "$r1" = "$MIGREC0" ] || why="$why records '$r1', before '$MIGREC0';"
c3=$(mig_sriov_cache)
[ "$(mig_sriov_confs "$c3")" = 0 ] || why="$why sriov-cni's cache '$c3';"
if [ -z "$why" ]; then
  pass "mig-ours-pods-deleted-by-ours(records '${r0% }' → '${r1% }'; $O1VF and $O2VF back as before: '$(mig_line "$O1VF" "$(mig_snap)")')"
else fail mig-ours-pods-deleted-by-ours "$why"; fi

# --- mig-sriov-cni-pods-again: new pods on sriov-cni ---
mig_start sriov mig-r1 mig-r2
why=$MIG_WHY
mig_c=$(mig_sriov_cache); recs=$(mig_records)
[ "$(mig_sriov_confs "$mig_c")" = 2 ] || why="$why sriov-cni's cache '$mig_c' (want two <container>-net1);"
[ "$recs" = "$MIGREC0" ] || why="$why records of sriov-rdma '$recs';"
R1VF=$(mig_vf mig-r1); R2VF=$(mig_vf mig-r2); MIG_R_VFS=$MIG_VFS
if [ -z "$why" ]; then
  pass "mig-sriov-cni-pods-again(mig-r1: $R1VF row '$(mig_row "$R1VF")'; mig-r2: $R2VF row '$(mig_row "$R2VF")'; sriov-cni's cache: ${mig_c% }; no sriov-rdma record)"
else fail mig-sriov-cni-pods-again "$why"; fi
say "figures: sriovdp v3.11.0 + sriov-cni v2.10.0 pod start, all its pods: median $(mig_median < "$MIG/start-sriov") ms ($(tr '\n' ' ' < "$MIG/start-sriov" | sed 's/ $//') ms), Allocate as the kubelet timed it: $(mig_alloc_of sriov); sriov-rdma: median $(mig_median < "$MIG/start-ours") ms ($(tr '\n' ' ' < "$MIG/start-ours" | sed 's/ $//') ms), Allocate: $(mig_alloc_of ours)"

# --- mig-no-leak: every pod gone, every VF as before step 2 ---
MIG_VFS=$MIG_R_VFS; mig_gone_check mig-r1 mig-r2; why=$MIG_WHY
now=""
for _ in $(seq 1 30); do now=$(mig_snap); [ "$now" = "$MIG0" ] && break; sleep 1; done
d=$(diff <(echo "$MIG0") <(echo "$now") | grep '^[<>]' | tr '\n' ';')
[ -z "$d" ] || why="$why $d"
[ "$(mig_records)" = "$MIGREC0" ] || why="$why records '$(mig_records)';"
left=$(onnode 'cd /var/lib/cni/sriov 2>/dev/null && find . -type f | tr "\n" " "' 2>/dev/null)
macs=$(diff <(echo "$MIGMAC0") <(mig_macs) | grep '^[<>]' | tr '\n' ';')
[ -z "$macs" ] || say "migration: VF MACs changed since the start (not compared): $macs"
if [ -z "$why" ]; then
  pass "mig-no-leak(all eight pods deleted: the $(echo "$now" | grep -c ' vf') VFs of $PF1 and $PF2 with the name, MTU and PF row of before, records as before; left by sriov-cni in /var/lib/cni/sriov: '${left% }')"
else fail mig-no-leak "$why"; fi

# --- mig-node-restored: the anchors' objects and files gone, the overlay applied again as the set-up left it ---
why=""
k delete net-attach-def mig-a mig-b >/dev/null 2>&1
k -n kube-system delete ds/kube-sriov-device-plugin configmap/sriovdp-config ds/kube-sriov-cni-ds --wait=true --timeout=120s >/dev/null 2>&1
mig_no_pods "$THEIRS" 120 && mig_no_pods name=sriov-cni 120 || why="$why the anchors' pods still there;"
# Their DaemonSet leaves its binaries (as sriov-cni's own does); the node's own copies (if any) go back.
onnode 'rm -rf /opt/cni/bin/sriov /opt/cni/bin/rdma /var/lib/cni/sriov /var/lib/cni/mig-ipam; rm -f /var/run/k8s.cni.cncf.io/devinfo/dp/*mig.example.com*
        cd /opt/cni/bin && for b in sriov rdma; do test -e .$b.pre-migration && mv .$b.pre-migration $b; done' >/dev/null 2>&1
k apply -k "$work/overlay" >/dev/null 2>&1 || why="$why kubectl apply -k of the overlay failed;"
k -n kube-system rollout status ds/sriov-rdma --timeout=180s >/dev/null 2>&1 || why="$why rollout: $(mig_pods_of "$OURS" | tr '\n' ';');"
want=$OVERLAY_ALLOC
wait_overlay_alloc 120
[ "$got" = "$want" ] || why="$why allocatable $got, want $want;"
[ "$(k -n kube-system get configmap sriov-rdma-config -o 'jsonpath={.data.config\.json}' 2>/dev/null)" = "$mig_overlay_config" ] || why="$why the overlay's config.json is not back;"
mb=$(k -n kube-system get ds sriov-rdma -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}' 2>/dev/null)
[ "$mb" = kustomize ] || why="$why DaemonSet managed-by '$mb';"
stays=$(onnode 'for f in /var/lib/cni/sriov /var/lib/cni/mig-ipam /etc/sriov-rdma/policy.json; do test -e $f && echo $f; done' 2>/dev/null | tr '\n' ' ')
[ -z "$stays" ] || why="$why still on the node: $stays;"
[ "$(onnode 'cd /opt/cni/bin && sha256sum sriov rdma 2>/dev/null' 2>/dev/null)" = "$MIG_PRE" ] || why="$why /opt/cni/bin/sriov, rdma not as before: $(onnode 'cd /opt/cni/bin && sha256sum sriov rdma' 2>&1 | tr '\n' ' ');"
now=$(mig_snap); [ "$now" = "$MIG0" ] || why="$why VFs: $(diff <(echo "$MIG0") <(echo "$now") | grep '^[<>]' | tr '\n' ';');"
if [ -z "$why" ]; then
  pass "mig-node-restored(sriovdp, sriov-cni DaemonSets, ConfigMap and NADs deleted, /opt/cni/bin/sriov and rdma as before the file; kubectl apply -k of the overlay: DaemonSet managed-by kustomize Ready, its config.json back, node allocatable $got; VFs as before)"
else fail mig-node-restored "$why"; fi
