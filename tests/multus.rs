//! The Multus / DRA delegate contract, on a stand-in VF (veth behind the fake sysfs tree, tests/common):
//! the plugin is invoked the way Multus invokes a delegate through libcni. The NAD config comes from
//! examples/; Multus injects `deviceID` (and `pciBusID`) into it; libcni adds `runtimeConfig` with only
//! the capabilities the config declares (`ips`, `mac`, `CNIDeviceInfoFile`); CNI_ARGS carry
//! `IgnoreUnknown=true;K8S_POD_NAMESPACE;K8S_POD_NAME;K8S_POD_INFRA_CONTAINER_ID;K8S_POD_UID` in Multus's
//! order; CNI_IFNAME is `net1`. DEL may come without `prevResult`, and with a fresh config that lacks
//! what was injected at ADD. Checks read the kernel (`ip -n`), the device-info file Multus copies into
//! the network-status annotation, and the record store. Root is required (SRIOV_RDMA_SKIP_ROOT_TESTS=1
//! skips).

mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

const POD_UID: &str = "4f6a3c1e-8d2b-4e57-9a10-2b7c5d9e0f31";

fn ready(what: &str) -> bool {
    require::required(what, &["/usr/lib/cni/static"])
}

/// `spec.config` of a NetworkAttachmentDefinition in examples/.
fn nad_config(file: &str, name: &str) -> Value {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(file)).unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).unwrap();
        if v["kind"] == "NetworkAttachmentDefinition" && v["metadata"]["name"] == name {
            return serde_json::from_str(v["spec"]["config"].as_str().unwrap()).unwrap();
        }
    }
    panic!("no NAD {name} in examples/{file}");
}

/// The stand-in PF (a veth) has no VF table: the PF-side settings of the example cannot be applied
/// there (the plugin refuses them up front, see the last test); `make e2e` applies them on real VFs.
fn for_stand_in(mut conf: Value) -> Value {
    for k in ["vlan", "vlanQoS", "vlanProto", "spoofchk", "trust", "link_state", "min_tx_rate", "max_tx_rate"] {
        conf.as_object_mut().unwrap().remove(k);
    }
    conf
}

/// What Multus hands the delegate: the config with the VF injected, and libcni's `runtimeConfig` made
/// of the capability arguments the config declares (the others are dropped, as libcni does).
fn delegate(conf: &Value, pci: &str, capability_args: &Value) -> Value {
    let mut c = conf.clone();
    c["deviceID"] = pci.into();
    c["pciBusID"] = pci.into();
    let mut rc = serde_json::Map::new();
    for (k, v) in capability_args.as_object().unwrap() {
        if c["capabilities"][k] == true {
            rc.insert(k.clone(), v.clone());
        }
    }
    if !rc.is_empty() {
        c["runtimeConfig"] = Value::Object(rc);
    }
    c
}

fn multus_env(bed: &Bed, cmd: &str, sandbox: &str, ns: &str) -> HashMap<String, String> {
    let mut e = bed.env(cmd, sandbox, ns, "net1");
    e.insert(
        "CNI_ARGS".into(),
        format!(
            "IgnoreUnknown=true;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nccl-worker-0;\
             K8S_POD_INFRA_CONTAINER_ID={sandbox};K8S_POD_UID={POD_UID}"
        ),
    );
    e
}

/// Multus's auto-generated device-info path for a delegate with a deviceID: `<net>-<sandbox>_<ifname>`
/// under its devinfo directory (here under the bed, which does not exist yet: the plugin creates it).
fn devinfo_path(bed: &Bed, net: &str, sandbox: &str) -> PathBuf {
    bed.dir.join("devinfo/cni").join(format!("{net}-{sandbox}_net1"))
}

struct Attached {
    bed: Bed,
    ns: String,
    sandbox: String,
    conf: Value,
    injected: Value,
    info: PathBuf,
    before: (String, String, u64, bool),
}

