//! CHECK, GC and STATUS.

use super::attachment::Attachment;
use super::context::{Host, Paths, Pod};
use super::del::{finish, release};
use super::ipam::{self, Target};
use super::rdma::{lookup_gids, GidLookup};
use crate::cni::config::{AttachmentRef, NetConf};
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Code, Failures, IoContext};
use crate::kernel::sysfs::Sysfs;
use crate::kernel::vf::{NetlinkPf, PfControl};
use crate::model::{IpNet, Mac};
use crate::vf_setting::{VfSetting, VfState};
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;

fn mismatch(msg: String) -> CniError {
    CniError::io(msg)
}

/// The first setting ADD made that the PF does not hold now, decided as ADD decides it.
fn unheld<'a>(plan: &'a [VfSetting], st: &VfState) -> Option<&'a VfSetting> {
    plan.iter().find(|s| !s.holds_in(st))
}

pub fn check(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let mut host = Host::open_read_only(paths)?;
    let rec = host.store.find(&conf.name, &env.container_id, &env.ifname)?.ok_or_else(|| {
        CniError::new(
            Code::ContainerUnknown,
            format!("no attachment of {}/{} on network {}", env.container_id, env.ifname, conf.name),
        )
    })?;
    if let Some(orig) = &rec.netdev {
        let mut pod = Pod::open(&env.netns).ctx(|| format!("opening CNI_NETNS {}", env.netns))?;
        let l = pod
            .route
            .link_by_name(&env.ifname)
            .ctx(|| format!("looking up {} in {}", env.ifname, env.netns))?
            .ok_or_else(|| mismatch(format!("interface {} is missing from {}", env.ifname, env.netns)))?;
        // What ADD left: the configured MTU, or the one the netdev had in the pod (a driver's default after a rebind).
        let want_mtu = rec.mtu.unwrap_or(orig.mtu);
        if l.mtu != want_mtu {
            return Err(mismatch(format!("MTU of {} in {} is {}, expected {want_mtu}", env.ifname, env.netns, l.mtu)));
        }
        let prev_mac = conf
            .prev_result
            .as_ref()
            .and_then(|p| p.get("interfaces"))
            .and_then(Value::as_array)
            .and_then(|ifs| ifs.iter().find(|i| i.get("name").and_then(Value::as_str) == Some(&env.ifname)))
            .and_then(|i| i.get("mac").and_then(Value::as_str))
            .and_then(|m| m.parse::<Mac>().ok());
        if let Some(want) = prev_mac.or(rec.admin_mac()) {
            if l.mac != Some(want) {
                return Err(mismatch(format!(
                    "MAC of {} in {} is {}, expected {want}",
                    env.ifname,
                    env.netns,
                    l.mac.map(|m| m.to_string()).unwrap_or_default()
                )));
            }
        }
        let have = pod.route.addresses(l.index).ctx(|| format!("listing addresses of {}", env.ifname))?;
        for want in conf.prev_ips_of(&env.ifname)? {
            if !have.contains(&want) {
                return Err(mismatch(format!("address {want} is missing from {} in {}", env.ifname, env.netns)));
            }
        }
        check_routes(&mut pod, conf, env, l.index)?;
        check_gids(&host.sysfs, &pod, env, &rec, &have)?;
    }
    if rec.vf_original.is_some() {
        let plan = rec.pf_settings();
        if !plan.is_empty() {
            let pf = host.pf(&rec.pf)?;
            let st = NetlinkPf(&mut host.route)
                .vf_state(&pf, rec.vf_index)
                .ctx(|| format!("reading the VF table of PF {}", rec.pf))?
                .unwrap_or_default();
            if let Some(s) = unheld(&plan, &st) {
                return Err(mismatch(format!(
                    "PF {} does not show {s} for VF {} (it shows {st:?})",
                    rec.pf, rec.vf_index
                )));
            }
        }
    }
    ipam::exec(conf, env, "CHECK", &Target::of_env(env)).map(drop)
}

