//! The device plugin's configuration: a JSON file (the DaemonSet's ConfigMap) or, for a node with one resource,
//! the environment variables `RDMA_RESOURCE_NAME`, `RDMA_DEVICE_SPEC_STR` and `RDMA_DEBUG`. Everything is checked
//! before anything is advertised; an error names the key.

use crate::alloc::Policy;
use serde::Deserialize;
use std::collections::BTreeMap;

pub const DEFAULT_RESOURCE: &str = "rdma/hca";

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
    /// PF netdev name → the VF count to create at start.
    num_vfs: Option<BTreeMap<String, u32>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResourceFile {
    name: Option<String>,
    selectors: Option<Selectors>,
    require_rdma: Option<bool>,
    /// `spread` (the default) or `pack`: see [`crate::alloc::Policy`].
    allocation: Option<String>,
}

/// Which VFs a resource offers; every given list must match (an empty or absent list matches all). A VF that
/// several resources select is offered by the first of them in the config only, so the kubelet cannot give it
/// to two pods.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Selectors {
    /// The PF's netdev name (`ens1f0`) or the PF's RDMA device name (`mlx5_0`).
    #[serde(default)]
    pub pf_names: Vec<String>,
    /// The VF's PCI vendor ID, hex (`15b3`).
    #[serde(default)]
    pub vendors: Vec<String>,
    /// The VF's PCI device ID, hex (`101e`).
    #[serde(default)]
    pub devices: Vec<String>,
    /// The driver the VF is bound to (`mlx5_core`, `vfio-pci`).
    #[serde(default)]
    pub drivers: Vec<String>,
    /// `ether` or `infiniband`.
    #[serde(default)]
    pub link_types: Vec<String>,
    #[serde(default)]
    pub numa_nodes: Vec<u32>,
    /// The VF's own PCI address (`0000:3b:00.2`): to set particular VFs apart (for a VM, a test, a tenant).
    #[serde(default)]
    pub pci_addresses: Vec<String>,
}

/// One advertised resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// `<domain>/<name>`, e.g. `rdma/hca`.
    pub name: String,
    pub selectors: Selectors,
    /// Offer only VFs that have an RDMA device (or are bound to vfio-pci): the default.
    pub require_rdma: bool,
    /// How GetPreferredAllocation picks several VFs for one container.
    pub allocation: Policy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub resources: Vec<Resource>,
    pub num_vfs: Vec<(String, u32)>,
    pub debug: bool,
}

impl Resource {
    /// `PCIDEVICE_<DOMAIN>_<NAME>`: the SR-IOV network device plugin's variable (upper case, `/` and `.` as `_`),
    /// which Multus and existing pods read.
    pub fn env_name(&self) -> String {
        format!("PCIDEVICE_{}", self.name.replace(['/', '.'], "_").to_ascii_uppercase())
    }

