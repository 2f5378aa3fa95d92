//! ADD and DEL as one journal of reversible steps. Each [`Step`] has its apply (ADD's half) and its undo (DEL's
//! half) side by side below.
//!
//! ADD writes a step into the attachment record before it applies it ([`Apply::run`]); rollback, DEL and GC undo
//! the steps the record lists, newest first ([`unwind`]). An undo finds out for itself what there is to undo (a
//! setting the PF already shows at its original value, a device the pod no longer has, a file that is not there),
//! so a step that was written but never applied, because ADD was killed between the two, undoes cleanly, and so
//! does a step undone twice.

use super::context::{find_host_netdev, Host, Pod, RETURN_WAIT};
use super::ipam::{self, Target};
use super::netdev;
use super::rdma::{self, Found};
use super::state::Attachment;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Failures, IoContext};
use crate::kernel::confined::{is_symlink_refusal, Confined};
use crate::kernel::link::Link;
use crate::kernel::rdma::RdmaSocket;
use crate::kernel::vf::{self, guid_str, NetlinkPf, Pf, PfControl, VfSetting, VfState};
use crate::model::{Mac, VlanProto};
use netlink_packet_route::link::LinkAttribute;
use std::path::PathBuf;
use std::time::Duration;

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// A PF-side setting in the words of the configuration keys, so an error names the key the user wrote. Here, not
/// in the kernel layer, which speaks no configuration.
impl std::fmt::Display for VfSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VfSetting::Mac(m) => write!(f, "mac {m}"),
            VfSetting::Vlan { vlan, qos, proto: VlanProto::Dot1Ad } => {
                write!(f, "vlanProto 802.1ad (vlan {vlan}, vlanQoS {qos})")
            }
            VfSetting::Vlan { vlan, qos, .. } => write!(f, "vlan {vlan} (vlanQoS {qos})"),
            VfSetting::SpoofChk(b) => write!(f, "spoofchk {}", on_off(*b)),
            VfSetting::Trust(b) => write!(f, "trust {}", on_off(*b)),
            VfSetting::LinkState(s) => write!(f, "link_state {}", format!("{s:?}").to_lowercase()),
            VfSetting::Rate { min, max } => write!(f, "min_tx_rate {min} / max_tx_rate {max}"),
            VfSetting::Guid { node, port } if node == port => write!(f, "infinibandGUID {}", guid_str(*node)),
            VfSetting::Guid { node, port } => {
                write!(f, "infinibandGUID node {} port {}", guid_str(*node), guid_str(*port))
            }
        }
    }
}

/// One reversible change ADD makes, in the order ADD makes them.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A PF-side setting of the VF: VLAN, spoofchk, trust, link state, TX rate.
    PfSetting(VfSetting),
    /// The admin MAC, set on the PF and carried by the VF's netdev.
    AdminMac(Mac),
    /// The InfiniBand node and port GUID; mlx5 applies one only when the VF's driver is bound again.
    IbGuid { node: u64, port: u64 },
    /// The VF's RDMA device into the pod (before the netdev, which it may be bound to).
    RdmaIn(Found),
    /// The netdev into the pod under CNI_IFNAME, its MTU set, up.
    NetdevIn,
    /// IPAM ADD: an address for the pod. Its addresses and routes live on the netdev in the pod and leave with it.
    Ipam,
    /// The NPWG device-info file (not begun when the file is there already: someone else's).
    DeviceInfo(PathBuf),
}

impl Step {
    /// The configured PF settings as steps, in the order ADD applies them: the plain settings, then the admin MAC
    /// (so that its undo, which has the VF change its own MAC, runs before trust is restored), then the GUID.
    pub fn plan(settings: &[VfSetting]) -> Vec<Step> {
        let mut out: Vec<Step> = settings
            .iter()
            .filter(|s| !matches!(s, VfSetting::Mac(_) | VfSetting::Guid { .. }))
            .cloned()
            .map(Step::PfSetting)
            .collect();
        out.extend(settings.iter().filter_map(|s| match s {
            VfSetting::Mac(m) => Some(Step::AdminMac(*m)),
            _ => None,
        }));
        out.extend(settings.iter().filter_map(|s| match s {
            VfSetting::Guid { node, port } => Some(Step::IbGuid { node: *node, port: *port }),
            _ => None,
        }));
        out
    }

