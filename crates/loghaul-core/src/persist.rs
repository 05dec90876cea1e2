//! The binary encoding of an [`EventBatch`] that the disk buffer stores: a batch is written as one
//! record and read back, possibly by a later process after a restart.
//!
//! Every item has a fixed width and every integer is little-endian, so encoding is one pass of
//! copies into a buffer reserved once (no allocation per event), and decoding one pass of loads
//! and range checks. The arena comes last, so a decoded batch's arena is a slice of the record
//! it was read from: nothing is copied.
//!
//! ```text
//! header, 45 bytes
//!    0  "LHB", format version (1)      4      the version changes with any change of layout
//!    4  events                         u32
//!    8  sd_elements                    u32
//!   12  sd_params                     u32
//!   16  fields                        u32
//!   20  peers                         u32
//!   24  arena length                  u32
//!   28  source length                 u32
//!   32  source_type length            u32
//!   36  received: nanoseconds         i64
//!   44  received: fraction digits     u8     0..=9
//! source                              UTF-8
//! source_type                         UTF-8
//! peers        17 bytes each   0 family (4 | 6)  1 address: an IPv4 one in the first 4 of 16 bytes
//! events       80 bytes each   0 timestamp nanoseconds i64
//!                              8 hostname  16 appname  24 procid  32 msgid  40 message  48 tag
//!                             56 structured_data range  64 fields range
//!                             72 present: 1 timestamp, 2 facility, 4 severity, 8 version,
//!                                         16 structured_data
//!                             73 fraction digits  74 facility  75 severity  76 version
//!                             77 flags  78 peer u16
//! sd_elements  16 bytes each   0 id span  8 params range
//! sd_params    17 bytes each   0 name span  8 value span  16 escaped (0 | 1)
//! fields       18 bytes each   0 name span  8 value kind  9 ext type  10 payload, 8 bytes:
//!                              Str, Bytes, Ext: span; Map, Array: range; Int, UInt: the
//!                              integer; Float: its bits; Bool: 0 | 1; Null: zeros
//! arena                        the bytes every span points into
//!
//! span / range: start u32, end u32; an absent span is (u32::MAX, u32::MAX)
//! ```
//!
//! Only the batch's content is encoded, not what ties it to the process that held it: a batch
//! read back carries [`Finalizer::none`](crate::Finalizer::none) and the reader attaches its
//! own. The arena is written whole, also when the batch is a view that uses a part of it.
//! `source_type` is a `&'static str`; a decoded one goes through [`intern_source_type`].
//!
//! Decoding trusts nothing (the buffer checks a CRC, but a disk can still hand back anything): the
//! length must be exactly what the header's counts add up to, which is checked before anything is
//! allocated, so the tables reserved are in proportion to the input (at most twice its size);
//! and every invariant of [`EventBatch`] is checked (spans inside the arena, ranges inside their
//! tables, containers after the field holding them, peers inside the peer table), so a decoded
//! batch is as sound as a freshly parsed one. One relaxation: an empty container may point
//! anywhere inside the table, as it leads nowhere. Bytes a value does not use (a timestamp's when
//! it is absent, a `Null`'s payload) are written as zeros and not read.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use crate::batch::{EventBatch, Field, SdElement, SdParam, Value};
use crate::event::{Event, Flags, OptSpan, Span, Timestamp};

/// The first bytes of every encoding: a tag, then the format version.
const MAGIC: [u8; 3] = *b"LHB";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;

const HEADER: usize = 45;
const PEER: usize = 17;
const EVENT: usize = 80;
const SD_ELEMENT: usize = 16;
const SD_PARAM: usize = 17;
const FIELD: usize = 18;

const HAS_TIMESTAMP: u8 = 1;
const HAS_FACILITY: u8 = 2;
const HAS_SEVERITY: u8 = 4;
const HAS_VERSION: u8 = 8;
const HAS_STRUCTURED_DATA: u8 = 16;
const PRESENT_BITS: u8 = 31;

const KIND_STR: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_INT: u8 = 2;
const KIND_UINT: u8 = 3;
const KIND_FLOAT: u8 = 4;
const KIND_BOOL: u8 = 5;
const KIND_NULL: u8 = 6;
const KIND_MAP: u8 = 7;
const KIND_ARRAY: u8 = 8;
const KIND_EXT: u8 = 9;

