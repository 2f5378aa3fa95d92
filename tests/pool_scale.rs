//! `make bench-scale`, its CNI part: ADD by `pfName` on a PF of 1000 VFs of which 900 are taken, what ADD's pool
//! (src/flow/pool.rs) scans to find a free VF, beside the same ADD on a PF of 1000 VFs with none taken.
//!
//! One fake node (the tests' fake sysfs tree, veth ends standing in for the VF netdevs, as in tests/common):
//! PF A with 1000 VFs, all with a netdev; PF B with 1000 VFs, VF 0 and 1 with a netdev (the scan of a PF with
//! nothing taken stops at VF 0; B's other VFs are only listed). The 900 taken VFs are A's VFs 0–899, taken by
//! real ADDs by `deviceID` into pod namespaces of 9 VFs each: each has the record ADD writes and its netdev is in
//! the pod, so a `pfName` ADD on A passes over all 900 (lock, record, the pod's namespace, the netdev's absence
//! from the host) before it reaches VF 900.
//!
//! Timed, per plugin process (spawn to exit, as a runtime sees it), the medians of ROUNDS rounds
//! (`SCALE_ADD_ROUNDS`, default 20), each an ADD then its DEL:
//! 1. `pfName` B before anything is taken: no record on the node;
//!
//! then, after the 900 ADDs, round-robin:
//! 2. `pfName` B: none of its VFs taken, 900 records on the node (records are per node: ADD and DEL look up
//!    theirs among all of them);
//! 3. `pfName` A: 900 of its 1000 VFs taken;
//! 4. `deviceID` A's VF 901: the same 900 records, no scan.
//!
//! 3 ÷ 2 is the pool scan's share, 2 ÷ 1 the record count's, 3 ÷ 1 both. Every ADD must have taken the VF the rule
//! names (the lowest free one): its record in the store, its netdev gone from the host and in the pod under the
//! pod's name; every DEL must have brought it back. The fake tree keeps a moved VF's `net/` entry (real sysfs
//! does not show it in the host's view), which costs the scan one netlink lookup more per taken VF than on a real
//! node.
//!
//! Everything happens in a network namespace of the test's own (the test thread's; the plugin and `ip` inherit
//! it) and pod namespaces it creates and deletes (`tsp*`, `tsbench`): the host's links are not touched. Root.

mod common;
use common::*;
use serde_json::Value;
use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const VFS: usize = 1000;
const TAKEN: usize = 900;
const PER_POD: usize = 9;
const PF_A: &str = "tsapf";
const PF_B: &str = "tsbpf";
const PF_A_PCI: &str = "0000:70:00.0";
const PF_B_PCI: &str = "0000:80:00.0";
const BENCH_NS: &str = "tsbench";

/// VF `i` of the PF on bus `bus`: 256 functions a bus (32 devices × 8), the next bus after.
fn vf_pci(bus: usize, i: usize) -> String {
    format!("0000:{:02x}:{:02x}.{}", bus + 1 + i / 256, (i % 256) / 8, i % 8)
}

fn pci_a(i: usize) -> String {
    vf_pci(0x70, i)
}

fn pci_b(i: usize) -> String {
    vf_pci(0x80, i)
}

fn pod_ns(p: usize) -> String {
    format!("tsp{p}")
}

/// The test thread in a network namespace of its own, and back in the one it came from when dropped; the pod
/// namespaces it made are deleted (their links with them, and the veth peers left behind with the own one).
struct OwnNet {
    home: File,
    pods: Vec<String>,
    dir: PathBuf,
}

impl OwnNet {
    fn enter(dir: PathBuf) -> OwnNet {
        let home = File::open("/proc/thread-self/ns/net").expect("opening this thread's netns");
        // SAFETY: unshare of the calling thread's network namespace; no pointer is passed.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error());
        OwnNet { home, pods: Vec::new(), dir }
    }

    fn netns(&mut self, name: &str) {
        let _ = sh(&["ip", "netns", "del", name]);
        must(&["ip", "netns", "add", name]);
        self.pods.push(name.to_string());
    }
}

