//! ADD's VF pool: which VF a configuration gets. One rule, [`select`], walked two ways: ADD takes the VF (locks it,
//! reclaims an orphan's record), `doctor --config` only looks ([`would_take`]) and says what it looked at. The PF's
//! VFs come from the node inventory.

use super::attachment::Attachment;
use super::context::{not_usable, Host};
use super::orphans::{is_orphan, vf_after_reclaim, whereabouts, Whereabouts};
use super::state::{Store, VfLock};
use crate::cni::config::{NetConf, VfSource};
use crate::cni::error::{CniError, CniResult, Code, IoContext};
use crate::inventory;
use crate::kernel::link::{Link, RouteSocket};
use crate::kernel::sysfs::{Sysfs, Vf};
use crate::kubelet::Checkpoint;
use crate::model::PciAddr;
use std::fs;
use std::os::unix::fs::MetadataExt;

pub fn attached_err(a: &Attachment) -> CniError {
    CniError::io(format!(
        "VF {} is already attached to container {} as {} (network {})",
        a.pci, a.container_id, a.ifname, a.network
    ))
}

fn held_err(a: &Attachment) -> CniError {
    CniError::io(format!(
        "VF {} is still in use by container {} as {} (network {}): its namespace path {} is gone, but the VF has \
         not come back to the host (a process still holds the namespace)",
        a.pci, a.container_id, a.ifname, a.network, a.netns
    ))
}

/// What the selection does to a VF it considers: ADD's effects, or doctor's look at them.
pub trait Taker {
    type Lock;
    fn sysfs(&self) -> &Sysfs;
    /// The VF's lock: waited for when the configuration names the VF (`wait`), tried otherwise; `None` when
    /// another invocation holds it.
    fn lock(&mut self, pci: &PciAddr, wait: bool) -> CniResult<Option<Self::Lock>>;
    fn load(&mut self, pci: &PciAddr) -> CniResult<Option<Attachment>>;
    fn whereabouts(&mut self, a: &Attachment) -> CniResult<Whereabouts>;
    /// The VF once the orphan's record `a` is undone.
    fn reclaim(&mut self, pci: &PciAddr, a: &Attachment) -> CniResult<Vf>;
    /// Whether netdev `name` of a VF is in the host namespace (`reclaimed`: a reclaim just brought it back).
    fn netdev_here(&mut self, name: &str, reclaimed: bool) -> CniResult<bool>;
    /// What was looked at, in a line.
    fn note(&mut self, _line: String) {}
}

