//! A DRA claim's opaque config: the parameters of the allocation's `config[]` entries whose `opaque.driver` is
//! this driver, with the keys of a NetworkAttachmentDefinition's config (`vlan`, `spoofchk`, `trust`,
//! `min_tx_rate`/`max_tx_rate`, `mtu`, `link_state`, `ipam`, `rdma`, …). They are checked by the CNI's own parser
//! (`NetConf::parse`) and the node policy is applied by the claim's namespace (`Policy::admit`), as ADD does for a
//! NAD; what passes is kept with the prepared claim, `<kubelet root>/plugins/<driver>/claims/<claim UID>.json`, for
//! the attach. Nothing is set on the PF here.

use crate::cdi;
use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sriov_rdma_cni::cni::config::{is_top_key, NetConf};
use sriov_rdma_cni::inventory::VfInfo;
use sriov_rdma_cni::model::on_off;
use sriov_rdma_cni::policy::{Policy, Request};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Keys of a NAD's config a claim's may not hold, and why.
const NOT_IN_A_CLAIM: &[(&str, &str)] = &[
    ("deviceID", "the VF is the one the scheduler allocated"),
    ("pfName", "the VF is the one the scheduler allocated"),
    ("type", "the plugin is the claim's driver"),
    ("runtimeConfig", "it is the container runtime's"),
    ("prevResult", "it is the container runtime's"),
    ("capabilities", "it is the container runtime's"),
    ("logFile", "the driver logs to the daemon's log"),
];

/// The CNI version a claim's config is read as when it names none.
const CNI_VERSION: &str = "1.0.0";

/// The parameters of `driver`'s opaque configs that apply to a result's `request` (`main` or `main/sub`), merged
/// key by key: the class's entries first, then the claim's, each in list order; a later entry's key replaces an
/// earlier one's (the claim's config overrides the class's).
pub fn parameters(
    configs: &[DeviceAllocationConfiguration],
    driver: &str,
    request: &str,
) -> Result<Map<String, Value>, String> {
    let applies = |c: &DeviceAllocationConfiguration| match c.requests.as_deref() {
        None | Some([]) => true,
        Some(names) => names
            .iter()
            .any(|n| n == request || request.strip_prefix(n.as_str()).is_some_and(|rest| rest.starts_with('/'))),
    };
    let mut ordered: Vec<(usize, &DeviceAllocationConfiguration)> = configs
        .iter()
        .enumerate()
        .filter(|(_, c)| c.opaque.as_ref().is_some_and(|o| o.driver == driver) && applies(c))
        .collect();
    ordered.sort_by_key(|(i, c)| (c.source != "FromClass", *i));
    let mut out = Map::new();
    for (i, c) in ordered {
        let Some(o) = &c.opaque else { continue };
        match &o.parameters.0 {
            Value::Object(m) => out.extend(m.clone()),
            Value::Null => {}
            v => {
                return Err(format!(
                    "config[{i}] ({}) of driver {driver}: its parameters must be a JSON object of the network \
                     configuration's keys, not {v}",
                    c.source
                ))
            }
        }
    }
    Ok(out)
}

/// Checks a device's parameters as the CNI checks a NAD's config and applies the node policy at `policy_file` for
/// the claim's `namespace`. The config kept for the attach: the parameters, with the VF as `deviceID` and the
/// settings the policy sets where the parameters leave them out. An error names the key or the policy's rule.
pub fn check(
    params: &Map<String, Value>,
    namespace: &str,
    claim: &str,
    vf: &VfInfo,
    policy_file: &Path,
) -> Result<Map<String, Value>, String> {
    for k in params.keys() {
        if let Some((_, why)) = NOT_IN_A_CLAIM.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)) {
            return Err(format!("key {k} is not for a claim's config: {why}"));
        }
        if !is_top_key(k) {
            return Err(format!("key {k} is not a key of the network configuration"));
        }
    }
    let mut conf = params.clone();
    let given = |conf: &Map<String, Value>, key: &str| conf.keys().any(|k| k.eq_ignore_ascii_case(key));
    if !given(&conf, "cniVersion") {
        conf.insert("cniVersion".into(), CNI_VERSION.into());
    }
    if !given(&conf, "name") {
        conf.insert("name".into(), format!("dra-{namespace}-{claim}").into());
    }
    conf.insert("type".into(), "sriov-rdma".into());
    conf.insert("deviceID".into(), vf.pci.to_string().into());
    let raw = serde_json::to_vec(&conf).map_err(|e| format!("encoding the config: {e}"))?;
    let parsed = NetConf::parse(&raw, &HashMap::new()).map_err(|e| e.msg)?;
    let Some(policy) = Policy::load(policy_file).map_err(|e| e.msg)? else { return Ok(conf) };
    let pf_pci = vf.pf_pci.to_string();
    let allowed = policy
        .admit(&Request {
            pf: vf.pf_netdev.as_deref().unwrap_or(&pf_pci),
            pf_pci: &pf_pci,
            namespace: Some(namespace),
            vf: &parsed.vf,
        })
        .map_err(|e| e.msg)?;
    // What the policy sets where the config leaves a setting out (it never changes one the config gives).
    let set: [(&str, Option<Value>); 4] = [
        ("vlan", allowed.vlan.map(Value::from)),
        ("spoofchk", allowed.spoofchk.map(|b| on_off(b).into())),
        ("trust", allowed.trust.map(|b| on_off(b).into())),
        ("max_tx_rate", allowed.max_tx_rate.map(Value::from)),
    ];
    for (key, v) in set {
        if let Some(v) = v.filter(|_| !given(&conf, key)) {
            conf.insert(key.into(), v);
        }
    }
    Ok(conf)
}

/// One device's kept config.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub request: String,
    pub device: String,
    pub pci_address: String,
    pub config: Map<String, Value>,
}

/// A prepared claim's kept file: the claim (`namespace/name`), its UID, the UIDs of the pods it is reserved for,
/// and each device's config. Written by [`keep`], read by the attach (draattach.rs).
#[derive(Debug, Serialize, Deserialize)]
pub struct KeptClaim {
    pub claim: String,
    pub uid: String,
    #[serde(default)]
    pub pods: Vec<String>,
    pub devices: Vec<Kept>,
}

/// The file a prepared claim's configs are kept in.
pub fn path(dir: &Path, claim_uid: &str) -> PathBuf {
    dir.join(format!("{claim_uid}.json"))
}

/// Keeps the claim's checked configs (atomically, as the CDI spec), with the UIDs of the pods the claim is reserved
/// for (its `status.reservedFor`): the attach at the pod's sandbox finds its claims by them (draattach.rs).
pub fn keep(dir: &Path, claim: &str, claim_uid: &str, pods: &[String], devices: &[Kept]) -> Result<PathBuf, String> {
    let v = KeptClaim { claim: claim.into(), uid: claim_uid.into(), pods: pods.to_vec(), devices: devices.to_vec() };
    let text = serde_json::to_vec_pretty(&v).map_err(|e| format!("encoding the claim's config: {e}"))?;
    cdi::write_file(dir, &format!("{claim_uid}.json"), &text, "the claim's config")
}

/// Removes the claim's kept configs; none is no error.
pub fn forget(dir: &Path, claim_uid: &str) -> Result<(), String> {
    cdi::remove_file(&path(dir, claim_uid), "the claim's config")
}
