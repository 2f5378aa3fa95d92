//! PF-side settings of a VF, each in one place: [`VfSetting`] is what one change means (its netlink encoding, whether
//! the PF's row holds it, its original value, its words: the configuration key it came from), [`VfState`] and
//! [`state_from_table`] how the PF's row shows it, [`planned`] the configuration's values as changes. Read from the
//! PF's VF table, applied one by one, restored idempotently. docs/adding-a-vf-setting.md lists what a new one
//! touches.
//!
//! Everything goes through [`PfControl`], so the apply/rollback logic is tested here with a recording fake
//! and for real against the emulated SR-IOV NIC (a veth PF answers EOPNOTSUPP).

use super::link::RouteSocket;
use crate::model::{guid_str, on_off, LinkState, Mac, VfSettings, VlanProto};
use netlink_packet_route::link::{
    LinkAttribute, LinkVfInfo, VfInfo, VfInfoGuid, VfInfoLinkState, VfInfoMac, VfInfoRate, VfInfoSpoofCheck,
    VfInfoTrust, VfInfoVlan, VfLinkState, VfVlan, VfVlanInfo, VlanProtocol,
};
use std::io;

/// A VF's settings as its PF reports them. `None` where the driver does not report a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
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

/// One change on the PF, in the unit the kernel applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VfSetting {
    Mac(Mac),
    Vlan { vlan: u16, qos: u8, proto: VlanProto },
    SpoofChk(bool),
    Trust(bool),
    LinkState(LinkState),
    Rate { min: u32, max: u32 },
    Guid { node: u64, port: u64 },
}

impl VfSetting {
    /// The kernel attributes for VF `vf`.
    pub fn to_vf_info(&self, vf: u32) -> Vec<VfInfo> {
        if let VfSetting::Guid { node, port } = self {
            return vec![
                VfInfo::IbNodeGuid(VfInfoGuid::new(vf, *node)),
                VfInfo::IbPortGuid(VfInfoGuid::new(vf, *port)),
            ];
        }
        vec![match self {
            VfSetting::Mac(m) => VfInfo::Mac(VfInfoMac::new(vf, &m.0)),
            VfSetting::Vlan { vlan, qos, proto: VlanProto::Dot1Q } => {
                VfInfo::Vlan(VfInfoVlan::new(vf, *vlan as u32, *qos as u32))
            }
            VfSetting::Vlan { vlan, qos, proto: VlanProto::Dot1Ad } => VfInfo::VlanList(vec![VfVlan::Info(
                VfVlanInfo::new(vf, *vlan as u32, *qos as u32, VlanProtocol::Ieee8021Ad),
            )]),
            VfSetting::SpoofChk(b) => VfInfo::SpoofCheck(VfInfoSpoofCheck::new(vf, *b)),
            VfSetting::Trust(b) => VfInfo::Trust(VfInfoTrust::new(vf, *b)),
            VfSetting::LinkState(s) => VfInfo::LinkState(VfInfoLinkState::new(
                vf,
                match s {
                    LinkState::Auto => VfLinkState::Auto,
                    LinkState::Enable => VfLinkState::Enable,
                    LinkState::Disable => VfLinkState::Disable,
                },
            )),
            VfSetting::Rate { min, max } => VfInfo::Rate(VfInfoRate::new(vf, *min, *max)),
            VfSetting::Guid { .. } => unreachable!("handled above"),
        }]
    }

    /// Whether the PF reports this value already. A value the PF does not report is never taken as held.
    pub fn holds_in(&self, st: &VfState) -> bool {
        match self {
            VfSetting::Mac(m) => st.mac == Some(*m),
            VfSetting::Vlan { vlan, qos, proto } => {
                st.vlan == *vlan && st.qos == *qos && st.vlan_proto.unwrap_or(VlanProto::Dot1Q) == *proto
            }
            VfSetting::SpoofChk(b) => st.spoofchk == Some(*b),
            VfSetting::Trust(b) => st.trust == Some(*b),
            VfSetting::LinkState(l) => st.link_state == Some(*l),
            VfSetting::Rate { min, max } => st.min_tx_rate == *min && st.max_tx_rate == *max,
            VfSetting::Guid { node, port } => st.node_guid == Some(*node) && st.port_guid == Some(*port),
        }
    }

