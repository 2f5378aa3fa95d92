//! Scale on the host (`make bench-scale`): a fake node of 8 PFs × 127 mlx5-like VFs (1016 VFs) and the daemon's
//! start to its first ListAndWatch answer, that answer's size, idle CPU per minute, VmRSS and Allocate latency.
//! `SRIOV_RDMA_DP_OLD_BIN`: another build of the daemon measured on the same node right after, with ratios.
//! `SCALE_IDLE_SECONDS` (default 60): the idle window, scaled to a minute.

mod common;

use common::*;
use prost::Message;
use sriov_rdma_device_plugin::api;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

struct Figures {
    first_list: Duration,
    list_bytes: usize,
    idle_cpu_ms_per_min: f64,
    rss_kb: u64,
    allocate_median: Duration,
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("reading /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

async fn measure(node: &Node, bin: &Path, vfs: &[String], idle: Duration) -> Figures {
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let t0 = Instant::now();
    let plugin = spawn_on(node, Command::new(bin), &[]);
    let reg = kubelet.next_registration(Duration::from_secs(60)).await;
    let mut dp = kubelet.dial(&reg).await;
    let mut s = dp.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(60), s.message()).await.unwrap().unwrap().unwrap();
    let first_list = t0.elapsed();
    assert_eq!(first.devices.len(), vfs.len() + 3, "{}", plugin.log());
    let list_bytes = first.encoded_len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = plugin.child.id();
    let before = cpu_ticks(pid);
    tokio::time::sleep(idle).await;
    let used = (cpu_ticks(pid) - before) as f64 * 1000.0 / ticks_per_second() as f64;
    let idle_cpu_ms_per_min = used * 60.0 / idle.as_secs_f64();
    let rss_kb = rss_kb(pid);
    let mut lat = Vec::new();
    for vf in vfs.iter().step_by(vfs.len() / 20).take(20) {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest { devices_ids: vec![vf.clone()] }],
        };
        let t = Instant::now();
        dp.allocate(req).await.unwrap_or_else(|e| panic!("Allocate {vf}: {e}\n{}", plugin.log()));
        lat.push(t.elapsed());
    }
    lat.sort();
    drop(plugin);
    kubelet.stop_and_clean(true).await;
    Figures { first_list, list_bytes, idle_cpu_ms_per_min, rss_kb, allocate_median: lat[lat.len() / 2] }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-scale"]
async fn scale_8_pfs_of_127_vfs() {
    let node = Node::new("scale");
    let t = Instant::now();
    let vfs = add_rails(&node, 8, 127);
    eprintln!("fake node: {} VFs (+3 of the shared fixture) built in {:?}", vfs.len(), t.elapsed());
    let idle = Duration::from_secs(
        std::env::var("SCALE_IDLE_SECONDS").ok().and_then(|s| s.parse().ok()).filter(|s| *s > 0).unwrap_or(60),
    );
    let new_bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin"));
    // `make bench-scale` without OLD_DP sets it empty: no old build then.
    let old_bin = std::env::var_os("SRIOV_RDMA_DP_OLD_BIN").filter(|b| !b.is_empty()).map(std::path::PathBuf::from);
    let new = measure(&node, &new_bin, &vfs, idle).await;
    let old = match &old_bin {
        Some(b) => Some(measure(&node, b, &vfs, idle).await),
        None => None,
    };
    println!("scale: 8 PFs x 127 VFs (1019 devices listed), idle window {idle:?} scaled to a minute");
    println!(
        "| figure | this build | {} | ratio |",
        old_bin.as_ref().map(|b| b.display().to_string()).unwrap_or("-".into())
    );
    println!("|---|---|---|---|");
    let row = |name: &str, n: f64, o: Option<f64>, unit: &str| {
        let (o, r) = match o {
            Some(o) => (format!("{o:.1} {unit}"), if n > 0.0 { format!("{:.2}", o / n) } else { "∞".into() }),
            None => ("-".into(), "-".into()),
        };
        println!("| {name} | {n:.1} {unit} | {o} | {r} |");
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    row("start → first ListAndWatch", ms(new.first_list), old.as_ref().map(|o| ms(o.first_list)), "ms");
    row("ListAndWatch message", new.list_bytes as f64, old.as_ref().map(|o| o.list_bytes as f64), "bytes");
    row("idle CPU per minute", new.idle_cpu_ms_per_min, old.as_ref().map(|o| o.idle_cpu_ms_per_min), "ms");
    row("VmRSS", new.rss_kb as f64 / 1024.0, old.as_ref().map(|o| o.rss_kb as f64 / 1024.0), "MiB");
    row("Allocate, median of 20", ms(new.allocate_median), old.as_ref().map(|o| ms(o.allocate_median)), "ms");
}

/// Per thread of a process: CPU time so far in ns (the first field of /proc/<pid>/task/<tid>/schedstat: time on
/// a CPU, to the nanosecond, where /proc/<pid>/stat counts 10 ms ticks) and voluntary context switches (times it
/// went to sleep and woke).
fn threads(pid: u32) -> std::collections::HashMap<String, (u64, u64)> {
    let mut out = std::collections::HashMap::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("reading the daemon's /proc tasks");
    for t in tasks.flatten() {
        let ns = std::fs::read_to_string(t.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        let wakeups = std::fs::read_to_string(t.path().join("status")).ok().and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
        });
        if let (Some(ns), Some(w)) = (ns, wakeups) {
            out.insert(t.file_name().to_string_lossy().into_owned(), (ns, w));
        }
    }
    out
}

