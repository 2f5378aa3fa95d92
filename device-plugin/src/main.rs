//! `sriov-rdma-device-plugin` (run as `sriov-rdma device-plugin`): see the library's documentation and
//! docs/device-plugin.md.

use sriov_rdma_cni::cni::config::LogLevel;
use sriov_rdma_cni::inventory::Inventory;
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::kubelet::pod_resources_socket;
use sriov_rdma_cni::{error, info, warn};
use sriov_rdma_device_plugin::config::Config;
use sriov_rdma_device_plugin::devices::{self, Paths};
use sriov_rdma_device_plugin::numvfs;
use sriov_rdma_device_plugin::podresources;
use sriov_rdma_device_plugin::server::{self, Timing};
use sriov_rdma_device_plugin::{dra, draattach, events, logging, metrics, nri, reload, slices};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = concat!(
    "usage: sriov-rdma device-plugin [--config FILE] [--dry-run] [--debug] [--log-level L] [--log-format text|json]\n",
    "         [--kubelet-dir DIR] [--sysfs DIR] [--dev-root DIR] [--devinfo-dir DIR] [--state-dir DIR]\n",
    "         [--poll-ms N] [--full-poll-ms N] [--node-name NAME] [--cdi-dir DIR] [--nri | --nri-socket PATH]\n",
    "       sriov-rdma device-plugin --pod-resources [--socket PATH]\n",
    "       sriov-rdma device-plugin --version | --help\n",
    "Offers the node's SR-IOV VFs and their RDMA devices to the kubelet (device plugin API v1beta1).\n",
    "Without --config: one resource from RDMA_RESOURCE_NAME (default rdma/hca) and RDMA_DEVICE_SPEC_STR (PF netdev\n",
    "or RDMA device names, comma-separated); RDMA_DEBUG=1 logs more. --dry-run prints what would be advertised.\n",
    "Paths (also SRIOV_RDMA_KUBELET_DIR, SRIOV_RDMA_SYSFS, SRIOV_RDMA_DEV_ROOT, SRIOV_RDMA_DEVINFO_DIR,\n",
    "SRIOV_RDMA_STATE_DIR): /var/lib/kubelet/device-plugins, /sys, /dev, /var/run/k8s.cni.cncf.io/devinfo/dp,\n",
    "/var/lib/cni/sriov-rdma. --pod-resources prints which pod and container holds which device, as JSON, from\n",
    "the kubelet's pod-resources API (--socket, default <kubelet dir>/../pod-resources/kubelet.sock).\n",
    "--metrics-addr ADDR (or SRIOV_RDMA_METRICS_ADDR, e.g. 127.0.0.1:9411): serve /metrics, /healthz, /readyz; off\n",
    "by default. The config file is re-read when it changes; --policy FILE [--policy-dir DIR, default\n",
    "/host/etc/sriov-rdma]: install this node policy now and whenever it changes.\n",
    "Link and device events and file notifications drive it; without one, link and RDMA port state and the files\n",
    "are read every --poll-ms (default 60000) and the node scanned every --full-poll-ms (default 600000).\n",
    "--log-level error|warning|info|debug (SRIOV_RDMA_LOG_LEVEL; default info, --debug is debug), --log-format\n",
    "text|json (SRIOV_RDMA_LOG_FORMAT; default text): one line per message on stderr, JSON as one object per line.\n",
    "A resource with \"dra\": true in the config is published as the DRA driver sriov-rdma.k8s.io's ResourceSlice\n",
    "instead (off by default; needs --node-name or NODE_NAME, API server access, --cdi-dir or SRIOV_RDMA_CDI_DIR,\n",
    "default /var/run/cdi; sockets under the kubelet dir's parent: plugins_registry/, plugins/). See docs/dra.md.\n",
    "--nri (or SRIOV_RDMA_NRI=1) registers an NRI plugin with the container runtime at /var/run/nri/nri.sock\n",
    "(--nri-socket or SRIOV_RDMA_NRI_SOCKET elsewhere): containers of pods the CNI attached get NCCL_IB_HCA,\n",
    "NCCL_IB_GID_INDEX and NCCL_SOCKET_IFNAME, those they do not set themselves. Off by default; see docs/nri.md.\n",
    "With both DRA and NRI on, the VFs of a pod's prepared claims are attached at RunPodSandbox (dra0, dra1, ...)\n",
    "and given back at StopPodSandbox/RemovePodSandbox by running the CNI as `sriov-rdma-device-plugin cni`\n",
    "(IPAM plugins from CNI_PATH, default /opt/cni/bin). See docs/dra.md.\n",
    "See docs/device-plugin.md.\n",
);