    /// What the step does, in a few words (logs, `doctor`).
    pub fn describe(&self) -> String {
        match self {
            Step::PfSetting(s) => format!("{s} on the PF"),
            Step::AdminMac(m) => format!("admin MAC {m}"),
            Step::IbGuid { node, .. } => format!("InfiniBand GUID {}", guid_str(*node)),
            Step::RdmaIn(d) => format!("RDMA device {} into the pod", d.name),
            Step::NetdevIn => "netdev into the pod".into(),
            Step::Ipam => "IPAM".into(),
            Step::DeviceInfo(p) => format!("device-info file {}", p.display()),
        }
    }

    /// The PF-side setting this step makes, if it makes one.
    pub fn pf_setting(&self) -> Option<VfSetting> {
        match self {
            Step::PfSetting(s) => Some(s.clone()),
            Step::AdminMac(m) => Some(VfSetting::Mac(*m)),
            Step::IbGuid { node, port } => Some(VfSetting::Guid { node: *node, port: *port }),
            _ => None,
        }
    }

    /// ADD's half.
    fn apply(&self, cx: &mut Apply) -> CniResult<()> {
        match self {
            Step::PfSetting(s) => cx.set_on_pf(s),
            Step::AdminMac(mac) => {
                cx.set_on_pf(&VfSetting::Mac(*mac))?;
                netdev::take_admin_mac(cx.host, &mut cx.rec, *mac)
            }
            Step::IbGuid { node, port } => {
                cx.set_on_pf(&VfSetting::Guid { node: *node, port: *port })?;
                if cx.rec.driver.as_deref() == Some("mlx5_core") {
                    cx.refresh_after_rebind()?;
                }
                Ok(())
            }
            Step::RdmaIn(dev) => {
                let Some(sock) = cx.rdma_sock.as_mut() else { return Ok(()) };
                let moved = rdma::move_in(sock, cx.conf.rdma, dev, cx.pod.ns.fd(), &cx.env.netns)?;
                if let Some(r) = cx.rec.rdma.as_mut() {
                    r.moved = moved;
                }
                Ok(())
            }
            Step::NetdevIn => cx.move_into_pod(),
            Step::Ipam => {
                let target = Target::of_env(cx.env);
                cx.ipam = if ipam::can_overlap(cx.conf) {
                    // Runs while the kernel moves the netdev (mostly an RCU wait); waited for by ipam_output.
                    match ipam::spawn(cx.conf, cx.env, "ADD", &target)? {
                        Some(p) => Ipam::Pending(p),
                        None => Ipam::Done(Ok(Vec::new())),
                    }
                } else {
                    Ipam::Done(ipam::exec(cx.conf, cx.env, "ADD", &target))
                };
                Ok(())
            }
            Step::DeviceInfo(path) => {
                let dev = cx.rec.rdma.as_ref().map(|r| r.device.name.as_str());
                rdma::write_device_info(&cx.host.devinfo_dir, path, &cx.rec.pci, &cx.rec.pf_pci, dev)
                    .ctx(|| format!("writing the device-info file {}", path.display()))?;
                Ok(())
            }
        }
    }

