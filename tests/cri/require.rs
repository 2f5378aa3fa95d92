//! Root tests fail where they cannot run, unless skipping them is asked for explicitly.

use std::path::Path;

/// True when the test can run: root, and every path in `needs` exists. `SRIOV_RDMA_SKIP_ROOT_TESTS=1`
/// skips the test (said on stderr, the caller returns); otherwise anything missing fails it.
pub fn required(what: &str, needs: &[&str]) -> bool {
    if std::env::var("SRIOV_RDMA_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
        eprintln!("SKIPPED {what}: SRIOV_RDMA_SKIP_ROOT_TESTS=1");
        return false;
    }
    let mut missing = Vec::new();
    if !crate::common::is_root() {
        missing.push("root".to_string());
    }
    missing.extend(needs.iter().filter(|p| !Path::new(p).exists()).map(|p| p.to_string()));
    assert!(
        missing.is_empty(),
        "{what} needs {} (run scripts/install-deps.sh as root; SRIOV_RDMA_SKIP_ROOT_TESTS=1 skips it)",
        missing.join(", ")
    );
    true
}
