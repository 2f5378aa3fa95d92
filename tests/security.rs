//! A NetworkAttachmentDefinition is tenant input (root only, host bed of tests/common): the device-info file and
//! the log stay inside the node's directories without following a symbolic link, a logged value cannot start a
//! line of its own, and the node policy decides which PFs, namespaces and VLANs a configuration may use. Every
//! refusal is checked on the filesystem and in the kernel: nothing created, the stand-in VF still on the host as
//! it was, no record.

mod common;
use common::*;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

macro_rules! root_only {
    () => {
        if !need_root() {
            return;
        }
    };
}

type Identity = (String, String, u64, bool);

/// The bed's node directories: device-info base, log base and the policy file, as the node sets them.
struct Node {
    devinfo: PathBuf,
    log: PathBuf,
    policy: PathBuf,
}

impl Node {
    fn of(bed: &Bed) -> Node {
        Node { devinfo: bed.dir.join("devinfo"), log: bed.dir.join("log"), policy: bed.dir.join("policy.json") }
    }

    fn env(&self, bed: &Bed, cmd: &str, cid: &str, ns: &str) -> HashMap<String, String> {
        let mut e = bed.env(cmd, cid, ns, "net1");
        e.insert("SRIOV_RDMA_DEVINFO_DIR".into(), self.devinfo.display().to_string());
        e.insert("SRIOV_RDMA_LOG_DIR".into(), self.log.display().to_string());
        e.insert("SRIOV_RDMA_POLICY".into(), self.policy.display().to_string());
        e
    }

    fn run(&self, bed: &Bed, cmd: &str, cid: &str, ns: &str, conf: &str) -> Run {
        bed.run_env(&self.env(bed, cmd, cid, ns), conf)
    }

