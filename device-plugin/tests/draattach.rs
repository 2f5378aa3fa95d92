//! The DRA attach on real network namespaces (root): veth ends stand in for the VFs' netdevs behind a fake sysfs
//! PCI tree (what is fake: the PCI tree; what is real: the netdevs, the namespace, every move, MTU and address,
//! the CNI's record store and the reference `static` IPAM plugin). The claims are kept as the DRA driver keeps them
//! (claimconfig::keep); the CNI the attach runs is the daemon's own `cni` mode through `node-cni`, started through `env`
//! with this test bed's sysfs, state and kubelet directories (the kubelet's list names the VFs as a DRA resource's).

use serde_json::{json, Map, Value};
use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use sriov_rdma_device_plugin::claimconfig::{self, Kept};
use sriov_rdma_device_plugin::draattach::{Attacher, Sandbox};
use std::path::PathBuf;
use std::time::Duration;

const CNI_PATH: &str = "/usr/lib/cni";

#[path = "../../tests/common/ip.rs"]
mod ip;
use ip::{link, must, sh};

/// Root, or a skip asked for by SRIOV_RDMA_SKIP_ROOT_TESTS=1 (said on stderr); otherwise the test fails.
fn need_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("SRIOV_RDMA_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: needs root (network namespaces and veth) (SRIOV_RDMA_SKIP_ROOT_TESTS=1)");
        return false;
    }
    panic!("this test needs root (network namespaces and veth); run it as root or set SRIOV_RDMA_SKIP_ROOT_TESTS=1");
}

fn addrs(ns: &str, name: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&must(&["ip", "-n", ns, "-j", "addr", "show", "dev", name])).unwrap();
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["family"] == "inet")
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or_default(), a["prefixlen"]))
        .collect()
}

/// A PF stand-in with VF stand-ins, a pod namespace, the driver's claims directory and the CNI's state.
struct Bed {
    dir: PathBuf,
    sysfs: PathBuf,
    state: PathBuf,
    vfs: Vec<(String, String)>,
    links: Vec<String>,
    netns: String,
    tree: FakeTree,
}

impl Bed {
    fn new(tag: &str, bus: u8, n: usize) -> Bed {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-draattach-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sysfs = dir.join("sys");
        let tree = FakeTree::new(&sysfs).unwrap();
        let mut links = Vec::new();
        let mut veth = |name: &str| {
            let _ = sh(&["ip", "link", "del", name]);
            must(&["ip", "link", "add", name, "type", "veth", "peer", "name", &format!("{name}p")]);
            links.push(name.to_string());
        };
        let pf = format!("da{tag}pf");
        veth(&pf);
        let pf_pci = format!("0000:{bus:02x}:00.0");
        tree.pf(&pf_pci, &pf, n as u32).unwrap();
        let mut vfs = Vec::new();
        for i in 0..n {
            let (pci, name) = (format!("0000:{bus:02x}:02.{i}"), format!("da{tag}v{i}"));
            veth(&name);
            tree.vf(&pf_pci, i as u32, &pci, Some(&name), "igbvf").unwrap();
            vfs.push((pci, name));
        }
        let netns = format!("srda-{tag}");
        let _ = sh(&["ip", "netns", "del", &netns]);
        must(&["ip", "netns", "add", &netns]);
        Bed { state: dir.join("state"), dir, sysfs, vfs, links, netns, tree }
    }

    /// As on a node: the kubelet's root is the bed's directory, so the CNI finds the claims where the driver keeps
    /// them (`<root>/plugins/sriov-rdma.k8s.io/claims`).
    fn claims_dir(&self) -> PathBuf {
        self.dir.join(sriov_rdma_cni::kubelet::DRA_CLAIMS)
    }

