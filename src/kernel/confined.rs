//! A file a network configuration names (the device-info file, the log), kept inside a directory the node chose.
//! The path is checked by its words first (absolute, below the base, no `..`), then opened one component at a
//! time from the base with O_NOFOLLOW: a symbolic link anywhere below the base is refused, never followed, so
//! the file cannot end up outside it whatever the directories hold. The base itself is the node's and trusted
//! (`/var/run` is a link to `/run` on most hosts).

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

/// Directories made below the base (and the base itself when missing).
const DIR_MODE: u32 = 0o755;

/// A path below a base directory, as the components under the base (the last one names the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confined {
    base: PathBuf,
    below: Vec<OsString>,
}

/// A symbolic link met on the way: refused, with the path it was found at.
#[derive(Debug)]
pub struct SymlinkRefused(pub PathBuf);

impl std::fmt::Display for SymlinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is a symbolic link, which is never followed", self.0.display())
    }
}

impl std::error::Error for SymlinkRefused {}

/// Whether an error is a refused symbolic link (a configuration problem, not the host's).
pub fn is_symlink_refusal(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<SymlinkRefused>())
}

fn words(p: &Path) -> Result<Vec<OsString>, &'static str> {
    let mut out = Vec::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(s) => out.push(s.to_os_string()),
            Component::ParentDir => return Err("may not contain \"..\""),
            Component::Prefix(_) => return Err("is not a Unix path"),
        }
    }
    Ok(out)
}

impl Confined {
    /// `path` below `base`, by its words alone: why not, otherwise.
    pub fn new(base: &Path, path: &Path) -> Result<Confined, String> {
        if !path.is_absolute() {
            return Err("is not an absolute path".into());
        }
        let path_words = words(path).map_err(str::to_string)?;
        let base_words = words(base).map_err(|w| format!("the node's directory {} {w}", base.display()))?;
        let outside = || "is not inside the directory this node allows".to_string();
        if path_words.len() <= base_words.len() || path_words[..base_words.len()] != base_words[..] {
            return Err(outside());
        }
        Ok(Confined { base: base.to_path_buf(), below: path_words[base_words.len()..].to_vec() })
    }

    pub fn path(&self) -> PathBuf {
        self.below.iter().fold(self.base.clone(), |p, c| p.join(c))
    }

    fn name(&self) -> &OsString {
        &self.below[self.below.len() - 1]
    }

    fn at(&self, depth: usize) -> PathBuf {
        self.below[..depth].iter().fold(self.base.clone(), |p, c| p.join(c))
    }

    /// The first component below the base (the top directory, or the file itself when it sits in the base).
    pub fn top(&self) -> &OsString {
        &self.below[0]
    }

    /// The file's directory, walked from the base without following a link; `None` when a part is missing and
    /// `create` is false. With `create`, missing directories are made (the base too: it is the node's).
    fn dir(&self, create: bool) -> io::Result<Option<OwnedFd>> {
        self.walk(self.below.len() - 1, create)
    }

