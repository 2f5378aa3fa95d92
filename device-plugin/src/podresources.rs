//! `--pod-resources`: asks the kubelet's pod-resources API (v1 List, on `<kubelet root>/pod-resources/kubelet.sock`)
//! which pod (namespace and name) and container holds which device, and prints it as JSON. `sriov-rdma doctor`
//! runs this so the CNI binary stays synchronous; the kubelet's checkpoint has pod UIDs, this has the names.

use crate::podresources_api::pod_resources_lister_client::PodResourcesListerClient;
use crate::podresources_api::{ListPodResourcesRequest, ListPodResourcesResponse};
use crate::server::unix_channel;
pub use sriov_rdma_cni::kubelet::NamedPodDevices as PodDevices;
use std::path::Path;

/// One row per (pod, container, resource), in the kubelet's order; containers without devices are left out.
pub fn rows(resp: ListPodResourcesResponse) -> Vec<PodDevices> {
    let mut out = Vec::new();
    for p in resp.pod_resources {
        for c in p.containers {
            for d in c.devices.into_iter().filter(|d| !d.device_ids.is_empty()) {
                out.push(PodDevices {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.name.clone(),
                    resource: d.resource_name,
                    devices: d.device_ids,
                });
            }
        }
    }
    out
}

/// An error with its causes (a transport error alone says only "transport error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if parts.last() != Some(&c_text) {
            parts.push(c_text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// Calls List on the kubelet's pod-resources socket (connect within 5 s, answer within 10 s).
pub async fn list(socket: &Path) -> Result<Vec<PodDevices>, String> {
    let ch = unix_channel(socket.to_path_buf())
        .await
        .map_err(|e| format!("connecting to {}: {}", socket.display(), chain(&e)))?;
    let resp = PodResourcesListerClient::new(ch)
        .list(ListPodResourcesRequest {})
        .await
        .map_err(|s| format!("List on {}: {}: {}", socket.display(), s.code(), s.message()))?;
    Ok(rows(resp.into_inner()))
}

/// The JSON `--pod-resources` prints.
pub fn to_json(socket: &Path, rows: &[PodDevices]) -> serde_json::Value {
    serde_json::json!({ "socket": socket, "allocations": rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podresources_api::{ContainerDevices, ContainerResources, PodResources};

    #[test]
    fn one_row_per_container_and_resource_with_devices() {
        let dev = |r: &str, ids: &[&str]| ContainerDevices {
            resource_name: r.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: None,
        };
        let resp = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "nccl-0".into(),
                namespace: "team-a".into(),
                containers: vec![
                    ContainerResources {
                        name: "main".into(),
                        devices: vec![dev("rdma/hca", &["0000:3b:02.1"]), dev("cpu", &[])],
                    },
                    ContainerResources { name: "side".into(), devices: vec![] },
                ],
            }],
        };
        let r = rows(resp);
        assert_eq!(
            r,
            [PodDevices {
                namespace: "team-a".into(),
                pod: "nccl-0".into(),
                container: "main".into(),
                resource: "rdma/hca".into(),
                devices: vec!["0000:3b:02.1".into()],
            }]
        );
    }
}
