//! Events to forward-protocol entries and requests, for the `fluent` sink.
//!
//! ```text
//! entry:   [EventTime(sec, nsec) | int sec, {record}]
//! record:  loghaul's own fields the event has (hostname, appname, procid, msgid, facility,
//!          severity, version, structured_data, message, flags; source_ip and source_type for
//!          events that did not come by forward), then the record's keys in the sender's order.
//!          A record key with one of loghaul's names shadows loghaul's value, as in JSON output.
//! request: [tag, bin32(entries), {"size": n, "chunk": id?, "compressed": "gzip"?}]
//! ```
//!
//! The time and the tag leave the record: they are the entry's time and the request's tag. A
//! record that came in by forward goes out with the same keys (its lifted `message` put back), so
//! loghaul relays what Fluentd and Fluent Bit send without changing it. An event's origin
//! travels with it: the first forward hop writes where it came from (`source_type`, and
//! `source_ip` when known) into the record, and at every later hop those record keys shadow the
//! hop's own (`fluent`, the previous hop's address), so a tree's receiver writes what a direct
//! one would. A batch whose records were never decoded (a deliver's, see
//! [`EventBatch::raw_records`]) goes out with each record's bytes as they arrived.

use loghaul_core::names::{facility_name, severity_name};
use loghaul_core::{Event, EventBatch, Field, Flags, SdElement, SdParam, Span, Value};

use super::msgpack::{
    write_array_len, write_bin_len, write_bool, write_event_time, write_ext, write_f64, write_int,
    write_map_len, write_nil, write_str, write_uint,
};

/// The `source_type` of events that came by forward (the `fluent` source's).
pub const FORWARD_SOURCE_TYPE: &str = "fluent";

/// Records nested deeper than this are cut (a deeper value is written as nil); decoders refuse
/// such input long before, so this only bounds the recursion.
const MAX_DEPTH: usize = 128;

/// The names of loghaul's fields a forwarded record may carry, in output order.
const OWN: [&str; 12] = [
    "hostname",
    "appname",
    "procid",
    "msgid",
    "facility",
    "severity",
    "version",
    "structured_data",
    "message",
    "flags",
    "source_ip",
    "source_type",
];

/// Appends one `[time, record]` entry for `event`. `time_as_integer` writes whole seconds
/// (for receivers older than Fluentd v0.14), otherwise an EventTime with nanoseconds.
pub fn encode_entry(batch: &EventBatch, event: &Event, time_as_integer: bool, out: &mut Vec<u8>) {
    if batch.raw_records {
        encode_raw_entry(batch, event, time_as_integer, out);
        return;
    }
    out.push(0x92);
    entry_time(batch, event, time_as_integer, out);
    encode_record(batch, event, out);
}

/// An entry of a batch of undecoded records ([`EventBatch::raw_records`]): its time written as
/// [`encode_entry`] writes it, then its record as it arrived, byte for byte.
fn encode_raw_entry(batch: &EventBatch, event: &Event, time_as_integer: bool, out: &mut Vec<u8>) {
    // The source checked the entry: its time is one value, its record the rest.
    let record = match super::decode::raw_record(&batch.arena, event) {
        Ok((r, end)) => r.slice((r.pos(), end)),
        Err(_) => &[0x80][..],
    };
    out.push(0x92);
    entry_time(batch, event, time_as_integer, out);
    out.extend_from_slice(record);
}

/// The bytes of `event`'s entry as they are in the arena, when they are exactly what
/// [`encode_entry`] would write (a walked record whose entry came as `[EventTime, record]`, and
/// EventTimes are wanted): the caller copies them as they are, with nothing encoded. `None`
/// otherwise. The walk said which entries read so ([`Flags::ENTRY_AS_IS`]): their bytes are not
/// read here.
#[inline]
pub fn entry_as_is<'b>(
    batch: &'b EventBatch,
    event: &Event,
    time_as_integer: bool,
) -> Option<&'b [u8]> {
    if !batch.raw_records || time_as_integer || !event.flags.contains(Flags::ENTRY_AS_IS) {
        return None;
    }
    let (start, end) = (event.fields.0 as usize, event.fields.1 as usize);
    batch.arena.get(start.checked_sub(1)?..end)
}

/// Whether an entry starting with `head` (its first 11 bytes, or fewer) goes out as it is: `[`,
/// then an EventTime (fixext8, type 0) that is not 0 (which reads as "now" and goes out as the
/// time the batch was read).
#[inline]
pub(super) fn reads_as_written(head: &[u8]) -> bool {
    matches!(head, [0x92, 0xd7, 0x00, time @ ..] if time.len() >= 8 && time[..8] != [0; 8])
}

/// The entry's time: whole seconds, or an EventTime.
#[inline]
fn entry_time(batch: &EventBatch, event: &Event, time_as_integer: bool, out: &mut Vec<u8>) {
    let t = batch.time_of(event);
    if time_as_integer {
        write_int(out, t.unix_seconds());
    } else {
        // EventTime is unsigned 32-bit seconds: times before 1970 or after 2106 are clamped.
        let secs = u32::try_from(t.unix_seconds().max(0)).unwrap_or(u32::MAX);
        write_event_time(out, secs, t.subsec_nanos());
    }
}

