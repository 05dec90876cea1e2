//! One forward-protocol connection: the handshake when a shared key is set, then requests in,
//! batches out, and acknowledgements back in request order.
//!
//! ```text
//! read ─► Splitter: a whole request? ─┬─ Message, heartbeat ─► Decoder (whole) ─┐
//!                                     └─ Forward, PackedForward ─► Stream ───────┤ (steps, each
//!         a request still arriving, once STREAM_FROM of it is here ─► Stream ────┤  charged to the
//!                                                                                │  memory budget
//!                                                                                ▼  first)
//!             batch ─► fan-out (waits when full) ─► pending (FIFO, with the chunk ids of the
//!                                                   requests that end in it)
//! pending front resolves (every sink committed) ─► {"ack": chunk} for each of its requests
//! ```
//!
//! Acknowledgements never lie: a chunk is answered only after every sink fed by the source has
//! committed the events of its request (with `acknowledgements: false`, once they are queued),
//! in all the batches the request's events went out in. A batch that a sink could not commit
//! gets no ack, and the connection is closed after the acks owed before it, so the client
//! resends what was not acknowledged (on a keep-alive socket a skipped ack would shift every
//! later one). At most [`MAX_PENDING`] batches wait for their acks; beyond that the connection
//! stops reading, and TCP pushes back on the client.
//!
//! Memory: every decoding step first takes what it may decode from the memory budget
//! (`limits.memory`); when the budget is spent the batch filled so far goes out and the
//! connection waits, reading nothing. A request of any size costs one step at a time, so the
//! 256 MB chunks of fluentd's file buffer are read as they come. A request is written whole or
//! not at all when it arrives whole before [`STREAM_FROM`] of it is buffered and decodes to less
//! than a batch ([`BATCH_MEMORY`], or a sixteenth of a smaller budget) (and the budget lasts while
//! it is decoded); otherwise its events go out
//! in several batches, and when it breaks part way, what went out of it stays (it is never
//! acknowledged, so the client sends it again: at least once).
//!
//! A stream that breaks the protocol (broken msgpack, the wrong shape, a value past
//! `max_request_size`, entries that do not decompress or decompress past
//! `max_decompressed_size`, a request that is mostly invalid entries) closes this connection
//! only, after the requests before it were handled; it is counted and logged at a limited rate,
//! naming the limit and its value.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use loghaul_codec::forward::{
    Decoder, RequestError, SplitError, Splitter, Step, Stream, carries_entries, entry_cost,
    handshake, write_ack,
};
use loghaul_core::budget::Charge;
use loghaul_core::{BatchNotifier, BatchStatus, BatchStatusReceiver, EventBatch, Timestamp};
use tokio::io::AsyncWriteExt;

use super::FluentContext;
use super::config::Security;
use crate::metrics::{DiscardReason, ErrorKind};
use crate::net::listener::{Conn, Read};

/// Bytes read per syscall.
const READ_SIZE: usize = 128 * 1024;
/// The most events a new batch has room for before its first event (see [`Connection::emit`]):
/// about 100 KiB of events and as much of record fields, within a busy connection's margin
/// (docs/durability.md); a larger batch grows as before.
const EVENTS_AHEAD: usize = 1024;
/// The most room made at once for a connection whose requests arrive in parts (see
/// [`make_room`]).
const MAX_READ_ROOM: usize = 1 << 20;
/// Read again only when at least this much buffer space is free; otherwise grow first.
const MIN_READ_SPACE: usize = 16 * 1024;
/// A batch goes out once what it holds (events, fields, arena) passes this.
const BATCH_MEMORY: usize = 8 << 20;
/// What one decoding step may take from the memory budget (it decodes at most this divided by
/// `WORST_PER_BYTE` bytes of entries: 31 KiB).
const STEP: usize = 1 << 20;
/// A request still arriving is read as it comes once this much of it is buffered; a smaller
/// one waits until it is whole.
const STREAM_FROM: usize = 1 << 20;
/// Batches of one connection waiting for their acks before reading pauses. What they hold is
/// bounded by the sinks' buffers and the memory budget already; this bounds the bookkeeping. It
/// is large because one request of fluentd's file buffer (up to 256 MB) goes out in a batch per
/// read, and all of them wait for the request's one ack: a memory buffer that can hold the
/// request must get all of it, or the request is never acknowledged while its sink is down.
const MAX_PENDING: usize = 4096;
/// How long a client has to complete the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest PING accepted.
const MAX_PING: usize = 64 * 1024;