/// ADD as Multus does it, with `ips` and the device-info path (no `mac`: the stand-in PF cannot set an
/// admin MAC), and the checks of what Multus reads back.
fn multus_add(tag: &str) -> Attached {
    let mut bed = Bed::new(tag, 2);
    let ns = bed.netns();
    let sandbox = format!("{tag}5d0c2a9e41b7f3c86e2d1a0b9c8f7e6d5c4b3a29180f7e6d5c4b3a2918");
    let conf = for_stand_in(nad_config("nad-rdma-static.yaml", "sriov-rdma-static"));
    let net = conf["name"].as_str().unwrap().to_string();
    let info = devinfo_path(&bed, &net, &sandbox);
    let (pci, vf) = bed.vfs[1].clone();
    let before = identity(None, &vf).unwrap();
    let caps = json!({"ips": ["10.77.5.5/24"], "CNIDeviceInfoFile": info, "portMappings": []});
    let injected = delegate(&conf, &pci, &caps);
    assert_eq!(
        injected["runtimeConfig"],
        json!({"ips": ["10.77.5.5/24"], "CNIDeviceInfoFile": info}),
        "libcni passes the declared capabilities only"
    );
    let r = bed.run_env(&multus_env(&bed, "ADD", &sandbox, &ns), &injected.to_string());
    r.ok();
    let j = r.json();
    // The result Multus turns into the network-status annotation.
    assert_eq!(j["cniVersion"], "1.0.0");
    let ifs = j["interfaces"].as_array().unwrap();
    assert_eq!(ifs.len(), 1, "{j}");
    assert_eq!(ifs[0]["name"], "net1");
    assert_eq!(ifs[0]["mac"], before.1.as_str(), "the VF's own MAC");
    assert_eq!(ifs[0]["sandbox"], format!("/var/run/netns/{ns}"));
    assert_eq!(j["ips"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["ips"][0]["address"], "10.77.5.5/24", "the address from runtimeConfig.ips (static IPAM)");
    assert_eq!(j["ips"][0]["interface"], 0);
    // The kernel's view: the deviceID's VF is net1 in the pod with the MTU and the address.
    let l = link(Some(&ns), "net1").expect("net1 in the pod");
    assert_eq!(l["address"], before.1.as_str());
    assert_eq!(l["mtu"], 9000);
    assert_eq!(addrs(&ns, "net1").into_iter().filter(|a| !a.contains(':')).collect::<Vec<_>>(), ["10.77.5.5/24"]);
    assert_eq!(identity(None, &vf), None, "the VF left the host");
    assert!(identity(None, &bed.vfs[0].1).is_some(), "only the injected VF is taken");
    // The NPWG device-info file (spec 1.1.0) that Multus loads into the annotation's device-info.
    let di: Value = serde_json::from_str(&fs::read_to_string(&info).expect("device-info file written")).unwrap();
    assert_eq!(
        di,
        json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": pci, "pf-pci-address": bed.pf_pci}})
    );
    let recs = bed.records();
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0]["container_id"].as_str(), recs[0]["ifname"].as_str()), (Some(sandbox.as_str()), Some("net1")));
    Attached { bed, ns, sandbox, conf, injected, info, before }
}

fn assert_given_back(a: &Attached) {
    assert_eq!(identity(None, &a.bed.vfs[1].1).as_ref(), Some(&a.before), "VF back: name, MAC, MTU, up state");
    assert!(link(Some(&a.ns), "net1").is_none());
    assert!(a.bed.records().is_empty(), "no attachment record: {:?}", a.bed.records());
    assert!(!a.info.exists(), "DEL removed the device-info file ADD wrote");
}

#[test]
fn multus_add_then_del_without_prev_result() {
    if !ready("multus_add_then_del_without_prev_result") {
        return;
    }
    let a = multus_add("mu1");
    // DEL with the same injected config and no prevResult (Multus without a cached result).
    assert!(a.injected.get("prevResult").is_none());
    let del = multus_env(&a.bed, "DEL", &a.sandbox, &a.ns);
    a.bed.run_env(&del, &a.injected.to_string()).ok();
    assert_given_back(&a);
    // A second DEL, as a runtime retry, still succeeds and changes nothing.
    a.bed.run_env(&del, &a.injected.to_string()).ok();
    assert_given_back(&a);
}

