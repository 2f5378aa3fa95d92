//! The node inventory: SR-IOV PFs, their VFs, netdevs, drivers, RDMA devices with their ports and character
//! devices, NUMA nodes and IOMMU groups, as sysfs shows them at one moment. Plain data, read synchronously through
//! [`Sysfs`], so a fake tree stands in for the node in tests. The device plugin and doctor's PF table read a scan;
//! ADD's pool (flow/pool.rs) reads a PF's VFs with [`vfs_of_pf`].

use crate::kernel::sysfs::{NotUsable, Sysfs};
use crate::model::PciAddr;
use serde::Serialize;
use std::fs;
use std::path::Path;

/// A snapshot of the node's SR-IOV devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    pub pfs: Vec<Pf>,
}

/// An SR-IOV physical function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pf {
    pub pci: PciAddr,
    /// The PF's netdev in this namespace, if it has one.
    pub netdev: Option<String>,
    pub driver: Option<String>,
    pub ids: PciIds,
    pub numa_node: Option<u32>,
    /// The netdev's `operstate` (`up`, `down`, `lowerlayerdown`, `unknown`, …).
    pub operstate: Option<String>,
    /// `ether` or `infiniband`, from the netdev's ARP hardware type.
    pub link_type: Option<String>,
    pub num_vfs: u32,
    pub total_vfs: u32,
    /// RDMA devices of the PF itself (`<pf>/infiniband/*`, e.g. `mlx5_0`).
    pub rdma: Vec<String>,
    pub vfs: Vec<VfInfo>,
}

/// Vendor and device IDs, lower-case hex without `0x` (`15b3`, `101e`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct PciIds {
    pub vendor: Option<String>,
    pub device: Option<String>,
}

/// A VF as the inventory sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VfInfo {
    pub pci: PciAddr,
    pub index: u32,
    pub pf_pci: PciAddr,
    pub pf_netdev: Option<String>,
    pub netdev: Option<String>,
    pub driver: Option<String>,
    pub ids: PciIds,
    pub numa_node: Option<u32>,
    /// The IOMMU group number (`/dev/vfio/<group>` for a vfio-pci VF).
    pub iommu_group: Option<String>,
    pub rdma: Vec<RdmaDev>,
}

/// How an RDMA device belongs to a VF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaBinding {
    /// Its parent is the VF's PCI function (mlx5 and other hardware).
    Pci,
    /// A port of it is bound to the VF's netdev (Soft-RoCE and other netdev-bound devices).
    Netdev,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaDev {
    pub name: String,
    pub binding: RdmaBinding,
    pub ports: Vec<RdmaPort>,
    /// `uverbsN`, `umadN`, `issmN` (names under `/dev/infiniband`).
    pub char_devs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaPort {
    pub num: u32,
    /// The state word of `ports/N/state` (`ACTIVE`, `DOWN`, `INIT`, …).
    pub state: Option<String>,
    /// `Ethernet` or `InfiniBand`.
    pub link_layer: Option<String>,
}

impl RdmaPort {
    pub fn active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }
}

/// Why a VF cannot serve a pod now, as the kernel shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Unhealthy {
    /// The VF is no longer on the PCI bus (its PF's VF count went down, or the device went away).
    Gone,
    NoDriver,
    PfLinkDown {
        pf: String,
        operstate: String,
    },
    RdmaPortNotActive {
        device: String,
        port: u32,
        state: String,
    },
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unhealthy::Gone => write!(f, "the VF is gone from the PCI bus"),
            Unhealthy::NoDriver => write!(f, "the VF is bound to no driver"),
            Unhealthy::PfLinkDown { pf, operstate } => write!(f, "its PF {pf} is {operstate}"),
            Unhealthy::RdmaPortNotActive { device, port, state } => {
                write!(f, "RDMA device {device} port {port} is {state}, not ACTIVE")
            }
        }
    }
}

impl Unhealthy {
    /// A short stable name of the problem, for a metric's label.
    pub fn code(&self) -> &'static str {
        match self {
            Unhealthy::Gone => "gone",
            Unhealthy::NoDriver => "no_driver",
            Unhealthy::PfLinkDown { .. } => "pf_link_down",
            Unhealthy::RdmaPortNotActive { .. } => "rdma_port_not_active",
        }
    }
}

/// The `operstate` words of a link that carries nothing.
const LINK_DOWN: [&str; 3] = ["down", "lowerlayerdown", "notpresent"];

