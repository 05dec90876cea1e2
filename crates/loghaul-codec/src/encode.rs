//! Encoders: events to newline-delimited JSON or plain text, appended to a caller's buffer.
//!
//! ```text
//! {"timestamp":"2003-10-11T22:14:15.003Z","hostname":"mymachine.example.com","appname":"evntslog",
//!  "msgid":"ID47","facility":"local4","severity":"notice","version":1,
//!  "structured_data":{"exampleSDID@32473":{"iut":"3","eventSource":"Application"}},
//!  "message":"An application event log entry...","source_ip":"192.0.2.1","source_type":"syslog"}\n
//! ```
//!
//! Fields come in a fixed order; absent ones are omitted, never written as `null`. Strings are
//! escaped per RFC 8259 by hand, and bytes that are not UTF-8 become U+FFFD, so the output is
//! always valid UTF-8 JSON whatever the input was. SD-PARAM escapes (`\"`, `\\`, `\]`) are
//! resolved here, on output, because decoders keep bytes as sent.
//!
//! The JSON encoder writes through a `Writer`: the buffer is zero-extended past the event first,
//! so every piece is a bounds check and a few fixed-size stores into room that is already there
//! (no capacity check or `memcpy` call per piece), and the room left over is cut off at the end.
//! Strings are checked and copied 16 bytes at a time, with a few vector compares per step; a
//! string inside the batch arena may read (never emit) the arena bytes after it, so a short
//! field goes out together with its key in one step. Text that needs escaping, is not ASCII or
//! runs short of room takes the general path.

use std::cell::Cell;
use std::io::Write as _;
use std::net::IpAddr;

use loghaul_core::names::{FACILITIES, SEVERITIES, facility_name, severity_name};
use loghaul_core::{Event, EventBatch, Field, Flags, SdElement, SdParam, Span, Timestamp, Value};

use crate::simd::{V, lanes};

const REPLACEMENT: &[u8; 3] = b"\xEF\xBF\xBD";

/// Room made for an event before anything is written (on top of its message): enough for the
/// fixed parts and the usual fields, so the writer rarely grows mid-event.
const ROOM: usize = 384;

/// Append one JSON object and `\n` for `event` of `batch` to `out`.
pub fn encode_json(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    let src = Src::of(batch);
    // Events with no message (forward, HTTP/JSON) take the general path, which also resolves
    // a record's keys named as loghaul's own fields; events with a record or a tag (a
    // transform's output) take the fast one when there is no such key; syslog events, the hot
    // path, never need to look.
    let Some(message) = event.message.get() else {
        return encode_record_json(batch, event, out);
    };
    if event.fields.0 != event.fields.1 || event.tag.is_some() {
        return encode_tagged_json(batch, event, message, out);
    }
    let (message, message_len) = src.padded(message);
    let mut w = Writer::new(out, ROOM + message_len);
    own_fields(&mut w, src, batch, event, message, message_len);
    if batch.source_type == "syslog" && event.flags.is_empty() {
        // The usual ending, as one constant piece.
        w.put_all(b"\",\"source_type\":\"syslog\"}\n");
        w.finish();
        return;
    }
    source_type(&mut w, batch);
    if !event.flags.is_empty() {
        w.put_all(b",\"flags\":");
        flags(&mut w, event.flags);
    }
    w.put_all(b"}\n");
    w.finish();
}

/// The line of an event with a message and a record or a tag: as a syslog line, then the tag
/// and the record's keys; by the general path when a key is one of loghaul's own names.
#[inline(never)]
fn encode_tagged_json(batch: &EventBatch, event: &Event, message: Span, out: &mut Vec<u8>) {
    let src = Src::of(batch);
    let fields = batch.fields_of(event);
    if shadowed(src, fields) != 0 {
        return encode_record_json(batch, event, out);
    }
    let (message, message_len) = src.padded(message);
    // A record's keys and values are mostly about the message's size again (they are often
    // its pairs): room for them up front, rather than growing the buffer mid-event.
    let mut w = Writer::new(out, ROOM + 2 * message_len + 16 * fields.len());
    own_fields(&mut w, src, batch, event, message, message_len);
    source_type(&mut w, batch);
    w.pos = tag_record_flags(w.out, w.pos, src, event, fields);
    w.finish();
}

/// `{"timestamp":"…` through `source_ip` (or the message): loghaul's own fields of a line up
/// to its source type, the last string left open.
#[inline(always)]
fn own_fields(
    w: &mut Writer<'_>,
    src: Src,
    batch: &EventBatch,
    event: &Event,
    message: &[u8],
    message_len: usize,
) {
    // A string value's closing quote goes out with the next key (which starts `",`), saving a
    // piece per field; `open` tracks whether one is pending where it can vary.
    w.timestamp(batch.time_of(event));
    // Host names run longer than the rest.
    w.str_field::<14, true>(src, b"\",\"hostname\":\"", event.hostname.get());
    w.str_field::<13, false>(src, b"\",\"appname\":\"", event.appname.get());
    w.str_field::<12, false>(src, b"\",\"procid\":\"", event.procid.get());
    w.str_field::<11, false>(src, b"\",\"msgid\":\"", event.msgid.get());
    match (event.facility, event.severity) {
        // Both are present on nearly every syslog event: one precomputed piece.
        (Some(f), Some(s)) if f < 24 && s < 8 => {
            let (text, len) = &PRI_FIELDS[usize::from(f) << 3 | usize::from(s)];
            w.put(text, usize::from(*len));
        }
        (facility, severity) => {
            if let Some(name) = facility.and_then(facility_name) {
                w.put_all(b"\",\"facility\":\"");
                w.copy(name.as_bytes());
            }
            if let Some(name) = severity.and_then(severity_name) {
                w.put_all(b"\",\"severity\":\"");
                w.copy(name.as_bytes());
            }
        }
    }
    let mut open = true;
    match event.version {
        Some(1) => {
            w.put_all(b"\",\"version\":1");
            open = false;
        }
        Some(v) => {
            w.put_all(b"\",\"version\":");
            w.write_u64(u64::from(v));
            open = false;
        }
        None => {}
    }
    if event.structured_data.is_some() {
        w.key(open, b"\",\"structured_data\":", b",\"structured_data\":");
        w.pos = structured_data(w.out, w.pos, src, batch.sd_elements_of(event));
        open = false;
    }
    w.key(open, b"\",\"message\":\"", b",\"message\":\"");
    w.escape(message, message_len);
    match batch.source_ip(event) {
        Some(IpAddr::V4(v4)) => {
            let (text, len) = source_ipv4(v4);
            w.put(&text, len);
        }
        Some(ip) => {
            w.put_all(b"\",\"source_ip\":\"");
            w.pos = with_vec(w.out, w.pos, |out| write_ip(ip, out));
        }
        None => {}
    }
}

/// `","source_type":"…"`, closing the string before it.
#[inline(always)]
fn source_type(w: &mut Writer<'_>, batch: &EventBatch) {
    if batch.source_type == "syslog" {
        w.put_all(b"\",\"source_type\":\"syslog\"");
    } else {
        w.put_all(b"\",\"source_type\":\"");
        let source_type = batch.source_type.as_bytes();
        w.escape(source_type, source_type.len());
        w.put_all(b"\"");
    }
}

/// The end of a line after `source_type`: `,"tag":…`, the record's keys (none of them one of
/// loghaul's own names) in order, `,"flags":[…]` and `}\n`; returns the new `pos`.
#[inline(always)]
fn tag_record_flags(
    out: &mut Vec<u8>,
    pos: usize,
    src: Src,
    event: &Event,
    fields: &[Field],
) -> usize {
    let mut w = Writer { out, pos };
    if let Some(tag) = event.tag.get() {
        let (tag, len) = src.padded(tag);
        w.put_all(b",\"tag\":\"");
        w.escape(tag, len);
        w.put_all(b"\"");
    }
    for field in fields {
        let (name, name_len) = src.padded(field.name);
        w.put_all(b",\"");
        if let Value::Str(span) | Value::Bytes(span) = field.value {
            let (text, len) = src.padded(span);
            // A short name and value (most pairs): `name":"value","` in one step, of which
            // the `,"` is taken back.
            if w.pair(name, name_len, text, len) {
                w.pos -= 2;
            } else {
                w.escape(name, name_len);
                w.put_all(b"\":\"");
                w.escape(text, len);
                w.put_all(b"\"");
            }
        } else {
            w.escape(name, name_len);
            w.put_all(b"\":");
            w.pos = value(w.out, w.pos, src, field.value, 0);
        }
    }
    if !event.flags.is_empty() {
        w.put_all(b",\"flags\":");
        flags(&mut w, event.flags);
    }
    w.put_all(b"}\n");
    w.pos
}

/// `["parse_error","truncated"]`: the event's condition flags by name.
fn flags(w: &mut Writer<'_>, flags: Flags) {
    w.put_all(b"[");
    let mut sep = false;
    for (flag, name) in [
        (Flags::PARSE_ERROR, &b"\"parse_error\""[..]),
        (Flags::TRUNCATED, b"\"truncated\""),
        (Flags::INVALID_UTF8, b"\"invalid_utf8\""),
    ] {
        if flags.contains(flag) {
            if sep {
                w.put_all(b",");
            }
            w.copy(name);
            sep = true;
        }
    }
    w.put_all(b"]");
}

