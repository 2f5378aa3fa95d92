//! RDMA netlink (NETLINK_RDMA, the NLDEV client): devices, ports, the netns mode, and moving a device into
//! another network namespace. No family header: attributes follow the netlink header directly.
//!
//! Kernel rules this code follows: a move carries DEV_INDEX and NET_NS_FD only (a DEV_NAME makes released
//! kernels rename instead); a device is found in the sending socket's namespace, so moving it back out of
//! a pod needs a socket opened inside the pod; shared mode refuses moves; a destroyed namespace returns
//! its devices to the initial one by itself.

use super::netlink::{Family, Kind, Socket};
use super::netns::Netns;
use netlink_packet_core::{DecodeError, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, NlasIterator};
use std::io;
use std::os::fd::RawFd;

pub const NLDEV: u16 = 5;

pub mod cmd {
    pub const GET: u16 = 1;
    pub const SET: u16 = 2;
    pub const PORT_GET: u16 = 5;
    pub const SYS_GET: u16 = 6;
}

pub mod attr {
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const FW_VERSION: u16 = 5;
    pub const NODE_GUID: u16 = 6;
    pub const PORT_STATE: u16 = 12;
    pub const PORT_PHYS_STATE: u16 = 13;
    pub const DEV_NODE_TYPE: u16 = 14;
    pub const NDEV_INDEX: u16 = 50;
    pub const NDEV_NAME: u16 = 51;
    pub const SYS_NETNS_MODE: u16 = 66;
    pub const DEV_PROTOCOL: u16 = 67;
    pub const NET_NS_FD: u16 = 68;
}

/// One NLDEV message: a command and its attributes as (type, value bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaMessage {
    pub cmd: u16,
    pub attrs: Vec<(u16, Vec<u8>)>,
}

impl RdmaMessage {
    pub fn new(cmd: u16) -> Self {
        RdmaMessage { cmd, attrs: Vec::new() }
    }

    pub fn with_u32(mut self, kind: u16, v: u32) -> Self {
        self.attrs.push((kind, v.to_ne_bytes().to_vec()));
        self
    }

    fn raw(&self, kind: u16) -> Option<&[u8]> {
        self.attrs.iter().find(|(k, _)| *k == kind).map(|(_, v)| v.as_slice())
    }

    pub fn u8(&self, kind: u16) -> Option<u8> {
        self.raw(kind)?.first().copied()
    }

    pub fn u32(&self, kind: u16) -> Option<u32> {
        Some(u32::from_ne_bytes(self.raw(kind)?.get(..4)?.try_into().ok()?))
    }

    pub fn u64(&self, kind: u16) -> Option<u64> {
        Some(u64::from_ne_bytes(self.raw(kind)?.get(..8)?.try_into().ok()?))
    }

