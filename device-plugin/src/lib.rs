//! `sriov-rdma device-plugin`: offers the node's SR-IOV VFs and their RDMA devices to the kubelet (device plugin
//! API v1beta1) as one or more extended resources (`rdma/hca` by default), and gives each container exactly its
//! VFs' character devices. The node inventory comes from the CNI's library, so both halves see the same VFs.
//! A resource marked `dra: true` is published instead through the DRA driver `sriov-rdma.k8s.io` (dra.rs,
//! slices.rs, cdi.rs; docs/dra.md). With `--nri-socket`, an NRI plugin hands containers of pods the CNI attached
//! their NCCL variables (nri.rs, nri_mux.rs; docs/nri.md).

/// The kubelet device plugin API v1beta1 (proto/api.proto).
#[allow(clippy::all, missing_docs)]
pub mod api {
    tonic::include_proto!("v1beta1");
}

/// The kubelet pod-resources API v1, List (proto/podresources.proto).
#[allow(clippy::all, missing_docs)]
pub mod podresources_api {
    tonic::include_proto!("v1");
}

/// The kubelet DRA plugin API v1, `dra.kubelet.k8s.io` (proto/dra.proto).
#[allow(clippy::all, missing_docs)]
pub mod dra_api {
    tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
}

/// The NRI API v1alpha1 (proto/nri/api.proto), messages only: nri_mux.rs carries them.
#[allow(clippy::all, missing_docs)]
pub mod nri_api {
    tonic::include_proto!("nri.pkg.api.v1alpha1");
}

/// The kubelet plugin registration API v1 (proto/pluginregistration.proto).
#[allow(clippy::all, missing_docs)]
pub mod registration_api {
    tonic::include_proto!("pluginregistration");
}

pub mod alloc;
pub mod cdi;
pub mod claimconfig;
pub mod config;
pub mod devices;
pub mod dra;
pub mod draattach;
pub mod events;
pub mod h2authority;
pub mod logging;
pub mod metrics;
pub mod nri;
pub mod nri_mux;
pub mod numvfs;
pub mod podresources;
pub mod reload;
pub mod server;
pub mod slices;