    /// The same kind of setting with the VF's original values.
    pub fn original(&self, orig: &VfState) -> Option<VfSetting> {
        Some(match self {
            VfSetting::Mac(_) => VfSetting::Mac(orig.mac.unwrap_or(Mac([0; 6]))),
            VfSetting::Vlan { .. } => {
                VfSetting::Vlan { vlan: orig.vlan, qos: orig.qos, proto: orig.vlan_proto.unwrap_or(VlanProto::Dot1Q) }
            }
            VfSetting::SpoofChk(_) => VfSetting::SpoofChk(orig.spoofchk?),
            VfSetting::Trust(_) => VfSetting::Trust(orig.trust?),
            VfSetting::LinkState(_) => VfSetting::LinkState(orig.link_state?),
            VfSetting::Rate { .. } => VfSetting::Rate { min: orig.min_tx_rate, max: orig.max_tx_rate },
            VfSetting::Guid { .. } => VfSetting::Guid { node: orig.node_guid?, port: orig.port_guid? },
        })
    }
}

/// The setting in the words of its configuration keys, so an error or a log line names the key the user wrote.
impl std::fmt::Display for VfSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VfSetting::Mac(m) => write!(f, "mac {m}"),
            VfSetting::Vlan { vlan, qos, proto: p @ VlanProto::Dot1Ad } => {
                write!(f, "vlanProto {} (vlan {vlan}, vlanQoS {qos})", p.as_str())
            }
            VfSetting::Vlan { vlan, qos, .. } => write!(f, "vlan {vlan} (vlanQoS {qos})"),
            VfSetting::SpoofChk(b) => write!(f, "spoofchk {}", on_off(*b)),
            VfSetting::Trust(b) => write!(f, "trust {}", on_off(*b)),
            VfSetting::LinkState(s) => write!(f, "link_state {s}"),
            VfSetting::Rate { min, max } => write!(f, "min_tx_rate {min} / max_tx_rate {max}"),
            VfSetting::Guid { node, port } if node == port => write!(f, "infinibandGUID {}", guid_str(*node)),
            VfSetting::Guid { node, port } => {
                write!(f, "infinibandGUID node {} port {}", guid_str(*node), guid_str(*port))
            }
        }
    }
}

/// The configured settings as changes, in the order they are applied.
pub fn planned(cfg: &VfSettings, orig: &VfState) -> Vec<VfSetting> {
    let mut out = Vec::new();
    if let Some(m) = cfg.mac {
        out.push(VfSetting::Mac(m));
    }
    if let Some(vlan) = cfg.vlan {
        out.push(VfSetting::Vlan {
            vlan,
            qos: cfg.vlan_qos.unwrap_or(0),
            proto: cfg.vlan_proto.unwrap_or(VlanProto::Dot1Q),
        });
    }
    if let Some(b) = cfg.spoofchk {
        out.push(VfSetting::SpoofChk(b));
    }
    if let Some(b) = cfg.trust {
        out.push(VfSetting::Trust(b));
    }
    if let Some(s) = cfg.link_state {
        out.push(VfSetting::LinkState(s));
    }
    if let Some(g) = cfg.guid {
        out.push(VfSetting::Guid { node: g, port: g });
    }
    if cfg.min_tx_rate.is_some() || cfg.max_tx_rate.is_some() {
        out.push(VfSetting::Rate {
            min: cfg.min_tx_rate.unwrap_or(orig.min_tx_rate),
            max: cfg.max_tx_rate.unwrap_or(orig.max_tx_rate),
        });
    }
    out
}

/// The PF a VF belongs to, as netlink addresses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pf {
    pub name: String,
    pub index: u32,
}

pub trait PfControl {
    /// The VF's current settings; `None` when the PF reports no VF table (not an SR-IOV PF).
    fn vf_state(&mut self, pf: &Pf, vf: u32) -> io::Result<Option<VfState>>;
    fn apply(&mut self, pf: &Pf, vf: u32, s: &VfSetting) -> io::Result<()>;
}

