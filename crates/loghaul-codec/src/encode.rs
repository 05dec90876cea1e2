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

use loghaul_core::names::{facility_name, severity_name};
use loghaul_core::{Event, EventBatch, Flags, SdElement, SdParam, Span, Timestamp, Value};

const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// Append one JSON object and `\n` for `event` of `batch` to `out`.
pub fn encode_json(batch: &EventBatch, event: &Event, out: &mut Vec<u8>) {
    // One reservation covers the fixed parts and typical fields, so the many small appends
    // below rarely reallocate.
    out.reserve(256 + event.message.len());
    out.extend_from_slice(b"{\"timestamp\":\"");
    write_rfc3339(event.timestamp.unwrap_or(event.received), out);
    out.push(b'"');
    str_field(batch, out, b",\"hostname\":\"", event.hostname);
    str_field(batch, out, b",\"appname\":\"", event.appname);
    str_field(batch, out, b",\"procid\":\"", event.procid);
    str_field(batch, out, b",\"msgid\":\"", event.msgid);
    if let Some(name) = event.facility.and_then(facility_name) {
        out.extend_from_slice(b",\"facility\":\"");
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
    }
    if let Some(name) = event.severity.and_then(severity_name) {
        out.extend_from_slice(b",\"severity\":\"");
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
    }
    if let Some(v) = event.version {
        out.extend_from_slice(b",\"version\":");
        write_u64(u64::from(v), out);
    }
    if event.structured_data.is_some() {
        out.extend_from_slice(b",\"structured_data\":");
        write_structured_data(batch, batch.sd_elements_of(event), out);
    }
    out.extend_from_slice(b",\"message\":\"");
    escape_json(batch.str(event.message), out);
    out.push(b'"');
    if let Some(ip) = event.source_ip {
        out.extend_from_slice(b",\"source_ip\":\"");
        write_ip(ip, out);
        out.push(b'"');
    }
    out.extend_from_slice(b",\"source_type\":\"");
    escape_json(batch.source_type.as_bytes(), out);
    out.push(b'"');
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

/// Append `s` as the inside of a JSON string (no quotes), replacing invalid UTF-8 with U+FFFD.
pub fn escape_json(s: &[u8], out: &mut Vec<u8>) {
    // ASCII fast path: most log text never leaves it. Eight bytes are checked at a time and
    // runs of safe bytes are copied in one go.
    let mut run = 0;
    let mut i = 0;
    while i < s.len() {
        while let Some(chunk) = s[i..].first_chunk::<8>() {
            let m = special_bytes(u64::from_le_bytes(*chunk));
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        let rest = s.len() - i;
        if rest == 0 {
            break;
        }
        if rest < 8 && s.len() >= 8 {
            // The tail gets the same word check: load the last eight bytes, shift out the ones
            // already handled and fill with safe bytes. Short fields are mostly tail.
            let w = u64::from_le_bytes(
                s[s.len() - 8..]
                    .first_chunk::<8>()
                    .copied()
                    .unwrap_or([0; 8]),
            );
            let sh = 8 * (8 - rest) as u32;
            let m = special_bytes(w >> sh | (LO * u64::from(b'a')) << (64 - sh));
            if m == 0 {
                break;
            }
            i += (m.trailing_zeros() / 8) as usize;
        }
        let Some(&b) = s.get(i) else { break };
        match CLASS[b as usize] {
            0 => i += 1,
            1 => {
                out.extend_from_slice(&s[run..i]);
                escape_byte(b, out);
                i += 1;
                run = i;
            }
            _ => {
                out.extend_from_slice(&s[run..i]);
                escape_non_ascii(&s[i..], out);
                return;
            }
        }
    }
    out.extend_from_slice(&s[run..]);
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
        out.extend_from_slice(b"\":");
        let later = &params[k + 1..];
        if !later.iter().any(|q| batch.str(q.name) == name) {
            out.push(b'"');
            escape_sd_value(batch.str(p.value), p.escaped, out);
            out.push(b'"');
            continue;
        }
        out.push(b'[');
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

fn write_ip(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 15];
            let mut n = 0;
            for (k, octet) in v4.octets().into_iter().enumerate() {
                if k > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if octet >= 100 {
                    buf[n] = b'0' + octet / 100;
                    n += 1;
                }
                if octet >= 10 {
                    buf[n] = b'0' + octet / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + octet % 10;
                n += 1;
            }
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
