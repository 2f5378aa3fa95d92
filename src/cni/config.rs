//! The network configuration on stdin: sriov-cni's keys, plus `mtu`, `rdma`-free core keys and logging.
//!
//! The JSON is decoded into a `Value` first (bad JSON is code 6), then every key is checked by hand so a
//! wrong value is code 7 naming the key and the value, before anything is touched.

use super::error::{CniError, CniResult, Code};
use crate::model::{IpNet, PciAddr};
use crate::vf_setting::{BadKey, ConfigKeys, VfSettings};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;

pub const SUPPORTED_VERSIONS: [&str; 4] = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A CNI spec version this plugin speaks; ordered, so `>=` compares versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl Version {
    pub fn parse(s: &str) -> CniResult<Self> {
        Ok(match s {
            "0.3.1" => Version::V0_3_1,
            "0.4.0" => Version::V0_4_0,
            "1.0.0" => Version::V1_0_0,
            "1.1.0" => Version::V1_1_0,
            other => {
                return Err(CniError::new(
                    Code::IncompatibleVersion,
                    format!("cniVersion {other:?} is not supported (supported: {})", SUPPORTED_VERSIONS.join(", ")),
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        SUPPORTED_VERSIONS[self as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Error,
    Warning,
    Info,
    Debug,
}

/// What to do with the VF's RDMA device (`rdma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RdmaPolicy {
    /// Move it into the pod when the host is in exclusive mode; otherwise leave it and say why.
    #[default]
    Auto,
    /// Require an RDMA device, exclusive mode and a RoCE GID for the pod address.
    Isolated,
    /// Never touch RDMA.
    Off,
}

/// Where the VF comes from: an address the device plugin gave, or a PF to pick a free VF of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VfSource {
    Device(PciAddr),
    Pf(String),
}

#[derive(Debug, Clone)]
pub struct Ipam {
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentRef {
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone)]
pub struct NetConf {
    pub version: Version,
    pub name: String,
    pub source: Option<VfSource>,
    pub vf: VfSettings,
    pub mtu: Option<u32>,
    pub rdma: RdmaPolicy,
    /// `runtimeConfig.CNIDeviceInfoFile`: where Multus wants the NPWG device-info file.
    pub device_info_file: Option<PathBuf>,
    pub ipam: Option<Ipam>,
    pub dns: Option<Value>,
    pub log_level: LogLevel,
    pub log_file: Option<PathBuf>,
    pub prev_result: Option<Value>,
    /// GC's list of attachments to keep; `None` when the key is absent.
    pub valid_attachments: Option<Vec<AttachmentRef>>,
    /// The bytes as received, handed unchanged to the IPAM plugin.
    pub raw: Vec<u8>,
}

/// Every top-level key this plugin reads: sriov-cni's (its Go decoder matches a key of another case when no key
/// has the exact name: `spoofChk`, `MTU`, `VLAN` work there, so they work here), ours, the spec's.
const TOP_KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "deviceID",
    "pfName",
    "rdma",
    "mtu",
    "ipam",
    "dns",
    "logLevel",
    "logFile",
    "prevResult",
    "runtimeConfig",
    "capabilities",
    "mac",
    "vlan",
    "vlanQoS",
    "vlanProto",
    "spoofchk",
    "trust",
    "link_state",
    "min_tx_rate",
    "max_tx_rate",
    "guid",
    "infinibandGUID",
];

/// Whether `key` is one this plugin reads at the top of a configuration (by Go's case folding, as [`NetConf::parse`]
/// takes it). A configuration given as parameters elsewhere (a DRA claim's) can then refuse a key it would ignore.
pub fn is_top_key(key: &str) -> bool {
    TOP_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// The `runtimeConfig` keys read here.
const RUNTIME_KEYS: &[&str] = &["deviceID", "mac", "CNIDeviceInfoFile", "infinibandGUID", "ips"];

/// Renames a key that matches one of `known` only by case to that name, as Go's encoding/json matches it: a key
/// with the exact name wins; among case variants only, the last in key order.
fn fold_keys(map: Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut folded: Vec<(String, Value)> = Vec::new();
    for (k, v) in map {
        match known.iter().find(|n| **n != k && n.eq_ignore_ascii_case(&k)) {
            Some(n) => folded.push((n.to_string(), v)),
            None => {
                out.insert(k, v);
            }
        }
    }
    let exact: Vec<String> = out.keys().cloned().collect();
    for (k, v) in folded.into_iter().filter(|(k, _)| !exact.contains(k)) {
        out.insert(k, v);
    }
    out
}

fn bad(key: &str, value: &Value, why: &str) -> CniError {
    CniError::config(format!("invalid {key} {value}: {why}"))
}

struct Keys<'a>(&'a Map<String, Value>);

impl<'a> Keys<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn str(&self, key: &str) -> CniResult<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(bad(key, v, "must be a string")),
        }
    }

    fn int(&self, key: &str, min: i64, max: i64) -> CniResult<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                Some(_) => Err(bad(key, v, &format!("must be between {min} and {max}"))),
                None => Err(bad(key, v, "must be an integer")),
            },
        }
    }

    fn obj(&self, key: &str) -> CniResult<Option<Keys<'a>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(Keys(m))),
            Some(v) => Err(bad(key, v, "must be an object")),
        }
    }
}

