//! The kernel checks IFLA_VFINFO_LIST attribute lengths against its policy before asking the driver: a
//! veth then answers EOPNOTSUPP, a wrong layout ERANGE or EINVAL. So every VF setting we encode is sent
//! to a real veth here (every example of every setting in src/vf_setting.rs), and must come back EOPNOTSUPP (root
//! only). RDMA netlink must say "no RDMA" on a kernel without it, and list devices on one with it.

mod common;
use common::*;
use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::vf::{NetlinkPf, Pf, PfControl};
use sriov_rdma_cni::vf_setting::VfSetting;

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
    let examples = VfSetting::examples();
    assert!(examples.len() >= VfSetting::STEPS.len(), "every setting has an example");
    for (conf, s) in examples {
        let err = ctl.apply(&pf, 1, &s).expect_err("a veth has no VFs");
        assert_eq!(sriov_rdma_cni::kernel::netlink::errno(&err), Some(libc::EOPNOTSUPP), "{conf}: {s}: {err}");
    }
    let _ = sh(&["ip", "link", "del", "tkpol0"]);
}

#[test]
fn rdma_netlink_is_no_rdma_without_ib_core_and_answers_with_it() {
    // Without ib_core (this machine's kernel) the socket answers EPROTONOSUPPORT, which means "no RDMA here"; with
    // it (/sys/class/infiniband is its class) a socket opens and lists the devices. Either way it is checked.
    let has_rdma = std::path::Path::new("/sys/class/infiniband").exists();
    match sriov_rdma_cni::kernel::rdma::open(None) {
        Ok(None) => assert!(!has_rdma, "/sys/class/infiniband exists, but RDMA netlink was reported absent"),
        Ok(Some(mut sock)) => {
            assert!(has_rdma, "an RDMA netlink socket opened on a kernel without /sys/class/infiniband");
            sock.devices().expect("listing RDMA devices over RDMA netlink");
        }
        Err(e) => panic!("opening RDMA netlink: {e}"),
    }
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
