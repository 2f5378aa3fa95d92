//! The device plugin's configuration: a JSON file (the DaemonSet's ConfigMap) or, for a node with one resource,
//! the environment variables `RDMA_RESOURCE_NAME`, `RDMA_DEVICE_SPEC_STR` and `RDMA_DEBUG`. Everything is checked
//! before anything is advertised; an error names the key.
//!
//! The file is this plugin's form (`resources`) or the SR-IOV network device plugin's `config.json`
//! (`resourceList`, v3.11), read by one parser under one set of rules: each entry takes either form's keys and
//! every selector key of both. The two lists differ only in their defaults, as each project documents them: a
//! `resources` entry requires an RDMA device (`requireRdma`, default true), a `resourceList` entry does not unless
//! a selector says `isRdma: true`, and names its resource `resourcePrefix/resourceName` (prefix `intel.com`).
//! Their keys this plugin cannot honour (other device types, vDPA, DDP profiles, partition keys, ACPI indexes) are
//! refused naming the key: a resource never silently offers something else than the file says.

use crate::alloc::Policy;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sriov_rdma_cni::model::PciAddr;
use std::collections::BTreeMap;

pub const DEFAULT_RESOURCE: &str = "rdma/hca";
/// The SR-IOV network device plugin's default `resourcePrefix` (its `-resource-prefix` flag's default).
pub const SRIOVDP_PREFIX: &str = "intel.com";

/// A configuration that failed its checks; the message names the key (`resources[1].selectors.linkTypes[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The file as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    resources: Option<Vec<ResourceFile>>,
    /// The SR-IOV network device plugin's list.
    resource_list: Option<Vec<ResourceFile>>,
    /// PF netdev name → the VF count to create at start.
    num_vfs: Option<BTreeMap<String, u32>>,
}

/// One resource, in either form.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResourceFile {
    /// `<domain>/<name>` (this plugin's form).
    name: Option<String>,
    /// The name without its domain, which `resourcePrefix` gives (the SR-IOV network device plugin's form).
    resource_name: Option<String>,
    resource_prefix: Option<String>,
    device_type: Option<String>,
    exclude_topology: Option<bool>,
    /// One selector object or a list of them (tried in order).
    selectors: Option<Value>,
    additional_info: Option<BTreeMap<String, BTreeMap<String, String>>>,
    require_rdma: Option<bool>,
    /// `spread` (the default) or `pack`: see [`crate::alloc::Policy`].
    allocation: Option<String>,
    /// Publish the resource's VFs through DRA (dra.rs) instead of the device plugin API.
    dra: Option<bool>,
}

/// One selector object as written: every key of both forms.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SelectorFile {
    #[serde(default)]
    pf_names: Vec<String>,
    #[serde(default)]
    root_devices: Vec<String>,
    #[serde(default)]
    vendors: Vec<String>,
    #[serde(default)]
    devices: Vec<String>,
    #[serde(default)]
    drivers: Vec<String>,
    #[serde(default)]
    link_types: Vec<String>,
    #[serde(default)]
    numa_nodes: Vec<u32>,
    #[serde(default)]
    pci_addresses: Vec<String>,
    is_rdma: Option<bool>,
    need_vhost_net: Option<bool>,
    // The SR-IOV network device plugin's keys this plugin refuses unless they are empty (null, [], "", false).
    ddp_profiles: Option<Value>,
    p_keys: Option<Value>,
    vdpa_type: Option<Value>,
    acpi_indexes: Option<Value>,
    aux_types: Option<Value>,
}

/// A PF and, after `#`, which of its VFs by index (`ens1f0#0-3`, `0000:86:00.0#0,2-3`): the SR-IOV network device
/// plugin's form, the same in both lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfVfs {
    /// The PF's netdev or RDMA device name (`pfNames`), or its PCI address (`rootDevices`, normalized).
    pub pf: String,
    /// Inclusive index ranges; `None`: every VF of the PF.
    pub vfs: Option<Vec<(u32, u32)>>,
}

impl PfVfs {
    /// Every VF of `pf`.
    pub fn all(pf: &str) -> PfVfs {
        PfVfs { pf: pf.to_string(), vfs: None }
    }

    /// Does it take the VF with this index?
    pub fn takes(&self, index: u32) -> bool {
        self.vfs.as_ref().is_none_or(|r| r.iter().any(|(a, b)| (*a..=*b).contains(&index)))
    }

