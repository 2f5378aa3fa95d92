//! An upgrade must not strand a VF: DEL finishes an attachment whose record an earlier release wrote, in each
//! earlier on-disk format (tests/data/record-0.1.0.json: format 0, release 0.1.0; tests/data/record-1.json: format
//! 1, the release before the journal; both kept verbatim as those releases wrote them after an ADD). Only the
//! fields that name the machine's devices (PCI addresses, PF, netns, the netdev's ifindex/name/MAC) are pointed at
//! this test bed's. Format 2 is pinned byte for byte by src/flow/record.rs's unit test.
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use serde_json::Value;

/// Puts the VF into the state that release's ADD left (moved into the pod as net1, MTU 4000, an address, up, a
/// MAC other than its host one), writes the sample record pointed at this bed, runs today's DEL and checks the
/// host got everything back.
fn del_finishes(tag: &str, sample: &str) {
    let mut bed = Bed::new(tag, 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let l = link(None, &vf).unwrap();
    let mut rec: Value = serde_json::from_str(sample).expect("the sample is JSON");
    rec["pci"] = pci.clone().into();
    rec["pf"] = bed.pf.clone().into();
    rec["pf_pci"] = bed.pf_pci.clone().into();
    rec["netns"] = format!("/var/run/netns/{ns}").into();
    rec["netdev"]["index"] = l["ifindex"].clone();
    rec["netdev"]["name"] = vf.clone().into();
    rec["netdev"]["mac"] = before.1.clone().into();
    assert_eq!(rec["netdev"]["mtu"], 1500);
    assert_eq!(rec["mtu"], 4000);
    must(&["ip", "link", "set", &vf, "netns", &ns, "name", "net1"]);
    // A MAC of the pod's own (a pod may change it, or an earlier release's ADD set one): DEL gives back the host's.
    let pod_mac = if before.1 == "02:00:5e:10:00:01" { "02:00:5e:10:00:02" } else { "02:00:5e:10:00:01" };
    must(&["ip", "-n", &ns, "link", "set", "net1", "address", pod_mac, "mtu", "4000", "up"]);
    assert_eq!(identity(Some(&ns), "net1").map(|i| i.1).as_deref(), Some(pod_mac));
    must(&["ip", "-n", &ns, "addr", "add", "10.77.0.9/24", "dev", "net1"]);
    std::fs::create_dir_all(&bed.state).unwrap();
    std::fs::write(bed.state.join(format!("{pci}.json")), serde_json::to_vec_pretty(&rec).unwrap()).unwrap();

    let conf = conf_dev("1.0.0", &pci, &format!(r#","mtu":4000{}"#, static_ipam("10.77.0.9/24")));
    let r = bed.run("DEL", "c1", &ns, "net1", &conf);
    r.ok();
    assert_eq!(identity(None, &vf), Some(before), "name, MAC, MTU, up state as before that ADD");
    assert!(link(Some(&ns), "net1").is_none());
    assert!(bed.records().is_empty(), "the record is finished and removed");
}

#[test]
fn del_finishes_an_attachment_recorded_by_release_0_1_0() {
    if !require::required("del_finishes_an_attachment_recorded_by_release_0_1_0", &["/usr/lib/cni/static"]) {
        return;
    }
    del_finishes("gld", include_str!("data/record-0.1.0.json"));
}

#[test]
fn del_finishes_an_attachment_recorded_in_format_1() {
    if !require::required("del_finishes_an_attachment_recorded_in_format_1", &["/usr/lib/cni/static"]) {
        return;
    }
    let sample = include_str!("data/record-1.json");
    let v: Value = serde_json::from_str(sample).unwrap();
    assert_eq!(v["version"], 1, "the sample is format 1");
    del_finishes("gl1", sample);
}
