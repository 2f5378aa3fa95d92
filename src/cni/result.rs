//! The success result: read from an IPAM plugin in whatever version it speaks, printed in ours.

use super::config::Version;
use super::error::{CniError, CniResult, Code};
use crate::model::{IpNet, Mac};
use serde_json::{json, Map, Value};
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mac: Option<Mac>,
    pub mtu: Option<u32>,
    pub sandbox: String,
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpConfig {
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

/// A route of the result, with the fields CNI 1.1.0 gives a route (`mtu` … `scope`; 1.1.0 results only).
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    /// RT_SCOPE_*: global (0), link (253), host (254).
    pub scope: Option<u8>,
}

impl Route {
    /// One entry of a result's `routes`; the error names the field.
    pub fn from_json(rt: &Value) -> Result<Route, String> {
        let dst = rt.get("dst").and_then(Value::as_str).ok_or("an entry has no dst")?.parse()?;
        let gw = match rt.get("gw").and_then(Value::as_str) {
            Some(g) => Some(g.parse().map_err(|e| format!("gw {g:?}: {e}"))?),
            None => None,
        };
        let uint = |key: &str, max: u64| -> Result<Option<u64>, String> {
            match rt.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => match v.as_u64().filter(|n| *n <= max) {
                    Some(n) => Ok(Some(n)),
                    None => Err(format!("{key} {v} of route {dst} is not an integer from 0 to {max}")),
                },
            }
        };
        let u32_max = u64::from(u32::MAX);
        let narrow = |v: Option<u64>| v.and_then(|n| u32::try_from(n).ok());
        Ok(Route {
            dst,
            gw,
            mtu: narrow(uint("mtu", u32_max)?),
            advmss: narrow(uint("advmss", u32_max)?),
            priority: narrow(uint("priority", u32_max)?),
            table: narrow(uint("table", u32_max)?),
            scope: uint("scope", 255)?.and_then(|n| u8::try_from(n).ok()),
        })
    }

    fn to_json(&self, version: Version) -> Value {
        let mut o = Map::new();
        o.insert("dst".into(), json!(self.dst.to_string()));
        if let Some(gw) = self.gw {
            o.insert("gw".into(), json!(gw.to_string()));
        }
        if version >= Version::V1_1_0 {
            let fields = [
                ("mtu", self.mtu),
                ("advmss", self.advmss),
                ("priority", self.priority),
                ("table", self.table),
                ("scope", self.scope.map(u32::from)),
            ];
            for (key, v) in fields {
                if let Some(v) = v {
                    o.insert(key.into(), json!(v));
                }
            }
        }
        Value::Object(o)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttachResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Option<Value>,
}

fn decode_err(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(Code::Decode, format!("decoding the IPAM result: {what}: {e}"))
}

impl AttachResult {
    /// Parses an IPAM plugin's result (0.3.x–1.1.0 layouts all carry `ips`, `routes`, `dns`).
    pub fn from_ipam(out: &[u8]) -> CniResult<AttachResult> {
        let v: Value = serde_json::from_slice(out).map_err(|e| decode_err("not JSON", e))?;
        let mut r = AttachResult::default();
        for ip in v.get("ips").and_then(Value::as_array).into_iter().flatten() {
            let address = ip
                .get("address")
                .and_then(Value::as_str)
                .ok_or_else(|| decode_err("ips", "an entry has no address"))?
                .parse()
                .map_err(|e| decode_err("ips", e))?;
            let gateway = match ip.get("gateway").and_then(Value::as_str) {
                Some(g) => Some(g.parse().map_err(|e| decode_err("ips gateway", e))?),
                None => None,
            };
            r.ips.push(IpConfig { address, gateway });
        }
        for rt in v.get("routes").and_then(Value::as_array).into_iter().flatten() {
            r.routes.push(Route::from_json(rt).map_err(|e| decode_err("routes", e))?);
        }
        r.dns = v.get("dns").filter(|d| d.as_object().is_some_and(|o| !o.is_empty())).cloned();
        Ok(r)
    }