/// Picks the VF: the given address, or the lowest-numbered free VF of `pfName` (not `withheld`: managed by the
/// kubelet, which did not allocate it to this pod (its resource); not locked, not held by a live record, an
/// orphan's reclaimed first, its netdev in the host namespace). A `deviceID` the kubelet manages is admitted or
/// refused before (admit.rs).
pub fn select<T: Taker>(
    t: &mut T,
    conf: &NetConf,
    withheld: &dyn Fn(&PciAddr) -> Option<String>,
) -> CniResult<(Vf, T::Lock)> {
    match &conf.source {
        None => {
            Err(CniError::config("no VF given: set deviceID (or runtimeConfig.deviceID, CNI_ARGS deviceID) or pfName"))
        }
        Some(VfSource::Device(pci)) => {
            // Validated before the lock (a bad deviceID leaves nothing behind), read again under it.
            let vf = t.sysfs().vf(pci).map_err(|e| not_usable(format!("deviceID {pci}"), e))?;
            t.note(format!("deviceID {pci} is VF {} of PF {}", vf.index, vf.pf));
            let Some(lock) = t.lock(pci, true)? else {
                return Err(CniError::new(
                    Code::TryAgainLater,
                    format!("VF {pci} is locked by a running ADD/DEL: ADD waits up to 10 s for it, then fails"),
                ));
            };
            t.note("not locked".into());
            if let Some(a) = t.load(pci)? {
                return match t.whereabouts(&a)? {
                    Whereabouts::Orphan => {
                        t.note("its record is an orphan's (the VF is back on the host): ADD reclaims it first".into());
                        Ok((t.reclaim(pci, &a)?, lock))
                    }
                    Whereabouts::Live => Err(attached_err(&a)),
                    Whereabouts::Held => Err(held_err(&a)),
                };
            }
            t.note("no record: not attached".into());
            let vf = t.sysfs().vf(pci).map_err(|e| not_usable(format!("deviceID {pci}"), e))?;
            Ok((vf, lock))
        }
        Some(VfSource::Pf(pf)) => {
            let (pf_pci, vfs) =
                inventory::vfs_of_pf(t.sysfs(), pf).map_err(|e| not_usable(format!("pfName {pf}"), e))?;
            t.note(format!("pfName {pf} ({pf_pci}) has {} VFs", vfs.len()));
            let mut skipped = Vec::new();
            let mut kubelets = 0;
            for (idx, pci) in &vfs {
                if let Some(res) = withheld(pci) {
                    skipped
                        .push(format!("{idx} the kubelet's ({res}; ADD takes it only for the pod it allocated it to)"));
                    kubelets += 1;
                    continue;
                }
                let Some(lock) = t.lock(pci, false)? else {
                    skipped.push(format!("{idx} locked"));
                    continue;
                };
                let found = match t.load(pci) {
                    Ok(found) => found,
                    Err(e) => {
                        // One unreadable record must not block the PF: that VF is skipped, the others served.
                        crate::warn!("pfName {pf}: skipping VF {pci}: {e}");
                        skipped.push(format!("{idx} record unreadable"));
                        continue;
                    }
                };
                let (vf, reclaimed) = match &found {
                    None => match t.sysfs().vf(pci) {
                        Ok(vf) => (vf, false),
                        Err(_) => {
                            skipped.push(format!("{idx} not a usable VF"));
                            continue;
                        }
                    },
                    Some(a) => match t.whereabouts(a)? {
                        Whereabouts::Orphan => match t.reclaim(pci, a) {
                            Ok(vf) => (vf, true),
                            Err(e) => {
                                crate::warn!("{e}");
                                skipped.push(format!("{idx} not reclaimed: {}", e.msg));
                                continue;
                            }
                        },
                        Whereabouts::Live | Whereabouts::Held => {
                            skipped.push(format!("{idx} held by {}/{}", a.container_id, a.ifname));
                            continue;
                        }
                    },
                };
                match &vf.netdev {
                    Some(n) if t.netdev_here(n, reclaimed)? => {
                        if !skipped.is_empty() {
                            t.note(format!("skipped VF {}", skipped.join(", VF ")));
                        }
                        let once = if reclaimed { " once its orphaned record is reclaimed" } else { "" };
                        t.note(format!("VF {idx} ({pci}, {n}) is free{once}"));
                        return Ok((vf, lock));
                    }
                    _ => skipped.push(format!("{idx} has no netdev in the host namespace")),
                }
            }
            if !skipped.is_empty() {
                t.note(format!("skipped VF {}", skipped.join(", VF ")));
            }
            Err(CniError::io(format!(
                "pfName {pf}: no free VF among its {} VFs (all attached, locked, or without a netdev in the host \
                 namespace{})",
                vfs.len(),
                if kubelets > 0 {
                    format!("; {kubelets} the kubelet manages and did not allocate to this pod")
                } else {
                    String::new()
                }
            )))
        }
    }
}

/// The VF's netdev in the host namespace, the one ADD moves into the pod; `None` for a userspace driver.
pub fn host_netdev(route: &mut RouteSocket, vf: &Vf) -> CniResult<Option<Link>> {
    if vf.userspace() {
        return Ok(None);
    }
    let name = vf.netdev.as_deref().ok_or_else(|| {
        CniError::io(format!(
            "VF {} (driver {}) has no netdev in the host namespace; is it attached elsewhere?",
            vf.pci,
            vf.driver.as_deref().unwrap_or("none")
        ))
    })?;
    let link = route
        .link_by_name(name)
        .ctx(|| format!("looking up VF {} ({name})", vf.pci))?
        .ok_or_else(|| CniError::io(format!("VF {} netdev {name} is not in the host namespace", vf.pci)))?;
    // The name was read from sysfs before the lock: the device moved must still be the VF's own.
    if link.parent.as_deref().is_some_and(|p| p != vf.pci.as_str()) {
        return Err(CniError::io(format!(
            "netdev {name} is not VF {}'s (its parent device is {}); the VF's netdev was renamed meanwhile",
            vf.pci,
            link.parent.as_deref().unwrap_or_default()
        )));
    }
    Ok(Some(link))
}

