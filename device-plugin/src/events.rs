//! The one source of "something changed" for the daemon's loop, so that it reads the node only when the kernel or
//! a file says so: a NETLINK_ROUTE socket for link events of the PF and VF netdevs, a NETLINK_KOBJECT_UEVENT socket
//! for devices that come, go or change driver (pci, infiniband, net), and inotify on the directories whose files
//! the daemon follows (config and node policy, the kubelet's device plugin directory, the CNI's state directory).
//! Each source is a thread blocked in one read: nothing runs while nothing happens.

use sriov_rdma_cni::{debug, warn};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// What changed, as far as the daemon cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A link event of a known PF or VF netdev: re-read link and RDMA port state.
    Links,
    /// A device came, went or was bound to another driver (or events were lost): scan the node again.
    Devices,
    /// Something in the config's or the node policy's directory: read those files again.
    Files,
    /// An attachment record of the CNI was written or removed.
    State,
    /// Something in the kubelet's device plugin directory: its socket (a restart), the checkpoint, our sockets.
    Kubelet,
}

/// The changes gathered over one debounce window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub links: bool,
    pub devices: bool,
    pub files: bool,
    pub state: bool,
    pub kubelet: bool,
}

impl Changes {
    pub fn add(&mut self, c: Change) {
        match c {
            Change::Links => self.links = true,
            Change::Devices => self.devices = true,
            Change::Files => self.files = true,
            Change::State => self.state = true,
            Change::Kubelet => self.kubelet = true,
        }
    }
}

/// The directories followed with inotify, and what a change in each means.
#[derive(Debug, Clone, Default)]
pub struct Dirs {
    pub watched: Vec<(PathBuf, Change)>,
}

/// The running sources. Dropping it leaves the threads blocked in their reads until the process ends.
pub struct Events {
    rx: mpsc::UnboundedReceiver<Change>,
    netdevs: Arc<RwLock<HashSet<String>>>,
    inotify: Option<Arc<Inotify>>,
}

impl Events {
    /// Starts every source it can; one that cannot be opened is said once and left to the daemon's slow polls.
    pub fn start(dirs: &Dirs) -> Events {
        let (tx, rx) = mpsc::unbounded_channel();
        let netdevs = Arc::new(RwLock::new(HashSet::new()));
        if let Err(e) = spawn_links(tx.clone(), netdevs.clone()) {
            warn!("listening for link events (netlink): {e}; link state is read every --poll-ms only");
        }
        if let Err(e) = spawn_uevents(tx.clone()) {
            warn!("listening for device events (uevents): {e}; the node is scanned every --full-poll-ms only");
        }
        let inotify = match Inotify::new() {
            Ok(i) => {
                let i = Arc::new(i);
                for (dir, kind) in &dirs.watched {
                    i.watch(dir, *kind);
                }
                let reader = i.clone();
                match std::thread::Builder::new().name("inotify".into()).spawn(move || reader.run(&tx)) {
                    Ok(_) => Some(i),
                    Err(e) => {
                        warn!("starting the file watch: {e}; files are read every --poll-ms only");
                        None
                    }
                }
            }
            Err(e) => {
                warn!("inotify_init1: {e}; files are read every --poll-ms only");
                None
            }
        };
        Events { rx, netdevs, inotify }
    }

    /// The netdevs whose link events count (the PFs' and VFs' of the last scan).
    pub fn set_netdevs(&self, names: Vec<String>) {
        *self.netdevs.write().unwrap_or_else(|e| e.into_inner()) = names.into_iter().collect();
    }

    /// The next change; `None` once every source has stopped. Cancel-safe.
    pub async fn recv(&mut self) -> Option<Change> {
        self.rx.recv().await
    }

    /// Adds to `c` what else arrives within `window` (a burst of events is one change).
    pub async fn gather(&mut self, window: Duration, c: &mut Changes) {
        let end = tokio::time::Instant::now() + window;
        while let Ok(Some(k)) = tokio::time::timeout_at(end, self.rx.recv()).await {
            c.add(k);
        }
    }

    /// Watches again a directory whose watch could not be set or went away (created later, or replaced).
    pub fn rewatch(&self) {
        if let Some(i) = &self.inotify {
            i.rewatch();
        }
    }
}

