//! ADD and DEL as one journal of reversible steps. Each [`Step`] has its apply (ADD's half) and its undo (DEL's
//! half) side by side below.
//!
//! ADD writes a step into the attachment record before it applies it ([`Apply::run`]); rollback, DEL and GC undo
//! the steps the record lists, newest first ([`unwind`]). An undo finds out for itself what there is to undo (a
//! setting the PF already shows at its original value, a device the pod no longer has, a file that is not there),
//! so a step that was written but never applied, because ADD was killed between the two, undoes cleanly, and so
//! does a step undone twice.

use super::attachment::{Attachment, Found, Step};
use super::context::{find_host_netdev, Host, Pod, RETURN_WAIT};
use super::ipam::{self, Target};
use super::netdev;
use super::rdma;
use super::signals::changing_state;
use crate::cni::config::NetConf;
use crate::cni::env::CniEnv;
use crate::cni::error::{CniError, CniResult, Failures, IoContext};
use crate::kernel::confined::{is_symlink_refusal, Confined};
use crate::kernel::link::Link;
use crate::kernel::rdma::RdmaSocket;
use crate::kernel::vf::{self, NetlinkPf, Pf, PfControl};
use crate::model::Mac;
use crate::vf_setting::{AdminMac, IbGuid, VfSetting, VfState};
use netlink_packet_route::link::LinkAttribute;
use std::time::Duration;