    /// The kubelet's device-plugin directory, with the device plugin's list naming every VF of the bed as a
    /// `dra: true` resource's, as the daemon writes it: a NAD's ADD must not take them, the attach's must.
    fn kubelet_dir(&self) -> PathBuf {
        let dir = self.dir.join("device-plugins");
        let pcis: Vec<String> = self.vfs.iter().map(|(p, _)| p.clone()).collect();
        let list = std::collections::BTreeMap::from([("example.com/dra-nic".to_string(), pcis)]);
        let file = dir.join(sriov_rdma_cni::kubelet::OFFERED);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, sriov_rdma_cni::kubelet::offered_json(&list)).unwrap();
        dir
    }

    /// The attach as the daemon sets it up, its CNI started through `env` with this bed's directories.
    fn attacher(&self) -> Attacher {
        let own = self.dir.display().to_string();
        let mut cni: Vec<std::ffi::OsString> = vec!["/usr/bin/env".into()];
        for (k, v) in [
            ("SRIOV_RDMA_SYSFS", self.sysfs.display().to_string()),
            ("SRIOV_RDMA_STATE_DIR", self.state.display().to_string()),
            ("SRIOV_RDMA_DEVINFO_DIR", own.clone()),
            ("SRIOV_RDMA_LOG_DIR", own.clone()),
            ("SRIOV_RDMA_POLICY", format!("{own}/no-node-policy.json")),
            ("SRIOV_RDMA_KUBELET_DIR", self.kubelet_dir().display().to_string()),
            ("SRIOV_RDMA_MULTUS_DIR", format!("{own}/no-multus")),
            ("NETCONFPATH", format!("{own}/no-net.d")),
            ("SRIOV_RDMA_NODE_MOUNT_NS", node_mount_ns()),
        ] {
            cni.push(format!("{k}={v}").into());
        }
        // As the daemon runs it: through node-cni (into PID 1's mount namespace, the test host's own here), which
        // executes the CNI: the daemon's `cni` mode, the CNI's code.
        let exe = env!("CARGO_BIN_EXE_sriov-rdma-device-plugin");
        cni.extend([exe, "node-cni", exe, "cni"].map(Into::into));
        Attacher {
            claims_dir: self.claims_dir(),
            attach_dir: self.dir.join("attached"),
            cni,
            cni_path: CNI_PATH.into(),
            timeout: Duration::from_secs(30),
            status: None,
        }
    }

    /// A claim kept for `pod_uid` as the DRA driver keeps it, one device per (request, PCI address, address).
    fn keep(&self, uid: &str, pod_uid: &str, devices: &[(&str, &str, &str)]) {
        let kept: Vec<Kept> = devices
            .iter()
            .map(|(request, pci, addr)| {
                let config = json!({
                    "cniVersion": "1.0.0", "name": "dra-team-a-claim", "type": "sriov-rdma", "deviceID": pci,
                    "mtu": 1400, "ipam": {"type": "static", "addresses": [{"address": addr}]}
                });
                Kept {
                    request: request.to_string(),
                    device: format!("pci-{}", pci.replace([':', '.'], "-")),
                    pci_address: pci.to_string(),
                    config: config.as_object().cloned().unwrap_or_else(Map::new),
                }
            })
            .collect();
        claimconfig::keep(&self.claims_dir(), &format!("team-a/{uid}"), uid, &[pod_uid.to_string()], &kept).unwrap();
    }

    /// The pod's namespace destroyed: the kernel hands a real VF back to the host (a veth dies with it, so the
    /// stand-in `vf` is made again under the VF's name, with the MTU the pod gave it, as the main crate's tests do).
    fn netns_gone(&self, vf: &(String, String)) {
        must(&["ip", "netns", "del", &self.netns]);
        let _ = sh(&["ip", "link", "del", &format!("{}p", vf.1)]);
        must(&["ip", "link", "add", &vf.1, "mtu", "1400", "type", "veth", "peer", "name", &format!("{}p", vf.1)]);
        self.tree.set_vf_netdev(&vf.0, &vf.1).unwrap();
    }

    fn sandbox(&self, id: &str, pod_uid: &str) -> Sandbox {
        Sandbox {
            id: id.into(),
            uid: pod_uid.into(),
            namespace: "team-a".into(),
            name: "trainer".into(),
            netns: format!("/var/run/netns/{}", self.netns),
        }
    }

    /// The CNI's attachment records (one file per attachment under the state directory's records).
    fn cni_records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut stack = vec![self.state.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Some(v) = std::fs::read(&p).ok().and_then(|t| serde_json::from_slice::<Value>(&t).ok()) {
                    if v.get("containerId").or_else(|| v.get("container_id")).is_some() {
                        out.push(v);
                    }
                }
            }
        }
        out
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.netns]);
        for l in &self.links {
            let _ = sh(&["ip", "link", "del", l]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The mount namespace node-cni enters: the node's is PID 1's, which a test host may not let be opened (a
/// sandbox's init), so this test process's own stands for it.
fn node_mount_ns() -> String {
    format!("/proc/{}/ns/mnt", std::process::id())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn run_pod_sandbox_moves_the_claims_vfs_into_the_pod_and_stop_gives_them_back() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("a", 0x7a, 2);
    let (v0, v1) = (bed.vfs[0].clone(), bed.vfs[1].clone());
    bed.keep("claim-1", "pod-1", &[("vf", &v0.0, "10.61.0.5/24"), ("vf2", &v1.0, "10.62.0.5/24")]);
    let a = bed.attacher();
    let sb = bed.sandbox("0a1b2c3d4e", "pod-1");
    let n = rt().block_on(a.attach(&sb)).expect("attach");
    assert_eq!(n, 2);
    // The kernel: both VF netdevs are in the pod as dra0 and dra1, with the claim's MTU and addresses.
    for (ifname, addr, (_, host)) in [("dra0", "10.61.0.5/24", &v0), ("dra1", "10.62.0.5/24", &v1)] {
        let l = link(Some(&bed.netns), ifname).unwrap_or_else(|| panic!("{ifname} is not in the pod"));
        assert_eq!(l["mtu"], 1400, "{ifname}: {l}");
        assert_eq!(addrs(&bed.netns, ifname), vec![addr.to_string()]);
        assert!(link(None, host).is_none(), "{host} is still on the host");
    }
    // The CNI's own records, under the sandbox's ID: what the NRI plugin's NCCL variables and every DEL rule use.
    let recs = bed.cni_records();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs.iter().all(|r| r.to_string().contains("0a1b2c3d4e")), "{recs:?}");
    assert!(a.record("0a1b2c3d4e").unwrap().is_some());

    let n = rt().block_on(a.detach("0a1b2c3d4e")).expect("detach");
    assert_eq!(n, 2);
    for (_, host) in [&v0, &v1] {
        let l = link(None, host).unwrap_or_else(|| panic!("{host} is not back on the host"));
        assert_ne!(l["mtu"], 1400, "{host}'s MTU was not given back: {l}");
    }
    assert!(link(Some(&bed.netns), "dra0").is_none() && link(Some(&bed.netns), "dra1").is_none());
    assert!(bed.cni_records().is_empty(), "{:?}", bed.cni_records());
    assert!(a.record("0a1b2c3d4e").unwrap().is_none());
    // RemovePodSandbox after Stop: nothing left, nothing to do.
    assert_eq!(rt().block_on(a.detach("0a1b2c3d4e")).expect("second detach"), 0);
}

#[test]
fn a_failed_add_gives_back_what_was_attached_before_it() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("b", 0x7b, 1);
    let v0 = bed.vfs[0].clone();
    // The second device is a VF that is not on the node: its ADD fails after the first one's succeeded.
    bed.keep("claim-2", "pod-2", &[("a", &v0.0, "10.63.0.5/24"), ("b", "0000:7b:02.7", "10.63.0.6/24")]);
    let a = bed.attacher();
    let err = rt().block_on(a.attach(&bed.sandbox("5e6f", "pod-2"))).expect_err("an ADD of a VF not on the node");
    assert!(err.contains("dra1") && err.contains("0000-7b-02-7") && err.contains("ADD"), "{err}");
    let l = link(None, &v0.1).unwrap_or_else(|| panic!("{} was not given back: {err}", v0.1));
    assert_ne!(l["mtu"], 1400, "{l}");
    assert!(link(Some(&bed.netns), "dra0").is_none());
    assert!(bed.cni_records().is_empty(), "{:?}", bed.cni_records());
    assert!(a.record("5e6f").unwrap().is_none());
}

#[test]
fn stop_after_the_pods_namespace_is_gone_still_finishes() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("c", 0x7c, 1);
    let v0 = bed.vfs[0].clone();
    bed.keep("claim-3", "pod-3", &[("vf", &v0.0, "10.64.0.5/24")]);
    let a = bed.attacher();
    assert_eq!(rt().block_on(a.attach(&bed.sandbox("77aa", "pod-3"))).expect("attach"), 1);
    assert!(link(Some(&bed.netns), "dra0").is_some());
    bed.netns_gone(&v0);
    assert_eq!(rt().block_on(a.detach("77aa")).expect("detach without the namespace"), 1);
    let l = link(None, &v0.1).expect("the VF on the host");
    assert_ne!(l["mtu"], 1400, "its MTU was not given back: {l}");
    assert!(bed.cni_records().is_empty(), "{:?}", bed.cni_records());
    assert!(!bed.dir.join("attached/77aa.json").exists());
}

