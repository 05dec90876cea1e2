//! RFC 5424 parser: header fields, structured data and MSG as spans into the arena.
//!
//! ```text
//! SYSLOG-MSG = HEADER SP STRUCTURED-DATA [SP MSG]
//! HEADER     = PRI VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID
//! SD-ELEMENT = "[" SD-ID *(SP PARAM-NAME "=" %d34 PARAM-VALUE %d34) "]"
//! ```
//!
//! Strict mode enforces the ABNF and the prose rules (field lengths, PRINTUSASCII, no leading
//! zeros in PRI, at most 6 fraction digits, valid dates, unique SD-IDs, escaped `]` in values).
//! Lenient mode keeps what real senders do: an unparseable TIMESTAMP falls back to the receive
//! time, spaces around `=` in SD, over-long fields, and SD that does not parse is kept as message
//! text rather than lost. Values keep their escapes (`SdParam::escaped` says so).
//!
//! The shapes nearly every sender writes take fast paths: `<PRI>1 ` read in one go, a `...Z`
//! timestamp read where it stands (its date converted once per minute), `- ` fields without a
//! scan, and `name="value"` params. Anything else goes the general way (`#[cold]`, out of line,
//! so the fast paths keep the registers), which has the last word. The parser as it was before
//! the fast paths is kept as a test oracle (`rfc5424/reference.rs`), and generated frames must
//! get the same result, event and SD rows from both, in both modes.

use loghaul_core::{Event, OptSpan, SdElement, SdParam, Span};

use super::{Clock, Fail, Pri, SdOut, parse_pri, set_pri};
use crate::scan::{find, find_byte, name_end, strict_name_end};
use crate::time::{digit_of, parse_rfc3339, rfc3339_utc_prefix};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether a frame starts `<PRI>VERSION SP` (1..3 digits, then a space): the RFC 5424 marker.
#[inline]
pub(crate) fn looks_like(b: &[u8]) -> bool {
    // `>` within the next five bytes (PRI has at most three digits; more is not RFC 5424 anyway).
    // Fixed-length patterns: no loop and one length test each.
    let rest = match b {
        [b'<', b'>', rest @ ..]
        | [b'<', _, b'>', rest @ ..]
        | [b'<', _, _, b'>', rest @ ..]
        | [b'<', _, _, _, b'>', rest @ ..]
        | [b'<', _, _, _, _, b'>', rest @ ..] => rest,
        _ => return false,
    };
    // RFC 3164 lines fail here, on the first byte after the PRI. Then the first pattern with
    // its SP in place decides: an earlier SP would have been a non-digit in a later one.
    let d = u8::is_ascii_digit;
    match rest {
        [v, tail @ ..] if d(v) => match tail {
            [b' ', ..] => true,
            [w, b' ', ..] => d(w),
            [w, x, b' ', ..] => d(w) && d(x),
            _ => false,
        },
        _ => false,
    }
}

/// The bytes from `pos` to the next SP (or the end): (start, end).
#[inline]
fn token(buf: &[u8], pos: usize) -> (usize, usize) {
    (pos, find_byte(buf, pos, b' ').unwrap_or(buf.len()).max(pos))
}

/// A header field: NILVALUE or 1..max PRINTUSASCII, followed by SP. Returns the field and the
/// position after the SP.
#[inline(always)]
fn field(buf: &[u8], pos: usize, max: usize, strict: bool) -> Result<(OptSpan, usize), Fail> {
    // NILVALUE (the usual PROCID and MSGID) needs no scan, and is then the only way to have one.
    if let Some([b'-', b' ', ..]) = buf.get(pos..) {
        return Ok((OptSpan::NONE, pos + 2));
    }
    // No SP at all, like an empty field, is an error: the header is cut short.
    let end = find_byte(buf, pos, b' ').ok_or(Fail::Other)?;
    if end == pos {
        return Err(Fail::Other);
    }
    if strict
        && !buf
            .get(pos..end)
            .is_some_and(|text| text.len() <= max && text.iter().all(|c| (33..=126).contains(c)))
    {
        return Err(Fail::Other);
    }
    Ok((OptSpan::some(Span::new(pos, end)), end + 1))
}

