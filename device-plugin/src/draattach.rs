//! The DRA attach (on when both the DRA driver and the NRI plugin are; docs/dra.md): at the runtime's
//! RunPodSandbox the VFs of the pod's prepared claims go into the sandbox's network namespace, and at
//! StopPodSandbox / RemovePodSandbox they come back. The daemon does not move anything itself: it runs the CNI
//! (ADD, DEL) with each device's kept config (claimconfig.rs: the claim's keys, checked, the node policy applied,
//! the allocated VF as `deviceID`) the way a container runtime runs it, with the sandbox's ID as
//! `CNI_CONTAINERID`. So a DRA attachment has the CNI's journal and record, and every DEL rule holds: the
//! namespace already gone, a crash mid-attach, orphan reclaim, the NRI plugin's NCCL variables (by the record's
//! container ID).
//!
//! After the attach, each claim's `status.devices[]` gets the device's `networkData` (the interface name in the
//! pod, its addresses and MAC, from the CNI's result), applied server-side by the driver; the detach takes the
//! driver's entries out again. Neither is needed for the attach itself: a failure there is logged, not returned.
//!
//! What was attached to a sandbox is kept in `<state dir>/dra/<sandbox ID>.json`, written before the first ADD
//! and removed once every DEL succeeded: a Stop after a restart of the daemon, or a RemovePodSandbox after a Stop
//! that failed, still knows what to give back.

use crate::cdi;
use crate::claimconfig::KeptClaim;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sriov_rdma_cni::{info, warn};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How the daemon attaches: where the claims' configs are, where it keeps its own record, which CNI it runs.
pub struct Attacher {
    /// The DRA driver's kept claim configs (`<claim UID>.json`, claimconfig.rs).
    pub claims_dir: PathBuf,
    /// What was attached per sandbox (`<sandbox ID>.json`).
    pub attach_dir: PathBuf,
    /// The CNI: a program and its arguments (the daemon's own executable with `cni`, which runs the CNI's code).
    pub cni: Vec<OsString>,
    /// `CNI_PATH`: where the CNI finds the IPAM plugins a config names.
    pub cni_path: String,
    /// How long one CNI call may take before it is killed (then it counts as failed).
    pub timeout: Duration,
    /// Where the claims' `networkData` goes: the API server, as the DRA driver of this node's pool.
    pub status: Option<ClaimStatus>,
}

/// The API server and who writes the claims' device status.
pub struct ClaimStatus {
    pub client: kube::Client,
    pub driver: String,
    /// The driver's pool: this node's name.
    pub pool: String,
}

/// A device's `networkData` from the CNI's ADD result (`interfaces`, `ips` of CNI 0.4.0 and later): the interface
/// in the pod named `ifname`, its MAC and its addresses (CIDR, as the result gives them).
pub fn network_data(result: &Value, ifname: &str) -> Value {
    let ifaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    let idx = ifaces.iter().position(|i| i["name"] == ifname && i["sandbox"].as_str().is_some_and(|s| !s.is_empty()));
    let ips: Vec<Value> = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|ip| idx.is_some() && ip["interface"].as_u64() == idx.map(|i| i as u64))
        .filter_map(|ip| ip["address"].as_str().map(Value::from))
        .collect();
    let mut data = Map::new();
    data.insert("interfaceName".into(), ifname.into());
    if !ips.is_empty() {
        data.insert("ips".into(), ips.into());
    }
    if let Some(mac) = idx.and_then(|i| ifaces[i]["mac"].as_str()).filter(|m| !m.is_empty()) {
        data.insert("hardwareAddress".into(), mac.into());
    }
    Value::Object(data)
}

/// The server-side apply of the driver's entries in one claim's `status.devices`: `devices` as
/// `(device, networkData)`; none takes the driver's entries out.
pub async fn apply_status(st: &ClaimStatus, claim: &str, devices: &[(String, Value)]) -> Result<(), String> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    use kube::api::{Api, Patch, PatchParams};
    let (ns, name) = claim.split_once('/').ok_or_else(|| format!("claim {claim:?} is not namespace/name"))?;
    let entries: Vec<Value> = devices
        .iter()
        .map(|(device, data)| {
            serde_json::json!({"driver": st.driver, "pool": st.pool, "device": device, "networkData": data})
        })
        .collect();
    let body = serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "status": {"devices": entries}
    });
    let api: Api<ResourceClaim> = Api::namespaced(st.client.clone(), ns);
    api.patch_status(name, &PatchParams::apply(&st.driver).force(), &Patch::Apply(&body))
        .await
        .map(|_| ())
        .map_err(|e| format!("applying the status of claim {claim}: {e}"))
}

