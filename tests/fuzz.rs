//! Deterministic mutation fuzzing of one invocation: configuration JSON and CNI_* environment, through the
//! library's whole dispatch (`flow::run`), in process, from a seeded generator (printed;
//! `SRIOV_RDMA_FUZZ_SEED=N` replays a run, `SRIOV_RDMA_FUZZ_ITERATIONS` changes the count).
//!
//! Starting points: the shipped examples (cnitool conf, conflist, the NAD's config) and configurations
//! covering every key. Each iteration mutates 1–3 keys (a value of another type or an edge value, a removed
//! key, an unknown key), or the JSON bytes, and 0–2 environment variables.
//!
//! The host is never reachable: SRIOV_RDMA_SYSFS is an empty tree and SRIOV_RDMA_STATE_DIR a temp dir,
//! CNI_NETNS only ever names paths that do not exist (checked before every run), so ADD stops at opening it
//! before anything is looked up or locked; CNI_PATH holds no plugin, so no IPAM plugin ever runs; the
//! logger is set up first to a temp file, so no `logFile` value is ever opened.
//!
//! Asserted: never a panic; stdout is either empty (a successful DEL/CHECK/GC/STATUS), the VERSION answer,
//! or an error object with a supported cniVersion, a known code and a message; a code 4 names a CNI_*
//! variable it was given wrong; a code 7 names the key it is about — the mutated key when the configuration
//! alone is refused; a code 6 says it is the network configuration that does not decode.

use serde_json::{json, Map, Value};
use sriov_rdma_cni::cni::config::{LogLevel, NetConf};
use sriov_rdma_cni::cni::env;
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

mod common;
use common::{seed, Rng, Scratch};

const NOWHERE: &str = "/nonexistent-sriov-rdma-fuzz";

/// Every key the plugin reads, as paths; the last segment is what an error must name.
const KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "deviceID",
    "pfName",
    "vlan",
    "vlanQoS",
    "vlanProto",
    "mac",
    "spoofchk",
    "trust",
    "link_state",
    "min_tx_rate",
    "max_tx_rate",
    "mtu",
    "rdma",
    "ipam",
    "ipam.type",
    "dns",
    "logLevel",
    "logFile",
    "runtimeConfig",
    "runtimeConfig.deviceID",
    "runtimeConfig.mac",
    "runtimeConfig.infinibandGUID",
    "runtimeConfig.CNIDeviceInfoFile",
    "prevResult",
    "prevResult.ips",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
];

/// Keys whose errors name another key they depend on.
fn related(key: &str) -> &'static [&'static str] {
    match key {
        "vlan" => &["vlanQoS", "vlanProto"],
        "min_tx_rate" | "max_tx_rate" => &["min_tx_rate", "max_tx_rate"],
        "cni.dev/attachments" => &["cni.dev/valid-attachments"],
        "ipam" => &["ipam.type"],
        "runtimeConfig" => &[
            "runtimeConfig.deviceID",
            "runtimeConfig.mac",
            "runtimeConfig.infinibandGUID",
            "runtimeConfig.CNIDeviceInfoFile",
        ],
        _ => &[],
    }
}

const STRINGS: &[&str] = &[
    "",
    " ",
    "0000:3b:02.1",
    "3b:02.1",
    "0000:3B:02.7",
    "0000:3b:02.8",
    "0000:3b:0g.1",
    "02:00:00:00:00:01",
    "01:00:5e:00:00:01",
    "00:00:00:00:00:00",
    "02:00:00:00:00",
    "00:11:22:33:44:55:66:77",
    "ff:ff:ff:ff:ff:ff:ff:ff",
    "00:00:00:00:00:00:00:00",
    "on",
    "off",
    "yes",
    "auto",
    "isolated",
    "enable",
    "disable",
    "802.1q",
    "802.1AD",
    "qinq",
    "host-local",
    "static",
    "dhcp",
    "../x",
    "a/b",
    "0.3.1",
    "0.4.0",
    "1.0.0",
    "1.1.0",
    "0.2.0",
    "2.0.0",
    "debug",
    "error",
    "trace",
    "ens1f0",
    "a-very-long-interface-name",
    "sriov-rdma",
    "9000",
    "-1",
    "/nonexistent-sriov-rdma-fuzz/file.json",
    "relative/file.json",
    "\u{0}",
    "ü\u{202e}x",
];

