//! Forward and PackedForward requests read entry by entry as their bytes arrive, plain or
//! compressed, in steps whose memory the caller charges before each one: a request of any size
//! (fluentd's file buffer sends chunks of up to 256 MB) costs the connection one step of
//! decoding at a time, never the whole request.
//!
//! ```text
//! [tag, bin|str(L) ─┬─ plain entries ─────────────── moved from `buf` into the arena ─┐ , option?]
//! [tag, array(N)  ──┤                                                                  ├─► decode
//!                   └─ gzip/zstd (told by its magic) ─ inflated into the arena ───────┘   entries
//!   head: moved into the arena (the tag)         option: read whole, then checked against
//!                                                what the entries turned out to be
//! ```
//!
//! A step decodes at most `allowance / WORST_PER_BYTE` bytes of entries, since one byte can
//! become at most [`WORST_PER_BYTE`] bytes of events, fields and arena (a 3-byte entry
//! `[t, {}]` is a 96-byte event); an entry too large for that is first walked to its end and
//! its exact cost asked for ([`Step::NeedRoom`]). The entries of one request may go out in
//! several batches: the caller starts a new batch whenever it likes, and [`Stream::carry`] puts
//! into the new arena what the rest of the request needs (its tag, the bytes of an entry not yet
//! whole).
//!
//! The option comes after the entries, so whether the entries are compressed is told from their
//! first bytes (gzip `1f 8b`, zstd `28 b5 2f fd`; a plain entry starts with an array header) and
//! checked against the option once it arrives. A request that breaks anywhere is an error: what
//! of it is still in the current batch is taken out; what already went out with an earlier batch
//! cannot be, and is never acknowledged.

use bytes::{Buf as _, BytesMut};
use loghaul_core::{Event, EventBatch, Field, Span};

use super::decode::{
    Compression, Decoder, Limits, MAX_INVALID, Mode, Request, RequestError, read_options,
};
use super::msgpack::{Head, Reader};
use super::split::{SplitError, Splitter};
use crate::inflate::{Encoding, InflateError, Inflater};

/// The most memory one byte of entries can take once decoded: a 3-byte entry `[t, {}]` becomes
/// a whole event, and the byte itself stays in the arena.
pub const WORST_PER_BYTE: usize = std::mem::size_of::<Event>() / 3 + 1;

/// The most memory decoding one whole entry of `len` bytes and `values` msgpack values can take.
pub fn entry_cost(len: usize, values: u64) -> usize {
    let fields = usize::try_from(values)
        .unwrap_or(usize::MAX)
        .saturating_mul(std::mem::size_of::<Field>());
    len.saturating_add(fields)
        .saturating_add(std::mem::size_of::<Event>())
}

/// What one [`Stream::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing more can be done until more bytes arrive.
    NeedInput,
    /// Some work was done; the request goes on.
    Progress,
    /// The next entry alone needs this many bytes of allowance (more than was given).
    NeedRoom(usize),
    /// The request ended. Its chunk, if any, is in the current arena.
    Done(Request),
}

/// Whether the request at the start of `buf` carries its events as entries (Forward,
/// PackedForward): `Some(true)`; `Some(false)` for anything else (Message mode, a heartbeat, a
/// broken request: decoded whole); `None` while its head has not arrived.
pub fn carries_entries(buf: &[u8]) -> Option<bool> {
    let mut r = Reader::new(buf, 0);
    match r.head() {
        Ok(Head::Array(2..=4)) => {}
        Ok(_) | Err(super::msgpack::ReadError::InvalidMarker) => return Some(false),
        Err(super::msgpack::ReadError::Truncated) => return None,
    }
    // A tag that is no string still leaves a request with entries (every event is invalid).
    let tag = match r.head() {
        Ok(Head::Str(n) | Head::Bin(n)) => r.take(n).map(|_| ()),
        Ok(other) => super::decode::skip_after_head(&mut r, other),
        Err(e) => Err(e),
    };
    match tag.and_then(|()| r.head()) {
        Ok(Head::Str(_) | Head::Bin(_) | Head::Array(_)) => Some(true),
        Ok(_) | Err(super::msgpack::ReadError::InvalidMarker) => Some(false),
        Err(super::msgpack::ReadError::Truncated) => None,
    }
}

