//! One forward-protocol connection: the handshake when a shared key is set, then requests in,
//! batches out, and acknowledgements back in request order.
//!
//! ```text
//! read ─► Splitter (complete requests) ─► Decoder ─► EventBatch ─► fan-out (waits when full)
//!                                                        └─ chunk ids ─► pending (FIFO)
//! pending front resolves (every sink committed) ─► {"ack": chunk} for each of its requests
//! ```
//!
//! Acknowledgements never lie: a chunk is answered only after every sink fed by the source has
//! committed the events of its request (with `acknowledgements: false`, once they are queued). A
//! batch that a sink could not commit gets no ack, and the connection is closed after the acks
//! owed before it, so the client resends what was not acknowledged (on a keep-alive socket a
//! skipped ack would shift every later one). At most [`MAX_PENDING`] batches wait for their
//! acks; beyond that the connection stops reading, and TCP pushes back on the client.
//!
//! A stream that breaks the protocol (broken msgpack, the wrong shape, a request past
//! `max_request_size`, entries that do not decompress or decompress past
//! `max_decompressed_size`) closes this connection only, after the requests before it were
//! handled; it is counted and logged at a limited rate.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use loghaul_codec::forward::{Decoder, RequestError, SplitError, Splitter, handshake, write_ack};
use loghaul_core::{BatchNotifier, BatchStatus, BatchStatusReceiver, EventBatch, Timestamp};
use tokio::io::AsyncWriteExt;

use super::FluentContext;
use super::config::Security;
use crate::metrics::{DiscardReason, ErrorKind};
use crate::net::listener::{Conn, Read};

/// Bytes read per syscall (and so about the largest arena one read produces).
const READ_SIZE: usize = 128 * 1024;
/// Read again only when at least this much buffer space is free; otherwise grow first.
const MIN_READ_SPACE: usize = 16 * 1024;
/// A batch is cut once its arena (wire bytes and decompressed entries) passes this, so a read
/// holding many compressed requests does not become one huge batch.
const BATCH_BYTES: usize = 8 << 20;
/// Batches of one connection waiting for their acks before reading pauses.
const MAX_PENDING: usize = 64;
/// How long a client has to complete the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest PING accepted.
const MAX_PING: usize = 64 * 1024;

/// Requests of one batch waiting for the batch's fate, to be acknowledged in order.
struct Pending {
    status: Option<BatchStatusReceiver>,
    result: Option<BatchStatus>,
    chunks: Vec<Vec<u8>>,
}

/// Serves one connection until the client closes it, it breaks the protocol, or shutdown's
/// drain is over; then answers what it still owes and closes.
pub async fn serve(mut conn: Conn, ctx: Arc<FluentContext>) {
    let mut buf = BytesMut::new();
    if let Some(security) = &ctx.config.security {
        match handshake(&mut conn, &ctx, security, &mut buf).await {
            Ok(()) => {}
            Err(reason) => {
                ctx.metrics.error(ErrorKind::Auth, 1);
                crate::warn_limited!(ctx.metrics, peer = %conn.peer, reason, "Refused a forward handshake.");
                return;
            }
        }
    }
    let mut c = Connection {
        peer: conn.peer,
        tls_subject: conn.tls_subject.clone(),
        splitter: Splitter::new(ctx.config.max_request_size),
        decoder: Decoder::new(ctx.limits),
        pending: VecDeque::new(),
        ctx,
        close: false,
        failed: false,
    };
    c.run(&mut conn, &mut buf).await;
}

struct Connection {
    ctx: Arc<FluentContext>,
    peer: SocketAddr,
    /// The subject of the client's TLS certificate: every event gets it as `tls_subject`.
    tls_subject: Option<Arc<str>>,
    splitter: Splitter,
    decoder: Decoder,
    pending: VecDeque<Pending>,
    /// Stop reading: the stream broke, or an ack could not be given.
    close: bool,
    /// An ack could not be given: answer nothing more on this connection.
    failed: bool,
}

