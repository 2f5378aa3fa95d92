//! Network namespaces: opened by path, entered only by a short-lived thread that opens a socket and returns.

use super::netlink::{Family, Socket};
use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;

/// The stack of a namespace thread: it opens a socket or reads a few sysfs files.
const THREAD_STACK: usize = 512 * 1024;
/// What a new thread needs beyond its stack (its TLS, glibc's bookkeeping, the spawn's own allocations).
const THREAD_HEADROOM: usize = 1024 * 1024;

/// Fails when the address space (RLIMIT_AS) has no room for a thread. Past a successful stack mmap, the
/// allocations of a starting thread abort the process when they fail (glibc: "failed to register TLS
/// destructor"; Rust: "memory allocation failed"), so the room is checked first, where it is an error.
fn room_for_a_thread() -> io::Result<()> {
    let len = THREAD_STACK + THREAD_HEADROOM;
    // SAFETY: a fresh anonymous PROT_NONE mapping, unmapped right away; nothing refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        libc::munmap(p, len);
    }
    Ok(())
}

/// An open handle on a network namespace.
pub struct Netns {
    file: File,
    pub path: String,
}

impl Netns {
    /// The namespace this process runs in (the host's, for a CNI plugin).
    pub fn current() -> io::Result<Netns> {
        Ok(Netns { file: File::open("/proc/thread-self/ns/net")?, path: "host".to_string() })
    }

    /// Opens a namespace file (`/var/run/netns/X`, `/proc/PID/ns/net`). The open never blocks (a FIFO), and
    /// anything but a namespace file is refused before it is used.
    pub fn open(path: &str) -> io::Result<Netns> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(Path::new(path))?;
        let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: the fd is open and `fs` is a writable statfs buffer.
        if unsafe { libc::fstatfs(file.as_raw_fd(), fs.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatfs succeeded and filled it.
        let kind = unsafe { fs.assume_init() }.f_type;
        // nsfs since Linux 3.19; /proc before that.
        if kind != libc::NSFS_MAGIC && kind != libc::PROC_SUPER_MAGIC {
            let what = match file.metadata() {
                Ok(m) if m.file_type().is_dir() => "a directory",
                Ok(m) if std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()) => "a FIFO",
                Ok(m) if m.file_type().is_file() => "a regular file",
                _ => "not a namespace file",
            };
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a network namespace ({what}, not an nsfs file)"),
            ));
        }
        Ok(Netns { file, path: path.to_string() })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs `f` on a thread that has entered this namespace; the calling thread never moves. A thread that
    /// cannot be started (address space, thread limit) is an error, not an abort.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        let fd = self.file.as_fd();
        room_for_a_thread().map_err(|e| {
            io::Error::new(e.kind(), format!("no memory left to start a thread to enter {}: {e}", self.path))
        })?;
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("netns".into())
                .stack_size(THREAD_STACK)
                .spawn_scoped(s, move || {
                    setns(fd, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                    f()
                })
                .map_err(|e| io::Error::new(e.kind(), format!("starting a thread to enter {}: {e}", self.path)))?
                .join()
                .map_err(|_| io::Error::other(format!("the thread entering {} panicked", self.path)))?
        })
    }

    /// A netlink socket that lives in this namespace, usable from any thread.
    pub fn socket<F: Family>(&self) -> io::Result<Socket<F>> {
        self.run(Socket::<F>::new)
    }
}