/// Puts one setting back to its value in `orig`, unless `now` (the PF's row, when it could be read) shows that
/// value already: never applied, or restored before, so restoring is idempotent and never trips over a setting
/// the NIC refuses. Returns the setting sent, if one was.
pub fn restore(
    ctl: &mut dyn PfControl,
    pf: &Pf,
    vf: u32,
    s: &VfSetting,
    orig: &VfState,
    now: Option<&VfState>,
) -> io::Result<Option<VfSetting>> {
    let Some(back) = s.original(orig) else { return Ok(None) };
    if now.is_some_and(|now| back.holds_in(now)) {
        return Ok(None);
    }
    ctl.apply(pf, vf, &back)?;
    Ok(Some(back))
}

/// Reads a VF's entry out of the PF's VF table.
pub fn state_from_table(table: &[Vec<VfInfo>], vf: u32) -> Option<VfState> {
    let entry = table.iter().find(|infos| infos.iter().any(|i| matches!(i, VfInfo::Mac(m) if m.vf_id == vf)))?;
    let mut st = VfState::default();
    for i in entry {
        match i {
            VfInfo::Mac(m) => st.mac = Mac::from_slice(&m.mac),
            VfInfo::Vlan(v) => {
                st.vlan = v.vlan_id as u16;
                st.qos = v.qos as u8;
            }
            VfInfo::VlanList(list) => {
                if let Some(VfVlan::Info(v)) = list.first() {
                    st.vlan_proto = Some(match v.protocol {
                        VlanProtocol::Ieee8021Ad => VlanProto::Dot1Ad,
                        _ => VlanProto::Dot1Q,
                    });
                }
            }
            // The kernel reports -1 (as u32 … but as a bool here) when a driver has no spoofchk/trust.
            VfInfo::SpoofCheck(s) => st.spoofchk = Some(s.enabled),
            VfInfo::Trust(t) => st.trust = Some(t.enabled),
            VfInfo::LinkState(l) => {
                st.link_state = match l.state {
                    VfLinkState::Auto => Some(LinkState::Auto),
                    VfLinkState::Enable => Some(LinkState::Enable),
                    VfLinkState::Disable => Some(LinkState::Disable),
                    _ => None,
                }
            }
            VfInfo::Rate(r) => {
                st.min_tx_rate = r.min_tx_rate;
                st.max_tx_rate = r.max_tx_rate;
            }
            VfInfo::IbNodeGuid(g) => st.node_guid = Some(g.guid),
            VfInfo::IbPortGuid(g) => st.port_guid = Some(g.guid),
            _ => {}
        }
    }
    Some(st)
}

/// The real thing: RTM_GETLINK/RTM_SETLINK on the PF over a route socket in the host namespace.
pub struct NetlinkPf<'a>(pub &'a mut RouteSocket);

impl PfControl for NetlinkPf<'_> {
    fn vf_state(&mut self, pf: &Pf, vf: u32) -> io::Result<Option<VfState>> {
        Ok(state_from_table(&self.0.vf_table(pf.index)?, vf))
    }

    fn apply(&mut self, pf: &Pf, vf: u32, s: &VfSetting) -> io::Result<()> {
        let attr = LinkAttribute::VfInfoList(vec![LinkVfInfo(s.to_vf_info(vf))]);
        self.0.set_link(pf.index, vec![attr], None)
    }
}

#[cfg(test)]
pub mod fake {
    use super::*;

    /// Records every change and refuses the ones `refuse` matches, like a NIC that lacks a feature.
    #[derive(Default)]
    pub struct RecordingPf {
        pub state: VfState,
        pub log: Vec<VfSetting>,
        pub refuse: Option<fn(&VfSetting) -> bool>,
    }

    impl PfControl for RecordingPf {
        fn vf_state(&mut self, _pf: &Pf, _vf: u32) -> io::Result<Option<VfState>> {
            Ok(Some(self.state.clone()))
        }

