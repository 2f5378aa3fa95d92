//! The device plugin binary against a kubelet stand-in that speaks the kubelet's side of the device plugin API
//! (a Registration server on a temporary kubelet.sock; it then dials the plugin's socket like the kubelet does) and
//! a fake sysfs tree standing in for the node: a PF with an mlx5-like VF per RDMA device and a vfio-pci VF.
//! Every check reads what the plugin answered over gRPC or left on disk (device-info files, sriov_numvfs).

mod common;

use common::*;
use sriov_rdma_device_plugin::api;
use sriov_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use std::fs;
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn registers_with_its_resource_name_and_lists_the_vfs_with_their_numa_node() {
    let node = Node::new("register");
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let _plugin = node.start(&["--config", node.config(r#"{"resources":[{"name":"rdma/hca"}]}"#).to_str().unwrap()]);
    let reg = kubelet.next_registration(Duration::from_secs(10)).await;
    assert_eq!(reg.version, "v1beta1");
    assert_eq!(reg.resource_name, "rdma/hca");
    assert_eq!(reg.endpoint, "sriov-rdma-rdma_hca.sock");
    assert!(reg.options.as_ref().is_some_and(|o| o.get_preferred_allocation_available && !o.pre_start_required));
    let mut dp = kubelet.dial(&reg).await;
    let opts = dp.get_device_plugin_options(api::Empty {}).await.unwrap().into_inner();
    assert!(opts.get_preferred_allocation_available);
    let mut s = dp.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    // The first answer is the node as it is.
    let list = next_list(&mut s, Duration::from_secs(5)).await;
    assert_eq!(health(&list), all("Healthy"));
    for d in &list {
        let nodes: Vec<i64> = d.topology.as_ref().map(|t| t.nodes.iter().map(|n| n.id).collect()).unwrap_or_default();
        assert_eq!(nodes, vec![1], "{} topology", d.id);
    }
}

#[tokio::test]
async fn list_and_watch_follows_rdma_port_state_and_pf_link_within_seconds() {
    let node = Node::new("health");
    let (_kubelet, _plugin, mut s) = watching(&node).await;

    node.tree.rdma_port("mlx5_2", 1, "1: DOWN", "Ethernet").unwrap();
    let mut want = all("Healthy");
    want[0].1 = "Unhealthy".into();
    let took = until_health(&mut s, &want, Duration::from_secs(5)).await;
    eprintln!("port DOWN reached ListAndWatch in {took:?}");

    node.tree.rdma_port("mlx5_2", 1, "4: ACTIVE", "Ethernet").unwrap();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;

    node.tree.netdev_state("ens1f0", "down", 1).unwrap();
    let took = until_health(&mut s, &all("Unhealthy"), Duration::from_secs(5)).await;
    eprintln!("PF link down reached ListAndWatch in {took:?}");
    node.tree.netdev_state("ens1f0", "up", 1).unwrap();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;

    // A VF that goes away stays listed, Unhealthy, so the kubelet does not count it as free.
    node.tree.remove_vf(VF1).unwrap();
    let mut want = all("Healthy");
    want[1].1 = "Unhealthy".into();
    until_health(&mut s, &want, Duration::from_secs(5)).await;
    assert!(_plugin.log().contains(&format!("{VF1} is Unhealthy: the VF is gone")), "{}", _plugin.log());
}

#[tokio::test]
async fn allocate_answers_exactly_the_vfs_char_devices_env_and_device_info() {
    let node = Node::new("allocate");
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let _plugin =
        node.start(&["--config", node.config(r#"{"resources":[{"name":"example.com/cx6_rdma"}]}"#).to_str().unwrap()]);
    let reg = kubelet.next_registration(Duration::from_secs(10)).await;
    assert_eq!(reg.resource_name, "example.com/cx6_rdma");
    let mut dp = kubelet.dial(&reg).await;
    let req = |ids: &[&str]| api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    };
    let r = dp.allocate(req(&[VF0])).await.unwrap().into_inner();
    let c = &r.container_responses[0];
    let dev = node.dir.join("dev");
    let mut specs: Vec<(String, String, String)> =
        c.devices.iter().map(|d| (d.container_path.clone(), d.host_path.clone(), d.permissions.clone())).collect();
    specs.sort();
    let host = |p: &str| dev.join(p).display().to_string();
    assert_eq!(
        specs,
        vec![
            ("/dev/infiniband/rdma_cm".into(), host("infiniband/rdma_cm"), "rw".into()),
            ("/dev/infiniband/uverbs2".into(), host("infiniband/uverbs2"), "rw".into()),
        ],
        "VF0's verbs device and rdma_cm, nothing of VF1 (uverbs3)"
    );
    assert_eq!(c.envs.get("PCIDEVICE_EXAMPLE_COM_CX6_RDMA").map(String::as_str), Some(VF0));
    let info: serde_json::Value = serde_json::from_str(&c.envs["PCIDEVICE_EXAMPLE_COM_CX6_RDMA_INFO"]).unwrap();
    assert_eq!(info[VF0]["rdma"]["uverbs"], "/dev/infiniband/uverbs2");
    assert_eq!(info[VF0]["rdma"]["rdma_dev"], "mlx5_2");
    assert_eq!(info[VF0]["generic"]["deviceID"], VF0);

    let file = node.dir.join("devinfo").join(format!("example.com-cx6_rdma-{VF0}-device.json"));
    let doc: serde_json::Value = serde_json::from_str(&fs::read_to_string(&file).expect("device-info file")).unwrap();
    assert_eq!(doc["type"], "pci");
    assert_eq!(doc["version"], "1.1.0");
    assert_eq!(doc["pci"]["pci-address"], VF0);
    assert_eq!(doc["pci"]["rdma-device"], "mlx5_2");
    assert_eq!(doc["pci"]["pf-pci-address"], PF);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o444);

    let r = dp.allocate(req(&[VFIO])).await.unwrap().into_inner();
    let mut paths: Vec<String> = r.container_responses[0].devices.iter().map(|d| d.container_path.clone()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/dev/vfio/42".to_string(), "/dev/vfio/vfio".to_string()]);

    let e = dp.allocate(req(&["0000:99:00.1"])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("0000:99:00.1"), "{}", e.message());
    // A character device the node lacks fails the allocation, naming it, rather than a container start.
    fs::remove_file(dev.join("infiniband/uverbs3")).unwrap();
    let e = dp.allocate(req(&[VF1])).await.unwrap_err();
    assert!(e.message().contains("uverbs3 does not exist"), "{}", e.message());

    let pref = dp
        .get_preferred_allocation(api::PreferredAllocationRequest {
            container_requests: vec![api::ContainerPreferredAllocationRequest {
                available_device_i_ds: vec![VFIO.into(), VF1.into(), VF0.into()],
                must_include_device_i_ds: vec![VF1.into()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pref.container_responses[0].device_i_ds, vec![VF1.to_string(), VF0.to_string()]);
}

/// Two more PFs (rails) with two mlx5 VFs each, both under the PCIe root complex `pci0000:5d` as real sysfs lays
/// them out (`bus/pci/devices/<address>` a link into `devices/pci0000:5d/…`); the node's first PF has no such link.
fn two_more_rails(node: &Node) -> [[&'static str; 2]; 2] {
    let rails = [
        ("0000:5e:00.0", "ens2f0", ["0000:5e:00.2", "0000:5e:00.3"], 4),
        ("0000:5f:00.0", "ens2f1", ["0000:5f:00.2", "0000:5f:00.3"], 6),
    ];
    let t = &node.tree;
    for (pf, netdev, vfs, first_rdma) in rails {
        for pci in std::iter::once(pf).chain(vfs) {
            let real = t.root.join("devices/pci0000:5d/0000:5d:00.0").join(pci);
            fs::create_dir_all(&real).unwrap();
            std::os::unix::fs::symlink(format!("../../../devices/pci0000:5d/0000:5d:00.0/{pci}"), t.dev(pci)).unwrap();
        }
        t.pf(pf, netdev, 2).unwrap();
        t.pci_ids(pf, "15b3", "101d", 1).unwrap();
        t.netdev_state(netdev, "up", 1).unwrap();
        for (i, vf) in vfs.iter().enumerate() {
            let n = first_rdma + i;
            t.mlx5_vf(pf, i as u32, vf, &format!("{netdev}v{i}"), &format!("mlx5_{n}"), 1).unwrap();
        }
    }
    [rails[0].2, rails[1].2]
}

/// Asks the plugin for `size` of `available` with `must` included, as the kubelet does before Allocate.
async fn preferred(
    dp: &mut DevicePluginClient<tonic::transport::Channel>,
    available: &[&str],
    must: &[&str],
    size: i32,
) -> Vec<String> {
    let ids = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    let req = api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_i_ds: ids(available),
            must_include_device_i_ds: ids(must),
            allocation_size: size,
        }],
    };
    dp.get_preferred_allocation(req).await.unwrap().into_inner().container_responses.remove(0).device_i_ds
}

#[tokio::test]
async fn preferred_allocation_spreads_over_pfs_unless_the_resource_packs() {
    let node = Node::new("rails");
    let [e, f] = two_more_rails(&node);
    let mut all = vec![VF0, VF1, e[0], e[1], f[0], f[1]];
    all.sort();
    for allocation in ["spread", "pack"] {
        let mut kubelet = Kubelet::start(&node.kubelet_dir());
        let cfg =
            format!(r#"{{"resources":[{{"allocation":"{allocation}","selectors":{{"drivers":["mlx5_core"]}}}}]}}"#);
        let plugin = node.start(&["--config", node.config(&cfg).to_str().unwrap()]);
        let reg = kubelet.next_registration(Duration::from_secs(10)).await;
        let mut dp = kubelet.dial(&reg).await;
        let mut s = dp.list_and_watch(api::Empty {}).await.unwrap().into_inner();
        let healthy: Vec<(String, String)> = all.iter().map(|v| (v.to_string(), "Healthy".to_string())).collect();
        assert_eq!(health(&next_list(&mut s, Duration::from_secs(5)).await), healthy);
        if allocation == "pack" {
            // Today's choice: on one PF.
            assert_eq!(preferred(&mut dp, &all, &[], 2).await, vec![VF0, VF1]);
            assert_eq!(preferred(&mut dp, &all, &[f[1]], 2).await, vec![f[1], f[0]]);
            break;
        }
        // Three VFs over three PFs: one on each rail.
        assert_eq!(preferred(&mut dp, &all, &[], 3).await, vec![VF0, e[0], f[0]], "one VF per PF");
        // With a VF of 5f included, the next is on the PF under the same PCIe root (5e), not on 3b, which has
        // the lower address.
        assert_eq!(preferred(&mut dp, &all, &[f[1]], 2).await, vec![f[1], e[0]]);
        // Four over three PFs: a second VF only once each PF has one, under the root of the others.
        assert_eq!(preferred(&mut dp, &all, &[], 4).await, vec![VF0, e[0], f[0], e[1]]);
        drop(plugin);
        kubelet.stop_and_clean(true).await;
    }
}

#[tokio::test]
async fn a_bad_config_exits_non_zero_naming_the_key_and_advertises_nothing() {
    let node = Node::new("badconf");
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    for (text, key) in [
        (r#"{"resources":[{"selectors":{"linkTypes":["eth"]}}]}"#, "resources[0].selectors.linkTypes[0]"),
        (r#"{"resources":[{"name":"hca"}]}"#, "resources[0].name"),
        (r#"{"resources":[{"selector":{}}]}"#, "unknown field `selector`"),
        (r#"{"numVfs":{"ens9":2}}"#, "numVfs.ens9"),
        (r#"{"numVfs":{"ens1f0":9}}"#, "numVfs.ens1f0: 9 is more than the 8"),
    ] {
        let cfg = node.config(text);
        let out = node.command(&["--config", cfg.to_str().unwrap()]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(key), "{text}: stderr names {key:?}: {err}");
    }
    let out = node.command(&[]).env("RDMA_RESOURCE_NAME", "rdma/").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RDMA_RESOURCE_NAME"));
    let socks: Vec<_> = fs::read_dir(node.kubelet_dir()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(socks, vec![std::ffi::OsString::from("kubelet.sock")], "no plugin socket was created");
    assert!(kubelet.registered.try_recv().is_err(), "nothing registered");
    assert_eq!(fs::read_to_string(node.tree.dev(PF).join("sriov_numvfs")).unwrap().trim(), "8", "numVfs untouched");
}

#[tokio::test]
async fn registers_again_after_the_kubelet_restarts_and_waits_for_a_late_kubelet() {
    let node = Node::new("restart");
    // No kubelet yet: the plugin keeps trying.
    let plugin = node.start(&[]);
    plugin.wait_log("registering with the kubelet").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let reg = kubelet.next_registration(Duration::from_secs(15)).await;
    assert_eq!(reg.resource_name, "rdma/hca");
    let mut s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;

    kubelet.stop_and_clean(true).await;
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let reg = kubelet.next_registration(Duration::from_secs(15)).await;
    assert_eq!(reg.resource_name, "rdma/hca");
    assert!(node.kubelet_dir().join(&reg.endpoint).exists(), "the plugin serves its socket again");
    let mut s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;

    // A kubelet that comes back without removing the plugin's socket: its new kubelet.sock is enough.
    kubelet.stop_and_clean(false).await;
    assert!(node.kubelet_dir().join(&reg.endpoint).exists());
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let again = kubelet.next_registration(Duration::from_secs(15)).await;
    assert_eq!(again.endpoint, reg.endpoint);
    let mut s = kubelet.dial(&again).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    let log = plugin.log();
    assert!(log.matches("registering with the kubelet").count() <= 3, "bounded retry noise:\n{log}");
}

#[tokio::test]
async fn num_vfs_is_set_at_start_and_refused_while_a_vf_is_attached() {
    let node = Node::new("numvfs");
    let numvfs = node.tree.dev(PF).join("sriov_numvfs");
    let cfg = node.config(r#"{"numVfs":{"ens1f0":4}}"#);
    fs::write(node.dir.join("state").join(format!("{VF0}.json")), b"{}").unwrap();
    let plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    plugin.wait_log("numVfs.ens1f0: not changing ens1f0's VF count from 8 to 4").await;
    assert!(plugin.log().contains(VF0), "{}", plugin.log());
    assert_eq!(fs::read_to_string(&numvfs).unwrap().trim(), "8");
    drop(plugin);

    fs::remove_file(node.dir.join("state").join(format!("{VF0}.json"))).unwrap();
    let plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    plugin.wait_log("numVfs.ens1f0: set (8 -> 4)").await;
    assert_eq!(fs::read_to_string(&numvfs).unwrap().trim(), "4");
}

#[test]
fn dry_run_prints_what_would_be_advertised_and_why_a_vf_is_unhealthy() {
    let node = Node::new("dryrun");
    node.tree.rdma_port("mlx5_3", 1, "1: DOWN", "Ethernet").unwrap();
    let cfg = node
        .config(r#"{"resources":[{"name":"rdma/hca","selectors":{"pfNames":["ens1f0"],"drivers":["mlx5_core"]}}]}"#);
    let out = node.command(&["--config", cfg.to_str().unwrap(), "--dry-run"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devs = doc["resources"][0]["devices"].as_array().unwrap();
    let ids: Vec<&str> = devs.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![VF0, VF1], "the vfio-pci VF is not selected by drivers: [mlx5_core]");
    assert_eq!(devs[0]["health"], "Healthy");
    assert_eq!(devs[1]["health"], "Unhealthy");
    assert_eq!(devs[1]["problems"][0], "RDMA device mlx5_3 port 1 is DOWN, not ACTIVE");
    assert_eq!(doc["resources"][0]["env"], "PCIDEVICE_RDMA_HCA");
    assert!(fs::read_dir(node.kubelet_dir()).unwrap().next().is_none(), "a dry run creates no socket");

    // The original setup's variables: one resource, PFs named by their RDMA device.
    for (spec, want) in [("mlx5_0", 3), ("mlx5_9", 0), ("", 3)] {
        let out = node
            .command(&["--dry-run"])
            .env("RDMA_RESOURCE_NAME", "example.com/hca")
            .env("RDMA_DEVICE_SPEC_STR", spec)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["resources"][0]["name"], "example.com/hca");
        assert_eq!(doc["resources"][0]["devices"].as_array().unwrap().len(), want, "RDMA_DEVICE_SPEC_STR={spec:?}");
    }
}

/// A CNI attachment record for `pci` as ADD writes it (format 2), with or without an RDMA device.
const PLAIN: &str = "0000:3b:00.5";

#[tokio::test]
async fn an_attached_vf_without_rdma_never_joins_a_require_rdma_resource() {
    let node = Node::new("member");
    node.tree.vf(PF, 3, PLAIN, Some("ens1f0v3"), "mlx5_core").unwrap();
    node.tree.pci_ids(PLAIN, "15b3", "101e", 1).unwrap();
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let cfg = node.config(r#"{"resources":[{"name":"rdma/hca"},{"name":"net/vf","requireRdma":false}]}"#);
    let _plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    let mut streams = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let reg = kubelet.next_registration(Duration::from_secs(10)).await;
        let s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
        streams.insert(reg.resource_name.clone(), s);
    }
    let h = |ids: &[&str]| -> Vec<(String, String)> { ids.iter().map(|i| (i.to_string(), "Healthy".into())).collect() };
    let hca = streams.get_mut("rdma/hca").unwrap();
    until_health(hca, &h(&[VF0, VF1, VFIO]), Duration::from_secs(5)).await;
    until_health(streams.get_mut("net/vf").unwrap(), &h(&[PLAIN]), Duration::from_secs(5)).await;

    // The kubelet gave PLAIN to a pod from net/vf and the CNI's ADD wrote its record (no RDMA device on it).
    record(&node, PLAIN, false);
    // VF0's ADD found its RDMA device and moved it into the pod: the host sees none on VF0 any more.
    record(&node, VF0, true);
    fs::remove_dir_all(node.tree.dev(VF0).join("infiniband")).ok();
    fs::remove_dir_all(node.dir.join("sys/class/infiniband/mlx5_2")).ok();
    // Several polls later rdma/hca still lists exactly its own VFs and net/vf still has PLAIN, Healthy.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let out = node.command(&["--config", cfg.to_str().unwrap(), "--dry-run"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = |i: usize| -> Vec<String> {
        doc["resources"][i]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| format!("{} {}", d["id"], d["health"]))
            .collect()
    };
    let q = |id: &str| format!("\"{id}\" \"Healthy\"");
    assert_eq!(listed(0), vec![q(VF0), q(VF1), q(VFIO)], "rdma/hca: PLAIN is not an RDMA VF, in a pod or not");
    assert_eq!(listed(1), vec![q(PLAIN)], "net/vf keeps PLAIN");
    // What the kubelet was sent meanwhile: never PLAIN under rdma/hca.
    let hca = streams.get_mut("rdma/hca").unwrap();
    while let Ok(update) =
        tokio::time::timeout(Duration::from_millis(1000), next_list(hca, Duration::from_secs(5))).await
    {
        assert_eq!(health(&update), h(&[VF0, VF1, VFIO]), "rdma/hca as the kubelet saw it");
    }
}

#[tokio::test]
async fn an_unhealthy_vf_the_plugin_offers_stays_withheld_from_nads_without_a_resource_request() {
    use sriov_rdma_cni::kubelet::{Checkpoint, CHECKPOINT, OFFERED};
    use sriov_rdma_cni::model::PciAddr;
    let node = Node::new("offered");
    let (_kubelet, _plugin, mut s) = watching(&node).await;
    // A link flap: every VF Unhealthy, and the kubelet's checkpoint then registers none of them.
    node.tree.netdev_state("ens1f0", "down", 1).unwrap();
    until_health(&mut s, &all("Unhealthy"), Duration::from_secs(5)).await;
    let cp_file = node.kubelet_dir().join(CHECKPOINT);
    fs::write(&cp_file, br#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"rdma/hca":[]}},"Checksum":1}"#)
        .unwrap();
    let cp = Checkpoint::read(&cp_file).unwrap().expect("a checkpoint");
    for vf in [VF0, VF1, VFIO] {
        assert_eq!(cp.withheld(&PciAddr::parse(vf).unwrap(), None), Some("rdma/hca"), "{vf} stays the kubelet's");
    }
    // The kubelet's cleanup at its restart removes files of its directory, not the plugin's subdirectory.
    assert!(node.kubelet_dir().join(OFFERED).is_file());
}

#[tokio::test]
async fn num_vfs_is_refused_while_the_kubelet_holds_a_vf_without_a_record() {
    let node = Node::new("numvfs-kubelet");
    let numvfs = node.tree.dev(PF).join("sriov_numvfs");
    let cfg = node.config(r#"{"numVfs":{"ens1f0":4}}"#);
    // A DPDK pod: the kubelet allocated the vfio-pci VF, no NAD, no record.
    let cp = format!(
        r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"u-dpdk","ContainerName":"c","ResourceName":"rdma/hca","DeviceIDs":{{"1":["{VFIO}"]}},"AllocResp":""}}],"RegisteredDevices":{{"rdma/hca":["{VFIO}"]}}}},"Checksum":1}}"#
    );
    fs::write(node.kubelet_dir().join("kubelet_internal_checkpoint"), cp).unwrap();
    let dry = node.command(&["--config", cfg.to_str().unwrap(), "--dry-run"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(doc["numVfs"][0]["action"], "refused", "{doc}");
    let plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    plugin.wait_log("numVfs.ens1f0: not changing ens1f0's VF count from 8 to 4").await;
    assert!(plugin.log().contains(&format!("{VFIO} (rdma/hca of pod u-dpdk)")), "{}", plugin.log());
    assert_eq!(fs::read_to_string(&numvfs).unwrap().trim(), "8");
}

#[tokio::test]
async fn num_vfs_waits_for_an_add_in_flight_and_then_sees_its_record() {
    let node = Node::new("numvfs-lock");
    let numvfs = node.tree.dev(PF).join("sriov_numvfs");
    let cfg = node.config(r#"{"numVfs":{"ens1f0":4}}"#);
    // An ADD in flight holds VF1's lock and writes its record only later: numVfs waits for it, then sees it.
    let store = sriov_rdma_cni::flow::state::Store::at(&node.dir.join("state")).unwrap();
    let lock = store.lock(&sriov_rdma_cni::model::PciAddr::parse(VF1).unwrap()).unwrap();
    let plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fs::read_to_string(&numvfs).unwrap().trim(), "8", "not changed under an ADD in flight");
    record(&node, VF1, true);
    drop(lock);
    plugin.wait_log("numVfs.ens1f0: not changing ens1f0's VF count from 8 to 4").await;
    assert!(plugin.log().contains(&format!("VF {VF1} attached to a pod")), "{}", plugin.log());
    assert_eq!(fs::read_to_string(&numvfs).unwrap().trim(), "8");
}

/// The SR-IOV network device plugin's own config.json (its README's form, v3.11): `resourceList`, the default
/// prefix intel.com, `#first-last` VF ranges on pfNames and rootDevices, selectors as a list (the first selector
/// that takes a VF decides its needVhostNet), isRdma false by default, excludeTopology and additionalInfo.
const SRIOVDP: &str = r#"{
  "resourceList": [
    {"resourceName": "cx6_rdma", "resourcePrefix": "nvidia.com",
     "selectors": [{"vendors": ["15b3"], "pfNames": ["ens1f0#0-1"], "isRdma": true}]},
    {"resourceName": "sriov_mixed", "excludeTopology": true,
     "selectors": [{"drivers": ["vfio-pci"], "rootDevices": ["0000:3b:00.0#2-3"]},
                   {"pfNames": ["ens1f0#0,3"], "needVhostNet": true}],
     "additionalInfo": {"*": {"token": "all", "zone": "a"}, "0000:3b:00.5": {"token": "mine"}}},
    {"resourceName": "rdma_none",
     "selectors": {"pfNames": ["ens1f0#3"], "isRdma": true}}
  ]
}"#;

#[tokio::test]
async fn the_sriov_network_device_plugins_config_offers_exactly_the_vfs_its_ranges_and_selectors_name() {
    let node = Node::new("sriovdp");
    node.tree.vf(PF, 3, PLAIN, Some("ens1f0v3"), "mlx5_core").unwrap();
    node.tree.pci_ids(PLAIN, "15b3", "101e", 1).unwrap();
    for d in ["vhost-net", "net/tun"] {
        let p = node.dir.join("dev").join(d);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b"").unwrap();
    }
    let cfg = node.config(SRIOVDP);
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let plugin = node.start(&["--config", cfg.to_str().unwrap()]);
    let mut lists = std::collections::BTreeMap::new();
    let mut clients = std::collections::BTreeMap::new();
    for _ in 0..3 {
        let reg = kubelet.next_registration(Duration::from_secs(10)).await;
        let mut dp = kubelet.dial(&reg).await;
        let mut s = dp.list_and_watch(api::Empty {}).await.unwrap().into_inner();
        lists.insert(reg.resource_name.clone(), next_list(&mut s, Duration::from_secs(5)).await);
        clients.insert(reg.resource_name, dp);
    }
    let ids = |name: &str| -> Vec<String> { lists[name].iter().map(|d| d.id.clone()).collect() };
    // pfNames ens1f0#0-1 with isRdma: VFs 0 and 1 (both have an RDMA device), not 2 or 3.
    assert_eq!(ids("nvidia.com/cx6_rdma"), vec![VF0, VF1]);
    // Selector 1 takes the vfio-pci VF 2 of rootDevices #2-3; selector 2 (#0,3) takes VF 3, which has no RDMA
    // device (isRdma is false by default); VF 0 is the first resource's.
    assert_eq!(ids("intel.com/sriov_mixed"), vec![VFIO, PLAIN]);
    assert!(lists["intel.com/sriov_mixed"].iter().all(|d| d.topology.is_none()), "excludeTopology");
    assert!(lists["nvidia.com/cx6_rdma"].iter().all(|d| d.topology.is_some()));
    // isRdma: true, and VF 3 has no RDMA device: nothing, and the log says so.
    assert_eq!(ids("intel.com/rdma_none"), Vec::<String>::new());
    plugin.wait_log("intel.com/rdma_none: its selectors match no VF on this node").await;
    assert!(!plugin.log().contains("intel.com/sriov_mixed: its selectors match no VF"), "{}", plugin.log());

    let mixed = clients.get_mut("intel.com/sriov_mixed").unwrap();
    let req = |id: &str| api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest { devices_ids: vec![id.to_string()] }],
    };
    let r = mixed.allocate(req(PLAIN)).await.unwrap().into_inner();
    let c = &r.container_responses[0];
    let mut paths: Vec<&str> = c.devices.iter().map(|d| d.container_path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/dev/net/tun", "/dev/vhost-net"], "needVhostNet of the selector that took VF 3");
    let info: serde_json::Value = serde_json::from_str(&c.envs["PCIDEVICE_INTEL_COM_SRIOV_MIXED_INFO"]).unwrap();
    assert_eq!(info[PLAIN]["extra"], serde_json::json!({"token": "mine", "zone": "a"}), "additionalInfo");
    assert_eq!(info[PLAIN]["vhost"]["net-mount"], "/dev/vhost-net");
    // The vfio-pci VF was taken by the first selector, which has no needVhostNet.
    let r = mixed.allocate(req(VFIO)).await.unwrap().into_inner();
    let mut paths: Vec<&str> = r.container_responses[0].devices.iter().map(|d| d.container_path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/dev/vfio/42", "/dev/vfio/vfio"]);
    let info: serde_json::Value =
        serde_json::from_str(&r.container_responses[0].envs["PCIDEVICE_INTEL_COM_SRIOV_MIXED_INFO"]).unwrap();
    assert_eq!(info[VFIO]["extra"], serde_json::json!({"token": "all", "zone": "a"}));

    // The same file through --dry-run (what doctor reads): the same lists and the warning.
    let out = node.command(&["--config", cfg.to_str().unwrap(), "--dry-run"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let res = doc["resources"].as_array().unwrap();
    assert_eq!(res[2]["name"], "intel.com/rdma_none");
    assert!(res[2]["warning"].as_str().is_some_and(|w| w.contains("match no VF")), "{}", res[2]);
    assert!(res[1]["warning"].is_null());
}

#[test]
fn our_format_takes_the_same_vf_ranges_and_refuses_a_malformed_one_naming_the_key() {
    let node = Node::new("ranges");
    let dry = |text: &str| {
        let cfg = node.config(text);
        node.command(&["--config", cfg.to_str().unwrap(), "--dry-run"]).output().unwrap()
    };
    let out = dry(r#"{"resources":[{"name":"rdma/hca","selectors":{"pfNames":["ens1f0#1-2"]}}]}"#);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> =
        doc["resources"][0]["devices"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![VF1, VFIO], "VFs 1 and 2 of ens1f0, not 0");
    for (bad, key) in [
        (r#"{"resources":[{"selectors":{"pfNames":["ens1f0","ens1f0#3-1"]}}]}"#, "resources[0].selectors.pfNames[1]"),
        (
            r#"{"resourceList":[{"resourceName":"a","selectors":[{},{"rootDevices":["0000:3b:00.0#x"]}]}]}"#,
            "resourceList[0].selectors[1].rootDevices[0]",
        ),
    ] {
        let out = dry(bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(key), "{bad}: {err}");
        assert!(out.stdout.is_empty(), "nothing advertised");
    }
}

#[test]
fn version_and_help_go_to_stdout_and_a_bad_command_line_to_stderr_with_exit_2() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin")).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or("unknown".to_string(), |o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = format!("sriov-rdma-device-plugin {} (commit {head})\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(run(&["--version"]), (Some(0), want, String::new()));
    for help in ["--help", "-h"] {
        let (code, out, err) = run(&[help]);
        assert_eq!((code, err.as_str()), (Some(0), ""), "{help}");
        assert!(out.starts_with("usage: sriov-rdma device-plugin"), "{help}: {out}");
    }
    for (args, says) in [(&["--bogus"][..], "unknown argument \"--bogus\""), (&["--config"], "--config needs a value")]
    {
        let (code, out, err) = run(args);
        assert_eq!((code, out.as_str()), (Some(2), ""), "{args:?}: {err}");
        assert!(err.starts_with(&format!("sriov-rdma device-plugin: {says}")) && err.contains("usage: "), "{err}");
    }
}
