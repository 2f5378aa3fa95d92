//! `make bench`: ADD+DEL cycle times and CPU time measured side by side, round-robin, on stand-in VFs (veth
//! ends behind a fake sysfs PCI tree): the raw-netlink kernel floor, sriov-rdma without and with static IPAM,
//! and the Debian host-device plugin on the same device, without and with static IPAM. Prints medians,
//! ratios to the floor (the two netns moves) and to the floor plus bringing the link up (the driver's open,
//! which every attach does), the CPU time per cycle of the plugin processes (wait4's rusage, which includes
//! the children they waited for: the IPAM plugin), split into user and system time by CPU time samples
//! taken in an untimed pass, and their peak RSS. Then the parallel table: N ADDs at once on N VFs (each into
//! its own netns), then N DELs at once, against one serial cycle and against the floor run by N threads at
//! once.
//!
//! `cni-bench [ROUNDS]` on this host (root; creates and removes the veths `bnch*` and the netns `bnchns*`);
//! `cni-bench --vf PCI [ROUNDS]` on a real VF (real sysfs), as `make bench-vm` runs it;
//! `cni-bench --vfs PCI,PCI,... [ROUNDS]` on several real VFs: the first for the serial table, all of them
//! for a parallel row. On real VFs, when sriov-cni is installed beside sriov-rdma (`/opt/cni/bin/sriov`, and
//! its main as `sriov-main`, rdma-cni as `rdma`: the emulated machine's initramfs), the rounds also run the
//! anchor rows on the same VF with the same settings (VLAN 100, spoofchk on, trust on, no IPAM): sriov-rdma,
//! sriov-cni v2.10.0, sriov-cni main, and sriov-cni chained with rdma-cni (an rdma-cni step that fails is
//! counted, said, and its row marked a lower bound); then the table "Against sriov-cni" of their ratios. `--parallel 8,16` sets the batch sizes on the host (`0`: no parallel rows);
//! `--sample-us N` the sampling period (`0`: no sampling, no user/sys split).

mod bench_util;

use bench_util::{Cpu, Floor, Sample, Sampler, Split};
use sriov_rdma_cni::kernel::sysfs::fake::FakeTree;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::Instant;

const PF_DEV: &str = "bnchpf";
const PF_PCI: &str = "0000:5e:00.0";
const CNI_PATH: &str = "/usr/lib/cni";
/// Stand-in VFs on the host, and the batch sizes of the parallel rows there.
const STAND_INS: usize = 16;
const PARALLEL: [usize; 2] = [8, 16];

/// One VF and the pod namespace it goes to.
#[derive(Clone)]
struct Vf {
    dev: String,
    pci: String,
    netns: String,
}

impl Vf {
    fn netns_path(&self) -> String {
        format!("/var/run/netns/{}", self.netns)
    }
}

fn netns_name(i: usize) -> String {
    format!("bnchns{i}")
}

