//! The attachment record: one file per VF, written before the first change and removed after the last undo.
//!
//! `/var/lib/cni/sriov-rdma/<pci>.json` (0600, directory 0700), plus `<pci>.lock` for the per-VF flock.
//! `SRIOV_RDMA_STATE_DIR` moves it (tests).

use crate::cni::config::VfSettings;
use crate::cni::error::{CniError, CniResult, Code, IoContext};
use crate::cni::types::PciAddr;
use crate::kernel::link::Link;
use crate::kernel::vf::VfState;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_DIR: &str = "/var/lib/cni/sriov-rdma";
/// How long an ADD/DEL waits for another invocation on the same VF before answering "try again later".
const LOCK_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    pub pci: PciAddr,
    pub pf: String,
    pub pf_pci: PciAddr,
    pub vf_index: u32,
    pub driver: Option<String>,
    /// The settings this attachment changes on the PF.
    pub vf_settings: VfSettings,
    /// The VF's PF-side settings before ADD; `None` when the PF reports no VF table.
    pub vf_original: Option<VfState>,
    /// The netdev as it was in the host before ADD; `None` for a VF bound to a userspace driver.
    pub netdev: Option<Link>,
    /// The MTU ADD set in the pod, if any.
    pub mtu: Option<u32>,
    /// True once ADD has finished; a record left `false` is the trace of an interrupted ADD.
    pub complete: bool,
    /// The VF's RDMA device, when it has one and `rdma` is not "off".
    #[serde(default)]
    pub rdma: Option<crate::flow::rdma::RdmaRecord>,
    /// The device-info file this attachment wrote (removed by DEL).
    #[serde(default)]
    pub device_info: Option<PathBuf>,
    /// The network configuration ADD ran with, when it has IPAM: what an orphan's reclaim hands IPAM DEL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_config: Option<String>,
    /// CNI_PATH of the ADD, where the IPAM plugin was found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cni_path: Vec<PathBuf>,
}

pub struct Store {
    dir: PathBuf,
}

/// The per-VF lock; released when dropped.
pub struct VfLock {
    _file: File,
}

impl Store {
    pub fn open() -> CniResult<Store> {
        let dir = std::env::var_os("SRIOV_RDMA_STATE_DIR").map(PathBuf::from).unwrap_or_else(|| DEFAULT_DIR.into());
        Store::at(&dir)
    }

    pub fn at(dir: &Path) -> CniResult<Store> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .ctx(|| format!("creating the state directory {}", dir.display()))?;
        Ok(Store { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, pci: &PciAddr) -> PathBuf {
        self.dir.join(format!("{pci}.json"))
    }

    fn lock_file(&self, pci: &PciAddr) -> CniResult<File> {
        let p = self.dir.join(format!("{pci}.lock"));
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&p)
            .ctx(|| format!("opening the lock {}", p.display()))
    }

