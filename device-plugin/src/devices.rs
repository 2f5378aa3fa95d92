//! What a resource offers (its VFs and their health, from the node inventory), what a container gets for the VFs
//! the kubelet allocated (which VFs to prefer: alloc.rs). Synchronous and free of the RPC layer.

use crate::api;
use crate::config::{Resource, Selectors};
use serde::Serialize;
use sriov_rdma_cni::flow::attachment::Attachment;
use sriov_rdma_cni::inventory::{Inventory, Pf, Unhealthy, VfInfo};
use sriov_rdma_cni::model::PciAddr;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";

/// The host paths the plugin reads and writes; each can be moved (flags, environment) for tests.
#[derive(Debug, Clone)]
pub struct Paths {
    pub sysfs: PathBuf,
    /// Where the character devices are (`/dev`).
    pub dev_root: PathBuf,
    /// The kubelet's device plugin directory (`/var/lib/kubelet/device-plugins`).
    pub kubelet_dir: PathBuf,
    /// Where Multus reads device-info files (`/var/run/k8s.cni.cncf.io/devinfo/dp`).
    pub devinfo_dir: PathBuf,
    /// The CNI's attachment records (`/var/lib/cni/sriov-rdma`).
    pub state_dir: PathBuf,
}

/// Does one selector object take this VF? What the VF is decides, never whether a pod holds it: `held` is the
/// VF's attachment record, if any, which says whether ADD found an RDMA device on it (that device may now be in the
/// pod and invisible here). A VF without an RDMA device is never taken by a selector that requires one, attached
/// or not.
pub fn takes(s: &Selectors, pf: &Pf, vf: &VfInfo, held: Option<&Held>) -> bool {
    let any = |list: &[String], v: Option<&str>| list.is_empty() || v.is_some_and(|v| list.iter().any(|l| l == v));
    let pf_named = s.pf_names.is_empty()
        || s.pf_names
            .iter()
            .any(|n| (pf.netdev.as_deref() == Some(n.pf.as_str()) || pf.rdma.contains(&n.pf)) && n.takes(vf.index));
    let rooted =
        s.root_devices.is_empty() || s.root_devices.iter().any(|r| r.pf == pf.pci.as_str() && r.takes(vf.index));
    let link = pf.link_type.clone().or_else(|| {
        let ll = vf.rdma.iter().flat_map(|d| &d.ports).find_map(|p| p.link_layer.clone())?;
        Some(if ll.eq_ignore_ascii_case("infiniband") { "infiniband".into() } else { "ether".into() })
    });
    let rdma = !vf.rdma.is_empty() || vf.is_vfio() || held.is_some_and(|h| h.rdma);
    pf_named
        && rooted
        && any(&s.vendors, vf.ids.vendor.as_deref())
        && any(&s.devices, vf.ids.device.as_deref())
        && any(&s.drivers, vf.driver.as_deref())
        && any(&s.link_types, link.as_deref())
        && (s.numa_nodes.is_empty() || vf.numa_node.is_some_and(|n| s.numa_nodes.contains(&n)))
        && any(&s.pci_addresses, Some(vf.pci.as_str()))
        && (!s.require_rdma || rdma)
}

/// The first of the resource's selector objects that takes the VF: it is the resource's, and that selector
/// decides what a container given it gets (`needVhostNet`).
pub fn selector_of<'a>(res: &'a Resource, pf: &Pf, vf: &VfInfo, held: Option<&Held>) -> Option<&'a Selectors> {
    res.selectors.iter().find(|s| takes(s, pf, vf, held))
}

/// Does the resource take this VF (one of its selector objects does)?
pub fn selects(res: &Resource, pf: &Pf, vf: &VfInfo, held: Option<&Held>) -> bool {
    selector_of(res, pf, vf, held).is_some()
}