fn parse_pci(key: &str, s: &str) -> CniResult<PciAddr> {
    PciAddr::parse(s).map_err(|why| bad(key, &Value::from(s), &why))
}

impl From<BadKey> for CniError {
    fn from(b: BadKey) -> CniError {
        bad(&b.key, &b.value, &b.why)
    }
}

impl NetConf {
    /// Decodes and validates the configuration. `args` is CNI_ARGS, which may carry `deviceID` and `MAC`.
    pub fn parse(raw: &[u8], args: &HashMap<String, String>) -> CniResult<NetConf> {
        let value: Value = serde_json::from_slice(raw)
            .map_err(|e| CniError::new(Code::Decode, format!("decoding the network configuration: {e}")))?;
        let Value::Object(map) = value else {
            return Err(CniError::new(Code::Decode, "the network configuration is not a JSON object"));
        };
        let map = &fold_keys(map, TOP_KEYS);
        let k = Keys(map);
        let version = match k.str("cniVersion")? {
            Some(v) => Version::parse(v)?,
            None => return Err(CniError::config("cniVersion is missing")),
        };
        let name = match k.str("name")? {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => return Err(CniError::config("name is missing")),
        };
        let rc_folded = match k.get("runtimeConfig") {
            Some(Value::Object(r)) => Some(fold_keys(r.clone(), RUNTIME_KEYS)),
            _ => None,
        };
        let rc = match &rc_folded {
            Some(r) => Some(Keys(r)),
            None => k.obj("runtimeConfig")?,
        };

        // deviceID: runtimeConfig, then top level (Multus), then CNI_ARGS.
        let device = match (rc.as_ref().map(|r| r.str("deviceID")).transpose()?.flatten(), k.str("deviceID")?) {
            (Some(d), _) => Some(parse_pci("runtimeConfig.deviceID", d)?),
            (None, Some(d)) => Some(parse_pci("deviceID", d)?),
            (None, None) => match args.get("deviceID") {
                Some(d) => Some(parse_pci("CNI_ARGS deviceID", d)?),
                None => None,
            },
        };
        let pf = match k.str("pfName")? {
            Some("") => return Err(bad("pfName", &Value::from(""), "must not be empty")),
            Some(p) if p.len() > 15 || p.contains('/') => {
                return Err(bad("pfName", &Value::from(p), "is not an interface name"))
            }
            p => p.map(str::to_string),
        };
        let source = match (device, pf) {
            (Some(d), _) => Some(VfSource::Device(d)),
            (None, Some(p)) => Some(VfSource::Pf(p)),
            (None, None) => None,
        };

        // The PF-side settings, each read by its own definition.
        let vf = VfSettings::parse(&ConfigKeys { top: map, runtime: rc.as_ref().map(|r| r.0), args })?;
        let rdma = match k.str("rdma")? {
            None | Some("auto") => RdmaPolicy::Auto,
            Some("isolated") => RdmaPolicy::Isolated,
            Some("off") => RdmaPolicy::Off,
            Some(s) => return Err(bad("rdma", &Value::from(s), "must be \"auto\", \"isolated\" or \"off\"")),
        };
        let device_info_file = match rc.as_ref().map(|r| r.str("CNIDeviceInfoFile")).transpose()?.flatten() {
            Some(p) if p.starts_with('/') => Some(PathBuf::from(p)),
            Some(p) => return Err(bad("runtimeConfig.CNIDeviceInfoFile", &Value::from(p), "must be an absolute path")),
            None => None,
        };
        let mtu = k.int("mtu", 68, 65535)?.map(|v| v as u32);
        let ipam = match k.obj("ipam")? {
            None => None,
            Some(i) => match i.str("type") {
                Ok(Some(t)) if !t.is_empty() && !t.contains('/') => Some(Ipam { kind: t.to_string() }),
                Ok(Some(t)) => return Err(bad("ipam.type", &Value::from(t), "is not a plugin name")),
                Ok(None) if i.0.is_empty() => None,
                Ok(None) => return Err(CniError::config("ipam.type is missing")),
                Err(e) => return Err(e.context("ipam")),
            },
        };
        // sriov-cni's levels (its logging library's): "panic" logs errors only here (nothing here panics), and
        // "verbose" is "debug".
        let log_level = match k.str("logLevel")? {
            None | Some("info") => LogLevel::Info,
            Some("error" | "panic") => LogLevel::Error,
            Some("warning") => LogLevel::Warning,
            Some("debug" | "verbose") => LogLevel::Debug,
            Some(s) => {
                return Err(bad(
                    "logLevel",
                    &Value::from(s),
                    "must be \"panic\", \"error\", \"warning\", \"info\", \"debug\" or \"verbose\"",
                ))
            }
        };
        let log_file = k.str("logFile")?.filter(|s| !s.is_empty()).map(PathBuf::from);

        let valid_attachments = match k.get("cni.dev/valid-attachments").or_else(|| k.get("cni.dev/attachments")) {
            None => None,
            Some(v) => Some(parse_attachments(v)?),
        };

        Ok(NetConf {
            version,
            name,
            source,
            vf,
            mtu,
            rdma,
            device_info_file,
            ipam,
            dns: k.get("dns").cloned(),
            log_level,
            log_file,
            prev_result: k.get("prevResult").cloned(),
            valid_attachments,
            raw: raw.to_vec(),
        })
    }

