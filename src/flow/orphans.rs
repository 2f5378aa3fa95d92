//! `sriov-rdma gc`: finds the attachments whose pod namespace is gone without a DEL and reclaims their VFs, with no
//! runtime involved (Multus never forwards GC to a secondary plugin; containerd never calls it).

use super::attach::{is_orphan, reclaim, Host};
use super::state::Store;
use crate::cni::error::CniResult;
use serde::Serialize;

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
pub fn run(dry_run: bool) -> CniResult<Vec<Row>> {
    let store = Store::open()?;
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
                    None => host.insert(Host::open()?),
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
    let rows = match run(dry_run) {
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
