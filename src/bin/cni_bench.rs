//! `make bench`: ADD+DEL cycle times measured side by side, round-robin, on one stand-in VF (a veth end
//! behind a fake sysfs PCI tree): the raw-netlink kernel floor, sriov-rdma without and with static IPAM,
//! and the Debian host-device plugin on the same device. Prints medians, ratios to the floor (the two
//! netns moves) and to the floor plus bringing the link up (the driver's open, which every attach does),
//! and the peak RSS of the plugin processes.
//! `cni-bench --vf PCI [N]` does the same on a real VF (real sysfs), as `make bench-vm` runs it.

#[path = "../bench_util.rs"]
mod bench_util;

use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const DEV: &str = "bnchv0";
const NS: &str = "sriov-rdma-bench";
const PCI: &str = "0000:5e:02.0";
const PF_PCI: &str = "0000:5e:00.0";
const CNI_PATH: &str = "/usr/lib/cni";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn setup(dir: &Path) -> Result<(), String> {
    cleanup(dir);
    ip(&["link", "add", "bnchpf", "type", "veth", "peer", "name", "bnchpfp"])?;
    ip(&["link", "add", DEV, "type", "veth", "peer", "name", "bnchv0p"])?;
    ip(&["netns", "add", NS])?;
    let built = || -> std::io::Result<()> {
        let tree = FakeTree::new(&dir.join("sys"))?;
        tree.pf(PF_PCI, "bnchpf", 1)?;
        tree.vf(PF_PCI, 0, PCI, Some(DEV), "igbvf")
    };
    built().map_err(|e| format!("building the fake sysfs tree: {e}"))?;
    Ok(())
}

fn cleanup(dir: &Path) {
    let _ = ip(&["netns", "del", NS]);
    let _ = ip(&["link", "del", "bnchpf"]);
    let _ = ip(&["link", "del", DEV]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs one CNI invocation; returns its peak RSS in KiB.
fn invoke(plugin: &Path, env: &HashMap<&str, String>, conf: &str) -> Result<i64, String> {
    let mut child = Command::new(plugin)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", plugin.display()))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(conf.as_bytes()).map_err(|e| e.to_string())?;
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be filled in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals.
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("{} {}: {out} {err}", plugin.display(), env["CNI_COMMAND"]));
    }
    Ok(ru.ru_maxrss)
}

struct Case {
    name: &'static str,
    plugin: PathBuf,
    conf: String,
    times: Vec<f64>,
    rss: i64,
}

/// Where the cycles run: the stand-in VF on this host, or a real VF.
struct Target {
    dev: String,
    pci: String,
    cni_path: String,
    what: String,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (real, rest) = match args.first().map(String::as_str) {
        Some("--vf") => (args.get(1).cloned(), &args[2.min(args.len())..]),
        _ => (None, &args[..]),
    };
    let n: usize = rest.first().and_then(|s| s.parse().ok()).unwrap_or(30);
    let dir = std::env::temp_dir().join("sriov-rdma-bench");
    let result = match real {
        Some(pci) => real_vf(&pci).and_then(|t| {
            let _ = ip(&["netns", "del", NS]);
            ip(&["netns", "add", NS])?;
            run(n, &t, &HashMap::new())
        }),
        None => setup(&dir).and_then(|()| {
            let mut extra = HashMap::new();
            extra.insert("SRIOV_RDMA_SYSFS", dir.join("sys").display().to_string());
            extra.insert("SRIOV_RDMA_STATE_DIR", dir.join("state").display().to_string());
            let t = Target {
                dev: DEV.into(),
                pci: PCI.into(),
                cni_path: CNI_PATH.into(),
                what: "a stand-in VF (veth)".into(),
            };
            run(n, &t, &extra)
        }),
    };
    cleanup(&dir);
    if let Err(e) = result {
        eprintln!("cni-bench: {e}");
        std::process::exit(1);
    }
}

