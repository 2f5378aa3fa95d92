//! What the kubelet records about devices: its device manager checkpoint
//! (`<device-plugins dir>/kubelet_internal_checkpoint`), which lists per resource the devices its device plugins
//! registered and, per pod and container, the devices it allocated. The kubelet writes it when it allocates (before
//! the pod's sandbox exists, so before CNI ADD) and when a plugin's device list changes, through a temporary file
//! and a rename: a reader sees the whole old file or the whole new one.
//!
//! Beside it, the sriov-rdma device plugin's list of the VFs it offers ([`OFFERED`]), healthy or not: the kubelet
//! registers only healthy devices, and a VF the plugin offers stays the kubelet's whatever its health.
//!
//! Plain data and two file reads; what ADD and doctor make of it is theirs.

use crate::model::PciAddr;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The kubelet's device-plugin directory: plugin sockets, its registration socket and the checkpoint.
pub const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The checkpoint's file name in that directory.
pub const CHECKPOINT: &str = "kubelet_internal_checkpoint";
/// The device plugin's list of the VFs it offers, per resource, whatever their health, in that directory: the
/// kubelet registers only the healthy ones, so this list keeps an Unhealthy VF the kubelet's. In a subdirectory,
/// which the kubelet's cleanup of the directory at its start leaves alone (it removes files, not directories).
pub const OFFERED: &str = "sriov-rdma/offered.json";

/// The node daemon's DRA driver keeps each claim it prepared here, under the kubelet's root directory:
/// `<root>/plugins/sriov-rdma.k8s.io/claims/<claim UID>.json`, with the UIDs of the pods the claim is reserved for
/// and each device's PCI address (the daemon's claimconfig.rs writes it). A VF of a `dra: true` resource is in the
/// device plugin's [`OFFERED`] list, so no NAD takes it; the DRA attach's ADD for a pod holding the claim may.
pub const DRA_CLAIMS: &str = "plugins/sriov-rdma.k8s.io/claims";

/// The claim (`namespace/name`) prepared on this node and reserved for pod `pod_uid` that holds the VF `pci`, from
/// the kept claims in `dir` ([`DRA_CLAIMS`]); `None` when no such claim is there (or no directory). A file that
/// cannot be read or decoded holds nothing: it can only refuse, never admit.
pub fn dra_claim_of(dir: &Path, pod_uid: &str, pci: &PciAddr) -> Result<Option<String>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading the DRA driver's prepared claims in {}: {e}", dir.display())),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(v) = std::fs::read(&path).ok().and_then(|raw| serde_json::from_slice::<Value>(&raw).ok()) else {
            continue;
        };
        let for_pod = v["pods"].as_array().is_some_and(|p| p.iter().any(|u| u.as_str() == Some(pod_uid)));
        let holds = v["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["pciAddress"].as_str().is_some_and(|a| names(a, pci))));
        if for_pod && holds {
            return Ok(Some(v["claim"].as_str().unwrap_or("?").to_string()));
        }
    }
    Ok(None)
}

/// The kubelet's pod-resources socket for a device-plugin directory: `<kubelet root>/pod-resources/kubelet.sock`.
pub fn pod_resources_socket(device_plugins_dir: &Path) -> std::path::PathBuf {
    device_plugins_dir.parent().unwrap_or(Path::new("/")).join("pod-resources/kubelet.sock")
}

/// Devices of one resource the kubelet allocated to one container of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodDevices {
    pub pod_uid: String,
    pub container: String,
    pub resource: String,
    pub devices: Vec<String>,
}

/// Devices of one resource assigned to one container of one pod, as the kubelet's pod-resources API lists them
/// (by namespace and name; that API has no UIDs). `sriov-rdma-device-plugin --pod-resources` prints these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedPodDevices {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub resource: String,
    pub devices: Vec<String>,
}

/// The checkpoint's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub allocations: Vec<PodDevices>,
    /// Resource name → the device IDs registered for it (the healthy ones, as the kubelet writes it).
    pub registered: BTreeMap<String, Vec<String>>,
    /// Resource name → the VFs the sriov-rdma device plugin offers for it, healthy or not ([`OFFERED`]).
    pub offered: BTreeMap<String, Vec<String>>,
}

