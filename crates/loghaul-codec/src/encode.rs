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
//! escaped per RFC 8259 by hand (runs of safe bytes are copied in one go), and bytes that are not
//! UTF-8 become U+FFFD, so the output is always valid UTF-8 JSON whatever the input was. SD-PARAM
//! escapes (`\"`, `\\`, `\]`) are resolved here, on output, because decoders keep bytes as sent.

use std::io::Write as _;
use std::net::IpAddr;

use loghaul_core::names::{FACILITIES, SEVERITIES, facility_name, severity_name};
use loghaul_core::{Event, EventBatch, Flags, SdElement, SdParam, Span, Timestamp, Value};

const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// Append one JSON object and `\n` for `event` of `batch` to `out`.
pub fn encode_json(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    // One reservation covers the fixed parts and typical fields, so the many small appends
    // below rarely reallocate.
    out.reserve(256 + event.message.len());
    let ts = event.timestamp.unwrap_or(event.received);
    match crate::time::rfc3339_text(ts) {
        Some((text, len)) => {
            // Key, value and closing quote as one fixed-size append (then cut to length).
            const KEY: &[u8; 14] = b"{\"timestamp\":\"";
            let mut buf = [0u8; 48];
            buf[..14].copy_from_slice(KEY);
            buf[14..44].copy_from_slice(&text);
            buf[14 + len] = b'"';
            let end = out.len() + 15 + len;
            out.extend_from_slice(&buf);
            out.truncate(end);
        }
        None => {
            out.extend_from_slice(b"{\"timestamp\":\"");
            write_rfc3339(ts, out);
            out.push(b'"');
        }
    }
    str_field(batch, out, b",\"hostname\":\"", event.hostname);
    str_field(batch, out, b",\"appname\":\"", event.appname);
    str_field(batch, out, b",\"procid\":\"", event.procid);
    str_field(batch, out, b",\"msgid\":\"", event.msgid);
    match (event.facility, event.severity) {
        // Both are present on nearly every syslog event: one precomputed append.
        (Some(f), Some(s)) if f < 24 && s < 8 => {
            let (text, len) = &PRI_FIELDS[usize::from(f) << 3 | usize::from(s)];
            // A fixed-size copy (inlined) and a cut beat a variable-size `memcpy` call.
            let end = out.len() + usize::from(*len);
            out.extend_from_slice(text);
            out.truncate(end);
        }
        (facility, severity) => {
            if let Some(name) = facility.and_then(facility_name) {
                out.extend_from_slice(b",\"facility\":\"");
                out.extend_from_slice(name.as_bytes());
                out.push(b'"');
            }
            if let Some(name) = severity.and_then(severity_name) {
                out.extend_from_slice(b",\"severity\":\"");
                out.extend_from_slice(name.as_bytes());
                out.push(b'"');
            }
        }
    }
    match event.version {
        Some(1) => out.extend_from_slice(b",\"version\":1"),
        Some(v) => {
            out.extend_from_slice(b",\"version\":");
            write_u64(u64::from(v), out);
        }
        None => {}
    }
    if event.structured_data.is_some() {
        out.extend_from_slice(b",\"structured_data\":");
        write_structured_data(batch, batch.sd_elements_of(event), out);
    }
    out.extend_from_slice(b",\"message\":\"");
    escape_json(batch.str(event.message), out);
    out.push(b'"');
    match event.source_ip {
        Some(IpAddr::V4(v4)) => {
            // Key, address and closing quote as one fixed-size append (then cut to length).
            const KEY: &[u8; 14] = b",\"source_ip\":\"";
            let mut buf = [0u8; 32];
            buf[..14].copy_from_slice(KEY);
            let n = 14 + write_ipv4(v4, &mut buf[14..]);
            buf[n] = b'"';
            let end = out.len() + n + 1;
            out.extend_from_slice(&buf);
            out.truncate(end);
        }
        Some(ip) => {
            out.extend_from_slice(b",\"source_ip\":\"");
            write_ip(ip, out);
            out.push(b'"');
        }
        None => {}
    }
    if batch.source_type == "syslog" {
        // The usual value, as one constant append.
        out.extend_from_slice(b",\"source_type\":\"syslog\"");
    } else {
        out.extend_from_slice(b",\"source_type\":\"");
        escape_json(batch.source_type.as_bytes(), out);
        out.push(b'"');
    }
    for field in batch.fields_of(event) {
        out.extend_from_slice(b",\"");
        escape_json(batch.str(field.name), out);
        out.extend_from_slice(b"\":");
        write_value(batch, field.value, out);
    }
    if !event.flags.is_empty() {
        out.extend_from_slice(b",\"flags\":[");
        let mut sep = false;
        for (flag, name) in [
            (Flags::PARSE_ERROR, &b"\"parse_error\""[..]),
            (Flags::TRUNCATED, b"\"truncated\""),
            (Flags::INVALID_UTF8, b"\"invalid_utf8\""),
        ] {
            if event.flags.contains(flag) {
                if sep {
                    out.push(b',');
                }
                out.extend_from_slice(name);
                sep = true;
            }
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}\n");
}

/// Room for the longest `,"facility":"solaris-cron","severity":"warning"`.
const PRI_TEXT: usize = 48;

/// `,"facility":"NAME","severity":"NAME"` for each PRI value 0..=191 (facility << 3 | severity),
/// with its length.
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
        let mut n = put(buf, 0, b",\"facility\":\"");
        n = put(buf, n, FACILITIES[pri >> 3].as_bytes());
        n = put(buf, n, b"\",\"severity\":\"");
        n = put(buf, n, SEVERITIES[pri & 7].as_bytes());
        n = put(buf, n, b"\"");
        table[pri].1 = n as u8;
        pri += 1;
    }
    table
};