/// ADD's selection, taking the VF.
impl Taker for Host {
    type Lock = VfLock;

    fn sysfs(&self) -> &Sysfs {
        &self.sysfs
    }
    fn lock(&mut self, pci: &PciAddr, wait: bool) -> CniResult<Option<VfLock>> {
        if wait {
            self.store.lock(pci).map(Some)
        } else {
            self.store.try_lock(pci)
        }
    }
    fn load(&mut self, pci: &PciAddr) -> CniResult<Option<Attachment>> {
        self.store.load(pci)
    }
    fn whereabouts(&mut self, a: &Attachment) -> CniResult<Whereabouts> {
        whereabouts(self, a)
    }
    fn reclaim(&mut self, pci: &PciAddr, a: &Attachment) -> CniResult<Vf> {
        vf_after_reclaim(self, pci, a)
    }
    fn netdev_here(&mut self, name: &str, _reclaimed: bool) -> CniResult<bool> {
        Ok(self.route.link_by_name(name).ctx(|| format!("looking up {name}"))?.is_some())
    }
}

/// Doctor's look at ADD's selection: it takes no lock, reclaims nothing and writes nothing.
struct Look<'a> {
    sysfs: &'a Sysfs,
    store: &'a Store,
    route: &'a mut Option<RouteSocket>,
    checked: &'a mut Vec<String>,
    reclaimed: bool,
}

/// Whether another invocation holds the VF's lock, from /proc/locks (taking it would change nothing either, but
/// creates its lock file).
fn locked(store: &Store, pci: &PciAddr) -> bool {
    let Ok(meta) = fs::metadata(store.dir().join(format!("{pci}.lock"))) else { return false };
    let (maj, min) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let want = format!("{maj:02x}:{min:02x}:{}", meta.ino());
    fs::read_to_string("/proc/locks").unwrap_or_default().lines().any(|l| l.split_whitespace().any(|f| f == want))
}

impl Taker for Look<'_> {
    type Lock = ();

    fn sysfs(&self) -> &Sysfs {
        self.sysfs
    }
    fn lock(&mut self, pci: &PciAddr, _wait: bool) -> CniResult<Option<()>> {
        Ok((!locked(self.store, pci)).then_some(()))
    }
    fn load(&mut self, pci: &PciAddr) -> CniResult<Option<Attachment>> {
        self.store.load(pci)
    }
    /// A record doctor cannot tell to be an orphan's is taken as live, as ADD would not take its VF either.
    fn whereabouts(&mut self, a: &Attachment) -> CniResult<Whereabouts> {
        Ok(if is_orphan(self.sysfs, self.route, a) { Whereabouts::Orphan } else { Whereabouts::Live })
    }
    fn reclaim(&mut self, pci: &PciAddr, _a: &Attachment) -> CniResult<Vf> {
        self.reclaimed = true;
        self.sysfs.vf(pci).map_err(|e| not_usable(format!("VF {pci}"), e))
    }
    fn netdev_here(&mut self, name: &str, reclaimed: bool) -> CniResult<bool> {
        Ok(reclaimed || self.route.as_mut().and_then(|r| r.link_by_name(name).ok().flatten()).is_some())
    }
    fn note(&mut self, line: String) {
        self.checked.push(line);
    }
}

