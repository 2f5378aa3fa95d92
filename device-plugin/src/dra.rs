//! The kubelet side of the DRA driver (off unless a resource of the config says `dra: true`): the plugin
//! registration service on `<kubelet root>/plugins_registry/<driver>-reg.sock`, which the kubelet's plugin watcher
//! finds and asks GetInfo (type DRAPlugin, the driver name, the endpoint, service `v1.DRAPlugin`), and the DRA
//! service (kubelet API `dra.kubelet.k8s.io` v1) on `<kubelet root>/plugins/<driver>/dra.sock`.
//! NodePrepareResources reads each claim from the API server, takes the devices allocated to it by this driver
//! from this node's pool, and writes a CDI spec giving the VFs' character devices (cdi.rs); NodeUnprepareResources
//! removes it. The VFs it may hand out are those the `dra: true` resources offer (the same lists as slices.rs
//! publishes). The claim's opaque config is checked as the CNI checks a NAD's, the node policy applied
//! (claimconfig.rs), and kept with the prepared claim; moving the VF into the pod (NRI) is not done here yet.

use crate::cdi;
use crate::claimconfig;
use crate::devices::Offered;
use crate::dra_api::dra_plugin_server::{DraPlugin, DraPluginServer};
use crate::dra_api::{
    Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest, NodePrepareResourcesResponse,
    NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use crate::h2authority;
use crate::registration_api::registration_server::{Registration, RegistrationServer};
use crate::registration_api::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};
use crate::server::identity;
use crate::slices;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;
use sriov_rdma_cni::inventory::{Inventory, VfInfo};
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::{error, info, warn};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::transport::server::Connected;
use tonic::{Request, Response, Status};

/// The driver name: the ResourceSlices' `spec.driver`, the DeviceClass's selector, the registration's name and
/// the CDI vendor.
pub const DRIVER: &str = "sriov-rdma.k8s.io";
/// The plugin type the kubelet's plugin watcher routes to its DRA manager.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The service the kubelet looks for in `supported_versions` (k8s.io/kubelet pkg/apis/dra/v1 DRAPluginService).
pub const SERVICE_V1: &str = "v1.DRAPlugin";

/// Where the driver's sockets and CDI specs go, and where the character devices are.
#[derive(Debug, Clone)]
pub struct DraPaths {
    /// `<kubelet root>/plugins_registry`.
    pub registry_dir: PathBuf,
    /// `<kubelet root>/plugins/<driver>`.
    pub plugin_dir: PathBuf,
    /// `/var/run/cdi`.
    pub cdi_dir: PathBuf,
    pub sysfs: PathBuf,
    pub dev_root: PathBuf,
    /// The CNI's node policy file (applied to a claim by its namespace).
    pub policy: PathBuf,
}

impl DraPaths {
    /// The kubelet's own layout under its root directory (`/var/lib/kubelet`).
    pub fn under(
        kubelet_root: &Path,
        driver: &str,
        cdi_dir: PathBuf,
        sysfs: PathBuf,
        dev_root: PathBuf,
        policy: PathBuf,
    ) -> Self {
        DraPaths {
            registry_dir: kubelet_root.join("plugins_registry"),
            plugin_dir: kubelet_root.join("plugins").join(driver),
            cdi_dir,
            sysfs,
            dev_root,
            policy,
        }
    }

    /// Where the prepared claims' checked configs are kept (`<claim UID>.json`), for the attach.
    pub fn claims_dir(&self) -> PathBuf {
        self.plugin_dir.join("claims")
    }

    pub fn registration_socket(&self, driver: &str) -> PathBuf {
        self.registry_dir.join(format!("{driver}-reg.sock"))
    }

    pub fn plugin_socket(&self) -> PathBuf {
        self.plugin_dir.join("dra.sock")
    }
}

/// What both services share.
#[derive(Clone)]
pub struct Driver {
    pub name: String,
    /// This node's name: the pool the driver's devices are in.
    pub node: String,
    pub paths: DraPaths,
    pub client: kube::Client,
    /// The `dra: true` resources' offered VFs.
    pub offered: Vec<watch::Receiver<Vec<Offered>>>,
    pub inventory: watch::Receiver<Arc<Inventory>>,
    /// Bumped when the kubelet reports the driver registered (slices.rs publishes again).
    pub registered: watch::Sender<u64>,
}