/// Every `prevResult` route of this interface is in the pod's tables through it, as ADD installed it. A route is
/// this interface's when `prevResult` names no other interface, or when its gateway is on the subnet of one of this
/// interface's `prevResult` addresses. A result older than 1.1.0 carries no table, metric or route metrics: then
/// the route may be in any table, with any metric.
fn check_routes(pod: &mut Pod, conf: &NetConf, env: &CniEnv, index: u32) -> CniResult<()> {
    use super::routes::{kernel_route, link_name};
    use crate::cni::config::Version;
    use crate::cni::result::Route;
    use crate::kernel::link::network;
    let Some(prev) = &conf.prev_result else { return Ok(()) };
    let list = |k: &str| prev.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let only_ours = list("interfaces").iter().all(|i| i.get("name").and_then(Value::as_str) == Some(&env.ifname));
    let subnets = conf.prev_ips_of(&env.ifname)?;
    let on_subnet = |gw: IpAddr| subnets.iter().any(|s| network(&IpNet { addr: gw, prefix: s.prefix }) == network(s));
    let strict = conf.version >= Version::V1_1_0;
    for rt in list("routes") {
        let r = Route::from_json(&rt).map_err(|e| CniError::config(format!("prevResult routes: {e}")))?;
        if !only_ours && !r.gw.is_some_and(on_subnet) {
            continue;
        }
        let want = kernel_route(&r, index);
        let have = pod.route.routes(r.dst.addr.is_ipv4()).ctx(|| format!("listing the routes of {}", env.netns))?;
        if have.iter().any(|h| if strict { h.holds(&want) } else { h.same_path(&want) }) {
            continue;
        }
        let mut instead = Vec::new();
        for h in have.iter().filter(|h| network(&h.dst) == network(&want.dst)) {
            let dev = link_name(pod, h.oif);
            instead.push(h.describe(dev.as_deref()));
        }
        return Err(mismatch(format!(
            "route {} is not in {} (it has {})",
            want.describe(Some(&env.ifname)),
            env.netns,
            if instead.is_empty() { format!("no route to {}", r.dst) } else { instead.join(", ") }
        )));
    }
    Ok(())
}

/// The RDMA device of the interface: the recorded one, or one bound to it inside the pod (created there after
/// ADD, as with soft-RoCE in shared mode).
fn pod_rdma_device(pod: &Pod, rec: &Attachment, ifname: &str) -> Option<String> {
    if let Some(r) = &rec.rdma {
        return Some(r.device.name.clone());
    }
    let mut sock = crate::kernel::rdma::open(Some(&pod.ns)).ok()??;
    sock.device_with_port(|p| p.ndev_name.as_deref() == Some(ifname)).ok()?.map(|d| d.name)
}

/// Every pod address has a RoCE v2 GID on the interface's RDMA device, at the index ADD recorded.
fn check_gids(sysfs: &Sysfs, pod: &Pod, env: &CniEnv, rec: &Attachment, have: &[IpNet]) -> CniResult<()> {
    if rec.rdma.as_ref().is_some_and(|r| !r.moved && r.gids.is_empty()) {
        // Left in place (shared mode) with no GID at ADD: nothing was promised.
        return Ok(());
    }
    let Some(dev) = pod_rdma_device(pod, rec, &env.ifname) else { return Ok(()) };
    let ips: Vec<IpAddr> = have.iter().map(|n| n.addr).filter(|a| !is_link_local(a)).collect();
    let lookup = lookup_gids(sysfs, &pod.ns, &dev, &ips, Duration::from_millis(500))
        .ctx(|| format!("reading the GID table of {dev} in {}", env.netns))?;
    let found = match lookup {
        GidLookup::Found(found) => found,
        GidLookup::InfiniBand => return Ok(()),
        GidLookup::NotVisible => {
            return Err(mismatch(format!("RDMA device {dev} of {} is not visible in {}", env.ifname, env.netns)))
        }
    };
    for ip in &ips {
        let Some(g) = found.iter().find(|g| g.address == *ip) else {
            return Err(mismatch(format!("no RoCE v2 GID for {ip} on {dev} in {}", env.netns)));
        };
        let recorded = rec.rdma.as_ref().and_then(|r| r.gids.iter().find(|r| r.address == *ip));
        if let Some(r) = recorded.filter(|r| r.index != g.index) {
            return Err(mismatch(format!(
                "RoCE v2 GID of {ip} on {dev} is at index {}, ADD recorded {} (NCCL_IB_GID_INDEX)",
                g.index, r.index
            )));
        }
        crate::info!("CHECK: RoCE v2 GID index {} for {ip} on {dev}", g.index);
    }
    Ok(())
}

fn is_link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

