//! Orphans: attachments whose pod namespace is gone without a DEL (node crash, runtime bug, `ip netns del`). The
//! next ADD that wants such a VF reclaims it, and `sriov-rdma gc` does it with no runtime involved (Multus never
//! forwards GC to a secondary plugin; containerd never calls it).

use super::context::{not_usable, Host, Paths};
use super::del::{finish, release};
use super::ipam::Target;
use super::state::Attachment;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::CniResult;
use crate::cni::types::PciAddr;
use crate::kernel::sysfs::Vf;
use serde::Serialize;

/// A record whose pod namespace path no longer exists: the kernel has handed the VF back and no DEL came (node
/// crash, runtime bug, `ip netns del`). A path that exists but cannot be opened never makes an orphan.
pub fn is_orphan(rec: &Attachment) -> bool {
    !rec.netns.is_empty()
        && matches!(std::fs::symlink_metadata(&rec.netns), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
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
        "VF {}: reclaiming it from {}/{} (network {}), whose namespace {} is gone without a DEL",
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
    let done = release(host, &conf, &env, rec, &rec.netns, Target::of_env(&env)).map_err(|e| e.context(context()))?;
    let name = done.host_netdev.clone();
    finish(&host.store, rec, done).map_err(|e| e.context(context()))?;
    Ok(name)
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// The pod namespace exists: left alone.
    Live,
    /// Orphaned, and left as it is (`--dry-run`).
    Orphan,
    Reclaimed,
    /// Orphaned, and reclaiming it failed; the record is kept.
    Failed,
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
    let mut host: Option<Host> = None;
    let mut rows = Vec::new();
    for rec in store.all()? {
        let _lock = store.lock(&rec.pci)?;
        let Some(rec) = store.load(&rec.pci)? else { continue };
        let mut row = Row {
            pci: rec.pci.to_string(),
            network: rec.network.clone(),
            container_id: rec.container_id.clone(),
            ifname: rec.ifname.clone(),
            netns: rec.netns.clone(),
            state: State::Live,
            error: None,
        };
        if is_orphan(&rec) {
            row.state = State::Orphan;
            if !dry_run {
                let h = match host.as_mut() {
                    Some(h) => h,
                    None => host.insert(Host::open(paths)?),
                };
                match reclaim(h, &rec) {
                    Ok(_) => row.state = State::Reclaimed,
                    Err(e) => {
                        row.state = State::Failed;
                        row.error = Some(e.to_string());
                    }
                }
            }
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
            State::Orphan => "orphan (its namespace is gone; run without --dry-run to reclaim)",
            State::Reclaimed => "orphan, reclaimed: the VF is back on the host",
            State::Failed => "orphan, reclaim failed",
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
    let (mut dry_run, mut json) = (false, false);
    for a in args {
        match a.as_str() {
            "--dry-run" => dry_run = true,
            "--json" => json = true,
            other => {
                eprintln!("sriov-rdma gc: unknown argument {other:?}\nusage: sriov-rdma gc [--dry-run] [--json]");
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
    i32::from(rows.iter().any(|r| matches!(r.state, State::Orphan | State::Failed)))
}