    /// The addresses prevResult gives interface `ifname` (by each IP's `interface` index), for CHECK. An IP
    /// without an index is taken as ours only when prevResult lists no other interface.
    pub fn prev_ips_of(&self, ifname: &str) -> CniResult<Vec<IpNet>> {
        let Some(prev) = &self.prev_result else {
            return Ok(Vec::new());
        };
        let names: Vec<Option<&str>> = prev
            .get("interfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|i| i.get("name").and_then(Value::as_str))
            .collect();
        let only_ours = names.iter().all(|n| *n == Some(ifname));
        let mut out = Vec::new();
        for ip in prev.get("ips").and_then(Value::as_array).into_iter().flatten() {
            let ours = match ip.get("interface").and_then(Value::as_u64) {
                Some(i) => usize::try_from(i).ok().and_then(|i| names.get(i)).copied().flatten() == Some(ifname),
                None => only_ours,
            };
            if let Some(a) = ip.get("address").and_then(Value::as_str).filter(|_| ours) {
                out.push(a.parse().map_err(|e: String| CniError::config(format!("prevResult ips: {e}")))?);
            }
        }
        Ok(out)
    }
}

fn parse_attachments(v: &Value) -> CniResult<Vec<AttachmentRef>> {
    let key = "cni.dev/valid-attachments";
    let Value::Array(items) = v else {
        return Err(bad(key, v, "must be a list"));
    };
    items
        .iter()
        .map(|item| {
            let id = item.get("containerID").and_then(Value::as_str);
            let ifname = item.get("ifname").and_then(Value::as_str);
            match (id, ifname) {
                (Some(id), Some(ifname)) => {
                    Ok(AttachmentRef { container_id: id.to_string(), ifname: ifname.to_string() })
                }
                _ => Err(bad(key, item, "each entry needs containerID and ifname")),
            }
        })
        .collect()
}

/// The cniVersion of a configuration that may be invalid otherwise, for the error reply.
pub fn sniff_version(raw: &[u8]) -> String {
    serde_json::from_slice::<Value>(raw)
        .ok()
        .and_then(|v| v.get("cniVersion").and_then(Value::as_str).map(str::to_string))
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LinkState, VlanProto};

