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
                let msg = NetlinkMessage::<F::Message>::deserialize(&data[off..off + len])
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
                            Some(_) => Err(e.to_io()),
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