/// Exit code of a bad command line or configuration.
const EXIT_CONFIG: i32 = 2;

struct Args {
    config: Option<PathBuf>,
    dry_run: bool,
    debug: bool,
    log_level: Option<LogLevel>,
    log_format: logging::Format,
    pod_resources: bool,
    /// `--socket` of `--pod-resources`.
    socket: Option<PathBuf>,
    paths: Paths,
    poll: Duration,
    full_poll: Duration,
    metrics_addr: Option<std::net::SocketAddr>,
    policy: Option<PathBuf>,
    policy_dir: PathBuf,
    dra: DraOpts,
    /// The runtime's NRI socket, when the NRI plugin is on.
    nri: Option<PathBuf>,
}

/// What the DRA driver needs besides the paths, used only when a resource says `dra: true`.
#[derive(Clone)]
struct DraOpts {
    node: Option<String>,
    cdi_dir: PathBuf,
    /// The node policy a claim's config is admitted by: `policy.json` in the directory the daemon installs it
    /// into (`--policy-dir`), or the node's own `/etc/sriov-rdma` when that directory is not there (the daemon
    /// outside a pod).
    policy: PathBuf,
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(default))
}

/// What the command line asks for.
enum Cli {
    Run(Box<Args>),
    Help,
    Version,
}