/// Appends the record map of `event` (see the module doc for what it holds).
pub fn encode_record(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    let fields = batch.fields_of(event);
    let facility = event.facility.and_then(facility_name);
    let severity = event.severity.and_then(severity_name);
    // Where the event came from, for the first forward hop only: a relayed record already
    // carries its origin's (or, from Fluentd and Fluent Bit, none) and goes out as it came.
    let origin = batch.source_type != FORWARD_SOURCE_TYPE;
    let source_ip = if origin { batch.source_ip(event) } else { None };
    let present = [
        event.hostname.is_some(),
        event.appname.is_some(),
        event.procid.is_some(),
        event.msgid.is_some(),
        facility.is_some(),
        severity.is_some(),
        event.version.is_some(),
        event.structured_data.is_some(),
        event.message.is_some(),
        !event.flags.is_empty(),
        source_ip.is_some(),
        origin,
    ];
    // A record key shadows only a field the event has: a relayed record (only its lifted
    // `message` is loghaul's) compares each key with one name, a syslog event has no keys.
    let mut wanted = 0u16;
    for (i, p) in present.iter().enumerate() {
        wanted |= u16::from(*p) << i;
    }
    let mut shadow = 0u16;
    if wanted != 0 {
        for f in fields {
            let name = batch.str(f.name);
            let mut rest = wanted & !shadow;
            while rest != 0 {
                let i = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if OWN.get(i).is_some_and(|o| o.as_bytes() == name) {
                    shadow |= 1 << i;
                    break;
                }
            }
        }
    }
    let own = |i: usize| shadow & (1 << i) == 0;
    let count = present
        .iter()
        .enumerate()
        .filter(|(i, p)| **p && own(*i))
        .count()
        + fields.len();
    write_map_len(out, count);
    let key = |out: &mut Vec<u8>, i: usize| {
        let write = present[i] && own(i);
        if write {
            write_str(out, OWN[i].as_bytes());
        }
        write
    };
    for (i, span) in [event.hostname, event.appname, event.procid, event.msgid]
        .into_iter()
        .enumerate()
    {
        if key(out, i) {
            write_str(out, batch.str(span.or_empty()));
        }
    }
    if key(out, 4) {
        write_str(out, facility.unwrap_or_default().as_bytes());
    }
    if key(out, 5) {
        write_str(out, severity.unwrap_or_default().as_bytes());
    }
    if key(out, 6) {
        write_int(out, i64::from(event.version.unwrap_or_default()));
    }
    if key(out, 7) {
        structured_data(batch, batch.sd_elements_of(event), out);
    }
    if key(out, 8) {
        write_str(out, batch.str(event.message.or_empty()));
    }
    if key(out, 9) {
        let names: Vec<&str> = [
            (loghaul_core::Flags::PARSE_ERROR, "parse_error"),
            (loghaul_core::Flags::TRUNCATED, "truncated"),
            (loghaul_core::Flags::INVALID_UTF8, "invalid_utf8"),
        ]
        .into_iter()
        .filter(|(f, _)| event.flags.contains(*f))
        .map(|(_, n)| n)
        .collect();
        write_array_len(out, names.len());
        for n in names {
            write_str(out, n.as_bytes());
        }
    }
    if key(out, 10) {
        write_str(
            out,
            source_ip
                .map(|ip| ip.to_string())
                .unwrap_or_default()
                .as_bytes(),
        );
    }
    if key(out, 11) {
        write_str(out, batch.source_type.as_bytes());
    }
    for f in fields {
        write_str(out, batch.str(f.name));
        value(batch, f.value, out, 0);
    }
}

fn value(batch: &EventBatch, v: Value, out: &mut Vec<u8>, depth: usize) {
    match v {
        Value::Str(s) => write_str(out, batch.str(s)),
        Value::Bytes(s) => {
            let b = batch.str(s);
            write_bin_len(out, b.len());
            out.extend_from_slice(b);
        }
        Value::Int(i) => write_int(out, i),
        Value::UInt(u) => write_uint(out, u),
        Value::Float(f) => write_f64(out, f),
        Value::Bool(b) => write_bool(out, b),
        Value::Null => write_nil(out),
        Value::Ext(ty, s) => write_ext(out, ty, batch.str(s)),
        Value::Map(..) | Value::Array(..) if depth >= MAX_DEPTH => write_nil(out),
        Value::Map(..) => {
            let children: &[Field] = batch.children(v);
            write_map_len(out, children.len());
            for c in children {
                write_str(out, batch.str(c.name));
                value(batch, c.value, out, depth + 1);
            }
        }
        Value::Array(..) => {
            let children = batch.children(v);
            write_array_len(out, children.len());
            for c in children {
                value(batch, c.value, out, depth + 1);
            }
        }
    }
}

