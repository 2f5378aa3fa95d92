//! What else the network's plugin chain runs, where the caller shows it before the chain starts: Multus writes the
//! delegates of a pod (each NetworkAttachmentDefinition's whole plugin list) to `<its cniDir>/<CNI_CONTAINERID>`
//! before it runs the first of them, and `cnitool`, podman and a runtime's own network read the `.conflist` of the
//! network's name from the CNI configuration directory (`NETCONFPATH`, else `/etc/cni/net.d`).
//!
//! rdma-cni chained after this plugin cannot work: it looks for the VF's RDMA device in the host namespace, where
//! this plugin has already taken it from (exclusive mode) or where it must stay (shared mode, which rdma-cni
//! refuses anyway). ADD refuses such a chain before it changes anything, saying to remove the entry; without
//! the refusal the pod would fail at rdma-cni's step with "no RDMA devices found", which names neither cause nor fix.

use super::context::Paths;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// rdma-cni's `type`.
const RDMA_CNI: &str = "rdma";

/// Refuses an ADD whose chain runs rdma-cni after this plugin (code 7, naming where the chain was seen).
pub fn refuse_rdma_cni(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let own = own_type(&conf.raw);
    let multus = paths.multus_dir.join(&env.container_id);
    let seen = chains_in_multus_cache(&multus, &conf.name, &own)
        .map(|()| multus.clone())
        .or_else(|| conflist_in(&paths.net_conf_dir, &conf.name, &own));
    match seen {
        None => Ok(()),
        Some(at) => Err(CniError::config(format!(
            "the network {} chains rdma-cni ({{\"type\": \"{RDMA_CNI}\"}}) after {own} (seen in {}): {own} moves the \
             VF's RDMA device itself, and rdma-cni would find none; remove the {{\"type\": \"{RDMA_CNI}\"}} entry \
             from the network's plugins (docs/migration.md)",
            conf.name,
            at.display()
        ))),
    }
}

/// This plugin's `type` as the configuration names it (the binary may be installed under another name).
fn own_type(raw: &[u8]) -> String {
    serde_json::from_slice::<Value>(raw)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "sriov-rdma".to_string())
}

/// Whether `plugins` runs rdma-cni somewhere after a plugin of type `own`.
fn rdma_after(plugins: &Value, own: &str) -> bool {
    let types: Vec<&str> =
        plugins.as_array().into_iter().flatten().map(|p| p.get("type").and_then(Value::as_str).unwrap_or("")).collect();
    types.iter().position(|t| *t == own).is_some_and(|i| types[i + 1..].contains(&RDMA_CNI))
}

/// Multus's delegate cache of the container: a JSON list of delegates, a conflist one with `ConfList.plugins`.
fn chains_in_multus_cache(file: &Path, name: &str, own: &str) -> Option<()> {
    let bytes = crate::policy::read_regular(file).ok()?;
    let delegates: Value = serde_json::from_slice(&bytes).ok()?;
    delegates
        .as_array()?
        .iter()
        .map(|d| &d["ConfList"])
        .any(|l| l["name"] == name && rdma_after(&l["plugins"], own))
        .then_some(())
}

/// The `.conflist` of the CNI configuration directory whose network is `name`, when it chains rdma-cni after us.
fn conflist_in(dir: &Path, name: &str, own: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "conflist")).find(|p| {
        crate::policy::read_regular(p)
            .ok()
            .filter(|b| b.windows(RDMA_CNI.len() + 2).any(|w| w == b"\"rdma\""))
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|l| l["name"] == name && rdma_after(&l["plugins"], own))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rdma_counts_only_after_this_plugin() {
        let p = |t: &[&str]| Value::Array(t.iter().map(|t| json!({"type": t})).collect());
        assert!(rdma_after(&p(&["sriov-rdma", "rdma"]), "sriov-rdma"));
        assert!(rdma_after(&p(&["sriov-rdma", "tuning", "rdma"]), "sriov-rdma"));
        assert!(!rdma_after(&p(&["rdma", "sriov-rdma"]), "sriov-rdma"));
        assert!(!rdma_after(&p(&["sriov-rdma", "tuning"]), "sriov-rdma"));
        assert!(!rdma_after(&p(&["sriov", "rdma"]), "sriov-rdma"));
        assert!(!rdma_after(&json!(null), "sriov-rdma"));
    }
}
