//! A real container runtime: podman (CNI backend, runc) runs a container on a sriov-rdma network with a
//! stand-in VF; `--rm` must run DEL and give the VF back. Root only; without podman and runc (`make deps`
//! installs them) it fails, unless SRIOV_RDMA_SKIP_ROOT_TESTS=1. The runtime's own DEL runs in a process
//! podman spawns, so the plugin is reached through a wrapper that points it at the test's sysfs tree and
//! state directory.

mod common;
use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;

#[test]
fn podman_run_rm_attaches_and_gives_back_the_vf() {
    if !runnable("podman_run_rm", &[("root", is_root()), ("podman and runc", Podman::available())]) {
        return;
    }
    let bed = Bed::new("pod", 2);
    let bin = bed.dir.join("bin");
    let netd = bed.dir.join("net.d");
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(&netd).unwrap();
    let wrapper = bin.join("sriov-rdma-it");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nSRIOV_RDMA_SYSFS={} SRIOV_RDMA_STATE_DIR={} exec {} \"$@\"\n",
            bed.sysfs.display(),
            bed.state.display(),
            env!("CARGO_BIN_EXE_sriov-rdma")
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        netd.join("sriov-rdma-it.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"sriov-rdma-it","plugins":[{{"type":"sriov-rdma-it","pfName":"{}","mtu":9000,
              "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.88.51.0/24"}}]],"dataDir":"{}"}}}}]}}"#,
            bed.pf,
            bed.dir.join("ipam").display()
        ),
    )
    .unwrap();
    let pod = Podman::new(&bed.dir, &[&bin], &netd);
    // A busybox image made here: no registry is reachable.
    let root = bed.dir.join("rootfs/bin");
    fs::create_dir_all(&root).unwrap();
    fs::copy("/bin/busybox", root.join("busybox")).expect("busybox-static is installed");
    for a in ["sh", "ip"] {
        std::os::unix::fs::symlink("busybox", root.join(a)).unwrap();
    }
    let tar = bed.dir.join("rootfs.tar");
    must(&["tar", "-C", bed.dir.join("rootfs").to_str().unwrap(), "-cf", tar.to_str().unwrap(), "."]);
    let podman = |args: &[&str]| pod.run(args);
    let out = podman(&["import", "-q", tar.to_str().unwrap(), "localhost/sriov-rdma-it:1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let (pci0, vf0) = bed.vfs[0].clone();
    let before = identity(None, &vf0).unwrap();
    let out = podman(&[
        "run",
        "--rm",
        "--network",
        "sriov-rdma-it",
        "localhost/sriov-rdma-it:1",
        "sh",
        "-c",
        "ip -o link show eth0; ip -o addr show eth0",
    ]);
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{seen} {}", String::from_utf8_lossy(&out.stderr));
    // Inside the container: the lowest free VF of the PF, renamed to eth0, MTU 9000, with its address.
    assert!(seen.contains("eth0") && seen.contains("mtu 9000"), "{seen}");
    assert!(seen.contains(before.1.as_str()), "the VF's MAC {}: {seen}", before.1);
    assert!(seen.contains("10.88.51."), "{seen}");
    // After --rm: back on the host as before, no record left.
    assert_eq!(identity(None, &vf0), Some(before), "VF {pci0} given back");
    assert!(bed.records().is_empty());
    let _ = podman(&["rmi", "localhost/sriov-rdma-it:1"]);
}
