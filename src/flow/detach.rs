//! DEL, GC and ADD's rollback: the netdev back from the pod (or from the kernel, when the pod namespace is gone),
//! the RDMA device, the device-info file, the MACs in an order the PF accepts, the PF-side settings in reverse,
//! the host-side name/MTU/up state, IPAM DEL; the record removed only when all of it is done.

use super::host::{find_host_netdev, is_ours, Host, Pod, RETURN_WAIT};
use super::ipam::{self, Target};
use super::rdma;
use super::state::{Attachment, Store};
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Code};
use crate::cni::types::Mac;
use crate::kernel::link::Link;
use crate::kernel::netlink::errno;
use crate::kernel::vf::{self, NetlinkPf, Pf, PfControl, VfSetting};
use netlink_packet_route::link::LinkAttribute;
use std::time::Duration;

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
    // An all-zero original was restored by the clearing; restore_all leaves one the PF already reports.
    if let Some(orig) = rec.vf_original.as_ref() {
        if let Some(o) = orig.mac.filter(|m| *m != zero) {
            errors.extend(vf::restore_all(
                &mut NetlinkPf(&mut host.route),
                pf,
                rec.vf_index,
                &[VfSetting::Mac(o)],
                orig,
            ));
        }
    }
    errors
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
