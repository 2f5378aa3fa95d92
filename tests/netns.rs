//! ADD/CHECK/DEL/GC/STATUS of the real binary on real network namespaces (root only).
//! Stand-ins: see tests/common. PF-side VF settings are covered by tests/kernel_policy.rs (encoding the
//! kernel accepts) and by the unit tests' recording fake; the emulated SR-IOV machine applies them for real.

mod common;
use common::*;
use serde_json::Value;

/// Fails a test that cannot run as non-root, unless skipping is asked for (see `common::can_run`).
macro_rules! root_only {
    () => {
        if !need_root() {
            return;
        }
    };
}

#[test]
fn add_check_del_restores_name_mac_mtu_and_host_netns() {
    root_only!();
    let mut bed = Bed::new("acd", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    must(&["ip", "link", "set", &vf, "mtu", "1400"]);
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.1.0", &pci, &format!(r#","mtu":9000{}"#, static_ipam("10.77.0.2/24")));

    let add = bed.run("ADD", "c1", &ns, "net1", &conf);
    add.ok();
    let r = add.json();
    assert_eq!(r["cniVersion"], "1.1.0");
    assert_eq!(r["interfaces"][0]["name"], "net1");
    assert_eq!(r["interfaces"][0]["mtu"], 9000);
    assert_eq!(r["interfaces"][0]["pciID"], pci.as_str());
    assert_eq!(r["interfaces"][0]["mac"], before.1.as_str());
    assert_eq!(r["interfaces"][0]["sandbox"], format!("/var/run/netns/{ns}"));
    assert_eq!(r["ips"][0]["address"], "10.77.0.2/24");
    assert_eq!(r["ips"][0]["interface"], 0);
    assert!(add.stderr.contains("ADD c1/net1"), "logs go to stderr: {}", add.stderr);

    // The kernel's view: gone from the host, in the pod as net1 with the MTU, up, with the address and route.
    assert!(link(None, &vf).is_none());
    let (name, mac, mtu, up) = identity(Some(&ns), "net1").unwrap();
    assert_eq!((name.as_str(), mac.as_str(), mtu, up), ("net1", before.1.as_str(), 9000, true));
    assert_eq!(addrs(&ns, "net1"), vec!["10.77.0.2/24".to_string()]);
    assert!(must(&["ip", "-n", &ns, "route", "show", "10.78.0.0/16"]).contains("dev net1"));
    assert_eq!(bed.records().len(), 1);
    let rec = &bed.records()[0];
    assert_eq!(rec["netdev"]["name"], vf.as_str());
    // The journal: IPAM (started alongside the move) and the netdev's move, in the order ADD began them.
    assert_eq!(rec["version"], 2);
    assert_eq!(rec["journal"], serde_json::json!([{"step": "ipam"}, {"step": "netdev-in"}]));
    assert_eq!(rec["complete"], true);

    let check_conf = conf[..conf.len() - 1].to_string() + &format!(r#","prevResult":{}}}"#, add.stdout);
    bed.run("CHECK", "c1", &ns, "net1", &check_conf).ok();

    // CHECK really looks: a changed MTU, a removed address, a missing interface are each reported.
    must(&["ip", "-n", &ns, "link", "set", "net1", "mtu", "1500"]);
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(!c.ok);
    assert!(c.msg().contains("MTU of net1") && c.msg().contains("expected 9000"), "{}", c.msg());
    must(&["ip", "-n", &ns, "link", "set", "net1", "mtu", "9000"]);
    must(&["ip", "-n", &ns, "addr", "del", "10.77.0.2/24", "dev", "net1"]);
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(c.msg().contains("address 10.77.0.2/24 is missing"), "{}", c.msg());
    // The workload changed the MAC too: DEL must still give the original back.
    must(&["ip", "-n", &ns, "link", "set", "net1", "address", "02:11:22:33:44:55"]);
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(c.msg().contains("MAC of net1"), "{}", c.msg());

    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty());
}

#[test]
fn result_layout_follows_each_cni_version() {
    root_only!();
    let mut bed = Bed::new("ver", 1);
    let ns = bed.netns();
    let pci = bed.vfs[0].0.clone();
    for v in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let conf = conf_dev(v, &pci, &static_ipam("10.77.0.9/24"));
        let r = bed.run("ADD", "cv", &ns, "eth9", &conf);
        r.ok();
        let j = r.json();
        assert_eq!(j["cniVersion"], v);
        assert_eq!(j["ips"][0].get("version").is_some(), v.starts_with("0."), "{v}: {j}");
        assert_eq!(j["interfaces"][0].get("mtu").is_some(), v == "1.1.0", "{v}: {j}");
        bed.run("DEL", "cv", &ns, "eth9", &conf).ok();
    }
}