impl Drop for OwnNet {
    fn drop(&mut self) {
        for ns in &self.pods {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        // SAFETY: setns to the namespace fd opened in `enter`, still open.
        let rc = unsafe { libc::setns(self.home.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            eprintln!("setns back to the test's netns: {}", std::io::Error::last_os_error());
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Veth pairs `name`/`namep`, all in one `ip -batch`.
fn veths(dir: &Path, names: &[String]) {
    let batch = dir.join("veths.batch");
    let mut f = File::create(&batch).expect("writing the ip batch");
    for n in names {
        writeln!(f, "link add {n} type veth peer name {n}p").expect("writing the ip batch");
    }
    drop(f);
    must(&["ip", "-batch", batch.to_str().expect("a UTF-8 temp path")]);
}

struct Node {
    sysfs: PathBuf,
    state: PathBuf,
}

impl Node {
    /// One plugin run, and how long its process took.
    fn run(&self, cmd: &str, cid: &str, ns: &str, ifname: &str, conf: &str) -> (Run, Duration) {
        let env = cni_env(cmd, cid, ns, ifname);
        let t = Instant::now();
        let r = run_plugin(&self.sysfs, &self.state, &env, conf);
        (r, t.elapsed())
    }

    fn record(&self, pci: &str) -> Option<Value> {
        let raw = fs::read(self.state.join(format!("{pci}.json"))).ok()?;
        Some(serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("record of {pci} is not JSON: {e}")))
    }

    fn records(&self) -> usize {
        fs::read_dir(&self.state)
            .map(|rd| rd.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".json")).count())
            .unwrap_or(0)
    }
}

fn conf_pf(pf: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"scale-net","type":"sriov-rdma","pfName":"{pf}"}}"#)
}

fn conf_device(pci: &str) -> String {
    format!(r#"{{"cniVersion":"1.0.0","name":"scale-net","type":"sriov-rdma","deviceID":"{pci}"}}"#)
}

/// One way of asking for a VF, and the VF the rule must give.
struct Case {
    what: &'static str,
    conf: String,
    want_pci: String,
    want_netdev: String,
    add: Vec<Duration>,
    del: Vec<Duration>,
}

impl Case {
    fn new(what: &'static str, conf: String, want_pci: String, want_netdev: String) -> Case {
        Case { what, conf, want_pci, want_netdev, add: Vec::new(), del: Vec::new() }
    }

    /// ADD then DEL, each timed; fails unless ADD took `want_pci` (record, netdev moved into the pod) and DEL
    /// gave it back.
    fn cycle(&mut self, node: &Node, round: usize) {
        let cid = format!("bench-{}-{round}", self.add.len());
        let (r, t) = node.run("ADD", &cid, BENCH_NS, "net1", &self.conf);
        r.ok();
        self.add.push(t);
        let rec = node.record(&self.want_pci).unwrap_or_else(|| {
            panic!(
                "{}: ADD succeeded but VF {} (the lowest free) has no record: {}",
                self.what, self.want_pci, r.stdout
            )
        });
        assert_eq!(rec["container_id"], cid.as_str(), "{}: VF {} record is another's: {rec}", self.what, self.want_pci);
        assert!(
            link(None, &self.want_netdev).is_none(),
            "{}: {} still on the host after ADD",
            self.what,
            self.want_netdev
        );
        assert!(link(Some(BENCH_NS), "net1").is_some(), "{}: no net1 in the pod after ADD", self.what);
        let (r, t) = node.run("DEL", &cid, BENCH_NS, "net1", &self.conf);
        r.ok();
        self.del.push(t);
        assert!(node.record(&self.want_pci).is_none(), "{}: VF {} record left after DEL", self.what, self.want_pci);
        assert!(
            link(None, &self.want_netdev).is_some(),
            "{}: {} not back on the host after DEL",
            self.what,
            self.want_netdev
        );
        assert!(link(Some(BENCH_NS), "net1").is_none(), "{}: net1 left in the pod after DEL", self.what);
    }
}

fn median(v: &[Duration]) -> f64 {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    match ms.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => ms[n / 2],
        n => (ms[n / 2 - 1] + ms[n / 2]) / 2.0,
    }
}