    /// `written`: `<pf>` or `<pf>#<i>,<first>-<last>,…` (indexes 0-based, ranges inclusive); `pci`: the PF is a
    /// PCI address.
    fn parse(written: &str, pci: bool) -> Result<PfVfs, String> {
        let (pf, ranges) = match written.split_once('#') {
            Some((pf, r)) => (pf, Some(r)),
            None => (written, None),
        };
        let pf = if pci {
            PciAddr::parse(&pf.to_ascii_lowercase()).map_err(|e| format!("{written:?}: {pf:?} {e}"))?.to_string()
        } else if pf.is_empty() || pf.contains('/') || pf.contains(char::is_whitespace) {
            return Err(format!("{written:?} is not a name"));
        } else {
            pf.to_string()
        };
        let form = "give <PF>#<index>,<first>-<last>,… with 0-based VF indexes";
        let Some(ranges) = ranges else { return Ok(PfVfs { pf, vfs: None }) };
        let mut vfs = Vec::new();
        for item in ranges.split(',') {
            let (a, b) = item.split_once('-').unwrap_or((item, item));
            let index = |s: &str| {
                let digits = !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
                digits.then(|| s.parse::<u32>().ok()).flatten().ok_or_else(|| {
                    format!("{written:?}: {item:?} after '#' is not a VF index or a range first-last; {form}")
                })
            };
            let (a, b) = (index(a)?, index(b)?);
            if a > b {
                return Err(format!("{written:?}: the range {item} runs backwards; {form}"));
            }
            vfs.push((a, b));
        }
        Ok(PfVfs { pf, vfs: Some(vfs) })
    }
}

impl Serialize for PfVfs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ranges: Vec<String> =
            self.vfs.iter().flatten().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        match self.vfs {
            None => s.serialize_str(&self.pf),
            Some(_) => s.serialize_str(&format!("{}#{}", self.pf, ranges.join(","))),
        }
    }
}

/// Which VFs one selector object takes; every given list must match (an empty or absent list matches all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selectors {
    /// The PF's netdev name (`ens1f0`) or RDMA device name (`mlx5_0`), each with an optional `#` VF range.
    pub pf_names: Vec<PfVfs>,
    /// The PF's PCI address (`0000:3b:00.0`), each with an optional `#` VF range.
    pub root_devices: Vec<PfVfs>,
    /// The VF's PCI vendor ID, lower-case hex (`15b3`).
    pub vendors: Vec<String>,
    /// The VF's PCI device ID, lower-case hex (`101e`).
    pub devices: Vec<String>,
    /// The driver the VF is bound to (`mlx5_core`, `vfio-pci`).
    pub drivers: Vec<String>,
    /// `ether` or `infiniband`.
    pub link_types: Vec<String>,
    pub numa_nodes: Vec<u32>,
    /// The VF's own PCI address (`0000:3b:00.2`): to set particular VFs apart (for a VM, a test, a tenant).
    pub pci_addresses: Vec<String>,
    /// Take only VFs that have an RDMA device (or are bound to vfio-pci).
    pub require_rdma: bool,
    /// A container given a VF this selector took also gets /dev/vhost-net and /dev/net/tun.
    pub need_vhost_net: bool,
}

impl Default for Selectors {
    /// Every VF with an RDMA device: this plugin's default.
    fn default() -> Selectors {
        Selectors {
            pf_names: Vec::new(),
            root_devices: Vec::new(),
            vendors: Vec::new(),
            devices: Vec::new(),
            drivers: Vec::new(),
            link_types: Vec::new(),
            numa_nodes: Vec::new(),
            pci_addresses: Vec::new(),
            require_rdma: true,
            need_vhost_net: false,
        }
    }
}

/// One advertised resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// `<domain>/<name>`, e.g. `rdma/hca`.
    pub name: String,
    /// Tried in order: a VF is the resource's if one takes it, and the first that does decides `needVhostNet`.
    /// A VF that several resources select is offered by the first of them in the config only, so the kubelet
    /// cannot give it to two pods.
    pub selectors: Vec<Selectors>,
    /// Advertise no NUMA node for the devices (`excludeTopology`).
    pub exclude_topology: bool,
    /// `additionalInfo`: `*` or a VF's PCI address → key → value, added to the VF's entry of the `_INFO` variable.
    pub additional_info: BTreeMap<String, BTreeMap<String, String>>,
    /// How GetPreferredAllocation picks several VFs for one container.
    pub allocation: Policy,
    /// `dra: true`: the VFs are published as ResourceSlice devices of the DRA driver (dra.rs), and the resource is
    /// not registered with the kubelet's device plugin API. Off by default.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dra: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub resources: Vec<Resource>,
    pub num_vfs: Vec<(String, u32)>,
    pub debug: bool,
}

impl Resource {
    /// A resource of one selector object, nothing else set.
    pub fn new(name: &str, selectors: Selectors) -> Resource {
        Resource {
            name: name.to_string(),
            selectors: vec![selectors],
            exclude_topology: false,
            additional_info: BTreeMap::new(),
            allocation: Policy::default(),
            dra: false,
        }
    }

    /// `PCIDEVICE_<DOMAIN>_<NAME>`: the SR-IOV network device plugin's variable (upper case, `/` and `.` as `_`),
    /// which Multus and existing pods read.
    pub fn env_name(&self) -> String {
        format!("PCIDEVICE_{}", self.name.replace(['/', '.'], "_").to_ascii_uppercase())
    }