#[test]
fn del_after_netns_deleted_double_del_and_del_without_add() {
    root_only!();
    let mut bed = Bed::new("gone", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let conf = conf_dev("1.0.0", &pci, &static_ipam("10.77.0.3/24"));
    bed.run("DEL", "never", &ns, "net1", &conf).ok();

    let before = identity(None, &vf).unwrap();
    bed.run("ADD", "c1", &ns, "pgon1", &conf).ok();
    must(&["ip", "netns", "del", &ns]);
    // A veth dies with its namespace; a real VF comes back under its pod name: stand in for that kernel step.
    must(&["ip", "link", "add", "pgon1", "type", "veth", "peer", "name", "pgon1p"]);
    bed.set_vf_netdev(&pci, "pgon1");
    let _ = sh(&["ip", "link", "del", &format!("{vf}p")]);
    let del = bed.run("DEL", "c1", &ns, "pgon1", &conf);
    del.ok();
    assert!(del.stdout.is_empty(), "DEL prints nothing: {}", del.stdout);
    assert!(bed.records().is_empty());
    assert_eq!(identity(None, &vf).map(|i| i.0), Some(before.0), "back under its own name");
    bed.run("DEL", "c1", &ns, "pgon1", &conf).ok();
    bed.run("DEL", "c1", "", "pgon1", &conf).ok();
}

#[test]
fn del_after_netns_deleted_restores_the_returned_netdev() {
    root_only!();
    let mut bed = Bed::new("ret", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, r#","mtu":4200"#);
    bed.run("ADD", "c1", &ns, "pret1", &conf).ok();
    must(&["ip", "netns", "del", &ns]);
    // A veth dies with its namespace; a real VF is handed back to the host under its pod name, with the
    // pod's MTU. Stand in for that kernel step: a netdev called pret1 with another MAC and MTU, which
    // sysfs lists under the VF's PCI address.
    must(&[
        "ip",
        "link",
        "add",
        "pret1",
        "mtu",
        "4200",
        "address",
        "02:aa:bb:cc:dd:01",
        "type",
        "veth",
        "peer",
        "name",
        "pret1p",
    ]);
    bed.set_vf_netdev(&pci, "pret1");
    let _ = sh(&["ip", "link", "del", &format!("{vf}p")]); // goes with the namespace; don't wait for that
    bed.run("DEL", "c1", &ns, "pret1", &conf).ok();
    let (name, mac, mtu, up) = identity(None, &vf).expect("renamed back to the original name");
    assert_eq!((name, mac, mtu, up), (before.0.clone(), before.1.clone(), before.2, before.3));
    assert!(link(None, "pret1").is_none());
    assert!(bed.records().is_empty());
}

#[test]
fn ipam_failure_rolls_back_everything() {
    root_only!();
    let mut bed = Bed::new("ipf", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, r#","mtu":9000,"ipam":{"type":"static","addresses":[{"address":"not-an-ip"}]}"#);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf);
    assert!(!r.ok);
    assert!(r.msg().contains("IPAM plugin static ADD"), "{}", r.msg());
    assert_eq!(identity(None, &vf), Some(before), "VF back on the host, name/MAC/MTU as before");
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty());
    // Missing IPAM plugin: code 7 naming ipam.type, and nothing touched either.
    let conf = conf_dev("1.0.0", &pci, r#","ipam":{"type":"no-such-ipam"}"#);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf);
    assert_eq!(r.code(), 7);
    assert!(r.msg().contains("no-such-ipam"), "{}", r.msg());
    assert!(link(None, &vf).is_some());
    assert!(bed.records().is_empty(), "{}", r.stdout);
    // The runtime's DEL after that failed ADD finishes: nothing recorded, and no address the missing plugin could
    // hold (a DEL that failed here would keep the pod's sandbox forever).
    let r = bed.run("DEL", "c1", &ns, "net1", &conf);
    assert!(r.ok, "DEL after the failed ADD: {} {}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(link(None, &vf).is_some());
    // An IPAM plugin that is there but cannot start (no loader for it): the same.
    let broken = bed.dir.join("broken-ipam");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("broken"), "#!/no/such/interpreter\n").unwrap();
    let mut p = std::fs::metadata(broken.join("broken")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(broken.join("broken"), p).unwrap();
    let conf = conf_dev("1.0.0", &pci, r#","ipam":{"type":"broken"}"#);
    let mut e = bed.env("DEL", "c2", &ns, "net1");
    e.insert("CNI_PATH".into(), broken.display().to_string());
    let r = bed.run_env(&e, &conf);
    assert!(r.ok, "DEL with an IPAM plugin that cannot start: {} {}", r.stdout, r.stderr);
}

/// A failure at the journal's last step, after the netdev moved and IPAM allocated an address: the rollback undoes
/// the steps the record lists, newest first — the VF back on the host as it was, the lease released.
#[test]
fn a_failure_at_the_last_step_undoes_every_step_before_it() {
    root_only!();
    let mut bed = Bed::new("lst", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let ipam_dir = bed.dir.join("ipam");
    let leases_dir = ipam_dir.join("rdma-net"); // host-local keeps a network's leases under its name
                                                // The device-info file's directory is a regular file: writing the file fails (ENOTDIR), after everything else.
    let blocker = bed.dir.join("not-a-dir");
    std::fs::write(&blocker, "x").unwrap();
    let info = blocker.join("x.json");
    let extra = format!(
        r#","mtu":9000{},"runtimeConfig":{{"CNIDeviceInfoFile":"{}"}}"#,
        host_local("10.79.0.0/24", &ipam_dir),
        info.display()
    );
    let conf = conf_dev("1.1.0", &pci, &extra);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf);
    assert_eq!(r.code(), 5, "{}", r.stdout);
    assert!(r.msg().contains("writing the device-info file"), "{}", r.msg());
    assert!(r.stderr.contains("rolling back"), "{}", r.stderr);
    // The kernel's view and the IPAM plugin's: nothing of the attachment is left.
    assert_eq!(identity(None, &vf), Some(before.clone()), "VF back on the host, name/MAC/MTU/up as before");
    assert!(link(Some(&ns), "net1").is_none());
    assert!(leases(&leases_dir).is_empty(), "the lease IPAM ADD took is released: {:?}", leases(&leases_dir));
    assert!(bed.records().is_empty());
    // The VF is free for the next ADD.
    let ok = conf_dev("1.1.0", &pci, &host_local("10.79.0.0/24", &ipam_dir));
    bed.run("ADD", "c2", &ns, "net1", &ok).ok();
    assert_eq!(leases(&leases_dir).len(), 1);
    bed.run("DEL", "c2", &ns, "net1", &ok).ok();
    assert!(leases(&leases_dir).is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn name_already_taken_in_the_pod_changes_nothing() {
    root_only!();
    let mut bed = Bed::new("tkn", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    must(&["ip", "-n", &ns, "link", "add", "net1", "type", "veth", "peer", "name", "other"]);
    let before = identity(None, &vf).unwrap();
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, ""));
    assert!(!r.ok);
    assert!(r.msg().contains("CNI_IFNAME net1 is already taken"), "{}", r.msg());
    assert_eq!(identity(None, &vf), Some(before));
    assert!(link(Some(&ns), "other").is_some());
    assert!(bed.records().is_empty());
}

#[test]
fn bad_input_changes_nothing() {
    root_only!();
    let mut bed = Bed::new("bad", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, r#","vlan":5000"#));
    assert_eq!(r.code(), 7);
    assert!(r.msg().contains("vlan 5000"), "{}", r.msg());
    let r = bed.run("ADD", "c1", &ns, "this-name-is-too-long", &conf_dev("1.0.0", &pci, ""));
    assert_eq!(r.code(), 4);
    assert!(r.msg().contains("CNI_IFNAME"), "{}", r.msg());
    let r = bed.run("ADD", "c1", &ns, "net1", "{");
    assert_eq!(r.code(), 6);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("0.2.0", &pci, ""));
    assert_eq!(r.code(), 1);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &bed.pf_pci.clone(), ""));
    assert!(r.msg().contains("not an SR-IOV VF"), "{}", r.msg());
    // A PF-side setting on a PF without a VF table is refused before anything changes.
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, r#","vlan":100"#));
    assert!(r.msg().contains("cannot apply vlan 100"), "{}", r.msg());
    let r = bed.run("ADD", "c1", "srt-no-such-ns", "net1", &conf_dev("1.0.0", &pci, ""));
    assert!(r.msg().contains("opening CNI_NETNS"), "{}", r.msg());
    assert_eq!(identity(None, &vf), Some(before));
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty());
    assert!(r.stdout.starts_with('{'), "the error JSON is on stdout: {}", r.stdout);
}

#[test]
fn two_adds_for_one_vf_exactly_one_wins() {
    root_only!();
    let mut bed = Bed::new("race", 1);
    let (ns1, ns2) = (bed.netns(), bed.netns());
    let pci = bed.vfs[0].0.clone();
    let conf = conf_dev("1.0.0", &pci, "");
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| bed.run("ADD", "c1", &ns1, "net1", &conf));
        let b = s.spawn(|| bed.run("ADD", "c2", &ns2, "net1", &conf));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.ok ^ b.ok, "exactly one wins: {} / {}", a.stdout, b.stdout);
    let loser = if a.ok { &b } else { &a };
    assert!(loser.msg().contains("already attached"), "{}", loser.msg());
    assert_eq!(bed.records().len(), 1);
    let (cid, ns) = if a.ok { ("c1", &ns1) } else { ("c2", &ns2) };
    bed.run("DEL", cid, ns, "net1", &conf).ok();
}

#[test]
fn eight_adds_in_parallel_on_eight_vfs() {
    root_only!();
    let mut bed = Bed::new("par", 8);
    let nss: Vec<String> = (0..8).map(|_| bed.netns()).collect();
    let before: Vec<_> = bed.vfs.iter().map(|(_, n)| identity(None, n).unwrap()).collect();
    let confs: Vec<String> = bed
        .vfs
        .iter()
        .enumerate()
        .map(|(i, (pci, _))| conf_dev("1.0.0", pci, &static_ipam(&format!("10.77.0.{}/24", 10 + i))))
        .collect();
    let runs: Vec<Run> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let (bed, ns, conf) = (&bed, &nss[i], &confs[i]);
                s.spawn(move || bed.run("ADD", &format!("p{i}"), ns, "net1", conf))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in runs.iter().enumerate() {
        r.ok();
        assert_eq!(addrs(&nss[i], "net1"), vec![format!("10.77.0.{}/24", 10 + i)]);
    }
    assert_eq!(bed.records().len(), 8);
    std::thread::scope(|s| {
        for i in 0..8 {
            let (bed, ns, conf) = (&bed, &nss[i], &confs[i]);
            s.spawn(move || bed.run("DEL", &format!("p{i}"), ns, "net1", conf).ok().stdout.len());
        }
    });
    let after: Vec<_> = bed.vfs.iter().map(|(_, n)| identity(None, n).unwrap()).collect();
    assert_eq!(before, after);
    assert!(bed.records().is_empty());
}

#[test]
fn pf_name_allocates_the_lowest_free_vf() {
    root_only!();
    let mut bed = Bed::new("pfn", 3);
    let conf = format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"{}"}}"#, bed.pf);
    let nss: Vec<String> = (0..4).map(|_| bed.netns()).collect();
    let mut got = Vec::new();
    for (i, ns) in nss.iter().enumerate().take(3) {
        let r = bed.run("ADD", &format!("c{i}"), ns, "net1", &conf);
        got.push(r.ok().json()["interfaces"][0]["pciID"].as_str().map(str::to_string));
    }
    let want: Vec<Option<String>> = bed.vfs.iter().map(|(p, _)| Some(p.clone())).collect();
    // pciID appears in 1.1.0 only: read the VF from the records instead.
    assert_eq!(got, vec![None, None, None]);
    // The i-th ADD got the i-th VF: lowest first, not merely three distinct ones.
    let recs = bed.records();
    let vf_of =
        |c: &str| recs.iter().find(|r| r["container_id"] == c).and_then(|r| r["pci"].as_str()).map(str::to_string);
    assert_eq!((0..3).map(|i| vf_of(&format!("c{i}"))).collect::<Vec<_>>(), want);
    for ns in &nss[..3] {
        assert!(link(Some(ns), "net1").is_some(), "{ns} has its VF");
    }
    let r = bed.run("ADD", "c3", &nss[3], "net1", &conf);
    assert!(!r.ok);
    assert!(r.msg().contains("no free VF"), "{}", r.msg());
    // Free the middle one: the next ADD gets exactly it.
    bed.run("DEL", "c1", &nss[1], "net1", &conf).ok();
    bed.run("ADD", "c3", &nss[3], "net1", &conf).ok();
    let c3 = bed.records().into_iter().find(|r| r["container_id"] == "c3").unwrap();
    assert_eq!(c3["pci"], bed.vfs[1].0.as_str());
    for (i, ns) in [(0, &nss[0]), (2, &nss[2]), (3, &nss[3])] {
        bed.run("DEL", &format!("c{i}"), ns, "net1", &conf).ok();
    }
    assert!(bed.records().is_empty());
}