#[test]
fn multus_del_with_a_fresh_config_lacking_the_injections() {
    if !ready("multus_del_with_a_fresh_config_lacking_the_injections") {
        return;
    }
    let a = multus_add("mu2");
    // The NAD config as stored: no deviceID, no runtimeConfig, no prevResult. The record finds the VF
    // and the device-info file by (network, container, ifname).
    let fresh = a.conf.to_string();
    assert!(a.conf.get("deviceID").is_none() && a.conf.get("runtimeConfig").is_none());
    a.bed.run_env(&multus_env(&a.bed, "DEL", &a.sandbox, &a.ns), &fresh).ok();
    assert_given_back(&a);
}

#[test]
fn multus_device_plugin_info_file_is_left_to_multus() {
    if !ready("multus_device_plugin_info_file_is_left_to_multus") {
        return;
    }
    // Multus copies the device plugin's file to CNIDeviceInfoFile before ADD: the plugin keeps it, and
    // DEL leaves it (Multus removes it itself).
    let mut bed = Bed::new("mu3", 1);
    let ns = bed.netns();
    let sandbox = "mu3a7e1f0c9b8d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6";
    let conf = for_stand_in(nad_config("nad-rdma-static.yaml", "sriov-rdma-static"));
    let info = devinfo_path(&bed, conf["name"].as_str().unwrap(), sandbox);
    fs::create_dir_all(info.parent().unwrap()).unwrap();
    let (pci, vf) = bed.vfs[0].clone();
    // The device plugin's file names the same VF (it allocated it), with its own fields.
    let dp = format!(r#"{{"type":"pci","version":"1.1.0","pci":{{"pci-address":"{pci}","rdma-device":"mlx5_3"}}}}"#);
    fs::write(&info, &dp).unwrap();
    let before = identity(None, &vf).unwrap();
    let injected = delegate(&conf, &pci, &json!({"ips": ["10.77.5.6/24"], "CNIDeviceInfoFile": info}));
    bed.run_env(&multus_env(&bed, "ADD", sandbox, &ns), &injected.to_string()).ok();
    assert_eq!(fs::read_to_string(&info).unwrap(), dp, "the device plugin's file is kept");
    bed.run_env(&multus_env(&bed, "DEL", sandbox, &ns), &injected.to_string()).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert_eq!(fs::read_to_string(&info).unwrap(), dp, "DEL does not remove a file ADD did not write");
    assert!(bed.records().is_empty());
}

#[test]
fn multus_runtime_mac_on_a_pf_without_vf_table_is_refused_untouched() {
    if !ready("multus_runtime_mac_on_a_pf_without_vf_table_is_refused_untouched") {
        return;
    }
    // runtimeConfig.mac is the VF's admin MAC on the PF: a stand-in PF has no VF table to set (and later
    // restore) it, so ADD refuses before touching anything. On real VFs `make e2e` applies it.
    let mut bed = Bed::new("mu4", 1);
    let ns = bed.netns();
    let sandbox = "mu4b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1";
    let conf = for_stand_in(nad_config("nad-rdma-static.yaml", "sriov-rdma-static"));
    let info = devinfo_path(&bed, conf["name"].as_str().unwrap(), sandbox);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let caps = json!({"ips": ["10.77.5.7/24"], "mac": "02:00:00:4d:05:07", "CNIDeviceInfoFile": info});
    let injected = delegate(&conf, &pci, &caps);
    assert_eq!(injected["runtimeConfig"]["mac"], "02:00:00:4d:05:07");
    let r = bed.run_env(&multus_env(&bed, "ADD", sandbox, &ns), &injected.to_string());
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.msg().contains("mac 02:00:00:4d:05:07") && r.msg().contains("no VF table"), "{}", r.msg());
    assert_eq!(identity(None, &vf), Some(before), "the VF is untouched");
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty());
    assert!(!info.exists(), "no device-info file");
}

#[test]
fn every_example_nad_lets_the_device_info_path_through() {
    // libcni injects runtimeConfig.CNIDeviceInfoFile only when the config declares the capability:
    // without it, Multus could never see the VF's rdma-device.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut nads = 0;
    for e in fs::read_dir(&dir).unwrap().flatten() {
        if e.path().extension().and_then(|x| x.to_str()) != Some("yaml") {
            continue;
        }
        let text = fs::read_to_string(e.path()).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap();
            if v["kind"] != "NetworkAttachmentDefinition" {
                continue;
            }
            let c: Value = serde_json::from_str(v["spec"]["config"].as_str().unwrap()).unwrap();
            assert_eq!(c["capabilities"]["CNIDeviceInfoFile"], true, "{}: {c}", e.path().display());
            let d = delegate(&c, "0000:3b:02.1", &json!({"CNIDeviceInfoFile": "/run/x"}));
            assert_eq!(d["runtimeConfig"]["CNIDeviceInfoFile"], "/run/x");
            nads += 1;
        }
    }
    assert!(nads >= 2, "{nads} NADs in examples/");
}

