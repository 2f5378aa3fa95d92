//! The VF's netdev on either side, as the journal's steps need it: found in the pod whatever it is called there,
//! moved back under its own name (or a spare one), its host-side state put back, its MAC, a driver rebind.

use super::attachment::Attachment;
use super::context::{find_host_netdev, is_ours, Host, Pod, RETURN_WAIT};
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::kernel::link::Link;
use crate::kernel::netlink::errno;
use crate::model::Mac;
use netlink_packet_route::link::LinkAttribute;
use std::time::Duration;

/// The VF's netdev in the pod, whatever it is called there: by CNI_IFNAME, by its ifindex there, by its PCI
/// address.
pub fn find_in_pod(pod: &mut Pod, rec: &Attachment) -> CniResult<Option<Link>> {
    let ctx = || format!("looking for VF {} in {}", rec.pci, rec.netns);
    if let Some(l) = pod.route.link_by_name(&rec.ifname).ctx(ctx)?.filter(|l| is_ours_in_pod(l, rec)) {
        return Ok(Some(l));
    }
    if let Some(index) = pod_index(rec) {
        if let Some(l) = pod.route.link_by_index(index).ctx(ctx)?.filter(|l| is_ours_in_pod(l, rec)) {
            return Ok(Some(l));
        }
    }
    Ok(pod.route.links().ctx(ctx)?.into_iter().find(|l| l.parent.as_deref() == Some(rec.pci.as_str())))
}

/// The VF netdev's ifindex in the pod: the one ADD saw there, else (a record of an older release) the host's.
fn pod_index(rec: &Attachment) -> Option<u32> {
    rec.pod_index.or(rec.netdev.as_ref().map(|n| n.index))
}

/// [`is_ours`] inside the pod: a link without a parent device is the VF only under the ifindex it has there.
fn is_ours_in_pod(l: &Link, rec: &Attachment) -> bool {
    match &l.parent {
        Some(p) => p == rec.pci.as_str(),
        None => pod_index(rec) == Some(l.index),
    }
}

/// Names for the VF when its own was taken meanwhile, in order: `<pf>v<index>`, as udev would name it, then
/// `<pf>v<index>r<k>` (the PF part shortened to fit 15 bytes). The VF's own name is often `<pf>v<index>` itself
/// (systemd's), so the first may be the taken one.
fn spare_names(rec: &Attachment) -> impl Iterator<Item = String> + '_ {
    (0..SPARES).map(move |k| {
        let tail = if k == 0 { format!("v{}", rec.vf_index) } else { format!("v{}r{k}", rec.vf_index) };
        let room = 15usize.saturating_sub(tail.len());
        let pf: String = rec.pf.chars().take(room).collect();
        format!("{pf}{tail}")
    })
}

/// How many spare names are tried before DEL gives up (each one taken by another device).
const SPARES: u32 = 16;

/// The first spare name no device on the host has (`taken` is the VF's own name, known to be taken).
fn free_spare(host: &mut Host, rec: &Attachment, taken: &str) -> CniResult<String> {
    for n in spare_names(rec).filter(|n| n != taken) {
        if host.route.link_by_name(&n).ctx(|| format!("looking up {n} on the host"))?.is_none() {
            return Ok(n);
        }
    }
    Err(CniError::io(format!(
        "VF {}: its host name {taken} and {SPARES} spare names ({}…) are all taken on the host",
        rec.pci,
        spare_names(rec).next().unwrap_or_default()
    )))
}

/// Moves the VF's netdev from the pod back to the host under its original name, or a spare one (with a warning)
/// when another device has taken it. Returns the name it has on the host.
pub fn move_back(host: &mut Host, pod: &mut Pod, rec: &Attachment, orig: &Link, l: &Link) -> CniResult<String> {
    let what = |name: &str| format!("moving VF {} ({}) from {} back to the host as {name}", rec.pci, l.name, rec.netns);
    match pod.route.move_link(l.index, host.ns.fd(), &orig.name) {
        Ok(()) => Ok(orig.name.clone()),
        Err(e) if errno(&e) == Some(libc::EEXIST) => {
            crate::warn!("VF {}: its host name {} is taken by another device", rec.pci, orig.name);
            // Some kernels move the device under its pod name before the rename fails.
            if host.route.link_by_name(&l.name).ok().flatten().is_some_and(|h| is_ours(&h, rec)) {
                return Ok(l.name.clone());
            }
            // Another device may take the spare between the look and the move: then the next one.
            let mut last = None;
            for _ in 0..3 {
                let spare = free_spare(host, rec, &orig.name)?;
                match pod.route.move_link(l.index, host.ns.fd(), &spare) {
                    Ok(()) => return Ok(spare),
                    Err(e) if errno(&e) == Some(libc::EEXIST) => last = Some((spare, e)),
                    Err(e) => return Err(e).ctx(|| what(&spare)),
                }
            }
            let (spare, e) =
                last.unwrap_or_else(|| (orig.name.clone(), std::io::Error::from_raw_os_error(libc::EEXIST)));
            Err(e).ctx(|| what(&spare))
        }
        Err(e) => Err(e).ctx(|| what(&orig.name)),
    }
}

