//! DEL (and the part GC and an orphan's reclaim share with it): the record's journal undone, newest step first
//! (journal.rs), even when the pod namespace is gone; the record removed only when every step is undone.

use super::context::{Host, Paths, Pod};
use super::ipam::{self, Target};
use super::journal::{unwind, Undone};
use super::state::{Attachment, Store};
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult};

pub fn del(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    let mut host = Host::open(paths)?;
    let Some(found) = host.store.find(&conf.name, &env.container_id, &env.ifname)? else {
        crate::debug!("DEL {}/{}: no attachment recorded", env.container_id, env.ifname);
        return ipam::exec(conf, env, "DEL", &Target::of_env(env)).map(drop);
    };
    let _lock = host.store.lock(&found.pci)?;
    // Another DEL may have finished while this one waited.
    let Some(rec) = host.store.load(&found.pci)?.filter(|r| *r == found) else {
        return Ok(());
    };
    let netns = if env.netns.is_empty() { rec.netns.clone() } else { env.netns.clone() };
    let undone = release(&mut host, conf, env, &rec, &netns, Target::of_env(env))?;
    finish(&host.store, &rec, undone)
}

/// Undoes a record's journal. Only a pod namespace whose path no longer exists is gone (the kernel has handed the
/// VF back); one that cannot be opened fails before anything is touched.
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
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !netns.is_empty() => {
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
    // An ADD that never finished may never have had an address: its failed IPAM DEL does not hold the VF.
    Ok(unwind(host, pod.as_mut(), rec, conf, env, target, rec.complete))
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