#[test]
#[ignore = "benchmark: make bench-scale (root)"]
fn pfname_add_on_a_pf_of_1000_vfs_900_taken() {
    if !need_root() {
        return;
    }
    let rounds: usize = std::env::var("SCALE_ADD_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20).max(1);
    let dir = std::env::temp_dir().join(format!("sriov-rdma-pool-scale-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("creating the test's directory");
    let mut net = OwnNet::enter(dir.clone());

    let started = Instant::now();
    let node = Node { sysfs: dir.join("sys"), state: dir.join("state") };
    let tree = FakeTree::new(&node.sysfs).expect("fake sysfs tree");
    tree.pf(PF_A_PCI, PF_A, VFS as u32).expect("PF A");
    tree.pf(PF_B_PCI, PF_B, VFS as u32).expect("PF B");
    let a_dev = |i: usize| format!("tsa{i}");
    let b_dev = |i: usize| format!("tsb{i}");
    for i in 0..VFS {
        tree.vf(PF_A_PCI, i as u32, &pci_a(i), Some(&a_dev(i)), "mlx5_core").expect("VF of A");
        tree.vf(PF_B_PCI, i as u32, &pci_b(i), Some(&b_dev(i)), "mlx5_core").expect("VF of B");
    }
    let mut names = vec![PF_A.to_string(), PF_B.to_string(), b_dev(0), b_dev(1)];
    names.extend((0..VFS).map(a_dev));
    veths(&dir, &names);
    net.netns(BENCH_NS);
    for p in 0..TAKEN.div_ceil(PER_POD) {
        net.netns(&pod_ns(p));
    }
    println!(
        "node: 2 PFs x {VFS} VFs in a fake tree, {} veth pairs, set up in {:.1} s",
        names.len(),
        started.elapsed().as_secs_f64()
    );

    // 1: nothing taken anywhere.
    let mut empty = Case::new("pfName B, no record on the node", conf_pf(PF_B), pci_b(0), b_dev(0));
    for r in 0..rounds {
        empty.cycle(&node, r);
    }

    // The 900 taken VFs, by real ADDs.
    let t = Instant::now();
    for i in 0..TAKEN {
        let (ns, ifname) = (pod_ns(i / PER_POD), format!("net{}", 1 + i % PER_POD));
        let (r, _) = node.run("ADD", &format!("taken-{i}"), &ns, &ifname, &conf_device(&pci_a(i)));
        r.ok();
    }
    println!("{TAKEN} VFs of {PF_A} taken by deviceID ADDs in {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(node.records(), TAKEN, "one record per taken VF");
    for i in [0, TAKEN / 2, TAKEN - 1] {
        let (ns, ifname) = (pod_ns(i / PER_POD), format!("net{}", 1 + i % PER_POD));
        assert!(link(None, &a_dev(i)).is_none(), "taken VF {i}'s netdev is still on the host");
        assert!(link(Some(&ns), &ifname).is_some(), "taken VF {i} is not {ifname} in {ns}");
    }

    let mut cases = [
        Case::new("pfName B, 0 of 1000 taken, 900 records", conf_pf(PF_B), pci_b(0), b_dev(0)),
        Case::new("pfName A, 900 of 1000 taken", conf_pf(PF_A), pci_a(TAKEN), a_dev(TAKEN)),
        Case::new("deviceID A VF 901, 900 records", conf_device(&pci_a(TAKEN + 1)), pci_a(TAKEN + 1), a_dev(TAKEN + 1)),
    ];
    for r in 0..rounds {
        for c in cases.iter_mut() {
            c.cycle(&node, r);
        }
    }
    // The benchmark's ADDs and DELs left the taken VFs as they were.
    assert_eq!(node.records(), TAKEN, "the taken VFs' records, no other");
    for i in 0..TAKEN {
        let rec = node.record(&pci_a(i)).unwrap_or_else(|| panic!("taken VF {i} lost its record"));
        assert_eq!(rec["container_id"], format!("taken-{i}").as_str(), "taken VF {i}'s record changed");
    }

    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("ADD+DEL on {VFS}-VF PFs, medians of {rounds} rounds, {build} build (ms per plugin process):");
    let row = |c: &Case| {
        println!("  {:<42} ADD {:>7.2}  DEL {:>7.2}", c.what, median(&c.add), median(&c.del));
    };
    row(&empty);
    for c in &cases {
        row(c);
    }
    let (m1, m2, m3) = (median(&empty.add), median(&cases[0].add), median(&cases[1].add));
    println!(
        "  ADD ratios: 900 taken / 0 taken (same node) {:.2}; 900 taken / no record {:.2}; 900 records / none {:.2}",
        m3 / m2,
        m3 / m1,
        m2 / m1
    );
    println!("  DEL ratio: 900 records / none {:.2}", median(&cases[0].del) / median(&empty.del));
    println!(
        "  per taken VF the pfName scan passes over: {:.0} us; per record on the node: ADD {:.0} us, DEL {:.0} us",
        (m3 - m2) * 1e3 / TAKEN as f64,
        (m2 - m1) * 1e3 / TAKEN as f64,
        (median(&cases[0].del) - median(&empty.del)) * 1e3 / TAKEN as f64
    );
    drop(net);
}
