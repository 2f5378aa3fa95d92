//! Doctor, "why does a pod get no RDMA resource?": the kubelet's device-plugin registration, which pod holds
//! which VF, and `--config FILE`: whether a network configuration would find a VF, by the checks ADD makes.
//!
//! What this node's device plugin advertises (healthy and unhealthy VFs, and why) is the device plugin's to say:
//! [`Advertised`] is where it plugs in. Until one is given, the report shows what the kubelet recorded.

use super::Finding;
use crate::cni::config::NetConf;
use crate::cni::error::CniError;
use crate::flow::attachment::Attachment;
use crate::flow::context::Paths;
use crate::flow::orphans::is_orphan;
use crate::flow::pool::would_take;
use crate::kernel::link::RouteSocket;
use crate::kernel::sysfs::Sysfs;
use crate::kubelet::{Checkpoint, NamedPodDevices};
use crate::model::PciAddr;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the kubelet keeps device-plugin sockets and its checkpoint.
pub const KUBELET_DIR: &str = crate::kubelet::DEVICE_PLUGINS_DIR;
pub use crate::kubelet::CHECKPOINT;

/// One device as the node's device plugin advertises it to the kubelet.
#[derive(Debug, Clone, Serialize)]
pub struct AdvertisedDevice {
    /// The device ID (a VF's PCI address).
    pub id: String,
    pub healthy: bool,
    /// Why it is unhealthy, when it is.
    pub why: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AdvertisedResource {
    pub name: String,
    pub devices: Vec<AdvertisedDevice>,
    /// The device plugin's warning about the resource (its selectors match no VF of the node).
    pub warning: Option<String>,
}

/// What this node's device plugin advertises, per resource. Implemented by the device plugin; doctor reports it
/// as it is given.
pub trait Advertised {
    fn resources(&self) -> Result<Vec<AdvertisedResource>, String>;
}

/// The device plugin's binary: the one next to this one, else `sriov-rdma-device-plugin` on PATH.
fn device_plugin_bin() -> PathBuf {
    const BIN: &str = "sriov-rdma-device-plugin";
    let here = std::env::current_exe().ok().map(|e| e.with_file_name(BIN)).filter(|p| p.is_file());
    here.unwrap_or_else(|| PathBuf::from(BIN))
}

/// The device plugin's view as the daemon itself computes it: `sriov-rdma-device-plugin --dry-run --config FILE`
/// (the binary next to this one, else on PATH), which selects, checks health and explains exactly as the running
/// daemon does, so doctor cannot drift from it.
pub struct DryRun {
    pub config: PathBuf,
    pub kubelet_dir: PathBuf,
}

impl Advertised for DryRun {
    fn resources(&self) -> Result<Vec<AdvertisedResource>, String> {
        let bin = device_plugin_bin();
        let out = std::process::Command::new(&bin)
            .arg("--dry-run")
            .arg("--config")
            .arg(&self.config)
            .arg("--kubelet-dir")
            .arg(&self.kubelet_dir)
            .output()
            .map_err(|e| format!("running {} --dry-run: {e}", bin.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} --dry-run --config {}: {}",
                bin.display(),
                self.config.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("reading {} --dry-run's answer: {e}", bin.display()))?;
        let list = v.get("resources").and_then(|r| r.as_array()).cloned().unwrap_or_default();
        Ok(list
            .iter()
            .map(|r| AdvertisedResource {
                name: r.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string(),
                warning: r.get("warning").and_then(|w| w.as_str()).map(str::to_string),
                devices: r
                    .get("devices")
                    .and_then(|d| d.as_array())
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        let why: Vec<&str> = d
                            .get("problems")
                            .and_then(|p| p.as_array())
                            .into_iter()
                            .flatten()
                            .filter_map(|p| p.as_str())
                            .collect();
                        AdvertisedDevice {
                            id: d.get("id").and_then(|i| i.as_str()).unwrap_or_default().to_string(),
                            healthy: d.get("health").and_then(|h| h.as_str()) == Some("Healthy"),
                            why: (!why.is_empty()).then(|| why.join("; ")),
                        }
                    })
                    .collect(),
            })
            .collect())
    }
}

