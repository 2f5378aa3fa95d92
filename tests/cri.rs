//! containerd's CRI runs the plugin: a private containerd 1.6 (Debian, runc, CRI plugin) per test, driven
//! over its socket by a CRI client, with our conflist (`pfName` allocation, MTU 9000, host-local IPAM)
//! on veth stand-in VFs behind a fake sysfs tree (tests/common). Real: containerd's CRI and its libcni,
//! runc, the network namespaces, the plugin binary and the Debian IPAM plugins. Each check reads the
//! kernel's view (the sandbox netns through `nsenter`, the host's stand-in VF), not the plugin's output.
//! Root and the packages from scripts/install-deps.sh are required; SRIOV_RDMA_SKIP_ROOT_TESTS=1 skips.

mod common;
#[path = "cri/harness.rs"]
mod harness;
#[path = "cri/require.rs"]
mod require;

use common::*;
use harness::*;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

type Client = RuntimeServiceClient<Channel>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn plugin_conf(bed: &Bed, subnet: &str) -> Value {
    json!({
        "pfName": bed.pf,
        "mtu": 9000,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": bed.dir.join("ipam")},
    })
}

/// A bed with one VF, containerd running the plugin on it, and the VF as it is before the test.
fn one_vf(tag: &str, subnet: &str) -> (Bed, Containerd, (String, String, u64, bool)) {
    let bed = Bed::new(tag, 1);
    let cd = Containerd::start(tag, &bed.sysfs, &bed.state, plugin_conf(&bed, subnet));
    let before = identity(None, &bed.vfs[0].1).unwrap();
    (bed, cd, before)
}

async fn run_sandbox(c: &mut Client, cd: &Containerd, name: &str) -> String {
    c.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(pod_config(cd, name)), runtime_handler: String::new() })
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", cd.log_tail()))
        .into_inner()
        .pod_sandbox_id
}

async fn stop_sandbox(c: &mut Client, cd: &Containerd, id: &str) {
    c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id.into() })
        .await
        .unwrap_or_else(|e| panic!("StopPodSandbox {id}: {e}\n{}", cd.log_tail()));
}

async fn remove_sandbox(c: &mut Client, cd: &Containerd, id: &str) {
    c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id.into() })
        .await
        .unwrap_or_else(|e| panic!("RemovePodSandbox {id}: {e}\n{}", cd.log_tail()));
}

/// The kernel's view of an attached sandbox: `eth0` in its netns is the stand-in VF (its host MAC), MTU
/// 9000, up, carrying exactly the IP containerd reports from our CNI result; the VF is gone from the host.
fn assert_attached(view: &SandboxView, vf: &(String, String, u64, bool), prefix: &str) {
    assert!(view.ready, "sandbox ready");
    let l = ns_link(&view.netns, "eth0").unwrap_or_else(|| panic!("no eth0 in {}", view.netns.display()));
    assert_eq!(l["address"], vf.1.as_str(), "eth0 is the VF {} (its MAC)", vf.0);
    assert_eq!(l["mtu"], 9000);
    assert!(l["flags"].as_array().unwrap().iter().any(|f| f == "UP"), "eth0 up: {l}");
    assert!(view.ip.starts_with(prefix), "PodSandboxStatus IP {} from the host-local range {prefix}", view.ip);
    assert_eq!(ns_addrs4(&view.netns, "eth0"), vec![format!("{}/24", view.ip)], "the reported IP is on eth0");
    assert_eq!(identity(None, &vf.0), None, "the VF {} has left the host", vf.0);
}

fn record_for<'a>(records: &'a [Value], sandbox: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["container_id"] == sandbox)
        .unwrap_or_else(|| panic!("no attachment record for sandbox {sandbox}: {records:?}"))
}