/// Reads entry-carrying requests of one connection, one at a time.
#[derive(Debug)]
pub struct Stream {
    /// `max_request_size`: the most bytes held whole (a request's head, one entry, the option).
    max_value: usize,
    max_decompressed: usize,
    /// Decodes the entries and counts the invalid ones.
    decoder: Decoder,
    req: Option<Box<Req>>,
    /// Inflated bytes on their way into the arena.
    scratch: Vec<u8>,
    /// The index of the connection's peer in the batch's `peers`.
    peer: u16,
    /// Most entries one request may carry.
    max_entries: u64,
}

/// The request being read.
#[derive(Debug)]
struct Req {
    /// The request array has an option after the entries.
    has_option: bool,
    /// The tag's bytes (`None`: not a string, every event is invalid), to put into each new
    /// arena, and where they are in the current one.
    tag: Option<Vec<u8>>,
    tag_span: Option<Span>,
    body: Body,
    /// What the entries turned out to be, to check against the option.
    seen: Seen,
    /// The first byte of the arena not decoded yet.
    at: usize,
    /// Walking an entry that did not fit one step, to its end.
    walker: Option<Splitter>,
    /// The entry at `at`, walked whole: its length and number of values.
    known: Option<(usize, u64)>,
    valid: u64,
    invalid: u64,
    /// Where this request's events and fields start in the current batch.
    first_event: usize,
    first_field: usize,
    option: Splitter,
}

#[derive(Debug)]
enum Body {
    /// A blob whose first bytes have not yet told whether it is compressed.
    Blob { left: u64 },
    /// Plain entries; `left` bytes of the blob are still in the caller's buffer.
    Plain { left: u64 },
    /// Compressed entries; `left` compressed bytes are still in the caller's buffer.
    Compressed {
        left: u64,
        inflater: Box<Inflater>,
        drained: bool,
    },
    /// A Forward array with `left` entries to go.
    Array { left: u64 },
    /// Every entry is decoded: the option (if any) is next.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Empty,
    Plain,
    Compressed(Encoding),
    Array,
}

impl Stream {
    /// A stream holding at most `max_value` bytes whole and inflating at most
    /// `max_decompressed` bytes per request.
    pub fn new(max_value: usize, max_decompressed: usize) -> Stream {
        Stream {
            max_value,
            max_decompressed,
            // The entries' decoded size is bounded by the caller's budget, step by step.
            decoder: Decoder::new(Limits {
                max_decompressed_size: usize::MAX,
            }),
            req: None,
            scratch: Vec::new(),
            peer: 0,
            max_entries: u64::MAX,
        }
    }

    /// Refuses requests of more than `max` entries (valid or not).
    pub fn set_max_entries(&mut self, max: u64) {
        self.max_entries = max;
    }

    /// The index in each batch's `peers` that events get (0 unless said).
    pub fn set_peer(&mut self, peer: u16) {
        self.peer = peer;
    }

    /// Whether a request is being read.
    pub fn in_request(&self) -> bool {
        self.req.is_some()
    }

    /// Takes the counts of dropped entries since the last call.
    pub fn take_stats(&mut self) -> super::DecodeStats {
        std::mem::take(&mut self.decoder.stats)
    }

    /// Starts the request at the start of `buf` (one [`carries_entries`] said `Some(true)`
    /// for): its head moves into `arena`. `Ok(false)`: the head has not all arrived.
    ///
    /// # Errors
    ///
    /// The head is not that of a Forward or PackedForward request, or is longer than
    /// `max_value`.
    pub fn begin(
        &mut self,
        buf: &mut BytesMut,
        arena: &mut BytesMut,
        batch: &EventBatch,
    ) -> Result<bool, RequestError> {
        let mut r = Reader::new(buf, 0);
        let parsed = (|| {
            let Head::Array(n) = r.head()? else {
                return Err(RequestError::Malformed("a request is an array"));
            };
            let tag = match r.head()? {
                Head::Str(len) | Head::Bin(len) => Some(r.take(len)?),
                other => {
                    super::decode::skip_after_head(&mut r, other)?;
                    None
                }
            };
            let body = match r.head()? {
                Head::Str(len) | Head::Bin(len) => Body::Blob { left: len as u64 },
                Head::Array(len) => Body::Array { left: len as u64 },
                _ => return Err(RequestError::Malformed("the entries are no blob or array")),
            };
            if !(2..=3).contains(&n) {
                return Err(RequestError::Malformed(
                    "wrong number of elements for the request's mode",
                ));
            }
            Ok((n, tag, body))
        })();
        let (n, tag, body) = match parsed {
            Ok(p) => p,
            Err(e) if e.is_truncation() => {
                return if buf.len() > self.max_value {
                    Err(RequestError::ValueTooLarge {
                        limit: self.max_value,
                    })
                } else {
                    Ok(false)
                };
            }
            Err(e) => return Err(e),
        };
        let head = r.pos();
        if head > self.max_value {
            return Err(RequestError::ValueTooLarge {
                limit: self.max_value,
            });
        }
        let base = arena.len();
        arena.unsplit(buf.split_to(head));
        let tag_span = tag.map(|(s, e)| Span::new(base + s, base + e));
        self.req = Some(Box::new(Req {
            has_option: n == 3,
            tag: tag_span.map(|s| arena[s.start as usize..s.end as usize].to_vec()),
            tag_span,
            seen: if matches!(body, Body::Array { .. }) {
                Seen::Array
            } else {
                Seen::Empty
            },
            body,
            at: arena.len(),
            walker: None,
            known: None,
            valid: 0,
            invalid: 0,
            first_event: batch.events.len(),
            first_field: batch.fields.len(),
            option: Splitter::new(self.max_value),
        }));
        Ok(true)
    }