/// The names loghaul writes for an event's own fields, in output order. A record key equal to
/// one of them *shadows* it: the record's value is written and loghaul's is not, so every key
/// appears once and what the sender sent is never overwritten or renamed.
pub const FIXED_FIELDS: [&str; 14] = [
    "timestamp",
    "hostname",
    "appname",
    "procid",
    "msgid",
    "facility",
    "severity",
    "version",
    "structured_data",
    "message",
    "source_ip",
    "source_type",
    "tag",
    "flags",
];

/// Bit `i` set: the record has a top-level key `FIXED_FIELDS[i]`.
fn shadowed(src: Src, fields: &[Field]) -> u16 {
    let mut mask = 0u16;
    for field in fields {
        if let Some(i) = fixed_index(src.str(field.name)) {
            mask |= 1 << i;
        }
    }
    mask
}

/// The index in [`FIXED_FIELDS`] of `name`, if it is one: picked by length and first byte, so
/// a record key costs at most one comparison (records carry several keys each).
fn fixed_index(name: &[u8]) -> Option<usize> {
    let first = name.first().copied().unwrap_or(0);
    let i = match (name.len(), first) {
        (3, _) => 12,
        (5, b'm') => 4,
        (5, b'f') => 13,
        (6, _) => 3,
        (7, b'a') => 2,
        (7, b'v') => 7,
        (7, b'm') => 9,
        (8, b'h') => 1,
        (8, b'f') => 5,
        (8, b's') => 6,
        (9, b't') => 0,
        (9, b's') => 10,
        (11, _) => 11,
        (15, _) => 8,
        _ => return None,
    };
    let fixed = FIXED_FIELDS.get(i)?.as_bytes();
    // The last bytes first: most keys of the same length and first letter differ there, and
    // this spares them the call that compares slices.
    (fixed.last() == name.last() && fixed == name).then_some(i)
}

/// The JSON line of an event with no message or with a record key named as one of loghaul's own
/// fields: loghaul's fields that the record does not shadow, then the record's keys in the
/// sender's order.
#[inline(never)]
fn encode_record_json(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    let src = Src::of(batch);
    let fields = batch.fields_of(event);
    let shadow = shadowed(src, fields);
    // By index into FIXED_FIELDS: a lookup by name per field cost a third of this path.
    let own = |i: usize| shadow & (1 << i) == 0;
    let mut w = Writer::new(out, ROOM);
    // The timestamp piece opens the object, as on the fast path.
    let mut first = !own(0 /* timestamp */);
    if first {
        w.put_all(b"{");
    } else {
        w.timestamp(batch.time_of(event));
        w.put_all(b"\"");
    }
    let key = |w: &mut Writer<'_>, first: &mut bool, name: &[u8]| {
        if !std::mem::take(first) {
            w.put_all(b",");
        }
        w.put_all(b"\"");
        w.copy(name);
        w.put_all(b"\":");
    };
    let string = |w: &mut Writer<'_>, span: Span| {
        let (s, len) = src.padded(span);
        w.put_all(b"\"");
        w.escape(s, len);
        w.put_all(b"\"");
    };
    for (i, name, span) in [
        (1, "hostname", event.hostname),
        (2, "appname", event.appname),
        (3, "procid", event.procid),
        (4, "msgid", event.msgid),
    ] {
        if let Some(span) = span.get()
            && own(i)
        {
            key(&mut w, &mut first, name.as_bytes());
            string(&mut w, span);
        }
    }
    if let Some(name) = event.facility.and_then(facility_name)
        && own(5 /* facility */)
    {
        key(&mut w, &mut first, b"facility");
        w.put_all(b"\"");
        w.copy(name.as_bytes());
        w.put_all(b"\"");
    }
    if let Some(name) = event.severity.and_then(severity_name)
        && own(6 /* severity */)
    {
        key(&mut w, &mut first, b"severity");
        w.put_all(b"\"");
        w.copy(name.as_bytes());
        w.put_all(b"\"");
    }
    if let Some(v) = event.version
        && own(7 /* version */)
    {
        key(&mut w, &mut first, b"version");
        w.write_u64(u64::from(v));
    }
    if event.structured_data.is_some() && own(8 /* structured_data */) {
        key(&mut w, &mut first, b"structured_data");
        w.pos = structured_data(w.out, w.pos, src, batch.sd_elements_of(event));
    }
    if let Some(span) = event.message.get()
        && own(9 /* message */)
    {
        key(&mut w, &mut first, b"message");
        string(&mut w, span);
    }
    match batch.source_ip(event) {
        Some(IpAddr::V4(v4)) if own(10 /* source_ip */) => {
            // The fast path's cached `","source_ip":"a.b.c.d` piece, from its comma (or its
            // key, when nothing came before).
            let (text, len) = source_ipv4(v4);
            let from = if std::mem::take(&mut first) { 2 } else { 1 };
            w.copy(text.get(from..len).unwrap_or_default());
            w.put_all(b"\"");
        }
        Some(ip) if own(10 /* source_ip */) => {
            key(&mut w, &mut first, b"source_ip");
            w.put_all(b"\"");
            w.pos = with_vec(w.out, w.pos, |out| write_ip(ip, out));
            w.put_all(b"\"");
        }
        _ => {}
    }
    if own(11 /* source_type */) {
        key(&mut w, &mut first, b"source_type");
        w.put_all(b"\"");
        let source_type = batch.source_type.as_bytes();
        w.escape(source_type, source_type.len());
        w.put_all(b"\"");
    }
    if let Some(span) = event.tag.get()
        && own(12 /* tag */)
    {
        key(&mut w, &mut first, b"tag");
        string(&mut w, span);
    }
    for field in fields {
        if !std::mem::take(&mut first) {
            w.put_all(b",");
        }
        let (name, len) = src.padded(field.name);
        w.put_all(b"\"");
        w.escape(name, len);
        w.put_all(b"\":");
        w.pos = value(w.out, w.pos, src, field.value, 0);
    }
    if !event.flags.is_empty() && own(13 /* flags */) {
        if !first {
            w.put_all(b",");
        }
        w.put_all(b"\"flags\":");
        flags(&mut w, event.flags);
    }
    w.put_all(b"}\n");
    w.finish();
}

/// What the encoder reads from a batch, as plain slices: loads from them can be kept in
/// registers (the batch itself has interior mutability, so every read of it is a fresh load).
#[derive(Clone, Copy)]
struct Src<'b> {
    arena: &'b [u8],
    sd_params: &'b [SdParam],
    fields: &'b [Field],
}

impl<'b> Src<'b> {
    #[inline(always)]
    fn of(batch: &'b EventBatch) -> Src<'b> {
        Src {
            arena: &batch.arena,
            sd_params: &batch.sd_params,
            fields: &batch.fields,
        }
    }

    /// The bytes of `span`, as [`EventBatch::str`].
    #[inline(always)]
    fn str(self, span: Span) -> &'b [u8] {
        self.arena
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    }

    /// The bytes of `span` as the start of the rest of the arena and the string's length: like
    /// [`Src::str`] (empty when out of range), but the escaper may read on past the string.
    #[inline(always)]
    fn padded(self, span: Span) -> (&'b [u8], usize) {
        let (start, end) = (span.start as usize, span.end as usize);
        if start <= end
            && end <= self.arena.len()
            && let Some(rest) = self.arena.get(start..)
        {
            return (rest, end - start);
        }
        (&[], 0)
    }

    /// The entries of a map or the items of an array, as [`EventBatch::children`].
    #[inline(always)]
    fn children(self, start: u32, end: u32) -> &'b [Field] {
        self.fields
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }

    /// The params of one element, as [`EventBatch::params_of`].
    #[inline(always)]
    fn params_of(self, element: &SdElement) -> &'b [SdParam] {
        let (start, end) = element.params;
        self.sd_params
            .get(start as usize..end as usize)
            .unwrap_or_default()
    }
}

/// Room for the longest `","facility":"solaris-cron","severity":"warning`.
const PRI_TEXT: usize = 48;

/// `","facility":"NAME","severity":"NAME` for each PRI value 0..=191 (facility << 3 | severity),
/// with its length: it closes the string before it and leaves its own open, like every key.
static PRI_FIELDS: [([u8; PRI_TEXT], u8); 192] = {
    const fn put(buf: &mut [u8; PRI_TEXT], mut at: usize, s: &[u8]) -> usize {
        let mut i = 0;
        while i < s.len() {
            buf[at] = s[i];
            at += 1;
            i += 1;
        }
        at
    }
    let mut table = [([0u8; PRI_TEXT], 0u8); 192];
    let mut pri = 0;
    while pri < 192 {
        let buf = &mut table[pri].0;
        let mut n = put(buf, 0, b"\",\"facility\":\"");
        n = put(buf, n, FACILITIES[pri >> 3].as_bytes());
        n = put(buf, n, b"\",\"severity\":\"");
        n = put(buf, n, SEVERITIES[pri & 7].as_bytes());
        table[pri].1 = n as u8;
        pri += 1;
    }
    table
};

