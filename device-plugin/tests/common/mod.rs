//! The kubelet stand-in and the fake node the device plugin's host tests share: a Registration server on a
//! temporary kubelet.sock (it then dials the plugin's socket like the kubelet does) and a fake sysfs tree standing
//! in for the node: a PF with an mlx5-like VF per RDMA device and a vfio-pci VF.
#![allow(dead_code)]

use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use sriov_rdma_device_plugin::api;
use sriov_rdma_device_plugin::api::device_plugin_client::DevicePluginClient;
use sriov_rdma_device_plugin::api::registration_server::{Registration, RegistrationServer};
use sriov_rdma_device_plugin::server::unix_channel;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

pub const PF: &str = "0000:3b:00.0";
pub const VF0: &str = "0000:3b:00.2";
pub const VF1: &str = "0000:3b:00.3";
pub const VFIO: &str = "0000:3b:00.4";

/// A node: fake sysfs, /dev, kubelet dir, device-info dir and CNI state dir under one temporary directory.
pub struct Node {
    pub dir: PathBuf,
    pub tree: FakeTree,
}

impl Node {
    pub fn new(name: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-dp-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let tree = FakeTree::new(&dir.join("sys")).unwrap();
        let t = &tree;
        t.pf(PF, "ens1f0", 8).unwrap();
        t.pci_ids(PF, "15b3", "101d", 1).unwrap();
        t.netdev_state("ens1f0", "up", 1).unwrap();
        t.rdma(PF, "mlx5_0", &[]).unwrap();
        for (idx, vf, netdev, rdma, uverbs) in
            [(0, VF0, "ens1f0v0", "mlx5_2", "uverbs2"), (1, VF1, "ens1f0v1", "mlx5_3", "uverbs3")]
        {
            t.mlx5_vf(PF, idx, vf, netdev, rdma, 1).unwrap();
            t.rdma_char(uverbs, rdma, None).unwrap();
        }
        t.vf(PF, 2, VFIO, None, "vfio-pci").unwrap();
        t.pci_ids(VFIO, "15b3", "101e", 1).unwrap();
        t.iommu_group(VFIO, 42).unwrap();
        for d in ["infiniband/uverbs2", "infiniband/uverbs3", "infiniband/rdma_cm", "vfio/vfio", "vfio/42"] {
            let p = dir.join("dev").join(d);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, b"").unwrap();
        }
        for d in ["kubelet", "devinfo", "state"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        Node { dir, tree }
    }

    pub fn kubelet_dir(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    pub fn config(&self, text: &str) -> PathBuf {
        let p = self.dir.join("config.json");
        fs::write(&p, text).unwrap();
        p
    }

    /// The plugin binary on this node, its stderr in `<dir>/plugin.log`.
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin"));
        let p = |d: &str| self.dir.join(d).display().to_string();
        c.args(["--kubelet-dir", &p("kubelet"), "--sysfs", &p("sys"), "--dev-root", &p("dev")])
            .args(["--devinfo-dir", &p("devinfo"), "--state-dir", &p("state"), "--poll-ms", "200"])
            // A fake sysfs sends no events: the slow polls, made short, stand in for the kernel's events.
            .args(["--full-poll-ms", "1000"])
            .args(extra)
            .env_remove("RDMA_RESOURCE_NAME")
            .env_remove("RDMA_DEVICE_SPEC_STR");
        c
    }

