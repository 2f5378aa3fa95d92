//! Orphans heal themselves: a pod namespace destroyed without a DEL leaves a record that would pin its VF forever
//! (Multus never forwards GC to a secondary plugin, containerd never calls it). The next ADD that wants the VF,
//! by `deviceID` or `pfName`, reclaims it; so does `sriov-rdma gc`. Real namespaces and the real host-local IPAM;
//! a veth stands in for the VF netdev (tests/common), and since a veth dies with its namespace, the kernel's
//! "hand the VF back under its pod name" is played by the test, as in tests/netns.rs.
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use std::process::Command;

fn can_run(what: &str) -> bool {
    require::required(what, &["/usr/lib/cni/host-local"])
}

/// Destroys the pod namespace without a DEL, and plays the kernel handing the VF back as `pod_name`.
fn orphan(bed: &Bed, ns: &str, pci: &str, vf: &str, pod_name: &str) {
    must(&["ip", "netns", "del", ns]);
    let _ = sh(&["ip", "link", "del", &format!("{vf}p")]);
    must(&["ip", "link", "add", pod_name, "mtu", "4300", "type", "veth", "peer", "name", &format!("{vf}p")]);
    bed.set_vf_netdev(pci, pod_name);
}

fn host_local(bed: &Bed) -> String {
    format!(
        r#","mtu":4300,"ipam":{{"type":"host-local","subnet":"10.79.0.0/24","dataDir":"{}"}}"#,
        bed.dir.join("leases").display()
    )
}

fn leases(bed: &Bed) -> Vec<String> {
    let dir = bed.dir.join("leases").join("rdma-net");
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("10."))
                .collect()
        })
        .unwrap_or_default()
}

fn gc(bed: &Bed, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sriov-rdma"))
        .arg("gc")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("SRIOV_RDMA_SYSFS", &bed.sysfs)
        .env("SRIOV_RDMA_STATE_DIR", &bed.state)
        .output()
        .expect("running sriov-rdma gc");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn add_by_device_id_reclaims_an_orphaned_vf() {
    if !can_run("add_by_device_id_reclaims_an_orphaned_vf") {
        return;
    }
    let mut bed = Bed::new("oad", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, &host_local(&bed));
    let ns1 = bed.netns();
    bed.run("ADD", "c1", &ns1, "oad1", &conf).ok();
    assert_eq!(leases(&bed).len(), 1);
    orphan(&bed, &ns1, &pci, &vf, "oad1");
    let ns2 = bed.netns();
    let r = bed.run("ADD", "c2", &ns2, "net1", &conf);
    r.ok();
    assert!(r.stderr.contains("reclaiming it from c1/oad1"), "{}", r.stderr);
    assert!(link(Some(&ns2), "net1").is_some(), "the new pod has the VF");
    assert_eq!(leases(&bed).len(), 1, "the orphan's lease was released, the new pod holds one");
    bed.run("DEL", "c2", &ns2, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before), "name, MAC, MTU, up state as before the first ADD");
    assert!(bed.records().is_empty());
    assert!(leases(&bed).is_empty());
}

#[test]
fn add_by_pf_name_reclaims_an_orphaned_vf() {
    if !can_run("add_by_pf_name_reclaims_an_orphaned_vf") {
        return;
    }
    let mut bed = Bed::new("opf", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"{}"}}"#, bed.pf);
    let ns1 = bed.netns();
    bed.run("ADD", "c1", &ns1, "opf1", &conf).ok();
    orphan(&bed, &ns1, &pci, &vf, "opf1");
    let ns2 = bed.netns();
    let r = bed.run("ADD", "c2", &ns2, "net1", &conf);
    r.ok();
    assert!(r.stderr.contains("reclaiming"), "{}", r.stderr);
    bed.run("DEL", "c2", &ns2, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn gc_command_lists_and_reclaims_orphans_and_leaves_live_and_unopenable_ones() {
    if !can_run("gc_command_lists_and_reclaims_orphans_and_leaves_live_and_unopenable_ones") {
        return;
    }
    let mut bed = Bed::new("ogc", 3);
    let (pci0, vf0) = bed.vfs[0].clone();
    let (pci1, _) = bed.vfs[1].clone();
    let (pci2, _) = bed.vfs[2].clone();
    let before = identity(None, &vf0).unwrap();
    let (ns0, ns1, ns2) = (bed.netns(), bed.netns(), bed.netns());
    let c0 = conf_dev("1.0.0", &pci0, &host_local(&bed));
    bed.run("ADD", "c0", &ns0, "ogc1", &c0).ok();
    bed.run("ADD", "c1", &ns1, "net1", &conf_dev("1.0.0", &pci1, "")).ok();
    bed.run("ADD", "c2", &ns2, "net1", &conf_dev("1.0.0", &pci2, "")).ok();
    orphan(&bed, &ns0, &pci0, &vf0, "ogc1");
    // A namespace path that exists but is no namespace is never an orphan.
    let rec2 = bed.state.join(format!("{pci2}.json"));
    let body = std::fs::read_to_string(&rec2).unwrap().replace(&format!("/var/run/netns/{ns2}"), "/etc/hostname");
    std::fs::write(&rec2, body).unwrap();

    let (rc, out) = gc(&bed, &["--dry-run"]);
    assert_eq!(rc, 1, "an orphan is left: {out}");
    assert!(out.contains(&format!("VF {pci0}")) && out.contains("orphan (its namespace is gone"), "{out}");
    assert_eq!(bed.records().len(), 3, "--dry-run changes nothing");

    let (rc, out) = gc(&bed, &["--json"]);
    assert_eq!(rc, 0, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let state = |pci: &str| {
        rows.as_array().unwrap().iter().find(|r| r["pci"] == pci).map(|r| r["state"].as_str().unwrap().to_string())
    };
    assert_eq!(state(&pci0).as_deref(), Some("reclaimed"));
    assert_eq!(state(&pci1).as_deref(), Some("live"));
    assert_eq!(state(&pci2).as_deref(), Some("live"));
    assert_eq!(identity(None, &vf0), Some(before), "the orphan's VF is restored on the host");
    assert!(leases(&bed).is_empty(), "its lease released with the config its ADD recorded");
    assert_eq!(bed.records().len(), 2);
    assert!(link(Some(&ns1), "net1").is_some(), "the live pod keeps its VF");

    let (rc, _) = gc(&bed, &[]);
    assert_eq!(rc, 0, "nothing left to reclaim");
    bed.run("DEL", "c1", &ns1, "net1", &conf_dev("1.0.0", &pci1, "")).ok();
    std::fs::remove_file(&rec2).unwrap();
}