#[test]
fn userspace_driver_vf_gets_no_netdev_work_and_del_works() {
    root_only!();
    let mut bed = Bed::new("vfio", 1);
    let ns = bed.netns();
    let pci = format!("{}04.7", &bed.pf_pci[..bed.pf_pci.len() - 4]);
    bed.add_vf(5, &pci, None, "vfio-pci");
    let conf = conf_dev("1.1.0", &pci, "");
    let r = bed.run("ADD", "d1", &ns, "net1", &conf);
    let j = r.ok().json();
    assert_eq!(j["interfaces"][0]["pciID"], pci.as_str());
    assert!(j["interfaces"][0].get("mac").is_none());
    assert_eq!(bed.records()[0]["driver"], "vfio-pci");
    assert_eq!(bed.records()[0]["netdev"], Value::Null);
    bed.run("DEL", "d1", &ns, "net1", &conf).ok();
    assert!(bed.records().is_empty());
}

#[test]
fn gc_releases_stale_attachments_only() {
    root_only!();
    let mut bed = Bed::new("gc", 2);
    let (ns1, ns2) = (bed.netns(), bed.netns());
    let (v0, v1) = (bed.vfs[0].clone(), bed.vfs[1].clone());
    let before = identity(None, &v1.1).unwrap();
    bed.run("ADD", "live", &ns1, "net1", &conf_dev("1.1.0", &v0.0, &static_ipam("10.77.0.20/24"))).ok();
    bed.run("ADD", "stale", &ns2, "net1", &conf_dev("1.1.0", &v1.0, &static_ipam("10.77.0.21/24"))).ok();
    let gc = |list: &str| {
        let conf = format!(
            r#"{{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma","cni.dev/valid-attachments":{list}}}"#
        );
        bed.run_env(
            &[("CNI_COMMAND".to_string(), "GC".to_string()), ("CNI_PATH".into(), CNI_PATH.into())]
                .into_iter()
                .collect(),
            &conf,
        )
    };
    gc(r#"[{"containerID":"live","ifname":"net1"}]"#).ok();
    assert_eq!(identity(None, &v1.1), Some(before), "the stale VF is back on the host");
    assert!(link(Some(&ns2), "net1").is_none());
    assert!(link(Some(&ns1), "net1").is_some(), "the live one is untouched");
    assert_eq!(bed.records().len(), 1);
    // Other networks' records are never touched by this network's GC.
    let other = r#"{"cniVersion":"1.1.0","name":"other-net","type":"sriov-rdma","cni.dev/valid-attachments":[]}"#;
    bed.run_env(&[("CNI_COMMAND".to_string(), "GC".to_string())].into_iter().collect(), other).ok();
    assert_eq!(bed.records().len(), 1);
    gc("[]").ok();
    assert!(bed.records().is_empty());
    assert!(link(None, &v0.1).is_some());
}

#[test]
fn status_and_version() {
    root_only!();
    let bed = Bed::new("sts", 1);
    let env = |cmd: &str| -> std::collections::HashMap<String, String> {
        [("CNI_COMMAND".to_string(), cmd.to_string()), ("CNI_PATH".into(), CNI_PATH.into())].into_iter().collect()
    };
    let good = format!(
        r#"{{"cniVersion":"1.1.0","name":"n","type":"sriov-rdma","pfName":"{}","ipam":{{"type":"host-local"}}}}"#,
        bed.pf
    );
    let r = bed.run_env(&env("STATUS"), &good);
    r.ok();
    assert!(r.stdout.is_empty());
    let r =
        bed.run_env(&env("STATUS"), r#"{"cniVersion":"1.1.0","name":"n","type":"sriov-rdma","pfName":"nosuchpf0"}"#);
    assert_eq!(r.code(), 50);
    assert!(r.msg().contains("nosuchpf0"), "{}", r.msg());
    let r =
        bed.run_env(&env("STATUS"), r#"{"cniVersion":"1.1.0","name":"n","type":"sriov-rdma","ipam":{"type":"nope"}}"#);
    assert_eq!(r.code(), 50);
    let r = bed.run_env(&env("STATUS"), r#"{"cniVersion":"1.0.0","name":"n","type":"sriov-rdma"}"#);
    assert_eq!(r.code(), 1, "STATUS needs 1.1.0");
    let r = bed.run_env(&env("VERSION"), r#"{"cniVersion":"0.4.0"}"#);
    let v = r.ok().json();
    assert_eq!(v["cniVersion"], "0.4.0");
    assert_eq!(v["supportedVersions"], serde_json::json!(["0.3.1", "0.4.0", "1.0.0", "1.1.0"]));
}

#[test]
fn rdma_policy_and_device_info_on_a_host_without_rdma() {
    root_only!();
    let mut bed = Bed::new("rdm", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    // "isolated" needs an RDMA subsystem: refused before anything is touched, with the fix named.
    let r = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, r#","rdma":"isolated""#));
    assert_eq!(r.code(), 7, "{}", r.stdout);
    assert!(r.msg().contains("rdma \"isolated\"") && r.msg().contains("no RDMA subsystem"), "{}", r.msg());
    assert_eq!(identity(None, &vf), Some(before.clone()));
    assert!(bed.records().is_empty());

    // "auto" attaches the netdev and writes the device-info file Multus asked for; DEL removes it.
    let info = bed.dir.join("devinfo/rdm-net1.json");
    let extra = format!(r#","runtimeConfig":{{"CNIDeviceInfoFile":"{}"}}"#, info.display());
    let conf = conf_dev("1.0.0", &pci, &extra);
    let r = bed.run("ADD", "c1", &ns, "net1", &conf);
    r.ok();
    assert!(r.stderr.contains("no RDMA subsystem"), "auto says why it does netdev only: {}", r.stderr);
    let v: Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    assert_eq!(v["type"], "pci");
    assert_eq!(v["version"], "1.1.0");
    assert_eq!(v["pci"]["pci-address"], pci.as_str());
    assert_eq!(v["pci"]["pf-pci-address"], bed.pf_pci.as_str());
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    assert!(!info.exists(), "DEL removes the file it wrote");
    assert!(!bed.dir.join("devinfo").exists(), "and the directory ADD made for it");
    assert_eq!(identity(None, &vf), Some(before));

    // A file that was there before ADD is not ours: left alone.
    std::fs::create_dir_all(bed.dir.join("devinfo")).unwrap();
    std::fs::write(&info, "{}").unwrap();
    bed.run("ADD", "c2", &ns, "net1", &conf).ok();
    bed.run("DEL", "c2", &ns, "net1", &conf).ok();
    assert_eq!(std::fs::read_to_string(&info).unwrap(), "{}");
}

fn doctor(sysfs: &std::path::Path, state: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sriov-rdma"))
        .arg("doctor")
        .args(args)
        .env_remove("CNI_COMMAND")
        .env("SRIOV_RDMA_SYSFS", sysfs)
        .env("SRIOV_RDMA_STATE_DIR", state)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn doctor_reports_pfs_vfs_attachments_and_blockers() {
    root_only!();
    let mut bed = Bed::new("doc", 2);
    let ns = bed.netns();
    let (pci, _) = bed.vfs[1].clone();
    bed.run("ADD", "doctor-c1", &ns, "net1", &conf_dev("1.0.0", &pci, "")).ok();
    let (code, out) = doctor(&bed.sysfs, &bed.state, &["--json"]);
    assert_eq!(code, 0, "{out}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let pf = &r["pfs"][0];
    assert_eq!(pf["name"], bed.pf.as_str());
    assert_eq!((pf["numvfs"].as_u64(), pf["totalvfs"].as_u64()), (Some(2), Some(2)));
    assert_eq!(pf["vfs"][0]["netdev"], bed.vfs[0].1.as_str());
    assert_eq!(pf["vfs"][0]["driver"], "igbvf");
    assert_eq!(pf["vfs"][0]["attached"], Value::Null);
    assert_eq!(pf["vfs"][1]["attached"], "doctor-c1/net1 (rdma-net)");
    assert_eq!(r["rdma"]["available"], false, "this kernel has no RDMA subsystem");
    assert!(r["warnings"].as_array().unwrap().iter().any(|w| w["code"] == "no-rdma-subsystem"), "{r}");
    let (code, text) = doctor(&bed.sysfs, &bed.state, &[]);
    assert_eq!(code, 0);
    assert!(text.contains("SR-IOV PFs") && text.contains("doctor-c1/net1"), "{text}");
    bed.run("DEL", "doctor-c1", &ns, "net1", &conf_dev("1.0.0", &pci, "")).ok();

    // No VF enabled: blocked, with the fix.
    std::fs::write(bed.pci_dir(&bed.pf_pci.clone()).join("sriov_numvfs"), "0\n").unwrap();
    let (code, text) = doctor(&bed.sysfs, &bed.state, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("Blocking ADD") && text.contains("sriov_numvfs"), "{text}");
    let (code, _) = doctor(&bed.sysfs, &bed.state, &["--bogus"]);
    assert_eq!(code, 2);
}

#[test]
fn del_undoes_an_interrupted_add() {
    root_only!();
    let mut bed = Bed::new("intr", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, r#","mtu":4000"#);
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    // What a crash between the move and the end of ADD leaves: the VF in the pod, the record not complete.
    let path = bed.state.join(format!("{pci}.json"));
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    rec["complete"] = Value::Bool(false);
    std::fs::write(&path, rec.to_string()).unwrap();
    let (_, report) = doctor(&bed.sysfs, &bed.state, &[]);
    assert!(report.contains("interrupted ADD") && report.contains("the last: netdev into the pod"), "{report}");
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

/// Runs the plugin with its address space limited to `kib` KiB (RLIMIT_AS: as root, RLIMIT_NPROC is not
/// enforced, so the address space is what makes thread stacks and child processes fail here).
fn limited(bed: &Bed, kib: u64, env: &std::collections::HashMap<String, String>, conf: &str) -> Run {
    let bytes = kib * 1024;
    run_plugin_with(&bed.sysfs, &bed.state, env, conf, move || {
        let lim = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
        // SAFETY: setrlimit is async-signal-safe and `lim` is a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
}

#[test]
fn resource_limits_end_in_a_cni_error_never_a_signal() {
    root_only!();
    let mut bed = Bed::new("rlim", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let plain = conf_dev("1.0.0", &pci, r#","mtu":4000"#);
    let with_ipam = conf_dev("1.0.0", &pci, &format!(r#","mtu":4000{}"#, static_ipam("10.77.0.40/24")));
    let version: std::collections::HashMap<String, String> =
        [("CNI_COMMAND".to_string(), "VERSION".to_string())].into_iter().collect();
    let (mut started, mut thread_errors, mut attached) = (0, 0, 0);
    // From "the binary cannot even be loaded" up to "ADD works": every limit in between must give JSON.
    let step: usize = std::env::var("SRIOV_RDMA_RLIMIT_STEP_KIB").ok().and_then(|s| s.parse().ok()).unwrap_or(256);
    for kib in (4096..=32768u64).step_by(step) {
        let v = limited(&bed, kib, &version, r#"{"cniVersion":"1.0.0"}"#);
        if !v.ok || !v.stdout.starts_with('{') {
            // The loader or the kernel's exec failed before main: nothing of ours ran.
            continue;
        }
        started += 1;
        for conf in [&plain, &with_ipam] {
            let add = limited(&bed, kib, &bed.env("ADD", "rl1", &ns, "net1"), conf);
            assert_eq!(add.signal, None, "ADD at RLIMIT_AS {kib} KiB died by a signal: {}", add.stderr);
            let j: Value = serde_json::from_str(&add.stdout).unwrap_or_else(|e| {
                panic!("ADD at {kib} KiB: stdout is not JSON ({e}): {:?} {}", add.stdout, add.stderr)
            });
            if add.ok {
                attached += 1;
            } else {
                assert!(j["code"].as_u64().is_some() && j["msg"].as_str().is_some_and(|m| !m.is_empty()), "{j}");
                if add.msg().contains("thread") {
                    thread_errors += 1;
                }
            }
            // Whatever happened, an unlimited DEL gives everything back.
            bed.run("DEL", "rl1", &ns, "net1", conf).ok();
            assert_eq!(identity(None, &vf), Some(before.clone()), "at {kib} KiB");
            assert!(bed.records().is_empty(), "at {kib} KiB");
        }
    }
    eprintln!("RLIMIT_AS scan: {started} limits started the binary, {thread_errors} thread errors, {attached} ADDs");
    assert!(started > 0, "no limit in the scan let the binary start");
    assert!(thread_errors > 0, "no limit in the scan reached a failing thread spawn: widen the scan");
    assert!(attached > 0, "no limit in the scan let ADD succeed: widen the scan");
}

#[test]
fn fifos_never_block_and_sigterm_ends_a_plugin_that_changed_nothing() {
    use std::time::Duration;
    root_only!();
    let mut bed = Bed::new("fifo", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let fifo = bed.dir.join("fifo");
    mkfifo(&fifo);
    let conf = conf_dev("1.0.0", &pci, "");
    let bounded = |env: &std::collections::HashMap<String, String>, conf: &str, what: &str| {
        wait_bounded(spawn_plugin(&bed.sysfs, &bed.state, env, conf), Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{what} hung"))
    };

    // CNI_NETNS naming a FIFO, or a regular file: refused at once, naming the variable.
    for path in [fifo.clone(), bed.dir.join("not-a-netns")] {
        std::fs::write(bed.dir.join("not-a-netns"), "").unwrap();
        let mut env = bed.env("ADD", "f1", &ns, "net1");
        env.insert("CNI_NETNS".into(), path.display().to_string());
        let r = bounded(&env, &conf, "ADD with a FIFO as CNI_NETNS");
        assert!(r.msg().contains("CNI_NETNS") && r.msg().contains("not a network namespace"), "{}", r.msg());
        let mut env = bed.env("DEL", "f1", &ns, "net1");
        env.insert("CNI_NETNS".into(), path.display().to_string());
        bounded(&env, &conf, "DEL with a FIFO as CNI_NETNS").ok();
    }

    // A FIFO as logFile: the plugin logs to stderr instead and says why.
    let logged = conf_dev("1.0.0", &pci, &format!(r#","logFile":"{}""#, fifo.display()));
    let r = bounded(&bed.env("ADD", "f1", &ns, "net1"), &logged, "ADD with a FIFO as logFile");
    r.ok();
    assert!(r.stderr.contains("logFile") && r.stderr.contains("logging to stderr"), "{}", r.stderr);
    bounded(&bed.env("DEL", "f1", &ns, "net1"), &logged, "DEL with a FIFO as logFile").ok();
    assert_eq!(identity(None, &vf), Some(before.clone()));

    // SIGTERM while ADD (then DEL) waits for the VF lock, before it changed anything: the plugin ends.
    let lock_path = bed.state.join(format!("{pci}.lock"));
    let held = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).unwrap();
    held.lock().unwrap();
    let term = |cmd: &str| {
        let child = spawn_plugin(&bed.sysfs, &bed.state, &bed.env(cmd, "f2", &ns, "net1"), &conf);
        // Wait until it sleeps: the only sleep before anything changes is the backoff of its wait for the lock.
        let wchan = format!("/proc/{}/wchan", child.id());
        let waiting = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::fs::read_to_string(&wchan).is_ok_and(|w| w.contains("nanosleep"))
        });
        assert!(waiting, "{cmd} never reached the wait for the VF lock");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
            .unwrap();
        let r = wait_bounded(child, Duration::from_secs(3)).unwrap_or_else(|| panic!("{cmd} ignored SIGTERM"));
        assert_eq!(r.signal, Some(libc::SIGTERM), "{cmd} waiting for the lock must end on SIGTERM: {}", r.stdout);
    };
    term("ADD");
    assert!(bed.records().is_empty());
    held.unlock().unwrap();
    bed.run("ADD", "f2", &ns, "net1", &conf).ok();
    held.lock().unwrap();
    term("DEL");
    held.unlock().unwrap();
    assert_eq!(bed.records().len(), 1, "the DEL that was ended changed nothing");
    bed.run("DEL", "f2", &ns, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

/// The pid of a process that has exited (and been reaped).
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn temp_records_of_dead_writers_are_removed_by_del_gc_and_add() {
    root_only!();
    let mut bed = Bed::new("tmpr", 1);
    let ns = bed.netns();
    let pci = bed.vfs[0].0.clone();
    let conf = conf_dev("1.1.0", &pci, "");
    bed.run("DEL", "t0", &ns, "net1", &conf).ok(); // creates the state directory
                                                   // What a SIGKILL between writing the temp record and renaming it leaves; and one of a live writer.
    let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let live_tmp = bed.state.join(format!(".{pci}.json.{}", live.id()));
    std::fs::write(&live_tmp, "{").unwrap();
    let plant = || {
        let p = bed.state.join(format!(".{pci}.json.{}", dead_pid()));
        std::fs::write(&p, "{\"partial\":").unwrap();
        p
    };
    let gc = [("CNI_COMMAND".to_string(), "GC".to_string()), ("CNI_PATH".into(), CNI_PATH.into())];
    let gc_conf = r#"{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma","cni.dev/valid-attachments":[]}"#;
    for step in ["DEL", "GC", "ADD"] {
        let dead = plant();
        match step {
            "GC" => bed.run_env(&gc.clone().into_iter().collect(), gc_conf).ok(),
            cmd => bed.run(cmd, "t1", &ns, "net1", &conf).ok(),
        };
        assert!(!dead.exists(), "{step} left the temp record of a dead writer: {}", dead.display());
        assert!(live_tmp.exists(), "{step} removed the temp record of a live writer");
    }
    bed.run("DEL", "t1", &ns, "net1", &conf).ok();
    let _ = live.kill();
    let _ = live.wait();
    assert!(bed.records().is_empty());
}
