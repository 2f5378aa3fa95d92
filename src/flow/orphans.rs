//! Orphans: attachments whose VF is back on the host without a DEL (node crash, runtime bug, `ip netns del` of the
//! last holder). The next ADD that wants such a VF reclaims it, and `sriov-rdma gc` does it with no runtime involved (Multus never
//! forwards GC to a secondary plugin; containerd never calls it).

use super::attachment::Attachment;
use super::context::{find_host_netdev_in, netns_missing, not_usable, Host, Paths};
use super::del::{finish, release};
use super::ipam::Target;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::CniResult;
use crate::kernel::link::RouteSocket;
use crate::kernel::netns::Netns;
use crate::kernel::sysfs::{Presence, Sysfs, Vf};
use crate::model::PciAddr;
use serde::Serialize;
use std::time::Duration;

/// Where an attachment's VF is, as the host sees it: what makes its record an orphan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whereabouts {
    /// In a pod: its netdev is not on the host, and the pod namespace's path is there.
    Live,
    /// Its namespace's path is gone but the VF has not come back: a process still holds the namespace (or the
    /// kernel has not yet handed the VF back). Still in use: never reclaimed.
    Held,
    /// Back on the host (a kernel-driver VF whose netdev the host sees under the VF's PCI device, or a VF gone from
    /// sysfs altogether), or a userspace-driver VF whose namespace is gone: the record is an orphan.
    Orphan,
}

/// Whether a pod namespace path names no live namespace: missing, or anything but an nsfs file (a regular file
/// left where a namespace was mounted, a directory). One that exists but cannot be opened is not "gone".
pub fn netns_gone(path: &str) -> bool {
    if path.is_empty() {
        return false;
    }
    Netns::open(path).err().is_some_and(|e| netns_missing(&e))
}

/// Where the record's VF is. A path that went away proves nothing while the VF is still inside a namespace
/// someone holds: only a VF back on the host makes an orphan.
pub fn whereabouts(host: &mut Host, rec: &Attachment) -> CniResult<Whereabouts> {
    whereabouts_in(&host.sysfs, &mut host.route, rec)
}

/// [`whereabouts`] for a caller without a [`Host`] (doctor).
pub fn whereabouts_in(sysfs: &Sysfs, route: &mut RouteSocket, rec: &Attachment) -> CniResult<Whereabouts> {
    let gone = netns_gone(&rec.netns);
    let Some(orig) = &rec.netdev else {
        return Ok(if gone { Whereabouts::Orphan } else { Whereabouts::Live });
    };
    match sysfs.presence(&rec.pci) {
        Presence::Gone => return Ok(Whereabouts::Orphan),
        // An interrupted rebind: in no namespace; an orphan once its pod's namespace is gone.
        Presence::Unbound => return Ok(if gone { Whereabouts::Orphan } else { Whereabouts::Live }),
        Presence::Bound => {}
    }
    if find_host_netdev_in(sysfs, route, rec, &orig.name, Duration::ZERO)?.is_some() {
        return Ok(Whereabouts::Orphan);
    }
    Ok(if gone { Whereabouts::Held } else { Whereabouts::Live })
}

/// Whether the record is an orphan, for a report, over the command's one route socket: a host that cannot be read
/// (no route socket) says no.
pub fn is_orphan(sysfs: &Sysfs, route: &mut Option<RouteSocket>, rec: &Attachment) -> bool {
    let Some(route) = route.as_mut() else { return false };
    matches!(whereabouts_in(sysfs, route, rec), Ok(Whereabouts::Orphan))
}

/// The VF as sysfs shows it after a reclaim, with the netdev name the reclaim left it under.
pub(super) fn vf_after_reclaim(host: &mut Host, pci: &PciAddr, a: &Attachment) -> CniResult<Vf> {
    let name = reclaim(host, a)?;
    let mut vf = host.sysfs.vf(pci).map_err(|e| not_usable(format!("VF {pci}"), e))?;
    if name.is_some() {
        vf.netdev = name;
    }
    Ok(vf)
}