        fn apply(&mut self, _pf: &Pf, _vf: u32, s: &VfSetting) -> io::Result<()> {
            if self.refuse.is_some_and(|f| f(s)) {
                return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
            }
            self.log.push(s.clone());
            match s {
                VfSetting::Mac(m) => self.state.mac = Some(*m),
                VfSetting::Vlan { vlan, qos, proto } => {
                    self.state.vlan = *vlan;
                    self.state.qos = *qos;
                    self.state.vlan_proto = Some(*proto);
                }
                VfSetting::SpoofChk(b) => self.state.spoofchk = Some(*b),
                VfSetting::Trust(b) => self.state.trust = Some(*b),
                VfSetting::LinkState(l) => self.state.link_state = Some(*l),
                VfSetting::Rate { min, max } => {
                    self.state.min_tx_rate = *min;
                    self.state.max_tx_rate = *max;
                }
                VfSetting::Guid { node, port } => {
                    self.state.node_guid = Some(*node);
                    self.state.port_guid = Some(*port);
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::RecordingPf;
    use super::*;

    #[test]
    fn settings_render_as_config_keys() {
        let s = |v: VfSetting| v.to_string();
        assert_eq!(
            s(VfSetting::Vlan { vlan: 5, qos: 0, proto: VlanProto::Dot1Ad }),
            "vlanProto 802.1ad (vlan 5, vlanQoS 0)"
        );
        assert_eq!(s(VfSetting::Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }), "vlan 100 (vlanQoS 3)");
        assert_eq!(s(VfSetting::LinkState(LinkState::Enable)), "link_state enable");
        assert_eq!(s(VfSetting::Rate { min: 10, max: 90 }), "min_tx_rate 10 / max_tx_rate 90");
        assert_eq!(
            s(VfSetting::Guid { node: 0x0011_2233_4455_6677, port: 0x0011_2233_4455_6677 }),
            "infinibandGUID 00:11:22:33:44:55:66:77"
        );
        assert_eq!(s(VfSetting::Trust(false)), "trust off");
    }

    fn pf() -> Pf {
        Pf { name: "ens1f0".into(), index: 4 }
    }

    fn orig() -> VfState {
        VfState {
            mac: Some(Mac([0; 6])),
            vlan: 0,
            qos: 0,
            vlan_proto: Some(VlanProto::Dot1Q),
            spoofchk: Some(false),
            trust: Some(false),
            link_state: Some(LinkState::Auto),
            min_tx_rate: 0,
            max_tx_rate: 0,
            node_guid: None,
            port_guid: None,
        }
    }

    fn cfg() -> VfSettings {
        VfSettings {
            mac: Some("02:00:00:00:00:01".parse().unwrap()),
            vlan: Some(100),
            vlan_qos: Some(3),
            vlan_proto: None,
            spoofchk: Some(true),
            trust: Some(true),
            link_state: Some(LinkState::Enable),
            min_tx_rate: None,
            max_tx_rate: Some(500),
            guid: None,
        }
    }

    /// Applies `plan` in order until the PF refuses one; returns how many it took.
    fn apply(ctl: &mut RecordingPf, plan: &[VfSetting]) -> usize {
        plan.iter().take_while(|s| ctl.apply(&pf(), 1, s).is_ok()).count()
    }

    /// Restores `plan` newest first, each against the row as the PF shows it before the first restore.
    fn restore_plan(ctl: &mut RecordingPf, plan: &[VfSetting], orig: &VfState) {
        let now = ctl.vf_state(&pf(), 1).unwrap();
        for s in plan.iter().rev() {
            restore(ctl, &pf(), 1, s, orig, now.as_ref()).unwrap();
        }
    }

    #[test]
    fn applies_in_order_and_restores_exactly() {
        let mut ctl = RecordingPf { state: orig(), ..Default::default() };
        let plan = planned(&cfg(), &orig());
        assert_eq!(apply(&mut ctl, &plan), plan.len());
        assert_eq!(ctl.log, plan);
        assert_eq!(ctl.state.vlan, 100);
        assert_eq!(ctl.state.max_tx_rate, 500);
        restore_plan(&mut ctl, &plan, &orig());
        assert_eq!(ctl.state, orig());
    }

    #[test]
    fn restoring_the_whole_plan_after_a_refusal_touches_only_what_was_applied() {
        let mut ctl = RecordingPf {
            state: orig(),
            refuse: Some(|s| matches!(s, VfSetting::LinkState(LinkState::Enable))),
            ..Default::default()
        };
        let plan = planned(&cfg(), &orig());
        assert_eq!(apply(&mut ctl, &plan), 4, "mac, vlan, spoofchk, trust were applied");
        restore_plan(&mut ctl, &plan, &orig());
        assert_eq!(ctl.state, orig(), "everything applied before the refusal is undone");
        // mac, vlan, spoofchk, trust applied; then trust, spoofchk, vlan, mac restored; link_state never sent back.
        assert_eq!(ctl.log.len(), 8);
        assert_eq!(ctl.log[4], VfSetting::Trust(false));
        assert_eq!(ctl.log[7], VfSetting::Mac(Mac([0; 6])));
    }

    #[test]
    fn restoring_the_whole_plan_skips_what_was_never_applied() {
        // A DEL after an ADD killed before its PF settings: the whole plan is undone, but link_state (which this
        // NIC refuses) was never set, so restoring it must not be tried, nor fail.
        let mut ctl =
            RecordingPf { state: orig(), refuse: Some(|s| matches!(s, VfSetting::LinkState(_))), ..Default::default() };
        let plan = planned(&cfg(), &orig());
        restore_plan(&mut ctl, &plan, &orig());
        assert!(ctl.log.is_empty(), "nothing differed from the original: {:?}", ctl.log);
        // Partly applied: only what differs is put back.
        ctl.apply(&pf(), 1, &VfSetting::Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }).unwrap();
        restore_plan(&mut ctl, &plan, &orig());
        assert_eq!(ctl.log.last(), Some(&VfSetting::Vlan { vlan: 0, qos: 0, proto: VlanProto::Dot1Q }));
        assert_eq!(ctl.log.len(), 2);
        assert_eq!(ctl.state, orig());
        // Without a readable row, the original is sent (a failure is the caller's to report).
        let sent = restore(&mut ctl, &pf(), 1, &VfSetting::Trust(true), &orig(), None).unwrap();
        assert_eq!(sent, Some(VfSetting::Trust(false)));
    }

    #[test]
    fn guid_is_set_as_node_and_port_and_restored() {
        let o = VfState { node_guid: Some(1), port_guid: Some(2), ..orig() };
        let mut ctl = RecordingPf { state: o.clone(), ..Default::default() };
        let plan = planned(&VfSettings { guid: Some(0x0011_2233_4455_6677), ..Default::default() }, &o);
        let infos = plan[0].to_vf_info(3);
        assert!(matches!(infos[0], VfInfo::IbNodeGuid(g) if g.vf_id == 3 && g.guid == 0x0011_2233_4455_6677));
        assert!(matches!(infos[1], VfInfo::IbPortGuid(g) if g.vf_id == 3 && g.guid == 0x0011_2233_4455_6677));
        assert_eq!(apply(&mut ctl, &plan), 1);
        assert_eq!(ctl.state.port_guid, Some(0x0011_2233_4455_6677));
        restore_plan(&mut ctl, &plan, &o);
        assert_eq!(ctl.state, o);
        let st = state_from_table(&[[VfSetting::Mac(Mac([0; 6])).to_vf_info(3), infos].concat()], 3).unwrap();
        assert_eq!((st.node_guid, st.port_guid), (Some(0x0011_2233_4455_6677), Some(0x0011_2233_4455_6677)));
    }

    #[test]
    fn an_802_1ad_vlan_goes_as_a_vlan_list_and_a_rate_keeps_the_other_bound() {
        let plan =
            planned(&VfSettings { vlan: Some(5), vlan_proto: Some(VlanProto::Dot1Ad), ..Default::default() }, &orig());
        assert!(matches!(plan[0].to_vf_info(2)[0], VfInfo::VlanList(_)));
        let plan = planned(
            &VfSettings { min_tx_rate: Some(10), ..Default::default() },
            &VfState { max_tx_rate: 90, ..orig() },
        );
        assert_eq!(plan, vec![VfSetting::Rate { min: 10, max: 90 }]);
    }

    #[test]
    fn vf_state_is_read_from_the_table() {
        let table = vec![
            VfSetting::Mac(Mac([2, 0, 0, 0, 0, 9])).to_vf_info(0),
            [
                VfSetting::Mac(Mac([2, 0, 0, 0, 0, 1])).to_vf_info(1),
                VfSetting::Vlan { vlan: 7, qos: 2, proto: VlanProto::Dot1Q }.to_vf_info(1),
                VfSetting::Trust(true).to_vf_info(1),
                VfSetting::Rate { min: 1, max: 2 }.to_vf_info(1),
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
