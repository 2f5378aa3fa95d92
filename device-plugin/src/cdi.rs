//! The CDI specs the DRA driver writes for the claims it prepares (Container Device Interface, JSON in
//! `/var/run/cdi`): one file per claim, `<driver>-<claim UID>.json`, kind `<driver>/vf`, one CDI device per
//! allocated VF named `<claim UID>-<device name>` with the VF's character devices (devices::dev_nodes). The file is
//! the record of what was prepared: preparing again writes the same file, unpreparing removes it, and neither needs
//! the API server or memory of an earlier run.

use crate::devices::dev_nodes;
use serde::Serialize;
use sriov_rdma_cni::inventory::VfInfo;
use std::path::{Path, PathBuf};

/// The CDI version the specs declare: device nodes with a host path are in every version since 0.5.0; 0.6.0 is
/// what containerd 1.7+/2.x and CRI-O read.
pub const CDI_VERSION: &str = "0.6.0";

/// The CDI class of the devices (the kind is `<driver>/vf`).
pub const CLASS: &str = "vf";

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<CdiDevice>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CdiDevice {
    pub name: String,
    pub container_edits: Edits,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    pub device_nodes: Vec<DeviceNode>,
    /// `SRIOV_RDMA_DRA_<DEVICE>=<PCI address>`: which VF the container got (a container with several claims of
    /// this driver gets one each).
    pub env: Vec<String>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    pub path: String,
    pub host_path: String,
    pub permissions: String,
}

/// One allocated VF of a claim: the device's name in the ResourceSlice and the VF.
pub struct Allocated<'a> {
    pub device: String,
    pub vf: &'a VfInfo,
}

/// The spec file of a claim.
pub fn spec_path(cdi_dir: &Path, driver: &str, claim_uid: &str) -> PathBuf {
    cdi_dir.join(format!("{driver}-{claim_uid}.json"))
}

/// The CDI device name of an allocated device (names are unique across claims: a VF re-allocated to a new claim
/// never meets a stale spec of the old one under the same name).
pub fn device_name(claim_uid: &str, device: &str) -> String {
    format!("{claim_uid}-{device}")
}

/// The fully qualified CDI device ID the kubelet hands the runtime (`<driver>/vf=<name>`).
pub fn device_id(driver: &str, claim_uid: &str, device: &str) -> String {
    format!("{driver}/{CLASS}={}", device_name(claim_uid, device))
}

/// The spec for a claim's VFs; a character device missing under `dev_root` is an error naming it (the container
/// could not use the VF). A VF with neither an RDMA device nor vfio-pci (a netdev-only VF) gets the environment
/// variable alone: what the pod gets of it is its netdev, which the DRA attach moves into the pod (draattach.rs).
pub fn spec(driver: &str, claim_uid: &str, vfs: &[Allocated], dev_root: &Path) -> Result<Spec, String> {
    let mut devices = Vec::new();
    for a in vfs {
        let what = |e: String| format!("device {} (VF {}): {e}", a.device, a.vf.pci);
        let mut device_nodes = Vec::new();
        for n in dev_nodes(a.vf, dev_root).map_err(what)? {
            let host = dev_root.join(&n.rel);
            if !host.exists() {
                return Err(what(format!("{} does not exist", host.display())));
            }
            device_nodes.push(DeviceNode {
                path: format!("/dev/{}", n.rel),
                host_path: host.display().to_string(),
                permissions: "rw".into(),
            });
        }
        let var = a.device.replace(['-', '.'], "_").to_ascii_uppercase();
        devices.push(CdiDevice {
            name: device_name(claim_uid, &a.device),
            container_edits: Edits { device_nodes, env: vec![format!("SRIOV_RDMA_DRA_{var}={}", a.vf.pci)] },
        });
    }
    Ok(Spec { cdi_version: CDI_VERSION.into(), kind: format!("{driver}/{CLASS}"), devices })
}

/// Writes the claim's spec atomically (a runtime reading the directory never sees half a file).
pub fn write(cdi_dir: &Path, driver: &str, claim_uid: &str, spec: &Spec) -> Result<PathBuf, String> {
    let path = spec_path(cdi_dir, driver, claim_uid);
    let text = serde_json::to_vec_pretty(spec).map_err(|e| format!("encoding {}: {e}", path.display()))?;
    write_file(cdi_dir, &format!("{driver}-{claim_uid}.json"), &text, "the spec")
}

/// Writes `dir/name` atomically through a temporary dot file (the CDI cache reads only *.json and *.yaml, so the
/// temporary file is never taken for a spec); `what` names the file in an error.
pub fn write_file(dir: &Path, name: &str, text: &[u8], what: &str) -> Result<PathBuf, String> {
    let path = dir.join(name);
    let io = |doing: &str, e: std::io::Error| format!("{doing} {what} {}: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| io("writing", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming into place", e))?;
    Ok(path)
}

/// Removes the claim's spec; one that is not there is already unprepared.
pub fn remove(cdi_dir: &Path, driver: &str, claim_uid: &str) -> Result<(), String> {
    remove_file(&spec_path(cdi_dir, driver, claim_uid), "the CDI spec")
}

/// Removes `path`; one that is not there is no error.
pub fn remove_file(path: &Path, what: &str) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {what} {}: {e}", path.display())),
    }
}
