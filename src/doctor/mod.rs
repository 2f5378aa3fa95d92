//! `sriov-rdma doctor`: is this host ready to attach VFs and RDMA devices, and what does a pod see?
//!
//! A report of the SR-IOV PFs and their VFs (PF-side settings, who has each VF), the RDMA devices with their
//! ports and GID tables (like `show_gids`), the RDMA netns mode and what it means for the `rdma` policy, and
//! warnings with the fix. Exit status 1 when something blocks ADD.
//!
//! One file per question an operator asks: [`link`] (is the link stable?), [`bandwidth`] (why is it slow?),
//! [`resource`] (why does a pod get no VF?).

pub mod bandwidth;
pub mod link;
pub mod resource;

use crate::flow::attachment::Attachment;
use crate::flow::context::{Host, Paths};
use crate::flow::orphans::{whereabouts, Whereabouts};
use crate::inventory::{self, Inventory, RdmaBinding};
use crate::kernel::link::RouteSocket;
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{self, NetnsMode, RdmaDevice, RdmaPort};
use crate::kernel::sysfs::{Gid, Sysfs};
use crate::vf_setting::{self, VfState};
use serde::Serialize;
use std::fmt::Write as _;
use std::fs;

/// The version of `--json`'s shape; a change that breaks a reader of the old one raises it.
pub const SCHEMA: u32 = 1;

/// A warning or a blocker: `code` a stable short string for machines (docs/doctor.md lists them), `message` the
/// sentence with its fix, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub message: String,
}

impl Finding {
    pub fn new(code: &'static str, message: impl Into<String>) -> Finding {
        Finding { code, message: message.into() }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The namespace the RDMA part was read from (`host`, or the `--netns` path).
    pub view: String,
    pub pfs: Vec<PfReport>,
    pub rdma: RdmaReport,
    /// What NCCL needs to use each RDMA port bound to an interface of this view with an IPv4 RoCE v2 GID.
    pub nccl: Vec<NcclSettings>,
    /// Is the link stable? (host view)
    pub link: Option<link::LinkReport>,
    /// Why is bandwidth below expectation? (host view)
    pub bandwidth: Option<bandwidth::BandwidthReport>,
    /// Why does a pod get no VF? (host view)
    pub resource: Option<resource::ResourceReport>,
    pub warnings: Vec<Finding>,
    pub blockers: Vec<Finding>,
}

/// What a doctor run is asked for, beyond the readiness report.
pub struct Options {
    pub netns: Option<String>,
    /// The time between the two reads of the link counters; zero reads once.
    pub interval: std::time::Duration,
    /// The CPUs a pod runs on, checked against the NIC's NUMA node.
    pub cpus: Option<Vec<u32>>,
    /// `--bandwidth PEER`: run the verbs bandwidth test against PEER.
    pub bandwidth_peer: Option<String>,
    /// The RDMA device (and port) the bandwidth test uses; default the first with an IPv4 RoCE v2 GID.
    pub rdma_device: Option<String>,
    pub kubelet_dir: std::path::PathBuf,
    pub config: Option<std::path::PathBuf>,
    /// A VF address standing in for the deviceID Multus would inject into `config`.
    pub device: Option<String>,
    /// `--device-plugin-config FILE`: the device plugin's configuration, to show what it advertises and why.
    pub device_plugin_config: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            netns: None,
            interval: std::time::Duration::from_secs(1),
            cpus: None,
            bandwidth_peer: None,
            rdma_device: None,
            kubelet_dir: resource::KUBELET_DIR.into(),
            config: None,
            device: None,
            device_plugin_config: None,
        }
    }
}

/// `NCCL_IB_HCA=<dev>:<port>`, `NCCL_IB_GID_INDEX=<gid_index>`, `NCCL_SOCKET_IFNAME=<ifname>` for one interface.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct NcclSettings {
    pub ifname: String,
    pub address: std::net::Ipv4Addr,
    pub hca: String,
    pub gid_index: u32,
}

impl NcclSettings {
    pub fn env(&self) -> String {
        format!("NCCL_IB_HCA={} NCCL_IB_GID_INDEX={} NCCL_SOCKET_IFNAME={}", self.hca, self.gid_index, self.ifname)
    }
}

