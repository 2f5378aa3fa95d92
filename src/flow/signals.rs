//! SIGTERM and SIGINT while state changes.

/// Called where state starts to change: by the journal, before ADD writes its first step and before an undo (a
/// rollback, DEL, GC, an orphan's reclaim) begins, and by DEL before an IPAM DEL for an attachment it has no record
/// of. From then on SIGTERM and SIGINT are ignored, since a half-done change is worse than a slow one. Before that
/// (validation, lookups, waiting for a lock, `gc --dry-run`) the runtime's SIGTERM ends the plugin, which has
/// nothing to undo yet.
pub fn changing_state() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use nix::sys::signal::{signal, SigHandler, Signal};
        for s in [Signal::SIGTERM, Signal::SIGINT] {
            // SAFETY: SIG_IGN installs no handler code.
            let _ = unsafe { signal(s, SigHandler::SigIgn) };
        }
    });
}
