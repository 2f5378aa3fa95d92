//! What the node lets a configuration do, decided before anything changes. A NetworkAttachmentDefinition is
//! tenant input: its `logFile` and `runtimeConfig.CNIDeviceInfoFile` stay inside the node's directories and never
//! pass through a symbolic link (nor reach the device plugin's own files), its `deviceID`/`pfName`, `vlan` and VF
//! settings must be within the node policy (which also sets what the configuration leaves out), and a VF the
//! kubelet manages is this pod's only if the kubelet allocated it to this pod (docs/security.md).

use super::context::{not_usable, Paths};
use crate::cni::config::{NetConf, VfSource};
use crate::cni::env::{CniEnv, Command};
use crate::cni::error::{CniError, CniResult, Code};
use crate::kernel::confined::{is_symlink_refusal, Confined};
use crate::kubelet::{dra_claim_of, Checkpoint, CHECKPOINT};
use crate::model::PciAddr;
use crate::policy::{Policy, Request};
use crate::vf_setting::VfSettings;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// `path` (the value of `key`) inside the node's directory `base` as `place` allows it, with no symbolic link on
/// the way now.
fn confine(
    key: &str,
    base: &Path,
    path: &Path,
    place: fn(&Path, &Path) -> Result<Confined, String>,
) -> CniResult<Confined> {
    let refused = |why: String| {
        CniError::config(format!("{key} {}: {why} (this node keeps it inside {}/)", path.display(), base.display()))
    };
    let c = place(base, path).map_err(refused)?;
    c.no_symlink_yet().map_err(|e| refused(e.to_string()))?;
    Ok(c)
}

/// Sets up the log: `logFile` inside the node's log directory, else stderr. A `logFile` outside it or through a
/// symbolic link is never opened: the log goes to the file of that name in the node's log directory instead (a
/// NAD written for sriov-cni, whose documented example logs to /tmp, keeps working), and the log says so. A file
/// that cannot be opened at all leaves the log on stderr, said there; no command fails over where it logs.
pub fn init_log(paths: &Paths, conf: &NetConf, _command: Command) -> CniResult<()> {
    let Some(path) = &conf.log_file else {
        crate::log::init(conf.log_level, None);
        return Ok(());
    };
    let open = |p: &Path| {
        confine("logFile", &paths.log_dir, p, Confined::new).and_then(|at| {
            crate::log::open(&at).map_err(|e| {
                if is_symlink_refusal(&e) {
                    CniError::config(format!("logFile {}: {e}", p.display()))
                } else {
                    CniError::from_io(format!("opening logFile {}", p.display()), &e)
                }
            })
        })
    };
    match open(path) {
        Ok(f) => crate::log::init(conf.log_level, Some(f)),
        Err(e) if e.code == Code::InvalidConfig => {
            let name = path.file_name().filter(|n| !n.is_empty()).unwrap_or(OsStr::new(DEFAULT_LOG));
            let instead = paths.log_dir.join(name);
            match open(&instead) {
                Ok(f) => crate::log::init(conf.log_level, Some(f)),
                Err(e2) => {
                    crate::log::init(conf.log_level, None);
                    crate::warn!("{e2}; logging to stderr");
                }
            }
            crate::warn!("{e}; logging to {} instead", instead.display());
        }
        Err(e) => {
            crate::log::init(conf.log_level, None);
            crate::warn!("{e}; logging to stderr");
        }
    }
    Ok(())
}

/// The log file in the node's log directory when `logFile` names no file.
const DEFAULT_LOG: &str = "sriov-rdma.log";

/// Which VFs the kubelet gave this pod: its checkpoint (none on a node without a kubelet or device plugin) and
/// the pod's UID from CNI_ARGS (`K8S_POD_UID`, set by the container runtime, not by the configuration).
pub struct KubeletClaims {
    file: PathBuf,
    /// The DRA driver's prepared claims ([`crate::kubelet::DRA_CLAIMS`]).
    dra_claims: PathBuf,
    checkpoint: Option<Checkpoint>,
    pod_uid: Option<String>,
}

impl KubeletClaims {
    /// Reads the checkpoint. One that cannot be read or decoded fails ADD (fail closed, code 5): the kubelet
    /// replaces it by a rename, so a half-written file is never seen, and guessing would hand out VFs it manages.
    pub fn load(paths: &Paths, env: &CniEnv) -> CniResult<KubeletClaims> {
        let file = paths.kubelet_dir.join(CHECKPOINT);
        let checkpoint = Checkpoint::read(&file).map_err(|e| {
            CniError::io(format!(
                "{e}; nothing changed: without it this node cannot tell which pod the kubelet gave which VF \
                 ({} names the kubelet's device-plugin directory)",
                Paths::KUBELET_VAR
            ))
        })?;
        let pod_uid = env.args.get("K8S_POD_UID").filter(|u| !u.is_empty()).cloned();
        let root = paths.kubelet_dir.parent().unwrap_or(Path::new("/"));
        Ok(KubeletClaims { file, dra_claims: root.join(crate::kubelet::DRA_CLAIMS), checkpoint, pod_uid })
    }

