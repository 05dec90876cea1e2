//! Forward-protocol requests to events: one complete request (found by
//! [`super::Splitter`]) in, its events appended to a batch.
//!
//! ```text
//! Message                  [tag, time, record, option?]
//! Forward                  [tag, [[time, record], ...], option?]
//! PackedForward            [tag, str|bin(<[time, record]>*), option?]
//! CompressedPackedForward  [tag, str|bin(gzip|zstd(<[time, record]>*)), {compressed: "gzip"|"zstd", ...}]
//! time:   int seconds | EventTime ext 0 (fixext8 or ext8: sec u32, nsec u32) | [time, {metadata}]
//! option: {size?, chunk?, compressed?, fluent_signal?, metadata?}   (other keys are ignored)
//! ```
//!
//! The mode is told by the type of element 1, as fluentd's in_forward does. Records land in the
//! batch's `fields` table (see `loghaul_core::batch`); strings stay spans into the arena. In a
//! batch of undecoded records (`EventBatch::raw_records`, a deliver's) a record is only walked,
//! with the same checks, and [`decode_raw`] decodes such a batch for a reader that needs it.
//!
//! Two kinds of failure, kept apart because they call for different answers:
//! - a request that cannot be understood (not msgpack, the wrong shape, a blob that is not what
//!   `compressed` says, output past `max_decompressed_size`) is a [`RequestError`]: the source
//!   counts it and closes the connection, and nothing of the request is kept;
//! - an event that is well-formed msgpack but not a valid event (a time that is a float, a record
//!   that is not a map, a tag that is not a string) is dropped and counted in [`DecodeStats`],
//!   like fluentd's `skip_invalid_event`, and the rest of the request is accepted (and acked: a
//!   retry could never fix it).

use bytes::BytesMut;
use loghaul_core::{Event, EventBatch, Field, Flags, OptSpan, Span, Timestamp, Value};

use super::msgpack::{Head, ReadError, Reader};

/// Nesting a record may have (maps and arrays inside the record); deeper records are invalid
/// events. Deep enough for real documents, shallow enough to bound the decoder's recursion.
pub const MAX_RECORD_DEPTH: usize = 64;

/// The memory one step of a whole request's entries may decode (see [`super::Stream`]).
const STEP: usize = 1 << 20;

/// What decoding may create.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest output of decompressing one request's entries, and the most memory one request's
    /// decoded events and fields may take: a 3-byte entry `[1, {}]` decodes to a 96-byte event,
    /// so without the second bound a small compressed request could decode to gigabytes.
    pub max_decompressed_size: usize,
}

/// How a request carried its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// msgpack `nil`: a heartbeat, no events.
    Heartbeat,
    Message,
    Forward,
    PackedForward,
    CompressedPackedForward,
}

/// What one request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub mode: Mode,
    /// The option's `chunk` value, as arena offsets: echo it back byte for byte once the
    /// request's events are committed.
    pub chunk: Option<(usize, usize)>,
    /// Events appended to the batch.
    pub events: usize,
}

/// A request that cannot be processed: the connection's stream can no longer be trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Not the shape of any forward request, or broken msgpack inside it.
    Malformed(&'static str),
    /// `compressed` names a compression loghaul does not know.
    UnknownCompression(String),
    /// The entries are not the compressed data `compressed` says they are.
    Decompress(String),
    /// Decompressing the entries, or decoding them, would take more than `max_decompressed_size`.
    TooLarge { limit: usize },
    /// One entry, the head or the option of a request is longer than `max_request_size` (what
    /// is held whole while it arrives).
    ValueTooLarge { limit: usize },
    /// Most of the request's entries are no valid event (at least [`MAX_INVALID`] of them, and
    /// more than the valid ones): garbage, not a client's mistake in a few records.
    MostlyInvalid { invalid: u64, valid: u64 },
    /// The request carries more entries than `max_events_per_request`.
    TooManyEvents { limit: u64 },
}

