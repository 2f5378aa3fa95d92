//! Every shipped example, conf file and deploy/ manifest parses, has the fields its kind needs, and its CNI
//! config passes the plugin's own loader; the manifests refer to each other consistently.

use serde::Deserialize;
use serde_json::Value;
use sriov_rdma_cni::cni::config::{NetConf, VfSource};
use sriov_rdma_cni::install::check_netconf;
use sriov_rdma_cni::policy::Policy;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        // The Helm chart's sources are templates, not manifests: `make chart` lints and renders them, and
        // deploy/sriov-rdma.yaml, checked here, is their render.
        if p.is_dir() && p.ends_with("deploy/helm") {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn load(raw: &str, what: &Path) -> NetConf {
    NetConf::parse(raw.as_bytes(), &HashMap::new()).unwrap_or_else(|e| panic!("{}: {e}", what.display()))
}

/// What the files of some directories define, for the checks across files.
#[derive(Default)]
struct Seen {
    /// NAD name → the device plugin resource it names.
    nads: HashMap<String, String>,
    /// (network a pod asks for, a resource it requests).
    pods: Vec<(String, String)>,
    /// Device plugin pool `prefix/name` → `isRdma`.
    pools: HashMap<String, bool>,
    /// The DaemonSets.
    daemonsets: Vec<Value>,
    /// ConfigMaps holding a node policy (`policy.json`), by name.
    policies: Vec<String>,
    /// Extended resources a ResourceQuota limits.
    quotas: Vec<String>,
    checked: usize,
}

fn api_version(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "NetworkAttachmentDefinition" => "k8s.cni.cncf.io/v1",
        "Pod" | "ConfigMap" => "v1",
        "DaemonSet" => "apps/v1",
        "ResourceQuota" | "ServiceAccount" => "v1",
        "DeviceClass" => "resource.k8s.io/v1",
        "ClusterRole" | "ClusterRoleBinding" => "rbac.authorization.k8s.io/v1",
        _ => return None,
    })
}

/// A DNS-1123 subdomain, as Kubernetes wants object names.
fn dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

fn str_of<'a>(v: &'a Value, what: &str, p: &Path) -> &'a str {
    v.as_str().unwrap_or_else(|| panic!("{}: {what} must be a string, is {v}", p.display()))
}

fn containers(spec: &Value, p: &Path) -> Vec<Value> {
    let cs = spec["containers"].as_array().unwrap_or_else(|| panic!("{}: spec.containers", p.display()));
    assert!(!cs.is_empty(), "{}: no containers", p.display());
    for c in cs.iter().chain(spec["initContainers"].as_array().into_iter().flatten()) {
        assert!(dns_name(str_of(&c["name"], "container name", p)), "{}: container name", p.display());
        assert!(!str_of(&c["image"], "container image", p).is_empty(), "{}: container image", p.display());
    }
    cs.clone()
}

