//! ADD and DEL. ADD writes the record, then changes things; any failure runs the same undo DEL runs.
//!
//! ADD: VF settings on the PF → netdev into the pod (moved and renamed in one message) → MTU, MAC, up →
//! IPAM → addresses and routes. DEL: netdev back under its name → PF settings restored → name, MAC, MTU,
//! up state restored on the host → IPAM DEL → record removed (kept if anything really failed).

use super::ipam::{self, Target};
use super::rdma;
use super::state::{Attachment, Store, VfLock};
use crate::cni::config::{NetConf, RdmaPolicy, VfSource};
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Code, IoContext};
use crate::cni::result::{AttachResult, Interface};
use crate::cni::types::{Mac, PciAddr};
use crate::kernel::link::{Link, RouteSocket};
use crate::kernel::netlink::{errno, Route};
use crate::kernel::netns::Netns;
use crate::kernel::rdma::{self as kernel_rdma, RdmaSocket};
use crate::kernel::sysfs::{Sysfs, Vf};
use crate::kernel::vf::{self, NetlinkPf, Pf, PfControl, VfSetting, VfState};
use netlink_packet_route::link::LinkAttribute;
use std::time::{Duration, Instant};

/// How long the host waits for a VF netdev to reappear: from a destroyed pod namespace, or after a rebind.
const RETURN_WAIT: Duration = Duration::from_secs(5);

/// The host side: sysfs, the record store, the host namespace and a route socket in it.
pub struct Host {
    pub sysfs: Sysfs,
    pub store: Store,
    pub ns: Netns,
    pub route: RouteSocket,
}

impl Host {
    pub fn open() -> CniResult<Host> {
        Ok(Host {
            sysfs: Sysfs::from_env(),
            store: Store::open()?,
            ns: Netns::current().ctx(|| "opening the host network namespace".to_string())?,
            route: RouteSocket::new().ctx(|| "opening a netlink socket in the host namespace".to_string())?,
        })
    }

    /// The PF netdev as netlink addresses it.
    pub fn pf(&mut self, name: &str) -> CniResult<Pf> {
        let link = self
            .route
            .link_by_name(name)
            .ctx(|| format!("looking up PF {name}"))?
            .ok_or_else(|| CniError::io(format!("PF {name} is not in the host namespace")))?;
        Ok(Pf { name: name.to_string(), index: link.index })
    }
}

/// The pod namespace and a route socket opened inside it, or `None` when it is gone.
pub struct Pod {
    pub ns: Netns,
    pub route: RouteSocket,
}

impl Pod {
    pub fn open(path: &str) -> std::io::Result<Pod> {
        let ns = Netns::open(path)?;
        let route = ns.socket::<Route>()?;
        Ok(Pod { ns, route })
    }
}

fn attached_err(a: &Attachment) -> CniError {
    CniError::io(format!(
        "VF {} is already attached to container {} as {} (network {})",
        a.pci, a.container_id, a.ifname, a.network
    ))
}

/// Picks and locks the VF: the given address, or the lowest-numbered free VF of `pfName`.
fn select_vf(host: &mut Host, conf: &NetConf) -> CniResult<(Vf, VfLock)> {
    match &conf.source {
        None => {
            Err(CniError::config("no VF given: set deviceID (or runtimeConfig.deviceID, CNI_ARGS deviceID) or pfName"))
        }
        Some(VfSource::Device(pci)) => {
            let vf = host.sysfs.vf(pci)?;
            let lock = host.store.lock(pci)?;
            if let Some(a) = host.store.load(pci)? {
                if !is_orphan(&a) {
                    return Err(attached_err(&a));
                }
                return Ok((vf_after_reclaim(host, pci, &a)?, lock));
            }
            Ok((vf, lock))
        }
        Some(VfSource::Pf(pf)) => {
            let pf_pci = host.sysfs.pf_pci(pf)?;
            let vfs = host.sysfs.vfs_of(&pf_pci).ctx(|| format!("listing the VFs of pfName {pf}"))?;
            for (_, pci) in &vfs {
                let Some(lock) = host.store.try_lock(pci)? else {
                    continue;
                };
                let vf = match host.store.load(pci)? {
                    None => match host.sysfs.vf(pci) {
                        Ok(vf) => vf,
                        Err(_) => continue,
                    },
                    Some(a) if is_orphan(&a) => match vf_after_reclaim(host, pci, &a) {
                        Ok(vf) => vf,
                        Err(e) => {
                            crate::warn!("{e}");
                            continue;
                        }
                    },
                    Some(_) => continue,
                };
                let Some(netdev) = &vf.netdev else { continue };
                if host.route.link_by_name(netdev).ctx(|| format!("looking up {netdev}"))?.is_some() {
                    return Ok((vf, lock));
                }
            }
            Err(CniError::io(format!(
                "pfName {pf}: no free VF among its {} VFs (all attached, locked, or without a netdev in the host namespace)",
                vfs.len()
            )))
        }
    }
}