/// Invalid entries a request may hold before it is refused as mostly invalid (when they are
/// also more than its valid ones); until then they are dropped and counted, as fluentd does.
pub const MAX_INVALID: u64 = 1000;

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Malformed(why) => write!(f, "malformed request: {why}"),
            RequestError::UnknownCompression(c) => {
                write!(
                    f,
                    "unknown compression {c:?} (gzip, zstd and text are known)"
                )
            }
            RequestError::Decompress(e) => write!(f, "cannot decompress the entries: {e}"),
            RequestError::TooLarge { limit } => write!(
                f,
                "decompressed entries, or their decoded events, larger than max_decompressed_size ({limit} bytes)"
            ),
            RequestError::ValueTooLarge { limit } => write!(
                f,
                "an entry, or a request's head or option, larger than max_request_size ({limit} bytes)"
            ),
            RequestError::MostlyInvalid { invalid, valid } => write!(
                f,
                "{invalid} of the request's entries are no valid event ({valid} valid): refused"
            ),
            RequestError::TooManyEvents { limit } => write!(
                f,
                "a request of more entries than max_events_per_request ({limit})"
            ),
        }
    }
}

/// What a value cut short by the end of the bytes given is reported as.
pub(super) const TRUNCATED: &str = "a value runs past the end of the request";

impl RequestError {
    /// Whether this is a value cut short: more bytes may complete it.
    pub(super) fn is_truncation(&self) -> bool {
        matches!(self, RequestError::Malformed(why) if *why == TRUNCATED)
    }
}

impl From<ReadError> for RequestError {
    fn from(e: ReadError) -> RequestError {
        RequestError::Malformed(match e {
            ReadError::Truncated => TRUNCATED,
            ReadError::InvalidMarker => "invalid msgpack marker 0xc1",
        })
    }
}

/// Events dropped (or not events at all), counted for the source's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Well-formed entries that are no valid event (bad time, record not a map, tag not a
    /// string, a key that is not a string, nesting past [`MAX_RECORD_DEPTH`]).
    pub invalid_events: u64,
    /// Entries of requests whose `fluent_signal` marks metrics or traces, not logs.
    pub other_signals: u64,
}

/// The parsed option map.
#[derive(Debug)]
pub(super) struct Options {
    pub(super) chunk: Option<(usize, usize)>,
    pub(super) compression: Compression,
    pub(super) logs: bool,
}

