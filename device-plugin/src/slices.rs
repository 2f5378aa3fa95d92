//! The DRA driver's ResourceSlice: the VFs of the `dra: true` resources as devices of one slice for this node
//! (pool = node name), with the attributes a claim selects on, republished when the offered lists change (a VF came,
//! went or changed health), when the kubelet registers the driver (it wipes a driver's slices when the driver goes
//! away) and, as a safety net, every minute if the slice was changed or deleted behind the daemon's back.
//! [`devices`] is plain data from the inventory; [`Publisher`] is the only part that talks to the API server.

use crate::alloc;
use crate::devices::Offered;
use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use sriov_rdma_cni::inventory::Inventory;
use sriov_rdma_cni::model::PciAddr;
use sriov_rdma_cni::{error, info};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The taint an unhealthy VF carries (its value: the first reason, e.g. `pf_link_down`): no new claim gets it.
pub const UNHEALTHY_TAINT: &str = "unhealthy";

/// A VF's device name in the slice: its PCI address as a DNS label (`0000:3b:00.2` → `pci-0000-3b-00-2`).
pub fn device_name(pci: &str) -> String {
    format!("pci-{}", pci.replace([':', '.'], "-"))
}

/// The slice's object name: one per node and driver.
pub fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}")
}

fn string(v: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute { string: Some(v.into()), ..DeviceAttribute::default() }
}

fn int(v: i64) -> DeviceAttribute {
    DeviceAttribute { int: Some(v), ..DeviceAttribute::default() }
}

/// The slice's devices for the offered VFs (a VF offered by several `dra: true` resources once). Attributes, in
/// the driver's domain: `pciAddress`, `pfName`, `pfPciAddress`, `vfIndex`, `vendor`, `deviceId`, `kernelDriver`,
/// `linkType`, `rdmaDevice`, `numaNode`; and the standard `resource.kubernetes.io/pciBusID` and
/// `resource.kubernetes.io/pcieRoot` (`pci<domain>:<bus>` of the root complex, read from the VF's sysfs link), which
/// a claim matches against another driver's device (a GPU under the same root). An unhealthy VF is listed with the
/// taint `<driver>/unhealthy` (NoSchedule).
pub fn devices(offered: &[Offered], inv: &Inventory, sysfs: &Path, driver: &str) -> Vec<Device> {
    let mut out: BTreeMap<String, Device> = BTreeMap::new();
    for o in offered {
        let name = device_name(&o.id);
        if out.contains_key(&name) {
            continue;
        }
        let mut a: BTreeMap<String, DeviceAttribute> = BTreeMap::new();
        a.insert("pciAddress".into(), string(&o.id));
        a.insert("resource.kubernetes.io/pciBusID".into(), string(&o.id));
        let link = std::fs::read_link(sysfs.join("bus/pci/devices").join(&o.id)).ok();
        if let Some(root) = link.as_deref().and_then(alloc::pcie_root) {
            a.insert("resource.kubernetes.io/pcieRoot".into(), string(root));
        }
        if let Some(pf) = &o.pf {
            a.insert("pfName".into(), string(pf));
        }
        if let Some(n) = o.numa_node {
            a.insert("numaNode".into(), int(i64::from(n)));
        }
        if let Some(d) = &o.driver {
            a.insert("kernelDriver".into(), string(d));
        }
        if let Some(r) = o.rdma_devices.first() {
            a.insert("rdmaDevice".into(), string(r));
        }
        if let Some((pf, vf)) = PciAddr::parse(&o.id).ok().and_then(|p| inv.vf(&p)) {
            a.insert("pfPciAddress".into(), string(pf.pci.as_str()));
            a.insert("vfIndex".into(), int(i64::from(vf.index)));
            if let Some(v) = &vf.ids.vendor {
                a.insert("vendor".into(), string(v));
            }
            if let Some(d) = &vf.ids.device {
                a.insert("deviceId".into(), string(d));
            }
            if let Some(l) = &pf.link_type {
                a.insert("linkType".into(), string(l));
            }
        }
        let taints = (o.health != crate::devices::HEALTHY).then(|| {
            vec![DeviceTaint {
                key: format!("{driver}/{UNHEALTHY_TAINT}"),
                value: Some(o.reasons.first().copied().unwrap_or("unhealthy").to_string()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]
        });
        out.insert(name.clone(), Device { name, attributes: Some(a), taints, ..Device::default() });
    }
    out.into_values().collect()
}

/// The slice for this node's pool, at `generation`.
pub fn slice(driver: &str, node: &str, generation: i64, devices: Vec<Device>) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta { name: Some(slice_name(node, driver)), ..ObjectMeta::default() },
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node.into()),
            pool: ResourcePool { name: node.into(), generation, resource_slice_count: 1 },
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        },
    }
}

