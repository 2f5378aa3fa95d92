//! `--pod-resources` against a kubelet stand-in serving the pod-resources API v1 (List) on a temporary
//! `<kubelet root>/pod-resources/kubelet.sock`, and `sriov-rdma doctor` (built next to the plugin by
//! `cargo test --workspace`) naming the pod that holds a VF of a fake sysfs node from that answer and the kubelet's
//! checkpoint. Each check reads what the binaries printed from the stand-in's gRPC answer.

use serde_json::Value;
use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use sriov_rdma_device_plugin::podresources_api as api;
use sriov_rdma_device_plugin::podresources_api::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use tonic::{Request, Response, Status};

const PF: &str = "0000:5e:00.0";
const VF0: &str = "0000:5e:00.2";
const VF1: &str = "0000:5e:00.3";
const UID: &str = "8a0b6c1d-2e3f-4a5b-9c6d-7e8f9a0b1c2d";

/// A kubelet root (`device-plugins/`, `pod-resources/`) and a fake sysfs under one temporary directory.
struct Root(PathBuf);

impl Root {
    fn new(name: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-podres-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for d in ["device-plugins", "pod-resources", "state"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        Root(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("pod-resources/kubelet.sock")
    }

    fn device_plugins(&self) -> PathBuf {
        self.0.join("device-plugins")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The kubelet's List answer: pod team-a/nccl-0 holds VF0 of rdma/hca in container main; another container has
/// a device of another resource; a pod without devices.
struct StandIn;

#[tonic::async_trait]
impl PodResourcesLister for StandIn {
    async fn list(
        &self,
        _: Request<api::ListPodResourcesRequest>,
    ) -> Result<Response<api::ListPodResourcesResponse>, Status> {
        let dev = |r: &str, ids: &[&str]| api::ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: Some(api::TopologyInfo { nodes: vec![api::NumaNode { id: 0 }] }),
        };
        let container = |name: &str, devices| api::ContainerResources { name: name.into(), devices };
        Ok(Response::new(api::ListPodResourcesResponse {
            pod_resources: vec![
                api::PodResources {
                    name: "nccl-0".into(),
                    namespace: "team-a".into(),
                    containers: vec![
                        container("main", vec![dev("rdma/hca", &[VF0])]),
                        container("gpu", vec![dev("example.com/gpu", &["GPU-1"])]),
                    ],
                },
                api::PodResources { name: "web".into(), namespace: "default".into(), containers: vec![] },
            ],
        }))
    }
}

/// The stand-in, serving until the returned sender is dropped or fires.
fn serve(socket: &Path) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(StandIn))
            .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (stop, task)
}

/// Runs a binary off the async runtime's thread (the stand-in answers on it), bounded by the binaries' own timeouts.
async fn output(c: Command) -> (i32, Value, String) {
    let (code, v, stderr, _) = output_text(c).await;
    (code, v, stderr)
}

/// The same with stdout as text too.
async fn output_text(mut c: Command) -> (i32, Value, String, String) {
    let out = tokio::task::spawn_blocking(move || c.output().expect("running the binary")).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v, stderr, stdout)
}