    /// The socket file name in the kubelet's device plugin directory.
    pub fn socket_name(&self) -> String {
        format!("sriov-rdma-{}.sock", self.name.replace(['/', '.'], "_"))
    }

    /// `additionalInfo` for one VF: the `*` entries, overridden by the VF's own (as the SR-IOV network device
    /// plugin merges them).
    pub fn extra_info(&self, pci: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for key in ["*", pci] {
            if let Some(m) = self.additional_info.get(key) {
                out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        out
    }
}

fn truthy(v: &str) -> bool {
    !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off")
}

impl Config {
    /// From the file's text (`source` names it in errors) or, without one, from the environment.
    pub fn load(file: Option<(&str, &str)>, env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let debug = env("RDMA_DEBUG").is_some_and(|v| truthy(&v));
        let name = env("RDMA_RESOURCE_NAME").filter(|s| !s.trim().is_empty());
        let parsed = match file {
            // A resource without a name takes RDMA_RESOURCE_NAME: the DaemonSet sets it from the one place the
            // NAD's resourceName also comes from.
            Some((source, text)) => {
                serde_json::from_str::<File>(text).map_err(|e| ConfigError(format!("{source}: {e}"))).and_then(|f| {
                    f.check(name.as_deref()).map_err(|e| {
                        let unnamed = e.0.contains(".name: ") && name.is_some();
                        ConfigError(format!(
                            "{source}: {}{}",
                            e.0,
                            if unnamed { " (from RDMA_RESOURCE_NAME)" } else { "" }
                        ))
                    })
                })?
            }
            None => {
                let spec = env("RDMA_DEVICE_SPEC_STR").unwrap_or_default();
                let pf_names: Vec<&str> = spec.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).collect();
                let res = ResourceFile {
                    name,
                    selectors: Some(serde_json::json!({ "pfNames": pf_names })),
                    ..ResourceFile::default()
                };
                File { resources: Some(vec![res]), ..File::default() }.check(None).map_err(|e| {
                    ConfigError(
                        e.0.replace("resources[0].name", "RDMA_RESOURCE_NAME")
                            .replace("resources[0].selectors.pfNames", "RDMA_DEVICE_SPEC_STR"),
                    )
                })?
            }
        };
        Ok(Config { debug, ..parsed })
    }
}

fn err<T>(key: impl std::fmt::Display, why: impl std::fmt::Display) -> Result<T, ConfigError> {
    Err(ConfigError(format!("{key}: {why}")))
}

impl File {
    fn check(self, default_name: Option<&str>) -> Result<Config, ConfigError> {
        let (list_key, list, theirs) =
            match (self.resources, self.resource_list) {
                (Some(_), Some(_)) => return err(
                    "resourceList",
                    "is given next to resources: give one list (resources, this plugin's form, or resourceList, the \
                     SR-IOV network device plugin's), so the order that decides which resource offers a VF is clear",
                ),
                (None, Some(l)) => ("resourceList", l, true),
                (r, None) => ("resources", r.unwrap_or_else(|| vec![ResourceFile::default()]), false),
            };
        if list.is_empty() {
            return err(list_key, "is empty: give at least one resource (or leave resources out for rdma/hca)");
        }
        let mut resources: Vec<Resource> = Vec::new();
        for (i, r) in list.into_iter().enumerate() {
            let key = format!("{list_key}[{i}]");
            let (name_key, name) = resource_name(&key, &r, theirs, default_name)?;
            if resources.iter().any(|p| p.name == name) {
                return err(name_key, format!("{name:?} is given twice"));
            }
            // `/` and `.` both become `_` (and the variable is upper case): two names may not share either.
            let this = Resource::new(&name, Selectors::default());
            let clash = resources
                .iter()
                .enumerate()
                .find(|(_, p)| p.socket_name() == this.socket_name() || p.env_name() == this.env_name());
            if let Some((j, p)) = clash {
                return err(
                    name_key,
                    format!(
                        "{name:?} and {list_key}[{j}]'s {:?} map to the same socket {} or variable {}: the kubelet \
                         would book one's VFs under the other's name; rename one of them",
                        p.name,
                        this.socket_name(),
                        this.env_name()
                    ),
                );
            }
            match r.device_type.as_deref() {
                None | Some("netDevice") => {}
                Some(t @ ("accelerator" | "auxNetDevice")) => {
                    return err(
                        format!("{key}.deviceType"),
                        format!(
                            "{t:?} is not supported: this plugin offers SR-IOV VFs and their RDMA devices \
                             (netDevice) only; serve {t} devices with the SR-IOV network device plugin"
                        ),
                    )
                }
                Some(t) => return err(format!("{key}.deviceType"), format!("{t:?} is not netDevice")),
            }
            // Each form's own default, as each project documents it.
            let rdma = r.require_rdma.unwrap_or(!theirs);
            let selectors = match r.selectors {
                None | Some(Value::Null) => vec![selector(&format!("{key}.selectors"), Value::Null, rdma)?],
                Some(v @ Value::Object(_)) => vec![selector(&format!("{key}.selectors"), v, rdma)?],
                Some(Value::Array(list)) if list.is_empty() => {
                    return err(
                        format!("{key}.selectors"),
                        "is an empty list, which selects nothing: leave it out to select every VF",
                    )
                }
                Some(Value::Array(list)) => list
                    .into_iter()
                    .enumerate()
                    .map(|(j, v)| selector(&format!("{key}.selectors[{j}]"), v, rdma))
                    .collect::<Result<_, _>>()?,
                Some(v) => return err(format!("{key}.selectors"), format!("{v} is not a selector object or a list")),
            };
            let mut additional_info = BTreeMap::new();
            for (k, m) in r.additional_info.unwrap_or_default() {
                let k = match k.as_str() {
                    "*" => k,
                    _ => PciAddr::parse(&k)
                        .map_err(|e| ConfigError(format!("{key}.additionalInfo.{k}: is not \"*\" and {e}")))?
                        .to_string(),
                };
                additional_info.insert(k, m);
            }
            let exclude_topology = r.exclude_topology.unwrap_or(false);
            let allocation = match r.allocation.as_deref().map(|v| (v, Policy::parse(v))) {
                None => Policy::default(),
                Some((_, Some(p))) => p,
                Some((v, None)) => return err(format!("{key}.allocation"), format!("{v:?} is not spread or pack")),
            };
            let dra = r.dra.unwrap_or(false);
            resources.push(Resource { name, selectors, exclude_topology, additional_info, allocation, dra });
        }
        let num_vfs: Vec<(String, u32)> = self.num_vfs.unwrap_or_default().into_iter().collect();
        if let Some((pf, _)) = num_vfs.iter().find(|(pf, _)| pf.is_empty() || pf.contains('/')) {
            return err(format!("numVfs.{pf}"), "is not a netdev name");
        }
        Ok(Config { resources, num_vfs, debug: false })
    }
}

/// The resource's `<domain>/<name>` and the key it came from: `name`, or `resourcePrefix` (default intel.com) and
/// `resourceName`; neither: `default_name` or rdma/hca in `resources`, an error in `resourceList` (it requires one).
fn resource_name(
    key: &str,
    r: &ResourceFile,
    theirs: bool,
    default_name: Option<&str>,
) -> Result<(String, String), ConfigError> {
    let Some(short) = &r.resource_name else {
        if r.resource_prefix.is_some() {
            return err(format!("{key}.resourcePrefix"), "goes with resourceName (name holds its own domain)");
        }
        if theirs && r.name.is_none() {
            return err(format!("{key}.resourceName"), "is missing: every entry of resourceList names its resource");
        }
        let name = r.name.clone().or(default_name.map(str::to_string)).unwrap_or_else(|| DEFAULT_RESOURCE.into());
        if let Err(why) = check_resource_name(&name) {
            return err(format!("{key}.name"), format!("{name:?} {why}"));
        }
        return Ok((format!("{key}.name"), name));
    };
    let name_key = format!("{key}.resourceName");
    if r.name.is_some() {
        return err(name_key, "is given next to name: give one of them");
    }
    if short.contains('/') {
        return err(name_key, format!("{short:?} contains '/': the domain goes in resourcePrefix"));
    }
    let prefix = r.resource_prefix.as_deref().unwrap_or(SRIOVDP_PREFIX);
    if let Err(why) = check_resource_name(&format!("{prefix}/x")) {
        return err(format!("{key}.resourcePrefix"), format!("{prefix:?}: the name {why}"));
    }
    let name = format!("{prefix}/{short}");
    if let Err(why) = check_resource_name(&name) {
        return err(name_key, format!("{short:?}: {name:?} {why}"));
    }
    Ok((name_key, name))
}

/// One selector object at `at`; `rdma`: what `isRdma` is when it is not given.
fn selector(at: &str, v: Value, rdma: bool) -> Result<Selectors, ConfigError> {
    let s: SelectorFile = match v {
        Value::Null => SelectorFile::default(),
        v => serde_json::from_value(v).map_err(|e| ConfigError(format!("{at}: {e}")))?,
    };
    // The SR-IOV network device plugin's keys that would select or serve what this plugin cannot: refused unless
    // empty, which means nothing there either.
    let refused = [
        ("ddpProfiles", &s.ddp_profiles, "selects by Intel DDP profile, which this plugin does not read"),
        ("pKeys", &s.p_keys, "selects by InfiniBand partition key, which this plugin does not read"),
        ("vdpaType", &s.vdpa_type, "asks for vDPA devices, which this plugin does not offer"),
        ("acpiIndexes", &s.acpi_indexes, "selects by ACPI index, which this plugin does not read"),
        ("auxTypes", &s.aux_types, "selects auxiliary (SF) devices, which this plugin does not offer"),
    ];
    let empty = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    };
    if let Some((field, v, why)) =
        refused.iter().find_map(|(f, v, w)| v.as_ref().filter(|v| !empty(v)).map(|v| (f, v, w)))
    {
        return err(
            format!("{at}.{field}"),
            format!(
                "{v} is not supported: it {why}; remove the key and select the VFs by pfNames, rootDevices, \
                 devices or pciAddresses"
            ),
        );
    }
    for (field, values) in [("vendors", &s.vendors), ("devices", &s.devices)] {
        for (j, v) in values.iter().enumerate() {
            if v.len() != 4 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                return err(format!("{at}.{field}[{j}]"), format!("{v:?} is not a 4-digit hex ID"));
            }
        }
    }
    for (j, v) in s.link_types.iter().enumerate() {
        if v != "ether" && v != "infiniband" {
            return err(format!("{at}.linkTypes[{j}]"), format!("{v:?} is not ether or infiniband"));
        }
    }
    if let Some(j) = s.drivers.iter().position(|v| v.trim().is_empty() || v.contains('/')) {
        return err(format!("{at}.drivers[{j}]"), format!("{:?} is not a name", s.drivers[j]));
    }
    let pf_vfs = |field: &str, list: &[String], pci: bool| -> Result<Vec<PfVfs>, ConfigError> {
        let parse = |(j, v): (usize, &String)| {
            PfVfs::parse(v, pci).map_err(|why| ConfigError(format!("{at}.{field}[{j}]: {why}")))
        };
        list.iter().enumerate().map(parse).collect()
    };
    let pf_names = pf_vfs("pfNames", &s.pf_names, false)?;
    let root_devices = pf_vfs("rootDevices", &s.root_devices, true)?;
    let mut pci_addresses = Vec::new();
    for (j, v) in s.pci_addresses.iter().enumerate() {
        match PciAddr::parse(v) {
            Ok(a) => pci_addresses.push(a.to_string()),
            Err(e) => return err(format!("{at}.pciAddresses[{j}]"), format!("{v:?} {e}")),
        }
    }
    Ok(Selectors {
        pf_names,
        root_devices,
        vendors: s.vendors.iter().map(|v| v.to_ascii_lowercase()).collect(),
        devices: s.devices.iter().map(|v| v.to_ascii_lowercase()).collect(),
        drivers: s.drivers,
        link_types: s.link_types,
        numa_nodes: s.numa_nodes,
        pci_addresses,
        require_rdma: s.is_rdma.unwrap_or(rdma),
        need_vhost_net: s.need_vhost_net.unwrap_or(false),
    })
}

