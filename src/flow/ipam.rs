//! IPAM delegation as the spec says: the plugin named by `ipam.type`, found on CNI_PATH, run with our
//! environment (CNI_COMMAND replaced) and the whole configuration on stdin.

use super::attachment::Attachment;
use crate::cni::config::{NetConf, SUPPORTED_VERSIONS};
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Code};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The attachment IPAM works for (GC runs DEL for records, not for the invoking environment).
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub netns: &'a str,
    /// CNI_PATH for the IPAM plugin (a reclaim outside any runtime has none in its own environment).
    pub path: &'a [PathBuf],
    /// CNI_ARGS for the IPAM plugin; `None`: this invocation's own. An undo outside the attachment's own DEL (GC,
    /// an orphan's reclaim by another pod's ADD) passes the ones its ADD had, so an IPAM that keys on the pod
    /// (K8S_POD_NAMESPACE, K8S_POD_NAME) sees the pod the address was given to.
    pub args: Option<&'a str>,
}

impl<'a> Target<'a> {
    pub fn of_env(env: &'a CniEnv) -> Target<'a> {
        Target { container_id: &env.container_id, ifname: &env.ifname, netns: &env.netns, path: &env.path, args: None }
    }

    /// The attachment a record names, as its ADD ran (a record without CNI_ARGS, from an older release, gets none).
    pub fn of_record(rec: &'a Attachment, path: &'a [PathBuf]) -> Target<'a> {
        Target {
            container_id: &rec.container_id,
            ifname: &rec.ifname,
            netns: &rec.netns,
            path,
            args: Some(rec.cni_args.as_deref().unwrap_or_default()),
        }
    }
}

fn find(env: &CniEnv, kind: &str) -> CniResult<PathBuf> {
    env.path.iter().map(|d| d.join(kind)).find(|p| p.is_file()).ok_or_else(|| {
        CniError::config(format!(
            "ipam.type {kind:?}: no such plugin in CNI_PATH ({})",
            env.path.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":")
        ))
    })
}

/// Runs the IPAM plugin; returns its stdout on success, its error (code kept) otherwise.
pub fn exec(conf: &NetConf, env: &CniEnv, command: &str, target: &Target) -> CniResult<Vec<u8>> {
    match spawn(conf, env, command, target)? {
        Some(p) => p.wait(),
        None => Ok(Vec::new()),
    }
}

/// An IPAM invocation under way, so it can run while the kernel moves the netdev.
pub struct Pending<'a> {
    child: Child,
    plugin: PathBuf,
    conf: &'a NetConf,
    command: &'a str,
    target: Target<'a>,
}

/// Starts the IPAM plugin; `None` without `ipam`.
pub fn spawn<'a>(
    conf: &'a NetConf,
    env: &CniEnv,
    command: &'a str,
    target: &Target<'a>,
) -> CniResult<Option<Pending<'a>>> {
    let Some(ipam) = &conf.ipam else {
        return Ok(None);
    };
    let plugin = find(env, &ipam.kind)?;
    let child = start(&plugin, &ipam.kind, &conf.raw, command, target)?;
    Ok(Some(Pending { child, plugin, conf, command, target: *target }))
}

/// DEL with nothing of ours recorded: IPAM DEL, for an address an ADD that failed may hold. An IPAM plugin that is
/// not in CNI_PATH, or cannot be started (e.g. its loader missing), holds no address of ours: DEL then finishes,
/// logged, so a configuration naming a plugin that cannot run never keeps a pod from going away.
pub fn del_unrecorded(conf: &NetConf, env: &CniEnv, target: &Target) -> CniResult<()> {
    let Some(ipam) = &conf.ipam else { return Ok(()) };
    let nothing = |e: CniError| {
        crate::warn!(
            "DEL {}/{}: nothing recorded, and {}: no address to release",
            target.container_id,
            target.ifname,
            e.msg
        );
        Ok(())
    };
    let plugin = match find(env, &ipam.kind) {
        Ok(p) => p,
        Err(e) => return nothing(e),
    };
    let child = match start(&plugin, &ipam.kind, &conf.raw, "DEL", target) {
        Ok(c) => c,
        Err(e) => return nothing(e),
    };
    Pending { child, plugin, conf, command: "DEL", target: *target }.wait().map(drop)
}

/// Whether IPAM may run while the netdev moves: DHCP needs the interface in the pod first.
pub fn can_overlap(conf: &NetConf) -> bool {
    conf.ipam.as_ref().is_some_and(|i| i.kind != "dhcp")
}