fn stand_in(i: usize) -> Vf {
    Vf { dev: format!("bnchv{i}"), pci: format!("0000:5e:{:02x}.{}", 2 + i / 8, i % 8), netns: netns_name(i) }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The stand-in VFs: a veth end per VF, one PF veth, a fake sysfs tree that ties them together, and a
/// netns per VF.
fn setup(dir: &Path) -> Result<Vec<Vf>, String> {
    cleanup(dir, STAND_INS);
    let vfs: Vec<Vf> = (0..STAND_INS).map(stand_in).collect();
    ip(&["link", "add", PF_DEV, "type", "veth", "peer", "name", "bnchpfp"])?;
    for v in &vfs {
        ip(&["link", "add", &v.dev, "type", "veth", "peer", "name", &format!("{}p", v.dev)])?;
        ip(&["netns", "add", &v.netns])?;
    }
    let built = || -> std::io::Result<()> {
        let tree = FakeTree::new(&dir.join("sys"))?;
        tree.pf(PF_PCI, PF_DEV, STAND_INS as u32)?;
        for (i, v) in vfs.iter().enumerate() {
            tree.vf(PF_PCI, i as u32, &v.pci, Some(&v.dev), "igbvf")?;
        }
        Ok(())
    };
    built().map_err(|e| format!("building the fake sysfs tree: {e}"))?;
    Ok(vfs)
}

/// Removes only what `setup` made: the `bnch*` veths (their peers go with them), the `bnchns*` netns, the
/// temporary directory.
fn cleanup(dir: &Path, n: usize) {
    for i in 0..n {
        let _ = ip(&["netns", "del", &netns_name(i)]);
        let _ = ip(&["link", "del", &stand_in(i).dev]);
    }
    let _ = ip(&["link", "del", PF_DEV]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs one CNI invocation and reaps it with `wait4`: the rusage of the plugin process, which includes the
/// children it waited for (an IPAM plugin).
fn invoke(plugin: &Path, env: &HashMap<&str, String>, conf: &str) -> Result<Cpu, String> {
    invoke_out(plugin, env, conf).map(|(cpu, _)| cpu)
}

/// `invoke`, with what the plugin printed on stdout (its result).
fn invoke_out(plugin: &Path, env: &HashMap<&str, String>, conf: &str) -> Result<(Cpu, String), String> {
    let cmd = env.get("CNI_COMMAND").map(String::as_str).unwrap_or("?");
    let mut child = Command::new(plugin)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", plugin.display()))?;
    let pid = child.id() as libc::pid_t;
    let mut problem = None;
    if let Some(mut i) = child.stdin.take() {
        if let Err(e) = i.write_all(conf.as_bytes()) {
            problem = Some(format!("writing the config to its stdin: {e}"));
        }
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be filled in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut r = -1;
    for _ in 0..100 {
        // SAFETY: waits for our own child (not yet reaped: std's Child is never waited on), writing into the
        // two locals.
        r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    let fail =
        |why: String| format!("{} {cmd}: {why}; stdout: {} stderr: {}", plugin.display(), out.trim(), err.trim());
    if r < 0 {
        return Err(fail(format!("wait4: {}", std::io::Error::last_os_error())));
    }
    if libc::WIFSIGNALED(status) {
        return Err(fail(format!("killed by signal {}", libc::WTERMSIG(status))));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(fail(format!("exit status {}", libc::WEXITSTATUS(status))));
    }
    if let Some(p) = problem {
        return Err(fail(p));
    }
    Ok((Cpu::from_rusage(&ru), out))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    SriovRdma,
    HostDevice,
    /// sriov-cni (`"type": "sriov"`), the plugin users migrate from.
    SriovCni,
}

struct Case {
    name: &'static str,
    kind: Kind,
    ipam: bool,
    /// Extra keys of the network config (the anchor rows' VF settings), `,"key":value...`.
    settings: &'static str,
    plugin: PathBuf,
    /// A plugin chained after `plugin` (rdma-cni): ADD with the first one's result as `prevResult`, DEL first.
    chained: Option<PathBuf>,
    row: Row,
}

/// The measurements of one serial row: the timed cycles, and the CPU time samples of the untimed pass.
#[derive(Default)]
struct Row {
    samples: Vec<Sample>,
    split: Split,
    /// Measured rounds in which the chained plugin failed (the cycle went on), and its first error.
    chain_failures: usize,
    chain_error: Option<String>,
}

/// The VF settings of the anchor rows, the same for every plugin.
const ANCHOR_SETTINGS: &str = r#","vlan":100,"spoofchk":"on","trust":"on""#;

impl Case {
    fn conf(&self, vf: &Vf) -> String {
        let ipam = if self.ipam { r#","ipam":{"type":"static","addresses":[{"address":"10.99.0.2/24"}]}"# } else { "" };
        let set = self.settings;
        match self.kind {
            Kind::SriovRdma => format!(
                r#"{{"cniVersion":"1.0.0","name":"bench","type":"sriov-rdma","deviceID":"{}","logLevel":"error"{set}{ipam}}}"#,
                vf.pci
            ),
            Kind::SriovCni => {
                format!(r#"{{"cniVersion":"1.0.0","name":"bench","type":"sriov","deviceID":"{}"{set}{ipam}}}"#, vf.pci)
            }
            Kind::HostDevice => {
                format!(r#"{{"cniVersion":"1.0.0","name":"bench","type":"host-device","device":"{}"{ipam}}}"#, vf.dev)
            }
        }
    }
}

/// The environment of one invocation on `vf`.
fn env_for<'a>(base: &HashMap<&'a str, String>, vf: &Vf, command: &str) -> HashMap<&'a str, String> {
    let mut env = base.clone();
    env.insert("CNI_COMMAND", command.into());
    env.insert("CNI_CONTAINERID", format!("bench-{}", vf.netns));
    env.insert("CNI_NETNS", vf.netns_path());
    env.insert("CNI_IFNAME", "net1".into());
    env
}

/// One ADD+DEL of `c` on `vf`. When ADD fails, DEL still runs (to leave the VF on the host) before the error
/// is returned. With a chained plugin: ADD, the chained ADD (given ADD's result), the chained DEL, DEL, as a
/// runtime runs a conflist; a failing chained step does not end the cycle: its error is returned beside the
/// sample (the cycle then did less than a working chain would, so its time is a lower bound).
fn cycle(
    c: &Case,
    vf: &Vf,
    base: &HashMap<&str, String>,
    sampling: Option<u64>,
) -> Result<(Sample, Option<String>), String> {
    let conf = c.conf(vf);
    let add_env = env_for(base, vf, "ADD");
    let del_env = env_for(base, vf, "DEL");
    let sampler = start_sampler(sampling)?;
    let t = Instant::now();
    let mut chain_error = None;
    let (a, d) = match &c.chained {
        None => (invoke(&c.plugin, &add_env, &conf), invoke(&c.plugin, &del_env, &conf)),
        Some(next) => {
            let a = invoke_out(&c.plugin, &add_env, &conf);
            let prev = a.as_ref().map(|(_, out)| out.trim().to_string()).unwrap_or_default();
            let prev = if prev.is_empty() { "{}".to_string() } else { prev };
            let next_conf = format!(
                r#"{{"cniVersion":"1.0.0","name":"bench","type":"rdma","deviceID":"{}","prevResult":{prev}}}"#,
                vf.pci
            );
            let mut ru = Cpu::default();
            for (what, env) in [("ADD", &add_env), ("DEL", &del_env)] {
                match invoke(next, env, &next_conf) {
                    Ok(r) => ru = ru.add(r),
                    Err(e) => {
                        chain_error.get_or_insert(format!("{what}: {e}"));
                    }
                }
            }
            let d = invoke(&c.plugin, &del_env, &conf);
            (a.map(|(r, _)| r.add(ru)), d)
        }
    };
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let split = sampler.map(|s| s.finish(Some(std::process::id()))).unwrap_or_default();
    let (a, d) = (a.map_err(|e| format!("{}: {e}", c.name))?, d.map_err(|e| format!("{}: {e}", c.name))?);
    let ru = a.add(d);
    Ok((Sample { ms, ru, cpu_ms: ru.total_ms(), split }, chain_error))
}

fn start_sampler(sampling: Option<u64>) -> Result<Option<Sampler>, String> {
    sampling.map(Sampler::start).transpose().map_err(|e| format!("sampling CPU time: {e}"))
}

/// One invocation's outcome in a batch: its sample, or why the plugin failed.
type Outcome = Result<Sample, String>;

/// One batch: `command` of `c` on every VF at once, one thread per invocation, released together. Returns
/// the wall time from the release to the end of the last invocation, and each invocation's outcome; an
/// error only when the benchmark itself failed.
fn batch(c: &Case, vfs: &[Vf], command: &str, base: &HashMap<&str, String>) -> Result<(f64, Vec<Outcome>), String> {
    let go = Barrier::new(vfs.len() + 1);
    std::thread::scope(|s| {
        let threads: Vec<_> = vfs
            .iter()
            .map(|vf| {
                let (go, env, conf) = (&go, env_for(base, vf, command), c.conf(vf));
                s.spawn(move || {
                    go.wait();
                    let r = invoke(&c.plugin, &env, &conf);
                    (Instant::now(), r.map(|ru| Sample { ms: 0.0, ru, cpu_ms: ru.total_ms(), ..Sample::default() }))
                })
            })
            .collect();
        go.wait();
        let start = Instant::now();
        let mut last = start;
        let mut outcomes = Vec::with_capacity(vfs.len());
        let mut problem = None;
        for t in threads {
            match t.join() {
                Ok((end, r)) => {
                    last = last.max(end);
                    outcomes.push(r);
                }
                Err(_) => problem = problem.or(Some(format!("{command} thread panicked"))),
            }
        }
        match problem {
            Some(e) => Err(e),
            None => Ok((last.duration_since(start).as_secs_f64() * 1e3, outcomes)),
        }
    })
}

/// A row of the parallel table: the floor with N threads, or a plugin case with N invocations at once.
struct ParRow {
    name: &'static str,
    /// `None`: the floor (with link up when `up`); `Some(i)`: `cases[i]`.
    case: Option<usize>,
    up: bool,
    n: usize,
    samples: Vec<Sample>,
    failures: usize,
    first_error: Option<String>,
}

/// Where the cycles run: stand-in VFs on this host, or real VFs. The serial table uses `vfs[0]`.
struct Target {
    vfs: Vec<Vf>,
    cni_path: String,
    what: String,
    what_many: String,
    parallel: Vec<usize>,
    /// The directory holding sriov-cni (`sriov`, `sriov-main`) and rdma-cni (`rdma`), when they are installed:
    /// the anchor rows.
    anchors: Option<PathBuf>,
}

enum Mode {
    Host,
    Real(Vec<String>),
}

struct Opts {
    mode: Mode,
    rounds: usize,
    /// The sampling period of where the CPU time goes, in ns of CPU time; `None` (`--sample-us 0`): no
    /// sampling, e.g. to see what it costs.
    sampling: Option<u64>,
    /// Batch sizes of the parallel rows on the host (`--parallel 8,16`; `--parallel 0`: none).
    parallel: Vec<usize>,
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut mode = Mode::Host;
    let mut rounds = 30;
    let mut sampling = Some(bench_util::PERIOD_NS);
    let mut parallel = PARALLEL.to_vec();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--parallel" => {
                let v = it.next().ok_or("--parallel needs a list of batch sizes")?;
                parallel = Vec::new();
                for p in v.split(',') {
                    match p.parse::<usize>() {
                        Ok(0) => {}
                        Ok(k) if k <= STAND_INS => parallel.push(k),
                        _ => return Err(format!("--parallel {v:?}: batch sizes are 1 to {STAND_INS}")),
                    }
                }
            }
            "--sample-us" => {
                let v = it.next().ok_or("--sample-us needs a number of microseconds")?;
                let us: u64 = v.parse().map_err(|_| format!("--sample-us {v:?}: not a number of microseconds"))?;
                sampling = (us > 0).then_some(us * 1000);
            }
            "--vf" | "--vfs" => {
                let v = it.next().ok_or_else(|| format!("{a} needs a PCI address"))?;
                let list: Vec<String> = v.split(',').filter(|s| !s.is_empty()).map(String::from).collect();
                if list.is_empty() || (a == "--vf" && list.len() > 1) {
                    return Err(format!("{a} {v:?}: give one PCI address to --vf, a comma-separated list to --vfs"));
                }
                mode = Mode::Real(list);
            }
            n => rounds = n.parse().ok().filter(|&r| r > 0).ok_or_else(|| format!("unknown argument {n:?}"))?,
        }
    }
    Ok(Opts { mode, rounds, sampling, parallel })
}

const USAGE: &str = "usage: cni-bench [--sample-us N] [--parallel N,N | --vf PCI | --vfs PCI,PCI,...] [ROUNDS]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Opts { mode, rounds: n, sampling, parallel } = parse_args(&args).unwrap_or_else(|e| {
        eprintln!("cni-bench: {e}\n{USAGE}");
        std::process::exit(2);
    });
    let dir = std::env::temp_dir().join("sriov-rdma-bench");
    let result = match mode {
        Mode::Real(pcis) => {
            let r = real_vfs(&pcis).and_then(|t| {
                for v in &t.vfs {
                    let _ = ip(&["netns", "del", &v.netns]);
                    ip(&["netns", "add", &v.netns])?;
                }
                run(n, &t, &HashMap::new(), sampling)
            });
            for i in 0..pcis.len() {
                let _ = ip(&["netns", "del", &netns_name(i)]);
            }
            r
        }
        Mode::Host => {
            let r = setup(&dir).and_then(|vfs| {
                let mut extra = HashMap::new();
                extra.insert("SRIOV_RDMA_SYSFS", dir.join("sys").display().to_string());
                extra.insert("SRIOV_RDMA_STATE_DIR", dir.join("state").display().to_string());
                let t = Target {
                    vfs,
                    cni_path: CNI_PATH.into(),
                    what: "a stand-in VF (veth)".into(),
                    what_many: "stand-in VFs (veths)".into(),
                    parallel,
                    anchors: None,
                };
                run(n, &t, &extra, sampling)
            });
            cleanup(&dir, STAND_INS);
            r
        }
    };
    if let Err(e) = result {
        eprintln!("cni-bench: {e}");
        std::process::exit(1);
    }
}

