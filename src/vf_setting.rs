//! The PF-side settings of a VF, each in one place. A setting is a type with one `impl Setting` below: its
//! configuration keys and how a bad value is refused, the change the configuration asks for, its netlink encoding,
//! how the PF's VF row shows it (and so whether the PF holds it, which ADD's restore and CHECK both ask), its value
//! before ADD, its words, and its fields in the record. The `settings!` line lists them in the order ADD applies
//! them; [`VfSetting`] (one change), [`VfSettings`] (what a configuration asks for) and [`VfState`] (the PF's row)
//! are built over that list, so the protocol layer, the kernel layer and the record read one definition.
//!
//! docs/adding-a-vf-setting.md shows what a new setting adds here, and nowhere else.

use crate::model::{guid_str, on_off, parse_guid, parse_on_off, LinkState, Mac, VlanProto};
use netlink_packet_route::link::{
    VfInfo, VfInfoGuid, VfInfoLinkState, VfInfoMac, VfInfoRate, VfInfoSpoofCheck, VfInfoTrust, VfInfoVlan,
    VfLinkState as NlLinkState, VfVlan, VfVlanInfo, VlanProtocol,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;

/// A configuration value refused: the key as the user wrote it, the value, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct BadKey {
    pub key: String,
    pub value: Value,
    pub why: String,
}

fn bad(key: &str, value: impl Into<Value>, why: &str) -> BadKey {
    BadKey { key: key.to_string(), value: value.into(), why: why.to_string() }
}

/// Where a setting's configuration keys are: the top level, `runtimeConfig` (capabilities) and CNI_ARGS.
pub struct ConfigKeys<'a> {
    pub top: &'a Map<String, Value>,
    pub runtime: Option<&'a Map<String, Value>>,
    pub args: &'a HashMap<String, String>,
}

fn get<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

fn str_in<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, BadKey> {
    match get(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(v) => Err(bad(key, v.clone(), "must be a string")),
    }
}

impl<'a> ConfigKeys<'a> {
    fn present(&self, key: &str) -> Option<&'a Value> {
        get(self.top, key)
    }

    fn str(&self, key: &str) -> Result<Option<&'a str>, BadKey> {
        str_in(self.top, key)
    }

    fn runtime_str(&self, key: &str) -> Result<Option<&'a str>, BadKey> {
        self.runtime.map_or(Ok(None), |r| str_in(r, key))
    }

    fn arg(&self, key: &str) -> Option<&'a str> {
        self.args.get(key).map(String::as_str)
    }

    fn int(&self, key: &str, min: i64, max: i64) -> Result<Option<i64>, BadKey> {
        match self.present(key) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                Some(_) => Err(bad(key, v.clone(), &format!("must be between {min} and {max}"))),
                None => Err(bad(key, v.clone(), "must be an integer")),
            },
        }
    }

    fn on_off(&self, key: &str) -> Result<Option<bool>, BadKey> {
        match self.str(key)? {
            None => Ok(None),
            Some(s) => parse_on_off(s).map(Some).ok_or_else(|| bad(key, s, "must be \"on\" or \"off\"")),
        }
    }

    /// A word of `choices` (as `parse` reads them), refused naming them.
    fn word<T>(&self, key: &str, parse: impl Fn(&str) -> Option<T>, choices: &str) -> Result<Option<T>, BadKey> {
        match self.str(key)? {
            None => Ok(None),
            Some(s) => parse(s).map(Some).ok_or_else(|| bad(key, s, &format!("must be {choices}"))),
        }
    }
}

/// One field of a row in the record; a key a later setting added is absent from an older record (its default).
fn field<T: DeserializeOwned + Default>(rec: &Map<String, Value>, key: &str) -> Result<T, String> {
    match rec.get(key) {
        None => Ok(T::default()),
        Some(v) => T::deserialize(v).map_err(|e| format!("{key} {v} is not understood: {e}")),
    }
}

