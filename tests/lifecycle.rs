//! How DEL, ADD, CHECK and doctor meet the runtime's real call patterns: a DEL sent while the same container's ADD
//! still runs, a VF whose own host name is the spare DEL would fall back to, a pod device that took the VF's host
//! ifindex, read-only commands. Real namespaces and the real host-local IPAM; a veth stands in for the VF netdev
//! behind a fake PCI tree (tests/common), so a VF here has no parent device: it is told by its ifindex alone, as on
//! a kernel without IFLA_PARENT_DEV_NAME.
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn can_run(what: &str) -> bool {
    require::required(what, &["/usr/lib/cni/host-local"])
}

/// An IPAM plugin that is the real host-local, slowed down by `add_secs` on ADD, and that logs every call
/// (`COMMAND CONTAINERID CNI_ARGS`) to `<dir>/ipam.log`. Returns the directory for CNI_PATH.
fn logged_host_local(dir: &Path, add_secs: u32) -> PathBuf {
    let log = dir.join("ipam.log");
    ipam_script(
        dir,
        "logged-local",
        &format!(
            "conf=$(cat)\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_ARGS\" >> {log}\n\
             [ \"$CNI_COMMAND\" = ADD ] && sleep {add_secs}\nprintf '%s' \"$conf\" | exec /usr/lib/cni/host-local\n",
            log = log.display()
        ),
    )
}

fn ipam_log(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("ipam.log")).unwrap_or_default().lines().map(str::to_string).collect()
}

fn logged_ipam(bed: &Bed) -> String {
    format!(
        r#","ipam":{{"type":"logged-local","subnet":"10.77.0.0/24","dataDir":"{}"}}"#,
        bed.dir.join("leases").display()
    )
}

fn held_leases(bed: &Bed) -> Vec<String> {
    leases(&bed.dir.join("leases").join("rdma-net"))
}

fn with_path(
    mut env: std::collections::HashMap<String, String>,
    bin: &Path,
) -> std::collections::HashMap<String, String> {
    env.insert("CNI_PATH".into(), format!("{}:{CNI_PATH}", bin.display()));
    env
}

fn has_step(rec: &Value, step: &str) -> bool {
    rec["journal"].as_array().is_some_and(|j| j.iter().any(|s| s["step"] == step))
}