/// For each port bound to a netdev: the first RoCE v2 GID holding an IPv4 address of that netdev.
pub fn nccl_settings(devices: &[DeviceReport]) -> Vec<NcclSettings> {
    let mut out = Vec::new();
    for d in devices {
        for p in &d.ports {
            let Some(ifname) = &p.netdev else { continue };
            let gid = p
                .gids
                .iter()
                .filter(|g| g.kind.as_deref() == Some("RoCE v2") && g.ndev.as_deref().is_none_or(|n| n == ifname))
                .find_map(|g| g.gid.to_ipv4_mapped().map(|a| (g.index, a)));
            if let Some((gid_index, address)) = gid {
                out.push(NcclSettings {
                    ifname: ifname.clone(),
                    address,
                    hca: format!("{}:{}", d.name, p.port),
                    gid_index,
                });
            }
        }
    }
    out
}

/// The NCCL settings of the namespace at `netns` as `doctor --netns` reports them: the node daemon's NRI plugin
/// hands a container these, so the two cannot disagree.
pub fn nccl_in_netns(sysfs: &Sysfs, netns: &str) -> Result<Vec<NcclSettings>, String> {
    let ns = Netns::open(netns).map_err(|e| format!("opening the namespace {netns}: {e}"))?;
    let mut warnings = Vec::new();
    let rdma = rdma_report(sysfs, Some(&ns), &mut warnings);
    if !rdma.available {
        let why: Vec<String> = warnings.into_iter().map(|w| w.message).collect();
        return Err(format!("reading the RDMA devices of {netns}: {}", why.join("; ")));
    }
    Ok(nccl_settings(&rdma.devices))
}

#[derive(Debug, Serialize)]
pub struct PfReport {
    pub name: String,
    pub pci: String,
    pub numvfs: u32,
    pub totalvfs: u32,
    pub operstate: Option<String>,
    pub speed_mbps: Option<i64>,
    pub vfs: Vec<VfReport>,
}

#[derive(Debug, Serialize)]
pub struct VfReport {
    pub index: u32,
    pub pci: String,
    pub netdev: Option<String>,
    pub driver: Option<String>,
    pub state: Option<VfState>,
    pub rdma_device: Option<String>,
    pub attached: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct RdmaReport {
    pub available: bool,
    pub netns_mode: Option<NetnsMode>,
    pub devices: Vec<DeviceReport>,
}

#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub name: String,
    pub index: u32,
    pub node_type: String,
    pub protocol: Option<String>,
    pub ports: Vec<PortReport>,
}

#[derive(Debug, Serialize)]
pub struct PortReport {
    pub port: u32,
    pub state: String,
    pub phys_state: String,
    pub link_layer: Option<String>,
    pub netdev: Option<String>,
    pub gids: Vec<Gid>,
}

fn node_type(t: Option<u8>) -> String {
    match t {
        Some(1) => "CA",
        Some(2) => "switch",
        Some(3) => "router",
        Some(4) => "RNIC",
        Some(5) | Some(6) => "usNIC",
        _ => "unknown",
    }
    .to_string()
}

fn port_state(s: Option<u8>) -> String {
    match s {
        Some(1) => "DOWN",
        Some(2) => "INIT",
        Some(3) => "ARMED",
        Some(4) => "ACTIVE",
        Some(5) => "ACTIVE_DEFER",
        _ => "unknown",
    }
    .to_string()
}

fn phys_state(s: Option<u8>) -> String {
    match s {
        Some(1) => "SLEEP",
        Some(2) => "POLLING",
        Some(3) => "DISABLED",
        Some(4) => "TRAINING",
        Some(5) => "LINK_UP",
        Some(6) => "ERROR_RECOVERY",
        Some(7) => "PHY_TEST",
        _ => "unknown",
    }
    .to_string()
}