fn json(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Everything one setting means. One implementation per setting; `settings!` lists them.
pub trait Setting: Sized + Clone + PartialEq + fmt::Debug {
    /// Configurations that set it (JSON objects), for the tests that every setting passes.
    const EXAMPLES: &'static [&'static str];
    /// Reads its configuration keys into `into`, refusing a bad value naming its key.
    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey>;
    /// The change the configuration asks for; `orig` (the row before ADD) fills what it leaves as it is.
    fn configured(cfg: &VfSettings, orig: &VfState) -> Option<Self>;
    /// The kernel attributes that set it on VF `vf`.
    fn encode(&self, vf: u32) -> Vec<VfInfo>;
    /// Reads its part of the PF's row from one attribute of the VF's entry.
    fn read(info: &VfInfo, row: &mut VfState);
    /// Its value as the row shows it; `None` when the PF does not report it (then it is never taken as held).
    fn shown(row: &VfState) -> Option<Self>;
    /// Its value before ADD, what DEL puts back; `None` when there is nothing to put back.
    fn original(row: &VfState) -> Option<Self> {
        Self::shown(row)
    }
    /// The row once it is applied, as the kernel shows it (by default: its attributes, read back).
    fn set_in(&self, row: &mut VfState) {
        for info in self.encode(0) {
            Self::read(&info, row);
        }
    }
    /// Its words, in its configuration keys, so an error or a log line names the key the user wrote.
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// Its fields of the row in the record (the VF's value before ADD), in order.
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)>;
    /// Reads those fields back.
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String>;
}

/// The admin MAC, set on the PF for the VF (`mac`, `runtimeConfig.mac`, CNI_ARGS `MAC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminMac {
    pub mac: Mac,
}

impl AdminMac {
    fn parse_one(key: &str, s: &str) -> Result<Mac, BadKey> {
        let mac: Mac = s.parse().map_err(|why: String| bad(key, s, &why))?;
        if mac.is_multicast() || mac.is_zero() {
            return Err(bad(key, s, "must be a unicast, non-zero MAC address"));
        }
        Ok(mac)
    }
}

impl Setting for AdminMac {
    const EXAMPLES: &'static [&'static str] = &[r#"{"mac":"02:00:00:00:00:01"}"#];

    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
        // As sriov-cni decides it: the pod's own (runtimeConfig.mac from its annotation), then CNI_ARGS MAC, then
        // the network's `mac`.
        into.mac = match (k.runtime_str("mac")?, k.arg("MAC"), k.str("mac")?) {
            (Some(m), _, _) => Some(Self::parse_one("runtimeConfig.mac", m)?),
            (None, Some(m), _) => Some(Self::parse_one("CNI_ARGS MAC", m)?),
            (None, None, Some(m)) => Some(Self::parse_one("mac", m)?),
            (None, None, None) => None,
        };
        Ok(())
    }
    fn configured(cfg: &VfSettings, _: &VfState) -> Option<Self> {
        cfg.mac.map(|mac| AdminMac { mac })
    }
    fn encode(&self, vf: u32) -> Vec<VfInfo> {
        vec![VfInfo::Mac(VfInfoMac::new(vf, &self.mac.0))]
    }
    fn read(info: &VfInfo, row: &mut VfState) {
        if let VfInfo::Mac(m) = info {
            row.mac = Mac::from_slice(&m.mac);
        }
    }
    fn shown(row: &VfState) -> Option<Self> {
        row.mac.map(|mac| AdminMac { mac })
    }
    fn original(row: &VfState) -> Option<Self> {
        Some(AdminMac { mac: row.mac.unwrap_or(Mac([0; 6])) })
    }
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mac {}", self.mac)
    }
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
        vec![("mac", json(row.mac))]
    }
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
        row.mac = field(rec, "mac")?;
        Ok(())
    }
}

/// The VLAN the PF tags the VF's traffic with (`vlan`, `vlanQoS`, `vlanProto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vlan {
    pub vlan: u16,
    pub qos: u8,
    pub proto: VlanProto,
}

