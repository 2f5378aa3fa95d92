//! Network namespaces: opened by path, entered only by a short-lived thread that opens a socket and returns.

use super::netlink::{Family, Socket};
use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;

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

    pub fn open(path: &str) -> io::Result<Netns> {
        Ok(Netns { file: File::open(Path::new(path))?, path: path.to_string() })
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs `f` on a thread that has entered this namespace; the calling thread never moves. A thread that
    /// cannot be started (address space, thread limit) is an error, not an abort.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        let fd = self.file.as_fd();
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("netns".into())
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
