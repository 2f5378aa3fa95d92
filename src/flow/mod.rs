//! The attach/detach flow: what ADD, DEL, CHECK, GC and STATUS do with the protocol and kernel layers.

pub mod add;
pub mod admit;
pub mod attachment;
pub mod chain;
pub mod check;
pub mod context;
pub mod del;
pub mod ipam;
pub mod journal;
pub mod netdev;
pub mod orphans;
pub mod pool;
pub mod rdma;
pub mod record;
pub mod routes;
pub mod signals;
pub mod state;

use crate::cni::config::{sniff_version, NetConf, Version, SUPPORTED_VERSIONS};
use crate::cni::env::{self, Command};
use crate::cni::error::{CniError, CniResult, Code};

/// What one invocation prints and how it exits.
pub struct Outcome {
    pub stdout: String,
    pub ok: bool,
}

fn dispatch(stdin: &[u8], get: impl Fn(&str) -> Option<String>) -> CniResult<Option<String>> {
    let env = env::from_vars(&get)?;
    if env.command == Command::Version {
        let v = sniff_version(stdin);
        return Ok(Some(serde_json::json!({"cniVersion": v, "supportedVersions": SUPPORTED_VERSIONS}).to_string()));
    }
    let conf = NetConf::parse(stdin, &env.args)?;
    let paths = context::Paths::from_env(&get);
    admit::init_log(&paths, &conf, env.command)?;
    let need = |min: Version, what: &str| -> CniResult<()> {
        if conf.version < min {
            return Err(CniError::new(
                Code::IncompatibleVersion,
                format!(
                    "{what} needs cniVersion {} or later, the configuration says {}",
                    min.as_str(),
                    conf.version.as_str()
                ),
            ));
        }
        Ok(())
    };
    match env.command {
        Command::Add => {
            // The node policy may set what the configuration leaves out (untagged, spoofchk on…).
            let conf = NetConf { vf: admit::add(&paths, &conf, &env)?, ..conf };
            let r = add::add(&paths, &conf, &env)?.to_json(conf.version);
            let r = match &conf.prev_result {
                Some(prev) => crate::cni::result::chained(r, prev),
                None => r,
            };
            Ok(Some(r.to_string()))
        }
        Command::Del => del::del(&paths, &conf, &env).map(|_| None),
        Command::Check => {
            need(Version::V0_4_0, "CHECK")?;
            check::check(&paths, &conf, &env).map(|_| None)
        }
        Command::Gc => {
            need(Version::V1_1_0, "GC")?;
            check::gc(&paths, &conf, &env).map(|_| None)
        }
        Command::Status => {
            need(Version::V1_1_0, "STATUS")?;
            check::status(&paths, &conf, &env).map(|_| None)
        }
        Command::Version => Ok(None),
    }
}

/// The CNI plugin as a process: the configuration from stdin, CNI_* from the environment, only the result on
/// stdout; the exit status (0 on success). `sriov-rdma` runs it, and the node daemon's `cni` mode (the DRA attach).
pub fn plugin_main() -> i32 {
    use std::io::{Read, Write};
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("sriov-rdma: reading the configuration from stdin: {e}");
    }
    let out = run(&stdin, |k| std::env::var(k).ok());
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(out.stdout.as_bytes());
    let _ = so.flush();
    if out.ok {
        0
    } else {
        1
    }
}

/// Runs one CNI invocation: `stdin` is the configuration, `get` reads the environment.
pub fn run(stdin: &[u8], get: impl Fn(&str) -> Option<String>) -> Outcome {
    match dispatch(stdin, get) {
        Ok(out) => Outcome { stdout: out.unwrap_or_default(), ok: true },
        Err(e) => {
            crate::error!("{e}");
            Outcome { stdout: e.to_json(&sniff_version(stdin)), ok: false }
        }
    }
}