#[test]
fn a_new_sandbox_of_the_pod_first_gives_back_what_its_dead_one_kept() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("n", 0x7d, 1);
    let v0 = bed.vfs[0].clone();
    bed.keep("claim-7", "pod-7", &[("vf", &v0.0, "10.64.0.7/24")]);
    let a = bed.attacher();
    assert_eq!(rt().block_on(a.attach(&bed.sandbox("aa01", "pod-7"))).expect("attach"), 1);
    // A node crash: the sandbox's namespace is gone and its Stop never reached the plugin; the kubelet runs the pod
    // in a new sandbox.
    bed.netns_gone(&v0);
    must(&["ip", "netns", "add", &bed.netns]);
    assert_eq!(rt().block_on(a.attach(&bed.sandbox("aa02", "pod-7"))).expect("attach to the new sandbox"), 1);
    assert!(a.record("aa01").unwrap().is_none(), "the dead sandbox's record is left");
    assert!(a.record("aa02").unwrap().is_some());
    let l = link(Some(&bed.netns), "dra0").expect("dra0 in the new sandbox");
    assert_eq!(l["mtu"], 1400, "{l}");
    assert_eq!(addrs(&bed.netns, "dra0"), vec!["10.64.0.7/24".to_string()]);
    let recs = bed.cni_records();
    assert_eq!(recs.len(), 1, "{recs:?}");
    // A late Stop of the dead sandbox finds nothing and leaves the new one's VF where it is.
    assert_eq!(rt().block_on(a.detach("aa01")).expect("late detach"), 0);
    assert!(link(Some(&bed.netns), "dra0").is_some());
    assert_eq!(rt().block_on(a.detach("aa02")).expect("detach"), 1);
    assert!(bed.cni_records().is_empty(), "{:?}", bed.cni_records());
}

