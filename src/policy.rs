//! The node policy: what the node's administrator lets any network configuration do on this node. A tenant who
//! can write a NetworkAttachmentDefinition controls the whole plugin configuration, and the plugin runs as root;
//! which PFs may be touched at all, and per Kubernetes namespace which PFs and VLANs, and which VF settings
//! (spoofchk, trust, admin MAC, TX rates) its VFs carry, only the node can say.
//!
//! ```json
//! {"pfs": ["ens1f0", "0000:3b:00.1"],
//!  "namespaces": {"team-a": {"pfs": ["ens1f0"], "vlans": ["100-199", 300], "spoofchk": "on", "trust": "off",
//!                            "macs": ["02:00:00:0a:00:00-02:00:00:0a:ff:ff"], "maxTxRate": 25000},
//!                 "*": {"pfs": [], "vlans": []}}}
//! ```
//! Read from a fixed path; no file means no limits (as before the policy existed). A file that cannot be read or
//! understood refuses every ADD (fail closed), naming the file and the key. A rule applies to what the VF will
//! carry: a setting the configuration leaves out, which would keep whatever the PF's row holds, is set by ADD to
//! what the rule asks (untagged under `vlans`, `spoofchk`/`trust` as given, `maxTxRate` as the rate) and restored
//! on DEL like any setting.

use crate::cni::error::{CniError, CniResult};
use crate::model::{on_off, parse_on_off, Mac};
use crate::vf_setting::VfSettings;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const DIR: &str = "/etc/sriov-rdma";
pub const FILE_NAME: &str = "policy.json";
pub const DEFAULT_PATH: &str = "/etc/sriov-rdma/policy.json";

/// The entry that stands for every namespace not listed by name.
pub const ANY_NAMESPACE: &str = "*";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub file: PathBuf,
    /// PFs by netdev name or PCI address; `None`: any.
    pfs: Option<Vec<String>>,
    /// `None`: every namespace alike.
    namespaces: Option<BTreeMap<String, Tenant>>,
}

/// What one namespace may use; a key left out does not limit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Tenant {
    pfs: Option<Vec<String>>,
    /// Inclusive ranges; 0 stands for untagged (no `vlan` in the configuration: ADD then sets VLAN 0).
    vlans: Option<Vec<(u16, u16)>>,
    /// The VF's source MAC check must be this; set so when the configuration leaves it out.
    spoofchk: Option<bool>,
    /// The VF's trust must be this; set so when the configuration leaves it out.
    trust: Option<bool>,
    /// Inclusive ranges an admin MAC (`mac`) must be in; empty: no admin MAC at all.
    macs: Option<Vec<(Mac, Mac)>>,
    /// The highest `max_tx_rate` (Mbit/s) a VF may have; 0 (no limit) is above it. Set when left out.
    max_tx_rate: Option<u32>,
    /// The highest `min_tx_rate` (Mbit/s, a guaranteed rate) a configuration may ask for.
    min_tx_rate: Option<u32>,
}

/// The keys of a namespace's entry.
const TENANT_KEYS: &[&str] = &["pfs", "vlans", "spoofchk", "trust", "macs", "maxTxRate", "minTxRate"];

/// What an ADD asks for, as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub pf: &'a str,
    pub pf_pci: &'a str,
    /// `K8S_POD_NAMESPACE` from CNI_ARGS.
    pub namespace: Option<&'a str>,
    /// The PF-side settings the configuration asks for (`None`: left as the PF's row has it).
    pub vf: &'a VfSettings,
}

struct Reader<'a> {
    file: &'a Path,
}