fn value(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0..=3 => Value::from(*rng.pick(STRINGS)),
        4..=6 => {
            let n: [i64; 17] = [
                -1,
                0,
                1,
                3,
                7,
                8,
                67,
                68,
                100,
                4094,
                4095,
                9000,
                65535,
                65536,
                4_294_967_295,
                4_294_967_296,
                i64::MAX,
            ];
            Value::from(*rng.pick(&n))
        }
        7 => json!(*rng.pick(&[u64::MAX, 1u64 << 63])),
        8 => json!(*rng.pick(&[1.5f64, -0.0, 1e300, 9000.0])),
        9 => json!(*rng.pick(&[true, false])),
        10 => Value::Null,
        _ => rng
            .pick(&[
                json!([]),
                json!({}),
                json!([1, "a"]),
                json!({"type": "static"}),
                json!({"type": 5}),
                json!({"subnet": "10.0.0.0/24"}),
                json!([{"containerID": "a", "ifname": "net1"}]),
                json!([{"containerID": "a"}]),
                json!({"ips": [{"address": "10.1.0.2/24"}], "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01"}]}),
                json!({"ips": [{"address": "10.1.0.2"}]}),
                json!("x".repeat(300)),
            ])
            .clone(),
    }
}

/// Sets or removes the value at a dotted path (creating the parent object if needed).
fn mutate_key(conf: &mut Value, path: &str, to: Option<Value>) {
    let Some(root) = conf.as_object_mut() else { return };
    let (parent, leaf) = match path.split_once('.') {
        Some((p, l)) if p != "cni" => (Some(p), l),
        _ => (None, path),
    };
    let obj: &mut Map<String, Value> = match parent {
        None => root,
        Some(p) => {
            let e = root.entry(p.to_string()).or_insert_with(|| json!({}));
            if !e.is_object() {
                *e = json!({});
            }
            e.as_object_mut().unwrap()
        }
    };
    match to {
        Some(v) => {
            obj.insert(leaf.to_string(), v);
        }
        None => {
            obj.remove(leaf);
        }
    }
}

fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    const SPICE: &[u8] = b"{}[]\",:0\\ \x00\xff-e";
    for _ in 0..=rng.below(3) {
        if b.is_empty() {
            b.push(b'{');
        }
        let at = rng.below(b.len() as u64) as usize;
        match rng.below(4) {
            0 => b[at] = *rng.pick(SPICE),
            1 => b.insert(at, *rng.pick(SPICE)),
            2 => {
                b.remove(at);
            }
            _ => b.truncate(at),
        }
    }
}

