//! The DRA driver in process, against a kubelet stand-in and a stand-in API server, on the fake node of
//! tests/common (a PF with two mlx5-like VFs and a vfio-pci VF). The kubelet stand-in does what the kubelet's plugin
//! watcher and DRA manager do over the unix sockets: GetInfo and NotifyRegistrationStatus on the registration
//! socket, then NodePrepareResources and NodeUnprepareResources on the endpoint GetInfo named.
//!
//! The API server is a stand-in because no real one can run in a unit test: a tower service given to
//! `kube::Client::new` that answers the claim reads with fixed ResourceClaims and keeps the ResourceSlice it is
//! sent, so the test checks what the driver wrote to it. The real API server is the node scenario's
//! (tests/k8s/dra.sh). Every check reads what the driver answered over gRPC, left on disk (the CDI spec) or sent to
//! the API server.

mod common;

use common::*;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use kube::client::Body;
use prost::Message;
use serde_json::{json, Value};
use sriov_rdma_device_plugin::config::{Resource, Selectors};
use sriov_rdma_device_plugin::devices::Paths;
use sriov_rdma_device_plugin::dra::{self, DraPaths, Driver};
use sriov_rdma_device_plugin::dra_api::dra_plugin_client::DraPluginClient;
use sriov_rdma_device_plugin::dra_api::{Claim, NodePrepareResourcesRequest, NodeUnprepareResourcesRequest};
use sriov_rdma_device_plugin::registration_api::registration_client::RegistrationClient;
use sriov_rdma_device_plugin::registration_api::registration_server::RegistrationServer;
use sriov_rdma_device_plugin::registration_api::{InfoRequest, PluginInfo, RegistrationStatus};
use sriov_rdma_device_plugin::server::{unix_channel, Watcher};
use sriov_rdma_device_plugin::slices;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODE: &str = "node-a";

/// What the stand-in API server holds and was asked.
#[derive(Default)]
struct ApiState {
    /// Claims by `namespace/name`.
    claims: BTreeMap<String, Value>,
    /// ResourceSlices by name.
    slices: BTreeMap<String, Value>,
    /// `METHOD path` of every request, in order.
    requests: Vec<String>,
    version: u64,
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                      "reason": reason, "code": code.as_u16()});
    let mut r = Response::new(Body::from(body.to_string().into_bytes()));
    *r.status_mut() = code;
    r
}

fn ok(v: &Value) -> Response<Body> {
    Response::new(Body::from(v.to_string().into_bytes()))
}

/// The stand-in API server: GET of resourceclaims; GET, POST and PUT of resourceslices (PUT checks the
/// resourceVersion, as the real one does).
fn api_server(state: Arc<Mutex<ApiState>>) -> kube::Client {
    let svc = tower::service_fn(move |req: Request<Body>| {
        let state = state.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            let path = parts.uri.path().to_string();
            let mut s = state.lock().unwrap();
            s.requests.push(format!("{} {path}", parts.method));
            let claims = "/apis/resource.k8s.io/v1/namespaces/";
            let slices = "/apis/resource.k8s.io/v1/resourceslices";
            let resp = if let Some(rest) = path.strip_prefix(claims).filter(|_| parts.method == Method::PATCH) {
                // A server-side apply of the status: the applied devices replace the claim's (one field manager).
                let key = rest.replace("/resourceclaims/", "/").trim_end_matches("/status").to_string();
                let query = parts.uri.query().unwrap_or_default().to_string();
                let kind = parts.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
                s.requests.push(format!("PATCH {kind} {query}"));
                let applied: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                match s.claims.get_mut(&key) {
                    Some(c) if path.ends_with("/status") => {
                        c["status"]["devices"] = applied["status"]["devices"].clone();
                        ok(c)
                    }
                    _ => status(StatusCode::NOT_FOUND, "NotFound", &format!("resourceclaims {key:?} not found")),
                }
            } else if let Some(rest) = path.strip_prefix(claims) {
                let key = rest.replace("/resourceclaims/", "/");
                match s.claims.get(&key) {
                    Some(c) => ok(c),
                    None => status(StatusCode::NOT_FOUND, "NotFound", &format!("resourceclaims {key:?} not found")),
                }
            } else if let Some(rest) = path.strip_prefix(slices) {
                let name = rest.trim_start_matches('/').to_string();
                match parts.method {
                    Method::GET => match s.slices.get(&name) {
                        Some(v) => ok(v),
                        None => status(StatusCode::NOT_FOUND, "NotFound", "resourceslices not found"),
                    },
                    Method::POST | Method::PUT => {
                        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
                        let name = v["metadata"]["name"].as_str().unwrap().to_string();
                        let stale = parts.method == Method::PUT
                            && s.slices.get(&name).map(|c| c["metadata"]["resourceVersion"].clone())
                                != Some(v["metadata"]["resourceVersion"].clone());
                        if stale {
                            status(StatusCode::CONFLICT, "Conflict", "the object has been modified")
                        } else {
                            s.version += 1;
                            v["metadata"]["resourceVersion"] = json!(s.version.to_string());
                            // As the real one does: a device taint without a time gets one.
                            for d in v["spec"]["devices"].as_array_mut().into_iter().flatten() {
                                for t in d["taints"].as_array_mut().into_iter().flatten() {
                                    if t.get("timeAdded").is_none() {
                                        t["timeAdded"] = json!("2026-12-06T20:00:00Z");
                                    }
                                }
                            }
                            s.slices.insert(name, v.clone());
                            ok(&v)
                        }
                    }
                    _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "not in the stand-in"),
                }
            } else {
                status(StatusCode::NOT_FOUND, "NotFound", "not in the stand-in")
            };
            Ok::<_, Infallible>(resp)
        }
    });
    kube::Client::new(svc, "default")
}

