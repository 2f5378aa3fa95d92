//! A real link event reaches ListAndWatch at once although the link poll is a minute: the daemon runs in a network
//! namespace of its own where a veth named like the fixture's PF (ens1f0) stands in for the PF, its sysfs entry
//! the kernel's. Root only (it creates the namespace and the veth; the host's interfaces are never touched).

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// The namespace, deleted (with its veth) when the test ends.
struct Netns(String);

impl Netns {
    fn new(name: &str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).status();
        ip(&["netns", "add", name]);
        Netns(name.to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pf_link_going_down_reaches_list_and_watch_within_a_second_with_a_minute_poll() {
    // SAFETY: a plain query.
    if unsafe { libc::geteuid() } != 0 {
        return eprintln!("skipped: needs root (a network namespace and a veth)");
    }
    let ns = Netns::new(&format!("sriovdp-ev-{}", std::process::id()));
    ip(&["-n", &ns.0, "link", "add", "ens1f0", "type", "veth", "peer", "name", "ens1f0peer"]);
    ip(&["-n", &ns.0, "link", "set", "ens1f0peer", "up"]);
    ip(&["-n", &ns.0, "link", "set", "ens1f0", "up"]);
    let node = Node::new("events");
    // The PF's class/net entry is the kernel's: `ip netns exec` mounts the namespace's own /sys for the daemon.
    let class = node.dir.join("sys/class/net/ens1f0");
    std::fs::remove_dir_all(&class).unwrap();
    std::os::unix::fs::symlink("/sys/class/net/ens1f0", &class).unwrap();
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    // `ip netns exec` execs the daemon: the child's PID is the daemon's.
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &ns.0]).arg(daemon_bin());
    let plugin = spawn_on(&node, c, &["--poll-ms", "60000"]);
    let reg = kubelet.next_registration(Duration::from_secs(15)).await;
    let mut s =
        kubelet.dial(&reg).await.list_and_watch(sriov_rdma_device_plugin::api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    // The kernel's operstate, as the daemon reads it.
    let state = || {
        Command::new("ip")
            .args(["netns", "exec", &ns.0, "cat", "/sys/class/net/ens1f0/operstate"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    assert_eq!(state(), "up");

    ip(&["-n", &ns.0, "link", "set", "ens1f0", "down"]);
    assert_eq!(state(), "down");
    let took = until_health(&mut s, &all("Unhealthy"), Duration::from_millis(1500)).await;
    eprintln!("PF link down (a real link event) reached ListAndWatch in {took:?}");
    ip(&["-n", &ns.0, "link", "set", "ens1f0", "up"]);
    let took = until_health(&mut s, &all("Healthy"), Duration::from_millis(1500)).await;
    eprintln!("PF link up reached ListAndWatch in {took:?}");
    assert!(plugin.log().contains("is Unhealthy: its PF ens1f0 is down"), "{}", plugin.log());
}