/// Why an encoded batch could not be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The data does not start with the tag of a batch encoding.
    NotABatch,
    /// A batch encoding of a format version this build does not read (a newer build wrote it).
    UnsupportedVersion(u8),
    /// The data is not as long as its header's counts say: cut short, or with bytes after it.
    Length { expected: u64, actual: u64 },
    /// An item breaks an invariant of the batch: `what` says which, `index` is the item's
    /// position in its table (0 for the header and the names).
    Invalid { what: &'static str, index: u32 },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotABatch => f.write_str("not an encoded event batch"),
            DecodeError::UnsupportedVersion(v) => write!(
                f,
                "encoded event batch of format version {v}, this build reads version \
                 {FORMAT_VERSION}"
            ),
            DecodeError::Length { expected, actual } => write!(
                f,
                "encoded event batch is {actual} bytes long, its header says {expected}"
            ),
            DecodeError::Invalid { what, index } => {
                write!(f, "invalid encoded event batch: {what} (item {index})")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

// Kept out of line so that the checks in the decoding loops stay small.
#[cold]
#[inline(never)]
fn invalid(what: &'static str, index: usize) -> DecodeError {
    DecodeError::Invalid {
        what,
        index: index as u32,
    }
}

/// The size of `batch`'s encoding, in bytes: what [`encode_batch`] appends.
pub fn encoded_size(batch: &EventBatch) -> usize {
    HEADER
        + batch.source.len()
        + batch.source_type.len()
        + batch.peers.len() * PEER
        + batch.events.len() * EVENT
        + batch.sd_elements.len() * SD_ELEMENT
        + batch.sd_params.len() * SD_PARAM
        + batch.fields.len() * FIELD
        + batch.arena.len()
}

/// Appends the batch's encoding to `out`, reserving its size once.
///
/// The finalizer is not encoded: a batch read back gets
/// [`Finalizer::none`](crate::Finalizer::none), and the reader attaches its own. Counts and
/// lengths are written as `u32`, which every batch fits (its spans are `u32` offsets); one that
/// did not would be written with wrong counts, and refused when read.
pub fn encode_batch(batch: &EventBatch, out: &mut Vec<u8>) {
    debug_assert!(
        !batch.raw_records,
        "undecoded records are decoded before they are stored"
    );
    out.reserve(encoded_size(batch));

    let mut h = [0u8; HEADER];
    h[0..3].copy_from_slice(&MAGIC);
    h[3] = FORMAT_VERSION;
    put(&mut h, 4, count(batch.events.len()).to_le_bytes());
    put(&mut h, 8, count(batch.sd_elements.len()).to_le_bytes());
    put(&mut h, 12, count(batch.sd_params.len()).to_le_bytes());
    put(&mut h, 16, count(batch.fields.len()).to_le_bytes());
    put(&mut h, 20, count(batch.peers.len()).to_le_bytes());
    put(&mut h, 24, count(batch.arena.len()).to_le_bytes());
    put(&mut h, 28, count(batch.source.len()).to_le_bytes());
    put(&mut h, 32, count(batch.source_type.len()).to_le_bytes());
    put(&mut h, 36, batch.received.nanos.to_le_bytes());
    h[44] = batch.received.frac_digits();
    out.extend_from_slice(&h);
    out.extend_from_slice(batch.source.as_bytes());
    out.extend_from_slice(batch.source_type.as_bytes());

    for ip in &batch.peers {
        let mut r = [0u8; PEER];
        match ip {
            IpAddr::V4(v4) => {
                r[0] = 4;
                r[1..5].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                r[0] = 6;
                r[1..17].copy_from_slice(&v6.octets());
            }
        }
        out.extend_from_slice(&r);
    }
    for e in &batch.events {
        out.extend_from_slice(&encode_event(e));
    }
    for el in &batch.sd_elements {
        let mut r = [0u8; SD_ELEMENT];
        put_span(&mut r, 0, el.id);
        put_range(&mut r, 8, el.params);
        out.extend_from_slice(&r);
    }
    for p in &batch.sd_params {
        let mut r = [0u8; SD_PARAM];
        put_span(&mut r, 0, p.name);
        put_span(&mut r, 8, p.value);
        r[16] = u8::from(p.escaped);
        out.extend_from_slice(&r);
    }
    for f in &batch.fields {
        out.extend_from_slice(&encode_field(f));
    }
    out.extend_from_slice(&batch.arena);
}

#[inline]
fn encode_event(e: &Event) -> [u8; EVENT] {
    let mut r = [0u8; EVENT];
    let mut present = 0;
    if let Some(ts) = e.timestamp {
        present |= HAS_TIMESTAMP;
        put(&mut r, 0, ts.nanos.to_le_bytes());
        r[73] = ts.frac_digits();
    }
    put_opt(&mut r, 8, e.hostname);
    put_opt(&mut r, 16, e.appname);
    put_opt(&mut r, 24, e.procid);
    put_opt(&mut r, 32, e.msgid);
    put_opt(&mut r, 40, e.message);
    put_opt(&mut r, 48, e.tag);
    if let Some(sd) = e.structured_data {
        present |= HAS_STRUCTURED_DATA;
        put_range(&mut r, 56, sd);
    }
    put_range(&mut r, 64, e.fields);
    if let Some(v) = e.facility {
        present |= HAS_FACILITY;
        r[74] = v;
    }
    if let Some(v) = e.severity {
        present |= HAS_SEVERITY;
        r[75] = v;
    }
    if let Some(v) = e.version {
        present |= HAS_VERSION;
        r[76] = v;
    }
    r[72] = present;
    r[77] = e.flags.0;
    put(&mut r, 78, e.peer.to_le_bytes());
    r
}

#[inline]
fn encode_field(f: &Field) -> [u8; FIELD] {
    let mut r = [0u8; FIELD];
    put_span(&mut r, 0, f.name);
    r[8] = match f.value {
        Value::Str(s) => {
            put_span(&mut r, 10, s);
            KIND_STR
        }
        Value::Bytes(s) => {
            put_span(&mut r, 10, s);
            KIND_BYTES
        }
        Value::Int(v) => {
            put(&mut r, 10, v.to_le_bytes());
            KIND_INT
        }
        Value::UInt(v) => {
            put(&mut r, 10, v.to_le_bytes());
            KIND_UINT
        }
        Value::Float(v) => {
            put(&mut r, 10, v.to_bits().to_le_bytes());
            KIND_FLOAT
        }
        Value::Bool(v) => {
            r[10] = u8::from(v);
            KIND_BOOL
        }
        Value::Null => KIND_NULL,
        Value::Map(a, b) => {
            put_range(&mut r, 10, (a, b));
            KIND_MAP
        }
        Value::Array(a, b) => {
            put_range(&mut r, 10, (a, b));
            KIND_ARRAY
        }
        Value::Ext(ty, s) => {
            r[9] = ty as u8;
            put_span(&mut r, 10, s);
            KIND_EXT
        }
    };
    r
}

/// A count or length as written in the header (see [`encode_batch`] for why `u32` is enough).
#[inline]
fn count(n: usize) -> u32 {
    n as u32
}

#[inline(always)]
fn put<const N: usize>(r: &mut [u8], at: usize, bytes: [u8; N]) {
    r[at..at + N].copy_from_slice(&bytes);
}

#[inline(always)]
fn put_span(r: &mut [u8], at: usize, s: Span) {
    put(r, at, s.start.to_le_bytes());
    put(r, at + 4, s.end.to_le_bytes());
}

#[inline(always)]
fn put_opt(r: &mut [u8], at: usize, s: OptSpan) {
    let s = s.get().unwrap_or(Span {
        start: u32::MAX,
        end: u32::MAX,
    });
    put_span(r, at, s);
}

#[inline(always)]
fn put_range(r: &mut [u8], at: usize, (a, b): (u32, u32)) {
    put(r, at, a.to_le_bytes());
    put(r, at + 4, b.to_le_bytes());
}

/// The header's counts, checked against the data's length.
struct Header {
    events: usize,
    sd_elements: usize,
    sd_params: usize,
    fields: usize,
    peers: usize,
    arena: usize,
    source: usize,
    source_type: usize,
    received: (i64, u8),
}

fn header(data: &[u8]) -> Result<Header, DecodeError> {
    let Some(h) = data.first_chunk::<HEADER>() else {
        return Err(match data.first_chunk::<4>() {
            Some(tag) if tag[..3] != MAGIC => DecodeError::NotABatch,
            Some(tag) if tag[3] != FORMAT_VERSION => DecodeError::UnsupportedVersion(tag[3]),
            _ => DecodeError::Length {
                expected: HEADER as u64,
                actual: data.len() as u64,
            },
        });
    };
    if h[..3] != MAGIC {
        return Err(DecodeError::NotABatch);
    }
    if h[3] != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(h[3]));
    }
    let n = |at| u32_at(h, at) as usize;
    let header = Header {
        events: n(4),
        sd_elements: n(8),
        sd_params: n(12),
        fields: n(16),
        peers: n(20),
        arena: n(24),
        source: n(28),
        source_type: n(32),
        received: (i64_at(h, 36), h[44]),
    };
    // In u64, where nothing can overflow: each term is below 2^32 * 80.
    let wide = |n: usize, width: usize| n as u64 * width as u64;
    let expected = HEADER as u64
        + wide(header.source, 1)
        + wide(header.source_type, 1)
        + wide(header.peers, PEER)
        + wide(header.events, EVENT)
        + wide(header.sd_elements, SD_ELEMENT)
        + wide(header.sd_params, SD_PARAM)
        + wide(header.fields, FIELD)
        + wide(header.arena, 1);
    if expected != data.len() as u64 {
        return Err(DecodeError::Length {
            expected,
            actual: data.len() as u64,
        });
    }
    if header.received.1 > 9 {
        return Err(invalid("receive time with more than 9 fraction digits", 0));
    }
    Ok(header)
}