impl Default for Options {
    /// What a request without an option means: uncompressed logs, no ack.
    fn default() -> Options {
        Options {
            chunk: None,
            compression: Compression::None,
            logs: true,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    #[default]
    None,
    Gzip,
    Zstd,
}

/// Whether the complete request `request` carries compressed entries (its option says `gzip`
/// or `zstd`): read from its headers alone, the entries are skipped by their length. Lets a
/// caller move the expensive decode of such requests off its async workers.
pub fn is_compressed(request: &[u8]) -> bool {
    let mut r = Reader::new(request, 0);
    let Ok(Head::Array(n)) = r.head() else {
        return false;
    };
    // [tag, blob, option]: anything else is not a compressed request.
    if n != 3 || r.skip().is_err() {
        return false;
    }
    if !matches!(r.clone().head(), Ok(Head::Str(_) | Head::Bin(_))) || r.skip().is_err() {
        return false;
    }
    let Ok(Head::Map(entries)) = r.head() else {
        return false;
    };
    for _ in 0..entries {
        let key = r.blob().ok().flatten().map(|k| r.slice(k));
        if key == Some(&b"compressed"[..]) {
            return matches!(
                r.blob().ok().flatten().map(|v| r.slice(v)),
                Some(b"gzip" | b"zstd")
            );
        }
        if r.skip().is_err() {
            return false;
        }
    }
    false
}

/// Decodes requests of one connection.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    pub stats: DecodeStats,
    /// Where the current request's events and fields start in the batch (for its budget).
    request_start: (usize, usize),
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            stats: DecodeStats::default(),
            request_start: (0, 0),
        }
    }

    /// Decodes the complete request at `arena[start..end]` and appends its events to `batch`
    /// (whose `arena` field is ignored: `arena` is the one being built, and bytes this request
    /// must create, decompressed entries, are appended to it). Every event gets `peer`.
    ///
    /// On error nothing of this request stays in `batch`.
    ///
    /// # Errors
    ///
    /// The request cannot be processed; see [`RequestError`].
    pub fn decode(
        &mut self,
        arena: &mut BytesMut,
        start: usize,
        end: usize,
        batch: &mut EventBatch,
        peer: u16,
    ) -> Result<Request, RequestError> {
        let (events_before, fields_before) = (batch.events.len(), batch.fields.len());
        self.request_start = (events_before, fields_before);
        let stats_before = self.stats;
        let result = self.decode_inner(arena, start, end, batch, peer);
        if result.is_err() {
            batch.events.truncate(events_before);
            batch.fields.truncate(fields_before);
            self.stats = stats_before;
        }
        result
    }

    fn decode_inner(
        &mut self,
        arena: &mut BytesMut,
        start: usize,
        end: usize,
        batch: &mut EventBatch,
        peer: u16,
    ) -> Result<Request, RequestError> {
        if super::stream::carries_entries(arena.get(start..end).unwrap_or_default()) == Some(true) {
            return self.decode_entries(arena, start, end, batch, peer);
        }
        let mut r = Reader::new(arena.get(..end).unwrap_or_default(), start);
        let n = match r.head()? {
            Head::Nil => {
                return Ok(Request {
                    mode: Mode::Heartbeat,
                    chunk: None,
                    events: 0,
                });
            }
            Head::Array(n) => n,
            // fluentd skips these; no client sends one, and a run of them is another protocol
            // sent to the wrong port (JSON, HTTP, text: every ASCII byte is a msgpack integer),
            // so the connection ends here rather than logging it byte by byte.
            _ => {
                return Err(RequestError::Malformed(
                    "a top-level value that is neither a request nor a heartbeat (JSON or text sent to a forward port?)",
                ));
            }
        };
        if !(2..=4).contains(&n) {
            return Err(RequestError::Malformed(
                "a request is an array of 2 to 4 elements",
            ));
        }
        // A tag that is not a string makes every event of the request invalid (fluentd drops
        // them and still acks), but the request is read to the end for its chunk id.
        let tag = match r.head()? {
            Head::Str(len) | Head::Bin(len) => {
                let (s, e) = r.take(len)?;
                Some(Span::new(s, e))
            }
            other => {
                skip_after_head(&mut r, other)?;
                None
            }
        };
        // Message mode (the entry-carrying modes went to the stream above):
        // [tag, time, record, option?].
        if n < 3 {
            return Err(RequestError::Malformed(
                "wrong number of elements for the request's mode",
            ));
        }
        // The option comes last: skip to it first.
        let body = r.pos();
        r.skip()?;
        r.skip()?;
        let options = if n == 4 {
            read_options(&mut r)?
        } else {
            Options::default()
        };
        if !r.at(end) {
            return Err(RequestError::Malformed(
                "bytes after the request's last element",
            ));
        }
        let mut r = Reader::new(arena.get(..end).unwrap_or_default(), body);
        let valid_from = batch.events.len();
        self.entry_parts(&mut r, batch, tag, peer)?;
        let mut events = batch.events.len() - valid_from;
        if !options.logs {
            // Metrics or traces: counted and skipped, never written as log events.
            batch.events.truncate(valid_from);
            self.stats.other_signals += events as u64;
            events = 0;
        }
        Ok(Request {
            mode: Mode::Message,
            chunk: options.chunk,
            events,
        })
    }

    /// A Forward or PackedForward request, whole, through the connection's own entry reader
    /// ([`super::Stream`]), with its decoded events and fields bounded by
    /// `max_decompressed_size` (what the stream leaves to a memory budget).
    fn decode_entries(
        &mut self,
        arena: &mut BytesMut,
        start: usize,
        end: usize,
        batch: &mut EventBatch,
        peer: u16,
    ) -> Result<Request, RequestError> {
        let limit = self.limits.max_decompressed_size;
        // The stream moves the request's bytes into the arena as it reads them. Plain entries
        // move back where they were, so the arena is left as it was. Inflated entries take the
        // place of compressed ones: when more follows the request in the arena, a copy of it is
        // read instead and lands at the end, so that what follows keeps its offsets (what this
        // request makes is appended, as the contract says).
        let in_place =
            end == arena.len() || !is_compressed(arena.get(start..end).unwrap_or_default());
        let mut buf = if in_place {
            arena.split_off(start)
        } else {
            BytesMut::from(arena.get(start..end).unwrap_or_default())
        };
        let mut stream = super::Stream::new(usize::MAX, limit);
        stream.set_peer(peer);
        let (events_from, fields_from) = self.request_start;
        let result = (|| {
            if !stream.begin(&mut buf, arena, batch)? {
                return Err(RequestError::from(ReadError::Truncated));
            }
            let mut allowance = STEP;
            loop {
                let step = stream.step(&mut buf, arena, batch, allowance)?;
                allowance = STEP;
                let decoded = (batch.events.len() - events_from) * std::mem::size_of::<Event>()
                    + (batch.fields.len() - fields_from) * std::mem::size_of::<Field>();
                if decoded > limit {
                    return Err(RequestError::TooLarge { limit });
                }
                match step {
                    super::Step::Done(request) => return Ok(request),
                    super::Step::Progress => {}
                    super::Step::NeedRoom(cost) => allowance = cost,
                    // The request is all here: wanting more is a value that runs past its end.
                    super::Step::NeedInput => {
                        return Err(RequestError::from(ReadError::Truncated));
                    }
                }
            }
        })();
        if result.is_ok() {
            let stats = stream.take_stats();
            self.stats.invalid_events += stats.invalid_events;
            self.stats.other_signals += stats.other_signals;
        }
        arena.unsplit(buf);
        result
    }

    /// One `[time, record]` entry.
    pub(super) fn entry(
        &mut self,
        r: &mut Reader<'_>,
        batch: &mut EventBatch,
        tag: Option<Span>,
        peer: u16,
    ) -> Result<(), RequestError> {
        match r.head()? {
            Head::Array(2) => self.entry_parts(r, batch, tag, peer),
            Head::Array(n) => {
                for _ in 0..n {
                    r.skip()?;
                }
                self.stats.invalid_events += 1;
                Ok(())
            }
            other => {
                skip_after_head(r, other)?;
                self.stats.invalid_events += 1;
                Ok(())
            }
        }
    }

    /// A time and a record (the rest of an entry, or of a Message-mode request). In a batch
    /// of undecoded records ([`EventBatch::raw_records`]) the record is only walked: checked
    /// as a decode would check it, and kept as the byte range of the time and the record.
    fn entry_parts(
        &mut self,
        r: &mut Reader<'_>,
        batch: &mut EventBatch,
        tag: Option<Span>,
        peer: u16,
    ) -> Result<(), RequestError> {
        let body = r.pos();
        let time = read_time(r)?;
        let fields_start = batch.fields.len();
        let mut event = Event {
            timestamp: time.unwrap_or(None),
            tag: tag.into(),
            peer,
            ..Event::default()
        };
        let valid = match r.head()? {
            Head::Map(n) if batch.raw_records => {
                let (valid, ..) = container(r, &mut Walk, n, true, 0, 0, None)?;
                event.fields = (body as u32, r.pos() as u32);
                // Said here, where the entry's first bytes were just read: a sink that reads
                // them again finds them out of its cache.
                if super::encode::reads_as_written(r.slice((body.saturating_sub(1), body + 10))) {
                    event.flags.insert(Flags::ENTRY_AS_IS);
                }
                valid
            }
            Head::Map(n) => {
                let (valid, range) = record(r, &mut batch.fields, n, &mut event.message)?;
                event.fields = range;
                shortest_digits(&mut event);
                valid
            }
            other => {
                skip_after_head(r, other)?;
                false
            }
        };
        if valid && time.is_some() && tag.is_some() {
            batch.events.push(event);
        } else {
            batch.fields.truncate(fields_start);
            self.stats.invalid_events += 1;
        }
        let decoded = (batch.events.len() - self.request_start.0) * std::mem::size_of::<Event>()
            + (batch.fields.len() - self.request_start.1) * std::mem::size_of::<Field>();
        if decoded > self.limits.max_decompressed_size {
            return Err(RequestError::TooLarge {
                limit: self.limits.max_decompressed_size,
            });
        }
        Ok(())
    }
}