/// A batch sent on, waiting for its fate; the requests whose last events it holds are
/// acknowledged, in order, once it is delivered.
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
    let mut stream = Stream::new(
        ctx.config.max_request_size,
        ctx.limits.max_decompressed_size,
    );
    stream.set_max_entries(ctx.config.max_events_per_request as u64);
    let mut c = Connection {
        peer: conn.peer,
        tls_subject: conn.tls_subject.clone(),
        splitter: Splitter::new(ctx.config.max_request_size),
        decoder: Decoder::new(ctx.limits),
        stream,
        pending: VecDeque::new(),
        arena: BytesMut::new(),
        batch: new_batch(&ctx, conn.peer, conn.tls_subject.is_none()),
        chunks: Vec::new(),
        wire: 0,
        charge: None,
        ctx,
        close: false,
        failed: false,
    };
    c.run(&mut conn, &mut buf).await;
}

/// A new batch for the connection's events. Its records are left undecoded when every
/// downstream passes them through (a deliver: forward in, forward out) and nothing is added to
/// them (`may_pass`: no TLS subject to write into each).
fn new_batch(ctx: &FluentContext, peer: SocketAddr, may_pass: bool) -> EventBatch {
    let mut batch = EventBatch::new(
        bytes::Bytes::new(),
        ctx.id.clone(),
        loghaul_codec::forward::FORWARD_SOURCE_TYPE,
    );
    batch.peers.push(peer.ip());
    batch.raw_records = may_pass && ctx.fanout.takes_raw_records();
    batch
}