/// The number of events in an encoded batch, read from its header without decoding the batch
/// (for buffer statistics). `None` when `data` does not start with a header this build reads.
pub fn encoded_len_events(data: &[u8]) -> Option<u32> {
    let h = data.first_chunk::<8>()?;
    if h[..3] != MAGIC || h[3] != FORMAT_VERSION {
        return None;
    }
    Some(u32_at(h, 4))
}

/// Decodes one encoded batch. Its arena is a slice of `data` (no copy); its finalizer is
/// [`Finalizer::none`](crate::Finalizer::none).
///
/// # Errors
///
/// [`DecodeError`] when `data` is not one whole encoding of a format version this build reads,
/// or when the batch it holds breaks an invariant of [`EventBatch`]. Never panics, whatever the
/// input.
pub fn decode_batch(data: Bytes) -> Result<EventBatch, DecodeError> {
    let h = header(&data)?;
    // The length check in `header` makes every cut below land inside `data`; `split_at_checked`
    // keeps that a matter of errors, not panics, should it ever be wrong.
    let short = || DecodeError::Length {
        expected: HEADER as u64,
        actual: data.len() as u64,
    };
    let rest = data.get(HEADER..).ok_or_else(short)?;
    let (source, rest) = rest.split_at_checked(h.source).ok_or_else(short)?;
    let (source_type, rest) = rest.split_at_checked(h.source_type).ok_or_else(short)?;
    let (peers, rest) = rest.split_at_checked(h.peers * PEER).ok_or_else(short)?;
    let (events, rest) = rest.split_at_checked(h.events * EVENT).ok_or_else(short)?;
    let (sd_elements, rest) = rest
        .split_at_checked(h.sd_elements * SD_ELEMENT)
        .ok_or_else(short)?;
    let (sd_params, rest) = rest
        .split_at_checked(h.sd_params * SD_PARAM)
        .ok_or_else(short)?;
    let (fields, arena) = rest.split_at_checked(h.fields * FIELD).ok_or_else(short)?;

    let source = std::str::from_utf8(source).map_err(|_| invalid("source is not UTF-8", 0))?;
    let source_type =
        std::str::from_utf8(source_type).map_err(|_| invalid("source_type is not UTF-8", 0))?;

    let limits = Limits {
        arena: arena.len() as u64,
        sd_elements: h.sd_elements as u64,
        sd_params: h.sd_params as u64,
        fields: h.fields as u64,
        peers: h.peers,
    };
    // Through `new`, so that whatever else a batch carries in this process (its finalizer, and
    // the like) starts out empty here too.
    let mut batch = EventBatch::new(
        data.slice(data.len() - arena.len()..),
        Arc::from(source),
        intern_source_type(source_type),
    );
    batch.received = Timestamp::from_nanos(h.received.0, h.received.1);
    batch.events = Vec::with_capacity(h.events);
    batch.sd_elements = Vec::with_capacity(h.sd_elements);
    batch.sd_params = Vec::with_capacity(h.sd_params);
    batch.fields = Vec::with_capacity(h.fields);
    batch.peers = Vec::with_capacity(h.peers);

    for (i, r) in peers.as_chunks::<PEER>().0.iter().enumerate() {
        batch.peers.push(match r[0] {
            4 => IpAddr::V4(Ipv4Addr::from(bytes_at::<PEER, 4>(r, 1))),
            6 => IpAddr::V6(Ipv6Addr::from(bytes_at::<PEER, 16>(r, 1))),
            _ => return Err(invalid("peer of an unknown address family", i)),
        });
    }
    for (i, r) in events.as_chunks::<EVENT>().0.iter().enumerate() {
        batch
            .events
            .push(decode_event(r, &limits).map_err(|what| invalid(what, i))?);
    }
    for (i, r) in sd_elements.as_chunks::<SD_ELEMENT>().0.iter().enumerate() {
        let id = span_at(r, 0, limits.arena).ok_or_else(|| invalid(SPAN_OUT, i))?;
        let params = range_at(r, 8, limits.sd_params)
            .ok_or_else(|| invalid("sd element params outside sd_params", i))?;
        batch.sd_elements.push(SdElement { id, params });
    }
    for (i, r) in sd_params.as_chunks::<SD_PARAM>().0.iter().enumerate() {
        let name = span_at(r, 0, limits.arena).ok_or_else(|| invalid(SPAN_OUT, i))?;
        let value = span_at(r, 8, limits.arena).ok_or_else(|| invalid(SPAN_OUT, i))?;
        let escaped = match r[16] {
            0 => false,
            1 => true,
            _ => return Err(invalid("sd param escaped neither 0 nor 1", i)),
        };
        batch.sd_params.push(SdParam {
            name,
            value,
            escaped,
        });
    }
    for (i, r) in fields.as_chunks::<FIELD>().0.iter().enumerate() {
        batch
            .fields
            .push(decode_field(r, i as u64, &limits).map_err(|what| invalid(what, i))?);
    }
    Ok(batch)
}