#[test]
fn a_pod_without_claims_gets_nothing_and_a_bad_sandbox_id_names_no_file() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("d", 0x7d, 1);
    let v0 = bed.vfs[0].clone();
    bed.keep("claim-4", "someone-else", &[("vf", &v0.0, "10.65.0.5/24")]);
    let a = bed.attacher();
    assert_eq!(rt().block_on(a.attach(&bed.sandbox("99bb", "pod-4"))).expect("attach"), 0);
    assert!(link(None, &v0.1).is_some(), "another pod's VF moved");
    assert!(bed.cni_records().is_empty());
    let err = a.record("../x").expect_err("a sandbox ID with a path in it");
    assert!(err.contains("sandbox ID"), "{err}");
}

#[test]
fn node_cni_runs_the_cni_in_the_nodes_mount_namespace() {
    if !need_root() {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_sriov-rdma-device-plugin");
    let node = must(&["readlink", &node_mount_ns()]);
    // A process in a mount namespace of its own, as the daemon's container is: it sees another one...
    let own = must(&["unshare", "--mount", "readlink", "/proc/self/ns/mnt"]);
    assert_ne!(own.trim(), node.trim(), "unshare gave no mount namespace of its own");
    // ...and what it runs through node-cni sees the node's.
    let ns = format!("SRIOV_RDMA_NODE_MOUNT_NS={}", node_mount_ns());
    let seen = must(&["unshare", "--mount", "env", &ns, exe, "node-cni", "/usr/bin/readlink", "/proc/self/ns/mnt"]);
    assert_eq!(seen.trim(), node.trim());
    // A program the node does not have: the error names it, and the exit status is a failure.
    let out = std::process::Command::new(exe)
        .args(["node-cni", "/opt/cni/bin/no-such-cni"])
        .env("SRIOV_RDMA_NODE_MOUNT_NS", node_mount_ns())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("running /opt/cni/bin/no-such-cni in the node's mount namespace"), "{err}");
}

