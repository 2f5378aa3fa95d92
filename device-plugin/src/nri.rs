//! The NRI plugin (off unless `--nri-socket` or SRIOV_RDMA_NRI_SOCKET is given; docs/nri.md): the container
//! runtime (containerd 2, CRI-O) calls it at each container's creation, and it hands a container of a pod our CNI
//! attached the NCCL variables of the pod's VFs — `NCCL_IB_HCA=<rdma device>:<port>`,
//! `NCCL_IB_GID_INDEX=<RoCE v2 GID of the pod's address>`, `NCCL_SOCKET_IFNAME=<interface>` — unless the
//! container sets one itself. The pod's attachments are the CNI's records whose container ID is the pod's sandbox
//! ID (what the runtime passes the CNI as CNI_CONTAINERID) or whose namespace is the sandbox's; the values are read
//! from the pod's namespace by the code `sriov-rdma doctor --netns` reports with ([`doctor::nccl_in_netns`]), so
//! the two agree. The wire (socket multiplexing, ttrpc) is nri_mux.rs.
//!
//! With the DRA driver on too, the plugin also subscribes to RunPodSandbox, StopPodSandbox and RemovePodSandbox:
//! the VFs of the pod's prepared claims go into the sandbox's namespace and come back (draattach.rs). Each event is
//! one method of [`Plugin`]: one bit in [`Plugin::events`] and one arm in [`Plugin::handle`].

use crate::devices;
use crate::draattach::{Attacher, Sandbox};
use crate::nri_api as api;
use crate::nri_mux::{self, Conn, Message, Response, Status, Trunk};
use prost::Message as _;
use sriov_rdma_cni::doctor::{self, NcclSettings};
use sriov_rdma_cni::flow::attachment::Attachment;
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::{info, warn};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixStream;

/// The runtime's NRI socket where neither `--nri-socket` nor SRIOV_RDMA_NRI_SOCKET says otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// The name the plugin registers under, and its index (plugins are called in ascending index order).
pub const PLUGIN_NAME: &str = "sriov-rdma";
pub const PLUGIN_INDEX: &str = "50";

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

pub const HCA: &str = "NCCL_IB_HCA";
pub const GID_INDEX: &str = "NCCL_IB_GID_INDEX";
pub const SOCKET_IFNAME: &str = "NCCL_SOCKET_IFNAME";

/// Where the NCCL settings of a pod's namespace come from: the kernel in the daemon, a fixed table in tests.
pub trait NcclSource: Send + Sync {
    /// The settings of each interface of the namespace at `netns` with an IPv4 RoCE v2 GID.
    fn nccl(&self, netns: &str) -> Result<Vec<NcclSettings>, String>;
}

/// The pod's namespace as `doctor --netns` reads it (RDMA netlink and sysfs inside the namespace).
pub struct Kernel {
    pub sysfs: PathBuf,
}

impl NcclSource for Kernel {
    fn nccl(&self, netns: &str) -> Result<Vec<NcclSettings>, String> {
        doctor::nccl_in_netns(&Sysfs::at(self.sysfs.clone()), netns)
    }
}

/// The plugin's state: where the CNI's records are, where the NCCL settings come from, and the DRA attach when
/// the DRA driver is on.
pub struct Plugin {
    pub state_dir: PathBuf,
    pub source: Arc<dyn NcclSource>,
    pub dra: Option<Arc<Attacher>>,
    /// The sandbox IDs of a Synchronize's parts so far (the runtime may send its list in several).
    pub synced: tokio::sync::Mutex<Vec<String>>,
}

/// The bit of `event` in ConfigureResponse.events.
fn bit(event: api::Event) -> i32 {
    1 << (event as i32 - 1)
}

impl Plugin {
    pub fn new(state_dir: PathBuf, source: Arc<dyn NcclSource>, dra: Option<Arc<Attacher>>) -> Plugin {
        Plugin { state_dir, source, dra, synced: Default::default() }
    }

    /// The events the plugin subscribes to.
    pub fn events(&self) -> i32 {
        let sandbox = [api::Event::RunPodSandbox, api::Event::StopPodSandbox, api::Event::RemovePodSandbox];
        let dra = if self.dra.is_some() { sandbox.into_iter().map(bit).sum() } else { 0 };
        bit(api::Event::CreateContainer) | dra
    }