impl Pending<'_> {
    /// Waits for the plugin. One older than our cniVersion (Debian's 1.1.1 plugins stop at 1.0.0) answers
    /// code 1; it is then asked for its versions and called again with the newest one both sides speak.
    pub fn wait(self) -> CniResult<Vec<u8>> {
        let kind = self.conf.ipam.as_ref().map(|i| i.kind.as_str()).unwrap_or_default();
        match finish(self.child, kind, self.command) {
            Err(e) if e.code == Code::IncompatibleVersion => {
                let Some(raw) = downgraded(&self.plugin, kind, &self.conf.raw, &self.target) else {
                    return Err(e);
                };
                exec_raw(&self.plugin, kind, &raw, self.command, &self.target)
            }
            other => other,
        }
    }
}

/// The versions the plugin says it speaks (VERSION).
fn versions_of(plugin: &Path, kind: &str, target: &Target) -> Option<Vec<String>> {
    let out = exec_raw(plugin, kind, br#"{"cniVersion":"0.4.0"}"#, "VERSION", target).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out).ok()?;
    Some(v.get("supportedVersions")?.as_array()?.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
}

/// Runs GC or STATUS (spec 1.1.0) on the IPAM plugin, when it speaks 1.1.0; one that does not has neither
/// command, and is not asked. `Ok(false)` when it was not asked.
pub fn exec_if_1_1(conf: &NetConf, env: &CniEnv, command: &str) -> CniResult<bool> {
    let Some(ipam) = &conf.ipam else { return Ok(false) };
    let plugin = find(env, &ipam.kind)?;
    let target = Target::of_env(env);
    if !versions_of(&plugin, &ipam.kind, &target).is_some_and(|v| v.iter().any(|v| v == "1.1.0")) {
        crate::debug!("IPAM {} does not speak cniVersion 1.1.0: no {command} for it", ipam.kind);
        return Ok(false);
    }
    exec_raw(&plugin, &ipam.kind, &conf.raw, command, &target)?;
    Ok(true)
}

/// The configuration with `cniVersion` set to the newest version the plugin and this plugin both speak.
fn downgraded(plugin: &Path, kind: &str, raw: &[u8], target: &Target) -> Option<Vec<u8>> {
    let theirs = versions_of(plugin, kind, target)?;
    let best = SUPPORTED_VERSIONS.iter().rev().find(|s| theirs.iter().any(|t| t == *s))?;
    let mut conf: serde_json::Value = serde_json::from_slice(raw).ok()?;
    let obj = conf.as_object_mut()?;
    obj.insert("cniVersion".into(), serde_json::Value::from(*best));
    if let Some(prev) = obj.get_mut("prevResult").and_then(|p| p.as_object_mut()) {
        prev.insert("cniVersion".into(), serde_json::Value::from(*best));
    }
    crate::debug!("IPAM {kind} does not speak this cniVersion; delegating with {best}");
    serde_json::to_vec(&conf).ok()
}

fn exec_raw(plugin: &Path, kind: &str, raw: &[u8], command: &str, target: &Target) -> CniResult<Vec<u8>> {
    finish(start(plugin, kind, raw, command, target)?, kind, command)
}

fn start(plugin: &Path, kind: &str, raw: &[u8], command: &str, target: &Target) -> CniResult<Child> {
    crate::debug!("IPAM {kind} {command} for {}/{}", target.container_id, target.ifname);
    let mut cmd = Command::new(plugin);
    if !target.path.is_empty() {
        cmd.env("CNI_PATH", std::env::join_paths(target.path).unwrap_or_default());
    }
    if let Some(args) = target.args {
        cmd.env("CNI_ARGS", args);
    }
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only signal(2), prctl(2) and getppid(2), which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // The plugin ignores SIGTERM/SIGINT while it changes state; its IPAM plugin must not inherit that.
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            // The IPAM plugin dies with this process (sent when the thread that started it ends: IPAM starts on
            // the main thread). A runtime that kills ADD (its timeout) runs DEL next; an IPAM plugin left running
            // would take its lease after that DEL released it, a lease no record names.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // This process ended between fork and prctl: no signal will come.
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", target.container_id)
        .env("CNI_IFNAME", target.ifname)
        .env("CNI_NETNS", target.netns)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| CniError::io(format!("running IPAM plugin {}: {e}", plugin.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(raw) {
            Ok(()) => {}
            // A plugin may answer (or fail) without reading its config and exit; what it printed is the answer.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                crate::debug!("IPAM {kind} {command} exited without reading its configuration");
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CniError::io(format!("writing the config to IPAM plugin {kind}: {e}")));
            }
        }
    }
    Ok(child)
}

fn finish(child: Child, kind: &str, command: &str) -> CniResult<Vec<u8>> {
    let out = child.wait_with_output().map_err(|e| CniError::io(format!("waiting for IPAM plugin {kind}: {e}")))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let (code, msg) = match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(v) => (
            v.get("code").and_then(|c| c.as_u64()).unwrap_or(5),
            format!(
                "{}{}",
                v.get("msg").and_then(|m| m.as_str()).unwrap_or("failed"),
                v.get("details").and_then(|m| m.as_str()).map(|d| format!(": {d}")).unwrap_or_default()
            ),
        ),
        Err(_) => (5, format!("failed with {} and no error JSON", out.status)),
    };
    let code = match code {
        1 => Code::IncompatibleVersion,
        2 => Code::UnsupportedField,
        3 => Code::ContainerUnknown,
        4 => Code::InvalidEnv,
        6 => Code::Decode,
        7 => Code::InvalidConfig,
        11 => Code::TryAgainLater,
        50 => Code::NotAvailable,
        51 => Code::LimitedConnectivity,
        _ => Code::Io,
    };
    Err(CniError::new(code, format!("IPAM plugin {kind} {command}: {msg}")))
}

