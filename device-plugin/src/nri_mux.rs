//! The NRI wire: one unix socket carrying several byte streams (containerd/nri `pkg/net/multiplex`), and ttrpc
//! messages on each stream.
//!
//! Multiplexing: every frame on the socket is a 4-byte connection ID and a 4-byte payload length (both big-endian),
//! then the payload, a piece of that connection's byte stream. NRI uses two connections: 1 carries the plugin's
//! service (the runtime calls Configure, CreateContainer… on the plugin), 2 the runtime's (the plugin calls
//! RegisterPlugin on the runtime).
//!
//! ttrpc: on each stream, a message is a 10-byte header (payload length u32, stream ID u32, type u8: 1 request,
//! 2 response; flags u8), then a protobuf `Request {service, method, payload, timeout_nano, metadata}` or
//! `Response {status, payload}`; the caller picks odd stream IDs. The framing is written here over prost instead of
//! using the `ttrpc` crate: that crate's client and server own a socket file descriptor each, while these streams
//! are pieces of one socket (bridging each through a socketpair and a task), and it generates its types with
//! rust-protobuf, a second protobuf stack beside the prost one the daemon's gRPC APIs use.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Mutex};

/// The connection on which the runtime calls the plugin's service.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The connection on which the plugin calls the runtime's service.
pub const RUNTIME_SERVICE_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// The largest ttrpc message either side accepts (4 MiB, as containerd's).
pub const TTRPC_MAX: usize = 4 << 20;

/// ttrpc message type of a request.
pub const REQUEST: u8 = 1;
/// ttrpc message type of a response.
pub const RESPONSE: u8 = 2;

/// ttrpc's request envelope (github.com/containerd/ttrpc request.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// ttrpc's response envelope: `status` absent (or code 0) on success.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// google.rpc.Status, as ttrpc carries it (the details are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC status code for a method the plugin does not implement.
pub const UNIMPLEMENTED: i32 = 12;
/// gRPC status code for a failure inside the plugin.
pub const INTERNAL: i32 = 13;

/// One ttrpc message: its header's stream ID and type, and the encoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream: u32,
    pub kind: u8,
    pub payload: Vec<u8>,
}

/// The socket's sending half, shared by every connection on it: one frame is written whole under the lock.
#[derive(Clone)]
pub struct Trunk {
    writer: Arc<Mutex<OwnedWriteHalf>>,
}

impl Trunk {
    /// Splits `socket` into the connections `ids`; a frame for another connection is dropped. The returned
    /// streams end when the socket does.
    pub fn start(socket: UnixStream, ids: &[u32]) -> (Trunk, HashMap<u32, Conn>) {
        let (mut rd, wr) = socket.into_split();
        let trunk = Trunk { writer: Arc::new(Mutex::new(wr)) };
        let mut senders = HashMap::new();
        let mut conns = HashMap::new();
        for &id in ids {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.insert(id, tx);
            conns.insert(id, Conn { id, trunk: trunk.clone(), rx, buf: Vec::new() });
        }
        tokio::spawn(async move {
            let mut hdr = [0u8; MUX_HEADER];
            loop {
                if rd.read_exact(&mut hdr).await.is_err() {
                    break;
                }
                let id = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
                let len = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
                if len > TTRPC_HEADER + TTRPC_MAX {
                    sriov_rdma_cni::warn!("NRI: a frame of {len} bytes on connection {id}: closing the socket");
                    break;
                }
                let mut data = vec![0u8; len];
                if rd.read_exact(&mut data).await.is_err() {
                    break;
                }
                if let Some(tx) = senders.get(&id) {
                    let _ = tx.send(data);
                }
            }
            // Dropping the senders ends every connection's stream.
        });
        (trunk, conns)
    }

    async fn send(&self, id: u32, data: &[u8]) -> io::Result<()> {
        let len = u32::try_from(data.len()).map_err(|_| io::Error::other("frame too long"))?;
        let mut frame = Vec::with_capacity(MUX_HEADER + data.len());
        frame.extend_from_slice(&id.to_be_bytes());
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(data);
        self.writer.lock().await.write_all(&frame).await
    }
}

/// One multiplexed connection: ttrpc messages in and out.
pub struct Conn {
    id: u32,
    trunk: Trunk,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    buf: Vec<u8>,
}

impl Conn {
    /// The next ttrpc message; `None` when the socket closed.
    pub async fn recv(&mut self) -> io::Result<Option<Message>> {
        loop {
            if self.buf.len() >= TTRPC_HEADER {
                let b = &self.buf;
                let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                if len > TTRPC_MAX {
                    return Err(io::Error::other(format!("a ttrpc message of {len} bytes (at most {TTRPC_MAX})")));
                }
                if b.len() >= TTRPC_HEADER + len {
                    let stream = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                    let kind = b[8];
                    let payload = b[TTRPC_HEADER..TTRPC_HEADER + len].to_vec();
                    self.buf.drain(..TTRPC_HEADER + len);
                    return Ok(Some(Message { stream, kind, payload }));
                }
            }
            match self.rx.recv().await {
                Some(data) => self.buf.extend_from_slice(&data),
                None => return Ok(None),
            }
        }
    }

    /// A handle that sends on this connection.
    pub fn sender(&self) -> Sender {
        Sender { id: self.id, trunk: self.trunk.clone() }
    }
}

/// Sends ttrpc messages on one connection.
#[derive(Clone)]
pub struct Sender {
    id: u32,
    trunk: Trunk,
}

impl Sender {
    /// Sends one ttrpc message (in one frame).
    pub async fn send(&self, m: &Message) -> io::Result<()> {
        if m.payload.len() > TTRPC_MAX {
            return Err(io::Error::other(format!(
                "a ttrpc message of {} bytes (at most {TTRPC_MAX})",
                m.payload.len()
            )));
        }
        let mut data = Vec::with_capacity(TTRPC_HEADER + m.payload.len());
        data.extend_from_slice(&(m.payload.len() as u32).to_be_bytes());
        data.extend_from_slice(&m.stream.to_be_bytes());
        data.push(m.kind);
        data.push(0);
        data.extend_from_slice(&m.payload);
        self.trunk.send(self.id, &data).await
    }
}

/// Calls `service`/`method` with `req` on `conn` as stream `stream` and decodes the answer as `R`; the answer
/// must be the next message on the connection (the plugin makes one call at a time on it).
pub async fn call<R: prost::Message + Default>(
    conn: &mut Conn,
    stream: u32,
    service: &str,
    method: &str,
    req: &impl prost::Message,
) -> io::Result<R> {
    use prost::Message as _;
    let env = Request { service: service.into(), method: method.into(), payload: req.encode_to_vec(), timeout_nano: 0 };
    conn.sender().send(&Message { stream, kind: REQUEST, payload: env.encode_to_vec() }).await?;
    let m =
        conn.recv().await?.ok_or_else(|| io::Error::other(format!("the socket closed before {method} answered")))?;
    if m.kind != RESPONSE || m.stream != stream {
        return Err(io::Error::other(format!("{method}: got message type {} on stream {}", m.kind, m.stream)));
    }
    let resp = Response::decode(m.payload.as_slice()).map_err(|e| io::Error::other(format!("{method}: {e}")))?;
    if let Some(s) = resp.status.filter(|s| s.code != 0) {
        return Err(io::Error::other(format!("{method}: code {}: {}", s.code, s.message)));
    }
    R::decode(resp.payload.as_slice()).map_err(|e| io::Error::other(format!("{method}: {e}")))
}
