//! A VF the kubelet manages is a pod's only if the kubelet allocated it to that pod (root only, host bed of
//! tests/common): ADD reads the kubelet's device manager checkpoint, written here as the kubelet writes it, and
//! matches CNI_ARGS K8S_POD_UID against its allocations. Every refusal is checked in the kernel and the store: the
//! stand-in VF still on the host as it was, nothing in the pod, no record.

mod common;
use common::*;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

macro_rules! root_only {
    () => {
        if !need_root() {
            return;
        }
    };
}

const RESOURCE: &str = "rdma/hca";
const POD: &str = "6f1c2a9e-0b4d-4c8e-9a51-3d2f7e8b1c00";
const OTHER_POD: &str = "0d9e8f7a-6b5c-4d3e-8f21-a0b1c2d3e4f5";

/// The bed's kubelet device-plugin directory and its checkpoint.
struct Kubelet {
    dir: PathBuf,
}

impl Kubelet {
    fn of(bed: &Bed) -> Kubelet {
        let dir = bed.dir.join("device-plugins");
        fs::create_dir_all(&dir).unwrap();
        Kubelet { dir }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("kubelet_internal_checkpoint")
    }

    /// The checkpoint as kubelet 1.37 marshals it: `registered` under RESOURCE, `allocated` (pod UID, device) to a
    /// container of that pod; written through a rename, as the kubelet does.
    fn write(&self, registered: &[&str], allocated: &[(&str, &str)]) {
        let q = |ids: &[&str]| ids.iter().map(|i| format!("\"{i}\"")).collect::<Vec<_>>().join(",");
        let entries: Vec<String> = allocated
            .iter()
            .map(|(uid, dev)| {
                format!(
                    r#"{{"PodUID":"{uid}","ContainerName":"main","ResourceName":"{RESOURCE}","DeviceIDs":{{"-1":[{}]}},"AllocResp":"CgA="}}"#,
                    q(&[dev])
                )
            })
            .collect();
        self.write_raw(&format!(
            r#"{{"Data":{{"PodDeviceEntries":[{}],"RegisteredDevices":{{"{RESOURCE}":[{}],"example.com/gpu":["GPU-1"]}}}},"Checksum":2863311530}}"#,
            entries.join(","),
            q(registered)
        ));
    }

    fn write_raw(&self, text: &str) {
        let tmp = self.dir.join(".tmp-checkpoint");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, self.file()).unwrap();
    }

    /// ADD/DEL as a pod's sandbox: CNI_ARGS as containerd and Multus pass them (`uid` None: no K8S_POD_UID).
    fn run(&self, bed: &Bed, cmd: &str, uid: Option<&str>, ns: &str, conf: &str) -> Run {
        let mut e: HashMap<String, String> = bed.env(cmd, "c1", ns, "net1");
        e.insert("SRIOV_RDMA_KUBELET_DIR".into(), self.dir.display().to_string());
        let uid = uid.map(|u| format!(";K8S_POD_UID={u}")).unwrap_or_default();
        e.insert("CNI_ARGS".into(), format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=p{uid}"));
        bed.run_env(&e, conf)
    }
}

type Identity = (String, String, u64, bool);

fn setup(tag: &str, n: usize) -> (Bed, Kubelet, String, Vec<Identity>) {
    let mut bed = Bed::new(tag, n);
    let k = Kubelet::of(&bed);
    let ns = bed.netns();
    let before = bed.vfs.iter().map(|(_, vf)| identity(None, vf).unwrap()).collect();
    (bed, k, ns, before)
}

fn conf(pci: &str) -> String {
    conf_dev("1.0.0", pci, &static_ipam("10.77.0.2/24"))
}

fn pf_conf(bed: &Bed) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"{}"}}"#, bed.pf)
}