fn parse(args: &[String]) -> Result<Cli, String> {
    let mut a = Args {
        config: None,
        dry_run: false,
        debug: false,
        log_level: None,
        log_format: logging::Format::Text,
        pod_resources: false,
        socket: None,
        paths: Paths {
            sysfs: env_path("SRIOV_RDMA_SYSFS", "/sys"),
            dev_root: env_path("SRIOV_RDMA_DEV_ROOT", "/dev"),
            kubelet_dir: env_path("SRIOV_RDMA_KUBELET_DIR", "/var/lib/kubelet/device-plugins"),
            devinfo_dir: env_path("SRIOV_RDMA_DEVINFO_DIR", "/var/run/k8s.cni.cncf.io/devinfo/dp"),
            state_dir: env_path("SRIOV_RDMA_STATE_DIR", "/var/lib/cni/sriov-rdma"),
        },
        poll: Timing::default().poll,
        full_poll: Timing::default().full_poll,
        metrics_addr: None,
        policy: None,
        policy_dir: PathBuf::from(sriov_rdma_cni::install::HOST_POLICY_DIR),
        dra: DraOpts {
            node: std::env::var("NODE_NAME").ok().filter(|v| !v.is_empty()),
            cdi_dir: env_path("SRIOV_RDMA_CDI_DIR", "/var/run/cdi"),
            policy: PathBuf::from(sriov_rdma_cni::policy::DEFAULT_PATH),
        },
        nri: None,
    };
    if let Some(v) = std::env::var_os("SRIOV_RDMA_NRI_SOCKET").filter(|v| !v.is_empty()) {
        a.nri = Some(v.into());
    } else if std::env::var("SRIOV_RDMA_NRI").is_ok_and(|v| v == "1" || v == "true") {
        a.nri = Some(sriov_rdma_device_plugin::nri::DEFAULT_SOCKET.into());
    }
    let addr = |v: &str| v.parse().map_err(|e| format!("metrics address {v:?}: {e}"));
    if let Some(v) = std::env::var("SRIOV_RDMA_METRICS_ADDR").ok().filter(|v| !v.is_empty()) {
        a.metrics_addr = Some(addr(&v).map_err(|e| format!("SRIOV_RDMA_METRICS_ADDR: {e}"))?);
    }
    if let Some(v) = std::env::var("SRIOV_RDMA_LOG_LEVEL").ok().filter(|v| !v.is_empty()) {
        a.log_level = Some(logging::parse_level(&v).map_err(|e| format!("SRIOV_RDMA_LOG_LEVEL: {e}"))?);
    }
    if let Some(v) = std::env::var("SRIOV_RDMA_LOG_FORMAT").ok().filter(|v| !v.is_empty()) {
        a.log_format = logging::Format::parse(&v).map_err(|e| format!("SRIOV_RDMA_LOG_FORMAT: {e}"))?;
    }
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--help" | "-h" => return Ok(Cli::Help),
            "--version" => return Ok(Cli::Version),
            "--config" => a.config = Some(value()?.into()),
            "--dry-run" => a.dry_run = true,
            "--debug" => a.debug = true,
            "--log-level" => {
                a.log_level = Some(logging::parse_level(&value()?).map_err(|e| format!("--log-level: {e}"))?)
            }
            "--log-format" => {
                a.log_format = logging::Format::parse(&value()?).map_err(|e| format!("--log-format: {e}"))?
            }
            "--pod-resources" => a.pod_resources = true,
            "--socket" => a.socket = Some(value()?.into()),
            "--kubelet-dir" => a.paths.kubelet_dir = value()?.into(),
            "--sysfs" => a.paths.sysfs = value()?.into(),
            "--dev-root" => a.paths.dev_root = value()?.into(),
            "--devinfo-dir" => a.paths.devinfo_dir = value()?.into(),
            "--state-dir" => a.paths.state_dir = value()?.into(),
            "--metrics-addr" => a.metrics_addr = Some(addr(&value()?).map_err(|e| format!("--metrics-addr: {e}"))?),
            "--policy" => a.policy = Some(value()?.into()),
            "--policy-dir" => a.policy_dir = value()?.into(),
            "--node-name" => a.dra.node = Some(value()?),
            "--cdi-dir" => a.dra.cdi_dir = value()?.into(),
            "--nri" => a.nri = a.nri.take().or_else(|| Some(sriov_rdma_device_plugin::nri::DEFAULT_SOCKET.into())),
            "--nri-socket" => a.nri = Some(value()?.into()),
            "--poll-ms" | "--full-poll-ms" => {
                let v = value()?;
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag}: {v:?} is not a positive number"))?;
                *if flag == "--poll-ms" { &mut a.poll } else { &mut a.full_poll } = Duration::from_millis(ms);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.socket.is_some() && !a.pod_resources {
        return Err("--socket goes with --pod-resources".into());
    }
    Ok(Cli::Run(Box::new(a)))
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        // The CNI plugin's code, exactly as `sriov-rdma` runs it (the attach tests run it through node-cni).
        Some("cni") => std::process::exit(sriov_rdma_cni::flow::plugin_main()),
        // What the DRA attach runs for each device: the node's CNI, in the node's mount namespace.
        Some("node-cni") => std::process::exit(node_cni(&argv[1..])),
        _ => {}
    }
    let args = match parse(&argv) {
        Ok(Cli::Run(a)) => *a,
        Ok(Cli::Help) => {
            print!("{USAGE}");
            return;
        }
        Ok(Cli::Version) => {
            println!("sriov-rdma-device-plugin {} (commit {})", env!("CARGO_PKG_VERSION"), sriov_rdma_cni::COMMIT);
            return;
        }
        Err(e) => {
            eprint!("sriov-rdma device-plugin: {e}\n{USAGE}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    if args.pod_resources {
        let socket = args.socket.clone().unwrap_or_else(|| pod_resources_socket(&args.paths.kubelet_dir));
        std::process::exit(pod_resources(&socket));
    }
    let text = match &args.config {
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some((p.display().to_string(), t)),
            Err(e) => {
                eprintln!("sriov-rdma device-plugin: reading the configuration {}: {e}", p.display());
                std::process::exit(EXIT_CONFIG);
            }
        },
        None => None,
    };
    let config = Config::load(text.as_ref().map(|(s, t)| (s.as_str(), t.as_str())), |k| std::env::var(k).ok());
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sriov-rdma device-plugin: bad configuration, nothing advertised: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    let level = match args.log_level {
        _ if config.debug || args.debug => LogLevel::Debug,
        Some(l) => l,
        None => LogLevel::Info,
    };
    logging::init(level, args.log_format);
    let sysfs = Sysfs::at(args.paths.sysfs.clone());
    if let Err(e) = numvfs::check(&sysfs, &config.num_vfs) {
        eprintln!("sriov-rdma device-plugin: bad configuration, nothing advertised: {e}");
        std::process::exit(EXIT_CONFIG);
    }
    let outcomes = numvfs::apply(&sysfs, &config.num_vfs, &args.paths.state_dir, &args.paths.kubelet_dir, args.dry_run);
    if args.dry_run {
        std::process::exit(dry_run(&config, &args.paths, &sysfs, &outcomes));
    }
    for o in &outcomes {
        match &o.why {
            Some(why) => error!("numVfs.{}: {why}", o.pf),
            None => info!("numVfs.{}: {} ({} -> {})", o.pf, o.action, o.from, o.to),
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sriov-rdma device-plugin: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    let timing = Timing { poll: args.poll, full_poll: args.full_poll, ..Timing::default() };
    let mut args = args;
    if args.policy_dir.is_dir() {
        args.dra.policy = args.policy_dir.join(sriov_rdma_cni::policy::FILE_NAME);
    }
    let sources = reload::Sources { config: args.config, policy: args.policy.map(|p| (p, args.policy_dir)) };
    let apis = Apis { metrics_addr: args.metrics_addr, dra: args.dra, nri: args.nri };
    std::process::exit(rt.block_on(run(config, args.paths, timing, sources, apis)));
}

/// `--pod-resources`: the kubelet's List answer as JSON on stdout; exit 1 with the reason when it cannot be had.
fn pod_resources(socket: &Path) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sriov-rdma device-plugin: starting the runtime: {e}");
            return 1;
        }
    };
    match rt.block_on(podresources::list(socket)) {
        Ok(rows) => {
            println!("{}", podresources::to_json(socket, &rows));
            0
        }
        Err(e) => {
            eprintln!("sriov-rdma device-plugin: asking the kubelet's pod-resources API: {e}");
            1
        }
    }
}

