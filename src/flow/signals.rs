//! SIGTERM and SIGINT while state changes.

/// Called where state is about to change (a VF lock taken, an IPAM ADD/DEL started): from then on SIGTERM and
/// SIGINT are ignored, since a half-done change is worse than a slow one. Before that (validation, lookups,
/// waiting for a lock) the runtime's SIGTERM ends the plugin, which has nothing to undo yet.
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
