//! The VF's RDMA device in the attach/detach flow: discovery, the `rdma` policy, the netns move, the RoCE GID
//! of each pod address, and the NPWG device-info file.

use super::attachment::{Found, GidIndex};
use crate::cni::config::RdmaPolicy;
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::kernel::confined::Confined;
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{NetnsMode, RdmaSocket};
use crate::kernel::sysfs::{Sysfs, Vf};
use crate::model::PciAddr;
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long ADD waits for the kernel to put a pod address into the GID table.
pub const GID_WAIT: Duration = Duration::from_secs(2);

/// What ADD does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing RDMA to do; the reason goes to the log.
    Skip(String),
    /// The device stays where it is (visible from the pod in shared mode); the reason goes to the log.
    Leave(Found, String),
    /// Move it into the pod.
    Move(Found),
}

const FIX_SHARED: &str = "run `rdma system set netns exclusive` while no other network namespace exists, \
or boot with `options ib_core netns_mode=0`";

/// The policy matrix: `rdma` × (no RDMA subsystem | shared | exclusive) × (device | none). Pure, so it is
/// tested whole; `isolated` fails here, before anything is touched, with the fix in the message.
pub fn decide(policy: RdmaPolicy, vf: &PciAddr, found: Option<Found>, mode: Option<NetnsMode>) -> CniResult<Decision> {
    let isolated = |why: String| CniError::config(format!("rdma \"isolated\": {why}"));
    match (policy, mode, found) {
        (RdmaPolicy::Off, _, _) => Ok(Decision::Skip("rdma is \"off\"".into())),
        (RdmaPolicy::Isolated, None, _) => Err(isolated(
            "this host has no RDMA subsystem (NETLINK_RDMA is missing); load ib_core and the NIC's RDMA driver".into(),
        )),
        (RdmaPolicy::Isolated, _, None) => Err(isolated(format!(
            "VF {vf} has no RDMA device (none under /sys/bus/pci/devices/{vf}/infiniband, no RDMA port on its netdev)"
        ))),
        (RdmaPolicy::Isolated, Some(NetnsMode::Shared), Some(_)) => Err(isolated(format!(
            "the RDMA subsystem is in shared netns mode, where a device cannot be given to one pod; {FIX_SHARED}"
        ))),
        (_, Some(NetnsMode::Exclusive), Some(f)) if f.index.is_some() => Ok(Decision::Move(f)),
        (RdmaPolicy::Isolated, Some(NetnsMode::Exclusive), Some(f)) => {
            Err(isolated(format!("RDMA device {} is not visible to RDMA netlink", f.name)))
        }
        (RdmaPolicy::Auto, None, _) => Ok(Decision::Skip("no RDMA subsystem on this host; netdev only".into())),
        (RdmaPolicy::Auto, _, None) => Ok(Decision::Skip(format!("VF {vf} has no RDMA device; netdev only"))),
        (RdmaPolicy::Auto, Some(NetnsMode::Shared), Some(f)) => {
            let why = format!("shared netns mode: RDMA device {} stays visible in every namespace, the pod included; to isolate it, {FIX_SHARED}", f.name);
            Ok(Decision::Leave(f, why))
        }
        (RdmaPolicy::Auto, Some(NetnsMode::Exclusive), Some(f)) => {
            let why = format!("RDMA device {} is not visible to RDMA netlink", f.name);
            Ok(Decision::Leave(f, why))
        }
    }
}

/// Finds the VF's RDMA device: its PCI function's `infiniband/` entry, else the device whose port is bound
/// to the VF netdev (RoCE on a netdev, e.g. soft-RoCE).
pub fn discover(
    sysfs: &Sysfs,
    vf: &Vf,
    ifindex: Option<u32>,
    sock: Option<&mut RdmaSocket>,
) -> io::Result<Option<Found>> {
    let by_pci = sysfs.rdma_devices_of(&vf.pci).into_iter().next();
    let Some(sock) = sock else { return Ok(by_pci.map(|name| Found { name, index: None })) };
    if let Some(name) = by_pci {
        let index = sock.devices()?.into_iter().find(|d| d.name == name).map(|d| d.index);
        return Ok(Some(Found { name, index }));
    }
    match ifindex {
        Some(ifx) => {
            let dev = sock.device_with_port(|p| p.ndev_index == Some(ifx))?;
            Ok(dev.map(|d| Found { name: d.name, index: Some(d.index) }))
        }
        None => Ok(None),
    }
}

