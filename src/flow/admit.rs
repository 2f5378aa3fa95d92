//! What the node lets a configuration do, decided before anything changes. A NetworkAttachmentDefinition is
//! tenant input: its `logFile` and `runtimeConfig.CNIDeviceInfoFile` stay inside the node's directories and never
//! pass through a symbolic link, and its `deviceID`/`pfName` and `vlan` must be within the node policy.

use super::context::{not_usable, Paths};
use crate::cni::config::{NetConf, VfSource};
use crate::cni::env::{CniEnv, Command};
use crate::cni::error::{CniError, CniResult, Code};
use crate::kernel::confined::{is_symlink_refusal, Confined};
use crate::policy::{Policy, Request};
use std::path::Path;

/// `path` (the value of `key`) inside the node's directory `base`, with no symbolic link on the way now.
fn confine(key: &str, base: &Path, path: &Path) -> CniResult<Confined> {
    let refused = |why: String| {
        CniError::config(format!("{key} {}: {why} (this node keeps it inside {}/)", path.display(), base.display()))
    };
    let c = Confined::new(base, path).map_err(refused)?;
    c.no_symlink_yet().map_err(|e| refused(e.to_string()))?;
    Ok(c)
}

/// Sets up the log: `logFile` inside the node's log directory, else stderr. A `logFile` outside it or through a
/// symbolic link fails ADD (code 7); any other command must still finish, so it logs to stderr and says why, as
/// it does when the file cannot be opened otherwise.
pub fn init_log(paths: &Paths, conf: &NetConf, command: Command) -> CniResult<()> {
    let Some(path) = &conf.log_file else {
        crate::log::init(conf.log_level, None);
        return Ok(());
    };
    let opened = confine("logFile", &paths.log_dir, path).and_then(|at| {
        crate::log::open(&at).map_err(|e| {
            if is_symlink_refusal(&e) {
                CniError::config(format!("logFile {}: {e}", path.display()))
            } else {
                CniError::from_io(format!("opening logFile {}", path.display()), &e)
            }
        })
    });
    match opened {
        Ok(f) => crate::log::init(conf.log_level, Some(f)),
        Err(e) => {
            crate::log::init(conf.log_level, None);
            if command == Command::Add && e.code == Code::InvalidConfig {
                return Err(e);
            }
            crate::warn!("{e}; logging to stderr");
        }
    }
    Ok(())
}

/// ADD's checks: the device-info file's place and the node policy.
pub fn add(paths: &Paths, conf: &NetConf, env: &CniEnv) -> CniResult<()> {
    if let Some(p) = &conf.device_info_file {
        confine("runtimeConfig.CNIDeviceInfoFile", &paths.devinfo_dir, p)?;
    }
    let Some(policy) = Policy::load(&paths.policy)? else { return Ok(()) };
    let sysfs = paths.sysfs();
    let (pf, pf_pci) = match &conf.source {
        None => return Ok(()), // refused by ADD itself, naming the keys
        Some(VfSource::Device(pci)) => {
            let vf = sysfs.vf(pci).map_err(|e| not_usable(format!("deviceID {pci}"), e))?;
            (vf.pf, vf.pf_pci)
        }
        Some(VfSource::Pf(name)) => {
            (name.clone(), sysfs.pf_pci(name).map_err(|e| not_usable(format!("pfName {name}"), e))?)
        }
    };
    policy.admit(&Request {
        pf: &pf,
        pf_pci: pf_pci.as_str(),
        namespace: env.args.get("K8S_POD_NAMESPACE").map(String::as_str).filter(|n| !n.is_empty()),
        vlan: conf.vf.vlan.unwrap_or(0),
    })
}
