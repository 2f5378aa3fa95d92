//! `sriov-rdma doctor`'s three questions on the host test bed: veth ends stand in for the PF and VF netdevs (their
//! MTU, carrier and counters are the kernel's), behind a fake sysfs PCI tree (PCIe link files, RDMA ports and their
//! counters are the fixture's). The emulated machine (tests/vm/doctor.sh) shows the same checks on real VFs.

mod common;

use common::*;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

macro_rules! root_only {
    () => {
        if !need_root() {
            return;
        }
    };
}

/// Runs doctor with the bed's sysfs and store and a kubelet directory of the test's own (absent unless made).
fn doctor_in(bed: &Bed, kubelet: &Path, args: &[&str], path_var: Option<&str>) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sriov-rdma"));
    c.arg("doctor")
        .args(["--kubelet-dir", kubelet.to_str().unwrap()])
        .args(args)
        .env_remove("CNI_COMMAND")
        .env("SRIOV_RDMA_SYSFS", &bed.sysfs)
        .env("SRIOV_RDMA_STATE_DIR", &bed.state);
    if let Some(p) = path_var {
        c.env("PATH", p);
    }
    let out = c.output().expect("running sriov-rdma doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {out}"))
}

fn warnings(r: &Value) -> Vec<String> {
    messages(r, "warnings")
}

/// The messages of `warnings` or `blockers`.
fn messages(r: &Value, list: &str) -> Vec<String> {
    r[list].as_array().unwrap().iter().map(|w| w["message"].as_str().unwrap().to_string()).collect()
}

/// The codes of `warnings` or `blockers`.
fn codes(r: &Value, list: &str) -> Vec<String> {
    r[list].as_array().unwrap().iter().map(|w| w["code"].as_str().unwrap_or("").to_string()).collect()
}

/// A RoCE port in the fake tree: device `dev` under PCI function `pci`, port 1 bound to `netdev`, with counters.
fn roce_port(bed: &Bed, pci: &str, dev: &str, netdev: &str, counters: &[(&str, u64)]) -> PathBuf {
    bed.tree.rdma(pci, dev, &[(0, "fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCE v2", netdev)]).unwrap();
    let port = bed.sysfs.join("class/infiniband").join(dev).join("ports/1");
    fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
    fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
    fs::create_dir_all(port.join("counters")).unwrap();
    fs::create_dir_all(port.join("hw_counters")).unwrap();
    for (name, v) in counters {
        set_counter(&port, name, *v);
    }
    port
}

/// Writes a counter atomically (a reader never sees half a number).
fn set_counter(port: &Path, name: &str, v: u64) {
    let p = port.join(name);
    let tmp = port.parent().unwrap().join(format!(".tmp-{}", name.replace('/', "-")));
    fs::write(&tmp, format!("{v}\n")).unwrap();
    fs::rename(&tmp, &p).unwrap();
}

/// The PCIe link files of a PCI function: (speed, width) now and at most.
fn pcie_link(dir: &Path, current: (&str, &str), max: (&str, &str)) {
    for (f, v) in [
        ("current_link_speed", current.0),
        ("current_link_width", current.1),
        ("max_link_speed", max.0),
        ("max_link_width", max.1),
    ] {
        fs::write(dir.join(f), format!("{v}\n")).unwrap();
    }
}