    pub fn start(&self, extra: &[&str]) -> Plugin {
        let log = fs::File::create(self.dir.join("plugin.log")).unwrap();
        let child = self.command(extra).stdout(Stdio::null()).stderr(log).spawn().expect("starting the plugin");
        Plugin { child, log: self.dir.join("plugin.log") }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The daemon, stopped by its PID when the test ends.
pub struct Plugin {
    pub child: Child,
    pub log: PathBuf,
}

impl Plugin {
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn wait_log(&self, needle: &str) {
        let end = Instant::now() + Duration::from_secs(10);
        while !self.log().contains(needle) {
            assert!(Instant::now() < end, "no {needle:?} in the plugin's log within 10 s:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kubelet stand-in: takes Register calls on `<dir>/kubelet.sock` and hands them to the test.
pub struct Kubelet {
    pub registered: mpsc::UnboundedReceiver<api::RegisterRequest>,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
    pub dir: PathBuf,
}

struct StandIn(mpsc::UnboundedSender<api::RegisterRequest>);

#[tonic::async_trait]
impl Registration for StandIn {
    async fn register(&self, req: Request<api::RegisterRequest>) -> Result<Response<api::Empty>, Status> {
        let _ = self.0.send(req.into_inner());
        Ok(Response::new(api::Empty {}))
    }
}

impl Kubelet {
    pub fn start(dir: &Path) -> Kubelet {
        let sock = dir.join("kubelet.sock");
        let _ = fs::remove_file(&sock);
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let (tx, registered) = mpsc::unbounded_channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(StandIn(tx)))
                .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Kubelet { registered, stop: Some(stop), task, dir: dir.to_path_buf() }
    }

    pub async fn next_registration(&mut self, within: Duration) -> api::RegisterRequest {
        tokio::time::timeout(within, self.registered.recv())
            .await
            .unwrap_or_else(|_| panic!("no Register within {within:?}"))
            .expect("stand-in stopped")
    }

    /// What the kubelet does when it restarts: stop serving, remove its socket and (`plugins`) every plugin socket.
    pub async fn stop_and_clean(mut self, plugins: bool) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.task.await;
        for e in fs::read_dir(&self.dir).unwrap().flatten() {
            if e.file_name() == "kubelet.sock" || (plugins && e.file_name().to_string_lossy().ends_with(".sock")) {
                fs::remove_file(e.path()).unwrap();
            }
        }
    }

    /// Dials the plugin at the endpoint it registered, like the kubelet.
    pub async fn dial(&self, reg: &api::RegisterRequest) -> DevicePluginClient<tonic::transport::Channel> {
        DevicePluginClient::new(unix_channel(self.dir.join(&reg.endpoint)).await.expect("dialing the plugin"))
    }
}

pub type Updates = tonic::Streaming<api::ListAndWatchResponse>;

pub async fn next_list(s: &mut Updates, within: Duration) -> Vec<api::Device> {
    let r = tokio::time::timeout(within, s.message())
        .await
        .unwrap_or_else(|_| panic!("no ListAndWatch update within {within:?}"));
    let mut d = r.expect("ListAndWatch failed").expect("ListAndWatch ended").devices;
    d.sort_by(|a, b| a.id.cmp(&b.id));
    d
}

pub fn health(list: &[api::Device]) -> Vec<(String, String)> {
    list.iter().map(|d| (d.id.clone(), d.health.clone())).collect()
}

pub fn all(h: &str) -> Vec<(String, String)> {
    [VF0, VF1, VFIO].iter().map(|v| (v.to_string(), h.to_string())).collect()
}

/// Waits for an update whose health is `want`; intermediate lists (none expected) are skipped.
pub async fn until_health(s: &mut Updates, want: &[(String, String)], within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let left = within.checked_sub(t0.elapsed()).unwrap_or_else(|| panic!("health not {want:?} within {within:?}"));
        if health(&next_list(s, left).await) == want {
            return t0.elapsed();
        }
    }
}

/// The plugin with its default resource on `node`, registered with a kubelet stand-in whose ListAndWatch stream
/// has seen every VF Healthy.
pub async fn watching(node: &Node) -> (Kubelet, Plugin, Updates) {
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let plugin = node.start(&[]);
    let reg = kubelet.next_registration(Duration::from_secs(10)).await;
    let mut s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    (kubelet, plugin, s)
}

/// An attachment record for `pci` in the node's CNI state dir (the golden version-2 record), with or without
/// an RDMA device.
pub fn record(node: &Node, pci: &str, rdma: bool) {
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/record-2.json");
    let mut rec: serde_json::Value = serde_json::from_str(&fs::read_to_string(golden).unwrap()).unwrap();
    rec["pci"] = pci.into();
    if !rdma {
        rec["rdma"] = serde_json::Value::Null;
        rec["journal"].as_array_mut().unwrap().retain(|s| s["step"] != "rdma-in");
    }
    fs::write(node.dir.join("state").join(format!("{pci}.json")), rec.to_string()).unwrap();
}

/// The daemon binary to run: this build's, or the one `SRIOV_RDMA_DP_BIN` names (another build, for comparison).
pub fn daemon_bin() -> PathBuf {
    std::env::var_os("SRIOV_RDMA_DP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin")))
}

/// CPU time a process used so far (utime + stime of /proc/<pid>/stat, its threads included), in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading the daemon's /proc stat");
    // The fields after the command name (which is in parentheses and may hold spaces): utime is the 14th field.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// Clock ticks per second.
pub fn ticks_per_second() -> u64 {
    // SAFETY: a plain query.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// Adds `pfs` PFs of `vfs` mlx5-like VFs each (PCI bus 0x40 on), each VF with its RDMA device and uverbs char
/// device (also under the node's /dev). Returns the VFs' addresses.
pub fn add_rails(node: &Node, pfs: u32, vfs: u32) -> Vec<String> {
    let t = &node.tree;
    let mut all = Vec::new();
    let mut n = 100;
    for p in 0..pfs {
        let bus = 0x40 + p;
        let pf = format!("0000:{bus:02x}:00.0");
        let netdev = format!("rail{p}");
        t.pf(&pf, &netdev, vfs).unwrap();
        t.pci_ids(&pf, "15b3", "101d", (p % 2) as i32).unwrap();
        t.netdev_state(&netdev, "up", 1).unwrap();
        for i in 0..vfs {
            let vf = format!("0000:{bus:02x}:{:02x}.{}", 1 + i / 8, i % 8);
            let (rdma, uverbs) = (format!("mlx5_{n}"), format!("uverbs{n}"));
            t.mlx5_vf(&pf, i, &vf, &format!("{netdev}v{i}"), &rdma, (p % 2) as i32).unwrap();
            t.rdma_char(&uverbs, &rdma, None).unwrap();
            fs::write(node.dir.join("dev/infiniband").join(&uverbs), b"").unwrap();
            all.push(vf);
            n += 1;
        }
    }
    all
}

/// Runs `c` (the daemon, or a command that execs it) with the node's paths and `extra`, nothing else: the
/// defaults of a real node for what `extra` does not set. Its stderr in `<dir>/plugin.log`.
pub fn spawn_on(node: &Node, mut c: Command, extra: &[&str]) -> Plugin {
    let p = |d: &str| node.dir.join(d).display().to_string();
    let log = fs::File::create(node.dir.join("plugin.log")).unwrap();
    let child = c
        .args(["--kubelet-dir", &p("kubelet"), "--sysfs", &p("sys"), "--dev-root", &p("dev")])
        .args(["--devinfo-dir", &p("devinfo"), "--state-dir", &p("state")])
        .args(extra)
        .env_remove("RDMA_RESOURCE_NAME")
        .env_remove("RDMA_DEVICE_SPEC_STR")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting the plugin");
    Plugin { child, log: node.dir.join("plugin.log") }
}