    /// `deviceID`: refused (code 7) when the kubelet manages the VF and did not allocate it to this pod.
    pub fn admit(&self, pci: &PciAddr) -> CniResult<()> {
        let Some(cp) = &self.checkpoint else { return Ok(()) };
        let Some(resource) = cp.resource_of(pci) else { return Ok(()) };
        let this_pod = match &self.pod_uid {
            Some(uid) if cp.allocated_to(uid, pci) => return Ok(()),
            Some(uid) => {
                // A VF of a `dra: true` resource: the pod's prepared claim holds it (the DRA attach's ADD).
                if let Some(claim) = dra_claim_of(&self.dra_claims, uid, pci).map_err(CniError::io)? {
                    crate::info!("deviceID {pci}: held for this pod by its prepared DRA claim {claim}");
                    return Ok(());
                }
                format!("this pod (K8S_POD_UID {uid})")
            }
            None => "this pod (CNI_ARGS carries no K8S_POD_UID)".to_string(),
        };
        let to_whom = if cp.holders(pci).next().is_some() { "to another pod" } else { "to no pod" };
        Err(CniError::config(format!(
            "deviceID {pci}: the kubelet manages this VF as resource {resource} and allocated it {to_whom}, not to \
             {this_pod}; request {resource} in the pod's resources (resources.limits) and let Multus pass the VF the \
             kubelet allocates; nothing changed (kubelet checkpoint {})",
            self.file.display()
        )))
    }

    /// Refused (code 7) before anything changes: a rebind (`what`, e.g. an mlx5 GUID) of a VF the kubelet manages
    /// whose RDMA devices `rdma` its device plugin named for the pod's containers ([`Checkpoint::rebind_refusal`]).
    pub fn rebind(&self, pci: &PciAddr, rdma: &[String], what: &str) -> CniResult<()> {
        match self.checkpoint.as_ref().and_then(|cp| cp.rebind_refusal(pci, rdma, what)) {
            Some(why) => Err(CniError::config(why)),
            None => Ok(()),
        }
    }

    /// Refused (code 7) before anything changes: a VF the kubelet manages whose RDMA device `dev` is bound to its
    /// netdev (Soft-RoCE). Its device plugin gave the pod's containers that device's character devices, and moving
    /// the netdev into the pod destroys the device: they would hold a device that is gone (or, once the number is
    /// reused, another's). Such a VF is for pods that take the resource without a network attachment.
    pub fn netdev_bound_rdma(&self, pci: &PciAddr, dev: &str) -> CniResult<()> {
        let Some(resource) = self.checkpoint.as_ref().and_then(|cp| cp.resource_of(pci)) else { return Ok(()) };
        Err(CniError::config(format!(
            "VF {pci}: its RDMA device {dev} is bound to the VF's netdev (Soft-RoCE), and moving the netdev into the              pod destroys it; the kubelet manages this VF as resource {resource}, whose device plugin gave the pod's              containers {dev}'s character devices: take this resource without a network attachment (its netdev              stays on the node), or attach VFs with their own RDMA function; nothing changed"
        )))
    }

    /// `pfName`: the resource of a VF ADD must pass over, one the kubelet manages and did not allocate to this pod.
    pub fn withheld(&self, pci: &PciAddr) -> Option<String> {
        self.checkpoint.as_ref()?.withheld(pci, self.pod_uid.as_deref()).map(str::to_string)
    }
}

/// ADD's checks: the device-info file's place, the kubelet's allocation of a `deviceID`, and the node policy.
/// Allowed: the VF settings ADD applies, the configuration's with what the policy sets where it leaves one out.
pub fn add(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<VfSettings> {
    super::chain::refuse_rdma_cni(paths, conf, env)?;
    if let Some(p) = &conf.device_info_file {
        confine("runtimeConfig.CNIDeviceInfoFile", &paths.devinfo_dir, p, super::rdma::device_info_place)?;
    }
    if let Some(VfSource::Device(pci)) = &conf.source {
        KubeletClaims::load(paths, env)?.admit(pci)?;
    }
    let Some(policy) = Policy::load(&paths.policy)? else { return Ok(conf.vf.clone()) };
    let sysfs = paths.sysfs();
    let (pf, pf_pci) = match &conf.source {
        None => return Ok(conf.vf.clone()), // refused by ADD itself, naming the keys
        Some(VfSource::Device(pci)) => {
            let vf = sysfs.vf(pci).map_err(|e| not_usable(format!("deviceID {pci}"), e))?;
            (vf.pf, vf.pf_pci)
        }
        Some(VfSource::Pf(name)) => {
            (name.clone(), sysfs.pf_pci(name).map_err(|e| not_usable(format!("pfName {name}"), e))?)
        }
    };
    policy.admit(&Request {
        pf: &pf,
        pf_pci: pf_pci.as_str(),
        namespace: env.args.get("K8S_POD_NAMESPACE").map(String::as_str).filter(|n| !n.is_empty()),
        vf: &conf.vf,
    })
}
