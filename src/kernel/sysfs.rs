//! VF discovery from sysfs: PF, VF index (`virtfnN`), netdev, bound driver.
//!
//! The root is `/sys`; the flow's context may point it at another tree (tests use a fake PCI tree whose
//! netdevs are real veth ends).

use crate::model::PciAddr;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use super::netns::Netns;
use nix::sched::CloneFlags;

/// Drivers that hand the VF to user space (DPDK and VMs): no netdev to move.
pub const USERSPACE_DRIVERS: [&str; 4] = ["vfio-pci", "uio_pci_generic", "igb_uio", "vfio_pci"];

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Gid {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// `RoCE v2`, `IB/RoCE v1`.
    pub kind: Option<String>,
    pub ndev: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Sysfs {
    pub root: PathBuf,
    /// A test tree (fake::FakeTree marks its root): it has no namespace-tagged view to mount.
    fixture: bool,
}

/// The file fake::FakeTree leaves at its root, so a tree says what it is wherever it is mounted.
pub const FIXTURE_MARK: &str = ".sriov-rdma-fixture";

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

/// Why a PCI function is not a VF (or PF) this plugin can use, as sysfs shows it. The flow says which
/// configuration key named it.
#[derive(Debug)]
pub enum NotUsable {
    /// No such PCI device (the directory that was looked for).
    NoDevice(PathBuf),
    /// A PCI device without a `physfn` link: not an SR-IOV VF.
    NotAVf,
    /// The VF's PF has no netdev in this namespace.
    PfWithoutNetdev(PciAddr),
    /// The PF's `virtfnN` links could not be listed.
    ListingVfs { pf: String, pf_pci: PciAddr, err: io::Error },
    /// The PF lists no `virtfnN` link to the VF.
    NotListedByPf { pf: String, pf_pci: PciAddr },
    /// A netdev that is not a PCI network device.
    NotPci,
    /// A PCI network device without SR-IOV (no `sriov_totalvfs`).
    NoSriov(PciAddr),
}

impl NotUsable {
    /// Whether the configuration named something that is not an SR-IOV device, rather than the host being in an
    /// unexpected state.
    pub fn is_config(&self) -> bool {
        matches!(self, NotUsable::NoDevice(_) | NotUsable::NotAVf | NotUsable::NotPci | NotUsable::NoSriov(_))
    }
}

impl std::fmt::Display for NotUsable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotUsable::NoDevice(dir) => write!(f, "no such PCI device ({} does not exist)", dir.display()),
            NotUsable::NotAVf => write!(f, "not an SR-IOV VF (it has no physfn link)"),
            NotUsable::PfWithoutNetdev(pf) => write!(f, "its PF {pf} has no netdev in the host namespace"),
            NotUsable::ListingVfs { pf, pf_pci, err } => write!(f, "listing the VFs of PF {pf} ({pf_pci}): {err}"),
            NotUsable::NotListedByPf { pf, pf_pci } => write!(f, "PF {pf} ({pf_pci}) has no virtfn link to it"),
            NotUsable::NotPci => write!(f, "no such PCI network device"),
            NotUsable::NoSriov(pci) => write!(f, "{pci} has no SR-IOV capability (no sriov_totalvfs)"),
        }
    }
}

/// Where sysfs has a PCI function ([`Sysfs::presence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Not in sysfs (removed, or its PF's VFs were disabled).
    Gone,
    /// In sysfs, bound to no driver.
    Unbound,
    /// Bound to a driver.
    Bound,
}