/// Moves an RDMA device into another namespace; a trait so the policy's fallbacks are tested with a fake.
pub trait RdmaControl {
    fn move_device(&mut self, index: u32, ns_fd: RawFd) -> io::Result<()>;
}

impl RdmaControl for RdmaSocket {
    fn move_device(&mut self, index: u32, ns_fd: RawFd) -> io::Result<()> {
        RdmaSocket::move_device(self, index, ns_fd)
    }
}

/// The move into the pod. `auto` falls back to leaving the device (and says why); `isolated` fails.
pub fn move_in(
    ctl: &mut dyn RdmaControl,
    policy: RdmaPolicy,
    dev: &Found,
    pod_fd: RawFd,
    netns: &str,
) -> CniResult<bool> {
    let Some(index) = dev.index else { return Ok(false) };
    match ctl.move_device(index, pod_fd) {
        Ok(()) => Ok(true),
        Err(e) if policy == RdmaPolicy::Auto => {
            crate::warn!(
                "moving RDMA device {} into {netns}: {e}; leaving it in the host namespace (rdma \"auto\")",
                dev.name
            );
            Ok(false)
        }
        Err(e) => Err(CniError::from_io(format!("moving RDMA device {} (index {index}) into {netns}", dev.name), &e)),
    }
}

/// The move back, from a socket opened inside the pod (the kernel looks the device up in the sender's
/// namespace). A device the pod no longer sees is already back: nothing to do.
pub fn move_out(pod: &Netns, host_fd: RawFd, dev: &Found) -> CniResult<()> {
    let Some(index) = dev.index else { return Ok(()) };
    let Some(mut sock) =
        crate::kernel::rdma::open(Some(pod)).ctx(|| format!("opening RDMA netlink in {}", pod.path))?
    else {
        return Ok(()); // no RDMA subsystem: nothing can have moved
    };
    let visible = sock.devices().ctx(|| format!("listing RDMA devices in {}", pod.path))?;
    if !visible.iter().any(|d| d.index == index) {
        crate::info!("RDMA device {} is not in {}; nothing to move back", dev.name, pod.path);
        return Ok(());
    }
    sock.move_device(index, host_fd)
        .ctx(|| format!("moving RDMA device {} from {} back to the host", dev.name, pod.path))
}

/// What port 1 of an RDMA device shows a namespace.
#[derive(Debug, PartialEq, Eq)]
pub enum GidLookup {
    /// The device is not visible there (e.g. soft-RoCE destroyed with its netdev's move).
    NotVisible,
    /// An InfiniBand port: no RoCE GIDs to look for.
    InfiniBand,
    /// The RoCE v2 GID index of each address that has one.
    Found(Vec<GidIndex>),
}

