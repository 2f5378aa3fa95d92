//! The IPAM result's routes in the pod: each installed as the result says (table, metric, MTU, advertised MSS,
//! scope) through the attached interface, or ADD fails naming the route that holds its place. CHECK reads them
//! back through the same conversion.

use super::context::Pod;
use crate::cni::error::{CniError, CniResult, IoContext};
use crate::cni::result::Route;
use crate::kernel::link::{RouteAdd, RouteEntry, TABLE_MAIN};

/// The kernel route a result route asks for, through link `oif`; no table (or table 0) is the main one.
pub fn kernel_route(r: &Route, oif: u32) -> RouteEntry {
    RouteEntry {
        gw: r.gw,
        table: r.table.filter(|t| *t != 0).unwrap_or(TABLE_MAIN),
        priority: r.priority,
        scope: r.scope,
        mtu: r.mtu,
        advmss: r.advmss,
        ..RouteEntry::through(oif, r.dst)
    }
}

/// The name of link `index` in the pod, for messages (`#index` when it cannot be read).
pub fn link_name(pod: &mut Pod, index: Option<u32>) -> Option<String> {
    let i = index?;
    Some(pod.route.link_by_index(i).ok().flatten().map_or_else(|| format!("#{i}"), |l| l.name))
}

/// Installs the routes through link `index` (`ifname` in `netns`), in order. A route of the same destination,
/// metric and table on another path (another interface's, or another gateway) holds the place: ADD fails naming
/// it rather than report a route the kernel does not use (the rollback takes the routes installed so far away
/// with the interface).
pub fn install(pod: &mut Pod, index: u32, routes: &[Route], ifname: &str, netns: &str) -> CniResult<()> {
    for r in routes {
        let want = kernel_route(r, index);
        let what = || format!("adding route {} in {netns}", want.describe(Some(ifname)));
        if let RouteAdd::Taken(held) = pod.route.add_route(&want).ctx(what)? {
            let dev = link_name(pod, held.oif);
            return Err(CniError::io(format!(
                "{}: the pod already has {}, which holds its place (the same destination, metric and table; left \
                 as it is); give the IPAM route a priority of its own, or leave it out",
                what(),
                held.describe(dev.as_deref())
            )));
        }
    }
    Ok(())
}