/// A NAD migrated from sriov-cni + rdma-cni by changing only the first `type` still chains rdma-cni after us.
/// Multus writes the pod's delegates (each NAD's plugin list) to `<cniDir>/<sandbox>` before it runs them, and
/// cnitool reads the network's `.conflist` from `NETCONFPATH`: ADD sees the chain in either, refuses it with code 7
/// saying to remove the entry, and changes nothing; a chain without rdma-cni goes through.
#[test]
fn a_chain_running_rdma_cni_after_this_plugin_is_refused_before_any_change() {
    if !ready("a_chain_running_rdma_cni_after_this_plugin_is_refused_before_any_change") {
        return;
    }
    let mut bed = Bed::new("mu6", 1);
    let ns = bed.netns();
    let sandbox = "mu6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0";
    let conf = for_stand_in(nad_config("nad-rdma-static.yaml", "sriov-rdma-static"));
    let net = conf["name"].as_str().unwrap().to_string();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let injected = delegate(&conf, &pci, &json!({"ips": ["10.77.6.6/24"]}));
    let plugins = |after: &str| json!([conf, {"type": after, "deviceID": pci}]);
    let multus = bed.dir.join("no-multus");
    fs::create_dir_all(&multus).unwrap();
    let cache = |after: &str| {
        let list = json!({"cniVersion": "1.0.0", "name": net, "plugins": plugins(after)});
        json!([{"Conf": {}, "ConfList": list, "Name": net, "deviceID": pci, "Bytes": ""}]).to_string()
    };
    let unchanged = |why: &str| {
        assert_eq!(identity(None, &vf).as_ref(), Some(&before), "{why}: the VF stays on the host as it was");
        assert!(link(Some(&ns), "net1").is_none(), "{why}: nothing in the pod");
        assert!(bed.records().is_empty(), "{why}: no record");
    };

    fs::write(multus.join(sandbox), cache("rdma")).unwrap();
    let r = bed.run_env(&multus_env(&bed, "ADD", sandbox, &ns), &injected.to_string());
    assert!(!r.ok && r.code() == 7, "refused as an invalid configuration: {}", r.stdout);
    assert!(
        r.msg().contains("chains rdma-cni") && r.msg().contains("remove the {\"type\": \"rdma\"} entry"),
        "{}",
        r.msg()
    );
    assert!(r.msg().contains(&multus.join(sandbox).display().to_string()), "names where it saw the chain: {}", r.msg());
    unchanged("Multus chain with rdma-cni");

    // cnitool / podman: the network's .conflist in NETCONFPATH.
    fs::remove_file(multus.join(sandbox)).unwrap();
    let netd = bed.dir.join("no-net.d");
    fs::create_dir_all(&netd).unwrap();
    let file = netd.join("10-rdma.conflist");
    fs::write(&file, json!({"cniVersion": "1.0.0", "name": net, "plugins": plugins("rdma")}).to_string()).unwrap();
    let r = bed.run_env(&multus_env(&bed, "ADD", sandbox, &ns), &injected.to_string());
    assert!(!r.ok && r.code() == 7 && r.msg().contains(&file.display().to_string()), "{}", r.msg());
    unchanged("conflist with rdma-cni");

    // Another plugin after us is none of this check's business.
    fs::remove_file(&file).unwrap();
    fs::write(multus.join(sandbox), cache("tuning")).unwrap();
    let add = bed.run_env(&multus_env(&bed, "ADD", sandbox, &ns), &injected.to_string());
    add.ok();
    assert!(link(Some(&ns), "net1").is_some(), "attached when the chain has no rdma-cni");
    bed.run_env(&multus_env(&bed, "DEL", sandbox, &ns), &injected.to_string()).ok();
    unchanged("after DEL");
}
