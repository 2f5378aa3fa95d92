//! The attachment record on disk: an explicit, versioned format of its own, apart from the in-memory types, so that
//! renaming a Rust field can never change what a later DEL reads.
//!
//! - 0: release 0.1.0's record (no `version` key): the VF, its netdev and PF row before ADD, the configured PF
//!   settings, whether the RDMA device moved, the device-info file.
//! - 1: adds `version`, `ipam_config` and `cni_path`.
//! - 2 (written now): the `journal`, the steps ADD began, in order, in place of the configured settings and the
//!   moved/written flags. A record of format 0 or 1 is read into the journal its ADD would have written.
//!
//! A newer format is refused rather than half understood. Every field below is named here, on purpose: the
//! golden tests (this file's and tests/golden.rs) pin formats 0, 1 and 2 byte for byte.

use super::attachment::{Attachment, Found, GidIndex, RdmaRecord, Step};
use crate::kernel::link::Link;
use crate::model::{guid_str, LinkState, Mac, PciAddr, VlanProto};
use crate::vf_setting::{planned, VfSetting, VfSettings, VfState};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::path::PathBuf;

/// The format this release writes.
pub const VERSION: u32 = 2;

/// Format 2.
#[derive(Serialize, Deserialize)]
struct V2 {
    version: u32,
    network: String,
    container_id: String,
    ifname: String,
    netns: String,
    pci: String,
    pf: String,
    pf_pci: String,
    vf_index: u32,
    driver: Option<String>,
    /// The VF's row in the PF's VF table before ADD; null when the PF reports none.
    vf_original: Option<VfRow>,
    /// The VF's netdev on the host before ADD; null for a VF bound to a userspace driver.
    netdev: Option<Netdev>,
    mtu: Option<u32>,
    complete: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    ipam_allocated: bool,
    rdma: Option<Rdma>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ipam_config: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cni_path: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cni_args: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_index: Option<u32>,
    journal: Vec<StepV2>,
}

/// One journal entry: `{"step": "<kind>", …}`. A PF-side setting is written as its definition says
/// (`VfSetting`, in src/vf_setting.rs), the other steps as `OwnStep`.
enum StepV2 {
    Setting(VfSetting),
    Own(OwnStep),
}