fn dry_run(config: &Config, paths: &Paths, sysfs: &Sysfs, outcomes: &[numvfs::Outcome]) -> i32 {
    let inv = Inventory::scan(sysfs);
    let attached = devices::attached(&paths.state_dir);
    let lists = devices::offer_all(&config.resources, &inv, &[], &attached);
    let resources: Vec<serde_json::Value> = config
        .resources
        .iter()
        .zip(lists)
        .map(|(r, list)| {
            serde_json::json!({
                "name": r.name,
                "env": r.env_name(),
                "socket": paths.kubelet_dir.join(r.socket_name()),
                "selectors": r.selectors,
                "warning": devices::unmatched(r, &list),
                "devices": list,
            })
        })
        .collect();
    let doc = serde_json::json!({ "resources": resources, "numVfs": outcomes });
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("sriov-rdma device-plugin: {e}");
            1
        }
    }
}

/// The directories the daemon follows with inotify: those of the config and the node policy (a ConfigMap mount
/// swaps its files by a symbolic link in the directory), the kubelet's, and the CNI's state directory.
fn watched_dirs(sources: &reload::Sources, paths: &Paths) -> events::Dirs {
    use events::Change;
    let parent = |f: &Path| f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let mut watched = Vec::new();
    for f in sources.config.iter().chain(sources.policy.as_ref().map(|(f, _)| f)) {
        watched.push((parent(f), Change::Files));
    }
    watched.push((paths.kubelet_dir.clone(), Change::Kubelet));
    watched.push((paths.state_dir.clone(), Change::State));
    events::Dirs { watched }
}

/// The daemon's APIs besides the device plugin, each off unless asked for.
struct Apis {
    metrics_addr: Option<std::net::SocketAddr>,
    dra: DraOpts,
    nri: Option<PathBuf>,
}