impl Setting for Vlan {
    const EXAMPLES: &'static [&'static str] =
        &[r#"{"vlan":100,"vlanQoS":3}"#, r#"{"vlan":5,"vlanProto":"802.1ad"}"#, r#"{"vlan":7,"vlanProto":"802.1Q"}"#];

    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
        into.vlan = k.int("vlan", 0, 4094)?.map(|v| v as u16);
        into.vlan_qos = k.int("vlanQoS", 0, 7)?.map(|v| v as u8);
        into.vlan_proto = k.word("vlanProto", |s| VlanProto::parse(s, true), "\"802.1q\" or \"802.1ad\"")?;
        if into.vlan.is_none() {
            for key in ["vlanQoS", "vlanProto"] {
                if let Some(v) = k.present(key) {
                    return Err(bad(key, v.clone(), "needs vlan to be set"));
                }
            }
        }
        Ok(())
    }
    fn configured(cfg: &VfSettings, _: &VfState) -> Option<Self> {
        cfg.vlan.map(|vlan| Vlan {
            vlan,
            qos: cfg.vlan_qos.unwrap_or(0),
            proto: cfg.vlan_proto.unwrap_or(VlanProto::Dot1Q),
        })
    }
    fn encode(&self, vf: u32) -> Vec<VfInfo> {
        let (vlan, qos) = (u32::from(self.vlan), u32::from(self.qos));
        vec![match self.proto {
            VlanProto::Dot1Q => VfInfo::Vlan(VfInfoVlan::new(vf, vlan, qos)),
            VlanProto::Dot1Ad => {
                VfInfo::VlanList(vec![VfVlan::Info(VfVlanInfo::new(vf, vlan, qos, VlanProtocol::Ieee8021Ad))])
            }
        }]
    }
    fn read(info: &VfInfo, row: &mut VfState) {
        match info {
            VfInfo::Vlan(v) => {
                row.vlan = v.vlan_id as u16;
                row.qos = v.qos as u8;
            }
            // The kernel reports both; the list's entry carries the same VLAN and QoS, and the protocol.
            VfInfo::VlanList(list) => {
                if let Some(VfVlan::Info(v)) = list.first() {
                    row.vlan = v.vlan_id as u16;
                    row.qos = v.qos as u8;
                    row.vlan_proto = Some(match v.protocol {
                        VlanProtocol::Ieee8021Ad => VlanProto::Dot1Ad,
                        _ => VlanProto::Dot1Q,
                    });
                }
            }
            _ => {}
        }
    }
    /// A plain VLAN attribute sets 802.1Q: the kernel then lists the protocol as such.
    fn set_in(&self, row: &mut VfState) {
        (row.vlan, row.qos, row.vlan_proto) = (self.vlan, self.qos, Some(self.proto));
    }
    fn shown(row: &VfState) -> Option<Self> {
        Some(Vlan { vlan: row.vlan, qos: row.qos, proto: row.vlan_proto.unwrap_or(VlanProto::Dot1Q) })
    }
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Vlan { vlan, qos, proto } = self;
        match proto {
            VlanProto::Dot1Ad => write!(f, "vlanProto {} (vlan {vlan}, vlanQoS {qos})", proto.as_str()),
            VlanProto::Dot1Q => write!(f, "vlan {vlan} (vlanQoS {qos})"),
        }
    }
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
        vec![("vlan", json(row.vlan)), ("qos", json(row.qos)), ("vlan_proto", json(row.vlan_proto))]
    }
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
        row.vlan = field(rec, "vlan")?;
        row.qos = field(rec, "qos")?;
        row.vlan_proto = field(rec, "vlan_proto")?;
        Ok(())
    }
}

/// A setting that is a switch: `on`/`off` under its configuration key, a flag in the PF's row, a field of the same
/// name in the record's row.
macro_rules! switch {
    ($(#[$doc:meta])* $kind:ident, $key:literal, $field:ident, $attr:ident($info:ident)) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $kind {
            pub on: bool,
        }

        impl Setting for $kind {
            const EXAMPLES: &'static [&'static str] = &[concat!("{\"", $key, "\":\"on\"}")];

            fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
                into.$field = k.on_off($key)?;
                Ok(())
            }
            fn configured(cfg: &VfSettings, _: &VfState) -> Option<Self> {
                cfg.$field.map(|on| $kind { on })
            }
            fn encode(&self, vf: u32) -> Vec<VfInfo> {
                vec![VfInfo::$attr($info::new(vf, self.on))]
            }
            fn read(info: &VfInfo, row: &mut VfState) {
                if let VfInfo::$attr(s) = info {
                    row.$field = Some(s.enabled);
                }
            }
            fn shown(row: &VfState) -> Option<Self> {
                row.$field.map(|on| $kind { on })
            }
            fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} {}", $key, on_off(self.on))
            }
            fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
                vec![($key, json(row.$field))]
            }
            fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
                row.$field = field(rec, $key)?;
                Ok(())
            }
        }
    };
}

