//! DEL (and the part GC and an orphan's reclaim share with it): the record's journal undone, newest step first
//! (journal.rs), even when the pod namespace is gone; the record removed only when every step is undone.

use super::attachment::Attachment;
use super::context::{find_host_netdev, netns_missing, Host, Paths, Pod, RETURN_WAIT};
use super::ipam::{self, Target};
use super::journal::{unwind, Session, Undone};
use super::signals::changing_state;
use super::state::Store;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult};
use crate::kernel::sysfs::Presence;

pub fn del(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let mut host = Host::open(paths)?;
    // The record is found, then its VF locked, then read again: what the record says *after* the lock is what
    // is torn down. An ADD of this container that held the lock meanwhile may have finished (DEL then undoes all
    // of it) or rolled back (no record: nothing of ours is left); another DEL may have finished (no record).
    let mut tries = 0;
    let (rec, _lock) = loop {
        let Some(found) = host.store.find(&conf.name, &env.container_id, &env.ifname)? else {
            crate::debug!("DEL {}/{}: no attachment recorded", env.container_id, env.ifname);
            // IPAM DEL releases an address: state changes, SIGTERM is ignored.
            changing_state();
            return ipam::del_unrecorded(conf, env, &Target::of_env(env));
        };
        let lock = host.store.lock(&found.pci)?;
        match host.store.load(&found.pci)? {
            Some(rec) if rec.is(&conf.name, &env.container_id, &env.ifname) => break (rec, lock),
            // The VF went to another attachment while this DEL waited: this one's record, if any, is elsewhere.
            _ if tries < 3 => tries += 1,
            _ => {
                return Err(CniError::new(
                    crate::cni::error::Code::TryAgainLater,
                    format!(
                        "the record of {}/{} moved between VFs while DEL waited for them; try again",
                        env.container_id, env.ifname
                    ),
                ))
            }
        }
    };
    let netns = if env.netns.is_empty() { rec.netns.clone() } else { env.netns.clone() };
    let undone = release(&mut host, conf, env, &rec, &netns, Target::of_env(env))?;
    finish(&host.store, &rec, undone)
}

/// Undoes a record's journal. A pod namespace whose path no longer exists, or is no namespace file, is gone (the
/// kernel hands the VF back); one that cannot be opened fails before anything is touched.
pub fn release(
    host: &mut Host,
    conf: &NetConf,
    env: &CniEnv,
    rec: &Attachment,
    netns: &str,
    target: Target,
) -> CniResult<Undone> {
    let mut pod = match Pod::open(netns) {
        Ok(p) => Some(p),
        // A path that is no namespace (a plain file left where one was mounted) is never a live pod.
        Err(e) if netns_missing(&e) && !netns.is_empty() => {
            crate::info!(
                "DEL {}/{}: pod namespace {netns} is gone ({e}); restoring from the host",
                rec.container_id,
                rec.ifname
            );
            None
        }
        Err(e) => {
            return Err(CniError::from_io(
                format!(
                    "opening the pod namespace {netns:?} of VF {} ({}/{}); nothing changed, the record is kept",
                    rec.pci, rec.container_id, rec.ifname
                ),
                &e,
            ))
        }
    };
    if pod.is_none() {
        came_back(host, rec, netns)?;
    }
    // An ADD that never finished may never have had an address: its failed IPAM DEL does not hold the VF.
    Ok(unwind(Session { host, conf, env }, pod.as_mut(), rec, target, rec.complete || rec.ipam_allocated))
}

/// From a namespace whose path is gone the kernel hands a kernel-driver VF back only once the namespace is
/// destroyed: until its netdev is on the host (waited for a bounded time) the VF may still be in use, so nothing
/// is undone (no PF setting under a pod still sending, no lease released) and the record is kept for a later DEL
/// or `sriov-rdma gc`.
fn came_back(host: &mut Host, rec: &Attachment, netns: &str) -> CniResult<()> {
    let Some(orig) = &rec.netdev else { return Ok(()) };
    // In no namespace at all (an unbound VF is bound again by the undo): nothing to wait for.
    if host.sysfs.presence(&rec.pci) != Presence::Bound {
        return Ok(());
    }
    if find_host_netdev(host, rec, &orig.name, RETURN_WAIT)?.is_some() {
        return Ok(());
    }
    Err(CniError::io(format!(
        "VF {} ({}) has not come back to the host from {} within {}s (a process may still hold the namespace); \
         nothing changed, the record is kept: a later DEL or `sriov-rdma gc` restores it once it is back",
        rec.pci,
        orig.name,
        netns,
        RETURN_WAIT.as_secs()
    )))
}

/// Removes the record when every step was undone; otherwise keeps it for a retry and reports every failure
/// under the most specific code (the IPAM plugin's own when IPAM DEL failed, else 5).
pub fn finish(store: &Store, rec: &Attachment, undone: Undone) -> CniResult<()> {
    let what = format!("releasing VF {} of {}/{} (record kept for a retry)", rec.pci, rec.container_id, rec.ifname);
    match undone.failures.into_error(what) {
        None => {
            store.remove(&rec.pci)?;
            crate::info!("DEL {}/{}: VF {} restored", rec.container_id, rec.ifname, rec.pci);
            Ok(())
        }
        Some(e) => Err(e),
    }
}