struct Connection {
    ctx: Arc<FluentContext>,
    peer: SocketAddr,
    /// The subject of the client's TLS certificate: every event gets it as `tls_subject`.
    tls_subject: Option<Arc<str>>,
    /// Finds where whole requests end (Message mode is decoded whole; the entry-carrying
    /// modes are read whole when they are small).
    splitter: Splitter,
    decoder: Decoder,
    /// Reads Forward and PackedForward requests entry by entry.
    stream: Stream,
    pending: VecDeque<Pending>,
    /// The batch being filled, its arena, the chunk ids of the requests that ended in it, the
    /// wire bytes it came from, and what it holds of the memory budget.
    arena: BytesMut,
    batch: EventBatch,
    chunks: Vec<Vec<u8>>,
    wire: usize,
    charge: Option<Charge>,
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
            make_room(&mut self.arena, buf);
            let can_read = self.pending.len() < MAX_PENDING;
            let mut room = (&mut *buf).limit(READ_SIZE);
            tokio::select! {
                biased;
                status = front_status(&mut self.pending) => {
                    if let Some(front) = self.pending.front_mut() {
                        front.status = None;
                        front.result = Some(status);
                    }
                    self.answer_ready(conn).await;
                }
                // At most a read's size at a time, whatever the room: a batch is what one read
                // brought, and larger batches made the sinks' output (their JSON, written
                // whole) fall out of the cache before it was copied on.
                read = conn.read(&mut room), if can_read => match read {
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
        if (!buf.is_empty() || self.stream.in_request()) && !self.close {
            // The client went away (or stopped) in the middle of a request: it was never
            // acknowledged, so a real client resends it. Nothing of it is kept, unless it was
            // large enough to be read as it came (what went out of it stays).
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

    /// Decodes what `buf` holds into batches and sends them on: whole requests, and a request
    /// still arriving once it is large.
    async fn process(&mut self, conn: &mut Conn, buf: &mut BytesMut) {
        while !self.close {
            if self.stream.in_request() {
                if !self.step(conn, buf).await {
                    break;
                }
                continue;
            }
            if self.filled() >= self.batch_memory() {
                self.emit(conn).await;
            }
            match self.splitter.split(buf) {
                Ok(Some(n)) if carries_entries(&buf[..n]) == Some(true) => self.begin(buf),
                Ok(Some(n)) => self.whole(conn, buf, n).await,
                Ok(None) if buf.len() >= STREAM_FROM && carries_entries(buf) == Some(true) => {
                    self.begin(buf);
                }
                Ok(None) => break,
                // Too large to be held whole, but read entry by entry it needs no more than a
                // step at a time.
                Err(SplitError::TooLarge { .. }) if carries_entries(buf) == Some(true) => {
                    self.begin(buf);
                }
                Err(e) => self.broken_stream(e),
            }
        }
        // What is complete goes out now (the requests before a broken one too). A request
        // still arriving goes out in part: waiting for its end would hold its memory for as
        // long as the client takes.
        self.emit(conn).await;
        self.account();
    }

    /// Starts reading the request at the front of `buf` entry by entry.
    fn begin(&mut self, buf: &mut BytesMut) {
        // The splitter walked part of this request; the stream reads it from its start.
        self.splitter = Splitter::new(self.ctx.config.max_request_size);
        let before = buf.len();
        let begun = self.stream.begin(buf, &mut self.arena, &self.batch);
        self.wire += before - buf.len();
        match begun {
            Ok(true) => {}
            // The splitter saw the head whole, so it is here.
            Ok(false) => self.broken_request(&RequestError::Malformed(
                "a request's head runs past what arrived",
            )),
            Err(e) => self.broken_request(&e),
        }
    }

    /// One step of the request being read; false when it needs more input.
    async fn step(&mut self, conn: &mut Conn, buf: &mut BytesMut) -> bool {
        let mut allowance = STEP;
        loop {
            let Some(step_charge) = self.reserve(conn, allowance).await else {
                return false;
            };
            let before = buf.len();
            let step = self
                .stream
                .step(buf, &mut self.arena, &mut self.batch, allowance);
            // Bytes can go back into `buf` (those after a Forward array's last entry).
            self.wire = (self.wire + before).saturating_sub(buf.len());
            self.settle(step_charge);
            match step {
                Ok(Step::NeedInput) => return false,
                Ok(Step::Progress) => {}
                Ok(Step::NeedRoom(cost)) => {
                    allowance = cost;
                    continue;
                }
                Ok(Step::Done(request)) => {
                    if let Some((s, e)) = request.chunk {
                        self.chunks
                            .push(self.arena.get(s..e).unwrap_or_default().to_vec());
                    }
                }
                Err(e) => {
                    self.broken_request(&e);
                    return false;
                }
            }
            if self.filled() >= self.batch_memory() {
                self.emit(conn).await;
            }
            return true;
        }
    }

    /// A request decoded whole: Message mode, a heartbeat (or a request that is broken).
    async fn whole(&mut self, conn: &mut Conn, buf: &mut BytesMut, n: usize) {
        let cost = entry_cost(n, self.splitter.last_nodes());
        let Some(step_charge) = self.reserve(conn, cost).await else {
            return;
        };
        let start = self.arena.len();
        self.arena.unsplit(buf.split_to(n));
        self.wire += n;
        let decoded = self
            .decoder
            .decode(&mut self.arena, start, start + n, &mut self.batch, 0);
        self.settle(step_charge);
        match decoded {
            Ok(request) => {
                if let Some((s, e)) = request.chunk {
                    self.chunks
                        .push(self.arena.get(s..e).unwrap_or_default().to_vec());
                }
            }
            Err(e) => self.broken_request(&e),
        }
    }

    /// What a batch may hold before it goes out: [`BATCH_MEMORY`], or a sixteenth of a smaller
    /// memory budget. What sinks make of a batch (its JSON) is charged once it is admitted,
    /// without waiting, so each busy connection can take the budget over by about one batch.
    fn batch_memory(&self) -> usize {
        self.ctx
            .fanout
            .budget()
            .map_or(BATCH_MEMORY, |b| BATCH_MEMORY.min(b.limit() / 16))
    }

    /// Memory the batch being filled holds.
    fn filled(&self) -> usize {
        loghaul_core::budget::batch_bytes(&self.batch) + self.arena.len()
    }

    /// Takes `bytes` of the memory budget for the next decoding step: at once when they fit;
    /// otherwise the batch filled so far goes out first (so that this connection holds nothing
    /// while it waits), and then it waits. `Some` without a charge when the source has no
    /// budget; `None` when the step can never be allowed (it needs more than the whole budget:
    /// the connection is closed).
    async fn reserve(&mut self, conn: &mut Conn, bytes: usize) -> Option<Option<Charge>> {
        let Some(budget) = self.ctx.fanout.budget().cloned() else {
            return Some(None);
        };
        if bytes > budget.limit() {
            self.ctx.metrics.error(ErrorKind::MemoryLimit, 1);
            crate::warn_limited!(self.ctx.metrics, peer = %self.peer, needs = bytes, limit = budget.limit(), "Closing a forward connection: a request needs more memory to decode than limits.memory holds.");
            self.close = true;
            return None;
        }
        if let Some(charge) = budget.try_charge(bytes) {
            return Some(Some(charge));
        }
        if !self.batch.is_empty() {
            self.emit(conn).await;
        }
        Some(Some(budget.charge(bytes).await))
    }

    /// After a step: the batch's charge takes over the step's, made exact.
    fn settle(&mut self, step: Option<Charge>) {
        let Some(step) = step else {
            return;
        };
        let filled = self.filled();
        match &self.charge {
            Some(charge) => charge.absorb(step),
            None => self.charge = Some(step),
        }
        if let Some(charge) = &self.charge {
            charge.resize(filled);
        }
    }

    /// Sends the batch being filled on (with the acks of the requests that ended in it), and
    /// starts a new one; a request still being read goes on in the new one.
    async fn emit(&mut self, conn: &mut Conn) {
        if self.batch.is_empty() && self.chunks.is_empty() {
            // Nothing to send. Between requests, what was read (heartbeats, dropped entries) is
            // counted and its bytes let go; within one, they are the request's and stay.
            if !self.stream.in_request() {
                self.ctx.metrics.received(0, std::mem::take(&mut self.wire));
                self.arena = BytesMut::new();
                self.charge = None;
            }
            return;
        }
        let mut arena = std::mem::take(&mut self.arena);
        self.stream.carry(&mut arena, &mut self.arena);
        let in_request = self.stream.in_request();
        let mut batch = std::mem::replace(
            &mut self.batch,
            new_batch(&self.ctx, self.peer, self.tls_subject.is_none()),
        );
        // The next batch is likely alike: room for as many events and record fields up front
        // (within bounds), rather than tables grown by doubling, each growth a copy.
        self.batch
            .events
            .reserve(batch.events.len().min(EVENTS_AHEAD));
        self.batch
            .fields
            .reserve(batch.fields.len().min(4 * EVENTS_AHEAD));
        let chunks = std::mem::take(&mut self.chunks);
        let wire = std::mem::take(&mut self.wire);
        let charge = self.charge.take();
        batch.arena = arena.freeze();
        batch.received = Timestamp::now();
        if let Some(subject) = &self.tls_subject {
            batch.add_field(crate::net::tls::TLS_SUBJECT, subject);
        }
        if let Some(charge) = charge {
            charge.resize(loghaul_core::budget::batch_bytes(&batch));
            batch.charge = Some(Arc::new(charge));
        }
        if wire > 0 {
            // Wire bytes count even when no event came of them (heartbeats, other signals).
            self.ctx.metrics.received(batch.len(), wire);
        }
        // A batch holding part of a request still being read is tracked too: that request's
        // ack, given with a later batch, must wait for this one.
        if self.ctx.acknowledgements && (!chunks.is_empty() || in_request) && !batch.is_empty() {
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
            RequestError::Malformed(_) | RequestError::MostlyInvalid { .. } => ErrorKind::Protocol,
            RequestError::UnknownCompression(_) | RequestError::Decompress(_) => {
                ErrorKind::Decompression
            }
            RequestError::TooLarge { .. }
            | RequestError::ValueTooLarge { .. }
            | RequestError::TooManyEvents { .. } => ErrorKind::Oversized,
        };
        self.ctx.metrics.error(kind, 1);
        crate::warn_limited!(self.ctx.metrics, error = %e, peer = %self.peer, "Closing a forward connection: a request cannot be processed.");
        self.close = true;
    }

    /// Moves the decoders' counts into the metrics.
    fn account(&mut self) {
        let whole = std::mem::take(&mut self.decoder.stats);
        let streamed = self.stream.take_stats();
        let invalid = whole.invalid_events + streamed.invalid_events;
        let other = whole.other_signals + streamed.other_signals;
        let m = &self.ctx.metrics;
        if invalid > 0 {
            m.error(ErrorKind::Parse, invalid);
            m.discarded(DiscardReason::Invalid, invalid);
            crate::warn_limited!(m, peer = %self.peer, count = invalid, "Dropped forward entries that are no valid event (time, record or tag of the wrong type).");
        }
        if other > 0 {
            m.discarded(DiscardReason::Unsupported, other);
        }
    }
}

/// Readies `buf` for the next read. When the arena holds the start of a request still
/// arriving (carried into a new batch, or not decoded yet), the room is made in the arena's
/// own allocation, right after it: what is read next then joins the arena without a copy.
/// Otherwise (`BytesMut::unsplit` copies what is not contiguous) every byte read after a
/// batch went out mid-request was copied into the new arena, which grew by reallocation.
fn make_room(arena: &mut BytesMut, buf: &mut BytesMut) {
    if buf.capacity() - buf.len() >= MIN_READ_SPACE && (arena.is_empty() || joined(arena, buf)) {
        return;
    }
    if arena.is_empty() {
        // `buf` holds the start of a request still arriving (a whole one is decoded, a large
        // one streamed), which the new room's allocation takes a copy of: room for several
        // requests of its size makes that copy rare, where a fixed read size copied about
        // half of every request larger than it.
        buf.reserve((buf.len() * 8).clamp(READ_SIZE, MAX_READ_ROOM));
        return;
    }
    // The arena is a tag and part of an entry after a batch went out; it is large only while
    // one large entry arrives, and then the room doubles, so that arriving is not quadratic.
    let held = arena.len() + buf.len();
    let mut joint = BytesMut::with_capacity(held + held.max(READ_SIZE));
    joint.extend_from_slice(arena);
    joint.extend_from_slice(buf);
    *buf = joint.split_off(arena.len());
    *arena = joint;
}

/// `buf` starts right where `arena` ends, in one allocation: `unsplit` joins them in place.
fn joined(arena: &BytesMut, buf: &BytesMut) -> bool {
    arena.as_ptr().wrapping_add(arena.len()) == buf.as_ptr()
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

#[cfg(test)]
mod tests {
    //! Where the bytes read go: into the arena's own allocation, without copies.

    use bytes::{BufMut, BytesMut};

    use super::{MAX_READ_ROOM, MIN_READ_SPACE, READ_SIZE, joined, make_room};

    #[test]
    fn a_carried_arena_and_the_next_reads_share_one_allocation() {
        // After a batch went out mid-request, the arena is a copy of the tag and the part of an
        // entry not decoded yet, in an allocation of its own; `buf` holds a few unread bytes.
        let mut arena = BytesMut::from(&b"tag.a\x92\xd7\x00"[..]);
        let mut buf = BytesMut::with_capacity(64);
        buf.put_slice(b"\x01\x02");
        assert!(!joined(&arena, &buf));
        make_room(&mut arena, &mut buf);
        assert_eq!(&arena[..], b"tag.a\x92\xd7\x00");
        assert_eq!(&buf[..], b"\x01\x02");
        assert!(joined(&arena, &buf));
        assert!(buf.capacity() - buf.len() >= READ_SIZE);
        // What is read next joins the arena where it is: no byte of the arena moves.
        let at = arena.as_ptr();
        for _ in 0..4 {
            (&mut buf).limit(READ_SIZE / 8).put_bytes(7, READ_SIZE / 8);
            let n = buf.len();
            arena.unsplit(buf.split_to(n));
            assert_eq!(arena.as_ptr(), at);
            make_room(&mut arena, &mut buf);
            assert!(buf.capacity() - buf.len() >= MIN_READ_SPACE);
        }
        assert_eq!(arena.len(), 8 + 2 + READ_SIZE / 2);
        assert_eq!(&arena[..10], b"tag.a\x92\xd7\x00\x01\x02");
    }

    #[test]
    fn a_large_entry_arriving_in_parts_is_copied_a_bounded_number_of_times() {
        // One 8 MiB entry read 16 KiB at a time into an arena that cannot grow in place: the
        // room doubles, so its bytes are copied a few times over, not once per read.
        let mut arena = BytesMut::from(&b"tag"[..]);
        let mut buf = BytesMut::new();
        let mut moves = 0;
        while arena.len() < 8 << 20 {
            let before = arena.as_ptr();
            make_room(&mut arena, &mut buf);
            if arena.as_ptr() != before {
                moves += 1;
            }
            (&mut buf).limit(16 << 10).put_bytes(1, 16 << 10);
            let n = buf.len();
            arena.unsplit(buf.split_to(n));
        }
        assert!(moves <= 8, "{moves} moves");
    }

    #[test]
    fn a_request_arriving_in_parts_gets_room_for_several_of_its_size() {
        // Between requests the arena is empty; `buf` holds the start of one still arriving.
        let mut arena = BytesMut::new();
        let partial = 76 << 10;
        let mut buf = BytesMut::with_capacity(80 << 10);
        buf.put_bytes(1, partial);
        make_room(&mut arena, &mut buf);
        assert_eq!(buf.len(), partial);
        assert!(buf.capacity() >= 8 * partial);
        // Idle and small clients keep a read's size; nobody gets more than the cap.
        let mut small = BytesMut::new();
        make_room(&mut arena, &mut small);
        assert!(small.capacity() >= READ_SIZE && small.capacity() < 2 * READ_SIZE);
        let mut large = BytesMut::with_capacity(900 << 10);
        large.put_bytes(1, 900 << 10);
        make_room(&mut arena, &mut large);
        assert!(large.capacity() <= (900 << 10) + MAX_READ_ROOM);
    }
}