const SPAN_OUT: &str = "span outside the arena";

/// The sizes decoded items are checked against.
struct Limits {
    arena: u64,
    sd_elements: u64,
    sd_params: u64,
    fields: u64,
    peers: usize,
}

#[inline]
fn decode_event(r: &[u8; EVENT], l: &Limits) -> Result<Event, &'static str> {
    let present = r[72];
    if present & !PRESENT_BITS != 0 {
        return Err("event with unknown presence bits");
    }
    let timestamp = if present & HAS_TIMESTAMP != 0 {
        if r[73] > 9 {
            return Err("timestamp with more than 9 fraction digits");
        }
        Some(Timestamp::from_nanos(i64_at(r, 0), r[73]))
    } else {
        None
    };
    let structured_data = if present & HAS_STRUCTURED_DATA != 0 {
        Some(range_at(r, 56, l.sd_elements).ok_or("event structured data outside sd_elements")?)
    } else {
        None
    };
    let peer = u16_at(r, 78);
    if peer != Event::NO_PEER && usize::from(peer) >= l.peers {
        return Err("event peer outside peers");
    }
    let some = |bit: u8, v: u8| (present & bit != 0).then_some(v);
    Ok(Event {
        timestamp,
        hostname: opt_span_at(r, 8, l.arena)?,
        appname: opt_span_at(r, 16, l.arena)?,
        procid: opt_span_at(r, 24, l.arena)?,
        msgid: opt_span_at(r, 32, l.arena)?,
        message: opt_span_at(r, 40, l.arena)?,
        facility: some(HAS_FACILITY, r[74]),
        severity: some(HAS_SEVERITY, r[75]),
        version: some(HAS_VERSION, r[76]),
        structured_data,
        fields: range_at(r, 64, l.fields).ok_or("event fields outside fields")?,
        tag: opt_span_at(r, 48, l.arena)?,
        peer,
        flags: Flags(r[77]),
    })
}

#[inline]
fn decode_field(r: &[u8; FIELD], index: u64, l: &Limits) -> Result<Field, &'static str> {
    let name = span_at(r, 0, l.arena).ok_or(SPAN_OUT)?;
    let span = || span_at(r, 10, l.arena).ok_or(SPAN_OUT);
    // A container's children come after the field holding it, so a walk down a record always
    // ends. An empty range holds nothing to walk into, so where it points does not matter (as
    // long as it is inside the table).
    let children = || match range_at(r, 10, l.fields) {
        Some((a, b)) if a == b || u64::from(a) > index => Ok((a, b)),
        Some(_) => Err("container before the field holding it"),
        None => Err("container outside fields"),
    };
    let value = match r[8] {
        KIND_STR => Value::Str(span()?),
        KIND_BYTES => Value::Bytes(span()?),
        KIND_INT => Value::Int(i64_at(r, 10)),
        KIND_UINT => Value::UInt(u64_at(r, 10)),
        KIND_FLOAT => Value::Float(f64::from_bits(u64_at(r, 10))),
        KIND_BOOL => match r[10] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            _ => return Err("bool neither 0 nor 1"),
        },
        KIND_NULL => Value::Null,
        KIND_MAP => {
            let (a, b) = children()?;
            Value::Map(a, b)
        }
        KIND_ARRAY => {
            let (a, b) = children()?;
            Value::Array(a, b)
        }
        KIND_EXT => Value::Ext(r[9] as i8, span()?),
        _ => return Err("field value of an unknown kind"),
    };
    Ok(Field { name, value })
}

#[inline(always)]
fn bytes_at<const N: usize, const M: usize>(r: &[u8; N], at: usize) -> [u8; M] {
    let mut b = [0u8; M];
    b.copy_from_slice(&r[at..at + M]);
    b
}

#[inline(always)]
fn u16_at<const N: usize>(r: &[u8; N], at: usize) -> u16 {
    u16::from_le_bytes(bytes_at(r, at))
}