/// Append the message only and `\n`; bytes that are not UTF-8 become U+FFFD, as in JSON.
///
/// An event without a message (a record that has no `message` string) is written as its JSON
/// line instead, so text output never turns a record into an empty line.
pub fn encode_text(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    let Some(msg) = event.message.get() else {
        return encode_json(batch, event, out);
    };
    let msg = batch.str(msg);
    match std::str::from_utf8(msg) {
        Ok(_) => out.extend_from_slice(msg),
        Err(_) => {
            for chunk in msg.utf8_chunks() {
                out.extend_from_slice(chunk.valid().as_bytes());
                if !chunk.invalid().is_empty() {
                    out.extend_from_slice(REPLACEMENT);
                }
            }
        }
    }
    out.push(b'\n');
}

/// RFC 3339 in UTC with exactly `ts.frac_digits` fraction digits: `2003-10-11T22:14:15.003Z`.
pub fn write_rfc3339(ts: Timestamp, out: &mut Vec<u8>) {
    crate::time::write_rfc3339(ts, out);
}

/// Append `s` as the inside of a JSON string (no quotes), replacing invalid UTF-8 with U+FFFD.
pub fn escape_json(s: &[u8], out: &mut Vec<u8>) {
    let mut w = Writer::new(out, s.len());
    w.escape(s, s.len());
    w.finish();
}

/// Room on top of the estimate, for pieces that reach past what they write: the escaper's
/// 16-byte steps, fixed-size pieces cut short (a PRI piece is 48 bytes) and one-window writes.
const SLACK: usize = 48;

/// Appends to a buffer through fixed-size copies. `out` is zero-extended past `pos` (the end of
/// what is written), so a piece is a bounds check and a few wide stores; pieces may overshoot
/// into the room (the next piece overwrites it) and [`Writer::finish`] cuts `out` back to `pos`.
///
/// Its methods are all inlined, and what is not inlined takes `out` and `pos` as arguments and
/// returns the new `pos`: a writer never has its address taken, so its fields stay in registers.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    pos: usize,
}

impl<'a> Writer<'a> {
    #[inline(always)]
    fn new(out: &'a mut Vec<u8>, room: usize) -> Writer<'a> {
        let pos = out.len();
        out.resize(pos + room + SLACK, 0);
        Writer { out, pos }
    }

    #[inline(always)]
    fn finish(self) {
        self.out.truncate(self.pos);
    }

    /// Append the first `len` bytes of `bytes` (`len <= N`); the rest only lands in the room.
    #[inline(always)]
    fn put<const N: usize>(&mut self, bytes: &[u8; N], len: usize) {
        match self.room::<N>() {
            Some(dst) => *dst = *bytes,
            None => put_slow(self.out, self.pos, bytes),
        }
        self.pos += len;
    }

    #[inline(always)]
    fn put_all<const N: usize>(&mut self, bytes: &[u8; N]) {
        self.put(bytes, N);
    }

    /// The `N` bytes of room at `pos`, if `out` reaches that far.
    #[inline(always)]
    fn room<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        self.out.get_mut(self.pos..)?.first_chunk_mut::<N>()
    }

    /// Append `s` as is.
    #[inline(always)]
    fn copy(&mut self, s: &[u8]) {
        if self.out.len() < self.pos + s.len() {
            grow(self.out, self.pos, s.len());
        }
        if let Some(dst) = self.out.get_mut(self.pos..self.pos + s.len()) {
            copy_same_len(dst, s);
        }
        self.pos += s.len();
    }

    /// `{"timestamp":"…` (the value's closing quote comes with the next key).
    #[inline(always)]
    fn timestamp(&mut self, ts: Timestamp) {
        const HEAD: usize = crate::time::RFC3339_HEAD;
        self.put_all(b"{\"timestamp\":\"");
        if let Some(room) = self.room::<40>()
            && let Some(head) = room.first_chunk_mut::<24>()
            && crate::time::rfc3339_head_into(ts, head)
            && let Some(frac) = room.get_mut(HEAD..).and_then(|r| r.first_chunk_mut::<16>())
        {
            // The head, then the fraction over its padding, straight into the room: neither is
            // copied on the way.
            self.pos += HEAD + crate::time::fraction_into(ts, frac);
            return;
        }
        self.pos = with_vec(self.out, self.pos, |out| write_rfc3339(ts, out));
    }

    /// `key` (which closes the string before it) and the escaped value, left open.
    #[inline(always)]
    fn str_field<const N: usize, const LONG: bool>(
        &mut self,
        src: Src,
        key: &[u8; N],
        span: Option<Span>,
    ) {
        let Some(span) = span else {
            return;
        };
        let (s, len) = src.padded(span);
        if !self.short::<N, LONG>(key, s, len, &[0; 4], 0) {
            self.put_all(key);
            self.escape(s, len);
        }
    }

    /// `head`, the plain `src[..len]` and the first `tail_len` bytes of `tail` in one go when
    /// the string is short (up to 16 bytes, or 32 with `LONG`: the usual field), in a window of
    /// room checked once; `false` (nothing written) otherwise. `head` is at most 16 bytes.
    #[inline(always)]
    fn short<const N: usize, const LONG: bool>(
        &mut self,
        head: &[u8; N],
        src: &[u8],
        len: usize,
        tail: &[u8; 4],
        tail_len: usize,
    ) -> bool {
        let Some(room) = self.room::<64>() else {
            return false;
        };
        if len <= 16 {
            let Some(a) = src.first_chunk::<16>() else {
                return false;
            };
            if !plain::<false>(a, len) {
                return false;
            }
            let a = *a;
            if let Some(d) = room.first_chunk_mut::<N>() {
                *d = *head;
            }
            if let Some(d) = room.get_mut(N..).and_then(|r| r.first_chunk_mut::<16>()) {
                *d = a;
            }
        } else if LONG {
            let Some((a, b)) = src.first_chunk::<32>().map(|s| s.split_at(16)) else {
                return false;
            };
            let (Some(a), Some(b)) = (a.first_chunk::<16>(), b.first_chunk::<16>()) else {
                return false;
            };
            if len > 32 || !plain2(a, 16, b, len - 16) {
                return false;
            }
            let (a, b) = (*a, *b);
            if let Some(d) = room.first_chunk_mut::<N>() {
                *d = *head;
            }
            if let Some(d) = room.get_mut(N..).and_then(|r| r.first_chunk_mut::<16>()) {
                *d = a;
            }
            if let Some(d) = room
                .get_mut(N + 16..)
                .and_then(|r| r.first_chunk_mut::<16>())
            {
                *d = b;
            }
        } else {
            return false;
        }
        if let Some(d) = room
            .get_mut(N + len..)
            .and_then(|r| r.first_chunk_mut::<4>())
        {
            *d = *tail;
        }
        self.pos += N + len + tail_len;
        true
    }

    /// `name":"value","` in one go when both are short and plain (the usual SD-PARAM), in a
    /// window of room checked once; `false` (nothing written) otherwise.
    #[inline(always)]
    fn pair(&mut self, name: &[u8], name_len: usize, value: &[u8], value_len: usize) -> bool {
        let (Some(n), Some(v)) = (name.first_chunk::<16>(), value.first_chunk::<16>()) else {
            return false;
        };
        if name_len > 16 || value_len > 16 || !plain2(n, name_len, v, value_len) {
            return false;
        }
        let Some(room) = self.room::<48>() else {
            return false;
        };
        // Each piece lands over the padding of the one before; all offsets are below 48.
        let (n, v) = (*n, *v);
        if let Some(d) = room.first_chunk_mut::<16>() {
            *d = n;
        }
        let at = name_len;
        if let Some(d) = room.get_mut(at..).and_then(|r| r.first_chunk_mut::<3>()) {
            *d = *b"\":\"";
        }
        let at = at + 3;
        if let Some(d) = room.get_mut(at..).and_then(|r| r.first_chunk_mut::<16>()) {
            *d = v;
        }
        let at = at + value_len;
        if let Some(d) = room.get_mut(at..).and_then(|r| r.first_chunk_mut::<3>()) {
            *d = *b"\",\"";
        }
        self.pos += at + 3;
        true
    }

    /// A key after a value that may be a string left `open`: with its closing quote or without.
    #[inline(always)]
    fn key<const N: usize, const M: usize>(
        &mut self,
        open: bool,
        quoted: &[u8; N],
        bare: &[u8; M],
    ) {
        if open {
            self.put_all(quoted);
        } else {
            self.put_all(bare);
        }
    }

    /// Append `src[..len]` (`len <= src.len()`) as the inside of a JSON string. Bytes of `src`
    /// after `len` may be read along (never written out): inside the arena they are there.
    #[inline(always)]
    fn escape(&mut self, src: &[u8], len: usize) {
        // Plain text goes 16 bytes a step: copied whole and checked, over whole chunks of
        // source and room sliced once (no bounds check per step). From a chunk with a byte
        // to escape on, or when the source or room runs short, `escape_rest` takes over.
        let whole = len.div_ceil(16) * 16;
        let mut i = 0;
        if let (Some(s), Some(d)) = (
            src.get(..whole),
            self.out.get_mut(self.pos..self.pos + whole),
        ) {
            for (chunk, dst) in s.chunks_exact(16).zip(d.chunks_exact_mut(16)) {
                let Ok(chunk) = <&[u8; 16]>::try_from(chunk) else {
                    break;
                };
                dst.copy_from_slice(chunk);
                if !plain::<false>(chunk, len - i) {
                    break;
                }
                i += 16;
            }
            if i >= len {
                self.pos += len;
                return;
            }
        }
        self.pos += i;
        self.pos = escape_rest(
            self.out,
            self.pos,
            src.get(i..).unwrap_or_default(),
            len - i,
        );
    }

