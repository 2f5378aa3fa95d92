//! A VF's PF-side settings on the kernel: read from the PF's VF table, applied one by one, restored idempotently.
//! What each setting means (its keys, encoding, how the PF's row shows it) is in [`crate::vf_setting`].
//!
//! Everything goes through [`PfControl`], so the apply/rollback logic is tested here with a recording fake
//! and for real against the emulated SR-IOV NIC (a veth PF answers EOPNOTSUPP).

use super::link::RouteSocket;
use crate::vf_setting::{state_from_table, VfSetting, VfState};
use netlink_packet_route::link::{LinkAttribute, LinkVfInfo};
use std::io;

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

    /// Records every change and refuses the ones `refuse` matches, like a NIC that lacks a feature; its row changes
    /// as the kernel's would.
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
            s.set_in(&mut self.state);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::RecordingPf;
    use super::*;
    use crate::flow::attachment::Step;
    use crate::flow::journal::undo_order;
    use crate::model::{LinkState, Mac, VlanProto};
    use crate::vf_setting::{planned, AdminMac, IbGuid, Trust, TxRate, VfLinkState, VfSettings, Vlan};
    use netlink_packet_route::link::VfInfo;

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

    /// Restores `plan` (the settings as ADD applied them, in order) as DEL does: each a step of the journal, taken
    /// in the order the journal's undo loop takes them, against the row as the PF shows it before the first restore.
    fn restore_plan(ctl: &mut RecordingPf, plan: &[VfSetting], orig: &VfState) {
        let journal: Vec<Step> = plan.iter().cloned().map(Step::of_setting).collect();
        let now = ctl.vf_state(&pf(), 1).unwrap();
        for i in undo_order(&journal, true) {
            let s = journal[i].pf_setting().expect("a PF setting's step");
            restore(ctl, &pf(), 1, &s, orig, now.as_ref()).unwrap();
        }
    }

    #[test]
    fn every_setting_is_applied_and_restored_exactly() {
        for (conf, s) in VfSetting::examples() {
            let o = VfState { node_guid: Some(1), port_guid: Some(1), ..orig() };
            let mut ctl = RecordingPf { state: o.clone(), ..Default::default() };
            ctl.apply(&pf(), 1, &s).unwrap();
            assert!(s.holds_in(&ctl.state), "{conf}");
            restore_plan(&mut ctl, std::slice::from_ref(&s), &o);
            assert_eq!(ctl.state, o, "{conf}");
            assert_eq!(ctl.log.len(), 2, "{conf}: applied once, restored once");
            restore_plan(&mut ctl, std::slice::from_ref(&s), &o);
            assert_eq!(ctl.log.len(), 2, "{conf}: restoring again sends nothing");
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
            refuse: Some(|s| matches!(s, VfSetting::VfLinkState(VfLinkState { state: LinkState::Enable }))),
            ..Default::default()
        };
        let plan = planned(&cfg(), &orig());
        assert_eq!(apply(&mut ctl, &plan), 4, "mac, vlan, spoofchk, trust were applied");
        restore_plan(&mut ctl, &plan, &orig());
        assert_eq!(ctl.state, orig(), "everything applied before the refusal is undone");
        // mac, vlan, spoofchk, trust applied; then trust, spoofchk, vlan, mac restored; link_state never sent back.
        assert_eq!(ctl.log.len(), 8);
        assert_eq!(ctl.log[4], Trust { on: false }.into());
        assert_eq!(ctl.log[7], AdminMac { mac: Mac([0; 6]) }.into());
    }

    #[test]
    fn restoring_the_whole_plan_skips_what_was_never_applied() {
        // A DEL after an ADD killed before its PF settings: the whole plan is undone, but link_state (which this
        // NIC refuses) was never set, so restoring it must not be tried, nor fail.
        let mut ctl = RecordingPf {
            state: orig(),
            refuse: Some(|s| matches!(s, VfSetting::VfLinkState(_))),
            ..Default::default()
        };
        let plan = planned(&cfg(), &orig());
        restore_plan(&mut ctl, &plan, &orig());
        assert!(ctl.log.is_empty(), "nothing differed from the original: {:?}", ctl.log);
        // Partly applied: only what differs is put back.
        ctl.apply(&pf(), 1, &Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }.into()).unwrap();
        restore_plan(&mut ctl, &plan, &orig());
        assert_eq!(ctl.log.last(), Some(&Vlan { vlan: 0, qos: 0, proto: VlanProto::Dot1Q }.into()));
        assert_eq!(ctl.log.len(), 2);
        assert_eq!(ctl.state, orig());
        // Without a readable row, the original is sent (a failure is the caller's to report).
        let sent = restore(&mut ctl, &pf(), 1, &Trust { on: true }.into(), &orig(), None).unwrap();
        assert_eq!(sent, Some(Trust { on: false }.into()));
    }

    #[test]
    fn guid_is_set_as_node_and_port_and_restored() {
        let o = VfState { node_guid: Some(1), port_guid: Some(2), ..orig() };
        let mut ctl = RecordingPf { state: o.clone(), ..Default::default() };
        let plan = planned(&VfSettings { guid: Some(0x0011_2233_4455_6677), ..Default::default() }, &o);
        assert_eq!(plan, vec![IbGuid { node: 0x0011_2233_4455_6677, port: 0x0011_2233_4455_6677 }.into()]);
        let infos = plan[0].to_vf_info(3);
        assert!(matches!(infos[0], VfInfo::IbNodeGuid(g) if g.vf_id == 3 && g.guid == 0x0011_2233_4455_6677));
        assert!(matches!(infos[1], VfInfo::IbPortGuid(g) if g.vf_id == 3 && g.guid == 0x0011_2233_4455_6677));
        assert_eq!(apply(&mut ctl, &plan), 1);
        assert_eq!(ctl.state.port_guid, Some(0x0011_2233_4455_6677));
        restore_plan(&mut ctl, &plan, &o);
        assert_eq!(ctl.state, o);
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
        assert_eq!(plan, vec![TxRate { min: 10, max: 90 }.into()]);
    }
}
