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