#[test]
fn cri_sandbox_gets_the_vf_a_container_sees_it_and_stop_gives_it_back() {
    if !required_cri("cri_sandbox_gets_the_vf_a_container_sees_it_and_stop_gives_it_back") {
        return;
    }
    let bed = Bed::new("cri1", 2);
    let cd = Containerd::start("cri1", &bed.sysfs, &bed.state, plugin_conf(&bed, "10.88.61.0/24"));
    // The VF taken is up on the host (the other stays down): DEL must bring it back up.
    must(&["ip", "link", "set", &bed.vfs[0].1, "up"]);
    let before: Vec<_> = bed.vfs.iter().map(|(_, n)| identity(None, n).unwrap()).collect();
    assert!(before[0].3 && !before[1].3);
    runtime().block_on(async {
        let mut c = cd.client().await.unwrap();
        let id = run_sandbox(&mut c, &cd, "pod-a").await;
        let view = sandbox_view(&mut c, &id).await;
        // The lowest free VF of the PF, seen by the kernel in the sandbox's netns.
        assert_attached(&view, &before[0], "10.88.61.");
        assert_eq!(identity(None, &bed.vfs[1].1).as_ref(), Some(&before[1]), "the other VF is untouched");
        assert_eq!(ns_links(&view.netns).iter().filter(|n| *n != "lo").count(), 1, "only eth0 besides lo");
        // containerd ran the plugin with its own environment: the fake tree and the test's state dir.
        let recs = bed.records();
        assert_eq!(recs.len(), 1);
        let r = record_for(&recs, &id);
        assert_eq!(r["pci"], bed.vfs[0].0.as_str());
        assert_eq!(r["ifname"], "eth0");
        assert_eq!(r["netns"], view.netns.to_str().unwrap());
        assert_eq!(r["network"], cd.net.as_str());

        // A container in the sandbox sees the interface.
        let cfg = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: "probe".into(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: IMAGE.into(), ..Default::default() }),
            command: vec!["/bin/sh".into(), "-c".into()],
            args: vec!["ls /sys/class/net; cat /sys/class/net/eth0/address /sys/class/net/eth0/mtu; \
                        ip -o -4 addr show dev eth0"
                .into()],
            log_path: "probe.log".into(),
            ..Default::default()
        };
        let cid = c
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: id.clone(),
                config: Some(cfg),
                sandbox_config: Some(pod_config(&cd, "pod-a")),
            })
            .await
            .unwrap_or_else(|e| panic!("CreateContainer: {e}\n{}", cd.log_tail()))
            .into_inner()
            .container_id;
        c.start_container(cri::StartContainerRequest { container_id: cid.clone() })
            .await
            .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", cd.log_tail()));
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            let st = c
                .container_status(cri::ContainerStatusRequest { container_id: cid.clone(), verbose: false })
                .await
                .unwrap()
                .into_inner()
                .status
                .unwrap();
            if st.state == cri::ContainerState::ContainerExited as i32 {
                break st;
            }
            assert!(Instant::now() < deadline, "container still {} after 30 s", st.state);
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let log = std::fs::read_to_string(cd.log_dir("pod-a").join("probe.log")).unwrap();
        // CRI log lines: "<time> stdout F <text>".
        let lines: Vec<&str> = log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect();
        assert_eq!(status.exit_code, 0, "container output: {lines:?}");
        assert!(lines.contains(&"eth0"), "the container lists eth0 in /sys/class/net: {lines:?}");
        assert!(lines.contains(&before[0].1.as_str()), "eth0 has the VF's MAC {}: {lines:?}", before[0].1);
        assert!(lines.contains(&"9000"), "eth0 has MTU 9000: {lines:?}");
        assert!(
            lines.iter().any(|l| l.contains(&format!("inet {}/24", view.ip))),
            "the container sees the address {}: {lines:?}",
            view.ip
        );
        c.remove_container(cri::RemoveContainerRequest { container_id: cid }).await.unwrap();

        // StopPodSandbox → CNI DEL: the VF is back exactly, no record left.
        stop_sandbox(&mut c, &cd, &id).await;
        assert_eq!(identity(None, &bed.vfs[0].1).as_ref(), Some(&before[0]), "VF given back exactly");
        assert_eq!(identity(None, &bed.vfs[1].1).as_ref(), Some(&before[1]));
        assert!(bed.records().is_empty(), "no attachment record after DEL: {:?}", bed.records());
        assert!(!sandbox_view(&mut c, &id).await.ready);
        remove_sandbox(&mut c, &cd, &id).await;
        let left = c.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.unwrap().into_inner();
        assert!(left.items.is_empty());
    });
}