fn read_num(p: std::path::PathBuf) -> Option<i64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Builds the report. `--netns` switches the RDMA part to a pod's view, and leaves the host-side questions out.
pub fn report(opts: &Options) -> Report {
    let netns = opts.netns.as_deref();
    let paths = Paths::of_process();
    let sysfs = paths.sysfs();
    let mut warnings = Vec::new();
    let mut blockers = Vec::new();
    let records: Vec<Attachment> = match paths.store_read_only().and_then(|s| s.all()) {
        Ok(r) => r,
        Err(e) => {
            blockers.push(Finding::new(
                "state-dir-unusable",
                format!("{e}: ADD cannot record attachments (check /var/lib/cni permissions)"),
            ));
            Vec::new()
        }
    };
    match crate::policy::Policy::load(&paths.policy) {
        Ok(None) => warnings.push(Finding::new(
            "no-node-policy",
            format!(
                "no node policy at {}: any NetworkAttachmentDefinition may use any VF of this node, on any VLAN \
             (docs/security.md)",
                paths.policy.display()
            ),
        )),
        Ok(Some(_)) => {}
        Err(e) => {
            blockers.push(Finding::new("node-policy-invalid", format!("{e}: every ADD is refused until it is fixed")))
        }
    }
    let pfs = if netns.is_none() { pf_reports(&sysfs, &records, &mut warnings) } else { Vec::new() };
    if netns.is_none() {
        if pfs.is_empty() {
            blockers.push(Finding::new(
                "no-sriov-pf",
                "no SR-IOV PF found (no netdev with device/sriov_totalvfs): nothing to attach",
            ));
        } else if pfs.iter().all(|p| p.numvfs == 0) {
            blockers.push(Finding::new(
                "no-vfs-enabled",
                format!(
                    "no VFs enabled: echo N > /sys/class/net/{}/device/sriov_numvfs (N ≤ {})",
                    pfs[0].name, pfs[0].totalvfs
                ),
            ));
        }
        let mut host = Host::open_read_only(&paths).ok();
        for a in &records {
            if !a.complete {
                let begun = match a.journal.last() {
                    None => "no step begun".to_string(),
                    Some(s) => {
                        let n = a.journal.len();
                        format!("{n} step{} begun, the last: {}", if n == 1 { "" } else { "s" }, s.describe())
                    }
                };
                warnings.push(Finding::new(
                    "interrupted-add",
                    format!(
                        "VF {} has the record of an interrupted ADD ({}/{}; {begun}): the runtime's DEL or GC will \
                     undo it",
                        a.pci, a.container_id, a.ifname
                    ),
                ));
            }
            match host.as_mut().map(|h| whereabouts(h, a)) {
                Some(Ok(Whereabouts::Orphan)) => warnings.push(Finding::new(
                    "orphan-vf",
                    format!(
                    "VF {} is recorded for {}/{} but is back on the host: an orphan; `sriov-rdma gc` reclaims it (so \
                     does the next ADD that wants it)",
                    a.pci, a.container_id, a.ifname
                ),
                )),
                Some(Ok(Whereabouts::Held)) => warnings.push(Finding::new(
                    "netns-held",
                    format!(
                    "VF {} is recorded for {}/{}, whose namespace path {} is gone, but the VF has not come back: a \
                     process still holds the namespace (find it: `lsns -t net`); it is reclaimed once it is back",
                    a.pci, a.container_id, a.ifname, a.netns
                ),
                )),
                _ => {}
            }
        }
        if let Ok(store) = paths.store_read_only() {
            for bad in store.unreadable() {
                warnings.push(Finding::new("record-unreadable", bad.to_string()));
            }
        }
    }
    let view = netns.unwrap_or("host").to_string();
    let rdma = match netns {
        None => rdma_report(&sysfs, None, &mut warnings),
        Some(p) => match Netns::open(p) {
            Ok(ns) => rdma_report(&sysfs, Some(&ns), &mut warnings),
            Err(e) => {
                blockers.push(Finding::new("netns-unopenable", format!("opening --netns {p}: {e}")));
                RdmaReport { available: false, netns_mode: None, devices: Vec::new() }
            }
        },
    };
    let nccl = nccl_settings(&rdma.devices);
    let (mut link, mut bandwidth, mut resource) = (None, None, None);
    if netns.is_none() {
        let mut watched = Vec::new();
        for pf in &pfs {
            watched.push(link::Watched { name: pf.name.clone(), role: "PF".into() });
            for v in &pfs_vf_netdevs(pf) {
                watched.push(link::Watched { name: v.1.clone(), role: format!("VF {} of {}", v.0, pf.name) });
            }
        }
        link = Some(link::report(&sysfs, &watched, opts.interval, &mut warnings));
        let mut bw = bandwidth::BandwidthReport::default();
        for pf in &pfs {
            if let Ok(pci) = crate::model::PciAddr::parse(&pf.pci) {
                let r = bandwidth::PfRef { name: &pf.name, pci: &pci };
                bw.pfs.push(bandwidth::pf_report(&sysfs, &r, opts.cpus.as_deref(), &mut warnings));
            }
        }
        bw.ports = bandwidth::port_mtus(&sysfs, &mut warnings);
        if let Some(peer) = &opts.bandwidth_peer {
            bw.test = Some(bandwidth_test(peer, opts.rdma_device.as_deref(), &nccl, &sysfs));
        }
        bandwidth = Some(bw);
        let node_vfs: Vec<crate::model::PciAddr> =
            pfs.iter().flat_map(|p| p.vfs.iter().filter_map(|v| crate::model::PciAddr::parse(&v.pci).ok())).collect();
        let dry_run = opts
            .device_plugin_config
            .as_ref()
            .map(|c| resource::DryRun { config: c.clone(), kubelet_dir: opts.kubelet_dir.clone() });
        let ropts = resource::Options {
            kubelet_dir: opts.kubelet_dir.clone(),
            config: opts.config.as_deref(),
            device: opts.device.as_deref(),
            advertised: dry_run.as_ref().map(|d| d as &dyn resource::Advertised),
        };
        resource = Some(resource::report(&paths, &records, &node_vfs, &ropts, &mut warnings, &mut blockers));
    }
    Report { schema: SCHEMA, view, pfs, rdma, nccl, link, bandwidth, resource, warnings, blockers }
}

