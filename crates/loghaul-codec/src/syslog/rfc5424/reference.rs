//! The RFC 5424 parser as it was before the fast paths, kept verbatim as the oracle the
//! differential tests in `super::tests` hold the current one to: same result, same event, same
//! structured-data rows, for any input, in both modes.

use loghaul_core::{Event, SdElement, SdParam, Span};

use crate::syslog::{Clock, Fail, Pri, SdOut, parse_pri, set_pri};
use crate::time::parse_rfc3339;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a frame starts `<PRI>VERSION SP` (1..3 digits, then a space): the RFC 5424 marker.
pub(super) fn looks_like(b: &[u8]) -> bool {
    let Some((&b'<', rest)) = b.split_first() else {
        return false;
    };
    // `>` within the next five bytes (PRI has at most three digits; more is not RFC 5424 anyway).
    let mut gt = 0;
    loop {
        match rest.get(gt) {
            Some(b'>') => break,
            Some(_) if gt < 4 => gt += 1,
            _ => return false,
        }
    }
    let rest = rest.get(gt + 1..).unwrap_or_default();
    // RFC 3164 lines fail here, on the first byte after the PRI.
    if !rest.first().is_some_and(u8::is_ascii_digit) {
        return false;
    }
    let digits = rest
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    (1..=3).contains(&digits) && rest.get(digits) == Some(&b' ')
}

/// The bytes from `pos` to the next SP (or the end): (start, end).
#[inline]
fn token(buf: &[u8], pos: usize) -> (usize, usize) {
    (
        pos,
        position(buf, pos, |c| c == b' ')
            .unwrap_or(buf.len())
            .max(pos),
    )
}

/// A header field: NILVALUE or 1..max PRINTUSASCII, followed by SP. Returns the field and the
/// position after the SP.
#[inline(always)]
fn field(buf: &[u8], pos: usize, max: usize, strict: bool) -> Result<(Option<Span>, usize), Fail> {
    let (s, e) = token(buf, pos);
    if e == s || buf.get(e) != Some(&b' ') {
        return Err(Fail::Other);
    }
    if strict && (e - s > max || !buf[s..e].iter().all(|c| (33..=126).contains(c))) {
        return Err(Fail::Other);
    }
    let value = if e - s == 1 && buf[s] == b'-' {
        None
    } else {
        Some(Span::new(s, e))
    };
    Ok((value, e + 1))
}

pub(super) fn parse(
    buf: &[u8],
    start: usize,
    strict: bool,
    clock: Clock,
    sd: &mut SdOut<'_>,
    event: &mut Event,
) -> Result<(), Fail> {
    let mut pos = match parse_pri(buf, start, strict) {
        Pri::Ok(prival, next) => {
            set_pri(event, prival);
            next
        }
        Pri::Missing => return Err(Fail::Other),
        Pri::Invalid => return Err(Fail::BadPri),
    };

    // VERSION = NONZERO-DIGIT 0*2DIGIT
    let (vs, ve) = token(buf, pos);
    let version = &buf[vs..ve];
    if version.is_empty()
        || version.len() > 3
        || !version.iter().all(u8::is_ascii_digit)
        || version[0] == b'0'
        || buf.get(ve) != Some(&b' ')
    {
        return Err(Fail::Other);
    }
    event.version = Some(
        version
            .iter()
            .fold(0u32, |v, c| v * 10 + u32::from(c - b'0'))
            .min(255) as u8,
    );
    pos = ve + 1;

    let (ts, next) = field(buf, pos, usize::MAX, false)?;
    if let Some(span) = ts {
        match parse_rfc3339(&buf[span.start as usize..span.end as usize], strict) {
            Some(civil) => {
                // Lenient readings may lack an offset; they are in the configured zone.
                let year = civil.year.unwrap_or(clock.year);
                event.timestamp = civil.to_timestamp(year, clock.offset);
            }
            None if strict => return Err(Fail::Other),
            // An unusable timestamp costs only the timestamp: the decoder uses the receive time.
            None => {}
        }
    }
    pos = next;
    // Each field is stored as soon as it is read: the differential test compares what a failed
    // parse leaves behind too.
    let mut span;
    (span, pos) = field(buf, pos, 255, strict)?;
    event.hostname = span.into();
    (span, pos) = field(buf, pos, 48, strict)?;
    event.appname = span.into();
    (span, pos) = field(buf, pos, 128, strict)?;
    event.procid = span.into();
    (span, pos) = field(buf, pos, 32, strict)?;
    event.msgid = span.into();

    match buf.get(pos) {
        Some(b'-') => pos += 1,
        Some(b'[') => {
            let first = sd.elements.len();
            let marks = (sd.elements.len(), sd.params.len());
            match structured_data(buf, pos, strict, sd) {
                Ok(next) => {
                    pos = next;
                    event.structured_data = Some((first as u32, sd.elements.len() as u32));
                }
                Err(fail) if strict => return Err(fail),
                Err(_) => {
                    // Keep the text: from the bracket on, it all becomes the message.
                    sd.elements.truncate(marks.0);
                    sd.params.truncate(marks.1);
                    event.message = Span::new(pos, buf.len()).into();
                    return Ok(());
                }
            }
        }
        _ if strict => return Err(Fail::Other),
        None => {}
        Some(_) => {
            event.message = Span::new(pos, buf.len()).into();
            return Ok(());
        }
    }

    // Exactly one SP separates SD from MSG; a second one belongs to MSG.
    let mut msg = match buf.get(pos) {
        None => buf.len(),
        Some(b' ') => pos + 1,
        Some(_) if strict => return Err(Fail::Other),
        Some(_) => pos,
    };
    if buf[msg..].starts_with(BOM) {
        msg += BOM.len();
    }
    event.message = Span::new(msg, buf.len()).into();
    Ok(())
}

