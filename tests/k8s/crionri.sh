# The NRI plugin on node B, whose runtime is CRI-O (sourced by e2e.sh after crio.sh, before cluster.sh, while node
# B has no node policy; K8S_ONLY=crionri.sh runs crio.sh first): nri.sh's scenarios on that node, named crio-nri-*.
# CRI-O has NRI on as docs/nri.md says (tests/k8s/node/crio.conf: [crio.nri] enable_nri, nri_listen); the daemon's
# DaemonSet is patched and rolled back as on node A.
NRI_NODE_B=1
include nri.sh
NRI_NODE_B=""