#[test]
fn a_degraded_pcie_link_and_a_netdev_mtu_below_the_roce_mtu_are_flagged_with_the_fix() {
    root_only!();
    let bed = Bed::new("dbw", 1);
    let kubelet = bed.dir.join("no-kubelet");
    let pf_dir = bed.pci_dir(&bed.pf_pci);
    pcie_link(&pf_dir, ("8.0 GT/s PCIe", "8"), ("16.0 GT/s PCIe", "16"));
    fs::write(bed.sysfs.join("class/net").join(&bed.pf).join("speed"), "100000\n").unwrap();
    let (vf_pci, vf) = bed.vfs[0].clone();
    roce_port(&bed, &vf_pci, "mlx5_7", &vf, &[]);
    // The classic mistake: the netdev at MTU 4096, which leaves RoCE 2048 (the kernel holds this MTU).
    must(&["ip", "link", "set", &vf, "mtu", "4096"]);
    let (code, out, err) = doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None);
    assert_eq!(code, 0, "nothing blocks a pod here: {out} {err}");
    let r = json(&out);
    let pf = &r["bandwidth"]["pfs"][0];
    assert_eq!(pf["name"], bed.pf.as_str());
    assert_eq!(pf["pcie"]["degraded"], true, "{pf}");
    assert_eq!((pf["pcie"]["current_width"].as_u64(), pf["pcie"]["max_width"].as_u64()), (Some(8), Some(16)));
    let port = &r["bandwidth"]["ports"][0];
    assert_eq!((port["device"].as_str(), port["netdev"].as_str()), (Some("mlx5_7"), Some(vf.as_str())));
    assert_eq!(port["netdev_mtu"], 4096, "read from the kernel: {port}");
    assert_eq!((port["active_mtu"].as_u64(), port["max_mtu"].as_u64()), (Some(2048), Some(4096)), "{port}");
    let w = warnings(&r);
    assert!(
        w.iter().any(|w| w.contains("PCIe link runs at 8 GT/s x8")
            && w.contains("below its 16 GT/s x16")
            && w.contains("lspci -s")),
        "{w:?}"
    );
    assert!(w.iter().any(|w| w.contains("carries less than its network link (100 Gbit/s)")), "{w:?}");
    assert!(
        w.iter()
            .any(|w| w.contains("mlx5_7 port 1 runs RoCE MTU 2048")
                && w.contains(&format!("ip link set dev {vf} mtu 4200"))),
        "{w:?}"
    );
    let (_, text, _) = doctor_in(&bed, &kubelet, &["--interval", "0"], None);
    assert!(text.contains("DEGRADED") && text.contains("RoCE MTU 2048 of 4096"), "{text}");

    // A link the kernel reports as "Unknown" (an integrated endpoint, as QEMU's igb: width 0 of 255): no figures,
    // and no "degraded" from comparing 0 with 255.
    pcie_link(&pf_dir, ("Unknown", "0"), ("Unknown", "255"));
    let r = json(&doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None).1);
    assert!(r["bandwidth"]["pfs"][0]["pcie"].is_null(), "{r}");
    assert!(!warnings(&r).iter().any(|w| w.contains("PCIe")), "{r}");

    // Fixed: a full-width link and MTU 9000 make both warnings go.
    pcie_link(&pf_dir, ("16.0 GT/s PCIe", "16"), ("16.0 GT/s PCIe", "16"));
    must(&["ip", "link", "set", &vf, "mtu", "9000"]);
    let r = json(&doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None).1);
    assert_eq!(r["bandwidth"]["pfs"][0]["pcie"]["degraded"], false);
    assert_eq!(r["bandwidth"]["ports"][0]["active_mtu"], 4096);
    let w = warnings(&r);
    assert!(!w.iter().any(|w| w.contains("PCIe") || w.contains("RoCE MTU")), "{w:?}");
}

#[test]
fn json_has_a_schema_version_and_a_documented_code_for_each_warning_and_blocker() {
    root_only!();
    let bed = Bed::new("dcd", 1);
    let kubelet = bed.dir.join("no-kubelet");
    pcie_link(&bed.pci_dir(&bed.pf_pci), ("8.0 GT/s PCIe", "8"), ("16.0 GT/s PCIe", "16"));
    // A config whose deviceID is no VF of this node: ADD would fail, a blocker.
    fs::create_dir_all(&bed.dir).unwrap();
    let conf = bed.dir.join("gone.conf");
    fs::write(&conf, conf_dev("1.0.0", "0000:99:00.1", "")).unwrap();
    let (code, out, err) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--config", conf.to_str().unwrap()], None);
    assert_eq!(code, 1, "{out} {err}");
    let r = json(&out);
    assert_eq!(r["schema"], 1, "{r}");
    let (w, b) = (codes(&r, "warnings"), codes(&r, "blockers"));
    assert!(w.contains(&"pcie-link-degraded".to_string()), "{w:?}");
    assert_eq!(b, vec!["add-would-fail"], "{r}");
    // Every code is a short stable word and docs/doctor.md lists it, with every code the source can emit.
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/doctor.md")).unwrap();
    let listed = |c: &str| doc.contains(&format!("| `{c}` |"));
    for c in w.iter().chain(&b) {
        assert!(!c.is_empty() && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "code {c:?}");
    }
    let mut emitted = Vec::new();
    for f in ["mod.rs", "link.rs", "bandwidth.rs", "resource.rs"] {
        let src = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/doctor").join(f)).unwrap();
        // `Finding::new("code", …)`, the code on the same line or (rustfmt's) the next.
        emitted.extend(
            src.split("Finding::new(")
                .skip(1)
                .filter_map(|s| s.trim_start().strip_prefix('"'))
                .filter_map(|s| s.split('"').next().map(str::to_string)),
        );
    }
    assert!(emitted.len() >= 30, "{emitted:?}");
    let undocumented: Vec<&String> = emitted.iter().filter(|c| !listed(c)).collect();
    assert!(undocumented.is_empty(), "codes missing from docs/doctor.md: {undocumented:?}");
    let mut unique = emitted.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), emitted.len(), "each code names one finding: {emitted:?}");
}