    /// Takes the VF's lock without waiting; `None` when another invocation holds it.
    pub fn try_lock(&self, pci: &PciAddr) -> CniResult<Option<VfLock>> {
        let f = self.lock_file(pci)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(VfLock { _file: f })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(CniError::io(format!("locking VF {pci}: {e}"))),
        }
    }

    /// Takes the VF's lock, waiting a bounded time; code 11 when it stays busy.
    pub fn lock(&self, pci: &PciAddr) -> CniResult<VfLock> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(l) = self.try_lock(pci)? {
                return Ok(l);
            }
            if start.elapsed() > LOCK_WAIT {
                return Err(CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "VF {pci} is locked by another ADD/DEL for more than {}s; try again later",
                        LOCK_WAIT.as_secs()
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    pub fn load(&self, pci: &PciAddr) -> CniResult<Option<Attachment>> {
        let p = self.path(pci);
        match fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| CniError::io(format!("reading the attachment record {}: {e}", p.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CniError::io(format!("reading the attachment record {}: {e}", p.display()))),
        }
    }

    /// Writes the record atomically: a temp file, then rename.
    pub fn save(&self, a: &Attachment) -> CniResult<()> {
        let p = self.path(&a.pci);
        let tmp = self.dir.join(format!(".{}.json.{}", a.pci, std::process::id()));
        let body = serde_json::to_vec_pretty(a).map_err(|e| CniError::io(format!("encoding the record: {e}")))?;
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&tmp)?;
            f.write_all(&body)?;
            fs::rename(&tmp, &p)
        };
        write().ctx(|| format!("writing the attachment record {}", p.display()))
    }

    pub fn remove(&self, pci: &PciAddr) -> CniResult<()> {
        match fs::remove_file(self.path(pci)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CniError::io(format!("removing the attachment record of {pci}: {e}")))
            }
            _ => Ok(()),
        }
    }

    /// Every record; a file that cannot be read is skipped with a warning, never fatal.
    pub fn all(&self) -> CniResult<Vec<Attachment>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir).ctx(|| format!("listing {}", self.dir.display()))? {
            let Ok(e) = e else { continue };
            let name = e.file_name();
            let Some(pci) = name.to_str().and_then(|n| n.strip_suffix(".json")).and_then(|p| PciAddr::parse(p).ok())
            else {
                continue;
            };
            match self.load(&pci) {
                Ok(Some(a)) => out.push(a),
                Ok(None) => {}
                Err(e) => crate::warn!("{e}"),
            }
        }
        Ok(out)
    }

    /// The record of one attachment, by the key the runtime uses.
    pub fn find(&self, network: &str, container_id: &str, ifname: &str) -> CniResult<Option<Attachment>> {
        Ok(self
            .all()?
            .into_iter()
            .find(|a| a.network == network && a.container_id == container_id && a.ifname == ifname))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn record(pci: &str) -> Attachment {
        Attachment {
            network: "rdma-net".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
            netns: "/var/run/netns/x".into(),
            pci: PciAddr::parse(pci).unwrap(),
            pf: "ens1f0".into(),
            pf_pci: PciAddr::parse("0000:3b:00.0").unwrap(),
            vf_index: 1,
            driver: Some("iavf".into()),
            vf_settings: VfSettings { vlan: Some(10), ..Default::default() },
            vf_original: Some(VfState { vlan: 0, trust: Some(false), ..Default::default() }),
            netdev: Some(Link {
                index: 7,
                name: "ens1f0v1".into(),
                mac: Some("02:00:00:00:00:07".parse().unwrap()),
                mtu: 1500,
                up: false,
                altnames: vec!["enp59s0f1v1".into()],
                parent: Some("0000:3b:02.1".into()),
            }),
            mtu: Some(9000),
            complete: true,
            rdma: Some(crate::flow::rdma::RdmaRecord {
                device: crate::flow::rdma::Found { name: "mlx5_3".into(), index: Some(4) },
                moved: true,
                gids: vec![crate::flow::rdma::GidIndex { address: "10.1.0.2".parse().unwrap(), index: 3 }],
            }),
            device_info: Some("/var/run/k8s.cni.cncf.io/devinfo/x.json".into()),
            ipam_config: None,
            cni_path: Vec::new(),
        }
    }

    fn store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Store::at(&dir.join("state")).unwrap()
    }

    #[test]
    fn record_round_trips_with_private_permissions() {
        let s = store("rt");
        let a = record("0000:3b:02.1");
        s.save(&a).unwrap();
        assert_eq!(s.load(&a.pci).unwrap(), Some(a.clone()));
        assert_eq!(s.find("rdma-net", "c1", "net1").unwrap(), Some(a.clone()));
        assert_eq!(s.find("rdma-net", "c2", "net1").unwrap(), None);
        let mode = fs::metadata(s.dir().join("0000:3b:02.1.json")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mode = fs::metadata(s.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        s.remove(&a.pci).unwrap();
        s.remove(&a.pci).unwrap();
        assert_eq!(s.load(&a.pci).unwrap(), None);
    }

    #[test]
    fn a_held_lock_is_not_granted_twice() {
        let s = store("lock");
        let pci = PciAddr::parse("0000:3b:02.2").unwrap();
        let held = s.try_lock(&pci).unwrap();
        assert!(held.is_some());
        assert!(s.try_lock(&pci).unwrap().is_none());
        drop(held);
        assert!(s.try_lock(&pci).unwrap().is_some());
    }
}
