//! VF discovery from sysfs: PF, VF index (`virtfnN`), netdev, bound driver.
//!
//! The root is `/sys`; `SRIOV_RDMA_SYSFS` points it at another tree (tests use a fake PCI tree whose
//! netdevs are real veth ends).

use crate::cni::error::{CniError, CniResult};
use crate::cni::types::PciAddr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Drivers that hand the VF to user space (DPDK and VMs): no netdev to move.
pub const USERSPACE_DRIVERS: [&str; 4] = ["vfio-pci", "uio_pci_generic", "igb_uio", "vfio_pci"];

#[derive(Debug, Clone)]
pub struct Sysfs {
    pub root: PathBuf,
}

/// A VF as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vf {
    pub pci: PciAddr,
    pub pf_pci: PciAddr,
    /// The PF's netdev in the host namespace.
    pub pf: String,
    pub index: u32,
    /// The VF's netdev as the host sees it; `None` when it has none here (userspace driver, or moved away).
    pub netdev: Option<String>,
    pub driver: Option<String>,
}

impl Vf {
    pub fn userspace(&self) -> bool {
        self.driver.as_deref().is_some_and(|d| USERSPACE_DRIVERS.contains(&d))
    }
}

fn link_name(p: &Path) -> Option<String> {
    fs::read_link(p).ok()?.file_name()?.to_str().map(str::to_string)
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::from_env()
    }
}

impl Sysfs {
    pub fn from_env() -> Sysfs {
        let root = std::env::var_os("SRIOV_RDMA_SYSFS").map(PathBuf::from).unwrap_or_else(|| "/sys".into());
        Sysfs { root }
    }

    pub fn pci_dir(&self, pci: &PciAddr) -> PathBuf {
        self.root.join("bus/pci/devices").join(pci.as_str())
    }

