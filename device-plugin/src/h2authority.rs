//! Serves gRPC to clients that send a unix socket's path as the HTTP/2 `:authority`, as the kubelet's plugin
//! watcher does when it dials a plugin's registration socket (kubernetes/kubernetes#108254). The h2 server under
//! tonic refuses such a request with RST_STREAM PROTOCOL_ERROR before tonic sees it, so each accepted connection
//! goes through a relay: the server's bytes go to the client as they are; the client's frames are read and each
//! header block (HEADERS and its CONTINUATIONs) is decoded with the connection's HPACK state, its `:authority` set
//! to `localhost` when it is not a valid authority, and encoded again as literals without indexing. Every block is
//! encoded again, not only the changed ones, so the server's HPACK table stays empty and cannot disagree with the
//! client's. Other frames pass unchanged.

use sriov_rdma_cni::warn;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME: usize = 16_384;
/// The HPACK table size the server lets the client use (SETTINGS_HEADER_TABLE_SIZE's initial value; tonic's
/// server does not change it).
const TABLE_SIZE: usize = 4096;
/// A header block larger than this is refused (a CONTINUATION flood).
const MAX_BLOCK: usize = 256 * 1024;
/// What replaces an authority the server would refuse.
const AUTHORITY: &[u8] = b"localhost";

/// The listener's connections, each through the relay: what tonic's `serve_with_incoming` takes.
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<DuplexStream>> {
    UnixListenerStream::new(listener).map(|conn| conn.map(relay))
}

/// Starts the relay of one connection; the returned stream is the server's end.
pub fn relay(client: UnixStream) -> DuplexStream {
    let (server, ours) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        match run(client, ours).await {
            // A peer that went away while the other still wrote: a connection's usual end.
            Err(e) if matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) => {}
            Ok(()) => {}
            Err(e) => warn!("relaying an HTTP/2 connection on a unix socket: {e}"),
        }
    });
    server
}

async fn run(client: UnixStream, server: DuplexStream) -> io::Result<()> {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = tokio::io::split(server);
    let down = async {
        tokio::io::copy(&mut server_rx, &mut client_tx).await?;
        client_tx.shutdown().await
    };
    let up = async {
        let mut rewrite = Rewrite::default();
        let (mut buf, mut out) = (vec![0u8; MAX_FRAME], Vec::new());
        loop {
            let n = client_rx.read(&mut buf).await?;
            if n == 0 {
                return server_tx.shutdown().await;
            }
            out.clear();
            rewrite.feed(&buf[..n], &mut out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            server_tx.write_all(&out).await?;
        }
    };
    tokio::pin!(down);
    // The client closing its side is no end: the server's answers still go back to it.
    tokio::select! {
        r = &mut down => return r,
        r = up => r?,
    }
    down.await
}

/// The client-to-server direction of one connection.
pub struct Rewrite {
    preface_left: usize,
    /// Bytes of a frame not complete yet.
    pending: Vec<u8>,
    /// A header block waiting for its CONTINUATIONs: stream, END_STREAM, the fragments so far.
    block: Option<(u32, bool, Vec<u8>)>,
    hpack: loona_hpack::Decoder<'static>,
}

impl Default for Rewrite {
    fn default() -> Self {
        let mut hpack = loona_hpack::Decoder::new();
        hpack.set_max_allowed_table_size(TABLE_SIZE);
        Rewrite { preface_left: PREFACE.len(), pending: Vec::new(), block: None, hpack }
    }
}

impl Rewrite {
    /// Takes the next bytes from the client and appends to `out` what the server is to get. An error is a client
    /// that does not speak HTTP/2 as it must: the connection is then closed.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if self.preface_left > 0 {
            let n = self.preface_left.min(input.len());
            let at = PREFACE.len() - self.preface_left;
            if input[..n] != PREFACE[at..at + n] {
                return Err("the client did not start with the HTTP/2 connection preface".into());
            }
            out.extend_from_slice(&input[..n]);
            self.preface_left -= n;
            input = &input[n..];
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(input);
        let mut at = 0;
        while let Some(header) = pending.get(at..at + FRAME_HEADER) {
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let end = at + FRAME_HEADER + len;
            let Some(frame) = pending.get(at..end) else { break };
            let (kind, flags) = (header[3], header[4]);
            let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
            self.frame(kind, flags, stream, frame, out)?;
            at = end;
        }
        pending.drain(..at);
        self.pending = pending;
        Ok(())
    }

    /// One whole frame (its 9-byte header included).
    fn frame(&mut self, kind: u8, flags: u8, stream: u32, frame: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let payload = &frame[FRAME_HEADER..];
        match (kind, self.block.as_mut()) {
            (HEADERS, None) => {
                let fragment = headers_fragment(flags, payload)?;
                self.block = Some((stream, flags & END_STREAM != 0, fragment.to_vec()));
            }
            (CONTINUATION, Some((s, _, block))) if *s == stream => {
                block.extend_from_slice(payload);
                if block.len() > MAX_BLOCK {
                    return Err(format!("a header block of stream {stream} is over {MAX_BLOCK} bytes"));
                }
            }
            (_, Some((s, _, _))) => {
                return Err(format!("frame type {kind} on stream {stream} inside the header block of stream {s}"));
            }
            (_, None) => {
                out.extend_from_slice(frame);
                return Ok(());
            }
        }
        if flags & END_HEADERS != 0 {
            if let Some((stream, end_stream, block)) = self.block.take() {
                let block =
                    self.reencode(&block).map_err(|e| format!("decoding a header block of stream {stream}: {e}"))?;
                write_block(stream, end_stream, &block, out);
            }
        }
        Ok(())
    }

    /// The block's fields as literals without indexing, with a path `:authority` replaced.
    fn reencode(&mut self, block: &[u8]) -> Result<Vec<u8>, loona_hpack::decoder::DecoderError> {
        let mut encoded = Vec::with_capacity(block.len() * 2);
        self.hpack.decode_with_cb(block, |name, value| {
            let value: &[u8] = if &*name == b":authority" && http::uri::Authority::try_from(&*value).is_err() {
                AUTHORITY
            } else {
                &value
            };
            encoded.push(0x00);
            put_string(&mut encoded, &name);
            put_string(&mut encoded, value);
        })?;
        Ok(encoded)
    }
}