    /// Answers one call of the runtime: the encoded response, or a status.
    async fn handle(&self, method: &str, payload: &[u8]) -> Result<Vec<u8>, Status> {
        let bad = |e: prost::DecodeError| Status { code: nri_mux::INTERNAL, message: format!("{method}: {e}") };
        match method {
            "Configure" => {
                let req = api::ConfigureRequest::decode(payload).map_err(bad)?;
                info!("NRI: configured by {} {} (NRI {})", req.runtime_name, req.runtime_version, req.nri_version);
                Ok(api::ConfigureResponse { events: self.events() }.encode_to_vec())
            }
            "Synchronize" => {
                let req = api::SynchronizeRequest::decode(payload).map_err(bad)?;
                if let Some(dra) = &self.dra {
                    let sandboxes: Vec<Sandbox> = req.pods.into_iter().map(sandbox_of).collect();
                    let mut seen = self.synced.lock().await;
                    seen.extend(sandboxes.iter().map(|s| s.id.clone()));
                    dra.catch_up(&sandboxes).await;
                    if !req.more {
                        dra.release_gone(&std::mem::take(&mut *seen)).await;
                    }
                }
                Ok(api::SynchronizeResponse { update: Vec::new(), more: req.more }.encode_to_vec())
            }
            "CreateContainer" => {
                let req = api::CreateContainerRequest::decode(payload).map_err(bad)?;
                Ok(self.create_container(req).await.encode_to_vec())
            }
            "Shutdown" => {
                info!("NRI: the runtime is shutting the plugin down");
                Ok(Vec::new())
            }
            "RunPodSandbox" => {
                let req = api::RunPodSandboxRequest::decode(payload).map_err(bad)?;
                self.sandbox(api::Event::RunPodSandbox, req.pod).await?;
                Ok(api::RunPodSandboxResponse {}.encode_to_vec())
            }
            "StopPodSandbox" => {
                let req = api::StopPodSandboxRequest::decode(payload).map_err(bad)?;
                self.sandbox(api::Event::StopPodSandbox, req.pod).await?;
                Ok(api::StopPodSandboxResponse {}.encode_to_vec())
            }
            "RemovePodSandbox" => {
                let req = api::RemovePodSandboxRequest::decode(payload).map_err(bad)?;
                self.sandbox(api::Event::RemovePodSandbox, req.pod).await?;
                Ok(api::RemovePodSandboxResponse {}.encode_to_vec())
            }
            // Runtimes that deliver the pod's lifecycle as a state change.
            "StateChange" => {
                let req = api::StateChangeEvent::decode(payload).map_err(bad)?;
                if let Ok(event) = api::Event::try_from(req.event) {
                    self.sandbox(event, req.pod).await?;
                }
                Ok(api::Empty {}.encode_to_vec())
            }
            // Every other event's response is empty when the plugin changes nothing (it is not subscribed).
            "UpdatePodSandbox"
            | "PostUpdatePodSandbox"
            | "PostCreateContainer"
            | "StartContainer"
            | "PostStartContainer"
            | "UpdateContainer"
            | "PostUpdateContainer"
            | "StopContainer"
            | "RemoveContainer" => Ok(Vec::new()),
            other => Err(Status { code: nri_mux::UNIMPLEMENTED, message: format!("{other} is not implemented") }),
        }
    }

    /// A pod sandbox's RunPodSandbox (the DRA attach), StopPodSandbox or RemovePodSandbox (the DRA detach); other
    /// events, and every event without the DRA driver, change nothing. An attach that fails fails the sandbox: the
    /// runtime gets the error, which names the device, the claim and what went wrong.
    async fn sandbox(&self, event: api::Event, pod: Option<api::PodSandbox>) -> Result<(), Status> {
        let Some(dra) = &self.dra else { return Ok(()) };
        let sb = sandbox_of(pod.unwrap_or_default());
        let who = format!("{} (sandbox {})", sb.pod(), sb.id);
        let done = match event {
            api::Event::RunPodSandbox => dra.attach(&sb).await,
            api::Event::StopPodSandbox | api::Event::RemovePodSandbox => dra.detach(&sb.id).await,
            _ => return Ok(()),
        };
        done.map(|_| ()).map_err(|e| {
            warn!("NRI: {event:?} of {who}: {e}");
            Status { code: nri_mux::INTERNAL, message: format!("sriov-rdma DRA attach, {event:?} of {who}: {e}") }
        })
    }