switch!(
    /// Source MAC checking on the VF's traffic (`spoofchk`).
    SpoofChk, "spoofchk", spoofchk, SpoofCheck(VfInfoSpoofCheck)
);
switch!(
    /// Whether the VF may change its MAC and see other traffic (`trust`).
    Trust, "trust", trust, Trust(VfInfoTrust)
);

/// The VF's link as the PF reports it to the VF (`link_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfLinkState {
    pub state: LinkState,
}

impl Setting for VfLinkState {
    const EXAMPLES: &'static [&'static str] = &[r#"{"link_state":"enable"}"#, r#"{"link_state":"disable"}"#];

    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
        into.link_state = k.word("link_state", LinkState::parse, "\"auto\", \"enable\" or \"disable\"")?;
        Ok(())
    }
    fn configured(cfg: &VfSettings, _: &VfState) -> Option<Self> {
        cfg.link_state.map(|state| VfLinkState { state })
    }
    fn encode(&self, vf: u32) -> Vec<VfInfo> {
        let state = match self.state {
            LinkState::Auto => NlLinkState::Auto,
            LinkState::Enable => NlLinkState::Enable,
            LinkState::Disable => NlLinkState::Disable,
        };
        vec![VfInfo::LinkState(VfInfoLinkState::new(vf, state))]
    }
    fn read(info: &VfInfo, row: &mut VfState) {
        if let VfInfo::LinkState(l) = info {
            row.link_state = match l.state {
                NlLinkState::Auto => Some(LinkState::Auto),
                NlLinkState::Enable => Some(LinkState::Enable),
                NlLinkState::Disable => Some(LinkState::Disable),
                _ => None,
            }
        }
    }
    fn shown(row: &VfState) -> Option<Self> {
        row.link_state.map(|state| VfLinkState { state })
    }
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "link_state {}", self.state)
    }
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
        vec![("link_state", json(row.link_state))]
    }
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
        row.link_state = field(rec, "link_state")?;
        Ok(())
    }
}

/// The VF's TX rate bounds in Mbit/s (`min_tx_rate`, `max_tx_rate`); one set alone keeps the other as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxRate {
    pub min: u32,
    pub max: u32,
}

impl Setting for TxRate {
    const EXAMPLES: &'static [&'static str] = &[r#"{"min_tx_rate":10,"max_tx_rate":100}"#, r#"{"max_tx_rate":500}"#];

    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
        into.min_tx_rate = k.int("min_tx_rate", 0, u32::MAX as i64)?.map(|v| v as u32);
        into.max_tx_rate = k.int("max_tx_rate", 0, u32::MAX as i64)?.map(|v| v as u32);
        if let (Some(min), Some(max)) = (into.min_tx_rate, into.max_tx_rate) {
            if max != 0 && min > max {
                return Err(bad("min_tx_rate", min, &format!("is greater than max_tx_rate {max}")));
            }
        }
        Ok(())
    }
    fn configured(cfg: &VfSettings, orig: &VfState) -> Option<Self> {
        (cfg.min_tx_rate.is_some() || cfg.max_tx_rate.is_some()).then(|| TxRate {
            min: cfg.min_tx_rate.unwrap_or(orig.min_tx_rate),
            max: cfg.max_tx_rate.unwrap_or(orig.max_tx_rate),
        })
    }
    fn encode(&self, vf: u32) -> Vec<VfInfo> {
        vec![VfInfo::Rate(VfInfoRate::new(vf, self.min, self.max))]
    }
    fn read(info: &VfInfo, row: &mut VfState) {
        if let VfInfo::Rate(r) = info {
            row.min_tx_rate = r.min_tx_rate;
            row.max_tx_rate = r.max_tx_rate;
        }
    }
    fn shown(row: &VfState) -> Option<Self> {
        Some(TxRate { min: row.min_tx_rate, max: row.max_tx_rate })
    }
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "min_tx_rate {} / max_tx_rate {}", self.min, self.max)
    }
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
        vec![("min_tx_rate", json(row.min_tx_rate)), ("max_tx_rate", json(row.max_tx_rate))]
    }
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
        row.min_tx_rate = field(rec, "min_tx_rate")?;
        row.max_tx_rate = field(rec, "max_tx_rate")?;
        Ok(())
    }
}

