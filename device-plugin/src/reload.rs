//! The daemon's loop: each round it reads the inventory (health, ListAndWatch updates, metrics) and looks at its
//! config file and the node policy's ConfigMap file. The kubelet updates a mounted ConfigMap by swapping the
//! `..data` symbolic link to a new directory, so the loop compares the files' content as read through the links,
//! once a round (the files are small; a round is `--poll-ms`, 2 s by default): a swap, an edit in place and a
//! file that comes back are all seen, with nothing to re-arm. A valid config is applied (resources added,
//! changed, removed); an invalid one keeps the previous config and says why. A changed policy is installed like
//! `sriov-rdma install --policy` does.

use crate::config::{Config, Resource};
use crate::devices::Paths;
use crate::metrics;
use crate::server::{self, Timing, Watcher};
use sriov_rdma_cni::{error, info, warn};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The files the daemon follows.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--policy` and the directory it is installed into (`--policy-dir`).
    pub policy: Option<(PathBuf, PathBuf)>,
}

/// The resources configured now (the daemon removes their sockets when it stops).
pub type Current = Arc<Mutex<Vec<Resource>>>;

/// One followed file and the content last acted on (`None`: not read yet, or unreadable).
struct Followed {
    path: PathBuf,
    last: Option<Vec<u8>>,
}

impl Followed {
    fn new(path: PathBuf) -> Followed {
        let last = std::fs::read(&path).ok();
        Followed { path, last }
    }

    /// The new content if it changed since last time; a file that cannot be read is a change once.
    fn changed(&mut self) -> Option<Result<Vec<u8>, String>> {
        match std::fs::read(&self.path) {
            Ok(b) if self.last.as_ref() == Some(&b) => None,
            Ok(b) => {
                self.last = Some(b.clone());
                Some(Ok(b))
            }
            Err(_) if self.last.is_none() => None,
            Err(e) => {
                self.last = None;
                Some(Err(format!("reading {}: {e}", self.path.display())))
            }
        }
    }
}

/// Runs the loop for as long as the daemon runs. `config` is the configuration the daemon started with, whose
/// resources `watcher` already has and are served (and given to [`metrics::Metrics::set_resources`]).
pub async fn run(
    mut watcher: Watcher,
    mut config: Config,
    sources: Sources,
    paths: Arc<Paths>,
    timing: Timing,
    current: Current,
) {
    let mut config_file = sources.config.map(Followed::new);
    let mut policy = sources.policy.map(|(src, dir)| (Followed { path: src, last: None }, dir));
    let mut first_round = true;
    loop {
        if let Some(f) = config_file.as_mut() {
            if let Some(new) = f.changed() {
                let source = f.path.display().to_string();
                apply(&mut watcher, &mut config, &source, new, &paths, timing, &current).await;
            }
        }
        if let Some((f, dir)) = policy.as_mut() {
            // Also when the file went (its optional ConfigMap was deleted): install_policy then leaves the node's.
            if f.changed().is_some() {
                let (src, dir) = (f.path.clone(), dir.clone());
                let done = tokio::task::spawn_blocking(move || sriov_rdma_cni::install::install_policy(&src, &dir))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                match &done {
                    Ok(true) => info!("node policy {} installed", f.path.display()),
                    Ok(false) => {}
                    Err(e) => error!("node policy {}: {e}; the node's policy stays as it was", f.path.display()),
                }
                // The first round installs the policy the daemon starts with, as the init container does.
                if !first_round {
                    metrics::get().reload("policy", done.is_ok());
                }
            }
        }
        watcher.refresh().await;
        let lists = watcher.lists();
        let p = paths.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || metrics::get().observe(&lists, &p)).await {
            error!("reading the figures for metrics: {e}");
        }
        metrics::get().beat(timing.poll);
        first_round = false;
        tokio::time::sleep(timing.poll).await;
    }
}

/// Applies a changed config file, or keeps the previous configuration and says why.
async fn apply(
    watcher: &mut Watcher,
    config: &mut Config,
    source: &str,
    new: Result<Vec<u8>, String>,
    paths: &Arc<Paths>,
    timing: Timing,
    current: &Current,
) {
    let loaded = new.and_then(|raw| {
        let text = String::from_utf8(raw).map_err(|e| format!("{source}: {e}"))?;
        Config::load(Some((source, &text)), |k| std::env::var(k).ok()).map_err(|e| e.to_string())
    });
    let new = match loaded {
        Ok(c) => c,
        Err(e) => {
            metrics::get().reload("config", false);
            return error!("the changed configuration is refused, the previous one stays in force: {e}");
        }
    };
    metrics::get().reload("config", true);
    if new.num_vfs != config.num_vfs {
        warn!("{source}: numVfs changed: it is applied at the next start of the device plugin only");
    }
    if new.resources == config.resources {
        info!("{source} changed; its resources are the same");
        *config = new;
        return;
    }
    let names: Vec<&str> = new.resources.iter().map(|r| r.name.as_str()).collect();
    info!("{source} changed: now serving {}", names.join(", "));
    metrics::get().set_resources(names.iter().copied());
    let added = watcher.reconfigure(new.resources.clone());
    // The first ListAndWatch answer of an added resource is the node as it is, not an empty list.
    watcher.refresh().await;
    for (res, rx) in added {
        tokio::spawn(server::serve(res, paths.clone(), rx, timing));
    }
    *current.lock().unwrap_or_else(|e| e.into_inner()) = new.resources.clone();
    *config = new;
}