/// A record whose pod namespace path no longer exists: the kernel has handed the VF back and no DEL came (node
/// crash, runtime bug, `ip netns del`). A path that exists but cannot be opened never makes an orphan.
pub fn is_orphan(rec: &Attachment) -> bool {
    !rec.netns.is_empty()
        && matches!(std::fs::symlink_metadata(&rec.netns), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// The VF as sysfs shows it after a reclaim, with the netdev name the reclaim left it under.
fn vf_after_reclaim(host: &mut Host, pci: &PciAddr, a: &Attachment) -> CniResult<Vf> {
    let name = reclaim(host, a)?;
    let mut vf = host.sysfs.vf(pci)?;
    if name.is_some() {
        vf.netdev = name;
    }
    Ok(vf)
}

/// Undoes an orphan's record exactly as its DEL would have, with the configuration and CNI_PATH its ADD ran
/// with (for IPAM DEL). The caller holds the VF's lock. Returns the VF netdev's host name.
pub fn reclaim(host: &mut Host, rec: &Attachment) -> CniResult<Option<String>> {
    crate::warn!(
        "VF {}: reclaiming it from {}/{} (network {}), whose namespace {} is gone without a DEL",
        rec.pci,
        rec.container_id,
        rec.ifname,
        rec.network,
        rec.netns
    );
    let raw = rec.ipam_config.clone().unwrap_or_else(|| {
        serde_json::json!({"cniVersion": "1.0.0", "name": rec.network, "type": "sriov-rdma"}).to_string()
    });
    let context = || format!("reclaiming orphaned VF {} of {}/{}", rec.pci, rec.container_id, rec.ifname);
    let conf = NetConf::parse(raw.as_bytes(), &Default::default()).map_err(|e| e.context(context()))?;
    let env = CniEnv {
        command: crate::cni::env::Command::Del,
        container_id: rec.container_id.clone(),
        netns: rec.netns.clone(),
        ifname: rec.ifname.clone(),
        args: Default::default(),
        path: rec.cni_path.clone(),
    };
    let done = release(host, &conf, &env, rec, &rec.netns, &Target::of_env(&env)).map_err(|e| e.context(context()))?;
    let name = done.host_netdev.clone();
    finish(&host.store, rec, done).map_err(|e| e.context(context()))?;
    Ok(name)
}

pub fn add(conf: &NetConf, env: &CniEnv) -> CniResult<AttachResult> {
    let mut host = Host::open()?;
    let mut pod = Pod::open(&env.netns).ctx(|| format!("opening CNI_NETNS {}", env.netns))?;
    if let Some(a) = host.store.find(&conf.name, &env.container_id, &env.ifname)? {
        return Err(attached_err(&a));
    }
    let (vf, _lock) = select_vf(&mut host, conf)?;
    let pf = host.pf(&vf.pf).map_err(|e| e.context(format!("VF {}", vf.pci)))?;
    let vf_original =
        NetlinkPf(&mut host.route).vf_state(&pf, vf.index).ctx(|| format!("reading the VF table of PF {}", pf.name))?;
    let plan = vf::planned(&conf.vf, vf_original.as_ref().unwrap_or(&VfState::default()));
    if vf_original.is_none() {
        if let Some(s) = plan.first() {
            return Err(CniError::io(format!(
                "cannot apply {s}: PF {} reports no VF table, so the VF's settings could not be restored",
                pf.name
            )));
        }
    }
    let netdev = if vf.userspace() {
        None
    } else {
        let name = vf.netdev.as_deref().ok_or_else(|| {
            CniError::io(format!(
                "VF {} (driver {}) has no netdev in the host namespace; is it attached elsewhere?",
                vf.pci,
                vf.driver.as_deref().unwrap_or("none")
            ))
        })?;
        let link = host
            .route
            .link_by_name(name)
            .ctx(|| format!("looking up VF {} ({name})", vf.pci))?
            .ok_or_else(|| CniError::io(format!("VF {} netdev {name} is not in the host namespace", vf.pci)))?;
        if pod.route.link_by_name(&env.ifname).ctx(|| format!("looking up {} in {}", env.ifname, env.netns))?.is_some()
        {
            return Err(CniError::io(format!("CNI_IFNAME {} is already taken in {}", env.ifname, env.netns)));
        }
        Some(link)
    };
    let (rdma, mut rdma_sock) = prepare_rdma(&mut host, conf, &vf, netdev.as_ref().map(|l| l.index))?;
    let mut rec = Attachment {
        network: conf.name.clone(),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        pci: vf.pci.clone(),
        pf: pf.name.clone(),
        pf_pci: vf.pf_pci.clone(),
        vf_index: vf.index,
        driver: vf.driver.clone(),
        vf_settings: conf.vf.clone(),
        vf_original,
        netdev,
        mtu: conf.mtu,
        complete: false,
        rdma,
        device_info: None,
        ipam_config: conf.ipam.as_ref().map(|_| String::from_utf8_lossy(&conf.raw).into_owned()),
        cni_path: env.path.clone(),
    };
    host.store.save(&rec)?;
    crate::info!(
        "ADD {}/{}: VF {} (PF {} VF {}) into {}",
        rec.container_id,
        rec.ifname,
        rec.pci,
        pf.name,
        vf.index,
        env.netns
    );

    let mut progress = Progress::default();
    let attached = attach(&mut host, &mut pod, conf, env, &mut rec, &pf, &plan, rdma_sock.as_mut(), &mut progress)
        .and_then(|result| {
            // Not complete until the record says so: a record that cannot be written is a failed ADD.
            rec.complete = true;
            host.store.save(&rec).map(|_| result).inspect_err(|_| rec.complete = false)
        });
    match attached {
        Ok(result) => Ok(result),
        Err(e) => {
            crate::warn!("ADD {}/{} failed, rolling back: {e}", rec.container_id, rec.ifname);
            let undo = Undo { netdev_moved: progress.moved, settings: progress.settings, rdma_moved: progress.rdma };
            let mut undo = detach(&mut host, Some(&mut pod), &rec, undo).errors;
            if progress.ipam_started {
                if let Err(del) = ipam::exec(conf, env, "DEL", &Target::of_env(env)) {
                    // An IPAM ADD that failed allocated nothing to hold the VF for.
                    if progress.ipam_added {
                        undo.push(del.to_string());
                    } else {
                        crate::warn!("IPAM DEL after the failed IPAM ADD: {del}");
                    }
                }
            }
            if undo.is_empty() {
                host.store.remove(&rec.pci)?;
                Err(e)
            } else {
                Err(e.with_details(format!("rollback incomplete, DEL will retry: {}", vf::join(&undo))))
            }
        }
    }
}

/// How far ADD got, so a rollback undoes exactly that.
#[derive(Default)]
struct Progress {
    /// How many of the planned PF-side settings the PF took.
    settings: usize,
    rdma: bool,
    moved: bool,
    ipam_started: bool,
    ipam_added: bool,
}

/// What `detach` has to undo. DEL and GC undo everything; a rollback only what ADD did.
#[derive(Clone, Copy)]
pub struct Undo {
    /// Look for the netdev in the pod (false when it never left the host).
    pub netdev_moved: bool,
    /// How many of the planned PF-side settings to restore (the first ones, in reverse).
    pub settings: usize,
    /// Move the RDMA device back if the pod still has it.
    pub rdma_moved: bool,
}

impl Undo {
    pub const ALL: Undo = Undo { netdev_moved: true, settings: usize::MAX, rdma_moved: true };
}

/// Discovers the VF's RDMA device and applies the `rdma` policy; fails (for "isolated") before anything changes.
fn prepare_rdma(
    host: &mut Host,
    conf: &NetConf,
    vf: &Vf,
    ifindex: Option<u32>,
) -> CniResult<(Option<rdma::RdmaRecord>, Option<RdmaSocket>)> {
    if conf.rdma == RdmaPolicy::Off {
        return Ok((None, None));
    }
    let mut sock = kernel_rdma::open(None).ctx(|| "opening RDMA netlink".to_string())?;
    let mode = match sock.as_mut() {
        Some(s) => Some(s.netns_mode().ctx(|| "reading the RDMA netns mode".to_string())?),
        None => None,
    };
    let found = rdma::discover(&host.sysfs, vf, ifindex, sock.as_mut())
        .ctx(|| format!("finding the RDMA device of VF {}", vf.pci))?;
    let rec = match rdma::decide(conf.rdma, &vf.pci, found, mode)? {
        rdma::Decision::Skip(why) => {
            crate::info!("VF {}: {why}", vf.pci);
            None
        }
        rdma::Decision::Leave(device, why) => {
            crate::info!("VF {}: {why}", vf.pci);
            Some(rdma::RdmaRecord { device, moved: false, gids: Vec::new() })
        }
        // Recorded as moved before the move: DEL moves back only what the pod really has.
        rdma::Decision::Move(device) => Some(rdma::RdmaRecord { device, moved: true, gids: Vec::new() }),
    };
    Ok((rec, sock))
}

#[allow(clippy::too_many_arguments)]
fn attach(
    host: &mut Host,
    pod: &mut Pod,
    conf: &NetConf,
    env: &CniEnv,
    rec: &mut Attachment,
    pf: &Pf,
    plan: &[vf::VfSetting],
    mut rdma_sock: Option<&mut RdmaSocket>,
    progress: &mut Progress,
) -> CniResult<AttachResult> {
    if rec.vf_original.is_some() {
        vf::apply_all(&mut NetlinkPf(&mut host.route), pf, rec.vf_index, plan, &mut progress.settings)?;
    }
    if rec.vf_settings.guid.is_some() && rec.driver.as_deref() == Some("mlx5_core") {
        refresh_after_rebind(host, rec, rdma_sock.as_deref_mut())?;
    }
    if let (Some(mac), Some(_)) = (rec.vf_settings.mac, &rec.netdev) {
        follow_admin_mac(host, rec, mac)?;
    }
    // The RDMA device goes first: then the netdev, which it may be bound to.
    if let (Some(r), Some(sock)) = (rec.rdma.as_mut().filter(|r| r.moved), rdma_sock) {
        r.moved = rdma::move_in(sock, conf.rdma, &r.device, pod.ns.fd(), &env.netns)?;
        progress.rdma = r.moved;
    }
    let mut iface = Interface {
        name: env.ifname.clone(),
        mac: None,
        mtu: None,
        sandbox: env.netns.clone(),
        pci_id: Some(rec.pci.to_string()),
    };
    // IPAM runs while the kernel moves the netdev (the move is mostly an RCU wait).
    let target = Target::of_env(env);
    let (moved, out) =
        ipam::around(conf, env, "ADD", &target, || move_into_pod(host, pod, conf, env, rec, &mut iface, progress))?;
    // Only an IPAM plugin that was started can have allocated something for the rollback to release.
    progress.ipam_started = conf.ipam.is_some();
    progress.ipam_added = progress.ipam_started && out.is_ok();
    let index = moved?;
    let out = out?;
    let mut result = if conf.ipam.is_some() { AttachResult::from_ipam(&out)? } else { AttachResult::default() };
    if let Some(index) = index {
        for ip in &result.ips {
            pod.route
                .add_address(index, ip.address)
                .ctx(|| format!("adding address {} to {} in {}", ip.address, env.ifname, env.netns))?;
        }
        for r in &result.routes {
            pod.route
                .add_route(index, r.dst, r.gw, r.priority)
                .ctx(|| format!("adding route {} to {} in {}", r.dst, env.ifname, env.netns))?;
        }
    }
    if let Some(r) = rec.rdma.as_mut() {
        r.gids = roce_gids(host, pod, conf, env, &r.device.name, &result)?;
    }
    if let Some(path) = &conf.device_info_file {
        let dev = rec.rdma.as_ref().map(|r| r.device.name.as_str());
        if rdma::write_device_info(path, &rec.pci, &rec.pf_pci, dev)
            .ctx(|| format!("writing the device-info file {}", path.display()))?
        {
            rec.device_info = Some(path.clone());
        }
    }
    result.interfaces = vec![iface];
    if result.dns.is_none() {
        result.dns = conf.dns.clone().filter(|d| d.as_object().is_some_and(|o| !o.is_empty()));
    }
    Ok(result)
}

/// The RoCE v2 GID index of each pod address on the VF's RDMA device, as the pod sees it. A missing GID fails
/// ADD under "isolated" and is logged under "auto"; an InfiniBand port (no RoCE) is skipped.
fn roce_gids(
    host: &Host,
    pod: &Pod,
    conf: &NetConf,
    env: &CniEnv,
    dev: &str,
    result: &AttachResult,
) -> CniResult<Vec<rdma::GidIndex>> {
    let ips: Vec<std::net::IpAddr> = result.ips.iter().map(|i| i.address.addr).collect();
    if ips.is_empty() {
        return Ok(Vec::new());
    }
    let lookup = rdma::lookup_gids(&host.sysfs, &pod.ns, dev, &ips, rdma::GID_WAIT)
        .ctx(|| format!("reading the GID table of {dev} in {}", env.netns))?;
    let found = match lookup {
        rdma::GidLookup::Found(found) => found,
        rdma::GidLookup::InfiniBand => return Ok(Vec::new()),
        rdma::GidLookup::NotVisible => {
            // e.g. soft-RoCE: the kernel destroys an rxe device when its netdev changes namespace.
            let msg = format!(
                "RDMA device {dev} is not visible from {} after the netdev moved (a software RDMA device such as \
                 rxe is destroyed when its netdev changes namespace)",
                env.netns
            );
            if conf.rdma == RdmaPolicy::Isolated {
                return Err(CniError::io(msg));
            }
            crate::info!("{msg}; no GID to look up");
            return Ok(Vec::new());
        }
    };
    for g in &found {
        crate::info!(
            "RoCE v2 GID index {} for {} on {dev} (NCCL_IB_HCA={dev}:1 NCCL_IB_GID_INDEX={} NCCL_SOCKET_IFNAME={})",
            g.index,
            g.address,
            g.index,
            env.ifname
        );
    }
    rdma::gid_verdict(conf.rdma, &ips, &found, dev, &env.netns)?;
    Ok(found)
}

/// mlx5 applies a new GUID only after the VF driver is rebound; the netdev and RDMA device come back with
/// new indexes (and possibly names), so both are looked up again. Exercised by fakes only: no mlx5 here.
fn refresh_after_rebind(host: &mut Host, rec: &mut Attachment, sock: Option<&mut RdmaSocket>) -> CniResult<()> {
    host.sysfs.rebind(&rec.pci).ctx(|| format!("rebinding VF {} to mlx5_core to apply its GUID", rec.pci))?;
    if let Some(name) = rec.netdev.as_ref().map(|l| l.name.clone()) {
        let link = find_host_netdev(host, rec, &name, RETURN_WAIT).map_err(CniError::io)?.ok_or_else(|| {
            CniError::io(format!("VF {} has no netdev {}s after the driver rebind", rec.pci, RETURN_WAIT.as_secs()))
        })?;
        if let Some(orig) = rec.netdev.as_mut() {
            orig.index = link.index;
        }
    }
    if let (Some(r), Some(sock)) = (rec.rdma.as_mut(), sock) {
        let name = host.sysfs.rdma_devices_of(&rec.pci).into_iter().next().unwrap_or(r.device.name.clone());
        let index = sock.devices().ctx(|| "listing RDMA devices".to_string())?.into_iter().find(|d| d.name == name);
        r.device = rdma::Found { name, index: index.map(|d| d.index) };
    }
    Ok(())
}

/// Moves the netdev into the pod under CNI_IFNAME, then MTU, MAC, up; returns its index there.
fn move_into_pod(
    host: &mut Host,
    pod: &mut Pod,
    conf: &NetConf,
    env: &CniEnv,
    rec: &Attachment,
    iface: &mut Interface,
    progress: &mut Progress,
) -> CniResult<Option<u32>> {
    let mut index = None;
    if let Some(orig) = &rec.netdev {
        host.route
            .move_link(orig.index, pod.ns.fd(), &env.ifname)
            .ctx(|| format!("moving VF {} ({}) into {} as {}", rec.pci, orig.name, env.netns, env.ifname))?;
        progress.moved = true;
        let l = pod
            .route
            .link_by_name(&env.ifname)
            .ctx(|| format!("looking up {} in {}", env.ifname, env.netns))?
            .ok_or_else(|| CniError::io(format!("VF {} vanished after the move into {}", rec.pci, env.netns)))?;
        let mut attrs = Vec::new();
        if let Some(mtu) = conf.mtu.filter(|m| *m != l.mtu) {
            attrs.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = conf.vf.mac.filter(|m| Some(*m) != l.mac) {
            attrs.push(LinkAttribute::Address(mac.0.to_vec()));
        }
        pod.route
            .set_link(l.index, attrs, Some(true))
            .ctx(|| format!("setting MTU/MAC and bringing up {} in {}", env.ifname, env.netns))?;
        iface.mac = conf.vf.mac.or(l.mac);
        iface.mtu = Some(conf.mtu.unwrap_or(l.mtu));
        index = Some(l.index);
    }
    Ok(index)
}

/// Whether a link is this record's VF: by the PCI address the kernel reports as its parent; a stand-in without
/// one (a veth in the tests) only by the ifindex it had, so a device that merely took the name is never touched.
fn is_ours(l: &Link, rec: &Attachment) -> bool {
    match &l.parent {
        Some(p) => p == rec.pci.as_str(),
        None => rec.netdev.as_ref().is_some_and(|n| n.index == l.index),
    }
}

/// The VF's netdev in the pod, whatever it is called there: by CNI_IFNAME, by its ifindex, by its PCI address.
fn find_in_pod(pod: &mut Pod, rec: &Attachment) -> std::io::Result<Option<Link>> {
    if let Some(l) = pod.route.link_by_name(&rec.ifname)?.filter(|l| is_ours(l, rec)) {
        return Ok(Some(l));
    }
    if let Some(orig) = &rec.netdev {
        if let Some(l) = pod.route.link_by_index(orig.index)?.filter(|l| is_ours(l, rec)) {
            return Ok(Some(l));
        }
    }
    Ok(pod.route.links()?.into_iter().find(|l| l.parent.as_deref() == Some(rec.pci.as_str())))
}

/// A host name for the VF when its own was taken meanwhile: `<pf>v<index>`, as udev would name it.
fn spare_name(rec: &Attachment) -> String {
    let mut n = format!("{}v{}", rec.pf, rec.vf_index);
    n.truncate(15);
    n
}

/// Moves the VF's netdev from the pod back to the host under its original name, or a spare one (with a warning)
/// when another device has taken it. Returns the name it has on the host.
fn move_back(host: &mut Host, pod: &mut Pod, rec: &Attachment, orig: &Link, l: &Link) -> Result<String, String> {
    let err = |name: &str, e: std::io::Error| {
        format!("moving VF {} ({}) from {} back to the host as {name}: {e}", rec.pci, l.name, rec.netns)
    };
    match pod.route.move_link(l.index, host.ns.fd(), &orig.name) {
        Ok(()) => Ok(orig.name.clone()),
        Err(e) if errno(&e) == Some(libc::EEXIST) => {
            crate::warn!("VF {}: its host name {} is taken by another device", rec.pci, orig.name);
            // Some kernels move the device under its pod name before the rename fails.
            if host.route.link_by_name(&l.name).ok().flatten().is_some_and(|h| is_ours(&h, rec)) {
                return Ok(l.name.clone());
            }
            let spare = spare_name(rec);
            pod.route.move_link(l.index, host.ns.fd(), &spare).map_err(|e| err(&spare, e))?;
            Ok(spare)
        }
        Err(e) => Err(err(&orig.name, e)),
    }
}

/// What an undo left: every error (it keeps going past them) and the VF netdev's name on the host at the end.
#[derive(Debug, Default)]
pub struct Detached {
    pub errors: Vec<String>,
    pub host_netdev: Option<String>,
    /// IPAM DEL's own error, whose code (the IPAM plugin's) outranks the generic I/O code.
    pub ipam: Option<CniError>,
}

/// Undoes an attachment: netdev back to the host, the MACs, the PF settings, host-side name/MTU/up.
pub fn detach(host: &mut Host, pod: Option<&mut Pod>, rec: &Attachment, undo: Undo) -> Detached {
    let mut errors = Vec::new();
    let pod_alive = pod.is_some();
    let mut host_name = rec.netdev.as_ref().map(|n| n.name.clone());
    let mut pod_ns = None;
    if let Some(pod) = pod {
        if let Some(orig) = rec.netdev.as_ref().filter(|_| undo.netdev_moved) {
            match find_in_pod(pod, rec) {
                Ok(Some(l)) => match move_back(host, pod, rec, orig, &l) {
                    Ok(name) => host_name = Some(name),
                    Err(e) => errors.push(e),
                },
                Ok(None) => crate::info!("VF {} is not in {}", rec.pci, rec.netns),
                Err(e) => errors.push(format!("looking for VF {} in {}: {e}", rec.pci, rec.netns)),
            }
        }
        pod_ns = Some(&pod.ns);
    }
    // The RDMA device comes back after the netdev: ADD moved it first.
    if let (Some(r), Some(pod)) = (rec.rdma.as_ref().filter(|r| r.moved && undo.rdma_moved), pod_ns) {
        if let Err(e) = rdma::move_out(pod, host.ns.fd(), &r.device) {
            errors.push(e);
        }
    }
    if let Some(path) = &rec.device_info {
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                errors.push(format!("removing the device-info file {}: {e}", path.display()));
            }
        }
    }
    // The netdev has to be on the host before its MAC goes back; a destroyed namespace hands it back
    // asynchronously.
    let wait = if pod_alive { Duration::ZERO } else { RETURN_WAIT };
    let mut cur = match &host_name {
        Some(name) => find_host_netdev(host, rec, name, wait).unwrap_or_else(|e| {
            errors.push(e);
            None
        }),
        None => None,
    };
    let plan = rec.vf_original.as_ref().map(|o| vf::planned(&rec.vf_settings, o)).unwrap_or_default();
    let applied = &plan[..undo.settings.min(plan.len())];
    match (rec.vf_original.as_ref(), applied.is_empty()) {
        (Some(orig), false) => match host.pf(&rec.pf) {
            Ok(pf) => {
                errors.extend(restore_macs(host, rec, &pf, cur.as_ref(), applied));
                let rest: Vec<_> = applied.iter().filter(|s| !matches!(s, VfSetting::Mac(_))).cloned().collect();
                errors.extend(vf::restore_all(&mut NetlinkPf(&mut host.route), &pf, rec.vf_index, &rest, orig));
            }
            Err(e) => errors.push(format!("restoring VF {} settings: {e}", rec.pci)),
        },
        _ => {
            if let Some(c) = &cur {
                errors.extend(restore_netdev_mac(host, rec, c));
            }
        }
    }
    // mlx5 takes the restored GUID only after a rebind; the netdev then comes back and is waited for.
    let rebound = !applied.is_empty() && rec.vf_settings.guid.is_some() && rec.driver.as_deref() == Some("mlx5_core");
    if rebound {
        match host.sysfs.rebind(&rec.pci) {
            Ok(()) => {
                let name = host_name.clone().unwrap_or_default();
                cur = find_host_netdev(host, rec, &name, RETURN_WAIT).unwrap_or_else(|e| {
                    errors.push(e);
                    None
                });
            }
            Err(e) => errors.push(format!("rebinding VF {} to mlx5_core to restore its GUID: {e}", rec.pci)),
        }
    }
    let mut host_netdev = None;
    if let Some(orig) = &rec.netdev {
        match cur {
            Some(cur) => match restore_host_netdev(host, rec, orig, &cur) {
                Ok(name) => host_netdev = Some(name),
                Err(e) => errors.push(e),
            },
            None => crate::warn!(
                "VF {} ({}): its netdev is neither in {} nor on the host; nothing left to restore",
                rec.pci,
                orig.name,
                rec.netns
            ),
        }
    }
    Detached { errors, host_netdev, ipam: None }
}

/// The MAC the netdev had before ADD, set on the host. With `always`, sent even when it has it already: the VF
/// driver then registers it with the PF again.
fn set_netdev_mac(host: &mut Host, rec: &Attachment, cur: &Link, always: bool) -> Result<(), String> {
    let Some(mac) = rec.netdev.as_ref().and_then(|n| n.mac) else {
        return Ok(());
    };
    if !always && cur.mac == Some(mac) {
        return Ok(());
    }
    host.route.set_link(cur.index, vec![LinkAttribute::Address(mac.0.to_vec())], None).map_err(|e| {
        let rule = if errno(&e) == Some(libc::EADDRNOTAVAIL) {
            format!(
                " (PF {} refused it: a VF may not change its own MAC while an administratively set MAC is in force \
                 and trust is off)",
                rec.pf
            )
        } else {
            String::new()
        };
        format!("setting the MAC of VF {} ({}) back to {mac}: {e}{rule}", rec.pci, cur.name)
    })
}

fn restore_netdev_mac(host: &mut Host, rec: &Attachment, cur: &Link) -> Vec<String> {
    set_netdev_mac(host, rec, cur, false).err().into_iter().collect()
}

/// The PF's admin MAC and the netdev's own MAC, back as they were, before trust is restored. A PF holding an
/// administratively set MAC refuses the VF's own change while trust is off (igb, ixgbe), so: clear the admin MAC
/// (all-zero lifts the hold on igb, ixgbe, i40e, ice), set the netdev's MAC back (the VF driver registers it with
/// the PF, which then reports it as the VF's MAC, as before ADD), and only an original admin MAC that the PF does
/// not report by then is set again.
fn restore_macs(host: &mut Host, rec: &Attachment, pf: &Pf, cur: Option<&Link>, applied: &[VfSetting]) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(cur) = cur else {
        if let Some(s) = applied.iter().find(|s| matches!(s, VfSetting::Mac(_))) {
            if let Some(orig) = &rec.vf_original {
                errors.extend(vf::restore_all(
                    &mut NetlinkPf(&mut host.route),
                    pf,
                    rec.vf_index,
                    std::slice::from_ref(s),
                    orig,
                ));
            }
        }
        return errors;
    };
    if !applied.iter().any(|s| matches!(s, VfSetting::Mac(_))) {
        return restore_netdev_mac(host, rec, cur);
    }
    let zero = Mac([0; 6]);
    let mut ctl = NetlinkPf(&mut host.route);
    if let Err(e) = ctl.apply(pf, rec.vf_index, &VfSetting::Mac(zero)) {
        crate::debug!("VF {}: clearing the admin MAC on PF {}: {e}", rec.pci, pf.name);
    }
    if let Err(e) = set_netdev_mac(host, rec, cur, true) {
        errors.push(e);
    }
    let original = rec.vf_original.as_ref().and_then(|o| o.mac).filter(|m| *m != zero);
    if let Some(o) = original {
        let mut ctl = NetlinkPf(&mut host.route);
        let now = ctl.vf_state(pf, rec.vf_index).ok().flatten().and_then(|s| s.mac);
        if now != Some(o) {
            if let Err(e) = ctl.apply(pf, rec.vf_index, &VfSetting::Mac(o)) {
                errors.push(format!("restoring mac {o} on VF {} of PF {}: {e}", rec.vf_index, pf.name));
            }
        }
    }
    errors
}