fn plugin(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin"));
    c.args(args).env_remove("SRIOV_RDMA_KUBELET_DIR");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_resources_prints_the_kubelets_list_answer() {
    let root = Root::new("list");
    let sock = root.socket();
    let (stop, task) = serve(&sock);
    let (code, v, err) = output(plugin(&["--pod-resources", "--socket", sock.to_str().unwrap()])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["socket"], sock.to_str().unwrap());
    let rows = v["allocations"].as_array().unwrap_or_else(|| panic!("no allocations: {v}"));
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["namespace"], "team-a");
    assert_eq!(rows[0]["pod"], "nccl-0");
    assert_eq!(rows[0]["container"], "main");
    assert_eq!(rows[0]["resource"], "rdma/hca");
    assert_eq!(rows[0]["devices"][0], VF0);
    assert_eq!((&rows[1]["container"], &rows[1]["devices"][0]), (&"gpu".into(), &"GPU-1".into()));

    // Without --socket: the one beside the kubelet's device-plugin directory.
    let dp = root.device_plugins();
    let (code, v2, err) = output(plugin(&["--pod-resources", "--kubelet-dir", dp.to_str().unwrap()])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(v2, v);

    let _ = stop.send(());
    task.await.unwrap();
    // No kubelet answering: exit 1, the socket named, nothing on stdout.
    let (code, v, err) = output(plugin(&["--pod-resources", "--socket", sock.to_str().unwrap()])).await;
    assert_eq!(code, 1);
    assert!(v.is_null(), "{v}");
    assert!(err.contains("pod-resources API") && err.contains(sock.to_str().unwrap()), "{err}");
    // --socket alone is a usage error.
    assert_eq!(output(plugin(&["--socket", sock.to_str().unwrap()])).await.0, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_the_pod_that_holds_each_vf() {
    let cni = Path::new(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin")).with_file_name("sriov-rdma");
    assert!(cni.is_file(), "{} is missing: build the workspace (cargo test --workspace)", cni.display());
    let root = Root::new("doctor");
    let sys = root.0.join("sys");
    let tree = FakeTree::new(&sys).unwrap();
    tree.pf(PF, "tpodrespf", 8).unwrap();
    tree.vf(PF, 0, VF0, None, "vfio-pci").unwrap();
    tree.vf(PF, 1, VF1, None, "vfio-pci").unwrap();
    // The kubelet's checkpoint: VF0 allocated to the pod UID in container main, VF1 registered and free.
    fs::write(
        root.device_plugins().join("kubelet_internal_checkpoint"),
        format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"{UID}","ContainerName":"main","ResourceName":"rdma/hca","DeviceIDs":{{"0":["{VF0}"]}},"AllocResp":""}}],"RegisteredDevices":{{"rdma/hca":["{VF0}","{VF1}"]}}}},"Checksum":1}}"#
        ),
    )
    .unwrap();
    let doctor = |json: bool| {
        let mut c = Command::new(&cni);
        c.args(["doctor", "--interval", "0", "--kubelet-dir", root.device_plugins().to_str().unwrap()])
            .args(json.then_some("--json"))
            .env("SRIOV_RDMA_SYSFS", &sys)
            .env("SRIOV_RDMA_STATE_DIR", root.0.join("state"))
            .env_remove("CNI_COMMAND");
        c
    };
    let holders = |v: &Value| v["resource"]["kubelet_holders"].clone();

    // No pod-resources socket: the UID from the checkpoint, and why the name is unknown.
    let (_, v, err) = output(doctor(true)).await;
    let h = holders(&v);
    assert_eq!(h["vfs"].as_array().map(Vec::len), Some(1), "{v} {err}");
    assert_eq!((&h["vfs"][0]["vf"], &h["vfs"][0]["pod_uid"]), (&VF0.into(), &UID.into()));
    assert!(h["vfs"][0]["pod"].is_null());
    assert!(h["names_error"].as_str().unwrap_or_default().contains(root.socket().to_str().unwrap()), "{h}");

    // The kubelet answers: doctor names the pod, through the plugin's --pod-resources.
    let (stop, task) = serve(&root.socket());
    let (_, v, err) = output(doctor(true)).await;
    let h = holders(&v);
    assert!(h["names_error"].is_null(), "{h} {err}");
    let vf0 = &h["vfs"][0];
    assert_eq!(
        (&vf0["vf"], &vf0["resource"], &vf0["pod_uid"], &vf0["container"], &vf0["pod"]),
        (&VF0.into(), &"rdma/hca".into(), &UID.into(), &"main".into(), &"team-a/nccl-0".into()),
        "{h}"
    );
    assert_eq!(h["vfs"].as_array().map(Vec::len), Some(1), "VF1 is held by nobody; the GPU is no VF: {h}");
    // The human report says it in a line.
    let (_, _, _, text) = output_text(doctor(false)).await;
    assert!(
        text.contains(&format!(
            "VF {VF0} (rdma/hca) allocated by the kubelet to team-a/nccl-0 (uid {UID}) container main"
        )),
        "{text}"
    );
    let _ = stop.send(());
    task.await.unwrap();
}