/// The InfiniBand node and port GUID (`runtimeConfig.infinibandGUID`, CNI_ARGS `guid`); in the record as text,
/// which tools that read JSON numbers as doubles would round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IbGuid {
    #[serde(with = "guid_text")]
    pub node: u64,
    #[serde(with = "guid_text")]
    pub port: u64,
}

impl IbGuid {
    /// All-zero and all-FF are not GUIDs.
    fn parse_one(key: &str, s: &str) -> Result<u64, BadKey> {
        let g = parse_guid(s).ok_or_else(|| bad(key, s, "is not a GUID like 00:11:22:33:44:55:66:77"))?;
        if g == 0 || g == u64::MAX {
            return Err(bad(key, s, "must not be all zeros or all FF"));
        }
        Ok(g)
    }
}

impl Setting for IbGuid {
    const EXAMPLES: &'static [&'static str] = &[r#"{"runtimeConfig":{"infinibandGUID":"00:11:22:33:44:55:66:77"}}"#];

    fn parse(k: &ConfigKeys, into: &mut VfSettings) -> Result<(), BadKey> {
        // runtimeConfig (the capability), then CNI_ARGS guid.
        into.guid = match (k.runtime_str("infinibandGUID")?, k.arg("guid")) {
            (Some(g), _) => Some(Self::parse_one("runtimeConfig.infinibandGUID", g)?),
            (None, Some(g)) => Some(Self::parse_one("CNI_ARGS guid", g)?),
            (None, None) => None,
        };
        Ok(())
    }
    fn configured(cfg: &VfSettings, _: &VfState) -> Option<Self> {
        cfg.guid.map(|g| IbGuid { node: g, port: g })
    }
    fn encode(&self, vf: u32) -> Vec<VfInfo> {
        vec![VfInfo::IbNodeGuid(VfInfoGuid::new(vf, self.node)), VfInfo::IbPortGuid(VfInfoGuid::new(vf, self.port))]
    }
    fn read(info: &VfInfo, row: &mut VfState) {
        match info {
            VfInfo::IbNodeGuid(g) => row.node_guid = Some(g.guid),
            VfInfo::IbPortGuid(g) => row.port_guid = Some(g.guid),
            _ => {}
        }
    }
    fn shown(row: &VfState) -> Option<Self> {
        Some(IbGuid { node: row.node_guid?, port: row.port_guid? })
    }
    fn words(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IbGuid { node, port } if node == port => write!(f, "infinibandGUID {}", guid_str(*node)),
            IbGuid { node, port } => write!(f, "infinibandGUID node {} port {}", guid_str(*node), guid_str(*port)),
        }
    }
    fn row_record(row: &VfState) -> Vec<(&'static str, Value)> {
        vec![("node_guid", json(row.node_guid.map(guid_str))), ("port_guid", json(row.port_guid.map(guid_str)))]
    }
    fn read_row_record(rec: &Map<String, Value>, row: &mut VfState) -> Result<(), String> {
        let read = |key| -> Result<Option<u64>, String> {
            field::<Option<String>>(rec, key)?
                .map(|s| parse_guid(&s).ok_or_else(|| format!("{key} {s:?} is not understood")))
                .transpose()
        };
        row.node_guid = read("node_guid")?;
        row.port_guid = read("port_guid")?;
        Ok(())
    }
}

mod guid_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(g: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::model::guid_str(*g))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        crate::model::parse_guid(&s).ok_or_else(|| serde::de::Error::custom(format!("GUID {s:?} is not understood")))
    }
}