/// Link events (RTMGRP_LINK) of the known netdevs.
fn spawn_links(tx: mpsc::UnboundedSender<Change>, netdevs: Arc<RwLock<HashSet<String>>>) -> std::io::Result<()> {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
    use netlink_packet_route::link::LinkAttribute;
    use netlink_packet_route::RouteNetlinkMessage;
    let mut sock = netlink_sys::Socket::new(netlink_sys::constants::NETLINK_ROUTE)?;
    sock.bind(&netlink_sys::SocketAddr::new(0, libc::RTMGRP_LINK as u32))?;
    std::thread::Builder::new().name("link-events".into()).spawn(move || loop {
        let data = match sock.recv_from_full() {
            Ok((d, _)) => d,
            // ENOBUFS: the kernel dropped events; what they said is unknown, so look at everything.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                if tx.send(Change::Devices).is_err() {
                    return;
                }
                continue;
            }
            Err(e) => return warn!("reading link events: {e}; link state is read every --poll-ms only"),
        };
        let mut relevant = false;
        for raw in messages(&data) {
            let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(raw) else { continue };
            let (NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link))
            | NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(link))) = msg.payload
            else {
                continue;
            };
            let known = netdevs.read().unwrap_or_else(|e| e.into_inner());
            relevant |= link.attributes.iter().any(|a| matches!(a, LinkAttribute::IfName(n) if known.contains(n)));
        }
        if relevant && tx.send(Change::Links).is_err() {
            return;
        }
    })?;
    Ok(())
}

/// The netlink messages of one datagram.
fn messages(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let head = data.get(off..off + 4)?;
        let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let raw = data.get(off..off + len).filter(|_| len >= 16)?;
        off += (len + 3) & !3;
        Some(raw)
    })
}