fn check_doc(v: &Value, p: &Path, seen: &mut Seen) {
    let kind = str_of(&v["kind"], "kind", p);
    let api = api_version(kind).unwrap_or_else(|| panic!("{}: unexpected kind {kind}", p.display()));
    assert_eq!(v["apiVersion"], api, "{}: apiVersion of a {kind}", p.display());
    let name = str_of(&v["metadata"]["name"], "metadata.name", p);
    assert!(dns_name(name), "{}: metadata.name {name:?}", p.display());
    match kind {
        "NetworkAttachmentDefinition" => {
            let res = v["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
                .as_str()
                .expect("the NAD names the device plugin resource");
            let cfg = v["spec"]["config"].as_str().expect("spec.config");
            let c = load(cfg, p);
            assert_eq!(c.name, name, "{}: the CNI network name is the NAD's name", p.display());
            assert_eq!(c.source, None, "Multus injects deviceID; the NAD must not pin one");
            // What Multus hands over: the same config with the VF's address injected.
            let mut injected: Value = serde_json::from_str(cfg).unwrap();
            injected["deviceID"] = Value::from("0000:3b:02.1");
            let c = load(&injected.to_string(), p);
            assert!(matches!(c.source, Some(VfSource::Device(_))));
            seen.nads.insert(name.to_string(), res.to_string());
        }
        "Pod" => {
            let net = v["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].as_str().unwrap();
            let cs = containers(&v["spec"], p);
            let res = &cs[0]["resources"];
            let reqs = res["requests"].as_object().unwrap();
            for (r, n) in reqs {
                // An extended resource cannot be overcommitted: its limit must be set and equal.
                if r.contains('/') {
                    assert_eq!(res["limits"][r], *n, "{}: limit of {r}", p.display());
                }
                seen.pods.push((net.to_string(), r.clone()));
            }
        }
        "ConfigMap" => {
            // The device plugin's: the resource name once (data.resourceName), the config.json it reads.
            let data = v["data"].as_object().unwrap_or_else(|| panic!("{}: data", p.display()));
            if let Some(policy) = data.get("policy.json") {
                // The check `sriov-rdma install --policy` makes before installing it.
                let raw = str_of(policy, "data[\"policy.json\"]", p);
                Policy::parse(p, raw.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
                seen.policies.push(name.to_string());
                seen.checked += 1;
                return;
            }
            let default = str_of(&data["resourceName"], "data.resourceName", p);
            let cfg = str_of(&data["config.json"], "data[\"config.json\"]", p);
            let cfg: Value = serde_json::from_str(cfg).unwrap_or_else(|e| panic!("{}: config.json: {e}", p.display()));
            let list = cfg["resources"].as_array().expect("the device plugin's resources");
            assert!(!list.is_empty());
            for r in list {
                let name = r["name"].as_str().unwrap_or(default);
                let (domain, short) = name.split_once('/').expect("resource names are <domain>/<name>");
                assert!(dns_name(domain) && !short.is_empty(), "{}: resource {name:?}", p.display());
                let sel = &r["selectors"];
                for key in ["vendors", "devices", "drivers", "pfNames", "linkTypes"] {
                    if !sel[key].is_null() {
                        assert!(sel[key].as_array().is_some_and(|a| a.iter().all(Value::is_string)), "{key}");
                    }
                }
                // requireRdma defaults to true: only VFs with an RDMA device (or vfio-pci) are offered.
                seen.pools.insert(name.to_string(), r["requireRdma"] != false);
            }
        }
        "ResourceQuota" => {
            let hard = v["spec"]["hard"].as_object().unwrap_or_else(|| panic!("{}: spec.hard", p.display()));
            for (key, n) in hard {
                let (scope, res) = key.split_once('.').filter(|(_, r)| r.contains('/')).unwrap_or(("", key));
                if res.contains('/') {
                    // The API server takes an extended resource's quota only as requests.<resource>.
                    assert_eq!(scope, "requests", "{}: {key}: an extended resource takes requests. only", p.display());
                    assert!(str_of(n, key, p).parse::<u32>().is_ok(), "{}: {key} is a count", p.display());
                    seen.quotas.push(res.to_string());
                }
            }
        }
        "DaemonSet" => {
            let spec = &v["spec"];
            let want = spec["selector"]["matchLabels"].as_object().expect("spec.selector.matchLabels");
            let have = &spec["template"]["metadata"]["labels"];
            assert!(!want.is_empty());
            for (k, l) in want {
                assert_eq!(have[k], *l, "{}: the selector matches the pod template's labels", p.display());
            }
            containers(&spec["template"]["spec"], p);
            seen.daemonsets.push(v.clone());
        }
        // The DRA driver's class (deploy/examples/dra): a claim that names it gets a device of this driver.
        "DeviceClass" => {
            let sel = v["spec"]["selectors"].as_array().unwrap_or_else(|| panic!("{}: spec.selectors", p.display()));
            let cel: Vec<&str> = sel.iter().filter_map(|s| s["cel"]["expression"].as_str()).collect();
            assert!(
                cel.iter().any(|e| e.contains(r#"device.driver == "sriov-rdma.k8s.io""#)),
                "{}: the DeviceClass selects the driver sriov-rdma.k8s.io: {cel:?}",
                p.display()
            );
        }
        "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" => {}
        _ => unreachable!(),
    }
    seen.checked += 1;
}

fn check_dirs(dirs: &[&str]) -> Seen {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    for d in dirs {
        files(&root.join(d), &mut all);
    }
    let mut seen = Seen::default();
    for p in &all {
        let text = fs::read_to_string(p).unwrap();
        match p.extension().and_then(|e| e.to_str()) {
            // kustomize's file, not a Kubernetes object; the_deploy_manifests_are_valid_and_fit_together reads it.
            _ if p.file_name().is_some_and(|n| n == "kustomization.yaml") => {}
            // Parts of objects for `kubectl patch --patch-file` (deploy/examples/dra), not objects of their own.
            _ if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with("-patch.yaml")) => {}
            Some("yaml") | Some("yml") => {
                for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                    let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    check_doc(&v, p, &mut seen);
                }
            }
            Some("conf") => {
                load(&text, p);
                seen.checked += 1;
            }
            // The check `sriov-rdma install --conflist` makes before installing one.
            Some("conflist") => {
                seen.checked += check_netconf(text.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            }
            _ => {}
        }
    }
    for (net, res) in &seen.pods {
        assert_eq!(seen.nads.get(net), Some(res), "the pod requests the resource of NAD {net}");
    }
    assert!(!seen.pods.is_empty());
    seen
}

#[test]
fn every_example_and_conf_is_valid() {
    let seen = check_dirs(&["examples", "conf"]);
    assert!(seen.checked >= 4, "only {} configs found", seen.checked);
}

#[test]
fn the_deploy_manifests_are_valid_and_fit_together() {
    let seen = check_dirs(&["deploy"]);
    // The pod's resource is one the device plugin offers, VFs with RDMA.
    for res in seen.nads.values() {
        assert_eq!(seen.pools.get(res), Some(&true), "the device plugin config offers {res} (requireRdma)");
    }
    // The example ResourceQuota limits the resource the device plugin offers.
    assert!(!seen.quotas.is_empty(), "deploy/examples ships a ResourceQuota");
    for res in &seen.quotas {
        assert!(seen.pools.contains_key(res), "the quota's {res} is a resource of the device plugin config");
    }
    // kustomization.yaml copies the ConfigMap's resourceName into the NAD's annotation.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let k: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(root.join("deploy/kustomization.yaml")).unwrap()).unwrap();
    let r = &k["replacements"][0];
    assert_eq!(r["source"]["kind"], "ConfigMap");
    assert_eq!(r["source"]["fieldPath"], "data.resourceName");
    assert_eq!(r["targets"][0]["select"]["kind"], "NetworkAttachmentDefinition");
    assert_eq!(r["targets"][0]["fieldPaths"][0], "metadata.annotations.[k8s.v1.cni.cncf.io/resourceName]");
    for f in k["resources"].as_array().unwrap() {
        assert!(root.join("deploy").join(f.as_str().unwrap()).exists(), "kustomization lists {f}");
    }

    assert_eq!(seen.daemonsets.len(), 1, "one DaemonSet: installer and device plugin");
    let ds = &seen.daemonsets[0];
    let pod = &ds["spec"]["template"]["spec"];
    let cmd = |c: &Value| -> Vec<String> {
        let words = c["command"].as_array().into_iter().chain(c["args"].as_array()).flatten();
        words.map(|a| a.as_str().unwrap().to_string()).collect()
    };
    let init = &pod["initContainers"][0];
    let dp = &pod["containers"][0];
    for c in [init, dp] {
        // The image `make image` builds, at this version.
        assert_eq!(c["image"], format!("localhost/sriov-rdma:{}", env!("CARGO_PKG_VERSION")));
    }
    let init_cmd = cmd(init);
    assert_eq!(&init_cmd[..2], ["/sriov-rdma", "install"], "the installer runs once, before the device plugin");
    assert!(!init_cmd.iter().any(|a| a == "--sleep"), "an init container must exit: {init_cmd:?}");
    let dp_cmd = cmd(dp);
    assert_eq!(&dp_cmd[..2], ["/sriov-rdma", "device-plugin"], "{dp_cmd:?}");
    // The probes ask the daemon's own metrics address; the daemon follows the policy the init container installs.
    let flag = |c: &[String], f: &str| c.iter().position(|a| a == f).and_then(|i| c.get(i + 1).cloned());
    let metrics = flag(&dp_cmd, "--metrics-addr").expect("--metrics-addr");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &dp[probe]["httpGet"];
        assert_eq!(format!("{}:{}", get["host"].as_str().unwrap(), get["port"]), metrics, "{probe}");
        assert_eq!(get["path"], path, "{probe}");
    }
    assert_eq!(flag(&dp_cmd, "--policy"), flag(&init_cmd, "--policy"));
    let dp_mounts: Vec<&Value> = dp["volumeMounts"].as_array().unwrap().iter().map(|m| &m["mountPath"]).collect();
    assert!(dp_mounts.contains(&&Value::from("/host/etc/sriov-rdma")), "{dp_mounts:?}");
    // The node policy: from the ConfigMap deploy/ ships (optional), into the host's /etc/sriov-rdma.
    let src = init_cmd.iter().position(|a| a == "--policy").map(|i| init_cmd[i + 1].clone()).expect("--policy FILE");
    let mount_of = |path: &str| {
        let m = init["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == path);
        let m = m.unwrap_or_else(|| panic!("a volume mounted at {path}"));
        pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == m["name"]).unwrap().clone()
    };
    let cm = mount_of(Path::new(&src).parent().unwrap().to_str().unwrap());
    assert_eq!(seen.policies, [cm["configMap"]["name"].as_str().unwrap()], "the policy ConfigMap deploy/ ships");
    assert_eq!(Path::new(&src).file_name().unwrap(), "policy.json");
    assert_eq!(cm["configMap"]["optional"], true, "a cluster without a policy still gets the plugin");
    assert_eq!(mount_of("/host/etc/sriov-rdma")["hostPath"]["path"], "/etc/sriov-rdma");
    // The host's CNI bin dir where the installer looks for it by default.
    let mount =
        init["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/host/opt/cni/bin").unwrap();
    let vol = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(vol["hostPath"]["path"], "/opt/cni/bin");
    assert_ne!(mount["readOnly"], true);
    // The installer: no privilege beyond writing that directory.
    let sc = &init["securityContext"];
    assert_ne!(sc["privileged"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null());
    assert_eq!(sc["runAsUser"], 0);
    // The device plugin: the kubelet's socket dir, where Multus reads device-info files, and its config.
    let host_of = |mount_path: &str| {
        let m = dp["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == mount_path).unwrap();
        let v = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == m["name"]).unwrap();
        v["hostPath"]["path"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(host_of("/var/lib/kubelet/device-plugins"), "/var/lib/kubelet/device-plugins");
    assert_eq!(host_of("/var/run/k8s.cni.cncf.io/devinfo/dp"), "/var/run/k8s.cni.cncf.io/devinfo/dp");
    let cfg_arg = dp_cmd.iter().position(|a| a == "--config").map(|i| dp_cmd[i + 1].clone()).unwrap();
    let cfg_mount =
        dp["volumeMounts"].as_array().unwrap().iter().find(|m| cfg_arg.starts_with(m["mountPath"].as_str().unwrap()));
    assert!(cfg_mount.is_some(), "{cfg_arg} is mounted from the ConfigMap");
    let env = dp["env"].as_array().unwrap().iter().find(|e| e["name"] == "RDMA_RESOURCE_NAME").unwrap();
    assert_eq!(env["valueFrom"]["configMapKeyRef"]["key"], "resourceName");
    // The device plugin without numVfs (the shipped config): unprivileged, no capability.
    let sc = &dp["securityContext"];
    assert_eq!((&sc["privileged"], &sc["allowPrivilegeEscalation"]), (&Value::from(false), &Value::from(false)));
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"]["add"].is_null());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(pod["hostNetwork"], true, "sysfs of the host's netns: PF link state, VF netdevs");
    assert!(pod["hostPID"].is_null());
    assert_eq!(pod["nodeSelector"]["feature.node.kubernetes.io/network-sriov.capable"], "true");
    assert!(!pod["tolerations"].as_array().unwrap().is_empty());
}