/// (VF index, netdev) of each VF of a PF that has a netdev in the host namespace.
fn pfs_vf_netdevs(pf: &PfReport) -> Vec<(u32, String)> {
    pf.vfs.iter().filter_map(|v| Some((v.index, v.netdev.clone()?))).collect()
}

/// `--bandwidth PEER` from the port `--rdma-device` names (`dev` or `dev:port`), else the first port with an IPv4
/// RoCE v2 GID; the line rate beside it is the port's `rate`, else its netdev's speed.
fn bandwidth_test(peer: &str, want: Option<&str>, nccl: &[NcclSettings], sysfs: &Sysfs) -> bandwidth::BandwidthTest {
    let pick = nccl.iter().find(|n| match want {
        None => true,
        Some(w) => n.hca == w || n.hca.split(':').next() == Some(w),
    });
    let hca = pick.and_then(|n| {
        let (dev, port) = n.hca.split_once(':')?;
        Some((dev.to_string(), port.parse::<u32>().ok()?, n.gid_index, n.ifname.clone()))
    });
    let line = hca.as_ref().and_then(|(dev, port, _, ifname)| {
        sysfs.ib_port_attr(dev, *port, "rate").and_then(|r| bandwidth::parse_rate(&r)).or_else(|| {
            fs::read_to_string(sysfs.root.join("class/net").join(ifname).join("speed"))
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| *s > 0.0)
                .map(|s| s / 1000.0)
        })
    });
    bandwidth::run_test(peer, hca.as_ref().map(|(d, p, g, _)| (d.as_str(), *p, *g)), line, None)
}

