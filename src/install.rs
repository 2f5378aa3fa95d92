//! `sriov-rdma install`: puts the running binary and the device plugin's binary beside it (and optionally a CNI
//! network config and the node policy) onto a node.
//!
//! Meant as the entrypoint of the installer image, run by a DaemonSet with the host's CNI bin dir mounted at
//! `/host/opt/cni/bin`. Every file is replaced atomically: a temp file in the same directory (`O_EXCL`), written
//! and fsynced, renamed over the old one, then the directory fsynced. A runtime running ADD on the node keeps
//! executing whichever complete binary it opened; it never sees a half-written one. The same content is not
//! rewritten. The installed copy must then run (`sriov-rdma --version`). `sriov-rdma-device-plugin`, when it is
//! beside the running binary (the image has both), goes next to the plugin the same way and must say the same
//! version: `sriov-rdma doctor` on the node runs it from there. With `--sleep` the process then waits
//! for SIGTERM, so the DaemonSet's one container stays up and every restart or upgrade reinstalls.
//! Logs go to stderr only; stdout stays empty.

use crate::cni::config::NetConf;
use serde_json::Value;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// The name the runtime looks the plugin up by (`"type": "sriov-rdma"`).
pub const BIN_NAME: &str = "sriov-rdma";
/// The device plugin's binary, installed beside the plugin (doctor looks for it next to itself).
pub const DEVICE_PLUGIN_NAME: &str = "sriov-rdma-device-plugin";
/// CNI bin dir default: the host's dir as the DaemonSet mounts it, else the standard path (running on the host).
pub const HOST_BIN_DIR: &str = "/host/opt/cni/bin";
pub const BIN_DIR: &str = "/opt/cni/bin";
/// CNI conf dir default, the same way.
pub const HOST_CONF_DIR: &str = "/host/etc/cni/net.d";
pub const CONF_DIR: &str = "/etc/cni/net.d";
/// Node policy dir default, the same way; the file is always named `policy.json` there.
pub const HOST_POLICY_DIR: &str = "/host/etc/sriov-rdma";
/// Temp files of an interrupted install older than this are removed by the next one.
const STALE: Duration = Duration::from_secs(600);

const USAGE: &str = concat!(
    "usage: sriov-rdma install [--cni-bin-dir DIR] [--conflist FILE [--cni-conf-dir DIR]]\n",
    "                          [--policy FILE [--policy-dir DIR]] [--sleep]\n",
    "  --cni-bin-dir DIR    where the plugin goes, with sriov-rdma-device-plugin if it is beside this binary\n",
    "                       (default /host/opt/cni/bin if it exists, else /opt/cni/bin)\n",
    "  --conflist FILE      also install this network config (checked by the plugin's own parser)\n",
    "  --cni-conf-dir DIR   where the config goes (default /host/etc/cni/net.d if it exists, else /etc/cni/net.d)\n",
    "  --policy FILE        also install this node policy as policy.json (checked by the plugin's own parser;\n",
    "                       a FILE that does not exist installs nothing)\n",
    "  --policy-dir DIR     where it goes (default /host/etc/sriov-rdma if it exists, else /etc/sriov-rdma)\n",
    "  --sleep              after installing, stay up until SIGTERM (the DaemonSet's main container)\n",
);

/// What went wrong, saying what was being done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn ctx<T>(r: io::Result<T>, what: impl FnOnce() -> String) -> Result<T, Error> {
    r.map_err(|e| Error(format!("{}: {e}", what())))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The file was (re)placed.
    Written,
    /// It already had this content and mode; not touched.
    Unchanged,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub bin_dir: PathBuf,
    pub conflist: Option<PathBuf>,
    pub conf_dir: PathBuf,
    pub policy: Option<PathBuf>,
    pub policy_dir: PathBuf,
    pub sleep: bool,
}

fn default_dir(host: &str, plain: &str) -> PathBuf {
    if Path::new(host).is_dir() {
        PathBuf::from(host)
    } else {
        PathBuf::from(plain)
    }
}

