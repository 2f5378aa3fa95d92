//! ADD: the record is written before the first change; each step's undo is DEL's (detach.rs), so a failure at
//! any step rolls back exactly what was done.
//!
//! VF settings on the PF → the netdev carries the admin MAC → RDMA device into the pod → netdev into the pod
//! (moved and renamed in one message; IPAM meanwhile) → MTU, up → addresses and routes → RoCE GIDs →
//! device-info file.

use super::detach::{detach, Undo};
use super::host::{find_host_netdev, Host, Pod, RETURN_WAIT};
use super::ipam::{self, Target};
use super::orphans::{is_orphan, vf_after_reclaim};
use super::rdma;
use super::state::{Attachment, VfLock};
use crate::cni::config::{NetConf, RdmaPolicy, VfSource};
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::cni::result::{AttachResult, Interface};
use crate::cni::types::Mac;
use crate::kernel::link::Link;
use crate::kernel::netlink::errno;
use crate::kernel::rdma::{self as kernel_rdma, RdmaSocket};
use crate::kernel::sysfs::Vf;
use crate::kernel::vf::{self, NetlinkPf, Pf, PfControl, VfState};
use netlink_packet_route::link::LinkAttribute;
use std::time::Duration;

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

/// Binds the VF's driver again (mlx5 applies a new GUID, igb hands its VF an admin MAC, only then) and finds its
/// netdev, which comes back with a new ifindex (and possibly name); the record follows the ifindex.
fn rebind(host: &mut Host, rec: &mut Attachment, why: &str) -> CniResult<Option<Link>> {
    let driver = rec.driver.clone().unwrap_or_default();
    host.sysfs.rebind(&rec.pci).ctx(|| format!("rebinding VF {} to {driver} {why}", rec.pci))?;
    let Some(name) = rec.netdev.as_ref().map(|l| l.name.clone()) else {
        return Ok(None);
    };
    let link = find_host_netdev(host, rec, &name, RETURN_WAIT).map_err(CniError::io)?.ok_or_else(|| {
        CniError::io(format!("VF {} has no netdev {}s after rebinding {driver}", rec.pci, RETURN_WAIT.as_secs()))
    })?;
    if let Some(n) = rec.netdev.as_mut() {
        n.index = link.index;
    }
    Ok(Some(link))
}

/// mlx5 applies a new GUID only after the VF driver is rebound; the netdev and RDMA device come back with
/// new indexes (and possibly names), so both are looked up again. Exercised by fakes only: no mlx5 here.
fn refresh_after_rebind(host: &mut Host, rec: &mut Attachment, sock: Option<&mut RdmaSocket>) -> CniResult<()> {
    rebind(host, rec, "to apply its GUID")?;
    if let (Some(r), Some(sock)) = (rec.rdma.as_mut(), sock) {
        let name = host.sysfs.rdma_devices_of(&rec.pci).into_iter().next().unwrap_or(r.device.name.clone());
        let index = sock.devices().ctx(|| "listing RDMA devices".to_string())?.into_iter().find(|d| d.name == name);
        r.device = rdma::Found { name, index: index.map(|d| d.index) };
    }
    Ok(())
}

/// Moves the netdev into the pod under CNI_IFNAME, then MTU and up; returns its index there.
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
        // The MAC needs nothing here: an admin MAC was made the netdev's own before the move (follow_admin_mac).
        let mut attrs = Vec::new();
        if let Some(mtu) = conf.mtu.filter(|m| *m != l.mtu) {
            attrs.push(LinkAttribute::Mtu(mtu));
        }
        pod.route
            .set_link(l.index, attrs, Some(true))
            .ctx(|| format!("setting the MTU and bringing up {} in {}", env.ifname, env.netns))?;
        iface.mac = l.mac;
        iface.mtu = Some(conf.mtu.unwrap_or(l.mtu));
        index = Some(l.index);
    }
    Ok(index)
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
    crate::info!("VF {}: the VF driver may not take admin MAC {mac} itself ({refused}); rebinding it", rec.pci);
    let Some(link) = rebind(host, rec, &format!("so it takes admin MAC {mac}"))? else {
        return Ok(());
    };
    if link.mac != Some(mac) {
        return Err(CniError::io(format!(
            "VF {} ({}) does not carry admin MAC {mac} after rebinding {} (it has {})",
            rec.pci,
            link.name,
            rec.driver.as_deref().unwrap_or_default(),
            link.mac.map(|m| m.to_string()).unwrap_or_default()
        )));
    }
    Ok(())
}