impl Connection {
    async fn run(&mut self, conn: &mut Conn, buf: &mut BytesMut) {
        // Bytes that arrived with the PING belong to the first requests.
        if !buf.is_empty() {
            self.process(conn, buf).await;
        }
        while !self.close {
            if buf.capacity() - buf.len() < MIN_READ_SPACE {
                buf.reserve(READ_SIZE);
            }
            let can_read = self.pending.len() < MAX_PENDING;
            tokio::select! {
                biased;
                status = front_status(&mut self.pending) => {
                    if let Some(front) = self.pending.front_mut() {
                        front.status = None;
                        front.result = Some(status);
                    }
                    self.answer_ready(conn).await;
                }
                read = conn.read(buf), if can_read => match read {
                    Read::Data => {
                        self.process(conn, buf).await;
                        // Take turns with the other connections (see docs/conventions.md).
                        tokio::task::yield_now().await;
                    }
                    Read::Eof | Read::Drained | Read::Idle => break,
                    Read::Error(error) => {
                        self.ctx.metrics.error(ErrorKind::Io, 1);
                        crate::warn_limited!(self.ctx.metrics, %error, peer = %self.peer, "Failed to read from a forward connection.");
                        break;
                    }
                },
            }
        }
        if !buf.is_empty() && !self.close {
            // The client went away (or stopped) in the middle of a request: nothing of it is
            // kept, and it was never acknowledged, so a real client resends it.
            self.ctx.metrics.error(ErrorKind::Protocol, 1);
            crate::warn_limited!(self.ctx.metrics, peer = %self.peer, bytes = buf.len(), "A forward connection ended in the middle of a request.");
        }
        // Answer what is owed before closing (the requests before a broken one too): the client
        // is waiting for these.
        while !self.pending.is_empty() && !self.failed {
            let status = front_status(&mut self.pending).await;
            if let Some(front) = self.pending.front_mut() {
                front.status = None;
                front.result = Some(status);
            }
            self.answer_ready(conn).await;
        }
        let _ = conn.stream.shutdown().await;
    }

