//! Doctor, "why is the link unstable?": per PF, VF netdev and RDMA port, the state, the physical state, and the
//! counters (netdev `carrier_changes` and errors, RDMA `counters/` and `hw_counters/`) read twice an interval
//! apart, naming those that moved.
//!
//! Netdev counters come from the kernel over netlink (the namespace doctor runs in); RDMA port counters and
//! states from sysfs, `SRIOV_RDMA_SYSFS` honoured.

use super::Finding;
use crate::kernel::link::RouteSocket;
use crate::kernel::netlink::Kind;
use crate::kernel::sysfs::Sysfs;
use netlink_packet_route::link::{LinkAttribute, LinkMessage, State};
use netlink_packet_route::RouteNetlinkMessage as Rt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

/// A netdev to watch and what it is (`PF`, `VF 3 of ens1f0`).
#[derive(Debug, Clone)]
pub struct Watched {
    pub name: String,
    pub role: String,
}

#[derive(Debug, Serialize)]
pub struct LinkReport {
    /// The time between the two reads; 0 when only one read was made.
    pub interval_ms: u64,
    pub netdevs: Vec<NetdevLink>,
    pub ports: Vec<PortLink>,
}

#[derive(Debug, Serialize)]
pub struct NetdevLink {
    pub name: String,
    pub role: String,
    pub operstate: Option<String>,
    pub carrier: Option<bool>,
    pub carrier_changes: Option<u64>,
    /// Counters that changed between the two reads.
    pub moved: Vec<Moved>,
}

#[derive(Debug, Serialize)]
pub struct PortLink {
    pub device: String,
    pub port: u32,
    pub state: Option<String>,
    pub phys_state: Option<String>,
    pub link_layer: Option<String>,
    /// The netdev of the port's first GID (RoCE), where sysfs shows one.
    pub netdev: Option<String>,
    /// How many counters were read (`counters/` and `hw_counters/`).
    pub counters_read: usize,
    pub moved: Vec<Moved>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub counter: String,
    pub before: u64,
    pub after: u64,
    /// `error` (errors, drops, retries, link downs, congestion), or `traffic` (data and packet counts).
    pub kind: &'static str,
}

/// Whether a counter counts ordinary traffic (its moving says nothing is wrong).
pub fn is_traffic(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["_data", "_packets", "pkts", "bytes", "unicast", "multicast", "rdma_sends", "rdma_recvs", "ack_deferred"]
        .iter()
        .any(|t| n.contains(t))
}

/// The counters that differ between two reads, by name.
pub fn moved(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Vec<Moved> {
    after
        .iter()
        .filter_map(|(k, a)| {
            let b = *before.get(k)?;
            (b != *a).then(|| Moved {
                counter: k.clone(),
                before: b,
                after: *a,
                kind: if is_traffic(k) { "traffic" } else { "error" },
            })
        })
        .collect()
}

/// One read of a netdev, from the kernel.
#[derive(Debug, Default, Clone)]
struct NetdevRead {
    up: bool,
    operstate: Option<String>,
    carrier: Option<bool>,
    counters: BTreeMap<String, u64>,
}

fn operstate(s: &State) -> String {
    match s {
        State::Up => "up",
        State::Down => "down",
        State::LowerLayerDown => "lowerlayerdown",
        State::Dormant => "dormant",
        State::NotPresent => "notpresent",
        State::Testing => "testing",
        _ => "unknown",
    }
    .to_string()
}

fn read_netdev(route: &mut RouteSocket, name: &str) -> Option<NetdevRead> {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    let replies = route.request(Rt::GetLink(m), Kind::Get).ok()?;
    let msg = replies.into_iter().find_map(|r| match r {
        Rt::NewLink(l) => Some(l),
        _ => None,
    })?;
    let mut out =
        NetdevRead { up: msg.header.flags.contains(netlink_packet_route::link::LinkFlags::Up), ..Default::default() };
    for a in msg.attributes {
        match a {
            LinkAttribute::OperState(s) => out.operstate = Some(operstate(&s)),
            LinkAttribute::Carrier(c) => out.carrier = Some(c != 0),
            LinkAttribute::CarrierChanges(n) => {
                out.counters.insert("carrier_changes".into(), n.into());
            }
            LinkAttribute::Stats64(s) => {
                for (k, v) in [
                    ("rx_errors", s.rx_errors),
                    ("tx_errors", s.tx_errors),
                    ("rx_dropped", s.rx_dropped),
                    ("tx_dropped", s.tx_dropped),
                    ("rx_crc_errors", s.rx_crc_errors),
                    ("rx_frame_errors", s.rx_frame_errors),
                    ("rx_fifo_errors", s.rx_fifo_errors),
                    ("rx_missed_errors", s.rx_missed_errors),
                    ("rx_over_errors", s.rx_over_errors),
                    ("tx_carrier_errors", s.tx_carrier_errors),
                    ("tx_fifo_errors", s.tx_fifo_errors),
                ] {
                    out.counters.insert(k.into(), v);
                }
            }
            _ => {}
        }
    }
    Some(out)
}

/// Every RDMA device's ports as sysfs lists them: (device, port).
pub fn rdma_ports(sysfs: &Sysfs) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let Ok(devs) = fs::read_dir(sysfs.root.join("class/infiniband")) else { return out };
    for d in devs.flatten() {
        let Ok(dev) = d.file_name().into_string() else { continue };
        let Ok(ports) = fs::read_dir(d.path().join("ports")) else { continue };
        for p in ports.flatten() {
            if let Some(n) = p.file_name().to_str().and_then(|n| n.parse().ok()) {
                out.push((dev.clone(), n));
            }
        }
    }
    out.sort();
    out
}

