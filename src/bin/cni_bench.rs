//! `make bench`: ADD+DEL cycle times measured side by side, round-robin, on one stand-in VF (a veth end
//! behind a fake sysfs PCI tree): the raw-netlink kernel floor, sriov-rdma without and with static IPAM,
//! and the Debian host-device plugin on the same device. Prints medians, ratios to the floor, peak RSS.

#[path = "../bench_util.rs"]
mod bench_util;

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
    let dev = |p: &str| dir.join("sys/bus/pci/devices").join(p);
    let mk = |r: std::io::Result<()>| r.map_err(|e| format!("building the fake sysfs tree: {e}"));
    mk(std::fs::create_dir_all(dev(PF_PCI).join("net/bnchpf")))?;
    mk(std::fs::create_dir_all(dev(PCI).join("net").join(DEV)))?;
    mk(std::fs::write(dev(PF_PCI).join("sriov_totalvfs"), "1\n"))?;
    mk(std::os::unix::fs::symlink(format!("../{PF_PCI}"), dev(PCI).join("physfn")))?;
    mk(std::os::unix::fs::symlink(format!("../{PCI}"), dev(PF_PCI).join("virtfn0")))?;
    mk(std::os::unix::fs::symlink("../../../bus/pci/drivers/igbvf", dev(PCI).join("driver")))?;
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

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let dir = std::env::temp_dir().join("sriov-rdma-bench");
    if let Err(e) = run(n, &dir) {
        eprintln!("cni-bench: {e}");
        cleanup(&dir);
        std::process::exit(1);
    }
    cleanup(&dir);
}

fn run(n: usize, dir: &Path) -> Result<(), String> {
    setup(dir)?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let plugin = me.with_file_name("sriov-rdma");
    let netns = format!("/var/run/netns/{NS}");
    let mut env: HashMap<&str, String> = HashMap::new();
    env.insert("CNI_CONTAINERID", "bench".into());
    env.insert("CNI_NETNS", netns.clone());
    env.insert("CNI_IFNAME", "net1".into());
    env.insert("CNI_PATH", CNI_PATH.into());
    env.insert("SRIOV_RDMA_SYSFS", dir.join("sys").display().to_string());
    env.insert("SRIOV_RDMA_STATE_DIR", dir.join("state").display().to_string());
    let base =
        format!(r#""cniVersion":"1.0.0","name":"bench","type":"sriov-rdma","deviceID":"{PCI}","logLevel":"error""#);
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
            plugin: Path::new(CNI_PATH).join("host-device"),
            conf: format!(r#"{{"cniVersion":"1.0.0","name":"bench","type":"host-device","device":"{DEV}"}}"#),
            times: vec![],
            rss: 0,
        },
    ];
    let mut floor = bench_util::Floor::new(DEV, &netns).map_err(|e| format!("floor: {e}"))?;
    let mut floor_times = Vec::new();
    // One warm-up round, then n measured rounds; each round runs every case once, in turn.
    for round in 0..=n {
        let f = floor.cycle().map_err(|e| format!("floor: {e}"))?;
        if round > 0 {
            floor_times.push(f);
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
    println!("ADD+DEL cycle on a stand-in VF (veth), {n} rounds, cases interleaved in each round");
    println!("{:<34} {:>10} {:>8} {:>10} {:>13}", "case", "median ms", "p90 ms", "vs floor", "peak RSS KiB");
    println!(
        "{:<34} {:>10.2} {:>8.2} {:>10} {:>13}",
        "kernel floor (raw netlink in+out)",
        fm,
        bench_util::pct(&mut floor_times, 0.9),
        "1.00x",
        "-"
    );
    for c in cases.iter_mut() {
        let m = bench_util::median(&mut c.times);
        println!(
            "{:<34} {:>10.2} {:>8.2} {:>9.2}x {:>13}",
            c.name,
            m,
            bench_util::pct(&mut c.times, 0.9),
            m / fm,
            c.rss
        );
    }
    Ok(())
}
