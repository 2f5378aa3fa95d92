//! sriov-rdma: a CNI plugin that gives a pod an SR-IOV VF and restores it exactly.
//!
//! Three layers: [`cni`] (the protocol), [`kernel`] (netlink, netns, sysfs) and [`flow`] (ADD/DEL/CHECK/GC/STATUS),
//! over the value types of [`model`] that the first two share, and the PF-side settings of a VF, each in one place
//! ([`vf_setting`]).

pub mod log;

/// The commit both binaries were built from: `git rev-parse --short HEAD` at build time, `SRIOV_RDMA_COMMIT`
/// when set, else "unknown" (build.rs).
pub const COMMIT: &str = env!("SRIOV_RDMA_COMMIT");

pub mod cni;
pub mod doctor;
pub mod flow;
pub mod install;
pub mod inventory;
pub mod kernel;
pub mod kubelet;
pub mod model;
pub mod policy;
pub mod vf_setting;