    /// Moves the current request on by one step, decoding at most what `allowance` bytes of
    /// memory can hold into `batch` (whose arena is `arena`; the batch's own `arena` field is
    /// not used). Bytes are taken from the front of `buf`.
    ///
    /// # Errors
    ///
    /// The request is broken; nothing of it stays in `batch`, and the stream is between
    /// requests again (the caller closes the connection: the stream cannot be trusted).
    pub fn step(
        &mut self,
        buf: &mut BytesMut,
        arena: &mut BytesMut,
        batch: &mut EventBatch,
        allowance: usize,
    ) -> Result<Step, RequestError> {
        let Some(mut req) = self.req.take() else {
            return Ok(Step::NeedInput);
        };
        let result = self.step_req(&mut req, buf, arena, batch, allowance);
        match &result {
            Ok(Step::Done(_)) => {}
            Ok(_) => self.req = Some(req),
            // What of the request is in this batch goes; what went out before cannot.
            Err(_) => {
                batch.events.truncate(req.first_event);
                batch.fields.truncate(req.first_field);
            }
        }
        result
    }

    /// Readies a new, empty arena to go on with the current request after the caller sent the
    /// batch of `old` on: the tag, and the bytes of an entry not decoded yet, are copied over.
    pub fn carry(&mut self, old: &mut BytesMut, new: &mut BytesMut) {
        let Some(req) = self.req.as_mut() else {
            return;
        };
        req.tag_span = req.tag.as_ref().map(|tag| {
            let start = new.len();
            new.extend_from_slice(tag);
            Span::new(start, new.len())
        });
        let rest = old.split_off(req.at.min(old.len()));
        req.at = new.len();
        new.extend_from_slice(&rest);
        req.first_event = 0;
        req.first_field = 0;
    }

