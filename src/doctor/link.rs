//! Doctor, "why is the link unstable?": per PF, VF netdev and RDMA port, the state, the physical state, and the
//! counters (netdev `carrier_changes` and errors, RDMA `counters/` and `hw_counters/`) read twice an interval
//! apart, naming those that moved.
