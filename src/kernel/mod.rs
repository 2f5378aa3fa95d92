//! The kernel: netlink (route), network namespaces, sysfs, PF-side VF settings, files confined to a directory.

pub mod confined;
pub mod link;
pub mod netlink;
pub mod netns;
pub mod rdma;
pub mod sysfs;
pub mod vf;