impl Sysfs {
    /// The sysfs at `root`: the kernel's, wherever it is mounted, unless the tree is marked as a fixture.
    pub fn at(root: PathBuf) -> Sysfs {
        let fixture = root.join(FIXTURE_MARK).exists();
        Sysfs { root, fixture }
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
    pub fn vf(&self, pci: &PciAddr) -> Result<Vf, NotUsable> {
        let dir = self.pci_dir(pci);
        if !dir.exists() {
            return Err(NotUsable::NoDevice(dir));
        }
        let pf_pci = link_name(&dir.join("physfn")).and_then(|l| PciAddr::parse(&l).ok()).ok_or(NotUsable::NotAVf)?;
        let pf = self.pf_netdev(&pf_pci).ok_or_else(|| NotUsable::PfWithoutNetdev(pf_pci.clone()))?;
        let index = match self.vfs_of(&pf_pci) {
            Ok(vfs) => vfs.into_iter().find(|(_, v)| v == pci).map(|(i, _)| i),
            Err(err) => return Err(NotUsable::ListingVfs { pf, pf_pci, err }),
        };
        let index = index.ok_or_else(|| NotUsable::NotListedByPf { pf: pf.clone(), pf_pci: pf_pci.clone() })?;
        Ok(Vf {
            pci: pci.clone(),
            pf_pci,
            pf,
            index,
            netdev: self.netdevs(pci).into_iter().next(),
            driver: self.driver(pci),
        })
    }

    /// The driver a PCI function is bound to.
    pub fn driver(&self, pci: &PciAddr) -> Option<String> {
        link_name(&self.pci_dir(pci).join("driver"))
    }

    /// Whether a PCI function is there and bound. A VF gone from sysfs, or bound to no driver (an interrupted
    /// rebind), has no netdev: it is in no namespace at all, neither a pod's nor the host's.
    pub fn presence(&self, pci: &PciAddr) -> Presence {
        if !self.pci_dir(pci).exists() {
            Presence::Gone
        } else if self.driver(pci).is_none() {
            Presence::Unbound
        } else {
            Presence::Bound
        }
    }

    /// The PCI address of a PF netdev, if it is an SR-IOV PF.
    pub fn pf_pci(&self, pf: &str) -> Result<PciAddr, NotUsable> {
        let dev = self.root.join("class/net").join(pf).join("device");
        let pci = link_name(&dev).and_then(|l| PciAddr::parse(&l).ok()).ok_or(NotUsable::NotPci)?;
        if !self.pci_dir(&pci).join("sriov_totalvfs").exists() {
            return Err(NotUsable::NoSriov(pci));
        }
        Ok(pci)
    }

    /// RDMA devices whose parent is this PCI function (`<pci>/infiniband/*`: mlx5 and other hardware).
    pub fn rdma_devices_of(&self, pci: &PciAddr) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.pci_dir(pci).join("infiniband"))
            .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    pub fn ib_port_dir(&self, dev: &str, port: u32) -> PathBuf {
        self.root.join("class/infiniband").join(dev).join("ports").join(port.to_string())
    }

    /// A port file of an RDMA device (`state`, `link_layer`, …), trimmed.
    pub fn ib_port_attr(&self, dev: &str, port: u32, file: &str) -> Option<String> {
        fs::read_to_string(self.ib_port_dir(dev, port).join(file)).ok().map(|s| s.trim().to_string())
    }

    /// The populated entries of a port's GID table, like `show_gids`.
    pub fn gids(&self, dev: &str, port: u32) -> Vec<Gid> {
        let dir = self.ib_port_dir(dev, port);
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(dir.join("gids")) else { return out };
        for e in rd.flatten() {
            let Some(index) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Some(gid) = fs::read_to_string(e.path()).ok().and_then(|g| g.trim().parse::<Ipv6Addr>().ok()) else {
                continue;
            };
            if gid.is_unspecified() {
                continue;
            }
            let attr = |kind: &str| {
                fs::read_to_string(dir.join("gid_attrs").join(kind).join(index.to_string()))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            };
            out.push(Gid { index, gid, kind: attr("types"), ndev: attr("ndevs") });
        }
        out.sort_by_key(|g| g.index);
        out
    }

    /// The RoCE v2 GID index of an address (IPv4 as `::ffff:a.b.c.d`) on a port.
    pub fn roce_v2_index(&self, dev: &str, port: u32, ip: IpAddr) -> Option<u32> {
        let want = match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        self.gids(dev, port)
            .into_iter()
            .find(|g| g.gid == want && g.kind.as_deref().is_some_and(|k| k.eq_ignore_ascii_case("RoCE v2")))
            .map(|g| g.index)
    }

