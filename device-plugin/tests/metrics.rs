//! The daemon's metrics endpoint, its probes and its config reload, against the kubelet stand-in and a fake node:
//! every figure is scraped over HTTP from the running binary and compared with the fake tree, the kubelet's
//! checkpoint and what ListAndWatch sent; a ConfigMap update is made like the kubelet makes it (a new directory,
//! then the `..data` link swapped to it by a rename).

mod common;

use common::*;
use sriov_rdma_device_plugin::api;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A free port on 127.0.0.1 (bound, then released for the daemon).
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A plain HTTP/1.0 GET: the status code and the body; `None` while nothing listens.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// Waits (at most 10 s) until `path` answers `code`; returns the body.
async fn until_status(addr: &str, path: &str, code: u16) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let got = http_get(addr, path);
        if let Some((c, body)) = &got {
            if *c == code {
                return body.clone();
            }
        }
        assert!(Instant::now() < end, "{path} did not answer {code} within 10 s: {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the sample `series` (name and labels exactly as exposed) in a scrape; `None` when absent.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Waits (at most 10 s) until the scraped `series` is `want`.
async fn until_sample(addr: &str, series: &str, want: f64) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let text = http_get(addr, "/metrics").map(|(_, b)| b).unwrap_or_default();
        if sample(&text, series) == Some(want) {
            return;
        }
        assert!(Instant::now() < end, "{series} is not {want} within 10 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn scrape(addr: &str) -> String {
    http_get(addr, "/metrics").expect("scraping /metrics").1
}

/// The kubelet's checkpoint with one container holding `ids` of `resource`.
fn checkpoint(node: &Node, resource: &str, ids: &[&str]) {
    let doc = serde_json::json!({"Data": {
        "PodDeviceEntries": [{"PodUID": "u1", "ContainerName": "c", "ResourceName": resource,
                              "DeviceIDs": {"1": ids}, "AllocResp": ""}],
        "RegisteredDevices": {resource: [VF0, VF1, VFIO]}
    }, "Checksum": 0});
    fs::write(node.kubelet_dir().join("kubelet_internal_checkpoint"), doc.to_string()).unwrap();
}

const HCA: &str = r#"resource="rdma/hca""#;

#[tokio::test]
async fn metrics_show_the_offered_healthy_and_allocated_vfs_and_follow_a_health_change() {
    let node = Node::new("metrics");
    let addr = free_addr();
    let plugin = node.start(&["--metrics-addr", &addr]);
    // Up, its loop running, but not ready while no kubelet took its registration.
    until_status(&addr, "/healthz", 200).await;
    let body = until_status(&addr, "/readyz", 503).await;
    assert!(body.contains("rdma/hca"), "{body}");

    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let reg = kubelet.next_registration(Duration::from_secs(15)).await;
    let mut s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    until_status(&addr, "/readyz", 200).await;
    let text = scrape(&addr);
    assert_eq!(sample(&text, &format!("sriov_rdma_vfs_offered{{{HCA}}}")), Some(3.0), "{text}");
    assert_eq!(sample(&text, &format!("sriov_rdma_vfs_healthy{{{HCA}}}")), Some(3.0), "{text}");
    assert_eq!(sample(&text, &format!("sriov_rdma_registered{{{HCA}}}")), Some(1.0), "{text}");
    assert_eq!(sample(&text, &format!("sriov_rdma_vfs_allocated{{{HCA}}}")), Some(0.0), "{text}");

    // The PF's link goes down: every VF turns Unhealthy, for that reason.
    node.tree.netdev_state("ens1f0", "down", 1).unwrap();
    until_health(&mut s, &all("Unhealthy"), Duration::from_secs(5)).await;
    until_sample(&addr, &format!("sriov_rdma_vfs_healthy{{{HCA}}}"), 0.0).await;
    let down = format!(r#"sriov_rdma_health_transitions_total{{{HCA},health="Unhealthy",reason="pf_link_down"}}"#);
    until_sample(&addr, &down, 3.0).await;
    node.tree.netdev_state("ens1f0", "up", 1).unwrap();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    let up = format!(r#"sriov_rdma_health_transitions_total{{{HCA},health="Healthy",reason="ok"}}"#);
    until_sample(&addr, &up, 3.0).await;
    assert_eq!(sample(&scrape(&addr), &format!("sriov_rdma_vfs_offered{{{HCA}}}")), Some(3.0));

    // Allocate calls and a refused one; the kubelet's checkpoint says which VFs containers hold.
    let mut dp = kubelet.dial(&reg).await;
    let req = |id: &str| api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest { devices_ids: vec![id.to_string()] }],
    };
    dp.allocate(req(VF0)).await.unwrap();
    dp.allocate(req("0000:99:00.1")).await.unwrap_err();
    let text = scrape(&addr);
    assert_eq!(sample(&text, &format!("sriov_rdma_allocate_calls_total{{{HCA}}}")), Some(2.0), "{text}");
    assert_eq!(sample(&text, &format!("sriov_rdma_allocate_errors_total{{{HCA}}}")), Some(1.0), "{text}");
    checkpoint(&node, "rdma/hca", &[VF0, VF1]);
    until_sample(&addr, &format!("sriov_rdma_vfs_allocated{{{HCA}}}"), 2.0).await;

    // Attachment records by state, as `sriov-rdma gc` judges them: VF0's record names a namespace path that is
    // gone and a netdev (ens1f0v1) the host does not have, so the VF is still held in some namespace; a record
    // that cannot be decoded is counted as such.
    record(&node, VF0, true);
    fs::write(node.dir.join("state").join(format!("{VF1}.json")), b"{").unwrap();
    until_sample(&addr, r#"sriov_rdma_attachments{state="held"}"#, 1.0).await;
    until_sample(&addr, r#"sriov_rdma_attachments{state="unreadable"}"#, 1.0).await;
    let text = scrape(&addr);
    for state in ["live", "orphan", "unknown"] {
        assert_eq!(sample(&text, &format!(r#"sriov_rdma_attachments{{state="{state}"}}"#)), Some(0.0), "{text}");
    }

    // The kubelet goes away with its sockets: not ready until it is back.
    kubelet.stop_and_clean(true).await;
    until_status(&addr, "/readyz", 503).await;
    assert_eq!(http_get(&addr, "/healthz").map(|r| r.0), Some(200), "{}", plugin.log());
}

/// A ConfigMap volume as the kubelet lays it out: `<dir>/<key>` → `..data/<key>`, `..data` → a timestamped dir.
struct ConfigMapDir {
    dir: PathBuf,
    n: u32,
}

impl ConfigMapDir {
    fn new(dir: PathBuf, key: &str, text: &str) -> ConfigMapDir {
        fs::create_dir_all(&dir).unwrap();
        let mut m = ConfigMapDir { dir, n: 0 };
        m.update(key, text);
        std::os::unix::fs::symlink(Path::new("..data").join(key), m.dir.join(key)).unwrap();
        m
    }

    /// The kubelet's atomic update: the new content in a new directory, a `..data_tmp` link to it renamed over
    /// `..data`, the old directory removed.
    fn update(&mut self, key: &str, text: &str) {
        self.n += 1;
        let new = format!("..2026_12_04_00_00_{:02}.{}", self.n, self.n);
        fs::create_dir(self.dir.join(&new)).unwrap();
        fs::write(self.dir.join(&new).join(key), text).unwrap();
        let old = fs::read_link(self.dir.join("..data")).ok();
        std::os::unix::fs::symlink(&new, self.dir.join("..data_tmp")).unwrap();
        fs::rename(self.dir.join("..data_tmp"), self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }
}

#[tokio::test]
async fn a_changed_config_is_applied_without_a_restart_and_a_broken_one_keeps_the_previous() {
    let node = Node::new("reload");
    let addr = free_addr();
    let mut cm = ConfigMapDir::new(node.dir.join("cm"), "config.json", r#"{"resources":[{"name":"rdma/hca"}]}"#);
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let plugin = node.start(&["--metrics-addr", &addr, "--config", cm.path("config.json").to_str().unwrap()]);
    let reg = kubelet.next_registration(Duration::from_secs(15)).await;
    let mut s = kubelet.dial(&reg).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    until_health(&mut s, &all("Healthy"), Duration::from_secs(5)).await;
    let reloads = r#"sriov_rdma_config_reloads_total{file="config"}"#;
    let errors = r#"sriov_rdma_config_reload_errors_total{file="config"}"#;
    assert_eq!(sample(&scrape(&addr), reloads), Some(0.0));

    // Only the vfio-pci VF now: the other two stay listed, Unhealthy, so the kubelet no longer counts them.
    cm.update("config.json", r#"{"resources":[{"name":"rdma/hca","selectors":{"drivers":["vfio-pci"]}}]}"#);
    let narrowed: Vec<(String, String)> =
        [(VF0, "Unhealthy"), (VF1, "Unhealthy"), (VFIO, "Healthy")].map(|(v, h)| (v.into(), h.into())).to_vec();
    until_health(&mut s, &narrowed, Duration::from_secs(10)).await;
    until_sample(&addr, reloads, 1.0).await;
    until_sample(&addr, &format!("sriov_rdma_vfs_healthy{{{HCA}}}"), 1.0).await;

    // A broken edit: refused, saying why; the list stays.
    cm.update("config.json", r#"{"resources":[{"name":"rdma/hca","selectors":{"driver":["mlx5_core"]}}]}"#);
    until_sample(&addr, errors, 1.0).await;
    plugin.wait_log("the previous one stays in force").await;
    assert!(plugin.log().contains("driver"), "the log names the bad key:\n{}", plugin.log());
    let r = tokio::time::timeout(Duration::from_secs(1), s.message()).await;
    assert!(r.is_err(), "ListAndWatch sent nothing after a refused config: {r:?}");
    let text = scrape(&addr);
    assert_eq!(sample(&text, reloads), Some(1.0), "{text}");
    assert_eq!(sample(&text, &format!("sriov_rdma_vfs_healthy{{{HCA}}}")), Some(1.0), "{text}");

    // A second resource registers and offers the VFs the first no longer takes.
    cm.update(
        "config.json",
        r#"{"resources":[{"name":"rdma/hca","selectors":{"drivers":["vfio-pci"]}},{"name":"rdma/b"}]}"#,
    );
    let reg_b = kubelet.next_registration(Duration::from_secs(10)).await;
    assert_eq!(reg_b.resource_name, "rdma/b");
    let mut sb = kubelet.dial(&reg_b).await.list_and_watch(api::Empty {}).await.unwrap().into_inner();
    let b_list: Vec<String> = next_list(&mut sb, Duration::from_secs(5)).await.into_iter().map(|d| d.id).collect();
    assert_eq!(b_list, vec![VF0.to_string(), VF1.to_string()]);
    until_sample(&addr, reloads, 2.0).await;
    until_status(&addr, "/readyz", 200).await;

    // Removed again: its socket goes and its ListAndWatch stream ends; the first resource is untouched.
    cm.update("config.json", r#"{"resources":[{"name":"rdma/hca","selectors":{"drivers":["vfio-pci"]}}]}"#);
    let end =
        tokio::time::timeout(Duration::from_secs(10), async { while let Ok(Some(_)) = sb.message().await {} }).await;
    assert!(end.is_ok(), "rdma/b's ListAndWatch stream did not end");
    let sock = node.kubelet_dir().join(&reg_b.endpoint);
    let t0 = Instant::now();
    while sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{} is still there", sock.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(node.kubelet_dir().join(&reg.endpoint).exists());
    let text = scrape(&addr);
    assert_eq!(sample(&text, reloads), Some(3.0), "{text}");
    assert_eq!(sample(&text, r#"sriov_rdma_vfs_offered{resource="rdma/b"}"#), None, "{text}");
}

#[tokio::test]
async fn the_node_policy_is_installed_when_its_configmap_changes_and_a_bad_one_is_not() {
    let node = Node::new("policy");
    let addr = free_addr();
    let first = r#"{"pfs": ["ens1f0"], "namespaces": {"*": {"vlans": [100]}}}"#;
    let mut cm = ConfigMapDir::new(node.dir.join("pcm"), "policy.json", first);
    let installed = node.dir.join("etc");
    fs::create_dir_all(&installed).unwrap();
    let policy = cm.path("policy.json");
    let _plugin = node.start(&[
        "--metrics-addr",
        &addr,
        "--policy",
        policy.to_str().unwrap(),
        "--policy-dir",
        installed.to_str().unwrap(),
    ]);
    let file = installed.join("policy.json");
    let until_file = |want: &'static str| {
        let file = file.clone();
        async move {
            let t0 = Instant::now();
            while fs::read_to_string(&file).ok().as_deref() != Some(want) {
                assert!(t0.elapsed() < Duration::from_secs(10), "{} is not {want}", file.display());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    until_file(first).await;
    let reloads = r#"sriov_rdma_config_reloads_total{file="policy"}"#;
    let errors = r#"sriov_rdma_config_reload_errors_total{file="policy"}"#;
    until_status(&addr, "/healthz", 200).await;
    assert_eq!(sample(&scrape(&addr), reloads), Some(0.0), "the start's install is no reload");

    let second = r#"{"pfs": ["ens1f0"], "namespaces": {"*": {"vlans": [200]}}}"#;
    cm.update("policy.json", second);
    until_file(second).await;
    until_sample(&addr, reloads, 1.0).await;

    cm.update("policy.json", r#"{"pfs": ["ens1f0"], "namespaces": {"*": {"vlans": ["x"]}}}"#);
    until_sample(&addr, errors, 1.0).await;
    assert_eq!(fs::read_to_string(&file).unwrap(), second, "a refused policy leaves the installed one");
}
