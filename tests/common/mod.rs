//! Test bed on real network namespaces: veth ends stand in for VF netdevs behind a fake sysfs PCI tree.
//!
//! What is fake: the PCI tree (physfn/virtfnN/driver/net links) and the PF's lack of a VF table (a veth
//! PF reports none). What is real: the netdevs, the namespaces, every netlink move/rename/MTU/MAC/address,
//! the IPAM plugins from containernetworking-plugins, the plugin binary and its record store.
#![allow(dead_code)]

use serde_json::Value;
use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const CNI_PATH: &str = "/usr/lib/cni";

// sh, must and link: shared with the device plugin's root tests (device-plugin/tests/draattach.rs).
#[path = "ip.rs"]
mod ip;
pub use ip::{link, must, sh};

/// The addresses of a device in a namespace, as `addr/prefix`.
pub fn addrs(ns: &str, name: &str) -> Vec<String> {
    let out = must(&["ip", "-n", ns, "-j", "addr", "show", "dev", name]);
    addr_list(&serde_json::from_str(&out).unwrap())
}

/// The addresses in `ip -j addr show dev X` output, as `addr/prefix`.
pub fn addr_list(v: &Value) -> Vec<String> {
    v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// Name, MAC, MTU, up: what DEL must give back.
pub fn identity(ns: Option<&str>, name: &str) -> Option<(String, String, u64, bool)> {
    let l = link(ns, name)?;
    Some((
        l["ifname"].as_str()?.to_string(),
        l["address"].as_str()?.to_string(),
        l["mtu"].as_u64()?,
        l["flags"].as_array()?.iter().any(|f| f == "UP"),
    ))
}

pub struct Bed {
    pub tag: String,
    pub dir: PathBuf,
    pub sysfs: PathBuf,
    pub state: PathBuf,
    pub pf: String,
    pub pf_pci: String,
    pub tree: FakeTree,
    pub vfs: Vec<(String, String)>, // (pci, netdev)
    pub netns: Vec<String>,
    links: Vec<String>,
}

impl Bed {
    /// A PF stand-in with `n` VF stand-ins. `tag` keeps names unique across parallel tests (≤ 4 chars).
    pub fn new(tag: &str, n: usize) -> Bed {
        assert!(tag.len() <= 4);
        let dir = std::env::temp_dir().join(format!("sriov-rdma-it-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let sysfs = dir.join("sys");
        let state = dir.join("state");
        let tree = FakeTree::new(&sysfs).unwrap();
        let mut bed = Bed {
            tag: tag.to_string(),
            dir,
            sysfs,
            state,
            pf: format!("t{tag}pf"),
            pf_pci: format!("0000:{:02x}:00.0", tag_bus(tag)),
            tree,
            vfs: Vec::new(),
            netns: Vec::new(),
            links: Vec::new(),
        };
        let pf = bed.pf.clone();
        bed.veth(&pf);
        bed.tree.pf(&bed.pf_pci, &pf, n as u32).unwrap();
        for i in 0..n {
            let pci = format!("0000:{:02x}:02.{}", tag_bus(tag), i % 8);
            let pci = if i >= 8 { format!("0000:{:02x}:03.{}", tag_bus(tag), i % 8) } else { pci };
            let name = format!("t{tag}v{i}");
            bed.veth(&name);
            bed.add_vf(i, &pci, Some(&name), "igbvf");
            bed.vfs.push((pci, name));
        }
        bed
    }

    fn veth(&mut self, name: &str) {
        let peer = format!("{name}p");
        let _ = sh(&["ip", "link", "del", name]);
        must(&["ip", "link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.links.push(name.to_string());
        self.links.push(peer);
    }

    pub fn pci_dir(&self, pci: &str) -> PathBuf {
        self.tree.dev(pci)
    }

    /// Adds a VF of the bed's PF to the fake tree.
    pub fn add_vf(&self, idx: usize, pci: &str, netdev: Option<&str>, driver: &str) {
        self.tree.vf(&self.pf_pci, idx as u32, pci, netdev, driver).unwrap();
    }

    /// Points the fake tree's `net/` entry of a VF at another name (what real sysfs shows after a rename).
    pub fn set_vf_netdev(&self, pci: &str, name: &str) {
        self.tree.set_vf_netdev(pci, name).unwrap();
    }

    pub fn netns(&mut self) -> String {
        let name = format!("srt-{}-{}", self.tag, self.netns.len());
        let _ = sh(&["ip", "netns", "del", &name]);
        must(&["ip", "netns", "add", &name]);
        self.netns.push(name.clone());
        name
    }

    pub fn env(&self, cmd: &str, cid: &str, ns: &str, ifname: &str) -> HashMap<String, String> {
        cni_env(cmd, cid, ns, ifname)
    }

    pub fn run_env(&self, env: &HashMap<String, String>, conf: &str) -> Run {
        run_plugin(&self.sysfs, &self.state, env, conf)
    }

    pub fn run(&self, cmd: &str, cid: &str, ns: &str, ifname: &str, conf: &str) -> Run {
        self.run_env(&self.env(cmd, cid, ns, ifname), conf)
    }

    pub fn records(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.state).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().ends_with(".json") {
                out.push(serde_json::from_slice(&fs::read(e.path()).unwrap()).unwrap());
            }
        }
        out
    }
}

fn tag_bus(tag: &str) -> u8 {
    tag.bytes().fold(0x40u8, |a, b| a.wrapping_mul(31).wrapping_add(b))
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in &self.netns {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        for l in &self.links {
            let _ = sh(&["ip", "link", "del", l]);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
    /// The signal that ended the plugin, if one did.
    pub signal: Option<i32>,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?} / {}", self.stdout, self.stderr))
    }

    pub fn code(&self) -> u64 {
        self.json()["code"].as_u64().unwrap_or(0)
    }

    pub fn msg(&self) -> String {
        self.json()["msg"].as_str().unwrap_or_default().to_string()
    }

    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert!(self.ok, "plugin failed: {} / {}", self.stdout, self.stderr);
        self
    }
}

/// The CNI_* variables of one plugin run: `ns` names a namespace under /var/run/netns (empty: no CNI_NETNS value).
pub fn cni_env(cmd: &str, cid: &str, ns: &str, ifname: &str) -> HashMap<String, String> {
    let mut e = HashMap::new();
    e.insert("CNI_COMMAND".into(), cmd.into());
    e.insert("CNI_CONTAINERID".into(), cid.into());
    e.insert("CNI_NETNS".into(), if ns.is_empty() { String::new() } else { format!("/var/run/netns/{ns}") });
    e.insert("CNI_IFNAME".into(), ifname.into());
    e.insert("CNI_PATH".into(), CNI_PATH.into());
    e
}

pub fn run_plugin(sysfs: &Path, state: &Path, env: &HashMap<String, String>, conf: &str) -> Run {
    run_plugin_with(sysfs, state, env, conf, || Ok(()))
}

/// The plugin as a runtime runs it: `env` only, the configuration on stdin. `pre` runs in the child before
/// exec (resource limits); it must only make async-signal-safe calls.
pub fn run_plugin_with(
    sysfs: &Path,
    state: &Path,
    env: &HashMap<String, String>,
    conf: &str,
    pre: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> Run {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let mut cmd = plugin_command(sysfs, state, env);
    // SAFETY: the hook's contract (above) is that it only makes async-signal-safe calls.
    unsafe { cmd.pre_exec(pre) };
    let mut child = cmd.spawn().expect("spawning sriov-rdma");
    use std::io::Write;
    // The plugin may exit without reading (e.g. killed by a limit before it gets there).
    let _ = child.stdin.take().unwrap().write_all(conf.as_bytes());
    let out = child.wait_with_output().unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        signal: out.status.signal(),
    }
}

/// The plugin binary with a runtime's environment and piped stdio, not yet started. The node's device-info and
/// log directories are the test's own (the directory holding the state dir), and there is no node policy and no
/// kubelet unless `env` says otherwise: a test never writes into, nor depends on, the machine's.
pub fn plugin_command(sysfs: &Path, state: &Path, env: &HashMap<String, String>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sriov-rdma"));
    let own = state.parent().unwrap_or(state);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("SRIOV_RDMA_SYSFS", sysfs)
        .env("SRIOV_RDMA_STATE_DIR", state)
        .env("SRIOV_RDMA_DEVINFO_DIR", own)
        .env("SRIOV_RDMA_LOG_DIR", own)
        .env("SRIOV_RDMA_POLICY", own.join("no-node-policy.json"))
        .env("SRIOV_RDMA_KUBELET_DIR", own.join("no-kubelet"))
        .env("SRIOV_RDMA_MULTUS_DIR", own.join("no-multus"))
        .env("NETCONFPATH", own.join("no-net.d"))
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A 1.0.0 configuration for one VF by address, with extra keys.
pub fn conf_dev(version: &str, pci: &str, extra: &str) -> String {
    format!(
        r#"{{"cniVersion":"{version}","name":"rdma-net","type":"sriov-rdma","deviceID":"{pci}","logLevel":"debug"{extra}}}"#
    )
}

pub fn static_ipam(addr: &str) -> String {
    format!(
        r#","ipam":{{"type":"static","addresses":[{{"address":"{addr}","gateway":"10.77.0.1"}}],"routes":[{{"dst":"10.78.0.0/16"}}]}}"#
    )
}

/// Set to 1 to skip, rather than fail, the tests this machine cannot run (not root, no podman).
pub const SKIP_VAR: &str = "SRIOV_RDMA_SKIP_ROOT_TESTS";

/// Whether the calling test can run: true when `available`. Otherwise it fails — a test that cannot run
/// must not pass — unless SRIOV_RDMA_SKIP_ROOT_TESTS=1 asks for skipping; then it says so on stderr (past the
/// harness's capture) and returns false.
#[track_caller]
pub fn can_run(available: bool, needs: &str) -> bool {
    if available {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    if std::env::var(SKIP_VAR).as_deref() == Ok("1") {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs {needs} ({SKIP_VAR}=1)");
        return false;
    }
    panic!(
        "{test} needs {needs} and cannot run here; run it as root (`sudo make test`), or set {SKIP_VAR}=1 to skip it"
    );
}

/// `can_run` for root: network namespaces, veth, the netns moves.
#[track_caller]
pub fn need_root() -> bool {
    can_run(is_root(), "root (network namespaces and veth)")
}

/// `can_run` for a list of (what, present?) needs.
#[track_caller]
pub fn runnable(_test: &str, needs: &[(&str, bool)]) -> bool {
    let missing: Vec<&str> = needs.iter().filter(|(_, ok)| !ok).map(|(what, _)| *what).collect();
    can_run(missing.is_empty(), &missing.join(", "))
}

pub const RUNC: &str = "/usr/sbin/runc";

/// Rootful podman as it runs on these machines: runc (crun refuses the hybrid cgroup layout), cgroupfs, and a
/// containers.conf of the test's own with rlimits below the hard limit (no CAP_SYS_RESOURCE here) and the
/// CNI backend with the given plugin and config dirs.
#[derive(Clone)]
pub struct Podman {
    pub conf: PathBuf,
}

impl Podman {
    pub fn available() -> bool {
        Command::new("podman").arg("--version").output().is_ok_and(|o| o.status.success()) && Path::new(RUNC).exists()
    }

    /// Writes `dir/containers.conf`.
    pub fn new(dir: &Path, cni_plugin_dirs: &[&Path], network_config_dir: &Path) -> Podman {
        let conf = dir.join("containers.conf");
        let dirs: Vec<String> = cni_plugin_dirs
            .iter()
            .map(|d| format!("\"{}\"", d.display()))
            .chain(std::iter::once(format!("\"{CNI_PATH}\"")))
            .collect();
        fs::write(
            &conf,
            format!(
                "[containers]\ndefault_ulimits = [\"nproc=1024:1024\", \"nofile=1024:1024\"]\n[network]\nnetwork_backend = \"cni\"\n\
                 cni_plugin_dirs = [{}]\nnetwork_config_dir = \"{}\"\n",
                dirs.join(", "),
                network_config_dir.display()
            ),
        )
        .unwrap();
        Podman { conf }
    }

    /// `podman --runtime runc --cgroup-manager=cgroupfs` with this containers.conf; add the subcommand.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf).args(["--runtime", RUNC, "--cgroup-manager=cgroupfs"]);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("running podman")
    }
}

pub fn is_root() -> bool {
    nix_uid() == 0
}

fn nix_uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc_getuid() }
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
}

/// Starts the plugin and hands it `conf` (stdin closed after it); see `wait_bounded`.
pub fn spawn_plugin(sysfs: &Path, state: &Path, env: &HashMap<String, String>, conf: &str) -> std::process::Child {
    let mut child = plugin_command(sysfs, state, env).spawn().expect("spawning sriov-rdma");
    use std::io::Write;
    let _ = child.stdin.take().unwrap().write_all(conf.as_bytes());
    child
}

/// Waits at most `limit` for a plugin started by `spawn_plugin`; one still running then is killed (SIGKILL)
/// and `None` returned: it hung.
pub fn wait_bounded(mut child: std::process::Child, limit: std::time::Duration) -> Option<Run> {
    use std::os::unix::process::ExitStatusExt;
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait().expect("waiting for sriov-rdma") {
            Some(_) => break,
            None if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    let out = child.wait_with_output().expect("collecting the output of sriov-rdma");
    Some(Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        signal: out.status.signal(),
    })
}

pub fn mkfifo(p: &Path) {
    let _ = fs::remove_file(p);
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// A small seeded generator (splitmix64): the same seed gives the same run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The seed from `var` if set (to replay a run), else from the clock; the caller prints it.
pub fn seed(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(s) => s.parse().unwrap_or_else(|_| panic!("{var}={s:?} is not a number")),
        Err(_) => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        }
    }
}