/// The CNI binary itself: its size, and its start-up as `CNI_COMMAND=VERSION` (exec, parse, print, exit: what
/// every invocation pays before any work), `runs` interleaved runs beside Debian's host-device (a Go plugin),
/// medians. The device plugin is a binary of its own (sriov-rdma-device-plugin), so its async runtime adds
/// nothing here.
fn startup(plugin: &Path, host_device: &Path, runs: usize) -> Result<(), String> {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).map_err(|e| format!("{}: {e}", p.display()));
    let once = |p: &Path| -> Result<f64, String> {
        let t = Instant::now();
        let mut c = Command::new(p)
            .env_clear()
            .env("CNI_COMMAND", "VERSION")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("running {}: {e}", p.display()))?;
        if let Some(mut i) = c.stdin.take() {
            let _ = i.write_all(br#"{"cniVersion":"1.0.0"}"#);
        }
        let st = c.wait().map_err(|e| format!("waiting for {}: {e}", p.display()))?;
        if !st.success() {
            return Err(format!("{} VERSION: {st}", p.display()));
        }
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(once(plugin)?);
        theirs.push(once(host_device)?);
    }
    let (o, h) = (bench_util::median(&mut ours), bench_util::median(&mut theirs));
    let dp = plugin.with_file_name("sriov-rdma-device-plugin");
    println!("The binaries: size, and start-up (CNI_COMMAND=VERSION), median of {runs} interleaved runs");
    println!("  {:<44} {:>10} B  {:>8.3} ms", "sriov-rdma", size(plugin)?, o);
    println!(
        "  {:<44} {:>10} B  {:>8.3} ms  (sriov-rdma: {:.2}x)",
        "host-device (Debian, Go)",
        size(host_device)?,
        h,
        o / h
    );
    if let Ok(n) = size(&dp) {
        println!("  {:<44} {:>10} B  (a daemon of its own; not in the CNI)", "sriov-rdma-device-plugin", n);
    }
    println!();
    Ok(())
}