    /// ADD as a pod of `namespace` (CNI_ARGS K8S_POD_NAMESPACE, as Multus passes it).
    fn add_in(&self, bed: &Bed, namespace: Option<&str>, cid: &str, ns: &str, conf: &str) -> Run {
        let mut e = self.env(bed, "ADD", cid, ns);
        if let Some(n) = namespace {
            e.insert("CNI_ARGS".into(), format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={n};K8S_POD_NAME=p-{cid}"));
        }
        bed.run_env(&e, conf)
    }
}

/// A bed with `n` VFs, its node directories, a pod namespace, and VF 0 (address, netdev, identity) before the test.
fn setup(tag: &str, n: usize) -> (Bed, Node, String, String, String, Identity) {
    let mut bed = Bed::new(tag, n);
    let node = Node::of(&bed);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    (bed, node, ns, pci, vf, before)
}

/// The refused ADD changed nothing the kernel or the store shows: the VF on the host as it was, nothing in the
/// pod, no record.
#[track_caller]
fn unchanged(bed: &Bed, ns: &str, vf: &str, before: &Identity) {
    assert_eq!(identity(None, vf).as_ref(), Some(before), "the VF stays on the host, name/MAC/MTU/up as before");
    assert!(link(Some(ns), "net1").is_none(), "nothing in the pod");
    assert!(bed.records().is_empty(), "no record");
}

#[track_caller]
fn refused(r: &Run, needles: &[&str]) {
    assert!(!r.ok, "expected a refusal: {}", r.stdout);
    assert_eq!(r.code(), 7, "{} / {}", r.stdout, r.stderr);
    for n in needles {
        assert!(r.msg().contains(n), "message lacks {n:?}: {}", r.msg());
    }
}

fn devinfo_conf(pci: &str, path: &Path, extra: &str) -> String {
    conf_dev(
        "1.0.0",
        pci,
        &format!(r#","mtu":9000,"runtimeConfig":{{"CNIDeviceInfoFile":"{}"}}{extra}"#, path.display()),
    )
}

#[test]
fn device_info_outside_the_node_directory_is_refused_before_anything_changes() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("dio", 1);
    let elsewhere = bed.dir.join("elsewhere");
    for path in
        [elsewhere.join("made/on/the/way/x.json"), node.devinfo.join("../elsewhere/x.json"), node.devinfo.clone()]
    {
        let r = node.run(&bed, "ADD", "c1", &ns, &devinfo_conf(&pci, &path, &static_ipam("10.77.0.2/24")));
        refused(&r, &["runtimeConfig.CNIDeviceInfoFile", &node.devinfo.display().to_string()]);
        unchanged(&bed, &ns, &vf, &before);
        assert!(!elsewhere.exists(), "{} created outside the node's directory", elsewhere.display());
    }

    // Inside: written (directories below the base made on the way), and DEL removes it.
    let info = node.devinfo.join("cni/net-sandbox_net1");
    let conf = devinfo_conf(&pci, &info, "");
    node.run(&bed, "ADD", "c1", &ns, &conf).ok();
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&info).unwrap()).unwrap();
    assert_eq!(v["pci"]["pci-address"], pci.as_str());
    node.run(&bed, "DEL", "c1", &ns, &conf).ok();
    assert!(!info.exists(), "DEL removes the file it wrote");
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn a_symlink_in_the_device_info_path_is_never_followed() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("dis", 1);
    let target = bed.dir.join("target");
    fs::create_dir_all(&target).unwrap();
    fs::create_dir_all(&node.devinfo).unwrap();
    std::os::unix::fs::symlink(&target, node.devinfo.join("cni")).unwrap();
    std::os::unix::fs::symlink(target.join("y.json"), node.devinfo.join("y.json")).unwrap();
    for path in [node.devinfo.join("cni/x.json"), node.devinfo.join("y.json")] {
        let r = node.run(&bed, "ADD", "c1", &ns, &devinfo_conf(&pci, &path, ""));
        refused(&r, &["runtimeConfig.CNIDeviceInfoFile", "symbolic link"]);
        unchanged(&bed, &ns, &vf, &before);
        assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "nothing written through the link");
    }

    // DEL obeys the same rule: the file ADD wrote, its directory then swapped for a link to a directory holding
    // the very same bytes. DEL finishes (the VF comes back) and leaves the link's target alone.
    fs::remove_file(node.devinfo.join("cni")).unwrap();
    let info = node.devinfo.join("cni/x.json");
    let conf = devinfo_conf(&pci, &info, "");
    node.run(&bed, "ADD", "c1", &ns, &conf).ok();
    let ours = fs::read(&info).unwrap();
    fs::remove_dir_all(node.devinfo.join("cni")).unwrap();
    fs::write(target.join("x.json"), &ours).unwrap();
    std::os::unix::fs::symlink(&target, node.devinfo.join("cni")).unwrap();
    node.run(&bed, "DEL", "c1", &ns, &conf).ok();
    assert_eq!(fs::read(target.join("x.json")).ok(), Some(ours), "DEL removed a file through a symbolic link");
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

#[test]
fn the_device_plugins_own_files_are_out_of_reach_and_del_removes_the_directories_add_made() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("dpd", 1);
    // The device plugin's file for another VF, and a path through it (or naming its directory): refused before
    // anything changes, so its Allocate never meets a directory where its file goes.
    let dp = node.devinfo.join("dp");
    let theirs = dp.join("rdma-hca-0000:3b:00.2-device.json");
    for path in [theirs.join("x"), theirs.clone(), dp.clone(), node.devinfo.join("./dp/new/x.json")] {
        let r = node.run(&bed, "ADD", "c1", &ns, &devinfo_conf(&pci, &path, ""));
        refused(&r, &["runtimeConfig.CNIDeviceInfoFile", &dp.display().to_string(), "device plugin"]);
        unchanged(&bed, &ns, &vf, &before);
        assert!(!dp.exists(), "{} made for {}", dp.display(), path.display());
    }

    // Elsewhere, ADD makes the directories on the way and DEL removes those it made (and only those).
    fs::create_dir_all(node.devinfo.join("keep")).unwrap();
    for (path, made) in [(node.devinfo.join("cni/a/b/x.json"), "cni"), (node.devinfo.join("keep/c/x.json"), "keep/c")] {
        let conf = devinfo_conf(&pci, &path, "");
        node.run(&bed, "ADD", "c1", &ns, &conf).ok();
        assert!(path.is_file());
        node.run(&bed, "DEL", "c1", &ns, &conf).ok();
        assert!(!path.exists(), "DEL removes the file it wrote");
        assert!(!node.devinfo.join(made).exists(), "DEL left {made}, which ADD made");
        assert!(node.devinfo.join("keep").is_dir(), "DEL removed a directory that was there before ADD");
        assert_eq!(identity(None, &vf), Some(before.clone()));
    }
    // A directory ADD made that holds something else by DEL's time stays, with what it holds.
    let path = node.devinfo.join("cni/x.json");
    let conf = devinfo_conf(&pci, &path, "");
    node.run(&bed, "ADD", "c1", &ns, &conf).ok();
    fs::write(node.devinfo.join("cni/other.json"), "{}").unwrap();
    node.run(&bed, "DEL", "c1", &ns, &conf).ok();
    assert!(!path.exists() && node.devinfo.join("cni/other.json").is_file());
    assert!(bed.records().is_empty());
}

