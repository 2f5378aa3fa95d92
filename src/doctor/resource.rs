//! Doctor, "why does a pod get no RDMA resource?": the kubelet's device-plugin registration, which pod holds
//! which VF, and `--config FILE`: whether a network configuration would find a VF, by the checks ADD makes.
