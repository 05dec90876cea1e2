//! The Fluentd forward-protocol target (`--target fluent://HOST:PORT`, or over TLS
//! `fluent+tls://HOST:PORT`): the generator's numbered messages as forward requests in any of the
//! protocol's four modes, acknowledged on request.
//!
//! The bodies are the same seeded ones every target sends (see [`crate::payload`]). Before the
//! clock starts they are wrapped into msgpack frames whose message string keeps the marker's
//! fixed-width slots, so stamping a block is the same in-place patch as for the other targets, and
//! sending it adds a few small headers per request:
//!
//! ```text
//! block frames (forward, packed, compressed):  [EventTime, {"message": "gen=G seq=S t=T ..."}] ...
//! block frames (message):  [tag, EventTime, {"message": "..."}(, {"chunk": "<24 characters>"})] ...
//!
//! packed      93 tag c6 <u32 len> │ entries i..j of the block │ {"size": n(, "chunk": id)}
//! forward     9x tag dc <u16 n>   │ entries i..j of the block │ ({"size": n, "chunk": id})
//! compressed  93 tag c6 <u32 len> gzip(entries i..j) {"size": n(, "chunk": id), "compressed": "gzip"}
//! message     the frames themselves, one request each (with --ack, each chunk patched in place)
//! ```
//!
//! Headers, option maps and the block's entries of consecutive requests go out with one
//! `writev`, so no entry is copied on the way out (over TLS, one encryption pass over them and one
//! `writev` of the records: see [`crate::connect`]).
//!
//! Compressed mode cannot use pre-compressed blocks: the sequence numbers and send times differ on
//! every send and lie inside the deflate stream, where patching them would change the codes
//! around them and the CRC. Each request's entries are gzipped at send time instead, at level 1
//! into a reused deflate state: that is what a compressing client pays, and it shows in the
//! generator's CPU column.
//!
//! Acks (`--ack`): every request carries a `chunk` (24 characters, the shape of fluentd's Base64
//! ids), and up to [`ACK_WINDOW`] requests per connection are in flight before the sender waits
//! for the `{"ack": chunk}` answers, which must come in request order and echo the chunk. `finish`
//! waits for the last of them, so a run with acks ends only once the server acknowledged every
//! request.
//!
//! Surviving a server that goes away (`--reconnect DURATION`, with acks): a failed connection
//! (refused, reset, closed, a broken pipe, no ack in time) is replaced by a new one, tried with
//! pauses of 50ms doubling to 1s for at most DURATION per outage, and every request sent but not
//! acknowledged is sent again on it, oldest first, with its original chunk id; requests already
//! acknowledged are never sent again. So every event reaches the server at least once, and the
//! resent ones possibly twice. This keeps a copy of each owed request's bytes until its ack:
//! the block it came from is stamped again by later sends. An answer that is no ack, or an ack
//! of another request, still ends the run: a new connection would not cure it.
//!
//! The acked log (`--acked-log PATH`, with acks) says what the server took responsibility for:
//! a line per acknowledged request, appended as its ack is read and written out after every
//! read of acks, so it is complete whenever the generator stops.
//!
//! ```text
//! GEN FIRST LAST      generator id, sequence numbers of the request's first and last event
//! 0 0 499             (its events are consecutive frames of one block, stamped consecutively)
//! 0 500 999
//! ```
//!
//! Without these options nothing is copied and nothing is parsed per request.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::ValueEnum;
use flate2::{Compress, Compression, FlushCompress, Status};
use loghaul_codec::forward::msgpack::{
    write_array_len, write_event_time, write_int, write_map_len, write_str, write_uint,
};
use loghaul_codec::forward::{Splitter, read_ack};
use serde::Serialize;

use crate::connect::{Connector, Stream};
use crate::payload::{Block, Format, PayloadSpec, SEQ_DIGITS, build_blocks_with};
use crate::target::{Recovery, Target};

/// How the generator packs events into forward requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FluentMode {
    /// `[tag, time, record]`: one event per request (python fluent-logger, the Go logger).
    Message,
    /// `[tag, [[time, record], ...]]`: an array of entries (Fluent Bit's default).
    Forward,
    /// `[tag, bin(entries), {"size": n}]`: the entries as one blob (fluentd's out_forward).
    Packed,
    /// PackedForward with gzip entries (`"compressed": "gzip"`).
    Compressed,
}

/// What the fluent target sends.
#[derive(Clone, Debug)]
pub struct FluentOptions {
    /// The request mode.
    pub mode: FluentMode,
    /// Events per request (message mode: always 1).
    pub batch: usize,
    /// Ask for an ack of every request and wait for them.
    pub ack: bool,
    /// The requests' tag.
    pub tag: String,
    /// With `ack`: when the connection fails, connect again for up to this long per outage and
    /// send every unacknowledged request again (`None`: a failed connection ends the run).
    pub reconnect: Option<Duration>,
    /// With `ack`: append a line `GEN FIRST LAST` to this file for every acknowledged request.
    pub acked_log: Option<PathBuf>,
}