/// `batch` with its records decoded: the batch itself when they already are, else a copy whose
/// events carry their records in its `fields` table (the message lifted, as a decode of the
/// request would have left them), sharing the arena, the finalizer and the budget charge.
///
/// The records were checked when the request was read, so each decodes; one that somehow does
/// not keeps its event, with an empty record.
pub fn decode_raw(batch: &EventBatch) -> EventBatch {
    let mut out = batch.clone();
    if !batch.raw_records {
        return out;
    }
    out.raw_records = false;
    out.fields = Vec::with_capacity(batch.events.len() * 8);
    let arena: &[u8] = &batch.arena;
    for event in &mut out.events {
        event.flags.remove(Flags::ENTRY_AS_IS);
        shortest_digits(event);
        let at = out.fields.len();
        let decoded = (|| {
            let (mut r, _) = raw_record(arena, event)?;
            match r.head()? {
                Head::Map(n) => record(&mut r, &mut out.fields, n, &mut event.message),
                _ => Err(ReadError::Truncated),
            }
        })();
        event.fields = match decoded {
            Ok((_, range)) => range,
            Err(_) => {
                out.fields.truncate(at);
                (at as u32, at as u32)
            }
        };
    }
    if let Some(charge) = &out.charge {
        charge.grow(out.fields.capacity() * std::mem::size_of::<Field>());
    }
    out
}

