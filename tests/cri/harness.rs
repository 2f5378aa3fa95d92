//! A private containerd (Debian's 1.6, CRI plugin, runc) for one test, and a CRI client for it.
//!
//! Everything containerd keeps lives in one temp directory: root, state, the gRPC socket, the config,
//! runc's state (`Root`), the pods' network namespaces (`netns_mounts_under_state_dir`), the CNI
//! `bin_dir` (the plugin under test plus the Debian plugins it needs) and `conf_dir` (the test's
//! conflist). containerd hands its own environment to the CNI plugins, so it is started with
//! `SRIOV_RDMA_SYSFS` and `SRIOV_RDMA_STATE_DIR` pointing at the test bed. The pod cgroups go under a
//! parent of the test's own. Dropping the guard removes every sandbox through the CRI (which runs the
//! CNI DEL), stops containerd by its PID, kills what is left of its runc containers and shims (found by
//! this containerd's socket or runc root), unmounts, removes the cgroups and the directory.

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use serde_json::Value;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

pub const IMAGE: &str = "localhost/sriov-rdma-it:1";
/// The Debian CNI plugins containerd or our config needs: `loopback` (containerd's own `lo` network),
/// the IPAM plugins the plugin delegates to.
const DEBIAN_PLUGINS: [&str; 3] = ["loopback", "host-local", "static"];
const RPC_TIMEOUT: Duration = Duration::from_secs(60);

/// containerd, runc and what the image and the checks use.
pub fn required_cri(what: &str) -> bool {
    crate::require::required(
        what,
        &[
            "/usr/bin/containerd",
            "/usr/bin/containerd-shim-runc-v2",
            "/usr/bin/ctr",
            "/usr/sbin/runc",
            "/usr/bin/nsenter",
            "/bin/busybox",
            "/usr/lib/cni/loopback",
            "/usr/lib/cni/host-local",
            "/usr/lib/cni/static",
        ],
    )
}

pub struct Containerd {
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub net: String,
    pub cgroup_parent: String,
    pub plugin_log: PathBuf,
    config: PathBuf,
    log: PathBuf,
    runc_root: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

/// The node policy the plugin reads under this containerd (none until a test writes it).
const POLICY: &str = "node-policy.json";

impl Containerd {
    pub fn policy(&self) -> PathBuf {
        self.dir.join(POLICY)
    }

    /// Lays out the directory, writes the config and the conflist (`plugin` is the sriov-rdma entry of
    /// the list, without `type`), starts containerd, waits for the CRI with its CNI ready, imports the
    /// busybox image.
    pub fn start(tag: &str, sysfs: &Path, state: &Path, plugin: Value) -> Containerd {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-cri-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for d in ["bin", "net.d", "root", "state", "logs", "opt"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        let net = format!("sriov-rdma-cri-{tag}");
        let mut cd = Containerd {
            sock: dir.join("containerd.sock"),
            net: net.clone(),
            cgroup_parent: format!("/sriov-rdma-cri-{tag}-{}", std::process::id()),
            plugin_log: dir.join("sriov-rdma.log"),
            config: dir.join("config.toml"),
            log: dir.join("containerd.log"),
            runc_root: dir.join("runc"),
            env: vec![
                ("SRIOV_RDMA_SYSFS".into(), sysfs.display().to_string()),
                ("SRIOV_RDMA_STATE_DIR".into(), state.display().to_string()),
                // The node's log and device-info directories and policy: the test's own, never the machine's.
                ("SRIOV_RDMA_LOG_DIR".into(), dir.display().to_string()),
                ("SRIOV_RDMA_DEVINFO_DIR".into(), dir.join("devinfo").display().to_string()),
                ("SRIOV_RDMA_POLICY".into(), dir.join(POLICY).display().to_string()),
            ],
            child: None,
            dir,
        };
        // bin_dir: the plugin this test run built (cargo builds it before any integration test, in the
        // test's own profile) and the Debian plugins.
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sriov-rdma"), cd.dir.join("bin/sriov-rdma")).unwrap();
        for p in DEBIAN_PLUGINS {
            std::os::unix::fs::symlink(Path::new(crate::common::CNI_PATH).join(p), cd.dir.join("bin").join(p)).unwrap();
        }
        let mut plugin = plugin;
        plugin["type"] = "sriov-rdma".into();
        plugin["logLevel"] = "debug".into();
        plugin["logFile"] = cd.plugin_log.display().to_string().into();
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": net, "plugins": [plugin]});
        fs::write(cd.dir.join("net.d/10-sriov-rdma.conflist"), serde_json::to_vec_pretty(&list).unwrap()).unwrap();
        fs::write(&cd.config, cd.config_toml()).unwrap();
        cd.spawn();
        let tar = build_image(&cd.dir.join("image"));
        let out = Command::new("ctr")
            .args(["-a", cd.sock.to_str().unwrap(), "-n", "k8s.io", "images", "import"])
            .arg(&tar)
            .output()
            .unwrap();
        assert!(out.status.success(), "ctr images import: {}", String::from_utf8_lossy(&out.stderr));
        cd
    }

    fn config_toml(&self) -> String {
        let d = |p: &str| self.dir.join(p).display().to_string();
        format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{netd}"
    max_conf_num = 1
"#,
            root = d("root"),
            state = d("state"),
            sock = self.sock.display(),
            opt = d("opt"),
            runc = self.runc_root.display(),
            bin = d("bin"),
            netd = d("net.d"),
        )
    }