/// Parses the arguments after `install`; `Ok(None)` for `--help`.
pub fn parse_args(args: &[String]) -> Result<Option<Options>, Error> {
    let mut bin_dir = None;
    let mut conflist = None;
    let mut conf_dir = None;
    let mut policy = None;
    let mut policy_dir = None;
    let mut sleep = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |slot: &mut Option<PathBuf>| -> Result<(), Error> {
            let v = match inline.clone().or_else(|| it.next().cloned()) {
                Some(v) if !v.is_empty() => v,
                _ => return Err(Error(format!("{flag} needs a path"))),
            };
            *slot = Some(PathBuf::from(v));
            Ok(())
        };
        match flag {
            "--cni-bin-dir" => value(&mut bin_dir)?,
            "--conflist" => value(&mut conflist)?,
            "--cni-conf-dir" => value(&mut conf_dir)?,
            "--policy" => value(&mut policy)?,
            "--policy-dir" => value(&mut policy_dir)?,
            "--sleep" if inline.is_some() => return Err(Error("--sleep takes no value".into())),
            "--sleep" => sleep = true,
            "--help" | "-h" => return Ok(None),
            other => return Err(Error(format!("unknown argument {other:?}"))),
        }
    }
    if conf_dir.is_some() && conflist.is_none() {
        return Err(Error("--cni-conf-dir without --conflist: there is no config to install".into()));
    }
    if policy_dir.is_some() && policy.is_none() {
        return Err(Error("--policy-dir without --policy: there is no policy to install".into()));
    }
    Ok(Some(Options {
        bin_dir: bin_dir.unwrap_or_else(|| default_dir(HOST_BIN_DIR, BIN_DIR)),
        conflist,
        conf_dir: conf_dir.unwrap_or_else(|| default_dir(HOST_CONF_DIR, CONF_DIR)),
        policy,
        policy_dir: policy_dir.unwrap_or_else(|| default_dir(HOST_POLICY_DIR, crate::policy::DIR)),
        sleep,
    }))
}

/// Does `path` hold exactly `content` with permission bits `mode`? A missing file does not.
fn same(path: &Path, content: &[u8], mode: u32) -> io::Result<bool> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let m = f.metadata()?;
    if !m.is_file() || m.len() != content.len() as u64 || m.permissions().mode() & 0o7777 != mode {
        return Ok(false);
    }
    let mut have = Vec::with_capacity(content.len());
    f.read_to_end(&mut have)?;
    Ok(have == content)
}

fn tmp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Removes temp files of `name` left in `dir` by an install that died more than [`STALE`] ago; a younger one
/// may belong to an install running right now (another container on this node) and is left alone.
fn remove_stale(dir: &Path, name: &str) {
    let prefix = tmp_prefix(name);
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > STALE);
        if old {
            match fs::remove_file(e.path()) {
                Ok(()) => {
                    eprintln!("sriov-rdma install: removed {} left by an interrupted install", e.path().display())
                }
                Err(err) => eprintln!("sriov-rdma install: removing stale {}: {err}", e.path().display()),
            }
        }
    }
}

/// Creates a new temp file next to the target: `O_CREAT|O_EXCL`, so an existing file is never reused.
fn create_tmp(dir: &Path, name: &str, mode: u32) -> Result<(PathBuf, File), Error> {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    create_tmp_at(dir, name, mode, nanos)
}

fn create_tmp_at(dir: &Path, name: &str, mode: u32, stamp: u32) -> Result<(PathBuf, File), Error> {
    for n in 0..100u32 {
        let p = dir.join(format!("{}{}-{stamp:09}-{n}", tmp_prefix(name), std::process::id()));
        match OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_CLOEXEC).open(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error(format!("creating a temporary file in {}: {e}", dir.display()))),
        }
    }
    Err(Error(format!("creating a temporary file in {}: 100 names taken", dir.display())))
}

/// Puts `content` at `dir/name` with permission bits `mode` so that a reader (or an exec) sees the old file or
/// the new one, never a part: temp file in `dir` (O_EXCL), write, fsync, rename over `name`, fsync `dir`.
/// The same content and mode already there: nothing is written.
pub fn put_atomic(dir: &Path, name: &str, content: &[u8], mode: u32) -> Result<Outcome, Error> {
    put_atomic_with(dir, name, content, mode, |f, c| f.write_all(c))
}