/// The node's SR-IOV PFs with a netdev here, by name, from the node inventory; each VF's row from its PF's VF table.
fn pf_reports(sysfs: &Sysfs, records: &[Attachment], warnings: &mut Vec<Finding>) -> Vec<PfReport> {
    let mut pfs: Vec<(String, inventory::Pf)> =
        Inventory::scan(sysfs).pfs.into_iter().filter_map(|p| Some((p.netdev.clone()?, p))).collect();
    pfs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut route = RouteSocket::new().ok();
    let mut out = Vec::new();
    for (name, pf) in pfs {
        let speed_mbps = read_num(sysfs.root.join("class/net").join(&name).join("speed")).filter(|s| *s > 0);
        let table = route
            .as_mut()
            .and_then(|r| r.link_by_name(&name).ok().flatten().map(|l| l.index).and_then(|i| r.vf_table(i).ok()))
            .unwrap_or_default();
        let mut vfs = Vec::new();
        for vf in &pf.vfs {
            let index = vf.index;
            let attached = records
                .iter()
                .find(|a| a.pci == vf.pci)
                .map(|a| format!("{}/{} ({})", &a.container_id[..a.container_id.len().min(12)], a.ifname, a.network));
            let state = vf_setting::state_from_table(&table, index);
            if let Some(st) = &state {
                if st.spoofchk == Some(false) && attached.is_some() {
                    warnings.push(Finding::new("spoofchk-off", format!(
                        "VF {index} of {name} is attached with spoofchk off: a pod can send with any MAC; set \"spoofchk\": \"on\""
                    )));
                }
            }
            vfs.push(VfReport {
                index,
                pci: vf.pci.to_string(),
                netdev: vf.netdev.clone(),
                driver: vf.driver.clone(),
                state,
                // Hardware RDMA functions sit under the VF's PCI device.
                rdma_device: vf.rdma.iter().find(|d| d.binding == RdmaBinding::Pci).map(|d| d.name.clone()),
                attached,
            });
        }
        if pf.operstate.as_deref() == Some("down") {
            warnings.push(Finding::new(
                "pf-down",
                format!("PF {name} is down: its VFs have no link; ip link set {name} up"),
            ));
        }
        out.push(PfReport {
            name,
            pci: pf.pci.to_string(),
            numvfs: pf.num_vfs,
            totalvfs: pf.total_vfs,
            operstate: pf.operstate,
            speed_mbps,
            vfs,
        });
    }
    out
}

fn rdma_report(sysfs: &Sysfs, ns: Option<&Netns>, warnings: &mut Vec<Finding>) -> RdmaReport {
    let mut sock = match rdma::open(ns) {
        Ok(Some(s)) => s,
        Ok(None) => {
            warnings.push(Finding::new(
                "no-rdma-subsystem",
                "no RDMA subsystem (ib_core not loaded): pods get netdevs only; rdma \"isolated\" fails",
            ));
            return RdmaReport { available: false, netns_mode: None, devices: Vec::new() };
        }
        Err(e) => {
            warnings.push(Finding::new("rdma-netlink-error", format!("RDMA netlink: {e}")));
            return RdmaReport { available: false, netns_mode: None, devices: Vec::new() };
        }
    };
    let mode = sock.netns_mode().ok();
    match mode {
        Some(NetnsMode::Shared) => warnings.push(Finding::new(
            "rdma-netns-shared",
            "RDMA netns mode is shared: every pod sees every RDMA device; rdma \"auto\" leaves devices in place and \
             \"isolated\" fails. To isolate: rdma system set netns exclusive (while no other netns exists) or \
             options ib_core netns_mode=0",
        )),
        Some(NetnsMode::Exclusive) => {}
        None => warnings.push(Finding::new("rdma-netns-mode-unknown", "could not read the RDMA netns mode")),
    }
    let devs: Vec<(RdmaDevice, Vec<RdmaPort>)> = sock
        .devices()
        .unwrap_or_default()
        .into_iter()
        .map(|d| {
            let ports = sock.ports(d.index).unwrap_or_default();
            (d, ports)
        })
        .collect();
    // Link layers and GID tables of every port, read in one pass over the view's sysfs (one mount for a pod).
    let read = |s: &Sysfs| -> Vec<Vec<(Option<String>, Vec<Gid>)>> {
        devs.iter()
            .map(|(d, ports)| {
                ports.iter().map(|p| (s.ib_port_attr(&d.name, p.port, "link_layer"), s.gids(&d.name, p.port))).collect()
            })
            .collect()
    };
    let tables = match ns {
        None => read(sysfs),
        Some(ns) => sysfs.in_netns(ns, read).unwrap_or_default(),
    };
    let mut devices = Vec::new();
    for (n, (d, ports)) in devs.into_iter().enumerate() {
        let port_sysfs = tables.get(n).cloned().unwrap_or_default();
        let mut reports = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let (link_layer, gids) = port_sysfs.get(i).cloned().unwrap_or_default();
            if p.state != Some(4) {
                warnings.push(Finding::new(
                    "rdma-port-not-active",
                    format!(
                        "RDMA device {} port {} is {}: check the cable/link of its netdev",
                        d.name,
                        p.port,
                        port_state(p.state)
                    ),
                ));
            }
            reports.push(PortReport {
                port: p.port,
                state: port_state(p.state),
                phys_state: phys_state(p.phys_state),
                link_layer,
                netdev: p.ndev_name.clone(),
                gids,
            });
        }
        devices.push(DeviceReport {
            name: d.name,
            index: d.index,
            node_type: node_type(d.node_type),
            protocol: d.protocol,
            ports: reports,
        });
    }
    RdmaReport { available: true, netns_mode: mode, devices }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn on_off(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "-",
    }
}