/// host-local's default `dataDir`.
const HOST_LOCAL_DATA_DIR: &str = "/var/lib/cni/networks";
/// How long a sweep waits for host-local's lock before it leaves the leases alone.
const SWEEP_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The directory host-local keeps `conf`'s leases in (`<ipam.dataDir>/<network name>`), when `conf`'s IPAM is
/// host-local; the key is matched as Go's JSON decoding does (case-insensitively).
fn host_local_dir(conf: &NetConf) -> Option<PathBuf> {
    if conf.ipam.as_ref()?.kind != "host-local" {
        return None;
    }
    // A name that is not one path component cannot be host-local's directory under its dataDir.
    if conf.name.is_empty() || conf.name == "." || conf.name == ".." || conf.name.contains('/') {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&conf.raw).ok()?;
    let ipam = v.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case("ipam"))?.1.as_object()?;
    let data_dir = ipam
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("dataDir"))
        .and_then(|(_, v)| v.as_str())
        .filter(|d| !d.is_empty())
        .unwrap_or(HOST_LOCAL_DATA_DIR);
    Some(Path::new(data_dir).join(&conf.name))
}

/// host-local reserves an address by creating the lease file (named by the address) and then writing the owner's
/// container ID and interface into it, under its network's lock (`lock` in the same directory, flock). An ADD
/// killed between the two (its IPAM plugin dies with it) leaves an empty lease no DEL can match: an address lost to
/// the range. After IPAM DEL this removes such empty leases of `conf`'s network, holding host-local's lock, so no
/// live host-local is between its two writes; only zero-length regular files named by an IP address. Returns the
/// addresses removed; a lock held past [`SWEEP_LOCK_WAIT`] (a stuck host-local) leaves everything as it is.
pub fn sweep_dead_leases(conf: &NetConf) -> Vec<String> {
    let Some(dir) = host_local_dir(conf) else { return Vec::new() };
    match sweep_dir(&dir, SWEEP_LOCK_WAIT) {
        Ok(gone) => {
            if !gone.is_empty() {
                crate::info!("removed host-local's empty leases {gone:?} in {} (their ADD was killed)", dir.display());
            }
            gone
        }
        Err(e) => {
            crate::warn!("sweeping host-local's empty leases in {}: {e}", dir.display());
            Vec::new()
        }
    }
}

fn sweep_dir(dir: &Path, wait: std::time::Duration) -> std::io::Result<Vec<String>> {
    let lock = match std::fs::File::open(dir.join("lock")) {
        Ok(f) => f,
        // No lock: host-local never ran for this network here.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let start = std::time::Instant::now();
    loop {
        match lock.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(std::io::Error::other(format!("its lock is held for more than {}s", wait.as_secs())))
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    let mut gone = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_err() {
            continue;
        }
        // symlink_metadata: a link is never followed nor counted.
        let md = std::fs::symlink_metadata(entry.path())?;
        if md.file_type().is_file() && md.len() == 0 {
            std::fs::remove_file(entry.path())?;
            gone.push(name);
        }
    }
    gone.sort();
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::env::Command as CniCommand;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    /// A plugin that never reads stdin, like one that fails (or answers) before reading its config. With a
    /// config larger than a pipe holds, writing it can only end in EPIPE: deterministic, not a 1% race.
    const NO_READ: &str = r#"#!/bin/sh
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}' ;;
ADD)
  if [ -e "$0.called" ]; then
    echo '{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.2/24"}]}'
  else
    : > "$0.called"
    echo '{"cniVersion":"1.1.0","code":1,"msg":"incompatible CNI versions"}'
    exit 1
  fi ;;