fn put_atomic_with(
    dir: &Path,
    name: &str,
    content: &[u8],
    mode: u32,
    write: impl FnOnce(&mut File, &[u8]) -> io::Result<()>,
) -> Result<Outcome, Error> {
    let target = dir.join(name);
    let d = ctx(File::open(dir), || format!("opening directory {}", dir.display()))?;
    if !ctx(d.metadata(), || format!("reading {}", dir.display()))?.is_dir() {
        return Err(Error(format!("{} is not a directory", dir.display())));
    }
    if ctx(same(&target, content, mode), || format!("comparing with {}", target.display()))? {
        return Ok(Outcome::Unchanged);
    }
    remove_stale(dir, name);
    let (tmp, mut f) = create_tmp(dir, name, mode)?;
    let done = (|| {
        // The mode given to open() is reduced by the umask; the file must end up exactly `mode`.
        ctx(f.set_permissions(fs::Permissions::from_mode(mode)), || {
            format!("setting mode {mode:o} on {}", tmp.display())
        })?;
        ctx(write(&mut f, content), || format!("writing {}", tmp.display()))?;
        ctx(f.sync_all(), || format!("syncing {}", tmp.display()))?;
        drop(f);
        ctx(fs::rename(&tmp, &target), || format!("renaming {} to {}", tmp.display(), target.display()))
    })();
    if let Err(e) = done {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    ctx(d.sync_all(), || format!("syncing directory {} after replacing {name}", dir.display()))?;
    Ok(Outcome::Written)
}

/// The line `--version` prints, as this binary prints it.
pub fn version_line() -> String {
    format!(
        "sriov-rdma {} (commit {}; CNI {})",
        env!("CARGO_PKG_VERSION"),
        crate::COMMIT,
        crate::cni::config::SUPPORTED_VERSIONS.join(", ")
    )
}

/// The line `sriov-rdma-device-plugin --version` prints for the build of this version and commit.
pub fn device_plugin_version_line() -> String {
    format!("{DEVICE_PLUGIN_NAME} {} (commit {})", env!("CARGO_PKG_VERSION"), crate::COMMIT)
}

/// Runs the installed copy with `--version` (clean environment) and checks that it is this version.
pub fn verify(bin: &Path) -> Result<String, Error> {
    verify_says(bin, &version_line())
}

/// Runs `bin --version` (clean environment) and checks that it prints `want`.
fn verify_says(bin: &Path, want: &str) -> Result<String, Error> {
    let run = || Command::new(bin).arg("--version").env_clear().stdin(Stdio::null()).output();
    let mut out = run();
    // ETXTBSY: a process forked elsewhere (another thread of the caller) still held the new file's write fd
    // for the instant before its exec closed it. Bounded retries.
    for _ in 0..50 {
        match &out {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                out = run();
            }
            _ => break,
        }
    }
    let out = ctx(out, || format!("running the installed {} --version", bin.display()))?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error(format!(
            "the installed {} --version failed ({}): {}",
            bin.display(),
            out.status,
            err.trim()
        )));
    }
    if said != want {
        return Err(Error(format!(
            "the installed {} says {said:?}, expected {want:?}: not this build, or something replaced it meanwhile",
            bin.display()
        )));
    }
    Ok(said)
}

/// Checks a network config file the way a runtime will hand it to the plugin: a `.conflist` (or a single
/// `.conf`/`.json` config) whose every `sriov-rdma` plugin passes the plugin's own config parser, with the
/// list's `cniVersion` and `name` given to each, as libcni does. Returns how many such plugins it has (≥ 1).
pub fn check_netconf(raw: &[u8]) -> Result<usize, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| format!("not JSON: {e}"))?;
    let one = |plugin: &Value| -> Result<(), String> {
        NetConf::parse(plugin.to_string().as_bytes(), &HashMap::new()).map(|_| ()).map_err(|e| e.msg)
    };
    let mut n = 0;
    match v.get("plugins") {
        Some(Value::Array(plugins)) => {
            for key in ["cniVersion", "name"] {
                if !v[key].is_string() {
                    return Err(format!("a conflist needs a string {key:?}"));
                }
            }
            for (i, p) in plugins.iter().enumerate() {
                if p["type"] != BIN_NAME {
                    continue;
                }
                let mut p = p.clone();
                p["cniVersion"] = v["cniVersion"].clone();
                p["name"] = v["name"].clone();
                one(&p).map_err(|e| format!("plugins[{i}]: {e}"))?;
                n += 1;
            }
        }
        Some(_) => return Err("\"plugins\" must be an array".into()),
        None if v["type"] == BIN_NAME => {
            one(&v)?;
            n = 1;
        }
        None => {}
    }
    if n == 0 {
        return Err(format!("no plugin of type {BIN_NAME:?} in it"));
    }
    Ok(n)
}

fn is_dir(p: &Path, what: &str) -> Result<(), Error> {
    match fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error(format!("{what} {} is not a directory", p.display()))),
        Err(e) => Err(Error(format!("{what} {}: {e}", p.display()))),
    }
}

