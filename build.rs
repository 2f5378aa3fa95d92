// Stamps the commit into both binaries' `--version` (SRIOV_RDMA_COMMIT at compile time): the environment's
// SRIOV_RDMA_COMMIT if set (a build from a tarball), else `git rev-parse --short HEAD`, else "unknown".
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=SRIOV_RDMA_COMMIT");
    let commit = std::env::var("SRIOV_RDMA_COMMIT").ok().filter(|c| !c.trim().is_empty()).or_else(|| {
        // Built again when HEAD moves: HEAD itself, the branch it points at, and packed refs.
        let head = git(&["symbolic-ref", "-q", "HEAD"]);
        let files = ["HEAD", head.as_deref().unwrap_or("HEAD"), "packed-refs"];
        for f in files.iter().filter_map(|f| git(&["rev-parse", "--git-path", f])) {
            if std::path::Path::new(&f).exists() {
                println!("cargo:rerun-if-changed={f}");
            }
        }
        git(&["rev-parse", "--short", "HEAD"])
    });
    println!("cargo:rustc-env=SRIOV_RDMA_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
