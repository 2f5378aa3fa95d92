//! The kubelet side: one gRPC server per resource on its socket in the kubelet's device plugin directory,
//! registration (again whenever the kubelet restarts and removes the socket), and the [`Watcher`] that turns the
//! node inventory into ListAndWatch updates and keeps the last one for Allocate and GetPreferredAllocation.

use crate::alloc::{self, Candidate};
use crate::api;
use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::registration_client::RegistrationClient;
use crate::config::Resource;
use crate::devices::{self, Offered, Paths};
use hyper_util::rt::TokioIo;
use sriov_rdma_cni::inventory::Inventory;
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::model::PciAddr;
use sriov_rdma_cni::{debug, error, info, warn};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

pub const API_VERSION: &str = "v1beta1";
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// Timings, shorter in tests. Events (events.rs) drive the daemon; the polls are the safety net for what no event
/// announces (a fake sysfs, a lost event), so they are slow.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How often link and RDMA port state and the followed files are read without an event (`--poll-ms`).
    pub poll: Duration,
    /// How often the whole node is scanned without an event (`--full-poll-ms`).
    pub full_poll: Duration,
    /// How long a burst of events is gathered into one change.
    pub debounce: Duration,
    /// How often the plugin looks for its socket without an event in the kubelet's directory.
    pub socket_check: Duration,
    /// The longest wait between registration attempts.
    pub max_backoff: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll: Duration::from_secs(60),
            full_poll: Duration::from_secs(600),
            debounce: Duration::from_millis(150),
            socket_check: Duration::from_secs(60),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// What the daemon's loop hands every resource's server: the last inventory, and a count bumped on each change
/// in the kubelet's directory (a re-created kubelet.sock is a kubelet restart).
#[derive(Clone)]
pub struct Shared {
    pub inventory: watch::Receiver<Arc<Inventory>>,
    pub kubelet_dir: watch::Receiver<u64>,
}

/// One resource's gRPC service.
pub struct Plugin {
    res: Resource,
    paths: Arc<Paths>,
    devices: watch::Receiver<Vec<Offered>>,
    inventory: watch::Receiver<Arc<Inventory>>,
}

type Updates = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

fn scan(paths: &Paths) -> Inventory {
    Inventory::scan(&Sysfs::at(paths.sysfs.clone()))
}