// The file as the kubelet marshals it (Go's encoding/json: a nil slice or map is `null`). Read through
// serde_json's `Value`, which the binary already carries, rather than derived types: the CNI binary stays small.
// `Checksum` is a hash of Go's in-memory dump of `Data`, which only the kubelet can recompute; not checked.

/// A list of strings; `null` is an empty one.
fn strings(v: &Value, at: &str) -> Result<Vec<String>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, s)| s.as_str().map(str::to_string).ok_or_else(|| format!("{at}[{i}] is not a string")))
            .collect(),
        _ => Err(format!("{at} is not a list")),
    }
}

/// `DeviceIDs`: a map NUMA node → IDs (kubelets since 1.20), or a plain list (the format before). A device with
/// two NUMA nodes is listed under each: it is one device.
fn device_ids(v: &Value, at: &str) -> Result<Vec<String>, String> {
    let mut ids = match v {
        Value::Object(m) => {
            let mut ids = Vec::new();
            for (numa, l) in m {
                ids.extend(strings(l, &format!("{at}[{numa}]"))?);
            }
            ids
        }
        other => strings(other, at)?,
    };
    ids.sort();
    ids.dedup();
    Ok(ids)
}

fn string(e: &Value, key: &str, at: &str) -> Result<String, String> {
    e.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("{at}.{key} is missing or not a string"))
}

/// Whether a device ID names this PCI address (device plugins use the address, in any case or short form).
fn names(id: &str, pci: &PciAddr) -> bool {
    PciAddr::parse(id).is_ok_and(|p| p == *pci)
}

/// The first resource of `m` whose device IDs name `pci`.
fn listed<'a>(m: &'a BTreeMap<String, Vec<String>>, pci: &PciAddr) -> Option<&'a str> {
    m.iter().find(|(_, ids)| ids.iter().any(|id| names(id, pci))).map(|(r, _)| r.as_str())
}

/// A file's bytes; `None` when there is no such path. A symbolic link whose target is gone (or cannot be
/// followed) is an error naming both: fail closed.
fn read_file(path: &Path, what: &str) -> Result<Option<Vec<u8>>, String> {
    match std::fs::read(path) {
        Ok(r) => Ok(Some(r)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::symlink_metadata(path) {
            Err(_) => Ok(None),
            Ok(_) => {
                let target =
                    std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|e| e.to_string());
                Err(format!(
                    "{what} {} is a symbolic link to {target}, which does not exist: without it this node cannot tell \
                     which VFs the kubelet manages; restore the target or remove the link",
                    path.display()
                ))
            }
        },
        Err(e) => Err(format!("reading {what} {}: {e}", path.display())),
    }
}

/// The device plugin's [`OFFERED`] list: `{"version":1,"resources":{"<resource>":["<pci>",…]}}`.
pub fn parse_offered(raw: &[u8]) -> Result<BTreeMap<String, Vec<String>>, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    match v.get("version") {
        Some(n) if n.as_u64() == Some(1) => {}
        other => return Err(format!("version is {}, not 1", other.map(Value::to_string).unwrap_or("missing".into()))),
    }
    let Some(m) = v.get("resources").and_then(Value::as_object) else {
        return Err("resources is missing or not a map".into());
    };
    m.iter().map(|(r, ids)| Ok((r.clone(), strings(ids, &format!("resources[{r}]"))?))).collect()
}

/// The [`OFFERED`] list's text, as [`parse_offered`] reads it.
pub fn offered_json(resources: &BTreeMap<String, Vec<String>>) -> String {
    serde_json::json!({ "version": 1, "resources": resources }).to_string()
}