/// Makes the netdev carry the admin MAC just set on the PF. A PF that does not tell the VF driver (igb) refuses
/// the VF's own change to it while trust is off; the driver then takes it when it is bound again.
fn follow_admin_mac(host: &mut Host, rec: &mut Attachment, mac: Mac) -> CniResult<()> {
    let Some(orig) = rec.netdev.clone() else {
        return Ok(());
    };
    let cur = find_host_netdev(host, rec, &orig.name, Duration::ZERO)
        .map_err(CniError::io)?
        .ok_or_else(|| CniError::io(format!("VF {} netdev {} is not in the host namespace", rec.pci, orig.name)))?;
    if cur.mac == Some(mac) {
        return Ok(());
    }
    let refused = match host.route.set_link(cur.index, vec![LinkAttribute::Address(mac.0.to_vec())], None) {
        Ok(()) => return Ok(()),
        Err(e) if matches!(errno(&e), Some(libc::EADDRNOTAVAIL) | Some(libc::EPERM)) => e,
        Err(e) => return Err(CniError::io(format!("setting mac {mac} on VF {} ({}): {e}", rec.pci, cur.name))),
    };
    let driver = rec.driver.clone().unwrap_or_default();
    crate::info!("VF {}: the VF driver may not take admin MAC {mac} itself ({refused}); rebinding {driver}", rec.pci);
    host.sysfs.rebind(&rec.pci).ctx(|| format!("rebinding VF {} to {driver} so it takes admin MAC {mac}", rec.pci))?;
    let link = find_host_netdev(host, rec, &orig.name, RETURN_WAIT).map_err(CniError::io)?.ok_or_else(|| {
        CniError::io(format!("VF {} has no netdev {}s after rebinding {driver}", rec.pci, RETURN_WAIT.as_secs()))
    })?;
    if link.mac != Some(mac) {
        return Err(CniError::io(format!(
            "VF {} ({}) does not carry admin MAC {mac} after rebinding {driver} (it has {})",
            rec.pci,
            link.name,
            link.mac.map(|m| m.to_string()).unwrap_or_default()
        )));
    }
    if let Some(n) = rec.netdev.as_mut() {
        n.index = link.index;
    }
    Ok(())
}

