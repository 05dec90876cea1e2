//! The Fluentd forward-protocol target (`--target fluent://HOST:PORT`): the generator's numbered
//! messages as forward requests in any of the protocol's four modes, acknowledged on request.
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
//! `writev`, so no entry is copied on the way out.
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

use std::collections::VecDeque;
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use flate2::{Compress, Compression, FlushCompress, Status};
use loghaul_codec::forward::msgpack::{
    write_array_len, write_event_time, write_int, write_map_len, write_str, write_uint,
};
use loghaul_codec::forward::{Splitter, read_ack};
use serde::Serialize;

use crate::payload::{Block, Format, PayloadSpec, build_blocks_with};
use crate::target::{Target, resolve};

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
}

impl Default for FluentOptions {
    fn default() -> Self {
        Self {
            mode: FluentMode::Packed,
            batch: DEFAULT_BATCH,
            ack: false,
            tag: DEFAULT_TAG.to_string(),
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

/// One forward connection of the generator.
pub struct FluentTarget {
    stream: TcpStream,
    mode: FluentMode,
    batch: usize,
    ack: bool,
    tag: Vec<u8>,
    gen_id: u32,
    /// Request headers, option maps and compressed entries of the requests being written.
    scratch: Vec<u8>,
    pieces: Vec<Piece>,
    deflate: Option<Compress>,
    /// Chunk ids of the requests sent and not yet acknowledged, oldest first.
    unacked: VecDeque<[u8; CHUNK_LEN]>,
    /// Bytes the server sent that are not yet read as acks.
    answers: Vec<u8>,
    answer_split: Splitter,
    requests: u64,
}

impl FluentTarget {
    /// Connects to `addr` for generator `gen_id`.
    ///
    /// # Errors
    /// The address does not resolve or the connection is refused.
    pub fn connect(addr: &str, opts: &FluentOptions, gen_id: u32) -> Result<Self> {
        let sa = resolve(addr)?;
        let stream =
            TcpStream::connect(sa).with_context(|| format!("connecting to fluent://{sa}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        if opts.ack {
            stream
                .set_read_timeout(Some(ACK_TIMEOUT))
                .context("setting the ack timeout")?;
        }
        Ok(Self {
            stream,
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
            // Acks are tiny; anything larger than this is no ack.
            answer_split: Splitter::new(64 * 1024),
            requests: 0,
        })
    }

    /// Requests that may be sent now: all of them without acks, else what the window has left
    /// after waiting for at least one free place.
    fn room(&mut self) -> Result<usize> {
        if !self.ack {
            return Ok(usize::MAX);
        }
        self.read_acks(ACK_WINDOW - 1)?;
        Ok(ACK_WINDOW - self.unacked.len())
    }

    /// A new chunk id, remembered as owed.
    fn next_chunk(&mut self) -> [u8; CHUNK_LEN] {
        let mut raw = [0u8; 16];
        raw[..4].copy_from_slice(&self.gen_id.to_be_bytes());
        raw[4..8].copy_from_slice(b"lhbg");
        raw[8..].copy_from_slice(&self.requests.to_be_bytes());
        self.requests += 1;
        let id = loghaul_codec::forward::chunk_id(&raw);
        self.unacked.push_back(id);
        id
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
    fn option(&mut self, size: usize, gzip: bool) {
        let chunk = self.ack.then(|| self.next_chunk());
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

    /// Queues the request carrying messages `from..from + count` of `block`.
    fn request(&mut self, block: &mut Block, from: usize, count: usize) -> Result<()> {
        let start = match from {
            0 => 0,
            i => block.frame_ends[i - 1],
        };
        let end = block.frame_ends[from + count - 1];
        let header = self.scratch.len();
        match self.mode {
            FluentMode::Message => {
                if self.ack {
                    // One frame, whose last CHUNK_LEN bytes are its chunk id.
                    let id = self.next_chunk();
                    if let Some(slot) = block.bytes.get_mut(end - CHUNK_LEN..end) {
                        slot.copy_from_slice(&id);
                    }
                }
                self.push(Piece::Block(start, end));
            }
            FluentMode::Forward => {
                write_array_len(&mut self.scratch, if self.ack { 3 } else { 2 });
                write_str(&mut self.scratch, &self.tag);
                write_array_len(&mut self.scratch, count);
                self.push(Piece::Scratch(header, self.scratch.len()));
                self.push(Piece::Block(start, end));
                if self.ack {
                    let option = self.scratch.len();
                    self.option(count, false);
                    self.push(Piece::Scratch(option, self.scratch.len()));
                }
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
                self.option(count, false);
                self.push(Piece::Scratch(option, self.scratch.len()));
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
                self.option(count, true);
                self.push(Piece::Scratch(header, self.scratch.len()));
            }
        }
        Ok(())
    }

    /// Writes the queued pieces with as few `writev` calls as the kernel allows; returns the bytes.
    fn write_pieces(&mut self, block: &Block) -> Result<u64> {
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
        let total: usize = slices.iter().map(|s| s.len()).sum();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match self.stream.write_vectored(rest) {
                Ok(0) => bail!("the fluent target stopped taking bytes"),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("writing to the fluent target"),
            }
        }
        Ok(total as u64)
    }

    /// Reads acks until at most `owed` requests are unacknowledged. Each must echo the oldest
    /// owed chunk: a server that answers out of order or with another id is reported, since a
    /// real client would resend (fluentd drops the connection on a mismatch).
    fn read_acks(&mut self, owed: usize) -> Result<()> {
        let mut read = [0u8; 4096];
        while self.unacked.len() > owed {
            let mut used = 0;
            while let Some(len) = self
                .answer_split
                .split(&self.answers[used..])
                .map_err(|e| anyhow::anyhow!("the server's answer is no msgpack: {e}"))?
            {
                let value = &self.answers[used..used + len];
                used += len;
                let got = read_ack(value)
                    .and_then(|s| value.get(s.start as usize..s.end as usize))
                    .with_context(|| {
                        format!(
                            "the server answered with something other than an ack: {:02x?}",
                            &value[..value.len().min(32)]
                        )
                    })?;
                let Some(want) = self.unacked.pop_front() else {
                    bail!(
                        "an ack ({}) for no outstanding request",
                        String::from_utf8_lossy(got)
                    );
                };
                if got != want {
                    bail!(
                        "ack {:?} does not match the oldest unacknowledged chunk {:?}",
                        String::from_utf8_lossy(got),
                        String::from_utf8_lossy(&want)
                    );
                }
            }
            self.answers.drain(..used);
            if self.unacked.len() <= owed {
                break;
            }
            match self.stream.read(&mut read) {
                Ok(0) => bail!(
                    "the server closed the connection with {} request(s) unacknowledged",
                    self.unacked.len()
                ),
                Ok(n) => self.answers.extend_from_slice(&read[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    bail!(
                        "no ack within {ACK_TIMEOUT:?} ({} request(s) unacknowledged)",
                        self.unacked.len()
                    )
                }
                Err(e) => return Err(e).context("reading acks from the fluent target"),
            }
        }
        Ok(())
    }
}

impl Target for FluentTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let (mut done, mut wire) = (0, 0);
        while done < n {
            let room = self.room()?;
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
            wire += self.write_pieces(block)?;
        }
        Ok(wire)
    }

    fn finish(&mut self) -> Result<()> {
        self.read_acks(0)?;
        self.stream.flush().context("flushing the fluent target")?;
        // Half-close so the server sees a clean end of stream before we drop the socket.
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
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
    use crate::payload::{SeqCounter, time_digits};
    use bytes::{Bytes, BytesMut};
    use loghaul_codec::forward::{Decoder, Limits};
    use loghaul_core::EventBatch;

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
}
