//! Crash consistency: SIGKILL the plugin at random moments of ADD (and of DEL); DEL, repeated until it
//! succeeds (bounded), must then leave the host exactly as before: the stand-in VF's name, MAC, MTU and up
//! state in the host namespace, nothing left in the pod, no record, no temp record, no host-local lease.
//! Random moments: uniform over 0–100% of the median duration (measured first, per configuration) of an ADD (or DEL) on this machine, from a
//! seeded generator (printed; `SRIOV_RDMA_CRASH_SEED=N` replays a run). A run counts only the kills that left a
//! record at a step that changes the VF (a PF setting, the netdev's move into the pod; a kill before the record
//! tests nothing) and fails unless they are at least a fifth of its trials and it saw both a VF left in the pod and
//! a record with the VF in the host. Root only.

mod common;
use common::*;
use sriov_rdma_cni::vf_setting::VfSetting;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Several VFs (each its own PF, netns and IPAM network) in parallel: the netns moves are mostly kernel waits.
const WORKERS: usize = 4;
const ADD_TRIALS: usize = 200;
const DEL_TRIALS: usize = 60;

struct Worker {
    bed: Bed,
    ns: String,
    pci: String,
    vf: String,
    before: (String, String, u64, bool),
    ipam_dir: PathBuf,
    confs: Vec<String>,
}