#[inline(always)]
fn u32_at<const N: usize>(r: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes(bytes_at(r, at))
}

#[inline(always)]
fn u64_at<const N: usize>(r: &[u8; N], at: usize) -> u64 {
    u64::from_le_bytes(bytes_at(r, at))
}

#[inline(always)]
fn i64_at<const N: usize>(r: &[u8; N], at: usize) -> i64 {
    i64::from_le_bytes(bytes_at(r, at))
}

/// The range at `at` if it lies inside a table of `len` items.
#[inline(always)]
fn range_at<const N: usize>(r: &[u8; N], at: usize, len: u64) -> Option<(u32, u32)> {
    let (a, b) = (u32_at(r, at), u32_at(r, at + 4));
    (a <= b && u64::from(b) <= len).then_some((a, b))
}

/// The span at `at` if it lies inside an arena of `len` bytes.
#[inline(always)]
fn span_at<const N: usize>(r: &[u8; N], at: usize, len: u64) -> Option<Span> {
    range_at(r, at, len).map(|(start, end)| Span { start, end })
}

/// The optional span at `at`: absent as written by [`put_opt`], else inside the arena.
#[inline(always)]
fn opt_span_at<const N: usize>(r: &[u8; N], at: usize, len: u64) -> Result<OptSpan, &'static str> {
    let (start, end) = (u32_at(r, at), u32_at(r, at + 4));
    if start == u32::MAX {
        return if end == u32::MAX {
            Ok(OptSpan::NONE)
        } else {
            Err("malformed absent span")
        };
    }
    if start <= end && u64::from(end) <= len {
        Ok(OptSpan::some(Span { start, end }))
    } else {
        Err(SPAN_OUT)
    }
}

/// The `source_type`s of loghaul's sources, matched without taking a lock.
static KNOWN_SOURCE_TYPES: [&str; 5] = ["syslog", "fluent", "file", "http_server", "buffer"];

/// The `source_type` of a batch whose own could not be interned.
pub const FALLBACK_SOURCE_TYPE: &str = "buffer";

/// How many names [`intern_source_type`] keeps beyond the known ones, and how long they may be:
/// each is leaked, so the bound is what keeps a damaged buffer from leaking without end.
const MAX_INTERNED: usize = 64;
const MAX_INTERNED_LEN: usize = 64;

static INTERNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The `&'static str` for a `source_type` read back from an encoding.
///
/// The names of loghaul's sources are matched directly. Any other name (a source added later
/// without being listed here, a test's name) is leaked once and kept, up to 64 names of up to 64
/// bytes, so a batch keeps its `source_type` whatever produced it; past that bound, or for longer
/// names, [`FALLBACK_SOURCE_TYPE`]. Only names this process has not written itself can reach the
/// bound (a buffer written by another build, a damaged one).
pub fn intern_source_type(name: &str) -> &'static str {
    if let Some(known) = KNOWN_SOURCE_TYPES.iter().find(|k| **k == name) {
        return known;
    }
    // The list is only pushed to, so a panic elsewhere while it was held cannot have left it
    // half-changed: a poisoned lock is safe to use.
    intern_in(
        &mut INTERNED.lock().unwrap_or_else(PoisonError::into_inner),
        name,
    )
}