/// A claim allocated by the scheduler: `(request, driver, pool, device)` for each result.
fn claim(ns: &str, name: &str, uid: &str, results: &[(&str, &str, &str, &str)]) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|(request, driver, pool, device)| {
            json!({"request": request, "driver": driver, "pool": pool, "device": device})
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "vf", "exactly": {"deviceClassName": "sriov-rdma"}}]}},
        "status": {
            "allocation": {"devices": {"results": results}},
            // The scheduler reserves the claim for the pod before the kubelet prepares it.
            "reservedFor": [{"resource": "pods", "name": format!("{name}-pod"), "uid": format!("{uid}-pod")}]
        }
    })
}

fn paths(node: &Node) -> Paths {
    Paths {
        sysfs: node.dir.join("sys"),
        dev_root: node.dir.join("dev"),
        kubelet_dir: node.kubelet_dir(),
        devinfo_dir: node.dir.join("devinfo"),
        state_dir: node.dir.join("state"),
    }
}

/// The `dra: true` resource's lists from the daemon's own watcher, over the fake node.
async fn watcher(
    node: &Node,
) -> (Watcher, Vec<tokio::sync::watch::Receiver<Vec<sriov_rdma_device_plugin::devices::Offered>>>) {
    let res =
        Resource { dra: true, ..Resource::new("rdma/dra", Selectors { require_rdma: false, ..Selectors::default() }) };
    let (mut w, lists) = Watcher::new(vec![res], Arc::new(paths(node)));
    w.refresh().await;
    (w, lists)
}