    /// [`Writer::escape`] out of line and in one step for short strings: for the rare paths,
    /// where the inline loop's setup would cost more than it saves.
    #[inline(always)]
    fn escape_small(&mut self, src: &[u8], len: usize) {
        self.pos = escape_small(self.out, self.pos, src, len);
    }

    /// Copy `src[..len]` up to its first byte that needs escaping, 16 bytes at a time; returns
    /// that byte's index, or `None` when all `len` bytes were plain. With `VALID` the text is
    /// known to be UTF-8, so only ASCII bytes can need escaping.
    #[inline(always)]
    fn copy_plain<const VALID: bool>(&mut self, src: &[u8], len: usize) -> Option<usize> {
        if self.out.len() < self.pos + len + 16 {
            grow(self.out, self.pos, len + 16);
        }
        let mut i = 0;
        loop {
            let chunk = src.get(i..).and_then(|s| s.first_chunk::<16>());
            let dst = self.out.get_mut(self.pos + i..);
            let (Some(chunk), Some(dst)) = (chunk, dst.and_then(|d| d.first_chunk_mut::<16>()))
            else {
                let (pos, found) = copy_plain_tail::<VALID>(self.out, self.pos, src, len, i);
                let at = pos - self.pos;
                self.pos = pos;
                return found.then_some(at);
            };
            // The whole chunk lands; bytes past a special one or past the end are overwritten by
            // what comes next (or cut off).
            *dst = *chunk;
            let rest = len - i;
            let k = first_special::<VALID>(chunk);
            if k < rest.min(16) {
                self.pos += i + k;
                return Some(i + k);
            }
            if rest <= 16 {
                self.pos += len;
                return None;
            }
            i += 16;
        }
    }

    /// Escape `src[..len]` from `at` on, where there is a byte to escape (everything before is
    /// written).
    #[inline(always)]
    fn escape_from<const VALID: bool>(&mut self, src: &[u8], len: usize, mut at: usize) {
        while let Some(&b) = src.get(at).filter(|_| at < len) {
            if !VALID && b >= 0x80 {
                let rest = src.get(at..).unwrap_or_default();
                self.pos = escape_non_ascii(self.out, self.pos, rest, len - at);
                return;
            }
            self.escape_byte(b);
            at += 1;
            match self.copy_plain::<VALID>(src.get(at..).unwrap_or_default(), len - at) {
                Some(k) => at += k,
                None => return,
            }
        }
    }

    #[inline(always)]
    fn escape_byte(&mut self, b: u8) {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            _ => 0,
        };
        if short != 0 {
            self.put_all(&[b'\\', short]);
        } else {
            let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]);
            self.put_all(&[b'\\', b'u', b'0', b'0', hi, lo]);
        }
    }

    /// A key of a merged SD object, from its `,` (none for the `first`) through the escaped name,
    /// left open.
    fn merged_key(&mut self, first: &mut bool, src: Src, name: Span) {
        if !std::mem::take(first) {
            self.put_all(b",");
        }
        self.put_all(b"\"");
        let (text, len) = src.padded(name);
        self.escape_small(text, len);
    }

    /// An SD-PARAM value: the raw text `src[..len]`, with its escapes resolved if `escaped`.
    /// `SMALL` as in [`Writer::escape_small`].
    #[inline(always)]
    fn sd_value<const SMALL: bool>(&mut self, src: &[u8], len: usize, escaped: bool) {
        if escaped {
            self.pos = sd_value_escaped(self.out, self.pos, src, len);
        } else if SMALL {
            self.escape_small(src, len);
        } else {
            self.escape(src, len);
        }
    }

    fn write_u64(&mut self, mut v: u64) {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.copy(&buf[i..]);
    }
}

/// Make `out` reach at least `n` bytes past `pos` (and then some, so growing stays rare).
#[cold]
#[inline(never)]
fn grow(out: &mut Vec<u8>, pos: usize, n: usize) {
    let want = pos + n + ROOM;
    if out.len() < want {
        out.resize(want, 0);
    }
}