/// The PF-side settings a configuration asks for; `None` means "leave as it is". Each field is read by its
/// setting's `parse`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfSettings {
    pub mac: Option<Mac>,
    pub vlan: Option<u16>,
    pub vlan_qos: Option<u8>,
    pub vlan_proto: Option<VlanProto>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<LinkState>,
    pub min_tx_rate: Option<u32>,
    pub max_tx_rate: Option<u32>,
    /// InfiniBand node and port GUID of the VF.
    pub guid: Option<u64>,
}

/// A VF's row in its PF's VF table. `None` where the driver does not report a value. Each field is read by its
/// setting's `read`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VfState {
    pub mac: Option<Mac>,
    pub vlan: u16,
    pub qos: u8,
    pub vlan_proto: Option<VlanProto>,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<LinkState>,
    pub min_tx_rate: u32,
    pub max_tx_rate: u32,
    /// InfiniBand GUIDs, where the driver reports them (mlx5).
    pub node_guid: Option<u64>,
    pub port_guid: Option<u64>,
}

/// The settings, in the order ADD applies them (and their fields in the record's row), each with its name in the
/// record's journal (`{"step": "<name>", …}`, pinned by the golden records).
macro_rules! settings {
    ($($kind:ident = $step:literal),* $(,)?) => {
        /// One change on the PF, in the unit the kernel applies it.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "step")]
        pub enum VfSetting {
            $( #[serde(rename = $step)] $kind($kind), )*
        }

        $( impl From<$kind> for VfSetting {
            fn from(s: $kind) -> VfSetting {
                VfSetting::$kind(s)
            }
        } )*

        impl VfSetting {
            /// The names of the settings in the record's journal.
            pub const STEPS: &'static [&'static str] = &[$($step),*];

            /// The row once this is applied, as the kernel shows it.
            pub fn set_in(&self, row: &mut VfState) {
                match self { $( VfSetting::$kind(s) => s.set_in(row), )* }
            }

            /// The kernel attributes for VF `vf`.
            pub fn to_vf_info(&self, vf: u32) -> Vec<VfInfo> {
                match self { $( VfSetting::$kind(s) => s.encode(vf), )* }
            }

            /// Whether the PF's row shows this value already. A value the PF does not report is never held.
            pub fn holds_in(&self, row: &VfState) -> bool {
                match self { $( VfSetting::$kind(s) => $kind::shown(row).as_ref() == Some(s), )* }
            }

            /// The same kind of setting with the VF's values before ADD, if there is one to put back.
            pub fn original(&self, orig: &VfState) -> Option<VfSetting> {
                match self { $( VfSetting::$kind(_) => $kind::original(orig).map(VfSetting::$kind), )* }
            }

            /// Every setting's examples as changes (the tests that every setting passes).
            #[cfg(any(test, feature = "fixtures"))]
            pub fn examples() -> Vec<(&'static str, VfSetting)> {
                let mut out = Vec::new();
                $( for conf in $kind::EXAMPLES {
                    out.push((*conf, example::<$kind>(conf)));
                } )*
                out
            }
        }

        impl fmt::Display for VfSetting {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self { $( VfSetting::$kind(s) => s.words(f), )* }
            }
        }

        impl VfSettings {
            /// Reads every setting's configuration keys.
            pub fn parse(k: &ConfigKeys) -> Result<VfSettings, BadKey> {
                let mut into = VfSettings::default();
                $( $kind::parse(k, &mut into)?; )*
                Ok(into)
            }
        }

        /// The configured settings as changes, in the order they are applied.
        pub fn planned(cfg: &VfSettings, orig: &VfState) -> Vec<VfSetting> {
            let mut out = Vec::new();
            $( out.extend($kind::configured(cfg, orig).map(VfSetting::$kind)); )*
            out
        }

        impl VfState {
            fn read(&mut self, info: &VfInfo) {
                $( $kind::read(info, self); )*
            }

            /// The row as the record keeps it: every setting's fields, in order.
            pub fn to_record(&self) -> Vec<(&'static str, Value)> {
                let mut out = Vec::new();
                $( out.extend($kind::row_record(self)); )*
                out
            }

            /// Reads a row the record kept.
            pub fn from_record(rec: &Map<String, Value>) -> Result<VfState, String> {
                let mut row = VfState::default();
                $( $kind::read_row_record(rec, &mut row)?; )*
                Ok(row)
            }
        }
    };
}