/// Reads port 1 of `dev` as namespace `ns` sees it, in one sysfs mount: visibility, link layer, and the RoCE v2
/// GID index of each address, waiting up to `wait` for the kernel to fill the table.
pub fn lookup_gids(sysfs: &Sysfs, ns: &Netns, dev: &str, ips: &[IpAddr], wait: Duration) -> io::Result<GidLookup> {
    sysfs.in_netns(ns, |s| {
        if !s.ib_port_dir(dev, 1).exists() {
            return GidLookup::NotVisible;
        }
        if s.ib_port_attr(dev, 1, "link_layer").as_deref() == Some("InfiniBand") {
            return GidLookup::InfiniBand;
        }
        let deadline = Instant::now() + wait;
        loop {
            let found: Vec<GidIndex> = ips
                .iter()
                .filter_map(|ip| s.roce_v2_index(dev, 1, *ip).map(|index| GidIndex { address: *ip, index }))
                .collect();
            if found.len() == ips.len() || Instant::now() >= deadline {
                return GidLookup::Found(found);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// A pod address without a RoCE v2 GID fails ADD under "isolated" and is a warning under "auto".
pub fn gid_verdict(policy: RdmaPolicy, ips: &[IpAddr], found: &[GidIndex], dev: &str, netns: &str) -> CniResult<()> {
    let Some(missing) = ips.iter().find(|ip| !found.iter().any(|g| g.address == **ip)) else { return Ok(()) };
    let msg = format!("no RoCE v2 GID for {missing} on {dev} as {netns} sees it after {}s", GID_WAIT.as_secs());
    if policy == RdmaPolicy::Isolated {
        return Err(CniError::io(msg));
    }
    crate::warn!("{msg}");
    Ok(())
}

/// The NPWG device-info file (spec 1.1.0, type `pci`) this plugin writes for a VF, byte for byte.
pub fn device_info(pci: &PciAddr, pf_pci: &PciAddr, rdma: Option<&str>) -> String {
    let mut pci_obj = serde_json::json!({"pci-address": pci.as_str(), "pf-pci-address": pf_pci.as_str()});
    if let Some(r) = rdma {
        pci_obj["rdma-device"] = serde_json::Value::from(r);
    }
    serde_json::json!({"type": "pci", "version": "1.1.0", "pci": pci_obj}).to_string()
}

/// The device plugin's own directory below the node's device-info directory (its Allocate writes
/// `dp/<resource>-<pci>-device.json` there): no configuration's file goes there, nor a file named so.
pub const DEVICE_PLUGIN_DIR: &str = "dp";

/// Where a configuration's device-info file `path` may go: inside the node's device-info directory `base`, and
/// not in the device plugin's own directory; why not, otherwise.
pub fn device_info_place(base: &Path, path: &Path) -> Result<Confined, String> {
    let at = Confined::new(base, path)?;
    if at.top() == DEVICE_PLUGIN_DIR {
        return Err(format!(
            "is in {}/{DEVICE_PLUGIN_DIR}/, the device plugin's own files, which no network configuration may touch",
            base.display()
        ));
    }
    Ok(at)
}

/// Writes the NPWG device-info file (spec 1.1.0) if it does not exist yet, only inside the node's device-info
/// directory `base` (not the device plugin's part) and never through a symbolic link; true when this call wrote it.
pub fn write_device_info(
    base: &Path,
    path: &Path,
    pci: &PciAddr,
    pf_pci: &PciAddr,
    rdma: Option<&str>,
) -> io::Result<bool> {
    use std::io::Write;
    let at = device_info_place(base, path)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{why} ({}/)", base.display())))?;
    match at.create_new(0o444)? {
        Some(mut f) => {
            f.write_all(device_info(pci, pf_pci, rdma).as_bytes())?;
            Ok(true)
        }
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vf() -> PciAddr {
        PciAddr::parse("0000:3b:02.1").unwrap()
    }

    fn dev(index: Option<u32>) -> Option<Found> {
        Some(Found { name: "mlx5_3".into(), index })
    }

    #[test]
    fn policy_matrix() {
        use NetnsMode::*;
        use RdmaPolicy::*;
        let cases: Vec<(RdmaPolicy, Option<NetnsMode>, Option<Found>, &str)> = vec![
            (Off, Some(Exclusive), dev(Some(2)), "skip"),
            (Off, Some(Shared), dev(Some(2)), "skip"),
            (Off, None, None, "skip"),
            (Auto, Some(Exclusive), dev(Some(2)), "move"),
            (Auto, Some(Shared), dev(Some(2)), "leave"),
            (Auto, Some(Exclusive), None, "skip"),
            (Auto, Some(Shared), None, "skip"),
            (Auto, None, dev(None), "skip"),
            (Auto, Some(Exclusive), dev(None), "leave"),
            (Isolated, Some(Exclusive), dev(Some(2)), "move"),
            (Isolated, Some(Shared), dev(Some(2)), "err:netns exclusive"),
            (Isolated, Some(Exclusive), None, "err:has no RDMA device"),
            (Isolated, Some(Shared), None, "err:has no RDMA device"),
            (Isolated, None, dev(None), "err:no RDMA subsystem"),
            (Isolated, Some(Exclusive), dev(None), "err:not visible"),
        ];
        for (policy, mode, found, want) in cases {
            let got = decide(policy, &vf(), found, mode);
            let label = format!("{policy:?} {mode:?}");
            match (want, got) {
                ("skip", Ok(Decision::Skip(_)))
                | ("move", Ok(Decision::Move(_)))
                | ("leave", Ok(Decision::Leave(..))) => {}
                (w, Err(e)) if w.starts_with("err:") => {
                    assert!(e.msg.contains(&w[4..]), "{label}: {}", e.msg);
                    assert!(e.msg.starts_with("rdma \"isolated\""), "{label}: {}", e.msg);
                    assert_eq!(e.code, crate::cni::error::Code::InvalidConfig);
                }
                (w, got) => panic!("{label}: want {w}, got {got:?}"),
            }
        }
        let Err(e) = decide(Isolated, &vf(), dev(Some(1)), Some(Shared)) else { panic!() };
        assert!(e.msg.contains("rdma system set netns exclusive") && e.msg.contains("netns_mode=0"), "{}", e.msg);
    }

    struct FakeRdma {
        moves: Vec<(u32, RawFd)>,
        refuse: bool,
    }

    impl RdmaControl for FakeRdma {
        fn move_device(&mut self, index: u32, ns_fd: RawFd) -> io::Result<()> {
            if self.refuse {
                return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
            }
            self.moves.push((index, ns_fd));
            Ok(())
        }
    }

    #[test]
    fn a_refused_move_falls_back_in_auto_and_fails_in_isolated() {
        let d = Found { name: "rxe0".into(), index: Some(4) };
        let mut ok = FakeRdma { moves: vec![], refuse: false };
        assert!(move_in(&mut ok, RdmaPolicy::Auto, &d, 9, "/var/run/netns/x").unwrap());
        assert_eq!(ok.moves, vec![(4, 9)]);
        let mut no = FakeRdma { moves: vec![], refuse: true };
        assert!(!move_in(&mut no, RdmaPolicy::Auto, &d, 9, "/var/run/netns/x").unwrap());
        let e = move_in(&mut no, RdmaPolicy::Isolated, &d, 9, "/var/run/netns/x").unwrap_err();
        assert!(e.msg.contains("moving RDMA device rxe0 (index 4) into /var/run/netns/x"), "{}", e.msg);
        let mut none = FakeRdma { moves: vec![], refuse: false };
        assert!(!move_in(&mut none, RdmaPolicy::Auto, &Found { name: "x".into(), index: None }, 9, "ns").unwrap());
        assert!(none.moves.is_empty());
    }

    #[test]
    fn a_missing_gid_fails_isolated_and_not_auto() {
        let ips: Vec<IpAddr> = vec!["10.1.0.2".parse().unwrap(), "fd00::2".parse().unwrap()];
        let one = vec![GidIndex { address: ips[0], index: 3 }];
        let both = vec![one[0].clone(), GidIndex { address: ips[1], index: 5 }];
        assert!(gid_verdict(RdmaPolicy::Isolated, &ips, &both, "mlx5_3", "/var/run/netns/x").is_ok());
        let e = gid_verdict(RdmaPolicy::Isolated, &ips, &one, "mlx5_3", "/var/run/netns/x").unwrap_err();
        assert!(e.msg.contains("no RoCE v2 GID for fd00::2 on mlx5_3 as /var/run/netns/x sees it"), "{}", e.msg);
        assert!(gid_verdict(RdmaPolicy::Auto, &ips, &one, "mlx5_3", "/var/run/netns/x").is_ok());
    }

    #[test]
    fn device_info_is_written_once_read_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sriov-rdma-devinfo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = dir.join("sub/net1.json");
        let pf = PciAddr::parse("0000:3b:00.0").unwrap();
        assert!(write_device_info(&dir, &p, &vf(), &pf, Some("mlx5_3")).unwrap());
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(v["type"], "pci");
        assert_eq!(v["version"], "1.1.0");
        assert_eq!(v["pci"]["pci-address"], "0000:3b:02.1");
        assert_eq!(v["pci"]["pf-pci-address"], "0000:3b:00.0");
        assert_eq!(v["pci"]["rdma-device"], "mlx5_3");
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o444);
        assert!(!write_device_info(&dir, &p, &vf(), &pf, None).unwrap(), "an existing file is left alone");
        let outside = dir.with_extension("elsewhere").join("net1.json");
        assert!(write_device_info(&dir, &outside, &vf(), &pf, None).is_err());
        assert!(!outside.exists(), "nothing written outside the device-info directory");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