#[test]
fn the_cni_looks_for_the_prepared_claims_where_the_driver_keeps_them() {
    use sriov_rdma_device_plugin::dra::{DraPaths, DRIVER};
    let root = std::path::Path::new("/var/lib/kubelet");
    let p = DraPaths::under(root, DRIVER, "/c".into(), "/s".into(), "/d".into(), "/p".into());
    assert_eq!(p.claims_dir(), root.join(sriov_rdma_cni::kubelet::DRA_CLAIMS));
}

#[test]
fn synchronize_attaches_a_sandbox_that_ran_without_the_plugin_and_gives_back_one_that_is_gone() {
    if !need_root() {
        return;
    }
    let bed = Bed::new("s", 0x7e, 1);
    let v0 = bed.vfs[0].clone();
    bed.keep("claim-5", "pod-5", &[("vf", &v0.0, "10.64.0.5/24")]);
    let a = bed.attacher();
    let rt = rt();
    // The runtime's list at Synchronize: pod-5's sandbox ran while no plugin was registered; pod-6 has no claim.
    let (sb, other) = (bed.sandbox("5e5e5e", "pod-5"), bed.sandbox("6f6f6f", "pod-6"));
    assert_eq!(rt.block_on(a.catch_up(&[sb.clone(), other.clone()])), 1);
    let l = link(Some(&bed.netns), "dra0").expect("dra0 in the pod after Synchronize");
    assert_eq!(l["mtu"], 1400, "{l}");
    assert_eq!(addrs(&bed.netns, "dra0"), vec!["10.64.0.5/24".to_string()]);
    assert!(link(None, &v0.1).is_none(), "{} is still on the host", v0.1);
    assert_eq!(bed.cni_records().len(), 1);
    // The next Synchronize (the runtime restarted): attached already, nothing done again.
    assert_eq!(rt.block_on(a.catch_up(std::slice::from_ref(&sb))), 0);
    assert_eq!(bed.cni_records().len(), 1);
    // A list with the sandbox in it gives nothing back; one without it (its Stop came while no plugin was there)
    // gives its VF back.
    assert_eq!(rt.block_on(a.release_gone(std::slice::from_ref(&sb.id))), 0);
    assert!(link(Some(&bed.netns), "dra0").is_some());
    assert_eq!(rt.block_on(a.release_gone(std::slice::from_ref(&other.id))), 1);
    let l = link(None, &v0.1).unwrap_or_else(|| panic!("{} was not given back", v0.1));
    assert_ne!(l["mtu"], 1400, "{l}");
    assert!(link(Some(&bed.netns), "dra0").is_none());
    assert!(bed.cni_records().is_empty(), "{:?}", bed.cni_records());
    assert!(a.record(&sb.id).unwrap().is_none());
}