async fn run(config: Config, paths: Paths, timing: Timing, sources: reload::Sources, apis: Apis) -> i32 {
    let Apis { metrics_addr, dra: dra_opts, nri: nri_socket } = apis;
    if let Some(addr) = metrics_addr {
        match metrics::bind(addr).await {
            Ok(l) => {
                info!("metrics on http://{addr}/metrics, probes /healthz and /readyz");
                tokio::spawn(metrics::serve(l, paths.clone()));
            }
            Err(e) => {
                error!("{e}");
                return EXIT_CONFIG;
            }
        }
    }
    let paths = Arc::new(paths);
    // Watched from the start: a kubelet that comes up later creates its socket there.
    if let Err(e) = std::fs::create_dir_all(&paths.kubelet_dir) {
        warn!("creating {}: {e}", paths.kubelet_dir.display());
    }
    let events = events::Events::start(&watched_dirs(&sources, &paths));
    let (mut watcher, lists) = server::Watcher::new(config.resources.clone(), paths.clone());
    // The first ListAndWatch answer is the node as it is, not an empty list.
    watcher.refresh().await;
    let (kubelet_dir, _) = tokio::sync::watch::channel(0u64);
    let shared = server::Shared { inventory: watcher.inventory(), kubelet_dir: kubelet_dir.subscribe() };
    // /readyz waits for each device plugin resource's registration; a `dra` one never registers there.
    metrics::get().set_resources(config.resources.iter().filter(|r| !r.dra).map(|r| r.name.as_str()));
    let (dra_res, plugin_res): (Vec<_>, Vec<_>) = config.resources.iter().zip(lists).partition(|(r, _)| r.dra);
    for (res, rx) in dra_res.iter().chain(&plugin_res) {
        if let Some(w) = devices::unmatched(res, &rx.borrow()) {
            warn!("{w}");
        }
    }
    // The DRA driver first: one that cannot start stops the daemon before any device plugin socket exists.
    let dra_lists: Vec<_> = dra_res.into_iter().map(|(_, rx)| rx).collect();
    let (dra_paths, claim_status) = if dra_lists.is_empty() {
        (None, None)
    } else {
        match start_dra(&paths, &dra_opts, dra_lists, shared.inventory.clone(), timing).await {
            Ok((p, st)) => (Some(p), Some(st)),
            Err(e) => {
                error!("DRA: {e}");
                return EXIT_CONFIG;
            }
        }
    };
    if let Some(socket) = nri_socket {
        // With the DRA driver on, the NRI plugin also attaches the claims' VFs at RunPodSandbox (draattach.rs).
        let cni_path = std::env::var("CNI_PATH").ok().filter(|v| !v.is_empty()).unwrap_or(DEFAULT_CNI_PATH.into());
        let dra = dra_paths.as_ref().zip(claim_status).map(|(p, status)| {
            Arc::new(draattach::Attacher {
                claims_dir: p.claims_dir(),
                attach_dir: p.plugin_dir.join("attached"),
                cni: cni_command(&cni_path),
                cni_path,
                timeout: Duration::from_secs(60),
                status: Some(status),
            })
        });
        let plugin =
            nri::Plugin::new(paths.state_dir.clone(), Arc::new(nri::Kernel { sysfs: paths.sysfs.clone() }), dra);
        info!("NRI: plugin {}-{} on {}", nri::PLUGIN_INDEX, nri::PLUGIN_NAME, socket.display());
        tokio::spawn(nri::run(socket, Arc::new(plugin), Duration::from_secs(5)));
    }
    for (res, rx) in plugin_res {
        tokio::spawn(server::serve(res.clone(), paths.clone(), rx, shared.clone(), timing));
    }
    let current: reload::Current = Arc::new(std::sync::Mutex::new(config.resources.clone()));
    let cfg = config.clone();
    let (p, cur) = (paths.clone(), current.clone());
    tokio::spawn(reload::run(watcher, cfg, sources, p, timing, cur, events, kubelet_dir));
    let names: Vec<&str> = config.resources.iter().map(|r| r.name.as_str()).collect();
    info!("device plugin for {} started (kubelet dir {})", names.join(", "), paths.kubelet_dir.display());
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            error!("installing the SIGTERM handler: {e}");
            return 1;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    for res in current.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = std::fs::remove_file(paths.kubelet_dir.join(res.socket_name()));
    }
    if let Some(p) = &dra_paths {
        dra::remove_sockets(p, dra::DRIVER);
    }
    info!("stopped; sockets removed");
    0
}

/// Where the CNI finds its IPAM plugins in the DRA attach, unless CNI_PATH says otherwise.
const DEFAULT_CNI_PATH: &str = "/opt/cni/bin";