impl Default for FluentOptions {
    fn default() -> Self {
        Self {
            mode: FluentMode::Packed,
            batch: DEFAULT_BATCH,
            ack: false,
            tag: DEFAULT_TAG.to_string(),
            reconnect: None,
            acked_log: None,
        }
    }
}

/// The tag of generated requests.
pub const DEFAULT_TAG: &str = "bench.gen";
/// Events per request by default (fluentd's out_forward sends chunks of up to 8MiB; Fluent Bit
/// flushes its chunks of about 2MiB: thousands of short events either way).
pub const DEFAULT_BATCH: usize = 1000;
/// Requests per connection sent before their acks (fluentd's out_forward and loghaul's own sink
/// keep several chunks in flight, never one at a time).
pub const ACK_WINDOW: usize = 16;
/// How long the sender waits for an owed ack before it gives up on the server.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);
/// Length of a chunk id: Base64 of 16 bytes, as fluentd sends.
const CHUNK_LEN: usize = loghaul_codec::forward::CHUNK_ID_LEN;
/// Pieces per `writev`, below Linux's IOV_MAX of 1024.
const MAX_PIECES: usize = 512;
/// The largest answer read as an ack: acks are tiny, anything larger is no ack.
const MAX_ANSWER: usize = 64 * 1024;
/// The first pause between reconnection attempts; it doubles up to [`RECONNECT_MAX_PAUSE`],
/// which also bounds one connection attempt.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between reconnection attempts.
const RECONNECT_MAX_PAUSE: Duration = Duration::from_secs(1);
/// Bytes the blocks of one connection may take: blocks hold whole requests, and eight blocks of a
/// large `--batch` would otherwise take hundreds of MiB.
const MAX_BLOCKS_BYTES: usize = 64 << 20;

/// Builds generator `gen_id`'s blocks as forward frames (see the module doc): entries, or whole
/// Message-mode requests. Blocks hold a whole number of requests.
///
/// # Errors
/// An invalid spec or a zero `batch`.
pub fn build_blocks(spec: &PayloadSpec, opts: &FluentOptions, gen_id: u32) -> Result<Vec<Block>> {
    if opts.batch == 0 {
        bail!("--batch must be at least 1");
    }
    // Like the syslog headers' timestamps, the event time is fixed when the blocks are built: it
    // only has to decode, while the marker carries the real send time.
    let now = chrono::Utc::now();
    let mut time = Vec::with_capacity(10);
    write_event_time(
        &mut time,
        u32::try_from(now.timestamp()).unwrap_or(u32::MAX),
        now.timestamp_subsec_nanos(),
    );
    let message_mode = opts.mode == FluentMode::Message;
    let per_block = if message_mode { 1 } else { opts.batch };
    let mut spec = spec.clone();
    let block_size = spec
        .block_bytes
        .max(per_block.saturating_mul(spec.message_size + 40));
    spec.blocks = spec.blocks.min((MAX_BLOCKS_BYTES / block_size).max(2));
    let (format, ack, tag) = (spec.format, opts.ack, opts.tag.as_bytes());
    let mut failure = None;
    let blocks = build_blocks_with(&spec, gen_id, per_block, |block, body, _| {
        let out = &mut block.bytes;
        if message_mode {
            write_array_len(out, if ack { 4 } else { 3 });
            write_str(out, tag);
        } else {
            write_array_len(out, 2);
        }
        out.extend_from_slice(&time);
        let message = record(out, format, body);
        if message_mode && ack {
            // A placeholder: the sender writes each request's own id here.
            write_map_len(out, 1);
            write_str(out, b"chunk");
            write_str(out, &[b'A'; CHUNK_LEN]);
        }
        let (start, end) = message.unwrap_or_default();
        let slot = out
            .get(start..end)
            .and_then(|m| memchr::memmem::find(m, b"seq="))
            .map(|at| start + at + 4);
        if slot.is_none() {
            failure.get_or_insert(format!(
                "no sequence slot in {:?}",
                String::from_utf8_lossy(body)
            ));
        }
        block.end_frame((start, end), slot.unwrap_or(start));
    })?;
    if let Some(why) = failure {
        bail!("building the forward payload: {why}");
    }
    Ok(blocks)
}

/// Appends the record of one message and returns where its `message` string lies in `out`:
/// `{"message": body}`, or with `--format json` the body's own keys (host, app, pid, message).
fn record(out: &mut Vec<u8>, format: Format, body: &[u8]) -> Option<(usize, usize)> {
    if format != Format::Json {
        write_map_len(out, 1);
        write_str(out, b"message");
        write_str(out, body);
        return Some((out.len() - body.len(), out.len()));
    }
    let serde_json::Value::Object(map) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    write_map_len(out, map.len());
    let mut message = None;
    for (key, value) in &map {
        write_str(out, key.as_bytes());
        match value {
            serde_json::Value::String(s) => {
                write_str(out, s.as_bytes());
                if key == "message" {
                    message = Some((out.len() - s.len(), out.len()));
                }
            }
            serde_json::Value::Number(n) if n.is_i64() => write_int(out, n.as_i64()?),
            other => write_str(out, other.to_string().as_bytes()),
        }
    }
    message
}