/// `<PRI>VERSION SP` in the shape nearly every sender uses, a one-digit VERSION and a PRI both
/// modes accept (no leading zero, at most 191), read in one go: (PRIVAL, VERSION, position after
/// the SP). `None` leaves the frame to [`pri_version`], which has the last word.
#[inline(always)]
fn pri_version_fast(buf: &[u8], start: usize) -> Option<(u8, u8, usize)> {
    let &[b'<', p1, p2, p3, p4, p5, p6] = buf.get(start..)?.first_chunk::<7>()? else {
        return None;
    };
    let first = digit_of(p1)?;
    let (prival, version, sp, len) = if p2 == b'>' {
        (first, p3, p4, 5)
    } else if p3 == b'>' {
        (first * 10 + digit_of(p2)?, p4, p5, 6)
    } else if p4 == b'>' {
        ((first * 10 + digit_of(p2)?) * 10 + digit_of(p3)?, p5, p6, 7)
    } else {
        return None;
    };
    if (first == 0 && len > 5) || prival > 191 || sp != b' ' || !(b'1'..=b'9').contains(&version) {
        return None;
    }
    Some((prival as u8, version - b'0', start + len))
}

/// `<PRI>VERSION SP` in full generality: sets PRI and VERSION and returns the position after the
/// SP. Out of line, like the other general paths, so that the fast ones keep the registers.
#[cold]
#[inline(never)]
fn pri_version(buf: &[u8], start: usize, strict: bool, event: &mut Event) -> Result<usize, Fail> {
    let pos = match parse_pri(buf, start, strict) {
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
    Ok(ve + 1)
}

pub(crate) fn parse(
    buf: &[u8],
    start: usize,
    strict: bool,
    clock: Clock,
    sd: &mut SdOut<'_>,
    event: &mut Event,
) -> Result<(), Fail> {
    let mut pos = match pri_version_fast(buf, start) {
        Some((prival, version, next)) => {
            set_pri(event, prival);
            event.version = Some(version);
            next
        }
        None => pri_version(buf, start, strict, event)?,
    };

    // A `...Z` timestamp is read where it stands; its end must then be the field's end. Anything
    // else is cut out as a field first and goes to the general parser.
    match rfc3339_utc_prefix(buf.get(pos..).unwrap_or_default(), strict) {
        Some((ts, len)) if buf.get(pos + len) == Some(&b' ') => {
            event.timestamp = ts;
            pos += len + 1;
        }
        _ => pos = timestamp(buf, pos, strict, clock, event)?,
    }
    (event.hostname, pos) = field(buf, pos, 255, strict)?;
    (event.appname, pos) = field(buf, pos, 48, strict)?;
    (event.procid, pos) = field(buf, pos, 128, strict)?;
    (event.msgid, pos) = field(buf, pos, 32, strict)?;

    match buf.get(pos) {
        Some(b'-') => pos += 1,
        Some(b'[') => {
            let first = sd.elements.len();
            let marks = (sd.elements.len(), sd.params.len());
            let parsed = if strict {
                strict_structured_data(buf, pos, sd)
            } else {
                structured_data::<false>(buf, pos, sd)
            };
            match parsed {
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

/// The TIMESTAMP field at `pos` in full generality: sets the timestamp and returns the position
/// after the SP.
#[cold]
#[inline(never)]
fn timestamp(
    buf: &[u8],
    pos: usize,
    strict: bool,
    clock: Clock,
    event: &mut Event,
) -> Result<usize, Fail> {
    let (ts, next) = field(buf, pos, usize::MAX, false)?;
    if let Some(span) = ts.get() {
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
    Ok(next)
}

/// An SD-NAME (SD-ID or PARAM-NAME) at `pos`: 1..32 PRINTUSASCII except `=`, SP, `]`, `"`.
/// Lenient mode takes any other byte and any length. Returns where the name ends.
#[inline(always)]
fn sd_name<const STRICT: bool>(buf: &[u8], pos: usize) -> Result<usize, Fail> {
    let end = if STRICT {
        find(buf, pos, strict_name_end)
    } else {
        find(buf, pos, name_end)
    }
    .unwrap_or(buf.len());
    // `end <= pos` is an empty name, or `pos` past the end.
    if end <= pos || (STRICT && end - pos > 32) {
        return Err(Fail::Other);
    }
    Ok(end)
}

/// One or more SD-ELEMENTs starting at the `[` at `pos`; returns the position after the last `]`.
///
/// The mode is a const parameter so that each mode gets its own copy of the scanning loops,
/// with no tests of the other mode's rules in them.
#[inline(always)]
fn structured_data<const STRICT: bool>(
    buf: &[u8],
    mut pos: usize,
    sd: &mut SdOut<'_>,
) -> Result<usize, Fail> {
    let first = sd.elements.len();
    while buf.get(pos) == Some(&b'[') {
        let id_end = sd_name::<STRICT>(buf, pos + 1)?;
        let id = Span::new(pos + 1, id_end);
        if STRICT {
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
                    pos = match sd_param::<STRICT>(buf, pos, sd) {
                        Ok(next) => next,
                        // Lenient mode takes more spaces, and one before the `]`. There the
                        // param had an empty name, so it failed without leaving anything.
                        Err(_) if !STRICT && matches!(buf.get(pos), Some(b' ' | b']')) => {
                            while buf.get(pos) == Some(&b' ') {
                                pos += 1;
                            }
                            if buf.get(pos) == Some(&b']') {
                                continue;
                            }
                            cold_sd_param(buf, pos, sd)?
                        }
                        Err(fail) => return Err(fail),
                    };
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

/// After a PARAM-NAME ending at `i`, `"="` and the opening quote, with the spaces lenient mode
/// allows around `=` (syslog_loose and rsyslog accept `name = "value"`): the position after the
/// quote. Out of line: senders nearly always write `name="value"`.
#[cold]
#[inline(never)]
fn spaced_value_start<const STRICT: bool>(buf: &[u8], mut i: usize) -> Result<usize, Fail> {
    if !STRICT {
        while buf.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if buf.get(i) != Some(&b'=') {
        return Err(Fail::Other);
    }
    i += 1;
    if !STRICT {
        while buf.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    if buf.get(i) != Some(&b'"') {
        return Err(Fail::Other);
    }
    Ok(i + 1)
}

/// A lenient param after extra spaces, out of line for the same reason.
#[cold]
#[inline(never)]
fn cold_sd_param(buf: &[u8], pos: usize, sd: &mut SdOut<'_>) -> Result<usize, Fail> {
    sd_param::<false>(buf, pos, sd)
}

/// Strict mode's [`structured_data`], out of line: only the default (lenient) mode's copy is
/// inlined into [`parse`], which keeps it small enough to hold its values in registers.
#[inline(never)]
fn strict_structured_data(buf: &[u8], pos: usize, sd: &mut SdOut<'_>) -> Result<usize, Fail> {
    structured_data::<true>(buf, pos, sd)
}

/// PARAM-NAME "=" %d34 PARAM-VALUE %d34 at `pos`; returns the position after the closing quote.
#[inline(always)]
fn sd_param<const STRICT: bool>(buf: &[u8], pos: usize, sd: &mut SdOut<'_>) -> Result<usize, Fail> {
    let name_end = sd_name::<STRICT>(buf, pos)?;
    let name = Span::new(pos, name_end);
    let value_start = if buf.get(name_end..name_end + 2) == Some(b"=\"") {
        name_end + 2
    } else {
        spaced_value_start::<STRICT>(buf, name_end)?
    };
    let mut j = value_start;
    let mut escaped = false;
    loop {
        // Lenient mode reads `]` in a value as text, so only strict mode stops at it.
        let k = if STRICT {
            find(buf, j, |v| v.eq(b'"').or(v.eq(b'\\')).or(v.eq(b']')))
        } else {
            find(buf, j, |v| v.eq(b'"').or(v.eq(b'\\')))
        }
        .ok_or(Fail::Other)?;
        match buf.get(k) {
            Some(b'"') => {
                j = k;
                break;
            }
            Some(b'\\') => {
                // `\"`, `\\`, `\]` are escapes; any other pair is kept as written (§6.3.3).
                escaped = true;
                j = k + 2;
                if j > buf.len() {
                    return Err(Fail::Other);
                }
            }
            // An unescaped `]` inside a value (only strict mode stops at one): §6.3.3 says it
            // MUST be escaped. Or no closing quote at all.
            _ => return Err(Fail::Other),
        }
    }
    sd.params.push(SdParam {
        name,
        value: Span::new(value_start, j),
        escaped,
    });
    Ok(j + 1)
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
