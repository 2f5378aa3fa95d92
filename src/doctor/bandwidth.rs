//! Doctor, "why is bandwidth below expectation?": negotiated link speed against the NIC's, the PF's PCIe link,
//! the netdev MTU against the RoCE MTU, RoCE congestion settings, the NIC's NUMA node, and `--bandwidth PEER`.
//!
//! sysfs (`SRIOV_RDMA_SYSFS` honoured) for the PCIe link, speeds, NUMA and ECN; netlink for netdev MTUs; where
//! installed, `ethtool` for the NIC's supported link modes and `ibv_devinfo` for a port's active MTU.

use super::Finding;
use crate::kernel::link::RouteSocket;
use crate::kernel::sysfs::Sysfs;
use crate::model::PciAddr;
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Default, Serialize)]
pub struct BandwidthReport {
    pub pfs: Vec<PfBandwidth>,
    pub ports: Vec<PortMtu>,
    /// `--bandwidth PEER`: the verbs bandwidth test, when asked for.
    pub test: Option<BandwidthTest>,
}

#[derive(Debug, Serialize)]
pub struct PfBandwidth {
    pub name: String,
    pub pci: String,
    /// Negotiated speed of the PF's netdev (sysfs `speed`).
    pub speed_mbps: Option<u64>,
    /// The fastest link mode the NIC supports (`ethtool`), where known.
    pub max_speed_mbps: Option<u64>,
    pub pcie: Option<Pcie>,
    /// The NUMA node of the NIC (`numa_node`; none on single-node machines) and its CPUs.
    pub numa_node: Option<u32>,
    pub numa_cpus: Option<String>,
    /// mlx5's RoCE ECN switches (`/sys/class/net/<pf>/ecn/roce_{np,rp}/enable/<prio>`); `None` where the driver
    /// exposes none.
    pub ecn: Option<Ecn>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pcie {
    pub current_speed_gts: f64,
    pub current_width: u32,
    pub max_speed_gts: f64,
    pub max_width: u32,
    /// What the current link carries, after line encoding, in Gbit/s.
    pub current_gbits: f64,
    pub max_gbits: f64,
    pub degraded: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ecn {
    /// Priorities with ECN enabled as notification point (receiver marks CNPs) and reaction point (sender slows).
    pub np_enabled: Vec<u8>,
    pub rp_enabled: Vec<u8>,
}

#[derive(Debug, Serialize)]
pub struct PortMtu {
    pub device: String,
    pub port: u32,
    pub netdev: String,
    pub netdev_mtu: u32,
    /// The RoCE MTU the port runs with, and where that figure comes from (`ibv_devinfo`, or derived from the
    /// netdev MTU as ib_core does for RoCE).
    pub active_mtu: u32,
    pub active_mtu_source: &'static str,
    pub max_mtu: u32,
    /// The line rate of the port (sysfs `rate`), Gbit/s.
    pub rate_gbits: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct BandwidthTest {
    pub peer: String,
    pub command: String,
    pub gbits: Option<f64>,
    pub line_rate_gbits: Option<f64>,
    pub error: Option<String>,
}

/// `8.0 GT/s PCIe` → 8.0; `Unknown` → None.
pub fn parse_gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// Usable Gbit/s of a PCIe link: 8b/10b encoding up to 5 GT/s, 128b/130b from 8 GT/s.
pub fn pcie_gbits(gts: f64, width: u32) -> f64 {
    let enc = if gts <= 5.0 { 0.8 } else { 128.0 / 130.0 };
    gts * enc * f64::from(width)
}

fn pcie_generation(gts: f64) -> u32 {
    match gts {
        g if g <= 2.5 => 1,
        g if g <= 5.0 => 2,
        g if g <= 8.0 => 3,
        g if g <= 16.0 => 4,
        g if g <= 32.0 => 5,
        _ => 6,
    }
}

pub fn pcie_of(sysfs: &Sysfs, pci: &PciAddr) -> Option<Pcie> {
    let read = |f: &str| sysfs.read_trimmed(pci, f);
    let cur_s = parse_gts(&read("current_link_speed")?)?;
    let cur_w: u32 = read("current_link_width")?.parse().ok()?;
    let max_s = parse_gts(&read("max_link_speed")?)?;
    let max_w: u32 = read("max_link_width")?.parse().ok()?;
    Some(Pcie {
        current_speed_gts: cur_s,
        current_width: cur_w,
        max_speed_gts: max_s,
        max_width: max_w,
        current_gbits: pcie_gbits(cur_s, cur_w),
        max_gbits: pcie_gbits(max_s, max_w),
        degraded: cur_s < max_s || cur_w < max_w,
    })
}

/// The RoCE MTU ib_core gives a port whose netdev has `mtu` (`iboe_get_mtu`: the largest IB MTU that fits after
/// the GRH, UDP, BTH, XRC, AtomicETH and ICRC headers, 96 bytes).
pub fn roce_mtu_for(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(96);
    [4096, 2048, 1024, 512, 256].into_iter().find(|m| *m <= room).unwrap_or(256)
}

/// The smallest netdev MTU that carries a RoCE MTU (by the rule above).
pub fn netdev_mtu_for(roce_mtu: u32) -> u32 {
    roce_mtu + 96
}

/// `100 Gb/sec (4X EDR)` → 100.
pub fn parse_rate(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// A CPU list as sysfs and taskset write it: `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

fn ecn_of(sysfs: &Sysfs, netdev: &str) -> Option<Ecn> {
    let dir = sysfs.root.join("class/net").join(netdev).join("ecn");
    let enabled = |role: &str| -> Option<Vec<u8>> {
        let d = dir.join(role).join("enable");
        let rd = fs::read_dir(&d).ok()?;
        let mut v: Vec<u8> = rd
            .flatten()
            .filter_map(|e| {
                let prio: u8 = e.file_name().to_str()?.parse().ok()?;
                (fs::read_to_string(e.path()).ok()?.trim() == "1").then_some(prio)
            })
            .collect();
        v.sort();
        Some(v)
    };
    let np = enabled("roce_np");
    let rp = enabled("roce_rp");
    if np.is_none() && rp.is_none() {
        return None;
    }
    Some(Ecn { np_enabled: np.unwrap_or_default(), rp_enabled: rp.unwrap_or_default() })
}

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Runs a tool with a time limit; its stdout when it exits 0.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting it: {e}"))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer in {}s: stopped", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for it: {e}")),
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("reading its output: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().chain(stdout.lines()).rfind(|l| !l.trim().is_empty()).unwrap_or("").trim();
        Err(format!("{} ({last})", out.status))
    }
}

/// The fastest `NNNNbase…` mode `ethtool IF` lists as supported, in Mb/s.
pub fn max_supported_speed(ethtool_out: &str) -> Option<u64> {
    let mut in_modes = false;
    let mut best = None;
    for line in ethtool_out.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Supported link modes:") {
            in_modes = true;
            best = best.max(modes_max(rest));
        } else if in_modes && !t.contains(':') {
            best = best.max(modes_max(t));
        } else {
            in_modes = false;
        }
    }
    best
}

fn modes_max(s: &str) -> Option<u64> {
    s.split_whitespace().filter_map(|m| m.split_once("base").and_then(|(n, _)| n.parse().ok())).max()
}

/// `active_mtu` and `max_mtu` of a port as `ibv_devinfo` reports them.
fn ibv_mtus(dev: &str, port: u32) -> Option<(u32, u32)> {
    let tool = on_path("ibv_devinfo")?;
    let out =
        run_bounded(Command::new(tool).args(["-d", dev, "-i", &port.to_string()]), Duration::from_secs(5)).ok()?;
    let field = |name: &str| -> Option<u32> {
        out.lines().find_map(|l| l.trim().strip_prefix(name)?.split_whitespace().next()?.parse().ok())
    };
    Some((field("active_mtu:")?, field("max_mtu:")?))
}

/// What the PF checks need about one PF.
pub struct PfRef<'a> {
    pub name: &'a str,
    pub pci: &'a PciAddr,
}

