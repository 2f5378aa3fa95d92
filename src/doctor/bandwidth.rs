//! Doctor, "why is bandwidth below expectation?": negotiated link speed against the NIC's, the PF's PCIe link,
//! the netdev MTU against the RoCE MTU, RoCE congestion settings, the NIC's NUMA node, and `--bandwidth PEER`.