impl Checkpoint {
    /// Decodes the checkpoint's JSON.
    pub fn parse(raw: &[u8]) -> Result<Checkpoint, String> {
        let v: Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
        let data = v.get("Data").filter(|d| d.is_object()).ok_or("no Data object")?;
        let mut registered = BTreeMap::new();
        match data.get("RegisteredDevices").unwrap_or(&Value::Null) {
            Value::Null => {}
            Value::Object(m) => {
                for (r, ids) in m {
                    registered.insert(r.clone(), strings(ids, &format!("Data.RegisteredDevices[{r}]"))?);
                }
            }
            _ => return Err("Data.RegisteredDevices is not a map".into()),
        }
        let entries = match data.get("PodDeviceEntries").unwrap_or(&Value::Null) {
            Value::Null => &[][..],
            Value::Array(a) => a.as_slice(),
            _ => return Err("Data.PodDeviceEntries is not a list".into()),
        };
        let allocations = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let at = format!("Data.PodDeviceEntries[{i}]");
                Ok(PodDevices {
                    pod_uid: string(e, "PodUID", &at)?,
                    container: string(e, "ContainerName", &at)?,
                    resource: string(e, "ResourceName", &at)?,
                    devices: device_ids(e.get("DeviceIDs").unwrap_or(&Value::Null), &format!("{at}.DeviceIDs"))?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Checkpoint { allocations, registered, offered: BTreeMap::new() })
    }

    /// Reads the checkpoint at `path` and the device plugin's [`OFFERED`] list beside it: `None` when there is
    /// neither (no kubelet, or none with a device plugin yet). A path that is a symbolic link whose target is gone
    /// is an error, not "none": it would drop every VF's protection.
    pub fn read(path: &Path) -> Result<Option<Checkpoint>, String> {
        let checkpoint = match read_file(path, "the kubelet's checkpoint")? {
            None => None,
            Some(raw) => Some(Checkpoint::parse(&raw).map_err(|e| {
                format!("the kubelet's checkpoint {} is not a device manager checkpoint: {e}", path.display())
            })?),
        };
        let list = path.parent().unwrap_or(Path::new("/")).join(OFFERED);
        let offered = match read_file(&list, "the device plugin's list of offered VFs")? {
            None => None,
            Some(raw) => Some(parse_offered(&raw).map_err(|e| {
                format!(
                    "the device plugin's list of offered VFs {} cannot be read: {e} (the device plugin writes it \
                     again within seconds; remove it if no sriov-rdma device plugin runs on this node)",
                    list.display()
                )
            })?),
        };
        Ok(match (checkpoint, offered) {
            (None, None) => None,
            (cp, offered) => Some(Checkpoint { offered: offered.unwrap_or_default(), ..cp.unwrap_or_default() }),
        })
    }

    /// The resource under which the kubelet manages `pci`: one that registered it, else one the device plugin
    /// offers it under (an unhealthy VF is not registered, but still the kubelet's to give), else one it was
    /// allocated from (an allocated device that turned unhealthy leaves the registered list but not its pod).
    pub fn resource_of<'a>(&'a self, pci: &PciAddr) -> Option<&'a str> {
        self.registered_as(pci)
            .or_else(|| listed(&self.offered, pci))
            .or_else(|| self.holders(pci).next().map(|a| a.resource.as_str()))
    }

    /// The resource that registered `pci` with the kubelet, whatever case or form its device ID has.
    pub fn registered_as<'a>(&'a self, pci: &PciAddr) -> Option<&'a str> {
        listed(&self.registered, pci)
    }

    /// The allocations that hold `pci`.
    pub fn holders<'a>(&'a self, pci: &PciAddr) -> impl Iterator<Item = &'a PodDevices> + 'a {
        let pci = pci.clone();
        self.allocations.iter().filter(move |a| a.devices.iter().any(|id| names(id, &pci)))
    }

    /// Whether the kubelet allocated `pci` to a container of the pod `pod_uid`.
    pub fn allocated_to(&self, pod_uid: &str, pci: &PciAddr) -> bool {
        self.holders(pci).any(|a| a.pod_uid == pod_uid)
    }

    /// Why ADD may not rebind the driver of `pci` (an mlx5 VF applies a new IB GUID only when bound again), or
    /// `None`: a VF the kubelet manages got its RDMA character devices named by a device plugin's Allocate, before
    /// ADD, and a rebind gives the VF's RDMA device (`rdma`, its names now) the lowest free numbers again: the
    /// container would be handed a path that is gone or another pod's. `what` names the setting that rebinds.
    pub fn rebind_refusal(&self, pci: &PciAddr, rdma: &[String], what: &str) -> Option<String> {
        let resource = self.resource_of(pci)?;
        if rdma.is_empty() {
            return None;
        }
        Some(format!(
            "{what} for VF {pci}: applying it rebinds the VF's driver, which renumbers its RDMA device {} and its \
             character devices; the kubelet manages this VF as resource {resource}, whose device plugin named them \
             for the pod's containers before ADD (they would get a device that is gone or another pod's); set the \
             GUID on the VF before the pod is scheduled (ip link set <pf> vf <n> node_guid/port_guid, then rebind), \
             or take the VF without the resource; nothing changed",
            rdma.join(", ")
        ))
    }

    /// The resource of a VF the kubelet manages and did not allocate to the pod `pod_uid` (to no pod given): a
    /// VF ADD's `pfName` must pass over for that pod.
    pub fn withheld<'a>(&'a self, pci: &PciAddr, pod_uid: Option<&str>) -> Option<&'a str> {
        let resource = self.resource_of(pci)?;
        (!pod_uid.is_some_and(|uid| self.allocated_to(uid, pci))).then_some(resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(s: &str) -> PciAddr {
        PciAddr::parse(s).unwrap()
    }

    #[test]
    fn a_kubelet_checkpoint_is_read_with_its_registrations_and_allocations() {
        let cp = Checkpoint::parse(
            br#"{"Data":{"PodDeviceEntries":[
              {"PodUID":"u1","ContainerName":"w","ResourceName":"rdma/hca","DeviceIDs":{"0":["0000:3B:02.1"],"1":["0000:3B:02.1"]},"AllocResp":"Cg=="},
              {"PodUID":"u2","ContainerName":"x","ResourceName":"rdma/hca","DeviceIDs":["0000:3b:02.4"],"AllocResp":null},
              {"PodUID":"u3","ContainerName":"y","ResourceName":"gpu","DeviceIDs":{"-1":null},"AllocResp":""}],
              "RegisteredDevices":{"rdma/hca":["0000:3b:02.1","0000:3b:02.2"],"gpu":null}},"Checksum":3552456126}"#,
        )
        .unwrap();
        assert_eq!(cp.registered["rdma/hca"].len(), 2);
        assert!(cp.registered["gpu"].is_empty());
        assert_eq!(cp.allocations[0].devices, ["0000:3B:02.1"], "one device on two NUMA nodes is one device");
        assert!(cp.allocations[2].devices.is_empty());
        assert_eq!(cp.resource_of(&pci("3b:02.1")), Some("rdma/hca"), "short and upper-case forms name the VF");
        assert_eq!(cp.resource_of(&pci("0000:3b:02.2")), Some("rdma/hca"));
        assert_eq!(cp.resource_of(&pci("0000:3b:02.4")), Some("rdma/hca"), "allocated, no longer registered");
        assert_eq!(cp.resource_of(&pci("0000:3b:02.3")), None);
        assert!(cp.allocated_to("u1", &pci("0000:3b:02.1")));
        assert!(!cp.allocated_to("u2", &pci("0000:3b:02.1")));
        assert!(!cp.allocated_to("u1", &pci("0000:3b:02.2")));
    }

    #[test]
    fn empty_lists_as_go_writes_them_and_malformed_files() {
        let cp = Checkpoint::parse(br#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}"#);
        assert_eq!(cp.unwrap(), Checkpoint::default());
        for bad in [&b""[..], b"{", b"{}", b"[]", br#"{"Data":{"PodDeviceEntries":[{"PodUID":1}]}}"#] {
            assert!(Checkpoint::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let e = Checkpoint::parse(br#"{"Data":{"RegisteredDevices":{"r":["a",1]}}}"#).unwrap_err();
        assert_eq!(e, "Data.RegisteredDevices[r][1] is not a string");
        let e = Checkpoint::parse(br#"{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c"}]}}"#);
        assert_eq!(e.unwrap_err(), "Data.PodDeviceEntries[0].ResourceName is missing or not a string");
    }

    #[test]
    fn a_vf_the_device_plugin_offers_is_withheld_whatever_its_health() {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-kcp-offered-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sriov-rdma")).unwrap();
        let f = dir.join(CHECKPOINT);
        // A link flap: the kubelet registered none of the VFs (all Unhealthy), allocated none.
        std::fs::write(&f, br#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"rdma/hca":[]}},"Checksum":1}"#)
            .unwrap();
        let list = BTreeMap::from([("rdma/hca".to_string(), vec!["0000:3b:00.2".to_string()])]);
        std::fs::write(dir.join(OFFERED), offered_json(&list)).unwrap();
        let cp = Checkpoint::read(&f).unwrap().unwrap();
        assert_eq!(cp.withheld(&pci("0000:3b:00.2"), None), Some("rdma/hca"), "offered, unhealthy: withheld");
        assert_eq!(cp.withheld(&pci("0000:3b:00.3"), Some("u1")), None, "not offered: free");
        // The list alone (no kubelet checkpoint yet) protects too; a bad one fails closed, naming it.
        std::fs::remove_file(&f).unwrap();
        assert_eq!(Checkpoint::read(&f).unwrap().unwrap().resource_of(&pci("3b:00.2")), Some("rdma/hca"));
        std::fs::write(dir.join(OFFERED), b"{\"version\":1}").unwrap();
        let e = Checkpoint::read(&f).unwrap_err();
        assert!(e.contains(&dir.join(OFFERED).display().to_string()) && e.contains("resources"), "{e}");
        std::fs::remove_file(dir.join(OFFERED)).unwrap();
        std::os::unix::fs::symlink(dir.join("gone"), dir.join(OFFERED)).unwrap();
        assert!(Checkpoint::read(&f).unwrap_err().contains("symbolic link"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_prepared_dra_claim_holds_its_vf_for_the_pods_it_is_reserved_for_only() {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-kcp-dra-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(dra_claim_of(&dir, "u1", &pci("0000:3b:00.2")), Ok(None), "no directory: no claim");
        std::fs::create_dir_all(&dir).unwrap();
        let claim = r#"{"claim":"ns/c","uid":"c1","pods":["u1"],"devices":[{"request":"nic","device":"pci-0000-3b-00-2","pciAddress":"0000:3B:00.2","config":{}}]}"#;
        std::fs::write(dir.join("c1.json"), claim).unwrap();
        std::fs::write(dir.join("c2.json"), b"{half a file").unwrap();
        std::fs::write(dir.join("c3.txt"), claim.replace("u1", "u2")).unwrap();
        assert_eq!(dra_claim_of(&dir, "u1", &pci("3b:00.2")), Ok(Some("ns/c".into())));
        assert_eq!(dra_claim_of(&dir, "u2", &pci("3b:00.2")), Ok(None), "reserved for another pod");
        assert_eq!(dra_claim_of(&dir, "u1", &pci("3b:00.3")), Ok(None), "another VF");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_guid_rebind_is_refused_for_a_vf_the_kubelet_manages_with_an_rdma_device() {
        let cp = Checkpoint::parse(
            br#"{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"w","ResourceName":"rdma/hca","DeviceIDs":{"0":["0000:3b:02.1"]},"AllocResp":""}],"RegisteredDevices":{"rdma/hca":["0000:3b:02.1"]}},"Checksum":1}"#,
        )
        .unwrap();
        let rdma = ["mlx5_3".to_string()];
        let why = cp.rebind_refusal(&pci("0000:3b:02.1"), &rdma, "runtimeConfig.infinibandGUID").unwrap();
        assert!(why.contains("runtimeConfig.infinibandGUID for VF 0000:3b:02.1") && why.contains("mlx5_3"), "{why}");
        assert!(why.contains("resource rdma/hca") && why.contains("nothing changed"), "{why}");
        assert_eq!(cp.rebind_refusal(&pci("0000:3b:02.1"), &[], "x"), None, "no RDMA device: nothing renumbered");
        assert_eq!(cp.rebind_refusal(&pci("0000:3b:02.2"), &rdma, "x"), None, "not the kubelet's");
    }

    #[test]
    fn no_file_is_none_and_a_bad_one_names_the_file() {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-kcp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(CHECKPOINT);
        assert_eq!(Checkpoint::read(&f), Ok(None));
        std::fs::write(&f, b"{\"Data\":").unwrap();
        let e = Checkpoint::read(&f).unwrap_err();
        assert!(e.contains(&f.display().to_string()) && e.contains("not a device manager checkpoint"), "{e}");
        // A link whose target moved away is not "no checkpoint": every VF would lose its protection.
        std::fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(dir.join("moved-away"), &f).unwrap();
        let e = Checkpoint::read(&f).unwrap_err();
        assert!(e.contains(&f.display().to_string()) && e.contains("symbolic link") && e.contains("moved-away"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            pod_resources_socket(Path::new(DEVICE_PLUGINS_DIR)),
            Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")
        );
    }
}
