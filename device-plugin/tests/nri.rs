//! The NRI plugin against a stand-in runtime on a unix socket: the runtime's side of the wire is written here from
//! the published protocol (8-byte multiplexer frames, 10-byte ttrpc headers, ttrpc's Request/Response envelopes),
//! not with the daemon's nri_mux.rs, so a framing mistake there fails these tests. The pods' attachments are CNI
//! records in a temporary state directory (the golden format-2 record, as ADD writes it); the NCCL settings of
//! their namespaces are a fixed table standing in for the pod's RDMA view (on the node, tests/k8s/nri.sh).

use prost::Message as _;
use sriov_rdma_cni::doctor::NcclSettings;
use sriov_rdma_device_plugin::draattach::Attacher;
use sriov_rdma_device_plugin::nri::{self, NcclSource, Plugin};
use sriov_rdma_device_plugin::nri_api as api;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// ttrpc's envelopes, from github.com/containerd/ttrpc request.proto.
#[derive(Clone, PartialEq, prost::Message)]
struct TtrpcRequest {
    #[prost(string, tag = "1")]
    service: String,
    #[prost(string, tag = "2")]
    method: String,
    #[prost(bytes = "vec", tag = "3")]
    payload: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TtrpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TtrpcResponse {
    #[prost(message, optional, tag = "1")]
    status: Option<TtrpcStatus>,
    #[prost(bytes = "vec", tag = "2")]
    payload: Vec<u8>,
}

const PLUGIN_CONN: u32 = 1;
const RUNTIME_CONN: u32 = 2;

/// The runtime's end of the multiplexed socket.
struct Runtime {
    sock: UnixStream,
    /// Bytes received per connection, not yet taken as a ttrpc message.
    pending: HashMap<u32, Vec<u8>>,
    next_stream: u32,
}

impl Runtime {
    async fn frame(&mut self, conn: u32, data: &[u8]) {
        let mut f = conn.to_be_bytes().to_vec();
        f.extend_from_slice(&(data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        self.sock.write_all(&f).await.expect("writing a frame to the plugin");
    }

    /// Sends a ttrpc message, its header and its body in two frames (a byte stream may be cut anywhere).
    async fn send(&mut self, conn: u32, stream: u32, kind: u8, body: &[u8]) {
        let mut h = (body.len() as u32).to_be_bytes().to_vec();
        h.extend_from_slice(&stream.to_be_bytes());
        h.extend_from_slice(&[kind, 0]);
        self.frame(conn, &h).await;
        self.frame(conn, body).await;
    }

    /// The next ttrpc message on any connection: (connection, stream, type, body).
    async fn recv(&mut self) -> (u32, u32, u8, Vec<u8>) {
        loop {
            for (conn, buf) in self.pending.iter_mut() {
                if buf.len() >= 10 {
                    let len = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
                    if buf.len() >= 10 + len {
                        let stream = u32::from_be_bytes(buf[4..8].try_into().unwrap());
                        let kind = buf[8];
                        let body = buf[10..10 + len].to_vec();
                        buf.drain(..10 + len);
                        return (*conn, stream, kind, body);
                    }
                }
            }
            let mut h = [0u8; 8];
            tokio::time::timeout(Duration::from_secs(10), self.sock.read_exact(&mut h))
                .await
                .expect("the plugin answers within 10 s")
                .expect("reading a frame header from the plugin");
            let conn = u32::from_be_bytes(h[0..4].try_into().unwrap());
            let mut data = vec![0u8; u32::from_be_bytes(h[4..8].try_into().unwrap()) as usize];
            self.sock.read_exact(&mut data).await.expect("reading a frame from the plugin");
            self.pending.entry(conn).or_default().extend_from_slice(&data);
        }
    }

    /// Calls the plugin's `method` and returns its decoded answer.
    async fn call<R: prost::Message + Default>(&mut self, method: &str, req: &impl prost::Message) -> R {
        let resp = self.call_status(method, req).await;
        assert!(resp.status.as_ref().is_none_or(|s| s.code == 0), "{method} failed: {:?}", resp.status);
        R::decode(resp.payload.as_slice()).expect("the method's response")
    }

    /// Calls the plugin's `method` and returns ttrpc's response, its status unchecked.
    async fn call_status(&mut self, method: &str, req: &impl prost::Message) -> TtrpcResponse {
        let stream = self.next_stream;
        self.next_stream += 2;
        let env = TtrpcRequest {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: method.into(),
            payload: req.encode_to_vec(),
        };
        self.send(PLUGIN_CONN, stream, 1, &env.encode_to_vec()).await;
        let (conn, s, kind, body) = self.recv().await;
        assert_eq!((conn, s, kind), (PLUGIN_CONN, stream, 2), "{method}: the answer's connection, stream and type");
        TtrpcResponse::decode(body.as_slice()).expect("a ttrpc Response")
    }
}

/// The stand-in for the pods' RDMA view: netns path → settings.
struct Table(HashMap<String, Vec<NcclSettings>>);

impl NcclSource for Table {
    fn nccl(&self, netns: &str) -> Result<Vec<NcclSettings>, String> {
        self.0.get(netns).map(|s| s.iter().map(copy).collect()).ok_or_else(|| format!("no namespace {netns}"))
    }
}

fn copy(s: &NcclSettings) -> NcclSettings {
    NcclSettings { ifname: s.ifname.clone(), address: s.address, hca: s.hca.clone(), gid_index: s.gid_index }
}

fn setting(ifname: &str, address: &str, hca: &str, gid_index: u32) -> NcclSettings {
    NcclSettings { ifname: ifname.into(), address: address.parse().unwrap(), hca: hca.into(), gid_index }
}

/// A finished attachment record (the golden format-2 record) of VF `pci` of PF `pf_pci` for sandbox `sandbox`.
fn record(dir: &Path, pci: &str, pf_pci: &str, vf: u32, sandbox: &str, ifname: &str, netns: &str) {
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/record-2.json");
    let mut rec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(golden).unwrap()).unwrap();
    rec["pci"] = pci.into();
    rec["pf_pci"] = pf_pci.into();
    rec["vf_index"] = vf.into();
    rec["container_id"] = sandbox.into();
    rec["ifname"] = ifname.into();
    rec["netns"] = netns.into();
    std::fs::write(dir.join(format!("{pci}.json")), rec.to_string()).unwrap();
}

fn pod(id: &str, name: &str) -> api::PodSandbox {
    api::PodSandbox { id: id.into(), name: name.into(), namespace: "default".into(), ..Default::default() }
}

fn create(pod: api::PodSandbox, env: &[&str]) -> api::CreateContainerRequest {
    let container = api::Container {
        id: format!("{}-worker", pod.id),
        pod_sandbox_id: pod.id.clone(),
        name: "worker".into(),
        env: env.iter().map(|e| e.to_string()).collect(),
        ..Default::default()
    };
    api::CreateContainerRequest { pod: Some(pod), container: Some(container) }
}

fn env_of(r: &api::CreateContainerResponse) -> Vec<(String, String)> {
    r.adjust.as_ref().map(|a| a.env.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect()).unwrap_or_default()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

struct Setup {
    dir: PathBuf,
    runtime: Runtime,
    plugin: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A state directory with the pods' records, the plugin connected to a stand-in runtime, registered and
/// configured.
async fn setup(name: &str) -> Setup {
    setup_with(name, None).await
}

/// `setup` with the DRA attach on.
async fn setup_with(name: &str, dra: Option<Arc<Attacher>>) -> Setup {
    let dir = std::env::temp_dir().join(format!("sriov-rdma-nri-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    // Pod A: one VF. Pod B: two VFs on two PFs, recorded in the other order than their rails.
    record(&state, "0000:3b:00.2", "0000:3b:00.0", 0, "sandbox-a", "net1", "/var/run/netns/pod-a");
    record(&state, "0000:5e:00.3", "0000:5e:00.0", 1, "sandbox-b", "net1", "/var/run/netns/pod-b");
    record(&state, "0000:3b:00.4", "0000:3b:00.0", 2, "sandbox-b", "net2", "/var/run/netns/pod-b");
    let table = Table(HashMap::from([
        (
            "/var/run/netns/pod-a".to_string(),
            vec![setting("eth0", "10.244.0.5", "rxe_eth0:1", 1), setting("net1", "10.1.0.2", "mlx5_2:1", 3)],
        ),
        (
            "/var/run/netns/pod-b".to_string(),
            vec![setting("net1", "10.1.0.3", "mlx5_7:1", 3), setting("net2", "10.2.0.3", "mlx5_4:1", 3)],
        ),
    ]));
    let plugin = Arc::new(Plugin::new(state, Arc::new(table), dra.clone()));
    let sock = dir.join("nri.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let client = UnixStream::connect(&sock).await.unwrap();
    let task = tokio::spawn(nri::serve(client, plugin));
    let (server, _) = listener.accept().await.unwrap();
    let mut runtime = Runtime { sock: server, pending: HashMap::new(), next_stream: 1 };

    // The plugin registers first, on the runtime's connection.
    let (conn, stream, kind, body) = runtime.recv().await;
    assert_eq!((conn, kind), (RUNTIME_CONN, 1), "RegisterPlugin comes on the runtime's connection as a request");
    let req = TtrpcRequest::decode(body.as_slice()).unwrap();
    assert_eq!((req.service.as_str(), req.method.as_str()), ("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin"));
    let reg = api::RegisterPluginRequest::decode(req.payload.as_slice()).unwrap();
    assert_eq!((reg.plugin_name.as_str(), reg.plugin_idx.as_str()), ("sriov-rdma", "50"));
    let ok = TtrpcResponse { status: None, payload: api::Empty {}.encode_to_vec() };
    runtime.send(RUNTIME_CONN, stream, 2, &ok.encode_to_vec()).await;

    let conf: api::ConfigureResponse = runtime
        .call(
            "Configure",
            &api::ConfigureRequest {
                runtime_name: "stand-in".into(),
                runtime_version: "1".into(),
                ..Default::default()
            },
        )
        .await;
    let create_bit = 1 << (api::Event::CreateContainer as i32 - 1);
    assert_eq!(conf.events & create_bit, create_bit, "subscribed to CreateContainer: events {:#x}", conf.events);
    let sandbox_bits = [api::Event::RunPodSandbox, api::Event::StopPodSandbox, api::Event::RemovePodSandbox]
        .iter()
        .map(|e| 1 << (*e as i32 - 1))
        .sum::<i32>();
    let want = if dra.is_some() { sandbox_bits } else { 0 };
    assert_eq!(
        conf.events & sandbox_bits,
        want,
        "the pod sandbox's events only with the DRA attach: {:#x}",
        conf.events
    );
    let sync: api::SynchronizeResponse = runtime
        .call("Synchronize", &api::SynchronizeRequest { pods: vec![pod("sandbox-a", "a")], ..Default::default() })
        .await;
    assert!(sync.update.is_empty());
    Setup { dir, runtime, plugin: task }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_container_of_an_attached_pod_gets_the_three_nccl_variables() {
    let mut s = setup("three").await;
    let r: api::CreateContainerResponse = s.runtime.call("CreateContainer", &create(pod("sandbox-a", "a"), &[])).await;
    // Only the pod's own interface (net1), not eth0, which the namespace also shows with a RoCE v2 GID.
    assert_eq!(
        env_of(&r),
        pairs(&[("NCCL_IB_HCA", "mlx5_2:1"), ("NCCL_IB_GID_INDEX", "3"), ("NCCL_SOCKET_IFNAME", "net1")])
    );
    // Two attachments: both, in rail order (PF 0000:3b first, whatever the record order), comma-separated.
    let r: api::CreateContainerResponse = s.runtime.call("CreateContainer", &create(pod("sandbox-b", "b"), &[])).await;
    assert_eq!(
        env_of(&r),
        pairs(&[("NCCL_IB_HCA", "mlx5_4:1,mlx5_7:1"), ("NCCL_IB_GID_INDEX", "3"), ("NCCL_SOCKET_IFNAME", "net2,net1")])
    );
    s.plugin.abort();
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_the_container_sets_itself_is_not_overridden() {
    let mut s = setup("own").await;
    let req = create(pod("sandbox-a", "a"), &["PATH=/bin", "NCCL_IB_GID_INDEX=7"]);
    let r: api::CreateContainerResponse = s.runtime.call("CreateContainer", &req).await;
    assert_eq!(env_of(&r), pairs(&[("NCCL_IB_HCA", "mlx5_2:1"), ("NCCL_SOCKET_IFNAME", "net1")]));
    s.plugin.abort();
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_a_record_gets_no_adjustment() {
    let mut s = setup("none").await;
    let r: api::CreateContainerResponse = s.runtime.call("CreateContainer", &create(pod("sandbox-c", "c"), &[])).await;
    assert!(r.adjust.is_none(), "no record, no adjustment: {:?}", r.adjust);
    // A method the plugin does not know is refused with a status, and the connection goes on.
    let stream = s.runtime.next_stream;
    s.runtime.next_stream += 2;
    let env = TtrpcRequest { service: "nri.pkg.api.v1alpha1.Plugin".into(), method: "NoSuch".into(), payload: vec![] };
    s.runtime.send(PLUGIN_CONN, stream, 1, &env.encode_to_vec()).await;
    let (_, st, _, body) = s.runtime.recv().await;
    let resp = TtrpcResponse::decode(body.as_slice()).unwrap();
    assert_eq!((st, resp.status.map(|s| s.code)), (stream, Some(12)));
    let r: api::CreateContainerResponse = s.runtime.call("CreateContainer", &create(pod("sandbox-a", "a"), &[])).await;
    assert_eq!(env_of(&r).len(), 3);
    // The runtime going away ends the plugin's serve.
    drop(s.runtime);
    let end = tokio::time::timeout(Duration::from_secs(5), s.plugin).await;
    assert!(matches!(end, Ok(Ok(Ok(())))), "serve ends when the socket closes: {end:?}");
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The DRA attach under `dir`: one prepared claim `default/c` of VF 0000:3b:00.2, reserved for the pod `uid-x`;
/// the CNI it runs is `cni`.
fn attacher_of(dir: &Path, cni: std::ffi::OsString) -> Attacher {
    let claims = dir.join("claims");
    let kept = sriov_rdma_device_plugin::claimconfig::Kept {
        request: "vf".into(),
        device: "pci-0000-3b-00-2".into(),
        pci_address: "0000:3b:00.2".into(),
        config:
            serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "sriov-rdma", "deviceID": "0000:3b:00.2"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
    };
    sriov_rdma_device_plugin::claimconfig::keep(&claims, "default/c", "claim-uid", &["uid-x".into()], &[kept]).unwrap();
    Attacher {
        claims_dir: claims,
        attach_dir: dir.join("attached"),
        cni: vec![cni],
        cni_path: String::new(),
        timeout: Duration::from_secs(5),
        status: None,
    }
}

/// With the DRA attach on, RunPodSandbox of a pod whose claim was prepared runs the CNI for its device; when that
/// fails the runtime gets the error (and fails the sandbox), naming the pod, the interface and the claim. A pod
/// without a prepared claim, and Stop/Remove of a sandbox nothing was attached to, change nothing and succeed.
/// (The attach itself on real namespaces: tests/draattach.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pod_sandbox_attaches_the_pods_claims_and_a_failure_fails_the_sandbox() {
    let dir = std::env::temp_dir().join(format!("sriov-rdma-nri-claims-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let attacher = attacher_of(&dir, dir.join("no-such-cni").into());
    let mut s = setup_with("dra", Some(Arc::new(attacher))).await;
    let mut p = pod("sandbox-x", "x");
    p.uid = "uid-x".into();
    p.linux = Some(api::LinuxPodSandbox {
        namespaces: vec![api::LinuxNamespace { r#type: "network".into(), path: "/var/run/netns/pod-x".into() }],
        ..Default::default()
    });
    let r = s.runtime.call_status("RunPodSandbox", &api::RunPodSandboxRequest { pod: Some(p) }).await;
    let st = r.status.expect("the failed attach is an error status");
    assert_ne!(st.code, 0);
    assert!(
        st.message.contains("default/x") && st.message.contains("dra0") && st.message.contains("default/c"),
        "{}",
        st.message
    );
    assert!(st.message.contains("no-such-cni"), "{}", st.message);
    // Giving back failed too (the same missing CNI): the record stays for StopPodSandbox / RemovePodSandbox.
    assert!(st.message.contains("giving back"), "{}", st.message);
    assert!(dir.join("attached/sandbox-x.json").exists(), "the attach record kept for a later DEL");
    let mut other = pod("sandbox-y", "y");
    other.uid = "uid-y".into();
    let _: api::RunPodSandboxResponse =
        s.runtime.call("RunPodSandbox", &api::RunPodSandboxRequest { pod: Some(other.clone()) }).await;
    let _: api::StopPodSandboxResponse =
        s.runtime.call("StopPodSandbox", &api::StopPodSandboxRequest { pod: Some(other.clone()) }).await;
    let _: api::RemovePodSandboxResponse =
        s.runtime.call("RemovePodSandbox", &api::RemovePodSandboxRequest { pod: Some(other) }).await;
    s.plugin.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Synchronize (the plugin registered after the sandboxes ran): a listed sandbox whose pod has prepared claims and
/// nothing attached is attached then; what is attached to a sandbox missing from the runtime's whole list (all its
/// parts, `more` on every part but the last) is given back. The CNI is a stand-in that succeeds (`true`): what is
/// checked is which sandbox the plugin attaches and gives back, through its attach record. (The attach and the
/// give-back on real namespaces: tests/draattach.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronize_attaches_what_ran_without_the_plugin_and_gives_back_what_is_gone() {
    let dir = std::env::temp_dir().join(format!("sriov-rdma-nri-sync-claims-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let attacher = attacher_of(&dir, "/bin/true".into());
    let mut s = setup_with("sync", Some(Arc::new(attacher))).await;
    let record = dir.join("attached/sandbox-x.json");
    assert!(!record.exists(), "nothing attached before");
    let mut x = pod("sandbox-x", "x");
    x.uid = "uid-x".into();
    x.linux = Some(api::LinuxPodSandbox {
        namespaces: vec![api::LinuxNamespace { r#type: "network".into(), path: "/var/run/netns/pod-x".into() }],
        ..Default::default()
    });
    let mut y = pod("sandbox-y", "y");
    y.uid = "uid-y".into();
    // The runtime's list in two parts; sandbox-x in the first.
    let sync = |pods: Vec<api::PodSandbox>, more: bool| api::SynchronizeRequest { pods, more, ..Default::default() };
    let r: api::SynchronizeResponse = s.runtime.call("Synchronize", &sync(vec![x.clone(), y], true)).await;
    assert!(r.update.is_empty() && r.more);
    assert!(record.exists(), "sandbox-x's claim attached at Synchronize");
    assert!(!dir.join("attached/sandbox-y.json").exists(), "uid-y has no prepared claim");
    // The last part does not list sandbox-x, but the first did: it stays.
    let _: api::SynchronizeResponse = s.runtime.call("Synchronize", &sync(vec![], false)).await;
    assert!(record.exists(), "a sandbox of an earlier part of the list is kept");
    // A later Synchronize (the runtime restarted) without it: given back.
    let _: api::SynchronizeResponse = s.runtime.call("Synchronize", &sync(vec![], false)).await;
    assert!(!record.exists(), "a sandbox missing from the runtime's list is given back");
    s.plugin.abort();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&s.dir);
}
