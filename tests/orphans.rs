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
    hand_back(bed, pci, vf, pod_name);
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
    // What the kernel and the store show: the VF is in the new pod, the orphan's record is gone, and the new record
    // holds the VF as the reclaim left it on the host (its own name and MTU, not the pod's).
    assert!(link(Some(&ns2), "net1").is_some(), "the new pod has the VF: {}", r.stderr);
    assert!(link(None, "opf1").is_none(), "the VF is no longer on the host under its pod name");
    let recs = bed.records();
    assert_eq!(recs.len(), 1, "one record, the new pod's: {recs:?}");
    assert_eq!((recs[0]["container_id"].as_str(), recs[0]["pci"].as_str()), (Some("c2"), Some(pci.as_str())));
    assert_eq!(recs[0]["netdev"]["name"], vf.as_str(), "the reclaim gave the VF its host name back first");
    assert_eq!(recs[0]["netdev"]["mtu"], before.2, "and its MTU");
    bed.run("DEL", "c2", &ns2, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
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
    // A namespace path that exists but is no namespace is no live pod, but no orphan either while the VF is not
    // back on the host.
    let rec2 = bed.state.join(format!("{pci2}.json"));
    let body = std::fs::read_to_string(&rec2).unwrap().replace(&format!("/var/run/netns/{ns2}"), "/etc/hostname");
    std::fs::write(&rec2, body).unwrap();

    let (rc, out) = gc(&bed, &["--dry-run"]);
    assert_eq!(rc, 1, "an orphan is left: {out}");
    assert!(out.contains(&format!("VF {pci0}")) && out.contains("orphan (the VF is back on the host"), "{out}");
    assert_eq!(bed.records().len(), 3, "--dry-run changes nothing");

    let (rc, out) = gc(&bed, &["--json"]);
    assert_eq!(rc, 0, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let state = |pci: &str| {
        rows.as_array().unwrap().iter().find(|r| r["pci"] == pci).map(|r| r["state"].as_str().unwrap().to_string())
    };
    assert_eq!(state(&pci0).as_deref(), Some("reclaimed"));
    assert_eq!(state(&pci1).as_deref(), Some("live"));
    assert_eq!(state(&pci2).as_deref(), Some("held"));
    assert_eq!(identity(None, &vf0), Some(before), "the orphan's VF is restored on the host");
    assert!(leases(&bed).is_empty(), "its lease released with the config its ADD recorded");
    assert_eq!(bed.records().len(), 2);
    assert!(link(Some(&ns1), "net1").is_some(), "the live pod keeps its VF");

    let (rc, _) = gc(&bed, &[]);
    assert_eq!(rc, 0, "nothing left to reclaim");
    bed.run("DEL", "c1", &ns1, "net1", &conf_dev("1.0.0", &pci1, "")).ok();
    std::fs::remove_file(&rec2).unwrap();
}

#[test]
fn a_vf_inside_a_held_namespace_is_never_reclaimed() {
    if !can_run("a_vf_inside_a_held_namespace_is_never_reclaimed") {
        return;
    }
    let mut bed = Bed::new("ohl", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, &host_local(&bed));
    let ns1 = bed.netns();
    bed.run("ADD", "c1", &ns1, "ohl1", &conf).ok();
    let holder = Holder::new(&ns1);
    must(&["ip", "netns", "del", &ns1]);

    let (rc, out) = gc(&bed, &["--json"]);
    assert_eq!(rc, 0, "nothing to reclaim: {out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["state"], "held", "{out}");
    assert_eq!(bed.records().len(), 1, "the record is kept");
    assert_eq!(leases(&bed).len(), 1, "the pod keeps its lease");
    assert!(holder.link("ohl1"), "the VF is still in the held namespace");

    let ns2 = bed.netns();
    let r = bed.run("ADD", "c2", &ns2, "net1", &conf);
    assert!(!r.ok && r.msg().contains("still in use by container c1"), "{} / {}", r.stdout, r.stderr);
    assert!(holder.link("ohl1"), "a second pod's ADD left the VF where it is");
    assert_eq!(leases(&bed).len(), 1);

    // The last holder goes: the kernel hands the VF back, under its pod-side name.
    holder.release();
    hand_back(&bed, &pci, &vf, "ohl1");
    let (rc, out) = gc(&bed, &["--json"]);
    assert_eq!(rc, 0, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["state"], "reclaimed", "{out}");
    assert_eq!(identity(None, &vf), Some(before), "given its name back, MAC, MTU, up state as before ADD");
    assert!(link(None, "ohl1").is_none());
    assert!(leases(&bed).is_empty() && bed.records().is_empty());
}

#[test]
fn del_keeps_the_record_until_the_vf_comes_back_then_renames_it() {
    if !can_run("del_keeps_the_record_until_the_vf_comes_back_then_renames_it") {
        return;
    }
    let mut bed = Bed::new("odk", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, &host_local(&bed));
    let ns1 = bed.netns();
    bed.run("ADD", "c1", &ns1, "net1", &conf).ok();
    let holder = Holder::new(&ns1);
    must(&["ip", "netns", "del", &ns1]);
    // containerd passes an empty CNI_NETNS once the namespace is no longer mounted.
    let r = bed.run("DEL", "c1", "", "net1", &conf);
    assert!(!r.ok, "the VF has not come back: DEL must not report it restored");
    assert!(r.msg().contains("has not come back to the host"), "{}", r.stdout);
    assert_eq!(bed.records().len(), 1, "the record outlives the failed DEL");
    assert_eq!(leases(&bed).len(), 1, "nothing undone while the VF may be in use: the lease is kept");

    holder.release();
    hand_back(&bed, &pci, &vf, "net1");
    bed.run("DEL", "c1", "", "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before), "the VF back under its own name");
    assert!(link(None, "net1").is_none(), "nothing left under the pod-side name");
    assert!(bed.records().is_empty() && leases(&bed).is_empty());
}

#[test]
fn del_finishes_when_the_namespace_path_is_a_plain_file() {
    if !can_run("del_finishes_when_the_namespace_path_is_a_plain_file") {
        return;
    }
    let mut bed = Bed::new("opl", 1);
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, "");
    let ns1 = bed.netns();
    bed.run("ADD", "c1", &ns1, "net1", &conf).ok();
    orphan(&bed, &ns1, &pci, &vf, "net1");
    // What an unmounted namespace leaves: a plain file at its path.
    std::fs::write(format!("/var/run/netns/{ns1}"), b"").unwrap();
    for netns in ["", ns1.as_str()] {
        let r = bed.run("DEL", "c1", netns, "net1", &conf);
        assert!(r.ok, "DEL with CNI_NETNS={netns:?}: {} / {}", r.stdout, r.stderr);
    }
    let _ = std::fs::remove_file(format!("/var/run/netns/{ns1}"));
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

#[test]
fn an_unreadable_record_skips_its_vf_and_names_the_way_out() {
    if !can_run("an_unreadable_record_skips_its_vf_and_names_the_way_out") {
        return;
    }
    let mut bed = Bed::new("our", 2);
    let (pci0, vf0) = bed.vfs[0].clone();
    let (_, vf1) = bed.vfs[1].clone();
    std::fs::create_dir_all(&bed.state).unwrap();
    // What power loss after a rename of unsynced data leaves.
    let rec0 = bed.state.join(format!("{pci0}.json"));
    std::fs::write(&rec0, b"").unwrap();
    let ns = bed.netns();
    let by_pf = format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"{}"}}"#, bed.pf);
    let r = bed.run("ADD", "c1", &ns, "net1", &by_pf);
    r.ok();
    assert!(r.stderr.contains(&format!("skipping VF {pci0}")), "{}", r.stderr);
    assert!(link(Some(&ns), "net1").is_some() && link(None, &vf1).is_none(), "VF 1 served");
    assert!(link(None, &vf0).is_some(), "VF 0 untouched");

    let ns2 = bed.netns();
    let r = bed.run("ADD", "c2", &ns2, "net1", &conf_dev("1.0.0", &pci0, ""));
    assert!(!r.ok, "deviceID ADD of the VF with the unreadable record must fail");
    let msg = r.msg();
    assert!(msg.contains(&rec0.display().to_string()) && msg.contains("move the file aside"), "{msg}");
    assert!(link(Some(&ns2), "net1").is_none() && link(None, &vf0).is_some(), "nothing changed");

    let (rc, out) = gc(&bed, &["--json"]);
    assert_eq!(rc, 1, "an unreadable record is reported: {out}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = rows.as_array().unwrap().iter().find(|r| r["pci"] == pci0.as_str()).expect("listed");
    assert_eq!(row["state"], "unreadable");
    assert_eq!(std::fs::read(&rec0).unwrap(), b"", "gc never touches it");
    bed.run("DEL", "c1", &ns, "net1", &by_pf).ok();
    std::fs::remove_file(&rec0).unwrap();
}

#[test]
fn gc_skips_a_busy_vf_says_so_and_reclaims_the_rest() {
    if !can_run("gc_skips_a_busy_vf_says_so_and_reclaims_the_rest") {
        return;
    }
    let mut bed = Bed::new("osg", 2);
    let (pci0, vf0) = bed.vfs[0].clone();
    let (pci1, _) = bed.vfs[1].clone();
    let before = identity(None, &vf0).unwrap();
    let conf0 = conf_dev("1.0.0", &pci0, &host_local(&bed));
    let ns0 = bed.netns();
    bed.run("ADD", "c0", &ns0, "osg0", &conf0).ok();
    orphan(&bed, &ns0, &pci0, &vf0, "osg0");
    let ns1 = bed.netns();
    let conf1 = conf_dev("1.0.0", &pci1, "");
    bed.run("ADD", "c1", &ns1, "net1", &conf1).ok();
    // Another ADD/DEL holds VF 1 (a slow IPAM): gc neither waits for it nor gives up on the orphan.
    let held = std::fs::OpenOptions::new().write(true).open(bed.state.join(format!("{pci1}.lock"))).unwrap();
    held.try_lock().expect("taking VF 1's lock");
    let start = std::time::Instant::now();
    let (rc, out) = gc(&bed, &["--json"]);
    let took = start.elapsed();
    drop(held);
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("gc's report ({e}): {out}"));
    let state = |pci: &str| {
        rows.as_array().unwrap().iter().find(|r| r["pci"] == pci).map(|r| r["state"].clone()).unwrap_or_default()
    };
    assert_eq!(state(&pci1), "busy", "{out}");
    assert_eq!(state(&pci0), "reclaimed", "{out}");
    assert_eq!(rc, 0, "no orphan left: {out}");
    assert!(took < std::time::Duration::from_secs(5), "gc waited for the busy VF ({took:?})");
    assert_eq!(identity(None, &vf0), Some(before), "the orphan's VF is restored on the host");
    assert!(link(None, "osg0").is_none());
    assert!(leases(&bed).is_empty(), "the orphan's lease is released");
    assert_eq!(bed.records().len(), 1, "the busy VF's record is left");
    bed.run("DEL", "c1", &ns1, "net1", &conf1).ok();
    assert!(bed.records().is_empty());
}

#[test]
fn a_finished_add_has_its_record_and_directory_on_disk_before_it_reports() {
    if !require::required("fsync of the record", &["/usr/bin/strace"]) {
        return;
    }
    let mut bed = Bed::new("ofs", 1);
    let (pci, _) = bed.vfs[0].clone();
    let ns = bed.netns();
    let conf = conf_dev("1.0.0", &pci, "");
    // The kernel's view of the plugin's calls: strace logs each fsync with the path of its fd (-y).
    let trace = bed.dir.join("strace.log");
    let cmd = plugin_command(&bed.sysfs, &bed.state, &bed.env("ADD", "c1", &ns, "net1"));
    let prog = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut traced = Command::new("/usr/bin/strace");
    traced.args(["-f", "-y", "-e", "trace=fsync,fdatasync,rename", "-o"]).arg(&trace).arg(prog).args(args);
    traced.env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            traced.env(k, v);
        }
    }
    let mut child = traced
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("strace");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(conf.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "ADD: {}", String::from_utf8_lossy(&out.stdout));
    let log = std::fs::read_to_string(&trace).unwrap();
    let state = bed.state.display().to_string();
    let lines: Vec<&str> = log.lines().collect();
    let last_rename =
        lines.iter().rposition(|l| l.contains("rename(") && l.contains(&format!("{pci}.json"))).expect(&log);
    let file_synced = lines[..last_rename].iter().any(|l| l.contains("fsync(") && l.contains(&format!(".{pci}.json.")));
    let dir_synced = lines[last_rename..].iter().any(|l| l.contains("fsync(") && l.contains(&format!("<{state}>")));
    assert!(file_synced && dir_synced, "the final record written, fsynced, renamed, its directory fsynced:\n{log}");
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
}