/// An SD-NAME (SD-ID or PARAM-NAME) at `pos`: 1..32 PRINTUSASCII except `=`, SP, `]`, `"`.
/// Lenient mode takes any other byte and any length.
#[inline]
fn sd_name(buf: &[u8], pos: usize, strict: bool) -> Result<usize, Fail> {
    let end = position(buf, pos, |c| {
        matches!(c, b'=' | b' ' | b']' | b'"') || (strict && !(33..=126).contains(&c))
    });
    let len = end.unwrap_or(buf.len()).saturating_sub(pos);
    if len == 0 || (strict && len > 32) {
        return Err(Fail::Other);
    }
    Ok(pos + len)
}

/// One or more SD-ELEMENTs starting at the `[` at `pos`; returns the position after the last `]`.
fn structured_data(
    buf: &[u8],
    mut pos: usize,
    strict: bool,
    sd: &mut SdOut<'_>,
) -> Result<usize, Fail> {
    let first = sd.elements.len();
    while buf.get(pos) == Some(&b'[') {
        let id_end = sd_name(buf, pos + 1, strict)?;
        let id = Span::new(pos + 1, id_end);
        if strict {
            let name = &buf[pos + 1..id_end];
            let seen = sd.elements[first..]
                .iter()
                .any(|e| &buf[e.id.start as usize..e.id.end as usize] == name);
            if seen {
                // RFC 5424 §6.3.2: the same SD-ID MUST NOT exist more than once.
                return Err(Fail::Other);
            }
        }
        pos = id_end;
        let params_start = sd.params.len();
        loop {
            match buf.get(pos) {
                Some(b']') => {
                    pos += 1;
                    break;
                }
                Some(b' ') => {
                    pos += 1;
                    if !strict {
                        while buf.get(pos) == Some(&b' ') {
                            pos += 1;
                        }
                        if buf.get(pos) == Some(&b']') {
                            continue;
                        }
                    }
                    pos = sd_param(buf, pos, strict, sd)?;
                }
                _ => return Err(Fail::Other),
            }
        }
        sd.elements.push(SdElement {
            id,
            params: (params_start as u32, sd.params.len() as u32),
        });
    }
    Ok(pos)
}

/// PARAM-NAME "=" %d34 PARAM-VALUE %d34 at `pos`; returns the position after the closing quote.
#[inline(always)]
fn sd_param(buf: &[u8], pos: usize, strict: bool, sd: &mut SdOut<'_>) -> Result<usize, Fail> {
    let name_end = sd_name(buf, pos, strict)?;
    let name = Span::new(pos, name_end);
    let mut i = name_end;
    if !strict {
        // syslog_loose and rsyslog accept `name = "value"`.
        while buf.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if buf.get(i) != Some(&b'=') {
        return Err(Fail::Other);
    }
    i += 1;
    if !strict {
        while buf.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if buf.get(i) != Some(&b'"') {
        return Err(Fail::Other);
    }
    let value_start = i + 1;
    let mut j = value_start;
    let mut escaped = false;
    loop {
        let k = position(buf, j, |c| matches!(c, b'"' | b'\\' | b']')).ok_or(Fail::Other)?;
        match buf[k] {
            b'"' => {
                j = k;
                break;
            }
            b'\\' => {
                // `\"`, `\\`, `\]` are escapes; any other pair is kept as written (§6.3.3).
                escaped = true;
                j = k + 2;
                if j > buf.len() {
                    return Err(Fail::Other);
                }
            }
            // An unescaped `]` inside a value: §6.3.3 says it MUST be escaped.
            _ if strict => return Err(Fail::Other),
            _ => j = k + 1,
        }
    }
    sd.params.push(SdParam {
        name,
        value: Span::new(value_start, j),
        escaped,
    });
    Ok(j + 1)
}

/// The first byte at or after `from` that `hit` accepts, one byte at a time: the oracle keeps
/// its own scan, so that it does not share the parser's.
fn position(buf: &[u8], from: usize, hit: impl Fn(u8) -> bool) -> Option<usize> {
    buf.get(from..)?
        .iter()
        .position(|&c| hit(c))
        .map(|k| from + k)
}
