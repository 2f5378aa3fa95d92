//! Soak: 1000 ADD/DEL cycles on stand-in VFs, several workers in parallel (each its own PF with two VFs,
//! pod netns and host-local network), mixing deviceID and pfName, host-local IPAM or none, one or two
//! attachments per pod, and every cniVersion. After every cycle: no record or temp record, no lease, both
//! VFs with the name, MAC, MTU and up state they had before, nothing left in the pod.
//!
//! "fd growth" for a short-lived binary: its own fds die with it, so what can leak is what outlives it or
//! escapes it. Checked, exactly and on every path: the fds its IPAM plugin inherits (only stdin/stdout/stderr:
//! no netlink socket, netns or lock fd may escape into a child that can outlive the plugin), and on the host:
//! records, leases, links, netns, the test process's own fds and the state directory's size, before and after.
//! How many fds the plugin holds while IPAM runs is not checked: IPAM runs alongside the rest of ADD, so that
//! count is a snapshot of concurrent work (a socket opened in the pod, a record being written), not a leak, and
//! it varied with load. Prints cycles/second. Root only.

mod common;
use common::*;
use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::netlink::Route;
use sriov_rdma_cni::kernel::netns::Netns;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const CYCLES: usize = 1000;
const WORKERS: usize = 4;
const VERSIONS: [&str; 4] = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

type Identity = (String, Option<String>, u32, bool);

fn ident(sock: &mut RouteSocket, name: &str) -> Option<Identity> {
    let l = sock.link_by_name(name).expect("netlink link lookup")?;
    Some((l.name, l.mac.map(|m| m.to_string()), l.mtu, l.up))
}

/// fds of this process a child inherits (no FD_CLOEXEC), beyond 0–2: what the runtime (here, the test) hands
/// down, which the plugin passes on and is not the plugin's doing.
fn inheritable_fds() -> BTreeSet<u32> {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|fd| *fd > 2)
        .filter(|fd| {
            // SAFETY: F_GETFD on a number is harmless; a closed fd answers -1.
            let flags = unsafe { libc::fcntl(*fd as i32, libc::F_GETFD) };
            flags >= 0 && flags & libc::FD_CLOEXEC == 0
        })
        .collect()
}

fn count(args: &[&str]) -> usize {
    must(args).lines().count()
}

