//! Root tests fail where they cannot run, unless skipping them is asked for explicitly (common::can_run).

use std::path::Path;

/// True when the test can run: root, and every path in `needs` exists; otherwise `common::can_run` fails it, or
/// skips it (saying so) under SRIOV_RDMA_SKIP_ROOT_TESTS=1.
#[track_caller]
pub fn required(_what: &str, needs: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !crate::common::is_root() {
        missing.push("root".to_string());
    }
    missing.extend(needs.iter().filter(|p| !Path::new(p).exists()).map(|p| p.to_string()));
    crate::common::can_run(
        missing.is_empty(),
        &format!("{} (scripts/install-deps.sh installs them)", missing.join(", ")),
    )
}