fn real_vfs(pcis: &[String]) -> Result<Target, String> {
    let mut vfs = Vec::new();
    for (i, pci) in pcis.iter().enumerate() {
        let net = Path::new("/sys/bus/pci/devices").join(pci).join("net");
        let dev = std::fs::read_dir(&net)
            .map_err(|e| format!("{}: {e}", net.display()))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .next()
            .ok_or_else(|| format!("VF {pci} has no netdev"))?;
        vfs.push(Vf { dev, pci: pci.clone(), netns: netns_name(i) });
    }
    let cni_path = if Path::new("/opt/cni/bin/static").exists() { "/opt/cni/bin" } else { CNI_PATH };
    let anchors = Path::new("/opt/cni/bin");
    Ok(Target {
        anchors: anchors.join("sriov").exists().then(|| anchors.to_path_buf()),
        what: format!("real VF {} ({})", vfs[0].pci, vfs[0].dev),
        what_many: "real VFs".into(),
        parallel: if vfs.len() > 1 { vec![vfs.len()] } else { vec![] },
        vfs,
        cni_path: cni_path.into(),
    })
}

fn run(n: usize, t: &Target, extra: &HashMap<&'static str, String>, sampling: Option<u64>) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("finding cni-bench's own path: {e}"))?;
    let plugin = me.with_file_name("sriov-rdma");
    let plugin = if plugin.exists() { plugin } else { PathBuf::from("/opt/cni/bin/sriov-rdma") };
    let host_device = Path::new(&t.cni_path).join("host-device");
    startup(&plugin, &host_device, n.max(20) * 10)?;
    let mut base: HashMap<&str, String> = extra.clone();
    base.insert("CNI_PATH", t.cni_path.clone());
    let case = |name, kind, ipam| {
        let plugin = if kind == Kind::SriovRdma { plugin.clone() } else { host_device.clone() };
        Case { name, kind, ipam, settings: "", plugin, chained: None, row: Row::default() }
    };
    let mut cases = vec![
        case("sriov-rdma ADD+DEL", Kind::SriovRdma, false),
        case("sriov-rdma ADD+DEL, static IPAM", Kind::SriovRdma, true),
        case("host-device ADD+DEL (Debian)", Kind::HostDevice, false),
        case("host-device ADD+DEL, static IPAM", Kind::HostDevice, true),
    ];
    // The anchor rows: same VF, same settings, interleaved with the rows above in every round.
    if let Some(dir) = &t.anchors {
        let anchor = |name, kind, bin: &str, chained: Option<&str>| Case {
            name,
            kind,
            ipam: false,
            settings: ANCHOR_SETTINGS,
            plugin: if kind == Kind::SriovRdma { plugin.clone() } else { dir.join(bin) },
            chained: chained.map(|c| dir.join(c)),
            row: Row::default(),
        };
        cases.push(anchor("sriov-rdma, vlan+spoofchk+trust", Kind::SriovRdma, "", None));
        cases.push(anchor("sriov-cni v2.10.0, same", Kind::SriovCni, "sriov", None));
        if dir.join("sriov-main").exists() {
            cases.push(anchor("sriov-cni main 1b7acc5b, same", Kind::SriovCni, "sriov-main", None));
        }
        if dir.join("rdma").exists() {
            cases.push(anchor("sriov-cni v2.10.0 + rdma-cni v1.6.0", Kind::SriovCni, "sriov", Some("rdma")));
        }
    }
    let sampling = match sampling.map(Sampler::start) {
        None => None,
        Some(Ok(_)) => sampling,
        Some(Err(e)) => {
            println!("(no CPU time samples: {e}; the user/sys columns are left empty)");
            None
        }
    };
    let vf0 = &t.vfs[0];
    let mut floor = Floor::new(&vf0.dev, &vf0.netns_path()).map_err(|e| format!("floor on {}: {e}", vf0.dev))?;
    let mut par_floors = Vec::new();
    for v in &t.vfs[..t.parallel.iter().copied().max().unwrap_or(0).min(t.vfs.len())] {
        par_floors.push(Floor::new(&v.dev, &v.netns_path()).map_err(|e| format!("floor on {}: {e}", v.dev))?);
    }
    let (mut floor_row, mut floor_up_row) = (Row::default(), Row::default());
    let mut par: Vec<ParRow> = Vec::new();
    for &p in &t.parallel {
        let row = |name, case, up| ParRow { name, case, up, n: p, samples: vec![], failures: 0, first_error: None };
        par.push(row("kernel floor, N threads (in+out)", None, false));
        par.push(row("kernel floor + link up, N threads", None, true));
        par.push(row("sriov-rdma ADD+DEL", Some(0), false));
        par.push(row("host-device ADD+DEL (Debian)", Some(2), false));
    }
    // One warm-up round, then n measured rounds. Each round runs every case once, in turn: the serial cases
    // timed, the serial cases again with CPU time sampling (untimed: sampling slows what it samples), then
    // the parallel rows.
    for round in 0..=n {
        let keep = round > 0;
        let mut got = vec![
            floor.cycle_on_thread(false, None).map_err(|e| format!("floor: {e}"))?,
            floor.cycle_on_thread(true, None).map_err(|e| format!("floor with link up: {e}"))?,
        ];
        for c in cases.iter_mut() {
            let (s, chain_error) = cycle(c, vf0, &base, None)?;
            if let (Some(e), true) = (chain_error, keep) {
                c.row.chain_failures += 1;
                c.row.chain_error.get_or_insert(e);
            }
            got.push(s);
        }
        let mut split = vec![Split::default(); got.len()];
        if sampling.is_some() {
            split[0] = floor.cycle_on_thread(false, sampling).map_err(|e| format!("floor: {e}"))?.split;
            split[1] = floor.cycle_on_thread(true, sampling).map_err(|e| format!("floor with link up: {e}"))?.split;
            for (i, c) in cases.iter().enumerate() {
                split[i + 2] = cycle(c, vf0, &base, sampling)?.0.split;
            }
        }
        if keep {
            let rows = [&mut floor_row, &mut floor_up_row].into_iter().chain(cases.iter_mut().map(|c| &mut c.row));
            for ((r, s), sp) in rows.zip(got).zip(split) {
                r.samples.push(s);
                r.split = r.split.add(sp);
            }
        }
        for r in par.iter_mut() {
            let s = match r.case {
                None => bench_util::parallel_cycle(&mut par_floors[..r.n], r.up)
                    .map_err(|e| format!("parallel floor ({} threads): {e}", r.n))?,
                Some(i) => {
                    let vfs = &t.vfs[..r.n];
                    let (add_ms, adds) = batch(&cases[i], vfs, "ADD", &base)?;
                    let (del_ms, dels) = batch(&cases[i], vfs, "DEL", &base)?;
                    let mut sum = Sample::default();
                    for o in adds.into_iter().chain(dels) {
                        match o {
                            Ok(s) => sum = sum.add(s),
                            Err(e) if keep => {
                                r.failures += 1;
                                r.first_error.get_or_insert(e);
                            }
                            Err(e) => return Err(format!("warm-up round, {} at once: {e}", r.n)),
                        }
                    }
                    Sample { ms: add_ms + del_ms, ..sum }
                }
            };
            if keep {
                r.samples.push(s);
            }
        }
    }
    report(n, t, &floor_row, &floor_up_row, &cases, &par, sampling);
    Ok(())
}