    /// CreateContainer: the NCCL variables of the pod's attachments, those the container does not set itself.
    pub async fn create_container(&self, req: api::CreateContainerRequest) -> api::CreateContainerResponse {
        let (pod, container) = (req.pod.unwrap_or_default(), req.container.unwrap_or_default());
        let who = format!("{}/{} container {}", pod.namespace, pod.name, container.name);
        let netns = netns_of(&pod);
        let mine = attachments_of(&self.state_dir, &pod.id, netns.as_deref());
        let Some(first) = mine.first() else { return api::CreateContainerResponse::default() };
        let (source, recorded, pid) = (self.source.clone(), first.netns.clone(), pod.pid);
        let read = tokio::task::spawn_blocking(move || {
            source.nccl(&recorded).or_else(|e| match pid {
                0 => Err(e),
                // The runtime's file not mounted where the daemon sees it: the sandbox process's namespace.
                _ => source.nccl(&format!("/proc/{pid}/ns/net")).map_err(|e2| format!("{e}; {e2}")),
            })
        })
        .await;
        let settings = match read {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                warn!("NRI: {who}: no NCCL variables: {e}");
                return api::CreateContainerResponse::default();
            }
            Err(e) => {
                warn!("NRI: {who}: no NCCL variables: reading the pod's namespace: {e}");
                return api::CreateContainerResponse::default();
            }
        };
        let ifnames: Vec<&str> = mine.iter().map(|a| a.ifname.as_str()).collect();
        let (env, why) = nccl_env(&container.env, &ifnames, &settings);
        if let Some(why) = why {
            warn!("NRI: {who}: {why}");
        }
        if !env.is_empty() {
            let list: Vec<String> = env.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
            info!("NRI: {who}: {}", list.join(" "));
        }
        api::CreateContainerResponse {
            adjust: (!env.is_empty()).then(|| api::ContainerAdjustment { env, ..Default::default() }),
            ..Default::default()
        }
    }
}

/// The sandbox as the attach needs it.
fn sandbox_of(pod: api::PodSandbox) -> Sandbox {
    Sandbox {
        netns: netns_of(&pod).unwrap_or_default(),
        id: pod.id,
        uid: pod.uid,
        namespace: pod.namespace,
        name: pod.name,
    }
}

/// The path of the pod sandbox's network namespace as the runtime gives it, if it gives one.
fn netns_of(pod: &api::PodSandbox) -> Option<String> {
    pod.linux
        .as_ref()
        .and_then(|l| l.namespaces.iter().find(|n| n.r#type == "network"))
        .map(|n| n.path.clone())
        .filter(|p| !p.is_empty())
}

/// The finished attachments of the pod whose sandbox is `sandbox_id` (or whose namespace is `netns`), in rail
/// order: by PF, then by VF.
pub fn attachments_of(state_dir: &Path, sandbox_id: &str, netns: Option<&str>) -> Vec<Attachment> {
    let mut mine: Vec<Attachment> = devices::records(state_dir)
        .into_values()
        .flatten()
        .filter(|a| a.complete && (a.container_id == sandbox_id || netns.is_some_and(|n| n == a.netns)))
        .collect();
    mine.sort_by(|a, b| (a.pf_pci.as_str(), a.vf_index).cmp(&(b.pf_pci.as_str(), b.vf_index)));
    mine
}

/// The NCCL variables for the interfaces `ifnames` (rail order) from the namespace's `settings`, leaving out
/// those the container's `env` (`K=V`) sets; and why one is left out otherwise. Several interfaces give
/// comma-separated lists; NCCL takes one GID index for all of them, so differing indexes leave it out.
pub fn nccl_env(env: &[String], ifnames: &[&str], settings: &[NcclSettings]) -> (Vec<api::KeyValue>, Option<String>) {
    let rails: Vec<&NcclSettings> = ifnames.iter().filter_map(|i| settings.iter().find(|s| s.ifname == *i)).collect();
    if rails.is_empty() {
        let why = format!("no RoCE v2 GID of an IPv4 address on {} in the pod's namespace", ifnames.join(", "));
        return (Vec::new(), Some(why));
    }
    let join = |f: fn(&NcclSettings) -> String| rails.iter().map(|s| f(s)).collect::<Vec<_>>().join(",");
    let mut why = None;
    let gid = match rails.iter().map(|s| s.gid_index).collect::<std::collections::BTreeSet<_>>() {
        g if g.len() == 1 => g.first().map(|i| i.to_string()),
        g => {
            why = Some(format!(
                "{GID_INDEX} left out: the interfaces' RoCE v2 GIDs have different indexes ({g:?}) and NCCL takes one"
            ));
            None
        }
    };
    let wanted =
        [(HCA, Some(join(|s| s.hca.clone()))), (GID_INDEX, gid), (SOCKET_IFNAME, Some(join(|s| s.ifname.clone())))];
    let set_by_container = |k: &str| env.iter().any(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n) == k);
    let out = wanted
        .into_iter()
        .filter(|(k, _)| !set_by_container(k))
        .filter_map(|(k, v)| v.map(|value| api::KeyValue { key: k.into(), value }))
        .collect();
    (out, why)
}

/// Serves the runtime on a connected NRI socket until it closes: registers the plugin on the runtime's
/// connection and answers the runtime's calls on the plugin's.
pub async fn serve(socket: UnixStream, plugin: Arc<Plugin>) -> std::io::Result<()> {
    let (_trunk, mut conns): (Trunk, _) =
        Trunk::start(socket, &[nri_mux::PLUGIN_SERVICE_CONN, nri_mux::RUNTIME_SERVICE_CONN]);
    let (Some(calls), Some(mut runtime)) =
        (conns.remove(&nri_mux::PLUGIN_SERVICE_CONN), conns.remove(&nri_mux::RUNTIME_SERVICE_CONN))
    else {
        return Err(std::io::Error::other("the multiplexer has no plugin or runtime connection"));
    };
    let answering = tokio::spawn(answer(calls, plugin));
    let req = api::RegisterPluginRequest {
        plugin_name: PLUGIN_NAME.into(),
        plugin_idx: PLUGIN_INDEX.into(),
        nri_version: String::new(),
    };
    let registered: Result<api::Empty, _> =
        nri_mux::call(&mut runtime, 1, RUNTIME_SERVICE, "RegisterPlugin", &req).await;
    if let Err(e) = registered {
        answering.abort();
        return Err(std::io::Error::other(format!("registering with the runtime: {e}")));
    }
    info!("NRI: registered as {PLUGIN_INDEX}-{PLUGIN_NAME}");
    match answering.await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(format!("answering the runtime: {e}"))),
    }
}