/// Follows a process's threads (sampled every second, so a thread that ends in between — the runtime's blocking
/// threads end after 10 s without work — keeps what it used until its last sample): CPU ns and wakeups since start.
struct Usage {
    first: std::collections::HashMap<String, (u64, u64)>,
    last: std::collections::HashMap<String, (u64, u64)>,
}

impl Usage {
    fn start(pid: u32) -> Usage {
        let first = threads(pid);
        Usage { last: first.clone(), first }
    }
    fn sample(&mut self, pid: u32) {
        self.last.extend(threads(pid));
    }
    fn total(&self) -> (u64, u64) {
        self.last.iter().fold((0, 0), |(ns, w), (tid, (n1, w1))| {
            let (n0, w0) = self.first.get(tid).copied().unwrap_or((0, 0));
            (ns + n1 - n0, w + w1 - w0)
        })
    }
}

/// One HTTP GET on a new connection, as the kubelet's httpGet probe makes it; the status line.
async fn probe(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connecting to the probe port");
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    c.write_all(req.as_bytes()).await.expect("sending the probe");
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.expect("reading the probe's answer");
    String::from_utf8_lossy(&out).lines().next().unwrap_or_default().to_string()
}

/// The kubelet's httpGet probes: (path, period in seconds).
type Probes<'a> = &'a [(&'a str, u32)];

/// The daemon idle over `window` on `node`: CPU ms and wakeups, scaled to a minute, and the probes sent.
/// `probes`: (path, period in seconds) of the kubelet's httpGet probes, sent to the metrics port.
async fn idle_of(node: &Node, bin: &Path, extra: &[&str], probes: Probes<'_>, window: Duration) -> (f64, f64, usize) {
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = extra.to_vec();
    if !probes.is_empty() {
        args.extend(["--metrics-addr", &addr]);
    }
    let plugin = spawn_on(node, Command::new(bin), &args);
    let reg = kubelet.next_registration(Duration::from_secs(60)).await;
    let dp = kubelet.dial(&reg).await;
    let mut s = dp.clone().list_and_watch(api::Empty {}).await.unwrap().into_inner();
    tokio::time::timeout(Duration::from_secs(60), s.message()).await.unwrap().unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = plugin.child.id();
    let mut usage = Usage::start(pid);
    let t0 = Instant::now();
    let mut sent = 0;
    // Seconds: a sample at each, each probe at its period.
    for sec in 1..=window.as_secs() as u32 {
        tokio::time::sleep_until((t0 + Duration::from_secs(1) * sec).into()).await;
        if sec < window.as_secs() as u32 {
            for (p, _) in probes.iter().filter(|(_, every)| sec % every == 0) {
                let status = probe(port, p).await;
                assert!(status.contains(" 200 "), "{p}: '{status}'\n{}", plugin.log());
                sent += 1;
            }
        }
        usage.sample(pid);
    }
    let (ns, wakeups) = usage.total();
    drop(s);
    drop(plugin);
    kubelet.stop_and_clean(true).await;
    let per_min = 60.0 / window.as_secs_f64();
    (ns as f64 / 1e6 * per_min, wakeups as f64 * per_min, sent)
}

/// Where an idle daemon's CPU goes: the same fake node (8 PFs × 127 VFs), idle with nothing else, with the slow
/// poll pushed out of the window, and with the kubelet's probes at the DaemonSet's periods (those of
/// deploy/sriov-rdma.yaml now, and the earlier ones); this build and `SRIOV_RDMA_DP_OLD_BIN` side by side, in the
/// same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-scale"]
async fn idle_cpu_by_source() {
    let node = Node::new("idle-by-source");
    add_rails(&node, 8, 127);
    let window = Duration::from_secs(
        std::env::var("SCALE_IDLE_SECONDS").ok().and_then(|s| s.parse().ok()).filter(|s| *s > 0).unwrap_or(60),
    );
    let new_bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_sriov-rdma-device-plugin"));
    let old_bin = std::env::var_os("SRIOV_RDMA_DP_OLD_BIN").filter(|b| !b.is_empty()).map(std::path::PathBuf::from);
    let cases: [(&str, &[&str], Probes); 4] = [
        ("idle, defaults (a slow poll every 60 s)", &[], &[]),
        ("idle, no poll in the window (--poll-ms 3600000)", &["--poll-ms", "3600000"], &[]),
        ("idle + probes: /readyz every 5 s, /healthz every 10 s", &[], &[("/readyz", 5), ("/healthz", 10)]),
        ("idle + probes: /readyz every 10 s, /healthz every 30 s", &[], &[("/readyz", 10), ("/healthz", 30)]),
    ];
    println!("idle CPU by source: 8 PFs x 127 VFs, window {window:?} scaled to a minute (schedstat ns)");
    println!(
        "| case | this build: CPU, wakeups | {} | CPU ratio |",
        old_bin.as_ref().map(|b| b.display().to_string()).unwrap_or("-".into())
    );
    println!("|---|---|---|---|");
    for (name, extra, probes) in cases {
        let (n, nw, sent) = idle_of(&node, &new_bin, extra, probes, window).await;
        let old = match &old_bin {
            Some(b) => Some(idle_of(&node, b, extra, probes, window).await),
            None => None,
        };
        let (o, r) = match old {
            Some((o, ow, _)) => {
                (format!("{o:.2} ms, {ow:.0}"), if n > 0.0 { format!("{:.2}", o / n) } else { "∞".into() })
            }
            None => ("-".into(), "-".into()),
        };
        let probes = if sent > 0 { format!(" ({sent} probes)") } else { String::new() };
        println!("| {name}{probes} | {n:.2} ms, {nw:.0} | {o} | {r} |");
    }
}
