//! DEL and rollback on the paths a hostile world takes: a netns path that cannot be used, an interface name the
//! kernel would take as a pattern, an IPAM config that fails both ADD and DEL, a device that took the VF's host
//! name. Real namespaces, veth ends standing in for VF netdevs (tests/common), the real plugin binary.
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;

fn can_run(what: &str) -> bool {
    require::required(what, &["/usr/lib/cni/static", "/usr/lib/cni/host-local"])
}

#[test]
fn del_with_a_netns_path_that_is_not_a_netns_fails_and_changes_nothing() {
    // A path that is no namespace is no live pod: DEL takes the namespace as gone, and then finds the VF not
    // back on the host (it is in the live pod), so it changes nothing and keeps the record.
    if !can_run("del_with_a_netns_path_that_is_not_a_netns_fails_and_changes_nothing") {
        return;
    }
    let mut bed = Bed::new("rnn", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, &format!(r#","mtu":4000{}"#, static_ipam("10.77.0.5/24")));
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    let dir = bed.dir.join("not-a-netns");
    std::fs::create_dir_all(&dir).unwrap();
    // A regular file and a directory: both open, neither is a network namespace.
    for bad in ["/etc/passwd", dir.to_str().unwrap()] {
        let mut env = bed.env("DEL", "c1", &ns, "net1");
        env.insert("CNI_NETNS".into(), bad.to_string());
        let r = bed.run_env(&env, &conf);
        assert!(!r.ok, "DEL with CNI_NETNS={bad} must fail: {}", r.stderr);
        assert_eq!(r.code(), 5, "{}", r.stdout);
        assert!(r.msg().contains(bad) && r.msg().contains("record is kept"), "{}", r.msg());
        assert_eq!(bed.records().len(), 1, "the record is kept");
        assert!(link(Some(&ns), "net1").is_some(), "the VF stays in the live pod");
        assert_eq!(addrs(&ns, "net1"), vec!["10.77.0.5/24".to_string()], "its address is untouched");
        assert!(link(None, &vf).is_none(), "nothing was restored under the live pod");
    }
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

#[test]
fn an_ifname_the_kernel_would_take_as_a_pattern_is_refused_before_anything() {
    if !can_run("an_ifname_the_kernel_would_take_as_a_pattern_is_refused_before_anything") {
        return;
    }
    let mut bed = Bed::new("rpc", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, "");
    for name in ["net%d", "%s"] {
        let r = bed.run("ADD", "c1", &ns, name, &conf);
        assert!(!r.ok);
        assert_eq!(r.code(), 4, "{}", r.stdout);
        assert!(r.msg().contains("CNI_IFNAME") && r.msg().contains('%'), "{}", r.msg());
        assert_eq!(identity(None, &vf), Some(before.clone()), "the VF never left the host");
        assert!(bed.records().is_empty());
    }
}

#[test]
fn an_ipam_config_that_fails_add_and_del_does_not_strand_the_vf() {
    if !can_run("an_ipam_config_that_fails_add_and_del_does_not_strand_the_vf") {
        return;
    }
    let mut bed = Bed::new("rip", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let data = bed.dir.join("ipam");
    let bad = conf_dev(
        "1.0.0",
        &pci,
        &format!(r#","ipam":{{"type":"host-local","subnet":"10.300.0.0/16","dataDir":"{}"}}"#, data.display()),
    );
    let r = bed.run("ADD", "c1", &ns, "net1", &bad);
    assert!(!r.ok);
    assert!(r.msg().contains("IPAM"), "{}", r.msg());
    assert!(bed.records().is_empty(), "no record holds the VF: {:?}", bed.records());
    assert_eq!(identity(None, &vf), Some(before.clone()));
    // The runtime's DEL of the failed ADD succeeds or fails, but never leaves anything behind either.
    let _ = bed.run("DEL", "c1", &ns, "net1", &bad);
    assert!(bed.records().is_empty());
    // The VF is free: the next pod gets it.
    let good = conf_dev("1.0.0", &pci, &static_ipam("10.77.0.6/24"));
    bed.run("ADD", "c2", &ns, "net1", &good).ok();
    bed.run("DEL", "c2", &ns, "net1", &good).ok();
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn del_never_touches_a_device_that_took_the_vf_host_name() {
    if !can_run("del_never_touches_a_device_that_took_the_vf_host_name") {
        return;
    }
    let mut bed = Bed::new("rtk", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let conf = conf_dev("1.0.0", &pci, r#","mtu":4100"#);
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    // Another device takes the VF's host name while the pod runs.
    must(&[
        "ip",
        "link",
        "add",
        &vf,
        "mtu",
        "1400",
        "address",
        "02:aa:00:00:00:07",
        "type",
        "veth",
        "peer",
        "name",
        "rtkimp",
    ]);
    let impostor = identity(None, &vf).unwrap();
    let r = bed.run("DEL", "c1", &ns, "net1", &conf);
    let impostor_after = identity(None, &vf);
    let _ = sh(&["ip", "link", "del", &vf]);
    r.ok();
    assert!(r.stderr.contains("taken by another device"), "a clear warning: {}", r.stderr);
    assert_eq!(impostor_after, Some(impostor), "the other device keeps its name, MAC, MTU, state");
    let spare = format!("{}v0", bed.pf);
    let back = identity(None, &spare).unwrap_or_else(|| panic!("the VF is back as {spare}: {}", r.stderr));
    assert_eq!((back.1, back.2, back.3), (before.1.clone(), before.2, before.3), "the VF's own MAC, MTU, up state");
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty());
    // Give the stand-in its name back so the bed's cleanup finds it.
    must(&["ip", "link", "set", &spare, "name", &vf]);
}

/// A stand-in IPAM plugin `busyipam` (no real IPAM plugin can be made to fail on cue): its DEL answers "try again
/// later" (code 11) while the returned `busy` file exists; its ADD answers `add_result`. Returns the bin directory
/// and the `busy` path.
fn busy_ipam(bed: &Bed, add_result: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let busy = bed.dir.join("busy");
    let cases = format!(
        r#"  ADD) echo '{add_result}' ;;
  DEL) if [ -e {busy} ]; then echo '{{"cniVersion":"1.0.0","code":11,"msg":"lease store busy"}}'; exit 1; fi ;;
  VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}}' ;;"#,
        busy = busy.display()
    );
    (stand_in_ipam(&bed.dir, "busyipam", &cases), busy)
}

/// The DEL/ADD environment with CNI_PATH at `bin`.
fn env_at(bed: &Bed, cmd: &str, ns: &str, bin: &std::path::Path) -> std::collections::HashMap<String, String> {
    let mut e = bed.env(cmd, "c1", ns, "net1");
    e.insert("CNI_PATH".into(), bin.display().to_string());
    e
}

#[test]
fn a_failed_ipam_del_keeps_the_record_and_its_own_code() {
    if !can_run("a_failed_ipam_del_keeps_the_record_and_its_own_code") {
        return;
    }
    let mut bed = Bed::new("ric", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let (bin, busy) = busy_ipam(&bed, r#"{"cniVersion":"1.0.0","ips":[{"address":"10.77.0.21/24"}]}"#);
    let conf = conf_dev("1.0.0", &pci, r#","ipam":{"type":"busyipam"}"#);
    let env = |cmd: &str| env_at(&bed, cmd, &ns, &bin);
    bed.run_env(&env("ADD"), &conf).ok();
    std::fs::write(&busy, b"").unwrap();
    let r = bed.run_env(&env("DEL"), &conf);
    assert!(!r.ok);
    assert_eq!(r.code(), 11, "the IPAM plugin's own code: {}", r.stdout);
    assert!(r.msg().contains("lease store busy") && r.msg().contains("record kept"), "{}", r.msg());
    assert_eq!(bed.records().len(), 1, "the lease may still be held: the record stays for the retry");
    std::fs::remove_file(&busy).unwrap();
    bed.run_env(&env("DEL"), &conf).ok();
    assert!(bed.records().is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn a_rolled_back_add_whose_ipam_del_failed_keeps_the_lease_for_the_retried_del() {
    if !can_run("a_rolled_back_add_whose_ipam_del_failed_keeps_the_lease_for_the_retried_del") {
        return;
    }
    let mut bed = Bed::new("rrb", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    // Its ADD hands out a route through an unreachable gateway, so ADD fails after IPAM allocated and rolls back.
    let (bin, busy) = busy_ipam(
        &bed,
        r#"{"cniVersion":"1.0.0","ips":[{"address":"10.77.0.22/24"}],"routes":[{"dst":"10.50.0.0/16","gw":"10.99.0.1"}]}"#,
    );
    let conf = conf_dev("1.0.0", &pci, r#","ipam":{"type":"busyipam"}"#);
    let env = |cmd: &str| env_at(&bed, cmd, &ns, &bin);
    std::fs::write(&busy, b"").unwrap();
    let r = bed.run_env(&env("ADD"), &conf);
    assert!(!r.ok, "the route cannot be added: {}", r.stdout);
    assert!(r.msg().contains("adding route"), "{}", r.msg());
    assert_eq!(bed.records().len(), 1, "IPAM DEL failed in the rollback: the record stays");
    // The runtime's DEL while the lease store is still busy: the record must survive it.
    let r = bed.run_env(&env("DEL"), &conf);
    assert!(!r.ok && r.code() == 11, "the IPAM plugin's failure counts: {}", r.stdout);
    assert_eq!(bed.records().len(), 1, "the lease may still be held: the record stays for the retry");
    std::fs::remove_file(&busy).unwrap();
    bed.run_env(&env("DEL"), &conf).ok();
    assert!(bed.records().is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}

/// A runtime that kills ADD (its timeout) while the IPAM plugin allocates runs DEL next. The IPAM plugin must die
/// with ADD: one left running takes its lease after DEL released it, and no record names it (tests/crash.rs saw a
/// host-local lease left so). The stand-in marks when it starts, then sleeps and would mark that it allocated.
#[test]
fn an_ipam_plugin_dies_with_the_add_that_started_it() {
    if !can_run("an_ipam_plugin_dies_with_the_add_that_started_it") {
        return;
    }
    let mut bed = Bed::new("rik", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let started = bed.dir.join("ipam-started");
    let allocated = bed.dir.join("ipam-allocated");
    let cases = format!(
        r#"  ADD) : > {started}; sleep 2; : > {allocated}; echo '{{"cniVersion":"1.0.0","ips":[{{"address":"10.77.0.23/24"}}]}}' ;;
  DEL) ;;
  VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}}' ;;"#,
        started = started.display(),
        allocated = allocated.display()
    );
    let bin = stand_in_ipam(&bed.dir, "slowipam", &cases);
    let conf = conf_dev("1.0.0", &pci, r#","ipam":{"type":"slowipam"}"#);
    let mut add = spawn_plugin(&bed.sysfs, &bed.state, &env_at(&bed, "ADD", &ns, &bin), &conf);
    let t = std::time::Instant::now();
    while !started.exists() && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(started.exists(), "the IPAM plugin never started");
    add.kill().unwrap();
    add.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(!allocated.exists(), "the IPAM plugin went on after ADD was killed and allocated");
    bed.run_env(&env_at(&bed, "DEL", &ns, &bin), &conf).ok();
    assert!(bed.records().is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}

/// host-local creates a lease file, then writes its owner into it; an ADD killed between the two (its host-local
/// dies with it) leaves an empty lease that host-local's DEL cannot match: an address lost to the range (a host-local
/// SIGKILLed at random moments on its own leaves such files). The DEL after the kill removes it, under host-local's
/// lock; a lease another container holds stays. The stand-in is named host-local: it creates its directory, lock and
/// an empty lease as host-local does, then would write the owner after a pause the kill cuts short.
#[test]
fn an_empty_lease_a_killed_host_local_left_is_removed_by_del() {
    if !can_run("an_empty_lease_a_killed_host_local_left_is_removed_by_del") {
        return;
    }
    let mut bed = Bed::new("hlk", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let data = bed.dir.join("hl");
    let net = data.join("rdma-net");
    let lease = net.join("10.77.0.24");
    let other = net.join("10.77.0.25");
    let cases = format!(
        r#"  ADD) mkdir -p {net}; : > {net}/lock; : > {lease}; sleep 5; printf '%s\r\n%s' "$CNI_CONTAINERID" "$CNI_IFNAME" > {lease} ;;
  DEL) ;;
  VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}}' ;;"#,
        net = net.display(),
        lease = lease.display()
    );
    let bin = stand_in_ipam(&bed.dir, "host-local", &cases);
    let conf = conf_dev("1.0.0", &pci, &format!(r#","ipam":{{"type":"host-local","dataDir":"{}"}}"#, data.display()));
    let mut add = spawn_plugin(&bed.sysfs, &bed.state, &env_at(&bed, "ADD", &ns, &bin), &conf);
    let t = std::time::Instant::now();
    while !lease.exists() && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(lease.exists(), "the stand-in host-local never made its lease");
    add.kill().unwrap();
    add.wait().unwrap();
    std::fs::write(&other, "another-container\r\nnet1").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(std::fs::metadata(&lease).map(|m| m.len()).ok(), Some(0), "the killed ADD's lease is not the empty one");
    let del = bed.run_env(&env_at(&bed, "DEL", &ns, &bin), &conf);
    assert!(del.ok, "DEL after the kill: {} {}", del.stdout, del.stderr);
    assert!(!lease.exists(), "the empty lease the killed ADD left is still there");
    assert!(other.exists(), "another container's lease was removed");
    assert!(bed.records().is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}