#[derive(Debug, Serialize)]
pub struct ResourceReport {
    pub kubelet: KubeletView,
    /// The device plugin's own view; `None` when no source of it was given to doctor.
    pub advertised: Option<Vec<AdvertisedResource>>,
    /// Which pod (container, interface, network, netns) holds which VF, from the attachment records.
    pub holders: Vec<Holder>,
    /// Which pod the kubelet allocated which VF of this node to: its checkpoint, named by its pod-resources API.
    pub kubelet_holders: KubeletHolders,
    /// `--config FILE`: what ADD would do with each sriov-rdma configuration in it.
    pub configs: Vec<ConfigCheck>,
}

#[derive(Debug, Default, Serialize)]
pub struct KubeletView {
    pub dir: String,
    /// Whether the directory exists (a Kubernetes node).
    pub present: bool,
    /// `kubelet.sock`: the kubelet's registration socket.
    pub kubelet_socket: bool,
    /// The other sockets: device plugins that started.
    pub plugin_sockets: Vec<String>,
    /// Resource name → the device IDs the kubelet registered for it (its checkpoint).
    pub registered: BTreeMap<String, Vec<String>>,
    /// Which of this node's VFs (PCI addresses) are in a registered resource, and which.
    pub vfs_registered: BTreeMap<String, String>,
    /// Devices the kubelet allocated to pods: (pod UID, container, resource, device IDs).
    pub allocations: Vec<Allocation>,
    pub checkpoint_error: Option<String>,
}

/// Devices the kubelet allocated to a container of a pod, as its checkpoint says.
pub use crate::kubelet::PodDevices as Allocation;

#[derive(Debug, Serialize)]
pub struct Holder {
    pub vf: String,
    pub pf: String,
    pub vf_index: u32,
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    pub netns: String,
    pub complete: bool,
    pub orphan: bool,
}

#[derive(Debug, Serialize)]
pub struct ConfigCheck {
    pub file: String,
    /// `plugins[N]` of a list, or the file itself.
    pub at: String,
    pub network: Option<String>,
    /// The VF ADD would take.
    pub vf: Option<String>,
    /// What was checked, in ADD's order.
    pub checked: Vec<String>,
    /// Why ADD would fail, with its CNI code.
    pub error: Option<String>,
    pub code: Option<u32>,
}

/// Reads the kubelet's device-plugin directory: sockets, registered resources, allocations.
pub fn kubelet_view(dir: &Path, node_vfs: &[PciAddr]) -> KubeletView {
    let mut v = KubeletView { dir: dir.display().to_string(), ..Default::default() };
    let Ok(rd) = fs::read_dir(dir) else { return v };
    v.present = true;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_sock = e.metadata().is_ok_and(|m| (m.mode() & libc::S_IFMT) == libc::S_IFSOCK);
        if name == "kubelet.sock" {
            v.kubelet_socket = is_sock;
        } else if is_sock {
            v.plugin_sockets.push(name);
        }
    }
    v.plugin_sockets.sort();
    let file = dir.join(CHECKPOINT);
    let cp = match Checkpoint::read(&file) {
        Ok(Some(cp)) => cp,
        Ok(None) => {
            v.checkpoint_error = Some(format!("no {}", file.display()));
            return v;
        }
        Err(e) => {
            v.checkpoint_error = Some(e);
            return v;
        }
    };
    for vf in node_vfs {
        if let Some(res) = cp.registered_as(vf) {
            v.vfs_registered.insert(vf.to_string(), res.to_string());
        }
    }
    v.registered = cp.registered;
    v.allocations = cp.allocations;
    v
}

