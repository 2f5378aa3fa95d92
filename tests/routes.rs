//! IPAM routes on real namespaces (root only): a route the pod already has through another interface fails ADD
//! naming it (and the ADD is rolled back), CHECK holds the result's routes to the pod's tables, and the CNI 1.1.0
//! route fields (`table`, `mtu`, `advmss`, `priority`, `scope`) are applied, returned and gone after DEL. What is
//! asserted is what the kernel shows (`ip route`), not only our result.
mod common;
#[path = "cri/require.rs"]
mod require;

use common::*;
use serde_json::Value;

/// The reference plugins that speak CNI 1.1.0 and pass the 1.1.0 route fields on (scripts/build-cni-plugins.sh);
/// Debian's `static` (v1.1.1) drops them.
const PLUGINS_1_1: &str = "/var/cache/sriov-rdma-cni/components/cni-plugins-v1.10.0/bin";

/// `ip -j route show …` in a namespace (or the host), as JSON rows (IPv6 when an argument is an IPv6 prefix).
fn routes(ns: Option<&str>, args: &[&str]) -> Vec<Value> {
    let mut cmd = vec!["ip"];
    if let Some(ns) = ns {
        cmd.extend(["-n", ns]);
    }
    cmd.push("-j");
    if args.iter().any(|a| a.contains(':')) {
        cmd.push("-6");
    }
    cmd.extend(["route", "show"]);
    cmd.extend(args);
    let out = sh(&cmd);
    if !out.status.success() {
        // `ip route show table 100` when the namespace has no table 100 at all.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not exist"), "{cmd:?}: {err}");
        return Vec::new();
    }
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The pod's eth0: a veth whose peer stays in the pod too, with 10.10.0.2/24, a route to 10.78.0.0/16 and the
/// default route, both via 10.10.0.1 — what the pod's primary network leaves before Multus calls us.
fn primary_network(ns: &str) {
    must(&["ip", "-n", ns, "link", "add", "name", "eth0", "type", "veth", "peer", "name", "eth0p"]);
    must(&["ip", "-n", ns, "addr", "add", "10.10.0.2/24", "dev", "eth0"]);
    must(&["ip", "-n", ns, "link", "set", "dev", "eth0", "up"]);
    must(&["ip", "-n", ns, "link", "set", "dev", "eth0p", "up"]);
    must(&["ip", "-n", ns, "route", "add", "10.78.0.0/16", "via", "10.10.0.1", "dev", "eth0"]);
    must(&["ip", "-n", ns, "route", "add", "default", "via", "10.10.0.1", "dev", "eth0"]);
}

fn static_routes(addr: &str, routes: &str) -> String {
    format!(
        r#","ipam":{{"type":"static","addresses":[{{"address":"{addr}","gateway":"10.77.0.1"}}],"routes":{routes}}}"#
    )
}

/// The device `ip route get` picks for `dst` in the pod.
fn route_dev(ns: &str, dst: &str) -> String {
    let out = must(&["ip", "-n", ns, "-j", "route", "get", dst]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v[0]["dev"].as_str().unwrap_or_default().to_string()
}

fn with_prev(conf: &str, result: &str) -> String {
    conf[..conf.len() - 1].to_string() + &format!(r#","prevResult":{result}}}"#)
}

#[test]
fn a_route_the_pod_has_through_another_interface_fails_add_naming_it_and_rolls_back() {
    if !require::required("route conflict", &[PLUGINS_1_1]) {
        return;
    }
    let mut bed = Bed::new("rcf", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    primary_network(&ns);
    let before = identity(None, &vf).unwrap();
    let ipam = static_routes(
        "10.77.0.5/24",
        r#"[{"dst":"10.78.0.0/16","gw":"10.77.0.1"},{"dst":"0.0.0.0/0","gw":"10.77.0.1"}]"#,
    );
    let conf = conf_dev("1.0.0", &pci, &ipam);
    let add = bed.run("ADD", "c1", &ns, "net1", &conf);
    assert!(!add.ok, "ADD must not report routes the kernel keeps on eth0: {}", add.stdout);
    assert!(
        add.msg().contains("10.78.0.0/16") && add.msg().contains("eth0") && add.msg().contains("10.10.0.1"),
        "the error names the route and what holds it: {}",
        add.stdout
    );
    // The kernel: eth0's route untouched, the VF back on the host as it was, no record.
    let held = routes(Some(&ns), &["10.78.0.0/16"]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0]["dev"].as_str(), held[0]["gateway"].as_str()), (Some("eth0"), Some("10.10.0.1")));
    assert!(link(Some(&ns), "net1").is_none(), "rolled back: net1 left the pod");
    assert_eq!(identity(None, &vf), Some(before.clone()));
    assert!(bed.records().is_empty(), "{:?}", bed.records());

    // IPv6 alike (there a route without a metric has 1024).
    must(&["ip", "-n", &ns, "addr", "add", "fd00:10::2/64", "dev", "eth0", "nodad"]);
    must(&["ip", "-n", &ns, "route", "add", "fd00:78::/64", "via", "fd00:10::1", "dev", "eth0"]);
    let ipam = r#","ipam":{"type":"static","addresses":[{"address":"fd00:77::5/64"}],"routes":[{"dst":"fd00:78::/64","gw":"fd00:77::1"}]}"#;
    let add = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, ipam));
    assert!(!add.ok && add.msg().contains("fd00:78::/64") && add.msg().contains("eth0"), "{}", add.stdout);
    let held = routes(Some(&ns), &["fd00:78::/64"]);
    assert_eq!((held.len(), held[0]["dev"].as_str()), (1, Some("eth0")), "{held:?}");
    assert_eq!(identity(None, &vf), Some(before.clone()));

    // The same route with a metric of its own is another route: installed, beside eth0's (Debian's `static`
    // drops `priority`: the 1.1.0 one passes it on).
    let ipam = static_routes("10.77.0.5/24", r#"[{"dst":"10.78.0.0/16","gw":"10.77.0.1","priority":50}]"#);
    let conf = conf_dev("1.1.0", &pci, &ipam);
    let mut e = bed.env("ADD", "c1", &ns, "net1");
    e.insert("CNI_PATH".into(), PLUGINS_1_1.into());
    bed.run_env(&e, &conf).ok();
    let both = routes(Some(&ns), &["10.78.0.0/16"]);
    let ours: Vec<&Value> = both.iter().filter(|r| r["dev"] == "net1").collect();
    assert_eq!(ours.len(), 1, "{both:?}");
    assert_eq!((ours[0]["gateway"].as_str(), ours[0]["metric"].as_u64()), (Some("10.77.0.1"), Some(50)));
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();

    // A route only net1 has is installed through net1, and the subnet's own route (the one the kernel adds
    // with the address) is no conflict.
    let ipam = static_routes("10.77.0.5/24", r#"[{"dst":"10.79.0.0/16","gw":"10.77.0.1"},{"dst":"10.77.0.0/24"}]"#);
    let conf = conf_dev("1.0.0", &pci, &ipam);
    bed.run("ADD", "c1", &ns, "net1", &conf).ok();
    assert_eq!(route_dev(&ns, "10.79.1.1"), "net1");
    assert_eq!(route_dev(&ns, "10.78.1.1"), "eth0");
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();

    // Two routes of one place through net1 with two gateways: the second would replace the first, which the
    // result would still list.
    let ipam = static_routes(
        "10.77.0.5/24",
        r#"[{"dst":"10.79.0.0/16","gw":"10.77.0.1"},{"dst":"10.79.0.0/16","gw":"10.77.0.2"}]"#,
    );
    let add = bed.run("ADD", "c1", &ns, "net1", &conf_dev("1.0.0", &pci, &ipam));
    assert!(!add.ok && add.msg().contains("10.79.0.0/16 via 10.77.0.1 dev net1"), "{}", add.stdout);
    assert!(routes(Some(&ns), &["10.79.0.0/16"]).is_empty());
    assert_eq!(identity(None, &vf), Some(before));
}

#[test]
fn check_finds_a_route_of_the_result_that_the_pod_no_longer_has_through_its_interface() {
    if !require::required("route check", &[]) {
        return;
    }
    let mut bed = Bed::new("rck", 1);
    let ns = bed.netns();
    let (pci, _) = bed.vfs[0].clone();
    primary_network(&ns);
    let ipam = static_routes("10.77.0.6/24", r#"[{"dst":"10.79.0.0/16","gw":"10.77.0.1"}]"#);
    let conf = conf_dev("1.0.0", &pci, &ipam);
    let add = bed.run("ADD", "c1", &ns, "net1", &conf);
    add.ok();
    let check_conf = with_prev(&conf, &add.stdout);
    bed.run("CHECK", "c1", &ns, "net1", &check_conf).ok();

    // The route now leaves through eth0.
    must(&["ip", "-n", &ns, "route", "replace", "10.79.0.0/16", "via", "10.10.0.1", "dev", "eth0"]);
    assert_eq!(route_dev(&ns, "10.79.1.1"), "eth0");
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(!c.ok && c.msg().contains("10.79.0.0/16") && c.msg().contains("net1"), "{}", c.stdout);
    // Gone altogether.
    must(&["ip", "-n", &ns, "route", "del", "10.79.0.0/16"]);
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(!c.ok && c.msg().contains("10.79.0.0/16"), "{}", c.stdout);
    // Back through net1 but via another gateway.
    must(&["ip", "-n", &ns, "route", "add", "10.79.0.0/16", "via", "10.77.0.9", "dev", "net1"]);
    let c = bed.run("CHECK", "c1", &ns, "net1", &check_conf);
    assert!(!c.ok && c.msg().contains("10.79.0.0/16"), "{}", c.stdout);
    must(&["ip", "-n", &ns, "route", "replace", "10.79.0.0/16", "via", "10.77.0.1", "dev", "net1"]);
    bed.run("CHECK", "c1", &ns, "net1", &check_conf).ok();

    // In a chained result, eth0's own routes (their gateway is eth0's) are not net1's to check.
    let prev = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.10.0.2/24","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.10.0.1"},{"dst":"10.99.0.0/16","gw":"10.10.0.1"}]}"#;
    let chained_conf = with_prev(&conf, prev);
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
    let add = bed.run("ADD", "c1", &ns, "net1", &chained_conf);
    add.ok();
    bed.run("CHECK", "c1", &ns, "net1", &with_prev(&conf, &add.stdout)).ok();
    bed.run("DEL", "c1", &ns, "net1", &conf).ok();
}

#[test]
fn route_table_mtu_advmss_priority_and_scope_are_applied_returned_checked_and_gone_after_del() {
    if !require::required("route fields", &[PLUGINS_1_1]) {
        return;
    }
    let mut bed = Bed::new("rtb", 1);
    let ns = bed.netns();
    let (pci, vf) = bed.vfs[0].clone();
    let before = identity(None, &vf).unwrap();
    let run = |cmd: &str, conf: &str| {
        let mut e = bed.env(cmd, "c1", &ns, "net1");
        e.insert("CNI_PATH".into(), PLUGINS_1_1.into());
        bed.run_env(&e, conf)
    };
    let ipam = static_routes(
        "10.77.0.7/24",
        r#"[{"dst":"10.78.0.0/16","gw":"10.77.0.1","table":100,"mtu":1400,"advmss":1360,"priority":7},
            {"dst":"10.79.0.0/16","scope":254},
            {"dst":"10.80.0.0/16","gw":"10.77.0.1","table":300},
            {"dst":"10.77.0.0/24","mtu":1400}]"#,
    );
    let conf = conf_dev("1.1.0", &pci, &ipam);
    let add = run("ADD", &conf);
    add.ok();

    // The kernel: the route is in table 100 (not main), with its metric and metrics; the others likewise.
    let t100 = routes(Some(&ns), &["table", "100"]);
    assert_eq!(t100.len(), 1, "{t100:?}");
    assert_eq!(t100[0]["dst"], "10.78.0.0/16");
    assert_eq!(t100[0]["gateway"], "10.77.0.1");
    assert_eq!(t100[0]["dev"], "net1");
    assert_eq!(t100[0]["metric"], 7);
    assert_eq!(t100[0]["metrics"][0]["mtu"], 1400, "{t100:?}");
    assert_eq!(t100[0]["metrics"][0]["advmss"], 1360, "{t100:?}");
    assert!(routes(Some(&ns), &["table", "main", "10.78.0.0/16"]).is_empty(), "not in main");
    let t300 = routes(Some(&ns), &["table", "300"]);
    assert_eq!((t300.len(), t300[0]["dst"].as_str()), (1, Some("10.80.0.0/16")), "{t300:?}");
    let host_scope = routes(Some(&ns), &["table", "main", "10.79.0.0/16"]);
    assert_eq!(host_scope[0]["scope"], "host", "{host_scope:?}");
    // The subnet's route, which the kernel added with the address, now with the MTU the result gives it.
    let subnet = routes(Some(&ns), &["table", "main", "10.77.0.0/24"]);
    assert_eq!(subnet.len(), 1, "{subnet:?}");
    assert_eq!((subnet[0]["dev"].as_str(), subnet[0]["metrics"][0]["mtu"].as_u64()), (Some("net1"), Some(1400)));
    // What the pod's traffic does: through table 100 once a rule sends it there.
    must(&["ip", "-n", &ns, "rule", "add", "to", "10.78.0.0/16", "table", "100"]);
    let got: Value = serde_json::from_str(&must(&["ip", "-n", &ns, "-j", "route", "get", "10.78.1.1"])).unwrap();
    assert_eq!((got[0]["dev"].as_str(), got[0]["gateway"].as_str()), (Some("net1"), Some("10.77.0.1")), "{got}");

    // The result carries every field (1.1.0).
    let r = add.json();
    let rt = r["routes"].as_array().unwrap();
    assert_eq!(rt.len(), 4, "{r}");
    assert_eq!(rt[0]["table"], 100);
    assert_eq!(rt[0]["mtu"], 1400);
    assert_eq!(rt[0]["advmss"], 1360);
    assert_eq!(rt[0]["priority"], 7);
    assert_eq!(rt[1]["scope"], 254);
    assert_eq!(rt[2]["table"], 300);

    // CHECK holds them: passes as ADD left them, fails when the route in table 100 lost its MTU.
    let check_conf = with_prev(&conf, &add.stdout);
    run("CHECK", &check_conf).ok();
    must(&[
        "ip",
        "-n",
        &ns,
        "route",
        "replace",
        "10.78.0.0/16",
        "via",
        "10.77.0.1",
        "dev",
        "net1",
        "table",
        "100",
        "metric",
        "7",
        "advmss",
        "1360",
    ]);
    let c = run("CHECK", &check_conf);
    assert!(!c.ok && c.msg().contains("10.78.0.0/16") && c.msg().contains("100"), "{}", c.stdout);

    // DEL: nothing of it is left in the pod's tables, nor in the host's, where the VF is back.
    run("DEL", &conf).ok();
    assert!(routes(Some(&ns), &["table", "100"]).is_empty());
    assert!(routes(Some(&ns), &["table", "300"]).is_empty());
    assert!(
        routes(None, &["table", "all", "dev", &vf]).is_empty(),
        "{:?}",
        routes(None, &["table", "all", "dev", &vf])
    );
    assert_eq!(identity(None, &vf), Some(before.clone()));

    // A rolled-back ADD leaves no route in another table either: the table-100 route is installed, then the
    // next one cannot be (its gateway is on no subnet of the pod's).
    let ipam = static_routes(
        "10.77.0.7/24",
        r#"[{"dst":"10.78.0.0/16","gw":"10.77.0.1","table":100},{"dst":"10.81.0.0/16","gw":"192.0.2.1"}]"#,
    );
    let conf = conf_dev("1.1.0", &pci, &ipam);
    let add = run("ADD", &conf);
    assert!(!add.ok && add.msg().contains("10.81.0.0/16"), "{}", add.stdout);
    assert!(routes(Some(&ns), &["table", "100"]).is_empty());
    assert!(routes(None, &["table", "all", "dev", &vf]).is_empty());
    assert_eq!(identity(None, &vf), Some(before));
    assert!(bed.records().is_empty());
}