/// The host's links that are the soak's own or could be a leak of it (its stand-ins `tsk…`, a VF left under a
/// pod name `net1`/`net2`, or a spare name), so links other processes on a shared machine add are not counted.
fn soak_links() -> Vec<String> {
    let mut names: Vec<String> = must(&["ip", "-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().split('@').next().unwrap_or("").to_string()))
        .filter(|n| n.starts_with("tsk") || n == "net1" || n == "net2")
        .collect();
    names.sort();
    names
}

struct Worker {
    i: usize,
    bed: Bed,
    ns: String,
    before: Vec<Identity>,
    ipam: String,
    leases: PathBuf,
}

/// An IPAM plugin named host-local that records its own fds and its parent's (the plugin's), then runs the
/// real one. `ls` runs as a child, so the listing is of the shell as the plugin started it.
fn fd_probe(dir: &Path, log: &Path) -> PathBuf {
    let bin = dir.join("cni");
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(log).unwrap();
    let script = bin.join("host-local");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nls -l /proc/$$/fd /proc/$PPID/fd > {}/$$ 2>&1\nexec {CNI_PATH}/host-local \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

impl Worker {
    fn new(i: usize) -> Worker {
        let mut bed = Bed::new(&format!("sk{i}"), 2);
        let ns = bed.netns();
        let mut sock = RouteSocket::new().unwrap();
        // One VF up with its own MTU, one down: DEL must give back each as it was.
        must(&["ip", "link", "set", &bed.vfs[0].1, "mtu", "1450", "up"]);
        let before = bed.vfs.iter().map(|(_, vf)| ident(&mut sock, vf).unwrap()).collect();
        let net = format!("soak-{i}");
        let ipam = host_local(&format!("10.98.{i}.0/24"), &bed.dir.join("ipam"));
        let leases = bed.dir.join("ipam").join(&net);
        Worker { i, bed, ns, before, ipam, leases }
    }

    fn conf(&self, version: &str, source: &str, ipam: bool) -> String {
        format!(
            r#"{{"cniVersion":"{version}","name":"soak-{}","type":"sriov-rdma",{source},"mtu":9000{}}}"#,
            self.i,
            if ipam { self.ipam.as_str() } else { "" }
        )
    }

    fn env(&self, cmd: &str, cid: &str, ifname: &str, cni_bin: &Path) -> HashMap<String, String> {
        let mut e = self.bed.env(cmd, cid, &self.ns, ifname);
        e.insert("CNI_PATH".into(), cni_bin.display().to_string());
        e
    }

    /// One cycle: one or two attachments (the second VF by address or by pfName), then DEL of each in turn,
    /// then the checks. Returns the number of ADD/DEL pairs.
    fn cycle(&self, rng: &mut Rng, n: usize, cni_bin: &Path, sock: &mut RouteSocket) -> usize {
        let k = if rng.chance(25) { 2 } else { 1 };
        let mut done = Vec::new();
        for j in 0..k {
            let source = if rng.chance(40) {
                format!(r#""pfName":"{}""#, self.bed.pf)
            } else {
                // The VF not taken yet: pfName takes the lowest free one, so by address take the other.
                let idx = if j == 0 { rng.below(2) as usize } else { 1 - self.taken(&done) };
                format!(r#""deviceID":"{}""#, self.bed.vfs[idx].0)
            };
            let version = VERSIONS[rng.below(VERSIONS.len() as u64) as usize];
            let conf = self.conf(version, &source, rng.chance(50));
            let (cid, ifname) = (format!("s{}-{n}-{j}", self.i), format!("net{}", j + 1));
            let r = self.bed.run_env(&self.env("ADD", &cid, &ifname, cni_bin), &conf);
            assert!(r.ok, "worker {} cycle {n}: ADD {conf}: {} {}", self.i, r.stdout, r.stderr);
            let pci = self.bed.records().into_iter().find(|rec| rec["container_id"] == cid.as_str()).unwrap()["pci"]
                .as_str()
                .unwrap()
                .to_string();
            done.push((cid, ifname, conf, pci));
        }
        if rng.chance(50) {
            done.reverse();
        }
        for (cid, ifname, conf, _) in &done {
            let r = self.bed.run_env(&self.env("DEL", cid, ifname, cni_bin), conf);
            assert!(r.ok, "worker {} cycle {n}: DEL {conf}: {} {}", self.i, r.stdout, r.stderr);
        }
        let what = format!("worker {} cycle {n}", self.i);
        for ((_, vf), before) in self.bed.vfs.iter().zip(&self.before) {
            assert_eq!(ident(sock, vf).as_ref(), Some(before), "{what}: {vf} in the host");
        }
        let mut pod = Netns::open(&format!("/var/run/netns/{}", self.ns)).unwrap().socket::<Route>().unwrap();
        for ifname in ["net1", "net2"] {
            assert!(ident(&mut pod, ifname).is_none(), "{what}: {ifname} left in the pod");
        }
        assert!(state_files(&self.bed.state).is_empty(), "{what}: left {:?}", state_files(&self.bed.state));
        assert!(leases(&self.leases).is_empty(), "{what}: leases {:?}", leases(&self.leases));
        k
    }

    fn taken(&self, done: &[(String, String, String, String)]) -> usize {
        self.bed.vfs.iter().position(|(pci, _)| *pci == done[0].3).unwrap()
    }
}

/// One IPAM invocation as the probe saw it: the fds it had beyond its stdio and the probe's own (number →
/// target), and the plugin's fd count.
struct Probe {
    text: String,
    own: Vec<(u32, String)>,
}

fn probes(log: &Path) -> Vec<(u64, Probe)> {
    let mut out = Vec::new();
    for e in fs::read_dir(log).unwrap().flatten() {
        let mtime = e.metadata().unwrap().modified().unwrap();
        let text = fs::read_to_string(e.path()).unwrap();
        // The file is named after the probe's pid; ls prints each directory under a "/proc/PID/fd:" header.
        let own_header = format!("/proc/{}/fd:", e.file_name().to_string_lossy());
        let (mut own, mut parent) = (Vec::new(), Vec::new());
        let mut into_own = false;
        for l in text.lines() {
            if l.starts_with("/proc/") && l.ends_with(':') {
                into_own = l == own_header;
            } else if let Some((left, target)) = l.split_once(" -> ") {
                if let Some(fd) = left.split_whitespace().last().and_then(|f| f.parse::<u32>().ok()) {
                    if into_own { &mut own } else { &mut parent }.push((fd, target.to_string()));
                }
            }
        }
        assert!(!own.is_empty() && !parent.is_empty(), "unreadable probe output: {text}");
        // The shell may keep copies of its own stdio at fds >= 10 around a redirection: those, its script and
        // its log are the probe's, and a pipe the plugin holds is one end of this child's stdin/stdout.
        let mut allowed: BTreeSet<String> = own.iter().filter(|(fd, _)| *fd <= 2).map(|(_, t)| t.clone()).collect();
        allowed.extend(parent.iter().filter(|(fd, t)| *fd == 2 || t.starts_with("pipe:")).map(|(_, t)| t.clone()));
        allowed.insert(e.path().display().to_string());
        own.retain(|(fd, t)| *fd > 2 && !allowed.contains(t));
        let t = mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
        out.push((t, Probe { text, own }));
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

#[test]
fn a_thousand_add_del_cycles_leak_nothing() {
    if !need_root() {
        return;
    }
    let seed = seed("SRIOV_RDMA_SOAK_SEED");
    eprintln!("soak: seed {seed} (SRIOV_RDMA_SOAK_SEED={seed} replays it)");
    let scratch = Scratch::new("soak");
    let top = scratch.0.clone();
    let log = top.join("fdlog");
    let cni_bin = fd_probe(&top, &log);
    let inherited = inheritable_fds();
    let ws: Vec<Worker> = (0..WORKERS).map(Worker::new).collect();

    let links_before = soak_links();
    let soak_netns = || must(&["ip", "netns", "list"]).lines().filter(|l| l.starts_with("srt-sk")).count();
    let netns_before = soak_netns();
    let fds_before = fs::read_dir("/proc/self/fd").unwrap().count();

    let pairs = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for w in &ws {
            let (pairs, cni_bin) = (&pairs, &cni_bin);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ (w.i as u64 + 1).wrapping_mul(0x9e37_79b9));
                let mut sock = RouteSocket::new().unwrap();
                let mut n = 0;
                while pairs.load(Ordering::Relaxed) < CYCLES {
                    pairs.fetch_add(w.cycle(&mut rng, n, cni_bin, &mut sock), Ordering::Relaxed);
                    n += 1;
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let done = pairs.load(Ordering::Relaxed);
    eprintln!("soak: {done} ADD/DEL cycles in {secs:.1} s: {:.1} cycles/s ({WORKERS} workers)", done as f64 / secs);

    assert_eq!(fs::read_dir("/proc/self/fd").unwrap().count(), fds_before, "the test process's fds");
    let mut sock = RouteSocket::new().unwrap();
    for w in &ws {
        for ((_, vf), before) in w.bed.vfs.iter().zip(&w.before) {
            assert_eq!(ident(&mut sock, vf).as_ref(), Some(before), "{vf} after the soak");
            assert!(identity(None, vf).is_some());
        }
        assert_eq!(count(&["ip", "-n", &w.ns, "-o", "link", "show"]), 1, "only lo is left in {}", w.ns);
        let locks = fs::read_dir(&w.bed.state).unwrap().count();
        assert!(locks <= w.bed.vfs.len(), "the state directory holds only one lock per VF: {locks}");
    }
    assert_eq!(soak_links(), links_before, "host links");
    assert_eq!(soak_netns(), netns_before, "network namespaces");

    // What escaped into the IPAM plugin, and what the plugin held while it ran.
    let seen = probes(&log);
    assert!(seen.len() > 200, "the IPAM probe ran {} times", seen.len());
    let script = cni_bin.join("host-local").display().to_string();
    for (_, p) in &seen {
        let leaked: Vec<_> = p.own.iter().filter(|(fd, target)| !inherited.contains(fd) && *target != script).collect();
        assert!(leaked.is_empty(), "the IPAM plugin inherited fds from sriov-rdma: {leaked:?}\n{}", p.text);
    }
    eprintln!("soak: {} IPAM runs, each with nothing of sriov-rdma's beyond its stdio", seen.len());
}