    /// The result JSON in the layout of `version`.
    pub fn to_json(&self, version: Version) -> Value {
        let interfaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut o = Map::new();
                o.insert("name".into(), json!(i.name));
                if let Some(mac) = i.mac {
                    o.insert("mac".into(), json!(mac.to_string()));
                }
                if version >= Version::V1_1_0 {
                    if let Some(mtu) = i.mtu {
                        o.insert("mtu".into(), json!(mtu));
                    }
                }
                o.insert("sandbox".into(), json!(i.sandbox));
                if version >= Version::V1_1_0 {
                    if let Some(p) = &i.pci_id {
                        o.insert("pciID".into(), json!(p));
                    }
                }
                Value::Object(o)
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut o = Map::new();
                if version < Version::V1_0_0 {
                    o.insert("version".into(), json!(if ip.address.addr.is_ipv4() { "4" } else { "6" }));
                }
                o.insert("address".into(), json!(ip.address.to_string()));
                if let Some(g) = ip.gateway {
                    o.insert("gateway".into(), json!(g.to_string()));
                }
                if !self.interfaces.is_empty() {
                    o.insert("interface".into(), json!(0));
                }
                Value::Object(o)
            })
            .collect();
        let routes: Vec<Value> = self.routes.iter().map(|r| r.to_json(version)).collect();
        let mut out = Map::new();
        out.insert("cniVersion".into(), json!(version.as_str()));
        out.insert("interfaces".into(), Value::Array(interfaces));
        out.insert("ips".into(), Value::Array(ips));
        if !routes.is_empty() {
            out.insert("routes".into(), Value::Array(routes));
        }
        if let Some(d) = &self.dns {
            out.insert("dns".into(), d.clone());
        }
        Value::Object(out)
    }
}