/// Answers the runtime's calls on the plugin's connection, one at a time (the runtime waits for each).
async fn answer(mut calls: Conn, plugin: Arc<Plugin>) -> std::io::Result<()> {
    let tx = calls.sender();
    while let Some(m) = calls.recv().await? {
        if m.kind != nri_mux::REQUEST {
            continue;
        }
        let resp = match nri_mux::Request::decode(m.payload.as_slice()) {
            Err(e) => Response {
                status: Some(Status { code: nri_mux::INTERNAL, message: format!("decoding the request: {e}") }),
                payload: Vec::new(),
            },
            Ok(r) if r.service != PLUGIN_SERVICE => Response {
                status: Some(Status { code: nri_mux::UNIMPLEMENTED, message: format!("no service {}", r.service) }),
                payload: Vec::new(),
            },
            Ok(r) => match plugin.handle(&r.method, &r.payload).await {
                Ok(payload) => Response { status: None, payload },
                Err(status) => Response { status: Some(status), payload: Vec::new() },
            },
        };
        tx.send(&Message { stream: m.stream, kind: nri_mux::RESPONSE, payload: resp.encode_to_vec() }).await?;
    }
    Ok(())
}

/// Connects to the runtime's NRI socket and serves it, connecting again (every `retry`) when the runtime is
/// not there yet or restarts.
pub async fn run(socket: PathBuf, plugin: Arc<Plugin>, retry: Duration) {
    let mut said = false;
    loop {
        match UnixStream::connect(&socket).await {
            Ok(s) => {
                said = false;
                match serve(s, plugin.clone()).await {
                    Ok(()) => info!("NRI: the runtime closed {}; connecting again", socket.display()),
                    Err(e) => warn!("NRI: {}: {e}; connecting again", socket.display()),
                }
            }
            Err(e) if !said => {
                warn!(
                    "NRI: connecting to {}: {e} (is NRI enabled in the runtime? docs/nri.md); retrying",
                    socket.display()
                );
                said = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ifname: &str, hca: &str, gid_index: u32) -> NcclSettings {
        NcclSettings { ifname: ifname.into(), address: "10.1.0.2".parse().unwrap(), hca: hca.into(), gid_index }
    }

    fn keys(kv: &[api::KeyValue]) -> Vec<String> {
        kv.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect()
    }

    #[test]
    fn differing_gid_indexes_leave_the_gid_index_out_and_say_why() {
        let (env, why) = nccl_env(&[], &["net1", "net2"], &[s("net1", "mlx5_2:1", 3), s("net2", "mlx5_3:1", 1)]);
        assert_eq!(keys(&env), ["NCCL_IB_HCA=mlx5_2:1,mlx5_3:1", "NCCL_SOCKET_IFNAME=net1,net2"]);
        assert!(why.is_some_and(|w| w.contains("different indexes")));
    }

    #[test]
    fn an_interface_without_a_roce_v2_gid_gives_nothing() {
        let (env, why) = nccl_env(&[], &["net1"], &[s("eth0", "rxe0:1", 1)]);
        assert!(env.is_empty());
        assert!(why.is_some_and(|w| w.contains("net1")));
    }

    #[test]
    fn a_variable_set_empty_by_the_container_is_still_its_own() {
        let (env, _) =
            nccl_env(&["NCCL_IB_HCA=".into(), "NCCL_SOCKET_IFNAMES=x".into()], &["net1"], &[s("net1", "m:1", 3)]);
        assert_eq!(keys(&env), ["NCCL_IB_GID_INDEX=3", "NCCL_SOCKET_IFNAME=net1"]);
    }
}