/// The human table.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    if r.view == "host" {
        let _ = writeln!(o, "SR-IOV PFs");
        if r.pfs.is_empty() {
            let _ = writeln!(o, "  (none)");
        }
        for pf in &r.pfs {
            let speed = pf.speed_mbps.map(|s| format!("{s}Mb/s")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                o,
                "  {}  {}  VFs {}/{}  link {}  speed {}",
                pf.name,
                pf.pci,
                pf.numvfs,
                pf.totalvfs,
                opt(&pf.operstate),
                speed
            );
            let _ = writeln!(
                o,
                "    {:<3} {:<13} {:<22} {:<17} {:>4} {:>3} {:<8} {:<5} {:<8} {:<8} ATTACHED",
                "VF", "PCI", "NETDEV (DRIVER)", "ADMIN MAC", "VLAN", "QOS", "SPOOFCHK", "TRUST", "MAX_TX", "RDMA"
            );
            for v in &pf.vfs {
                let st = v.state.clone().unwrap_or_default();
                let dev = format!("{} ({})", opt(&v.netdev), opt(&v.driver));
                let _ = writeln!(
                    o,
                    "    {:<3} {:<13} {:<22} {:<17} {:>4} {:>3} {:<8} {:<5} {:<8} {:<8} {}",
                    v.index,
                    v.pci,
                    dev,
                    v.state.as_ref().and_then(|s| s.mac).map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
                    st.vlan,
                    st.qos,
                    on_off(st.spoofchk),
                    on_off(st.trust),
                    if st.max_tx_rate == 0 { "-".to_string() } else { format!("{}Mb", st.max_tx_rate) },
                    opt(&v.rdma_device),
                    opt(&v.attached)
                );
            }
        }
    }
    let mode = match r.rdma.netns_mode {
        Some(NetnsMode::Shared) => "shared",
        Some(NetnsMode::Exclusive) => "exclusive",
        None => "-",
    };
    let _ = writeln!(o, "\nRDMA devices ({} view, netns mode {mode})", r.view);
    if !r.rdma.available {
        let _ = writeln!(o, "  (no RDMA subsystem)");
    } else if r.rdma.devices.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for d in &r.rdma.devices {
        for p in &d.ports {
            let _ = writeln!(
                o,
                "  {} port {}  {}  {}/{}  link_layer {}  netdev {}",
                d.name,
                p.port,
                d.node_type,
                p.state,
                p.phys_state,
                opt(&p.link_layer),
                opt(&p.netdev)
            );
            for g in &p.gids {
                let _ = writeln!(
                    o,
                    "    GID {:<3} {:<40} {:<11} {}",
                    g.index,
                    g.gid.to_string(),
                    opt(&g.kind),
                    opt(&g.ndev)
                );
            }
        }
    }
    if !r.nccl.is_empty() {
        let _ = writeln!(o, "\nNCCL settings ({} view; RoCE v2 GID of each interface's IPv4 address)", r.view);
        for n in &r.nccl {
            let _ = writeln!(o, "  {} ({}): {}", n.ifname, n.address, n.env());
        }
    }
    if let Some(l) = &r.link {
        link::render(l, &mut o);
    }
    if let Some(b) = &r.bandwidth {
        bandwidth::render(b, &mut o);
    }
    if let Some(res) = &r.resource {
        resource::render(res, &mut o);
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(o, "  - {w}");
        }
    }
    if !r.blockers.is_empty() {
        let _ = writeln!(o, "\nBlocking ADD (a pod cannot get a VF)");
        for b in &r.blockers {
            let _ = writeln!(o, "  - {b}");
        }
    }
    o
}

pub const USAGE: &str = "usage: sriov-rdma doctor [--json] [--netns PATH] [--interval SECS] [--cpus LIST] \
[--bandwidth PEER [--rdma-device DEV[:PORT]]] [--kubelet-dir DIR] [--config FILE [--device PCI]] \
[--device-plugin-config FILE]";