    /// Starts containerd and waits (bounded) until its CRI answers and reports the network ready.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "containerd already running");
        let log = fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new("/usr/bin/containerd")
            .arg("--config")
            .arg(&self.config)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("containerd exited ({st}) while starting:\n{}", self.log_tail());
            }
            let ready = rt.block_on(async {
                let Ok(mut c) = self.client().await else { return false };
                let st = match c.status(cri::StatusRequest { verbose: false }).await {
                    Ok(st) => st,
                    Err(e) if e.code() == tonic::Code::Unimplemented => {
                        panic!("containerd runs without its CRI plugin ({e}):\n{}", self.log_tail())
                    }
                    Err(_) => return false,
                };
                let conds = st.into_inner().status.map(|s| s.conditions).unwrap_or_default();
                conds.iter().any(|c| c.r#type == "NetworkReady" && c.status)
                    && conds.iter().any(|c| c.r#type == "RuntimeReady" && c.status)
            });
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "containerd's CRI not ready within 30 s:\n{}", self.log_tail());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("containerd running").id()
    }

    /// SIGKILL, as a crash would: the shims and the pods keep running.
    pub fn kill(&mut self) {
        let mut c = self.child.take().expect("containerd running");
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// Graceful stop by PID: SIGTERM, then SIGKILL after 10 s.
    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    pub async fn client(&self) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
        connect(self.sock.clone()).await
    }

    pub fn log_tail(&self) -> String {
        let tail = |p: &Path, n: usize| {
            let mut s = String::new();
            if let Ok(mut f) = fs::File::open(p) {
                let _ = f.read_to_string(&mut s);
            }
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        };
        format!(
            "--- containerd log (tail) ---\n{}\n--- sriov-rdma log (tail) ---\n{}",
            tail(&self.log, 40),
            tail(&self.plugin_log, 40)
        )
    }

    pub fn log_dir(&self, pod: &str) -> PathBuf {
        self.dir.join("logs").join(pod)
    }

    /// Removes every sandbox through the CRI (StopPodSandbox runs the CNI DEL), on a thread of its own
    /// so that it works from any context.
    fn remove_all_sandboxes(&self) -> Result<(), String> {
        let sock = self.sock.clone();
        let r = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let mut c = connect(sock).await.map_err(|e| e.to_string())?;
                let list = c
                    .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                for s in list.items {
                    c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: s.id.clone() })
                        .await
                        .map_err(|e| format!("stop {}: {e}", s.id))?;
                    c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: s.id.clone() })
                        .await
                        .map_err(|e| format!("remove {}: {e}", s.id))?;
                }
                Ok(())
            })
        })
        .join();
        r.unwrap_or_else(|_| Err("cleanup thread panicked".into()))
    }
}