/// An extended resource name as the kubelet takes it: `<domain>/<name>`, the domain a DNS subdomain, the name
/// at most 63 characters of letters, digits, `-`, `_`, `.`, starting and ending alphanumeric.
fn check_resource_name(name: &str) -> Result<(), &'static str> {
    let Some((domain, short)) = name.split_once('/') else {
        return Err("is not <domain>/<name> (like rdma/hca)");
    };
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let dns = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && alnum(l.chars().next())
                && alnum(l.chars().last())
        });
    if !dns {
        return Err("has a domain that is not a lower-case DNS name");
    }
    let ok = !short.is_empty()
        && short.len() <= 63
        && short.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && alnum(short.chars().next())
        && alnum(short.chars().last());
    if !ok {
        return Err("has a name part that is not 1-63 letters, digits, '-', '_' or '.'");
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err("uses a domain reserved by Kubernetes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<Config, ConfigError> {
        Config::load(Some(("config.json", text)), |_| None)
    }

    fn one(text: &str) -> Resource {
        let c = file(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(c.resources.len(), 1, "{text}");
        c.resources.into_iter().next().unwrap()
    }

    #[test]
    fn an_empty_file_is_one_rdma_hca_resource() {
        let c = file("{}").unwrap();
        assert_eq!(c.resources.len(), 1);
        assert_eq!(c.resources[0].name, "rdma/hca");
        assert_eq!(c.resources[0].selectors, vec![Selectors::default()]);
        assert!(c.resources[0].selectors[0].require_rdma);
        assert_eq!(c.resources[0].env_name(), "PCIDEVICE_RDMA_HCA");
    }

    #[test]
    fn dra_is_off_unless_a_resource_says_so() {
        assert!(!one("{}").dra);
        assert!(!one(r#"{"resources":[{"name":"rdma/a","dra":false}]}"#).dra);
        let c = file(r#"{"resources":[{"name":"rdma/dra","dra":true},{"name":"rdma/hca"}]}"#).unwrap();
        assert_eq!(c.resources.iter().map(|r| r.dra).collect::<Vec<_>>(), [true, false]);
        let e = file(r#"{"resources":[{"dra":"yes"}]}"#).unwrap_err();
        assert!(e.0.contains("config.json") && e.0.contains("invalid type"), "{e}");
    }

    #[test]
    fn the_environment_serves_a_one_resource_node() {
        let env = |k: &str| match k {
            "RDMA_RESOURCE_NAME" => Some("nvidia.com/cx6_rdma".to_string()),
            "RDMA_DEVICE_SPEC_STR" => Some("mlx5_0, ens1f1#0-3".to_string()),
            "RDMA_DEBUG" => Some("1".to_string()),
            _ => None,
        };
        let c = Config::load(None, env).unwrap();
        assert!(c.debug);
        let f = Config::load(Some(("f", r#"{"resources":[{},{"name":"rdma/b"}]}"#)), env).unwrap();
        let names: Vec<&str> = f.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["nvidia.com/cx6_rdma", "rdma/b"], "a file's unnamed resource takes RDMA_RESOURCE_NAME");
        assert_eq!(c.resources[0].name, "nvidia.com/cx6_rdma");
        let want = vec![PfVfs::all("mlx5_0"), PfVfs { pf: "ens1f1".into(), vfs: Some(vec![(0, 3)]) }];
        assert_eq!(c.resources[0].selectors[0].pf_names, want);
        assert_eq!(c.resources[0].env_name(), "PCIDEVICE_NVIDIA_COM_CX6_RDMA");
        let e = Config::load(None, |k| (k == "RDMA_RESOURCE_NAME").then(|| "hca".to_string())).unwrap_err();
        assert!(e.0.starts_with("RDMA_RESOURCE_NAME:"), "{e}");
        let e = Config::load(None, |k| (k == "RDMA_DEVICE_SPEC_STR").then(|| "ens1f0#2-1".to_string())).unwrap_err();
        assert!(e.0.starts_with("RDMA_DEVICE_SPEC_STR[0]: \"ens1f0#2-1\": the range 2-1 runs backwards"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"resources":[{"name":"rdma/hca","selectors":{"pfNamez":["x"]}}]}"#, "unknown field `pfNamez`"),
            (r#"{"resources":[{},{"name":"rdma/hca"}]}"#, "resources[1].name"),
            (r#"{"resources":[{"name":"RDMA/hca"}]}"#, "resources[0].name"),
            (r#"{"resources":[{"selectors":{"linkTypes":["ether","eth"]}}]}"#, "resources[0].selectors.linkTypes[1]"),
            (r#"{"resources":[{"selectors":{"vendors":["0x15b3"]}}]}"#, "resources[0].selectors.vendors[0]"),
            (r#"{"resources":[]}"#, "resources: is empty"),
            (
                r#"{"resources":[{"name":"example.com/a_b"},{"name":"example.com/a.b"}]}"#,
                "resources[1].name: \"example.com/a.b\" and resources[0]'s \"example.com/a_b\" map to the same \
                 socket sriov-rdma-example_com_a_b.sock or variable PCIDEVICE_EXAMPLE_COM_A_B",
            ),
            (r#"{"resources":[{"name":"rdma/hca"},{"name":"rdma/HCA"}]}"#, "variable PCIDEVICE_RDMA_HCA"),
            (
                r#"{"resources":[{"selectors":{"pciAddresses":["3b:00.2","3b:00"]}}]}"#,
                "resources[0].selectors.pciAddresses[1]",
            ),
            (r#"{"numVfs":{"ens1f0":"8"}}"#, "invalid type: string \"8\""),
            (r#"{"resources":[{"selectors":{"numaNodes":[-1]}}]}"#, "invalid value: integer `-1`"),
        ];
        for (text, want) in cases {
            let e = file(text).unwrap_err();
            assert!(e.0.starts_with("config.json: ") && e.0.contains(want), "{text}: {e}");
        }
    }

    /// Every key of the SR-IOV network device plugin's README (v3.11) is honoured or refused naming it.
    #[test]
    fn the_sriov_network_device_plugins_resource_keys() {
        // resourceName, resourcePrefix (default intel.com), deviceType netDevice, excludeTopology, additionalInfo.
        let r = one(r#"{"resourceList":[{"resourceName":"intel_sriov_netdevice"}]}"#);
        assert_eq!(r.name, "intel.com/intel_sriov_netdevice");
        assert_eq!(r.env_name(), "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE");
        assert!(!r.exclude_topology && r.additional_info.is_empty());
        let r = one(
            r#"{"resourceList":[{"resourceName":"mlnx_rdma","resourcePrefix":"mellanox.com","deviceType":"netDevice",
                "excludeTopology":true,"additionalInfo":{"*":{"token":"t","zone":"a"},"0000:86:00.2":{"token":"x"}}}]}"#,
        );
        assert_eq!(r.name, "mellanox.com/mlnx_rdma");
        assert!(r.exclude_topology);
        let extra = |pci| r.extra_info(pci).into_iter().collect::<Vec<_>>();
        assert_eq!(extra("0000:86:00.2"), [("token".into(), "x".into()), ("zone".into(), "a".into())]);
        assert_eq!(extra("0000:86:00.3"), [("token".into(), "t".into()), ("zone".into(), "a".into())]);
        // isRdma's default is false there; our own requireRdma's stays true.
        assert!(!r.selectors[0].require_rdma);
        assert!(one(r#"{"resources":[{"name":"a.com/b"}]}"#).selectors[0].require_rdma);

        let cases = [
            (r#"{"resourceList":[{"selectors":{}}]}"#, "resourceList[0].resourceName: is missing"),
            (r#"{"resourceList":[{"resourceName":"a/b"}]}"#, "resourceList[0].resourceName: \"a/b\" contains '/'"),
            (r#"{"resourceList":[{"resourceName":"a b"}]}"#, "resourceList[0].resourceName: \"a b\""),
            (
                r#"{"resourceList":[{"resourceName":"a","resourcePrefix":"Acme_com"}]}"#,
                "resourceList[0].resourcePrefix",
            ),
            (r#"{"resourceList":[{"resourceName":"a"},{"resourceName":"a"}]}"#, "resourceList[1].resourceName"),
            (r#"{"resources":[{"name":"x.com/a","resourcePrefix":"y.com"}]}"#, "resources[0].resourcePrefix"),
            (r#"{"resources":[{"name":"x.com/a","resourceName":"a"}]}"#, "resources[0].resourceName: is given next"),
            (
                r#"{"resourceList":[{"resourceName":"fpga","deviceType":"accelerator"}]}"#,
                "resourceList[0].deviceType: \"accelerator\" is not supported",
            ),
            (
                r#"{"resourceList":[{"resourceName":"sf","deviceType":"auxNetDevice"}]}"#,
                "resourceList[0].deviceType: \"auxNetDevice\" is not supported",
            ),
            (r#"{"resourceList":[{"resourceName":"a","deviceType":"gpu"}]}"#, "resourceList[0].deviceType"),
            (
                r#"{"resourceList":[{"resourceName":"a","additionalInfo":{"86:00":{"k":"v"}}}]}"#,
                "resourceList[0].additionalInfo.86:00",
            ),
            (r#"{"resourceList":[{"resourceName":"a","additionalInfo":{"*":{"k":1}}}]}"#, "invalid type: integer"),
            (r#"{"resourceList":[{"resourceName":"a","excludeTopology":"yes"}]}"#, "invalid type: string"),
            (r#"{"resourceList":[{"resourceName":"a","selectors":[]}]}"#, "resourceList[0].selectors: is an empty"),
            (r#"{"resourceList":[{"resourceName":"a","selectors":"x"}]}"#, "resourceList[0].selectors: \"x\""),
            (r#"{"resourceList":[],"numVfs":{}}"#, "resourceList: is empty"),
            (r#"{"resources":[{}],"resourceList":[{"resourceName":"a"}]}"#, "resourceList: is given next to"),
            (r#"{"resourceList":[{"resourceName":"a","selector":{}}]}"#, "unknown field `selector`"),
        ];
        for (text, want) in cases {
            let e = file(text).unwrap_err();
            assert!(e.0.starts_with("config.json: ") && e.0.contains(want), "{text}: {e}");
        }
        // numVfs goes with either list.
        let c = file(r#"{"resourceList":[{"resourceName":"a"}],"numVfs":{"ens1f0":4}}"#).unwrap();
        assert_eq!(c.num_vfs, vec![("ens1f0".to_string(), 4)]);
    }

    #[test]
    fn the_sriov_network_device_plugins_selector_keys() {
        let sel = |s: &str| -> Vec<Selectors> {
            one(&format!(r#"{{"resourceList":[{{"resourceName":"a","selectors":{s}}}]}}"#)).selectors
        };
        // vendors, devices, drivers, pciAddresses, linkTypes, isRdma, needVhostNet: as written.
        let s = sel(r#"{"vendors":["15B3"],"devices":["101e"],"drivers":["mlx5_core"],"pciAddresses":["0000:3b:00.2"],
                "linkTypes":["infiniband"],"isRdma":true,"needVhostNet":true}"#);
        assert_eq!(s.len(), 1, "one object is one selector");
        let want = Selectors {
            vendors: vec!["15b3".into()],
            devices: vec!["101e".into()],
            drivers: vec!["mlx5_core".into()],
            pci_addresses: vec!["0000:3b:00.2".into()],
            link_types: vec!["infiniband".into()],
            require_rdma: true,
            need_vhost_net: true,
            ..Selectors::default()
        };
        assert_eq!(s[0], want);
        // pfNames and rootDevices, with and without their VF ranges; a list keeps its order.
        let s = sel(
            r#"[{"pfNames":["ens1f0#0-3","netpf0#0,2-7,9","ens2f0"]},{"rootDevices":["0000:86:00.0#0-1,3,4","87:00.0"]}]"#,
        );
        assert_eq!(s.len(), 2);
        let pf = |pf: &str, vfs: Option<Vec<(u32, u32)>>| PfVfs { pf: pf.into(), vfs };
        assert_eq!(
            s[0].pf_names,
            vec![
                pf("ens1f0", Some(vec![(0, 3)])),
                pf("netpf0", Some(vec![(0, 0), (2, 7), (9, 9)])),
                pf("ens2f0", None)
            ]
        );
        assert_eq!(
            s[1].root_devices,
            vec![pf("0000:86:00.0", Some(vec![(0, 1), (3, 3), (4, 4)])), pf("0000:87:00.0", None)]
        );
        assert!(!s[0].require_rdma && !s[1].require_rdma && !s[0].need_vhost_net);
        let taken: Vec<u32> = (0..12).filter(|i| s[0].pf_names[1].takes(*i)).collect();
        assert_eq!(taken, vec![0, 2, 3, 4, 5, 6, 7, 9]);
        assert!((0..100).all(|i| s[0].pf_names[2].takes(i)));
        assert_eq!(
            serde_json::to_value(&s[0].pf_names).unwrap(),
            serde_json::json!(["ens1f0#0-3", "netpf0#0,2-7,9", "ens2f0"])
        );
        // Their keys that would select or serve something else are refused, naming the key; empty they mean nothing.
        for key in ["ddpProfiles", "pKeys", "acpiIndexes", "auxTypes"] {
            let e =
                file(&format!(r#"{{"resourceList":[{{"resourceName":"a","selectors":[{{}},{{"{key}":["1"]}}]}}]}}"#))
                    .unwrap_err();
            assert!(e.0.contains(&format!("resourceList[0].selectors[1].{key}: [\"1\"] is not supported")), "{e}");
            assert_eq!(
                sel(&format!(r#"{{"{key}":[]}}"#)),
                vec![Selectors { require_rdma: false, ..Selectors::default() }]
            );
        }
        let e = file(r#"{"resourceList":[{"resourceName":"a","selectors":{"vdpaType":"vhost"}}]}"#).unwrap_err();
        assert!(e.0.contains("resourceList[0].selectors.vdpaType: \"vhost\" is not supported"), "{e}");
        // In our own form: the same selector keys, the same range rule; isRdma overrides requireRdma.
        let r = one(r#"{"resources":[{"name":"a.com/b","selectors":[{"pfNames":["ens1f0#1"]},{"isRdma":false}]}]}"#);
        assert_eq!(r.selectors[0].pf_names, vec![pf("ens1f0", Some(vec![(1, 1)]))]);
        assert!(r.selectors[0].require_rdma && !r.selectors[1].require_rdma);
    }

    #[test]
    fn a_malformed_vf_range_is_refused_naming_the_key() {
        let cases = [
            (r#"{"pfNames":["ens1f0#"]}"#, "selectors.pfNames[0]: \"ens1f0#\": \"\" after '#'"),
            (r#"{"pfNames":["ens1f0","ens1f0#3-1"]}"#, "selectors.pfNames[1]: \"ens1f0#3-1\": the range 3-1 runs"),
            (r#"{"pfNames":["ens1f0#0-3#4"]}"#, "selectors.pfNames[0]"),
            (r#"{"pfNames":["ens1f0#0-"]}"#, "selectors.pfNames[0]"),
            (r#"{"pfNames":["ens1f0#a"]}"#, "selectors.pfNames[0]"),
            (r#"{"pfNames":["ens1f0#+1"]}"#, "selectors.pfNames[0]"),
            (r#"{"pfNames":["ens1f0#1,,2"]}"#, "selectors.pfNames[0]"),
            (r#"{"pfNames":["ens1f0#1 - 2"]}"#, "selectors.pfNames[0]"),
            (r##"{"pfNames":["#0-3"]}"##, "selectors.pfNames[0]: \"#0-3\" is not a name"),
            (r#"{"pfNames":["ens 1"]}"#, "selectors.pfNames[0]"),
            (r#"{"rootDevices":["0000:86:00.0#0-99999999999"]}"#, "selectors.rootDevices[0]"),
            (r#"{"rootDevices":["ens1f0#0-3"]}"#, "selectors.rootDevices[0]: \"ens1f0#0-3\": \"ens1f0\" is not a PCI"),
        ];
        for (sel, want) in cases {
            for (list, name) in [("resources", r#""name":"a.com/b""#), ("resourceList", r#""resourceName":"b""#)] {
                let text = format!(r#"{{"{list}":[{{{name},"selectors":{sel}}}]}}"#);
                let e = file(&text).unwrap_err();
                assert!(e.0.contains(&format!("{list}[0].{want}")), "{text}: {e}");
            }
        }
    }

    #[test]
    fn the_shipped_sriovdp_style_example_loads() {
        let text = include_str!("../../examples/sriovdp-config.json");
        let c = file(text).unwrap_or_else(|e| panic!("examples/sriovdp-config.json: {e}"));
        assert!(c.resources.len() >= 3);
        assert!(c.resources.iter().all(|r| !r.name.is_empty()));
    }
}