/// A part of what one `writev` sends: bytes of the target's scratch buffer or of the block.
#[derive(Clone, Copy, Debug)]
enum Piece {
    Scratch(usize, usize),
    Block(usize, usize),
}

/// A request sent and not yet acknowledged.
struct Owed {
    chunk: [u8; CHUNK_LEN],
    /// Events in the request.
    events: u64,
    /// Sequence numbers of its first and last event, read only for `--acked-log`. The events of
    /// a request are consecutive frames of one block, which was stamped with consecutive numbers
    /// just before the send, so these two say which events the request holds.
    seqs: Option<(u64, u64)>,
    /// The request's bytes as sent, kept with `--reconnect` to send them again on a new
    /// connection (the block they came from is stamped again by a later send); empty otherwise.
    bytes: Vec<u8>,
}

/// Why talking to the server stopped.
enum Failure {
    /// The connection failed: refused, reset, closed, a broken pipe, no ack in time. A new
    /// connection may get past it.
    Connection(anyhow::Error),
    /// Something a new connection would not cure: an answer that is no ack, or acknowledges
    /// another request; the acked log cannot be written.
    Fatal(anyhow::Error),
}

impl From<Failure> for anyhow::Error {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Connection(e) | Failure::Fatal(e) => e,
        }
    }
}

/// One forward connection of the generator.
pub struct FluentTarget {
    stream: Stream,
    connector: Connector,
    mode: FluentMode,
    batch: usize,
    ack: bool,
    tag: Vec<u8>,
    gen_id: u32,
    /// Request headers, option maps and compressed entries of the requests being written.
    scratch: Vec<u8>,
    pieces: Vec<Piece>,
    deflate: Option<Compress>,
    /// The requests sent and not yet acknowledged, oldest first.
    unacked: VecDeque<Owed>,
    /// Bytes the server sent that are not yet read as acks.
    answers: Vec<u8>,
    answer_split: Splitter,
    requests: u64,
    /// `--reconnect`: how long one outage may last.
    reconnect: Option<Duration>,
    /// When the current outage began: set by the first failure, cleared by the next ack.
    outage: Option<Instant>,
    recovery: Recovery,
    /// Copy buffers of acknowledged requests, reused for the next requests' copies.
    spare: Vec<Vec<u8>>,
    /// `--acked-log`, opened for appending, and its lines not yet written.
    acked_log: Option<(File, PathBuf)>,
    log_lines: String,
}

impl FluentTarget {
    /// Connects through `connector` for generator `gen_id`, and opens `opts.acked_log` for
    /// appending.
    ///
    /// # Errors
    /// The connection is refused, its TLS handshake fails, or the acked log cannot be opened.
    pub fn connect(connector: Connector, opts: &FluentOptions, gen_id: u32) -> Result<Self> {
        let stream = connector.connect(None).and_then(|s| prepare(s, opts.ack))?;
        let acked_log = match &opts.acked_log {
            Some(path) => Some((
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening the acked log {}", path.display()))?,
                path.clone(),
            )),
            None => None,
        };
        Ok(Self {
            stream,
            connector,
            mode: opts.mode,
            batch: opts.batch.max(1),
            ack: opts.ack,
            tag: opts.tag.as_bytes().to_vec(),
            gen_id,
            scratch: Vec::new(),
            pieces: Vec::new(),
            deflate: (opts.mode == FluentMode::Compressed)
                .then(|| Compress::new_gzip(Compression::fast(), 15)),
            unacked: VecDeque::new(),
            answers: Vec::new(),
            answer_split: Splitter::new(MAX_ANSWER),
            requests: 0,
            // Both need the acks: without them nothing says what to send again or what arrived.
            reconnect: opts.reconnect.filter(|_| opts.ack),
            outage: None,
            recovery: Recovery::default(),
            spare: Vec::new(),
            acked_log: acked_log.filter(|_| opts.ack),
            log_lines: String::new(),
        })
    }

    /// Requests that may be sent now: all of them without acks, else what the window has left
    /// after waiting for at least one free place.
    fn room(&mut self) -> Result<usize, Failure> {
        if !self.ack {
            return Ok(usize::MAX);
        }
        self.read_acks(ACK_WINDOW - 1)?;
        Ok(ACK_WINDOW - self.unacked.len())
    }

    /// A new chunk id.
    fn next_chunk(&mut self) -> [u8; CHUNK_LEN] {
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(&self.gen_id.to_be_bytes());
        raw[4..8].copy_from_slice(b"lhbg");
        raw[8..].copy_from_slice(&self.requests.to_be_bytes());
        self.requests += 1;
        loghaul_codec::forward::chunk_id(&raw)
    }