impl Plugin {
    /// The last inventory if it knows every one of `ids`, else a fresh scan (a VF that came since).
    fn inventory_for<'a>(&self, ids: impl IntoIterator<Item = &'a String>) -> (Arc<Inventory>, bool) {
        let inv = self.inventory.borrow().clone();
        let known = ids.into_iter().all(|id| PciAddr::parse(id).ok().is_some_and(|p| inv.vf(&p).is_some()));
        (inv, known)
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(api::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = Updates;

    async fn list_and_watch(&self, _: Request<api::Empty>) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let name = self.res.name.clone();
        let stream = tokio_stream::wrappers::WatchStream::new(self.devices.clone()).map(move |list| {
            debug!("{name}: ListAndWatch sends {} devices", list.len());
            Ok(api::ListAndWatchResponse { devices: list.iter().map(Offered::device).collect() })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        let req = req.into_inner();
        let candidates: HashMap<String, Candidate> = {
            let paths = self.paths.clone();
            let (inv, known) = self.inventory_for(req.container_requests.iter().flat_map(|c| &c.available_device_i_ds));
            let (inv, roots) = tokio::task::spawn_blocking(move || {
                let inv = if known { inv } else { Arc::new(scan(&paths)) };
                let roots = pcie_roots(&paths.sysfs, &inv);
                (inv, roots)
            })
            .await
            .map_err(|e| Status::internal(format!("reading the node inventory: {e}")))?;
            let listed = self.devices.borrow().clone();
            listed
                .into_iter()
                .map(|o| {
                    let pf = pf_of(&inv, &o.id);
                    let pcie_root = pf.as_ref().and_then(|p| roots.get(p).cloned());
                    let c = Candidate { healthy: o.health == devices::HEALTHY, numa: o.numa_node, pf, pcie_root };
                    (o.id.clone(), c)
                })
                .collect()
        };
        let container_responses = req
            .container_requests
            .into_iter()
            .map(|c| api::ContainerPreferredAllocationResponse {
                device_i_ds: alloc::choose(
                    self.res.allocation,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                    &candidates,
                ),
            })
            .collect();
        Ok(Response::new(api::PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, req: Request<api::AllocateRequest>) -> Result<Response<api::AllocateResponse>, Status> {
        let (res, paths) = (self.res.clone(), self.paths.clone());
        let requests = req.into_inner().container_requests;
        let (inv, known) = self.inventory_for(requests.iter().flat_map(|c| &c.devices_ids));
        let out = tokio::task::spawn_blocking(move || {
            let inv = if known { inv } else { Arc::new(scan(&paths)) };
            requests
                .iter()
                .map(|c| devices::allocate(&res, &inv, &c.devices_ids, &paths))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| Status::internal(format!("allocating: {e}")))?;
        match out {
            Ok(container_responses) => {
                crate::metrics::get().allocate(&self.res.name, true);
                for c in &container_responses {
                    info!(
                        "{}: allocated {}",
                        self.res.name,
                        c.envs.get(&self.res.env_name()).cloned().unwrap_or_default()
                    );
                }
                Ok(Response::new(api::AllocateResponse { container_responses }))
            }
            Err(e) => {
                crate::metrics::get().allocate(&self.res.name, false);
                error!("{}: Allocate refused: {e}", self.res.name);
                Err(Status::invalid_argument(format!("{}: {e}", self.res.name)))
            }
        }
    }

    async fn pre_start_container(
        &self,
        _: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}

/// Each PF's PCIe root complex, from its `bus/pci/devices` link (a tree without links has none).
fn pcie_roots(sysfs: &Path, inv: &Inventory) -> HashMap<PciAddr, String> {
    let dir = sysfs.join("bus/pci/devices");
    inv.pfs
        .iter()
        .filter_map(|pf| {
            Some((pf.pci.clone(), alloc::pcie_root(&std::fs::read_link(dir.join(pf.pci.as_str())).ok()?)?))
        })
        .collect()
}

fn pf_of(inv: &Inventory, id: &str) -> Option<PciAddr> {
    let pci = PciAddr::parse(id).ok()?;
    inv.vf(&pci).map(|(pf, _)| pf.pci.clone())
}

/// Each resource's devices as offered so far (a VF once offered stays listed, Unhealthy when it goes away), and
/// the inventory they were read from.
pub struct Watcher {
    resources: Vec<Resource>,
    paths: Arc<Paths>,
    senders: Vec<watch::Sender<Vec<Offered>>>,
    seen: Vec<BTreeSet<String>>,
    inventory: watch::Sender<Arc<Inventory>>,
    attached: BTreeMap<PciAddr, devices::Held>,
}

impl Watcher {
    /// Channels for each resource's device list, empty until the first [`Watcher::refresh`].
    pub fn new(resources: Vec<Resource>, paths: Arc<Paths>) -> (Watcher, Vec<watch::Receiver<Vec<Offered>>>) {
        let (senders, receivers) = resources.iter().map(|_| watch::channel(Vec::new())).unzip();
        let seen = vec![BTreeSet::new(); resources.len()];
        let (inventory, _) = watch::channel(Arc::new(Inventory { pfs: Vec::new() }));
        (Watcher { resources, paths, senders, seen, inventory, attached: BTreeMap::new() }, receivers)
    }

    /// The inventory each refresh publishes.
    pub fn inventory(&self) -> watch::Receiver<Arc<Inventory>> {
        self.inventory.subscribe()
    }

    /// Scans the node and reads the attachment records, and publishes each resource's devices if they changed,
    /// logging what changed.
    pub async fn refresh(&mut self) {
        let p = self.paths.clone();
        let (inv, attached) =
            match tokio::task::spawn_blocking(move || (scan(&p), devices::attached(&p.state_dir))).await {
                Ok(r) => r,
                Err(e) => return error!("reading the node inventory: {e}"),
            };
        self.attached = attached;
        self.publish(Arc::new(inv));
    }

    /// Re-reads only link and RDMA port state of the last inventory (a link event, the slow poll), and publishes
    /// if they changed.
    pub async fn relink(&mut self) {
        let (p, mut inv) = (self.paths.clone(), Inventory::clone(&self.inventory.borrow()));
        let read = tokio::task::spawn_blocking(move || {
            let sysfs = Sysfs::at(p.sysfs.clone());
            let changed = inv.reread_links(&sysfs) | inv.reread_ports(&sysfs);
            (inv, changed)
        });
        match read.await {
            Ok((inv, true)) => self.publish(Arc::new(inv)),
            Ok((_, false)) => {}
            Err(e) => error!("reading link state: {e}"),
        }
    }

    fn publish(&mut self, inv: Arc<Inventory>) {
        let attached = &self.attached;
        let lists = devices::offer_all(&self.resources, &inv, &self.seen, attached);
        self.inventory.send_replace(inv);
        if let Err(e) = devices::write_offered(&self.paths.kubelet_dir, &self.resources, &lists) {
            error!("the list of offered VFs, which keeps an unhealthy VF from NADs without a resource request: {e}");
        }
        for ((i, res), list) in self.resources.iter().enumerate().zip(lists) {
            self.seen[i].extend(list.iter().map(|o| o.id.clone()));
            self.senders[i].send_if_modified(|cur| {
                if *cur == list {
                    return false;
                }
                for o in &list {
                    let before = cur.iter().find(|c| c.id == o.id).map(|c| c.health);
                    if before != Some(o.health) {
                        let why =
                            if o.problems.is_empty() { String::new() } else { format!(": {}", o.problems.join("; ")) };
                        info!("{}: {} is {}{why}", res.name, o.id, o.health);
                        if before.is_some() {
                            crate::metrics::get().transition(&res.name, o.health, o.reasons.first().copied());
                        }
                    }
                }
                *cur = list.clone();
                true
            });
        }
    }

    /// Takes a new list of resources (a reloaded config): one kept by name keeps its channel and what it offered
    /// (its serve loop and the kubelet's ListAndWatch stream go on and get the new list at the next refresh); a
    /// removed one's channel closes, which stops its serve loop. Returns the added ones' channels, to serve.
    pub fn reconfigure(&mut self, resources: Vec<Resource>) -> Vec<(Resource, watch::Receiver<Vec<Offered>>)> {
        let mut old: HashMap<String, (watch::Sender<Vec<Offered>>, BTreeSet<String>)> =
            self.resources.drain(..).map(|r| r.name).zip(self.senders.drain(..).zip(self.seen.drain(..))).collect();
        let mut added = Vec::new();
        for r in &resources {
            let (tx, seen) = old.remove(&r.name).unwrap_or_else(|| {
                let (tx, rx) = watch::channel(Vec::new());
                added.push((r.clone(), rx));
                (tx, BTreeSet::new())
            });
            self.senders.push(tx);
            self.seen.push(seen);
        }
        self.resources = resources;
        added
    }

    /// The PF and VF netdevs of the last inventory, whose link events matter.
    pub fn netdevs(&self) -> Vec<String> {
        self.inventory.borrow().netdevs()
    }

    /// Each resource's name and its list as last sent.
    pub fn lists(&self) -> Vec<(String, Vec<Offered>)> {
        self.resources.iter().zip(&self.senders).map(|(r, tx)| (r.name.clone(), tx.borrow().clone())).collect()
    }
}

/// The identity of a socket file: the kubelet's restart replaces it, and removes ours. The inode alone is not
/// enough: a file system may give the new socket the inode number the old one freed, so its change time is part
/// of it (a new socket is a new inode change).
pub type FileId = (u64, u64, i64, i64);

pub fn identity(p: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(p).ok().map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Serves one resource for as long as the daemon runs: bind the socket, register, and start over whenever the
/// socket vanishes (the kubelet restarted and cleaned its directory). Ends, removing its socket, when the
/// resource's channel closes (a reloaded config no longer has it).
pub async fn serve(
    res: Resource,
    paths: Arc<Paths>,
    devices: watch::Receiver<Vec<Offered>>,
    shared: Shared,
    timing: Timing,
) {
    let sock = paths.kubelet_dir.join(res.socket_name());
    let mut failures_in_a_row = 0u32;
    loop {
        let result = serve_once(&res, &paths, &sock, devices.clone(), shared.clone(), timing).await;
        crate::metrics::get().registered(&res.name, false);
        if devices.has_changed().is_err() {
            let _ = std::fs::remove_file(&sock);
            return info!("{}: no longer configured: {} removed", res.name, sock.display());
        }
        match result {
            Ok(()) => {
                failures_in_a_row = 0;
                info!(
                    "{}: {} is gone (the kubelet restarted?): serving and registering again",
                    res.name,
                    sock.display()
                );
            }
            Err(e) => {
                failures_in_a_row += 1;
                error!("{}: {e}", res.name);
                tokio::time::sleep(timing.max_backoff.min(Duration::from_millis(500) * failures_in_a_row)).await;
            }
        }
    }
}

async fn serve_once(
    res: &Resource,
    paths: &Arc<Paths>,
    sock: &Path,
    devices: watch::Receiver<Vec<Offered>>,
    shared: Shared,
    timing: Timing,
) -> Result<(), String> {
    match std::fs::remove_file(sock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("removing the old socket {}: {e}", sock.display())),
    }
    std::fs::create_dir_all(&paths.kubelet_dir)
        .map_err(|e| format!("creating {}: {e}", paths.kubelet_dir.display()))?;
    let listener = tokio::net::UnixListener::bind(sock).map_err(|e| format!("listening on {}: {e}", sock.display()))?;
    let mine = identity(sock);
    let devices_open = devices.clone();
    let mut devices_wake = devices.clone();
    let mut kubelet_dir = shared.kubelet_dir;
    let plugin = Plugin { res: res.clone(), paths: paths.clone(), devices, inventory: shared.inventory };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(
        tonic::transport::Server::builder().add_service(DevicePluginServer::new(plugin)).serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            async {
                let _ = stop_rx.await;
            },
        ),
    );
    let gone = || identity(sock) != mine || identity(sock).is_none();
    let kubelet = paths.kubelet_dir.join(KUBELET_SOCKET);
    let mut attempt = 0u32;
    // The kubelet.sock registered with: a new one (the kubelet restarted) gets a new registration, even if the
    // kubelet left this plugin's socket in place.
    let mut registered: Option<Option<FileId>> = None;
    let mut last_warning = None;
    // A closed channel: the resource was removed from the config.
    while !gone() && devices_open.has_changed().is_ok() {
        if registered.is_some_and(|id| id != identity(&kubelet)) {
            info!("{}: {} was replaced (the kubelet restarted): registering again", res.name, kubelet.display());
            registered = None;
        }
        if registered.is_none() {
            let before = identity(&kubelet);
            match register(&kubelet, res).await {
                Ok(()) => {
                    info!(
                        "{}: registered with the kubelet ({}), serving {}",
                        res.name,
                        kubelet.display(),
                        sock.display()
                    );
                    registered = Some(before);
                    crate::metrics::get().registered(&res.name, true);
                    attempt = 0;
                }
                Err(e) => {
                    // The first failure and then one line a minute: a node whose kubelet is not up yet stays quiet.
                    let wait = timing.max_backoff.min(Duration::from_millis(250) * 2u32.saturating_pow(attempt.min(8)));
                    if last_warning.is_none_or(|t: std::time::Instant| t.elapsed() >= Duration::from_secs(60)) {
                        warn!("{}: registering with the kubelet at {}: {e}; retrying", res.name, kubelet.display());
                        last_warning = Some(std::time::Instant::now());
                    }
                    attempt += 1;
                    // A kubelet that comes up creates kubelet.sock: no need to wait out the backoff.
                    let _ = tokio::time::timeout(wait, wake(&mut kubelet_dir, &mut devices_wake, timing)).await;
                    continue;
                }
            }
        }
        wake(&mut kubelet_dir, &mut devices_wake, timing).await;
    }
    let _ = stop_tx.send(());
    // A graceful stop waits for open ListAndWatch streams, which never end by themselves: cut them after 5 s.
    match tokio::time::timeout(Duration::from_secs(5), &mut server).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Err(_) => {
            server.abort();
            Ok(())
        }
        Ok(Ok(Err(e))) => Err(format!("serving {}: {e}", sock.display())),
        Ok(Err(e)) => Err(format!("serving {}: {e}", sock.display())),
    }
}

/// Returns at a change in the kubelet's directory, a change or the end of the resource's list, or after
/// `socket_check`: what makes the serve loop look at its socket and the kubelet's again.
async fn wake(kubelet_dir: &mut watch::Receiver<u64>, devices: &mut watch::Receiver<Vec<Offered>>, timing: Timing) {
    tokio::select! {
        r = kubelet_dir.changed() => {
            if r.is_err() {
                tokio::time::sleep(timing.socket_check).await;
            }
        }
        _ = devices.changed() => {}
        _ = tokio::time::sleep(timing.socket_check) => {}
    }
}

/// A gRPC channel over a unix socket.
pub async fn unix_channel(sock: PathBuf) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    tonic::transport::Endpoint::try_from("http://[::]:50051")?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let sock = sock.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(sock).await?)) }
        }))
        .await
}

async fn register(kubelet: &Path, res: &Resource) -> Result<(), String> {
    let ch = unix_channel(kubelet.to_path_buf()).await.map_err(|e| format!("connecting: {e}"))?;
    let req = api::RegisterRequest {
        version: API_VERSION.into(),
        endpoint: res.socket_name(),
        resource_name: res.name.clone(),
        options: Some(api::DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }),
    };
    RegistrationClient::new(ch).register(req).await.map_err(|s| format!("{}: {}", s.code(), s.message()))?;
    Ok(())
}