/// Parses doctor's arguments; `Err` carries the message for a bad one.
pub fn parse_args(args: &[String]) -> Result<(bool, Options), String> {
    let mut json = false;
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().cloned().ok_or_else(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--json" => json = true,
            "--netns" => o.netns = Some(value("a path")?),
            "--interval" => {
                let v = value("a number of seconds")?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| (0.0..=60.0).contains(s))
                    .ok_or_else(|| format!("--interval {v:?}: a number of seconds from 0 to 60"))?;
                o.interval = std::time::Duration::from_secs_f64(secs);
            }
            "--cpus" => {
                let v = value("a CPU list (0-7,16)")?;
                o.cpus = Some(
                    bandwidth::parse_cpu_list(&v).ok_or_else(|| format!("--cpus {v:?}: not a CPU list like 0-7,16"))?,
                );
            }
            "--bandwidth" => o.bandwidth_peer = Some(value("the peer's address")?),
            "--rdma-device" => o.rdma_device = Some(value("an RDMA device name")?),
            "--kubelet-dir" => o.kubelet_dir = value("a directory")?.into(),
            "--config" => o.config = Some(value("a file")?.into()),
            "--device-plugin-config" => o.device_plugin_config = Some(value("a file")?.into()),
            "--device" => {
                let v = value("a VF PCI address")?;
                crate::model::PciAddr::parse(&v).map_err(|e| format!("--device {v:?}: {e}"))?;
                o.device = Some(v);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.device.is_some() && o.config.is_none() {
        return Err("--device goes with --config FILE".into());
    }
    Ok((json, o))
}

/// `sriov-rdma doctor …`; returns the exit status: 0, 1 when something blocks a pod (or the bandwidth test
/// asked for could not run), 2 for bad arguments.
pub fn main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return 0;
    }
    let (json, opts) = match parse_args(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sriov-rdma doctor: {e}\n{USAGE}");
            return 2;
        }
    };
    let r = report(&opts);
    if json {
        match serde_json::to_string_pretty(&r) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("sriov-rdma doctor: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", render(&r));
    }
    let test_failed = r.bandwidth.as_ref().and_then(|b| b.test.as_ref()).is_some_and(|t| t.error.is_some());
    i32::from(!r.blockers.is_empty() || test_failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: u32, gid: &str, kind: &str, ndev: &str) -> Gid {
        Gid { index, gid: gid.parse().unwrap(), kind: Some(kind.into()), ndev: Some(ndev.into()) }
    }

    fn port(netdev: Option<&str>, gids: Vec<Gid>) -> PortReport {
        PortReport {
            port: 1,
            state: "ACTIVE".into(),
            phys_state: "LINK_UP".into(),
            link_layer: Some("Ethernet".into()),
            netdev: netdev.map(str::to_string),
            gids,
        }
    }

    #[test]
    fn nccl_settings_take_the_roce_v2_gid_of_the_interface_ipv4_address() {
        let devices = vec![
            DeviceReport {
                name: "mlx5_3".into(),
                index: 3,
                node_type: "CA".into(),
                protocol: None,
                ports: vec![port(
                    Some("net1"),
                    vec![
                        gid(0, "fe80::1", "RoCE v2", "net1"),
                        gid(1, "fe80::1", "IB/RoCE v1", "net1"),
                        gid(2, "::ffff:10.1.0.2", "IB/RoCE v1", "net1"),
                        gid(3, "::ffff:10.1.0.2", "RoCE v2", "net1"),
                    ],
                )],
            },
            // Another pod's device in shared mode: no netdev in this view, so no settings.
            DeviceReport {
                name: "rxe9".into(),
                index: 9,
                node_type: "CA".into(),
                protocol: None,
                ports: vec![port(None, vec![gid(1, "::ffff:10.1.0.9", "RoCE v2", "net1")])],
            },
        ];
        let n = nccl_settings(&devices);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].env(), "NCCL_IB_HCA=mlx5_3:1 NCCL_IB_GID_INDEX=3 NCCL_SOCKET_IFNAME=net1");
        assert_eq!(n[0].address.to_string(), "10.1.0.2");
        assert!(nccl_settings(&[]).is_empty());
    }
}