DEL) echo '{"cniVersion":"1.0.0","code":7,"msg":"no such range r0"}'; exit 1 ;;
CHECK) exit 0 ;;
esac
"#;

    fn setup(name: &str) -> (PathBuf, NetConf, CniEnv) {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-ipam-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let plugin = dir.join("no-read");
        std::fs::write(&plugin, NO_READ).unwrap();
        std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let pad = "x".repeat(1 << 20);
        let raw = format!(r#"{{"cniVersion":"1.1.0","name":"n","ipam":{{"type":"no-read"}},"pad":"{pad}"}}"#);
        let conf = NetConf::parse(raw.as_bytes(), &HashMap::new()).unwrap();
        let env = CniEnv {
            command: CniCommand::Add,
            container_id: "c1".into(),
            netns: "/nonexistent".into(),
            ifname: "net1".into(),
            args: HashMap::new(),
            path: vec![dir.clone()],
        };
        (dir, conf, env)
    }

    #[test]
    fn a_plugin_that_exits_without_reading_stdin_is_answered_by_its_output() {
        let (dir, conf, env) = setup("noread");
        let t = Target::of_env(&env);
        // ADD: code 1 first, then VERSION, then ADD again with 1.0.0 — none of them reads the config.
        let out = exec(&conf, &env, "ADD", &t).expect("the retry after VERSION gives the plugin's result");
        assert!(String::from_utf8_lossy(&out).contains("10.9.0.2/24"));
        // Its error is what the caller sees, not a broken pipe.
        let e = exec(&conf, &env, "DEL", &t).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{e}");
        assert!(e.msg.contains("no such range r0"), "{e}");
        exec(&conf, &env, "CHECK", &t).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn host_local_conf(data_dir: &Path, name: &str) -> NetConf {
        let raw = format!(
            r#"{{"cniVersion":"1.0.0","name":"{name}","type":"sriov-rdma","IPAM":{{"type":"host-local","DataDir":"{}"}}}}"#,
            data_dir.display()
        );
        NetConf::parse(raw.as_bytes(), &HashMap::new()).unwrap()
    }

    #[test]
    fn empty_host_local_leases_are_swept_under_its_lock_and_nothing_else() {
        let base = std::env::temp_dir().join(format!("sriov-rdma-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("net-a");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lock"), "").unwrap();
        std::fs::write(dir.join("10.99.1.27"), "").unwrap(); // a killed ADD's
        std::fs::write(dir.join("fd00::5"), "").unwrap(); // a killed ADD's, IPv6
        std::fs::write(dir.join("10.99.1.28"), "c2\r\nnet1").unwrap(); // held
        std::fs::write(dir.join("last_reserved_ip.0"), "").unwrap();
        std::fs::write(base.join("target"), "").unwrap();
        std::os::unix::fs::symlink(base.join("target"), dir.join("10.99.1.29")).unwrap();
        let conf = host_local_conf(&base, "net-a");

        // While another process holds host-local's lock, nothing is touched.
        let held = std::fs::File::open(dir.join("lock")).unwrap();
        held.lock().unwrap();
        let e = sweep_dir(&dir, std::time::Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("lock is held"), "{e}");
        assert!(dir.join("10.99.1.27").exists());
        held.unlock().unwrap();

        assert_eq!(sweep_dead_leases(&conf), vec!["10.99.1.27".to_string(), "fd00::5".to_string()]);
        for kept in ["10.99.1.28", "last_reserved_ip.0", "lock", "10.99.1.29"] {
            assert!(dir.join(kept).symlink_metadata().is_ok(), "{kept} removed");
        }
        assert!(base.join("target").exists());
        // Another network's directory, another IPAM, an unsafe name: nothing.
        assert!(sweep_dead_leases(&host_local_conf(&base, "net-b")).is_empty());
        let mut other = conf.clone();
        other.ipam = Some(crate::cni::config::Ipam { kind: "whereabouts".into() });
        assert_eq!(host_local_dir(&other), None);
        assert_eq!(host_local_dir(&host_local_conf(&base, "..")), None);
        let _ = std::fs::remove_dir_all(&base);
    }
}