settings! {
    AdminMac = "admin-mac",
    Vlan = "vlan",
    SpoofChk = "spoofchk",
    Trust = "trust",
    VfLinkState = "link-state",
    TxRate = "tx-rate",
    IbGuid = "ib-guid",
}

/// Reads a VF's entry out of the PF's VF table (the entry is the one whose MAC attribute names the VF).
pub fn state_from_table(table: &[Vec<VfInfo>], vf: u32) -> Option<VfState> {
    let entry = table.iter().find(|infos| infos.iter().any(|i| matches!(i, VfInfo::Mac(m) if m.vf_id == vf)))?;
    let mut row = VfState::default();
    for info in entry {
        row.read(info);
    }
    Some(row)
}

/// The one change a configuration (an example of `S`) asks for, against a row where nothing is set.
#[cfg(any(test, feature = "fixtures"))]
fn example<S: Setting>(conf: &str) -> VfSetting
where
    VfSetting: From<S>,
{
    let top: Map<String, Value> =
        serde_json::from_str(conf).unwrap_or_else(|e| panic!("example {conf} is not a JSON object: {e}"));
    let runtime = top.get("runtimeConfig").and_then(Value::as_object);
    let keys = ConfigKeys { top: &top, runtime, args: &HashMap::new() };
    let cfg = VfSettings::parse(&keys).unwrap_or_else(|e| panic!("example {conf} is refused: {e:?}"));
    S::configured(&cfg, &VfState::default()).unwrap_or_else(|| panic!("example {conf} sets nothing")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting's examples, so a new setting is tested by adding its implementation: its configuration is read,
    /// sent as netlink attributes, read back from the PF's row as the kernel shows it, held there and not in an
    /// untouched row, restored to the untouched row's value, kept in the record's journal and row, and named in
    /// the configuration's words.
    #[test]
    fn every_setting_round_trips_from_its_configuration_to_the_pf_row_and_the_record() {
        let examples = VfSetting::examples();
        let steps: std::collections::BTreeSet<&str> = examples
            .iter()
            .map(|(_, s)| serde_json::to_value(s).unwrap()["step"].as_str().unwrap().to_string())
            .map(|s| *VfSetting::STEPS.iter().find(|n| **n == s).unwrap())
            .collect();
        assert_eq!(steps.len(), VfSetting::STEPS.len(), "a setting has no example: {steps:?}");
        // A row where the PF reports every setting (add a new setting's field here if the test says so).
        let untouched = VfState {
            mac: Some(Mac([0; 6])),
            vlan_proto: Some(VlanProto::Dot1Q),
            spoofchk: Some(false),
            trust: Some(false),
            link_state: Some(LinkState::Auto),
            node_guid: Some(1),
            port_guid: Some(1),
            ..VfState::default()
        };
        for (conf, s) in &examples {
            // The PF's table as the kernel shows it after the change: the VF's entry, keyed by its MAC attribute.
            let entry = [vec![VfInfo::Mac(VfInfoMac::new(3, &[0; 6]))], s.to_vf_info(3)].concat();
            assert!(s.to_vf_info(3).iter().all(|i| !matches!(i, VfInfo::Mac(m) if m.vf_id != 3)), "{conf}");
            let row = state_from_table(&[entry], 3).unwrap();
            assert!(s.holds_in(&row), "{conf}: {s:?} is not held in {row:?}");
            let mut set = untouched.clone();
            s.set_in(&mut set);
            assert!(s.holds_in(&set), "{conf}: set_in disagrees with the PF's row");
            assert!(!s.holds_in(&untouched), "{conf}: the example is no change from an untouched row");
            assert_eq!(s.original(&row).as_ref(), Some(s), "{conf}: what the row shows is what DEL would put back");
            let back = s
                .original(&untouched)
                .unwrap_or_else(|| panic!("{conf}: the untouched row of this test does not report it: add its field"));
            assert!(back.holds_in(&untouched), "{conf}: {back:?}");
            assert!(!back.holds_in(&row), "{conf}: restoring {back:?} changes nothing");
            // The journal step and the row read back as written.
            let step = serde_json::to_string(s).unwrap();
            assert_eq!(&serde_json::from_str::<VfSetting>(&step).unwrap(), s, "{step}");
            let rec: Map<String, Value> = row.to_record().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(VfState::from_record(&rec).unwrap(), row, "{conf}");
            // Its words name a key of its configuration.
            let words = s.to_string();
            let conf_keys = serde_json::from_str::<Value>(conf).unwrap().to_string();
            let named =
                words.split([' ', '(', ')', ',']).any(|w| !w.is_empty() && conf_keys.contains(&format!("\"{w}\":")));
            assert!(named, "{conf}: {words:?} names no key of it");
        }
    }

    #[test]
    fn settings_render_as_config_keys() {
        let s = |v: VfSetting| v.to_string();
        assert_eq!(
            s(Vlan { vlan: 5, qos: 0, proto: VlanProto::Dot1Ad }.into()),
            "vlanProto 802.1ad (vlan 5, vlanQoS 0)"
        );
        assert_eq!(s(Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }.into()), "vlan 100 (vlanQoS 3)");
        assert_eq!(s(VfLinkState { state: LinkState::Enable }.into()), "link_state enable");
        assert_eq!(s(TxRate { min: 10, max: 90 }.into()), "min_tx_rate 10 / max_tx_rate 90");
        let g = 0x0011_2233_4455_6677;
        assert_eq!(s(IbGuid { node: g, port: g }.into()), "infinibandGUID 00:11:22:33:44:55:66:77");
        assert_eq!(s(Trust { on: false }.into()), "trust off");
    }

    #[test]
    fn the_journal_names_each_setting_as_the_golden_records_do() {
        let step = |s: VfSetting| serde_json::to_string(&s).unwrap();
        assert_eq!(
            step(Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }.into()),
            r#"{"step":"vlan","vlan":100,"qos":3,"proto":"802.1q"}"#
        );
        assert_eq!(step(SpoofChk { on: true }.into()), r#"{"step":"spoofchk","on":true}"#);
        assert_eq!(step(VfLinkState { state: LinkState::Enable }.into()), r#"{"step":"link-state","state":"enable"}"#);
        assert_eq!(step(TxRate { min: 0, max: 500 }.into()), r#"{"step":"tx-rate","min":0,"max":500}"#);
        assert_eq!(
            step(IbGuid { node: 1, port: 2 }.into()),
            r#"{"step":"ib-guid","node":"00:00:00:00:00:00:00:01","port":"00:00:00:00:00:00:00:02"}"#
        );
        assert!(serde_json::from_str::<VfSetting>(r#"{"step":"vlan","vlan":1,"qos":0,"proto":"802.1Q"}"#).is_err());
    }

    #[test]
    fn a_rate_keeps_the_bound_the_configuration_leaves_out() {
        let cfg = VfSettings { min_tx_rate: Some(10), ..Default::default() };
        let plan = planned(&cfg, &VfState { max_tx_rate: 90, ..Default::default() });
        assert_eq!(plan, vec![VfSetting::TxRate(TxRate { min: 10, max: 90 })]);
    }

    #[test]
    fn vf_state_is_read_from_its_own_entry_of_the_table() {
        let table = vec![
            AdminMac { mac: Mac([2, 0, 0, 0, 0, 9]) }.encode(0),
            [
                AdminMac { mac: Mac([2, 0, 0, 0, 0, 1]) }.encode(1),
                Vlan { vlan: 7, qos: 2, proto: VlanProto::Dot1Q }.encode(1),
                Trust { on: true }.encode(1),
                TxRate { min: 1, max: 2 }.encode(1),
            ]
            .concat(),
        ];
        let st = state_from_table(&table, 1).unwrap();
        assert_eq!(st.mac, Some(Mac([2, 0, 0, 0, 0, 1])));
        assert_eq!((st.vlan, st.qos), (7, 2));
        assert_eq!(st.trust, Some(true));
        assert_eq!((st.min_tx_rate, st.max_tx_rate), (1, 2));
        assert!(state_from_table(&table, 5).is_none());
    }
}