/// ADD's selection, read-only, for `doctor --config`: the VF ADD would take, and then what ADD checks of it next
/// (its netdev in the host namespace, unless a userspace driver has it). `checked` says what was looked at.
/// A VF the kubelet manages (`kubelet`, its checkpoint) ADD gives only to the pod it was allocated to: `pfName`
/// passes over it, as for a pod with no allocation.
pub fn would_take(
    sysfs: &Sysfs,
    store: &Store,
    route: &mut Option<RouteSocket>,
    kubelet: Option<&Checkpoint>,
    conf: &NetConf,
    checked: &mut Vec<String>,
) -> CniResult<PciAddr> {
    if conf.source.is_none() {
        return Err(CniError::config(
            "no VF given: set deviceID (Multus passes the one the device plugin allocated; doctor --device PCI stands \
             in for it) or pfName",
        ));
    }
    // doctor stands for no pod in particular: every VF the kubelet manages is withheld.
    let managed = |pci: &PciAddr| kubelet.and_then(|k| k.withheld(pci, None)).map(str::to_string);
    if let (Some(VfSource::Device(pci)), Some(k)) = (&conf.source, kubelet) {
        if let Some(res) = k.resource_of(pci) {
            let pods: Vec<&str> = k.holders(pci).map(|a| a.pod_uid.as_str()).collect();
            let to = if pods.is_empty() { "no pod".to_string() } else { format!("pod {}", pods.join(", ")) };
            checked.push(format!(
                "deviceID {pci}: the kubelet manages it as resource {res}, allocated to {to}: ADD takes it only for \
                 that pod"
            ));
        }
    }
    let mut look = Look { sysfs, store, route, checked, reclaimed: false };
    let (vf, ()) = select(&mut look, conf, &managed)?;
    if look.reclaimed || matches!(conf.source, Some(VfSource::Pf(_))) {
        return Ok(vf.pci);
    }
    if vf.userspace() {
        look.note(format!("bound to {} (userspace): PF-side settings only", vf.driver.unwrap_or_default()));
        return Ok(vf.pci);
    }
    let Some(route) = look.route.as_mut() else {
        return Err(CniError::io("no netlink route socket in the host namespace: cannot look up the VF's netdev"));
    };
    if let Some(link) = host_netdev(route, &vf)? {
        look.note(format!("netdev {} is in the host namespace", link.name));
    }
    Ok(vf.pci)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::sysfs::fake::FakeTree;
    use std::collections::{HashMap, HashSet};

    /// A taker over a fake sysfs tree: which VFs are locked, which records there are and where their VFs are,
    /// which netdevs the host namespace has. It records what it reclaimed.
    struct Fake {
        sysfs: Sysfs,
        locked: HashSet<PciAddr>,
        records: HashMap<PciAddr, (Attachment, Whereabouts)>,
        here: HashSet<String>,
        reclaimed: Vec<PciAddr>,
        notes: Vec<String>,
    }

    impl Taker for Fake {
        type Lock = PciAddr;

        fn sysfs(&self) -> &Sysfs {
            &self.sysfs
        }
        fn lock(&mut self, pci: &PciAddr, _wait: bool) -> CniResult<Option<PciAddr>> {
            Ok((!self.locked.contains(pci)).then(|| pci.clone()))
        }
        fn load(&mut self, pci: &PciAddr) -> CniResult<Option<Attachment>> {
            Ok(self.records.get(pci).map(|(a, _)| a.clone()))
        }
        fn whereabouts(&mut self, a: &Attachment) -> CniResult<Whereabouts> {
            Ok(self.records[&a.pci].1)
        }
        fn reclaim(&mut self, pci: &PciAddr, _a: &Attachment) -> CniResult<Vf> {
            self.reclaimed.push(pci.clone());
            self.sysfs.vf(pci).map_err(|e| not_usable(pci, e))
        }
        fn netdev_here(&mut self, name: &str, reclaimed: bool) -> CniResult<bool> {
            Ok(reclaimed || self.here.contains(name))
        }
        fn note(&mut self, line: String) {
            self.notes.push(line);
        }
    }

    fn pci(s: &str) -> PciAddr {
        PciAddr::parse(s).unwrap()
    }

    fn fake(name: &str) -> Fake {
        let root = std::env::temp_dir().join(format!("sriov-rdma-pool-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let t = FakeTree::new(&root).unwrap();
        t.pf("0000:3b:00.0", "ens1f0", 4).unwrap();
        for i in 0..4u32 {
            t.vf("0000:3b:00.0", i, &format!("0000:3b:02.{i}"), Some(&format!("ens1f0v{i}")), "iavf").unwrap();
        }
        Fake {
            sysfs: Sysfs::at(root),
            locked: HashSet::new(),
            records: HashMap::new(),
            here: (0..4).map(|i| format!("ens1f0v{i}")).collect(),
            reclaimed: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn record(vf: &str, container: &str) -> Attachment {
        Attachment { pci: pci(vf), container_id: container.into(), ..crate::flow::record::sample() }
    }

    fn conf(source: &str) -> NetConf {
        let raw = format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma",{source}}}"#);
        NetConf::parse(raw.as_bytes(), &HashMap::new()).unwrap()
    }

    #[test]
    fn a_pf_gives_its_lowest_free_vf_skipping_locked_held_and_netdev_less_ones() {
        let mut f = fake("pf");
        f.locked.insert(pci("0000:3b:02.0"));
        f.records.insert(pci("0000:3b:02.1"), (record("0000:3b:02.1", "c1"), Whereabouts::Held));
        f.here.remove("ens1f0v2");
        let (vf, lock) = select(&mut f, &conf(r#""pfName":"ens1f0""#), &|_| None).unwrap();
        assert_eq!((vf.pci.as_str(), lock.as_str()), ("0000:3b:02.3", "0000:3b:02.3"));
        assert!(f.reclaimed.is_empty());
        assert!(
            f.notes.contains(
                &"skipped VF 0 locked, VF 1 held by c1/net1, VF 2 has no netdev in the host namespace".to_string()
            ),
            "{:?}",
            f.notes
        );
        // Nothing free: every VF named in the error's count.
        f.here.remove("ens1f0v3");
        let e = select(&mut f, &conf(r#""pfName":"ens1f0""#), &|_| None).unwrap_err();
        assert!(e.msg.contains("no free VF among its 4 VFs"), "{e}");
        let _ = fs::remove_dir_all(&f.sysfs.root);
    }

    #[test]
    fn an_orphans_vf_is_reclaimed_first_and_a_live_or_held_one_refused() {
        let mut f = fake("orphan");
        f.records.insert(pci("0000:3b:02.0"), (record("0000:3b:02.0", "c0"), Whereabouts::Orphan));
        let (vf, _) = select(&mut f, &conf(r#""pfName":"ens1f0""#), &|_| None).unwrap();
        assert_eq!((vf.pci.as_str(), f.reclaimed.clone()), ("0000:3b:02.0", vec![pci("0000:3b:02.0")]));
        let (vf, _) = select(&mut f, &conf(r#""deviceID":"0000:3b:02.0""#), &|_| None).unwrap();
        assert_eq!(vf.pci.as_str(), "0000:3b:02.0");
        assert_eq!(f.reclaimed.len(), 2);
        f.records.insert(pci("0000:3b:02.0"), (record("0000:3b:02.0", "c0"), Whereabouts::Live));
        let e = select(&mut f, &conf(r#""deviceID":"0000:3b:02.0""#), &|_| None).unwrap_err();
        assert!(e.msg.contains("already attached to container c0"), "{e}");
        f.records.insert(pci("0000:3b:02.0"), (record("0000:3b:02.0", "c0"), Whereabouts::Held));
        let e = select(&mut f, &conf(r#""deviceID":"0000:3b:02.0""#), &|_| None).unwrap_err();
        assert!(e.msg.contains("still in use by container c0"), "{e}");
        f.locked.insert(pci("0000:3b:02.0"));
        let e = select(&mut f, &conf(r#""deviceID":"0000:3b:02.0""#), &|_| None).unwrap_err();
        assert_eq!(e.code, Code::TryAgainLater, "{e}");
        assert_eq!(f.reclaimed.len(), 2, "nothing reclaimed from a live, held or locked VF");
        let _ = fs::remove_dir_all(&f.sysfs.root);
    }
}