impl VfInfo {
    /// What keeps the VF from serving a pod; empty when it is healthy. `pf` is its PF's entry.
    pub fn problems(&self, pf: &Pf) -> Vec<Unhealthy> {
        let mut out = Vec::new();
        if self.driver.is_none() {
            out.push(Unhealthy::NoDriver);
        }
        if let Some(state) = pf.operstate.as_deref().filter(|s| LINK_DOWN.contains(s)) {
            let pf = pf.netdev.clone().unwrap_or_else(|| pf.pci.to_string());
            out.push(Unhealthy::PfLinkDown { pf, operstate: state.to_string() });
        }
        for dev in &self.rdma {
            for port in dev.ports.iter().filter(|p| !p.active()) {
                let state = port.state.clone().unwrap_or_else(|| "unreadable".into());
                out.push(Unhealthy::RdmaPortNotActive { device: dev.name.clone(), port: port.num, state });
            }
        }
        out
    }

    /// True for a VF handed to user space (vfio-pci, uio): no netdev, `/dev/vfio` instead of verbs.
    pub fn userspace(&self) -> bool {
        self.driver.as_deref().is_some_and(|d| crate::kernel::sysfs::USERSPACE_DRIVERS.contains(&d))
    }

    pub fn is_vfio(&self) -> bool {
        matches!(self.driver.as_deref(), Some("vfio-pci") | Some("vfio_pci"))
    }
}

impl Inventory {
    /// Every SR-IOV PF under `bus/pci/devices` (a function with `sriov_totalvfs`) and its VFs, by PCI address.
    pub fn scan(sysfs: &Sysfs) -> Inventory {
        let mut pcis: Vec<PciAddr> = fs::read_dir(sysfs.root.join("bus/pci/devices"))
            .map(|rd| rd.filter_map(|e| PciAddr::parse(e.ok()?.file_name().to_str()?).ok()).collect())
            .unwrap_or_default();
        pcis.sort();
        let rdma = RdmaIndex::read(sysfs);
        let pfs = pcis
            .into_iter()
            .filter(|p| sysfs.pci_dir(p).join("sriov_totalvfs").exists())
            .map(|p| pf(sysfs, &rdma, p))
            .collect();
        Inventory { pfs }
    }

    pub fn vfs(&self) -> impl Iterator<Item = (&Pf, &VfInfo)> {
        self.pfs.iter().flat_map(|pf| pf.vfs.iter().map(move |vf| (pf, vf)))
    }

    pub fn vf(&self, pci: &PciAddr) -> Option<(&Pf, &VfInfo)> {
        self.vfs().find(|(_, v)| &v.pci == pci)
    }

    /// The PF with this netdev name.
    pub fn pf_named(&self, name: &str) -> Option<&Pf> {
        self.pfs.iter().find(|p| p.netdev.as_deref() == Some(name))
    }

    /// The netdev names of the PFs and VFs, whose link events matter to a holder of this snapshot.
    pub fn netdevs(&self) -> Vec<String> {
        let vfs = self.vfs().filter_map(|(_, v)| v.netdev.clone());
        self.pfs.iter().filter_map(|p| p.netdev.clone()).chain(vfs).collect()
    }

    /// Re-reads only each PF netdev's `operstate`, the cheap answer to a link event (a full [`Inventory::scan`]
    /// walks every VF). True if one changed.
    pub fn reread_links(&mut self, sysfs: &Sysfs) -> bool {
        let mut changed = false;
        for pf in &mut self.pfs {
            let now = pf.netdev.as_ref().and_then(|n| read(&sysfs.root.join("class/net").join(n).join("operstate")));
            if now != pf.operstate {
                pf.operstate = now;
                changed = true;
            }
        }
        changed
    }

    /// Re-reads only the state of the RDMA ports already known (an IB port follows its link without a netdev
    /// event of its own). True if one changed.
    pub fn reread_ports(&mut self, sysfs: &Sysfs) -> bool {
        let mut changed = false;
        for dev in self.pfs.iter_mut().flat_map(|p| p.vfs.iter_mut()).flat_map(|v| v.rdma.iter_mut()) {
            for port in &mut dev.ports {
                let now = port_state(sysfs, &dev.name, port.num);
                if now != port.state {
                    port.state = now;
                    changed = true;
                }
            }
        }
        changed
    }
}