fn log_conf(pci: &str, path: &Path) -> String {
    conf_dev("1.0.0", pci, &format!(r#","mtu":9000,"logFile":"{}""#, path.display()))
}

/// A `logFile` outside the node's log directory, or through a symbolic link, is never opened; the log goes to the
/// file of that name inside the directory (sriov-cni's own documented example logs to /tmp: such a NAD keeps
/// working), or to stderr when that cannot be opened either, and ADD goes on.
#[test]
fn log_file_outside_the_node_directory_or_through_a_symlink_is_never_opened() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("lgf", 1);
    fs::create_dir_all(&node.log).unwrap();
    let outside = bed.dir.join("etc-shadow-stand-in");
    node.run(&bed, "ADD", "c1", &ns, &log_conf(&pci, &outside)).ok();
    assert!(!outside.exists(), "log file created outside the node's log directory");
    let instead = node.log.join("etc-shadow-stand-in");
    let text = fs::read_to_string(&instead).unwrap_or_default();
    assert!(
        text.contains(&format!("logging to {} instead", instead.display())) && text.contains("ADD c1/net1"),
        "the log went to the node's directory and says so: {text}"
    );
    assert!(link(Some(&ns), "net1").is_some(), "ADD attached the VF");
    node.run(&bed, "DEL", "c1", &ns, &log_conf(&pci, &outside)).ok();
    assert!(!outside.exists());
    assert_eq!(identity(None, &vf), Some(before.clone()));

    let victim = bed.dir.join("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::create_dir_all(node.log.join("sub")).unwrap();
    std::os::unix::fs::symlink(&victim, node.log.join("link.log")).unwrap();
    std::os::unix::fs::symlink(&bed.dir, node.log.join("dir")).unwrap();
    for path in [node.log.join("link.log"), node.log.join("dir/victim")] {
        let r = node.run(&bed, "ADD", "c1", &ns, &log_conf(&pci, &path));
        r.ok();
        assert!(
            r.stderr.contains("symbolic link")
                || fs::read_to_string(node.log.join("victim")).is_ok_and(|t| t.contains("symbolic link")),
            "the refusal is said: {}",
            r.stderr
        );
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "written through a symbolic link");
        node.run(&bed, "DEL", "c1", &ns, &log_conf(&pci, &path)).ok();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n", "written through a symbolic link");
    }

    // Inside the directory: the log is written there.
    let ok = node.log.join("sub/sriov-rdma.log");
    node.run(&bed, "ADD", "c1", &ns, &log_conf(&pci, &ok)).ok();
    node.run(&bed, "DEL", "c1", &ns, &log_conf(&pci, &ok)).ok();
    let text = fs::read_to_string(&ok).unwrap();
    assert!(text.contains("ADD c1/net1") && text.contains("DEL c1/net1"), "{text}");
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn a_newline_in_a_logged_value_never_starts_a_line_of_its_own() {
    root_only!();
    let (bed, node, ns, _, vf, before) = setup("lgn", 1);
    fs::create_dir_all(&node.log).unwrap();
    let log = node.log.join("sriov-rdma.log");
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"x\nFORGED\r\u001b[2K","logFile":"{}"}}"#,
        log.display()
    );
    let r = node.run(&bed, "ADD", "c1", &ns, &conf);
    assert!(!r.ok, "{}", r.stdout);
    unchanged(&bed, &ns, &vf, &before);
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("x\\nFORGED"), "the value is logged, escaped: {text:?}");
    for line in text.lines() {
        assert!(line.contains(" sriov-rdma["), "a line the plugin did not start: {line:?} in {text:?}");
        assert!(!line.chars().any(char::is_control), "a control character in {line:?}");
    }
}