/// Kernel uevents of the subsystems whose devices the inventory lists.
fn spawn_uevents(tx: mpsc::UnboundedSender<Change>) -> std::io::Result<()> {
    let mut sock = netlink_sys::Socket::new(netlink_sys::constants::NETLINK_KOBJECT_UEVENT)?;
    // Group 1: the kernel's own events (udev re-broadcasts on group 2).
    sock.bind(&netlink_sys::SocketAddr::new(0, 1))?;
    std::thread::Builder::new().name("uevents".into()).spawn(move || loop {
        match sock.recv_from_full() {
            Ok((data, from)) => {
                if from.port_number() == 0 && uevent_matters(&data) && tx.send(Change::Devices).is_err() {
                    return;
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                if tx.send(Change::Devices).is_err() {
                    return;
                }
            }
            Err(e) => return warn!("reading device events: {e}; the node is scanned every --full-poll-ms only"),
        }
    })?;
    Ok(())
}

/// A uevent (`action@devpath\0KEY=value\0…`) of a PCI function, an RDMA device or its character devices, or a
/// netdev of a device (a virtual netdev, a pod's veth, is none of the inventory's).
pub fn uevent_matters(data: &[u8]) -> bool {
    let mut subsystem = None;
    let mut devpath = None;
    for field in data.split(|b| *b == 0) {
        if let Some(v) = field.strip_prefix(b"SUBSYSTEM=") {
            subsystem = Some(v);
        } else if let Some(v) = field.strip_prefix(b"DEVPATH=") {
            devpath = Some(v);
        }
    }
    match subsystem {
        Some(b"pci") => true,
        Some(s) if s.starts_with(b"infiniband") => true,
        Some(b"net") => devpath.is_some_and(|p| !p.starts_with(b"/devices/virtual/")),
        _ => false,
    }
}

/// One inotify instance and its watches, re-added when a directory is created or replaced.
struct Inotify {
    fd: i32,
    /// Watch descriptor → what its events mean.
    active: Mutex<HashMap<i32, (PathBuf, Change)>>,
    /// Every directory asked for, watched or not (yet).
    wanted: Mutex<Vec<(PathBuf, Change)>>,
}

const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

impl Inotify {
    fn new() -> std::io::Result<Inotify> {
        // SAFETY: a plain system call; the descriptor is owned by this value from here on.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Inotify { fd, active: Mutex::default(), wanted: Mutex::default() })
    }

    fn watch(&self, dir: &Path, kind: Change) {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner()).push((dir.to_path_buf(), kind));
        if let Err(e) = self.add(dir, kind) {
            debug!("watching {}: {e}; tried again at each --poll-ms", dir.display());
        }
    }

    fn add(&self, dir: &Path, kind: Change) -> std::io::Result<()> {
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let wd = unsafe { libc::inotify_add_watch(self.fd, c.as_ptr(), MASK) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.active.lock().unwrap_or_else(|e| e.into_inner()).insert(wd, (dir.to_path_buf(), kind));
        Ok(())
    }

    fn rewatch(&self) {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (dir, kind) in wanted {
            let watched = self.active.lock().unwrap_or_else(|e| e.into_inner()).values().any(|(d, _)| *d == dir);
            if !watched && self.add(&dir, kind).is_ok() {
                debug!("watching {} again", dir.display());
            }
        }
    }

    fn run(&self, tx: &mpsc::UnboundedSender<Change>) {
        // Room for many events with names up to NAME_MAX; aligned for inotify_event.
        let mut buf = vec![0u64; 4096];
        loop {
            // SAFETY: reads into `buf`, whose length in bytes is passed.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len() * 8) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return warn!("reading file events (inotify): {e}; files are read every --poll-ms only");
            }
            // SAFETY: the kernel wrote `n` bytes into `buf`.
            let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut off = 0;
            let head = std::mem::size_of::<libc::inotify_event>();
            while off + head <= bytes.len() {
                let field = |at: usize| {
                    u32::from_ne_bytes([bytes[off + at], bytes[off + at + 1], bytes[off + at + 2], bytes[off + at + 3]])
                };
                let (wd, mask, len) = (field(0) as i32, field(4), field(12) as usize);
                off += head + len;
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    // Lost events: every file may have changed.
                    for k in [Change::Files, Change::State, Change::Kubelet] {
                        let _ = tx.send(k);
                    }
                    continue;
                }
                let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
                let Some((_, kind)) = active.get(&wd).cloned() else { continue };
                if mask & libc::IN_IGNORED != 0 {
                    // The directory went (or was replaced): watched again by the next rewatch.
                    active.remove(&wd);
                }
                drop(active);
                if tx.send(kind).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uevents_of_pci_rdma_and_device_netdevs_count_a_veth_does_not() {
        let ev = |s: &str| uevent_matters(s.replace(';', "\0").as_bytes());
        assert!(ev(
            "add@/devices/pci0000:3a/0000:3b:00.2;ACTION=add;DEVPATH=/devices/pci0000:3a/0000:3b:00.2;SUBSYSTEM=pci"
        ));
        assert!(ev(
            "add@/devices/x/infiniband/mlx5_2;ACTION=add;DEVPATH=/devices/x/infiniband/mlx5_2;SUBSYSTEM=infiniband"
        ));
        assert!(ev("add@/x;ACTION=add;DEVPATH=/devices/x/infiniband_verbs/uverbs2;SUBSYSTEM=infiniband_verbs"));
        assert!(ev("move@/x;ACTION=move;DEVPATH=/devices/pci0000:3a/0000:3b:00.2/net/ens1f0v0;SUBSYSTEM=net"));
        assert!(!ev("add@/x;ACTION=add;DEVPATH=/devices/virtual/net/veth1a2b;SUBSYSTEM=net"));
        assert!(!ev("add@/x;ACTION=add;DEVPATH=/devices/virtual/block/loop3;SUBSYSTEM=block"));
    }

    #[test]
    fn a_file_written_in_a_watched_directory_is_one_change_of_its_kind() {
        let dir = std::env::temp_dir().join(format!("sriov-rdma-dp-inotify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dirs = Dirs { watched: vec![(dir.join("state"), Change::State), (dir.join("later"), Change::Files)] };
            let mut ev = Events::start(&dirs);
            std::fs::write(dir.join("state/0000:3b:00.2.json"), b"{}").unwrap();
            let got = tokio::time::timeout(Duration::from_secs(5), ev.recv()).await.expect("an event within 5 s");
            assert_eq!(got, Some(Change::State));
            let mut c = Changes::default();
            ev.gather(Duration::from_millis(150), &mut c).await;
            // A directory that did not exist at start is watched once rewatch finds it.
            std::fs::create_dir_all(dir.join("later")).unwrap();
            ev.rewatch();
            std::fs::write(dir.join("later/config.json"), b"{}").unwrap();
            let got = tokio::time::timeout(Duration::from_secs(5), ev.recv()).await.expect("an event within 5 s");
            assert_eq!(got, Some(Change::Files));
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