/// A CRI client on containerd's unix socket.
pub async fn connect(sock: PathBuf) -> Result<RuntimeServiceClient<Channel>, tonic::transport::Error> {
    let ch = Endpoint::try_from("http://[::]:50051")?
        .connect_timeout(Duration::from_secs(5))
        .timeout(RPC_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(sock).await?)) }
        }))
        .await?;
    Ok(RuntimeServiceClient::new(ch))
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.remove_all_sandboxes() {
                eprintln!("cleanup: removing sandboxes through the CRI failed: {e}");
            }
        }
        self.stop();
        // Whatever is left (a failed test): this containerd's runc containers, then its shims.
        let runc_ns = self.runc_root.join("k8s.io");
        if runc_ns.is_dir() {
            for e in fs::read_dir(&runc_ns).into_iter().flatten().flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                let _ = Command::new("/usr/sbin/runc")
                    .arg("--root")
                    .arg(&runc_ns)
                    .args(["delete", "--force", &id])
                    .output();
            }
        }
        let sock = self.sock.display().to_string();
        let shims: Vec<i32> = procs_with_arg(&sock);
        for pid in &shims {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while shims.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Mounts under the directory (rootfs overlays, shm, the pods' netns files), deepest first.
        let dir = self.dir.display().to_string();
        let mut mounts: Vec<String> = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&dir))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", &m]).output();
        }
        // The pods' cgroups: under our parent in every hierarchy.
        for e in fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            let parent = e.path().join(self.cgroup_parent.trim_start_matches('/'));
            if parent.is_dir() {
                for c in fs::read_dir(&parent).into_iter().flatten().flatten() {
                    if c.path().is_dir() {
                        let _ = fs::remove_dir(c.path());
                    }
                }
                let _ = fs::remove_dir(&parent);
            }
        }
        // What a sandbox that never got its CNI DEL leaves outside the directory: libcni's result cache
        // (our network and containerd's `cni-loopback`) and the shim's socket, named by the hash of
        // this containerd's address, the namespace and the sandbox id.
        let sandboxes: Vec<String> = fs::read_dir(self.dir.join("root/io.containerd.grpc.v1.cri/sandboxes"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for e in fs::read_dir("/var/lib/cni/results").into_iter().flatten().flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            let ours = f.starts_with(&format!("{}-", self.net))
                || sandboxes.iter().any(|id| f.starts_with(&format!("cni-loopback-{id}-")));
            if ours {
                let _ = fs::remove_file(e.path());
            }
        }
        for id in &sandboxes {
            let hash = sha256_hex(format!("{}/k8s.io/{id}", self.sock.display()).as_bytes());
            let _ = fs::remove_file(Path::new("/run/containerd/s").join(hash));
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// PIDs of processes with `arg` as one of their arguments (this containerd's shims carry its socket).
fn procs_with_arg(arg: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else { continue };
        if cmd.split(|b| *b == 0).any(|a| a == arg.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    let mut child =
        Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("running sha256sum");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// A docker-archive image made here (no registry is reachable): one layer with busybox-static and a
/// few applet links; its default command sleeps (it is the sandbox "pause" image as well).
fn build_image(dir: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    let bin = rootfs.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for d in ["proc", "sys", "dev", "etc", "tmp"] {
        fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    fs::copy("/bin/busybox", bin.join("busybox")).expect("busybox-static is installed");
    for a in ["sh", "ip", "cat", "ls", "sleep", "echo"] {
        std::os::unix::fs::symlink("busybox", bin.join(a)).unwrap();
    }
    let layer = dir.join("layer.tar");
    crate::common::must(&[
        "tar",
        "--numeric-owner",
        "--owner=0",
        "--group=0",
        "-C",
        rootfs.to_str().unwrap(),
        "-cf",
        layer.to_str().unwrap(),
        ".",
    ]);
    let sha = |p: &Path| sha256_hex(&fs::read(p).unwrap());
    let layer_sha = sha(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sleep", "2147483647"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_sha}")]},
    });
    let arch = dir.join("archive");
    fs::create_dir_all(arch.join(&layer_sha)).unwrap();
    fs::rename(&layer, arch.join(&layer_sha).join("layer.tar")).unwrap();
    let cfg_path = arch.join("config.json");
    fs::write(&cfg_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let cfg_sha = sha(&cfg_path);
    fs::rename(&cfg_path, arch.join(format!("{cfg_sha}.json"))).unwrap();
    let manifest = serde_json::json!([{
        "Config": format!("{cfg_sha}.json"),
        "RepoTags": [IMAGE],
        "Layers": [format!("{layer_sha}/layer.tar")],
    }]);
    fs::write(arch.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    let tar = dir.join("image.tar");
    crate::common::must(&["tar", "-C", arch.to_str().unwrap(), "-cf", tar.to_str().unwrap(), "."]);
    tar
}

pub fn pod_config(cd: &Containerd, name: &str) -> cri::PodSandboxConfig {
    pod_config_in(cd, name, "sriov-rdma-it")
}

/// A sandbox of a pod in Kubernetes namespace `namespace` (containerd passes it to CNI as K8S_POD_NAMESPACE).
pub fn pod_config_in(cd: &Containerd, name: &str, namespace: &str) -> cri::PodSandboxConfig {
    let logs = cd.log_dir(name);
    fs::create_dir_all(&logs).unwrap();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: namespace.into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: logs.display().to_string(),
        linux: Some(cri::LinuxPodSandboxConfig { cgroup_parent: cd.cgroup_parent.clone(), ..Default::default() }),
        ..Default::default()
    }
}

/// What containerd says about a sandbox: its state, the IP from the CNI result, and the path of its
/// network namespace (from the verbose info's runtime spec).
pub struct SandboxView {
    pub ready: bool,
    pub ip: String,
    pub netns: PathBuf,
}

pub async fn sandbox_view(c: &mut RuntimeServiceClient<Channel>, id: &str) -> SandboxView {
    let r = c
        .pod_sandbox_status(cri::PodSandboxStatusRequest { pod_sandbox_id: id.into(), verbose: true })
        .await
        .unwrap_or_else(|e| panic!("PodSandboxStatus {id}: {e}"))
        .into_inner();
    let st = r.status.expect("a status");
    let info: Value = serde_json::from_str(r.info.get("info").expect("verbose info")).unwrap();
    let netns = info["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["type"] == "network")
        .and_then(|n| n["path"].as_str())
        .expect("the sandbox has a network namespace path")
        .into();
    SandboxView {
        ready: st.state == cri::PodSandboxState::SandboxReady as i32,
        ip: st.network.map(|n| n.ip).unwrap_or_default(),
        netns,
    }
}

/// `ip -j link show` of a device inside a namespace given by path, as the kernel shows it.
pub fn ns_link(netns: &Path, name: &str) -> Option<Value> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["ip", "-j", "link", "show", "dev", name])
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice::<Value>(&out.stdout).ok()?.as_array()?.first().cloned()
}

/// The IPv4 addresses of a device inside a namespace given by path, as `addr/prefix`.
pub fn ns_addrs4(netns: &Path, name: &str) -> Vec<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["ip", "-j", "-4", "addr", "show", "dev", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip addr in {}: {}", netns.display(), String::from_utf8_lossy(&out.stderr));
    crate::common::addr_list(&serde_json::from_slice(&out.stdout).unwrap())
}

/// The interface names in a namespace given by path.
pub fn ns_links(netns: &Path) -> Vec<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["ip", "-j", "link", "show"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().unwrap().iter().map(|l| l["ifname"].as_str().unwrap().to_string()).collect()
}