/// A reader at the record of `event`, an event of a batch of undecoded records (its time
/// read past), and where the record ends.
pub(super) fn raw_record<'a>(
    arena: &'a [u8],
    event: &Event,
) -> Result<(Reader<'a>, usize), ReadError> {
    let end = event.fields.1 as usize;
    let mut r = Reader::new(
        arena.get(..end).unwrap_or_default(),
        event.fields.0 as usize,
    );
    r.skip()?;
    Ok((r, end))
}

/// Reads the option map (or `nil`).
pub(super) fn read_options(r: &mut Reader<'_>) -> Result<Options, RequestError> {
    let mut o = Options::default();
    let n = match r.head()? {
        Head::Map(n) => n,
        Head::Nil => return Ok(o),
        _ => return Err(RequestError::Malformed("the option is not a map")),
    };
    for _ in 0..n {
        let key = r.blob()?.map(|k| r.slice(k));
        match key {
            Some(b"chunk") => match r.blob()? {
                Some(chunk) => o.chunk = Some(chunk),
                None => return Err(RequestError::Malformed("chunk is not a string")),
            },
            Some(b"compressed") => match r.blob()?.map(|c| r.slice(c)) {
                Some(b"gzip") => o.compression = Compression::Gzip,
                Some(b"zstd") => o.compression = Compression::Zstd,
                // fluentd's out_forward always sends the key: "text" means uncompressed.
                Some(b"text") => o.compression = Compression::None,
                Some(other) => {
                    return Err(RequestError::UnknownCompression(
                        String::from_utf8_lossy(other).into_owned(),
                    ));
                }
                None => return Err(RequestError::Malformed("compressed is not a string")),
            },
            Some(b"fluent_signal") => match r.head()? {
                Head::Int(signal) => o.logs = signal == 0,
                Head::Nil => {}
                _ => return Err(RequestError::Malformed("fluent_signal is not an integer")),
            },
            _ => r.skip()?,
        }
    }
    Ok(o)
}

/// Skips the payload and children of a value whose header `head` was just read.
pub(super) fn skip_after_head(r: &mut Reader<'_>, head: Head) -> Result<(), ReadError> {
    match head {
        Head::Str(n) | Head::Bin(n) | Head::Ext(_, n) => r.take(n).map(|_| ()),
        Head::Array(n) => (0..n).try_for_each(|_| r.skip()),
        Head::Map(n) => (0..2 * n).try_for_each(|_| r.skip()),
        _ => Ok(()),
    }
}

