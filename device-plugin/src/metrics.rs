//! Prometheus metrics and the `/healthz` and `/readyz` probes of the daemon, served over HTTP on `--metrics-addr`.
//! The figures live in one process-wide [`Metrics`] that the kubelet side (server.rs) and the reload loop
//! (reload.rs) update through a few calls; nothing here changes what the daemon does.

use crate::devices::{self, Offered, Paths, HEALTHY};
use axum::http::StatusCode;
use axum::routing::get as route_get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sriov_rdma_cni::flow::orphans::{whereabouts_in, Whereabouts};
use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::sysfs::Sysfs;
use sriov_rdma_cni::kubelet::{Checkpoint, CHECKPOINT};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByResource {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Transition {
    resource: String,
    /// The health the VF went to.
    health: String,
    /// Why it is unhealthy ([`Offered::reasons`]), `ok` when it became healthy.
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByFile {
    /// `config` or `policy`.
    file: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ByState {
    state: String,
}

/// What the probes answer from.
#[derive(Default)]
struct Probes {
    /// Each configured resource and whether it is registered with the kubelet now.
    registered: BTreeMap<String, bool>,
    /// Whether the inventory loop ran its first round, and since when it is in a round (None while it waits for
    /// a change): a loop that waits costs nothing and is alive, one stuck in a round is not.
    started: bool,
    busy_since: Option<Instant>,
}

/// Every figure the daemon exports.
pub struct Metrics {
    registry: Registry,
    offered: Family<ByResource, Gauge>,
    healthy: Family<ByResource, Gauge>,
    allocated: Family<ByResource, Gauge>,
    registered: Family<ByResource, Gauge>,
    transitions: Family<Transition, Counter>,
    allocations: Family<ByResource, Counter>,
    allocation_errors: Family<ByResource, Counter>,
    reloads: Family<ByFile, Counter>,
    reload_errors: Family<ByFile, Counter>,
    attachments: Family<ByState, Gauge>,
    probes: Mutex<Probes>,
}

/// The attachment record states, always exported (0 when none).
const STATES: [&str; 5] = ["live", "held", "orphan", "unreadable", "unknown"];

/// The process's metrics.
pub fn get() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::new)
}

fn res(name: &str) -> ByResource {
    ByResource { resource: name.to_string() }
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sriov_rdma");
        let m = Metrics {
            offered: Family::default(),
            healthy: Family::default(),
            allocated: Family::default(),
            registered: Family::default(),
            transitions: Family::default(),
            allocations: Family::default(),
            allocation_errors: Family::default(),
            reloads: Family::default(),
            reload_errors: Family::default(),
            attachments: Family::default(),
            probes: Mutex::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register("vfs_offered", "VFs listed to the kubelet, healthy or not", m.offered.clone());
        r.register("vfs_healthy", "VFs listed to the kubelet as Healthy", m.healthy.clone());
        r.register("vfs_allocated", "VFs the kubelet's checkpoint has allocated to containers", m.allocated.clone());
        r.register("registered", "1 while the resource is registered with the kubelet", m.registered.clone());
        r.register("health_transitions", "VF health changes, by the health reached and why", m.transitions.clone());
        r.register("allocate_calls", "Allocate calls from the kubelet", m.allocations.clone());
        r.register("allocate_errors", "Allocate calls refused", m.allocation_errors.clone());
        r.register("config_reloads", "Changes of the config or node policy file applied", m.reloads.clone());
        r.register(
            "config_reload_errors",
            "Changes of the config or node policy file refused",
            m.reload_errors.clone(),
        );
        r.register("attachments", "The CNI's attachment records, by where their VF is", m.attachments.clone());
        for file in ["config", "policy"] {
            let l = ByFile { file: file.into() };
            let _ = m.reloads.get_or_create(&l);
            let _ = m.reload_errors.get_or_create(&l);
        }
        Metrics { registry, ..m }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The resources configured now: the readiness probe waits for each; a removed one's figures go.
    pub fn set_resources<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let names: BTreeSet<&str> = names.into_iter().collect();
        let mut p = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = p.registered.keys().filter(|n| !names.contains(n.as_str())).cloned().collect();
        for n in gone {
            p.registered.remove(&n);
            for f in [&self.offered, &self.healthy, &self.allocated, &self.registered] {
                f.remove(&res(&n));
            }
        }
        for n in names {
            p.registered.entry(n.to_string()).or_insert(false);
            let _ = self.allocations.get_or_create(&res(n));
            let _ = self.allocation_errors.get_or_create(&res(n));
            let _ = self.registered.get_or_create(&res(n));
        }
    }

    /// The resource is (or is no longer) registered with the kubelet.
    pub fn registered(&self, name: &str, yes: bool) {
        let mut p = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = p.registered.get_mut(name) {
            *r = yes;
            self.registered.get_or_create(&res(name)).set(i64::from(yes));
        }
    }

    pub fn allocate(&self, name: &str, ok: bool) {
        self.allocations.get_or_create(&res(name)).inc();
        if !ok {
            self.allocation_errors.get_or_create(&res(name)).inc();
        }
    }

    /// A VF of `name` changed health to `health`; `reason` is its first problem's code.
    pub fn transition(&self, name: &str, health: &str, reason: Option<&str>) {
        let l = Transition { resource: name.into(), health: health.into(), reason: reason.unwrap_or("ok").into() };
        self.transitions.get_or_create(&l).inc();
    }

    /// A change of `file` (`config`, `policy`) was applied, or refused.
    pub fn reload(&self, file: &str, ok: bool) {
        let l = ByFile { file: file.into() };
        if ok { &self.reloads } else { &self.reload_errors }.get_or_create(&l).inc();
    }

    /// The inventory loop begins a round of work.
    pub fn working(&self) {
        self.probes.lock().unwrap_or_else(|e| e.into_inner()).busy_since = Some(Instant::now());
    }

    /// The inventory loop ended a round and waits for the next change.
    pub fn waiting(&self) {
        let mut p = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        (p.started, p.busy_since) = (true, None);
    }

    /// The figures of one round: each resource's list as sent to the kubelet. Costs nothing but counting.
    pub fn observe(&self, lists: &[(String, Vec<Offered>)]) {
        for (name, list) in lists {
            self.offered.get_or_create(&res(name)).set(list.len() as i64);
            self.healthy.get_or_create(&res(name)).set(list.iter().filter(|o| o.health == HEALTHY).count() as i64);
        }
    }

    /// The figures read from the node when `/metrics` is asked for, not in every round of the loop (an idle
    /// daemon that nobody scrapes reads nothing): the kubelet's allocations and the attachment records. Reads
    /// files and netlink: call it off the runtime's thread.
    pub fn read_node(&self, paths: &Paths) {
        let names: Vec<String> =
            self.probes.lock().unwrap_or_else(|e| e.into_inner()).registered.keys().cloned().collect();
        // The kubelet writes its checkpoint; a missing or unreadable one counts nothing rather than stale figures.
        let cp = Checkpoint::read(&paths.kubelet_dir.join(CHECKPOINT)).ok().flatten().unwrap_or_default();
        for name in &names {
            let ids: BTreeSet<&String> =
                cp.allocations.iter().filter(|a| &a.resource == name).flat_map(|a| &a.devices).collect();
            self.allocated.get_or_create(&res(name)).set(ids.len() as i64);
        }
        let mut count: BTreeMap<&str, i64> = STATES.iter().map(|s| (*s, 0)).collect();
        let sysfs = Sysfs::at(paths.sysfs.clone());
        let mut route = RouteSocket::new().ok();
        for rec in devices::records(&paths.state_dir).into_values() {
            let state = match (rec, route.as_mut()) {
                (None, _) => "unreadable",
                (Some(_), None) => "unknown",
                (Some(rec), Some(route)) => match whereabouts_in(&sysfs, route, &rec) {
                    Ok(Whereabouts::Live) => "live",
                    Ok(Whereabouts::Held) => "held",
                    Ok(Whereabouts::Orphan) => "orphan",
                    Err(_) => "unknown",
                },
            };
            *count.entry(state).or_default() += 1;
        }
        for (state, n) in count {
            self.attachments.get_or_create(&ByState { state: state.into() }).set(n);
        }
    }

    /// `/healthz`: the inventory loop ran its first round and is not stuck in one (30 s and more). Waiting for a
    /// change is its idle state: nothing has to tick to prove it alive (a runtime that no longer runs does not
    /// answer the probe at all).
    fn health(&self) -> Result<String, String> {
        let p = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        health_of(p.started, p.busy_since.map(|t| t.elapsed()))
    }

    /// `/readyz`: every configured resource is registered with the kubelet.
    fn readiness(&self) -> Result<String, String> {
        let p = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        let waiting: Vec<&str> = p.registered.iter().filter(|(_, r)| !**r).map(|(n, _)| n.as_str()).collect();
        if p.registered.is_empty() {
            Err("no resource configured".into())
        } else if waiting.is_empty() {
            Ok("ok".into())
        } else {
            Err(format!("not registered with the kubelet: {}", waiting.join(", ")))
        }
    }
}

/// What `/healthz` answers: `busy` is how long the loop has been in its current round.
fn health_of(started: bool, busy: Option<Duration>) -> Result<String, String> {
    match busy {
        Some(d) if d >= STUCK => Err(format!("the inventory loop has been in one round for {} s", d.as_secs())),
        _ if !started => Err("the inventory loop has not run yet".into()),
        _ => Ok("ok".into()),
    }
}

/// A round of the inventory loop that lasts this long is stuck: a full scan of a thousand VFs takes well under a
/// second.
const STUCK: Duration = Duration::from_secs(30);

fn probe(r: Result<String, String>) -> (StatusCode, String) {
    match r {
        Ok(s) => (StatusCode::OK, s + "\n"),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e + "\n"),
    }
}

