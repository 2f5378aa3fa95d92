//! The CNI spec's MUSTs on the real binary and real namespaces (root only): a chained ADD keeps the previous
//! result, CHECK holds each prevResult address to its own interface, IPv6 works on a node that disables it by
//! default and is usable when ADD reports it, GC and STATUS reach the IPAM plugin (host-local v1.10.0, built by
//! scripts/build-cni-plugins.sh, which speaks 1.1.0).
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use serde_json::Value;

/// Where scripts/build-cni-plugins.sh puts the reference plugins that speak CNI 1.1.0 (GC, STATUS).
const PLUGINS_1_1: &str = "/var/cache/sriov-rdma-cni/components/cni-plugins-v1.10.0/bin";

#[test]
fn a_chained_add_keeps_the_previous_result_and_appends_its_own() {
    if !require::required("chained add", &[]) {
        return;
    }
    let mut bed = Bed::new("sch", 1);
    let ns = bed.netns();
    let (pci, _) = bed.vfs[0].clone();
    let prev = r#","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.9.9.9/24","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.9.9.1"}],"dns":{"nameservers":["10.9.9.53"]}}"#;
    let conf = conf_dev("1.0.0", &pci, &format!("{}{prev}", static_ipam("10.77.0.31/24")));
    let add = bed.run("ADD", "c1", &ns, "net1", &conf);
    add.ok();
    let r = add.json();
    let names: Vec<&str> = r["interfaces"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["eth0", "net1"], "{r}");
    let ips: Vec<(&str, u64)> = r["ips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["address"].as_str().unwrap(), i["interface"].as_u64().unwrap()))
        .collect();
    assert_eq!(ips, [("10.9.9.9/24", 0), ("10.77.0.31/24", 1)], "{r}");
    assert_eq!(r["routes"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["dns"]["nameservers"][0], "10.9.9.53", "{r}");
    assert_eq!(addrs(&ns, "net1"), ["10.77.0.31/24"], "the kernel shows our address on net1");

    // CHECK with that result as its prevResult: eth0's address is not net1's business.
    let check_conf = conf_dev("1.0.0", &pci, &format!(r#"{},"prevResult":{r}"#, static_ipam("10.77.0.31/24")));
    bed.run("CHECK", "c1", &ns, "net1", &check_conf).ok();
    // An address prevResult gives net1 that net1 does not have is a CHECK failure.
    let mut wrong = r.clone();
    wrong["ips"][1]["address"] = Value::from("10.77.0.99/24");
    let bad = conf_dev("1.0.0", &pci, &format!(r#"{},"prevResult":{wrong}"#, static_ipam("10.77.0.31/24")));
    let c = bed.run("CHECK", "c1", &ns, "net1", &bad);
    assert!(!c.ok && c.msg().contains("10.77.0.99/24"), "{}", c.stdout);
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
}

#[test]
fn ipv6_is_enabled_in_the_pod_and_settled_before_add_reports_it() {
    if !require::required("ipv6", &[]) {
        return;
    }
    let mut bed = Bed::new("sv6", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    // A node that disables IPv6 by default; the stand-in VF's wire up, so duplicate address detection runs.
    must(&["ip", "netns", "exec", &ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    must(&["ip", "link", "set", &format!("{vf}p"), "up"]);
    let ipam = r#","ipam":{"type":"static","addresses":[{"address":"10.77.0.41/24"},{"address":"fd00:77::41/64"}]}"#;
    let conf = conf_dev("1.0.0", &pci, ipam);
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    let out = must(&["ip", "-n", &ns, "-j", "-6", "addr", "show", "dev", "net1"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let a = v[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["local"] == "fd00:77::41")
        .unwrap_or_else(|| panic!("no fd00:77::41 on net1: {out}"));
    assert!(a.get("tentative").is_none() && a.get("dadfailed").is_none(), "usable when ADD returned: {a}");
    let sysctl = must(&["ip", "netns", "exec", &ns, "sysctl", "-n", "net.ipv6.conf.net1.disable_ipv6"]);
    assert_eq!(sysctl.trim(), "0");
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
}

#[test]
fn gc_and_status_reach_an_ipam_plugin_that_speaks_1_1() {
    if !require::required("gc/status", &[&format!("{PLUGINS_1_1}/host-local")]) {
        return;
    }
    let mut bed = Bed::new("sgc", 1);
    let lost_ns = bed.netns();
    let leases = bed.dir.join("leases");
    let ipam = format!(r#","ipam":{{"type":"host-local","subnet":"10.81.0.0/24","dataDir":"{}"}}"#, leases.display());
    let env = |cmd: &str, cid: &str, ns: &str| {
        let mut e = bed.env(cmd, cid, ns, if cmd == "GC" || cmd == "STATUS" { "" } else { "net1" });
        e.insert("CNI_PATH".into(), PLUGINS_1_1.into());
        e
    };
    // A lease this plugin holds no record of (its record lost): only the IPAM plugin's own GC releases it.
    let ipam_only = format!(r#"{{"cniVersion":"1.1.0","name":"rdma-net"{ipam}}}"#);
    let mut e = env("ADD", "lost", "");
    e.insert("CNI_NETNS".into(), format!("/var/run/netns/{lost_ns}"));
    e.insert("CNI_IFNAME".into(), "net9".into());
    let out = std::process::Command::new(format!("{PLUGINS_1_1}/host-local"))
        .envs(&e)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(ipam_only.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success(), "host-local ADD: {}", String::from_utf8_lossy(&out.stdout));
    let held = || common::leases(&leases.join("rdma-net"));
    assert_eq!(held().len(), 1);
    let gc = format!(
        r#"{{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma"{ipam},"cni.dev/valid-attachments":[]}}"#
    );
    bed.run_env(&env("GC", "", ""), &gc).ok();
    assert!(held().is_empty(), "the IPAM plugin's GC released the lease nobody holds");

    // No released IPAM plugin implements STATUS yet (host-local, static and dhcp v1.10.0 leave it out): a stand-in
    // that speaks 1.1.0 and answers STATUS with the spec's code 51 (not available, limited connectivity) while `full` exists.
    let full = bed.dir.join("full");
    let cases = format!(
        r#"  STATUS) if [ -e {full} ]; then echo '{{"cniVersion":"1.1.0","code":51,"msg":"no addresses left"}}'; exit 1; fi ;;
  VERSION) echo '{{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}}' ;;"#,
        full = full.display()
    );
    let bin = stand_in_ipam(&bed.dir, "fullipam", &cases);
    let status = r#"{"cniVersion":"1.1.0","name":"rdma-net","type":"sriov-rdma","ipam":{"type":"fullipam"}}"#;
    let mut e = bed.env("STATUS", "", "", "");
    e.insert("CNI_PATH".into(), bin.display().to_string());
    bed.run_env(&e, status).ok();
    std::fs::write(&full, b"").unwrap();
    let r = bed.run_env(&e, status);
    assert!(!r.ok, "the IPAM plugin's STATUS failure is the network's: {}", r.stdout);
    assert_eq!(r.code(), 51, "its own code: {}", r.stdout);
    assert!(r.msg().contains("no addresses left"), "{}", r.msg());
}