#[cold]
#[inline(never)]
fn put_slow(out: &mut Vec<u8>, pos: usize, bytes: &[u8]) {
    grow(out, pos, bytes.len());
    if let Some(dst) = out.get_mut(pos..pos + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// Run `f` on `out` cut to `pos` (rare pieces that `std` formats best); returns the new `pos`.
#[cold]
#[inline(never)]
fn with_vec(out: &mut Vec<u8>, pos: usize, f: impl FnOnce(&mut Vec<u8>)) -> usize {
    out.truncate(pos);
    f(out);
    let pos = out.len();
    out.resize(pos + ROOM, 0);
    pos
}

/// See [`Writer::escape_small`]; returns the new `pos`.
#[inline(never)]
fn escape_small(out: &mut Vec<u8>, pos: usize, src: &[u8], len: usize) -> usize {
    let mut w = Writer { out, pos };
    if len <= 16
        && let (Some(chunk), Some(dst)) = (src.first_chunk::<16>(), w.room::<16>())
    {
        *dst = *chunk;
        if plain::<false>(chunk, len) {
            return pos + len;
        }
    }
    if len <= 16 {
        return escape_rest(w.out, pos, src, len);
    }
    w.escape(src, len);
    w.pos
}

/// [`Writer::escape`] from its first chunk with a byte to escape on (or where the source or the
/// room ran short); returns the new `pos`.
#[inline(never)]
fn escape_rest(out: &mut Vec<u8>, pos: usize, src: &[u8], len: usize) -> usize {
    let mut w = Writer { out, pos };
    if let Some(at) = w.copy_plain::<false>(src, len) {
        w.escape_from::<false>(src, len, at);
    }
    w.pos
}

/// [`Writer::copy_plain`] for the last bytes when fewer than 16 of `src` are left from `i`:
/// the last 16 bytes of the string (overlapping bytes already checked), or the whole short
/// string padded to 16. Returns the new `pos` and whether it stopped at a byte to escape.
#[inline(never)]
fn copy_plain_tail<const VALID: bool>(
    out: &mut Vec<u8>,
    pos: usize,
    src: &[u8],
    len: usize,
    i: usize,
) -> (usize, bool) {
    let s = src.get(..len).unwrap_or_default();
    let (at, chunk) = match s.last_chunk::<16>() {
        Some(last) => (len - 16, *last),
        None => (0, pad16(s)),
    };
    debug_assert!(at <= i);
    if out.len() < pos + at + 16 {
        grow(out, pos, at + 16);
    }
    if let Some(dst) = out.get_mut(pos + at..pos + at + 16) {
        dst.copy_from_slice(&chunk);
    }
    // The first special byte of the chunk is at or past `i`: bytes before were plain. Pad
    // bytes count as special but lie past the end.
    let k = at + first_special::<VALID>(&chunk);
    if k < s.len() {
        (pos + k, true)
    } else {
        (pos + s.len(), false)
    }
}

/// `src[..len]` from its first non-ASCII byte on: valid UTF-8 runs are copied (escaping ASCII
/// specials in them), each invalid sequence becomes U+FFFD. Like the rest of the escaper, it
/// reads on past the runs (and past `len`) where `src` allows.
#[inline(never)]
fn escape_non_ascii(out: &mut Vec<u8>, pos: usize, src: &[u8], len: usize) -> usize {
    let mut w = Writer { out, pos };
    let mut at = 0;
    for chunk in src.get(..len).unwrap_or_default().utf8_chunks() {
        let (valid, invalid) = (chunk.valid().len(), chunk.invalid().len());
        let run = src.get(at..).unwrap_or_default();
        if let Some(k) = w.copy_plain::<true>(run, valid) {
            w.escape_from::<true>(run, valid, k);
        }
        if invalid > 0 {
            w.put_all(REPLACEMENT);
        }
        at += valid + invalid;
    }
    w.pos
}

/// An SD-PARAM value, `src[..len]`, with its escapes resolved (§6.3.3: only `\"`, `\\` and `\]`
/// are escapes; any other backslash stays, with the byte after it).
#[inline(never)]
fn sd_value_escaped(out: &mut Vec<u8>, pos: usize, src: &[u8], len: usize) -> usize {
    let mut w = Writer { out, pos };
    let v = src.get(..len).unwrap_or_default();
    let mut run = 0;
    let mut i = 0;
    while i + 1 < v.len() {
        if v[i] == b'\\' && matches!(v[i + 1], b'"' | b'\\' | b']') {
            // The run before the backslash, read on past its end like any field.
            w.escape_small(&src[run..], i - run);
            run = i + 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    w.escape_small(src.get(run..).unwrap_or_default(), v.len() - run);
    w.pos
}

/// `{"id":{"name":"value","rep":["a","b"]}}`. Elements with the same SD-ID (lenient input) are
/// merged and repeated PARAM-NAMEs become arrays, so no value is lost and no key repeats.
#[inline(always)]
fn structured_data(out: &mut Vec<u8>, pos: usize, src: Src, els: &[SdElement]) -> usize {
    let mut w = Writer { out, pos };
    if els.is_empty() {
        w.put_all(b"{}");
        return w.pos;
    }
    // Written as if every SD-ID were distinct (the usual case), watching for a repeat: a set of
    // the lengths seen so far (mod 64) clears most in one step, only a length seen before calls
    // for a comparison, and on a real repeat the merging writer starts over from `pos`.
    let mut seen = 0u64;
    for (i, el) in els.iter().enumerate() {
        let (id, len) = src.padded(el.id);
        if els.len() > 1 {
            let bit = 1u64 << (len % 64);
            if seen & bit != 0 && els[..i].iter().any(|e| src.str(e.id) == src.str(el.id)) {
                return structured_data_merged(w.out, pos, src, els);
            }
            seen |= bit;
        }
        let open = if i == 0 { b"{\"" } else { b",\"" };
        // `":{"` opens the params and the first name, `":{` when there are none.
        let ps = src.params_of(el);
        let tail_len = if ps.is_empty() { 3 } else { 4 };
        if !w.short::<2, true>(open, id, len, b"\":{\"", tail_len) {
            w.put_all(open);
            w.escape(id, len);
            w.put(b"\":{\"", tail_len);
        }
        w.pos = params(w.out, w.pos, src, ps);
        // The last element closes the structured data, too.
        if i + 1 < els.len() {
            w.put_all(b"}");
        } else {
            w.put_all(b"}}");
        }
    }
    w.pos
}

/// The params of one element, as `name":"value"` pairs separated by `","` (the caller writes
/// the first quote; the common case: no PARAM-NAME repeats, watched for as in
/// [`structured_data`]).
#[inline(always)]
fn params(out: &mut Vec<u8>, pos: usize, src: Src, params: &[SdParam]) -> usize {
    let mut w = Writer { out, pos };
    if params.is_empty() {
        return pos;
    }
    let mut seen = 0u64;
    for (k, p) in params.iter().enumerate() {
        let (name, name_len) = src.padded(p.name);
        let bit = 1u64 << (name_len % 64);
        if seen & bit != 0
            && params[..k]
                .iter()
                .any(|q| src.str(q.name) == src.str(p.name))
        {
            // From the first quote (the caller's) on, which the merging writer writes itself.
            return params_merged(w.out, pos - 1, src, params);
        }
        seen |= bit;
        // Each pair ends `","`, the last one is cut back to its `"`.
        let (value, value_len) = src.padded(p.value);
        if p.escaped || !w.pair(name, name_len, value, value_len) {
            w.escape(name, name_len);
            w.put_all(b"\":\"");
            w.sd_value::<false>(value, value_len, p.escaped);
            w.put_all(b"\",\"");
        }
    }
    w.pos -= 2;
    w.pos
}

/// [`params`] when a PARAM-NAME repeats: its values become an array at its first place.
#[cold]
#[inline(never)]
fn params_merged(out: &mut Vec<u8>, pos: usize, src: Src, params: &[SdParam]) -> usize {
    let mut w = Writer { out, pos };
    merged_params(&mut w, src, || params.iter());
    w.pos
}

/// [`structured_data`] when an SD-ID repeats: the params of all its elements are merged (and
/// repeated names become arrays) at its first place.
#[cold]
#[inline(never)]
fn structured_data_merged(
    out: &mut Vec<u8>,
    pos: usize,
    src: Src,
    elements: &[SdElement],
) -> usize {
    let mut w = Writer { out, pos };
    w.put_all(b"{");
    let mut first_el = true;
    for (i, el) in elements.iter().enumerate() {
        let id = src.str(el.id);
        if elements[..i].iter().any(|e| src.str(e.id) == id) {
            continue;
        }
        w.merged_key(&mut first_el, src, el.id);
        w.put_all(b"\":{");
        // Every param of every element with this id, in order.
        merged_params(&mut w, src, || {
            elements[i..]
                .iter()
                .filter(move |e| src.str(e.id) == id)
                .flat_map(|e| src.params_of(e).iter())
        });
        w.put_all(b"}");
    }
    w.put_all(b"}");
    w.pos
}

/// The params `params()` yields, as `"name":"value"` pairs separated by `,`, each PARAM-NAME once
/// at its first place: a repeated one's values become an array, in order. `params` is walked
/// again for every lookup, which is fine for these rare (lenient-only) inputs.
fn merged_params<'p, I>(w: &mut Writer<'_>, src: Src<'p>, params: impl Fn() -> I)
where
    I: Iterator<Item = &'p SdParam>,
{
    let mut first = true;
    for (k, p) in params().enumerate() {
        let name = src.str(p.name);
        if params().take(k).any(|q| src.str(q.name) == name) {
            continue;
        }
        w.merged_key(&mut first, src, p.name);
        w.put_all(b"\":");
        let repeated = params().skip(k + 1).any(|q| src.str(q.name) == name);
        if repeated {
            w.put_all(b"[");
        }
        let values = params().skip(k).filter(|q| src.str(q.name) == name);
        for (n, q) in values.enumerate() {
            if n > 0 {
                w.put_all(b",");
            }
            w.put_all(b"\"");
            let (value, len) = src.padded(q.value);
            w.sd_value::<true>(value, len, q.escaped);
            w.put_all(b"\"");
        }
        if repeated {
            w.put_all(b"]");
        }
    }
}

/// Records nested deeper than this are cut: the deeper value is written as `null` (decoders
/// refuse such input long before, so this only bounds the recursion).
const MAX_DEPTH: usize = 128;

/// A record value, recursively; returns the new `pos`.
#[inline(never)]
fn value(out: &mut Vec<u8>, pos: usize, src: Src, value: Value, depth: usize) -> usize {
    let mut w = Writer { out, pos };
    match value {
        Value::Str(span) | Value::Bytes(span) => {
            w.put_all(b"\"");
            let (s, len) = src.padded(span);
            w.escape(s, len);
            w.put_all(b"\"");
        }
        Value::Int(i) => {
            if i < 0 {
                w.put_all(b"-");
            }
            w.write_u64(i.unsigned_abs());
        }
        Value::UInt(u) => w.write_u64(u),
        // JSON has no NaN or infinity; null is the honest rendering.
        Value::Float(f) if !f.is_finite() => w.put_all(b"null"),
        Value::Float(f) => {
            w.pos = with_vec(w.out, w.pos, |out| {
                let _ = write!(out, "{f:?}");
            });
        }
        Value::Bool(true) => w.put_all(b"true"),
        Value::Bool(false) => w.put_all(b"false"),
        Value::Null => w.put_all(b"null"),
        _ if depth >= MAX_DEPTH => w.put_all(b"null"),
        Value::Map(start, end) => {
            w.put_all(b"{");
            for (i, field) in src.children(start, end).iter().enumerate() {
                if i > 0 {
                    w.put_all(b",");
                }
                let (name, len) = src.padded(field.name);
                w.put_all(b"\"");
                w.escape(name, len);
                w.put_all(b"\":");
                w.pos = self::value(w.out, w.pos, src, field.value, depth + 1);
            }
            w.put_all(b"}");
        }
        Value::Array(start, end) => {
            w.put_all(b"[");
            for (i, field) in src.children(start, end).iter().enumerate() {
                if i > 0 {
                    w.put_all(b",");
                }
                w.pos = self::value(w.out, w.pos, src, field.value, depth + 1);
            }
            w.put_all(b"]");
        }
        // JSON has no extension types: the type and the data in hex, so nothing is lost.
        Value::Ext(ty, span) => {
            w.put_all(b"{\"ext_type\":");
            if ty < 0 {
                w.put_all(b"-");
            }
            w.write_u64(u64::from(ty.unsigned_abs()));
            w.put_all(b",\"hex\":\"");
            for &b in src.str(span) {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                w.put_all(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
            w.put_all(b"\"}");
        }
    }
    w.pos
}

thread_local! {
    /// The last IPv4 source address written on this thread and its piece (see [`source_ipv4`]):
    /// the events of a batch mostly come from one sender. A length of 0 marks it empty.
    static LAST_IPV4: Cell<(u32, [u8; 32], usize)> = const { Cell::new((0, [0; 32], 0)) };
}

/// `","source_ip":"a.b.c.d` (padded) and its length.
#[inline(always)]
fn source_ipv4(v4: std::net::Ipv4Addr) -> ([u8; 32], usize) {
    let ip = u32::from(v4);
    LAST_IPV4.with(|last| {
        let (cached, text, len) = last.get();
        if cached == ip && len != 0 {
            return (text, len);
        }
        let (text, len) = format_source_ipv4(v4);
        last.set((ip, text, len));
        (text, len)
    })
}

/// The piece of [`source_ipv4`], made.
#[inline(never)]
fn format_source_ipv4(v4: std::net::Ipv4Addr) -> ([u8; 32], usize) {
    const KEY: &[u8; 15] = b"\",\"source_ip\":\"";
    let mut text = [0u8; 32];
    text[..15].copy_from_slice(KEY);
    let len = 15 + write_ipv4(v4, &mut text[15..]);
    (text, len)
}

/// Copy `s` to `dst` (same length): short strings as two overlapping fixed-size copies.
#[inline(always)]
fn copy_same_len(dst: &mut [u8], s: &[u8]) {
    if s.len() > 32 {
        dst.copy_from_slice(s);
    } else if s.len() >= 16 {
        copy_ends::<16>(dst, s);
    } else if s.len() >= 8 {
        copy_ends::<8>(dst, s);
    } else if s.len() >= 4 {
        copy_ends::<4>(dst, s);
    } else {
        for (d, &b) in dst.iter_mut().zip(s) {
            *d = b;
        }
    }
}

/// The first and the last `N` bytes of `s` to `dst` (same length, `N..=2N` bytes).
#[inline(always)]
fn copy_ends<const N: usize>(dst: &mut [u8], s: &[u8]) {
    if let (Some(d), Some(a)) = (dst.first_chunk_mut::<N>(), s.first_chunk::<N>()) {
        *d = *a;
    }
    if let (Some(d), Some(b)) = (dst.last_chunk_mut::<N>(), s.last_chunk::<N>()) {
        *d = *b;
    }
}

/// `s` (shorter than 16 bytes) at the start of 16 bytes of zeros.
#[inline]
fn pad16(s: &[u8]) -> [u8; 16] {
    let mut buf = [0u8; 16];
    if let Some(dst) = buf.get_mut(..s.len()) {
        copy_same_len(dst, s);
    }
    buf
}

/// Bit k set for each byte of `v` that needs escaping in a JSON string: a control character,
/// `"` or `\\`, and with `!VALID` any non-ASCII byte (which the slow path checks as UTF-8).
#[inline(always)]
fn specials<const VALID: bool>(v: V) -> u32 {
    // As signed bytes, 0x80 and up are below 0x20 too: one compare for controls and non-ASCII.
    let control = if VALID { v.le(0x1f) } else { v.lt_signed(0x20) };
    control.or(v.eq(b'"')).or(v.eq(b'\\')).mask()
}

/// Whether the first `n` bytes of `chunk` (all 16 when `n >= 16`) are plain: none of
/// [`specials`] (with `!VALID`).
#[inline(always)]
fn plain<const VALID: bool>(chunk: &[u8; 16], n: usize) -> bool {
    specials::<VALID>(V::load(chunk)) & lanes(n) == 0
}

/// [`plain`] for the first `na` bytes of `a` and the first `nb` bytes of `b` at once.
#[inline(always)]
fn plain2(a: &[u8; 16], na: usize, b: &[u8; 16], nb: usize) -> bool {
    (specials::<false>(V::load(a)) & lanes(na)) | (specials::<false>(V::load(b)) & lanes(nb)) == 0
}

/// The index of the first byte of `chunk` that needs escaping (see [`specials`]), or 16.
#[inline(always)]
fn first_special<const VALID: bool>(chunk: &[u8; 16]) -> usize {
    (specials::<VALID>(V::load(chunk)) | 1 << 16).trailing_zeros() as usize
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The decimal digits of 0..=255 (padded to four bytes) and their count.
static DECIMAL: [([u8; 4], u8); 256] = {
    let mut table = [([0u8; 4], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let v = i as u8;
        table[i] = if v >= 100 {
            ([b'0' + v / 100, b'0' + v / 10 % 10, b'0' + v % 10, 0], 3)
        } else if v >= 10 {
            ([b'0' + v / 10, b'0' + v % 10, 0, 0], 2)
        } else {
            ([b'0' + v, 0, 0, 0], 1)
        };
        i += 1;
    }
    table
};

/// The dotted quad of `v4` at the start of `buf` (which must hold 15 bytes, or 16: one byte past
/// the text may be written); returns its length.
#[inline]
fn write_ipv4(v4: std::net::Ipv4Addr, buf: &mut [u8]) -> usize {
    // Each octet's digits come from a table as one fixed-size store.
    let mut n = 0;
    for (k, octet) in v4.octets().into_iter().enumerate() {
        if k > 0 {
            if let Some(b) = buf.get_mut(n) {
                *b = b'.';
            }
            n += 1;
        }
        let (digits, len) = DECIMAL[usize::from(octet)];
        if let Some(dst) = buf.get_mut(n..n + 4) {
            dst.copy_from_slice(&digits);
        }
        n += usize::from(len);
    }
    n
}

fn write_ip(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 16];
            let n = write_ipv4(v4, &mut buf);
            out.extend_from_slice(&buf[..n]);
        }
        // Rare on syslog ports; std's formatting (with `::` compression) is worth its cost.
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use loghaul_core::{Field, OptSpan};

    fn esc(s: &[u8]) -> String {
        let mut out = Vec::new();
        escape_json(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// The lookup by length and first byte finds every fixed name and nothing else: the same
    /// answers as comparing a name with each fixed one.
    #[test]
    fn fixed_names_are_found_by_length_and_first_byte() {
        let by_scan = |name: &[u8]| FIXED_FIELDS.iter().position(|f| f.as_bytes() == name);
        let mut names: Vec<Vec<u8>> = FIXED_FIELDS.iter().map(|f| f.as_bytes().to_vec()).collect();
        for f in FIXED_FIELDS {
            let b = f.as_bytes();
            names.push(b[..b.len() - 1].to_vec());
            names.push([b, b"s"].concat());
            names.push(b.to_ascii_uppercase());
            let mut other = b.to_vec();
            other[b.len() - 1] ^= 1;
            names.push(other);
        }
        for extra in [
            "",
            "x",
            "severity_text",
            "severity_number",
            "attributes",
            "resources",
            "scope",
        ] {
            names.push(extra.as_bytes().to_vec());
        }
        for name in &names {
            assert_eq!(
                fixed_index(name),
                by_scan(name),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(fixed_index(b"structured_data"), Some(8));
    }

    #[test]
    fn escapes_controls_quotes_and_backslashes() {
        assert_eq!(esc(b"plain"), "plain");
        assert_eq!(
            esc(b"a\"b\\c\nd\te\r\x01\x1f\x7f"),
            "a\\\"b\\\\c\\nd\\te\\r\\u0001\\u001f\x7f"
        );
        assert_eq!(esc("κόσμε \"x\"".as_bytes()), "κόσμε \\\"x\\\"");
    }

    /// Found by the rfc3164/rfc5424 fuzz targets (in an earlier, 8-byte word escaper): a string
    /// of safe bytes whose length is a multiple of 8 ended the word loop exactly at the end,
    /// and the tail check shifted by 64.
    #[test]
    fn fuzz_regression_word_aligned_safe_string() {
        for n in [0, 7, 8, 9, 15, 16, 17, 24] {
            let s = "a".repeat(n);
            assert_eq!(esc(s.as_bytes()), s);
            let q = format!("{s}\"");
            assert_eq!(esc(q.as_bytes()), format!("{s}\\\""));
            let q = format!("\"{s}");
            assert_eq!(esc(q.as_bytes()), format!("\\\"{s}"));
        }
        assert_eq!(esc(b"0123456789abcde\x01"), "0123456789abcde\\u0001");
        assert_eq!(esc(b"01234567\"9abcdef"), "01234567\\\"9abcdef");
    }

    /// A plain reference: what every path of the fast escaper must agree with.
    fn reference(s: &[u8]) -> String {
        let mut out = String::new();
        for c in String::from_utf8_lossy(s).chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out
    }

    /// Strings of every length up to three 16-byte steps: plain, and with a special byte (and
    /// then a second one) at every position.
    fn variants() -> Vec<Vec<u8>> {
        let specials: [&[u8]; 8] = [
            b"\"",
            b"\\",
            b"\n",
            b"\x01",
            b"\x1f",
            "é".as_bytes(),
            "€".as_bytes(),
            b"\xff",
        ];
        let mut all = Vec::new();
        for len in 0..50 {
            let base: Vec<u8> = (0..len).map(|k| b'a' + (k % 26) as u8).collect();
            all.push(base.clone());
            for at in 0..len {
                for sp in specials {
                    let mut s = base.clone();
                    s.splice(at..at + 1, sp.iter().copied());
                    all.push(s.clone());
                    if at + 3 < s.len() {
                        s[at + 3] = b'"';
                        all.push(s);
                    }
                }
            }
        }
        all
    }

    /// With nothing readable past the string (`escape_json`, or a field at the very end of the
    /// arena): the tail step over the last 16 bytes, or the short string padded, agrees.
    #[test]
    fn every_position_of_every_length() {
        for s in variants() {
            assert_eq!(esc(&s), reference(&s), "{s:?}");
        }
    }

    /// With arena bytes after the string, which the 16-byte steps read along: whatever they
    /// are, none of them reaches the output.
    #[test]
    fn bytes_read_past_the_string_never_reach_the_output() {
        let tails: [&[u8]; 5] = [b"", b"\"", b"\\\n\x01", "é".as_bytes(), &[0xff; 40]];
        for s in variants() {
            for tail in tails {
                let mut src = s.clone();
                src.extend_from_slice(tail);
                let mut out = b"x".to_vec();
                let mut w = Writer::new(&mut out, 0);
                w.escape(&src, s.len());
                w.finish();
                assert_eq!(&out[1..], reference(&s).as_bytes(), "{s:?} then {tail:?}");
            }
        }
    }

    /// The one-window paths take a short plain string (with its head and tail) or leave it all
    /// to the general path, never writing half of it.
    #[test]
    fn short_and_pair_take_all_or_nothing() {
        // Plain: printable ASCII but `"` and `\` (non-ASCII text takes the checked path).
        let plain_fits = |s: &[u8], max: usize| {
            let plain = |b: &u8| (0x20..0x80).contains(b) && !matches!(b, b'"' | b'\\');
            s.len() <= max && s.iter().all(plain)
        };
        for s in variants() {
            for tail in [&b""[..], b"=\"x", &[0xff; 40]] {
                let mut src = s.clone();
                src.extend_from_slice(tail);
                let mut out = b"x".to_vec();
                // Room for the windows (a writer starts with plenty).
                let mut w = Writer::new(&mut out, 256);
                let long = w.short::<2, true>(b"{\"", &src, s.len(), b"\":{\"", 4);
                let short = w.short::<2, false>(b"{\"", &src, s.len(), b"\":{\"", 3);
                let pair = w.pair(&src, s.len(), &src, s.len());
                w.finish();
                // Taken exactly when short and plain (and with 16 or 32 bytes to read).
                let readable = src.len() >= if s.len() <= 16 { 16 } else { 32 };
                assert_eq!(long, plain_fits(&s, 32) && readable, "{s:?}");
                assert_eq!(short, plain_fits(&s, 16) && src.len() >= 16, "{s:?}");
                assert_eq!(pair, plain_fits(&s, 16) && src.len() >= 16, "{s:?}");
                let mut want = b"x".to_vec();
                for (taken, head, tail) in [
                    (long, &b"{\""[..], &b"\":{\""[..]),
                    (short, b"{\"", b"\":{"),
                    (pair, b"", b"\":\""),
                ] {
                    if taken {
                        want.extend([head, &s, tail].concat());
                    }
                }
                if pair {
                    want.extend([&s[..], b"\",\""].concat());
                }
                assert_eq!(out, want, "{s:?}");
            }
        }
    }

    #[test]
    fn fraction_digits_are_truncated_not_rounded() {
        for nanos in [
            0,
            1,
            999_999_999,
            3_000_000,
            123_456_789,
            500_000_000,
            999_500_000,
        ] {
            for digits in 0..=9u8 {
                let ts = Timestamp::from_nanos(1_700_000_000_000_000_000 + nanos, digits);
                let mut buf = [0u8; 16];
                let len = crate::time::fraction_into(ts, &mut buf);
                let all = format!(".{nanos:09}");
                let want = match digits {
                    0 => "Z".to_string(),
                    d => format!("{}Z", &all[..=usize::from(d)]),
                };
                assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), want);
            }
        }
    }

    /// A plain reference encoder, field by field, to hold `encode_json` to byte for byte.
    fn reference_json(batch: &EventBatch, e: &Event) -> Vec<u8> {
        fn quoted(b: &[u8]) -> Vec<u8> {
            format!("\"{}\"", reference(b)).into_bytes()
        }
        fn unescape_sd(v: &[u8], escaped: bool) -> Vec<u8> {
            let mut out = Vec::new();
            let mut i = 0;
            while i < v.len() {
                let next = v.get(i + 1).copied();
                if escaped && v[i] == b'\\' && matches!(next, Some(b'"' | b'\\' | b']')) {
                    out.extend(next);
                    i += 2;
                } else {
                    out.push(v[i]);
                    i += 1;
                }
            }
            out
        }
        // A record key equal to one of loghaul's own names shadows it (see FIXED_FIELDS).
        let record_keys: Vec<&[u8]> = batch
            .fields_of(e)
            .iter()
            .map(|f| batch.str(f.name))
            .collect();
        let shadowed = |name: &str| record_keys.contains(&name.as_bytes());
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut ts = Vec::new();
        write_rfc3339(batch.time_of(e), &mut ts);
        parts.push([&b"\"timestamp\":"[..], &quoted(&ts)].concat());
        let header = [
            ("hostname", e.hostname.get()),
            ("appname", e.appname.get()),
            ("procid", e.procid.get()),
            ("msgid", e.msgid.get()),
        ];
        for (key, span) in header {
            if let Some(span) = span {
                parts.push([format!("\"{key}\":").into_bytes(), quoted(batch.str(span))].concat());
            }
        }
        if let Some(name) = e.facility.and_then(facility_name) {
            parts.push(format!("\"facility\":\"{name}\"").into_bytes());
        }
        if let Some(name) = e.severity.and_then(severity_name) {
            parts.push(format!("\"severity\":\"{name}\"").into_bytes());
        }
        if let Some(v) = e.version {
            parts.push(format!("\"version\":{v}").into_bytes());
        }
        if e.structured_data.is_some() {
            // SD-IDs in order of first appearance, each with its PARAM-NAMEs in order of first
            // appearance and all their values.
            type Params = Vec<(Vec<u8>, Vec<Vec<u8>>)>;
            let mut ids: Vec<(Vec<u8>, Params)> = Vec::new();
            for el in batch.sd_elements_of(e) {
                let id = batch.str(el.id).to_vec();
                let at = match ids.iter().position(|(i, _)| *i == id) {
                    Some(at) => at,
                    None => {
                        ids.push((id, Vec::new()));
                        ids.len() - 1
                    }
                };
                for p in batch.params_of(el) {
                    let name = batch.str(p.name).to_vec();
                    let value = quoted(&unescape_sd(batch.str(p.value), p.escaped));
                    let params = &mut ids[at].1;
                    match params.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, values)) => values.push(value),
                        None => params.push((name, vec![value])),
                    }
                }
            }
            let mut sd = b"\"structured_data\":{".to_vec();
            for (k, (id, params)) in ids.iter().enumerate() {
                if k > 0 {
                    sd.push(b',');
                }
                sd.extend(quoted(id));
                sd.extend(b":{");
                for (n, (name, values)) in params.iter().enumerate() {
                    if n > 0 {
                        sd.push(b',');
                    }
                    sd.extend(quoted(name));
                    sd.push(b':');
                    if let [value] = &values[..] {
                        sd.extend(value);
                    } else {
                        sd.push(b'[');
                        sd.extend(values.join(&b","[..]));
                        sd.push(b']');
                    }
                }
                sd.push(b'}');
            }
            sd.push(b'}');
            parts.push(sd);
        }
        if let Some(m) = e.message.get() {
            parts.push([&b"\"message\":"[..], &quoted(batch.str(m))].concat());
        }
        if let Some(ip) = batch.source_ip(e) {
            parts.push(format!("\"source_ip\":\"{ip}\"").into_bytes());
        }
        let source_type = quoted(batch.source_type.as_bytes());
        parts.push([&b"\"source_type\":"[..], &source_type].concat());
        if let Some(tag) = e.tag.get() {
            parts.push([&b"\"tag\":"[..], &quoted(batch.str(tag))].concat());
        }
        fn json_value(batch: &EventBatch, v: Value, depth: usize) -> Vec<u8> {
            match v {
                Value::Str(span) | Value::Bytes(span) => quoted(batch.str(span)),
                Value::Int(i) => i.to_string().into_bytes(),
                Value::UInt(u) => u.to_string().into_bytes(),
                Value::Float(x) if !x.is_finite() => b"null".to_vec(),
                Value::Float(x) => format!("{x:?}").into_bytes(),
                Value::Bool(b) => b.to_string().into_bytes(),
                Value::Null => b"null".to_vec(),
                _ if depth >= MAX_DEPTH => b"null".to_vec(),
                Value::Map(..) => {
                    let entries: Vec<Vec<u8>> = batch
                        .children(v)
                        .iter()
                        .map(|f| {
                            [
                                quoted(batch.str(f.name)),
                                b":".to_vec(),
                                json_value(batch, f.value, depth + 1),
                            ]
                            .concat()
                        })
                        .collect();
                    [b"{".to_vec(), entries.join(&b","[..]), b"}".to_vec()].concat()
                }
                Value::Array(..) => {
                    let items: Vec<Vec<u8>> = batch
                        .children(v)
                        .iter()
                        .map(|f| json_value(batch, f.value, depth + 1))
                        .collect();
                    [b"[".to_vec(), items.join(&b","[..]), b"]".to_vec()].concat()
                }
                Value::Ext(ty, span) => {
                    let hex: String = batch.str(span).iter().map(|b| format!("{b:02x}")).collect();
                    format!("{{\"ext_type\":{ty},\"hex\":\"{hex}\"}}").into_bytes()
                }
            }
        }
        let mut record = Vec::new();
        for f in batch.fields_of(e) {
            let value = json_value(batch, f.value, 0);
            record.push([quoted(batch.str(f.name)), b":".to_vec(), value].concat());
        }
        if !e.flags.is_empty() {
            let names = [
                (Flags::PARSE_ERROR, "\"parse_error\""),
                (Flags::TRUNCATED, "\"truncated\""),
                (Flags::INVALID_UTF8, "\"invalid_utf8\""),
            ];
            let set: Vec<&str> = names
                .iter()
                .filter(|(f, _)| e.flags.contains(*f))
                .map(|(_, n)| *n)
                .collect();
            parts.push(format!("\"flags\":[{}]", set.join(",")).into_bytes());
        }
        // Own fields the record shadows are left out; the record goes before the flags.
        let flags_part = parts.pop_if(|p| p.starts_with(b"\"flags\""));
        parts.retain(|p| {
            let name = &p[1..p
                .iter()
                .skip(1)
                .position(|&b| b == b'"')
                .map_or(1, |i| i + 1)];
            !shadowed(std::str::from_utf8(name).unwrap_or(""))
        });
        parts.extend(record);
        if let Some(flags) = flags_part
            && !shadowed("flags")
        {
            parts.push(flags);
        }
        [b"{".to_vec(), parts.join(&b","[..]), b"}\n".to_vec()].concat()
    }

    /// A small xorshift generator: the batches below are built from one seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }

        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len() as u64) as usize]
        }
    }

    /// A batch with an arena of short words (often repeated, plain or not), events with spans
    /// of every kind into it (empty, at its very end, out of range), structured data with
    /// repeated SD-IDs and PARAM-NAMEs, and extra fields of every kind.
    fn random_batch(r: &mut Rng) -> EventBatch {
        let words: [&[u8]; 14] = [
            b"a",
            b"id",
            b"iut",
            b"exampleSDID@32473",
            b"mymachine.example.com",
            b"An application event log entry with a long text...",
            b"q\"uo\\te",
            b"tab\tnew\nline",
            b"\x01\x7f\x1f",
            "κόσμε".as_bytes(),
            b"bad\xff\xfeutf8\xe2\x82",
            b"\\\"\\]\\\\x",
            b"0123456789abcdef",
            b"",
        ];
        let mut arena = Vec::new();
        let mut spans = Vec::new();
        for _ in 0..2 + r.below(14) {
            let w = r.pick(&words);
            let start = arena.len();
            arena.extend_from_slice(&w[..r.below(w.len() as u64 + 1) as usize]);
            spans.push(Span::new(start, arena.len()));
            arena.extend_from_slice(r.pick(&[&b" "[..], b"\"", b"=\"", b"\n", b"\xc3"]));
        }
        // Runs of words too, so separators land anywhere in a string.
        for _ in 0..8 {
            let (a, b) = (r.pick(&spans), r.pick(&spans));
            spans.push(Span::new(
                a.start.min(b.start) as usize,
                a.end.max(b.end) as usize,
            ));
        }
        // loghaul's own names, so that records shadow them now and then.
        let mut fixed = Vec::new();
        for name in FIXED_FIELDS {
            let start = arena.len();
            arena.extend_from_slice(name.as_bytes());
            fixed.push(Span::new(start, arena.len()));
        }
        let n = arena.len() as u32;
        spans.push(Span { start: n, end: n });
        let source_type = r.pick(&["syslog", "http", "we\"ird"]);
        let mut batch = EventBatch::new(bytes::Bytes::from(arena), "t".into(), source_type);
        batch.peers = vec![
            IpAddr::from([192, 0, 2, 1]),
            IpAddr::from([10, 200, 0, 255]),
            IpAddr::from([0xfe80, 0, 0, 0, 0, 0, 0, 1]),
        ];
        let span = |r: &mut Rng| match r.below(12) {
            0 => Span {
                start: r.below(u64::from(n) + 9) as u32,
                end: r.below(u64::from(n) + 9) as u32,
            },
            _ => r.pick(&spans),
        };
        for _ in 0..1 + r.below(3) {
            let first_el = batch.sd_elements.len() as u32;
            for _ in 0..r.below(4) {
                let first = batch.sd_params.len() as u32;
                for _ in 0..r.below(5) {
                    let (name, value) = (span(r), span(r));
                    let escaped = r.below(2) == 0;
                    batch.sd_params.push(SdParam {
                        name,
                        value,
                        escaped,
                    });
                }
                let id = span(r);
                let params = (first, batch.sd_params.len() as u32);
                batch.sd_elements.push(SdElement { id, params });
            }
            // A record of up to 3 keys, some of them loghaul's own names, some values nested
            // (containers' children go after the container's slots, as decoders lay them out).
            let scalar = |r: &mut Rng| match r.below(8) {
                0 => Value::Str(span(r)),
                1 => Value::Int(r.next() as i64),
                2 => Value::Float(r.pick(&[1.5, -0.0, 1e300, f64::NAN, 0.1 + 0.2])),
                3 => Value::Bool(r.below(2) == 0),
                4 => Value::Null,
                5 => Value::Bytes(span(r)),
                6 => Value::UInt(u64::MAX - r.below(3)),
                _ => Value::Ext(r.pick(&[0, -1, 5]), span(r)),
            };
            let first_field = batch.fields.len() as u32;
            let keys = r.below(4) as usize;
            let name = |r: &mut Rng| match r.below(4) {
                0 => r.pick(&fixed),
                _ => span(r),
            };
            for _ in 0..keys {
                let name = name(r);
                batch.fields.push(Field {
                    name,
                    value: Value::Null,
                });
            }
            for i in 0..keys {
                let value = match r.below(4) {
                    0 => {
                        let (start, n) = (batch.fields.len() as u32, r.below(3) as u32);
                        for _ in 0..n {
                            let (name, value) = (name(r), scalar(r));
                            batch.fields.push(Field { name, value });
                        }
                        if r.below(2) == 0 {
                            Value::Map(start, start + n)
                        } else {
                            Value::Array(start, start + n)
                        }
                    }
                    _ => scalar(r),
                };
                batch.fields[first_field as usize + i].value = value;
            }
            let opt = |r: &mut Rng| OptSpan::from((r.below(4) > 0).then(|| span(r)));
            let ts = |r: &mut Rng| {
                let nanos = r.pick(&[0, 1_065_910_455_003_000_000, -1_000_000_001, i64::MAX]);
                Timestamp::from_nanos(nanos - r.below(1000) as i64, r.below(10) as u8)
            };
            batch.received = ts(r);
            let event = Event {
                timestamp: (r.below(4) > 0).then(|| ts(r)),
                hostname: opt(r),
                appname: opt(r),
                procid: opt(r),
                msgid: opt(r),
                message: if r.below(6) > 0 {
                    span(r).into()
                } else {
                    OptSpan::NONE
                },
                facility: (r.below(8) > 0).then(|| r.below(26) as u8),
                severity: (r.below(8) > 0).then(|| r.below(9) as u8),
                version: r.pick(&[None, Some(1), Some(1), Some(2), Some(255)]),
                structured_data: (r.below(3) > 0)
                    .then_some((first_el, batch.sd_elements.len() as u32)),
                fields: (first_field, first_field + keys as u32),
                tag: opt(r),
                // Index 7 is past the table: no address, like NO_PEER.
                peer: r.pick(&[Event::NO_PEER, 0, 1, 2, 7]),
                flags: Flags(r.below(8) as u8),
            };
            batch.events.push(event);
        }
        batch
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 2000,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Every path of the encoder (short fields and pairs in one window, the 16-byte steps,
        /// escapes, repeats merged) writes exactly what the plain reference writes.
        #[test]
        fn json_matches_the_reference(seed in 1u64..) {
            let batch = random_batch(&mut Rng(seed));
            let mut out = b"prefix".to_vec();
            let mut want = out.clone();
            for e in &batch.events {
                encode_json(&batch, e, &mut out);
                want.extend(reference_json(&batch, e));
            }
            proptest::prop_assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want)
            );
            proptest::prop_assert_eq!(out, want);
        }
    }

    #[test]
    fn ipv4_matches_std() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.0.0.255",
            "192.0.2.1",
            "255.255.255.255",
            "9.99.100.0",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            let mut out = Vec::new();
            write_ip(ip, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    #[test]
    fn pri_table_matches_names() {
        for pri in 0..192u8 {
            let (text, len) = &PRI_FIELDS[usize::from(pri)];
            let want = format!(
                "\",\"facility\":\"{}\",\"severity\":\"{}",
                facility_name(pri >> 3).unwrap(),
                severity_name(pri & 7).unwrap()
            );
            assert_eq!(&text[..usize::from(*len)], want.as_bytes());
        }
    }

    #[test]
    fn replaces_invalid_utf8() {
        assert_eq!(esc(b"fond\xfc x\n"), "fond\u{FFFD} x\\n");
        assert_eq!(esc(b"\xff\xfe"), "\u{FFFD}\u{FFFD}");
        assert_eq!(esc(b"ok\xe2\x82"), "ok\u{FFFD}");
    }

    #[test]
    fn sd_escapes_are_resolved_but_others_kept() {
        let mut out = Vec::new();
        let v = br#"a\"b\\c\]d\ne\"#;
        let pos = sd_value_escaped(&mut out, 0, v, v.len());
        out.truncate(pos);
        assert_eq!(String::from_utf8(out).unwrap(), r#"a\"b\\c]d\\ne\\"#);
    }

    #[test]
    fn ints_floats_and_ips() {
        let b = EventBatch::new(bytes::Bytes::new(), "s".into(), "t");
        let mut out = Vec::new();
        for v in [
            Value::Int(i64::MIN),
            Value::Float(1.5),
            Value::Float(f64::NAN),
        ] {
            let start = out.len();
            let pos = value(&mut out, start, Src::of(&b), v, 0);
            out.truncate(pos);
            out.push(b' ');
        }
        write_ip("10.0.0.255".parse().unwrap(), &mut out);
        out.push(b' ');
        write_ip("::1".parse().unwrap(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-9223372036854775808 1.5 null 10.0.0.255 ::1"
        );
    }
}