/// The PCIe, speed, NUMA and ECN checks of one PF, with their warnings.
pub fn pf_report(sysfs: &Sysfs, pf: &PfRef, cpus: Option<&[u32]>, warnings: &mut Vec<Finding>) -> PfBandwidth {
    let speed_mbps = fs::read_to_string(sysfs.root.join("class/net").join(pf.name).join("speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|s| *s > 0)
        .map(|s| s as u64);
    let max_speed_mbps = on_path("ethtool")
        .and_then(|t| run_bounded(Command::new(t).arg(pf.name), Duration::from_secs(5)).ok())
        .and_then(|o| max_supported_speed(&o));
    if let (Some(s), Some(m)) = (speed_mbps, max_speed_mbps) {
        if s < m {
            warnings.push(Finding::new(
                "link-speed-below-max",
                format!(
                    "PF {} negotiated {s} Mb/s, its NIC supports {m} Mb/s: check the cable/transceiver and the switch \
                 port, then ethtool -s {} autoneg on",
                    pf.name, pf.name
                ),
            ));
        }
    }
    let pcie = pcie_of(sysfs, pf.pci);
    if let Some(p) = &pcie {
        if p.degraded {
            warnings.push(Finding::new(
                "pcie-link-degraded",
                format!(
                "PF {} ({}) PCIe link runs at {} GT/s x{} (gen{}, ~{:.0} Gbit/s), below its {} GT/s x{} (gen{}, ~{:.0} \
                 Gbit/s): RDMA bandwidth is capped; reseat the NIC in a full-width slot and check the BIOS slot \
                 settings (lspci -s {} -vv | grep -E 'LnkCap|LnkSta')",
                pf.name,
                pf.pci,
                p.current_speed_gts,
                p.current_width,
                pcie_generation(p.current_speed_gts),
                p.current_gbits,
                p.max_speed_gts,
                p.max_width,
                pcie_generation(p.max_speed_gts),
                p.max_gbits,
                pf.pci
            ),
            ));
        }
        if let Some(s) = speed_mbps {
            if p.current_gbits * 1000.0 < s as f64 {
                warnings.push(Finding::new(
                    "pcie-slower-than-network",
                    format!(
                    "PF {}: its PCIe link (~{:.0} Gbit/s) carries less than its network link ({} Gbit/s): the slot \
                     caps bandwidth; move the NIC to a faster slot (lspci -s {} -vv | grep LnkSta)",
                    pf.name,
                    p.current_gbits,
                    s / 1000,
                    pf.pci
                ),
                ));
            }
        }
    }
    let numa_node = sysfs
        .read_trimmed(pf.pci, "numa_node")
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(|n| n as u32);
    let numa_cpus = numa_node.and_then(|n| {
        fs::read_to_string(sysfs.root.join(format!("devices/system/node/node{n}/cpulist")))
            .ok()
            .map(|s| s.trim().into())
    });
    if let (Some(want), Some(node), Some(list)) = (cpus, numa_node, numa_cpus.as_deref()) {
        let local = parse_cpu_list(list).unwrap_or_default();
        let remote: Vec<String> = want.iter().filter(|c| !local.contains(c)).map(|c| c.to_string()).collect();
        if !remote.is_empty() {
            warnings.push(Finding::new(
                "cpus-off-nic-numa",
                format!(
                "CPUs {} are not on NUMA node {node} of PF {}'s NIC (its CPUs: {list}): traffic crosses the socket \
                 interconnect; run the pod on CPUs {list} (kubelet --topology-manager-policy=single-numa-node)",
                remote.join(","),
                pf.name
            ),
            ));
        }
    }
    let ecn = ecn_of(sysfs, pf.name);
    if let Some(e) = &ecn {
        if e.np_enabled.is_empty() || e.rp_enabled.is_empty() {
            warnings.push(Finding::new(
                "roce-ecn-off",
                format!(
                "PF {}: RoCE ECN is off (notification point on priorities {:?}, reaction point on {:?}): congestion \
                 then means drops or pauses; enable it on the RoCE priority, e.g. echo 1 > \
                 /sys/class/net/{}/ecn/roce_np/enable/3 and echo 1 > /sys/class/net/{}/ecn/roce_rp/enable/3",
                pf.name, e.np_enabled, e.rp_enabled, pf.name, pf.name
            ),
            ));
        }
    }
    PfBandwidth {
        name: pf.name.to_string(),
        pci: pf.pci.to_string(),
        speed_mbps,
        max_speed_mbps,
        pcie,
        numa_node,
        numa_cpus,
        ecn,
    }
}

/// The MTU check of every Ethernet (RoCE) port whose netdev is in this namespace.
pub fn port_mtus(sysfs: &Sysfs, warnings: &mut Vec<Finding>) -> Vec<PortMtu> {
    let mut route = RouteSocket::new().ok();
    let mut out = Vec::new();
    for (dev, port) in super::link::rdma_ports(sysfs) {
        if sysfs.ib_port_attr(&dev, port, "link_layer").as_deref() != Some("Ethernet") {
            continue;
        }
        let Some(netdev) = super::link::port_netdev(sysfs, &dev, port) else { continue };
        let Some(link) = route.as_mut().and_then(|r| r.link_by_name(&netdev).ok().flatten()) else { continue };
        let (active_mtu, max_mtu, source) = match ibv_mtus(&dev, port) {
            Some((a, m)) => (a, m, "ibv_devinfo"),
            None => (roce_mtu_for(link.mtu), 4096, "derived from the netdev MTU"),
        };
        if active_mtu < max_mtu {
            warnings.push(Finding::new(
                "roce-mtu-below-max",
                format!(
                "RDMA device {dev} port {port} runs RoCE MTU {active_mtu} (it supports {max_mtu}) because its netdev \
                 {netdev} has MTU {}: RoCE needs the netdev MTU above the RoCE MTU; ip link set dev {netdev} mtu \
                 {} (or 9000; in a pod: the network's \"mtu\")",
                link.mtu,
                netdev_mtu_for(max_mtu).max(4200)
            ),
            ));
        }
        out.push(PortMtu {
            rate_gbits: sysfs.ib_port_attr(&dev, port, "rate").and_then(|r| parse_rate(&r)),
            device: dev,
            port,
            netdev,
            netdev_mtu: link.mtu,
            active_mtu,
            active_mtu_source: source,
            max_mtu,
        });
    }
    out
}

/// `BW average[Gb/sec]` of `ib_write_bw --report_gbits` output: the 4th column of the line after the header.
pub fn parse_write_bw(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    lines.find(|l| l.contains("BW average"))?;
    lines.next()?.split_whitespace().nth(3)?.parse().ok()
}

/// `--bandwidth PEER`: `ib_write_bw -d DEV -i PORT -x GID -F --report_gbits PEER`, the client of the guide's test
/// (the peer runs the same command without PEER). `tool` overrides where ib_write_bw is looked for.
pub fn run_test(
    peer: &str,
    hca: Option<(&str, u32, u32)>,
    line_rate_gbits: Option<f64>,
    tool: Option<&Path>,
) -> BandwidthTest {
    let mut t =
        BandwidthTest { peer: peer.to_string(), command: String::new(), gbits: None, line_rate_gbits, error: None };
    let Some(bin) = tool.map(Path::to_path_buf).or_else(|| on_path("ib_write_bw")) else {
        t.error = Some(
            "ib_write_bw is not installed (not on PATH): install perftest (apt-get install perftest, dnf install \
             perftest)"
                .into(),
        );
        return t;
    };
    let Some((dev, port, gid)) = hca else {
        t.error = Some(
            "no RDMA port with a RoCE v2 GID of an IPv4 address in this view: nothing to test from (see the NCCL \
             settings above; --netns PATH tests from a pod)"
                .into(),
        );
        return t;
    };
    let args =
        ["-d", dev, "-i", &port.to_string(), "-x", &gid.to_string(), "-F", "--report_gbits", peer].map(str::to_string);
    t.command = format!("ib_write_bw {}", args.join(" "));
    match run_bounded(Command::new(&bin).args(&args), Duration::from_secs(120)) {
        Ok(out) => match parse_write_bw(&out) {
            Some(g) => t.gbits = Some(g),
            None => t.error = Some(format!("{}: no \"BW average\" line in its output", t.command)),
        },
        Err(e) => {
            t.error = Some(format!(
                "{}: {e}; the peer must run ib_write_bw -d <its device> -x <its GID index> -F --report_gbits",
                t.command
            ))
        }
    }
    t
}

/// The human section.
pub fn render(r: &BandwidthReport, o: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "\nBandwidth");
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for p in &r.pfs {
        let pcie = p.pcie.as_ref().map(|c| {
            format!(
                "PCIe {} GT/s x{} of {} GT/s x{} (~{:.0} of ~{:.0} Gbit/s){}",
                c.current_speed_gts,
                c.current_width,
                c.max_speed_gts,
                c.max_width,
                c.current_gbits,
                c.max_gbits,
                if c.degraded { " DEGRADED" } else { "" }
            )
        });
        let _ = writeln!(
            o,
            "  {} {}  speed {} of max {} Mb/s  {}  NUMA {} (CPUs {})  RoCE ECN {}",
            p.name,
            p.pci,
            opt(p.speed_mbps.map(|s| s.to_string())),
            opt(p.max_speed_mbps.map(|s| s.to_string())),
            opt(pcie),
            opt(p.numa_node.map(|n| n.to_string())),
            opt(p.numa_cpus.clone()),
            opt(p.ecn.as_ref().map(|e| format!("np {:?} rp {:?}", e.np_enabled, e.rp_enabled)))
        );
    }
    for m in &r.ports {
        let _ = writeln!(
            o,
            "  {} port {}  netdev {} MTU {}  RoCE MTU {} of {} ({})  rate {}",
            m.device,
            m.port,
            m.netdev,
            m.netdev_mtu,
            m.active_mtu,
            m.max_mtu,
            m.active_mtu_source,
            opt(m.rate_gbits.map(|g| format!("{g} Gb/s")))
        );
    }
    if let Some(t) = &r.test {
        let line = opt(t.line_rate_gbits.map(|g| format!("{g} Gbit/s")));
        match (&t.error, t.gbits) {
            (Some(e), _) => {
                let _ = writeln!(o, "  bandwidth test to {}: failed: {e}", t.peer);
            }
            (None, Some(g)) => {
                let _ = writeln!(o, "  {}: {g} Gbit/s (line rate {line})", t.command);
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_figures_and_roce_mtu_rule() {
        assert_eq!(parse_gts("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(parse_gts("Unknown"), None);
        assert!((pcie_gbits(16.0, 16) - 252.06).abs() < 0.1);
        assert!((pcie_gbits(2.5, 1) - 2.0).abs() < 1e-9);
        assert_eq!(pcie_generation(8.0), 3);
        // The classic mistake: MTU 4096 on the netdev leaves RoCE at 2048.
        assert_eq!(roce_mtu_for(4096), 2048);
        assert_eq!(roce_mtu_for(4200), 4096);
        assert_eq!(roce_mtu_for(9000), 4096);
        assert_eq!(roce_mtu_for(1500), 1024);
        assert_eq!(netdev_mtu_for(4096), 4192);
        assert_eq!(parse_rate("100 Gb/sec (4X EDR)"), Some(100.0));
        assert_eq!(parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    #[test]
    fn tool_outputs_are_read() {
        let ethtool = "Settings for ens1f0:\n\tSupported ports: [ FIBRE ]\n\tSupported link modes:   1000baseKX/Full\n\t                        \
                       25000baseCR/Full\n\t                        100000baseCR4/Full\n\tSupported pause frame use: Symmetric\n\t\
                       Advertised link modes:  400000baseCR4/Full\n";
        assert_eq!(max_supported_speed(ethtool), Some(100000));
        let bw = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      5000           \
                  0.19               0.18                 0.000343\n";
        assert_eq!(parse_write_bw(bw), Some(0.18));
        assert_eq!(parse_write_bw("Couldn't connect"), None);
    }
}