    /// DEL's half. `earlier` are the steps ADD took before this one (undone after it). Failures are collected in
    /// `u`; the undo goes on past them.
    fn undo(&self, u: &mut Unwind, earlier: &[Step]) {
        match self {
            Step::PfSetting(s) => u.restore_on_pf(s),
            Step::AdminMac(mac) => u.undo_admin_mac(*mac),
            Step::IbGuid { node, port } => {
                u.bind_if_unbound();
                u.restore_on_pf(&VfSetting::Guid { node: *node, port: *port });
                if u.rec.driver.as_deref() == Some("mlx5_core") {
                    // mlx5 takes the restored GUID only when bound again; the netdev comes back with driver defaults.
                    match u.host.sysfs.rebind(&u.rec.pci) {
                        Ok(()) => u.restore_host(true, RETURN_WAIT),
                        Err(e) => u.fail(CniError::from_io(
                            format!("rebinding VF {} to mlx5_core to restore its GUID", u.rec.pci),
                            &e,
                        )),
                    }
                }
            }
            Step::RdmaIn(dev) => {
                // From a destroyed namespace the kernel returns the device by itself.
                if let Some(pod) = u.pod.as_deref() {
                    if let Err(e) = rdma::move_out(&pod.ns, u.host.ns.fd(), dev) {
                        u.fail(e);
                    }
                }
            }
            Step::NetdevIn => {
                if let (Some(pod), Some(orig)) = (u.pod.as_deref_mut(), u.rec.netdev.as_ref()) {
                    match netdev::find_in_pod(pod, u.rec) {
                        Ok(Some(l)) => match netdev::move_back(u.host, pod, u.rec, orig, &l) {
                            Ok(name) => u.host_name = Some(name),
                            Err(e) => u.failures.push(e),
                        },
                        Ok(None) => crate::info!("VF {} is not in {}", u.rec.pci, u.rec.netns),
                        Err(e) => u.failures.push(e),
                    }
                }
                // An admin MAC still in force is the AdminMac step's to lift, after this one.
                let mac = !earlier.iter().any(|s| matches!(s, Step::AdminMac(_)));
                // A VF an interrupted rebind left unbound has no netdev anywhere until it is bound again.
                let wait = if u.bind_if_unbound() { RETURN_WAIT } else { Duration::ZERO };
                u.restore_host(mac, wait);
            }
            Step::Ipam => {
                let started = ipam::spawn(u.conf, u.env, "DEL", &u.target);
                match started {
                    Ok(Some(p)) if ipam::can_overlap(u.conf) => u.ipam = Some(p),
                    Ok(Some(p)) => u.ipam_done(p.wait()),
                    Ok(None) => {}
                    Err(e) => u.ipam_done(Err(e)),
                }
            }
            Step::DeviceInfo(path) => {
                if let Err(e) = remove_device_info(&u.host.devinfo_dir, path, u.rec) {
                    u.fail(e);
                }
            }
        }
    }
}

/// Removes the device-info file if it is the one this VF's ADD wrote, byte for byte; one that is missing, or
/// that someone else wrote (Multus copies the device plugin's there before ADD, and removes it itself), is left.
/// Only inside the node's device-info directory `base` and never through a symbolic link: anything else is left
/// as it is (said in the log), and DEL goes on.
fn remove_device_info(base: &std::path::Path, path: &std::path::Path, rec: &Attachment) -> CniResult<()> {
    let what = || format!("removing the device-info file {}", path.display());
    let left = |why: &dyn std::fmt::Display| -> CniResult<()> {
        crate::warn!("device-info file {} of VF {} left as it is: {why}", path.display(), rec.pci);
        Ok(())
    };
    let at = match Confined::new(base, path) {
        Ok(at) => at,
        Err(why) => return left(&format_args!("{why} ({}/)", base.display())),
    };
    let body = match at.read() {
        Ok(Some(b)) => b,
        // Never written (missing, or a path under a file, where ADD's write failed too).
        Ok(None) => return Ok(()),
        Err(e) if is_symlink_refusal(&e) || e.kind() == std::io::ErrorKind::InvalidInput => return left(&e),
        Err(e) => return Err(e).ctx(what),
    };
    let ours = rdma::device_info(&rec.pci, &rec.pf_pci, rec.rdma.as_ref().map(|r| r.device.name.as_str()));
    if body != ours.as_bytes() {
        crate::info!("device-info file {} is not the one ADD wrote for VF {}; left as it is", path.display(), rec.pci);
        return Ok(());
    }
    at.remove().ctx(what)
}

/// IPAM in ADD: not started, running alongside the netdev move, or finished.
enum Ipam<'a> {
    NotStarted,
    Pending(ipam::Pending<'a>),
    Done(CniResult<Vec<u8>>),
}

