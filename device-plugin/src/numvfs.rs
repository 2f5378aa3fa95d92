//! Node setup the configuration declares: the VF count of each PF it names (`numVfs`), written to
//! `sriov_numvfs` at start. A non-zero count is never changed while a VF of that PF is attached to a pod.

use crate::devices::attached;
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use std::path::Path;

/// What was done for one PF, for the log and `--dry-run`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub pf: String,
    pub from: u32,
    pub to: u32,
    /// `unchanged`, `set`, `would set` (dry run) or `refused`.
    pub action: &'static str,
    pub why: Option<String>,
}

/// A PF the configuration names that is not there or cannot take the count: a configuration error, naming the key.
pub fn check(sysfs: &Sysfs, wanted: &[(String, u32)]) -> Result<(), String> {
    for (pf, n) in wanted {
        let key = format!("numVfs.{pf}");
        let pci = sysfs.pf_pci(pf).map_err(|e| format!("{key}: {pf} is not an SR-IOV PF on this node: {e}"))?;
        let total: u32 = sysfs.read_trimmed(&pci, "sriov_totalvfs").and_then(|s| s.parse().ok()).unwrap_or(0);
        if *n > total {
            return Err(format!("{key}: {n} is more than the {total} VFs {pf} supports (sriov_totalvfs)"));
        }
    }
    Ok(())
}

/// Sets each PF's VF count (after [`check`]). The kernel takes a new non-zero count only from zero, so a change
/// writes 0 first: refused while any VF of that PF has an attachment record under `state_dir`.
pub fn apply(sysfs: &Sysfs, wanted: &[(String, u32)], state_dir: &Path, dry_run: bool) -> Vec<Outcome> {
    let busy = attached(state_dir);
    let mut out = Vec::new();
    for (pf, n) in wanted {
        let Ok(pci) = sysfs.pf_pci(pf) else { continue };
        let from: u32 = sysfs.read_trimmed(&pci, "sriov_numvfs").and_then(|s| s.parse().ok()).unwrap_or(0);
        let outcome = |action, why: Option<String>| Outcome { pf: pf.clone(), from, to: *n, action, why };
        if from == *n {
            out.push(outcome("unchanged", None));
            continue;
        }
        let in_use: Vec<String> = sysfs
            .vfs_of(&pci)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, v)| busy.contains(v))
            .map(|(_, v)| v.to_string())
            .collect();
        if from != 0 && !in_use.is_empty() {
            let why = format!(
                "not changing {pf}'s VF count from {from} to {n}: VF {} attached to a pod (records in {}); \
                 delete those pods first",
                in_use.join(", "),
                state_dir.display()
            );
            out.push(outcome("refused", Some(why)));
            continue;
        }
        if dry_run {
            out.push(outcome("would set", None));
            continue;
        }
        let file = sysfs.pci_dir(&pci).join("sriov_numvfs");
        let write = |v: u32| {
            std::fs::write(&file, v.to_string()).map_err(|e| format!("writing {v} to {}: {e}", file.display()))
        };
        let r = if from != 0 { write(0).and_then(|()| write(*n)) } else { write(*n) };
        match r {
            Ok(()) => out.push(outcome("set", None)),
            Err(e) => out.push(outcome("refused", Some(e))),
        }
    }
    out
}