/// The refused ADD changed nothing: every VF on the host as it was, nothing in the pod, no record.
#[track_caller]
fn unchanged(bed: &Bed, ns: &str, before: &[Identity]) {
    for ((_, vf), b) in bed.vfs.iter().zip(before) {
        assert_eq!(identity(None, vf).as_ref(), Some(b), "VF {vf} stays on the host, name/MAC/MTU/up as before");
    }
    assert!(link(Some(ns), "net1").is_none(), "nothing in the pod");
    assert!(bed.records().is_empty(), "no record");
}

#[track_caller]
fn refused(r: &Run, code: u64, needles: &[&str]) {
    assert!(!r.ok, "expected a refusal: {}", r.stdout);
    assert_eq!(r.code(), code, "{} / {}", r.stdout, r.stderr);
    for n in needles {
        assert!(r.msg().contains(n), "message lacks {n:?}: {}", r.msg());
    }
}

/// ADD puts the VF `pci` into the pod as net1, and the record names it; DEL gives it back.
#[track_caller]
fn takes(bed: &Bed, k: &Kubelet, uid: Option<&str>, ns: &str, conf: &str, pci: &str, vf: &str) {
    k.run(bed, "ADD", uid, ns, conf).ok();
    assert!(link(Some(ns), "net1").is_some(), "net1 in the pod");
    assert!(identity(None, vf).is_none(), "VF {vf} left the host");
    let recs = bed.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["pci"], pci);
    k.run(bed, "DEL", uid, ns, conf).ok();
    assert!(identity(None, vf).is_some() && bed.records().is_empty(), "DEL gave VF {vf} back");
}

#[test]
fn a_vf_the_kubelet_allocated_to_another_pod_is_refused_and_this_pods_is_taken() {
    root_only!();
    let (bed, k, ns, before) = setup("kao", 2);
    let (pci0, vf0) = bed.vfs[0].clone();
    let (pci1, _) = bed.vfs[1].clone();
    k.write(&[&pci0, &pci1], &[(OTHER_POD, &pci0), (POD, &pci1)]);

    // The tenant's NAD names VF 0, which the kubelet allocated to another pod.
    let r = k.run(&bed, "ADD", Some(POD), &ns, &conf(&pci0));
    refused(
        &r,
        7,
        &[
            &format!("deviceID {pci0}"),
            &format!("resource {RESOURCE}"),
            "allocated it to another pod",
            &format!("K8S_POD_UID {POD}"),
            &format!("request {RESOURCE} in the pod's resources"),
            &k.file().display().to_string(),
        ],
    );
    assert!(!r.msg().contains(OTHER_POD), "the other pod's UID is not told to this one: {}", r.msg());
    unchanged(&bed, &ns, &before);
    // No K8S_POD_UID at all (a runtime that does not pass it): the kubelet's VF is not given either.
    refused(&k.run(&bed, "ADD", None, &ns, &conf(&pci0)), 7, &["CNI_ARGS carries no K8S_POD_UID"]);
    unchanged(&bed, &ns, &before);

    // The other pod's own ADD takes it.
    takes(&bed, &k, Some(OTHER_POD), &ns, &conf(&pci0), &pci0, &vf0);
}