    /// The directory `depth` components below the base (0: the base), walked as [`Confined::dir`] walks.
    fn walk(&self, depth: usize, create: bool) -> io::Result<Option<OwnedFd>> {
        if create {
            std::fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(&self.base)?;
        }
        let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut dir = match nix::fcntl::open(&self.base, dir_flags, Mode::empty()) {
            Ok(d) => d,
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        for (i, c) in self.below[..depth].iter().enumerate() {
            let open = |d: &OwnedFd| openat(d, c.as_os_str(), dir_flags | OFlag::O_NOFOLLOW, Mode::empty());
            dir = match open(&dir) {
                Ok(d) => d,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&dir, c.as_os_str(), Mode::from_bits_truncate(DIR_MODE)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    open(&dir).map_err(|e| self.why(&dir, i + 1, e))?
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(self.why(&dir, i + 1, e)),
            };
        }
        Ok(Some(dir))
    }

    /// An open that failed at component `depth`: a link there is named as such.
    fn why(&self, dir: &OwnedFd, depth: usize, e: Errno) -> io::Error {
        if matches!(e, Errno::ELOOP | Errno::ENOTDIR) && self.is_link(dir, depth) {
            return io::Error::other(SymlinkRefused(self.at(depth)));
        }
        e.into()
    }

    fn is_link(&self, dir: &OwnedFd, depth: usize) -> bool {
        fstatat(dir, self.below[depth - 1].as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
    }

    fn open_file(&self, dir: &OwnedFd, flags: OFlag, mode: u32) -> io::Result<File> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(dir, self.name().as_os_str(), flags, Mode::from_bits_truncate(mode)) {
            Ok(fd) => Ok(File::from(fd)),
            Err(e) => Err(self.why(dir, self.below.len(), e)),
        }
    }

    /// Creates the file (and the directories to it), only if it does not exist yet; `None` when it does.
    pub fn create_new(&self, mode: u32) -> io::Result<Option<File>> {
        let dir = self.dir(true)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        match self.open_file(&dir, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL, mode) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !self.is_link(&dir, self.below.len()) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Err(io::Error::other(SymlinkRefused(self.path()))),
            Err(e) => Err(e),
        }
    }

    /// Opens the file for appending without blocking, creating it (and the directories to it) when missing.
    pub fn open_append(&self, mode: u32) -> io::Result<File> {
        let dir = self.dir(true)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        self.open_file(&dir, OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_APPEND | OFlag::O_NONBLOCK, mode)
    }