/// The runtime's timeout killed Multus while our ADD went on, and its cleanup DEL arrives: DEL waits for the VF's
/// lock, then tears down whatever the record says by then — here, the whole finished ADD.
#[test]
fn a_del_sent_while_add_runs_tears_down_what_add_finished() {
    if !can_run("a_del_sent_while_add_runs_tears_down_what_add_finished") {
        return;
    }
    let mut bed = Bed::new("lra", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).expect("the VF stand-in");
    let ns = bed.netns();
    let bin = logged_host_local(&bed.dir, 3);
    let conf = conf_dev("1.0.0", &pci, &logged_ipam(&bed));
    let add = spawn_plugin(&bed.sysfs, &bed.state, &with_path(bed.env("ADD", "c1", &ns, "net1"), &bin), &conf);
    // ADD is in IPAM (its record written, the step begun) when DEL comes.
    let start = Instant::now();
    while !bed.records().first().is_some_and(|r| has_step(r, "ipam")) {
        assert!(start.elapsed() < Duration::from_secs(10), "ADD never reached its IPAM step");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rec = &bed.records()[0];
    assert_eq!(rec["complete"], false, "DEL is sent while ADD is under way: {rec}");
    let del = bed.run_env(&with_path(bed.env("DEL", "c1", &ns, "net1"), &bin), &conf);
    let add = wait_bounded(add, Duration::from_secs(30)).expect("ADD hung");
    add.ok();
    del.ok();
    assert!(link(Some(&ns), "net1").is_none(), "the pod keeps no net1 after its DEL");
    assert_eq!(identity(None, &vf), Some(before), "the VF is back on the host as before ADD");
    assert!(bed.records().is_empty(), "no record left: {:?}", bed.records());
    assert!(held_leases(&bed).is_empty(), "the address is released: {:?}", held_leases(&bed));
    let log = ipam_log(&bed.dir);
    assert!(log.iter().any(|l| l.starts_with("DEL c1")), "IPAM saw the DEL: {log:?}");
}

/// systemd names a VF `<pf>v<n>`, which is also DEL's first spare name: with that name taken on the host while the
/// VF is in the pod, DEL must bring it back under a name that is free, not fail `File exists` forever.
#[test]
fn del_brings_a_vf_named_as_systemd_names_it_back_under_a_free_name() {
    if !can_run("del_brings_a_vf_named_as_systemd_names_it_back_under_a_free_name") {
        return;
    }
    let mut bed = Bed::new("lsp", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let own = format!("{}v0", bed.pf);
    must(&["ip", "link", "set", &vf, "name", &own]);
    bed.set_vf_netdev(&pci, &own);
    let mac = link(None, &own).unwrap()["address"].as_str().unwrap().to_string();
    let ns = bed.netns();
    let conf = conf_dev("1.0.0", &pci, "");
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    // Another device takes the VF's host name while it is in the pod.
    must(&["ip", "link", "add", &own, "type", "veth", "peer", "name", &format!("{own}q")]);
    let squatter = link(None, &own).unwrap()["ifindex"].as_u64().unwrap();
    let del = bed.run("DEL", "c1", &ns, "net1", &conf);
    let _ = sh(&["ip", "link", "del", &own]);
    del.ok();
    assert!(link(Some(&ns), "net1").is_none(), "the VF left the pod");
    let spare = format!("{own}r1");
    let back = link(None, &spare).unwrap_or_else(|| panic!("the VF is on the host as {spare}"));
    assert_eq!(back["address"].as_str(), Some(mac.as_str()), "{spare} is the VF (its MAC): {back}");
    assert_ne!(back["ifindex"].as_u64(), Some(squatter));
    assert!(bed.records().is_empty(), "DEL finished: {:?}", bed.records());
    let _ = sh(&["ip", "link", "del", &spare]);
}

/// On a kernel that names no parent device, a VF is told by its ifindex; when a pod device already has the VF's
/// host ifindex, the kernel gives the VF another one in the pod. DEL must take the VF, not the pod's own device.
#[test]
fn del_tells_the_vf_from_a_pod_device_that_has_its_host_ifindex() {
    if !can_run("del_tells_the_vf_from_a_pod_device_that_has_its_host_ifindex") {
        return;
    }
    let mut bed = Bed::new("lix", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let host_index = link(None, &vf).unwrap()["ifindex"].as_u64().unwrap().to_string();
    let ns = bed.netns();
    must(&["ip", "-n", &ns, "link", "add", "own0", "index", &host_index, "type", "veth", "peer", "name", "own0p"]);
    let conf = conf_dev("1.0.0", &pci, "");
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    let in_pod = link(Some(&ns), "net1").expect("net1 in the pod")["ifindex"].as_u64().unwrap().to_string();
    assert_ne!(in_pod, host_index, "the kernel gave the VF another ifindex in the pod");
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    let own = link(Some(&ns), "own0").expect("the pod's own device stays in the pod");
    assert_eq!(own["ifindex"].as_u64().map(|i| i.to_string()), Some(host_index));
    assert!(link(Some(&ns), "net1").is_none(), "the VF left the pod");
    assert_eq!(identity(None, &vf), Some(before), "the VF is back on the host as before ADD");
}

/// CHECK and doctor only read: the state directory keeps its mode and a dead writer's temp file is left for the
/// next command that writes.
#[test]
fn check_and_doctor_change_nothing_in_the_state_directory() {
    if !can_run("check_and_doctor_change_nothing_in_the_state_directory") {
        return;
    }
    let mut bed = Bed::new("lro", 1);
    let (pci, _) = bed.vfs[0].clone();
    let ns = bed.netns();
    let conf = conf_dev("1.0.0", &pci, "");
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    fs::set_permissions(&bed.state, fs::Permissions::from_mode(0o755)).unwrap();
    // A pid that cannot be alive (above the kernel's pid_max limit of 2^22).
    let temp = bed.state.join(format!(".{pci}.json.9999999"));
    fs::write(&temp, b"{").unwrap();
    let mode = || fs::metadata(&bed.state).unwrap().permissions().mode() & 0o7777;

    bed.run("CHECK", "c1", &ns, "net1", &conf).ok();
    assert_eq!(mode(), 0o755, "CHECK left the directory's mode");
    assert!(temp.exists(), "CHECK left the temp file");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sriov-rdma"))
        .args(["doctor", "--kubelet-dir"])
        .arg(bed.dir.join("no-kubelet"))
        .env_remove("CNI_COMMAND")
        .env("SRIOV_RDMA_SYSFS", &bed.sysfs)
        .env("SRIOV_RDMA_STATE_DIR", &bed.state)
        .output()
        .expect("running sriov-rdma doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&pci), "doctor read the record of {pci}: {text}");
    assert_eq!(mode(), 0o755, "doctor left the directory's mode");
    assert!(temp.exists(), "doctor left the temp file");
    // The next command that writes tidies up.
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    assert_eq!(mode(), 0o700);
    assert!(!temp.exists());
}

/// podman restarts a container under the same ID: an ADD of the very attachment whose orphan is on record (its
/// namespace gone, the VF back on the host) reclaims it and goes on.
#[test]
fn an_orphan_does_not_block_its_own_containers_add() {
    if !can_run("an_orphan_does_not_block_its_own_containers_add") {
        return;
    }
    let mut bed = Bed::new("lre", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let bin = logged_host_local(&bed.dir, 0);
    let conf = conf_dev("1.0.0", &pci, &logged_ipam(&bed));
    let ns1 = bed.netns();
    bed.run_env(&with_path(bed.env("ADD", "c1", &ns1, "net1"), &bin), &conf).ok();
    // A reboot: the namespace is gone and the VF is on the host under the name udev gives it.
    must(&["ip", "netns", "del", &ns1]);
    hand_back(&bed, &pci, &vf, &vf);
    let ns2 = bed.netns();
    let add = bed.run_env(&with_path(bed.env("ADD", "c1", &ns2, "net1"), &bin), &conf);
    add.ok();
    assert!(link(Some(&ns2), "net1").is_some(), "the VF is in the new namespace as net1");
    assert!(link(None, &vf).is_none(), "the VF is no longer on the host");
    let recs = bed.records();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["netns"], format!("/var/run/netns/{ns2}"), "the record is the new ADD's");
    assert_eq!(held_leases(&bed).len(), 1, "one address: the orphan's was released");
    let log = ipam_log(&bed.dir);
    assert_eq!(log.iter().filter(|l| l.starts_with("DEL c1")).count(), 1, "the orphan's IPAM DEL: {log:?}");
    bed.run_env(&with_path(bed.env("DEL", "c1", &ns2, "net1"), &bin), &conf).ok();
    assert!(held_leases(&bed).is_empty() && bed.records().is_empty());
}

/// An orphan's reclaim by another pod's ADD hands IPAM DEL the CNI_ARGS of the ADD that got the address (an IPAM
/// that keys on the pod, as whereabouts does, must see the old pod), not the reclaiming pod's.
#[test]
fn a_reclaim_releases_the_address_under_the_old_pods_identity() {
    if !can_run("a_reclaim_releases_the_address_under_the_old_pods_identity") {
        return;
    }
    let mut bed = Bed::new("lid", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let bin = logged_host_local(&bed.dir, 0);
    let conf = conf_dev("1.0.0", &pci, &logged_ipam(&bed));
    let (ns1, ns2) = (bed.netns(), bed.netns());
    let pod = |cmd: &str, cid: &str, ns: &str, who: &str| {
        let mut e = with_path(bed.env(cmd, cid, ns, "net1"), &bin);
        e.insert("CNI_ARGS".into(), format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={who};K8S_POD_NAME={who}-pod"));
        e
    };
    bed.run_env(&pod("ADD", "c1", &ns1, "team-a"), &conf).ok();
    must(&["ip", "netns", "del", &ns1]);
    hand_back(&bed, &pci, &vf, "net1");
    bed.run_env(&pod("ADD", "c2", &ns2, "team-b"), &conf).ok();
    let log = ipam_log(&bed.dir);
    let dels: Vec<&String> = log.iter().filter(|l| l.starts_with("DEL ")).collect();
    assert_eq!(dels.len(), 1, "{log:?}");
    assert!(
        dels[0].starts_with("DEL c1 ")
            && dels[0].contains("K8S_POD_NAMESPACE=team-a")
            && dels[0].contains("team-a-pod"),
        "IPAM DEL of the old attachment under the old pod: {log:?}"
    );
    assert!(!dels[0].contains("team-b"), "{log:?}");
    bed.run_env(&pod("DEL", "c2", &ns2, "net1"), &conf).ok();
}

/// The cniVersion 1.1.0 host-local that speaks GC (scripts/build-cni-plugins.sh).
const PLUGINS_1_1: &str = "/var/cache/sriov-rdma-cni/components/cni-plugins-v1.10.0/bin";

/// GC keeps a held attachment's record (its VF is still inside a namespace a process holds): IPAM GC must then
/// keep its address too, or the next pod gets the address the held VF still carries.
#[test]
fn gc_keeps_the_address_of_an_attachment_it_keeps() {
    if !require::required("gc_keeps_the_address_of_an_attachment_it_keeps", &[&format!("{PLUGINS_1_1}/host-local")]) {
        return;
    }
    let mut bed = Bed::new("lgc", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let leases_dir = bed.dir.join("leases");
    let ipam =
        format!(r#","ipam":{{"type":"host-local","subnet":"10.77.0.0/24","dataDir":"{}"}}"#, leases_dir.display());
    let conf = format!(r#"{{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma","deviceID":"{pci}"{ipam}}}"#);
    let ns = bed.netns();
    let env = |cmd: &str, cid: &str, ns: &str, ifname: &str| {
        let mut e = bed.env(cmd, cid, ns, ifname);
        e.insert("CNI_PATH".into(), PLUGINS_1_1.into());
        e
    };
    bed.run_env(&env("ADD", "c1", &ns, "net1"), &conf).ok();
    let held_addr = held_leases(&bed);
    assert_eq!(held_addr.len(), 1);
    let holder = Holder::new(&ns);
    must(&["ip", "netns", "del", &ns]);
    let gc = format!(
        r#"{{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma"{ipam},"cni.dev/valid-attachments":[]}}"#
    );
    let r = bed.run_env(&env("GC", "", "", ""), &gc);
    assert!(!r.ok && r.msg().contains("has not come back"), "GC keeps the held record: {} / {}", r.stdout, r.stderr);
    assert!(holder.link("net1"), "the VF is still in the held namespace");
    assert_eq!(bed.records().len(), 1, "the record is kept");
    assert_eq!(held_leases(&bed), held_addr, "IPAM GC kept the held VF's address");

    // Once the VF is back, GC restores it and IPAM GC releases the address.
    holder.release();
    hand_back(&bed, &pci, &vf, "net1");
    bed.run_env(&env("GC", "", "", ""), &gc).ok();
    assert!(bed.records().is_empty() && held_leases(&bed).is_empty(), "{:?}", held_leases(&bed));
}