/// The warning for a resource whose selectors take no VF of this node (`list`: what it offers): it registers
/// with no device, which nothing else would tell.
pub fn unmatched(res: &Resource, list: &[Offered]) -> Option<String> {
    (!list.iter().any(|o| o.selected)).then(|| {
        format!(
            "{}: its selectors match no VF on this node, so it advertises no device: check its pfNames and \
             rootDevices (and their #first-last VF ranges), drivers and isRdma/requireRdma against the node's VFs \
             (sriov-rdma device-plugin --dry-run --config FILE)",
            res.name
        )
    })
}

/// What the attachment record of a VF in a pod tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// ADD found an RDMA device on the VF. False too for a record that cannot be read: such a VF is not offered
    /// by a `requireRdma` resource rather than perhaps twice.
    pub rdma: bool,
}

/// The VFs with an attachment record (their netdev and RDMA device are in a pod), and what each record says.
pub fn attached(state_dir: &Path) -> BTreeMap<PciAddr, Held> {
    records(state_dir)
        .into_iter()
        .map(|(pci, rec)| (pci, Held { rdma: rec.is_some_and(|r| r.rdma.is_some()) }))
        .collect()
}

/// The CNI's attachment records by VF; `None` for one that cannot be read.
pub fn records(state_dir: &Path) -> BTreeMap<PciAddr, Option<Attachment>> {
    let Ok(rd) = std::fs::read_dir(state_dir) else { return BTreeMap::new() };
    rd.filter_map(|e| {
        let e = e.ok()?;
        let pci = PciAddr::parse(e.file_name().to_str()?.strip_suffix(".json")?).ok()?;
        // Only a regular file is a record (the CNI never writes one through a link).
        let rec = e
            .file_type()
            .ok()
            .filter(std::fs::FileType::is_file)
            .and_then(|_| std::fs::read(e.path()).ok())
            .and_then(|b| sriov_rdma_cni::flow::record::decode(&b).ok());
        Some((pci, rec))
    })
    .collect()
}

/// One advertised device and why it is unhealthy (for `--dry-run` and the logs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offered {
    pub id: String,
    pub health: &'static str,
    pub numa_node: Option<u32>,
    pub pf: Option<String>,
    pub driver: Option<String>,
    pub rdma_devices: Vec<String>,
    pub problems: Vec<String>,
    /// A short name for each problem ([`Unhealthy::code`], `offered_elsewhere`, `not_selected`), for metrics.
    #[serde(skip)]
    pub reasons: Vec<&'static str>,
    /// The resource's selectors take the VF now (it is this resource's, not only listed because it was before).
    #[serde(skip)]
    pub selected: bool,
}

impl Offered {
    pub fn device(&self) -> api::Device {
        api::Device {
            id: self.id.clone(),
            health: self.health.to_string(),
            topology: self.numa_node.map(|n| api::TopologyInfo { nodes: vec![api::NumaNode { id: i64::from(n) }] }),
        }
    }
}