/// The valid configurations the mutations start from.
fn seeds() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let conf: Value =
        serde_json::from_slice(&std::fs::read(root.join("examples/cnitool/sriov-rdma.conf")).unwrap()).unwrap();
    out.push(conf);
    let list: Value =
        serde_json::from_slice(&std::fs::read(root.join("conf/10-sriov-rdma.conflist")).unwrap()).unwrap();
    for p in list["plugins"].as_array().unwrap() {
        // What a runtime hands each plugin of a list: its entry with the list's cniVersion and name.
        let mut p = p.clone();
        p["cniVersion"] = list["cniVersion"].clone();
        p["name"] = list["name"].clone();
        out.push(p);
    }
    let nad = std::fs::read_to_string(root.join("examples/nad-rdma.yaml")).unwrap();
    for doc in nad.split("\n---") {
        if let Some(i) = doc.find("config: |") {
            let body: String = doc[i + 9..].lines().map(|l| l.trim_start()).collect::<Vec<_>>().join("\n");
            if let Ok(mut v) = serde_json::from_str::<Value>(&body) {
                v["deviceID"] = Value::from("0000:3b:02.1"); // what Multus injects
                out.push(v);
            }
        }
    }
    assert!(out.len() >= 3, "examples and conf should give at least 3 seeds, got {}", out.len());
    out.push(json!({"cniVersion": "1.1.0", "name": "rdma-net", "type": "sriov-rdma", "deviceID": "0000:3b:02.1",
        "vlan": 100, "vlanQoS": 3, "vlanProto": "802.1q", "mac": "02:00:00:00:00:01", "spoofchk": "on",
        "trust": "on", "link_state": "auto", "min_tx_rate": 10, "max_tx_rate": 100, "mtu": 9000, "rdma": "isolated",
        "ipam": {"type": "static"}, "dns": {"nameservers": ["10.1.0.53"]}, "logLevel": "debug",
        "logFile": format!("{NOWHERE}/x.log"),
        "runtimeConfig": {"deviceID": "0000:3b:02.2", "mac": "02:00:00:00:00:02",
            "infinibandGUID": "00:11:22:33:44:55:66:77", "CNIDeviceInfoFile": format!("{NOWHERE}/devinfo.json")},
        "prevResult": {"cniVersion": "1.1.0", "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:01"}],
            "ips": [{"address": "10.1.0.2/24", "interface": 0}]},
        "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "net1"}]}));
    out.push(json!({"cniVersion": "0.3.1", "name": "n", "type": "sriov-rdma", "pfName": "ens1f0", "rdma": "off"}));
    out.push(json!({"cniVersion": "1.1.0", "name": "n", "type": "sriov-rdma", "cni.dev/attachments": []}));
    for v in &out {
        NetConf::parse(v.to_string().as_bytes(), &HashMap::new()).unwrap_or_else(|e| panic!("seed {v}: {e}"));
    }
    out
}

const VARS: &[&str] = &["CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_ARGS", "CNI_PATH"];

fn env_value(rng: &mut Rng, var: &str, empty_bin: &str) -> Option<String> {
    if rng.chance(15) {
        return None;
    }
    let v = match var {
        "CNI_COMMAND" => rng.pick(&["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION", "", "add", "FOO"]).to_string(),
        "CNI_CONTAINERID" => rng.pick(&["c1", "", "-a", "a/b", "ABC_1.2-3", "é", &"x".repeat(300)]).to_string(),
        "CNI_IFNAME" => rng.pick(&["net1", "", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx", "eth0"]).to_string(),
        "CNI_NETNS" => match rng.below(4) {
            0 => String::new(),
            1 => "nonexistent-relative-sriov-rdma-fuzz-ns".to_string(),
            _ => format!("{NOWHERE}/ns{}", rng.below(1000)),
        },
        "CNI_ARGS" => {
            let parts: Vec<String> = (0..rng.below(4))
                .map(|_| match rng.below(6) {
                    0 => "IgnoreUnknown=1".to_string(),
                    1 => format!("deviceID={}", rng.pick(STRINGS)),
                    2 => format!("MAC={}", rng.pick(STRINGS)),
                    3 => format!("guid={}", rng.pick(STRINGS)),
                    4 => rng.pick(&["novalue", "=x", "", "K=V=W"]).to_string(),
                    _ => "K8S_POD_NAME=p".to_string(),
                })
                .collect();
            parts.join(";")
        }
        _ => rng.pick(&["", NOWHERE, empty_bin]).to_string(),
    };
    Some(v)
}

/// Whether `msg` is about `key` (or a key it depends on): the key is the subject of the message or of one of its
/// `: `-separated parts, as the plugin words them: `invalid vlan 5000: …`, `cniVersion is missing`,
/// `GC: IPAM GC: ipam.type "static": …`. A nested key may be named by its last segment there (`ipam: invalid type
/// 5: …`, `invalid CNIDeviceInfoFile 5: …`). A key merely mentioned (`name` in "the network name", `rdma` in a
/// path) is not enough.
fn names(msg: &str, key: &str) -> bool {
    std::iter::once(key).chain(related(key).iter().copied()).any(|k| {
        is_subject(msg, k) || k.rsplit_once('.').is_some_and(|(parent, leaf)| parent != "cni" && is_subject(msg, leaf))
    })
}

/// Whether `word` opens `msg` or one of its `: `-separated parts (after "invalid "), as a whole word.
fn is_subject(msg: &str, word: &str) -> bool {
    msg.split(": ").any(|part| {
        let part = part.strip_prefix("invalid ").unwrap_or(part);
        part.strip_prefix(word).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ':']))
    })
}

