//! A stand-in GPU DRA driver for tests/k8s/dra.sh (test code, not shipped): no GPU exists on the test node, so
//! this plays one for the kubelet. It registers as driver `gpu.standin.sriov-rdma.test` through
//! `<kubelet root>/plugins_registry` and answers NodePrepareResources / NodeUnprepareResources for every claim
//! with no CDI devices (there is nothing to hand to a container). It publishes nothing: the test writes the
//! driver's ResourceSlice (the fake GPUs and their `resource.kubernetes.io/pcieRoot`) with kubectl.
//! On SIGTERM or SIGINT it removes both sockets and exits.
//!   standin-gpu [KUBELET-ROOT]       (default /var/lib/kubelet)

use sriov_rdma_device_plugin::dra::listen;
use sriov_rdma_device_plugin::dra_api::dra_plugin_server::{DraPlugin, DraPluginServer};
use sriov_rdma_device_plugin::dra_api::{
    NodePrepareResourceResponse, NodePrepareResourcesRequest, NodePrepareResourcesResponse,
    NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use sriov_rdma_device_plugin::h2authority;
use sriov_rdma_device_plugin::registration_api::registration_server::{Registration, RegistrationServer};
use sriov_rdma_device_plugin::registration_api::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use std::path::{Path, PathBuf};
use tokio::signal::unix::{signal, SignalKind};
use tonic::{Request, Response, Status};

const DRIVER: &str = "gpu.standin.sriov-rdma.test";

#[derive(Clone)]
struct StandIn {
    endpoint: PathBuf,
}

#[tonic::async_trait]
impl DraPlugin for StandIn {
    async fn node_prepare_resources(
        &self,
        req: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let mut claims = std::collections::HashMap::new();
        for c in req.into_inner().claims {
            eprintln!("standin-gpu: claim {}/{} ({}) prepared", c.namespace, c.name, c.uid);
            claims.insert(c.uid, NodePrepareResourceResponse { devices: Vec::new(), error: String::new() });
        }
        Ok(Response::new(NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let mut claims = std::collections::HashMap::new();
        for c in req.into_inner().claims {
            eprintln!("standin-gpu: claim {}/{} ({}) unprepared", c.namespace, c.name, c.uid);
            claims.insert(c.uid, NodeUnprepareResourceResponse { error: String::new() });
        }
        Ok(Response::new(NodeUnprepareResourcesResponse { claims }))
    }
}

#[tonic::async_trait]
impl Registration for StandIn {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: "DRAPlugin".into(),
            name: DRIVER.into(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: vec!["v1.DRAPlugin".into()],
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let s = req.into_inner();
        if s.plugin_registered {
            eprintln!("standin-gpu: the kubelet registered driver {DRIVER}");
        } else {
            eprintln!("standin-gpu: the kubelet refused driver {DRIVER}: {}", s.error);
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

async fn run(root: &Path) -> Result<(), String> {
    let endpoint = root.join("plugins").join(DRIVER).join("dra.sock");
    let reg_sock = root.join("plugins_registry").join(format!("{DRIVER}-reg.sock"));
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("handling SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("handling SIGINT: {e}"))?;
    // The endpoint first: the kubelet dials it as soon as it sees the registration socket.
    let plugin = listen(&endpoint)?;
    let reg = listen(&reg_sock)?;
    let standin = StandIn { endpoint: endpoint.clone() };
    let plugin_server = tonic::transport::Server::builder()
        .add_service(DraPluginServer::new(standin.clone()))
        .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(plugin));
    // The kubelet's plugin watcher sends the socket's path as :authority (h2authority.rs).
    let reg_server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(standin))
        .serve_with_incoming(h2authority::incoming(reg));
    eprintln!("standin-gpu: driver {DRIVER} serving {}, registration {}", endpoint.display(), reg_sock.display());
    let result = tokio::select! {
        r = plugin_server => Err(format!("serving {}: {r:?}", endpoint.display())),
        r = reg_server => Err(format!("serving {}: {r:?}", reg_sock.display())),
        _ = term.recv() => Ok(()),
        _ = int.recv() => Ok(()),
    };
    // The registration socket gone, the kubelet unregisters the driver.
    for s in [&reg_sock, &endpoint] {
        if let Err(e) = std::fs::remove_file(s) {
            eprintln!("standin-gpu: removing {}: {e}", s.display());
        }
    }
    result
}

fn main() {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "/var/lib/kubelet".into()));
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("standin-gpu: starting the async runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(run(&root)) {
        Ok(()) => eprintln!("standin-gpu: stopped, sockets removed"),
        Err(e) => {
            eprintln!("standin-gpu: {e}");
            std::process::exit(1);
        }
    }
}