    /// Appends a piece, merged with the last one when they are adjacent in the same buffer.
    fn push(&mut self, piece: Piece) {
        match (self.pieces.last_mut(), piece) {
            (Some(Piece::Scratch(_, end)), Piece::Scratch(s, e))
            | (Some(Piece::Block(_, end)), Piece::Block(s, e))
                if *end == s =>
            {
                *end = e;
            }
            _ => self.pieces.push(piece),
        }
    }

    /// Appends the option map `{"size": n, "chunk": id?, "compressed": "gzip"?}` to the scratch.
    fn option(&mut self, size: usize, chunk: Option<[u8; CHUNK_LEN]>, gzip: bool) {
        let out = &mut self.scratch;
        write_map_len(out, 1 + usize::from(chunk.is_some()) + usize::from(gzip));
        write_str(out, b"size");
        write_uint(out, size as u64);
        if let Some(id) = chunk {
            write_str(out, b"chunk");
            write_str(out, &id);
        }
        if gzip {
            write_str(out, b"compressed");
            write_str(out, b"gzip");
        }
    }

    /// Queues the request carrying messages `from..from + count` of `block` (and with acks,
    /// remembers it as owed).
    fn request(&mut self, block: &mut Block, from: usize, count: usize) -> Result<()> {
        let start = match from {
            0 => 0,
            i => block.frame_ends[i - 1],
        };
        let end = block.frame_ends[from + count - 1];
        let header = self.scratch.len();
        let chunk = self.ack.then(|| self.next_chunk());
        // The request's bytes are scratch[header..mid], then `body` of the block, then
        // scratch[mid..]: what a copy for `--reconnect` concatenates.
        let (mid, body) = match self.mode {
            FluentMode::Message => {
                if let Some(id) = chunk {
                    // One frame, whose last CHUNK_LEN bytes are its chunk id.
                    if let Some(slot) = block.bytes.get_mut(end - CHUNK_LEN..end) {
                        slot.copy_from_slice(&id);
                    }
                }
                self.push(Piece::Block(start, end));
                (header, Some((start, end)))
            }
            FluentMode::Forward => {
                write_array_len(&mut self.scratch, if self.ack { 3 } else { 2 });
                write_str(&mut self.scratch, &self.tag);
                write_array_len(&mut self.scratch, count);
                self.push(Piece::Scratch(header, self.scratch.len()));
                self.push(Piece::Block(start, end));
                let option = self.scratch.len();
                if self.ack {
                    self.option(count, chunk, false);
                    self.push(Piece::Scratch(option, self.scratch.len()));
                }
                (option, Some((start, end)))
            }
            FluentMode::Packed => {
                write_array_len(&mut self.scratch, 3);
                write_str(&mut self.scratch, &self.tag);
                self.scratch.push(0xc6);
                let len = u32::try_from(end - start).context("a request of 4GiB or more")?;
                self.scratch.extend_from_slice(&len.to_be_bytes());
                self.push(Piece::Scratch(header, self.scratch.len()));
                self.push(Piece::Block(start, end));
                let option = self.scratch.len();
                self.option(count, chunk, false);
                self.push(Piece::Scratch(option, self.scratch.len()));
                (option, Some((start, end)))
            }
            FluentMode::Compressed => {
                write_array_len(&mut self.scratch, 3);
                write_str(&mut self.scratch, &self.tag);
                self.scratch.push(0xc6);
                let len_at = self.scratch.len();
                self.scratch.extend_from_slice(&[0; 4]);
                let deflate = self
                    .deflate
                    .get_or_insert_with(|| Compress::new_gzip(Compression::fast(), 15));
                gzip(deflate, &block.bytes[start..end], &mut self.scratch)?;
                let len = u32::try_from(self.scratch.len() - len_at - 4)
                    .context("a compressed request of 4GiB or more")?;
                self.scratch[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
                self.option(count, chunk, true);
                self.push(Piece::Scratch(header, self.scratch.len()));
                (self.scratch.len(), None)
            }
        };
        if let Some(chunk) = chunk {
            let seqs = match self.acked_log {
                Some(_) => Some((seq_at(block, from)?, seq_at(block, from + count - 1)?)),
                None => None,
            };
            let mut bytes = Vec::new();
            if self.reconnect.is_some() {
                bytes = self.spare.pop().unwrap_or_default();
                bytes.clear();
                bytes.extend_from_slice(&self.scratch[header..mid]);
                if let Some((s, e)) = body {
                    bytes.extend_from_slice(&block.bytes[s..e]);
                }
                bytes.extend_from_slice(&self.scratch[mid..]);
            }
            self.unacked.push_back(Owed {
                chunk,
                events: count as u64,
                seqs,
                bytes,
            });
        }
        Ok(())
    }

    /// Writes the queued pieces with as few `writev` calls as the kernel allows; returns the bytes.
    fn write_pieces(&mut self, block: &Block) -> Result<u64, Failure> {
        let mut slices: Vec<IoSlice<'_>> = self
            .pieces
            .iter()
            .filter_map(|p| match *p {
                Piece::Scratch(s, e) => self.scratch.get(s..e),
                Piece::Block(s, e) => block.bytes.get(s..e),
            })
            .filter(|b| !b.is_empty())
            .map(IoSlice::new)
            .collect();
        write_slices(&mut self.stream, &mut slices).map_err(Failure::Connection)
    }

    /// Reads acks until at most `owed` requests are unacknowledged. Each must echo the oldest
    /// owed chunk: a server that answers out of order or with another id is reported, since a
    /// real client would resend (fluentd drops the connection on a mismatch).
    fn read_acks(&mut self, owed: usize) -> Result<(), Failure> {
        let mut read = [0u8; 4096];
        while self.unacked.len() > owed {
            let mut used = 0;
            let mut acked = 0;
            while let Some(len) = self
                .answer_split
                .split(&self.answers[used..])
                .map_err(|e| Failure::Fatal(anyhow!("the server's answer is no msgpack: {e}")))?
            {
                let value = &self.answers[used..used + len];
                used += len;
                let Some(got) =
                    read_ack(value).and_then(|s| value.get(s.start as usize..s.end as usize))
                else {
                    return Err(Failure::Fatal(anyhow!(
                        "the server answered with something other than an ack: {:02x?}",
                        &value[..value.len().min(32)]
                    )));
                };
                let Some(want) = self.unacked.front() else {
                    return Err(Failure::Fatal(anyhow!(
                        "an ack ({}) for no outstanding request",
                        String::from_utf8_lossy(got)
                    )));
                };
                if got != want.chunk {
                    return Err(Failure::Fatal(anyhow!(
                        "ack {:?} does not match the oldest unacknowledged chunk {:?}",
                        String::from_utf8_lossy(got),
                        String::from_utf8_lossy(&want.chunk)
                    )));
                }
                if let Some(done) = self.unacked.pop_front() {
                    self.acknowledged(done);
                }
                acked += 1;
            }
            self.answers.drain(..used);
            if acked > 0 {
                self.outage = None;
                self.write_log()?;
            }
            if self.unacked.len() <= owed {
                break;
            }
            match self.stream.read(&mut read) {
                Ok(0) => {
                    return Err(Failure::Connection(anyhow!(
                        "the server closed the connection with {} request(s) unacknowledged",
                        self.unacked.len()
                    )));
                }
                Ok(n) => self.answers.extend_from_slice(&read[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Failure::Connection(anyhow!(
                        "no ack within {ACK_TIMEOUT:?} ({} request(s) unacknowledged)",
                        self.unacked.len()
                    )));
                }
                Err(e) => {
                    return Err(Failure::Connection(
                        anyhow::Error::new(e).context("reading acks from the fluent target"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Books an acknowledged request: its line for the acked log, its copy back to the spares.
    fn acknowledged(&mut self, done: Owed) {
        if let Some((first, last)) = done.seqs {
            // Writing to a String cannot fail.
            let _ = writeln!(self.log_lines, "{} {first} {last}", self.gen_id);
        }
        if done.bytes.capacity() > 0 {
            self.spare.push(done.bytes);
        }
    }

    /// Appends the acked log's pending lines with one `write`: a file opened for appending takes
    /// it whole, so the lines of several connections never interleave within a line.
    fn write_log(&mut self) -> Result<(), Failure> {
        if let Some((file, path)) = &mut self.acked_log
            && !self.log_lines.is_empty()
        {
            file.write_all(self.log_lines.as_bytes())
                .with_context(|| format!("appending to the acked log {}", path.display()))
                .map_err(Failure::Fatal)?;
            self.log_lines.clear();
        }
        Ok(())
    }

    /// Gets past a failed connection. With `--reconnect`, connects again (pausing 50ms, doubling
    /// to 1s, between attempts) and sends every unacknowledged request again, oldest first;
    /// returns the bytes sent. An outage lasts until the next ack, not the next connection, so
    /// a server that accepts and drops every connection is given up on after the reconnect
    /// duration too. Without it, or for a failure a new connection cannot cure, the failure is
    /// the error.
    fn recover(&mut self, failure: Failure) -> Result<u64> {
        let Some(limit) = self
            .reconnect
            .filter(|_| matches!(failure, Failure::Connection(_)))
        else {
            return Err(failure.into());
        };
        let error = anyhow::Error::from(failure);
        let mut last = format!("{error:#}");
        let since = *self.outage.get_or_insert_with(Instant::now);
        let mut pause = RECONNECT_PAUSE;
        loop {
            let left = limit.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Err(error.context(format!(
                    "gave up on {} after --reconnect {limit:?} without an ack (last attempt: \
                     {last})",
                    self.connector.url()
                )));
            }
            match self.resend(left) {
                Ok(bytes) => {
                    eprintln!(
                        "gen {}: reconnected to {} after {:.1?} ({error:#}); sent {} unacknowledged request(s) again",
                        self.gen_id,
                        self.connector.url(),
                        since.elapsed(),
                        self.unacked.len()
                    );
                    return Ok(bytes);
                }
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(pause.min(limit.saturating_sub(since.elapsed())));
            pause = (pause * 2).min(RECONNECT_MAX_PAUSE);
        }
    }

    /// One reconnection attempt: a new connection (waiting at most `left`, and 1s), and every
    /// owed request's copy written to it; returns the bytes.
    fn resend(&mut self, left: Duration) -> Result<u64> {
        let stream = self
            .connector
            .connect(Some(left.min(RECONNECT_MAX_PAUSE)))
            .and_then(|s| prepare(s, self.ack))?;
        self.stream = stream;
        // Half an answer from the old connection is no beginning of one on the new.
        self.answers.clear();
        self.answer_split = Splitter::new(MAX_ANSWER);
        self.recovery.reconnects += 1;
        // Counted before the write: what goes out of a write that then fails may still arrive,
        // and every copy the server may have received twice must be counted.
        self.recovery.resent_requests += self.unacked.len() as u64;
        self.recovery.resent_events += self.unacked.iter().map(|o| o.events).sum::<u64>();
        let mut slices: Vec<IoSlice<'_>> = self
            .unacked
            .iter()
            .map(|o| IoSlice::new(&o.bytes))
            .collect();
        write_slices(&mut self.stream, &mut slices)
    }
}

impl Target for FluentTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let (mut done, mut wire) = (0, 0);
        while done < n {
            let room = match self.room() {
                Ok(room) => room,
                Err(failure) => {
                    wire += self.recover(failure)?;
                    continue;
                }
            };
            self.scratch.clear();
            self.pieces.clear();
            let mut requests = 0;
            while done < n && requests < room && self.pieces.len() + 4 <= MAX_PIECES {
                let count = match self.mode {
                    // Without acks, the frames are whole requests that need nothing added: all
                    // of them go as one piece.
                    FluentMode::Message if !self.ack => n - done,
                    FluentMode::Message => 1,
                    _ => self.batch.min(n - done),
                };
                self.request(block, done, count)?;
                done += count;
                requests += 1;
            }
            // A failed write leaves these requests owed, so a reconnection sends them again.
            wire += match self.write_pieces(block) {
                Ok(bytes) => bytes,
                Err(failure) => self.recover(failure)?,
            };
        }
        Ok(wire)
    }

    fn finish(&mut self) -> Result<()> {
        while let Err(failure) = self.read_acks(0) {
            self.recover(failure)?;
        }
        // close_notify (over TLS) and a half-close, so the server sees a clean end of stream
        // before we drop the socket; over TLS, its end too (see `crate::connect`).
        self.stream
            .finish()
            .with_context(|| format!("closing {}", self.connector.url()))
    }

    fn recovery(&self) -> Option<Recovery> {
        self.reconnect.map(|_| self.recovery)
    }

    fn tls(&self) -> Option<String> {
        self.stream.tls_description()
    }
}

/// Sets up a new connection (connected, not to itself, no Nagle delay, its TLS handshake done):
/// with acks, the ack timeout.
fn prepare(stream: Stream, ack: bool) -> Result<Stream> {
    if ack {
        stream
            .tcp()
            .set_read_timeout(Some(ACK_TIMEOUT))
            .context("setting the ack timeout")?;
    }
    Ok(stream)
}

/// Writes all of `slices` with as few `writev` calls as the kernel allows; returns the bytes.
fn write_slices(stream: &mut Stream, slices: &mut [IoSlice<'_>]) -> Result<u64> {
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let mut rest = slices;
    while !rest.is_empty() {
        match stream.write_vectored(rest) {
            Ok(0) => bail!("the fluent target stopped taking bytes"),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("writing to the fluent target"),
        }
    }
    Ok(total as u64)
}

/// The sequence number stamped into message `i` of `block`.
fn seq_at(block: &Block, i: usize) -> Result<u64> {
    let digits = block
        .slots
        .get(i)
        .and_then(|&slot| block.bytes.get(slot..slot + SEQ_DIGITS))
        .with_context(|| format!("message {i} of a block has no sequence slot"))?;
    digits.iter().try_fold(0u64, |n, &d| match d {
        b'0'..=b'9' => Ok(n * 10 + u64::from(d - b'0')),
        _ => bail!(
            "the sequence slot of message {i} holds {:?}",
            String::from_utf8_lossy(digits)
        ),
    })
}

/// Appends one gzip member holding `input`, compressed with `deflate` (reset first, so its
/// buffers are reused from request to request).
fn gzip(deflate: &mut Compress, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    deflate.reset();
    let mut consumed = 0;
    loop {
        out.reserve(input.len() / 4 + 1024);
        let before = deflate.total_in();
        let status = deflate
            .compress_vec(&input[consumed..], out, FlushCompress::Finish)
            .context("gzip")?;
        consumed += (deflate.total_in() - before) as usize;
        if status == Status::StreamEnd {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::generator::{self, GenConfig};
    use crate::payload::{SeqCounter, time_digits};
    use crate::target::{TargetOptions, TargetUrl};
    use bytes::{Bytes, BytesMut};
    use loghaul_codec::forward::{Decoder, Limits};
    use loghaul_core::EventBatch;
    use std::net::TcpListener;
    use std::sync::atomic::AtomicBool;
    use std::thread::JoinHandle;

    /// Every format's frames carry their slots where stamping finds them, and decode as entries.
    #[test]
    fn frames_hold_the_marker_slots() {
        for format in [Format::Raw, Format::Rfc3164, Format::Rfc5424, Format::Json] {
            for (mode, ack) in [
                (FluentMode::Packed, false),
                (FluentMode::Message, false),
                (FluentMode::Message, true),
            ] {
                let spec = PayloadSpec {
                    format,
                    message_size: 120,
                    block_bytes: 3000,
                    blocks: 2,
                    ..PayloadSpec::default()
                };
                let opts = FluentOptions {
                    mode,
                    batch: 7,
                    ack,
                    ..FluentOptions::default()
                };
                let mut blocks = build_blocks(&spec, &opts, 3).unwrap();
                let block = &mut blocks[0];
                let n = block.len();
                if mode != FluentMode::Message {
                    assert_eq!(n % 7, 0, "a block is whole requests");
                }
                block.stamp(
                    n,
                    &mut SeqCounter::new(40),
                    &time_digits(1_732_240_000_123_456),
                );
                for (i, &(s, e)) in block.bodies.iter().enumerate() {
                    let text = std::str::from_utf8(&block.bytes[s..e]).unwrap();
                    let want = format!("gen=3 seq={:010} t=1732240000123456", 40 + i);
                    assert!(text.contains(&want), "{format:?} {mode:?}: {text}");
                }
                // Entries (or Message requests) decode one event each, the marker intact.
                let mut stream = Vec::new();
                if mode == FluentMode::Message {
                    stream.extend_from_slice(&block.bytes);
                } else {
                    stream.push(0x93);
                    write_str(&mut stream, b"t");
                    stream.push(0xc6);
                    stream.extend_from_slice(&(block.bytes.len() as u32).to_be_bytes());
                    stream.extend_from_slice(&block.bytes);
                    stream.push(0xc0);
                }
                let mut arena = BytesMut::from(&stream[..]);
                let mut batch = EventBatch::new(Bytes::new(), "in".into(), "fluent");
                let mut decoder = Decoder::new(Limits {
                    max_decompressed_size: 1 << 20,
                });
                let mut splitter = Splitter::new(1 << 20);
                let mut at = 0;
                while let Some(len) = splitter.split(&arena[at..]).unwrap() {
                    let r = decoder
                        .decode(&mut arena, at, at + len, &mut batch, 0)
                        .unwrap();
                    assert_eq!(r.chunk.is_some(), ack);
                    at += len;
                }
                assert_eq!(at, stream.len());
                assert_eq!(decoder.stats.invalid_events, 0);
                batch.arena = arena.freeze();
                assert_eq!(batch.events.len(), n, "{format:?} {mode:?}");
                let last =
                    String::from_utf8_lossy(batch.str(batch.events[n - 1].message.or_empty()));
                let want = format!("gen=3 seq={:010} ", 40 + n - 1);
                assert!(last.contains(&want), "{last}");
            }
        }
    }

    #[test]
    fn gzip_round_trips_and_reuses_its_state() {
        let mut deflate = Compress::new_gzip(Compression::fast(), 15);
        for input in [&b""[..], b"hello hello hello", &vec![7u8; 300_000]] {
            let mut out = vec![0xaa];
            gzip(&mut deflate, input, &mut out).unwrap();
            let mut back = Vec::new();
            flate2::read::MultiGzDecoder::new(&out[1..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input);
        }
    }

    /// A forward server that fails on purpose: on its connection `i` it acknowledges `acks[i]`
    /// requests, reads the complete requests that arrived with the last of them without
    /// acknowledging them (as a server that wrote events and died before its ack went out), and
    /// drops the connection; on the connection after the last it acknowledges everything until
    /// the end of the stream. Returns the sequence numbers of every event it read, repeats
    /// included.
    fn flaky_server(listener: TcpListener, acks: Vec<usize>) -> JoinHandle<Vec<u64>> {
        std::thread::spawn(move || {
            let mut seqs = Vec::new();
            let mut decoder = Decoder::new(Limits {
                max_decompressed_size: 1 << 24,
            });
            for limit in acks.into_iter().map(Some).chain([None]) {
                let (mut conn, _) = listener.accept().unwrap();
                let (mut buf, mut splitter, mut acked) = (Vec::new(), Splitter::new(1 << 24), 0);
                let mut read = vec![0u8; 64 * 1024];
                loop {
                    let n = conn.read(&mut read).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&read[..n]);
                    let mut at = 0;
                    while let Some(len) = splitter.split(&buf[at..]).unwrap() {
                        let mut arena = BytesMut::from(&buf[at..at + len]);
                        let mut batch = EventBatch::new(Bytes::new(), "in".into(), "fluent");
                        let r = decoder.decode(&mut arena, 0, len, &mut batch, 0).unwrap();
                        let (s, e) = r.chunk.unwrap();
                        let chunk = arena[s..e].to_vec();
                        batch.arena = arena.freeze();
                        for event in &batch.events {
                            let text = String::from_utf8_lossy(batch.str(event.message.or_empty()));
                            let at = text.find("seq=").unwrap() + 4;
                            seqs.push(text[at..at + SEQ_DIGITS].parse().unwrap());
                        }
                        at += len;
                        if limit.is_none_or(|l| acked < l) {
                            let mut ack = Vec::new();
                            loghaul_codec::forward::write_ack(&mut ack, &chunk);
                            conn.write_all(&ack).unwrap();
                            acked += 1;
                        }
                    }
                    buf.drain(..at);
                    if limit.is_some_and(|l| acked >= l) {
                        break;
                    }
                }
            }
            seqs
        })
    }

    /// With `--reconnect`, a server that drops the connection again and again gets every
    /// unacknowledged request again on the next one, in every mode; the acked log lists each
    /// request once and covers every event; what the server read twice is at most what was
    /// resent. Without it, the first drop ends the run.
    #[test]
    fn reconnects_and_resends_what_was_not_acknowledged() {
        const COUNT: u64 = 3000;
        let acks = vec![5, 0, 20];
        for mode in [
            FluentMode::Packed,
            FluentMode::Forward,
            FluentMode::Compressed,
            FluentMode::Message,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let log = dir.path().join("acked.log");
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = flaky_server(listener, acks.clone());
            let cfg = GenConfig {
                target: TargetUrl::Fluent(addr.to_string()),
                target_options: TargetOptions {
                    fluent: FluentOptions {
                        mode,
                        batch: 50,
                        ack: true,
                        reconnect: Some(Duration::from_secs(20)),
                        acked_log: Some(log.clone()),
                        ..FluentOptions::default()
                    },
                    ..TargetOptions::default()
                },
                payload: PayloadSpec {
                    format: Format::Raw,
                    block_bytes: 16 * 1024,
                    ..PayloadSpec::default()
                },
                count: Some(COUNT),
                duration: None,
                rate: 0,
                connections: 1,
                gen_id_base: 7,
            };
            let stats = generator::run(&cfg, None, &AtomicBool::new(false)).unwrap();
            let received = server.join().unwrap();
            assert_eq!(stats.sent, COUNT, "{mode:?}");
            let recovery = stats.recovery.unwrap();
            assert_eq!(recovery.reconnects, acks.len() as u64, "{mode:?}");
            assert!(recovery.resent_requests > 0, "{mode:?}: {recovery:?}");

            // Each request is in the log once: its ranges tile 0..COUNT.
            let mut ranges: Vec<(u64, u64)> = std::fs::read_to_string(&log)
                .unwrap()
                .lines()
                .map(|l| {
                    let f: Vec<u64> = l.split(' ').map(|w| w.parse().unwrap()).collect();
                    assert_eq!(f.len(), 3, "{l}");
                    assert_eq!(f[0], 7, "{l}");
                    (f[1], f[2])
                })
                .collect();
            ranges.sort_unstable();
            let mut next = 0;
            for (first, last) in ranges {
                assert_eq!(
                    first, next,
                    "{mode:?}: the acked ranges have a gap or overlap"
                );
                assert!(last >= first);
                next = last + 1;
            }
            assert_eq!(next, COUNT, "{mode:?}");

            // The server read everything, and the repeats were all resent.
            let mut counts = vec![0u64; COUNT as usize];
            for s in received {
                counts[s as usize] += 1;
            }
            assert!(
                counts.iter().all(|&c| c >= 1),
                "{mode:?}: an event never arrived"
            );
            let repeats: u64 = counts.iter().map(|&c| c - 1).sum();
            assert!(
                repeats <= recovery.resent_events,
                "{mode:?}: {repeats} repeats, {} events resent",
                recovery.resent_events
            );
        }

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _server = flaky_server(listener, vec![3]);
        let cfg = GenConfig {
            target: TargetUrl::Fluent(addr.to_string()),
            target_options: TargetOptions {
                fluent: FluentOptions {
                    batch: 50,
                    ack: true,
                    ..FluentOptions::default()
                },
                ..TargetOptions::default()
            },
            payload: PayloadSpec {
                format: Format::Raw,
                ..PayloadSpec::default()
            },
            count: Some(COUNT),
            duration: None,
            rate: 0,
            connections: 1,
            gen_id_base: 0,
        };
        assert!(generator::run(&cfg, None, &AtomicBool::new(false)).is_err());
    }
}