/// A chained plugin's result: the previous result's interfaces, IPs, routes and DNS kept, ours appended (the
/// spec's MUST for a plugin that gets a `prevResult`). `ours` and `prev` are in the same layout (the spec sends
/// prevResult in the configuration's version); our IPs' `interface` indexes move past the previous interfaces.
pub fn chained(ours: Value, prev: &Value) -> Value {
    let list = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    let prev_ifaces = list(prev, "interfaces");
    let shift = prev_ifaces.len() as u64;
    let mut interfaces = prev_ifaces;
    interfaces.extend(list(&ours, "interfaces"));
    let mut ips = list(prev, "ips");
    ips.extend(list(&ours, "ips").into_iter().map(|mut ip| {
        if let Some(i) = ip.get("interface").and_then(Value::as_u64) {
            ip["interface"] = json!(i + shift);
        }
        ip
    }));
    let mut routes = list(prev, "routes");
    routes.extend(list(&ours, "routes"));
    let mut out = ours;
    let Some(o) = out.as_object_mut() else { return out };
    o.insert("interfaces".into(), Value::Array(interfaces));
    o.insert("ips".into(), Value::Array(ips));
    if !routes.is_empty() {
        o.insert("routes".into(), Value::Array(routes));
    }
    if !o.contains_key("dns") {
        if let Some(d) = prev.get("dns").filter(|d| d.as_object().is_some_and(|m| !m.is_empty())) {
            o.insert("dns".into(), d.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AttachResult {
        let mut r = AttachResult::from_ipam(
            br#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.2/24","gateway":"10.1.0.1"},
                {"version":"6","address":"fd00::2/64"}],
                "routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],"dns":{"nameservers":["10.1.0.53"]}}"#,
        )
        .unwrap();
        r.interfaces.push(Interface {
            name: "net1".into(),
            mac: Some("02:00:00:00:00:01".parse().unwrap()),
            mtu: Some(9000),
            sandbox: "/var/run/netns/x".into(),
            pci_id: Some("0000:3b:02.1".into()),
        });
        r
    }

    #[test]
    fn ipam_result_is_read() {
        let r = sample();
        assert_eq!(r.ips.len(), 2);
        assert_eq!(r.ips[0].gateway, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(r.routes[0].dst.prefix, 0);
        assert!(r.dns.is_some());
        assert_eq!(AttachResult::from_ipam(b"nope").unwrap_err().code, Code::Decode);
        assert_eq!(AttachResult::from_ipam(br#"{"ips":[{"gateway":"1.1.1.1"}]}"#).unwrap_err().code, Code::Decode);
    }

    #[test]
    fn a_chained_result_keeps_the_previous_one_and_appends_ours() {
        let prev = json!({"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],
            "ips":[{"address":"10.9.9.9/24","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.9.9.1"}],
            "dns":{"nameservers":["10.9.9.53"]}});
        let mut ours = sample();
        ours.dns = None;
        let v = chained(ours.to_json(Version::V1_0_0), &prev);
        let names: Vec<&str> =
            v["interfaces"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["eth0", "net1"]);
        let ips: Vec<(&str, u64)> = v["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["address"].as_str().unwrap(), i["interface"].as_u64().unwrap()))
            .collect();
        assert_eq!(ips, [("10.9.9.9/24", 0), ("10.1.0.2/24", 1), ("fd00::2/64", 1)]);
        assert_eq!(v["routes"].as_array().unwrap().len(), 2);
        assert_eq!(v["dns"]["nameservers"][0], "10.9.9.53");
    }

    #[test]
    fn layout_follows_the_version() {
        let r = sample();
        let v031 = r.to_json(Version::V0_3_1);
        assert_eq!(v031["cniVersion"], "0.3.1");
        assert_eq!(v031["ips"][0]["version"], "4");
        assert_eq!(v031["ips"][1]["version"], "6");
        assert_eq!(v031["ips"][0]["interface"], 0);
        assert!(v031["interfaces"][0].get("mtu").is_none());
        assert!(v031["interfaces"][0].get("pciID").is_none());
        let v040 = r.to_json(Version::V0_4_0);
        assert_eq!(v040["ips"][0]["version"], "4");
        let v100 = r.to_json(Version::V1_0_0);
        assert!(v100["ips"][0].get("version").is_none());
        assert!(v100["interfaces"][0].get("mtu").is_none());
        let v110 = r.to_json(Version::V1_1_0);
        assert_eq!(v110["interfaces"][0]["mtu"], 9000);
        assert_eq!(v110["interfaces"][0]["pciID"], "0000:3b:02.1");
        assert_eq!(v110["interfaces"][0]["mac"], "02:00:00:00:00:01");
        assert_eq!(v110["interfaces"][0]["sandbox"], "/var/run/netns/x");
        assert_eq!(v110["routes"][0]["gw"], "10.1.0.1");
        assert_eq!(v110["dns"]["nameservers"][0], "10.1.0.53");
    }

    #[test]
    fn the_1_1_0_route_fields_are_read_and_returned_in_1_1_0_results_only() {
        let r = AttachResult::from_ipam(
            br#"{"cniVersion":"1.1.0","ips":[{"address":"10.77.0.2/24"}],"routes":[{"dst":"10.78.0.0/16",
                "gw":"10.77.0.1","table":100,"mtu":1400,"advmss":1360,"priority":7,"scope":0}]}"#,
        )
        .unwrap();
        let full = json!({"dst":"10.78.0.0/16","gw":"10.77.0.1","table":100,"mtu":1400,"advmss":1360,
            "priority":7,"scope":0});
        assert_eq!(r.to_json(Version::V1_1_0)["routes"][0], full);
        assert_eq!(r.to_json(Version::V1_0_0)["routes"][0], json!({"dst":"10.78.0.0/16","gw":"10.77.0.1"}));
        for (bad, key) in [
            (r#"{"dst":"10.78.0.0/16","scope":300}"#, "scope"),
            (r#"{"dst":"10.78.0.0/16","table":-1}"#, "table"),
            (r#"{"dst":"10.78.0.0/16","mtu":"1400"}"#, "mtu"),
            (r#"{"dst":"10.78.0.0/16","advmss":1.5}"#, "advmss"),
            (r#"{"dst":"10.78.0.0/16","priority":4294967296}"#, "priority"),
        ] {
            let e = AttachResult::from_ipam(format!(r#"{{"routes":[{bad}]}}"#).as_bytes()).unwrap_err();
            assert_eq!(e.code, Code::Decode, "{e}");
            assert!(e.msg.contains(key) && e.msg.contains("10.78.0.0/16"), "{e}");
        }
    }
}