impl Driver {
    /// The claim's devices, prepared: its allocation read from the API server, the CDI spec written.
    async fn prepare(&self, claim: &Claim) -> Result<Vec<Device>, String> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let rc = api.get(&claim.name).await.map_err(|e| format!("reading it from the API server: {e}"))?;
        let uid = rc.metadata.uid.as_deref().unwrap_or_default();
        if uid != claim.uid {
            return Err(format!(
                "the API server has it with UID {uid:?}, not the kubelet's {:?} (deleted and created again?)",
                claim.uid
            ));
        }
        let pods: Vec<String> = rc
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .map(|r| r.iter().filter(|c| c.resource == "pods").map(|c| c.uid.clone()).collect())
            .unwrap_or_default();
        let devices = rc.status.and_then(|s| s.allocation).and_then(|a| a.devices);
        let configs = devices.as_ref().and_then(|d| d.config.clone()).unwrap_or_default();
        let results =
            devices.and_then(|d| d.results).ok_or("it is not allocated (no status.allocation.devices.results)")?;
        let mine: Vec<_> = results.into_iter().filter(|r| r.driver == self.name).collect();
        if let Some(r) = mine.iter().find(|r| r.pool != self.node) {
            return Err(format!(
                "device {} of request {} is from pool {:?}, not this node's ({:?})",
                r.device, r.request, r.pool, self.node
            ));
        }
        let offered: Vec<Offered> = self.offered.iter().flat_map(|rx| rx.borrow().clone()).collect();
        let mut inv = self.inventory.borrow().clone();
        let known = |inv: &Inventory| mine.iter().all(|r| find_vf(inv, &r.device).is_some());
        if !known(&inv) {
            // A VF that came since the last scan.
            let sysfs = self.paths.sysfs.clone();
            inv = tokio::task::spawn_blocking(move || Arc::new(Inventory::scan(&Sysfs::at(sysfs))))
                .await
                .map_err(|e| format!("reading the node inventory: {e}"))?;
        }
        let mut allocated = Vec::new();
        let mut kept = Vec::new();
        for r in &mine {
            let vf = find_vf(&inv, &r.device)
                .ok_or_else(|| format!("device {} of request {} is not a VF on this node", r.device, r.request))?;
            if !offered.iter().any(|o| o.id == vf.pci.as_str() && o.selected) {
                return Err(format!(
                    "device {} (VF {}) of request {} is not one this driver publishes (no dra: true resource of the \
                     config selects it)",
                    r.device, vf.pci, r.request
                ));
            }
            // The claim's config for this device, checked and admitted as the CNI does a NAD's; nothing is written
            // before every device's passed.
            let config = claimconfig::parameters(&configs, &self.name, &r.request)
                .and_then(|p| claimconfig::check(&p, &claim.namespace, &claim.name, vf, &self.paths.policy))
                .map_err(|e| format!("device {} of request {}: its config: {e}", r.device, r.request))?;
            kept.push(claimconfig::Kept {
                request: r.request.clone(),
                device: r.device.clone(),
                pci_address: vf.pci.to_string(),
                config,
            });
            allocated.push(cdi::Allocated { device: r.device.clone(), vf });
        }
        if allocated.is_empty() {
            // No device of this driver in the claim: nothing for the runtime (a spec without devices is invalid).
            return Ok(Vec::new());
        }
        let spec = cdi::spec(&self.name, &claim.uid, &allocated, &self.paths.dev_root)?;
        let claims_dir = self.paths.claims_dir();
        claimconfig::keep(&claims_dir, &format!("{}/{}", claim.namespace, claim.name), &claim.uid, &pods, &kept)?;
        if let Err(e) = cdi::write(&self.paths.cdi_dir, &self.name, &claim.uid, &spec) {
            let _ = claimconfig::forget(&claims_dir, &claim.uid);
            return Err(e);
        }
        Ok(mine
            .iter()
            .map(|r| Device {
                request_names: vec![r.request.clone()],
                pool_name: r.pool.clone(),
                device_name: r.device.clone(),
                cdi_device_ids: vec![cdi::device_id(&self.name, &claim.uid, &r.device)],
                share_id: r.share_id.clone(),
            })
            .collect())
    }
}

fn find_vf<'a>(inv: &'a Inventory, device: &str) -> Option<&'a VfInfo> {
    inv.vfs().map(|(_, vf)| vf).find(|vf| slices::device_name(vf.pci.as_str()) == device)
}

fn claim_name(c: &Claim) -> String {
    format!("claim {}/{} ({})", c.namespace, c.name, c.uid)
}