/// A HEADERS payload without its padding and priority fields.
fn headers_fragment(flags: u8, payload: &[u8]) -> Result<&[u8], String> {
    let mut p = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = *p.first().ok_or("a padded HEADERS frame without its pad length")? as usize;
        p = &p[1..];
    }
    if flags & PRIORITY != 0 {
        p = p.get(5..).ok_or("a HEADERS frame too short for its priority")?;
    }
    let end = p.len().checked_sub(pad).ok_or("a HEADERS frame's padding is longer than the frame")?;
    Ok(&p[..end])
}

/// HEADERS then CONTINUATIONs of at most MAX_FRAME bytes each.
fn write_block(stream: u32, end_stream: bool, block: &[u8], out: &mut Vec<u8>) {
    let mut chunks = block.chunks(MAX_FRAME).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    loop {
        let chunk = chunks.next().unwrap_or_default();
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(chunk);
        if flags & END_HEADERS != 0 {
            return;
        }
        (kind, flags) = (CONTINUATION, 0);
    }
}

/// An HPACK string literal without Huffman coding: a 7-bit prefix length, then the bytes.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len();
    if n < 0x7f {
        out.push(n as u8);
    } else {
        out.push(0x7f);
        n -= 0x7f;
        while n >= 0x80 {
            out.push((n & 0x7f) as u8 | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_padded_prioritised_block_split_over_continuation_and_fed_byte_by_byte_comes_out_whole_and_fixed() {
        let fields: Vec<(Vec<u8>, Vec<u8>)> = [(":path", "/x"), (":authority", "/var/lib/kubelet/r.sock"), ("a", "b")]
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        let block = loona_hpack::Encoder::new().encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let (head, tail) = block.split_at(3);
        let mut headers = vec![2u8, 0, 0, 0, 0, 7];
        headers.extend_from_slice(head);
        headers.extend_from_slice(&[0, 0]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(HEADERS, END_STREAM | PADDED | PRIORITY, 5, &headers));
        input.extend(frame(CONTINUATION, END_HEADERS, 5, tail));
        input.extend(frame(0x0, END_STREAM, 5, b"body"));
        let (mut rewrite, mut out) = (Rewrite::default(), Vec::new());
        for b in &input {
            rewrite.feed(std::slice::from_ref(b), &mut out).unwrap();
        }
        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let out = &out[PREFACE.len()..];
        let len = u32::from_be_bytes([0, out[0], out[1], out[2]]) as usize;
        assert_eq!(out[3..9], [HEADERS, END_STREAM | END_HEADERS, 0, 0, 0, 5]);
        let got = loona_hpack::Decoder::new().decode(&out[9..9 + len]).unwrap();
        let mut want = fields.clone();
        want[1].1 = b"localhost".to_vec();
        assert_eq!(got, want);
        assert_eq!(out[9 + len..], frame(0x0, END_STREAM, 5, b"body"));

        // Any frame but a CONTINUATION inside an open block is refused.
        let mut bad = PREFACE.to_vec();
        bad.extend(frame(HEADERS, 0, 1, head));
        bad.extend(frame(0x0, 0, 1, b""));
        let err = Rewrite::default().feed(&bad, &mut Vec::new()).unwrap_err();
        assert!(err.contains("inside the header block of stream 1"), "{err}");
    }
}
