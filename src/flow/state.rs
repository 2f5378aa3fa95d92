//! The attachment record: one file per VF, written before the first change and removed after the last undo.
//!
//! `/var/lib/cni/sriov-rdma/<pci>.json` (0600, directory 0700), plus `<pci>.lock` for the per-VF flock.
//! `SRIOV_RDMA_STATE_DIR` moves it (tests; read in context.rs only). The directory must be a real directory owned by this plugin's
//! user (any other mode is set back to 0700); no file in it is opened through a symlink, by an open that
//! can block (a FIFO), or at all unless it is a regular file.

use super::attachment::Attachment;
use crate::cni::error::{CniError, CniResult, Code, IoContext};
use crate::model::PciAddr;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_DIR: &str = "/var/lib/cni/sriov-rdma";
/// How long an ADD/DEL waits for another invocation on the same VF before answering "try again later".
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A record file that cannot be read (truncated by a power loss, hand-edited): its VF is neither free nor
/// restorable from it, so it is named with the way out and never guessed at.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    pub pci: PciAddr,
    pub path: PathBuf,
    pub error: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path.display();
        write!(
            f,
            "the attachment record {p} of VF {} cannot be read ({}): the VF cannot be restored from it nor handed \
             out; check the VF (its row in `ip link show` of its PF, whether its netdev is on the host), then move \
             the file aside (`mv {p} {p}.bad`)",
            self.pci, self.error
        )
    }
}

/// The writer's pid if `name` is one of the temp files this store creates (`.<pci>.json.<pid>`, `.status.<pid>`).
fn temp_writer(name: &str) -> Option<u32> {
    let (stem, pid) = name.strip_prefix('.')?.rsplit_once('.')?;
    let pid: u32 = pid.parse().ok().filter(|p| *p > 0)?;
    let ours = stem == "status" || stem.strip_suffix(".json").is_some_and(|p| PciAddr::parse(p).is_ok());
    ours.then_some(pid)
}

/// Whether a process with this pid exists (EPERM: it does, owned by someone else).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks for existence and permission.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

/// The user this plugin runs as (root under a runtime).
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

use super::record::{decode, encode};

pub struct Store {
    dir: PathBuf,
}

/// The per-VF lock; released when dropped.
pub struct VfLock {
    _file: File,
}

/// Opens a file of the state directory without following a symlink and without blocking (a FIFO), and
/// accepts only a regular file; `what` names it in errors. `None` when it does not exist.
fn open_regular(path: &Path, opts: &mut OpenOptions, what: &str) -> CniResult<Option<File>> {
    let f = match opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // ELOOP: the last component is a symlink; ENXIO: a FIFO (or socket) nobody reads.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_regular(path, what, "a symbolic link")),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(not_regular(path, what, "a FIFO or socket")),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => return Err(not_regular(path, what, "a directory")),
        Err(e) => return Err(CniError::io(format!("opening {what} {}: {e}", path.display()))),
    };
    let md = f.metadata().ctx(|| format!("inspecting {what} {}", path.display()))?;
    if !md.file_type().is_file() {
        return Err(not_regular(path, what, kind_of(&md)));
    }
    Ok(Some(f))
}