/// Undoes an orphan's record exactly as its DEL would have, with the configuration and CNI_PATH its ADD ran
/// with (for IPAM DEL). The caller holds the VF's lock. Returns the VF netdev's host name.
pub fn reclaim(host: &mut Host, rec: &Attachment) -> CniResult<Option<String>> {
    crate::warn!(
        "VF {}: reclaiming it from {}/{} (network {}): it is back on the host without a DEL (namespace {})",
        rec.pci,
        rec.container_id,
        rec.ifname,
        rec.network,
        rec.netns
    );
    let raw = rec.ipam_config.clone().unwrap_or_else(|| {
        serde_json::json!({"cniVersion": "1.0.0", "name": rec.network, "type": "sriov-rdma"}).to_string()
    });
    let context = || format!("reclaiming orphaned VF {} of {}/{}", rec.pci, rec.container_id, rec.ifname);
    let conf = NetConf::parse(raw.as_bytes(), &Default::default()).map_err(|e| e.context(context()))?;
    let env = CniEnv {
        command: crate::cni::env::Command::Del,
        container_id: rec.container_id.clone(),
        netns: rec.netns.clone(),
        ifname: rec.ifname.clone(),
        args: Default::default(),
        path: rec.cni_path.clone(),
    };
    let target = Target::of_record(rec, &rec.cni_path);
    let done = release(host, &conf, &env, rec, &rec.netns, target).map_err(|e| e.context(context()))?;
    let name = done.host_netdev.clone();
    finish(&host.store, rec, done).map_err(|e| e.context(context()))?;
    Ok(name)
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// In its pod: left alone.
    Live,
    /// Its namespace path is gone but the VF is still inside a namespace something holds: left alone.
    Held,
    /// Orphaned, and left as it is (`--dry-run`).
    Orphan,
    Reclaimed,
    /// Orphaned, and reclaiming it failed; the record is kept.
    Failed,
    /// The record cannot be read: listed, never touched.
    Unreadable,
    /// Another ADD or DEL holds the VF's lock: skipped, not looked at.
    Busy,
}

#[derive(Debug, Serialize)]
pub struct Row {
    pub pci: String,
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every record with what became of it. Each VF is locked while it is looked at, as ADD and DEL lock it.
pub fn run(paths: &Paths, dry_run: bool) -> CniResult<Vec<Row>> {
    let store = paths.store()?;
    let mut host = Host::open(paths)?;
    let mut rows = Vec::new();
    for bad in store.unreadable() {
        rows.push(Row {
            pci: bad.pci.to_string(),
            network: String::new(),
            container_id: String::new(),
            ifname: String::new(),
            netns: String::new(),
            state: State::Unreadable,
            error: Some(bad.to_string()),
        });
    }
    let row_of = |rec: &Attachment, state| Row {
        pci: rec.pci.to_string(),
        network: rec.network.clone(),
        container_id: rec.container_id.clone(),
        ifname: rec.ifname.clone(),
        netns: rec.netns.clone(),
        state,
        error: None,
    };
    for rec in store.all()? {
        // A VF another ADD/DEL holds (a slow IPAM) is skipped and said, never waited for: the rest go on.
        let Some(_lock) = store.try_lock(&rec.pci)? else {
            rows.push(row_of(&rec, State::Busy));
            continue;
        };
        let Some(rec) = store.load(&rec.pci)? else { continue };
        let mut row = row_of(&rec, State::Live);
        match whereabouts(&mut host, &rec)? {
            Whereabouts::Live => {}
            Whereabouts::Held => row.state = State::Held,
            Whereabouts::Orphan if dry_run => row.state = State::Orphan,
            Whereabouts::Orphan => match reclaim(&mut host, &rec) {
                Ok(_) => row.state = State::Reclaimed,
                Err(e) => {
                    row.state = State::Failed;
                    row.error = Some(e.to_string());
                }
            },
        }
        rows.push(row);
    }
    Ok(rows)
}

fn render(rows: &[Row]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    if rows.is_empty() {
        let _ = writeln!(o, "no attachment recorded");
    }
    for r in rows {
        let state = match r.state {
            State::Live => "live",
            State::Held => {
                "in use: its namespace path is gone, but the VF has not come back (a process holds the namespace)"
            }
            State::Orphan => "orphan (the VF is back on the host; run without --dry-run to reclaim)",
            State::Unreadable => "record unreadable: check the VF, then move the file aside",
            State::Reclaimed => "orphan, reclaimed: the VF is back on the host",
            State::Failed => "orphan, reclaim failed",
            State::Busy => "busy: another ADD/DEL holds its lock; skipped (run gc again later)",
        };
        let _ =
            writeln!(o, "VF {}  {}/{} (network {})  {}  {state}", r.pci, r.container_id, r.ifname, r.network, r.netns);
        if let Some(e) = &r.error {
            let _ = writeln!(o, "    {e}");
        }
    }
    o
}

/// `gc [--dry-run] [--json]`: exit status 0 when no orphan is left, 1 when one is (or on an error).
pub fn main(args: &[String]) -> i32 {
    const USAGE: &str = "usage: sriov-rdma gc [--dry-run] [--json]";
    let (mut dry_run, mut json) = (false, false);
    for a in args {
        match a.as_str() {
            "--dry-run" => dry_run = true,
            "--json" => json = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return 0;
            }
            other => {
                eprintln!("sriov-rdma gc: unknown argument {other:?}\n{USAGE}");
                return 2;
            }
        }
    }
    let rows = match run(&Paths::of_process(), dry_run) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sriov-rdma gc: {e}");
            return 1;
        }
    };
    if json {
        match serde_json::to_string_pretty(&rows) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("sriov-rdma gc: encoding the report: {e}"),
        }
    } else {
        print!("{}", render(&rows));
    }
    i32::from(rows.iter().any(|r| matches!(r.state, State::Orphan | State::Failed | State::Unreadable)))
}