async fn wait_for(p: &Path) {
    let end = Instant::now() + Duration::from_secs(10);
    while !p.exists() {
        assert!(Instant::now() < end, "{} did not appear within 10 s", p.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn dra_claim(ns: &str, name: &str, uid: &str) -> Claim {
    Claim { namespace: ns.into(), name: name.into(), uid: uid.into() }
}

/// The driver over the fake node, its sockets under `<node>/kubelet-root`: its paths, what a registration bumps,
/// and the task serving it.
async fn start_driver(
    node: &Node,
    api: Arc<Mutex<ApiState>>,
) -> (Watcher, DraPaths, tokio::sync::watch::Receiver<u64>, tokio::task::JoinHandle<()>) {
    let (w, lists) = watcher(node).await;
    let root = node.dir.join("kubelet-root");
    let p = DraPaths::under(
        &root,
        dra::DRIVER,
        node.dir.join("cdi"),
        node.dir.join("sys"),
        node.dir.join("dev"),
        node.dir.join("policy.json"),
    );
    let (registered, kicked) = tokio::sync::watch::channel(0u64);
    let driver = Driver {
        name: dra::DRIVER.into(),
        node: NODE.into(),
        paths: p.clone(),
        client: api_server(api),
        offered: lists,
        inventory: w.inventory(),
        registered,
    };
    let served = tokio::spawn(dra::serve(driver, Duration::from_millis(100)));
    (w, p, kicked, served)
}

#[tokio::test]
async fn the_kubelet_registers_the_driver_then_prepares_and_unprepares_a_claim_through_cdi() {
    let node = Node::new("dra-prepare");
    let api = Arc::new(Mutex::new(ApiState::default()));
    {
        let mut s = api.lock().unwrap();
        let d = dra::DRIVER;
        s.claims.insert("ns1/one".into(), claim("ns1", "one", "uid-1", &[("vf", d, NODE, "pci-0000-3b-00-2")]));
        s.claims.insert("ns1/vfio".into(), claim("ns1", "vfio", "uid-2", &[("vf", d, NODE, "pci-0000-3b-00-4")]));
        s.claims.insert(
            "ns1/elsewhere".into(),
            claim("ns1", "elsewhere", "uid-3", &[("vf", d, "node-b", "pci-0000-3b-00-2")]),
        );
        s.claims
            .insert("ns1/nosuchvf".into(), claim("ns1", "nosuchvf", "uid-4", &[("vf", d, NODE, "pci-0000-3b-00-7")]));
        // A device of another driver in the same claim is not this driver's to prepare.
        s.claims.insert(
            "ns1/mixed".into(),
            claim(
                "ns1",
                "mixed",
                "uid-5",
                &[("gpu", "gpu.example.com", NODE, "gpu-0"), ("vf", d, NODE, "pci-0000-3b-00-3")],
            ),
        );
        s.claims.insert("ns1/gpu".into(), claim("ns1", "gpu", "uid-7", &[("gpu", "gpu.example.com", NODE, "gpu-0")]));
    }
    let (_w, p, mut kicked, served) = start_driver(&node, api.clone()).await;
    let (root, cdi_dir) = (node.dir.join("kubelet-root"), p.cdi_dir.clone());

    // The kubelet's plugin watcher: the socket appears in plugins_registry, GetInfo, then the status.
    let reg_sock = root.join("plugins_registry").join("sriov-rdma.k8s.io-reg.sock");
    wait_for(&reg_sock).await;
    let mut reg =
        RegistrationClient::new(unix_channel(reg_sock.clone()).await.expect("dialing the registration socket"));
    let info = reg.get_info(InfoRequest {}).await.expect("GetInfo").into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "sriov-rdma.k8s.io");
    assert_eq!(info.supported_versions, vec!["v1.DRAPlugin".to_string()]);
    let endpoint = root.join("plugins/sriov-rdma.k8s.io/dra.sock");
    assert_eq!(info.endpoint, endpoint.display().to_string());
    reg.notify_registration_status(RegistrationStatus { plugin_registered: true, error: String::new() })
        .await
        .expect("NotifyRegistrationStatus");
    tokio::time::timeout(Duration::from_secs(5), kicked.changed())
        .await
        .expect("a registration makes the slice be published again")
        .unwrap();

    let mut plugin = DraPluginClient::new(unix_channel(endpoint).await.expect("dialing the endpoint GetInfo named"));
    let prepare = |claims: Vec<Claim>| NodePrepareResourcesRequest { claims };
    let r = plugin.node_prepare_resources(prepare(vec![dra_claim("ns1", "one", "uid-1")])).await.unwrap().into_inner();
    let one = &r.claims["uid-1"];
    assert_eq!(one.error, "");
    assert_eq!(one.devices.len(), 1);
    let d = &one.devices[0];
    assert_eq!((d.pool_name.as_str(), d.device_name.as_str()), (NODE, "pci-0000-3b-00-2"));
    assert_eq!(d.request_names, vec!["vf".to_string()]);
    assert_eq!(d.cdi_device_ids, vec!["sriov-rdma.k8s.io/vf=uid-1-pci-0000-3b-00-2".to_string()]);
    let spec_path = cdi_dir.join("sriov-rdma.k8s.io-uid-1.json");
    let text = std::fs::read_to_string(&spec_path).expect("the CDI spec is written");
    let spec: Value = serde_json::from_str(&text).unwrap();
    let dev = node.dir.join("dev");
    assert_eq!(
        spec,
        json!({
            "cdiVersion": "0.6.0",
            "kind": "sriov-rdma.k8s.io/vf",
            "devices": [{
                "name": "uid-1-pci-0000-3b-00-2",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/infiniband/uverbs2", "hostPath": dev.join("infiniband/uverbs2"), "permissions": "rw"},
                        {"path": "/dev/infiniband/rdma_cm", "hostPath": dev.join("infiniband/rdma_cm"), "permissions": "rw"}
                    ],
                    "env": ["SRIOV_RDMA_DRA_PCI_0000_3B_00_2=0000:3b:00.2"]
                }
            }]
        })
    );
    // Again (the kubelet retries after its own restart): the same answer, the same file.
    let again =
        plugin.node_prepare_resources(prepare(vec![dra_claim("ns1", "one", "uid-1")])).await.unwrap().into_inner();
    assert_eq!(again.claims["uid-1"], *one);
    assert_eq!(std::fs::read_to_string(&spec_path).unwrap(), text);

    // A vfio-pci VF: the VFIO container device and its IOMMU group's.
    let r = plugin.node_prepare_resources(prepare(vec![dra_claim("ns1", "vfio", "uid-2")])).await.unwrap().into_inner();
    assert_eq!(r.claims["uid-2"].error, "");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(cdi_dir.join("sriov-rdma.k8s.io-uid-2.json")).unwrap()).unwrap();
    let nodes: Vec<&str> = spec["devices"][0]["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["/dev/vfio/vfio", "/dev/vfio/42"]);

    // Only this driver's devices of a claim are prepared.
    let r =
        plugin.node_prepare_resources(prepare(vec![dra_claim("ns1", "mixed", "uid-5")])).await.unwrap().into_inner();
    let names: Vec<&str> = r.claims["uid-5"].devices.iter().map(|d| d.device_name.as_str()).collect();
    assert_eq!((r.claims["uid-5"].error.as_str(), names), ("", vec!["pci-0000-3b-00-3"]));
    // None of them: nothing to prepare, no spec (one without devices is not a valid CDI spec).
    let r = plugin.node_prepare_resources(prepare(vec![dra_claim("ns1", "gpu", "uid-7")])).await.unwrap().into_inner();
    assert_eq!((r.claims["uid-7"].error.as_str(), r.claims["uid-7"].devices.len()), ("", 0));
    assert!(!cdi_dir.join("sriov-rdma.k8s.io-uid-7.json").exists());

    // Refusals name the claim and what was being done, and write nothing.
    let bad = vec![
        dra_claim("ns1", "one", "uid-other"),
        dra_claim("ns1", "gone", "uid-6"),
        dra_claim("ns1", "elsewhere", "uid-3"),
        dra_claim("ns1", "nosuchvf", "uid-4"),
    ];
    let r = plugin.node_prepare_resources(prepare(bad)).await.unwrap().into_inner();
    let err = |uid: &str| r.claims[uid].error.clone();
    assert!(err("uid-other").starts_with("claim ns1/one (uid-other): preparing: "), "{}", err("uid-other"));
    assert!(err("uid-other").contains("UID \"uid-1\""), "{}", err("uid-other"));
    assert!(
        err("uid-6").contains("claim ns1/gone (uid-6): preparing: reading it from the API server"),
        "{}",
        err("uid-6")
    );
    assert!(err("uid-3").contains("pool \"node-b\""), "{}", err("uid-3"));
    assert!(
        err("uid-4").contains("pci-0000-3b-00-7") && err("uid-4").contains("not a VF on this node"),
        "{}",
        err("uid-4")
    );
    for uid in ["uid-other", "uid-6", "uid-3", "uid-4"] {
        assert!(r.claims[uid].devices.is_empty());
        assert!(!cdi_dir.join(format!("sriov-rdma.k8s.io-{uid}.json")).exists(), "{uid}: no spec");
    }

    // Unprepare removes the spec, without asking the API server; a second time is no error.
    let unprepare = |uid: &str| NodeUnprepareResourcesRequest { claims: vec![dra_claim("ns1", "one", uid)] };
    let asked = api.lock().unwrap().requests.len();
    for _ in 0..2 {
        let r = plugin.node_unprepare_resources(unprepare("uid-1")).await.unwrap().into_inner();
        assert_eq!(r.claims["uid-1"].error, "");
        assert!(!spec_path.exists());
    }
    assert_eq!(api.lock().unwrap().requests.len(), asked, "unprepare needs no API server");
    assert!(cdi_dir.join("sriov-rdma.k8s.io-uid-2.json").exists(), "the other claim's spec stays");

    // A kubelet that cleans its directories: the driver binds and serves again.
    std::fs::remove_file(&reg_sock).unwrap();
    wait_for(&reg_sock).await;
    let mut reg = RegistrationClient::new(unix_channel(reg_sock).await.unwrap());
    assert_eq!(reg.get_info(InfoRequest {}).await.unwrap().into_inner().name, "sriov-rdma.k8s.io");
    served.abort();
}