/// What ADD's steps work with.
pub struct Apply<'a> {
    pub host: &'a mut Host,
    pub pod: &'a mut Pod,
    pub conf: &'a NetConf,
    pub env: &'a CniEnv,
    pub pf: Pf,
    pub rec: Attachment,
    pub rdma_sock: Option<RdmaSocket>,
    ipam: Ipam<'a>,
    /// Whether IPAM ADD returned an allocation (a failed one holds nothing for the rollback to release).
    pub ipam_allocated: bool,
    /// The netdev in the pod, once moved there.
    pub moved: Option<Link>,
}

impl<'a> Apply<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: &'a mut Host,
        pod: &'a mut Pod,
        conf: &'a NetConf,
        env: &'a CniEnv,
        pf: Pf,
        rec: Attachment,
        rdma_sock: Option<RdmaSocket>,
    ) -> Self {
        Apply { host, pod, conf, env, pf, rec, rdma_sock, ipam: Ipam::NotStarted, ipam_allocated: false, moved: None }
    }

    /// Writes the step into the record, then applies it.
    pub fn run(&mut self, step: Step) -> CniResult<()> {
        self.rec.journal.push(step.clone());
        self.host.store.save(&self.rec)?;
        step.apply(self)
    }

    /// IPAM ADD's output, waiting for it if it runs alongside the move.
    pub fn ipam_output(&mut self) -> CniResult<Vec<u8>> {
        let out = match std::mem::replace(&mut self.ipam, Ipam::NotStarted) {
            Ipam::NotStarted => Ok(Vec::new()),
            Ipam::Pending(p) => p.wait(),
            Ipam::Done(out) => out,
        };
        self.ipam_allocated = out.is_ok() && self.conf.ipam.is_some();
        out
    }

    /// Lets an IPAM ADD under way finish before a rollback releases it.
    pub fn settle_ipam(&mut self) {
        if matches!(self.ipam, Ipam::Pending(_) | Ipam::Done(_)) {
            if let Err(e) = self.ipam_output() {
                crate::warn!("IPAM ADD: {e}");
            }
        }
    }

    fn set_on_pf(&mut self, s: &VfSetting) -> CniResult<()> {
        let vf = self.rec.vf_index;
        NetlinkPf(&mut self.host.route)
            .apply(&self.pf, vf, s)
            .ctx(|| format!("setting {s} on VF {vf} of PF {}", self.pf.name))
    }

    /// mlx5 applies a new GUID only after the VF driver is rebound; the netdev and RDMA device come back with
    /// new indexes (and possibly names), so both are looked up again. Exercised by fakes only: no mlx5 here.
    fn refresh_after_rebind(&mut self) -> CniResult<()> {
        netdev::rebind(self.host, &mut self.rec, "to apply its GUID")?;
        if let (Some(r), Some(sock)) = (self.rec.rdma.as_mut(), self.rdma_sock.as_mut()) {
            let name =
                self.host.sysfs.rdma_devices_of(&self.rec.pci).into_iter().next().unwrap_or(r.device.name.clone());
            let index = sock.devices().ctx(|| "listing RDMA devices".to_string())?.into_iter().find(|d| d.name == name);
            r.device = Found { name, index: index.map(|d| d.index) };
        }
        Ok(())
    }

    /// Moves the netdev into the pod under CNI_IFNAME (one message), then MTU and up.
    fn move_into_pod(&mut self) -> CniResult<()> {
        let (rec, env) = (&self.rec, self.env);
        let Some(orig) = &rec.netdev else { return Ok(()) };
        self.host
            .route
            .move_link(orig.index, self.pod.ns.fd(), &env.ifname)
            .ctx(|| format!("moving VF {} ({}) into {} as {}", rec.pci, orig.name, env.netns, env.ifname))?;
        let l = self
            .pod
            .route
            .link_by_name(&env.ifname)
            .ctx(|| format!("looking up {} in {}", env.ifname, env.netns))?
            .ok_or_else(|| CniError::io(format!("VF {} vanished after the move into {}", rec.pci, env.netns)))?;
        // The MAC needs nothing here: an admin MAC was made the netdev's own before the move (take_admin_mac).
        let mut attrs = Vec::new();
        if let Some(mtu) = self.conf.mtu.filter(|m| *m != l.mtu) {
            attrs.push(LinkAttribute::Mtu(mtu));
        }
        self.pod
            .route
            .set_link(l.index, attrs, Some(true))
            .ctx(|| format!("setting the MTU and bringing up {} in {}", env.ifname, env.netns))?;
        let mtu = self.conf.mtu.unwrap_or(l.mtu);
        // CHECK compares with what ADD left, which after a driver rebind is the driver's default.
        self.rec.mtu = Some(mtu);
        self.moved = Some(Link { mtu, ..l });
        Ok(())
    }
}