/// The devices of one resource: the VFs it selects now, plus those it offered before (`seen`), which stay listed
/// as Unhealthy when they are gone or no longer qualify, so the kubelet does not count them as free. A VF with an
/// attachment record (`attached`) has its RDMA device in a pod: its port state is not the host's to judge.
/// `taken`: the VFs resources listed before this one in the config selected (ID → resource): a VF is offered by
/// one resource only; one this resource offered before stays listed, Unhealthy, naming the one that took it.
pub fn offer(
    res: &Resource,
    inv: &Inventory,
    seen: &BTreeSet<String>,
    attached: &BTreeMap<PciAddr, Held>,
    taken: &BTreeMap<String, String>,
) -> Vec<Offered> {
    let mut out: BTreeMap<String, Offered> = BTreeMap::new();
    for (pf, vf) in inv.vfs() {
        let id = vf.pci.to_string();
        let owner = taken.get(&id);
        let selected = owner.is_none() && selects(res, pf, vf, attached.get(&vf.pci));
        if !selected && !seen.contains(&id) {
            continue;
        }
        let mut problems: Vec<Unhealthy> = vf.problems(pf);
        if attached.contains_key(&vf.pci) {
            problems.retain(|p| !matches!(p, Unhealthy::RdmaPortNotActive { .. }));
        }
        let mut reasons: Vec<&'static str> = problems.iter().map(Unhealthy::code).collect();
        let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        match owner {
            Some(other) => {
                problems.push(format!("it is offered by {other}, listed before this resource"));
                reasons.push("offered_elsewhere");
            }
            None if !selected => {
                problems.push("it no longer matches the resource's selectors (driver or RDMA device changed)".into());
                reasons.push("not_selected");
            }
            None => {}
        }
        out.insert(
            id.clone(),
            Offered {
                health: if problems.is_empty() { HEALTHY } else { UNHEALTHY },
                // excludeTopology: no NUMA node for the kubelet, nor for the preference among its devices.
                numa_node: vf.numa_node.filter(|_| !res.exclude_topology),
                pf: pf.netdev.clone(),
                driver: vf.driver.clone(),
                rdma_devices: vf.rdma.iter().map(|d| d.name.clone()).collect(),
                problems,
                reasons,
                id,
                selected,
            },
        );
    }
    let gone: Vec<&String> = seen.iter().filter(|id| !out.contains_key(*id)).collect();
    for id in gone {
        out.insert(
            id.clone(),
            Offered {
                id: id.clone(),
                health: UNHEALTHY,
                numa_node: None,
                pf: None,
                driver: None,
                rdma_devices: Vec::new(),
                problems: vec![Unhealthy::Gone.to_string()],
                reasons: vec![Unhealthy::Gone.code()],
                selected: false,
            },
        );
    }
    out.into_values().collect()
}

/// Every resource's devices, in config order, each VF with the first resource that selects it (`seen`: what
/// each resource offered before, indexed like `resources`).
pub fn offer_all(
    resources: &[Resource],
    inv: &Inventory,
    seen: &[BTreeSet<String>],
    attached: &BTreeMap<PciAddr, Held>,
) -> Vec<Vec<Offered>> {
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    let none = BTreeSet::new();
    let mut all = Vec::new();
    for (i, res) in resources.iter().enumerate() {
        let list = offer(res, inv, seen.get(i).unwrap_or(&none), attached, &taken);
        for o in list.iter().filter(|o| o.selected) {
            taken.insert(o.id.clone(), res.name.clone());
        }
        all.push(list);
    }
    all
}

/// Writes the kubelet's-side list of the VFs each resource offers, healthy or not
/// (`<kubelet dir>/sriov-rdma/offered.json`, see `sriov_rdma_cni::kubelet::OFFERED`): the CNI withholds them from a
/// NAD without a resource request even while the kubelet, which registers only healthy devices, does not list
/// them. Rewritten (through a rename) only when it differs from what is there.
pub fn write_offered(kubelet_dir: &Path, resources: &[Resource], lists: &[Vec<Offered>]) -> Result<(), String> {
    let map: BTreeMap<String, Vec<String>> =
        resources.iter().zip(lists).map(|(r, l)| (r.name.clone(), l.iter().map(|o| o.id.clone()).collect())).collect();
    let text = sriov_rdma_cni::kubelet::offered_json(&map);
    let path = kubelet_dir.join(sriov_rdma_cni::kubelet::OFFERED);
    if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
        return Ok(());
    }
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    }
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| io("writing", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming into", e))
}

/// A character device a container needs for a VF: its path under /dev and its key in the `_INFO` variable
/// (`mount`, `dev-mount` for vfio; `uverbs`, `umad`, `issm`, `rdma_cm` for RDMA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevNode {
    pub kind: &'static str,
    pub rel: String,
}