#[test]
fn a_dra_resources_vf_is_taken_only_for_the_pod_its_prepared_claim_is_reserved_for() {
    root_only!();
    let (bed, k, ns, before) = setup("kdra", 1);
    let (pci0, vf0) = bed.vfs[0].clone();
    // A `dra: true` resource: the device plugin lists its VF as offered; the kubelet allocated it to no pod.
    let offered = k.dir.join("sriov-rdma");
    fs::create_dir_all(&offered).unwrap();
    fs::write(offered.join("offered.json"), format!(r#"{{"version":1,"resources":{{"rdma/dra":["{pci0}"]}}}}"#))
        .unwrap();
    let refusal = [&format!("deviceID {pci0}")[..], "resource rdma/dra", "allocated it to no pod"];
    refused(&k.run(&bed, "ADD", Some(POD), &ns, &conf(&pci0)), 7, &refusal);
    unchanged(&bed, &ns, &before);
    // The DRA driver prepared a claim holding it, reserved for POD (as the daemon's claimconfig.rs keeps it).
    let claims = bed.dir.join("plugins/sriov-rdma.k8s.io/claims");
    fs::create_dir_all(&claims).unwrap();
    fs::write(
        claims.join("c1.json"),
        format!(
            r#"{{"claim":"team-a/nic","uid":"c1","pods":["{POD}"],"devices":[{{"request":"nic","device":"d","pciAddress":"{pci0}","config":{{}}}}]}}"#
        ),
    )
    .unwrap();
    refused(&k.run(&bed, "ADD", Some(OTHER_POD), &ns, &conf(&pci0)), 7, &refusal);
    unchanged(&bed, &ns, &before);
    refused(&k.run(&bed, "ADD", None, &ns, &conf(&pci0)), 7, &["CNI_ARGS carries no K8S_POD_UID"]);
    unchanged(&bed, &ns, &before);
    takes(&bed, &k, Some(POD), &ns, &conf(&pci0), &pci0, &vf0);
}

#[test]
fn a_registered_vf_allocated_to_no_pod_is_refused() {
    root_only!();
    let (bed, k, ns, before) = setup("kan", 1);
    let (pci0, _) = bed.vfs[0].clone();
    // Upper case: a device plugin's ID names the VF whatever case it writes the address in.
    k.write(&[&pci0.to_uppercase()], &[]);
    let r = k.run(&bed, "ADD", Some(POD), &ns, &conf(&pci0));
    refused(&r, 7, &[&format!("deviceID {pci0}"), "allocated it to no pod", &format!("request {RESOURCE}")]);
    unchanged(&bed, &ns, &before);
}

#[test]
fn a_vf_no_kubelet_resource_lists_or_no_checkpoint_at_all_is_taken() {
    root_only!();
    let (bed, k, ns, before) = setup("kun", 2);
    let [(pci0, vf0), (pci1, vf1)] = [bed.vfs[0].clone(), bed.vfs[1].clone()];
    // The kubelet manages VF 1 only; VF 0 is the node's (cnitool, podman, DRA).
    k.write(&[&pci1], &[(OTHER_POD, &pci1)]);
    refused(&k.run(&bed, "ADD", Some(POD), &ns, &conf(&pci1)), 7, &[&format!("deviceID {pci1}")]);
    unchanged(&bed, &ns, &before);
    takes(&bed, &k, Some(POD), &ns, &conf(&pci0), &pci0, &vf0);
    // No checkpoint: a node without a kubelet device manager.
    fs::remove_file(k.file()).unwrap();
    takes(&bed, &k, None, &ns, &conf(&pci1), &pci1, &vf1);
}

#[test]
fn a_malformed_checkpoint_fails_closed_naming_the_file() {
    root_only!();
    let (bed, k, ns, before) = setup("kbm", 1);
    let (pci0, vf0) = bed.vfs[0].clone();
    for bad in ["", "{\"Data\":{\"PodDeviceEntries\":[", "{}", "{\"Data\":{\"RegisteredDevices\":{\"r\":[1]}}}"] {
        k.write_raw(bad);
        for c in [conf(&pci0), pf_conf(&bed)] {
            let r = k.run(&bed, "ADD", Some(POD), &ns, &c);
            refused(&r, 5, &[&k.file().display().to_string(), "not a device manager checkpoint", "nothing changed"]);
            unchanged(&bed, &ns, &before);
        }
    }
    // Once the kubelet writes it whole again (allocating VF 0 to this pod), ADD proceeds.
    k.write(&[&pci0], &[(POD, &pci0)]);
    takes(&bed, &k, Some(POD), &ns, &conf(&pci0), &pci0, &vf0);
}

#[test]
fn pf_name_passes_over_vfs_the_kubelet_manages_for_other_pods() {
    root_only!();
    let (bed, k, ns, before) = setup("kpf", 3);
    let [(pci0, _), (pci1, vf1), (pci2, vf2)] = [bed.vfs[0].clone(), bed.vfs[1].clone(), bed.vfs[2].clone()];
    // VF 0 allocated to another pod, VF 1 registered and free, VF 2 not the kubelet's: pfName takes VF 2.
    k.write(&[&pci0, &pci1], &[(OTHER_POD, &pci0)]);
    takes(&bed, &k, Some(POD), &ns, &pf_conf(&bed), &pci2, &vf2);
    // The kubelet allocated VF 1 to this pod: pfName may take it (the lowest this pod may have).
    k.write(&[&pci0, &pci1, &pci2], &[(OTHER_POD, &pci0), (POD, &pci1)]);
    takes(&bed, &k, Some(POD), &ns, &pf_conf(&bed), &pci1, &vf1);
    // All three the kubelet's, none this pod's: no VF, said why, nothing changed.
    k.write(&[&pci0, &pci1, &pci2], &[(OTHER_POD, &pci0)]);
    let r = k.run(&bed, "ADD", Some(POD), &ns, &pf_conf(&bed));
    refused(&r, 5, &["no free VF among its 3 VFs", "3 the kubelet manages and did not allocate to this pod"]);
    unchanged(&bed, &ns, &before);
}

#[test]
fn an_ib_guid_that_would_rebind_a_kubelet_allocated_mlx5_vf_is_refused_before_any_change() {
    root_only!();
    let (bed, k, ns, before) = setup("kgu", 1);
    let (pci0, _) = bed.vfs[0].clone();
    // A fake mlx5 VF: bound to mlx5_core with its own RDMA device (a GUID applies only once the driver rebinds).
    let dev = bed.pci_dir(&pci0);
    fs::remove_file(dev.join("driver")).unwrap();
    std::os::unix::fs::symlink("../../../bus/pci/drivers/mlx5_core", dev.join("driver")).unwrap();
    bed.tree.rdma(&pci0, "mlx5_9", &[]).unwrap();
    let guid = conf_dev(
        "1.0.0",
        &pci0,
        &format!(r#","runtimeConfig":{{"infinibandGUID":"02:00:00:00:00:00:00:01"}}{}"#, static_ipam("10.77.0.2/24")),
    );
    // The kubelet allocated it to this pod: its device plugin already named mlx5_9's character devices.
    k.write(&[&pci0], &[(POD, &pci0)]);
    let r = k.run(&bed, "ADD", Some(POD), &ns, &guid);
    refused(&r, 7, &[&format!("VF {pci0}"), "rebinds the VF's driver", "mlx5_9", &format!("resource {RESOURCE}")]);
    unchanged(&bed, &ns, &before);
    // A VF no kubelet resource names is the node's: the GUID goes ahead (here to the stand-in PF's missing VF table).
    k.write(&[], &[]);
    let r = k.run(&bed, "ADD", Some(POD), &ns, &guid);
    assert!(!r.msg().contains("rebinds"), "{}", r.msg());
    unchanged(&bed, &ns, &before);
}

#[test]
fn a_vf_the_device_plugin_offers_unhealthy_is_refused_and_passed_over_without_an_allocation() {
    root_only!();
    let (bed, k, ns, before) = setup("kof", 2);
    let [(pci0, _), (pci1, vf1)] = [bed.vfs[0].clone(), bed.vfs[1].clone()];
    // A link flap: the kubelet registers no VF (all Unhealthy); the device plugin still lists VF 0 as offered.
    k.write(&[], &[]);
    fs::create_dir_all(k.dir.join("sriov-rdma")).unwrap();
    fs::write(
        k.dir.join("sriov-rdma/offered.json"),
        format!(r#"{{"version":1,"resources":{{"{RESOURCE}":["{pci0}"]}}}}"#),
    )
    .unwrap();
    let r = k.run(&bed, "ADD", Some(POD), &ns, &conf(&pci0));
    refused(&r, 7, &[&format!("deviceID {pci0}"), &format!("resource {RESOURCE}"), "allocated it to no pod"]);
    unchanged(&bed, &ns, &before);
    // pfName passes over it and takes VF 1, which no resource offers.
    takes(&bed, &k, Some(POD), &ns, &pf_conf(&bed), &pci1, &vf1);
}