/// What an undo left: every failure (it keeps going past them) and the VF netdev's name on the host at the end.
#[derive(Debug, Default)]
pub struct Undone {
    pub failures: Failures,
    pub host_netdev: Option<String>,
}

/// What DEL's steps work with.
pub struct Unwind<'a> {
    host: &'a mut Host,
    /// `None` when the pod namespace is gone: the kernel hands the VF back by itself.
    pod: Option<&'a mut Pod>,
    rec: &'a Attachment,
    conf: &'a NetConf,
    env: &'a CniEnv,
    target: Target<'a>,
    /// Whether a failed IPAM DEL keeps the record: not when IPAM ADD never allocated.
    ipam_counts: bool,
    ipam: Option<ipam::Pending<'a>>,
    pf: Option<Pf>,
    /// The VF's row as the PF shows it now, read once for the plain settings.
    pf_now: Option<Option<VfState>>,
    /// Where the VF's netdev is on the host, once known.
    host_name: Option<String>,
    /// Whether the wait for a netdev from a destroyed namespace has been spent.
    waited: bool,
    /// Whether "the netdev has not come back" is among the failures already.
    missing_said: bool,
    failures: Failures,
}

/// Undoes the record's journal, newest step first. IPAM DEL, a separate process that touches nothing the other
/// steps do, is started first and waited for last, unless the IPAM type needs the interface (DHCP).
#[allow(clippy::too_many_arguments)]
pub fn unwind<'a>(
    host: &'a mut Host,
    pod: Option<&'a mut Pod>,
    rec: &'a Attachment,
    conf: &'a NetConf,
    env: &'a CniEnv,
    target: Target<'a>,
    ipam_counts: bool,
) -> Undone {
    let mut u = Unwind {
        host,
        pod,
        rec,
        conf,
        env,
        target,
        ipam_counts,
        ipam: None,
        pf: None,
        pf_now: None,
        host_name: rec.netdev.as_ref().map(|n| n.name.clone()),
        waited: false,
        missing_said: false,
        failures: Failures::default(),
    };
    let alongside = ipam::can_overlap(conf);
    if alongside {
        for (i, s) in rec.journal.iter().enumerate().filter(|(_, s)| **s == Step::Ipam) {
            s.undo(&mut u, &rec.journal[..i]);
        }
    }
    for (i, s) in rec.journal.iter().enumerate().rev() {
        if alongside && *s == Step::Ipam {
            continue;
        }
        s.undo(&mut u, &rec.journal[..i]);
    }
    if let Some(p) = u.ipam.take() {
        u.ipam_done(p.wait());
    }
    Undone { failures: u.failures, host_netdev: u.host_name }
}