    /// Splits and decodes every complete request in `buf` into batches and sends them on.
    async fn process(&mut self, conn: &mut Conn, buf: &mut BytesMut) {
        let mut arena = BytesMut::new();
        let mut batch = self.new_batch();
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut wire = 0;
        while !self.close {
            let n = match self.splitter.split(buf) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    self.broken_stream(e);
                    break;
                }
            };
            let start = arena.len();
            arena.unsplit(buf.split_to(n));
            wire += n;
            // Inflating can take a worker for a long time (256MiB is about half a second):
            // other connections on the same worker must not wait for it.
            let compressed = arena
                .get(start..start + n)
                .is_some_and(loghaul_codec::forward::is_compressed);
            let decoder = &mut self.decoder;
            let mut decode = || decoder.decode(&mut arena, start, start + n, &mut batch, 0);
            let decoded = if compressed {
                crate::pipeline::cpu_heavy(decode)
            } else {
                decode()
            };
            match decoded {
                Ok(request) => {
                    if let Some((s, e)) = request.chunk {
                        chunks.push(arena.get(s..e).unwrap_or_default().to_vec());
                    }
                }
                Err(e) => {
                    self.broken_request(&e);
                    break;
                }
            }
            if arena.len() >= BATCH_BYTES {
                let full = std::mem::replace(&mut batch, self.new_batch());
                self.emit(
                    conn,
                    std::mem::take(&mut arena),
                    full,
                    std::mem::take(&mut chunks),
                    wire,
                )
                .await;
                wire = 0;
            }
        }
        self.emit(conn, arena, batch, chunks, wire).await;
        self.account();
    }

    fn new_batch(&self) -> EventBatch {
        let mut batch = EventBatch::new(bytes::Bytes::new(), self.ctx.id.clone(), "fluent");
        batch.peers.push(self.peer.ip());
        batch
    }

    /// Sends one batch on, and queues (or writes) the acks of its requests.
    async fn emit(
        &mut self,
        conn: &mut Conn,
        arena: BytesMut,
        mut batch: EventBatch,
        chunks: Vec<Vec<u8>>,
        wire: usize,
    ) {
        batch.arena = arena.freeze();
        batch.received = Timestamp::now();
        if let Some(subject) = &self.tls_subject {
            batch.add_field(crate::net::tls::TLS_SUBJECT, subject);
        }
        if wire > 0 {
            // Wire bytes count even when no event came of them (heartbeats, other signals).
            self.ctx.metrics.received(batch.len(), wire);
        }
        if self.ctx.acknowledgements && !chunks.is_empty() && !batch.is_empty() {
            let (finalizer, status) = BatchNotifier::new_with_receiver();
            batch.finalizer = finalizer;
            self.ctx.fanout.send(batch).await;
            self.pending.push_back(Pending {
                status: Some(status),
                result: None,
                chunks,
            });
            return;
        }
        self.ctx.fanout.send(batch).await;
        if !chunks.is_empty() {
            // Nothing to wait for (no acknowledgements, or no valid event in these requests):
            // answered in order after what is already pending.
            self.pending.push_back(Pending {
                status: None,
                result: Some(BatchStatus::Delivered),
                chunks,
            });
            self.answer_ready(conn).await;
        }
    }

    /// Writes the acks of every resolved batch at the front, in order. A batch that was not
    /// delivered ends the connection: no ack for it or anything after it.
    async fn answer_ready(&mut self, conn: &mut Conn) {
        let mut out = Vec::new();
        while let Some(front) = self.pending.front() {
            let Some(status) = front.result else {
                break;
            };
            if status != BatchStatus::Delivered {
                let requests = front.chunks.len();
                self.ctx.metrics.error(ErrorKind::Ack, requests as u64);
                crate::warn_limited!(self.ctx.metrics, peer = %self.peer, ?status, requests, "Withheld acks for events a sink did not commit; closing the connection so the client resends them.");
                self.pending.clear();
                self.close = true;
                self.failed = true;
                break;
            }
            for chunk in &front.chunks {
                write_ack(&mut out, chunk);
            }
            self.pending.pop_front();
        }
        if !out.is_empty()
            && let Err(error) = conn.stream.write_all(&out).await
        {
            self.ctx.metrics.error(ErrorKind::Io, 1);
            crate::warn_limited!(self.ctx.metrics, %error, peer = %self.peer, "Failed to write acks to a forward client.");
            self.pending.clear();
            self.close = true;
            self.failed = true;
        }
    }

    fn broken_stream(&mut self, e: SplitError) {
        let kind = match e {
            SplitError::TooLarge { .. } => ErrorKind::Oversized,
            SplitError::TooDeep { .. } | SplitError::Invalid => ErrorKind::Protocol,
        };
        self.ctx.metrics.error(kind, 1);
        crate::warn_limited!(self.ctx.metrics, error = %e, peer = %self.peer, "Closing a forward connection: its stream cannot be read.");
        self.close = true;
    }

    fn broken_request(&mut self, e: &RequestError) {
        let kind = match e {
            RequestError::Malformed(_) => ErrorKind::Protocol,
            RequestError::UnknownCompression(_) | RequestError::Decompress(_) => {
                ErrorKind::Decompression
            }
            RequestError::TooLarge { .. } => ErrorKind::Oversized,
        };
        self.ctx.metrics.error(kind, 1);
        crate::warn_limited!(self.ctx.metrics, error = %e, peer = %self.peer, "Closing a forward connection: a request cannot be processed.");
        self.close = true;
    }

    /// Moves the decoder's counts into the metrics.
    fn account(&mut self) {
        let s = std::mem::take(&mut self.decoder.stats);
        let m = &self.ctx.metrics;
        if s.invalid_events > 0 {
            m.error(ErrorKind::Parse, s.invalid_events);
            m.discarded(DiscardReason::Invalid, s.invalid_events);
            crate::warn_limited!(m, peer = %self.peer, count = s.invalid_events, "Dropped forward entries that are no valid event (time, record or tag of the wrong type).");
        }
        if s.other_signals > 0 {
            m.discarded(DiscardReason::Unsupported, s.other_signals);
        }
    }
}