impl Step {
    /// ADD's half.
    fn apply(&self, cx: &mut Apply) -> CniResult<()> {
        match self {
            Step::PfSetting(s) => cx.set_on_pf(s),
            Step::AdminMac(mac) => {
                cx.set_on_pf(&AdminMac { mac: *mac }.into())?;
                netdev::take_admin_mac(cx.s.host, &mut cx.rec, *mac)
            }
            Step::IbGuid { node, port } => {
                cx.set_on_pf(&IbGuid { node: *node, port: *port }.into())?;
                if cx.rec.driver.as_deref() == Some("mlx5_core") {
                    cx.refresh_after_rebind()?;
                }
                Ok(())
            }
            Step::RdmaIn(dev) => {
                let Some(sock) = cx.rdma_sock.as_mut() else { return Ok(()) };
                let moved = rdma::move_in(sock, cx.s.conf.rdma, dev, cx.pod.ns.fd(), &cx.s.env.netns)?;
                if let Some(r) = cx.rec.rdma.as_mut() {
                    r.moved = moved;
                }
                Ok(())
            }
            Step::NetdevIn => cx.move_into_pod(),
            Step::Ipam => {
                let target = Target::of_env(cx.s.env);
                cx.ipam = if ipam::can_overlap(cx.s.conf) {
                    // Runs while the kernel moves the netdev (mostly an RCU wait); waited for by ipam_output.
                    match ipam::spawn(cx.s.conf, cx.s.env, "ADD", &target)? {
                        Some(p) => Ipam::Pending(p),
                        None => Ipam::Done(Ok(Vec::new())),
                    }
                } else {
                    Ipam::Done(ipam::exec(cx.s.conf, cx.s.env, "ADD", &target))
                };
                Ok(())
            }
            Step::DeviceInfo { path, .. } => {
                let dev = cx.rec.rdma.as_ref().map(|r| r.device.name.as_str());
                rdma::write_device_info(&cx.s.host.devinfo_dir, path, &cx.rec.pci, &cx.rec.pf_pci, dev)
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
                u.restore_on_pf(&IbGuid { node: *node, port: *port }.into());
                if u.rec.driver.as_deref() == Some("mlx5_core") {
                    // mlx5 takes the restored GUID only when bound again; the netdev comes back with driver defaults.
                    match u.s.host.sysfs.rebind(&u.rec.pci) {
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
                    if let Err(e) = rdma::move_out(&pod.ns, u.s.host.ns.fd(), dev) {
                        u.fail(e);
                    }
                }
            }
            Step::NetdevIn => {
                if let (Some(pod), Some(orig)) = (u.pod.as_deref_mut(), u.rec.netdev.as_ref()) {
                    match netdev::find_in_pod(pod, u.rec) {
                        Ok(Some(l)) => match netdev::move_back(u.s.host, pod, u.rec, orig, &l) {
                            Ok(name) => u.netdev.name = Some(name),
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
                let started = ipam::spawn(u.s.conf, u.s.env, "DEL", &u.target);
                match started {
                    Ok(Some(p)) if ipam::can_overlap(u.s.conf) => u.ipam = Some(p),
                    Ok(Some(p)) => u.ipam_done(p.wait()),
                    Ok(None) => {}
                    Err(e) => u.ipam_done(Err(e)),
                }
            }
            Step::DeviceInfo { path, dirs } => {
                if let Err(e) = remove_device_info(&u.s.host.devinfo_dir, path, *dirs, u.rec) {
                    u.fail(e);
                }
            }
        }
    }
}

/// Removes the device-info file if it is the one this VF's ADD wrote, byte for byte; one that is missing, or
/// that someone else wrote (Multus copies the device plugin's there before ADD, and removes it itself), is left.
/// Then the `dirs` directories ADD made on its way, those left empty. Only inside the node's device-info directory
/// `base` and never through a symbolic link: anything else is left as it is (said in the log), and DEL goes on.
fn remove_device_info(base: &std::path::Path, path: &std::path::Path, dirs: usize, rec: &Attachment) -> CniResult<()> {
    let what = || format!("removing the device-info file {}", path.display());
    let left = |why: &dyn std::fmt::Display| -> CniResult<()> {
        crate::warn!("device-info file {} of VF {} left as it is: {why}", path.display(), rec.pci);
        Ok(())
    };
    let at = match Confined::new(base, path) {
        Ok(at) => at,
        Err(why) => return left(&format_args!("{why} ({}/)", base.display())),
    };
    match at.read() {
        // Never written (missing, or a path under a file, where ADD's write failed too), or removed before.
        Ok(None) => {}
        Ok(Some(body)) => {
            let dev = rec.rdma.as_ref().map(|r| r.device.name.as_str());
            if body == rdma::device_info(&rec.pci, &rec.pf_pci, dev).as_bytes() {
                at.remove().ctx(what)?;
            } else {
                // Its directory is then not empty either, and stays.
                crate::info!(
                    "device-info file {} is not the one ADD wrote for VF {}; left as it is",
                    path.display(),
                    rec.pci
                );
            }
        }
        Err(e) if is_symlink_refusal(&e) || e.kind() == std::io::ErrorKind::InvalidInput => return left(&e),
        Err(e) => return Err(e).ctx(what),
    }
    match at.remove_dirs(dirs) {
        Err(e) if is_symlink_refusal(&e) => left(&e),
        r => r.ctx(|| format!("removing the directories ADD made for the device-info file {}", path.display())),
    }
}

/// IPAM in ADD: not started, running alongside the netdev move, or finished.
enum Ipam<'a> {
    NotStarted,
    Pending(ipam::Pending<'a>),
    Done(CniResult<Vec<u8>>),
}

/// What every step, applied or undone, works with: the host side, the network configuration and the invocation's
/// environment (for DEL and GC, the one the undo runs under).
pub struct Session<'a> {
    pub host: &'a mut Host,
    pub conf: &'a NetConf,
    pub env: &'a CniEnv,
}

/// What ADD's steps work with.
pub struct Apply<'a> {
    pub s: Session<'a>,
    pub pod: &'a mut Pod,
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
    pub fn new(s: Session<'a>, pod: &'a mut Pod, pf: Pf, rec: Attachment, rdma_sock: Option<RdmaSocket>) -> Self {
        Apply { s, pod, pf, rec, rdma_sock, ipam: Ipam::NotStarted, ipam_allocated: false, moved: None }
    }

    /// Writes the step into the record, then applies it. From the first step on, state changes: SIGTERM is ignored.
    pub fn run(&mut self, step: Step) -> CniResult<()> {
        changing_state();
        self.rec.journal.push(step.clone());
        self.s.host.store.save(&self.rec)?;
        step.apply(self)
    }

    /// IPAM ADD's output, waiting for it if it runs alongside the move.
    pub fn ipam_output(&mut self) -> CniResult<Vec<u8>> {
        let out = match std::mem::replace(&mut self.ipam, Ipam::NotStarted) {
            Ipam::NotStarted => Ok(Vec::new()),
            Ipam::Pending(p) => p.wait(),
            Ipam::Done(out) => out,
        };
        self.ipam_allocated = out.is_ok() && self.s.conf.ipam.is_some();
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
        NetlinkPf(&mut self.s.host.route)
            .apply(&self.pf, vf, s)
            .ctx(|| format!("setting {s} on VF {vf} of PF {}", self.pf.name))
    }

    /// mlx5 applies a new GUID only after the VF driver is rebound; the netdev and RDMA device come back with
    /// new indexes (and possibly names), so both are looked up again. Exercised by fakes only: no mlx5 here.
    fn refresh_after_rebind(&mut self) -> CniResult<()> {
        netdev::rebind(self.s.host, &mut self.rec, "to apply its GUID")?;
        if let (Some(r), Some(sock)) = (self.rec.rdma.as_mut(), self.rdma_sock.as_mut()) {
            let name =
                self.s.host.sysfs.rdma_devices_of(&self.rec.pci).into_iter().next().unwrap_or(r.device.name.clone());
            let index = sock.devices().ctx(|| "listing RDMA devices".to_string())?.into_iter().find(|d| d.name == name);
            r.device = Found { name, index: index.map(|d| d.index) };
        }
        Ok(())
    }

    /// Moves the netdev into the pod under CNI_IFNAME (one message), then MTU and up.
    fn move_into_pod(&mut self) -> CniResult<()> {
        let (rec, env) = (&self.rec, self.s.env);
        let Some(orig) = &rec.netdev else { return Ok(()) };
        let (host_index, host_mtu) = (orig.index, orig.mtu);
        self.s
            .host
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
        let mtu = pod_mtu(self.s.conf.mtu, host_mtu);
        let mut attrs = Vec::new();
        if mtu != l.mtu {
            attrs.push(LinkAttribute::Mtu(mtu));
        }
        self.pod
            .route
            .set_link(l.index, attrs, Some(true))
            .ctx(|| format!("setting the MTU and bringing up {} in {}", env.ifname, env.netns))?;
        // CHECK compares with what ADD left.
        self.rec.mtu = Some(mtu);
        self.rec.pod_index = Some(l.index);
        if l.index != host_index {
            // Its host index was taken in the pod: where the kernel names no parent device, this index is the only
            // way DEL tells the VF from the pod's other devices, so it is on disk before anything else happens.
            self.s.host.store.save(&self.rec)?;
        }
        self.moved = Some(Link { mtu, ..l });
        Ok(())
    }
}

/// The MTU of the pod's interface: the configured one, else the one the netdev had on the host before ADD. A driver
/// rebind during ADD (igb taking an admin MAC with trust off, mlx5 a GUID) brings the netdev back with the
/// driver's default (1500), which the pod must not get instead of the VF's own (sriov-cni, which does not rebind,
/// leaves the VF's MTU).
fn pod_mtu(configured: Option<u32>, host: u32) -> u32 {
    configured.unwrap_or(host)
}

/// What an undo left: every failure (it keeps going past them) and the VF netdev's name on the host at the end.
#[derive(Debug, Default)]
pub struct Undone {
    pub failures: Failures,
    pub host_netdev: Option<String>,
}

/// What DEL's steps work with.
pub struct Unwind<'a> {
    s: Session<'a>,
    /// `None` when the pod namespace is gone: the kernel hands the VF back by itself.
    pod: Option<&'a mut Pod>,
    rec: &'a Attachment,
    target: Target<'a>,
    /// Whether a failed IPAM DEL keeps the record: not when IPAM ADD never allocated.
    ipam_counts: bool,
    ipam: Option<ipam::Pending<'a>>,
    pf: PfSide,
    netdev: HostNetdev,
    failures: Failures,
}

/// The PF as the undo of its settings needs it: looked up once, the VF's row read once for the plain settings.
#[derive(Default)]
struct PfSide {
    found: Option<Pf>,
    /// The VF's row as the PF shows it now; read again after the admin MAC's undo changed it.
    row: Option<Option<VfState>>,
}

/// The VF's netdev on the host as the undo follows it.
struct HostNetdev {
    /// Its name there, once known; `None` for a VF without a netdev (userspace driver).
    name: Option<String>,
    /// Whether the wait for it to come back from a destroyed namespace has been spent.
    waited: bool,
    /// Whether "it has not come back" is among the failures already.
    missing_said: bool,
}

/// Undoes the record's journal, newest step first. IPAM DEL, a separate process that touches nothing the other
/// steps do, is started first and waited for last, unless the IPAM type needs the interface (DHCP).
pub fn unwind<'a>(
    s: Session<'a>,
    pod: Option<&'a mut Pod>,
    rec: &'a Attachment,
    target: Target<'a>,
    ipam_counts: bool,
) -> Undone {
    // An undo changes state from its first step on: SIGTERM is ignored until it is done.
    changing_state();
    let alongside = ipam::can_overlap(s.conf);
    let mut u = Unwind {
        s,
        pod,
        rec,
        target,
        ipam_counts,
        ipam: None,
        pf: PfSide::default(),
        netdev: HostNetdev { name: rec.netdev.as_ref().map(|n| n.name.clone()), waited: false, missing_said: false },
        failures: Failures::default(),
    };
    for i in undo_order(&rec.journal, alongside) {
        rec.journal[i].undo(&mut u, &rec.journal[..i]);
    }
    if let Some(p) = u.ipam.take() {
        u.ipam_done(p.wait());
    }
    // An ADD killed while host-local reserved an address can leave an empty lease that IPAM DEL cannot match; a
    // complete ADD's host-local wrote its lease whole, so the DEL of one has nothing to sweep.
    if !rec.complete && rec.journal.contains(&Step::Ipam) {
        ipam::sweep_dead_leases(u.s.conf);
    }
    Undone { failures: u.failures, host_netdev: u.netdev.name }
}