/// `{SD-ID: {PARAM: value}}` with escapes resolved; as in JSON output, elements with the same
/// SD-ID are merged and a repeated PARAM-NAME becomes an array of its values, in order.
fn structured_data(batch: &EventBatch, els: &[SdElement], out: &mut Vec<u8>) {
    let id = |e: &SdElement| batch.str(e.id);
    let distinct: Vec<&SdElement> = els
        .iter()
        .enumerate()
        .filter(|(i, e)| !els[..*i].iter().any(|f| id(f) == id(e)))
        .map(|(_, e)| e)
        .collect();
    write_map_len(out, distinct.len());
    for el in distinct {
        write_str(out, id(el));
        let params: Vec<&SdParam> = els
            .iter()
            .filter(|e| id(e) == id(el))
            .flat_map(|e| batch.params_of(e).iter())
            .collect();
        let name = |p: &SdParam| batch.str(p.name);
        let names: Vec<&SdParam> = params
            .iter()
            .enumerate()
            .filter(|(i, p)| !params[..*i].iter().any(|q| name(q) == name(p)))
            .map(|(_, p)| *p)
            .collect();
        write_map_len(out, names.len());
        for p in names {
            write_str(out, name(p));
            let values: Vec<&SdParam> = params
                .iter()
                .filter(|q| name(q) == name(p))
                .copied()
                .collect();
            if values.len() > 1 {
                write_array_len(out, values.len());
            }
            for v in values {
                sd_value(batch.str(v.value), v.escaped, out);
            }
        }
    }
}

/// An SD-PARAM value as a `str`, with `\"`, `\\` and `\]` resolved when `escaped`.
fn sd_value(raw: &[u8], escaped: bool, out: &mut Vec<u8>) {
    if !escaped {
        write_str(out, raw);
        return;
    }
    let mut resolved = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'\\' && matches!(raw.get(i + 1), Some(b'"' | b'\\' | b']')) {
            resolved.push(raw[i + 1]);
            i += 2;
        } else {
            resolved.push(b);
            i += 1;
        }
    }
    write_str(out, &resolved);
}

/// Where a PackedForward request being built keeps its blob's length, to be patched in.
#[derive(Debug, Clone, Copy)]
pub struct PackedStart {
    len_at: usize,
}

impl PackedStart {
    /// Where the entries start in the request.
    pub fn entries_at(self) -> usize {
        self.len_at + 4
    }
}

/// Starts a `[tag, bin32(entries), option]` request: append the entries after this, then call
/// [`finish_packed`].
pub fn begin_packed(out: &mut Vec<u8>, tag: &[u8]) -> PackedStart {
    out.push(0x93);
    write_str(out, tag);
    out.push(0xc6);
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    PackedStart { len_at }
}

/// Ends a request begun with [`begin_packed`]: patches the blob length and appends the option
/// map (`size`, then `chunk` when acks are wanted, then `compressed` when the blob is gzip).
pub fn finish_packed(
    out: &mut Vec<u8>,
    start: PackedStart,
    size: usize,
    chunk: Option<&[u8]>,
    gzip: bool,
) {
    let blob = out.len() - (start.len_at + 4);
    let len = u32::try_from(blob).unwrap_or(u32::MAX).to_be_bytes();
    if let Some(slot) = out.get_mut(start.len_at..start.len_at + 4) {
        slot.copy_from_slice(&len);
    }
    write_map_len(out, 1 + usize::from(chunk.is_some()) + usize::from(gzip));
    write_str(out, b"size");
    write_uint(out, size as u64);
    if let Some(chunk) = chunk {
        write_str(out, b"chunk");
        write_str(out, chunk);
    }
    if gzip {
        write_str(out, b"compressed");
        write_str(out, b"gzip");
    }
}

/// Appends `{"ack": chunk}`, the chunk echoed byte for byte as a `str` (a `bin` makes some
/// clients time out).
pub fn write_ack(out: &mut Vec<u8>, chunk: &[u8]) {
    out.push(0x81);
    write_str(out, b"ack");
    write_str(out, chunk);
}

/// The chunk id of an ack map `{"ack": id}`, as offsets into `bytes`; `None` for anything else.
pub fn read_ack(bytes: &[u8]) -> Option<Span> {
    let mut r = super::msgpack::Reader::new(bytes, 0);
    let super::msgpack::Head::Map(n) = r.head().ok()? else {
        return None;
    };
    for _ in 0..n {
        let key = r.blob().ok()??;
        if r.slice(key) == b"ack" {
            let (s, e) = r.blob().ok()??;
            return Some(Span::new(s, e));
        }
        r.skip().ok()?;
    }
    None
}

/// The length of a [`chunk_id`].
pub const CHUNK_ID_LEN: usize = 24;

/// A chunk id as fluentd's out_forward and Fluent Bit make them: base64 (standard alphabet,
/// padded) of 16 bytes, 24 characters.
pub fn chunk_id(raw: &[u8; 16]) -> [u8; CHUNK_ID_LEN] {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = [b'='; CHUNK_ID_LEN];
    for (i, group) in raw.chunks(3).enumerate() {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (j, b)| acc | u32::from(*b) << (16 - 8 * j));
        for j in 0..=group.len() {
            if let Some(slot) = out.get_mut(i * 4 + j) {
                *slot = ALPHABET[(n >> (18 - 6 * j)) as usize & 63];
            }
        }
    }
    out
}