    pub fn str(&self, kind: u16) -> Option<String> {
        let b = self.raw(kind)?;
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl NetlinkSerializable for RdmaMessage {
    fn message_type(&self) -> u16 {
        (NLDEV << 10) + self.cmd
    }

    fn buffer_len(&self) -> usize {
        self.attrs.iter().map(|(_, v)| align4(4 + v.len())).sum()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        let mut off = 0;
        for (kind, v) in &self.attrs {
            let len = 4 + v.len();
            buffer[off..off + 2].copy_from_slice(&(len as u16).to_ne_bytes());
            buffer[off + 2..off + 4].copy_from_slice(&kind.to_ne_bytes());
            buffer[off + 4..off + len].copy_from_slice(v);
            buffer[off + len..off + align4(len)].fill(0);
            off += align4(len);
        }
    }
}

impl NetlinkDeserializable for RdmaMessage {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        let mut m = RdmaMessage::new(header.message_type & 0x3ff);
        for nla in NlasIterator::new(payload) {
            let nla = nla?;
            m.attrs.push((nla.kind(), nla.value().to_vec()));
        }
        Ok(m)
    }
}

/// NETLINK_RDMA.
pub struct Rdma;

impl Family for Rdma {
    const PROTOCOL: isize = netlink_sys::constants::NETLINK_RDMA;
    type Message = RdmaMessage;
}

pub type RdmaSocket = Socket<Rdma>;

/// The RDMA subsystem's namespace mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetnsMode {
    /// Every device is visible in every namespace; devices cannot move.
    Shared,
    /// A device lives in one namespace and can be moved.
    Exclusive,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RdmaDevice {
    pub index: u32,
    pub name: String,
    pub node_type: Option<u8>,
    pub protocol: Option<String>,
    pub node_guid: Option<u64>,
    pub fw: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RdmaPort {
    pub port: u32,
    pub state: Option<u8>,
    pub phys_state: Option<u8>,
    pub ndev_index: Option<u32>,
    pub ndev_name: Option<String>,
}

/// Opens an RDMA netlink socket; `None` when this kernel has no RDMA subsystem (EPROTONOSUPPORT).
/// With `ns`, the socket lives in that namespace (it then sees what the pod sees).
pub fn open(ns: Option<&Netns>) -> io::Result<Option<RdmaSocket>> {
    let sock = match ns {
        None => RdmaSocket::new(),
        Some(ns) => ns.socket::<Rdma>(),
    };
    match sock {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn get_devices_msg() -> RdmaMessage {
    RdmaMessage::new(cmd::GET)
}

pub fn port_get_msg(dev: u32) -> RdmaMessage {
    RdmaMessage::new(cmd::PORT_GET).with_u32(attr::DEV_INDEX, dev)
}

pub fn sys_get_msg() -> RdmaMessage {
    RdmaMessage::new(cmd::SYS_GET)
}

/// The move: DEV_INDEX and NET_NS_FD, never DEV_NAME.
pub fn move_msg(dev: u32, ns_fd: RawFd) -> RdmaMessage {
    RdmaMessage::new(cmd::SET).with_u32(attr::DEV_INDEX, dev).with_u32(attr::NET_NS_FD, ns_fd as u32)
}

impl Socket<Rdma> {
    /// The devices visible from this socket's namespace.
    pub fn devices(&mut self) -> io::Result<Vec<RdmaDevice>> {
        Ok(self
            .request(get_devices_msg(), Kind::Dump)?
            .into_iter()
            .filter_map(|m| {
                Some(RdmaDevice {
                    index: m.u32(attr::DEV_INDEX)?,
                    name: m.str(attr::DEV_NAME)?,
                    node_type: m.u8(attr::DEV_NODE_TYPE),
                    protocol: m.str(attr::DEV_PROTOCOL),
                    node_guid: m.u64(attr::NODE_GUID),
                    fw: m.str(attr::FW_VERSION).filter(|f| !f.is_empty()),
                })
            })
            .collect())
    }

    /// The ports of a device; the netdev attributes appear only for a netdev in this socket's namespace.
    pub fn ports(&mut self, dev: u32) -> io::Result<Vec<RdmaPort>> {
        Ok(self
            .request(port_get_msg(dev), Kind::Dump)?
            .into_iter()
            .filter_map(|m| {
                Some(RdmaPort {
                    port: m.u32(attr::PORT_INDEX)?,
                    state: m.u8(attr::PORT_STATE),
                    phys_state: m.u8(attr::PORT_PHYS_STATE),
                    ndev_index: m.u32(attr::NDEV_INDEX),
                    ndev_name: m.str(attr::NDEV_NAME),
                })
            })
            .collect())
    }

    pub fn netns_mode(&mut self) -> io::Result<NetnsMode> {
        let replies = self.request(sys_get_msg(), Kind::Get)?;
        match replies.first().and_then(|m| m.u8(attr::SYS_NETNS_MODE)) {
            Some(0) => Ok(NetnsMode::Exclusive),
            Some(_) => Ok(NetnsMode::Shared),
            None => Err(io::Error::new(io::ErrorKind::InvalidData, "SYS_GET reply without a netns mode")),
        }
    }

    /// Moves a device into the namespace `ns_fd`; it must be visible from this socket's namespace.
    pub fn move_device(&mut self, dev: u32, ns_fd: RawFd) -> io::Result<()> {
        self.request(move_msg(dev, ns_fd), Kind::Change).map(drop)
    }

    /// The first device one of whose ports matches `port` (e.g. is bound to a given netdev).
    pub fn device_with_port(&mut self, port: impl Fn(&RdmaPort) -> bool) -> io::Result<Option<RdmaDevice>> {
        for d in self.devices()? {
            if self.ports(d.index)?.iter().any(&port) {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::netlink::encode;

    fn header(len: u32, ty: u16, flags: u16, seq: u32) -> Vec<u8> {
        [&len.to_ne_bytes()[..], &ty.to_ne_bytes(), &flags.to_ne_bytes(), &seq.to_ne_bytes(), &0u32.to_ne_bytes()]
            .concat()
    }

    #[test]
    fn get_dump_is_a_bare_header() {
        // RDMA_NL_GET_TYPE(NLDEV=5, GET=1) = 5121; NLM_F_REQUEST|NLM_F_DUMP = 0x301.
        assert_eq!(encode(get_devices_msg(), Kind::Dump, 7), header(16, 5121, 0x301, 7));
    }

    #[test]
    fn port_get_carries_the_device_index() {
        let want = [header(24, (5 << 10) + 5, 0x301, 1), vec![8, 0, 1, 0], 3u32.to_ne_bytes().to_vec()].concat();
        assert_eq!(encode(port_get_msg(3), Kind::Dump, 1), want);
    }

    #[test]
    fn sys_get_is_a_plain_request() {
        assert_eq!(encode(sys_get_msg(), Kind::Get, 2), header(16, (5 << 10) + 6, 0x1, 2));
    }

    #[test]
    fn move_is_dev_index_and_netns_fd_only() {
        let want = [
            header(32, (5 << 10) + 2, 0x5, 4),
            [&8u16.to_ne_bytes()[..], &1u16.to_ne_bytes(), &9u32.to_ne_bytes()].concat(),
            [&8u16.to_ne_bytes()[..], &68u16.to_ne_bytes(), &11u32.to_ne_bytes()].concat(),
        ]
        .concat();
        let bytes = encode(move_msg(9, 11), Kind::Change, 4);
        assert_eq!(bytes, want);
        assert!(!move_msg(9, 11).attrs.iter().any(|(k, _)| *k == attr::DEV_NAME));
    }

    #[test]
    fn replies_parse_strings_and_numbers() {
        let mut m = RdmaMessage::new(cmd::GET).with_u32(attr::DEV_INDEX, 2);
        m.attrs.push((attr::DEV_NAME, b"mlx5_3\0".to_vec()));
        m.attrs.push((attr::DEV_NODE_TYPE, vec![1]));
        let mut buf = vec![0; m.buffer_len()];
        m.serialize(&mut buf);
        let mut h = NetlinkHeader::default();
        h.message_type = (NLDEV << 10) + cmd::GET;
        let back = RdmaMessage::deserialize(&h, &buf).unwrap();
        assert_eq!(back.cmd, cmd::GET);
        assert_eq!(back.u32(attr::DEV_INDEX), Some(2));
        assert_eq!(back.str(attr::DEV_NAME).as_deref(), Some("mlx5_3"));
        assert_eq!(back.u8(attr::DEV_NODE_TYPE), Some(1));
        assert_eq!(back.u32(attr::NDEV_INDEX), None);
    }
}