/// The state word of an RDMA port (`4: ACTIVE` reads `ACTIVE`).
fn port_state(sysfs: &Sysfs, dev: &str, port: u32) -> Option<String> {
    sysfs.ib_port_attr(dev, port, "state").map(|s| s.split_once(':').map(|(_, w)| w.trim().to_string()).unwrap_or(s))
}

/// A PF's VFs (index, PCI address) by the PF's netdev name, as ADD's pool reads them: the PF and its `virtfnN`
/// links only, none of a scan's RDMA, NUMA or ID reads (ADD's hot path).
pub fn vfs_of_pf(sysfs: &Sysfs, pf: &str) -> Result<(PciAddr, Vec<(u32, PciAddr)>), NotUsable> {
    let pf_pci = sysfs.pf_pci(pf)?;
    let vfs = sysfs.vfs_of(&pf_pci).map_err(|err| NotUsable::ListingVfs {
        pf: pf.to_string(),
        pf_pci: pf_pci.clone(),
        err,
    })?;
    Ok((pf_pci, vfs))
}

fn link_name(p: &Path) -> Option<String> {
    fs::read_link(p).ok()?.file_name()?.to_str().map(str::to_string)
}

fn read(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn ids(sysfs: &Sysfs, pci: &PciAddr) -> PciIds {
    let id = |f: &str| sysfs.read_trimmed(pci, f).map(|s| s.trim_start_matches("0x").to_ascii_lowercase());
    PciIds { vendor: id("vendor"), device: id("device") }
}

/// `numa_node` is -1 on a machine without NUMA.
fn numa(sysfs: &Sysfs, pci: &PciAddr) -> Option<u32> {
    sysfs.read_trimmed(pci, "numa_node")?.parse().ok()
}

fn pf(sysfs: &Sysfs, rdma: &RdmaIndex, pci: PciAddr) -> Pf {
    let netdev = sysfs.netdevs(&pci).into_iter().find(|n| !is_representor(sysfs, &pci, n));
    let net = |f: &str| netdev.as_ref().and_then(|n| read(&sysfs.root.join("class/net").join(n).join(f)));
    let link_type = net("type").map(|t| match t.as_str() {
        "32" => "infiniband".to_string(),
        "1" => "ether".to_string(),
        other => format!("arphrd-{other}"),
    });
    let count = |f: &str| sysfs.read_trimmed(&pci, f).and_then(|s| s.parse().ok()).unwrap_or(0);
    let vfs = sysfs
        .vfs_of(&pci)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, v)| sysfs.pci_dir(v).exists())
        .map(|(index, v)| vf(sysfs, rdma, &pci, netdev.clone(), index, v))
        .collect();
    Pf {
        ids: ids(sysfs, &pci),
        numa_node: numa(sysfs, &pci),
        driver: sysfs.driver(&pci),
        operstate: net("operstate"),
        link_type,
        num_vfs: count("sriov_numvfs"),
        total_vfs: count("sriov_totalvfs"),
        rdma: sysfs.rdma_devices_of(&pci),
        netdev,
        vfs,
        pci,
    }
}

/// A switchdev representor (`phys_port_name` like `pf0vf3`) sits beside the PF's own netdev.
fn is_representor(sysfs: &Sysfs, pci: &PciAddr, netdev: &str) -> bool {
    let port = read(&sysfs.pci_dir(pci).join("net").join(netdev).join("phys_port_name")).unwrap_or_default();
    port.starts_with("pf") && port.contains("vf")
}

fn vf(
    sysfs: &Sysfs,
    rdma: &RdmaIndex,
    pf_pci: &PciAddr,
    pf_netdev: Option<String>,
    index: u32,
    pci: PciAddr,
) -> VfInfo {
    let netdev = sysfs.netdevs(&pci).into_iter().next();
    let mut devs: Vec<RdmaDev> =
        sysfs.rdma_devices_of(&pci).into_iter().map(|n| rdma.device(sysfs, n, RdmaBinding::Pci)).collect();
    if devs.is_empty() {
        if let Some(nd) = &netdev {
            devs = rdma.bound_to(nd).into_iter().map(|n| rdma.device(sysfs, n, RdmaBinding::Netdev)).collect();
        }
    }
    VfInfo {
        index,
        pf_pci: pf_pci.clone(),
        pf_netdev,
        driver: sysfs.driver(&pci),
        ids: ids(sysfs, &pci),
        numa_node: numa(sysfs, &pci),
        iommu_group: link_name(&sysfs.pci_dir(&pci).join("iommu_group")),
        rdma: devs,
        netdev,
        pci,
    }
}