/// A VF of this node the kubelet allocated to a pod's container.
#[derive(Debug, Serialize)]
pub struct KubeletHolder {
    pub vf: String,
    pub resource: String,
    /// From the checkpoint; `None` for a VF only the pod-resources API lists.
    pub pod_uid: Option<String>,
    pub container: String,
    /// `namespace/name`, from the pod-resources API; `None` when it did not answer.
    pub pod: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct KubeletHolders {
    /// The kubelet's pod-resources socket.
    pub socket: String,
    /// Why the pods' names are not known (then only their UIDs are).
    pub names_error: Option<String>,
    pub vfs: Vec<KubeletHolder>,
}

/// The pod-resources API's answer, from `sriov-rdma-device-plugin --pod-resources` (the async half lives there).
fn pod_resources(socket: &Path) -> Result<Vec<NamedPodDevices>, String> {
    if !socket.exists() {
        return Err(format!("no {} (the kubelet's pod-resources API)", socket.display()));
    }
    let bin = device_plugin_bin();
    let out = std::process::Command::new(&bin)
        .arg("--pod-resources")
        .arg("--socket")
        .arg(socket)
        .output()
        .map_err(|e| format!("running {} --pod-resources: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("reading {} --pod-resources's answer: {e}", bin.display()))?;
    let s = |a: &Value, k: &str| a[k].as_str().unwrap_or_default().to_string();
    Ok(v["allocations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| NamedPodDevices {
            namespace: s(a, "namespace"),
            pod: s(a, "pod"),
            container: s(a, "container"),
            resource: s(a, "resource"),
            devices: a["devices"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        })
        .collect())
}

/// Which pod holds which VF of this node by the kubelet's account: the checkpoint's pod UID and container per
/// resource and VF, and the pod's namespace and name from the pod-resources API where it is reachable.
pub fn kubelet_holders(kubelet: &KubeletView, node_vfs: &[PciAddr], socket: &Path) -> KubeletHolders {
    let vf_of = |id: &str| PciAddr::parse(id).ok().filter(|p| node_vfs.contains(p));
    let mut out = KubeletHolders { socket: socket.display().to_string(), ..Default::default() };
    for a in &kubelet.allocations {
        for vf in a.devices.iter().filter_map(|id| vf_of(id)) {
            out.vfs.push(KubeletHolder {
                vf: vf.to_string(),
                resource: a.resource.clone(),
                pod_uid: Some(a.pod_uid.clone()),
                container: a.container.clone(),
                pod: None,
            });
        }
    }
    match pod_resources(socket) {
        Err(e) => out.names_error = Some(e),
        Ok(rows) => {
            for r in rows {
                for vf in r.devices.iter().filter_map(|id| vf_of(id)) {
                    let pod = Some(format!("{}/{}", r.namespace, r.pod));
                    let known = out.vfs.iter_mut().find(|h| h.vf == vf.as_str() && h.resource == r.resource);
                    match known {
                        Some(h) => h.pod = pod,
                        None => out.vfs.push(KubeletHolder {
                            vf: vf.to_string(),
                            resource: r.resource.clone(),
                            pod_uid: None,
                            container: r.container.clone(),
                            pod,
                        }),
                    }
                }
            }
        }
    }
    out.vfs.sort_by(|a, b| (&a.resource, &a.vf).cmp(&(&b.resource, &b.vf)));
    out
}

/// The sriov-rdma configurations in a file: one network configuration, or each sriov-rdma plugin of a list
/// (with the list's `cniVersion` and `name`, as libcni hands them over).
fn configs_in(raw: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| format!("not JSON: {e}"))?;
    let Some(plugins) = v.get("plugins") else { return Ok(vec![("config".into(), raw.to_vec())]) };
    let plugins = plugins.as_array().ok_or("\"plugins\" must be an array")?;
    let mut out = Vec::new();
    for (i, p) in plugins.iter().enumerate() {
        if p.get("type").and_then(Value::as_str) != Some("sriov-rdma") {
            continue;
        }
        let mut p = p.clone();
        if let (Some(o), Some(list)) = (p.as_object_mut(), v.as_object()) {
            for k in ["cniVersion", "name"] {
                if let Some(val) = list.get(k) {
                    o.entry(k).or_insert(val.clone());
                }
            }
        }
        out.push((format!("plugins[{i}]"), p.to_string().into_bytes()));
    }
    if out.is_empty() {
        return Err("no plugin of type sriov-rdma in the list".into());
    }
    Ok(out)
}

/// `--config FILE [--device PCI]`: config parse and VF resolution as ADD makes them, changing nothing.
pub fn check_config(paths: &Paths, file: &Path, device: Option<&str>) -> Vec<ConfigCheck> {
    let fail = |at: &str, e: String, code: u32| ConfigCheck {
        file: file.display().to_string(),
        at: at.into(),
        network: None,
        vf: None,
        checked: Vec::new(),
        error: Some(e),
        code: Some(code),
    };
    let raw = match fs::read(file) {
        Ok(r) => r,
        Err(e) => return vec![fail("file", format!("reading {}: {e}", file.display()), 7)],
    };
    let confs = match configs_in(&raw) {
        Ok(c) => c,
        Err(e) => return vec![fail("file", format!("{}: {e}", file.display()), 6)],
    };
    let mut args = HashMap::new();
    if let Some(d) = device {
        args.insert("deviceID".to_string(), d.to_string());
    }
    let sysfs = paths.sysfs();
    let store = paths.store_read_only();
    let mut route = RouteSocket::new().ok();
    let kubelet = Checkpoint::read(&paths.kubelet_dir.join(CHECKPOINT));
    let mut out = Vec::new();
    for (at, bytes) in confs {
        let mut c = ConfigCheck {
            file: file.display().to_string(),
            at,
            network: None,
            vf: None,
            checked: Vec::new(),
            error: None,
            code: None,
        };
        let result = NetConf::parse(&bytes, &args).and_then(|conf| {
            c.network = Some(conf.name.clone());
            c.checked.push(format!("configuration valid (cniVersion {}, rdma {:?})", conf.version.as_str(), conf.rdma));
            let store = store.as_ref().map_err(Clone::clone)?;
            // As ADD: a checkpoint that cannot be read fails it (code 5).
            let kubelet = kubelet.as_ref().map_err(|e| CniError::io(e.clone()))?;
            would_take(&sysfs, store, &mut route, kubelet.as_ref(), &conf, &mut c.checked)
        });
        match result {
            Ok(pci) => c.vf = Some(pci.to_string()),
            Err(e) => {
                c.code = Some(e.code as u32);
                c.error = Some(e.msg.clone());
            }
        }
        out.push(c);
    }
    out
}

pub fn holders(sysfs: &Sysfs, records: &[Attachment]) -> Vec<Holder> {
    let mut route = RouteSocket::new().ok();
    records
        .iter()
        .map(|a| Holder {
            vf: a.pci.to_string(),
            pf: a.pf.clone(),
            vf_index: a.vf_index,
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
            network: a.network.clone(),
            netns: a.netns.clone(),
            complete: a.complete,
            orphan: is_orphan(sysfs, &mut route, a),
        })
        .collect()
}

pub struct Options<'a> {
    pub kubelet_dir: PathBuf,
    pub config: Option<&'a Path>,
    pub device: Option<&'a str>,
    pub advertised: Option<&'a dyn Advertised>,
}

/// The resource question, with its warnings and blockers.
pub fn report(
    paths: &Paths,
    records: &[Attachment],
    node_vfs: &[PciAddr],
    opts: &Options,
    warnings: &mut Vec<Finding>,
    blockers: &mut Vec<Finding>,
) -> ResourceReport {
    let kubelet = kubelet_view(&opts.kubelet_dir, node_vfs);
    let dir = &kubelet.dir;
    if kubelet.present {
        if !kubelet.kubelet_socket {
            warnings.push(Finding::new(
                "kubelet-not-running",
                format!(
                    "{dir} has no kubelet.sock: the kubelet is not running, so no device plugin can register; \
                 systemctl status kubelet (journalctl -u kubelet)"
                ),
            ));
        } else if let Some(e) = &kubelet.checkpoint_error {
            warnings.push(Finding::new(
                "kubelet-no-checkpoint",
                format!("{e}: the kubelet has recorded no device plugin yet; journalctl -u kubelet"),
            ));
        } else if !node_vfs.is_empty() && kubelet.vfs_registered.is_empty() {
            blockers.push(Finding::new(
                "no-vf-registered",
                format!(
                "no resource the kubelet registered lists a VF of this node ({} registered: {}): a pod asking for the \
                 RDMA resource stays Pending; check the device plugin's pod and log and its selectors \
                 (kubectl -n kube-system logs -l app.kubernetes.io/name=sriov-rdma; deploy/sriov-rdma.yaml)",
                kubelet.registered.len(),
                if kubelet.registered.is_empty() {
                    "none".to_string()
                } else {
                    kubelet.registered.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            ),
            ));
        }
    }
    let advertised = opts.advertised.and_then(|a| match a.resources() {
        Ok(r) => Some(r),
        Err(e) => {
            warnings.push(Finding::new(
                "device-plugin-unreadable",
                format!("asking the device plugin what it advertises: {e}"),
            ));
            None
        }
    });
    for r in advertised.iter().flatten() {
        warnings.extend(r.warning.iter().map(|w| Finding::new("resource-matches-no-vf", w.clone())));
        for d in r.devices.iter().filter(|d| !d.healthy) {
            warnings.push(Finding::new(
                "vf-advertised-unhealthy",
                format!(
                    "{} device {} is advertised unhealthy: {}",
                    r.name,
                    d.id,
                    d.why.as_deref().unwrap_or("no reason given")
                ),
            ));
        }
    }
    let configs = match opts.config {
        Some(f) => check_config(&Paths { kubelet_dir: opts.kubelet_dir.clone(), ..paths.clone() }, f, opts.device),
        None => Vec::new(),
    };
    for c in &configs {
        if let Some(e) = &c.error {
            blockers.push(Finding::new(
                "add-would-fail",
                format!("{} {}: ADD would fail (code {}): {e}", c.file, c.at, c.code.unwrap_or(0)),
            ));
        }
    }
    let socket = crate::kubelet::pod_resources_socket(&opts.kubelet_dir);
    let kubelet_holders = kubelet_holders(&kubelet, node_vfs, &socket);
    ResourceReport { kubelet, advertised, holders: holders(&paths.sysfs(), records), kubelet_holders, configs }
}

/// The human section.
pub fn render(r: &ResourceReport, o: &mut String) {
    use std::fmt::Write as _;
    let k = &r.kubelet;
    let _ = writeln!(o, "\nResource");
    if !k.present {
        let _ = writeln!(o, "  kubelet: no {} (not a Kubernetes node; --kubelet-dir DIR elsewhere)", k.dir);
    } else {
        let _ = writeln!(
            o,
            "  kubelet: {} {}  device plugin sockets: {}",
            k.dir,
            if k.kubelet_socket { "kubelet.sock present" } else { "NO kubelet.sock" },
            if k.plugin_sockets.is_empty() { "none".to_string() } else { k.plugin_sockets.join(", ") }
        );
        for (res, devs) in &k.registered {
            let ours = k.vfs_registered.values().filter(|r| *r == res).count();
            let _ = writeln!(o, "    registered {res}: {} devices, {ours} of them VFs of this node", devs.len());
        }
        for a in &k.allocations {
            let _ =
                writeln!(o, "    pod {} container {}: {} {}", a.pod_uid, a.container, a.resource, a.devices.join(","));
        }
    }
    match &r.advertised {
        None => {
            let _ = writeln!(o, "  advertised by the device plugin: not known to doctor (the kubelet's view above)");
        }
        Some(res) => {
            for a in res {
                let bad = a.devices.iter().filter(|d| !d.healthy).count();
                let _ = writeln!(o, "  advertised {}: {} devices, {bad} unhealthy", a.name, a.devices.len());
            }
        }
    }
    let kh = &r.kubelet_holders;
    for h in &kh.vfs {
        let uid = h.pod_uid.as_deref().map(|u| format!(" (uid {u})")).unwrap_or_default();
        let pod = h.pod.as_deref().unwrap_or("a pod");
        let _ = writeln!(
            o,
            "  VF {} ({}) allocated by the kubelet to {pod}{uid} container {}",
            h.vf, h.resource, h.container
        );
    }
    if let (false, Some(e)) = (kh.vfs.is_empty(), &kh.names_error) {
        let _ = writeln!(o, "    pod names unknown: {e}");
    }
    for h in &r.holders {
        let _ = writeln!(
            o,
            "  VF {} ({} VF {}) held by {}/{} network {} netns {}{}{}",
            h.vf,
            h.pf,
            h.vf_index,
            h.container_id,
            h.ifname,
            h.network,
            h.netns,
            if h.complete { "" } else { " (ADD interrupted)" },
            if h.orphan { " (orphan)" } else { "" }
        );
    }
    for c in &r.configs {
        match (&c.vf, &c.error) {
            (Some(vf), _) => {
                let _ = writeln!(o, "  {} {}: ADD would take VF {vf}", c.file, c.at);
            }
            (None, Some(e)) => {
                let _ = writeln!(o, "  {} {}: ADD would fail (code {}): {e}", c.file, c.at, c.code.unwrap_or(0));
            }
            _ => {}
        }
        for step in &c.checked {
            let _ = writeln!(o, "    - {step}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_registrations_and_allocations_are_read() {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-kubelet-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let vf = PciAddr::parse("0000:3b:02.1").unwrap();
        let other = PciAddr::parse("0000:3b:02.2").unwrap();
        let v = kubelet_view(&dir, std::slice::from_ref(&vf));
        assert!(v.present && !v.kubelet_socket && v.checkpoint_error.is_some(), "{v:?}");
        fs::write(
            dir.join(CHECKPOINT),
            r#"{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"w","ResourceName":"nvidia.com/cx6",
            "DeviceIDs":{"0":["0000:3b:02.1"]},"AllocResp":""}],
            "RegisteredDevices":{"nvidia.com/cx6":["0000:3b:02.1","0000:3b:02.3"],"example.com/short":["3B:02.4"]}},
            "Checksum":1}"#,
        )
        .unwrap();
        // A device ID in another case or the short form names the VF as it does for ADD (Checkpoint::resource_of).
        let short = PciAddr::parse("0000:3b:02.4").unwrap();
        let v = kubelet_view(&dir, &[vf.clone(), other, short]);
        assert_eq!(v.vfs_registered.get("0000:3b:02.4").map(String::as_str), Some("example.com/short"));
        assert_eq!(v.registered["nvidia.com/cx6"].len(), 2);
        assert_eq!(v.vfs_registered.get("0000:3b:02.1").map(String::as_str), Some("nvidia.com/cx6"));
        assert!(!v.vfs_registered.contains_key("0000:3b:02.2"));
        assert_eq!(v.allocations[0].devices, vec!["0000:3b:02.1".to_string()]);
        assert_eq!(v.allocations[0].pod_uid, "u1");
        let _ = fs::remove_dir_all(&dir);
        assert!(!kubelet_view(&dir, &[vf]).present);
    }

    #[test]
    fn a_list_gives_each_sriov_rdma_plugin_its_name_and_version() {
        let c = configs_in(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"sriov-rdma","pfName":"p"},{"type":"tuning"}]}"#,
        )
        .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, "plugins[0]");
        let v: Value = serde_json::from_slice(&c[0].1).unwrap();
        assert_eq!((v["name"].as_str(), v["cniVersion"].as_str()), (Some("n"), Some("1.0.0")));
        assert!(configs_in(br#"{"plugins":[{"type":"x"}]}"#).is_err());
        assert!(configs_in(b"nope").unwrap_err().contains("not JSON"));
    }
}