/// Binds the metrics address; an address in use is an error at start, not a silent absence of metrics.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("listening for metrics on {addr}: {e}"))
}

/// Serves `/metrics`, `/healthz` and `/readyz` for as long as the daemon runs; `/metrics` reads the node's
/// allocations and records under `paths` first.
pub async fn serve(listener: tokio::net::TcpListener, paths: Paths) {
    let app = axum::Router::new()
        .route(
            "/metrics",
            route_get(move || {
                let paths = paths.clone();
                async move {
                    let text = tokio::task::spawn_blocking(move || {
                        get().read_node(&paths);
                        get().render()
                    })
                    .await
                    .unwrap_or_else(|e| format!("# reading the node's figures: {e}\n"));
                    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
                }
            }),
        )
        .route("/healthz", route_get(|| async { probe(get().health()) }))
        .route("/readyz", route_get(|| async { probe(get().readiness()) }));
    if let Err(e) = axum::serve(listener, app).await {
        sriov_rdma_cni::error!("serving metrics: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_before_the_first_round_and_when_a_round_is_stuck() {
        assert!(health_of(false, None).unwrap_err().contains("has not run yet"));
        assert!(health_of(false, Some(Duration::from_secs(1))).is_err());
        assert_eq!(health_of(true, None), Ok("ok".into()));
        assert_eq!(health_of(true, Some(Duration::from_secs(29))), Ok("ok".into()));
        let e = health_of(true, Some(Duration::from_secs(31))).unwrap_err();
        assert!(e.contains("in one round for 31 s"), "{e}");
    }
}