fn intern_in(interned: &mut Vec<&'static str>, name: &str) -> &'static str {
    if let Some(found) = interned.iter().find(|k| **k == name) {
        return found;
    }
    if interned.len() >= MAX_INTERNED || name.len() > MAX_INTERNED_LEN {
        return FALLBACK_SOURCE_TYPE;
    }
    let leaked: &'static str = Box::leak(name.into());
    interned.push(leaked);
    leaked
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::finalizer::BatchNotifier;

    fn span(arena: &[u8], needle: impl AsRef<[u8]>) -> Span {
        let needle = needle.as_ref();
        let at = arena
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap();
        Span::new(at, at + needle.len())
    }

    /// Every part of two batches, with floats compared by their bits (NaN included).
    fn assert_same(a: &EventBatch, b: &EventBatch) {
        assert_eq!(a.arena, b.arena);
        assert_eq!(a.events, b.events);
        assert_eq!(a.sd_elements, b.sd_elements);
        assert_eq!(a.sd_params, b.sd_params);
        assert_eq!(a.fields.len(), b.fields.len());
        for (x, y) in a.fields.iter().zip(&b.fields) {
            match (x.value, y.value) {
                (Value::Float(p), Value::Float(q)) => {
                    assert_eq!(x.name, y.name);
                    assert_eq!(p.to_bits(), q.to_bits());
                }
                _ => assert_eq!(x, y),
            }
        }
        assert_eq!(a.received, b.received);
        assert_eq!(a.received.frac_digits(), b.received.frac_digits());
        assert_eq!(a.peers, b.peers);
        assert_eq!(a.source, b.source);
        assert_eq!(a.source_type, b.source_type);
    }

    fn round_trip(batch: &EventBatch) -> EventBatch {
        let mut out = Vec::new();
        encode_batch(batch, &mut out);
        assert_eq!(out.len(), encoded_size(batch));
        assert_eq!(
            encoded_len_events(&out),
            Some(batch.events.len() as u32),
            "the header's event count"
        );
        let back = decode_batch(Bytes::from(out)).unwrap();
        assert_same(batch, &back);
        assert!(!back.finalizer.is_tracked());
        back
    }

    const SYSLOG: &[u8] =
        b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog 1234 ID47 \
        [exampleSDID@32473 iut=\"3\" eventSource=\"App\\\"lication\"][meta seq=\"1\"] \
        An application event\n<13>Oct 11 22:14:15 host su: 'su root' failed\n";

    /// Two syslog events as the decoders lay them out: one RFC 5424 line with two SD-ELEMENTs
    /// (one param escaped), one RFC 3164 line, from two senders (IPv4 and IPv6).
    fn syslog_batch() -> EventBatch {
        let a = SYSLOG;
        let mut b = EventBatch::new(Bytes::from_static(a), "in_syslog".into(), "syslog");
        b.received = Timestamp::from_nanos(1_065_910_455_123_456_000, 6);
        let v4 = b.peer_index(Some([192, 0, 2, 7].into()));
        let v6 = b.peer_index(Some([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1].into()));
        b.sd_params = vec![
            SdParam {
                name: span(a, "iut"),
                value: span(a, "3"),
                escaped: false,
            },
            SdParam {
                name: span(a, "eventSource"),
                value: span(a, "App\\\"lication"),
                escaped: true,
            },
            SdParam {
                name: span(a, "seq"),
                value: span(a, "1\"]"),
                escaped: false,
            },
        ];
        b.sd_params[2].value.end -= 2;
        b.sd_elements = vec![
            SdElement {
                id: span(a, "exampleSDID@32473"),
                params: (0, 2),
            },
            SdElement {
                id: span(a, "meta"),
                params: (2, 3),
            },
        ];
        b.events.push(Event {
            timestamp: Some(Timestamp::from_nanos(1_065_910_455_003_000_000, 3)),
            hostname: span(a, "mymachine.example.com").into(),
            appname: span(a, "evntslog").into(),
            procid: span(a, "1234").into(),
            msgid: span(a, "ID47").into(),
            message: span(a, "An application event").into(),
            facility: Some(20),
            severity: Some(5),
            version: Some(1),
            structured_data: Some((0, 2)),
            peer: v4,
            ..Event::default()
        });
        let mut flags = Flags::default();
        flags.insert(Flags::INVALID_UTF8);
        flags.insert(Flags::TRUNCATED);
        b.events.push(Event {
            timestamp: Some(Timestamp::from_nanos(-1_500_000_000, 0)),
            hostname: span(a, "host").into(),
            appname: span(a, "su").into(),
            procid: OptSpan::from(Some(Span::EMPTY)),
            message: span(a, "'su root' failed").into(),
            facility: Some(1),
            severity: Some(5),
            peer: v6,
            flags,
            ..Event::default()
        });
        b.events.push(Event {
            message: span(a, "\n").into(),
            flags: Flags::PARSE_ERROR,
            ..Event::default()
        });
        b
    }

    /// `{"a": {"b": [10, {"c": true}]}, ...}` and one of each kind of value, laid out as the
    /// record decoders do: a container's slots first, its children after them.
    fn record_batch() -> EventBatch {
        let a: &[u8] = b"app.accessabcmessagehello\x00\xffbinext";
        let mut b = EventBatch::new(Bytes::copy_from_slice(a), "in_forward".into(), "fluent");
        b.received = Timestamp::from_nanos(1_700_000_000_999_999_999, 9);
        let peer = b.peer_index(Some([0xfe80, 0, 0, 0, 0, 0, 0, 1].into()));
        let name = |n: &str| span(a, n);
        let item = |value| Field {
            name: Span::EMPTY,
            value,
        };
        b.fields = vec![
            // fields[0..10]: the first event's record.
            Field {
                name: name("a"),
                value: Value::Map(10, 11),
            },
            Field {
                name: name("b"),
                value: Value::Str(name("hello")),
            },
            Field {
                name: name("c"),
                value: Value::Bytes(span(a, b"\x00\xffbin")),
            },
            Field {
                name: name("ac"),
                value: Value::Int(i64::MIN),
            },
            Field {
                name: name("ce"),
                value: Value::UInt(u64::MAX),
            },
            Field {
                name: name("ss"),
                value: Value::Float(f64::NAN),
            },
            Field {
                name: name("es"),
                value: Value::Float(-0.0),
            },
            Field {
                name: name("sa"),
                value: Value::Null,
            },
            Field {
                name: name("ex"),
                value: Value::Ext(-7, name("ext")),
            },
            Field {
                name: name("ge"),
                value: Value::Array(13, 13),
            },
            // fields[10]: a's entry "b", an array.
            Field {
                name: name("b"),
                value: Value::Array(11, 13),
            },
            item(Value::Int(10)),
            item(Value::Map(13, 14)),
            Field {
                name: name("c"),
                value: Value::Bool(true),
            },
            // The second event's record: one entry, and an empty map pointing anywhere.
            Field {
                name: name("e"),
                value: Value::Bool(false),
            },
            Field {
                name: name("mess"),
                value: Value::Map(0, 0),
            },
        ];
        b.events.push(Event {
            timestamp: Some(Timestamp::from_nanos(1_700_000_000_000_000_001, 9)),
            message: name("hello").into(),
            fields: (0, 10),
            tag: name("app.access").into(),
            peer,
            ..Event::default()
        });
        b.events.push(Event {
            fields: (14, 16),
            tag: name("app.access").into(),
            peer,
            ..Event::default()
        });
        b
    }

    #[test]
    fn syslog_events_with_structured_data_round_trip() {
        let back = round_trip(&syslog_batch());
        let e = back.events[0];
        assert_eq!(back.str(e.hostname.or_empty()), b"mymachine.example.com");
        let sd = back.sd_elements_of(&e);
        assert_eq!(back.str(sd[0].id), b"exampleSDID@32473");
        assert!(back.params_of(&sd[0])[1].escaped);
        assert_eq!(back.str(back.params_of(&sd[1])[0].value), b"1");
        assert_eq!(e.timestamp.map(Timestamp::frac_digits), Some(3));
        assert_eq!(back.source_ip(&e), Some([192, 0, 2, 7].into()));
        assert_eq!(
            back.source_ip(&back.events[1]),
            Some([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1].into())
        );
        assert_eq!(back.source_ip(&back.events[2]), None);
        assert!(back.events[1].flags.contains(Flags::INVALID_UTF8));
        assert_eq!(back.events[1].procid.get(), Some(Span::EMPTY));
    }

    #[test]
    fn records_with_every_kind_of_value_round_trip() {
        let back = round_trip(&record_batch());
        let e = back.events[0];
        assert_eq!(back.lookup(&e, "a.b.1.c"), Some(Value::Bool(true)));
        assert_eq!(back.lookup(&e, "ce"), Some(Value::UInt(u64::MAX)));
        assert_eq!(back.str(e.tag.or_empty()), b"app.access");
        assert!(matches!(back.lookup(&e, "ss"), Some(Value::Float(f)) if f.is_nan()));
        assert_eq!(back.received.frac_digits(), 9);
    }

    #[test]
    fn an_empty_batch_round_trips() {
        let empty = EventBatch::new(Bytes::new(), "".into(), "file");
        let mut out = Vec::new();
        encode_batch(&empty, &mut out);
        assert_eq!(out.len(), HEADER + "file".len());
        round_trip(&empty);
        // Arena bytes no event points into (a view's) are kept as they are.
        round_trip(&EventBatch::new(
            Bytes::from_static(b"unused"),
            "s".into(),
            "syslog",
        ));
    }

    #[test]
    fn the_arena_is_a_slice_of_the_input() {
        let mut out = Vec::new();
        encode_batch(&syslog_batch(), &mut out);
        let data = Bytes::from(out);
        let range = data.as_ptr_range();
        let back = decode_batch(data.clone()).unwrap();
        assert_eq!(back.arena, SYSLOG);
        assert!(range.contains(&back.arena.as_ptr()));
        assert_eq!(back.arena.as_ptr_range().end, range.end);
    }

    #[test]
    fn the_finalizer_stays_behind() {
        let (finalizer, _rx) = BatchNotifier::new_with_receiver();
        let mut batch = syslog_batch();
        batch.finalizer = finalizer;
        assert!(!round_trip(&batch).finalizer.is_tracked());
    }

    /// A thousand syslog events: the output grows once, by exactly the encoding's size, and an
    /// encoding appended after other bytes decodes the same from its slice.
    #[test]
    fn encoding_reserves_once_and_appends() {
        let one = syslog_batch();
        let mut big = EventBatch::new(one.arena.clone(), "in".into(), "syslog");
        big.sd_elements = one.sd_elements.clone();
        big.sd_params = one.sd_params.clone();
        big.peers = one.peers.clone();
        for i in 0..1000 {
            big.events.push(one.events[i % one.events.len()]);
        }
        let size = encoded_size(&big);
        assert!(size > 80_000);

        let mut out = Vec::new();
        encode_batch(&big, &mut out);
        assert_eq!(
            (out.len(), out.capacity()),
            (size, size),
            "one exact reserve"
        );

        let mut out = Vec::with_capacity(7 + size);
        out.extend_from_slice(b"before:");
        let at = out.as_ptr();
        encode_batch(&big, &mut out);
        assert_eq!(out.as_ptr(), at, "no reallocation when the room is there");
        assert_eq!(out.len(), 7 + size);
        let data = Bytes::from(out).slice(7..);
        assert_eq!(encoded_len_events(&data), Some(1000));
        assert_same(&big, &decode_batch(data).unwrap());
    }

    #[test]
    fn the_event_count_is_read_from_the_header_alone() {
        let mut out = Vec::new();
        encode_batch(&record_batch(), &mut out);
        assert_eq!(encoded_len_events(&out[..8]), Some(2));
        assert_eq!(encoded_len_events(&out[..7]), None);
        assert_eq!(encoded_len_events(b"garbage!"), None);
        out[3] = 2;
        assert_eq!(
            encoded_len_events(&out),
            None,
            "a version this build cannot read"
        );
    }

    fn encoded(batch: &EventBatch) -> Vec<u8> {
        let mut out = Vec::new();
        encode_batch(batch, &mut out);
        out
    }

    fn decode(data: &[u8]) -> Result<EventBatch, DecodeError> {
        decode_batch(Bytes::copy_from_slice(data))
    }

    #[test]
    fn what_is_not_one_whole_encoding_is_refused() {
        let good = encoded(&syslog_batch());
        assert_eq!(
            decode(b"").unwrap_err(),
            DecodeError::Length {
                expected: HEADER as u64,
                actual: 0
            }
        );
        assert_eq!(
            decode(b"{\"json\": 1}").unwrap_err(),
            DecodeError::NotABatch
        );
        assert_eq!(decode(b"LHX\x01").unwrap_err(), DecodeError::NotABatch);
        let mut newer = good.clone();
        newer[3] = 2;
        assert_eq!(
            decode(&newer).unwrap_err(),
            DecodeError::UnsupportedVersion(2)
        );
        assert_eq!(
            decode(&newer[..10]).unwrap_err(),
            DecodeError::UnsupportedVersion(2)
        );
        let n = good.len() as u64;
        assert_eq!(
            decode(&good[..good.len() - 1]).unwrap_err(),
            DecodeError::Length {
                expected: n,
                actual: n - 1
            }
        );
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(
            decode(&longer).unwrap_err(),
            DecodeError::Length {
                expected: n,
                actual: n + 1
            }
        );
        // Counts that promise more than the data holds are refused before anything is reserved.
        let mut lying = good.clone();
        lying[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&lying), Err(DecodeError::Length { .. })));
        let err = decode(&lying).unwrap_err().to_string();
        assert!(err.contains("its header says"), "{err}");
    }

    /// Where the parts of an encoding of `b` start.
    struct At {
        peers: usize,
        events: usize,
        sd_elements: usize,
        sd_params: usize,
        fields: usize,
    }

    fn offsets(b: &EventBatch) -> At {
        let peers = HEADER + b.source.len() + b.source_type.len();
        let events = peers + b.peers.len() * PEER;
        let sd_elements = events + b.events.len() * EVENT;
        let sd_params = sd_elements + b.sd_elements.len() * SD_ELEMENT;
        let fields = sd_params + b.sd_params.len() * SD_PARAM;
        At {
            peers,
            events,
            sd_elements,
            sd_params,
            fields,
        }
    }

    /// Decodes `batch`'s encoding with `bytes` written at `at`; the error's text.
    fn patched(batch: &EventBatch, at: usize, bytes: &[u8]) -> String {
        let mut data = encoded(batch);
        data[at..at + bytes.len()].copy_from_slice(bytes);
        match decode(&data) {
            Ok(_) => panic!("decoded with {bytes:?} at {at}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn batches_that_break_an_invariant_are_refused() {
        let s = syslog_batch();
        let r = record_batch();
        let (sa, ra) = (offsets(&s), offsets(&r));
        let past = (SYSLOG.len() as u32 + 1).to_le_bytes();
        let cases = [
            // A message span past the arena, and one that ends before it starts.
            (patched(&s, sa.events + 44, &past), "span outside the arena"),
            (
                patched(&s, sa.events + 40, &[255, 0, 0, 0]),
                "outside the arena",
            ),
            (
                patched(&s, sa.events + 52, &[0, 0, 0, 0]),
                "malformed absent span",
            ),
            (
                patched(&s, sa.events + 60, &[3, 0, 0, 0]),
                "structured data outside sd_elements",
            ),
            (
                patched(&s, sa.events + 68, &[1, 0, 0, 0]),
                "event fields outside",
            ),
            (patched(&s, sa.events + 72, &[32]), "unknown presence bits"),
            (
                patched(&s, sa.events + 73, &[10]),
                "more than 9 fraction digits",
            ),
            (patched(&s, sa.events + 78, &[2, 0]), "peer outside peers"),
            (patched(&s, 44, &[10]), "receive time with more than 9"),
            (patched(&s, sa.peers, &[5]), "unknown address family"),
            (
                patched(&s, sa.sd_elements + 12, &[4, 0, 0, 0]),
                "outside sd_params",
            ),
            (
                patched(&s, sa.sd_elements + 4, &past),
                "span outside the arena",
            ),
            (patched(&s, sa.sd_params + 16, &[2]), "escaped neither"),
            (
                patched(&s, sa.sd_params + 12, &past),
                "span outside the arena",
            ),
            (patched(&s, HEADER, &[0xff]), "source is not UTF-8"),
            (patched(&s, HEADER + 9, &[0xc3]), "source_type is not UTF-8"),
            // fields[10] is `b: Array(11, 13)`; pointing at itself would make a loop.
            (
                patched(&r, ra.fields + 10 * FIELD + 10, &[10]),
                "before the field holding it",
            ),
            (
                patched(&r, ra.fields + 10 * FIELD + 14, &[17]),
                "container outside fields",
            ),
            (patched(&r, ra.fields + 8, &[10]), "unknown kind"),
            (
                patched(&r, ra.fields + 13 * FIELD + 10, &[2]),
                "bool neither",
            ),
            (
                patched(&r, ra.fields + 8 * FIELD + 14, &past),
                "span outside the arena",
            ),
            (patched(&r, ra.fields + 4, &past), "span outside the arena"),
        ];
        for (i, (err, want)) in cases.iter().enumerate() {
            assert!(err.contains(want), "case {i}: {err:?} lacks {want:?}");
        }
        // The item is named: the third event's.
        assert!(patched(&s, sa.events + 2 * EVENT + 78, &[9, 0]).ends_with("(item 2)"));
    }

    #[test]
    fn source_types_come_back_as_the_same_static_names() {
        for name in KNOWN_SOURCE_TYPES {
            assert_eq!(intern_source_type(name), name);
        }
        let a = intern_source_type("a_new_source");
        assert_eq!(a, "a_new_source");
        assert!(std::ptr::eq(
            a,
            intern_source_type(&String::from("a_new_source"))
        ));

        let mut list = Vec::new();
        for i in 0..MAX_INTERNED {
            assert_eq!(intern_in(&mut list, &format!("t{i}")), format!("t{i}"));
        }
        assert_eq!(
            intern_in(&mut list, "t3"),
            "t3",
            "kept names are still found"
        );
        assert_eq!(intern_in(&mut list, "one_too_many"), FALLBACK_SOURCE_TYPE);
        assert_eq!(
            intern_in(&mut Vec::new(), &"x".repeat(65)),
            FALLBACK_SOURCE_TYPE
        );

        let mut odd = record_batch();
        odd.source_type = "test";
        assert_eq!(round_trip(&odd).source_type, "test");
    }

    /// A rough rate for a 1,000-event syslog batch:
    /// `cargo test --release -p loghaul-core persist -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn rate() {
        let one = syslog_batch();
        let mut big = EventBatch::new(one.arena.clone(), "in".into(), "syslog");
        big.sd_elements = one.sd_elements.clone();
        big.sd_params = one.sd_params.clone();
        big.peers = one.peers.clone();
        for i in 0..1000 {
            big.events.push(one.events[i % 2]);
        }
        let rounds = 20_000;
        let mut out = Vec::new();
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            out.clear();
            encode_batch(std::hint::black_box(&big), &mut out);
        }
        let encode = start.elapsed();
        let data = Bytes::from(out);
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            let back = decode_batch(std::hint::black_box(data.clone())).unwrap();
            std::hint::black_box(&back);
        }
        let decode = start.elapsed();
        let events = (rounds * big.events.len()) as f64;
        println!(
            "encode {:.1}M events/s, decode {:.1}M events/s",
            events / encode.as_secs_f64() / 1e6,
            events / decode.as_secs_f64() / 1e6
        );
    }
}