#[test]
fn mutated_configs_and_env_never_panic_and_always_answer_in_cni_json() {
    let seed = seed("SRIOV_RDMA_FUZZ_SEED");
    let iterations: usize =
        std::env::var("SRIOV_RDMA_FUZZ_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    eprintln!("fuzz: seed {seed} (SRIOV_RDMA_FUZZ_SEED={seed} replays it), {iterations} iterations");
    let scratch = Scratch::new("fuzz");
    let tmp = scratch.0.clone();
    for d in ["sys", "state", "bin"] {
        std::fs::create_dir_all(tmp.join(d)).unwrap();
    }
    assert!(!Path::new(NOWHERE).exists());
    let log = std::fs::OpenOptions::new().create(true).append(true).open(tmp.join("plugin.log")).unwrap();
    sriov_rdma_cni::log::init(LogLevel::Error, Some(log));
    let empty_bin = tmp.join("bin").display().to_string();

    let seeds = seeds();
    let mut rng = Rng::new(seed);
    let mut codes: BTreeMap<String, usize> = BTreeMap::new();
    let start = Instant::now();
    for it in 0..iterations {
        let mut conf = rng.pick(&seeds).clone();
        let mut touched: Vec<String> = Vec::new();
        let mut raw = None;
        if rng.chance(12) {
            let mut b = conf.to_string().into_bytes();
            mutate_bytes(&mut rng, &mut b);
            raw = Some(b);
        } else {
            for _ in 0..=rng.below(3) {
                let key = *rng.pick(KEYS);
                match rng.below(10) {
                    0..=1 => mutate_key(&mut conf, key, None),
                    2 => mutate_key(&mut conf, &format!("x-unknown-{}", rng.below(5)), Some(value(&mut rng))),
                    _ => mutate_key(&mut conf, key, Some(value(&mut rng))),
                }
                touched.push(key.to_string());
            }
            if rng.chance(1) {
                // A whole other document: no key to expect by name.
                conf = value(&mut rng);
                touched.clear();
            }
        }
        let stdin = raw.unwrap_or_else(|| conf.to_string().into_bytes());
        let mut vars: HashMap<String, String> = [
            ("CNI_COMMAND", *rng.pick(&["ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION"])),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "net1"),
            ("CNI_ARGS", "IgnoreUnknown=1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        vars.insert("CNI_NETNS".into(), format!("{NOWHERE}/ns"));
        vars.insert("CNI_PATH".into(), empty_bin.clone());
        // sysfs, the record store, the node's directories and policy are the temp tree's (the plugin reads them
        // through this map, not the process environment): nothing of the machine's is read or written.
        for (var, d) in [
            ("SRIOV_RDMA_SYSFS", "sys"),
            ("SRIOV_RDMA_STATE_DIR", "state"),
            ("SRIOV_RDMA_DEVINFO_DIR", "devinfo"),
            ("SRIOV_RDMA_LOG_DIR", "log"),
            ("SRIOV_RDMA_POLICY", "policy.json"),
        ] {
            vars.insert(var.into(), tmp.join(d).display().to_string());
        }
        let mut touched_vars: Vec<&str> = Vec::new();
        for _ in 0..rng.below(3) {
            let var = *rng.pick(VARS);
            match env_value(&mut rng, var, &empty_bin) {
                Some(v) => vars.insert(var.to_string(), v),
                None => vars.remove(var),
            };
            touched_vars.push(var);
        }
        if let Some(ns) = vars.get("CNI_NETNS").filter(|n| !n.is_empty()) {
            assert!(
                !Path::new(ns).exists(),
                "iteration {it}: CNI_NETNS {ns} exists; the fuzz must never reach a netns"
            );
        }
        let input = || format!("seed {seed} iteration {it}: stdin {:?} env {vars:?}", String::from_utf8_lossy(&stdin));

        let out = catch_unwind(AssertUnwindSafe(|| sriov_rdma_cni::flow::run(&stdin, |k| vars.get(k).cloned())))
            .unwrap_or_else(|_| panic!("panicked: {}", input()));
        let command = vars.get("CNI_COMMAND").map(String::as_str).unwrap_or("");
        if out.ok {
            assert_ne!(command, "ADD", "ADD cannot succeed without a netns: {}", input());
            if command == "VERSION" {
                let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", input()));
                assert!(v["supportedVersions"].is_array() && v["cniVersion"].is_string(), "{v}: {}", input());
            } else {
                assert!(out.stdout.is_empty(), "{command} printed {:?}: {}", out.stdout, input());
            }
            *codes.entry(format!("{command} ok")).or_default() += 1;
            continue;
        }
        let e: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("error is not JSON ({e}): {}", input()));
        let code = e["code"].as_u64().unwrap_or_else(|| panic!("no code in {e}: {}", input()));
        let msg = e["msg"].as_str().filter(|m| !m.is_empty()).unwrap_or_else(|| panic!("no msg in {e}: {}", input()));
        let version = e["cniVersion"].as_str().unwrap_or_default();
        assert!(["0.3.1", "0.4.0", "1.0.0", "1.1.0"].contains(&version), "cniVersion {version:?}: {}", input());
        assert!([1, 2, 3, 4, 5, 6, 7, 11, 50].contains(&code), "code {code}: {}", input());
        *codes.entry(format!("code {code}")).or_default() += 1;
        let env_err = env::from_vars(|k| vars.get(k).cloned()).err();
        match code {
            4 => {
                let e = env_err.unwrap_or_else(|| panic!("code 4 but the environment is valid: {msg}: {}", input()));
                assert_eq!(e.msg, msg);
                assert!(
                    VARS.iter().any(|v| msg.contains(v) && (touched_vars.contains(v) || *v == "CNI_COMMAND")),
                    "code 4 does not name the variable: {msg}: {}",
                    input()
                );
            }
            6 => assert!(msg.contains("network configuration"), "code 6 does not say what: {msg}: {}", input()),
            7 => {
                let args = env::parse_args(vars.get("CNI_ARGS").map(String::as_str).unwrap_or("")).unwrap_or_default();
                match NetConf::parse(&stdin, &args) {
                    // The configuration alone is refused: the message names a key this iteration touched.
                    Err(pe) if pe.msg == msg && !touched.is_empty() => assert!(
                        touched.iter().any(|k| names(msg, k))
                            || (touched_vars.contains(&"CNI_ARGS") && is_subject(msg, "CNI_ARGS")),
                        "code 7 names none of the mutated keys {touched:?}: {msg}: {}",
                        input()
                    ),
                    // Refused later (an IPAM plugin not on CNI_PATH, a logFile outside the node's directory…), or
                    // the bytes were mutated: it is still about a key, or about CNI_ARGS.
                    _ => assert!(
                        KEYS.iter().any(|k| names(msg, k)) || is_subject(msg, "CNI_ARGS"),
                        "code 7 names no key: {msg}: {}",
                        input()
                    ),
                }
            }
            _ => {}
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("fuzz: {iterations} iterations in {secs:.1} s ({:.0}/s): {codes:?}", iterations as f64 / secs);
    // Nothing was written but the temp tree: no record, no device-info file, no lock.
    let state: Vec<_> = std::fs::read_dir(tmp.join("state")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(state.is_empty(), "the fuzz left {state:?} in the state directory");
    assert!(!Path::new(NOWHERE).exists());
}