#[inline]
fn str_field(batch: &EventBatch, out: &mut Vec<u8>, key: &'static [u8], span: Option<Span>) {
    if let Some(span) = span {
        out.extend_from_slice(key);
        escape_json(batch.str(span), out);
        out.push(b'"');
    }
}

/// Append the message only and `\n`; bytes that are not UTF-8 become U+FFFD, as in JSON.
pub fn encode_text(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    let msg = batch.str(event.message);
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

/// What each byte needs in a JSON string: 0 copy as is, 1 escape, 2 start of a non-ASCII
/// sequence (validate before copying).
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = if i < 0x20 || i == b'"' as usize || i == b'\\' as usize {
            1
        } else if i >= 0x80 {
            2
        } else {
            0
        };
        i += 1;
    }
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `x` that is a control character, `"`, `\\` or non-ASCII. Only the
/// lowest flagged byte is exact (borrows can flag bytes above it), which is all we use.
#[inline]
fn special_bytes(x: u64) -> u64 {
    let quote = x ^ (LO * b'"' as u64);
    let backslash = x ^ (LO * b'\\' as u64);
    (x.wrapping_sub(LO * 0x20) & !x
        | quote.wrapping_sub(LO) & !quote
        | backslash.wrapping_sub(LO) & !backslash
        | x)
        & HI
}

/// The index of the first byte of `s` at or after `i` that is a control character, `"`, `\\` or
/// non-ASCII; `None` if there is none.
#[inline(always)]
fn next_special(s: &[u8], i: usize) -> Option<usize> {
    let mut rest = s.get(i..)?;
    // Eight bytes at a time; `split_first_chunk` keeps the loop free of bounds checks.
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        let m = special_bytes(u64::from_le_bytes(*chunk));
        if m != 0 {
            return Some(s.len() - rest.len() + (m.trailing_zeros() / 8) as usize);
        }
        rest = tail;
    }
    if rest.is_empty() {
        return None;
    }
    let at = s.len() - rest.len();
    match s.last_chunk::<8>() {
        // The tail gets the same word check: load the last eight bytes, shift out the ones
        // already handled and fill with safe bytes. Short fields are mostly tail.
        Some(last) => {
            let sh = 8 * (8 - rest.len()) as u32;
            let w = u64::from_le_bytes(*last);
            let m = special_bytes(w >> sh | (LO * u64::from(b'a')) << (64 - sh));
            (m != 0).then(|| at + (m.trailing_zeros() / 8) as usize)
        }
        // Shorter than a word: two overlapping halves cover four to seven bytes in one word
        // check; only a string with a special byte (or of one to three bytes) is walked.
        None => {
            if let (Some(a), Some(b)) = (rest.first_chunk::<4>(), rest.last_chunk::<4>()) {
                let w = u64::from(u32::from_le_bytes(*a)) | u64::from(u32::from_le_bytes(*b)) << 32;
                if special_bytes(w) == 0 {
                    return None;
                }
            }
            rest.iter()
                .position(|&b| CLASS[b as usize] != 0)
                .map(|k| at + k)
        }
    }
}

