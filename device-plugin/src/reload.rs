//! The daemon's loop: it waits for a change (events.rs: link and device events, file-system notifications) or
//! one of its slow polls, then does only what that change needs: re-read link and RDMA port state, scan the node,
//! read the config file and the node policy's ConfigMap file again, or tell the servers that the kubelet's
//! directory changed; it counts what it offers for the metrics after each and tells `/healthz` when it is in a round. The kubelet updates a mounted
//! ConfigMap by swapping the `..data` symbolic link to a new directory, so the files' content is compared as read
//! through the links after any event in their directory: a swap, an edit in place and a file that comes back are
//! all seen. A valid config is applied (resources added, changed, removed); an invalid one keeps the previous
//! config and says why. A changed policy is installed like `sriov-rdma install --policy` does.

use crate::config::{Config, Resource};
use crate::devices::Paths;
use crate::events::{Change, Changes, Events};
use crate::metrics;
use crate::server::{self, Shared, Timing, Watcher};
use sriov_rdma_cni::{debug, error, info, warn};
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
/// resources `watcher` already has and are served (and given to [`metrics::Metrics::set_resources`]). `kubelet_dir`
/// is bumped on each change in the kubelet's directory (the servers' [`Shared::kubelet_dir`]).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    mut watcher: Watcher,
    mut config: Config,
    sources: Sources,
    paths: Arc<Paths>,
    timing: Timing,
    current: Current,
    mut events: Events,
    kubelet_dir: tokio::sync::watch::Sender<u64>,
) {
    let mut config_file = sources.config.map(Followed::new);
    let mut policy = sources.policy.map(|(src, dir)| (Followed { path: src, last: None }, dir));
    let shared = Shared { inventory: watcher.inventory(), kubelet_dir: kubelet_dir.subscribe() };
    let start = tokio::time::Instant::now();
    let every = |d: std::time::Duration| {
        let mut i = tokio::time::interval_at(start + d, d);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    };
    let (mut poll, mut full) = (every(timing.poll), every(timing.full_poll));
    // The first round installs the policy the daemon starts with, as the init container does.
    let mut c = Changes { files: true, ..Changes::default() };
    let mut first_round = true;
    loop {
        metrics::get().working();
        if c.files {
            if let Some(f) = config_file.as_mut() {
                if let Some(new) = f.changed() {
                    let source = f.path.display().to_string();
                    apply(&mut watcher, &mut config, &source, new, &paths, &shared, timing, &current).await;
                }
            }
            if let Some((f, dir)) = policy.as_mut() {
                install_if_changed(f, dir, first_round).await;
            }
        }
        if c.devices || c.state {
            watcher.refresh().await;
        } else if c.links {
            watcher.relink().await;
        }
        if c.kubelet {
            kubelet_dir.send_modify(|n| *n = n.wrapping_add(1));
        }
        events.set_netdevs(watcher.netdevs());
        metrics::get().observe(&watcher.lists());
        metrics::get().waiting();
        first_round = false;
        c = Changes::default();
        // Nothing goes round without work: the daemon sleeps until an event or one of the slow polls.
        tokio::select! {
            Some(k) = events.recv() => {
                c.add(k);
                events.gather(timing.debounce, &mut c).await;
            }
            _ = poll.tick() => {
                events.rewatch();
                for k in [Change::Links, Change::Files, Change::Kubelet] {
                    c.add(k);
                }
            }
            _ = full.tick() => {
                for k in [Change::Devices, Change::Files, Change::Kubelet] {
                    c.add(k);
                }
            }
        }
        debug!("changed: {c:?}");
    }
}

/// Installs the node policy if its file changed, also when it went (its optional ConfigMap was deleted):
/// install_policy then leaves the node's.
async fn install_if_changed(f: &mut Followed, dir: &std::path::Path, first_round: bool) {
    if f.changed().is_none() {
        return;
    }
    let (src, dir) = (f.path.clone(), dir.to_path_buf());
    let done = tokio::task::spawn_blocking(move || sriov_rdma_cni::install::install_policy(&src, &dir))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    match &done {
        Ok(true) => info!("node policy {} installed", f.path.display()),
        Ok(false) => {}
        Err(e) => error!("node policy {}: {e}; the node's policy stays as it was", f.path.display()),
    }
    if !first_round {
        metrics::get().reload("policy", done.is_ok());
    }
}

/// Applies a changed config file, or keeps the previous configuration and says why.
#[allow(clippy::too_many_arguments)]
async fn apply(
    watcher: &mut Watcher,
    config: &mut Config,
    source: &str,
    new: Result<Vec<u8>, String>,
    paths: &Arc<Paths>,
    shared: &Shared,
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
    let dra = |c: &Config| c.resources.iter().filter(|r| r.dra).map(|r| r.name.clone()).collect::<Vec<_>>();
    if dra(&new) != dra(config) {
        metrics::get().reload("config", false);
        return error!(
            "{source}: the resources published through DRA (dra: true) changed from {:?} to {:?}, which takes a \
             restart of the device plugin: the previous configuration stays in force",
            dra(config),
            dra(&new)
        );
    }
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
    metrics::get().set_resources(new.resources.iter().filter(|r| !r.dra).map(|r| r.name.as_str()));
    let added = watcher.reconfigure(new.resources.clone());
    // The first ListAndWatch answer of an added resource is the node as it is, not an empty list.
    watcher.refresh().await;
    for (res, rx) in added {
        tokio::spawn(server::serve(res, paths.clone(), rx, shared.clone(), timing));
    }
    *current.lock().unwrap_or_else(|e| e.into_inner()) = new.resources.clone();
    *config = new;
}
