//! Node setup the configuration declares: the VF count of each PF it names (`numVfs`), written to
//! `sriov_numvfs` at start. A non-zero count is never changed while a VF of that PF is attached to a pod or
//! allocated by the kubelet.

use crate::devices::attached;
use sriov_rdma_cni::flow::state::{Store, VfLock};
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::kubelet::{Checkpoint, CHECKPOINT};
use sriov_rdma_cni::model::PciAddr;
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
/// writes 0 first, which removes every VF: refused while any VF of that PF is in use, by an attachment record under
/// `state_dir` (a NAD's) or an allocation in the kubelet's checkpoint in `kubelet_dir` (a pod's, with or without a
/// NAD: a DPDK pod's vfio-pci VF has no record). Every VF's lock is held from the check to the write, so an ADD in
/// flight (which holds its VF's lock from selection to its record) is waited for, and none starts meanwhile.
pub fn apply(
    sysfs: &Sysfs,
    wanted: &[(String, u32)],
    state_dir: &Path,
    kubelet_dir: &Path,
    dry_run: bool,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for (pf, n) in wanted {
        let Ok(pci) = sysfs.pf_pci(pf) else { continue };
        let from: u32 = sysfs.read_trimmed(&pci, "sriov_numvfs").and_then(|s| s.parse().ok()).unwrap_or(0);
        let outcome = |action, why: Option<String>| Outcome { pf: pf.clone(), from, to: *n, action, why };
        if from == *n {
            out.push(outcome("unchanged", None));
            continue;
        }
        let refuse = |why: String| format!("not changing {pf}'s VF count from {from} to {n}: {why}");
        let vfs: Vec<PciAddr> = sysfs.vfs_of(&pci).unwrap_or_default().into_iter().map(|(_, v)| v).collect();
        let _locks = match (from != 0 && !dry_run).then(|| lock_all(state_dir, &vfs)).transpose() {
            Ok(l) => l,
            Err(e) => {
                out.push(outcome("refused", Some(refuse(e))));
                continue;
            }
        };
        if from != 0 {
            if let Err(why) = in_use(&vfs, state_dir, kubelet_dir) {
                out.push(outcome("refused", Some(refuse(why))));
                continue;
            }
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

/// Every VF's lock in the CNI's store, waiting a bounded time for each (an ADD or DEL holds one briefly).
fn lock_all(state_dir: &Path, vfs: &[PciAddr]) -> Result<Vec<VfLock>, String> {
    let store = Store::at(state_dir).map_err(|e| e.msg)?;
    vfs.iter().map(|v| store.lock(v).map_err(|e| format!("{} (an ADD or DEL is working on it)", e.msg))).collect()
}

/// Why some of `vfs` cannot be removed: attached to a pod (records) or allocated by the kubelet (checkpoint).
/// A checkpoint that cannot be read is a reason too: fail closed.
fn in_use(vfs: &[PciAddr], state_dir: &Path, kubelet_dir: &Path) -> Result<(), String> {
    let busy = attached(state_dir);
    let recorded: Vec<String> = vfs.iter().filter(|v| busy.contains_key(*v)).map(ToString::to_string).collect();
    if !recorded.is_empty() {
        return Err(format!(
            "VF {} attached to a pod (records in {}); delete those pods first",
            recorded.join(", "),
            state_dir.display()
        ));
    }
    let file = kubelet_dir.join(CHECKPOINT);
    let cp = Checkpoint::read(&file).map_err(|e| format!("{e}; cannot tell whether a pod holds one of its VFs"))?;
    let mut held: Vec<String> = Vec::new();
    for v in vfs {
        for a in cp.iter().flat_map(|cp| cp.holders(v)) {
            held.push(format!("{v} ({} of pod {})", a.resource, a.pod_uid));
        }
    }
    if !held.is_empty() {
        return Err(format!(
            "VF {} allocated by the kubelet (its checkpoint {}); delete those pods first",
            held.join(", "),
            file.display()
        ));
    }
    Ok(())
}