/// The order [`unwind`] undoes `journal` in, as indexes: newest step first; with `ipam_alongside`, IPAM's DEL is
/// started before all of them (and waited for after).
pub(crate) fn undo_order(journal: &[Step], ipam_alongside: bool) -> Vec<usize> {
    let alongside = |s: &Step| ipam_alongside && *s == Step::Ipam;
    let first = journal.iter().enumerate().filter(|(_, s)| alongside(s)).map(|(i, _)| i);
    let rest = journal.iter().enumerate().rev().filter(|(_, s)| !alongside(s)).map(|(i, _)| i);
    first.chain(rest).collect()
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
        if let Some(pf) = &self.pf.found {
            return Ok(pf.clone());
        }
        let pf =
            self.s.host.pf(&self.rec.pf).map_err(|e| e.context(format!("restoring VF {} settings", self.rec.pci)))?;
        Ok(self.pf.found.insert(pf).clone())
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
        let mut ctl = NetlinkPf(&mut self.s.host.route);
        let now = self.pf.row.get_or_insert_with(|| ctl.vf_state(&pf, vf).ok().flatten());
        if let Err(e) = vf::restore(&mut ctl, &pf, vf, s, orig, now.as_ref()) {
            let back = s.original(orig).map(|b| b.to_string()).unwrap_or_default();
            self.fail(CniError::from_io(format!("restoring {back} on VF {vf} of PF {}", pf.name), &e));
        }
    }

    /// The VF's netdev on the host. From a destroyed namespace the kernel hands it back asynchronously: the first
    /// lookup then waits for it, a bounded time. `None` for a VF without a netdev (userspace driver): `netdev.name`
    /// starts from the record's netdev.
    fn host_netdev(&mut self, wait: Duration) -> Option<Link> {
        let name = self.netdev.name.clone()?;
        let wait = if self.pod.is_none() && !self.netdev.waited { RETURN_WAIT.max(wait) } else { wait };
        self.netdev.waited |= self.pod.is_none();
        match find_host_netdev(self.s.host, self.rec, &name, wait) {
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
            Some(cur) => match netdev::restore_on_host(self.s.host, self.rec, orig, &cur, mac) {
                Ok(name) => self.netdev.name = Some(name),
                Err(e) => self.fail(e),
            },
            None if !self.s.host.sysfs.pci_dir(&self.rec.pci).exists() => crate::warn!(
                "VF {} ({}) is gone from sysfs (its VFs disabled?); nothing left to restore",
                self.rec.pci,
                orig.name
            ),
            // Still inside a namespace something holds, or not yet handed back: the record must outlive this DEL,
            // or the VF comes back later under its pod name with nobody to restore it.
            None if !self.netdev.missing_said => {
                self.netdev.missing_said = true;
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
        if self.s.host.sysfs.driver(&self.rec.pci).is_some() {
            return false;
        }
        crate::warn!("VF {} is bound to no driver (a rebind was interrupted); binding it to {driver}", self.rec.pci);
        match self.s.host.sysfs.bind(&self.rec.pci, driver) {
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
        self.pf.row = None;
        let wait = if self.bind_if_unbound() { RETURN_WAIT } else { Duration::ZERO };
        let Some(cur) = self.host_netdev(wait) else {
            // No netdev to register a MAC (userspace driver, or it never came back): the PF row alone.
            return self.restore_on_pf(&AdminMac { mac }.into());
        };
        let pf = match self.pf() {
            Ok(pf) => pf,
            Err(e) => return self.fail(e),
        };
        let zero = Mac([0; 6]);
        if let Err(e) = NetlinkPf(&mut self.s.host.route).apply(&pf, self.rec.vf_index, &AdminMac { mac: zero }.into())
        {
            crate::debug!("VF {}: clearing the admin MAC on PF {}: {e}", self.rec.pci, pf.name);
        }
        if let Err(e) = netdev::set_own_mac(self.s.host, self.rec, &cur, true) {
            self.fail(e);
        }
        if self.rec.vf_original.as_ref().and_then(|o| o.mac).is_some_and(|o| o != zero) {
            self.restore_on_pf(&AdminMac { mac }.into());
        }
        self.pf.row = None;
        // A rebind during ADD (igb) brought the netdev back with the driver's defaults.
        self.restore_host(true, Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::vf::fake::RecordingPf;
    use crate::model::{LinkState, VlanProto};
    use crate::vf_setting::{SpoofChk, Trust, TxRate, VfLinkState, Vlan};

    #[test]
    fn the_pod_gets_the_configured_mtu_else_the_vfs_own_never_a_rebound_drivers_default() {
        assert_eq!(pod_mtu(Some(4000), 9000), 4000, "the network's mtu");
        // The VF had 9000 on the host; igb's rebind for an admin MAC brought it back at 1500.
        assert_eq!(pod_mtu(None, 9000), 9000, "the VF's own MTU, whatever the rebound netdev has");
    }

    #[test]
    fn the_undo_loop_takes_the_journal_newest_first() {
        // Every kind of step, as ADD writes them: PF settings (admin MAC after the plain ones, GUID last), the RDMA
        // device, the netdev, IPAM, the device-info file.
        let j = crate::flow::record::sample().journal;
        let n = j.len();
        assert_eq!(undo_order(&j, false), (0..n).rev().collect::<Vec<_>>(), "newest first, every step once");
        // IPAM's DEL (a separate process) starts first when it may run alongside; the rest newest first.
        let ipam = j.iter().position(|s| *s == Step::Ipam).unwrap();
        let mut want = vec![ipam];
        want.extend((0..n).rev().filter(|i| *i != ipam));
        assert_eq!(undo_order(&j, true), want);
        // The netdev comes back before the RDMA device, the admin MAC is lifted before trust is restored.
        let order: Vec<&Step> = undo_order(&j, false).into_iter().map(|i| &j[i]).collect();
        let at = |f: &dyn Fn(&Step) -> bool| order.iter().position(|s| f(s)).unwrap();
        assert!(at(&|s| *s == Step::NetdevIn) < at(&|s| matches!(s, Step::RdmaIn(_))));
        assert!(at(&|s| matches!(s, Step::AdminMac(_))) < at(&|s| matches!(s, Step::PfSetting(VfSetting::Trust(_)))));
        assert_eq!(undo_order(&[], true), Vec::<usize>::new());
    }

    /// A rollback through the loop: what the PF is sent, in order, when the journal's PF settings are undone as
    /// `unwind` takes them (a PF setting's `Step::undo` is one `vf::restore` against the row read once).
    #[test]
    fn a_rollback_sends_the_pf_its_originals_newest_first() {
        let rec = crate::flow::record::sample();
        let orig = rec.vf_original.clone().unwrap();
        let mut ctl = RecordingPf { state: orig.clone(), ..Default::default() };
        let pf = Pf { name: rec.pf.clone(), index: 4 };
        for s in rec.pf_settings() {
            ctl.apply(&pf, rec.vf_index, &s).unwrap();
        }
        let applied = ctl.log.len();
        let now = ctl.vf_state(&pf, rec.vf_index).unwrap();
        for i in undo_order(&rec.journal, true) {
            if let Some(s) = rec.journal[i].pf_setting() {
                vf::restore(&mut ctl, &pf, rec.vf_index, &s, &orig, now.as_ref()).unwrap();
            }
        }
        assert_eq!(ctl.state, orig, "the PF's row is as before ADD");
        let guid = orig.node_guid.unwrap();
        let want: [VfSetting; 7] = [
            IbGuid { node: guid, port: guid }.into(),
            AdminMac { mac: Mac([0; 6]) }.into(),
            TxRate { min: 0, max: 0 }.into(),
            VfLinkState { state: LinkState::Auto }.into(),
            Trust { on: false }.into(),
            SpoofChk { on: false }.into(),
            Vlan { vlan: 0, qos: 0, proto: VlanProto::Dot1Q }.into(),
        ];
        assert_eq!(ctl.log[applied..], want, "newest first: the GUID, the admin MAC before trust, the VLAN last");
    }
}
