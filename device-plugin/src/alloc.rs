//! Which of the free VFs a container asking for several should get (GetPreferredAllocation): plain data in,
//! the choice out, no I/O. `spread` (the default) gives one VF per PF first, as a multi-rail job (NCCL) wants;
//! `pack` keeps a container's VFs on as few PFs as it can.

use serde::Serialize;
use sriov_rdma_cni::model::PciAddr;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// A resource's allocation policy (its `allocation` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// One VF per PF (rail) first, then near the VFs already chosen (NUMA node, PCIe root).
    #[default]
    Spread,
    /// On the PFs already used, then on the PF with the most free VFs.
    Pack,
}

impl Policy {
    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "spread" => Some(Policy::Spread),
            "pack" => Some(Policy::Pack),
            _ => None,
        }
    }
}

/// What the choice needs to know of a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidate {
    pub healthy: bool,
    pub numa: Option<u32>,
    /// The VF's PF: one rail.
    pub pf: Option<PciAddr>,
    /// The PCIe root complex the PF is under (`pci0000:3a`), when sysfs shows it.
    pub pcie_root: Option<String>,
}

/// The root complex in the target of a `bus/pci/devices/<address>` link
/// (`../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0` → `pci0000:3a`).
pub fn pcie_root(link_target: &Path) -> Option<String> {
    link_target
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| c.strip_prefix("pci").is_some_and(|bus| bus.contains(':')))
        .map(str::to_string)
}

/// The kubelet's request made good: every `must` ID, then up to `size` in all from `available`, by `policy`.
/// An ID missing from `devices` counts as unhealthy with no topology.
pub fn choose(
    policy: Policy,
    available: &[String],
    must: &[String],
    size: usize,
    devices: &HashMap<String, Candidate>,
) -> Vec<String> {
    let of = |id: &String| devices.get(id).cloned().unwrap_or_default();
    let (chosen, free) = split(available, must);
    match policy {
        Policy::Spread => spread(chosen, free, size, of),
        Policy::Pack => pack(chosen, free, size, of),
    }
}