fn write_policy(node: &Node, policy: &serde_json::Value) {
    fs::write(&node.policy, serde_json::to_vec_pretty(policy).unwrap()).unwrap();
}

#[test]
fn the_node_policy_limits_pfs_namespaces_and_vlans() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("pol", 2);
    let file = node.policy.display().to_string();
    let by_pf = format!(
        r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","pfName":"{}","logLevel":"debug"}}"#,
        bed.pf
    );
    let by_dev = conf_dev("1.0.0", &pci, "");
    let vlan = |v: u16| conf_dev("1.0.0", &pci, &format!(r#","vlan":{v}"#));

    // A PF the node does not list: refused by deviceID and by pfName, naming the rule and the file.
    write_policy(&node, &serde_json::json!({"pfs": ["ens9f9", "0000:99:00.0"]}));
    for conf in [&by_dev, &by_pf] {
        let r = node.add_in(&bed, Some("team-a"), "c1", &ns, conf);
        refused(&r, &[bed.pf.as_str(), "pfs", &file]);
        unchanged(&bed, &ns, &vf, &before);
    }
    // Listed by name or by PCI address: allowed.
    for entry in [bed.pf.clone(), bed.pf_pci.clone()] {
        write_policy(&node, &serde_json::json!({"pfs": [entry]}));
        node.add_in(&bed, None, "c1", &ns, &by_dev).ok();
        assert!(link(Some(&ns), "net1").is_some(), "allowed: the VF is in the pod");
        node.run(&bed, "DEL", "c1", &ns, &by_dev).ok();
        assert_eq!(identity(None, &vf), Some(before.clone()));
    }

    write_policy(
        &node,
        &serde_json::json!({
            "pfs": [bed.pf],
            "namespaces": {
                "team-a": {"pfs": [bed.pf], "vlans": ["0", "100-199"]},
                "team-b": {"pfs": ["ens9f9"]},
                "team-c": {"vlans": [300]},
            }
        }),
    );
    // Another tenant's PF, a namespace the policy does not list, and no namespace at all: refused.
    for (who, needles) in [
        (Some("team-b"), vec!["team-b", "namespaces.team-b.pfs"]),
        (Some("team-z"), vec!["team-z", "namespaces"]),
        (None, vec!["K8S_POD_NAMESPACE"]),
    ] {
        let r = node.add_in(&bed, who, "c1", &ns, &by_dev);
        let mut needles = needles;
        needles.push(&file);
        refused(&r, &needles);
        unchanged(&bed, &ns, &vf, &before);
    }
    // A VLAN outside the namespace's ranges (and untagged where 0 is not among them): refused.
    for (who, conf, what) in [
        ("team-a", vlan(200), "VLAN 200"),
        ("team-a", vlan(99), "VLAN 99"),
        ("team-c", by_dev.clone(), "untagged"),
        ("team-c", vlan(301), "VLAN 301"),
    ] {
        let r = node.add_in(&bed, Some(who), "c1", &ns, &conf);
        refused(&r, &[what, &format!("namespaces.{who}.vlans"), &file]);
        unchanged(&bed, &ns, &vf, &before);
    }
    // Within the ranges: past the policy, and the VLAN reaches the PF, which on this bed (a veth stand-in has no
    // VF table) cannot hold one: that, not the policy, is what stops it here. Untagged (no vlan) is VLAN 0 set on
    // the PF too: the PF's row may carry another VLAN, which leaving it out would keep.
    for (who, conf, what) in
        [("team-a", by_pf.clone(), "vlan 0"), ("team-a", vlan(150), "vlan 150"), ("team-c", vlan(300), "vlan 300")]
    {
        let r = node.add_in(&bed, Some(who), "c1", &ns, &conf);
        assert!(!r.ok && r.code() == 5, "{who} {what}: {}", r.stdout);
        assert!(r.msg().contains(what) && r.msg().contains("no VF table"), "{who} {what}: {}", r.msg());
        unchanged(&bed, &ns, &vf, &before);
    }
    // A "*" entry stands for every namespace not listed.
    write_policy(&node, &serde_json::json!({"namespaces": {"*": {"pfs": [bed.pf]}, "team-b": {"pfs": []}}}));
    node.add_in(&bed, Some("team-z"), "c1", &ns, &by_dev).ok();
    let r = node.add_in(&bed, Some("team-b"), "c2", &ns, &conf_dev("1.0.0", &bed.vfs[1].0, ""));
    refused(&r, &["namespaces.team-b.pfs"]);

    // A policy written later never blocks DEL: the VF attached before comes back.
    write_policy(&node, &serde_json::json!({"pfs": []}));
    node.run(&bed, "DEL", "c1", &ns, &by_dev).ok();
    assert_eq!(identity(None, &vf), Some(before.clone()));
    assert!(bed.records().is_empty());
}

#[test]
fn the_node_policy_forces_spoofchk_trust_admin_mac_and_rates_per_namespace() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("pti", 1);
    let file = node.policy.display().to_string();
    write_policy(
        &node,
        &serde_json::json!({"namespaces": {
            "tenant": {"spoofchk": "on", "trust": "off", "macs": ["02:00:00:0a:00:00-02:00:00:0a:ff:ff"],
                       "maxTxRate": 1000, "minTxRate": 100},
            "no-mac": {"macs": []},
            "open": {},
        }}),
    );
    let with = |extra: &str| conf_dev("1.0.0", &pci, extra);
    // Outside a rule: refused before anything changes, naming the rule and the file.
    for (who, extra, needles) in [
        ("tenant", r#","spoofchk":"off""#, vec!["spoofchk off", "namespaces.tenant.spoofchk"]),
        ("tenant", r#","trust":"on""#, vec!["trust on", "namespaces.tenant.trust"]),
        ("tenant", r#","mac":"02:00:00:0b:00:01""#, vec!["mac 02:00:00:0b:00:01", "namespaces.tenant.macs"]),
        ("tenant", r#","runtimeConfig":{"mac":"02:00:00:0b:00:02"}"#, vec!["mac 02:00:00:0b:00:02", "macs"]),
        ("tenant", r#","max_tx_rate":0"#, vec!["max_tx_rate 0", "namespaces.tenant.maxTxRate"]),
        ("tenant", r#","max_tx_rate":5000"#, vec!["max_tx_rate 5000", "namespaces.tenant.maxTxRate"]),
        ("tenant", r#","min_tx_rate":500,"max_tx_rate":900"#, vec!["min_tx_rate 500", "namespaces.tenant.minTxRate"]),
        ("no-mac", r#","mac":"02:00:00:0a:00:01""#, vec!["mac 02:00:00:0a:00:01", "namespaces.no-mac.macs []"]),
    ] {
        let r = node.add_in(&bed, Some(who), "c1", &ns, &with(extra));
        let mut needles = needles;
        needles.push(&file);
        refused(&r, &needles);
        unchanged(&bed, &ns, &vf, &before);
    }
    // Left out, or within the rules: past the policy, and the settings reach the PF (left out: what the rules set,
    // spoofchk on first), which on this bed (a veth stand-in has no VF table) cannot hold them.
    for (extra, first) in [
        ("", "spoofchk on"),
        (r#","spoofchk":"on","trust":"off","mac":"02:00:00:0a:00:07","max_tx_rate":800"#, "mac 02:00:00:0a:00:07"),
    ] {
        let r = node.add_in(&bed, Some("tenant"), "c1", &ns, &with(extra));
        assert!(!r.ok && r.code() == 5, "{extra}: {}", r.stdout);
        assert!(r.msg().contains(first) && r.msg().contains("no VF table"), "{extra}: {}", r.msg());
        unchanged(&bed, &ns, &vf, &before);
    }
    // A namespace without these rules: nothing set, the VF is attached as the configuration says.
    node.add_in(&bed, Some("open"), "c1", &ns, &with("")).ok();
    assert!(link(Some(&ns), "net1").is_some());
    node.run(&bed, "DEL", "c1", &ns, &with("")).ok();
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}

#[test]
fn a_malformed_policy_fails_closed_naming_the_file_and_the_key() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("pbd", 1);
    let file = node.policy.display().to_string();
    let conf = conf_dev("1.0.0", &pci, "");
    for (body, key) in [
        ("{\"pfs\": [", "policy"),
        (r#"{"pfs": ["x"], "namepsaces": {}}"#, "namepsaces"),
        (r#"{"pfs": "x"}"#, "pfs"),
        (r#"{"namespaces": {"a": {"vlans": ["300-100"]}}}"#, "namespaces.a.vlans"),
        (r#"{"namespaces": {"a": {"vlans": [5000]}}}"#, "namespaces.a.vlans"),
        (r#"{"namespaces": {"a": {"pf": []}}}"#, "namespaces.a.pf"),
        ("[]", "policy"),
    ] {
        fs::write(&node.policy, body).unwrap();
        let r = node.add_in(&bed, Some("a"), "c1", &ns, &conf);
        refused(&r, &[&file, key]);
        unchanged(&bed, &ns, &vf, &before);
    }
}

#[test]
fn a_policy_that_exists_but_cannot_be_read_or_followed_fails_closed() {
    root_only!();
    let (bed, node, ns, pci, vf, before) = setup("pcr", 1);
    let conf = conf_dev("1.0.0", &pci, "");
    let gone = bed.dir.join("moved-away.json");
    let etc = bed.dir.join("etc");
    fs::create_dir_all(&etc).unwrap();
    // A link whose target moved away, a link on the way to it, a directory, and a FIFO (which would block a read).
    let linked_dir = bed.dir.join("etc-link");
    std::os::unix::fs::symlink(bed.dir.join("etc-gone"), &linked_dir).unwrap();
    std::os::unix::fs::symlink(&gone, &node.policy).unwrap();
    fs::create_dir(etc.join("dir.json")).unwrap();
    mkfifo(&etc.join("fifo.json"));
    let link = node.policy.display().to_string();
    for (file, needles) in [
        (node.policy.clone(), vec![link.as_str(), "symbolic link", gone.to_str().unwrap()]),
        (linked_dir.join("policy.json"), vec![linked_dir.to_str().unwrap(), "symbolic link"]),
        (etc.join("dir.json"), vec!["dir.json"]),
        (etc.join("fifo.json"), vec!["fifo.json", "not a regular file"]),
    ] {
        let mut e = node.env(&bed, "ADD", "c1", &ns);
        e.insert("SRIOV_RDMA_POLICY".into(), file.display().to_string());
        let child = spawn_plugin(&bed.sysfs, &bed.state, &e, &conf);
        let r = wait_bounded(child, std::time::Duration::from_secs(20)).expect("ADD hung reading the policy");
        assert!(!r.ok, "{}: taken as no policy: {}", file.display(), r.stdout);
        assert_eq!(r.code(), 5, "{}: {}", file.display(), r.stdout);
        for n in &needles {
            assert!(r.msg().contains(n), "{}: message lacks {n:?}: {}", file.display(), r.msg());
        }
        unchanged(&bed, &ns, &vf, &before);
    }
}

/// The YAML documents of deploy/ and examples/, with the file each came from.
fn shipped_docs() -> Vec<(PathBuf, serde_json::Value)> {
    use serde::Deserialize;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["deploy", "examples"] {
        for e in fs::read_dir(root.join(dir)).unwrap().flatten() {
            if e.path().extension().and_then(|x| x.to_str()) != Some("yaml") {
                continue;
            }
            let text = fs::read_to_string(e.path()).unwrap();
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                out.push((e.path(), serde_json::Value::deserialize(doc).unwrap()));
            }
        }
    }
    out
}

#[test]
fn the_shipped_policy_admits_the_shipped_pods_networks_and_isolates_its_tenants() {
    use sriov_rdma_cni::policy::{Policy, Request};
    let docs = shipped_docs();
    let file = Path::new("/etc/sriov-rdma/policy.json");
    let cm = docs.iter().find(|(_, v)| v["metadata"]["name"] == "sriov-rdma-policy").expect("the policy ConfigMap");
    let policy = Policy::parse(file, cm.1["data"]["policy.json"].as_str().unwrap().as_bytes()).unwrap();
    let ns_of = |v: &serde_json::Value| v["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let pods: Vec<String> = docs.iter().filter(|(_, v)| v["kind"] == "Pod").map(|(_, v)| ns_of(v)).collect();
    assert!(pods.contains(&"default".to_string()), "deploy/pod-nccl.yaml runs in default: {pods:?}");
    let mut admitted = 0;
    for (path, nad) in docs.iter().filter(|(_, v)| v["kind"] == "NetworkAttachmentDefinition") {
        let ns = ns_of(nad);
        if !pods.contains(&ns) {
            continue;
        }
        let conf = sriov_rdma_cni::cni::config::NetConf::parse(
            nad["spec"]["config"].as_str().unwrap().as_bytes(),
            &HashMap::new(),
        )
        .unwrap();
        let r = Request { pf: "ens1f0", pf_pci: "0000:3b:00.0", namespace: Some(&ns), vf: &conf.vf };
        let vf =
            policy.admit(&r).unwrap_or_else(|e| panic!("{}: {} refused in {ns}: {}", path.display(), conf.name, e.msg));
        assert_eq!(vf.spoofchk, Some(true), "{}", path.display());
        admitted += 1;
    }
    assert!(admitted >= 3, "{admitted} NADs of the shipped pods' namespaces");
    // Its tenant namespaces: a NAD that leaves the settings out gets the isolating ones; trust on is refused.
    let nothing = sriov_rdma_cni::vf_setting::VfSettings { vlan: Some(150), ..Default::default() };
    let r = Request { pf: "ens1f0", pf_pci: "0000:3b:00.0", namespace: Some("ml-team-a"), vf: &nothing };
    let vf = policy.admit(&r).unwrap();
    assert_eq!((vf.spoofchk, vf.trust, vf.max_tx_rate), (Some(true), Some(false), Some(100000)));
    let trusting = sriov_rdma_cni::vf_setting::VfSettings { trust: Some(true), ..nothing };
    let e = policy.admit(&Request { vf: &trusting, ..r }).unwrap_err();
    assert!(e.msg.contains("namespaces.ml-team-a.trust"), "{}", e.msg);
}

#[test]
fn doctor_warns_when_the_node_has_no_policy() {
    root_only!();
    let bed = Bed::new("pdr", 1);
    let node = Node::of(&bed);
    let doctor = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sriov-rdma"))
            .arg("doctor")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("SRIOV_RDMA_SYSFS", &bed.sysfs)
            .env("SRIOV_RDMA_STATE_DIR", &bed.state)
            .env("SRIOV_RDMA_POLICY", &node.policy)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = doctor();
    assert!(text.contains("no node policy") && text.contains(&node.policy.display().to_string()), "{text}");
    write_policy(&node, &serde_json::json!({"pfs": [bed.pf]}));
    let text = doctor();
    assert!(!text.contains("no node policy"), "{text}");
}
