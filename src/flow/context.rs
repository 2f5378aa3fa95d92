//! One context per invocation: where sysfs and the record store are (the only place the `SRIOV_RDMA_*` variables
//! are read), the host side built from them once (sysfs, the record store, the host namespace and a route socket
//! in it), the pod side; and how the VF's netdev is recognised on either, whatever it is called.

use super::attachment::Attachment;
use super::state::Store;
use crate::cni::error::{CniError, CniResult, Code, IoContext};
use crate::kernel::link::{Link, RouteSocket};
use crate::kernel::netlink::Route;
use crate::kernel::netns::Netns;
use crate::kernel::sysfs::{NotUsable, Sysfs};
use crate::kernel::vf::Pf;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where this invocation finds sysfs and keeps its records, and the node's own places a configuration cannot
/// move: the directory device-info files go in, the directory log files go in, the node policy, the kubelet's
/// device-plugin directory (its checkpoint says which pod the kubelet gave which VF). The defaults are
/// the node's; the variables exist for the tests, the benchmark and the host demo, which point the plugin at a
/// fixture tree and a scratch store (and for a node that keeps these elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub sysfs: PathBuf,
    pub state_dir: PathBuf,
    pub devinfo_dir: PathBuf,
    pub log_dir: PathBuf,
    pub policy: PathBuf,
    pub kubelet_dir: PathBuf,
    /// Multus's cache of each pod's delegates (its `cniDir`), read to see what the network chains after us.
    pub multus_dir: PathBuf,
    /// The CNI configuration directory (`cnitool`'s `NETCONFPATH`), read for the same.
    pub net_conf_dir: PathBuf,
}

impl Paths {
    pub const SYSFS_VAR: &'static str = "SRIOV_RDMA_SYSFS";
    pub const STATE_VAR: &'static str = "SRIOV_RDMA_STATE_DIR";
    pub const DEVINFO_VAR: &'static str = "SRIOV_RDMA_DEVINFO_DIR";
    pub const LOG_VAR: &'static str = "SRIOV_RDMA_LOG_DIR";
    pub const POLICY_VAR: &'static str = "SRIOV_RDMA_POLICY";
    /// The same variable, and meaning, as the device plugin's.
    pub const KUBELET_VAR: &'static str = "SRIOV_RDMA_KUBELET_DIR";
    /// The NPWG device-info directory (Multus reads the files there).
    pub const DEVINFO_DIR: &'static str = "/var/run/k8s.cni.cncf.io/devinfo";
    pub const LOG_DIR: &'static str = "/var/log/sriov-rdma";
    pub const MULTUS_VAR: &'static str = "SRIOV_RDMA_MULTUS_DIR";
    /// Multus's default `cniDir`.
    pub const MULTUS_DIR: &'static str = "/var/lib/cni/multus";
    /// libcni's and `cnitool`'s variable.
    pub const NET_CONF_VAR: &'static str = "NETCONFPATH";
    pub const NET_CONF_DIR: &'static str = "/etc/cni/net.d";

    /// Reads the `SRIOV_RDMA_*` variables through `get`; unset (or empty) means the node's.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Paths {
        let var = |k: &str| get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        Paths {
            sysfs: var(Self::SYSFS_VAR).unwrap_or_else(|| "/sys".into()),
            state_dir: var(Self::STATE_VAR).unwrap_or_else(|| super::state::DEFAULT_DIR.into()),
            devinfo_dir: var(Self::DEVINFO_VAR).unwrap_or_else(|| Self::DEVINFO_DIR.into()),
            log_dir: var(Self::LOG_VAR).unwrap_or_else(|| Self::LOG_DIR.into()),
            policy: var(Self::POLICY_VAR).unwrap_or_else(|| crate::policy::DEFAULT_PATH.into()),
            kubelet_dir: var(Self::KUBELET_VAR).unwrap_or_else(|| crate::kubelet::DEVICE_PLUGINS_DIR.into()),
            multus_dir: var(Self::MULTUS_VAR).unwrap_or_else(|| Self::MULTUS_DIR.into()),
            net_conf_dir: var(Self::NET_CONF_VAR).unwrap_or_else(|| Self::NET_CONF_DIR.into()),
        }
    }

    /// The same from this process's environment (the `doctor` and `gc` subcommands).
    pub fn of_process() -> Paths {
        Paths::from_env(|k| std::env::var(k).ok())
    }

    pub fn sysfs(&self) -> Sysfs {
        Sysfs::at(self.sysfs.clone())
    }

    pub fn store(&self) -> CniResult<Store> {
        Store::open(&self.state_dir)
    }

    /// The store for a command that only reads (CHECK, `doctor`): it changes nothing in the state directory.
    pub fn store_read_only(&self) -> CniResult<Store> {
        Store::read_only(&self.state_dir)
    }
}