#[test]
fn cri_remove_without_stop_releases_the_vf() {
    if !required_cri("cri_remove_without_stop_releases_the_vf") {
        return;
    }
    let (bed, cd, before) = one_vf("cri2", "10.88.62.0/24");
    runtime().block_on(async {
        let mut c = cd.client().await.unwrap();
        let id = run_sandbox(&mut c, &cd, "pod-b").await;
        let view = sandbox_view(&mut c, &id).await;
        assert_attached(&view, &before, "10.88.62.");
        assert_eq!(bed.records().len(), 1);
        // RemovePodSandbox on a ready sandbox: containerd stops it first, which runs DEL.
        remove_sandbox(&mut c, &cd, &id).await;
        assert_eq!(identity(None, &bed.vfs[0].1), Some(before), "VF given back exactly");
        assert!(bed.records().is_empty(), "no attachment record: {:?}", bed.records());
        assert!(!Path::new(&view.netns).exists(), "containerd removed the netns {}", view.netns.display());
        let left = c.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await.unwrap().into_inner();
        assert!(left.items.is_empty());
    });
}

#[test]
fn cri_containerd_restarted_between_add_and_del() {
    if !required_cri("cri_containerd_restarted_between_add_and_del") {
        return;
    }
    let bed = Bed::new("crr", 1);
    let mut cd = Containerd::start("crr", &bed.sysfs, &bed.state, plugin_conf(&bed, "10.88.63.0/24"));
    let before = identity(None, &bed.vfs[0].1).unwrap();
    let rt = runtime();
    let (id, view) = rt.block_on(async {
        let mut c = cd.client().await.unwrap();
        let id = run_sandbox(&mut c, &cd, "pod-r").await;
        let view = sandbox_view(&mut c, &id).await;
        assert_attached(&view, &before, "10.88.63.");
        (id, view)
    });
    // containerd dies (SIGKILL); the shim, the pod and its netns stay; it is started again.
    let old = cd.pid();
    cd.kill();
    assert!(!Path::new(&format!("/proc/{old}")).exists(), "containerd {old} is gone");
    assert!(ns_link(&view.netns, "eth0").is_some(), "the VF stays in the pod while containerd is down");
    cd.spawn();
    assert_ne!(cd.pid(), old);
    rt.block_on(async {
        let mut c = cd.client().await.unwrap();
        let again = sandbox_view(&mut c, &id).await;
        assert!(again.ready, "the restarted containerd recovered the sandbox");
        assert_eq!((again.ip.as_str(), again.netns.as_path()), (view.ip.as_str(), view.netns.as_path()));
        stop_sandbox(&mut c, &cd, &id).await;
        assert_eq!(identity(None, &bed.vfs[0].1), Some(before), "DEL after the restart gave the VF back exactly");
        assert!(bed.records().is_empty(), "no attachment record: {:?}", bed.records());
        remove_sandbox(&mut c, &cd, &id).await;
    });
}