fn kind_of(md: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

fn not_regular(path: &Path, what: &str, seen: &str) -> CniError {
    CniError::io(format!(
        "{what} {} is not a regular file ({seen}); something other than this plugin put it there: remove it",
        path.display()
    ))
}

impl Store {
    /// The store of this host; temp files of writers that died (SIGKILL between write and rename) are removed.
    pub fn open(dir: &Path) -> CniResult<Store> {
        let store = Store::at(dir)?;
        store.remove_dead_temps();
        Ok(store)
    }

    /// Removes `.<pci>.json.<pid>` and `.status.<pid>` files whose writer is no longer alive. Best effort: a
    /// failure is logged, never fatal; a live process with that pid keeps its file.
    pub fn remove_dead_temps(&self) {
        let Ok(rd) = fs::read_dir(&self.dir) else { return };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(temp_writer) else { continue };
            if pid == std::process::id() || alive(pid) {
                continue;
            }
            let p = e.path();
            match fs::remove_file(&p) {
                Ok(()) => crate::info!("removed {}, left by process {pid} that died while writing it", p.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => crate::warn!("removing {} of dead process {pid}: {e}", p.display()),
            }
        }
    }

    /// The store as CHECK and `doctor` read it: nothing is created, no mode set, no temp file removed. A directory
    /// that does not exist holds no record; one that is no directory, a symlink or another user's is refused as
    /// [`Store::at`] refuses it, and a mode other than 0700 is only said.
    pub fn read_only(dir: &Path) -> CniResult<Store> {
        if fs::symlink_metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(Store { dir: dir.to_path_buf() });
        }
        Store::check(dir, false)
    }

    /// Creates the directory (0700) or checks the one that is there: a directory, not a symlink, owned by
    /// this plugin's user; any other mode is set to 0700. Anything else is refused, naming the directory.
    pub fn at(dir: &Path) -> CniResult<Store> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .ctx(|| format!("creating the state directory {}", dir.display()))?;
        Store::check(dir, true)
    }

    /// Checks the directory that is there; with `fix`, sets a mode other than 0700 to 0700.
    fn check(dir: &Path, fix: bool) -> CniResult<Store> {
        let refuse = |why: String| CniError::io(format!("state directory {}: {why}", dir.display()));
        let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(dir).map_err(
            |e| match e.raw_os_error() {
                // O_DIRECTORY | O_NOFOLLOW on a symlink answers ELOOP or ENOTDIR depending on the kernel.
                Some(libc::ELOOP | libc::ENOTDIR) if fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink()) => {
                    refuse("is a symbolic link; point SRIOV_RDMA_STATE_DIR at the real directory".into())
                }
                Some(libc::ENOTDIR) => refuse("is not a directory".into()),
                _ => refuse(format!("opening it: {e}")),
            },
        )?;
        let md = f.metadata().map_err(|e| refuse(format!("inspecting it: {e}")))?;
        let me = euid();
        if md.uid() != me {
            return Err(refuse(format!(
                "is owned by uid {}, not uid {me} that this plugin runs as; the attachment records must be private: \
                 remove it or give it to uid {me} with mode 0700",
                md.uid()
            )));
        }
        let mode = md.mode() & 0o7777;
        if mode != 0o700 && !fix {
            crate::warn!(
                "state directory {} has mode {mode:o}, not 0700 (left as it is: a read-only look)",
                dir.display()
            );
        } else if mode != 0o700 {
            f.set_permissions(fs::Permissions::from_mode(0o700))
                .map_err(|e| refuse(format!("setting its mode {mode:o} to 0700: {e}")))?;
            crate::warn!("state directory {} had mode {mode:o}; set it to 0700", dir.display());
        }
        Ok(Store { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, pci: &PciAddr) -> PathBuf {
        self.dir.join(format!("{pci}.json"))
    }

    fn lock_file(&self, pci: &PciAddr) -> CniResult<File> {
        let p = self.dir.join(format!("{pci}.lock"));
        open_regular(&p, OpenOptions::new().create(true).truncate(false).write(true).mode(0o600), "the lock")?
            .ok_or_else(|| CniError::io(format!("creating the lock {}: it vanished", p.display())))
    }

    /// Creates a new private file in the directory; a file already there under that name (a planted symlink,
    /// the leftover of a dead process with our pid) is removed first, never followed.
    fn create_private(&self, path: &Path) -> std::io::Result<File> {
        let create =
            || OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path);
        match create() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                fs::remove_file(path)?;
                create()
            }
            other => other,
        }
    }

    /// Whether a file can be created in the directory (STATUS).
    pub fn probe_writable(&self) -> std::io::Result<()> {
        let probe = self.dir.join(format!(".status.{}", std::process::id()));
        self.create_private(&probe)?;
        fs::remove_file(&probe)
    }

    /// Takes the VF's lock without waiting; `None` when another invocation holds it.
    pub fn try_lock(&self, pci: &PciAddr) -> CniResult<Option<VfLock>> {
        let f = self.lock_file(pci)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(VfLock { _file: f })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(CniError::io(format!("locking VF {pci}: {e}"))),
        }
    }

    /// Takes the VF's lock, waiting a bounded time; code 11 when it stays busy.
    pub fn lock(&self, pci: &PciAddr) -> CniResult<VfLock> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(l) = self.try_lock(pci)? {
                return Ok(l);
            }
            if start.elapsed() > LOCK_WAIT {
                return Err(CniError::new(
                    Code::TryAgainLater,
                    format!(
                        "VF {pci} is locked by another ADD/DEL for more than {}s; try again later",
                        LOCK_WAIT.as_secs()
                    ),
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    pub fn load(&self, pci: &PciAddr) -> CniResult<Option<Attachment>> {
        self.read(pci).map_err(|bad| CniError::io(bad.to_string()))
    }

    fn read(&self, pci: &PciAddr) -> Result<Option<Attachment>, Unreadable> {
        let p = self.path(pci);
        let bad = |error: String| Unreadable { pci: pci.clone(), path: p.clone(), error };
        let Some(mut f) =
            open_regular(&p, OpenOptions::new().read(true), "the attachment record").map_err(|e| bad(e.msg))?
        else {
            return Ok(None);
        };
        let mut b = Vec::new();
        f.read_to_end(&mut b).map_err(|e| bad(e.to_string()))?;
        decode(&b).map(Some).map_err(bad)
    }

    /// Writes the record atomically: a temp file, then rename.
    pub fn save(&self, a: &Attachment) -> CniResult<()> {
        self.write(a, false)
    }

    /// As [`Store::save`], with the file and the directory on disk before it returns: what a finished ADD reports
    /// success on (power lost after a rename of unsynced data leaves a zero-length record).
    pub fn save_durable(&self, a: &Attachment) -> CniResult<()> {
        self.write(a, true)
    }

    fn write(&self, a: &Attachment, durable: bool) -> CniResult<()> {
        let p = self.path(&a.pci);
        let tmp = self.dir.join(format!(".{}.json.{}", a.pci, std::process::id()));
        let body = encode(a).map_err(|e| CniError::io(format!("encoding the record: {e}")))?;
        let write = || -> std::io::Result<()> {
            let mut f = self.create_private(&tmp)?;
            f.write_all(&body)?;
            if durable {
                f.sync_all()?;
            }
            fs::rename(&tmp, &p)?;
            if durable {
                File::open(&self.dir)?.sync_all()?;
            }
            Ok(())
        };
        write().ctx(|| format!("writing the attachment record {}", p.display()))
    }

    pub fn remove(&self, pci: &PciAddr) -> CniResult<()> {
        match fs::remove_file(self.path(pci)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CniError::io(format!("removing the attachment record of {pci}: {e}")))
            }
            _ => Ok(()),
        }
    }

    /// Every record and every record file that cannot be read.
    fn scan(&self) -> CniResult<(Vec<Attachment>, Vec<Unreadable>)> {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        let rd = match fs::read_dir(&self.dir) {
            // A read-only store of a directory no ADD has created yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((good, bad)),
            r => r.ctx(|| format!("listing {}", self.dir.display()))?,
        };
        for e in rd {
            let Ok(e) = e else { continue };
            let name = e.file_name();
            let Some(pci) = name.to_str().and_then(|n| n.strip_suffix(".json")).and_then(|p| PciAddr::parse(p).ok())
            else {
                continue;
            };
            match self.read(&pci) {
                Ok(Some(a)) => good.push(a),
                Ok(None) => {}
                Err(u) => bad.push(u),
            }
        }
        Ok((good, bad))
    }

    /// Every record; a file that cannot be read is skipped with a warning, never fatal.
    pub fn all(&self) -> CniResult<Vec<Attachment>> {
        let (good, bad) = self.scan()?;
        for u in bad {
            crate::warn!("{u}");
        }
        Ok(good)
    }

    /// The record files that cannot be read (`gc` and `doctor` list them).
    pub fn unreadable(&self) -> Vec<Unreadable> {
        self.scan().map(|(_, bad)| bad).unwrap_or_default()
    }

    /// The record of one attachment, by the key the runtime uses.
    pub fn find(&self, network: &str, container_id: &str, ifname: &str) -> CniResult<Option<Attachment>> {
        Ok(self.all()?.into_iter().find(|a| a.is(network, container_id, ifname)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pci: &str) -> Attachment {
        let mut a = crate::flow::record::sample();
        a.pci = PciAddr::parse(pci).unwrap();
        a
    }

    fn store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        Store::at(&dir.join("state")).unwrap()
    }

    #[test]
    fn record_round_trips_with_private_permissions() {
        let s = store("rt");
        let a = record("0000:3b:02.1");
        s.save(&a).unwrap();
        assert_eq!(s.load(&a.pci).unwrap(), Some(a.clone()));
        assert_eq!(s.find("rdma-net", "c1", "net1").unwrap(), Some(a.clone()));
        assert_eq!(s.find("rdma-net", "c2", "net1").unwrap(), None);
        let mode = fs::metadata(s.dir().join("0000:3b:02.1.json")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mode = fs::metadata(s.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        s.remove(&a.pci).unwrap();
        s.remove(&a.pci).unwrap();
        assert_eq!(s.load(&a.pci).unwrap(), None);
    }

    #[test]
    fn a_held_lock_is_not_granted_twice() {
        let s = store("lock");
        let pci = PciAddr::parse("0000:3b:02.2").unwrap();
        let held = s.try_lock(&pci).unwrap();
        assert!(held.is_some());
        assert!(s.try_lock(&pci).unwrap().is_none());
        drop(held);
        assert!(s.try_lock(&pci).unwrap().is_some());
    }

    /// Runs `f` on a thread and fails the test if it does not finish in 5 s (an open that blocks on a FIFO).
    fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("{what} hung (blocked on a FIFO?)"))
    }

    fn mkfifo(p: &Path) {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_world_writable_state_dir_is_made_private_and_a_symlinked_one_refused() {
        let dir = fresh_dir("mode").join("state");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let s = Store::at(&dir).unwrap();
        assert_eq!(fs::metadata(s.dir()).unwrap().permissions().mode() & 0o7777, 0o700);
        // A symlink in place of the directory is refused, naming it.
        let link = dir.with_file_name("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = Store::at(&link).err().expect("a symlinked state directory is refused");
        assert!(e.msg.contains(&link.display().to_string()) && e.msg.contains("symbolic link"), "{}", e.msg);
        let _ = fs::remove_dir_all(dir.parent().unwrap());
    }

    /// Whether a test that needs root can run: as root, yes; otherwise it fails (a test that cannot run must not
    /// pass), unless SRIOV_RDMA_SKIP_ROOT_TESTS=1 asks to skip it, which it then says on stderr.
    fn root_or_skip(test: &str) -> bool {
        if euid() == 0 {
            return true;
        }
        if std::env::var("SRIOV_RDMA_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
            use std::io::Write;
            // Straight to stderr, past the test harness's capture.
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs root (SRIOV_RDMA_SKIP_ROOT_TESTS=1)");
            return false;
        }
        panic!("{test} needs root (to chown a directory to another user); run it as root, or set SRIOV_RDMA_SKIP_ROOT_TESTS=1 to skip it");
    }

    #[test]
    fn a_state_dir_owned_by_another_user_is_refused_and_left_alone() {
        if !root_or_skip("a_state_dir_owned_by_another_user_is_refused_and_left_alone") {
            return;
        }
        let other = fresh_dir("owner").join("other");
        fs::create_dir(&other).unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        let e = Store::at(&other).err().expect("a state directory owned by another user is refused");
        assert!(e.msg.contains(&other.display().to_string()) && e.msg.contains("owned by uid 65534"), "{}", e.msg);
        assert_eq!(fs::metadata(&other).unwrap().permissions().mode() & 0o7777, 0o777, "its mode is left alone");
        let _ = fs::remove_dir_all(other.parent().unwrap());
    }

    #[test]
    fn planted_symlinks_and_fifos_are_never_followed_nor_block() {
        let base = fresh_dir("plant");
        let s = Store::at(&base.join("state")).unwrap();
        let a = record("0000:3b:02.3");
        let outside = base.join("outside");
        // A dangling symlink where the temp record goes: the record is written, nothing outside the dir.
        let tmp = s.dir().join(format!(".{}.json.{}", a.pci, std::process::id()));
        std::os::unix::fs::symlink(&outside, &tmp).unwrap();
        s.save(&a).unwrap();
        assert!(!outside.exists(), "the temp record followed a planted symlink");
        assert_eq!(s.load(&a.pci).unwrap(), Some(a.clone()));
        // A dangling symlink as the lock: refused, naming the file; nothing created outside.
        let pci = PciAddr::parse("0000:3b:02.4").unwrap();
        std::os::unix::fs::symlink(&outside, s.dir().join(format!("{pci}.lock"))).unwrap();
        let e = s.try_lock(&pci).err().expect("a symlinked lock is refused");
        assert!(e.msg.contains(&format!("{pci}.lock")) && e.msg.contains("not a regular file"), "{}", e.msg);
        assert!(!outside.exists(), "the lock followed a planted symlink");
        // A symlink to a FIFO, and a FIFO, as the lock: refused without blocking.
        let fifo = base.join("fifo");
        mkfifo(&fifo);
        let pci5 = PciAddr::parse("0000:3b:02.5").unwrap();
        std::os::unix::fs::symlink(&fifo, s.dir().join(format!("{pci5}.lock"))).unwrap();
        let pci6 = PciAddr::parse("0000:3b:02.6").unwrap();
        mkfifo(&s.dir().join(format!("{pci6}.lock")));
        let dir = s.dir().to_path_buf();
        let (r5, r6) = bounded("locking through a FIFO", move || {
            let s = Store::at(&dir).unwrap();
            (s.lock(&pci5).err().map(|e| e.msg), s.lock(&pci6).err().map(|e| e.msg))
        });
        assert!(r5.is_some_and(|m| m.contains("not a regular file")));
        assert!(r6.is_some_and(|m| m.contains("not a regular file")));
        // A FIFO named like a record: that VF's record is refused, the others are still found.
        let pci7 = PciAddr::parse("0000:3b:02.7").unwrap();
        mkfifo(&s.dir().join(format!("{pci7}.json")));
        let dir = s.dir().to_path_buf();
        let (one, all) = bounded("reading a FIFO record", move || {
            let s = Store::at(&dir).unwrap();
            (s.load(&pci7).err().map(|e| e.msg), s.all().map(|v| v.len()))
        });
        assert!(one.is_some_and(|m| m.contains("not a regular file")));
        assert_eq!(all.unwrap(), 1, "the good record is still listed");
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn temp_files_of_dead_writers_are_removed_others_kept() {
        let s = store("dead");
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let names = [
            (format!(".0000:3b:02.1.json.{dead}"), false),
            (format!(".status.{dead}"), false),
            (format!(".0000:3b:02.1.json.{}", std::process::id()), true), // ours: create_private replaces it
            (".0000:3b:02.1.json.1".to_string(), true),                   // pid 1 is alive
            (format!(".notours.json.{dead}"), true),
            ("0000:3b:02.1.lock".to_string(), true),
        ];
        for (n, _) in &names {
            fs::write(s.dir().join(n), "x").unwrap();
        }
        s.remove_dead_temps();
        for (n, kept) in &names {
            assert_eq!(s.dir().join(n).exists(), *kept, "{n}");
        }
        assert_eq!(temp_writer(".0000:3b:02.1.json.42"), Some(42));
        assert_eq!(temp_writer(".0000:3b:02.1.json.x"), None);
        assert_eq!(temp_writer("0000:3b:02.1.json"), None);
    }
}