/// How long the host waits for a VF netdev to reappear: from a destroyed pod namespace, or after a rebind.
pub(super) const RETURN_WAIT: Duration = Duration::from_secs(5);

/// The host side: sysfs, the record store, the host namespace and a route socket in it.
pub struct Host {
    pub sysfs: Sysfs,
    pub store: Store,
    pub ns: Netns,
    pub route: RouteSocket,
    /// Where device-info files may be written and removed.
    pub devinfo_dir: PathBuf,
}

impl Host {
    pub fn open(paths: &Paths) -> CniResult<Host> {
        Host::with_store(paths, paths.store()?)
    }

    /// The host side for a command that only reads (CHECK, `doctor`): the state directory is left as it is.
    pub fn open_read_only(paths: &Paths) -> CniResult<Host> {
        Host::with_store(paths, paths.store_read_only()?)
    }

    fn with_store(paths: &Paths, store: Store) -> CniResult<Host> {
        Ok(Host {
            sysfs: paths.sysfs(),
            store,
            ns: Netns::current().ctx(|| "opening the host network namespace".to_string())?,
            route: RouteSocket::new().ctx(|| "opening a netlink socket in the host namespace".to_string())?,
            devinfo_dir: paths.devinfo_dir.clone(),
        })
    }

    /// The PF netdev as netlink addresses it.
    pub fn pf(&mut self, name: &str) -> CniResult<Pf> {
        let link = self
            .route
            .link_by_name(name)
            .ctx(|| format!("looking up PF {name}"))?
            .ok_or_else(|| CniError::io(format!("PF {name} is not in the host namespace")))?;
        Ok(Pf { name: name.to_string(), index: link.index })
    }
}

/// A sysfs refusal as a CNI error naming what the configuration called the device (`deviceID 0000:3b:02.1`,
/// `pfName ens1f0`): code 7 when that is not an SR-IOV device at all, 5 when the host is in an unexpected state.
pub fn not_usable(named: impl std::fmt::Display, e: NotUsable) -> CniError {
    let code = if e.is_config() { Code::InvalidConfig } else { Code::Io };
    CniError::new(code, format!("{named}: {e}"))
}

/// Whether opening a pod namespace failed because there is none: its path is missing, or is no namespace file (a
/// plain file or directory left where one was mounted). Any other failure (`EACCES`, `EMFILE`) is not "gone".
pub fn netns_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput)
}

/// The pod namespace and a route socket opened inside it, or `None` when it is gone.
pub struct Pod {
    pub ns: Netns,
    pub route: RouteSocket,
}

impl Pod {
    pub fn open(path: &str) -> std::io::Result<Pod> {
        let ns = Netns::open(path)?;
        let route = ns.socket::<Route>()?;
        Ok(Pod { ns, route })
    }
}

/// Whether a link is this record's VF: by the PCI address the kernel reports as its parent; a stand-in without
/// one (a veth in the tests) only by the ifindex it had, so a device that merely took the name is never touched.
pub(super) fn is_ours(l: &Link, rec: &Attachment) -> bool {
    match &l.parent {
        Some(p) => p == rec.pci.as_str(),
        None => rec.netdev.as_ref().is_some_and(|n| n.index == l.index),
    }
}

/// The VF's netdev on the host: by `name`, else by what sysfs lists under its PCI address; polls up to `wait`
/// for it to appear (a destroyed namespace or a driver rebind hands it back asynchronously).
pub(super) fn find_host_netdev(
    host: &mut Host,
    rec: &Attachment,
    name: &str,
    wait: Duration,
) -> CniResult<Option<Link>> {
    find_host_netdev_in(&host.sysfs, &mut host.route, rec, name, wait)
}

/// [`find_host_netdev`] with the sysfs view and the host's route socket given apart (a caller without a [`Host`]).
pub fn find_host_netdev_in(
    sysfs: &Sysfs,
    route: &mut RouteSocket,
    rec: &Attachment,
    name: &str,
    wait: Duration,
) -> CniResult<Option<Link>> {
    let deadline = Instant::now() + wait;
    loop {
        let by_name = route.link_by_name(name).ctx(|| format!("looking up VF {} as {name}", rec.pci))?;
        if let Some(l) = by_name.filter(|l| is_ours(l, rec)) {
            return Ok(Some(l));
        }
        for n in sysfs.netdevs(&rec.pci) {
            let l = route.link_by_name(&n).ctx(|| format!("looking up VF {} as {n}", rec.pci))?;
            // sysfs lists the VF's own netdevs: a stand-in without a parent is taken on its word.
            if let Some(l) = l.filter(|l| l.parent.as_deref().is_none_or(|p| p == rec.pci.as_str())) {
                return Ok(Some(l));
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