    /// The netdev names under a PCI function, sorted.
    pub fn netdevs(&self, pci: &PciAddr) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.pci_dir(pci).join("net"))
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The PF's own netdev: with switchdev representors beside it, the one that is not a representor.
    fn pf_netdev(&self, pf_pci: &PciAddr) -> Option<String> {
        let names = self.netdevs(pf_pci);
        let dir = self.pci_dir(pf_pci).join("net");
        names
            .iter()
            .find(|n| {
                let port = fs::read_to_string(dir.join(n).join("phys_port_name")).unwrap_or_default();
                !port.trim().starts_with("pf") || !port.contains("vf")
            })
            .or(names.first())
            .cloned()
    }

    /// The VFs of a PF, by index.
    pub fn vfs_of(&self, pf_pci: &PciAddr) -> io::Result<Vec<(u32, PciAddr)>> {
        let mut out = Vec::new();
        for e in fs::read_dir(self.pci_dir(pf_pci))? {
            let e = e?;
            let name = e.file_name();
            let Some(idx) = name.to_str().and_then(|n| n.strip_prefix("virtfn")).and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(pci) = link_name(&e.path()).and_then(|l| PciAddr::parse(&l).ok()) {
                out.push((idx, pci));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Resolves a VF from its PCI address; an address that is not a VF is refused.
    pub fn vf(&self, pci: &PciAddr) -> CniResult<Vf> {
        let dir = self.pci_dir(pci);
        if !dir.exists() {
            return Err(CniError::config(format!(
                "deviceID {pci}: no such PCI device ({} does not exist)",
                dir.display()
            )));
        }
        let pf_pci = link_name(&dir.join("physfn"))
            .and_then(|l| PciAddr::parse(&l).ok())
            .ok_or_else(|| CniError::config(format!("deviceID {pci} is not an SR-IOV VF (it has no physfn link)")))?;
        let pf = self
            .pf_netdev(&pf_pci)
            .ok_or_else(|| CniError::io(format!("VF {pci}: its PF {pf_pci} has no netdev in the host namespace")))?;
        let index = self
            .vfs_of(&pf_pci)
            .map_err(|e| CniError::io(format!("VF {pci}: listing the VFs of PF {pf} ({pf_pci}): {e}")))?
            .into_iter()
            .find(|(_, v)| v == pci)
            .map(|(i, _)| i)
            .ok_or_else(|| CniError::io(format!("VF {pci}: PF {pf} ({pf_pci}) has no virtfn link to it")))?;
        Ok(Vf {
            pci: pci.clone(),
            pf_pci,
            pf,
            index,
            netdev: self.netdevs(pci).into_iter().next(),
            driver: link_name(&dir.join("driver")),
        })
    }

    /// The PCI address of a PF netdev, if it is an SR-IOV PF.
    pub fn pf_pci(&self, pf: &str) -> CniResult<PciAddr> {
        let dev = self.root.join("class/net").join(pf).join("device");
        let pci = link_name(&dev)
            .and_then(|l| PciAddr::parse(&l).ok())
            .ok_or_else(|| CniError::config(format!("pfName {pf}: no such PCI network device")))?;
        if !self.pci_dir(&pci).join("sriov_totalvfs").exists() {
            return Err(CniError::config(format!("pfName {pf} ({pci}) has no SR-IOV capability (no sriov_totalvfs)")));
        }
        Ok(pci)
    }

    pub fn read_trimmed(&self, pci: &PciAddr, file: &str) -> Option<String> {
        fs::read_to_string(self.pci_dir(pci).join(file)).ok().map(|s| s.trim().to_string())
    }
}

#[cfg(test)]
pub mod fake {
    //! A fake sysfs PCI tree: the layout of a real one (physfn, virtfnN, driver, net/), nothing else.
    use super::*;
    use std::os::unix::fs::symlink;

    pub struct FakeTree {
        pub root: PathBuf,
    }

    impl FakeTree {
        pub fn new(root: &Path) -> FakeTree {
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            fs::create_dir_all(root.join("class/net")).unwrap();
            FakeTree { root: root.to_path_buf() }
        }

        fn dev(&self, pci: &str) -> PathBuf {
            self.root.join("bus/pci/devices").join(pci)
        }

        pub fn pf(&self, pci: &str, netdev: &str, total: u32) {
            fs::create_dir_all(self.dev(pci).join("net").join(netdev)).unwrap();
            fs::write(self.dev(pci).join("sriov_totalvfs"), format!("{total}\n")).unwrap();
            fs::create_dir_all(self.root.join("class/net").join(netdev)).unwrap();
            symlink(format!("../../../bus/pci/devices/{pci}"), self.root.join("class/net").join(netdev).join("device"))
                .unwrap();
        }

        pub fn vf(&self, pf_pci: &str, idx: u32, pci: &str, netdev: Option<&str>, driver: &str) {
            fs::create_dir_all(self.dev(pci)).unwrap();
            symlink(format!("../{pf_pci}"), self.dev(pci).join("physfn")).unwrap();
            symlink(format!("../{pci}"), self.dev(pf_pci).join(format!("virtfn{idx}"))).unwrap();
            symlink(format!("../../../bus/pci/drivers/{driver}"), self.dev(pci).join("driver")).unwrap();
            if let Some(n) = netdev {
                fs::create_dir_all(self.dev(pci).join("net").join(n)).unwrap();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeTree;
    use super::*;

    fn tree(name: &str) -> (Sysfs, FakeTree) {
        let root = std::env::temp_dir().join(format!("sriov-rdma-sysfs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let t = FakeTree::new(&root);
        t.pf("0000:3b:00.0", "ens1f0", 8);
        t.vf("0000:3b:00.0", 0, "0000:3b:02.0", Some("ens1f0v0"), "iavf");
        t.vf("0000:3b:00.0", 1, "0000:3b:02.1", Some("ens1f0v1"), "iavf");
        t.vf("0000:3b:00.0", 10, "0000:3b:03.2", None, "vfio-pci");
        fs::create_dir_all(root.join("bus/pci/devices/0000:00:1f.6")).unwrap();
        (Sysfs { root }, t)
    }

    fn pci(s: &str) -> PciAddr {
        PciAddr::parse(s).unwrap()
    }

    #[test]
    fn resolves_pf_index_netdev_driver() {
        let (s, _t) = tree("resolve");
        let vf = s.vf(&pci("0000:3b:02.1")).unwrap();
        assert_eq!(vf.pf, "ens1f0");
        assert_eq!(vf.pf_pci, pci("0000:3b:00.0"));
        assert_eq!(vf.index, 1);
        assert_eq!(vf.netdev.as_deref(), Some("ens1f0v1"));
        assert_eq!(vf.driver.as_deref(), Some("iavf"));
        assert!(!vf.userspace());
    }

    #[test]
    fn userspace_driver_has_no_netdev() {
        let (s, _t) = tree("user");
        let vf = s.vf(&pci("0000:3b:03.2")).unwrap();
        assert_eq!(vf.index, 10);
        assert!(vf.userspace());
        assert_eq!(vf.netdev, None);
    }

    #[test]
    fn not_a_vf_and_missing_device_are_refused() {
        let (s, _t) = tree("notvf");
        let e = s.vf(&pci("0000:00:1f.6")).unwrap_err();
        assert!(e.msg.contains("not an SR-IOV VF"), "{}", e.msg);
        let e = s.vf(&pci("0000:99:00.1")).unwrap_err();
        assert!(e.msg.contains("no such PCI device"), "{}", e.msg);
    }

    #[test]
    fn vfs_are_listed_by_number_not_by_name() {
        let (s, _t) = tree("order");
        let idx: Vec<u32> = s.vfs_of(&pci("0000:3b:00.0")).unwrap().into_iter().map(|(i, _)| i).collect();
        assert_eq!(idx, vec![0, 1, 10]);
        assert_eq!(s.pf_pci("ens1f0").unwrap(), pci("0000:3b:00.0"));
        assert!(s.pf_pci("eth9").unwrap_err().msg.contains("pfName eth9"));
    }
}
