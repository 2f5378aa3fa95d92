//! The attachment as plain data: the VF, what it was before ADD, and the journal of steps ADD began. No effect
//! here: the store (state.rs) reads and writes it, the on-disk format (record.rs) encodes it, the journal
//! (journal.rs) applies and undoes its steps.

use crate::kernel::link::Link;
use crate::model::{guid_str, Mac, PciAddr};
use crate::vf_setting::{AdminMac, IbGuid, VfSetting, VfState};
use std::net::IpAddr;
use std::path::PathBuf;

/// One attachment, in memory; its on-disk form is the record's (record.rs).
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    pub pci: PciAddr,
    pub pf: String,
    pub pf_pci: PciAddr,
    pub vf_index: u32,
    pub driver: Option<String>,
    /// The VF's PF-side settings before ADD; `None` when the PF reports no VF table.
    pub vf_original: Option<VfState>,
    /// The netdev as it was in the host before ADD; `None` for a VF bound to a userspace driver. A rebind during
    /// ADD (mlx5 GUID, igb admin MAC) gives it a new ifindex, which is kept here.
    pub netdev: Option<Link>,
    /// The MTU ADD left on the pod's interface (the configured one, or what the netdev had there); older records
    /// hold only a configured one.
    pub mtu: Option<u32>,
    /// True once ADD has finished; a record left `false` is the trace of an interrupted ADD.
    pub complete: bool,
    /// Set by a rolled-back ADD whose IPAM ADD allocated and whose IPAM DEL failed: a later DEL must not drop the
    /// record until IPAM DEL succeeds, although the ADD never completed.
    pub ipam_allocated: bool,
    /// The VF's RDMA device, when it has one and `rdma` is not "off": where it is, the GIDs ADD reported.
    pub rdma: Option<RdmaRecord>,
    /// The network configuration ADD ran with, when it has IPAM: what an orphan's reclaim hands IPAM DEL.
    pub ipam_config: Option<String>,
    /// CNI_PATH of the ADD, where the IPAM plugin was found.
    pub cni_path: Vec<PathBuf>,
    /// CNI_ARGS of the ADD (`K=V;…`), handed to IPAM DEL when the undo runs outside this attachment's own DEL.
    pub cni_args: Option<String>,
    /// The netdev's ifindex in the pod, once moved there (the kernel gives it another when its host index is
    /// taken there): how DEL tells the VF from the pod's other devices where the kernel reports no parent device.
    pub pod_index: Option<u32>,
    /// The steps ADD began, in order; rollback, DEL and GC undo exactly these, in reverse.
    pub journal: Vec<Step>,
}

impl Attachment {
    /// Whether this is the runtime's attachment `container_id`/`ifname` on `network` (the key CNI calls it by).
    pub fn is(&self, network: &str, container_id: &str, ifname: &str) -> bool {
        self.network == network && self.container_id == container_id && self.ifname == ifname
    }

    /// The PF-side settings ADD began (what CHECK expects the PF to show).
    pub fn pf_settings(&self) -> Vec<VfSetting> {
        self.journal.iter().filter_map(Step::pf_setting).collect()
    }

    /// The admin MAC ADD set on the PF, if it did.
    pub fn admin_mac(&self) -> Option<Mac> {
        self.journal.iter().find_map(|s| match s {
            Step::AdminMac(m) => Some(*m),
            _ => None,
        })
    }
}

/// One reversible change ADD makes, in the order ADD makes them.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A PF-side setting of the VF: VLAN, spoofchk, trust, link state, TX rate.
    PfSetting(VfSetting),
    /// The admin MAC, set on the PF and carried by the VF's netdev.
    AdminMac(Mac),
    /// The InfiniBand node and port GUID; mlx5 applies one only when the VF's driver is bound again.
    IbGuid { node: u64, port: u64 },
    /// The VF's RDMA device into the pod (before the netdev, which it may be bound to).
    RdmaIn(Found),
    /// The netdev into the pod under CNI_IFNAME, its MTU set, up.
    NetdevIn,
    /// IPAM ADD: an address for the pod. Its addresses and routes live on the netdev in the pod and leave with it.
    Ipam,
    /// The NPWG device-info file (not begun when the file is there already: someone else's), and how many of its
    /// directories (the innermost) did not exist before: made by this step, removed by its undo when empty.
    DeviceInfo { path: PathBuf, dirs: usize },
}

