//! Every shipped example and conf file parses, and its CNI config passes the plugin's own loader.

use serde::Deserialize;
use serde_json::Value;
use sriov_rdma_cni::cni::config::{NetConf, VfSource};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
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

#[test]
fn every_example_and_conf_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    files(&root.join("examples"), &mut all);
    files(&root.join("conf"), &mut all);
    let mut nads: HashMap<String, String> = HashMap::new();
    let mut pods: Vec<(String, String)> = Vec::new();
    let mut checked = 0;
    for p in &all {
        let text = fs::read_to_string(p).unwrap();
        match p.extension().and_then(|e| e.to_str()) {
            Some("yaml") => {
                for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                    let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                    match v["kind"].as_str() {
                        Some("NetworkAttachmentDefinition") => {
                            let res = v["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
                                .as_str()
                                .expect("the NAD names the device plugin resource");
                            let cfg = v["spec"]["config"].as_str().expect("spec.config");
                            let c = load(cfg, p);
                            assert_eq!(c.source, None, "Multus injects deviceID; the NAD must not pin one");
                            // What Multus hands over: the same config with the VF's address injected.
                            let mut injected: Value = serde_json::from_str(cfg).unwrap();
                            injected["deviceID"] = Value::from("0000:3b:02.1");
                            let c = load(&injected.to_string(), p);
                            assert!(matches!(c.source, Some(VfSource::Device(_))));
                            nads.insert(v["metadata"]["name"].as_str().unwrap().to_string(), res.to_string());
                        }
                        Some("Pod") => {
                            let net = v["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].as_str().unwrap();
                            let reqs = v["spec"]["containers"][0]["resources"]["requests"].as_object().unwrap();
                            for r in reqs.keys() {
                                pods.push((net.to_string(), r.clone()));
                            }
                        }
                        other => panic!("{}: unexpected kind {other:?}", p.display()),
                    }
                    checked += 1;
                }
            }
            Some("conf") => {
                load(&text, p);
                checked += 1;
            }
            Some("conflist") => {
                let list: Value = serde_json::from_str(&text).unwrap();
                for plugin in list["plugins"].as_array().unwrap() {
                    if plugin["type"] != "sriov-rdma" {
                        continue;
                    }
                    // libcni gives each plugin the list's cniVersion and name.
                    let mut one = plugin.clone();
                    one["cniVersion"] = list["cniVersion"].clone();
                    one["name"] = list["name"].clone();
                    load(&one.to_string(), p);
                    checked += 1;
                }
            }
            _ => {}
        }
    }
    for (net, res) in &pods {
        assert_eq!(nads.get(net), Some(res), "the pod requests the resource of NAD {net}");
    }
    assert!(!pods.is_empty());
    assert!(checked >= 4, "only {checked} configs found");
}