/// The character devices of a VF: `/dev/vfio/vfio` and its IOMMU group's for a vfio-pci VF; else each RDMA
/// device's verbs device (and umad/issm on InfiniBand), and `rdma_cm` when `dev_root` has it. The device plugin's
/// Allocate and the DRA driver's CDI spec (cdi.rs) both give exactly these.
pub fn dev_nodes(vf: &VfInfo, dev_root: &Path) -> Result<Vec<DevNode>, String> {
    let mut out = Vec::new();
    if vf.is_vfio() {
        let group = vf.iommu_group.as_ref().ok_or("bound to vfio-pci but in no IOMMU group")?;
        out.push(DevNode { kind: "mount", rel: "vfio/vfio".into() });
        out.push(DevNode { kind: "dev-mount", rel: format!("vfio/{group}") });
        return Ok(out);
    }
    // A device bound to the VF's netdev (Soft-RoCE) lives as long as the netdev stays on the node: its character
    // devices are given as any other's, and ADD refuses to move that netdev into a pod of a VF the kubelet
    // manages (src/flow/admit.rs, netdev_bound_rdma).
    for dev in &vf.rdma {
        let ib = dev.ports.iter().any(|p| p.link_layer.as_deref().is_some_and(|l| l == "InfiniBand"));
        if !dev.char_devs.iter().any(|c| c.starts_with("uverbs")) {
            return Err(format!("RDMA device {} has no uverbs character device", dev.name));
        }
        for c in &dev.char_devs {
            if !c.starts_with("uverbs") && !ib {
                continue;
            }
            let kind = ["uverbs", "umad", "issm"].into_iter().find(|k| c.starts_with(k)).unwrap_or("uverbs");
            let rel = format!("infiniband/{c}");
            if !out.iter().any(|n: &DevNode| n.rel == rel) {
                out.push(DevNode { kind, rel });
            }
        }
    }
    // rdma_cm exists once the rdma_ucm module is loaded; verbs work without it.
    if !vf.rdma.is_empty() && dev_root.join("infiniband/rdma_cm").exists() {
        out.push(DevNode { kind: "rdma_cm", rel: "infiniband/rdma_cm".into() });
    }
    Ok(out)
}

/// What one container gets for its VFs: their character devices, the `PCIDEVICE_*` variables and the device-info
/// file for each VF. An ID that is not a VF of this node, or a character device that is missing, fails the
/// allocation (the container could not use it), naming it.
pub fn allocate(
    res: &Resource,
    inv: &Inventory,
    ids: &[String],
    paths: &Paths,
) -> Result<api::ContainerAllocateResponse, String> {
    let mut devices: Vec<api::DeviceSpec> = Vec::new();
    let add = |rel: String, devices: &mut Vec<api::DeviceSpec>| -> Result<(), String> {
        let host = paths.dev_root.join(&rel);
        if !host.exists() {
            return Err(format!("{} does not exist", host.display()));
        }
        let host_path = host.display().to_string();
        if !devices.iter().any(|d| d.host_path == host_path) {
            devices.push(api::DeviceSpec {
                container_path: format!("/dev/{rel}"),
                host_path,
                permissions: "rw".into(),
            });
        }
        Ok(())
    };
    let mut info: BTreeMap<String, BTreeMap<&str, BTreeMap<String, String>>> = BTreeMap::new();
    let mut vfs = Vec::new();
    for id in ids {
        let pci = PciAddr::parse(id).map_err(|e| format!("device ID {id:?} {e}"))?;
        let (pf, vf) = inv.vf(&pci).ok_or_else(|| format!("device {id} is not a VF on this node (any more)"))?;
        let what = |e: String| format!("device {id}: {e}");
        let mut entry = BTreeMap::new();
        entry.insert("generic", BTreeMap::from([("deviceID".into(), id.clone())]));
        if selector_of(res, pf, vf, None).is_some_and(|s| s.need_vhost_net) {
            add("vhost-net".into(), &mut devices).map_err(what)?;
            add("net/tun".into(), &mut devices).map_err(what)?;
            let mounts = [("net-mount", "/dev/vhost-net"), ("tun-mount", "/dev/net/tun")];
            entry.insert("vhost", mounts.into_iter().map(|(k, v)| (k.into(), v.into())).collect());
        }
        let extra = res.extra_info(id);
        if !extra.is_empty() {
            entry.insert("extra", extra);
        }
        let nodes = dev_nodes(vf, &paths.dev_root).map_err(what)?;
        for n in &nodes {
            add(n.rel.clone(), &mut devices).map_err(what)?;
        }
        let mounts = || nodes.iter().map(|n| (n.kind.to_string(), format!("/dev/{}", n.rel))).collect();
        if vf.is_vfio() {
            entry.insert("vfio", mounts());
        } else if let Some(dev) = vf.rdma.last() {
            let mut rdma: BTreeMap<String, String> = mounts();
            rdma.insert("rdma_dev".into(), dev.name.clone());
            entry.insert("rdma", rdma);
        }
        info.insert(id.clone(), entry);
        vfs.push(vf);
    }
    let mut envs = HashMap::new();
    envs.insert(res.env_name(), ids.join(","));
    envs.insert(format!("{}_INFO", res.env_name()), serde_json::to_string(&info).map_err(|e| e.to_string())?);
    for vf in vfs {
        write_device_info(&paths.devinfo_dir, &res.name, vf)?;
    }
    Ok(api::ContainerAllocateResponse { envs, devices, ..Default::default() })
}