fn real_vf(pci: &str) -> Result<Target, String> {
    let net = Path::new("/sys/bus/pci/devices").join(pci).join("net");
    let dev = std::fs::read_dir(&net)
        .map_err(|e| format!("{}: {e}", net.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .next()
        .ok_or_else(|| format!("VF {pci} has no netdev"))?;
    let cni_path = if Path::new("/opt/cni/bin/static").exists() { "/opt/cni/bin" } else { CNI_PATH };
    Ok(Target { what: format!("real VF {pci} ({dev})"), dev, pci: pci.into(), cni_path: cni_path.into() })
}

fn run(n: usize, t: &Target, extra: &HashMap<&'static str, String>) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let plugin = me.with_file_name("sriov-rdma");
    let plugin = if plugin.exists() { plugin } else { PathBuf::from("/opt/cni/bin/sriov-rdma") };
    let netns = format!("/var/run/netns/{NS}");
    let mut env: HashMap<&str, String> = extra.clone();
    env.insert("CNI_CONTAINERID", "bench".into());
    env.insert("CNI_NETNS", netns.clone());
    env.insert("CNI_IFNAME", "net1".into());
    env.insert("CNI_PATH", t.cni_path.clone());
    let base =
        format!(r#""cniVersion":"1.0.0","name":"bench","type":"sriov-rdma","deviceID":"{}","logLevel":"error""#, t.pci);
    let mut cases = [
        Case { name: "sriov-rdma ADD+DEL", plugin: plugin.clone(), conf: format!("{{{base}}}"), times: vec![], rss: 0 },
        Case {
            name: "sriov-rdma ADD+DEL, static IPAM",
            plugin: plugin.clone(),
            conf: format!(r#"{{{base},"ipam":{{"type":"static","addresses":[{{"address":"10.99.0.2/24"}}]}}}}"#),
            times: vec![],
            rss: 0,
        },
        Case {
            name: "host-device ADD+DEL (Debian)",
            plugin: Path::new(&t.cni_path).join("host-device"),
            conf: format!(r#"{{"cniVersion":"1.0.0","name":"bench","type":"host-device","device":"{}"}}"#, t.dev),
            times: vec![],
            rss: 0,
        },
    ];
    let mut floor = bench_util::Floor::new(&t.dev, &netns).map_err(|e| format!("floor: {e}"))?;
    let mut floor_times = Vec::new();
    let mut floor_up_times = Vec::new();
    // One warm-up round, then n measured rounds; each round runs every case once, in turn.
    for round in 0..=n {
        let f = floor.cycle(false).map_err(|e| format!("floor: {e}"))?;
        let fu = floor.cycle(true).map_err(|e| format!("floor with link up: {e}"))?;
        if round > 0 {
            floor_times.push(f);
            floor_up_times.push(fu);
        }
        for c in cases.iter_mut() {
            let t = Instant::now();
            env.insert("CNI_COMMAND", "ADD".into());
            let a = invoke(&c.plugin, &env, &c.conf)?;
            env.insert("CNI_COMMAND", "DEL".into());
            let d = invoke(&c.plugin, &env, &c.conf)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if round > 0 {
                c.times.push(ms);
                c.rss = c.rss.max(a).max(d);
            }
        }
    }
    let fm = bench_util::median(&mut floor_times.clone());
    let fum = bench_util::median(&mut floor_up_times.clone());
    println!("ADD+DEL cycle on {}, {n} rounds, cases interleaved in each round", t.what);
    println!(
        "{:<36} {:>10} {:>8} {:>9} {:>12} {:>13}",
        "case", "median ms", "p90 ms", "vs floor", "vs floor+up", "peak RSS KiB"
    );
    let row = |name: &str, times: &mut Vec<f64>, rss: String| {
        let m = bench_util::median(times);
        println!(
            "{:<36} {:>10.2} {:>8.2} {:>8.2}x {:>11.2}x {:>13}",
            name,
            m,
            bench_util::pct(times, 0.9),
            m / fm,
            m / fum,
            rss
        );
    };
    row("kernel floor (raw netlink in+out)", &mut floor_times, "-".into());
    row("kernel floor + link up in the netns", &mut floor_up_times, "-".into());
    for c in cases.iter_mut() {
        row(c.name, &mut c.times, c.rss.to_string());
    }
    Ok(())
}