/// The pod sandbox an event is about, as the runtime describes it.
#[derive(Clone, Debug, Default)]
pub struct Sandbox {
    pub id: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The sandbox's network namespace (a path), empty when the runtime gave none.
    pub netns: String,
}

impl Sandbox {
    /// `namespace/name` of the sandbox's pod.
    pub fn pod(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One device attached to a sandbox.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attached {
    pub ifname: String,
    /// `namespace/name` of the claim.
    pub claim: String,
    pub request: String,
    pub device: String,
    pub config: Map<String, Value>,
}

/// What the daemon attached to one sandbox.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub sandbox: String,
    pub pod: String,
    pub pod_uid: String,
    pub netns: String,
    pub attachments: Vec<Attached>,
}

/// The interface name in the pod of its `i`-th DRA device (0-based; beside Multus's `net1`, `net2`, …).
pub fn ifname(i: usize) -> String {
    format!("dra{i}")
}

/// The devices of the claims kept for pod `pod_uid`, in a fixed order: by claim, then by request and device.
pub fn devices_of(claims_dir: &Path, pod_uid: &str) -> Result<Vec<Attached>, String> {
    let entries = match std::fs::read_dir(claims_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("reading the kept claims in {}: {e}", claims_dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let kept: KeptClaim = serde_json::from_slice(&text).map_err(|e| format!("reading {}: {e}", path.display()))?;
        if !kept.pods.iter().any(|p| p == pod_uid) {
            continue;
        }
        for d in kept.devices {
            out.push(Attached {
                ifname: String::new(),
                claim: kept.claim.clone(),
                request: d.request,
                device: d.device,
                config: d.config,
            });
        }
    }
    out.sort_by(|a, b| (&a.claim, &a.request, &a.device).cmp(&(&b.claim, &b.request, &b.device)));
    for (i, a) in out.iter_mut().enumerate() {
        a.ifname = ifname(i);
    }
    Ok(out)
}

impl Attacher {
    fn record_path(&self, sandbox_id: &str) -> Result<PathBuf, String> {
        // The runtime's sandbox IDs are hex; anything else must not name a file outside the directory.
        if sandbox_id.is_empty() || !sandbox_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(format!("sandbox ID {sandbox_id:?} is not a runtime's ID"));
        }
        Ok(self.attach_dir.join(format!("{sandbox_id}.json")))
    }

    /// What was attached to the sandbox, if anything.
    pub fn record(&self, sandbox_id: &str) -> Result<Option<Record>, String> {
        let path = self.record_path(sandbox_id)?;
        match std::fs::read(&path) {
            Ok(t) => serde_json::from_slice(&t).map(Some).map_err(|e| format!("reading {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    fn write_record(&self, rec: &Record) -> Result<(), String> {
        let text = serde_json::to_vec_pretty(rec).map_err(|e| format!("encoding the attach record: {e}"))?;
        cdi::write_file(&self.attach_dir, &format!("{}.json", rec.sandbox), &text, "the attach record").map(|_| ())
    }

    /// RunPodSandbox: ADD for each device of the pod's claims; the number attached. A failed ADD gives back what
    /// was attached before it (DEL, in reverse) and is the error.
    pub async fn attach(&self, sb: &Sandbox) -> Result<usize, String> {
        let planned = devices_of(&self.claims_dir, &sb.uid)?;
        if planned.is_empty() {
            return Ok(0);
        }
        if sb.netns.is_empty() {
            return Err("the runtime gave no network namespace for the sandbox".into());
        }
        if self.record(&sb.id)?.is_some() {
            // A second RunPodSandbox for one sandbox: what the first attached goes back first.
            self.detach(&sb.id).await?;
        }
        // The kubelet makes a pod a new sandbox only once the one before is dead. What is still recorded for that
        // one was not given back (its Stop came while no plugin was registered, as after a node crash): it goes
        // back now, before its devices are attached again, and no late event of it can touch the new sandbox's.
        for old in self.sandboxes()? {
            if old == sb.id {
                continue;
            }
            match self.record(&old) {
                Ok(Some(r)) if r.pod_uid == sb.uid => {
                    info!("DRA attach: {}: giving back what its earlier sandbox {old} kept", sb.pod());
                    if let Err(e) = self.detach(&old).await {
                        warn!("DRA attach: {}: giving back its earlier sandbox {old}: {e}", sb.pod());
                    }
                }
                Ok(_) => {}
                Err(e) => warn!("DRA attach: {}: {e}", sb.pod()),
            }
        }
        let rec = Record {
            sandbox: sb.id.clone(),
            pod: sb.pod(),
            pod_uid: sb.uid.clone(),
            netns: sb.netns.clone(),
            attachments: planned,
        };
        self.write_record(&rec)?;
        let mut data = Vec::new();
        for (i, a) in rec.attachments.iter().enumerate() {
            let added = self.cni("ADD", &rec, a).await;
            if let Ok(out) = &added {
                let result = serde_json::from_str::<Value>(out).unwrap_or(Value::Null);
                data.push((a.claim.clone(), a.device.clone(), network_data(&result, &a.ifname)));
            }
            if let Err(e) = added {
                let why = format!("{} ({} of claim {}): ADD: {e}", a.ifname, a.device, a.claim);
                // The failed ADD rolled itself back; what came before it goes back too.
                let undone = Record { attachments: rec.attachments[..=i].to_vec(), ..rec.clone() };
                return match self.give_back(&undone).await {
                    Ok(()) => {
                        self.remove_record(&rec.sandbox);
                        Err(why)
                    }
                    Err(e2) => Err(format!("{why}; giving back what was attached before it: {e2}")),
                };
            }
            info!(
                "DRA attach: {} {}: {} ({}) of claim {} in {}",
                rec.pod, a.ifname, a.device, a.request, a.claim, rec.netns
            );
        }
        self.publish(&rec, &data).await;
        Ok(rec.attachments.len())
    }

    /// Each claim's `networkData` of what `rec` attached (`data`: claim, device, networkData), or, with none, the
    /// driver's entries out of the claims of `rec`. Logged, not returned: the attach does not depend on it.
    async fn publish(&self, rec: &Record, data: &[(String, String, Value)]) {
        let Some(st) = &self.status else { return };
        let mut claims: Vec<&str> = rec.attachments.iter().map(|a| a.claim.as_str()).collect();
        claims.dedup();
        for claim in claims {
            let devices: Vec<(String, Value)> =
                data.iter().filter(|(c, _, _)| c == claim).map(|(_, d, v)| (d.clone(), v.clone())).collect();
            match apply_status(st, claim, &devices).await {
                Ok(()) => info!("DRA attach: claim {claim}: status.devices: {}", serde_json::json!(devices)),
                Err(e) => warn!("DRA attach: {}: {e}", rec.pod),
            }
        }
    }

    /// StopPodSandbox / RemovePodSandbox: DEL for each device attached to the sandbox (none: nothing to do); the
    /// number given back. The record stays while a DEL fails, for the next event to try again.
    pub async fn detach(&self, sandbox_id: &str) -> Result<usize, String> {
        let Some(rec) = self.record(sandbox_id)? else { return Ok(0) };
        self.give_back(&rec).await?;
        self.publish(&rec, &[]).await;
        self.remove_record(sandbox_id);
        info!("DRA attach: {}: {} device(s) given back", rec.pod, rec.attachments.len());
        Ok(rec.attachments.len())
    }

    /// The runtime's Synchronize (the plugin has just registered: after the daemon's restart, or the runtime's): the
    /// sandboxes that exist, in one or more parts. A sandbox with nothing attached whose pod has prepared claims ran
    /// its RunPodSandbox while no plugin was there (the daemon's pod restarted beside it, as after a node crash):
    /// its devices are attached now (`attach` finds the claims; none is nothing to do). A failure is logged, not
    /// returned (the sandbox runs already). The number of sandboxes attached.
    pub async fn catch_up(&self, sandboxes: &[Sandbox]) -> usize {
        let mut n = 0;
        for sb in sandboxes {
            let attached = match self.record(&sb.id) {
                Ok(None) => self.attach(sb).await,
                Ok(Some(_)) => continue,
                Err(e) => Err(e),
            };
            match attached {
                Ok(0) => {}
                Ok(k) => {
                    info!(
                        "DRA attach: {} (sandbox {}) had prepared claims and nothing attached: its RunPodSandbox came \
                         while no plugin was registered; attached now ({k} device(s); containers created before got no \
                         NCCL variables)",
                        sb.pod(),
                        sb.id
                    );
                    n += 1;
                }
                Err(e) => warn!("DRA attach: at Synchronize, {}: {e}", sb.pod()),
            }
        }
        n
    }

    /// After the last part of a Synchronize: what is attached to a sandbox that is not among `existing` (its
    /// Stop/RemovePodSandbox came while no plugin was registered) is given back. The number of sandboxes given back.
    pub async fn release_gone(&self, existing: &[String]) -> usize {
        let ids: Vec<String> = match self.sandboxes() {
            Ok(ids) => ids.into_iter().filter(|id| !existing.contains(id)).collect(),
            Err(e) => {
                warn!("DRA attach: at Synchronize, {e}");
                return 0;
            }
        };
        let mut n = 0;
        for id in ids {
            info!("DRA attach: sandbox {id} is gone (its Stop came while no plugin was registered): giving back");
            match self.detach(&id).await {
                Ok(_) => n += 1,
                Err(e) => warn!("DRA attach: at Synchronize, sandbox {id}: {e}"),
            }
        }
        n
    }

    /// The sandboxes something is recorded as attached to.
    fn sandboxes(&self) -> Result<Vec<String>, String> {
        match std::fs::read_dir(&self.attach_dir) {
            Ok(rd) => Ok(rd
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("reading the attach records in {}: {e}", self.attach_dir.display())),
        }
    }

    fn remove_record(&self, sandbox_id: &str) {
        if let Ok(p) = self.record_path(sandbox_id) {
            if let Err(e) = cdi::remove_file(&p, "the attach record") {
                warn!("DRA attach: {e}");
            }
        }
    }

    /// DEL of every attachment of `rec`, the last first; every one is tried, the errors are joined.
    async fn give_back(&self, rec: &Record) -> Result<(), String> {
        let mut errors = Vec::new();
        for a in rec.attachments.iter().rev() {
            if let Err(e) = self.cni("DEL", rec, a).await {
                errors.push(format!("{} ({}): DEL: {e}", a.ifname, a.device));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Runs the CNI once for one attachment, as a runtime does: the config on stdin, CNI_* in the environment.
    async fn cni(&self, command: &str, rec: &Record, a: &Attached) -> Result<String, String> {
        let Some((program, args)) = self.cni.split_first() else { return Err("no CNI to run".into()) };
        let (ns, name) = rec.pod.split_once('/').unwrap_or(("", rec.pod.as_str()));
        let cni_args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            rec.sandbox, rec.pod_uid
        );
        let stdin = serde_json::to_vec(&a.config).map_err(|e| format!("encoding the config: {e}"))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &rec.sandbox)
            .env("CNI_NETNS", &rec.netns)
            .env("CNI_IFNAME", &a.ifname)
            .env("CNI_PATH", &self.cni_path)
            .env("CNI_ARGS", cni_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", Path::new(program).display()))?;
        if let Some(mut w) = child.stdin.take() {
            // The CNI may exit without reading all of it (a refusal); its exit status says what happened.
            let _ = w.write_all(&stdin).await;
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(r) => r.map_err(|e| format!("waiting for the CNI: {e}"))?,
            Err(_) => return Err(format!("the CNI took longer than {:?} and was killed", self.timeout)),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            return Ok(stdout);
        }
        // A CNI error is a JSON object with code and msg on stdout.
        let msg = serde_json::from_str::<Value>(&stdout)
            .ok()
            .map(|v| format!("code {} {}", v["code"], v["msg"].as_str().unwrap_or_default()))
            .unwrap_or_else(|| format!("{} {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
        Err(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn network_data_is_the_pods_interface_its_addresses_and_mac_from_the_cni_result() {
        // As the CNI's 1.0.0 result has it: the host-side VF entry first (no sandbox), then the pod's.
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "enp1s0v2", "mac": "aa:bb:cc:00:00:01"},
                {"name": "dra0", "mac": "aa:bb:cc:00:00:02", "sandbox": "/var/run/netns/p"}
            ],
            "ips": [
                {"address": "10.61.0.5/24", "interface": 1},
                {"address": "fd00::5/64", "interface": 1},
                {"address": "10.99.0.1/24", "interface": 0}
            ]
        });
        assert_eq!(
            network_data(&result, "dra0"),
            json!({"interfaceName": "dra0", "ips": ["10.61.0.5/24", "fd00::5/64"], "hardwareAddress": "aa:bb:cc:00:00:02"})
        );
        // No IPAM, or a result without the interface: the name alone.
        assert_eq!(network_data(&json!({"cniVersion": "1.0.0"}), "dra1"), json!({"interfaceName": "dra1"}));
        assert_eq!(network_data(&result, "dra1"), json!({"interfaceName": "dra1"}));
    }
}