fn say(msg: impl std::fmt::Display) {
    eprintln!("sriov-rdma install: {msg}");
}

/// Installs what `o` says, `exe` being the running binary; logs each step to stderr.
pub fn install(o: &Options, exe: &Path) -> Result<(), Error> {
    let bin = ctx(fs::read(exe), || format!("reading the running binary {}", exe.display()))?;
    is_dir(&o.bin_dir, "the CNI bin dir")
        .map_err(|e| Error(format!("{e}; mount the host's /opt/cni/bin at {HOST_BIN_DIR} or give --cni-bin-dir")))?;
    let target = o.bin_dir.join(BIN_NAME);
    match put_atomic(&o.bin_dir, BIN_NAME, &bin, 0o755) {
        Ok(Outcome::Written) => say(format_args!("installed {} ({} bytes)", target.display(), bin.len())),
        Ok(Outcome::Unchanged) => {
            say(format_args!("{} is already this binary ({} bytes): left as is", target.display(), bin.len()))
        }
        Err(e) => return Err(Error(format!("installing {}: {e}", target.display()))),
    }
    drop(bin);
    let v = verify(&target)?;
    say(format_args!("{} runs: {v}", target.display()));
    install_device_plugin(exe, &o.bin_dir)?;
    if let Some(src) = &o.conflist {
        let raw = ctx(fs::read(src), || format!("reading the network config {}", src.display()))?;
        let name = match src.file_name().and_then(|n| n.to_str()) {
            Some(n) if [".conflist", ".conf", ".json"].iter().any(|x| n.ends_with(x)) => n.to_string(),
            _ => {
                return Err(Error(format!(
                    "the network config {}: a runtime only reads *.conflist, *.conf and *.json",
                    src.display()
                )))
            }
        };
        check_netconf(&raw).map_err(|e| Error(format!("the network config {}: {e}", src.display())))?;
        is_dir(&o.conf_dir, "the CNI conf dir")?;
        put_file(&o.conf_dir, &name, &raw, "config")?;
    }
    if let Some(src) = &o.policy {
        install_policy(src, &o.policy_dir)?;
    }
    Ok(())
}

/// Installs `sriov-rdma-device-plugin` from beside `exe` (the running binary; /proc/self/exe is resolved) into
/// `bin_dir` atomically, then checks that the copy says this build's version. Not beside it (a plugin built
/// alone): said, and nothing installed.
fn install_device_plugin(exe: &Path, bin_dir: &Path) -> Result<(), Error> {
    let real = fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let src = real.with_file_name(DEVICE_PLUGIN_NAME);
    let raw = match fs::read(&src) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            say(format_args!(
                "no {DEVICE_PLUGIN_NAME} beside {}: not installed (sriov-rdma doctor then looks for it on PATH)",
                real.display()
            ));
            return Ok(());
        }
        r => ctx(r, || format!("reading {}", src.display()))?,
    };
    let target = bin_dir.join(DEVICE_PLUGIN_NAME);
    match put_atomic(bin_dir, DEVICE_PLUGIN_NAME, &raw, 0o755) {
        Ok(Outcome::Written) => say(format_args!("installed {} ({} bytes)", target.display(), raw.len())),
        Ok(Outcome::Unchanged) => {
            say(format_args!("{} is already this binary ({} bytes): left as is", target.display(), raw.len()))
        }
        Err(e) => return Err(Error(format!("installing {}: {e}", target.display()))),
    }
    drop(raw);
    let v = verify_says(&target, &device_plugin_version_line())?;
    say(format_args!("{} runs: {v}", target.display()));
    Ok(())
}

/// Installs the node policy `src` into `dir` as policy.json once the plugin's own parser takes it; a `src` that
/// does not exist installs nothing (`Ok(false)`). Also run by the device plugin when the file changes.
pub fn install_policy(src: &Path, dir: &Path) -> Result<bool, Error> {
    let raw = match fs::read(src) {
        // The DaemonSet mounts the policy's ConfigMap as optional: without it the node's own stays as it is.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            say(format_args!("no node policy at {}: the node's policy, if any, left as it is", src.display()));
            return Ok(false);
        }
        r => ctx(r, || format!("reading the node policy {}", src.display()))?,
    };
    // Checked as the plugin will read it: a malformed policy would refuse every ADD on the node.
    crate::policy::Policy::parse(src, &raw).map_err(|e| Error(e.msg))?;
    is_dir(dir, "the node policy dir")?;
    put_file(dir, crate::policy::FILE_NAME, &raw, "policy")?;
    Ok(true)
}