/// The node policy sees the namespace containerd's CRI passes (K8S_POD_NAMESPACE in CNI_ARGS): a namespace it
/// denies the PF gets no sandbox and the VF stays on the host untouched; one it allows gets the VF.
#[test]
fn cri_the_node_policy_decides_by_the_pod_namespace() {
    if !required_cri("cri_the_node_policy_decides_by_the_pod_namespace") {
        return;
    }
    let (bed, cd, before) = one_vf("crp", "10.88.65.0/24");
    let policy = json!({"namespaces": {"team-a": {"pfs": [bed.pf]}, "team-b": {"pfs": []}}});
    std::fs::write(cd.policy(), policy.to_string()).unwrap();
    runtime().block_on(async {
        let mut c = cd.client().await.unwrap();
        let run = |name: &str, ns: &str| cri::RunPodSandboxRequest {
            config: Some(pod_config_in(&cd, name, ns)),
            runtime_handler: String::new(),
        };
        let e = c.run_pod_sandbox(run("pod-b", "team-b")).await.expect_err("team-b may not use the PF");
        assert!(e.message().contains("namespaces.team-b.pfs"), "{}", e.message());
        assert_eq!(identity(None, &bed.vfs[0].1).as_ref(), Some(&before), "the VF stays on the host as it was");
        assert!(bed.records().is_empty(), "no record: {:?}", bed.records());

        let id = c
            .run_pod_sandbox(run("pod-a", "team-a"))
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox in team-a: {e}\n{}", cd.log_tail()))
            .into_inner()
            .pod_sandbox_id;
        assert_attached(&sandbox_view(&mut c, &id).await, &before, "10.88.65.");
        stop_sandbox(&mut c, &cd, &id).await;
        remove_sandbox(&mut c, &cd, &id).await;
        assert_eq!(identity(None, &bed.vfs[0].1), Some(before), "VF given back exactly");
    });
}

#[test]
fn cri_eight_sandboxes_at_once_on_eight_vfs() {
    if !required_cri("cri_eight_sandboxes_at_once_on_eight_vfs") {
        return;
    }
    let bed = Bed::new("cr8", 8);
    let cd = Containerd::start("cr8", &bed.sysfs, &bed.state, plugin_conf(&bed, "10.88.64.0/24"));
    let before: Vec<_> = bed.vfs.iter().map(|(_, n)| identity(None, n).unwrap()).collect();
    runtime().block_on(async {
        let c = cd.client().await.unwrap();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8 {
            let mut c = c.clone();
            let cfg = pod_config(&cd, &format!("pod-{i}"));
            set.spawn(async move {
                c.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(cfg), runtime_handler: String::new() })
                    .await
                    .map(|r| r.into_inner().pod_sandbox_id)
            });
        }
        let mut ids = Vec::new();
        while let Some(r) = set.join_next().await {
            ids.push(r.unwrap().unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", cd.log_tail())));
        }
        assert_eq!(ids.len(), 8);
        // Each sandbox has one VF as eth0; all eight VFs, each once.
        let mut c = c.clone();
        let mut macs = HashSet::new();
        let mut ips = HashSet::new();
        for id in &ids {
            let view = sandbox_view(&mut c, id).await;
            let mac = ns_link(&view.netns, "eth0").expect("eth0")["address"].as_str().unwrap().to_string();
            let vf = before.iter().find(|v| v.1 == mac).unwrap_or_else(|| panic!("eth0 {mac} is none of the VFs"));
            assert_attached(&view, vf, "10.88.64.");
            macs.insert(mac);
            ips.insert(view.ip);
        }
        assert_eq!(macs.len(), 8, "distinct VFs");
        assert_eq!(ips.len(), 8, "distinct addresses");
        let recs = bed.records();
        assert_eq!(recs.len(), 8);
        assert_eq!(recs.iter().map(|r| r["pci"].as_str().unwrap()).collect::<HashSet<_>>().len(), 8);
        for id in &ids {
            record_for(&recs, id);
        }
        // All stopped at once: every VF back exactly.
        let mut set = tokio::task::JoinSet::new();
        for id in ids.clone() {
            let mut c = c.clone();
            set.spawn(async move { c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id }).await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap_or_else(|e| panic!("StopPodSandbox: {e}\n{}", cd.log_tail()));
        }
        for (i, (_, name)) in bed.vfs.iter().enumerate() {
            assert_eq!(identity(None, name).as_ref(), Some(&before[i]), "VF {name} given back exactly");
        }
        assert!(bed.records().is_empty(), "no attachment record: {:?}", bed.records());
        for id in &ids {
            remove_sandbox(&mut c, &cd, id).await;
        }
    });
}