impl Worker {
    fn new(i: usize) -> Worker {
        let mut bed = Bed::new(&format!("cr{i}"), 1);
        let ns = bed.netns();
        let (pci, vf) = bed.vfs[0].clone();
        // Up with an MTU of its own: DEL has to give back both.
        must(&["ip", "link", "set", &vf, "mtu", "1400", "up"]);
        let before = identity(None, &vf).unwrap();
        let ipam_dir = bed.dir.join("ipam");
        let net = format!("crash-{i}");
        let ipam = host_local(&format!("10.99.{i}.0/24"), &ipam_dir);
        let head = |src: &str| format!(r#"{{"cniVersion":"1.0.0","name":"{net}","type":"sriov-rdma",{src},"mtu":9000"#);
        let by_dev = head(&format!(r#""deviceID":"{pci}""#));
        let by_pf = head(&format!(r#""pfName":"{}""#, bed.pf));
        let confs = vec![format!("{by_dev}}}"), format!("{by_dev}{ipam}}}"), format!("{by_pf}{ipam}}}")];
        Worker { bed, ns, pci, vf, before, ipam_dir: ipam_dir.join(net), confs }
    }

    fn spawn(&self, cmd: &str, conf: &str) -> std::process::Child {
        spawn_plugin(&self.bed.sysfs, &self.bed.state, &self.bed.env(cmd, "crash", &self.ns, "net1"), conf)
    }

    fn timed(&self, cmd: &str, conf: &str) -> Duration {
        let t = Instant::now();
        let r = wait_bounded(self.spawn(cmd, conf), Duration::from_secs(30)).expect("a plugin run hung");
        assert!(r.ok, "{cmd}: {} {}", r.stdout, r.stderr);
        t.elapsed()
    }

    /// Runs `cmd` and SIGKILLs it after `delay` if it is still running; says what the kill left behind.
    fn kill_after(&self, cmd: &str, conf: &str, delay: Duration) -> Outcome {
        let mut child = self.spawn(cmd, conf);
        std::thread::sleep(delay);
        let killed = child.try_wait().expect("polling the plugin").is_none();
        let _ = child.kill();
        if !killed {
            let out = child.wait_with_output().expect("collecting the plugin's output");
            assert!(out.status.success(), "{cmd} failed on its own: {}", String::from_utf8_lossy(&out.stdout));
            return Outcome { left: Left::Finished, step: None };
        }
        let _ = child.wait();
        let files = state_files(&self.bed.state);
        let step = last_step(&self.bed.state.join(format!("{}.json", self.pci)));
        let left = if files.iter().any(|f| f.starts_with('.')) {
            Left::Temp
        } else if link(Some(&self.ns), "net1").is_some() {
            Left::InPod
        } else if !files.is_empty() {
            Left::Record
        } else {
            Left::Nothing
        };
        Outcome { left, step }
    }

    /// DEL until it succeeds (at most 5 times), then the host must be exactly as before.
    fn del_and_check(&self, conf: &str, what: &str) {
        let mut last = String::new();
        let ok = (0..5).any(|_| {
            let r = wait_bounded(self.spawn("DEL", conf), Duration::from_secs(30))
                .unwrap_or_else(|| panic!("{what}: DEL hung"));
            last = format!("{} {}", r.stdout, r.stderr);
            r.ok
        });
        assert!(ok, "{what}: DEL never succeeded: {last}");
        assert_eq!(identity(None, &self.vf).as_ref(), Some(&self.before), "{what}: the VF in the host");
        assert!(link(Some(&self.ns), "net1").is_none(), "{what}: net1 left in the pod");
        assert!(state_files(&self.bed.state).is_empty(), "{what}: left {:?}", state_files(&self.bed.state));
        assert!(leases(&self.ipam_dir).is_empty(), "{what}: leases {:?}", leases(&self.ipam_dir));
    }

    /// The median duration of an ADD and of a DEL with `conf`.
    fn measure(&self, conf: &str) -> (Duration, Duration) {
        let (mut adds, mut dels) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            adds.push(self.timed("ADD", conf));
            dels.push(self.timed("DEL", conf));
        }
        adds.sort();
        dels.sort();
        (adds[2], dels[2])
    }
}

/// What a kill left: the run had finished; nothing; a record (VF still in the host); the VF in the pod; a
/// temp record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Left {
    Finished,
    Nothing,
    Record,
    InPod,
    Temp,
}

/// What a kill left, and the last step the record had written (`None`: no record, or one with no step yet).
struct Outcome {
    left: Left,
    step: Option<String>,
}

/// The kind (`"netdev-in"`, `"vlan"`, …) of the last step of the record at `path`, if there is one.
fn last_step(path: &std::path::Path) -> Option<String> {
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some(rec["journal"].as_array()?.last()?["step"].as_str()?.to_string())
}

/// Whether a step changes the VF itself: a PF-side setting or the netdev's move into the pod.
fn changes_the_vf(step: &str) -> bool {
    step == "netdev-in" || VfSetting::STEPS.contains(&step)
}

#[derive(Default)]
struct Tally(std::collections::BTreeMap<String, usize>);

impl Tally {
    fn add(&mut self, o: &Outcome) {
        let key = match &o.step {
            Some(step) => format!("{:?}@{step}", o.left),
            None => format!("{:?}", o.left),
        };
        *self.0.entry(key).or_default() += 1;
    }
    fn merge(mut self, o: Tally) -> Tally {
        for (k, v) in o.0 {
            *self.0.entry(k).or_default() += v;
        }
        self
    }
    /// Kills that left `left` behind, at any step.
    fn left(&self, left: Left) -> usize {
        let name = format!("{left:?}");
        self.0.iter().filter(|(k, _)| k.split('@').next() == Some(&name)).map(|(_, v)| v).sum()
    }
    /// Kills that left a record whose last step changes the VF (a PF setting, the move into the pod): the ones
    /// that test the undo. A kill before the record, or at a step that changed nothing yet, does not.
    fn mid_change(&self) -> usize {
        self.0.iter().filter(|(k, _)| k.split_once('@').is_some_and(|(_, s)| changes_the_vf(s))).map(|(_, v)| v).sum()
    }

    /// Fails unless at least a fifth of `trials` kills landed mid-change (about 40% do on a quiet machine) and
    /// both a VF left in the pod and a record with the VF in the host were seen.
    fn assert_landed(&self, kind: &str, trials: usize) {
        let mid = self.mid_change();
        assert!(
            mid * 5 >= trials,
            "too few kills left a record mid-{kind} at a VF-changing step: {mid} of {trials}: {:?}",
            self.0
        );
        for left in [Left::InPod, Left::Record] {
            assert!(self.left(left) > 0, "no kill mid-{kind} left {left:?}: {:?}", self.0);
        }
    }
}

fn workers() -> Vec<Worker> {
    (0..WORKERS).map(Worker::new).collect()
}

/// A delay uniform over 0–100% of `d`, the median duration of the run being killed.
fn moment(rng: &mut Rng, d: Duration) -> Duration {
    Duration::from_micros(rng.below(d.as_micros() as u64 + 1))
}

/// `per_worker` trials on every worker: `kind` (ADD, or DEL of a fresh ADD) is SIGKILLed at a random moment of
/// its measured duration, then DEL must leave the host exactly as before. Where the kills landed, tallied; and
/// no IPAM plugin a kill orphaned may allocate after the fact.
fn kill_trials(ws: &[Worker], seed: u64, per_worker: usize, kind: &'static str) -> Tally {
    let tally = std::thread::scope(|s| {
        let hs: Vec<_> = ws
            .iter()
            .enumerate()
            .map(|(i, w)| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed ^ (i as u64 + 1).wrapping_mul(0x1000_0000_01b3));
                    let spans: Vec<Duration> = w
                        .confs
                        .iter()
                        .map(|c| {
                            let (add, del) = w.measure(c);
                            if kind == "ADD" {
                                add
                            } else {
                                del
                            }
                        })
                        .collect();
                    let mut tally = Tally::default();
                    for t in 0..per_worker {
                        let k = rng.below(w.confs.len() as u64) as usize;
                        if kind == "DEL" {
                            w.timed("ADD", &w.confs[k]);
                        }
                        let delay = moment(&mut rng, spans[k]);
                        tally.add(&w.kill_after(kind, &w.confs[k], delay));
                        let what = format!("seed {seed} worker {i} trial {t}: {kind} killed after {delay:?}, conf {k}");
                        w.del_and_check(&w.confs[k], &what);
                    }
                    eprintln!("crash ({kind}): worker {i} ({}): {kind} medians {spans:?}", w.pci);
                    tally
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).fold(Tally::default(), Tally::merge)
    });
    std::thread::sleep(Duration::from_millis(300));
    for w in ws {
        assert!(leases(&w.ipam_dir).is_empty(), "seed {seed}: late leases {:?}", leases(&w.ipam_dir));
    }
    tally
}

#[test]
fn sigkill_at_random_moments_of_add_then_del_restores_the_host() {
    if !need_root() {
        return;
    }
    let seed = seed("SRIOV_RDMA_CRASH_SEED");
    eprintln!("crash (ADD): seed {seed} (SRIOV_RDMA_CRASH_SEED={seed} replays it)");
    let ws = workers();
    let start = Instant::now();
    let per_worker = ADD_TRIALS.div_ceil(WORKERS);
    let mut tally = kill_trials(&ws, seed, per_worker, "ADD");
    let mut trials = per_worker * WORKERS;
    // A kill between the IPAM step's record and the move (a record, the VF still in the host) is a few ms wide:
    // a run that saw none gets at most two more rounds before it fails.
    for round in 1..=2 {
        if tally.left(Left::Record) > 0 {
            break;
        }
        eprintln!("crash (ADD): no kill left a record with the VF in the host yet: round {round} more");
        tally = tally.merge(kill_trials(&ws, seed.wrapping_add(round), per_worker, "ADD"));
        trials += per_worker * WORKERS;
    }
    let mid = tally.mid_change();
    eprintln!("crash (ADD): {trials} trials, {mid} left a record mid-change {:?}, in {:.1?}", tally.0, start.elapsed());
    tally.assert_landed("ADD", trials);
}

#[test]
fn sigkill_at_random_moments_of_del_then_del_restores_the_host() {
    if !need_root() {
        return;
    }
    let seed = seed("SRIOV_RDMA_CRASH_SEED").wrapping_add(1);
    eprintln!("crash (DEL): seed {seed}");
    let ws: Vec<Worker> = (0..2).map(|i| Worker::new(WORKERS + i)).collect();
    let per_worker = DEL_TRIALS.div_ceil(ws.len());
    let start = Instant::now();
    let tally = kill_trials(&ws, seed, per_worker, "DEL");
    let trials = per_worker * ws.len();
    let mid = tally.mid_change();
    eprintln!("crash (DEL): {trials} trials, {mid} left a record mid-change {:?}, in {:.1?}", tally.0, start.elapsed());
    tally.assert_landed("DEL", trials);
}