/// The host-local leases in `dir` (one file per allocated address; `lock` and `last_reserved_ip.*` are not).
pub fn leases(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// Files of the state directory other than the VF locks: records, temp records, probes.
pub fn state_files(state: &Path) -> Vec<String> {
    fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.ends_with(".lock"))
        .collect()
}

pub fn host_local(subnet: &str, data_dir: &Path) -> String {
    format!(
        r#","ipam":{{"type":"host-local","ranges":[[{{"subnet":"{subnet}"}}]],"dataDir":"{}"}}"#,
        data_dir.display()
    )
}

/// A temp directory removed when dropped, also when the test fails.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Writes a stand-in IPAM plugin `name` into `dir`/bin (for what no real IPAM plugin can be made to do on cue):
/// a shell script that reads its configuration and answers per CNI_COMMAND with `cases` (sh `case` arms).
/// Returns the bin directory, for CNI_PATH.
pub fn stand_in_ipam(dir: &Path, name: &str, cases: &str) -> PathBuf {
    ipam_script(dir, name, &format!("cat >/dev/null\ncase \"$CNI_COMMAND\" in\n{cases}\nesac\n"))
}

/// Writes an executable shell script `name` with `body` into `dir`/bin; returns the bin directory, for CNI_PATH.
pub fn ipam_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join(name);
    fs::write(&plugin, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&plugin, fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Plays the kernel handing the VF back to the host as `pod_name` once its namespace is destroyed (a veth dies with
/// its namespace; a VF's netdev comes back under the name it had there).
pub fn hand_back(bed: &Bed, pci: &str, vf: &str, pod_name: &str) {
    let _ = sh(&["ip", "link", "del", &format!("{vf}p")]);
    must(&["ip", "link", "add", pod_name, "mtu", "4300", "type", "veth", "peer", "name", &format!("{vf}p")]);
    bed.set_vf_netdev(pci, pod_name);
}

/// A process holding the pod namespace after its path is removed (`ip netns del` while the pod's processes run).
pub struct Holder(std::process::Child);

impl Holder {
    pub fn new(ns: &str) -> Holder {
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "sleep", "120"])
            .spawn()
            .expect("starting the holder");
        let holder = Holder(child);
        // The holder is inside once its namespace differs from ours (bounded wait).
        let me = std::fs::read_link("/proc/self/ns/net").unwrap();
        let inside = (0..200).any(|_| {
            let entered = std::fs::read_link(format!("/proc/{}/ns/net", holder.0.id())).is_ok_and(|l| l != me);
            if !entered {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            entered
        });
        assert!(inside, "the holder never entered {ns}");
        holder
    }

    /// What the held namespace shows of `ifname`.
    pub fn link(&self, ifname: &str) -> bool {
        let pid = self.0.id().to_string();
        sh(&["nsenter", "-t", &pid, "-n", "ip", "link", "show", ifname]).status.success()
    }

    /// Ends the holder: the namespace is destroyed with it.
    pub fn release(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