/// The CNI the DRA attach runs: the node's `sriov-rdma` (in the first directory of CNI_PATH), through this
/// executable's `node-cni`, which enters the node's mount namespace first. So the CNI runs as the runtime runs it:
/// the node's IPAM plugins (dynamically linked, for the node's libc), their state and configuration, the CNI's
/// records and log, all the node's own; nothing of it is mounted into the daemon's container.
fn cni_command(cni_path: &str) -> Vec<std::ffi::OsString> {
    let dir = cni_path.split(':').find(|d| !d.is_empty()).unwrap_or(DEFAULT_CNI_PATH);
    let cni = Path::new(dir).join("sriov-rdma").into_os_string();
    match std::env::current_exe() {
        Ok(p) => vec![p.into_os_string(), "node-cni".into(), cni],
        Err(e) => {
            warn!("DRA attach: this executable's path: {e}; running {} in the daemon's own mount namespace", dir);
            vec![cni]
        }
    }
}

/// `node-cni PROGRAM [ARG…]`: enters the mount namespace of PID 1 (the node's: the NRI plugin's pod shares the
/// host's PID namespace; SRIOV_RDMA_NODE_MOUNT_NS names another namespace file) and executes PROGRAM there, with this process's environment, stdin and stdout: the CNI
/// the runtime would run. Only returns (an exit status) when that fails, said on stderr.
fn node_cni(argv: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = argv.split_first() else {
        eprintln!("sriov-rdma-device-plugin node-cni: give the CNI program to run in the node's mount namespace");
        return 2;
    };
    let ns = std::env::var("SRIOV_RDMA_NODE_MOUNT_NS").ok().filter(|v| !v.is_empty());
    let ns = ns.as_deref().unwrap_or("/proc/1/ns/mnt");
    let entered = std::fs::File::open(ns).and_then(|f| {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid namespace file descriptor; this process is single-threaded here (before any runtime).
        match unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNS) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    });
    if let Err(e) = entered {
        eprintln!(
            "sriov-rdma-device-plugin node-cni: entering the node's mount namespace {ns} to run {program}: {e} (the \
             DRA attach needs the pod's hostPID and privileges, as deploy/examples/nri/daemonset-patch.yaml sets)"
        );
        return 1;
    }
    let e = std::process::Command::new(program).args(args).exec();
    eprintln!("sriov-rdma-device-plugin node-cni: running {program} in the node's mount namespace: {e}");
    1
}

/// Starts the DRA driver for the `dra: true` resources' lists: its sockets (dra.rs) and its ResourceSlice (slices.rs).
async fn start_dra(
    paths: &Paths,
    opts: &DraOpts,
    lists: Vec<tokio::sync::watch::Receiver<Vec<devices::Offered>>>,
    inventory: tokio::sync::watch::Receiver<Arc<Inventory>>,
    timing: Timing,
) -> Result<(dra::DraPaths, draattach::ClaimStatus), String> {
    let node = opts.node.clone().ok_or(
        "a resource says dra: true but the node's name is unknown: give --node-name or NODE_NAME (the DaemonSet sets \
         it from spec.nodeName)",
    )?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("a resource says dra: true but the API server cannot be reached: {e}"))?;
    let root = paths.kubelet_dir.parent().unwrap_or(Path::new("/var/lib/kubelet"));
    let dra_paths = dra::DraPaths::under(
        root,
        dra::DRIVER,
        opts.cdi_dir.clone(),
        paths.sysfs.clone(),
        paths.dev_root.clone(),
        opts.policy.clone(),
    );
    let (registered, kick) = tokio::sync::watch::channel(0u64);
    let driver = dra::Driver {
        name: dra::DRIVER.into(),
        node: node.clone(),
        paths: dra_paths.clone(),
        client: client.clone(),
        offered: lists.clone(),
        inventory: inventory.clone(),
        registered,
    };
    let status = draattach::ClaimStatus { client: client.clone(), driver: dra::DRIVER.into(), pool: node.clone() };
    let publisher = slices::Publisher::new(client, dra::DRIVER, &node);
    tokio::spawn(slices::run(publisher, lists, inventory, paths.sysfs.clone(), kick, slices::Periods::default()));
    tokio::spawn(dra::serve(driver, timing.socket_check));
    info!("DRA: driver {} for node {node} started (CDI specs in {})", dra::DRIVER, opts.cdi_dir.display());
    Ok((dra_paths, status))
}