    fn step_req(
        &mut self,
        req: &mut Req,
        buf: &mut BytesMut,
        arena: &mut BytesMut,
        batch: &mut EventBatch,
        allowance: usize,
    ) -> Result<Step, RequestError> {
        if let Body::Blob { left } = req.body {
            let need = left.min(4) as usize;
            if buf.len() < need {
                return Ok(Step::NeedInput);
            }
            req.body = match Encoding::sniff(&buf[..need]) {
                _ if left == 0 => Body::Done,
                Some(encoding) => {
                    req.seen = Seen::Compressed(encoding);
                    Body::Compressed {
                        left,
                        inflater: Box::new(
                            Inflater::new(encoding, self.max_decompressed)
                                .map_err(|e| inflate_error(e, self.max_decompressed))?,
                        ),
                        drained: false,
                    }
                }
                None => {
                    req.seen = Seen::Plain;
                    Body::Plain { left }
                }
            };
        }
        if let Body::Array { left: 0 } = req.body {
            give_back(req.at, arena, buf);
            req.body = Body::Done;
        }
        if matches!(req.body, Body::Done) {
            return self.option(req, buf, arena, batch);
        }
        let window = (allowance / WORST_PER_BYTE).max(1);

        // An entry walked whole: decoded alone, once its cost is allowed.
        if let Some((len, values)) = req.known {
            let cost = entry_cost(len, values);
            if cost > allowance {
                return Ok(Step::NeedRoom(cost));
            }
            req.known = None;
            let end = req.at + len;
            let mut r = Reader::new(arena.get(..end).unwrap_or_default(), req.at);
            self.entry(req, &mut r, batch)?;
            return Ok(Step::Progress);
        }

        // An entry larger than a step: walked to its end first.
        if req.walker.is_some() {
            let brought = self.bring(req, buf, arena, window)?;
            let Some(walker) = req.walker.as_mut() else {
                return Ok(Step::Progress);
            };
            return match walker.split(arena.get(req.at..).unwrap_or_default()) {
                Ok(Some(len)) => {
                    req.known = Some((len, walker.last_nodes()));
                    req.walker = None;
                    Ok(Step::Progress)
                }
                Ok(None) if !more_can_come(&req.body) => Err(RequestError::Malformed(
                    "an entry runs past the end of the entries",
                )),
                Ok(None) if brought == 0 => Ok(Step::NeedInput),
                Ok(None) => Ok(Step::Progress),
                Err(SplitError::TooLarge { .. }) => Err(RequestError::ValueTooLarge {
                    limit: self.max_value,
                }),
                Err(_) => Err(RequestError::Malformed("an entry is no valid msgpack")),
            };
        }

        let undecoded = arena.len() - req.at;
        let brought = if undecoded < window {
            self.bring(req, buf, arena, window - undecoded)?
        } else {
            0
        };
        let end = arena.len().min(req.at + window);
        if end == req.at {
            if more_can_come(&req.body) {
                return Ok(if brought > 0 {
                    Step::Progress
                } else {
                    Step::NeedInput
                });
            }
            req.body = Body::Done;
            return Ok(Step::Progress);
        }
        let mut progressed = false;
        while req.at < end && !matches!(req.body, Body::Array { left: 0 }) {
            let (events, fields) = (batch.events.len(), batch.fields.len());
            let stats = self.decoder.stats;
            let mut r = Reader::new(arena.get(..end).unwrap_or_default(), req.at);
            match self.entry(req, &mut r, batch) {
                Ok(()) => progressed = true,
                Err(e) if e.is_truncation() => {
                    batch.events.truncate(events);
                    batch.fields.truncate(fields);
                    self.decoder.stats = stats;
                    if progressed {
                        break;
                    }
                    if end < arena.len() || more_can_come(&req.body) {
                        // Not whole within this step: walk it to its end first.
                        req.walker = Some(Splitter::new(self.max_value));
                        return Ok(Step::Progress);
                    }
                    return Err(RequestError::Malformed(
                        "an entry runs past the end of the entries",
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        match req.body {
            Body::Array { left: 0 } => {
                give_back(req.at, arena, buf);
                req.body = Body::Done;
            }
            _ if req.at == arena.len() && !more_can_come(&req.body) => req.body = Body::Done,
            _ => {}
        }
        Ok(Step::Progress)
    }

    /// Decodes the entry at the reader's position and counts it.
    fn entry(
        &mut self,
        req: &mut Req,
        r: &mut Reader<'_>,
        batch: &mut EventBatch,
    ) -> Result<(), RequestError> {
        if req.valid + req.invalid >= self.max_entries {
            return Err(RequestError::TooManyEvents {
                limit: self.max_entries,
            });
        }
        let before = batch.events.len();
        self.decoder.entry(r, batch, req.tag_span, self.peer)?;
        req.at = r.pos();
        if batch.events.len() > before {
            req.valid += 1;
        } else {
            req.invalid += 1;
            if req.invalid >= MAX_INVALID && req.invalid > req.valid {
                return Err(RequestError::MostlyInvalid {
                    invalid: req.invalid,
                    valid: req.valid,
                });
            }
        }
        if let Body::Array { left } = &mut req.body {
            *left = left.saturating_sub(1);
        }
        Ok(())
    }

    /// Brings up to `room` more bytes of entries into the arena: plain ones move from `buf`,
    /// compressed ones are inflated. Returns 0 when nothing happened (more input is needed).
    fn bring(
        &mut self,
        req: &mut Req,
        buf: &mut BytesMut,
        arena: &mut BytesMut,
        room: usize,
    ) -> Result<usize, RequestError> {
        match &mut req.body {
            Body::Plain { left } => {
                let k = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(buf.len())
                    .min(room);
                arena.unsplit(buf.split_to(k));
                *left -= k as u64;
                Ok(k)
            }
            Body::Array { .. } => {
                let k = buf.len().min(room);
                arena.unsplit(buf.split_to(k));
                Ok(k)
            }
            Body::Compressed {
                left,
                inflater,
                drained,
            } => {
                if *drained {
                    return Ok(0);
                }
                let input = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                self.scratch.clear();
                let used = inflater
                    .inflate(&buf[..input], &mut self.scratch, room)
                    .map_err(|e| inflate_error(e, self.max_decompressed))?;
                buf.advance(used);
                *left -= used as u64;
                arena.extend_from_slice(&self.scratch);
                if *left == 0 && used == 0 && self.scratch.is_empty() {
                    inflater
                        .finish()
                        .map_err(|e| inflate_error(e, self.max_decompressed))?;
                    *drained = true;
                }
                let made = self.scratch.len();
                if self.scratch.capacity() > 4 << 20 {
                    self.scratch = Vec::new();
                }
                Ok(made + used)
            }
            Body::Blob { .. } | Body::Done => Ok(0),
        }
    }

    /// Reads the option (when the request has one) and ends the request.
    fn option(
        &mut self,
        req: &mut Req,
        buf: &mut BytesMut,
        arena: &mut BytesMut,
        batch: &mut EventBatch,
    ) -> Result<Step, RequestError> {
        let options = if req.has_option {
            let len = match req.option.split(buf) {
                Ok(Some(len)) => len,
                Ok(None) => return Ok(Step::NeedInput),
                Err(SplitError::TooLarge { .. }) => {
                    return Err(RequestError::ValueTooLarge {
                        limit: self.max_value,
                    });
                }
                Err(_) => return Err(RequestError::Malformed("the option is no valid msgpack")),
            };
            let start = arena.len();
            arena.unsplit(buf.split_to(len));
            read_options(&mut Reader::new(&arena[..], start))?
        } else {
            super::decode::Options::default()
        };
        let mode = match (req.seen, options.compression) {
            (Seen::Array, _) => Mode::Forward,
            (Seen::Empty | Seen::Plain, Compression::None) | (Seen::Empty, _) => {
                Mode::PackedForward
            }
            (Seen::Compressed(Encoding::Gzip), Compression::Gzip)
            | (Seen::Compressed(Encoding::Zstd), Compression::Zstd) => {
                Mode::CompressedPackedForward
            }
            (Seen::Plain, c) => {
                return Err(RequestError::Decompress(format!(
                    "the entries are no {} data",
                    if c == Compression::Gzip {
                        "gzip"
                    } else {
                        "zstd"
                    }
                )));
            }
            (Seen::Compressed(e), Compression::None) => {
                return Err(RequestError::Malformed(if e == Encoding::Gzip {
                    "the entries are gzip data, but the option does not say they are compressed"
                } else {
                    "the entries are zstd data, but the option does not say they are compressed"
                }));
            }
            (Seen::Compressed(e), _) => {
                return Err(RequestError::Decompress(format!(
                    "the entries are {e} data, not what the option says"
                )));
            }
        };
        let mut events = req.valid as usize;
        if !options.logs {
            // Metrics or traces: counted and skipped, never written as log events (what went
            // out with earlier batches of a long request had to be taken for logs).
            batch.events.truncate(req.first_event);
            batch.fields.truncate(req.first_field);
            self.decoder.stats.other_signals += events as u64;
            events = 0;
        }
        Ok(Step::Done(Request {
            mode,
            chunk: options.chunk,
            events,
        }))
    }
}

/// Puts the arena's bytes from `at` on back in front of `buf`: after a Forward array's last
/// entry they are the option's, and what follows it.
fn give_back(at: usize, arena: &mut BytesMut, buf: &mut BytesMut) {
    if at < arena.len() {
        let mut rest = arena.split_off(at);
        rest.unsplit(std::mem::take(buf));
        *buf = rest;
    }
}

/// Whether more entry bytes may still come for this body.
fn more_can_come(body: &Body) -> bool {
    match body {
        Body::Blob { .. } => true,
        Body::Plain { left } => *left > 0,
        Body::Compressed { left, drained, .. } => *left > 0 || !drained,
        Body::Array { left } => *left > 0,
        Body::Done => false,
    }
}

fn inflate_error(e: InflateError, limit: usize) -> RequestError {
    match e {
        InflateError::TooLarge => RequestError::TooLarge { limit },
        InflateError::Broken(why) => RequestError::Decompress(why),
    }
}