impl Unwind<'_> {
    fn fail(&mut self, e: CniError) {
        self.failures.push(e);
    }

    fn ipam_done(&mut self, r: CniResult<Vec<u8>>) {
        match r {
            Ok(_) => {}
            // The IPAM plugin's own code is kept.
            Err(e) if self.ipam_counts => self.fail(e),
            Err(e) => crate::warn!(
                "IPAM DEL for {}/{} whose IPAM ADD never allocated: {e}",
                self.rec.container_id,
                self.rec.ifname
            ),
        }
    }

    fn pf(&mut self) -> CniResult<Pf> {
        if let Some(pf) = &self.pf {
            return Ok(pf.clone());
        }
        let pf =
            self.host.pf(&self.rec.pf).map_err(|e| e.context(format!("restoring VF {} settings", self.rec.pci)))?;
        Ok(self.pf.insert(pf).clone())
    }

    /// Puts one PF-side setting back to its value before ADD, unless the PF shows that value already (never
    /// applied, or restored before).
    fn restore_on_pf(&mut self, s: &VfSetting) {
        let Some(orig) = self.rec.vf_original.as_ref() else { return };
        let pf = match self.pf() {
            Ok(pf) => pf,
            Err(e) => return self.fail(e),
        };
        let vf = self.rec.vf_index;
        let mut ctl = NetlinkPf(&mut self.host.route);
        let now = self.pf_now.get_or_insert_with(|| ctl.vf_state(&pf, vf).ok().flatten());
        if let Err(e) = vf::restore(&mut ctl, &pf, vf, s, orig, now.as_ref()) {
            let back = s.original(orig).map(|b| b.to_string()).unwrap_or_default();
            self.fail(CniError::from_io(format!("restoring {back} on VF {vf} of PF {}", pf.name), &e));
        }
    }

    /// The VF's netdev on the host. From a destroyed namespace the kernel hands it back asynchronously: the first
    /// lookup then waits for it, a bounded time. `None` for a VF without a netdev (userspace driver): `host_name`
    /// starts from the record's netdev.
    fn host_netdev(&mut self, wait: Duration) -> Option<Link> {
        let name = self.host_name.clone()?;
        let wait = if self.pod.is_none() && !self.waited { RETURN_WAIT.max(wait) } else { wait };
        self.waited |= self.pod.is_none();
        match find_host_netdev(self.host, self.rec, &name, wait) {
            Ok(l) => l,
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// The netdev's host-side name, MTU, up state, altnames and (with `mac`) MAC, as before ADD.
    fn restore_host(&mut self, mac: bool, wait: Duration) {
        let Some(orig) = self.rec.netdev.as_ref() else { return };
        match self.host_netdev(wait) {
            Some(cur) => match netdev::restore_on_host(self.host, self.rec, orig, &cur, mac) {
                Ok(name) => self.host_name = Some(name),
                Err(e) => self.fail(e),
            },
            None if !self.host.sysfs.pci_dir(&self.rec.pci).exists() => crate::warn!(
                "VF {} ({}) is gone from sysfs (its VFs disabled?); nothing left to restore",
                self.rec.pci,
                orig.name
            ),
            // Still inside a namespace something holds, or not yet handed back: the record must outlive this DEL,
            // or the VF comes back later under its pod name with nobody to restore it.
            None if !self.missing_said => {
                self.missing_said = true;
                self.fail(CniError::io(format!(
                    "VF {} ({}) has not come back to the host from {} (a process may still hold the namespace); \
                     a later DEL or `sriov-rdma gc` restores it once it is back",
                    self.rec.pci, orig.name, self.rec.netns
                )));
            }
            None => {}
        }
    }

    /// Binds the VF to the driver it had before ADD if it is bound to none: an ADD killed between the unbind and
    /// the bind of a rebind (admin MAC, GUID) leaves it so. True when it bound it (its netdev then comes back).
    fn bind_if_unbound(&mut self) -> bool {
        let Some(driver) = self.rec.driver.as_deref() else { return false };
        if self.host.sysfs.driver(&self.rec.pci).is_some() {
            return false;
        }
        crate::warn!("VF {} is bound to no driver (a rebind was interrupted); binding it to {driver}", self.rec.pci);
        match self.host.sysfs.bind(&self.rec.pci, driver) {
            Ok(()) => true,
            Err(e) => {
                self.fail(CniError::from_io(format!("binding VF {} to {driver} again", self.rec.pci), &e));
                false
            }
        }
    }

    /// The PF's admin MAC and the netdev's own MAC, back as they were. A PF holding an administratively set MAC
    /// refuses the VF's own change while trust is off (igb, ixgbe), so: clear the admin MAC (all-zero lifts the
    /// hold on igb, ixgbe, i40e, ice), set the netdev's MAC back (the VF driver registers it with the PF, which then
    /// reports it as the VF's MAC, as before ADD), and set an original admin MAC only if the PF does not report it
    /// by then.
    fn undo_admin_mac(&mut self, mac: Mac) {
        self.pf_now = None;
        let wait = if self.bind_if_unbound() { RETURN_WAIT } else { Duration::ZERO };
        let Some(cur) = self.host_netdev(wait) else {
            // No netdev to register a MAC (userspace driver, or it never came back): the PF row alone.
            return self.restore_on_pf(&VfSetting::Mac(mac));
        };
        let pf = match self.pf() {
            Ok(pf) => pf,
            Err(e) => return self.fail(e),
        };
        let zero = Mac([0; 6]);
        if let Err(e) = NetlinkPf(&mut self.host.route).apply(&pf, self.rec.vf_index, &VfSetting::Mac(zero)) {
            crate::debug!("VF {}: clearing the admin MAC on PF {}: {e}", self.rec.pci, pf.name);
        }
        if let Err(e) = netdev::set_own_mac(self.host, self.rec, &cur, true) {
            self.fail(e);
        }
        if self.rec.vf_original.as_ref().and_then(|o| o.mac).is_some_and(|o| o != zero) {
            self.restore_on_pf(&VfSetting::Mac(mac));
        }
        self.pf_now = None;
        // A rebind during ADD (igb) brought the netdev back with the driver's defaults.
        self.restore_host(true, Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LinkState;

    #[test]
    fn settings_render_as_config_keys() {
        let s = |v: VfSetting| v.to_string();
        assert_eq!(
            s(VfSetting::Vlan { vlan: 5, qos: 0, proto: VlanProto::Dot1Ad }),
            "vlanProto 802.1ad (vlan 5, vlanQoS 0)"
        );
        assert_eq!(s(VfSetting::Vlan { vlan: 100, qos: 3, proto: VlanProto::Dot1Q }), "vlan 100 (vlanQoS 3)");
        assert_eq!(s(VfSetting::LinkState(LinkState::Enable)), "link_state enable");
        assert_eq!(s(VfSetting::Rate { min: 10, max: 90 }), "min_tx_rate 10 / max_tx_rate 90");
        assert_eq!(
            s(VfSetting::Guid { node: 0x0011_2233_4455_6677, port: 0x0011_2233_4455_6677 }),
            "infinibandGUID 00:11:22:33:44:55:66:77"
        );
        assert_eq!(s(VfSetting::Trust(false)), "trust off");
    }

    #[test]
    fn the_plan_puts_the_admin_mac_after_the_plain_settings_and_the_guid_last() {
        let settings = vec![
            VfSetting::Mac(Mac([2, 0, 0, 0, 0, 1])),
            VfSetting::Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Q },
            VfSetting::Trust(true),
            VfSetting::LinkState(LinkState::Enable),
            VfSetting::Guid { node: 7, port: 7 },
            VfSetting::Rate { min: 0, max: 10 },
        ];
        let plan = Step::plan(&settings);
        assert_eq!(
            plan,
            vec![
                Step::PfSetting(VfSetting::Vlan { vlan: 100, qos: 0, proto: VlanProto::Dot1Q }),
                Step::PfSetting(VfSetting::Trust(true)),
                Step::PfSetting(VfSetting::LinkState(LinkState::Enable)),
                Step::PfSetting(VfSetting::Rate { min: 0, max: 10 }),
                Step::AdminMac(Mac([2, 0, 0, 0, 0, 1])),
                Step::IbGuid { node: 7, port: 7 },
            ]
        );
        // Undone newest first: the admin MAC before trust, so the VF may still change its own MAC.
        let undo: Vec<_> = plan.iter().rev().collect();
        let mac_at = undo.iter().position(|s| matches!(s, Step::AdminMac(_))).unwrap();
        let trust_at = undo.iter().position(|s| matches!(s, Step::PfSetting(VfSetting::Trust(_)))).unwrap();
        assert!(mac_at < trust_at);
        let mut back: Vec<VfSetting> = plan.iter().filter_map(Step::pf_setting).collect();
        back.sort_by_key(|s| format!("{s:?}"));
        let mut want = settings;
        want.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(back, want, "every setting is one step");
    }
}