/// Append `s` as the inside of a JSON string (no quotes), replacing invalid UTF-8 with U+FFFD.
#[inline]
pub fn escape_json(s: &[u8], out: &mut Vec<u8>) {
    // ASCII fast path: most log text never leaves it. Eight bytes are checked at a time and a
    // string without special bytes is copied in one go, without a call.
    match next_special(s, 0) {
        None => out.extend_from_slice(s),
        Some(first) => escape_from(s, first, out),
    }
}

/// `escape_json` from the first special byte at `first` on.
#[inline(never)]
fn escape_from(s: &[u8], first: usize, out: &mut Vec<u8>) {
    let mut run = 0;
    let mut next = Some(first);
    while let Some(i) = next {
        let (Some(done), Some(&b)) = (s.get(run..i), s.get(i)) else {
            break;
        };
        out.extend_from_slice(done);
        if b >= 0x80 {
            escape_non_ascii(s.get(i..).unwrap_or_default(), out);
            return;
        }
        escape_byte(b, out);
        run = i + 1;
        next = next_special(s, run);
    }
    out.extend_from_slice(s.get(run..).unwrap_or_default());
}

#[cold]
fn escape_non_ascii(s: &[u8], out: &mut Vec<u8>) {
    for chunk in s.utf8_chunks() {
        // Valid UTF-8 multi-byte sequences never contain bytes below 0x80, so only the ASCII
        // bytes between them need escaping.
        let valid = chunk.valid().as_bytes();
        let mut run = 0;
        for (i, &b) in valid.iter().enumerate() {
            if CLASS[b as usize] == 1 {
                out.extend_from_slice(&valid[run..i]);
                escape_byte(b, out);
                run = i + 1;
            }
        }
        out.extend_from_slice(&valid[run..]);
        if !chunk.invalid().is_empty() {
            out.extend_from_slice(REPLACEMENT);
        }
    }
}

#[inline]
fn escape_byte(b: u8, out: &mut Vec<u8>) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[(b >> 4) as usize],
            HEX[(b & 15) as usize],
        ]),
    }
}