    /// The socket file name in the kubelet's device plugin directory.
    pub fn socket_name(&self) -> String {
        format!("sriov-rdma-{}.sock", self.name.replace(['/', '.'], "_"))
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
                let pf_names: Vec<String> =
                    spec.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
                let res = ResourceFile {
                    name,
                    selectors: Some(Selectors { pf_names, ..Selectors::default() }),
                    require_rdma: None,
                    allocation: None,
                };
                File { resources: Some(vec![res]), num_vfs: None }.check(None).map_err(|e| {
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

impl File {
    fn check(self, default_name: Option<&str>) -> Result<Config, ConfigError> {
        let err = |key: String, why: String| Err(ConfigError(format!("{key}: {why}")));
        let list = self.resources.unwrap_or_else(|| vec![ResourceFile::default()]);
        if list.is_empty() {
            return err(
                "resources".into(),
                "is empty: give at least one resource (or leave it out for rdma/hca)".into(),
            );
        }
        let mut resources = Vec::new();
        for (i, r) in list.into_iter().enumerate() {
            let key = format!("resources[{i}]");
            let name = r.name.or(default_name.map(str::to_string)).unwrap_or_else(|| DEFAULT_RESOURCE.to_string());
            if let Err(why) = check_resource_name(&name) {
                return err(format!("{key}.name"), format!("{name:?} {why}"));
            }
            if resources.iter().any(|p: &Resource| p.name == name) {
                return err(format!("{key}.name"), format!("{name:?} is given twice"));
            }
            // `/` and `.` both become `_` (and the variable is upper case): two names may not share either.
            let this = Resource {
                name: name.clone(),
                selectors: Selectors::default(),
                require_rdma: true,
                allocation: Policy::default(),
            };
            let clash = resources
                .iter()
                .enumerate()
                .find(|(_, p)| p.socket_name() == this.socket_name() || p.env_name() == this.env_name());
            if let Some((j, p)) = clash {
                return err(
                    format!("{key}.name"),
                    format!(
                        "{name:?} and resources[{j}].name {:?} map to the same socket {} or variable {}: the kubelet \
                         would book one's VFs under the other's name; rename one of them",
                        p.name,
                        this.socket_name(),
                        this.env_name()
                    ),
                );
            }
            let s = r.selectors.unwrap_or_default();
            for (field, values) in [("vendors", &s.vendors), ("devices", &s.devices)] {
                for (j, v) in values.iter().enumerate() {
                    if v.len() != 4 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return err(format!("{key}.selectors.{field}[{j}]"), format!("{v:?} is not a 4-digit hex ID"));
                    }
                }
            }
            for (j, v) in s.link_types.iter().enumerate() {
                if v != "ether" && v != "infiniband" {
                    return err(format!("{key}.selectors.linkTypes[{j}]"), format!("{v:?} is not ether or infiniband"));
                }
            }
            for (field, values) in [("pfNames", &s.pf_names), ("drivers", &s.drivers)] {
                if let Some(j) = values.iter().position(|v| v.trim().is_empty() || v.contains('/')) {
                    return err(format!("{key}.selectors.{field}[{j}]"), format!("{:?} is not a name", values[j]));
                }
            }
            let mut pci_addresses = Vec::new();
            for (j, v) in s.pci_addresses.iter().enumerate() {
                match sriov_rdma_cni::model::PciAddr::parse(v) {
                    Ok(a) => pci_addresses.push(a.to_string()),
                    Err(e) => return err(format!("{key}.selectors.pciAddresses[{j}]"), format!("{v:?} {e}")),
                }
            }
            let vendors = s.vendors.iter().map(|v| v.to_ascii_lowercase()).collect();
            let devices = s.devices.iter().map(|v| v.to_ascii_lowercase()).collect();
            let selectors = Selectors { vendors, devices, pci_addresses, ..s };
            let allocation = match r.allocation.as_deref().map(|v| (v, Policy::parse(v))) {
                None => Policy::default(),
                Some((_, Some(p))) => p,
                Some((v, None)) => return err(format!("{key}.allocation"), format!("{v:?} is not spread or pack")),
            };
            resources.push(Resource { name, selectors, require_rdma: r.require_rdma.unwrap_or(true), allocation });
        }
        let num_vfs: Vec<(String, u32)> = self.num_vfs.unwrap_or_default().into_iter().collect();
        if let Some((pf, _)) = num_vfs.iter().find(|(pf, _)| pf.is_empty() || pf.contains('/')) {
            return err(format!("numVfs.{pf}"), "is not a netdev name".into());
        }
        Ok(Config { resources, num_vfs, debug: false })
    }
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

    #[test]
    fn an_empty_file_is_one_rdma_hca_resource() {
        let c = file("{}").unwrap();
        assert_eq!(c.resources.len(), 1);
        assert_eq!(c.resources[0].name, "rdma/hca");
        assert!(c.resources[0].require_rdma);
        assert_eq!(c.resources[0].env_name(), "PCIDEVICE_RDMA_HCA");
    }

    #[test]
    fn the_environment_serves_a_one_resource_node() {
        let env = |k: &str| match k {
            "RDMA_RESOURCE_NAME" => Some("nvidia.com/cx6_rdma".to_string()),
            "RDMA_DEVICE_SPEC_STR" => Some("mlx5_0, ens1f1".to_string()),
            "RDMA_DEBUG" => Some("1".to_string()),
            _ => None,
        };
        let c = Config::load(None, env).unwrap();
        assert!(c.debug);
        let f = Config::load(Some(("f", r#"{"resources":[{},{"name":"rdma/b"}]}"#)), env).unwrap();
        let names: Vec<&str> = f.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["nvidia.com/cx6_rdma", "rdma/b"], "a file's unnamed resource takes RDMA_RESOURCE_NAME");
        assert_eq!(c.resources[0].name, "nvidia.com/cx6_rdma");
        assert_eq!(c.resources[0].selectors.pf_names, vec!["mlx5_0".to_string(), "ens1f1".to_string()]);
        assert_eq!(c.resources[0].env_name(), "PCIDEVICE_NVIDIA_COM_CX6_RDMA");
        let e = Config::load(None, |k| (k == "RDMA_RESOURCE_NAME").then(|| "hca".to_string())).unwrap_err();
        assert!(e.0.starts_with("RDMA_RESOURCE_NAME:"), "{e}");
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
                "resources[1].name: \"example.com/a.b\" and resources[0].name \"example.com/a_b\" map to the same \
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
}
