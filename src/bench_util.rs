//! Shared by the benchmark binaries: the raw-netlink floor cycle and statistics.
#![allow(dead_code)]

use sriov_rdma_cni::kernel::link::RouteSocket;
use sriov_rdma_cni::kernel::netlink::Route;
use sriov_rdma_cni::kernel::netns::Netns;
use std::time::Instant;

/// Moves `dev` into a namespace and back, with one socket on each side, like the plugin does.
pub struct Floor {
    dev: String,
    host: Netns,
    pod: Netns,
    host_sock: RouteSocket,
    pod_sock: RouteSocket,
}

impl Floor {
    pub fn new(dev: &str, netns: &str) -> std::io::Result<Floor> {
        let host = Netns::current()?;
        let pod = Netns::open(netns)?;
        let pod_sock = pod.socket::<Route>()?;
        Ok(Floor { dev: dev.to_string(), host, pod, host_sock: RouteSocket::new()?, pod_sock })
    }

    /// One round trip in milliseconds; with `up`, the device is also brought up in the namespace (the
    /// driver's open, which every attach needs: on some drivers it dominates).
    pub fn cycle(&mut self, up: bool) -> std::io::Result<f64> {
        let t = Instant::now();
        let l = self.host_sock.link_by_name(&self.dev)?.ok_or_else(|| std::io::Error::other("device not found"))?;
        self.host_sock.move_link(l.index, self.pod.fd(), &self.dev)?;
        let l = self.pod_sock.link_by_name(&self.dev)?.ok_or_else(|| std::io::Error::other("device not in netns"))?;
        if up {
            self.pod_sock.set_link(l.index, vec![], Some(true))?;
        }
        self.pod_sock.move_link(l.index, self.host.fd(), &self.dev)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}
