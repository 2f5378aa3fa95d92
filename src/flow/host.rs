//! The two sides an attachment spans: the host (sysfs, the record store, its namespace and a route socket in it)
//! and the pod; and how the VF's netdev is recognised on either, whatever it is called.

use super::state::{Attachment, Store};
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::kernel::link::{Link, RouteSocket};
use crate::kernel::netlink::Route;
use crate::kernel::netns::Netns;
use crate::kernel::sysfs::Sysfs;
use crate::kernel::vf::Pf;
use std::time::{Duration, Instant};

/// How long the host waits for a VF netdev to reappear: from a destroyed pod namespace, or after a rebind.
pub(super) const RETURN_WAIT: Duration = Duration::from_secs(5);

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

/// Whether a link is this record's VF: by the PCI address the kernel reports as its parent; a stand-in without
/// one (a veth in the tests) only by the ifindex it had, so a device that merely took the name is never touched.
pub(super) fn is_ours(l: &Link, rec: &Attachment) -> bool {
    match &l.parent {
        Some(p) => p == rec.pci.as_str(),
        None => rec.netdev.as_ref().is_some_and(|n| n.index == l.index),
    }
}

/// The VF's netdev on the host: by `name`, else by what sysfs lists under its PCI address; polls up to `wait`
/// for it to appear (a destroyed namespace or a driver rebind hands it back asynchronously).
pub(super) fn find_host_netdev(
    host: &mut Host,
    rec: &Attachment,
    name: &str,
    wait: Duration,
) -> Result<Option<Link>, String> {
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