/// An entry's time: `Some(Some(t))`, `Some(None)` for 0 (fluentd reads it as "now": the
/// receive time stands in), `None` when it is no valid time (the event is dropped).
fn read_time(r: &mut Reader<'_>) -> Result<Option<Option<Timestamp>>, ReadError> {
    let head = r.head()?;
    let time = match head {
        Head::Int(0) => Some(None),
        Head::Int(s) => s
            .checked_mul(1_000_000_000)
            .map(|n| Some(Timestamp::from_nanos(n, 0))),
        Head::Ext(0, 8) => {
            let [sec, nsec] = r.fixed::<8>().map(|d| split_u32s(&d))?;
            event_time(i64::from(sec), nsec)
        }
        // The msgpack Timestamp extension: not what clients send, but unambiguous.
        Head::Ext(-1, 4) => event_time(i64::from(u32::from_be_bytes(r.fixed::<4>()?)), 0),
        Head::Ext(-1, 8) => {
            let v = u64::from_be_bytes(r.fixed::<8>()?);
            event_time((v & 0x3_ffff_ffff) as i64, (v >> 34) as u32)
        }
        Head::Ext(-1, 12) => {
            let nsec = u32::from_be_bytes(r.fixed::<4>()?);
            event_time(i64::from_be_bytes(r.fixed::<8>()?), nsec)
        }
        // v1.5 metadata: [time, {metadata}]. The time is read; the metadata is not kept.
        Head::Array(2) => {
            let time = if matches!(r.clone().head()?, Head::Array(_)) {
                r.skip()?;
                None
            } else {
                read_time(r)?
            };
            r.skip()?;
            time
        }
        other => {
            // Floats are refused, as fluentd refuses them; so is anything else.
            skip_after_head(r, other)?;
            None
        }
    };
    Ok(time)
}

/// Two big-endian `u32`s.
fn split_u32s(d: &[u8; 8]) -> [u32; 2] {
    let [a, b, c, e, f, g, h, i] = *d;
    [
        u32::from_be_bytes([a, b, c, e]),
        u32::from_be_bytes([f, g, h, i]),
    ]
}

/// An EventTime (or a msgpack Timestamp) as a time: `Some(None)` for 0, `None` when invalid.
fn event_time(sec: i64, nsec: u32) -> Option<Option<Timestamp>> {
    if nsec >= 1_000_000_000 {
        return None;
    }
    if sec == 0 && nsec == 0 {
        return Some(None);
    }
    let nanos = sec
        .checked_mul(1_000_000_000)?
        .checked_add(i64::from(nsec))?;
    // With all nine digits: a decode writes the shortest that show the time (see
    // `shortest_digits`); a record passed on never needs them.
    Some(Some(Timestamp::from_nanos(nanos, 9)))
}

/// The time with as many fraction digits as show it exactly (whole seconds: none; milli- and
/// microseconds: three or six), which is how a decoded event writes it.
#[inline]
fn shortest_digits(event: &mut Event) {
    if let Some(t) = &mut event.timestamp {
        *t = Timestamp::from_nanos_shortest(t.nanos);
    }
}

/// Decodes a record map of `n` entries into `fields`: its entries' slots first, nested
/// containers' children after them. The top-level `message` string is lifted into `message`
/// (see `docs/specs/events.md`). Returns whether the record is valid, and its range.
fn record(
    r: &mut Reader<'_>,
    fields: &mut Vec<Field>,
    n: usize,
    message: &mut OptSpan,
) -> Result<(bool, (u32, u32)), ReadError> {
    let (valid, start, filled) = container(r, fields, n, true, 0, 0, Some(message))?;
    Ok((valid, (start as u32, (start + filled) as u32)))
}

/// Where [`container`] puts what it reads: a fields table, or nowhere ([`Walk`], which checks
/// a record as a decode would and keeps nothing). One walk for both, so an undecoded record is
/// refused exactly when its decode would be.
trait Slots {
    /// Reserves `n` slots; returns the first.
    fn reserve(&mut self, n: usize) -> usize;
    /// Fills slot `at`; false when there is no such slot.
    fn fill(&mut self, at: usize, field: Field) -> bool;
}