/// `4: ACTIVE` → `ACTIVE`; `5: LinkUp` → `LinkUp`.
fn state_word(s: String) -> String {
    s.split_once(": ").map(|(_, w)| w.to_string()).unwrap_or(s)
}

/// The netdev a RoCE port is bound to: the first GID's `ndevs` entry.
pub fn port_netdev(sysfs: &Sysfs, dev: &str, port: u32) -> Option<String> {
    sysfs.gids(dev, port).into_iter().find_map(|g| g.ndev)
}

/// The numeric files of a port's `counters/` and `hw_counters/` (`hw_counters/` names keep their prefix).
fn read_port_counters(sysfs: &Sysfs, dev: &str, port: u32) -> BTreeMap<String, u64> {
    let dir = sysfs.ib_port_dir(dev, port);
    let mut out = BTreeMap::new();
    for (sub, prefix) in [("counters", ""), ("hw_counters", "hw_counters/")] {
        let Ok(rd) = fs::read_dir(dir.join(sub)) else { continue };
        for e in rd.flatten() {
            let Ok(name) = e.file_name().into_string() else { continue };
            // Some counters refuse reads (EINVAL on ports without them): skipped.
            if let Some(v) = fs::read_to_string(e.path()).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
                out.insert(format!("{prefix}{name}"), v);
            }
        }
    }
    out
}

/// Reads everything, waits `interval` (unless zero), reads the counters again, and adds a warning (with what to
/// run next) for every netdev or port whose error counters or carrier moved.
pub fn report(sysfs: &Sysfs, netdevs: &[Watched], interval: Duration, warnings: &mut Vec<Finding>) -> LinkReport {
    let mut route = RouteSocket::new().ok();
    let read_all = |route: &mut Option<RouteSocket>| {
        let nd: Vec<Option<NetdevRead>> =
            netdevs.iter().map(|w| route.as_mut().and_then(|r| read_netdev(r, &w.name))).collect();
        let ports: Vec<BTreeMap<String, u64>> =
            rdma_ports(sysfs).iter().map(|(d, p)| read_port_counters(sysfs, d, *p)).collect();
        (nd, ports)
    };
    let ports = rdma_ports(sysfs);
    let (nd0, p0) = read_all(&mut route);
    let (nd1, p1) = if interval.is_zero() {
        (nd0.clone(), p0.clone())
    } else {
        std::thread::sleep(interval);
        read_all(&mut route)
    };
    let secs = interval.as_secs_f64();
    let mut out_nd = Vec::new();
    for (i, w) in netdevs.iter().enumerate() {
        let (Some(a), Some(b)) = (nd0.get(i).cloned().flatten(), nd1.get(i).cloned().flatten()) else {
            continue;
        };
        let mv = moved(&a.counters, &b.counters);
        if let Some(c) = mv.iter().find(|m| m.counter == "carrier_changes") {
            warnings.push(Finding::new(
                "link-flapping",
                format!(
                    "{} ({}) changed carrier {} times in {secs:.1}s: its link flaps; look at the cable, transceiver \
                 and switch port: ethtool {} ; ip -s link show {}",
                    w.name,
                    w.role,
                    c.after.saturating_sub(c.before),
                    w.name,
                    w.name
                ),
            ));
        }
        let errs: Vec<String> = mv
            .iter()
            .filter(|m| m.kind == "error" && m.counter != "carrier_changes")
            .map(|m| format!("{} +{}", m.counter, m.after.saturating_sub(m.before)))
            .collect();
        if !errs.is_empty() {
            warnings.push(Finding::new(
                "netdev-errors",
                format!(
                    "{} ({}) error counters moved in {secs:.1}s: {}; see ip -s -s link show {} and ethtool -S {}",
                    w.name,
                    w.role,
                    errs.join(", "),
                    w.name,
                    w.name
                ),
            ));
        }
        if b.up && b.carrier == Some(false) {
            let pf = w.role.rsplit(' ').next().filter(|_| w.role.starts_with("VF "));
            let pf_down = pf
                .and_then(|p| netdevs.iter().position(|x| x.name == p))
                .is_some_and(|j| nd1.get(j).cloned().flatten().is_some_and(|r| !r.up || r.carrier == Some(false)));
            warnings.push(Finding::new(
                "vf-no-carrier",
                match (pf, pf_down) {
                    (Some(pf), true) => format!(
                    "{} ({}) is up without carrier because its PF {pf} has no link: a pod on it has no network and \
                     its RDMA port is down; ip link set {pf} up, then check the PF's cable (ethtool {pf})",
                    w.name, w.role
                ),
                    (Some(pf), false) => format!(
                    "{} ({}) is up without carrier while its PF {pf} has link: check the VF's link state on the PF \
                     (ip link show {pf}; ip link set {pf} vf N state auto) and the VF driver (dmesg)",
                    w.name, w.role
                ),
                    _ => format!(
                        "{} ({}) is up without carrier: no cable, or the switch port is down; ethtool {}",
                        w.name, w.role, w.name
                    ),
                },
            ));
        }
        out_nd.push(NetdevLink {
            name: w.name.clone(),
            role: w.role.clone(),
            operstate: b.operstate.clone(),
            carrier: b.carrier,
            carrier_changes: b.counters.get("carrier_changes").copied(),
            moved: mv,
        });
    }
    let mut out_ports = Vec::new();
    for (i, (dev, port)) in ports.iter().enumerate() {
        let (Some(a), Some(b)) = (p0.get(i), p1.get(i)) else { continue };
        let mv = moved(a, b);
        let errs: Vec<String> = mv
            .iter()
            .filter(|m| m.kind == "error")
            .map(|m| format!("{} +{}", m.counter, m.after.saturating_sub(m.before)))
            .collect();
        if !errs.is_empty() {
            warnings.push(Finding::new(
                "rdma-port-errors",
                format!(
                    "RDMA device {dev} port {port}: error counters moved in {secs:.1}s: {}; watch them with \
                 rdma statistic show link {dev}/{port} (InfiniBand: ibcheckerrors / perfquery)",
                    errs.join(", ")
                ),
            ));
        }
        let phys_state = sysfs.ib_port_attr(dev, *port, "phys_state").map(state_word);
        out_ports.push(PortLink {
            device: dev.clone(),
            port: *port,
            state: sysfs.ib_port_attr(dev, *port, "state").map(state_word),
            phys_state,
            link_layer: sysfs.ib_port_attr(dev, *port, "link_layer"),
            netdev: port_netdev(sysfs, dev, *port),
            counters_read: b.len(),
            moved: mv,
        });
    }
    LinkReport { interval_ms: interval.as_millis() as u64, netdevs: out_nd, ports: out_ports }
}

