//! ADD: picks and locks the VF, reads what it will have to restore, then runs the journal's steps in order
//! (journal.rs), each written into the record before it is applied; a failure at any step undoes exactly the steps
//! written, newest first, as DEL would.
//!
//! PF settings → admin MAC → IB GUID → RDMA device into the pod → IPAM alongside the netdev's move into the pod
//! (moved and renamed in one message, MTU, up) → addresses and routes → RoCE GIDs → device-info file.

use super::admit::KubeletClaims;
use super::attachment::{Attachment, GidIndex, RdmaRecord, Step};
use super::context::{Host, Paths, Pod};
use super::ipam::{self, Target};
use super::journal::{unwind, Apply, Session};
use super::orphans::{self, Whereabouts};
use super::pool;
use super::rdma;
use super::routes;
use crate::cni::config::{NetConf, RdmaPolicy};
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::cni::result::{AttachResult, Interface};
use crate::kernel::rdma::{self as kernel_rdma, RdmaSocket};
use crate::kernel::sysfs::Vf;
use crate::kernel::vf::{NetlinkPf, PfControl};
use crate::vf_setting::{self, VfSetting, VfState};

pub fn add(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<AttachResult> {
    let mut host = Host::open(paths)?;
    let mut pod = Pod::open(&env.netns).ctx(|| format!("opening CNI_NETNS {}", env.netns))?;
    if let Some(a) = host.store.find(&conf.name, &env.container_id, &env.ifname)? {
        reclaim_own_orphan(&mut host, &a)?;
    }
    let kubelet = KubeletClaims::load(paths, env)?;
    let (vf, _lock) = pool::select(&mut host, conf, &|pci| kubelet.withheld(pci))?;
    let pf = host.pf(&vf.pf).map_err(|e| e.context(format!("VF {}", vf.pci)))?;
    let vf_original =
        NetlinkPf(&mut host.route).vf_state(&pf, vf.index).ctx(|| format!("reading the VF table of PF {}", pf.name))?;
    let plan = vf_setting::planned(&conf.vf, vf_original.as_ref().unwrap_or(&VfState::default()));
    // The RDMA devices under the VF's PCI device (a device bound to its netdev instead is not among them).
    let pci_rdma = host.sysfs.rdma_devices_of(&vf.pci);
    if vf.driver.as_deref() == Some("mlx5_core") && plan.iter().any(|s| matches!(s, VfSetting::IbGuid(_))) {
        kubelet.rebind(&vf.pci, &pci_rdma, "the IB GUID (infinibandGUID)")?;
    }
    if vf_original.is_none() {
        if let Some(s) = plan.first() {
            return Err(CniError::io(format!(
                "cannot apply {s}: PF {} reports no VF table, so the VF's settings could not be restored",
                pf.name
            )));
        }
    }
    let netdev = match pool::host_netdev(&mut host.route, &vf)? {
        None => None,
        Some(link) => {
            if pod
                .route
                .link_by_name(&env.ifname)
                .ctx(|| format!("looking up {} in {}", env.ifname, env.netns))?
                .is_some()
            {
                return Err(CniError::io(format!("CNI_IFNAME {} is already taken in {}", env.ifname, env.netns)));
            }
            Some(link)
        }
    };
    let (rdma, move_rdma, rdma_sock) = prepare_rdma(&mut host, conf, &vf, netdev.as_ref().map(|l| l.index))?;
    // A device not under the VF's PCI device is bound to its netdev, and dies with the netdev's move.
    if let Some(r) = rdma.as_ref().filter(|_| netdev.is_some()) {
        if !pci_rdma.contains(&r.device.name) {
            kubelet.netdev_bound_rdma(&vf.pci, &r.device.name)?;
        }
    }
    let rec = Attachment {
        network: conf.name.clone(),
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        pci: vf.pci.clone(),
        pf: pf.name.clone(),
        pf_pci: vf.pf_pci.clone(),
        vf_index: vf.index,
        driver: vf.driver.clone(),
        vf_original,
        netdev,
        mtu: conf.mtu,
        complete: false,
        ipam_allocated: false,
        rdma,
        ipam_config: conf.ipam.as_ref().map(|_| String::from_utf8_lossy(&conf.raw).into_owned()),
        cni_path: env.path.clone(),
        cni_args: Some(env.args_string()),
        pod_index: None,
        journal: Vec::new(),
    };
    crate::info!(
        "ADD {}/{}: VF {} (PF {} VF {}) into {}",
        rec.container_id,
        rec.ifname,
        rec.pci,
        pf.name,
        vf.index,
        env.netns
    );
    let mut cx = Apply::new(Session { host: &mut host, conf, env }, &mut pod, pf, rec, rdma_sock);
    let attached = attach(&mut cx, &plan, move_rdma).and_then(|result| {
        // Not complete until the record says so: a record that cannot be written is a failed ADD.
        cx.rec.complete = true;
        cx.s.host.store.save_durable(&cx.rec).map(|_| result).inspect_err(|_| cx.rec.complete = false)
    });
    match attached {
        Ok(result) => Ok(result),
        Err(e) => rollback(cx, e),
    }
}

/// A record of this very attachment (the same container ID and interface, as when podman restarts a container)
/// is an error while its VF is in a pod; once it is an orphan (its VF back on the host after a reboot, its
/// namespace gone) it is reclaimed as any ADD reclaims an orphan, and ADD goes on.
fn reclaim_own_orphan(host: &mut Host, a: &Attachment) -> CniResult<()> {
    let _lock = host.store.lock(&a.pci)?;
    let Some(rec) = host.store.load(&a.pci)?.filter(|r| r.is(&a.network, &a.container_id, &a.ifname)) else {
        // Released while this ADD waited for the lock.
        return Ok(());
    };
    match orphans::whereabouts(host, &rec)? {
        Whereabouts::Orphan => orphans::reclaim(host, &rec).map(drop),
        Whereabouts::Live | Whereabouts::Held => Err(pool::attached_err(&rec)),
    }
}

/// Undoes the steps ADD wrote, newest first, as DEL would; the record goes only when all of them are undone.
fn rollback(mut cx: Apply, e: CniError) -> CniResult<AttachResult> {
    crate::warn!("ADD {}/{} failed, rolling back: {e}", cx.rec.container_id, cx.rec.ifname);
    cx.settle_ipam();
    let allocated = cx.ipam_allocated;
    let Apply { s: Session { host, conf, env }, pod, mut rec, .. } = cx;
    let undone = unwind(Session { host: &mut *host, conf, env }, Some(pod), &rec, Target::of_env(env), allocated);
    match undone.failures.into_error("rollback incomplete, DEL will retry") {
        None => {
            host.store.remove(&rec.pci)?;
            Err(e)
        }
        Some(left) => {
            // The retried DEL must count a failing IPAM DEL: the lease is still held.
            if allocated {
                rec.ipam_allocated = true;
                if let Err(w) = host.store.save(&rec) {
                    crate::warn!("{w}");
                }
            }
            Err(e.with_details(left.msg))
        }
    }
}

/// Discovers the VF's RDMA device and applies the `rdma` policy; fails (for "isolated") before anything changes.
/// Returns the device, whether ADD moves it into the pod, and the RDMA netlink socket.
fn prepare_rdma(
    host: &mut Host,
    conf: &NetConf,
    vf: &Vf,
    ifindex: Option<u32>,
) -> CniResult<(Option<RdmaRecord>, bool, Option<RdmaSocket>)> {
    if conf.rdma == RdmaPolicy::Off {
        return Ok((None, false, None));
    }
    let mut sock = kernel_rdma::open(None).ctx(|| "opening RDMA netlink".to_string())?;
    let mode = match sock.as_mut() {
        Some(s) => Some(s.netns_mode().ctx(|| "reading the RDMA netns mode".to_string())?),
        None => None,
    };
    let found = rdma::discover(&host.sysfs, vf, ifindex, sock.as_mut())
        .ctx(|| format!("finding the RDMA device of VF {}", vf.pci))?;
    let record = |device| Some(RdmaRecord { device, moved: false, gids: Vec::new() });
    Ok(match rdma::decide(conf.rdma, &vf.pci, found, mode)? {
        rdma::Decision::Skip(why) => {
            crate::info!("VF {}: {why}", vf.pci);
            (None, false, sock)
        }
        rdma::Decision::Leave(device, why) => {
            crate::info!("VF {}: {why}", vf.pci);
            (record(device), false, sock)
        }
        rdma::Decision::Move(device) => (record(device), true, sock),
    })
}

/// The steps, in order, then what needs no undo of its own: addresses and routes (they live on the netdev in
/// the pod and leave with it) and the RoCE GID lookup (it only reads).
fn attach(cx: &mut Apply, plan: &[VfSetting], move_rdma: bool) -> CniResult<AttachResult> {
    if cx.rec.vf_original.is_some() {
        for step in Step::plan(plan) {
            cx.run(step)?;
        }
    }
    // The RDMA device goes first: then the netdev, which it may be bound to. Found after the GUID's rebind.
    if let Some(dev) = cx.rec.rdma.as_ref().filter(|_| move_rdma).map(|r| r.device.clone()) {
        cx.run(Step::RdmaIn(dev))?;
    }
    let (ipam, overlap) = (cx.s.conf.ipam.is_some(), ipam::can_overlap(cx.s.conf));
    // IPAM runs while the kernel moves the netdev, except DHCP, which needs the interface in the pod.
    if ipam && overlap {
        cx.run(Step::Ipam)?;
    }
    if cx.rec.netdev.is_some() {
        cx.run(Step::NetdevIn)?;
    }
    if ipam && !overlap {
        cx.run(Step::Ipam)?;
    }
    let out = cx.ipam_output()?;
    let (conf, env) = (cx.s.conf, cx.s.env);
    let mut result = if ipam { AttachResult::from_ipam(&out)? } else { AttachResult::default() };
    if let Some(l) = &cx.moved {
        if result.ips.iter().any(|ip| ip.address.addr.is_ipv6()) {
            // A node that disables IPv6 by default (net.ipv6.conf.default.disable_ipv6=1) gives the moved netdev
            // no IPv6: a dual-stack result would fail to apply.
            enable_ipv6(cx.pod, &env.ifname).ctx(|| format!("enabling IPv6 on {} in {}", env.ifname, env.netns))?;
        }
        for ip in &result.ips {
            cx.pod
                .route
                .add_address(l.index, ip.address)
                .ctx(|| format!("adding address {} to {} in {}", ip.address, env.ifname, env.netns))?;
        }
        routes::install(cx.pod, l.index, &result.routes, &env.ifname, &env.netns)?;
    }
    if let Some(l) = cx.moved.as_ref().filter(|_| result.ips.iter().any(|ip| ip.address.addr.is_ipv6())) {
        settle_ipv6(cx.pod, l.index, &env.ifname, &env.netns)?;
    }
    if let Some(dev) = cx.rec.rdma.as_ref().map(|r| r.device.name.clone()) {
        let gids = roce_gids(cx.s.host, cx.pod, conf, env, &dev, &result)?;
        if let Some(r) = cx.rec.rdma.as_mut() {
            r.gids = gids;
        }
    }
    // A file already there is someone else's (Multus copies the device plugin's): left to them.
    if let Some(path) = conf.device_info_file.as_ref().filter(|p| std::fs::symlink_metadata(p).is_err()) {
        // The directories the write will make are recorded first, for DEL to remove.
        let dirs = rdma::device_info_place(&cx.s.host.devinfo_dir, path).map_or(0, |at| at.missing_dirs());
        cx.run(Step::DeviceInfo { path: path.clone(), dirs })?;
    }
    result.interfaces = vec![Interface {
        name: env.ifname.clone(),
        mac: cx.moved.as_ref().and_then(|l| l.mac),
        mtu: cx.moved.as_ref().map(|l| l.mtu),
        sandbox: env.netns.clone(),
        pci_id: Some(cx.rec.pci.to_string()),
    }];
    if result.dns.is_none() {
        result.dns = conf.dns.clone().filter(|d| d.as_object().is_some_and(|o| !o.is_empty()));
    }
    Ok(result)
}

/// How long ADD waits for IPv6 duplicate address detection (one probe a second by default, after up to a second's
/// delay) before it reports an address the pod cannot use yet.
const DAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `net.ipv6.conf.<ifname>.disable_ipv6 = 0` in the pod, written from a thread inside its namespace.
fn enable_ipv6(pod: &Pod, ifname: &str) -> std::io::Result<()> {
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6");
    pod.ns.run(|| match std::fs::read_to_string(&path) {
        Ok(v) if v.trim() == "0" => Ok(()),
        Ok(_) => std::fs::write(&path, b"0"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(std::io::Error::new(e.kind(), format!("{path} is missing: the kernel has IPv6 off (ipv6.disable=1)")))
        }
        Err(e) => Err(e),
    })
}

/// Waits (bounded) until no IPv6 address of the interface is tentative, so the pod can use every address the
/// result reports; one that failed duplicate address detection is an error.
fn settle_ipv6(pod: &mut Pod, index: u32, ifname: &str, netns: &str) -> CniResult<()> {
    let ctx = || format!("reading the IPv6 addresses of {ifname} in {netns}");
    if pod.route.carrier(index).ctx(ctx)? != Some(true) {
        // Without carrier no probe is sent: detection runs, and ends, once the link comes up.
        crate::info!("{ifname} in {netns} has no carrier: not waiting for IPv6 duplicate address detection");
        return Ok(());
    }
    let deadline = std::time::Instant::now() + DAD_WAIT;
    loop {
        let (tentative, failed) = pod.route.dad_state(index).ctx(ctx)?;
        if let Some(a) = failed.first() {
            return Err(CniError::io(format!("{a} on {ifname} in {netns} failed duplicate address detection")));
        }
        if tentative.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(CniError::io(format!(
                "{} on {ifname} in {netns} still tentative (duplicate address detection) after {}s",
                tentative.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "),
                DAD_WAIT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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
) -> CniResult<Vec<GidIndex>> {
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