/// A claim allocated one VF (`request` vf) with the allocation's config entries `(source, requests, driver,
/// parameters)`.
fn claim_with_config(ns: &str, name: &str, uid: &str, device: &str, configs: &[(&str, &[&str], &str, Value)]) -> Value {
    let mut c = claim(ns, name, uid, &[("vf", dra::DRIVER, NODE, device)]);
    let configs: Vec<Value> = configs
        .iter()
        .map(|(source, requests, driver, parameters)| {
            json!({"source": source, "requests": requests, "opaque": {"driver": driver, "parameters": parameters}})
        })
        .collect();
    c["status"]["allocation"]["devices"]["config"] = json!(configs);
    c
}

#[tokio::test]
async fn a_claims_config_is_checked_as_a_nads_and_admitted_by_the_node_policy_or_the_claim_is_refused() {
    let node = Node::new("dra-config");
    // The node policy: ns1 may use VLANs 100-199 and gets trust off; ns2 is not listed.
    std::fs::write(node.dir.join("policy.json"), r#"{"namespaces": {"ns1": {"vlans": ["100-199"], "trust": "off"}}}"#)
        .unwrap();
    let api = Arc::new(Mutex::new(ApiState::default()));
    let (d, vf0) = (dra::DRIVER, "pci-0000-3b-00-2");
    {
        let mut s = api.lock().unwrap();
        let mut add = |ns: &str, name: &str, uid: &str, configs: &[(&str, &[&str], &str, Value)]| {
            s.claims.insert(format!("{ns}/{name}"), claim_with_config(ns, name, uid, vf0, configs));
        };
        // The class's config, then the claim's (which wins on vlan); another driver's and another request's are
        // not this device's.
        add(
            "ns1",
            "good",
            "uid-good",
            &[
                ("FromClaim", &["vf"], d, json!({"vlan": 150, "mtu": 9000})),
                ("FromClass", &[], d, json!({"vlan": 120, "spoofchk": "on"})),
                ("FromClaim", &[], "gpu.example.com", json!({"vlan": 5000})),
                ("FromClaim", &["other"], d, json!({"vlan": 5000})),
            ],
        );
        add("ns1", "badvlan", "uid-badvlan", &[("FromClaim", &["vf"], d, json!({"vlan": 5000}))]);
        add("ns1", "badmtu", "uid-badmtu", &[("FromClaim", &[], d, json!({"mtu": 10}))]);
        add("ns1", "policyvlan", "uid-policyvlan", &[("FromClaim", &[], d, json!({"vlan": 300}))]);
        add("ns1", "untagged", "uid-untagged", &[]);
        add("ns1", "typo", "uid-typo", &[("FromClaim", &[], d, json!({"valn": 150}))]);
        add("ns1", "device", "uid-device", &[("FromClaim", &[], d, json!({"vlan": 150, "deviceID": "0000:3b:00.3"}))]);
        add("ns1", "notobject", "uid-notobject", &[("FromClaim", &[], d, json!([150]))]);
        add("ns2", "tenant", "uid-tenant", &[("FromClaim", &[], d, json!({"vlan": 150}))]);
    }
    let (_w, p, _kicked, served) = start_driver(&node, api).await;
    let endpoint = p.plugin_socket();
    wait_for(&endpoint).await;
    let mut plugin = DraPluginClient::new(unix_channel(endpoint).await.expect("dialing the endpoint"));
    let claims_dir = p.plugin_dir.join("claims");

    let r = plugin
        .node_prepare_resources(NodePrepareResourcesRequest { claims: vec![dra_claim("ns1", "good", "uid-good")] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.claims["uid-good"].error, "");
    assert!(p.cdi_dir.join("sriov-rdma.k8s.io-uid-good.json").exists(), "the CDI spec is written");
    let kept: Value =
        serde_json::from_slice(&std::fs::read(claims_dir.join("uid-good.json")).expect("the config is kept")).unwrap();
    assert_eq!(
        kept,
        json!({"claim": "ns1/good", "uid": "uid-good", "pods": ["uid-good-pod"], "devices": [{
            "request": "vf", "device": vf0, "pciAddress": VF0,
            "config": {"cniVersion": "1.0.0", "name": "dra-ns1-good", "type": "sriov-rdma", "deviceID": VF0,
                       "vlan": 150, "mtu": 9000, "spoofchk": "on", "trust": "off"}
        }]})
    );

    // Refusals: the key or the policy's rule named, nothing written.
    let bad = [
        ("ns1", "badvlan", "uid-badvlan", "invalid vlan 5000"),
        ("ns1", "badmtu", "uid-badmtu", "invalid mtu 10"),
        ("ns1", "policyvlan", "uid-policyvlan", "VLAN 300: rule namespaces.ns1.vlans [100-199]"),
        ("ns1", "untagged", "uid-untagged", "untagged (no vlan set): rule namespaces.ns1.vlans"),
        ("ns1", "typo", "uid-typo", "key valn is not a key of the network configuration"),
        ("ns1", "device", "uid-device", "key deviceID is not for a claim's config"),
        ("ns1", "notobject", "uid-notobject", "its parameters must be a JSON object"),
        ("ns2", "tenant", "uid-tenant", "namespace ns2 is not listed under namespaces in the node policy"),
    ];
    let claims = bad.iter().map(|(ns, name, uid, _)| dra_claim(ns, name, uid)).collect();
    let r = plugin.node_prepare_resources(NodePrepareResourcesRequest { claims }).await.unwrap().into_inner();
    for (ns, name, uid, want) in bad {
        let e = &r.claims[uid].error;
        assert!(
            e.starts_with(&format!("claim {ns}/{name} ({uid}): preparing: device {vf0} of request vf: its config: ")),
            "{e}"
        );
        assert!(e.contains(want), "{uid}: {e:?} does not say {want:?}");
        assert!(r.claims[uid].devices.is_empty());
        assert!(!p.cdi_dir.join(format!("sriov-rdma.k8s.io-{uid}.json")).exists(), "{uid}: no CDI spec");
        assert!(!claims_dir.join(format!("{uid}.json")).exists(), "{uid}: no config kept");
    }

    // Unprepare forgets the config with the spec.
    let r = plugin
        .node_unprepare_resources(NodeUnprepareResourcesRequest { claims: vec![dra_claim("ns1", "good", "uid-good")] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.claims["uid-good"].error, "");
    assert!(!claims_dir.join("uid-good.json").exists());
    assert!(!p.cdi_dir.join("sriov-rdma.k8s.io-uid-good.json").exists());
    served.abort();
}

/// One HTTP/2 frame.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// What a GetInfo written by hand got: the grpc-status and the PluginInfo, or the RST_STREAM error code.
type RawAnswer = Result<(String, PluginInfo), u32>;

/// GetInfo twice on one connection, as the kubelet's plugin watcher (grpc-go dialing a bare path) sends it: the
/// socket's path as `:authority`, the first call's fields added to the HPACK dynamic table (literals with
/// incremental indexing, no Huffman), the second call's fields all references to that table.
async fn raw_get_info(sock: &Path) -> [RawAnswer; 2] {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (headers, data, rst, settings, goaway) = (0x1, 0x0, 0x3, 0x4, 0x7);
    let (end_stream, end_headers, ack) = (0x1, 0x4, 0x1);
    let authority = sock.display().to_string();
    let fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/pluginregistration.Registration/GetInfo"),
        (":authority", authority.as_str()),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    let mut first = Vec::new();
    for (name, value) in fields {
        assert!(value.len() < 127, "a one-byte length is all this encoder writes");
        first.push(0x40);
        for s in [name, value] {
            first.push(s.len() as u8);
            first.extend_from_slice(s.as_bytes());
        }
    }
    // The newest entry is index 62: the first field inserted is the highest.
    let second: Vec<u8> = (0..fields.len()).map(|k| 0x80 | (62 + fields.len() - 1 - k) as u8).collect();
    let empty_request = [0u8; 5];
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(settings, 0, 0, &[]));
    for (stream, block) in [(1, &first), (3, &second)] {
        out.extend(h2_frame(headers, end_headers, stream, block));
        out.extend(h2_frame(data, end_stream, stream, &empty_request));
    }
    let mut conn = tokio::net::UnixStream::connect(sock).await.expect("dialing the socket");
    conn.write_all(&out).await.expect("writing the calls");

    let mut hpack = loona_hpack::Decoder::new();
    let mut bodies: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut answers: BTreeMap<u32, RawAnswer> = BTreeMap::new();
    let read = async {
        while answers.len() < 2 {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.expect("reading a frame's header");
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.expect("reading a frame's payload");
            match kind {
                k if k == settings && flags & ack == 0 => {
                    conn.write_all(&h2_frame(settings, ack, 0, &[])).await.expect("acknowledging SETTINGS")
                }
                k if k == data => bodies.entry(stream).or_default().extend_from_slice(&payload),
                k if k == headers => {
                    assert!(flags & end_headers != 0 && flags & 0x28 == 0, "a plain HEADERS frame (flags {flags:#x})");
                    let fields = hpack.decode(&payload).expect("decoding the server's header block");
                    if flags & end_stream != 0 {
                        let status = fields.iter().find(|(n, _)| n == b"grpc-status").map(|(_, v)| v.clone());
                        let status = String::from_utf8(status.expect("grpc-status in the trailers")).unwrap();
                        let body = bodies.remove(&stream).unwrap_or_default();
                        let info = PluginInfo::decode(body.get(5..).unwrap_or_default()).expect("a PluginInfo");
                        answers.insert(stream, Ok((status, info)));
                    }
                }
                k if k == rst => {
                    answers.insert(stream, Err(u32::from_be_bytes(payload[..4].try_into().unwrap())));
                }
                k if k == goaway => panic!("GOAWAY: {payload:?}"),
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("both calls answered within 10 s");
    [answers.remove(&1).expect("stream 1"), answers.remove(&3).expect("stream 3")]
}

#[tokio::test]
async fn the_registration_socket_answers_a_get_info_whose_authority_is_the_sockets_path() {
    let node = Node::new("dra-authority");
    let (_w, p, _kicked, served) = start_driver(&node, Arc::new(Mutex::new(ApiState::default()))).await;
    let reg_sock = p.registration_socket(dra::DRIVER);
    wait_for(&reg_sock).await;
    let info = PluginInfo {
        r#type: "DRAPlugin".into(),
        name: dra::DRIVER.into(),
        endpoint: p.plugin_socket().display().to_string(),
        supported_versions: vec!["v1.DRAPlugin".into()],
    };
    let want: RawAnswer = Ok(("0".into(), info));
    assert_eq!(raw_get_info(&reg_sock).await, [want.clone(), want]);

    // The same bytes to the same service served by tonic as it is: h2 resets both streams with PROTOCOL_ERROR,
    // what the kubelet reported from a real node.
    let (w, lists) = watcher(&node).await;
    let (registered, _) = tokio::sync::watch::channel(0u64);
    let driver = Driver {
        name: dra::DRIVER.into(),
        node: NODE.into(),
        paths: p.clone(),
        client: api_server(Arc::new(Mutex::new(ApiState::default()))),
        offered: lists,
        inventory: w.inventory(),
        registered,
    };
    let plain_sock = node.dir.join("plain.sock");
    let listener = tokio::net::UnixListener::bind(&plain_sock).expect("binding the plain socket");
    let plain = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(driver))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let protocol_error = 0x1;
    assert_eq!(raw_get_info(&plain_sock).await, [Err(protocol_error), Err(protocol_error)]);
    plain.abort();
    served.abort();
}

fn attrs(d: &Device) -> BTreeMap<String, String> {
    d.attributes
        .iter()
        .flatten()
        .map(|(k, v)| {
            let v = v.string.clone().or(v.int.map(|i| i.to_string())).unwrap_or_default();
            (k.clone(), v)
        })
        .collect()
}

#[tokio::test]
async fn the_slice_lists_each_vf_with_its_attributes_and_taints_an_unhealthy_one() {
    let node = Node::new("dra-slice");
    let (w, lists) = watcher(&node).await;
    let offered = lists[0].borrow().clone();
    let inv = w.inventory().borrow().clone();
    // The fake tree's PCI devices are plain directories; a real one's are links into the PCIe hierarchy, which is
    // where the root complex is read from: VF0 becomes such a link here.
    let sys = node.dir.join("sys");
    let real = sys.join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.2");
    std::fs::create_dir_all(real.parent().unwrap()).unwrap();
    std::fs::rename(sys.join("bus/pci/devices").join(VF0), &real).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.2",
        sys.join("bus/pci/devices").join(VF0),
    )
    .unwrap();
    let devices = slices::devices(&offered, &inv, &sys, dra::DRIVER);
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["pci-0000-3b-00-2", "pci-0000-3b-00-3", "pci-0000-3b-00-4"]);
    let want: BTreeMap<String, String> = [
        ("pciAddress", "0000:3b:00.2"),
        ("resource.kubernetes.io/pciBusID", "0000:3b:00.2"),
        ("resource.kubernetes.io/pcieRoot", "pci0000:3a"),
        ("pfName", "ens1f0"),
        ("pfPciAddress", "0000:3b:00.0"),
        ("vfIndex", "0"),
        ("vendor", "15b3"),
        ("deviceId", "101e"),
        ("kernelDriver", "mlx5_core"),
        ("linkType", "ether"),
        ("rdmaDevice", "mlx5_2"),
        ("numaNode", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(attrs(&devices[0]), want);
    assert_eq!(attrs(&devices[2])["kernelDriver"], "vfio-pci");
    assert!(!attrs(&devices[2]).contains_key("rdmaDevice"));
    assert!(devices.iter().all(|d| d.taints.is_none()), "all healthy");

    // VF1's RDMA port goes down: the watcher's next list has it Unhealthy, the slice taints it.
    let mut w = w;
    node.tree.rdma_port("mlx5_3", 1, "1: DOWN", "Ethernet").unwrap();
    w.refresh().await;
    let devices = slices::devices(&lists[0].borrow(), &w.inventory().borrow(), &sys, dra::DRIVER);
    let t = devices[1].taints.as_ref().expect("VF1 tainted");
    assert_eq!(t[0].key, "sriov-rdma.k8s.io/unhealthy");
    assert_eq!(t[0].value.as_deref(), Some("rdma_port_not_active"));
    assert_eq!(t[0].effect, "NoSchedule");
    assert!(devices[0].taints.is_none() && devices[2].taints.is_none());
}

#[tokio::test]
async fn the_slice_is_created_then_replaced_with_the_next_generation_only_when_it_changes() {
    let node = Node::new("dra-publish");
    let api = Arc::new(Mutex::new(ApiState::default()));
    let (w, lists) = watcher(&node).await;
    let publisher = slices::Publisher::new(api_server(api.clone()), dra::DRIVER, NODE);
    let devices = || slices::devices(&lists[0].borrow(), &w.inventory().borrow(), &node.dir.join("sys"), dra::DRIVER);
    assert_eq!(publisher.publish(devices()).await, Ok(Some(1)));
    let stored = |api: &Mutex<ApiState>| -> ResourceSlice {
        serde_json::from_value(api.lock().unwrap().slices["node-a-sriov-rdma.k8s.io"].clone()).unwrap()
    };
    let s = stored(&api);
    assert_eq!(s.spec.driver, "sriov-rdma.k8s.io");
    assert_eq!(s.spec.node_name.as_deref(), Some(NODE));
    assert_eq!((s.spec.pool.name.as_str(), s.spec.pool.generation, s.spec.pool.resource_slice_count), (NODE, 1, 1));
    assert_eq!(s.spec.devices.as_ref().map(Vec::len), Some(3));
    // Nothing changed: nothing written.
    let writes = |api: &Mutex<ApiState>| api.lock().unwrap().requests.iter().filter(|r| !r.starts_with("GET")).count();
    assert_eq!(publisher.publish(devices()).await, Ok(None));
    assert_eq!(writes(&api), 1);
    // One VF fewer: replaced, next generation.
    let mut fewer = devices();
    fewer.pop();
    assert_eq!(publisher.publish(fewer).await, Ok(Some(2)));
    let s = stored(&api);
    assert_eq!((s.spec.pool.generation, s.spec.devices.as_ref().map(Vec::len)), (2, Some(2)));
    assert_eq!(writes(&api), 2);
    let reqs = api.lock().unwrap().requests.clone();
    assert_eq!(reqs.last().unwrap(), "PUT /apis/resource.k8s.io/v1/resourceslices/node-a-sriov-rdma.k8s.io");
    // A tainted VF: written once, not again because the API server stamped the taint's time.
    let mut tainted = devices();
    tainted[0].taints = Some(vec![k8s_openapi::api::resource::v1::DeviceTaint {
        key: "sriov-rdma.k8s.io/unhealthy".into(),
        value: Some("pf_link_down".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    assert_eq!(publisher.publish(tainted.clone()).await, Ok(Some(3)));
    assert!(stored(&api).spec.devices.unwrap()[0].taints.as_ref().unwrap()[0].time_added.is_some());
    assert_eq!(publisher.publish(tainted).await, Ok(None));
    assert_eq!(writes(&api), 3);

    // The run loop: deleted behind its back (a kubelet that wiped the driver's slices), it is back after a kick.
    api.lock().unwrap().slices.clear();
    let (kick, kicked) = tokio::sync::watch::channel(0u64);
    let sys = node.dir.join("sys");
    let periods = slices::Periods { check: Duration::from_secs(3600), retry: Duration::from_millis(50) };
    let run = tokio::spawn(slices::run(publisher, lists.clone(), w.inventory(), sys, kicked, periods));
    let end = Instant::now() + Duration::from_secs(10);
    while api.lock().unwrap().slices.is_empty() {
        assert!(Instant::now() < end, "the run loop did not publish within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    api.lock().unwrap().slices.clear();
    kick.send_modify(|n| *n += 1);
    let end = Instant::now() + Duration::from_secs(10);
    while api.lock().unwrap().slices.is_empty() {
        assert!(Instant::now() < end, "a kick did not publish again within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stored(&api).spec.pool.generation, 1, "a new slice starts at generation 1");
    run.abort();
}

#[tokio::test]
async fn the_daemon_refuses_to_start_the_driver_without_the_node_name_or_the_api_server() {
    let node = Node::new("dra-start");
    let config = node.config(r#"{"resources":[{"name":"rdma/dra","dra":true,"requireRdma":false}]}"#);
    let run = |env: &[(&str, &str)]| {
        let mut c = node.command(&["--config", config.to_str().unwrap()]);
        c.env_remove("NODE_NAME").env_remove("KUBERNETES_SERVICE_HOST").env("KUBECONFIG", node.dir.join("none"));
        c.envs(env.iter().copied());
        let out = c.output().expect("running the daemon");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("node's name is unknown") && err.contains("NODE_NAME"), "{err}");
    let (code, err) = run(&[("NODE_NAME", NODE)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the API server cannot be reached"), "{err}");
    // Nothing of the driver was left behind.
    assert!(!node.dir.join("plugins_registry").exists());
}

#[tokio::test]
async fn a_config_edit_that_changes_which_resources_are_dra_is_refused() {
    let node = Node::new("dra-reload");
    let config = node.config(r#"{"resources":[{"name":"rdma/hca","requireRdma":false}]}"#);
    let plugin = node.start(&["--config", config.to_str().unwrap()]);
    plugin.wait_log("device plugin for rdma/hca started").await;
    std::fs::write(&config, r#"{"resources":[{"name":"rdma/hca","requireRdma":false,"dra":true}]}"#).unwrap();
    plugin.wait_log("the resources published through DRA (dra: true) changed from [] to [\"rdma/hca\"]").await;
    assert!(plugin.log().contains("the previous configuration stays in force"), "{}", plugin.log());
    assert!(!plugin.log().contains("DRA: driver"), "no driver started:\n{}", plugin.log());
}

/// Against a real API server (ignored: none runs in a unit test). `SRIOV_RDMA_TEST_KUBECONFIG` names a kubeconfig
/// whose user may write ResourceSlices; the test publishes the fake node's slice as node `dra-test-node`, reads it
/// back through the API server (its validation accepted every attribute name and value), replaces it, and deletes
/// it. `cargo test -p sriov-rdma-device-plugin --test dra -- --ignored real_api_server`.
#[tokio::test]
#[ignore]
async fn real_api_server_accepts_the_slice() {
    let client = real_client().await;
    let node = Node::new("dra-real");
    let (w, lists) = watcher(&node).await;
    let devices = || slices::devices(&lists[0].borrow(), &w.inventory().borrow(), &node.dir.join("sys"), dra::DRIVER);
    let api: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let name = "dra-test-node-sriov-rdma.k8s.io";
    let _ = api.delete(name, &Default::default()).await;
    let publisher = slices::Publisher::new(client, dra::DRIVER, "dra-test-node");
    assert_eq!(publisher.publish(devices()).await, Ok(Some(1)));
    let got = api.get(name).await.expect("reading the slice back");
    assert_eq!(got.spec.devices.as_ref(), Some(&devices()), "the API server kept every device as written");
    assert_eq!(publisher.publish(devices()).await, Ok(None));
    let mut tainted = devices();
    tainted[1].taints = Some(vec![k8s_openapi::api::resource::v1::DeviceTaint {
        key: "sriov-rdma.k8s.io/unhealthy".into(),
        value: Some("rdma_port_not_active".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    assert_eq!(publisher.publish(tainted.clone()).await, Ok(Some(2)));
    eprintln!("stored: {}", serde_json::to_string(&api.get(name).await.unwrap().spec).unwrap());
    assert_eq!(publisher.publish(tainted).await, Ok(None), "a stamped taint is no change");
    api.delete(name, &Default::default()).await.expect("deleting the slice");
}

/// The real API server's client, from SRIOV_RDMA_TEST_KUBECONFIG.
async fn real_client() -> kube::Client {
    let path = std::env::var("SRIOV_RDMA_TEST_KUBECONFIG")
        .expect("SRIOV_RDMA_TEST_KUBECONFIG: a kubeconfig of a real API server is what this test needs");
    let kc = kube::config::Kubeconfig::read_from(&path).expect("reading the kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("the kubeconfig's config");
    kube::Client::try_from(cfg).expect("a client")
}

/// Against a real API server (ignored, as the one above): a claim allocated as the scheduler writes it gets the
/// attach's `networkData` by the driver's server-side apply — the API server's validation of `status.devices`
/// (an allocated device, a CIDR, a MAC) accepts it and keeps it as written — and the detach's apply takes it out.
/// `cargo test -p sriov-rdma-device-plugin --test dra -- --ignored real_api_server`.
#[tokio::test]
#[ignore]
async fn real_api_server_keeps_the_network_data() {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    use sriov_rdma_device_plugin::draattach::{apply_status, ClaimStatus};
    let client = real_client().await;
    let api: kube::Api<ResourceClaim> = kube::Api::namespaced(client.clone(), "default");
    let name = "dra-network-data-test";
    let _ = api.delete(name, &Default::default()).await;
    let mut c: ResourceClaim = serde_json::from_value(claim("default", name, "", &[])).unwrap();
    c.metadata.uid = None;
    c.status = None;
    let created = api.create(&Default::default(), &c).await.expect("creating the claim");
    // The allocation, as the scheduler writes it.
    let mut allocated = created.clone();
    allocated.status = serde_json::from_value(json!({"allocation": {"devices": {"results": [
        {"request": "vf", "driver": dra::DRIVER, "pool": "dra-test-node", "device": "pci-0000-3b-00-2"}
    ]}}}))
    .unwrap();
    api.replace_status(name, &Default::default(), &allocated)
        .await
        .expect("the allocation written as the scheduler does");
    let st = ClaimStatus { client, driver: dra::DRIVER.into(), pool: "dra-test-node".into() };
    let data = json!({"interfaceName": "dra0", "ips": ["10.61.0.5/24"], "hardwareAddress": "aa:bb:cc:00:00:02"});
    apply_status(&st, &format!("default/{name}"), &[("pci-0000-3b-00-2".into(), data.clone())])
        .await
        .expect("the API server accepts the networkData");
    let got = serde_json::to_value(api.get(name).await.expect("reading the claim").status).unwrap();
    assert_eq!(
        got["devices"],
        json!([{"driver": dra::DRIVER, "pool": "dra-test-node", "device": "pci-0000-3b-00-2", "networkData": data}])
    );
    assert_eq!(got["allocation"]["devices"]["results"][0]["device"], "pci-0000-3b-00-2", "the allocation untouched");
    apply_status(&st, &format!("default/{name}"), &[]).await.expect("taking the entries out");
    let got = serde_json::to_value(api.get(name).await.expect("reading the claim").status).unwrap();
    assert!(got["devices"].as_array().is_none_or(|d| d.is_empty()), "{got}");
    api.delete(name, &Default::default()).await.expect("deleting the claim");
}

/// The attach's `networkData`: the driver's entries in the claim's `status.devices`, applied server-side by the
/// driver (field manager sriov-rdma.k8s.io, forced), and taken out again at the detach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attach_applies_the_claims_network_data_and_the_detach_takes_it_out() {
    use sriov_rdma_device_plugin::draattach::{apply_status, ClaimStatus};
    let state = Arc::new(Mutex::new(ApiState::default()));
    state
        .lock()
        .unwrap()
        .claims
        .insert("ns1/c".into(), claim("ns1", "c", "uid-c", &[("vf", dra::DRIVER, "node-a", "pci-x")]));
    let st = ClaimStatus { client: api_server(state.clone()), driver: dra::DRIVER.into(), pool: "node-a".into() };
    let data = json!({"interfaceName": "dra0", "ips": ["10.61.0.5/24"], "hardwareAddress": "aa:bb:cc:00:00:02"});
    apply_status(&st, "ns1/c", &[("pci-x".into(), data.clone())]).await.expect("applying the status");
    {
        let s = state.lock().unwrap();
        assert_eq!(
            s.claims["ns1/c"]["status"]["devices"],
            json!([{"driver": dra::DRIVER, "pool": "node-a", "device": "pci-x", "networkData": data}])
        );
        let patch = s.requests.iter().find(|r| r.starts_with("PATCH application/apply-patch")).expect("an apply");
        assert!(patch.contains("fieldManager=sriov-rdma.k8s.io") && patch.contains("force=true"), "{patch}");
        // The allocation is the scheduler's: untouched.
        assert_eq!(s.claims["ns1/c"]["status"]["allocation"]["devices"]["results"][0]["device"], "pci-x");
    }
    apply_status(&st, "ns1/c", &[]).await.expect("taking the entries out");
    assert_eq!(state.lock().unwrap().claims["ns1/c"]["status"]["devices"], json!([]));
    let err = apply_status(&st, "ns1/gone", &[]).await.expect_err("a claim the API server does not have");
    assert!(err.contains("ns1/gone"), "{err}");
}
