//! One netlink socket for every family: sends a request, checks sequence numbers and acks, collects replies.
//!
//! A family is a protocol number and a message type; NETLINK_ROUTE and NETLINK_RDMA are two `impl`s.

use netlink_packet_core::{
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NLM_F_ACK, NLM_F_CREATE,
    NLM_F_DUMP, NLM_F_EXCL, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_sys::{Socket as RawSocket, SocketAddr};
use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};

pub trait Family {
    const PROTOCOL: isize;
    type Message: NetlinkSerializable + NetlinkDeserializable + Debug;
}

/// NETLINK_ROUTE: links, addresses, routes, VF settings.
pub struct Route;

impl Family for Route {
    const PROTOCOL: isize = netlink_sys::constants::NETLINK_ROUTE;
    type Message = netlink_packet_route::RouteNetlinkMessage;
}

pub use crate::model::{errno, KernelError};

const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLMSGERR_ATTR_MSG: u16 = 1;

/// The extended-ack message (NLMSGERR_ATTR_MSG) of one NLMSG_ERROR message, if the kernel attached one.
pub fn ext_ack_msg(raw: &[u8]) -> Option<String> {
    let flags = u16::from_ne_bytes([*raw.get(6)?, *raw.get(7)?]);
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    // nlmsghdr (16) + error (4) + the request's header, or the whole request when not capped.
    let echoed = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        u32::from_ne_bytes([*raw.get(20)?, *raw.get(21)?, *raw.get(22)?, *raw.get(23)?]) as usize
    };
    let mut off = 20 + ((echoed + 3) & !3);
    while off + 4 <= raw.len() {
        let len = u16::from_ne_bytes([raw[off], raw[off + 1]]) as usize;
        let kind = u16::from_ne_bytes([raw[off + 2], raw[off + 3]]) & 0x3fff;
        if len < 4 || off + len > raw.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let s = &raw[off + 4..off + len];
            let s = s.split(|b| *b == 0).next().unwrap_or(s);
            return Some(String::from_utf8_lossy(s).into_owned()).filter(|m| !m.is_empty());
        }
        off += (len + 3) & !3;
    }
    None
}

/// A netlink socket of family `F`, bound to the network namespace it was opened in.
pub struct Socket<F: Family> {
    sock: RawSocket,
    seq: u32,
    _family: PhantomData<fn() -> F>,
}

/// What a request expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A change: the kernel answers with an ack.
    Change,
    /// A new object that must not exist yet (address, route): answered with an ack.
    Create,
    /// One object: the kernel answers with it.
    Get,
    /// All objects: the kernel answers with several, then DONE.
    Dump,
}

impl Kind {
    fn flags(self) -> u16 {
        match self {
            Kind::Change => NLM_F_REQUEST | NLM_F_ACK,
            Kind::Create => NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            Kind::Get => NLM_F_REQUEST,
            Kind::Dump => NLM_F_REQUEST | NLM_F_DUMP,
        }
    }
}

/// The bytes of a request as they go on the wire (unit tests pin these).
pub fn encode<M: NetlinkSerializable + Debug>(msg: M, kind: Kind, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = kind.flags();
    header.sequence_number = seq;
    let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    nl.finalize();
    let mut buf = vec![0; nl.buffer_len()];
    nl.serialize(&mut buf);
    buf
}

impl<F: Family> Socket<F> {
    /// Opens a socket in the calling thread's network namespace.
    pub fn new() -> io::Result<Self> {
        let mut sock = RawSocket::new(F::PROTOCOL)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Best effort: extended acks give better messages where the kernel has them.
        let _ = sock.set_ext_ack(true);
        Ok(Socket { sock, seq: 0, _family: PhantomData })
    }