    /// The file's bytes; `None` when it (or a directory to it) does not exist, or a part of the way is a file.
    pub fn read(&self) -> io::Result<Option<Vec<u8>>> {
        let dir = match self.dir(false) {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut f = match self.open_file(&dir, OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
        }
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(Some(out))
    }

    /// Removes the file (a link there is removed as a link: never its target). One already gone is fine.
    pub fn remove(&self) -> io::Result<()> {
        let Some(dir) = self.dir(false)? else { return Ok(()) };
        match unlinkat(&dir, self.name().as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// How many of the file's directories below the base do not exist yet (what [`Confined::create_new`] would
    /// make), changing nothing; 0 when a part of the way is not a directory or is a link (the write fails then).
    pub fn missing_dirs(&self) -> usize {
        let dirs = self.below.len() - 1;
        for depth in 0..=dirs {
            match self.walk(depth, false) {
                Ok(Some(_)) => {}
                // Missing from here on (the base's own absence counts for none of them: it is the node's).
                Ok(None) => return dirs + 1 - depth.max(1),
                Err(_) => return 0,
            }
        }
        0
    }

    /// Removes the innermost `n` directories of the file's way (never the base), each only if empty and not a
    /// link: the ones ADD made. A missing one is skipped; one that is not empty (or is a link) ends the removal.
    pub fn remove_dirs(&self, n: usize) -> io::Result<()> {
        let dirs = self.below.len() - 1;
        for depth in (dirs.saturating_sub(n) + 1..=dirs).rev() {
            let Some(parent) = self.walk(depth - 1, false)? else { continue };
            match unlinkat(&parent, self.below[depth - 1].as_os_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                // Not empty, or not a directory (a link put there since): not what ADD made, and neither is the rest.
                Err(Errno::ENOTEMPTY | Errno::EEXIST | Errno::ENOTDIR) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Checks, changing nothing, that no part of the path that exists now is a symbolic link.
    pub fn no_symlink_yet(&self) -> io::Result<()> {
        let dir = match self.dir(false) {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(()),
            Err(e) if is_symlink_refusal(&e) => return Err(e),
            // A file where a directory should be: the write fails later, as any write would.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(()),
            Err(e) => return Err(e),
        };
        if self.is_link(&dir, self.below.len()) {
            return Err(io::Error::other(SymlinkRefused(self.path())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sriov-rdma-confined-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn only_paths_below_the_base_by_their_words() {
        let base = Path::new("/var/run/k8s.cni.cncf.io/devinfo");
        let ok = Confined::new(base, Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/x")).unwrap();
        assert_eq!(ok.path(), Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/x"));
        assert!(Confined::new(base, Path::new("/var/run/k8s.cni.cncf.io/devinfo//./x")).is_ok());
        for bad in [
            "/var/run/k8s.cni.cncf.io/devinfo",
            "/var/run/k8s.cni.cncf.io/devinfo/",
            "/var/run/k8s.cni.cncf.io/devinfo/../x",
            "/var/run/k8s.cni.cncf.io/devinfo2/x",
            "/etc/shadow",
            "devinfo/x",
        ] {
            assert!(Confined::new(base, Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn creates_below_the_base_and_never_through_a_link() {
        let d = scratch("walk");
        let base = d.join("base");
        let c = Confined::new(&base, &base.join("a/b/x")).unwrap();
        assert!(c.create_new(0o444).unwrap().is_some());
        assert!(c.create_new(0o444).unwrap().is_none(), "exists: left alone");
        assert_eq!(c.read().unwrap(), Some(Vec::new()));
        c.remove().unwrap();
        assert!(!base.join("a/b/x").exists());
        c.remove().unwrap();

        std::fs::create_dir(d.join("target")).unwrap();
        std::os::unix::fs::symlink(d.join("target"), base.join("l")).unwrap();
        std::os::unix::fs::symlink(d.join("target/f"), base.join("f")).unwrap();
        for p in ["l/x", "l/sub/x", "f"] {
            let c = Confined::new(&base, &base.join(p)).unwrap();
            let e = c.create_new(0o444).unwrap_err();
            assert!(is_symlink_refusal(&e), "{p}: {e}");
            assert!(is_symlink_refusal(&c.open_append(0o640).unwrap_err()), "{p}");
            assert!(is_symlink_refusal(&c.read().unwrap_err()), "{p}");
            assert!(is_symlink_refusal(&c.no_symlink_yet().unwrap_err()), "{p}");
        }
        assert_eq!(std::fs::read_dir(d.join("target")).unwrap().count(), 0);
        // The link itself is what remove takes away, not its target.
        std::fs::write(d.join("target/f"), "x").unwrap();
        Confined::new(&base, &base.join("f")).unwrap().remove().unwrap();
        assert!(d.join("target/f").exists() && !base.join("f").exists());
        Confined::new(&base, &base.join("new/x")).unwrap().no_symlink_yet().unwrap();
        assert!(!base.join("new").exists(), "a check makes nothing");

        // The directories a write would make, counted; removed innermost first, only while empty, never the base.
        let deep = Confined::new(&base, &base.join("a/n1/n2/x")).unwrap();
        assert_eq!(deep.missing_dirs(), 2, "a exists, n1 and n2 do not");
        assert_eq!(Confined::new(&d, &d.join("gone/b/x")).unwrap().missing_dirs(), 2);
        assert_eq!(Confined::new(&base, &base.join("l/x")).unwrap().missing_dirs(), 0, "a link: none");
        deep.create_new(0o444).unwrap();
        std::fs::write(base.join("a/n1/keep"), "").unwrap();
        deep.remove().unwrap();
        deep.remove_dirs(5).unwrap();
        assert!(!base.join("a/n1/n2").exists() && base.join("a/n1/keep").exists(), "stops at a non-empty one");
        std::fs::remove_file(base.join("a/n1/keep")).unwrap();
        deep.remove_dirs(5).unwrap();
        assert!(!base.join("a/n1").exists() && base.join("a/b").is_dir(), "a was there before: holds b");
        Confined::new(&base, &base.join("a/b/x")).unwrap().remove_dirs(9).unwrap();
        assert!(!base.join("a").exists() && base.is_dir(), "never the base");
        deep.remove_dirs(2).unwrap();
        Confined::new(&base, &base.join("l/x")).unwrap().remove_dirs(1).unwrap();
        assert!(base.join("l").is_symlink() && d.join("target").is_dir(), "a link is not a directory ADD made");
        let _ = std::fs::remove_dir_all(&d);
    }
}