/// The MAC the netdev had before ADD, set on the host. With `always`, sent even when it has it already: the VF
/// driver then registers it with the PF again.
pub fn set_own_mac(host: &mut Host, rec: &Attachment, cur: &Link, always: bool) -> CniResult<()> {
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
        CniError::from_io(format!("setting the MAC of VF {} ({}) back to {mac}", rec.pci, cur.name), &e).suffix(&rule)
    })
}

/// Gives the VF's netdev on the host back its name (unless another device has taken it), MTU, up state, altnames
/// and, with `mac`, its MAC. Returns the name it has.
pub fn restore_on_host(host: &mut Host, rec: &Attachment, orig: &Link, cur: &Link, mac: bool) -> CniResult<String> {
    let mut attrs = Vec::new();
    let mut final_name = cur.name.clone();
    if cur.name != orig.name {
        let name = match host.route.link_by_name(&orig.name) {
            Ok(Some(other)) if other.index != cur.index => {
                // Already under a spare name (move_back's): kept.
                let spare = if spare_names(rec).any(|n| n == cur.name) {
                    cur.name.clone()
                } else {
                    free_spare(host, rec, &orig.name)?
                };
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
    if let Some(m) = orig.mac.filter(|m| mac && Some(*m) != cur.mac) {
        attrs.push(LinkAttribute::Address(m.0.to_vec()));
    }
    if cur.mtu != orig.mtu {
        attrs.push(LinkAttribute::Mtu(orig.mtu));
    }
    let mut up = (cur.up != orig.up).then_some(orig.up);
    if !attrs.is_empty() || up.is_some() {
        if cur.up && attrs.iter().any(|a| matches!(a, LinkAttribute::IfName(_))) {
            // A running device cannot be renamed.
            host.route.set_link(cur.index, vec![], Some(false)).ctx(|| format!("bringing {} down", cur.name))?;
            up = Some(orig.up);
        }
        host.route.set_link(cur.index, attrs, up).ctx(|| {
            format!(
                "restoring VF {} as {} (MAC {}, MTU {})",
                rec.pci,
                orig.name,
                orig.mac.map(|m| m.to_string()).unwrap_or_default(),
                orig.mtu
            )
        })?;
    }
    for alt in orig.altnames.iter().filter(|a| !cur.altnames.contains(a)) {
        host.route.add_altname(cur.index, alt).ctx(|| format!("restoring altname {alt} of {}", orig.name))?;
    }
    crate::debug!("VF {} restored on the host as {final_name}", rec.pci);
    Ok(final_name)
}

/// Binds the VF's driver again (mlx5 applies a new GUID, igb hands its VF an admin MAC, only then) and finds its
/// netdev, which comes back with a new ifindex (and possibly name); the record follows the ifindex.
pub fn rebind(host: &mut Host, rec: &mut Attachment, why: &str) -> CniResult<Option<Link>> {
    let driver = rec.driver.clone().unwrap_or_default();
    host.sysfs.rebind(&rec.pci).ctx(|| format!("rebinding VF {} to {driver} {why}", rec.pci))?;
    let Some(name) = rec.netdev.as_ref().map(|l| l.name.clone()) else {
        return Ok(None);
    };
    let link = find_host_netdev(host, rec, &name, RETURN_WAIT)?.ok_or_else(|| {
        CniError::io(format!("VF {} has no netdev {}s after rebinding {driver}", rec.pci, RETURN_WAIT.as_secs()))
    })?;
    if let Some(n) = rec.netdev.as_mut() {
        n.index = link.index;
    }
    Ok(Some(link))
}

/// Makes the netdev carry the admin MAC just set on the PF. A PF that does not tell the VF driver (igb) refuses
/// the VF's own change to it while trust is off; the driver then takes it when it is bound again.
pub fn take_admin_mac(host: &mut Host, rec: &mut Attachment, mac: Mac) -> CniResult<()> {
    let Some(orig) = rec.netdev.clone() else {
        return Ok(());
    };
    let cur = find_host_netdev(host, rec, &orig.name, Duration::ZERO)?
        .ok_or_else(|| CniError::io(format!("VF {} netdev {} is not in the host namespace", rec.pci, orig.name)))?;
    if cur.mac == Some(mac) {
        return Ok(());
    }
    let refused = match host.route.set_link(cur.index, vec![LinkAttribute::Address(mac.0.to_vec())], None) {
        Ok(()) => return Ok(()),
        Err(e) if matches!(errno(&e), Some(libc::EADDRNOTAVAIL) | Some(libc::EPERM)) => e,
        Err(e) => return Err(e).ctx(|| format!("setting mac {mac} on VF {} ({})", rec.pci, cur.name)),
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