impl Reader<'_> {
    fn bad(&self, key: &str, why: impl std::fmt::Display) -> CniError {
        CniError::config(format!("node policy {}: {key} {why}", self.file.display()))
    }

    fn object<'v>(&self, key: &str, v: &'v Value, known: &[&str]) -> CniResult<&'v Map<String, Value>> {
        let Value::Object(m) = v else { return Err(self.bad(key, "must be an object")) };
        if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
            let at = if key == "policy" { k.clone() } else { format!("{key}.{k}") };
            return Err(self.bad(&at, format!("is not a known key (known: {})", known.join(", "))));
        }
        Ok(m)
    }

    fn pfs(&self, key: &str, v: Option<&Value>) -> CniResult<Option<Vec<String>>> {
        let Some(v) = v else { return Ok(None) };
        let Value::Array(items) = v else { return Err(self.bad(key, "must be a list of PF names or PCI addresses")) };
        items
            .iter()
            .map(|i| match i.as_str() {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                _ => Err(self.bad(key, format!("entry {i} is not a PF name or PCI address"))),
            })
            .collect::<CniResult<Vec<_>>>()
            .map(Some)
    }

    fn vlans(&self, key: &str, v: Option<&Value>) -> CniResult<Option<Vec<(u16, u16)>>> {
        let Some(v) = v else { return Ok(None) };
        let Value::Array(items) = v else { return Err(self.bad(key, "must be a list of VLANs or ranges")) };
        let one = |s: &str| s.trim().parse::<u16>().ok().filter(|n| *n <= 4094);
        items
            .iter()
            .map(|i| {
                let range = match i {
                    Value::Number(n) => {
                        n.as_u64().and_then(|n| u16::try_from(n).ok()).filter(|n| *n <= 4094).map(|n| (n, n))
                    }
                    Value::String(s) => match s.split_once('-') {
                        Some((a, b)) => one(a).zip(one(b)),
                        None => one(s).map(|n| (n, n)),
                    },
                    _ => None,
                };
                range.filter(|(a, b)| a <= b).ok_or_else(|| {
                    self.bad(
                        key,
                        format!("entry {i} is not a VLAN (0-4094, 0 for untagged) or a range \"A-B\" with A ≤ B"),
                    )
                })
            })
            .collect::<CniResult<Vec<_>>>()
            .map(Some)
    }

    fn on_off(&self, key: &str, v: Option<&Value>) -> CniResult<Option<bool>> {
        let Some(v) = v else { return Ok(None) };
        v.as_str()
            .and_then(parse_on_off)
            .map(Some)
            .ok_or_else(|| self.bad(key, format!("{v} must be \"on\" or \"off\"")))
    }

    fn macs(&self, key: &str, v: Option<&Value>) -> CniResult<Option<Vec<(Mac, Mac)>>> {
        let Some(v) = v else { return Ok(None) };
        let Value::Array(items) = v else { return Err(self.bad(key, "must be a list of MACs or ranges")) };
        let one = |s: &str| s.trim().parse::<Mac>().ok();
        items
            .iter()
            .map(|i| {
                let range = i.as_str().and_then(|s| match s.split_once('-') {
                    Some((a, b)) => one(a).zip(one(b)),
                    None => one(s).map(|m| (m, m)),
                });
                range.filter(|(a, b)| a.0 <= b.0).ok_or_else(|| {
                    self.bad(key, format!("entry {i} is not a MAC or a range \"A-B\" of MACs with A ≤ B"))
                })
            })
            .collect::<CniResult<Vec<_>>>()
            .map(Some)
    }

    fn rate(&self, key: &str, v: Option<&Value>) -> CniResult<Option<u32>> {
        let Some(v) = v else { return Ok(None) };
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| self.bad(key, format!("{v} must be a rate in Mbit/s, 1 or more")))
    }
}

fn ranges<T: Copy + PartialEq + std::fmt::Display>(r: &[(T, T)]) -> String {
    let each: Vec<String> = r.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    each.join(", ")
}

/// A regular file's bytes; anything else (a directory, a FIFO that would block) is an error.
pub(crate) fn read_regular(file: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(file)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// The first symbolic link on the way to `file` (or `file` itself) that points nowhere, and its target.
fn dangling_link(file: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut ancestors: Vec<&Path> = file.ancestors().collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|p| {
        let is_link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
        (is_link && std::fs::metadata(p).is_err()).then(|| (p.to_path_buf(), std::fs::read_link(p).unwrap_or_default()))
    })
}