pub fn gc(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let mut host = Host::open(paths)?;
    let keep = conf.valid_attachments.clone().unwrap_or_default();
    let mut errors = Failures::default();
    for rec in host.store.all()? {
        if rec.network != conf.name || keep.iter().any(|k| k.container_id == rec.container_id && k.ifname == rec.ifname)
        {
            continue;
        }
        let lock = match host.store.lock(&rec.pci) {
            Ok(l) => l,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if host.store.load(&rec.pci)?.as_ref() != Some(&rec) {
            continue;
        }
        crate::info!("GC: releasing stale attachment {}/{} (VF {})", rec.container_id, rec.ifname, rec.pci);
        let target = Target::of_record(&rec, &env.path);
        let done = release(&mut host, conf, env, &rec, &rec.netns, target).and_then(|d| finish(&host.store, &rec, d));
        if let Err(e) = done {
            errors.push(e);
        }
        drop(lock);
    }
    // The spec's GC reaches the IPAM plugin too: leases of attachments this plugin holds no record of (a record
    // lost, a DEL that never came) are its to release. Every attachment whose record is still here — kept by the
    // runtime, held by a process, busy, or whose undo failed — still has its address: it joins the list, so IPAM
    // never hands that address to another pod.
    match ipam_gc_conf(&host, conf, &keep) {
        Ok(Some(c)) => {
            if let Err(e) = ipam::exec_if_1_1(&c, env, "GC") {
                errors.push(e.context("IPAM GC".to_string()));
            }
        }
        Ok(None) => {}
        Err(e) => errors.push(e.context("IPAM GC".to_string())),
    }
    // A busy VF keeps its 11.
    errors.into_error("GC").map_or(Ok(()), Err)
}

/// The configuration IPAM GC gets: the runtime's valid attachments plus every attachment of this network whose
/// record is still in the store. `None` (IPAM GC not run) while a record cannot be read: its attachment, and
/// its address, are unknown.
fn ipam_gc_conf(host: &Host, conf: &NetConf, keep: &[AttachmentRef]) -> CniResult<Option<NetConf>> {
    if conf.ipam.is_none() {
        return Ok(None);
    }
    if let Some(bad) = host.store.unreadable().first() {
        crate::warn!("IPAM GC not run: {bad} (its address could be released under it)");
        return Ok(None);
    }
    let mut valid: Vec<AttachmentRef> = keep.to_vec();
    for rec in host.store.all()?.into_iter().filter(|r| r.network == conf.name) {
        if !valid.iter().any(|k| k.container_id == rec.container_id && k.ifname == rec.ifname) {
            crate::info!("GC: {}/{} (VF {}) keeps its address", rec.container_id, rec.ifname, rec.pci);
            valid.push(AttachmentRef { container_id: rec.container_id, ifname: rec.ifname });
        }
    }
    let mut raw: Value = serde_json::from_slice(&conf.raw)
        .map_err(|e| CniError::new(Code::Decode, format!("re-reading the configuration: {e}")))?;
    let list: Vec<Value> =
        valid.iter().map(|k| serde_json::json!({"containerID": k.container_id, "ifname": k.ifname})).collect();
    if let Some(o) = raw.as_object_mut() {
        o.remove("cni.dev/attachments");
        o.insert("cni.dev/valid-attachments".into(), Value::Array(list));
    }
    let mut c = conf.clone();
    c.raw = serde_json::to_vec(&raw).map_err(|e| CniError::io(format!("encoding the IPAM GC configuration: {e}")))?;
    Ok(Some(c))
}

pub fn status(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let unavailable = |msg: String| CniError::new(Code::NotAvailable, msg);
    let store = paths.store().map_err(|e| unavailable(e.msg))?;
    store
        .probe_writable()
        .map_err(|e| unavailable(format!("state directory {} is not writable: {e}", store.dir().display())))?;
    if let Some(crate::cni::config::VfSource::Pf(pf)) = &conf.source {
        paths.sysfs().pf_pci(pf).map_err(|e| unavailable(format!("pfName {pf}: {e}")))?;
    }
    if let Some(ipam) = &conf.ipam {
        if !env.path.iter().any(|d| d.join(&ipam.kind).is_file()) {
            return Err(unavailable(format!("IPAM plugin {} is not on CNI_PATH", ipam.kind)));
        }
        // Its own STATUS (e.g. no addresses left) is the network's; its error and code are passed on.
        ipam::exec_if_1_1(conf, env, "STATUS").map_err(|e| e.context(format!("IPAM {} STATUS", ipam.kind)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::VlanProto;
    use crate::vf_setting::{Trust, Vlan};

    #[test]
    fn check_holds_the_pf_to_what_add_set_including_the_vlan_protocol() {
        let plan: [VfSetting; 2] =
            [Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Ad }.into(), Trust { on: true }.into()];
        let fell_back =
            VfState { vlan: 100, qos: 0, vlan_proto: Some(VlanProto::Dot1Q), trust: Some(true), ..VfState::default() };
        assert_eq!(unheld(&plan, &fell_back), Some(&plan[0]), "an 802.1ad VLAN that fell back to 802.1Q");
        let held = VfState { vlan_proto: Some(VlanProto::Dot1Ad), ..fell_back };
        assert_eq!(unheld(&plan, &held), None);
    }
}