    /// Runs `f` on the sysfs as namespace `ns` sees it. sysfs is namespace-tagged, so this mounts a fresh one
    /// in a private mount namespace on a thread inside `ns`. A fixture tree is read as it is.
    pub fn in_netns<T: Send>(&self, ns: &Netns, f: impl FnOnce(&Sysfs) -> T + Send) -> io::Result<T> {
        if self.fixture {
            return Ok(f(self));
        }
        ns.run(|| {
            use nix::mount::{mount, MsFlags};
            nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(io::Error::from)?;
            mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
                .map_err(io::Error::from)?;
            mount(
                Some("sysfs"),
                "/sys",
                Some("sysfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(io::Error::from)?;
            Ok(f(&Sysfs { root: PathBuf::from("/sys"), fixture: false }))
        })
    }

    /// Unbinds a PCI function from its driver and binds it again (mlx5 applies a VF GUID only then).
    pub fn rebind(&self, pci: &PciAddr) -> io::Result<()> {
        let name = self.driver(pci).ok_or_else(|| io::Error::other(format!("{pci} is not bound to a driver")))?;
        let dir = self.root.join("bus/pci/drivers").join(name);
        fs::write(dir.join("unbind"), pci.as_str())?;
        fs::write(dir.join("bind"), pci.as_str())
    }

    /// Binds a PCI function that is bound to no driver to `driver` (one an interrupted rebind left unbound).
    pub fn bind(&self, pci: &PciAddr, driver: &str) -> io::Result<()> {
        fs::write(self.root.join("bus/pci/drivers").join(driver).join("bind"), pci.as_str())
    }

    pub fn read_trimmed(&self, pci: &PciAddr, file: &str) -> Option<String> {
        fs::read_to_string(self.pci_dir(pci).join(file)).ok().map(|s| s.trim().to_string())
    }
}

/// A fake sysfs PCI tree with the layout of a real one (physfn, virtfnN, driver, net/, infiniband/), nothing
/// else. `SRIOV_RDMA_SYSFS` points the plugin at one; the tests, the benchmark and the host demo build them.
#[cfg(any(test, feature = "fixtures"))]
pub mod fake {
    use super::*;
    use std::os::unix::fs::symlink;

    pub struct FakeTree {
        pub root: PathBuf,
    }

    impl FakeTree {
        pub fn new(root: &Path) -> io::Result<FakeTree> {
            fs::create_dir_all(root.join("bus/pci/devices"))?;
            fs::create_dir_all(root.join("class/net"))?;
            fs::write(root.join(FIXTURE_MARK), b"a test tree: no namespace-tagged view\n")?;
            Ok(FakeTree { root: root.to_path_buf() })
        }

        pub fn dev(&self, pci: &str) -> PathBuf {
            self.root.join("bus/pci/devices").join(pci)
        }

        /// An SR-IOV PF with `total` VFs possible and `total` enabled.
        pub fn pf(&self, pci: &str, netdev: &str, total: u32) -> io::Result<()> {
            fs::create_dir_all(self.dev(pci).join("net").join(netdev))?;
            fs::write(self.dev(pci).join("sriov_totalvfs"), format!("{total}\n"))?;
            fs::write(self.dev(pci).join("sriov_numvfs"), format!("{total}\n"))?;
            fs::create_dir_all(self.root.join("class/net").join(netdev))?;
            symlink(format!("../../../bus/pci/devices/{pci}"), self.root.join("class/net").join(netdev).join("device"))
        }

        /// An RDMA device under a PCI function, with a GID table: (index, gid, type, ndev).
        pub fn rdma(&self, pci: &str, dev: &str, gids: &[(u32, &str, &str, &str)]) -> io::Result<()> {
            fs::create_dir_all(self.dev(pci).join("infiniband").join(dev))?;
            let port = self.root.join("class/infiniband").join(dev).join("ports/1");
            for sub in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
                fs::create_dir_all(port.join(sub))?;
            }
            for i in 0..8u32 {
                fs::write(port.join("gids").join(i.to_string()), "0000:0000:0000:0000:0000:0000:0000:0000\n")?;
            }
            for (i, gid, kind, ndev) in gids {
                fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n"))?;
                fs::write(port.join("gid_attrs/types").join(i.to_string()), format!("{kind}\n"))?;
                fs::write(port.join("gid_attrs/ndevs").join(i.to_string()), format!("{ndev}\n"))?;
            }
            Ok(())
        }

        /// VF `idx` of a PF: `physfn`, `virtfnN`, `driver`, and `net/<netdev>` when it has one.
        pub fn vf(&self, pf_pci: &str, idx: u32, pci: &str, netdev: Option<&str>, driver: &str) -> io::Result<()> {
            fs::create_dir_all(self.dev(pci))?;
            symlink(format!("../{pf_pci}"), self.dev(pci).join("physfn"))?;
            symlink(format!("../{pci}"), self.dev(pf_pci).join(format!("virtfn{idx}")))?;
            symlink(format!("../../../bus/pci/drivers/{driver}"), self.dev(pci).join("driver"))?;
            if let Some(n) = netdev {
                fs::create_dir_all(self.dev(pci).join("net").join(n))?;
            }
            Ok(())
        }

        /// Points a VF's `net/` entry at another name (what real sysfs shows after a rename).
        pub fn set_vf_netdev(&self, pci: &str, name: &str) -> io::Result<()> {
            let net = self.dev(pci).join("net");
            let _ = fs::remove_dir_all(&net);
            fs::create_dir_all(net.join(name))
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
        let t = FakeTree::new(&root).unwrap();
        t.pf("0000:3b:00.0", "ens1f0", 8).unwrap();
        t.vf("0000:3b:00.0", 0, "0000:3b:02.0", Some("ens1f0v0"), "iavf").unwrap();
        t.vf("0000:3b:00.0", 1, "0000:3b:02.1", Some("ens1f0v1"), "iavf").unwrap();
        t.vf("0000:3b:00.0", 10, "0000:3b:03.2", None, "vfio-pci").unwrap();
        fs::create_dir_all(root.join("bus/pci/devices/0000:00:1f.6")).unwrap();
        (Sysfs::at(root), t)
    }

    #[test]
    fn a_tree_says_itself_whether_it_is_a_fixture_not_its_path() {
        let (fake, _t) = tree("fixture");
        assert!(fake.fixture, "FakeTree marks its root");
        assert!(!Sysfs::at(PathBuf::from("/sys")).fixture);
        // A real sysfs mounted elsewhere (e.g. /host/sys in a container) is still the kernel's.
        let elsewhere = std::env::temp_dir().join(format!("sriov-rdma-sysfs-unmarked-{}", std::process::id()));
        fs::create_dir_all(&elsewhere).unwrap();
        assert!(!Sysfs::at(elsewhere.clone()).fixture);
        let _ = fs::remove_dir_all(&elsewhere);
        let _ = fs::remove_dir_all(&fake.root);
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
    fn presence_tells_gone_unbound_and_bound_apart() {
        let (s, _t) = tree("presence");
        assert_eq!(s.presence(&pci("0000:3b:02.1")), Presence::Bound);
        assert_eq!(s.presence(&pci("0000:99:00.1")), Presence::Gone);
        fs::remove_file(s.pci_dir(&pci("0000:3b:02.1")).join("driver")).unwrap();
        assert_eq!(s.presence(&pci("0000:3b:02.1")), Presence::Unbound);
        let _ = fs::remove_dir_all(&s.root);
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
        assert!(matches!(e, NotUsable::NotAVf) && e.is_config(), "{e}");
        let e = s.vf(&pci("0000:99:00.1")).unwrap_err();
        assert!(matches!(e, NotUsable::NoDevice(_)) && e.to_string().contains("no such PCI device"), "{e}");
    }

    #[test]
    fn gid_table_lookup_finds_roce_v2_of_an_address() {
        let (s, t) = tree("gids");
        t.rdma(
            "0000:3b:02.1",
            "mlx5_3",
            &[
                (0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "IB/RoCE v1", "net1"),
                (1, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCE v2", "net1"),
                (2, "0000:0000:0000:0000:0000:ffff:0a01:0002", "IB/RoCE v1", "net1"),
                (3, "0000:0000:0000:0000:0000:ffff:0a01:0002", "RoCE v2", "net1"),
            ],
        )
        .unwrap();
        assert_eq!(s.rdma_devices_of(&pci("0000:3b:02.1")), vec!["mlx5_3".to_string()]);
        assert!(s.rdma_devices_of(&pci("0000:3b:02.0")).is_empty());
        assert_eq!(s.gids("mlx5_3", 1).len(), 4, "empty entries are skipped");
        assert_eq!(s.roce_v2_index("mlx5_3", 1, "10.1.0.2".parse().unwrap()), Some(3));
        assert_eq!(s.roce_v2_index("mlx5_3", 1, "10.1.0.3".parse().unwrap()), None);
        assert_eq!(s.roce_v2_index("mlx5_3", 1, "fe80::ff:fe00:1".parse().unwrap()), Some(1));
    }

    #[test]
    fn rebind_writes_the_address_to_unbind_then_bind_of_its_driver() {
        // Fake only: no mlx5 here. A real driver directory takes the writes as commands.
        let (s, _t) = tree("rebind");
        let drv = s.root.join("bus/pci/drivers/iavf");
        fs::create_dir_all(&drv).unwrap();
        s.rebind(&pci("0000:3b:02.1")).unwrap();
        assert_eq!(fs::read_to_string(drv.join("unbind")).unwrap(), "0000:3b:02.1");
        assert_eq!(fs::read_to_string(drv.join("bind")).unwrap(), "0000:3b:02.1");
        assert!(s.rebind(&pci("0000:00:1f.6")).is_err(), "no driver link: nothing to rebind");
    }

    #[test]
    fn vfs_are_listed_by_number_not_by_name() {
        let (s, _t) = tree("order");
        let idx: Vec<u32> = s.vfs_of(&pci("0000:3b:00.0")).unwrap().into_iter().map(|(i, _)| i).collect();
        assert_eq!(idx, vec![0, 1, 10]);
        assert_eq!(s.pf_pci("ens1f0").unwrap(), pci("0000:3b:00.0"));
        assert!(matches!(s.pf_pci("eth9").unwrap_err(), NotUsable::NotPci));
    }
}