fn med(s: &[Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    let mut v: Vec<f64> = s.iter().map(f).filter(|x| !x.is_nan()).collect();
    bench_util::median(&mut v)
}

/// The median CPU time per cycle split into (user ms, system ms) by the share of user-mode samples over all
/// of the row's sampled cycles (a plugin cycle gets ~25 samples, too few to split each cycle on its own).
fn user_sys(r: &Row) -> (f64, f64) {
    r.split.apply(med(&r.samples, |x| x.cpu_ms)).unwrap_or((f64::NAN, f64::NAN))
}

fn p90(s: &[Sample]) -> f64 {
    bench_util::pct(&mut s.iter().map(|x| x.ms).collect::<Vec<_>>(), 0.9)
}

/// A number in a column of `w`, or "-" when there is none.
fn num(x: f64, w: usize) -> String {
    if x.is_finite() {
        format!("{x:>w$.2}")
    } else {
        format!("{:>w$}", "-")
    }
}

fn report(n: usize, t: &Target, floor: &Row, floor_up: &Row, cases: &[Case], par: &[ParRow], sampling: Option<u64>) {
    let fm = med(&floor.samples, |s| s.ms);
    let fum = med(&floor_up.samples, |s| s.ms);
    println!("ADD+DEL cycle on {}, {n} rounds, cases interleaved in each round", t.what);
    println!(
        "{:<36} {:>9} {:>7} {:>8} {:>11} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8}",
        "case",
        "median ms",
        "p90 ms",
        "vs floor",
        "vs floor+up",
        "user ms",
        "sys ms",
        "CPU ms",
        "ru user",
        "ru sys",
        "RSS KiB"
    );
    let line = |name: &str, r: &Row, rss: String| {
        let s = &r.samples;
        let m = med(s, |x| x.ms);
        let (user, sys) = user_sys(r);
        println!(
            "{:<36} {} {} {}x {}x {} {} {} {} {} {:>8}",
            name,
            num(m, 9),
            num(p90(s), 7),
            num(m / fm, 7),
            num(m / fum, 10),
            num(user, 7),
            num(sys, 7),
            num(med(s, |x| x.cpu_ms), 7),
            num(med(s, |x| x.ru.user_ms), 7),
            num(med(s, |x| x.ru.sys_ms), 7),
            rss
        );
    };
    line("kernel floor (raw netlink in+out)", floor, "-".into());
    line("kernel floor + link up in the netns", floor_up, "-".into());
    for c in cases {
        line(c.name, &c.row, c.row.samples.iter().map(|s| s.ru.maxrss).max().unwrap_or(0).to_string());
    }
    if let Some(ns) = sampling {
        let rows = [floor, floor_up].into_iter().chain(cases.iter().map(|c| &c.row));
        let (taken, lost) = rows.fold((0, 0), |(t, l), r| (t + r.split.user + r.split.kernel, l + r.split.lost));
        println!(
            "(user/sys: median CPU ms split by {taken} samples, one per {} us of CPU time, in an untimed pass{})",
            ns / 1000,
            if lost > 0 { format!("; {lost} lost or throttled") } else { String::new() }
        );
    }
    let user = |i: usize| user_sys(&cases[i].row).0;
    let ru_user = |i: usize| med(&cases[i].row.samples, |x| x.ru.user_ms);
    println!(
        "sriov-rdma user CPU / host-device's (target <= 0.25): {} without IPAM, {} with static IPAM \
         (rusage's tick-based split: {} / {} ms and {} / {} ms)",
        num(user(0) / user(2), 0),
        num(user(1) / user(3), 0),
        num(ru_user(0), 0),
        num(ru_user(2), 0),
        num(ru_user(1), 0),
        num(ru_user(3), 0)
    );
    against(n, fm, cases);
    if par.is_empty() {
        return;
    }
    println!();
    println!(
        "N ADDs at once on N {}, each into its own netns, then N DELs at once; {n} rounds, interleaved with the above",
        t.what_many
    );
    println!(
        "{:<36} {:>3} {:>9} {:>8} {:>11} {:>12} {:>15} {:>9} {:>8}",
        "case", "N", "batch ms", "p90 ms", "vs 1 serial", "vs par.floor", "vs par.floor+up", "CPU ms/VF", "failures"
    );
    let par_floor = |n: usize, up: bool| {
        par.iter().find(|o| o.n == n && o.case.is_none() && o.up == up).map_or(f64::NAN, |o| med(&o.samples, |x| x.ms))
    };
    for r in par {
        let m = med(&r.samples, |x| x.ms);
        let serial = match r.case {
            None if r.up => fum,
            None => fm,
            Some(i) => med(&cases[i].row.samples, |x| x.ms),
        };
        let k = r.n as f64;
        println!(
            "{:<36} {:>3} {} {} {}x {}x {}x {} {:>8}",
            r.name,
            r.n,
            num(m, 9),
            num(p90(&r.samples), 8),
            num(m / serial, 10),
            num(m / par_floor(r.n, false), 11),
            num(m / par_floor(r.n, true), 14),
            num(med(&r.samples, |x| x.cpu_ms / k), 9),
            if r.case.is_some() { r.failures.to_string() } else { "-".into() }
        );
    }
    for r in par {
        if let Some(e) = &r.first_error {
            println!("first failure of {} x{}: {e}", r.name, r.n);
        }
    }
    if let Some(r) = par.iter().filter(|r| r.case == Some(0)).max_by_key(|r| r.n) {
        println!(
            "sriov-rdma, {} at once, vs the parallel floor (target <= 1.2): {}x, failures {} (target 0)",
            r.n,
            num(med(&r.samples, |x| x.ms) / par_floor(r.n, false), 0),
            r.failures
        );
    }
}

/// The table "Against sriov-cni": the anchor rows (same VF, same settings) beside ours, wall time and CPU time
/// (user+sys of the plugin processes, rusage) medians of the rounds, and each one's ratio to ours.
fn against(n: usize, floor_ms: f64, cases: &[Case]) {
    let rows: Vec<&Case> = cases.iter().filter(|c| !c.settings.is_empty()).collect();
    let Some(ours) = rows.iter().find(|c| c.kind == Kind::SriovRdma) else { return };
    let (ow, oc) = (med(&ours.row.samples, |x| x.ms), med(&ours.row.samples, |x| x.cpu_ms));
    println!();
    println!(
        "Against sriov-cni: ADD+DEL on the same VF, vlan 100, spoofchk on, trust on, no IPAM; medians of {n} rounds"
    );
    println!(
        "{:<36} {:>9} {:>8} {:>9} {:>13} {:>7} {:>7} {:>8}",
        "case", "wall ms", "vs ours", "vs floor", "CPU ms (u+s)", "user", "sys", "vs ours"
    );
    for c in rows {
        let s = &c.row.samples;
        let (w, cpu) = (med(s, |x| x.ms), med(s, |x| x.cpu_ms));
        let lower = if c.row.chain_failures > 0 { " (lower bound)" } else { "" };
        println!(
            "{:<36} {} {}x {}x {} {} {} {}x{lower}",
            c.name,
            num(w, 9),
            num(w / ow, 7),
            num(w / floor_ms, 8),
            num(cpu, 13),
            num(med(s, |x| x.ru.user_ms), 7),
            num(med(s, |x| x.ru.sys_ms), 7),
            num(cpu / oc, 7)
        );
    }
    for c in cases.iter().filter(|c| c.row.chain_failures > 0) {
        println!(
            "{}: the chained plugin failed in {} of {n} rounds, so the row times less work than a working chain \
             (a lower bound); first error: {}",
            c.name,
            c.row.chain_failures,
            c.row.chain_error.as_deref().unwrap_or("?")
        );
    }
}