    /// Sends one request and returns the replies; a kernel error becomes an `io::Error` with its errno.
    pub fn request(&mut self, msg: F::Message, kind: Kind) -> io::Result<Vec<F::Message>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let buf = encode(msg, kind, seq);
        self.sock.send(&buf, 0)?;
        let mut out = Vec::new();
        loop {
            let (data, _) = self.sock.recv_from_full()?;
            let mut off = 0;
            while off + 16 <= data.len() {
                let len = u32::from_ne_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]]) as usize;
                if len < 16 || off + len > data.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated netlink message"));
                }
                let raw = &data[off..off + len];
                let msg = NetlinkMessage::<F::Message>::deserialize(raw)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                off += (len + 3) & !3;
                if msg.header.sequence_number != seq {
                    continue; // a stale reply to an earlier request
                }
                let multipart = msg.header.flags & NLM_F_MULTIPART != 0;
                match msg.payload {
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(out),
                            Some(code) => Err(match ext_ack_msg(raw) {
                                Some(ext_ack) => {
                                    io::Error::new(e.to_io().kind(), KernelError { errno: code.get().abs(), ext_ack })
                                }
                                None => e.to_io(),
                            }),
                        }
                    }
                    NetlinkPayload::InnerMessage(m) => {
                        out.push(m);
                        if kind == Kind::Get && !multipart {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl<F: Family> AsFd for Socket<F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NLMSG_ERROR as the kernel sends it with NETLINK_EXT_ACK: header, errno, the request echoed (here the
    /// whole 20-byte request, not capped), then NLMSGERR_ATTR_MSG.
    fn error_message(capped: bool, msg: Option<&str>) -> Vec<u8> {
        let mut echoed = Vec::new();
        echoed.extend_from_slice(&20u32.to_ne_bytes());
        echoed.extend_from_slice(&19u16.to_ne_bytes()); // RTM_SETLINK
        echoed.extend_from_slice(&[0; 10]);
        echoed.extend_from_slice(&[1, 2, 3, 4]);
        let echoed = if capped { echoed[..16].to_vec() } else { echoed };
        let mut tlvs = Vec::new();
        if let Some(m) = msg {
            let body = [m.as_bytes(), &[0]].concat();
            tlvs.extend_from_slice(&((4 + body.len()) as u16).to_ne_bytes());
            tlvs.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
            tlvs.extend_from_slice(&body);
            while tlvs.len() % 4 != 0 {
                tlvs.push(0);
            }
        }
        let flags = if capped { NLM_F_CAPPED } else { 0 } | if msg.is_some() { NLM_F_ACK_TLVS } else { 0 };
        let len = 16 + 4 + echoed.len() + tlvs.len();
        let mut raw = Vec::new();
        raw.extend_from_slice(&(len as u32).to_ne_bytes());
        raw.extend_from_slice(&2u16.to_ne_bytes()); // NLMSG_ERROR
        raw.extend_from_slice(&flags.to_ne_bytes());
        raw.extend_from_slice(&[0; 8]);
        raw.extend_from_slice(&(-22i32).to_ne_bytes());
        raw.extend_from_slice(&echoed);
        raw.extend_from_slice(&tlvs);
        raw
    }

    #[test]
    fn the_extended_ack_message_is_found_after_the_echoed_request() {
        let m = "mtu greater than device maximum";
        assert_eq!(ext_ack_msg(&error_message(false, Some(m))).as_deref(), Some(m));
        assert_eq!(ext_ack_msg(&error_message(true, Some(m))).as_deref(), Some(m));
        assert_eq!(ext_ack_msg(&error_message(true, None)), None);
        assert_eq!(ext_ack_msg(&[0; 8]), None, "truncated");
        let e = io::Error::new(io::ErrorKind::InvalidInput, KernelError { errno: libc::EINVAL, ext_ack: m.into() });
        assert_eq!(errno(&e), Some(libc::EINVAL));
        assert_eq!(errno(&io::Error::from_raw_os_error(libc::EEXIST)), Some(libc::EEXIST));
        assert!(e.to_string().ends_with("(kernel: mtu greater than device maximum)"), "{e}");
    }
}