impl Step {
    /// The configured PF settings as steps, in the order ADD applies them: the plain settings, then the admin MAC
    /// (so that its undo, which has the VF change its own MAC, runs before trust is restored), then the GUID.
    pub fn plan(settings: &[VfSetting]) -> Vec<Step> {
        let steps = settings.iter().cloned().map(Step::of_setting);
        let (mut plain, late): (Vec<Step>, Vec<Step>) = steps.partition(|s| matches!(s, Step::PfSetting(_)));
        let (mac, guid): (Vec<Step>, Vec<Step>) = late.into_iter().partition(|s| matches!(s, Step::AdminMac(_)));
        plain.extend(mac);
        plain.extend(guid);
        plain
    }

    /// The step that makes a PF-side setting: the admin MAC and the GUID are steps of their own.
    pub fn of_setting(s: VfSetting) -> Step {
        match s {
            VfSetting::AdminMac(AdminMac { mac }) => Step::AdminMac(mac),
            VfSetting::IbGuid(IbGuid { node, port }) => Step::IbGuid { node, port },
            s => Step::PfSetting(s),
        }
    }

    /// What the step does, in a few words (logs, `doctor`).
    pub fn describe(&self) -> String {
        match self {
            Step::PfSetting(s) => format!("{s} on the PF"),
            Step::AdminMac(m) => format!("admin MAC {m}"),
            Step::IbGuid { node, .. } => format!("InfiniBand GUID {}", guid_str(*node)),
            Step::RdmaIn(d) => format!("RDMA device {} into the pod", d.name),
            Step::NetdevIn => "netdev into the pod".into(),
            Step::Ipam => "IPAM".into(),
            Step::DeviceInfo { path, .. } => format!("device-info file {}", path.display()),
        }
    }

    /// The PF-side setting this step makes, if it makes one.
    pub fn pf_setting(&self) -> Option<VfSetting> {
        match self {
            Step::PfSetting(s) => Some(s.clone()),
            Step::AdminMac(m) => Some(AdminMac { mac: *m }.into()),
            Step::IbGuid { node, port } => Some(IbGuid { node: *node, port: *port }.into()),
            _ => None,
        }
    }
}

/// The VF's RDMA device as found on the host before anything moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub name: String,
    /// The device index RDMA netlink addresses it by; `None` without RDMA netlink.
    pub index: Option<u32>,
}

/// What the record keeps: the device, whether it is in the pod (the move is the journal's), and the GID index of
/// each pod address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaRecord {
    pub device: Found,
    pub moved: bool,
    pub gids: Vec<GidIndex>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidIndex {
    pub address: IpAddr,
    pub index: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LinkState, VlanProto};
    use crate::vf_setting::{Trust, TxRate, VfLinkState, Vlan};

    #[test]
    fn the_plan_puts_the_admin_mac_after_the_plain_settings_and_the_guid_last() {
        let settings = vec![
            AdminMac { mac: Mac([2, 0, 0, 0, 0, 1]) }.into(),
            Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Q }.into(),
            Trust { on: true }.into(),
            VfLinkState { state: LinkState::Enable }.into(),
            IbGuid { node: 7, port: 7 }.into(),
            TxRate { min: 0, max: 10 }.into(),
        ];
        let plan = Step::plan(&settings);
        assert_eq!(
            plan,
            vec![
                Step::PfSetting(Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Q }.into()),
                Step::PfSetting(Trust { on: true }.into()),
                Step::PfSetting(VfLinkState { state: LinkState::Enable }.into()),
                Step::PfSetting(TxRate { min: 0, max: 10 }.into()),
                Step::AdminMac(Mac([2, 0, 0, 0, 0, 1])),
                Step::IbGuid { node: 7, port: 7 },
            ]
        );
        // Undone as the journal's loop takes them: the admin MAC before trust, so the VF may still change its own MAC.
        let undo: Vec<_> = crate::flow::journal::undo_order(&plan, true).into_iter().map(|i| &plan[i]).collect();
        let mac_at = undo.iter().position(|s| matches!(s, Step::AdminMac(_))).unwrap();
        let trust_at = undo.iter().position(|s| matches!(s, Step::PfSetting(VfSetting::Trust(_)))).unwrap();
        assert!(mac_at < trust_at);
        let mut back: Vec<VfSetting> = plan.iter().filter_map(Step::pf_setting).collect();
        back.sort_by_key(|s| format!("{s:?}"));
        let mut want = settings;
        want.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(back, want, "every setting is one step");
    }
}