impl Policy {
    /// The policy at `file`; `None` when there is none: neither the file nor a symbolic link on its way that
    /// cannot be followed (a link whose target is gone is an error, not "no policy").
    pub fn load(file: &Path) -> CniResult<Option<Policy>> {
        let reading = || format!("reading the node policy {}", file.display());
        match read_regular(file) {
            Ok(bytes) => Policy::parse(file, &bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match dangling_link(file) {
                None => Ok(None),
                Some((link, to)) => Err(CniError::io(format!(
                    "{}: {} is a symbolic link to {}, which does not exist; every ADD is refused until the link is \
                     repaired or removed (no file at all means no policy)",
                    reading(),
                    link.display(),
                    to.display()
                ))),
            },
            Err(e) => Err(CniError::from_io(reading(), &e)),
        }
    }

    pub fn parse(file: &Path, bytes: &[u8]) -> CniResult<Policy> {
        let r = Reader { file };
        let v: Value = serde_json::from_slice(bytes).map_err(|e| r.bad("policy", format!("is not valid JSON: {e}")))?;
        let top = r.object("policy", &v, &["pfs", "namespaces"])?;
        let pfs = r.pfs("pfs", top.get("pfs"))?;
        let namespaces = match top.get("namespaces") {
            None => None,
            Some(v) => {
                let mut out = BTreeMap::new();
                let Value::Object(m) = v else { return Err(r.bad("namespaces", "must be an object")) };
                for (ns, t) in m {
                    let key = format!("namespaces.{ns}");
                    let t = r.object(&key, t, TENANT_KEYS)?;
                    let at = |k: &str| format!("{key}.{k}");
                    let tenant = Tenant {
                        pfs: r.pfs(&at("pfs"), t.get("pfs"))?,
                        vlans: r.vlans(&at("vlans"), t.get("vlans"))?,
                        spoofchk: r.on_off(&at("spoofchk"), t.get("spoofchk"))?,
                        trust: r.on_off(&at("trust"), t.get("trust"))?,
                        macs: r.macs(&at("macs"), t.get("macs"))?,
                        max_tx_rate: r.rate(&at("maxTxRate"), t.get("maxTxRate"))?,
                        min_tx_rate: r.rate(&at("minTxRate"), t.get("minTxRate"))?,
                    };
                    out.insert(ns.clone(), tenant);
                }
                Some(out)
            }
        };
        Ok(Policy { file: file.to_path_buf(), pfs, namespaces })
    }

    /// Allows the request or refuses it (code 7), naming the rule and the file. Allowed: the settings ADD applies,
    /// the configuration's with what the namespace's rules set where it leaves a setting out.
    pub fn admit(&self, r: &Request) -> CniResult<VfSettings> {
        let file = self.file.display();
        let listed = |pfs: &[String]| pfs.iter().any(|p| p == r.pf || p == r.pf_pci);
        let pf = format!("PF {} ({})", r.pf, r.pf_pci);
        if let Some(pfs) = self.pfs.as_deref().filter(|p| !listed(p)) {
            return Err(CniError::config(format!(
                "{pf} is not among the PFs this node lets sriov-rdma use: rule pfs [{}] in the node policy {file}",
                pfs.join(", ")
            )));
        }
        let Some(namespaces) = &self.namespaces else { return Ok(r.vf.clone()) };
        let any = namespaces.get(ANY_NAMESPACE).map(|t| (ANY_NAMESPACE, t));
        let (key, tenant) = match r.namespace {
            Some(ns) => namespaces.get_key_value(ns).map(|(k, t)| (k.as_str(), t)).or(any).ok_or_else(|| {
                CniError::config(format!(
                    "namespace {ns} is not listed under namespaces in the node policy {file} (nor is \"*\")"
                ))
            })?,
            None => any.ok_or_else(|| {
                CniError::config(format!(
                    "CNI_ARGS has no K8S_POD_NAMESPACE, and the node policy {file} allows only the namespaces it lists"
                ))
            })?,
        };
        let who = r.namespace.map(|n| format!("namespace {n}")).unwrap_or_else(|| "a pod without namespace".into());
        if let Some(pfs) = tenant.pfs.as_deref().filter(|p| !listed(p)) {
            return Err(CniError::config(format!(
                "{who} may not use {pf}: rule namespaces.{key}.pfs [{}] in the node policy {file}",
                pfs.join(", ")
            )));
        }
        let refuse = |what: String, rule: &str, allowed: String| {
            CniError::config(format!(
                "{who} may not use {what}: rule namespaces.{key}.{rule} {allowed} in the node policy {file}"
            ))
        };
        let mut vf = r.vf.clone();
        if let Some(vlans) = &tenant.vlans {
            // Untagged is what the VF carries only once ADD sets VLAN 0: the PF's row may hold another.
            let vlan = *vf.vlan.get_or_insert(0);
            if !vlans.iter().any(|(a, b)| (*a..=*b).contains(&vlan)) {
                let what = if vlan == 0 { "untagged (no vlan set)".to_string() } else { format!("VLAN {vlan}") };
                return Err(refuse(what, "vlans", format!("[{}]", ranges(vlans))));
            }
        }
        for (rule, want, set) in
            [("spoofchk", tenant.spoofchk, &mut vf.spoofchk), ("trust", tenant.trust, &mut vf.trust)]
        {
            let Some(want) = want else { continue };
            if *set.get_or_insert(want) != want {
                return Err(refuse(format!("{rule} {}", on_off(!want)), rule, format!("\"{}\"", on_off(want))));
            }
        }
        if let (Some(macs), Some(mac)) = (&tenant.macs, vf.mac) {
            if !macs.iter().any(|(a, b)| (a.0..=b.0).contains(&mac.0)) {
                let allowed =
                    if macs.is_empty() { "[] (no admin MAC)".to_string() } else { format!("[{}]", ranges(macs)) };
                return Err(refuse(format!("mac {mac}"), "macs", allowed));
            }
        }
        if let Some(ceiling) = tenant.max_tx_rate {
            let max = *vf.max_tx_rate.get_or_insert(ceiling);
            if max == 0 || max > ceiling {
                let what = if max == 0 { "max_tx_rate 0 (no limit)".to_string() } else { format!("max_tx_rate {max}") };
                return Err(refuse(what, "maxTxRate", ceiling.to_string()));
            }
            if let Some(min) = vf.min_tx_rate.filter(|min| *min > max) {
                return Err(refuse(
                    format!("min_tx_rate {min} above max_tx_rate {max}"),
                    "maxTxRate",
                    ceiling.to_string(),
                ));
            }
        }
        if let (Some(ceiling), Some(min)) = (tenant.min_tx_rate, vf.min_tx_rate) {
            if min > ceiling {
                return Err(refuse(format!("min_tx_rate {min}"), "minTxRate", ceiling.to_string()));
            }
        }
        Ok(vf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::error::Code;

    fn policy(s: &str) -> CniResult<Policy> {
        Policy::parse(Path::new("/etc/sriov-rdma/policy.json"), s.as_bytes())
    }

    /// Settings that live as long as the test (0: no `vlan`).
    fn vf(vlan: u16) -> &'static VfSettings {
        settings(VfSettings { vlan: (vlan != 0).then_some(vlan), ..VfSettings::default() })
    }

    fn settings(s: VfSettings) -> &'static VfSettings {
        Box::leak(Box::new(s))
    }

    fn req<'a>(pf: &'a str, namespace: Option<&'a str>, vlan: u16) -> Request<'a> {
        Request { pf, pf_pci: "0000:3b:00.0", namespace, vf: vf(vlan) }
    }

    #[test]
    fn pfs_by_name_or_pci_namespaces_and_vlan_ranges() {
        let p = policy(
            r#"{"pfs":["ens1f0","0000:3b:00.0"],
                "namespaces":{"a":{"pfs":["ens1f0"],"vlans":["100-199",300]},"*":{"vlans":[0]}}}"#,
        )
        .unwrap();
        assert!(p.admit(&req("ens1f0", Some("a"), 150)).is_ok());
        assert!(p.admit(&req("ens1f0", Some("a"), 300)).is_ok());
        assert!(p.admit(&req("renamed", Some("x"), 0)).is_ok(), "listed by PCI address, '*' allows untagged");
        assert!(p.admit(&req("ens1f0", None, 0)).is_ok(), "no namespace: the '*' entry");
        for (r, needle) in [
            (Request { pf: "ens2f0", pf_pci: "0000:5e:00.0", namespace: Some("a"), vf: vf(150) }, "rule pfs"),
            (req("renamed", Some("a"), 150), "namespaces.a.pfs"),
            (req("ens1f0", Some("a"), 200), "VLAN 200"),
            (req("ens1f0", Some("a"), 0), "untagged"),
            (req("ens1f0", Some("x"), 5), "namespaces.*.vlans"),
        ] {
            let e = p.admit(&r).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig);
            assert!(e.msg.contains(needle) && e.msg.contains("/etc/sriov-rdma/policy.json"), "{}", e.msg);
        }
        let strict = policy(r#"{"namespaces":{"a":{}}}"#).unwrap();
        assert!(strict.admit(&req("ens1f0", Some("a"), 7)).is_ok(), "an empty entry does not limit");
        assert!(strict.admit(&req("ens1f0", Some("b"), 0)).unwrap_err().msg.contains("namespace b is not listed"));
        assert!(strict.admit(&req("ens1f0", None, 0)).unwrap_err().msg.contains("K8S_POD_NAMESPACE"));
        assert!(policy("{}").unwrap().admit(&req("any", None, 4094)).is_ok(), "an empty policy limits nothing");
        assert!(policy(r#"{"pfs":[]}"#).unwrap().admit(&req("ens1f0", None, 0)).is_err(), "no PF at all");
    }

    #[test]
    fn no_vlan_under_a_namespace_limited_to_vlans_is_untagged_set_by_add() {
        // The PF's row may carry VLAN 500 (left over, or an admin's): leaving vlan out would keep it.
        let p = policy(r#"{"namespaces":{"shared":{"vlans":[0]},"open":{}}}"#).unwrap();
        let out = p.admit(&req("ens1f0", Some("shared"), 0)).unwrap();
        assert_eq!(out.vlan, Some(0), "ADD sets VLAN 0: what the policy admitted is what the VF carries");
        assert_eq!(p.admit(&req("ens1f0", Some("open"), 0)).unwrap().vlan, None, "no vlans rule: left as it is");
        assert_eq!(p.admit(&req("ens1f0", Some("shared"), 0)).unwrap().spoofchk, None, "nothing else set");
    }

    #[test]
    fn tenant_isolation_rules_refuse_naming_the_rule_and_set_what_is_left_out() {
        let p = policy(
            r#"{"namespaces":{"t":{"spoofchk":"on","trust":"off","macs":["02:00:00:0a:00:00-02:00:00:0a:ff:ff",
                "02:00:00:0c:00:01"],"maxTxRate":1000,"minTxRate":100},"none":{"macs":[]}}}"#,
        )
        .unwrap();
        let ask =
            |s: VfSettings| Request { pf: "ens1f0", pf_pci: "0000:3b:00.0", namespace: Some("t"), vf: settings(s) };
        let mac = |s: &str| Some(s.parse::<Mac>().unwrap());
        // Left out: set as the rules say.
        let out = p.admit(&ask(VfSettings::default())).unwrap();
        assert_eq!((out.spoofchk, out.trust, out.max_tx_rate, out.mac), (Some(true), Some(false), Some(1000), None));
        assert_eq!(out.min_tx_rate, None, "a floor is never set for the tenant");
        // Within the rules: as asked.
        let within = VfSettings {
            spoofchk: Some(true),
            trust: Some(false),
            mac: mac("02:00:00:0a:12:34"),
            max_tx_rate: Some(500),
            min_tx_rate: Some(100),
            ..VfSettings::default()
        };
        assert_eq!(p.admit(&ask(within.clone())).unwrap(), within);
        assert!(p.admit(&ask(VfSettings { mac: mac("02:00:00:0c:00:01"), ..VfSettings::default() })).is_ok());
        for (s, needles) in [
            (
                VfSettings { spoofchk: Some(false), ..Default::default() },
                ["spoofchk off", "namespaces.t.spoofchk \"on\""],
            ),
            (VfSettings { trust: Some(true), ..Default::default() }, ["trust on", "namespaces.t.trust \"off\""]),
            (
                VfSettings { mac: mac("02:00:00:0b:00:01"), ..Default::default() },
                ["mac 02:00:00:0b:00:01", "namespaces.t.macs [02:00:00:0a:00:00-02:00:00:0a:ff:ff, 02:00:00:0c:00:01]"],
            ),
            (
                VfSettings { max_tx_rate: Some(0), ..Default::default() },
                ["max_tx_rate 0 (no limit)", "namespaces.t.maxTxRate 1000"],
            ),
            (VfSettings { max_tx_rate: Some(1001), ..Default::default() }, ["max_tx_rate 1001", "maxTxRate"]),
            (
                VfSettings { min_tx_rate: Some(101), ..Default::default() },
                ["min_tx_rate 101", "namespaces.t.minTxRate 100"],
            ),
            (
                VfSettings { min_tx_rate: Some(90), max_tx_rate: Some(50), ..Default::default() },
                ["min_tx_rate 90 above max_tx_rate 50", "maxTxRate"],
            ),
        ] {
            let e = p.admit(&ask(s)).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig);
            for n in needles {
                assert!(e.msg.contains(n) && e.msg.contains("namespace t may not"), "{n}: {}", e.msg);
            }
        }
        let none = Request {
            namespace: Some("none"),
            ..ask(VfSettings { mac: mac("02:00:00:0a:00:01"), ..Default::default() })
        };
        assert!(p.admit(&none).unwrap_err().msg.contains("namespaces.none.macs [] (no admin MAC)"));
    }

    #[test]
    fn a_malformed_policy_names_the_key() {
        for (s, key) in [
            ("{", "policy is not valid JSON"),
            ("[]", "policy must be an object"),
            (r#"{"pf":[]}"#, "pf is not a known key"),
            (r#"{"pfs":"ens1f0"}"#, "pfs must be a list"),
            (r#"{"pfs":[""]}"#, "pfs entry"),
            (r#"{"namespaces":[]}"#, "namespaces must be an object"),
            (r#"{"namespaces":{"a":[]}}"#, "namespaces.a must be an object"),
            (r#"{"namespaces":{"a":{"vlan":[]}}}"#, "namespaces.a.vlan is not a known key"),
            (r#"{"namespaces":{"a":{"vlans":["9-5"]}}}"#, "namespaces.a.vlans entry"),
            (r#"{"namespaces":{"a":{"vlans":[4095]}}}"#, "namespaces.a.vlans entry"),
            (r#"{"namespaces":{"a":{"vlans":["x"]}}}"#, "namespaces.a.vlans entry"),
            (r#"{"namespaces":{"a":{"spoofchk":true}}}"#, "namespaces.a.spoofchk true must be \"on\" or \"off\""),
            (r#"{"namespaces":{"a":{"trust":"no"}}}"#, "namespaces.a.trust"),
            (r#"{"namespaces":{"a":{"macs":"02:00:00:00:00:01"}}}"#, "namespaces.a.macs must be a list"),
            (r#"{"namespaces":{"a":{"macs":["02:00:00:00:00:09-02:00:00:00:00:01"]}}}"#, "namespaces.a.macs entry"),
            (r#"{"namespaces":{"a":{"macs":["x"]}}}"#, "namespaces.a.macs entry"),
            (r#"{"namespaces":{"a":{"maxTxRate":0}}}"#, "namespaces.a.maxTxRate 0 must be a rate"),
            (r#"{"namespaces":{"a":{"minTxRate":"5"}}}"#, "namespaces.a.minTxRate"),
            (r#"{"namespaces":{"a":{"max_tx_rate":5}}}"#, "namespaces.a.max_tx_rate is not a known key"),
        ] {
            let e = policy(s).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{s}");
            assert!(e.msg.contains(key) && e.msg.contains("policy.json"), "{s}: {}", e.msg);
        }
    }
}
