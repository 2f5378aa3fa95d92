//! sriov-rdma: a CNI plugin that gives a pod an SR-IOV VF and restores it exactly.
//!
//! Three layers: [`cni`] (the protocol), [`kernel`] (netlink, netns, sysfs) and [`flow`] (ADD/DEL/CHECK/GC/STATUS).

pub mod log;

pub mod cni;
pub mod doctor;
pub mod flow;
pub mod install;
pub mod kernel;
