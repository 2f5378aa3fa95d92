//! The kernel checks IFLA_VFINFO_LIST attribute lengths against its policy before asking the driver: a
//! veth then answers EOPNOTSUPP, a wrong layout ERANGE or EINVAL. So every VF setting we encode is sent
//! to a real veth here, and must come back EOPNOTSUPP (root only).

mod common;
use common::*;
use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::vf::{NetlinkPf, Pf, PfControl, VfSetting};
use sriov_rdma_cni::model::{LinkState, VlanProto};

#[test]
fn every_vf_setting_has_a_layout_the_kernel_accepts() {
    if !need_root() {
        return;
    }
    let _ = sh(&["ip", "link", "del", "tkpol0"]);
    must(&["ip", "link", "add", "tkpol0", "type", "veth", "peer", "name", "tkpol0p"]);
    let mut sock = RouteSocket::new().unwrap();
    let index = sock.link_by_name("tkpol0").unwrap().unwrap().index;
    let pf = Pf { name: "tkpol0".into(), index };
    let mut ctl = NetlinkPf(&mut sock);
    assert_eq!(ctl.vf_state(&pf, 0).unwrap(), None, "a veth has no VF table");
    for s in [
        VfSetting::Mac("02:00:00:00:00:01".parse().unwrap()),
        VfSetting::Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q },
        VfSetting::Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Ad },
        VfSetting::SpoofChk(true),
        VfSetting::Trust(true),
        VfSetting::LinkState(LinkState::Enable),
        VfSetting::Rate { min: 10, max: 100 },
        VfSetting::Guid { node: 0x0011_2233_4455_6677, port: 0x0011_2233_4455_6677 },
    ] {
        let err = ctl.apply(&pf, 1, &s).expect_err("a veth has no VFs");
        assert_eq!(sriov_rdma_cni::kernel::netlink::errno(&err), Some(libc::EOPNOTSUPP), "{s}: {err}");
    }
    let _ = sh(&["ip", "link", "del", "tkpol0"]);
}

#[test]
fn a_kernel_without_rdma_is_reported_not_crashed() {
    // This machine's kernel has no ib_core: the socket answers EPROTONOSUPPORT, which means "no RDMA here".
    if std::path::Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped: this kernel has an RDMA subsystem");
        return;
    }
    assert!(sriov_rdma_cni::kernel::rdma::open(None).unwrap().is_none());
}

#[test]
fn the_kernels_extended_ack_reaches_the_error_with_its_errno() {
    if !need_root() {
        return;
    }
    let _ = sh(&["ip", "link", "del", "tkpol1"]);
    must(&["ip", "link", "add", "tkpol1", "type", "veth", "peer", "name", "tkpol1p"]);
    let mut sock = RouteSocket::new().unwrap();
    let index = sock.link_by_name("tkpol1").unwrap().unwrap().index;
    // The kernel refuses an MTU above the device maximum with EINVAL and says why in an extended ack.
    let err = sock
        .set_link(index, vec![netlink_packet_route::link::LinkAttribute::Mtu(1 << 20)], None)
        .expect_err("no veth takes a 1 MiB MTU");
    let _ = sh(&["ip", "link", "del", "tkpol1"]);
    assert_eq!(sriov_rdma_cni::kernel::netlink::errno(&err), Some(libc::EINVAL), "{err}");
    let text = err.to_string();
    assert!(text.contains("Invalid argument") && text.contains("kernel: ") && text.contains("mtu"), "{text}");
}