/// What `class/infiniband*` shows once per scan: each RDMA device's ports and the netdevs bound to them, and
/// the character devices of each device.
struct RdmaIndex {
    /// (device, netdev bound to one of its ports)
    netdevs: Vec<(String, String)>,
    /// (device, char dev name)
    chars: Vec<(String, String)>,
}

impl RdmaIndex {
    fn read(sysfs: &Sysfs) -> RdmaIndex {
        let list = |d: &str| -> Vec<std::path::PathBuf> {
            let mut v: Vec<_> = fs::read_dir(sysfs.root.join(d))
                .map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect())
                .unwrap_or_default();
            v.sort();
            v
        };
        let mut netdevs = Vec::new();
        for dev in list("class/infiniband") {
            let Some(name) = dev.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
            // Soft-RoCE names its netdev in `parent`; any device shows it in its GID table's ndevs.
            if let Some(p) = read(&dev.join("parent")) {
                netdevs.push((name.clone(), p));
            }
            for port in fs::read_dir(dev.join("ports")).into_iter().flatten().flatten() {
                for nd in fs::read_dir(port.path().join("gid_attrs/ndevs")).into_iter().flatten().flatten() {
                    if let Some(n) = read(&nd.path()) {
                        netdevs.push((name.clone(), n));
                    }
                }
            }
        }
        netdevs.sort();
        netdevs.dedup();
        let mut chars = Vec::new();
        for class in ["class/infiniband_verbs", "class/infiniband_mad"] {
            for c in list(class) {
                let (Some(cname), Some(ibdev)) =
                    (c.file_name().and_then(|n| n.to_str()).map(str::to_string), read(&c.join("ibdev")))
                else {
                    continue;
                };
                chars.push((ibdev, cname));
            }
        }
        RdmaIndex { netdevs, chars }
    }

    fn bound_to(&self, netdev: &str) -> Vec<String> {
        let mut v: Vec<String> = self.netdevs.iter().filter(|(_, n)| n == netdev).map(|(d, _)| d.clone()).collect();
        v.dedup();
        v
    }

    fn device(&self, sysfs: &Sysfs, name: String, binding: RdmaBinding) -> RdmaDev {
        let mut ports: Vec<RdmaPort> = fs::read_dir(sysfs.root.join("class/infiniband").join(&name).join("ports"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .map(|num| RdmaPort {
                num,
                state: port_state(sysfs, &name, num),
                link_layer: sysfs.ib_port_attr(&name, num, "link_layer"),
            })
            .collect();
        ports.sort_by_key(|p| p.num);
        let mut char_devs: Vec<String> =
            self.chars.iter().filter(|(d, _)| *d == name).map(|(_, c)| c.clone()).collect();
        char_devs.sort();
        RdmaDev { name, binding, ports, char_devs }
    }
}

/// Additions to the fake sysfs tree for what the inventory reads: IDs, NUMA, link state, RDMA ports and
/// character devices, IOMMU groups.
#[cfg(any(test, feature = "fixtures"))]
mod fake {
    use crate::kernel::sysfs::fake::FakeTree;
    use std::fs;
    use std::io;
    use std::os::unix::fs::symlink;

    impl FakeTree {
        /// `vendor`, `device` and `numa_node` of a PCI function.
        pub fn pci_ids(&self, pci: &str, vendor: &str, device: &str, numa: i32) -> io::Result<()> {
            fs::write(self.dev(pci).join("vendor"), format!("0x{vendor}\n"))?;
            fs::write(self.dev(pci).join("device"), format!("0x{device}\n"))?;
            fs::write(self.dev(pci).join("numa_node"), format!("{numa}\n"))
        }

        /// A netdev's `operstate` and ARP type (1 Ethernet, 32 InfiniBand).
        pub fn netdev_state(&self, netdev: &str, operstate: &str, arphrd: u32) -> io::Result<()> {
            let dir = self.root.join("class/net").join(netdev);
            fs::create_dir_all(&dir)?;
            fs::write(dir.join("operstate"), format!("{operstate}\n"))?;
            fs::write(dir.join("type"), format!("{arphrd}\n"))
        }

        /// An RDMA device's port state (`4: ACTIVE`, `1: DOWN`) and link layer.
        pub fn rdma_port(&self, dev: &str, port: u32, state: &str, link_layer: &str) -> io::Result<()> {
            let dir = self.root.join("class/infiniband").join(dev).join("ports").join(port.to_string());
            fs::create_dir_all(&dir)?;
            fs::write(dir.join("state"), format!("{state}\n"))?;
            fs::write(dir.join("link_layer"), format!("{link_layer}\n"))
        }

        /// A netdev-bound RDMA device (Soft-RoCE): `parent` names the netdev, no PCI parent.
        pub fn rdma_on_netdev(&self, dev: &str, netdev: &str) -> io::Result<()> {
            let dir = self.root.join("class/infiniband").join(dev);
            fs::create_dir_all(dir.join("ports/1"))?;
            fs::write(dir.join("parent"), format!("{netdev}\n"))
        }

        /// A character device of an RDMA device: `class/infiniband_verbs/uverbsN` or `class/infiniband_mad/
        /// {umad,issm}N` with its `ibdev` (and `port` for the MAD ones).
        pub fn rdma_char(&self, name: &str, ibdev: &str, port: Option<u32>) -> io::Result<()> {
            let class = if name.starts_with("uverbs") { "infiniband_verbs" } else { "infiniband_mad" };
            let dir = self.root.join("class").join(class).join(name);
            fs::create_dir_all(&dir)?;
            fs::write(dir.join("ibdev"), format!("{ibdev}\n"))?;
            if let Some(p) = port {
                fs::write(dir.join("port"), format!("{p}\n"))?;
            }
            Ok(())
        }

        /// An mlx5-like VF (vendor 15b3, device 101e, driver mlx5_core) with its own RDMA device `rdma` under its
        /// PCI function, port 1 ACTIVE on Ethernet.
        pub fn mlx5_vf(
            &self,
            pf_pci: &str,
            idx: u32,
            pci: &str,
            netdev: &str,
            rdma: &str,
            numa: i32,
        ) -> io::Result<()> {
            self.vf(pf_pci, idx, pci, Some(netdev), "mlx5_core")?;
            self.pci_ids(pci, "15b3", "101e", numa)?;
            self.rdma(pci, rdma, &[])?;
            self.rdma_port(rdma, 1, "4: ACTIVE", "Ethernet")
        }

        /// The `iommu_group` link of a PCI function.
        pub fn iommu_group(&self, pci: &str, group: u32) -> io::Result<()> {
            let g = self.root.join("kernel/iommu_groups").join(group.to_string());
            fs::create_dir_all(&g)?;
            symlink(format!("../../../kernel/iommu_groups/{group}"), self.dev(pci).join("iommu_group"))
        }

        /// Removes a VF's PCI directory (what a lower `sriov_numvfs` does), leaving the PF's stale link.
        pub fn remove_vf(&self, pci: &str) -> io::Result<()> {
            fs::remove_dir_all(self.dev(pci))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::sysfs::fake::FakeTree;

    fn node(name: &str) -> (Sysfs, FakeTree) {
        let root = std::env::temp_dir().join(format!("sriov-rdma-inventory-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let t = FakeTree::new(&root).unwrap();
        t.pf("0000:3b:00.0", "ens1f0", 4).unwrap();
        t.pci_ids("0000:3b:00.0", "15b3", "101d", 1).unwrap();
        t.netdev_state("ens1f0", "up", 1).unwrap();
        t.rdma("0000:3b:00.0", "mlx5_0", &[]).unwrap();
        // VF 0: mlx5 with its own RDMA device under the PCI function.
        t.mlx5_vf("0000:3b:00.0", 0, "0000:3b:00.2", "ens1f0v0", "mlx5_2", 1).unwrap();
        t.rdma_char("uverbs2", "mlx5_2", None).unwrap();
        t.rdma_char("umad2", "mlx5_2", Some(1)).unwrap();
        // VF 1: a netdev with a Soft-RoCE device bound to it.
        t.vf("0000:3b:00.0", 1, "0000:3b:00.3", Some("ens1f0v1"), "mlx5_core").unwrap();
        t.rdma_on_netdev("rxe0", "ens1f0v1").unwrap();
        t.rdma_port("rxe0", 1, "1: DOWN", "Ethernet").unwrap();
        t.rdma_char("uverbs7", "rxe0", None).unwrap();
        // VF 2: vfio-pci.
        t.vf("0000:3b:00.0", 2, "0000:3b:00.4", None, "vfio-pci").unwrap();
        t.iommu_group("0000:3b:00.4", 42).unwrap();
        (Sysfs::at(root), t)
    }

    fn pci(s: &str) -> PciAddr {
        PciAddr::parse(s).unwrap()
    }

    #[test]
    fn finds_pfs_vfs_rdma_devices_by_pci_parent_and_by_netdev() {
        let (s, _t) = node("scan");
        let inv = Inventory::scan(&s);
        assert_eq!(inv.pfs.len(), 1);
        let pf = &inv.pfs[0];
        assert_eq!(pf.netdev.as_deref(), Some("ens1f0"));
        assert_eq!(pf.ids, PciIds { vendor: Some("15b3".into()), device: Some("101d".into()) });
        assert_eq!((pf.numa_node, pf.link_type.as_deref(), pf.num_vfs, pf.total_vfs), (Some(1), Some("ether"), 4, 4));
        assert_eq!(pf.rdma, vec!["mlx5_0".to_string()]);
        assert_eq!(pf.vfs.len(), 3);

        let (_, v0) = inv.vf(&pci("0000:3b:00.2")).unwrap();
        assert_eq!(v0.rdma.len(), 1);
        assert_eq!((v0.rdma[0].name.as_str(), v0.rdma[0].binding), ("mlx5_2", RdmaBinding::Pci));
        assert_eq!(v0.rdma[0].char_devs, vec!["umad2".to_string(), "uverbs2".to_string()]);
        assert_eq!(v0.rdma[0].ports[0].state.as_deref(), Some("ACTIVE"));
        assert_eq!(v0.numa_node, Some(1));
        assert!(v0.problems(pf).is_empty());

        let (_, v1) = inv.vf(&pci("0000:3b:00.3")).unwrap();
        assert_eq!((v1.rdma[0].name.as_str(), v1.rdma[0].binding), ("rxe0", RdmaBinding::Netdev));
        assert_eq!(v1.rdma[0].char_devs, vec!["uverbs7".to_string()]);
        assert_eq!(
            v1.problems(pf),
            vec![Unhealthy::RdmaPortNotActive { device: "rxe0".into(), port: 1, state: "DOWN".into() }]
        );

        let (_, v2) = inv.vf(&pci("0000:3b:00.4")).unwrap();
        assert!(v2.is_vfio() && v2.userspace() && v2.rdma.is_empty());
        assert_eq!(v2.iommu_group.as_deref(), Some("42"));
    }

    #[test]
    fn pf_link_down_and_unbound_vf_are_problems_and_a_removed_vf_is_not_listed() {
        let (s, t) = node("health");
        t.netdev_state("ens1f0", "down", 1).unwrap();
        fs::remove_file(t.dev("0000:3b:00.2").join("driver")).unwrap();
        t.remove_vf("0000:3b:00.4").unwrap();
        let inv = Inventory::scan(&s);
        let (pf, v0) = inv.vf(&pci("0000:3b:00.2")).unwrap();
        let p = v0.problems(pf);
        assert!(p.contains(&Unhealthy::NoDriver), "{p:?}");
        assert!(p.contains(&Unhealthy::PfLinkDown { pf: "ens1f0".into(), operstate: "down".into() }), "{p:?}");
        assert!(inv.vf(&pci("0000:3b:00.4")).is_none());
        assert_eq!(inv.pf_named("ens1f0").map(|p| p.vfs.len()), Some(2));
    }

    #[test]
    fn rereading_links_and_ports_gives_what_a_full_scan_gives_and_says_whether_it_changed() {
        let (s, t) = node("reread");
        let mut inv = Inventory::scan(&s);
        assert!(!inv.reread_links(&s) && !inv.reread_ports(&s), "nothing changed yet");
        t.netdev_state("ens1f0", "down", 1).unwrap();
        t.rdma_port("rxe0", 1, "4: ACTIVE", "Ethernet").unwrap();
        t.rdma_port("mlx5_2", 1, "1: DOWN", "Ethernet").unwrap();
        assert!(inv.reread_links(&s), "the PF's operstate changed");
        assert!(inv.reread_ports(&s), "two ports changed");
        assert_eq!(inv, Inventory::scan(&s));
        let mut names = inv.netdevs();
        names.sort();
        assert_eq!(names, ["ens1f0", "ens1f0v0", "ens1f0v1"]);
        let _ = fs::remove_dir_all(&s.root);
    }
}