fn moved_list(m: &[Moved]) -> String {
    m.iter().map(|m| format!("{} {}→{}", m.counter, m.before, m.after)).collect::<Vec<_>>().join(", ")
}

/// The human section.
pub fn render(r: &LinkReport, o: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "\nLink (counters read twice, {} ms apart)", r.interval_ms);
    if r.netdevs.is_empty() && r.ports.is_empty() {
        let _ = writeln!(o, "  (nothing to watch)");
    }
    for n in &r.netdevs {
        let _ = writeln!(
            o,
            "  {:<16} {:<18} {:<14} carrier {:<4} carrier_changes {:<6} moved: {}",
            n.name,
            n.role,
            n.operstate.as_deref().unwrap_or("-"),
            match n.carrier {
                Some(true) => "on",
                Some(false) => "off",
                None => "-",
            },
            n.carrier_changes.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            if n.moved.is_empty() { "-".to_string() } else { moved_list(&n.moved) }
        );
    }
    for p in &r.ports {
        let _ = writeln!(
            o,
            "  {} port {}  {}/{}  {}  netdev {}  {} counters, moved: {}",
            p.device,
            p.port,
            p.state.as_deref().unwrap_or("-"),
            p.phys_state.as_deref().unwrap_or("-"),
            p.link_layer.as_deref().unwrap_or("-"),
            p.netdev.as_deref().unwrap_or("-"),
            p.counters_read,
            if p.moved.is_empty() { "-".to_string() } else { moved_list(&p.moved) }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_names_what_changed_and_tells_errors_from_traffic() {
        let b: BTreeMap<String, u64> =
            [("symbol_error", 0), ("port_xmit_data", 10), ("link_downed", 2), ("only_before", 1)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let a: BTreeMap<String, u64> =
            [("symbol_error", 3), ("port_xmit_data", 90), ("link_downed", 2), ("only_after", 5)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let m = moved(&b, &a);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!((m[0].counter.as_str(), m[0].kind, m[0].after), ("port_xmit_data", "traffic", 90));
        assert_eq!((m[1].counter.as_str(), m[1].kind, m[1].before), ("symbol_error", "error", 0));
        assert!(is_traffic("hw_counters/rcvd_pkts") && !is_traffic("hw_counters/retry_exceeded_err"));
        assert_eq!(state_word("4: ACTIVE".into()), "ACTIVE");
    }
}