#[test]
fn counters_that_move_between_the_two_reads_are_named_and_still_ones_are_not() {
    root_only!();
    let bed = Bed::new("dlk", 1);
    let kubelet = bed.dir.join("no-kubelet");
    let (vf_pci, vf) = bed.vfs[0].clone();
    let peer = format!("{vf}p");
    must(&["ip", "link", "set", &vf, "up"]);
    must(&["ip", "link", "set", &peer, "up"]);
    let port = roce_port(
        &bed,
        &vf_pci,
        "mlx5_8",
        &vf,
        &[("counters/symbol_error", 0), ("counters/port_rcv_errors", 7), ("hw_counters/rnr_nak_retry_err", 0)],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_sriov-rdma"))
        .args(["doctor", "--json", "--interval", "2", "--kubelet-dir", kubelet.to_str().unwrap()])
        .env_remove("CNI_COMMAND")
        .env("SRIOV_RDMA_SYSFS", &bed.sysfs)
        .env("SRIOV_RDMA_STATE_DIR", &bed.state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While doctor runs: the VF's link flaps (its veth peer down and up: the kernel counts the carrier changes)
    // and two port counters climb. Bounded: doctor takes ~2 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u64;
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        n += 1;
        set_counter(&port, "counters/symbol_error", n);
        set_counter(&port, "hw_counters/rnr_nak_retry_err", 3 * n);
        must(&["ip", "link", "set", &peer, if n % 2 == 1 { "down" } else { "up" }]);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(r["link"]["interval_ms"], 2000);
    let nd = r["link"]["netdevs"].as_array().unwrap().iter().find(|d| d["name"] == vf.as_str()).cloned().unwrap();
    assert_eq!(nd["role"], "VF 0 of tdlkpf");
    let cc = nd["moved"].as_array().unwrap().iter().find(|m| m["counter"] == "carrier_changes").cloned();
    let cc = cc.unwrap_or_else(|| panic!("carrier_changes not named: {nd}"));
    assert!(cc["after"].as_u64() > cc["before"].as_u64());
    // The figure is the kernel's: it never exceeds what the kernel counts now.
    let now: u64 = fs::read_to_string(format!("/sys/class/net/{vf}/carrier_changes")).unwrap().trim().parse().unwrap();
    assert!(cc["after"].as_u64().unwrap() <= now, "{cc} vs the kernel's {now}");
    let p = &r["link"]["ports"][0];
    assert_eq!(
        (p["device"].as_str(), p["state"].as_str(), p["phys_state"].as_str()),
        (Some("mlx5_8"), Some("ACTIVE"), Some("LinkUp"))
    );
    let names: Vec<&str> = p["moved"].as_array().unwrap().iter().map(|m| m["counter"].as_str().unwrap()).collect();
    assert!(names.contains(&"symbol_error") && names.contains(&"hw_counters/rnr_nak_retry_err"), "{p}");
    assert!(!names.contains(&"port_rcv_errors"), "a counter that stood still is not named: {p}");
    let w = warnings(&r);
    assert!(
        w.iter().any(|w| w.starts_with(&format!("{vf} (VF 0 of tdlkpf) changed carrier")) && w.contains("ethtool")),
        "{w:?}"
    );
    assert!(
        w.iter().any(|w| w.contains("mlx5_8 port 1: error counters moved")
            && w.contains("symbol_error +")
            && !w.contains("port_rcv_errors")),
        "{w:?}"
    );

    // One read (--interval 0): nothing can have moved.
    let r = json(&doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None).1);
    assert!(r["link"]["ports"][0]["moved"].as_array().unwrap().is_empty());
}

#[test]
fn config_says_whether_add_would_find_a_vf_and_changes_nothing() {
    root_only!();
    let mut bed = Bed::new("dcf", 2);
    let kubelet = bed.dir.join("no-kubelet");
    let (vf0, _) = bed.vfs[0].clone();
    let (vf1, _) = bed.vfs[1].clone();
    fs::create_dir_all(&bed.dir).unwrap();
    let by_dev = bed.dir.join("dev.conf");
    fs::write(&by_dev, conf_dev("1.0.0", &vf0, "")).unwrap();
    let by_pf = bed.dir.join("pf.conflist");
    fs::write(
        &by_pf,
        format!(
            r#"{{"cniVersion":"1.0.0","name":"rdma-net","plugins":[{{"type":"sriov-rdma","pfName":"{}"}}]}}"#,
            bed.pf
        ),
    )
    .unwrap();

    let (code, out, err) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--config", by_dev.to_str().unwrap()], None);
    assert_eq!(code, 0, "{out} {err}");
    let c = &json(&out)["resource"]["configs"][0];
    assert_eq!(c["vf"], vf0.as_str(), "{c}");
    assert!(c["error"].is_null());

    // VF 0 attached by a real ADD: the same config now fails as ADD would; pfName takes VF 1.
    let ns = bed.netns();
    bed.run("ADD", "dcf-c1", &ns, "net1", &conf_dev("1.0.0", &vf0, "")).ok();
    let before = state_files(&bed.state);
    let (code, out, _) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--config", by_dev.to_str().unwrap()], None);
    assert_eq!(code, 1, "{out}");
    let r = json(&out);
    let c = &r["resource"]["configs"][0];
    assert!(c["vf"].is_null() && c["code"] == 5, "{c}");
    assert!(c["error"].as_str().unwrap().contains("already attached to container dcf-c1 as net1"), "{c}");
    assert!(messages(&r, "blockers").iter().any(|b| b.contains("ADD would fail")), "{r}");
    let h = &r["resource"]["holders"][0];
    assert_eq!(
        (h["vf"].as_str(), h["container_id"].as_str(), h["orphan"].as_bool()),
        (Some(vf0.as_str()), Some("dcf-c1"), Some(false))
    );

    let (code, out, _) = doctor_in(&bed, &kubelet, &["--interval", "0", "--config", by_pf.to_str().unwrap()], None);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("plugins[0]: ADD would take VF {vf1}"))
            && out.contains("skipped VF 0 held by dcf-c1/net1"),
        "{out}"
    );
    assert_eq!(state_files(&bed.state), before, "doctor wrote nothing into the store");
    assert!(!bed.state.join(format!("{vf1}.lock")).exists(), "doctor took no lock (and made no lock file)");

    // VF 1 locked by another invocation (a lock held here, as a running ADD holds it): ADD would wait, then
    // answer code 11; doctor reads the lock from /proc/locks and takes none.
    {
        let lock = fs::File::create(bed.state.join(format!("{vf1}.lock"))).unwrap();
        lock.lock().unwrap();
        let by_dev1 = bed.dir.join("dev1.conf");
        fs::write(&by_dev1, conf_dev("1.0.0", &vf1, "")).unwrap();
        let args = ["--json", "--interval", "0", "--config", by_dev1.to_str().unwrap()];
        let (code, out, _) = doctor_in(&bed, &kubelet, &args, None);
        assert_eq!(code, 1, "{out}");
        let c = &json(&out)["resource"]["configs"][0];
        assert!(c["code"] == 11 && c["error"].as_str().unwrap().contains("is locked by a running ADD/DEL"), "{c}");
        drop(lock);
        assert_eq!(doctor_in(&bed, &kubelet, &args, None).0, 0, "unlocked: found");
        fs::remove_file(bed.state.join(format!("{vf1}.lock"))).unwrap();
    }

    // A NAD's config has no deviceID (Multus injects it): --device stands in; a non-VF address is a config error.
    let nad = bed.dir.join("nad.json");
    fs::write(&nad, r#"{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","vlan":100}"#).unwrap();
    let (code, out, _) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--config", nad.to_str().unwrap()], None);
    assert_eq!(code, 1);
    assert!(json(&out)["resource"]["configs"][0]["error"].as_str().unwrap().contains("no VF given"), "{out}");
    let args = ["--json", "--interval", "0", "--config", nad.to_str().unwrap(), "--device", &vf1];
    let (code, out, _) = doctor_in(&bed, &kubelet, &args, None);
    assert_eq!(code, 0, "{out}");
    assert_eq!(json(&out)["resource"]["configs"][0]["vf"], vf1.as_str());
    let args = ["--json", "--interval", "0", "--config", nad.to_str().unwrap(), "--device", &bed.pf_pci];
    let (code, out, _) = doctor_in(&bed, &kubelet, &args, None);
    assert_eq!(code, 1);
    let c = &json(&out)["resource"]["configs"][0];
    assert!(c["code"] == 7 && c["error"].as_str().unwrap().contains("not an SR-IOV VF"), "{c}");
    // A bad value is refused as ADD refuses it, key named.
    fs::write(&nad, r#"{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","vlan":5000}"#).unwrap();
    let c = json(&doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--config", nad.to_str().unwrap()], None).1);
    let c = &c["resource"]["configs"][0];
    assert!(c["code"] == 7 && c["error"].as_str().unwrap().contains("vlan"), "{c}");

    bed.run("DEL", "dcf-c1", &ns, "net1", &conf_dev("1.0.0", &vf0, "")).ok();
    let (code, _, _) = doctor_in(&bed, &kubelet, &["--interval", "0", "--config", by_dev.to_str().unwrap()], None);
    assert_eq!(code, 0, "VF 0 is free again after DEL");
    // Bad arguments: status 2.
    assert_eq!(doctor_in(&bed, &kubelet, &["--interval", "x"], None).0, 2);
    assert_eq!(doctor_in(&bed, &kubelet, &["--device", &vf0], None).0, 2);
}

#[test]
fn the_kubelet_registration_is_read_from_its_socket_and_checkpoint() {
    root_only!();
    let bed = Bed::new("dku", 1);
    let (vf0, _) = bed.vfs[0].clone();
    let kubelet = bed.dir.join("device-plugins");
    fs::create_dir_all(&kubelet).unwrap();
    // A directory without kubelet.sock: the kubelet is not running (a warning, not a blocker).
    let (code, out, _) = doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None);
    assert_eq!(code, 0, "{out}");
    let r = json(&out);
    assert_eq!(r["resource"]["kubelet"]["present"], true);
    assert!(
        warnings(&r).iter().any(|w| w.contains("no kubelet.sock") && w.contains("systemctl status kubelet")),
        "{r}"
    );
    // A kubelet socket (a real listening unix socket) and a checkpoint whose resources hold none of this node's VFs.
    let _sock = std::os::unix::net::UnixListener::bind(kubelet.join("kubelet.sock")).unwrap();
    let _dp = std::os::unix::net::UnixListener::bind(kubelet.join("sriov_rdma.sock")).unwrap();
    let cp = |ids: &str| {
        format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"pod-1","ContainerName":"w","ResourceName":"nvidia.com/cx6_sriov_rdma","DeviceIDs":{{"0":[{ids}]}},"AllocResp":""}}],
            "RegisteredDevices":{{"nvidia.com/cx6_sriov_rdma":[{ids}]}}}},"Checksum":1}}"#
        )
    };
    fs::write(kubelet.join("kubelet_internal_checkpoint"), cp(r#""0000:99:02.0""#)).unwrap();
    let (code, out, _) = doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None);
    assert_eq!(code, 1, "no registered VF blocks a pod: {out}");
    let r = json(&out);
    assert_eq!(r["resource"]["kubelet"]["plugin_sockets"][0], "sriov_rdma.sock");
    assert!(
        r["blockers"][0]["message"]
            .as_str()
            .unwrap()
            .contains("no resource the kubelet registered lists a VF of this node"),
        "{r}"
    );
    assert!(r["resource"]["advertised"].is_null(), "doctor does not invent what the device plugin advertises");
    fs::write(kubelet.join("kubelet_internal_checkpoint"), cp(&format!(r#""{vf0}""#))).unwrap();
    let (code, out, _) = doctor_in(&bed, &kubelet, &["--json", "--interval", "0"], None);
    assert_eq!(code, 0, "{out}");
    let r = json(&out);
    assert_eq!(r["resource"]["kubelet"]["vfs_registered"][&vf0], "nvidia.com/cx6_sriov_rdma");
    assert_eq!(r["resource"]["kubelet"]["allocations"][0]["devices"][0], vf0.as_str());
    // Which pod holds the VF: the checkpoint's UID and container; no pod-resources socket, so no name, said why.
    let h = &r["resource"]["kubelet_holders"];
    assert_eq!((&h["vfs"][0]["vf"], &h["vfs"][0]["pod_uid"]), (&vf0.as_str().into(), &"pod-1".into()), "{h}");
    assert_eq!(h["vfs"][0]["container"], "w");
    assert!(h["vfs"][0]["pod"].is_null());
    let sock = bed.dir.join("pod-resources/kubelet.sock");
    assert!(h["names_error"].as_str().is_some_and(|e| e.contains(sock.to_str().unwrap())), "{h}");
    let (_, text, _) = doctor_in(&bed, &kubelet, &["--interval", "0"], None);
    assert!(
        text.contains(&format!("VF {vf0} (nvidia.com/cx6_sriov_rdma) allocated by the kubelet to a pod (uid pod-1)")),
        "{text}"
    );

    // --config as ADD sees it: by deviceID only for the pod the kubelet allocated the VF to; pfName passes over it.
    let by_dev = bed.dir.join("dev.conf");
    fs::write(&by_dev, conf_dev("1.0.0", &vf0, "")).unwrap();
    let by_pf = bed.dir.join("pf.conf");
    fs::write(&by_pf, format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"sriov-rdma","pfName":"{}"}}"#, bed.pf))
        .unwrap();
    let config = |f: &Path| {
        let args = ["--json", "--interval", "0", "--config", f.to_str().unwrap()];
        json(&doctor_in(&bed, &kubelet, &args, None).1)["resource"]["configs"][0].clone()
    };
    let checked =
        |c: &Value, what: &str| c["checked"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains(what));
    let c = config(&by_dev);
    assert_eq!(c["vf"], vf0.as_str(), "{c}");
    assert!(checked(&c, "the kubelet manages it as resource nvidia.com/cx6_sriov_rdma, allocated to pod pod-1"), "{c}");
    let c = config(&by_pf);
    assert!(c["vf"].is_null() && c["code"] == 5, "{c}");
    assert!(checked(&c, "skipped VF 0 the kubelet's"), "{c}");
    // A checkpoint ADD cannot read fails it, and doctor says so.
    fs::write(kubelet.join("kubelet_internal_checkpoint"), "{").unwrap();
    let c = config(&by_dev);
    assert!(c["code"] == 5 && c["error"].as_str().unwrap().contains("not a device manager checkpoint"), "{c}");
}

#[test]
fn the_bandwidth_test_says_clearly_when_it_cannot_run() {
    root_only!();
    let bed = Bed::new("dbt", 1);
    let kubelet = bed.dir.join("no-kubelet");
    let empty = bed.dir.join("empty-path");
    fs::create_dir_all(&empty).unwrap();
    let (code, out, _) = doctor_in(
        &bed,
        &kubelet,
        &["--json", "--interval", "0", "--bandwidth", "10.0.0.2"],
        Some(empty.to_str().unwrap()),
    );
    assert_eq!(code, 1, "a bandwidth test that cannot run fails the run: {out}");
    let t = &json(&out)["bandwidth"]["test"];
    assert_eq!(t["peer"], "10.0.0.2");
    assert!(
        t["error"].as_str().unwrap().contains("ib_write_bw is not installed")
            && t["error"].as_str().unwrap().contains("perftest"),
        "{t}"
    );
    // With a tool on PATH but no RoCE port with an IPv4 GID on this host: nothing to test from, said so.
    let tool = empty.join("ib_write_bw");
    fs::write(&tool, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, _) = doctor_in(
        &bed,
        &kubelet,
        &["--json", "--interval", "0", "--bandwidth", "10.0.0.2"],
        Some(empty.to_str().unwrap()),
    );
    assert_eq!(code, 1);
    assert!(
        json(&out)["bandwidth"]["test"]["error"].as_str().unwrap().contains("no RDMA port with a RoCE v2 GID"),
        "{out}"
    );
}

#[test]
fn doctor_shows_what_the_device_plugin_advertises_and_why_a_vf_is_unhealthy() {
    root_only!();
    // The daemon's own --dry-run (built by `cargo test --workspace`, next to sriov-rdma) is what doctor reports.
    let dp = Path::new(env!("CARGO_BIN_EXE_sriov-rdma")).with_file_name("sriov-rdma-device-plugin");
    assert!(dp.is_file(), "{} is missing: build the workspace (cargo build --workspace)", dp.display());
    let bed = Bed::new("ddp", 2);
    let (pci0, _) = bed.vfs[0].clone();
    roce_port(&bed, &pci0, "mlx5_7", &bed.vfs[0].1, &[]);
    let kubelet = bed.dir.join("kubelet");
    fs::create_dir_all(&kubelet).unwrap();
    let cfg = bed.dir.join("dp.json");
    // The second resource takes VF 5 and up of a PF with two: it matches nothing, which doctor warns about.
    let none = format!(r#"{{"name":"rdma/none","selectors":{{"pfNames":["{}#5-7"]}}}}"#, bed.pf);
    fs::write(&cfg, format!(r#"{{"resources":[{{"name":"rdma/hca","selectors":{{"drivers":["igbvf"]}}}},{none}]}}"#))
        .unwrap();
    let advertised = |r: &Value| -> Vec<(String, bool, String)> {
        let res = r["resource"]["advertised"].as_array().unwrap_or_else(|| panic!("no advertised view: {r}"));
        assert_eq!(res[0]["name"], "rdma/hca");
        res[0]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let why = d["why"].as_str().unwrap_or_default().to_string();
                (d["id"].as_str().unwrap().to_string(), d["healthy"].as_bool().unwrap(), why)
            })
            .collect()
    };
    let cfg_arg = cfg.to_str().unwrap();
    let (_, out, err) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--device-plugin-config", cfg_arg], None);
    let before = advertised(&json(&out));
    // The resource asks for RDMA (the default): VF 0 has an RDMA device, VF 1 has none.
    assert_eq!(before, [(pci0.clone(), true, String::new())], "{err}");
    let r = json(&out);
    let all = warnings(&r);
    let unmatched: Vec<&String> = all.iter().filter(|w| w.contains("match no VF")).collect();
    assert_eq!(unmatched.len(), 1, "{all:?}");
    assert!(unmatched[0].starts_with("rdma/none: its selectors match no VF on this node"), "{unmatched:?}");
    // The RDMA port of VF 0 goes down: the device plugin would advertise it unhealthy, and doctor says why.
    fs::write(bed.sysfs.join("class/infiniband/mlx5_7/ports/1/state"), "1: DOWN\n").unwrap();
    let (_, out, _) =
        doctor_in(&bed, &kubelet, &["--json", "--interval", "0", "--device-plugin-config", cfg_arg], None);
    let r = json(&out);
    let after = advertised(&r);
    let vf0 = after.iter().find(|(id, _, _)| *id == pci0).expect("VF 0 listed");
    assert!(!vf0.1 && vf0.2.contains("DOWN"), "{vf0:?}");
    assert!(warnings(&r).iter().any(|w| w.contains(&pci0) && w.contains("unhealthy")), "{:?}", warnings(&r));
}