/// The device-info file Multus reads for the network-status annotation (k8snetworkplumbingwg device-info spec):
/// `<dir>/<resource with / as ->-<pci>-device.json`, read-only.
pub fn device_info_path(dir: &Path, resource: &str, pci: &str) -> PathBuf {
    dir.join(format!("{}-{}-device.json", resource.replace('/', "-"), pci.replace('/', "-")))
}

fn write_device_info(dir: &Path, resource: &str, vf: &VfInfo) -> Result<(), String> {
    let mut pci = serde_json::Map::new();
    pci.insert("pci-address".into(), vf.pci.to_string().into());
    pci.insert("pf-pci-address".into(), vf.pf_pci.to_string().into());
    if !vf.rdma.is_empty() {
        let names: Vec<&str> = vf.rdma.iter().map(|d| d.name.as_str()).collect();
        pci.insert("rdma-device".into(), names.join(",").into());
    }
    let doc = serde_json::json!({ "type": "pci", "version": "1.1.0", "pci": pci });
    let path = device_info_path(dir, resource, vf.pci.as_str());
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing the old", e)),
    }
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&tmp, doc.to_string()).map_err(|e| io("writing", e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444)).map_err(|e| io("chmod of", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io("renaming into", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PfVfs;
    use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
    use sriov_rdma_cni::kernel::sysfs::Sysfs;

    #[test]
    fn selectors_match_pf_by_netdev_or_rdma_name_and_an_attached_vf_keeps_its_membership() {
        let root = std::env::temp_dir().join(format!("sriov-rdma-dp-select-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t = FakeTree::new(&root).unwrap();
        t.pf("0000:3b:00.0", "ens1f0", 2).unwrap();
        t.netdev_state("ens1f0", "up", 1).unwrap();
        t.rdma("0000:3b:00.0", "mlx5_0", &[]).unwrap();
        t.mlx5_vf("0000:3b:00.0", 0, "0000:3b:00.2", "ens1f0v0", "mlx5_2", 0).unwrap();
        // In a pod: no netdev, no RDMA device visible from the host.
        t.vf("0000:3b:00.0", 1, "0000:3b:00.3", None, "mlx5_core").unwrap();
        t.pci_ids("0000:3b:00.3", "15b3", "101e", 0).unwrap();
        let inv = Inventory::scan(&Sysfs::at(root.clone()));
        let res = |sel: Selectors| Resource::new("rdma/hca", sel);
        let offered = |r: &Resource, attached: &[(&str, bool)]| -> Vec<String> {
            let a = attached.iter().map(|(p, rdma)| (PciAddr::parse(p).unwrap(), Held { rdma: *rdma })).collect();
            offer(r, &inv, &BTreeSet::new(), &a, &BTreeMap::new())
                .into_iter()
                .map(|o| format!("{} {}", o.id, o.health))
                .collect()
        };
        for pf in ["ens1f0", "mlx5_0"] {
            let r = res(Selectors { pf_names: vec![PfVfs::all(pf)], ..Selectors::default() });
            assert_eq!(offered(&r, &[]), vec!["0000:3b:00.2 Healthy"], "pfNames {pf}");
            // Its record says ADD found an RDMA device on it (now in the pod): still this resource's.
            let both = vec!["0000:3b:00.2 Healthy", "0000:3b:00.3 Healthy"];
            assert_eq!(offered(&r, &[("0000:3b:00.3", true)]), both);
            // Its record says it had none: being in a pod does not make it an RDMA VF.
            assert_eq!(offered(&r, &[("0000:3b:00.3", false)]), vec!["0000:3b:00.2 Healthy"], "pfNames {pf}");
        }
        let none = |sel| offered(&res(sel), &[]);
        assert!(none(Selectors { pf_names: vec![PfVfs::all("ens9")], ..Selectors::default() }).is_empty());
        assert!(none(Selectors { vendors: vec!["8086".into()], ..Selectors::default() }).is_empty());
        assert!(none(Selectors { link_types: vec!["infiniband".into()], ..Selectors::default() }).is_empty());
        assert!(none(Selectors { numa_nodes: vec![1], ..Selectors::default() }).is_empty());
        assert!(none(Selectors { drivers: vec!["vfio-pci".into()], ..Selectors::default() }).is_empty());
        let all = res(Selectors { require_rdma: false, ..Selectors::default() });
        assert_eq!(offered(&all, &[]).len(), 2, "requireRdma: false offers the VF without an RDMA device");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_vf_two_resources_select_is_offered_by_the_first_only() {
        let root = std::env::temp_dir().join(format!("sriov-rdma-dp-first-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t = FakeTree::new(&root).unwrap();
        t.pf("0000:3b:00.0", "ens1f0", 3).unwrap();
        t.netdev_state("ens1f0", "up", 1).unwrap();
        for (i, vf) in ["0000:3b:00.2", "0000:3b:00.3", "0000:3b:00.4"].into_iter().enumerate() {
            t.vf("0000:3b:00.0", i as u32, vf, Some(&format!("ens1f0v{i}")), "igbvf").unwrap();
        }
        let inv = Inventory::scan(&Sysfs::at(root.clone()));
        let res = |name: &str, pci: &[&str]| {
            let pci_addresses = pci.iter().map(|s| s.to_string()).collect();
            Resource::new(name, Selectors { pci_addresses, require_rdma: false, ..Selectors::default() })
        };
        let ids = |l: &[Offered]| -> Vec<String> { l.iter().map(|o| format!("{} {}", o.id, o.health)).collect() };
        let resources = [res("rdma/one", &["0000:3b:00.3"]), res("rdma/rest", &[])];
        let none = BTreeMap::new();
        let lists = offer_all(&resources, &inv, &[], &none);
        assert_eq!(ids(&lists[0]), vec!["0000:3b:00.3 Healthy"], "pciAddresses selects exactly that VF");
        assert_eq!(ids(&lists[1]), vec!["0000:3b:00.2 Healthy", "0000:3b:00.4 Healthy"], "not the first's VF");
        // The second resource had offered 0000:3b:00.3 before the first took it: listed Unhealthy, naming it.
        let seen = [BTreeSet::new(), BTreeSet::from(["0000:3b:00.3".to_string()])];
        let lists = offer_all(&resources, &inv, &seen, &none);
        let o = lists[1].iter().find(|o| o.id == "0000:3b:00.3").expect("still listed");
        assert_eq!(o.health, UNHEALTHY);
        assert!(o.problems.iter().any(|p| p.contains("offered by rdma/one")), "{:?}", o.problems);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A fresh test root with a fake sysfs under `sys` holding one PF (address, netdev, VF count, ARPHRD link type), up.
    fn node(tag: &str, (pci, netdev, vfs, arphrd): (&str, &str, u32, u32)) -> (PathBuf, FakeTree) {
        let root = std::env::temp_dir().join(format!("sriov-rdma-dp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let t = FakeTree::new(&root.join("sys")).unwrap();
        t.pf(pci, netdev, vfs).unwrap();
        t.netdev_state(netdev, "up", arphrd).unwrap();
        (root, t)
    }

    /// The plugin's paths under a test's root.
    fn paths_under(root: &Path) -> Paths {
        Paths {
            sysfs: root.join("sys"),
            dev_root: root.join("dev"),
            kubelet_dir: root.join("kubelet"),
            devinfo_dir: root.join("devinfo"),
            state_dir: root.join("state"),
        }
    }

    #[test]
    fn an_infiniband_vf_gets_umad_and_issm_an_ethernet_one_only_verbs() {
        let (root, t) = node("ib", ("0000:5e:00.0", "ib0", 2, 32));
        t.mlx5_vf("0000:5e:00.0", 0, "0000:5e:00.2", "ib0v0", "mlx5_4", 0).unwrap();
        t.rdma_port("mlx5_4", 1, "4: ACTIVE", "InfiniBand").unwrap();
        t.mlx5_vf("0000:5e:00.0", 1, "0000:5e:00.3", "ib0v1", "mlx5_5", 0).unwrap();
        for (c, dev) in [
            ("uverbs4", "mlx5_4"),
            ("umad4", "mlx5_4"),
            ("issm4", "mlx5_4"),
            ("uverbs5", "mlx5_5"),
            ("umad5", "mlx5_5"),
        ] {
            t.rdma_char(c, dev, (!c.starts_with("uverbs")).then_some(1)).unwrap();
            std::fs::create_dir_all(root.join("dev/infiniband")).unwrap();
            std::fs::write(root.join("dev/infiniband").join(c), b"").unwrap();
        }
        let paths = paths_under(&root);
        let inv = Inventory::scan(&Sysfs::at(paths.sysfs.clone()));
        let res = Resource::new("rdma/ib", Selectors::default());
        let got = |id: &str| -> Vec<String> {
            let r = allocate(&res, &inv, &[id.to_string()], &paths).unwrap();
            let mut v: Vec<String> = r.devices.iter().map(|d| d.container_path.clone()).collect();
            v.sort();
            v
        };
        let ib = ["/dev/infiniband/issm4", "/dev/infiniband/umad4", "/dev/infiniband/uverbs4"];
        assert_eq!(got("0000:5e:00.2"), ib.map(String::from).to_vec(), "no rdma_cm on this node: not given");
        // mlx5_5's port is Ethernet (mlx5_vf): its umad is not handed out.
        assert_eq!(got("0000:5e:00.3"), vec!["/dev/infiniband/uverbs5".to_string()]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_soft_roce_device_on_the_vf_netdev_is_given_as_any_other() {
        // It lives while the netdev stays on the node (a pod that takes the resource without a network
        // attachment); ADD refuses to move such a VF's netdev into a pod (src/flow/admit.rs).
        let (root, t) = node("rxe", ("0000:3b:00.0", "ens1f0", 1, 1));
        t.vf("0000:3b:00.0", 0, "0000:3b:00.2", Some("ens1f0v0"), "igbvf").unwrap();
        t.rdma_on_netdev("rxe0", "ens1f0v0").unwrap();
        t.rdma_char("uverbs7", "rxe0", None).unwrap();
        std::fs::create_dir_all(root.join("dev/infiniband")).unwrap();
        std::fs::write(root.join("dev/infiniband/uverbs7"), b"").unwrap();
        let paths = paths_under(&root);
        let inv = Inventory::scan(&Sysfs::at(paths.sysfs.clone()));
        assert_eq!(inv.vf(&PciAddr::parse("0000:3b:00.2").unwrap()).unwrap().1.rdma[0].name, "rxe0");
        let res = Resource::new("rdma/hca", Selectors::default());
        let r = allocate(&res, &inv, &["0000:3b:00.2".to_string()], &paths).unwrap();
        let got: Vec<&str> = r.devices.iter().map(|d| d.container_path.as_str()).collect();
        assert_eq!(got, ["/dev/infiniband/uverbs7"]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