/// The fate of the front batch, once known; never resolves while there is none to wait for.
async fn front_status(pending: &mut VecDeque<Pending>) -> BatchStatus {
    match pending.front_mut().and_then(|p| p.status.as_mut()) {
        Some(status) => status.await,
        None => std::future::pending().await,
    }
}

/// Server side of the handshake: HELO, then a PING checked against the shared key (and the
/// users), then a PONG. Bytes that follow the PING stay in `buf`.
async fn handshake(
    conn: &mut Conn,
    ctx: &FluentContext,
    security: &Security,
    buf: &mut BytesMut,
) -> Result<(), &'static str> {
    let mut nonce = [0u8; 16];
    let mut auth = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|_| "no random numbers for the nonce")?;
    getrandom::fill(&mut auth).map_err(|_| "no random numbers for the salt")?;
    let auth: &[u8] = if security.users.is_empty() {
        &[]
    } else {
        &auth
    };
    let mut out = Vec::new();
    handshake::write_helo(&mut out, &nonce, auth, true);
    conn.stream
        .write_all(&out)
        .await
        .map_err(|_| "the client went away before HELO")?;

    let mut splitter = Splitter::new(MAX_PING);
    let ping_len = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        loop {
            match splitter.split(buf) {
                Ok(Some(n)) => return Ok(n),
                Ok(None) => {}
                Err(_) => return Err(handshake::INVALID_PING),
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(4096);
            }
            match conn.read(buf).await {
                Read::Data => {}
                _ => return Err("the client went away during the handshake"),
            }
        }
    })
    .await
    .map_err(|_| "no PING within the handshake timeout")?;
    let verdict = match ping_len {
        Ok(n) => {
            let ping = buf.split_to(n);
            check_ping(&ping, &nonce, auth, security, &ctx.config.self_hostname)
        }
        Err(reason) => Err(reason),
    };
    let mut out = Vec::new();
    match &verdict {
        Ok(digest) => {
            handshake::write_pong(&mut out, Ok((ctx.config.self_hostname.as_bytes(), digest)))
        }
        Err(reason) => handshake::write_pong(&mut out, Err(reason)),
    }
    let written = conn.stream.write_all(&out).await;
    match verdict {
        Ok(_) => written.map_err(|_| "the client went away before PONG"),
        Err(reason) => {
            let _ = conn.stream.shutdown().await;
            Err(reason)
        }
    }
}

/// The PONG digest for a valid PING, or the reason to refuse it.
fn check_ping(
    bytes: &[u8],
    nonce: &[u8],
    auth: &[u8],
    security: &Security,
    self_hostname: &str,
) -> Result<String, &'static str> {
    let ping = handshake::read_ping(bytes)?;
    let key = security.shared_key.as_bytes();
    let want = handshake::digest(&[&ping.salt, &ping.hostname, nonce, key]);
    if !handshake::constant_time_eq(want.as_bytes(), &ping.digest) {
        return Err(handshake::SHARED_KEY_MISMATCH);
    }
    if !security.users.is_empty() {
        // Every user is checked, so the time taken does not tell which names exist.
        let mut matched = false;
        for (name, password) in &security.users {
            let digest = handshake::digest(&[auth, name.as_bytes(), password.as_bytes()]);
            matched |= handshake::constant_time_eq(name.as_bytes(), &ping.username)
                & handshake::constant_time_eq(digest.as_bytes(), &ping.password);
        }
        if !matched {
            return Err(handshake::USER_MISMATCH);
        }
    }
    Ok(handshake::digest(&[
        &ping.salt,
        self_hostname.as_bytes(),
        nonce,
        key,
    ]))
}