#[tonic::async_trait]
impl DraPlugin for Driver {
    async fn node_prepare_resources(
        &self,
        req: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let mut claims = std::collections::HashMap::new();
        for c in req.into_inner().claims {
            let answer = match self.prepare(&c).await {
                Ok(devices) => {
                    let ids: Vec<&str> = devices.iter().flat_map(|d| &d.cdi_device_ids).map(String::as_str).collect();
                    info!("DRA: {} prepared: {}", claim_name(&c), ids.join(", "));
                    NodePrepareResourceResponse { devices, error: String::new() }
                }
                Err(e) => {
                    let e = format!("{}: preparing: {e}", claim_name(&c));
                    error!("DRA: {e}");
                    NodePrepareResourceResponse { devices: Vec::new(), error: e }
                }
            };
            claims.insert(c.uid.clone(), answer);
        }
        Ok(Response::new(NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let mut claims = std::collections::HashMap::new();
        for c in req.into_inner().claims {
            let removed = cdi::remove(&self.paths.cdi_dir, &self.name, &c.uid)
                .and_then(|()| claimconfig::forget(&self.paths.claims_dir(), &c.uid));
            let error = match removed {
                Ok(()) => {
                    info!("DRA: {} unprepared", claim_name(&c));
                    String::new()
                }
                Err(e) => {
                    let e = format!("{}: unpreparing: {e}", claim_name(&c));
                    error!("DRA: {e}");
                    e
                }
            };
            claims.insert(c.uid.clone(), NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(NodeUnprepareResourcesResponse { claims }))
    }
}

#[tonic::async_trait]
impl Registration for Driver {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: self.name.clone(),
            endpoint: self.paths.plugin_socket().display().to_string(),
            supported_versions: vec![SERVICE_V1.into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        if s.plugin_registered {
            info!("DRA: the kubelet registered driver {}", self.name);
            self.registered.send_modify(|n| *n = n.wrapping_add(1));
        } else {
            error!("DRA: the kubelet refused driver {}: {}", self.name, s.error);
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// A unix socket bound at `sock`, an old one there removed first, its directory created.
pub fn listen(sock: &Path) -> Result<tokio::net::UnixListener, String> {
    match std::fs::remove_file(sock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("removing the old socket {}: {e}", sock.display())),
    }
    if let Some(dir) = sock.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    tokio::net::UnixListener::bind(sock).map_err(|e| format!("listening on {}: {e}", sock.display()))
}

/// Serves both sockets for as long as the daemon runs, binding them again when one vanishes (a kubelet that
/// cleaned its directories). `check`: how often the sockets are looked at.
pub async fn serve(driver: Driver, check: Duration) {
    let mut failures = 0u32;
    loop {
        match serve_once(&driver, check).await {
            Ok(()) => {
                failures = 0;
                warn!("DRA: a socket of driver {} vanished: serving and registering again", driver.name);
            }
            Err(e) => {
                failures += 1;
                error!("DRA: {e}");
                tokio::time::sleep(Duration::from_secs(10).min(Duration::from_millis(500) * failures)).await;
            }
        }
    }
}

async fn serve_once(driver: &Driver, check: Duration) -> Result<(), String> {
    let (plugin_sock, reg_sock) = (driver.paths.plugin_socket(), driver.paths.registration_socket(&driver.name));
    // The endpoint first: the kubelet dials it as soon as it sees the registration socket.
    let plugin = listen(&plugin_sock)?;
    let reg = listen(&reg_sock)?;
    let ids = (identity(&plugin_sock), identity(&reg_sock));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut plugin_server = spawn_server(
        tokio_stream::wrappers::UnixListenerStream::new(plugin),
        tonic::transport::Server::builder().add_service(DraPluginServer::new(driver.clone())),
        stop_rx.clone(),
    );
    // The kubelet's plugin watcher sends the socket's path as :authority (h2authority.rs); its DRA manager dials
    // the endpoint as `unix:<path>`, which gRPC sends as `localhost`.
    let mut reg_server = spawn_server(
        h2authority::incoming(reg),
        tonic::transport::Server::builder().add_service(RegistrationServer::new(driver.clone())),
        stop_rx,
    );
    info!("DRA: driver {} serving {}, registration {}", driver.name, plugin_sock.display(), reg_sock.display());
    let result = loop {
        tokio::select! {
            r = &mut plugin_server => break Err(format!("serving {}: {r:?}", plugin_sock.display())),
            r = &mut reg_server => break Err(format!("serving {}: {r:?}", reg_sock.display())),
            _ = tokio::time::sleep(check) => {
                if (identity(&plugin_sock), identity(&reg_sock)) != ids || ids.0.is_none() || ids.1.is_none() {
                    break Ok(());
                }
            }
        }
    };
    let _ = stop_tx.send(true);
    plugin_server.abort();
    reg_server.abort();
    result
}

fn spawn_server<I, IO>(
    incoming: I,
    router: tonic::transport::server::Router,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>>
where
    I: tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Connected + Unpin + Send + 'static,
{
    tokio::spawn(router.serve_with_incoming_shutdown(incoming, async move {
        let _ = stop.wait_for(|s| *s).await;
    }))
}

/// Removes the registration socket (the kubelet then unregisters the driver) and the endpoint.
pub fn remove_sockets(paths: &DraPaths, driver: &str) {
    let _ = std::fs::remove_file(paths.registration_socket(driver));
    let _ = std::fs::remove_file(paths.plugin_socket());
}