/// Writes the node's slice to the API server.
pub struct Publisher {
    api: Api<ResourceSlice>,
    driver: String,
    node: String,
}

impl Publisher {
    pub fn new(client: kube::Client, driver: &str, node: &str) -> Publisher {
        Publisher { api: Api::all(client), driver: driver.into(), node: node.into() }
    }

    /// Creates the slice, or replaces it with the next pool generation if its devices differ. Returns the
    /// generation written, `None` when the slice was already as wanted.
    pub async fn publish(&self, devices: Vec<Device>) -> Result<Option<i64>, String> {
        let name = slice_name(&self.node, &self.driver);
        let cur = self.api.get_opt(&name).await.map_err(|e| format!("reading ResourceSlice {name}: {e}"))?;
        let pp = PostParams { field_manager: Some(self.driver.clone()), ..PostParams::default() };
        match cur {
            None => {
                self.api
                    .create(&pp, &slice(&self.driver, &self.node, 1, devices))
                    .await
                    .map_err(|e| format!("creating ResourceSlice {name}: {e}"))?;
                Ok(Some(1))
            }
            Some(cur)
                if unstamped(cur.spec.devices.clone()).as_ref() == Some(&devices)
                    && cur.spec.pool.name == self.node =>
            {
                Ok(None)
            }
            Some(cur) => {
                let generation = cur.spec.pool.generation + 1;
                let mut new = slice(&self.driver, &self.node, generation, devices);
                new.metadata.resource_version = cur.metadata.resource_version;
                self.api.replace(&name, &pp, &new).await.map_err(|e| format!("updating ResourceSlice {name}: {e}"))?;
                Ok(Some(generation))
            }
        }
    }
}

/// The devices as this driver writes them: the API server stamps each taint's `timeAdded`, which the driver does
/// not set (else a tainted VF would be written again at every check).
fn unstamped(mut devices: Option<Vec<Device>>) -> Option<Vec<Device>> {
    for t in devices.iter_mut().flatten().flat_map(|d| d.taints.iter_mut().flatten()) {
        t.time_added = None;
    }
    devices
}

/// How often the slice is checked without a change, and how soon a failed write is tried again.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    pub check: Duration,
    pub retry: Duration,
}

impl Default for Periods {
    fn default() -> Self {
        Periods { check: Duration::from_secs(60), retry: Duration::from_secs(5) }
    }
}

/// Publishes for as long as the daemon runs: after each change of one of `lists` (the `dra: true` resources'
/// offered VFs), each bump of `kick` (the kubelet registered the driver), and every `periods.check`.
pub async fn run(
    publisher: Publisher,
    lists: Vec<watch::Receiver<Vec<Offered>>>,
    inventory: watch::Receiver<Arc<Inventory>>,
    sysfs: PathBuf,
    mut kick: watch::Receiver<u64>,
    periods: Periods,
) {
    let wake = Arc::new(Notify::new());
    for mut rx in lists.iter().cloned() {
        let wake = wake.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                wake.notify_one();
            }
        });
    }
    let mut last_error: Option<String> = None;
    loop {
        let offered: Vec<Offered> = lists.iter().flat_map(|rx| rx.borrow().clone()).collect();
        let inv = inventory.borrow().clone();
        let (s, d) = (sysfs.clone(), publisher.driver.clone());
        let devices = match tokio::task::spawn_blocking(move || devices(&offered, &inv, &s, &d)).await {
            Ok(d) => d,
            Err(e) => {
                error!("DRA: listing the devices of the ResourceSlice: {e}");
                Vec::new()
            }
        };
        let n = devices.len();
        let wait = match publisher.publish(devices).await {
            Ok(Some(g)) => {
                let name = slice_name(&publisher.node, &publisher.driver);
                info!("DRA: ResourceSlice {name} published: {n} devices, pool generation {g}");
                last_error = None;
                periods.check
            }
            Ok(None) => {
                last_error = None;
                periods.check
            }
            Err(e) => {
                // Once per distinct error: an API server that is down is not a line every few seconds.
                if last_error.as_ref() != Some(&e) {
                    error!("DRA: {e}; trying again");
                    last_error = Some(e);
                }
                periods.retry
            }
        };
        tokio::select! {
            _ = wake.notified() => {}
            r = kick.changed() => {
                if r.is_err() {
                    tokio::time::sleep(wait).await;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