/// An SD-PARAM value with its escapes resolved (§6.3.3: only `\"`, `\\` and `\]` are escapes;
/// any other backslash stays, with the byte after it).
fn escape_sd_value(v: &[u8], escaped: bool, out: &mut Vec<u8>) {
    if !escaped {
        escape_json(v, out);
        return;
    }
    let mut run = 0;
    let mut i = 0;
    while i + 1 < v.len() {
        if v[i] == b'\\' && matches!(v[i + 1], b'"' | b'\\' | b']') {
            escape_json(&v[run..i], out);
            run = i + 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    escape_json(&v[run..], out);
}

/// `{"id":{"name":"value","rep":["a","b"]}}`. Elements with the same SD-ID (lenient input) are
/// merged and repeated PARAM-NAMEs become arrays, so no value is lost and no key repeats.
fn write_structured_data(batch: &EventBatch, elements: &[SdElement], out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first_el = true;
    for (i, el) in elements.iter().enumerate() {
        let id = batch.str(el.id);
        if elements[..i].iter().any(|e| batch.str(e.id) == id) {
            continue;
        }
        if !first_el {
            out.push(b',');
        }
        first_el = false;
        out.push(b'"');
        escape_json(id, out);
        out.extend_from_slice(b"\":{");
        if !elements[i + 1..].iter().any(|e| batch.str(e.id) == id) {
            write_params(batch, batch.params_of(el), out);
            out.push(b'}');
            continue;
        }
        // Every param of every element with this id, in order.
        let same = || {
            elements[i..]
                .iter()
                .filter(move |e| batch.str(e.id) == id)
                .flat_map(|e| batch.params_of(e).iter())
        };
        let mut first_param = true;
        for (k, p) in same().enumerate() {
            let name = batch.str(p.name);
            if same().take(k).any(|q| batch.str(q.name) == name) {
                continue;
            }
            if !first_param {
                out.push(b',');
            }
            first_param = false;
            out.push(b'"');
            escape_json(name, out);
            out.extend_from_slice(b"\":");
            let count = same().skip(k).filter(|q| batch.str(q.name) == name).count();
            if count == 1 {
                out.push(b'"');
                escape_sd_value(batch.str(p.value), p.escaped, out);
                out.push(b'"');
            } else {
                out.push(b'[');
                let values = same().skip(k).filter(|q| batch.str(q.name) == name);
                for (n, q) in values.enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    out.push(b'"');
                    escape_sd_value(batch.str(q.value), q.escaped, out);
                    out.push(b'"');
                }
                out.push(b']');
            }
        }
        out.push(b'}');
    }
    out.push(b'}');
}

/// The params of one element (the common case: its SD-ID is unique in the event).
fn write_params(batch: &EventBatch, params: &[SdParam], out: &mut Vec<u8>) {
    let mut first = true;
    for (k, p) in params.iter().enumerate() {
        let name = batch.str(p.name);
        if params[..k].iter().any(|q| batch.str(q.name) == name) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.push(b'"');
        escape_json(name, out);
        let later = &params[k + 1..];
        if !later.iter().any(|q| batch.str(q.name) == name) {
            out.extend_from_slice(b"\":\"");
            escape_sd_value(batch.str(p.value), p.escaped, out);
            out.push(b'"');
            continue;
        }
        out.extend_from_slice(b"\":[");
        for (n, q) in params[k..]
            .iter()
            .filter(|q| batch.str(q.name) == name)
            .enumerate()
        {
            if n > 0 {
                out.push(b',');
            }
            out.push(b'"');
            escape_sd_value(batch.str(q.value), q.escaped, out);
            out.push(b'"');
        }
        out.push(b']');
    }
}

fn write_value(batch: &EventBatch, value: Value, out: &mut Vec<u8>) {
    match value {
        Value::Str(span) => {
            out.push(b'"');
            escape_json(batch.str(span), out);
            out.push(b'"');
        }
        Value::Int(i) => {
            if i < 0 {
                out.push(b'-');
            }
            write_u64(i.unsigned_abs(), out);
        }
        // JSON has no NaN or infinity; null is the honest rendering.
        Value::Float(f) if !f.is_finite() => out.extend_from_slice(b"null"),
        Value::Float(f) => {
            let _ = write!(out, "{f:?}");
        }
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Null => out.extend_from_slice(b"null"),
        // Producers store well-formed JSON here; an empty span would break the document.
        Value::Json(span) if span.is_empty() => out.extend_from_slice(b"null"),
        Value::Json(span) => out.extend_from_slice(batch.str(span)),
    }
}

fn write_u64(mut v: u64, out: &mut Vec<u8>) {
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
    out.extend_from_slice(&buf[i..]);
}

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

    fn esc(s: &[u8]) -> String {
        let mut out = Vec::new();
        escape_json(s, &mut out);
        String::from_utf8(out).unwrap()
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

    /// Found by the rfc3164/rfc5424 fuzz targets: a string of safe bytes whose length is a
    /// multiple of 8 ended the word loop exactly at the end, and the tail check shifted by 64.
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

    /// Every length around the word size, with a special byte (or two) at every position: the
    /// word loop, the overlapping tail word, the two-half check and the byte walk all agree.
    #[test]
    fn every_position_of_every_short_length() {
        let specials: [&[u8]; 7] = [
            b"\"",
            b"\\",
            b"\n",
            b"\x01",
            b"\x1f",
            "é".as_bytes(),
            b"\xff",
        ];
        for len in 0..26 {
            let base: Vec<u8> = (0..len).map(|k| b'a' + (k % 26) as u8).collect();
            assert_eq!(esc(&base), reference(&base));
            for at in 0..len {
                for sp in specials {
                    let mut s = base.clone();
                    s.splice(at..at + 1, sp.iter().copied());
                    assert_eq!(esc(&s), reference(&s), "{s:?}");
                    if at + 3 < s.len() {
                        s[at + 3] = b'"';
                        assert_eq!(esc(&s), reference(&s), "{s:?}");
                    }
                }
            }
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
                ",\"facility\":\"{}\",\"severity\":\"{}\"",
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
        escape_sd_value(br#"a\"b\\c\]d\ne\"#, true, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#"a\"b\\c]d\\ne\\"#);
    }

    #[test]
    fn ints_floats_and_ips() {
        let b = EventBatch::new(bytes::Bytes::new(), "s".into(), "t");
        let mut out = Vec::new();
        write_value(&b, Value::Int(i64::MIN), &mut out);
        out.push(b' ');
        write_value(&b, Value::Float(1.5), &mut out);
        out.push(b' ');
        write_value(&b, Value::Float(f64::NAN), &mut out);
        out.push(b' ');
        write_ip("10.0.0.255".parse().unwrap(), &mut out);
        out.push(b' ');
        write_ip("::1".parse().unwrap(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-9223372036854775808 1.5 null 10.0.0.255 ::1"
        );
    }
}