impl Slots for Vec<Field> {
    #[inline]
    fn reserve(&mut self, n: usize) -> usize {
        let start = self.len();
        self.resize(start + n, EMPTY);
        start
    }

    #[inline]
    fn fill(&mut self, at: usize, field: Field) -> bool {
        match self.get_mut(at) {
            Some(slot) => {
                *slot = field;
                true
            }
            None => false,
        }
    }
}

/// Checks a record without keeping it.
struct Walk;

impl Slots for Walk {
    #[inline]
    fn reserve(&mut self, _: usize) -> usize {
        0
    }

    #[inline]
    fn fill(&mut self, _: usize, _: Field) -> bool {
        true
    }
}

/// The placeholder a slot holds until it is filled.
const EMPTY: Field = Field {
    name: Span::EMPTY,
    value: Value::Null,
};

/// Reserves `n` slots at the end of `fields` and fills them with the container's children
/// (map entries, or array items with empty names). Returns (valid, first slot, slots filled):
/// fewer than `n` when the message was lifted out. Reads the whole container even when it
/// turns out invalid, so the caller can go on with the next value.
#[allow(clippy::too_many_arguments)]
fn container<S: Slots>(
    r: &mut Reader<'_>,
    fields: &mut S,
    n: usize,
    is_map: bool,
    depth: usize,
    promised: usize,
    mut message: Option<&mut OptSpan>,
) -> Result<(bool, usize, usize), ReadError> {
    // `n` comes from the wire: every child takes at least one byte (a map entry two), and the
    // bytes left are already promised to the unread siblings of every enclosing container. A
    // count past what is left is a lie, refused before any slot is reserved, so nested lying
    // headers cannot each reserve the whole rest of the request.
    let items = if is_map { n.saturating_mul(2) } else { n };
    if items > r.remaining().saturating_sub(promised) {
        return Err(ReadError::Truncated);
    }
    if depth >= MAX_RECORD_DEPTH {
        for _ in 0..n * if is_map { 2 } else { 1 } {
            r.skip()?;
        }
        return Ok((false, fields.reserve(0), 0));
    }
    let start = fields.reserve(n);
    let mut valid = true;
    let mut filled = 0;
    for i in 0..n {
        // What the children after this one need at least: promised to them from here on.
        let after = promised + (n - 1 - i) * if is_map { 2 } else { 1 };
        let name = if is_map {
            match r.blob()? {
                Some((s, e)) => Span::new(s, e),
                None => {
                    // Keys must be strings to be names; skip this entry's value.
                    valid = false;
                    r.skip()?;
                    continue;
                }
            }
        } else {
            Span::EMPTY
        };
        let value = match r.head()? {
            Head::Nil => Value::Null,
            Head::Bool(b) => Value::Bool(b),
            Head::Int(i) => Value::Int(i),
            Head::UInt(u) => Value::UInt(u),
            Head::Float(f) => Value::Float(f),
            Head::Str(len) => {
                let (s, e) = r.take(len)?;
                let span = Span::new(s, e);
                if let Some(m) = message.as_deref_mut()
                    && m.is_none()
                    && r.slice((name.start as usize, name.end as usize)) == b"message"
                {
                    *m = span.into();
                    continue;
                }
                Value::Str(span)
            }
            Head::Bin(len) => {
                let (s, e) = r.take(len)?;
                Value::Bytes(Span::new(s, e))
            }
            Head::Ext(ty, len) => {
                let (s, e) = r.take(len)?;
                Value::Ext(ty, Span::new(s, e))
            }
            Head::Map(m) => {
                let (ok, a, k) = container(r, fields, m, true, depth + 1, after, None)?;
                valid &= ok;
                Value::Map(a as u32, (a + k) as u32)
            }
            Head::Array(m) => {
                let (ok, a, k) = container(r, fields, m, false, depth + 1, after, None)?;
                valid &= ok;
                Value::Array(a as u32, (a + k) as u32)
            }
        };
        if !fields.fill(start + filled, Field { name, value }) {
            return Err(ReadError::Truncated);
        }
        filled += 1;
    }
    Ok((valid, start, filled))
}