/// `must` (once each, in order) and the rest of `available`, sorted.
fn split(available: &[String], must: &[String]) -> (Vec<String>, Vec<String>) {
    let mut chosen: Vec<String> = Vec::new();
    for id in must {
        if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    let mut free: Vec<String> = available.iter().filter(|id| !chosen.contains(id)).cloned().collect();
    free.sort();
    free.dedup();
    (chosen, free)
}

/// Moves `pick(chosen, free)` from `free` to `chosen` until there are `size` or nothing is left.
fn fill(
    mut chosen: Vec<String>,
    mut free: Vec<String>,
    size: usize,
    mut pick: impl FnMut(&[String], &[String]) -> Option<String>,
) -> Vec<String> {
    while chosen.len() < size {
        let Some(best) = pick(&chosen, &free) else { break };
        free.retain(|id| *id != best);
        chosen.push(best);
    }
    chosen
}

/// How many of `ids` each PF has.
fn per_pf(ids: &[String], of: impl Fn(&String) -> Candidate) -> HashMap<Option<PciAddr>, usize> {
    let mut n = HashMap::new();
    for c in ids.iter().map(of) {
        *n.entry(c.pf).or_default() += 1;
    }
    n
}

/// Healthy first; then the PF with the fewest VFs chosen so far; among those, a VF on a NUMA node and then a
/// PCIe root of what is already chosen (`must` first); with nothing chosen yet, on the NUMA node with the most
/// PFs to choose from; then the PF with the most free VFs; by address.
fn spread(chosen: Vec<String>, free: Vec<String>, size: usize, of: impl Fn(&String) -> Candidate) -> Vec<String> {
    let mut rails_on_node: BTreeMap<Option<u32>, BTreeSet<Option<PciAddr>>> = BTreeMap::new();
    for c in free.iter().map(&of).filter(|c| c.healthy) {
        rails_on_node.entry(c.numa).or_default().insert(c.pf);
    }
    fill(chosen, free, size, |chosen, free| {
        let picked: Vec<Candidate> = chosen.iter().map(&of).collect();
        let (on_pf, free_on_pf) = (per_pf(chosen, &of), per_pf(free, &of));
        let near = |c: &Candidate| {
            let numa = c.numa.is_some() && picked.iter().any(|p| p.numa == c.numa);
            let root = c.pcie_root.is_some() && picked.iter().any(|p| p.pcie_root == c.pcie_root);
            (!numa, !root)
        };
        let key = |id: &String| {
            let c = of(id);
            (
                !c.healthy,
                on_pf.get(&c.pf).copied().unwrap_or(0),
                near(&c),
                Reverse(rails_on_node.get(&c.numa).map_or(0, BTreeSet::len)),
                Reverse(free_on_pf.get(&c.pf).copied().unwrap_or(0)),
                id.clone(),
            )
        };
        free.iter().min_by_key(|id| key(id)).cloned()
    })
}

/// Healthy first, on the NUMA node of what is already chosen (or the node with the most healthy free devices),
/// packed onto PFs already used, then onto the PF with the most free devices, by address.
fn pack(chosen: Vec<String>, free: Vec<String>, size: usize, of: impl Fn(&String) -> Candidate) -> Vec<String> {
    let target = chosen.iter().find_map(|id| of(id).numa).or_else(|| {
        let mut count: BTreeMap<u32, usize> = BTreeMap::new();
        for n in free.iter().map(&of).filter(|c| c.healthy).filter_map(|c| c.numa) {
            *count.entry(n).or_default() += 1;
        }
        count.into_iter().max_by_key(|(n, c)| (*c, Reverse(*n))).map(|(n, _)| n)
    });
    fill(chosen, free, size, |chosen, free| {
        let used: BTreeSet<Option<PciAddr>> = chosen.iter().map(|id| of(id).pf).collect();
        let free_on_pf = per_pf(free, &of);
        let key = |id: &String| {
            let c = of(id);
            (
                !c.healthy,
                target.is_some() && c.numa != target,
                !used.contains(&c.pf),
                Reverse(free_on_pf.get(&c.pf).copied().unwrap_or(0)),
                id.clone(),
            )
        };
        free.iter().min_by_key(|id| key(id)).cloned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(VF, healthy, NUMA node, PF, PCIe root)`.
    fn node(list: &[(&str, bool, u32, &str, &str)]) -> HashMap<String, Candidate> {
        list.iter()
            .map(|(id, healthy, numa, pf, root)| {
                let c = Candidate {
                    healthy: *healthy,
                    numa: Some(*numa),
                    pf: Some(PciAddr::parse(pf).unwrap()),
                    pcie_root: Some(root.to_string()),
                };
                (id.to_string(), c)
            })
            .collect()
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Two PFs of four healthy VFs each, both on NUMA node 0 and one root.
    fn two_by_four() -> (Vec<String>, HashMap<String, Candidate>) {
        let mut list = Vec::new();
        for (pf, bus) in [("0000:3b:00.0", "3b"), ("0000:3c:00.0", "3c")] {
            for f in 2..6 {
                list.push((format!("0000:{bus}:00.{f}"), pf));
            }
        }
        let rows: Vec<(&str, bool, u32, &str, &str)> =
            list.iter().map(|(id, pf)| (id.as_str(), true, 0, *pf, "pci0000:3a")).collect();
        (list.iter().map(|(id, _)| id.clone()).collect(), node(&rows))
    }

    #[test]
    fn spread_gives_one_vf_per_pf_before_a_second_on_any() {
        let (all, n) = two_by_four();
        assert_eq!(choose(Policy::Spread, &all, &[], 2, &n), ids(&["0000:3b:00.2", "0000:3c:00.2"]));
        let three = choose(Policy::Spread, &all, &[], 3, &n);
        assert_eq!(three, ids(&["0000:3b:00.2", "0000:3c:00.2", "0000:3b:00.3"]));
        // Four over two PFs: two on each.
        let four = choose(Policy::Spread, &all, &[], 4, &n);
        assert_eq!(four.iter().filter(|id| id.starts_with("0000:3b")).count(), 2, "{four:?}");
        // More than there is: everything, once.
        assert_eq!(choose(Policy::Spread, &all, &[], 20, &n).len(), 8);
    }

    #[test]
    fn pack_keeps_the_choice_on_one_pf_as_before() {
        let (all, n) = two_by_four();
        assert_eq!(choose(Policy::Pack, &all, &[], 2, &n), ids(&["0000:3b:00.2", "0000:3b:00.3"]));
        assert_eq!(choose(Policy::Pack, &all, &[], 3, &n), ids(&["0000:3b:00.2", "0000:3b:00.3", "0000:3b:00.4"]));
        assert_eq!(Policy::default(), Policy::Spread);
    }

    #[test]
    fn pack_is_healthy_then_numa_aligned_then_packed_by_pf() {
        let n = node(&[
            ("0000:3b:00.2", false, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3b:00.3", true, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3b:00.4", true, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3c:00.2", true, 0, "0000:3c:00.0", "pci0000:3a"),
            ("0000:af:00.2", true, 1, "0000:af:00.0", "pci0000:ae"),
            ("0000:af:00.3", true, 1, "0000:af:00.0", "pci0000:ae"),
            ("0000:af:00.4", true, 1, "0000:af:00.0", "pci0000:ae"),
            ("0000:af:00.5", true, 1, "0000:af:00.0", "pci0000:ae"),
        ]);
        let all: Vec<String> = n.keys().cloned().collect();
        // NUMA 1 has the most healthy free VFs, all on one PF.
        assert_eq!(choose(Policy::Pack, &all, &[], 2, &n), ids(&["0000:af:00.2", "0000:af:00.3"]));
        // A must-include on NUMA 0 pulls the rest there; a healthy VF on the other node beats an unhealthy one.
        assert_eq!(
            choose(Policy::Pack, &all, &ids(&["0000:3c:00.2"]), 4, &n),
            ids(&["0000:3c:00.2", "0000:3b:00.3", "0000:3b:00.4", "0000:af:00.2"])
        );
        assert_eq!(choose(Policy::Pack, &all, &ids(&["0000:3b:00.3"]), 2, &n), ids(&["0000:3b:00.3", "0000:3b:00.4"]));
    }

    #[test]
    fn must_include_is_kept_and_spreading_goes_around_it() {
        let (all, n) = two_by_four();
        // The kubelet's mustInclude on PF 3c: the next VF comes from the other PF.
        let got = choose(Policy::Spread, &all, &ids(&["0000:3c:00.4"]), 2, &n);
        assert_eq!(got, ids(&["0000:3c:00.4", "0000:3b:00.2"]));
        // Two mustInclude on one PF and a request of three: the third is on the other PF.
        let got = choose(Policy::Spread, &all, &ids(&["0000:3b:00.5", "0000:3b:00.4"]), 3, &n);
        assert_eq!(got, ids(&["0000:3b:00.5", "0000:3b:00.4", "0000:3c:00.2"]));
        // A mustInclude the kubelet did not list as available is still part of the answer.
        assert_eq!(choose(Policy::Spread, &all[1..], &all[..1], 1, &n), all[..1].to_vec());
    }

    #[test]
    fn spread_prefers_the_numa_node_and_pcie_root_of_what_must_be_included() {
        // Four PFs: 5e and 5f on NUMA node 1 (roots 5d and 5a), 3b and 3c on node 0.
        let n = node(&[
            ("0000:3b:00.2", true, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3c:00.2", true, 0, "0000:3c:00.0", "pci0000:3a"),
            ("0000:5e:00.2", true, 1, "0000:5e:00.0", "pci0000:5d"),
            ("0000:5f:00.2", true, 1, "0000:5f:00.0", "pci0000:5a"),
            ("0000:60:00.2", true, 1, "0000:60:00.0", "pci0000:5d"),
            ("0000:60:00.3", true, 1, "0000:60:00.0", "pci0000:5d"),
        ]);
        let all: Vec<String> = n.keys().cloned().collect();
        // With 5e's VF included: another PF, on node 1, under 5e's root (60 before 5f).
        let got = choose(Policy::Spread, &all, &ids(&["0000:5e:00.2"]), 2, &n);
        assert_eq!(got, ids(&["0000:5e:00.2", "0000:60:00.2"]));
        let got = choose(Policy::Spread, &all, &ids(&["0000:5e:00.2"]), 3, &n);
        assert_eq!(got, ids(&["0000:5e:00.2", "0000:60:00.2", "0000:5f:00.2"]));
        // With 3b's: 3c (node 0) although node 1 has more PFs.
        let got = choose(Policy::Spread, &all, &ids(&["0000:3b:00.2"]), 2, &n);
        assert_eq!(got, ids(&["0000:3b:00.2", "0000:3c:00.2"]));
        // Nothing included: the node with the most PFs to choose from (node 1, three PFs), its PF with the most
        // free VFs first, then the PF under the same root.
        let got = choose(Policy::Spread, &all, &[], 2, &n);
        assert_eq!(got, ids(&["0000:60:00.2", "0000:5e:00.2"]));
    }

    #[test]
    fn spread_takes_healthy_vfs_before_another_rail() {
        let n = node(&[
            ("0000:3b:00.2", true, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3b:00.3", true, 0, "0000:3b:00.0", "pci0000:3a"),
            ("0000:3c:00.2", false, 0, "0000:3c:00.0", "pci0000:3a"),
        ]);
        let all: Vec<String> = n.keys().cloned().collect();
        assert_eq!(choose(Policy::Spread, &all, &[], 2, &n), ids(&["0000:3b:00.2", "0000:3b:00.3"]));
    }

    #[test]
    fn the_allocation_key_takes_spread_or_pack_and_names_itself_when_wrong() {
        use crate::config::Config;
        let load = |text: &str| Config::load(Some(("config.json", text)), |_| None);
        let c = load(r#"{"resources":[{"name":"rdma/a"},{"name":"rdma/b","allocation":"pack"}]}"#).unwrap();
        assert_eq!((c.resources[0].allocation, c.resources[1].allocation), (Policy::Spread, Policy::Pack));
        let e = load(r#"{"resources":[{"name":"rdma/a","allocation":"spred"}]}"#).unwrap_err();
        assert_eq!(e.0, "config.json: resources[0].allocation: \"spred\" is not spread or pack");
    }

    #[test]
    fn the_pcie_root_is_the_root_complex_of_the_device_link() {
        let root = |p: &str| pcie_root(Path::new(p));
        assert_eq!(root("../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0").as_deref(), Some("pci0000:3a"));
        assert_eq!(root("../../../devices/pci0001:00/0001:00:02.0/0001:01:00.1").as_deref(), Some("pci0001:00"));
        assert_eq!(root("../../../devices/platform/foo"), None);
        assert_eq!(root("0000:3b:00.0"), None);
    }
}