/// Installs a file readable by all (mode 0644) and says what happened.
fn put_file(dir: &Path, name: &str, raw: &[u8], what: &str) -> Result<(), Error> {
    let target = dir.join(name);
    match put_atomic(dir, name, raw, 0o644) {
        Ok(Outcome::Written) => say(format_args!("installed {}", target.display())),
        Ok(Outcome::Unchanged) => say(format_args!("{} is already this {what}: left as is", target.display())),
        Err(e) => return Err(Error(format!("installing {}: {e}", target.display()))),
    }
    Ok(())
}

/// Blocks SIGTERM and SIGINT and waits for one. Blocked signals are queued even for PID 1 of a container,
/// which ignores signals it has no handler for.
fn wait_for_term() -> Result<nix::sys::signal::Signal, Error> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(|e| Error(format!("blocking SIGTERM: {e}")))?;
    set.wait().map_err(|e| Error(format!("waiting for SIGTERM: {e}")))
}

/// `sriov-rdma install ARGS`: the exit status (0 done, 1 failed, 2 bad arguments).
pub fn main(args: &[String]) -> i32 {
    let o = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return 0;
        }
        Err(e) => {
            eprint!("sriov-rdma install: {e}\n{USAGE}");
            return 2;
        }
    };
    if let Err(e) = install(&o, Path::new("/proc/self/exe")) {
        say(format_args!("failed: {e}"));
        return 1;
    }
    if !o.sleep {
        return 0;
    }
    say("done; staying up until SIGTERM");
    match wait_for_term() {
        Ok(sig) => {
            say(format_args!("{sig}: exiting"));
            0
        }
        Err(e) => {
            say(format_args!("failed: {e}"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("sriov-rdma-install-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        fn names(&self) -> Vec<String> {
            let mut v: Vec<String> =
                fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            v
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn writes_a_new_file_with_the_mode_and_leaves_no_temp() {
        let d = Dir::new("new");
        assert_eq!(put_atomic(&d.0, "sriov-rdma", b"v1", 0o755), Ok(Outcome::Written));
        assert_eq!(fs::read(d.0.join("sriov-rdma")).unwrap(), b"v1");
        assert_eq!(mode(&d.0.join("sriov-rdma")), 0o755);
        assert_eq!(d.names(), ["sriov-rdma"]);
    }

    #[test]
    fn the_same_content_is_not_rewritten() {
        let d = Dir::new("same");
        let p = d.0.join("sriov-rdma");
        put_atomic(&d.0, "sriov-rdma", b"binary", 0o755).unwrap();
        let before = fs::metadata(&p).unwrap();
        assert_eq!(put_atomic(&d.0, "sriov-rdma", b"binary", 0o755), Ok(Outcome::Unchanged));
        let after = fs::metadata(&p).unwrap();
        assert_eq!(
            (before.ino(), before.mtime(), before.mtime_nsec()),
            (after.ino(), after.mtime(), after.mtime_nsec())
        );
        // Same length, other bytes: rewritten.
        assert_eq!(put_atomic(&d.0, "sriov-rdma", b"BINARY", 0o755), Ok(Outcome::Written));
        assert_eq!(fs::read(&p).unwrap(), b"BINARY");
    }

    #[test]
    fn same_content_with_another_mode_is_replaced() {
        let d = Dir::new("mode");
        let p = d.0.join("sriov-rdma");
        fs::write(&p, b"binary").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(put_atomic(&d.0, "sriov-rdma", b"binary", 0o755), Ok(Outcome::Written));
        assert_eq!(mode(&p), 0o755);
    }

    #[test]
    fn replacing_is_a_rename_so_an_open_old_file_keeps_its_content() {
        let d = Dir::new("open");
        let p = d.0.join("sriov-rdma");
        put_atomic(&d.0, "sriov-rdma", b"old binary", 0o755).unwrap();
        let ino = fs::metadata(&p).unwrap().ino();
        let mut held = File::open(&p).unwrap();
        assert_eq!(put_atomic(&d.0, "sriov-rdma", b"new binary, longer", 0o755), Ok(Outcome::Written));
        assert_ne!(fs::metadata(&p).unwrap().ino(), ino, "a new inode, not the old one written in place");
        let mut s = String::new();
        held.read_to_string(&mut s).unwrap();
        assert_eq!(s, "old binary");
        assert_eq!(fs::read(&p).unwrap(), b"new binary, longer");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp() {
        let d = Dir::new("fail");
        let p = d.0.join("sriov-rdma");
        put_atomic(&d.0, "sriov-rdma", b"old", 0o755).unwrap();
        let e = put_atomic_with(&d.0, "sriov-rdma", b"new content", 0o755, |f, c| {
            f.write_all(&c[..3])?;
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        })
        .unwrap_err();
        assert!(e.0.starts_with("writing ") && e.0.contains(".sriov-rdma.tmp-"), "{e}");
        assert!(e.0.contains("No space left on device"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(d.names(), ["sriov-rdma"]);
    }

    #[test]
    fn an_existing_temp_name_is_never_reused() {
        let d = Dir::new("excl");
        // The first two names this call would try are taken by someone else's files.
        let taken = |n: u32| d.0.join(format!(".x.tmp-{}-000000042-{n}", std::process::id()));
        for n in 0..2 {
            fs::write(taken(n), b"someone else's").unwrap();
        }
        let (p, mut f) = create_tmp_at(&d.0, "x", 0o600, 42).unwrap();
        assert_eq!(p, taken(2));
        f.write_all(b"mine").unwrap();
        for n in 0..2 {
            assert_eq!(fs::read(taken(n)).unwrap(), b"someone else's");
        }
        assert_eq!(fs::read(&p).unwrap(), b"mine");
    }

    #[test]
    fn stale_temps_are_removed_and_fresh_ones_kept() {
        let d = Dir::new("stale");
        let old = d.0.join(".sriov-rdma.tmp-1-000000000-0");
        let fresh = d.0.join(".sriov-rdma.tmp-2-000000000-0");
        let other = d.0.join(".host-local.tmp-1-000000000-0");
        for p in [&old, &fresh, &other] {
            fs::write(p, b"half").unwrap();
        }
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        for p in [&old, &other] {
            File::options().write(true).open(p).unwrap().set_modified(long_ago).unwrap();
        }
        put_atomic(&d.0, "sriov-rdma", b"bin", 0o755).unwrap();
        assert_eq!(d.names(), [".host-local.tmp-1-000000000-0", ".sriov-rdma.tmp-2-000000000-0", "sriov-rdma"]);
    }

    #[test]
    fn errors_say_what_was_being_done() {
        let d = Dir::new("err");
        let missing = d.0.join("nope");
        let e = put_atomic(&missing, "sriov-rdma", b"x", 0o755).unwrap_err();
        assert_eq!(e.0, format!("opening directory {}: No such file or directory (os error 2)", missing.display()));
        fs::write(d.0.join("file"), b"").unwrap();
        let e = put_atomic(&d.0.join("file"), "sriov-rdma", b"x", 0o755).unwrap_err();
        assert!(e.0.ends_with("is not a directory"), "{e}");
        fs::create_dir(d.0.join("sriov-rdma")).unwrap();
        let e = put_atomic(&d.0, "sriov-rdma", b"x", 0o755).unwrap_err();
        assert!(e.0.starts_with("renaming ") && e.0.contains("Is a directory"), "{e}");
        assert_eq!(d.names(), ["file", "sriov-rdma"], "no temp left behind");
    }

    #[test]
    fn arguments() {
        let a = |v: &[&str]| parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = a(&["--cni-bin-dir", "/b", "--conflist=/c/10-x.conflist", "--cni-conf-dir", "/n", "--sleep"])
            .unwrap()
            .unwrap();
        assert_eq!(
            o,
            Options {
                bin_dir: "/b".into(),
                conflist: Some("/c/10-x.conflist".into()),
                conf_dir: "/n".into(),
                policy: None,
                policy_dir: default_dir(HOST_POLICY_DIR, crate::policy::DIR),
                sleep: true
            }
        );
        let o = a(&[]).unwrap().unwrap();
        assert_eq!((o.conflist, o.sleep), (None, false));
        assert_eq!(o.bin_dir, default_dir(HOST_BIN_DIR, BIN_DIR));
        assert_eq!(a(&["--help"]), Ok(None));
        assert_eq!(a(&["--cni-bin-dir"]).unwrap_err().0, "--cni-bin-dir needs a path");
        assert_eq!(a(&["--cni-bin-dir="]).unwrap_err().0, "--cni-bin-dir needs a path");
        assert_eq!(a(&["--sleep=1"]).unwrap_err().0, "--sleep takes no value");
        assert_eq!(a(&["/opt/cni/bin"]).unwrap_err().0, "unknown argument \"/opt/cni/bin\"");
        assert!(a(&["--cni-conf-dir", "/n"]).unwrap_err().0.contains("without --conflist"));
        let o = a(&["--policy", "/c/policy.json", "--policy-dir=/p"]).unwrap().unwrap();
        assert_eq!((o.policy, o.policy_dir), (Some("/c/policy.json".into()), "/p".into()));
        assert!(a(&["--policy-dir", "/p"]).unwrap_err().0.contains("without --policy"));
    }

    #[test]
    fn network_configs_are_checked_by_the_plugin_parser() {
        let list = |p: &str| format!(r#"{{"cniVersion":"1.0.0","name":"n","plugins":[{p}]}}"#);
        assert_eq!(check_netconf(list(r#"{"type":"sriov-rdma","pfName":"ens1f0"}"#).as_bytes()), Ok(1));
        assert_eq!(
            check_netconf(
                list(r#"{"type":"sriov-rdma"},{"type":"tuning"},{"type":"sriov-rdma","mtu":9000}"#).as_bytes()
            ),
            Ok(2)
        );
        let e = check_netconf(list(r#"{"type":"tuning"},{"type":"sriov-rdma","vlan":5000}"#).as_bytes()).unwrap_err();
        assert!(e.starts_with("plugins[1]: ") && e.contains("vlan") && e.contains("5000"), "{e}");
        assert!(check_netconf(list(r#"{"type":"tuning"}"#).as_bytes()).unwrap_err().contains("no plugin"));
        assert!(check_netconf(br#"{"plugins":[]}"#).unwrap_err().contains("cniVersion"));
        assert!(check_netconf(b"{").unwrap_err().starts_with("not JSON"));
        assert_eq!(check_netconf(br#"{"cniVersion":"1.0.0","name":"n","type":"sriov-rdma"}"#), Ok(1));
        assert!(check_netconf(br#"{"cniVersion":"9.9.9","name":"n","type":"sriov-rdma"}"#).is_err());
    }

    #[test]
    fn the_device_plugin_beside_the_binary_is_installed_beside_the_plugin_and_version_checked() {
        let d = Dir::new("dp");
        let src = d.0.join("src");
        fs::create_dir(&src).unwrap();
        let script = |p: &Path, line: &str| {
            fs::write(p, format!("#!/bin/sh\necho '{line}'\n")).unwrap();
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        };
        let exe = src.join("sriov-rdma");
        script(&exe, &version_line());
        let bin = d.0.join("bin");
        fs::create_dir(&bin).unwrap();
        let o = Options {
            bin_dir: bin.clone(),
            conflist: None,
            conf_dir: d.0.clone(),
            policy: None,
            policy_dir: d.0.clone(),
            sleep: false,
        };
        let names = || {
            let mut v: Vec<String> =
                fs::read_dir(&bin).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        // Not beside it: the plugin alone.
        install(&o, &exe).unwrap();
        assert_eq!(names(), ["sriov-rdma"]);
        // Beside it: installed next to the plugin, 0755, byte for byte, once.
        let dp = src.join(DEVICE_PLUGIN_NAME);
        script(&dp, &device_plugin_version_line());
        install(&o, &exe).unwrap();
        assert_eq!(names(), ["sriov-rdma", DEVICE_PLUGIN_NAME]);
        let target = bin.join(DEVICE_PLUGIN_NAME);
        assert_eq!(fs::read(&target).unwrap(), fs::read(&dp).unwrap());
        assert_eq!(mode(&target), 0o755);
        let ino = fs::metadata(&target).unwrap().ino();
        install(&o, &exe).unwrap();
        assert_eq!(fs::metadata(&target).unwrap().ino(), ino, "the same binary is not rewritten");
        // Another build beside it (another version or commit) is refused by its --version.
        script(&dp, "sriov-rdma-device-plugin 0.0.1 (commit 0000000)");
        let e = install(&o, &exe).unwrap_err();
        assert!(
            e.0.contains(&target.display().to_string()) && e.0.contains("says \"sriov-rdma-device-plugin 0.0.1"),
            "{e}"
        );
        assert_eq!(names(), ["sriov-rdma", DEVICE_PLUGIN_NAME], "no temp file left");
    }

    #[test]
    fn install_copies_the_binary_and_the_config_and_is_idempotent() {
        // A stand-in for the running binary: a script that answers --version like this one.
        let d = Dir::new("all");
        let src = d.0.join("src");
        fs::create_dir(&src).unwrap();
        let exe = src.join("exe");
        fs::write(&exe, format!("#!/bin/sh\necho '{}'\n", version_line())).unwrap();
        let conf = src.join("10-sriov-rdma.conflist");
        fs::write(&conf, r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"sriov-rdma"}]}"#).unwrap();
        let (bin, net) = (d.0.join("bin"), d.0.join("net.d"));
        fs::create_dir(&bin).unwrap();
        fs::create_dir(&net).unwrap();
        let policy = src.join("policy.json");
        fs::write(&policy, r#"{"pfs":["ens1f0"],"namespaces":{"a":{"vlans":["100-199"]}}}"#).unwrap();
        let pol = d.0.join("etc-sriov-rdma");
        fs::create_dir(&pol).unwrap();
        let o = Options {
            bin_dir: bin.clone(),
            conflist: Some(conf.clone()),
            conf_dir: net.clone(),
            policy: Some(policy.clone()),
            policy_dir: pol.clone(),
            sleep: false,
        };
        install(&o, &exe).unwrap();
        assert_eq!(fs::read(bin.join("sriov-rdma")).unwrap(), fs::read(&exe).unwrap());
        assert_eq!(mode(&bin.join("sriov-rdma")), 0o755);
        assert_eq!(fs::read(net.join("10-sriov-rdma.conflist")).unwrap(), fs::read(&conf).unwrap());
        assert_eq!(mode(&net.join("10-sriov-rdma.conflist")), 0o644);
        assert_eq!(fs::read(pol.join("policy.json")).unwrap(), fs::read(&policy).unwrap());
        assert_eq!(mode(&pol.join("policy.json")), 0o644);
        let ino = fs::metadata(bin.join("sriov-rdma")).unwrap().ino();
        install(&o, &exe).unwrap();
        assert_eq!(fs::metadata(bin.join("sriov-rdma")).unwrap().ino(), ino);

        // An installed copy that does not say this version is an error, and a bad config is not installed.
        fs::write(&exe, "#!/bin/sh\necho 'sriov-rdma 0.0.1'\n").unwrap();
        let e = install(&o, &exe).unwrap_err();
        assert!(e.0.contains("says \"sriov-rdma 0.0.1\""), "{e}");
        fs::write(&exe, format!("#!/bin/sh\necho '{}'\n", version_line())).unwrap();
        let good = fs::read(&conf).unwrap();
        fs::write(&conf, r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"sriov-rdma","mtu":1}]}"#).unwrap();
        let e = install(&o, &exe).unwrap_err();
        assert!(e.0.starts_with(&format!("the network config {}: ", conf.display())) && e.0.contains("mtu"), "{e}");
        assert_eq!(fs::read(net.join("10-sriov-rdma.conflist")).unwrap(), good, "the old config stays");
        // A malformed policy is not installed: the one there stays.
        fs::write(&conf, &good).unwrap();
        let good_policy = fs::read(&policy).unwrap();
        fs::write(&policy, r#"{"namepsaces":{}}"#).unwrap();
        let e = install(&o, &exe).unwrap_err();
        assert!(e.0.contains(&policy.display().to_string()) && e.0.contains("namepsaces"), "{e}");
        assert_eq!(fs::read(pol.join("policy.json")).unwrap(), good_policy, "the old policy stays");
        fs::write(&policy, &good_policy).unwrap();
        // No policy given (the ConfigMap not created): the installed one is left as it is.
        install(&Options { policy: Some(src.join("absent.json")), ..o.clone() }, &exe).unwrap();
        assert_eq!(fs::read(pol.join("policy.json")).unwrap(), good_policy);
        let missing = Options { bin_dir: d.0.join("nope"), conflist: None, ..o.clone() };
        let e = install(&missing, &exe).unwrap_err();
        assert!(e.0.starts_with("the CNI bin dir ") && e.0.contains("No such file or directory"), "{e}");
        fs::write(&conf, &good).unwrap();
        let missing = Options { conf_dir: d.0.join("nope"), ..o };
        let e = install(&missing, &exe).unwrap_err();
        assert!(e.0.starts_with("the CNI conf dir ") && e.0.contains("No such file or directory"), "{e}");
    }
}