    fn parse(s: &str) -> CniResult<NetConf> {
        NetConf::parse(s.as_bytes(), &HashMap::new())
    }

    fn with(extra: &str) -> String {
        format!(r#"{{"cniVersion":"1.0.0","name":"rdma-net","type":"sriov-rdma","deviceID":"0000:3b:02.1"{extra}}}"#)
    }

    #[test]
    fn full_config_parses() {
        let c = parse(&with(
            r#","vlan":100,"vlanQoS":3,"vlanProto":"802.1q","mac":"02:00:00:00:00:01","spoofchk":"on",
               "trust":"on","link_state":"auto","min_tx_rate":10,"max_tx_rate":100,"mtu":9000,
               "ipam":{"type":"static"},"logLevel":"debug","logFile":"/tmp/x.log","capabilities":{"mac":true},
               "unknownKey":{"ignored":true}"#,
        ))
        .unwrap();
        assert_eq!(c.version, Version::V1_0_0);
        assert_eq!(c.source, Some(VfSource::Device(PciAddr::parse("0000:3b:02.1").unwrap())));
        assert_eq!(c.vf.vlan, Some(100));
        assert_eq!(c.vf.vlan_qos, Some(3));
        assert_eq!(c.vf.vlan_proto, Some(VlanProto::Dot1Q));
        assert_eq!(c.vf.spoofchk, Some(true));
        assert_eq!(c.vf.trust, Some(true));
        assert_eq!(c.vf.link_state, Some(LinkState::Auto));
        assert_eq!((c.vf.min_tx_rate, c.vf.max_tx_rate), (Some(10), Some(100)));
        assert_eq!(c.mtu, Some(9000));
        assert_eq!(c.ipam.unwrap().kind, "static");
        assert_eq!(c.log_level, LogLevel::Debug);
    }

    /// sriov-cni's keys reach it through Go's decoder, which takes a key of another case when none has the exact
    /// name: a NAD written for it works here the same.
    #[test]
    fn keys_match_as_sriov_cni_matches_them_whatever_their_case() {
        let c = parse(
            r#"{"cniVersion":"1.0.0","Name":"rdma-net","type":"sriov-rdma","DeviceID":"0000:3b:02.1","VLAN":100,
               "spoofChk":"off","Trust":"on","MTU":9000,"Link_State":"enable","LogLevel":"panic",
               "RuntimeConfig":{"MAC":"02:00:00:00:00:09"}}"#,
        )
        .unwrap();
        assert_eq!(c.name, "rdma-net");
        assert_eq!(c.source, Some(VfSource::Device(PciAddr::parse("0000:3b:02.1").unwrap())));
        assert_eq!((c.vf.vlan, c.vf.spoofchk, c.vf.trust, c.mtu), (Some(100), Some(false), Some(true), Some(9000)));
        assert_eq!(c.vf.link_state, Some(LinkState::Enable));
        assert_eq!(c.vf.mac.map(|m| m.to_string()), Some("02:00:00:00:00:09".into()));
        assert_eq!(c.log_level, LogLevel::Error, "sriov-cni's \"panic\"");
        // The exact name wins over a case variant.
        let c = parse(&with(r#","vlan":7,"VLAN":8"#)).unwrap();
        assert_eq!(c.vf.vlan, Some(7));
        assert_eq!(parse(&with(r#","logLevel":"verbose""#)).unwrap().log_level, LogLevel::Debug);
    }

    /// The pod's own MAC has the last word, as in sriov-cni: runtimeConfig.mac, then CNI_ARGS MAC, then `mac`.
    #[test]
    fn the_pods_mac_wins_over_the_networks() {
        let mac = |extra: &str, args: &[(&str, &str)]| {
            let args: HashMap<String, String> = args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            NetConf::parse(with(extra).as_bytes(), &args).unwrap().vf.mac.map(|m| m.to_string())
        };
        let nad = r#","mac":"02:00:00:00:00:01""#;
        let rc = r#","runtimeConfig":{"mac":"02:00:00:00:00:03"}"#;
        assert_eq!(mac(nad, &[]), Some("02:00:00:00:00:01".into()));
        assert_eq!(mac(nad, &[("MAC", "02:00:00:00:00:02")]), Some("02:00:00:00:00:02".into()));
        assert_eq!(mac(&format!("{nad}{rc}"), &[("MAC", "02:00:00:00:00:02")]), Some("02:00:00:00:00:03".into()));
    }

    #[test]
    fn every_bad_value_is_code_7_naming_the_key_and_value() {
        for (extra, key, val) in [
            (r#","vlan":4095"#, "vlan", "4095"),
            (r#","vlan":"10""#, "vlan", "\"10\""),
            (r#","vlan":1,"vlanQoS":8"#, "vlanQoS", "8"),
            (r#","vlanQoS":1"#, "vlanQoS", "needs vlan"),
            (r#","vlanProto":"802.1ad""#, "vlanProto", "needs vlan"),
            (r#","vlan":1,"vlanProto":"qinq""#, "vlanProto", "qinq"),
            (r#","mac":"zz:00:00:00:00:01""#, "mac", "zz:00"),
            (r#","mac":"01:00:5e:00:00:01""#, "mac", "unicast"),
            (r#","spoofchk":"yes""#, "spoofchk", "yes"),
            (r#","trust":true"#, "trust", "true"),
            (r#","link_state":"up""#, "link_state", "up"),
            (r#","min_tx_rate":-1"#, "min_tx_rate", "-1"),
            (r#","min_tx_rate":200,"max_tx_rate":100"#, "min_tx_rate", "200"),
            (r#","mtu":20"#, "mtu", "20"),
            (r#","ipam":{"type":"../x"}"#, "ipam.type", "../x"),
            (r#","ipam":{"subnet":"10.0.0.0/24"}"#, "ipam.type", "missing"),
            (r#","logLevel":"trace""#, "logLevel", "trace"),
            (r#","pfName":"""#, "pfName", "empty"),
            (r#","runtimeConfig":{"deviceID":"3b:02"}"#, "runtimeConfig.deviceID", "3b:02"),
            (r#","cni.dev/valid-attachments":[{"containerID":"a"}]"#, "valid-attachments", "ifname"),
        ] {
            let err = parse(&with(extra)).unwrap_err();
            assert_eq!(err.code, Code::InvalidConfig, "{extra}: {err}");
            assert!(err.msg.contains(key), "{extra}: {}", err.msg);
            assert!(err.msg.contains(val), "{extra}: {}", err.msg);
        }
    }

    #[test]
    fn bad_json_is_6_bad_version_is_1_missing_name_is_7() {
        assert_eq!(parse("{not json").unwrap_err().code, Code::Decode);
        assert_eq!(parse("[1]").unwrap_err().code, Code::Decode);
        let e = parse(r#"{"cniVersion":"0.2.0","name":"n"}"#).unwrap_err();
        assert_eq!(e.code, Code::IncompatibleVersion);
        assert!(e.msg.contains("0.2.0"));
        let e = parse(r#"{"cniVersion":"1.0.0"}"#).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(e.msg.contains("name"));
        assert_eq!(parse(r#"{"name":"n"}"#).unwrap_err().code, Code::InvalidConfig);
    }

    #[test]
    fn device_id_precedence_runtime_then_top_then_args() {
        let mut args = HashMap::new();
        args.insert("deviceID".to_string(), "0000:3b:02.3".to_string());
        args.insert("MAC".to_string(), "02:00:00:00:00:03".to_string());
        let dev = |c: &NetConf| match &c.source {
            Some(VfSource::Device(d)) => d.to_string(),
            other => panic!("{other:?}"),
        };
        let top = r#"{"cniVersion":"1.0.0","name":"n","deviceID":"0000:3b:02.2","runtimeConfig":{"deviceID":"0000:3b:02.1","mac":"02:00:00:00:00:02"}}"#;
        let c = NetConf::parse(top.as_bytes(), &args).unwrap();
        assert_eq!(dev(&c), "0000:3b:02.1");
        assert_eq!(c.vf.mac.unwrap().to_string(), "02:00:00:00:00:02");
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","deviceID":"0000:3b:02.2"}"#, &args).unwrap();
        assert_eq!(dev(&c), "0000:3b:02.2");
        assert_eq!(c.vf.mac.unwrap().to_string(), "02:00:00:00:00:03");
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","pfName":"ens1f0"}"#, &args).unwrap();
        assert_eq!(dev(&c), "0000:3b:02.3");
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","pfName":"ens1f0"}"#, &HashMap::new()).unwrap();
        assert_eq!(c.source, Some(VfSource::Pf("ens1f0".into())));
        let c = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","mac":"02:00:00:00:00:09","runtimeConfig":{"mac":"02:00:00:00:00:02"}}"#, &args).unwrap();
        assert_eq!(c.vf.mac.unwrap().to_string(), "02:00:00:00:00:02", "the pod's runtimeConfig.mac wins");
    }

    #[test]
    fn rdma_guid_and_device_info_keys() {
        let c = parse(&with("")).unwrap();
        assert_eq!(c.rdma, RdmaPolicy::Auto);
        assert_eq!(c.vf.guid, None);
        let c = parse(&with(
            r#","rdma":"isolated","runtimeConfig":{"infinibandGUID":"00:11:22:33:44:55:66:77","CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/x.json"}"#,
        ))
        .unwrap();
        assert_eq!(c.rdma, RdmaPolicy::Isolated);
        assert_eq!(c.vf.guid, Some(0x0011_2233_4455_6677));
        assert_eq!(c.device_info_file.unwrap().to_str(), Some("/var/run/k8s.cni.cncf.io/devinfo/x.json"));
        let mut args = HashMap::new();
        args.insert("guid".to_string(), "02:00:00:00:00:00:00:01".to_string());
        let c = NetConf::parse(with(r#","rdma":"off""#).as_bytes(), &args).unwrap();
        assert_eq!(c.vf.guid, Some(0x0200_0000_0000_0001));
        assert_eq!(c.rdma, RdmaPolicy::Off);
    }

    #[test]
    fn gc_attachments_accept_both_keys() {
        let c = parse(&with(r#","cni.dev/attachments":[{"containerID":"a","ifname":"net1"}]"#)).unwrap();
        assert_eq!(c.valid_attachments.unwrap()[0].container_id, "a");
        let c = parse(&with(r#","cni.dev/valid-attachments":[]"#)).unwrap();
        assert_eq!(c.valid_attachments, Some(vec![]));
        assert_eq!(parse(&with("")).unwrap().valid_attachments, None);
    }

    #[test]
    fn versions_round_trip() {
        for v in SUPPORTED_VERSIONS {
            assert_eq!(Version::parse(v).unwrap().as_str(), v);
        }
        assert!(Version::V0_4_0 < Version::V1_1_0);
        assert_eq!(sniff_version(b"{bad"), "1.1.0");
        assert_eq!(sniff_version(br#"{"cniVersion":"0.4.0"}"#), "0.4.0");
    }
}