/// The VF's netdev on the host: by `name`, else by what sysfs lists under its PCI address; polls up to `wait`
/// for it to appear (a destroyed namespace or a driver rebind hands it back asynchronously).
fn find_host_netdev(host: &mut Host, rec: &Attachment, name: &str, wait: Duration) -> Result<Option<Link>, String> {
    let deadline = Instant::now() + wait;
    loop {
        let by_name = host.route.link_by_name(name).map_err(|e| format!("looking up {name}: {e}"))?;
        if let Some(l) = by_name.filter(|l| is_ours(l, rec)) {
            return Ok(Some(l));
        }
        for n in host.sysfs.netdevs(&rec.pci) {
            let l = host.route.link_by_name(&n).map_err(|e| format!("looking up {n}: {e}"))?;
            // sysfs lists the VF's own netdevs: a stand-in without a parent is taken on its word.
            if let Some(l) = l.filter(|l| l.parent.as_deref().is_none_or(|p| p == rec.pci.as_str())) {
                return Ok(Some(l));
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Gives the VF's netdev on the host back its name (unless another device has taken it), MTU, up state and
/// altnames; its MAC has been put back with the PF's settings. Returns the name it has.
fn restore_host_netdev(host: &mut Host, rec: &Attachment, orig: &Link, cur: &Link) -> Result<String, String> {
    let mut attrs = Vec::new();
    let mut final_name = cur.name.clone();
    if cur.name != orig.name {
        let name = match host.route.link_by_name(&orig.name) {
            Ok(Some(other)) if other.index != cur.index => {
                let spare = spare_name(rec);
                crate::warn!(
                    "VF {}: {} is taken by another device (ifindex {}); the VF is named {spare}",
                    rec.pci,
                    orig.name,
                    other.index
                );
                spare
            }
            _ => orig.name.clone(),
        };
        if name != cur.name {
            final_name = name.clone();
            attrs.push(LinkAttribute::IfName(name));
        }
    }
    if let Some(mac) = orig.mac.filter(|m| Some(*m) != cur.mac) {
        attrs.push(LinkAttribute::Address(mac.0.to_vec()));
    }
    if cur.mtu != orig.mtu {
        attrs.push(LinkAttribute::Mtu(orig.mtu));
    }
    let mut up = (cur.up != orig.up).then_some(orig.up);
    if !attrs.is_empty() || up.is_some() {
        if cur.up && attrs.iter().any(|a| matches!(a, LinkAttribute::IfName(_))) {
            // A running device cannot be renamed.
            host.route
                .set_link(cur.index, vec![], Some(false))
                .map_err(|e| format!("bringing {} down: {e}", cur.name))?;
            up = Some(orig.up);
        }
        host.route.set_link(cur.index, attrs, up).map_err(|e| {
            format!(
                "restoring VF {} as {} (MAC {}, MTU {}): {e}",
                rec.pci,
                orig.name,
                orig.mac.map(|m| m.to_string()).unwrap_or_default(),
                orig.mtu
            )
        })?;
    }
    for alt in orig.altnames.iter().filter(|a| !cur.altnames.contains(a)) {
        host.route.add_altname(cur.index, alt).map_err(|e| format!("restoring altname {alt} of {}: {e}", orig.name))?;
    }
    crate::debug!("VF {} restored on the host as {final_name}", rec.pci);
    Ok(final_name)
}

pub fn del(conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let store = Store::open()?;
    let Some(found) = store.find(&conf.name, &env.container_id, &env.ifname)? else {
        crate::debug!("DEL {}/{}: no attachment recorded", env.container_id, env.ifname);
        return ipam::exec(conf, env, "DEL", &Target::of_env(env)).map(drop);
    };
    let _lock = store.lock(&found.pci)?;
    // Another DEL may have finished while this one waited.
    let Some(rec) = store.load(&found.pci)?.filter(|r| *r == found) else {
        return Ok(());
    };
    let mut host = Host::open()?;
    let netns = if env.netns.is_empty() { rec.netns.clone() } else { env.netns.clone() };
    let done = release(&mut host, conf, env, &rec, &netns, &Target::of_env(env))?;
    finish(&host.store, &rec, done)
}

/// Detach plus IPAM DEL, the part DEL and GC share. Only a pod namespace whose path no longer exists is gone
/// (the kernel has handed the VF back); one that cannot be opened fails DEL before anything is touched.
pub fn release(
    host: &mut Host,
    conf: &NetConf,
    env: &CniEnv,
    rec: &Attachment,
    netns: &str,
    target: &Target,
) -> Result<Detached, CniError> {
    let mut pod = match Pod::open(netns) {
        Ok(p) => Some(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !netns.is_empty() => {
            crate::info!(
                "DEL {}/{}: pod namespace {netns} is gone ({e}); restoring from the host",
                rec.container_id,
                rec.ifname
            );
            None
        }
        Err(e) => {
            return Err(CniError::io(format!(
                "opening the pod namespace {netns:?} of VF {} ({}/{}): {e}; nothing changed, the record is kept",
                rec.pci, rec.container_id, rec.ifname
            )))
        }
    };
    let (mut done, released) =
        match ipam::around(conf, env, "DEL", target, || detach(host, pod.as_mut(), rec, Undo::ALL)) {
            Ok(done) => done,
            Err(e) => (detach(host, pod.as_mut(), rec, Undo::ALL), Err(e)),
        };
    if let Err(e) = released {
        if rec.complete {
            done.ipam = Some(e);
        } else {
            // An ADD that never finished may never have had an address: its IPAM DEL does not hold the VF.
            crate::warn!("DEL {}/{}: IPAM DEL of an unfinished ADD: {e}", rec.container_id, rec.ifname);
        }
    }
    Ok(done)
}

/// Removes the record when everything was undone; otherwise keeps it for a retry and reports every error.
/// The error carries the most specific code: the IPAM plugin's own when IPAM DEL failed, else 5.
pub fn finish(store: &Store, rec: &Attachment, done: Detached) -> CniResult<()> {
    let Detached { mut errors, ipam, .. } = done;
    let code = ipam.as_ref().map_or(Code::Io, |e| e.code);
    errors.extend(ipam.map(|e| e.to_string()));
    if errors.is_empty() {
        store.remove(&rec.pci)?;
        crate::info!("DEL {}/{}: VF {} restored", rec.container_id, rec.ifname, rec.pci);
        Ok(())
    } else {
        Err(CniError::new(
            code,
            format!(
                "releasing VF {} of {}/{} (record kept for a retry): {}",
                rec.pci,
                rec.container_id,
                rec.ifname,
                vf::join(&errors)
            ),
        ))
    }
}