impl Serialize for StepV2 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StepV2::Setting(v) => v.serialize(s),
            StepV2::Own(o) => o.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for StepV2 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let setting = v.get("step").and_then(Value::as_str).is_some_and(|k| VfSetting::STEPS.contains(&k));
        if setting {
            VfSetting::deserialize(v).map(StepV2::Setting).map_err(serde::de::Error::custom)
        } else {
            OwnStep::deserialize(v).map(StepV2::Own).map_err(serde::de::Error::custom)
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
enum OwnStep {
    RdmaIn {
        device: String,
        index: Option<u32>,
    },
    NetdevIn,
    Ipam,
    DeviceInfo {
        path: String,
        /// How many of the file's directories ADD made (the innermost ones), for DEL to remove; absent before.
        #[serde(default, skip_serializing_if = "is_zero")]
        dirs: usize,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Formats 0 and 1.
#[derive(Deserialize)]
struct V1 {
    network: String,
    container_id: String,
    ifname: String,
    netns: String,
    pci: String,
    pf: String,
    pf_pci: String,
    vf_index: u32,
    driver: Option<String>,
    vf_settings: SettingsV1,
    vf_original: Option<VfRowV1>,
    netdev: Option<Netdev>,
    mtu: Option<u32>,
    complete: bool,
    #[serde(default)]
    rdma: Option<Rdma>,
    #[serde(default)]
    device_info: Option<String>,
    #[serde(default)]
    ipam_config: Option<String>,
    #[serde(default)]
    cni_path: Vec<String>,
}

#[derive(Deserialize)]
struct SettingsV1 {
    mac: Option<String>,
    vlan: Option<u16>,
    vlan_qos: Option<u8>,
    vlan_proto: Option<String>,
    spoofchk: Option<bool>,
    trust: Option<bool>,
    link_state: Option<String>,
    min_tx_rate: Option<u32>,
    max_tx_rate: Option<u32>,
    #[serde(default)]
    guid: Option<u64>,
}

/// Formats 0 and 1 wrote the GUIDs as JSON numbers, which tools that read numbers as doubles (jq) round.
#[derive(Serialize, Deserialize)]
struct VfRowV1 {
    mac: Option<String>,
    vlan: u16,
    qos: u8,
    vlan_proto: Option<String>,
    spoofchk: Option<bool>,
    trust: Option<bool>,
    link_state: Option<String>,
    min_tx_rate: u32,
    max_tx_rate: u32,
    #[serde(default)]
    node_guid: Option<u64>,
    #[serde(default)]
    port_guid: Option<u64>,
}

impl VfRowV1 {
    /// Format 2's row, with the GUIDs as text.
    fn read(self) -> Result<VfState, String> {
        let mut v = serde_json::to_value(&self).map_err(|e| e.to_string())?;
        for key in ["node_guid", "port_guid"] {
            if let Some(g) = v[key].as_u64() {
                v[key] = Value::from(guid_str(g));
            }
        }
        VfState::from_record(v.as_object().ok_or("a VF row is not an object")?)
    }
}

/// Format 2's row: every setting's fields, as its definition writes them (GUIDs as `00:11:22:33:44:55:66:77`).
struct VfRow(VfState);

impl Serialize for VfRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = self.0.to_record();
        let mut m = s.serialize_map(Some(fields.len()))?;
        for (k, v) in &fields {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for VfRow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = Map::<String, Value>::deserialize(d)?;
        VfState::from_record(&m).map(VfRow).map_err(serde::de::Error::custom)
    }
}

#[derive(Serialize, Deserialize)]
struct Netdev {
    index: u32,
    name: String,
    mac: Option<String>,
    mtu: u32,
    up: bool,
    #[serde(default)]
    altnames: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Rdma {
    device: DeviceV,
    /// Whether the device is in the pod (ADD moved it); the move itself is the journal's `rdma-in`.
    moved: bool,
    #[serde(default)]
    gids: Vec<GidV>,
}

impl Rdma {
    fn read(self) -> Result<RdmaRecord, String> {
        Ok(RdmaRecord {
            device: Found { name: self.device.name, index: self.device.index },
            moved: self.moved,
            gids: read_gids(self.gids)?,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct DeviceV {
    name: String,
    index: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct GidV {
    address: String,
    index: u32,
}

fn bad(what: &str, v: &str) -> String {
    format!("{what} {v:?} is not understood")
}

fn mac(s: &str) -> Result<Mac, String> {
    s.parse().map_err(|_| bad("MAC", s))
}

fn pci(s: &str) -> Result<PciAddr, String> {
    PciAddr::parse(s).map_err(|_| bad("PCI address", s))
}

impl Netdev {
    fn of(l: &Link) -> Netdev {
        Netdev {
            index: l.index,
            name: l.name.clone(),
            mac: l.mac.map(|m| m.to_string()),
            mtu: l.mtu,
            up: l.up,
            altnames: l.altnames.clone(),
            parent: l.parent.clone(),
        }
    }

    fn read(self) -> Result<Link, String> {
        Ok(Link {
            index: self.index,
            name: self.name,
            mac: self.mac.as_deref().map(mac).transpose()?,
            mtu: self.mtu,
            up: self.up,
            altnames: self.altnames,
            parent: self.parent,
        })
    }
}

fn gids_of(g: &[GidIndex]) -> Vec<GidV> {
    g.iter().map(|g| GidV { address: g.address.to_string(), index: g.index }).collect()
}

fn read_gids(g: Vec<GidV>) -> Result<Vec<GidIndex>, String> {
    g.into_iter()
        .map(|g| {
            let address: IpAddr = g.address.parse().map_err(|_| bad("GID address", &g.address))?;
            Ok(GidIndex { address, index: g.index })
        })
        .collect()
}

impl StepV2 {
    fn of(s: &Step) -> StepV2 {
        match s.pf_setting() {
            Some(v) => StepV2::Setting(v),
            None => StepV2::Own(match s {
                Step::RdmaIn(d) => OwnStep::RdmaIn { device: d.name.clone(), index: d.index },
                Step::NetdevIn => OwnStep::NetdevIn,
                Step::Ipam => OwnStep::Ipam,
                Step::DeviceInfo { path, dirs } => {
                    OwnStep::DeviceInfo { path: path.display().to_string(), dirs: *dirs }
                }
                Step::PfSetting(_) | Step::AdminMac(_) | Step::IbGuid { .. } => unreachable!("a PF-side setting"),
            }),
        }
    }

    fn read(self) -> Step {
        match self {
            StepV2::Setting(v) => Step::of_setting(v),
            StepV2::Own(OwnStep::RdmaIn { device, index }) => Step::RdmaIn(Found { name: device, index }),
            StepV2::Own(OwnStep::NetdevIn) => Step::NetdevIn,
            StepV2::Own(OwnStep::Ipam) => Step::Ipam,
            StepV2::Own(OwnStep::DeviceInfo { path, dirs }) => Step::DeviceInfo { path: PathBuf::from(path), dirs },
        }
    }
}

/// The record in the format this release writes.
pub fn encode(a: &Attachment) -> serde_json::Result<Vec<u8>> {
    let v = V2 {
        version: VERSION,
        network: a.network.clone(),
        container_id: a.container_id.clone(),
        ifname: a.ifname.clone(),
        netns: a.netns.clone(),
        pci: a.pci.to_string(),
        pf: a.pf.clone(),
        pf_pci: a.pf_pci.to_string(),
        vf_index: a.vf_index,
        driver: a.driver.clone(),
        vf_original: a.vf_original.clone().map(VfRow),
        netdev: a.netdev.as_ref().map(Netdev::of),
        mtu: a.mtu,
        complete: a.complete,
        ipam_allocated: a.ipam_allocated,
        rdma: a.rdma.as_ref().map(|r| Rdma {
            device: DeviceV { name: r.device.name.clone(), index: r.device.index },
            moved: r.moved,
            gids: gids_of(&r.gids),
        }),
        ipam_config: a.ipam_config.clone(),
        cni_path: a.cni_path.iter().map(|p| p.display().to_string()).collect(),
        cni_args: a.cni_args.clone(),
        pod_index: a.pod_index,
        journal: a.journal.iter().map(StepV2::of).collect(),
    };
    serde_json::to_vec_pretty(&v)
}

/// Reads a record of any format up to this release's.
pub fn decode(b: &[u8]) -> Result<Attachment, String> {
    let v: serde_json::Value = serde_json::from_slice(b).map_err(|e| e.to_string())?;
    let version = match v.get("version") {
        None => 0,
        Some(n) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("format version {n} is not a number"))?,
    };
    match version {
        0 | 1 => serde_json::from_value::<V1>(v).map_err(|e| format!("format {version}: {e}"))?.read(),
        2 => serde_json::from_value::<V2>(v).map_err(|e| format!("format 2: {e}"))?.read(),
        n => Err(format!(
            "format version {n} was written by a newer sriov-rdma (this one reads up to {VERSION}); DEL it with that \
             release"
        )),
    }
}

impl V2 {
    fn read(self) -> Result<Attachment, String> {
        Ok(Attachment {
            network: self.network,
            container_id: self.container_id,
            ifname: self.ifname,
            netns: self.netns,
            pci: pci(&self.pci)?,
            pf: self.pf,
            pf_pci: pci(&self.pf_pci)?,
            vf_index: self.vf_index,
            driver: self.driver,
            vf_original: self.vf_original.map(|r| r.0),
            netdev: self.netdev.map(Netdev::read).transpose()?,
            mtu: self.mtu,
            complete: self.complete,
            ipam_allocated: self.ipam_allocated,
            rdma: self.rdma.map(Rdma::read).transpose()?,
            ipam_config: self.ipam_config,
            cni_path: self.cni_path.into_iter().map(PathBuf::from).collect(),
            cni_args: self.cni_args,
            pod_index: self.pod_index,
            journal: self.journal.into_iter().map(StepV2::read).collect(),
        })
    }
}

impl SettingsV1 {
    /// The configured settings of formats 0 and 1 (frozen: a later setting is never in them).
    fn read(self) -> Result<VfSettings, String> {
        let proto = |s: &str| VlanProto::parse(s, false).ok_or_else(|| bad("VLAN protocol", s));
        let link_state = |s: &str| LinkState::parse(s).ok_or_else(|| bad("link state", s));
        Ok(VfSettings {
            mac: self.mac.as_deref().map(mac).transpose()?,
            vlan: self.vlan,
            vlan_qos: self.vlan_qos,
            vlan_proto: self.vlan_proto.as_deref().map(proto).transpose()?,
            spoofchk: self.spoofchk,
            trust: self.trust,
            link_state: self.link_state.as_deref().map(link_state).transpose()?,
            min_tx_rate: self.min_tx_rate,
            max_tx_rate: self.max_tx_rate,
            guid: self.guid,
        })
    }
}

impl V1 {
    /// The journal the ADD that wrote this record would have written: its PF settings, the RDMA device and the
    /// netdev it moved, IPAM (DEL runs the configuration's IPAM, as that release's DEL did), the device-info file.
    fn read(self) -> Result<Attachment, String> {
        let settings = self.vf_settings.read()?;
        let vf_original = self.vf_original.map(VfRowV1::read).transpose()?;
        let mut journal = Vec::new();
        if let Some(orig) = &vf_original {
            journal.extend(Step::plan(&planned(&settings, orig)));
        }
        let rdma = self.rdma.map(Rdma::read).transpose()?;
        if let Some(r) = rdma.as_ref().filter(|r| r.moved) {
            journal.push(Step::RdmaIn(r.device.clone()));
        }
        let netdev = self.netdev.map(Netdev::read).transpose()?;
        if netdev.is_some() {
            journal.push(Step::NetdevIn);
        }
        journal.push(Step::Ipam);
        if let Some(p) = self.device_info {
            journal.push(Step::DeviceInfo { path: PathBuf::from(p), dirs: 0 });
        }
        Ok(Attachment {
            network: self.network,
            container_id: self.container_id,
            ifname: self.ifname,
            netns: self.netns,
            pci: pci(&self.pci)?,
            pf: self.pf,
            pf_pci: pci(&self.pf_pci)?,
            vf_index: self.vf_index,
            driver: self.driver,
            vf_original,
            netdev,
            mtu: self.mtu,
            complete: self.complete,
            ipam_allocated: false,
            rdma,
            ipam_config: self.ipam_config,
            cni_path: self.cni_path.into_iter().map(PathBuf::from).collect(),
            cni_args: None,
            pod_index: None,
            journal,
        })
    }
}

/// The record that tests/data/record-2.json holds, built from the in-memory types.
#[cfg(test)]
pub(crate) fn sample() -> Attachment {
    use crate::vf_setting::{SpoofChk, Trust, TxRate, VfLinkState, Vlan};
    Attachment {
        network: "rdma-net".into(),
        container_id: "c1".into(),
        ifname: "net1".into(),
        netns: "/var/run/netns/x".into(),
        pci: PciAddr::parse("0000:3b:02.1").unwrap(),
        pf: "ens1f0".into(),
        pf_pci: PciAddr::parse("0000:3b:00.0").unwrap(),
        vf_index: 1,
        driver: Some("mlx5_core".into()),
        vf_original: Some(VfState {
            mac: Some(Mac([0; 6])),
            vlan: 0,
            qos: 0,
            vlan_proto: Some(VlanProto::Dot1Q),
            spoofchk: Some(false),
            trust: Some(false),
            link_state: Some(LinkState::Auto),
            min_tx_rate: 0,
            max_tx_rate: 0,
            node_guid: Some(0x0011_2233_4455_6677),
            port_guid: Some(0x0011_2233_4455_6677),
        }),
        netdev: Some(Link {
            index: 7,
            name: "ens1f0v1".into(),
            mac: Some("02:00:00:00:00:07".parse().unwrap()),
            mtu: 1500,
            up: false,
            altnames: vec!["enp59s0f1v1".into()],
            parent: Some("0000:3b:02.1".into()),
        }),
        mtu: Some(9000),
        complete: true,
        ipam_allocated: false,
        rdma: Some(RdmaRecord {
            device: Found { name: "mlx5_3".into(), index: Some(4) },
            moved: true,
            gids: vec![GidIndex { address: "10.1.0.2".parse().unwrap(), index: 3 }],
        }),
        ipam_config: Some(
            r#"{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma","ipam":{"type":"host-local"}}"#.into(),
        ),
        cni_path: vec!["/opt/cni/bin".into()],
        cni_args: None,
        pod_index: None,
        journal: vec![
            Step::PfSetting(Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }.into()),
            Step::PfSetting(SpoofChk { on: true }.into()),
            Step::PfSetting(Trust { on: true }.into()),
            Step::PfSetting(VfLinkState { state: LinkState::Enable }.into()),
            Step::PfSetting(TxRate { min: 0, max: 500 }.into()),
            Step::AdminMac("02:00:00:00:aa:01".parse().unwrap()),
            Step::IbGuid { node: 0x0102_0304_0506_0708, port: 0x0102_0304_0506_0708 },
            Step::RdmaIn(Found { name: "mlx5_3".into(), index: Some(4) }),
            Step::NetdevIn,
            Step::Ipam,
            Step::DeviceInfo { path: "/var/run/k8s.cni.cncf.io/devinfo/x.json".into(), dirs: 0 },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vf_setting::{Trust, Vlan};

    const GOLDEN_2: &str = include_str!("../../tests/data/record-2.json");

    #[test]
    fn format_2_is_written_byte_for_byte_as_the_golden_sample() {
        let body = String::from_utf8(encode(&sample()).unwrap()).unwrap();
        assert_eq!(body.trim_end(), GOLDEN_2.trim_end(), "the on-disk format changed: that needs a new version");
        assert_eq!(decode(GOLDEN_2.as_bytes()).unwrap(), sample());
    }

    #[test]
    fn the_directories_add_made_for_the_device_info_file_are_kept_where_any_were_made() {
        let mut a = sample();
        let made = Step::DeviceInfo { path: "/var/run/k8s.cni.cncf.io/devinfo/cni/a/x.json".into(), dirs: 2 };
        *a.journal.last_mut().unwrap() = made.clone();
        let body = encode(&a).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["journal"].as_array().unwrap().last().unwrap()["dirs"], 2);
        assert_eq!(decode(&body).unwrap().journal.last(), Some(&made));
    }

    #[test]
    fn format_0_and_1_read_into_the_journal_their_add_would_have_written() {
        let v1 = include_str!("../../tests/data/record-1.json");
        let a = decode(v1.as_bytes()).unwrap();
        assert_eq!(a.journal, vec![Step::NetdevIn, Step::Ipam]);
        assert!(a.ipam_config.is_some() && !a.cni_path.is_empty());
        let v0 = include_str!("../../tests/data/record-0.1.0.json");
        let a = decode(v0.as_bytes()).unwrap();
        assert_eq!(a.journal, vec![Step::NetdevIn, Step::Ipam]);
        assert_eq!(a.mtu, Some(4000));
        // A format-1 record with PF settings, a moved RDMA device and a device-info file, as 0.1.0-era ADD wrote it.
        let mut v: serde_json::Value = serde_json::from_str(v1).unwrap();
        v["vf_settings"]["mac"] = "02:00:00:00:aa:01".into();
        v["vf_settings"]["vlan"] = 100.into();
        v["vf_settings"]["trust"] = true.into();
        v["vf_settings"]["guid"] = 5.into();
        v["vf_original"] = serde_json::json!({"mac": null, "vlan": 0, "qos": 0, "vlan_proto": null, "spoofchk": null,
            "trust": false, "link_state": null, "min_tx_rate": 0, "max_tx_rate": 0, "node_guid": 1, "port_guid": 1});
        v["rdma"] = serde_json::json!({"device": {"name": "mlx5_3", "index": 4}, "moved": true, "gids": []});
        v["device_info"] = "/run/devinfo/x.json".into();
        let a = decode(v.to_string().as_bytes()).unwrap();
        assert_eq!(
            a.journal,
            vec![
                Step::PfSetting(Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Q }.into()),
                Step::PfSetting(Trust { on: true }.into()),
                Step::AdminMac("02:00:00:00:aa:01".parse().unwrap()),
                Step::IbGuid { node: 5, port: 5 },
                Step::RdmaIn(Found { name: "mlx5_3".into(), index: Some(4) }),
                Step::NetdevIn,
                Step::Ipam,
                Step::DeviceInfo { path: "/run/devinfo/x.json".into(), dirs: 0 },
            ]
        );
    }

    #[test]
    fn a_newer_format_is_refused_naming_it() {
        let mut v: serde_json::Value = serde_json::from_str(GOLDEN_2).unwrap();
        v["version"] = 99.into();
        let err = decode(v.to_string().as_bytes()).unwrap_err();
        assert!(err.contains("format version 99") && err.contains("newer sriov-rdma"), "{err}");
        v["version"] = 2.into();
        v["journal"][0]["step"] = "teleport".into();
        let err = decode(v.to_string().as_bytes()).unwrap_err();
        assert!(err.contains("format 2") && err.contains("teleport"), "{err}");
    }
}
