//! RFC 3164 (BSD syslog) parser, lenient the way rsyslog and Vector are.
//!
//! ```text
//! <34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick
//! PRI TIMESTAMP       HOSTNAME  TAG[PID]: MSG (one SP after the colon is dropped)
//!
//! also read:  <14>2003-10-11T22:14:15.003Z host app: msg        ISO timestamp
//!             <175>Oct 16 2009 23:47:31 host tag[1234] msg      year after the day, colon-less tag
//!             <189>643: *Jan  8 19:46:03.295: %LINK-5: msg      Cisco IOS counter, '*', millis
//!             <189>269614: host: Apr 11 10:02:08: %LINK-5: msg  Cisco IOS with hostname
//!             <133>Jan 13 16:33:35 haproxy[73411]: msg          no hostname
//!             <132> Apr  4 10:11:12  router1  kernel: msg       SP after the PRI, doubled SPs
//!             hello                                             no PRI: user.notice, received time
//! ```
//!
//! Hostname versus tag is decided as rsyslog does: after the timestamp, a word that ends in `:`
//! or contains `[` is the tag (the sender omitted its hostname); otherwise it is the hostname and
//! the next word is the tag, with or without a colon. Without a timestamp there is no hostname,
//! and only a word that clearly is a tag (`tag:` / `tag[pid]`) is taken as one.
//!
//! Strict mode rejects what RFC 3164 does not describe: a missing or bad PRI, and a TIMESTAMP
//! that is not exactly `Mmm dd hh:mm:ss` followed by SP HOSTNAME.

use loghaul_core::{Event, OptSpan, Span, Timestamp};

use super::{Clock, Fail, Pri, parse_pri, set_pri};
use crate::scan::{find, find_byte};
use crate::time::{Civil, NANOS_PER_SEC, SECS_PER_DAY, parse_bsd, parse_rfc3339};

/// A timestamp found in the frame: the instant (None when the reading is not a real date) and the
/// position after it and its separator.
struct Found {
    ts: Option<Timestamp>,
    next: usize,
}

pub(crate) fn parse(
    buf: &[u8],
    start: usize,
    strict: bool,
    clock: Clock,
    event: &mut Event,
) -> Result<(), Fail> {
    let mut pos = match parse_pri(buf, start, strict) {
        Pri::Ok(prival, next) => {
            set_pri(event, prival);
            next
        }
        // RFC 3164 §4.3.3: a relay that sees no PRI uses 13 (user.notice).
        Pri::Missing if !strict => {
            set_pri(event, 13);
            start
        }
        Pri::Missing => return Err(Fail::Other),
        Pri::Invalid => return Err(Fail::BadPri),
    };

    let mut hostname = None;
    let mut found = None;
    // Some network devices put a space after the PRI (`<132> Apr  4 ...`); rsyslog and
    // syslog-ng read the timestamp after it.
    let after_pri = if strict {
        pos
    } else {
        let mut p = pos;
        while buf.get(p) == Some(&b' ') {
            p += 1;
        }
        p
    };
    if !strict && let Some((f, host)) = cisco(buf, after_pri, clock) {
        found = Some(f);
        hostname = host;
    }
    if found.is_none() {
        found = timestamp_at(buf, after_pri, strict, clock);
    }
    let had_timestamp = found.is_some();
    match found {
        Some(f) => {
            event.timestamp = f.ts;
            pos = f.next;
        }
        None if strict => return Err(Fail::Other),
        None => {}
    }
    if !strict {
        while buf.get(pos) == Some(&b' ') {
            pos += 1;
        }
    } else if pos >= buf.len() {
        // RFC 3164 §4.1.2: HOSTNAME follows the TIMESTAMP.
        return Err(Fail::Other);
    }

    if hostname.is_some() {
        pos = tag(buf, pos, true, event);
    } else if had_timestamp {
        let word_end = word_end(buf, pos);
        let word = &buf[pos..word_end];
        if word.last() == Some(&b':') || find_byte(word, 0, b'[').is_some() {
            pos = tag(buf, pos, true, event);
        } else {
            if word_end > pos {
                hostname = Some(Span::new(pos, word_end));
            }
            pos = word_end;
            // One SP before the tag; lenient mode takes the doubled ones some devices send.
            if buf.get(pos) == Some(&b' ') {
                pos += 1;
            }
            while !strict && buf.get(pos) == Some(&b' ') {
                pos += 1;
            }
            pos = tag(buf, pos, true, event);
        }
    } else {
        pos = tag(buf, pos, false, event);
    }
    event.hostname = hostname.into();
    event.message = Span::new(pos, buf.len()).into();
    Ok(())
}

#[inline]
fn word_end(buf: &[u8], pos: usize) -> usize {
    find_byte(buf, pos, b' ').unwrap_or(buf.len()).max(pos)
}

/// TAG at `pos` (`tag[pid]:`, `tag[pid]`, `tag:` and, when `bare`, a colon-less `tag`); sets
/// appname/procid and returns where MSG starts (one SP after the tag dropped). Without a tag,
/// returns `pos` so everything is message.
fn tag(buf: &[u8], pos: usize, bare: bool, event: &mut Event) -> usize {
    let name_end =
        find(buf, pos, |v| v.eq(b' ').or(v.eq(b'[')).or(v.eq(b':'))).unwrap_or(buf.len());
    if name_end <= pos {
        return pos;
    }
    let mut msg = match buf.get(name_end) {
        Some(b':') => {
            // Without a timestamp, only `word: ` (or `word:` at the end) is clearly a tag;
            // `http://x` is not.
            if !bare && !matches!(buf.get(name_end + 1), None | Some(b' ')) {
                return pos;
            }
            name_end + 1
        }
        Some(b'[') => {
            let inner = &buf[name_end + 1..];
            match inner.iter().position(|&c| c == b']' || c == b' ') {
                Some(close) if inner[close] == b']' => {
                    if close > 0 {
                        event.procid = OptSpan::some(Span::new(name_end + 1, name_end + 1 + close));
                    }
                    let after = name_end + 2 + close;
                    if buf.get(after) == Some(&b':') {
                        after + 1
                    } else {
                        after
                    }
                }
                // `tag[` without `]` before the next space: not a tag we can split.
                _ if bare => {
                    let end = word_end(buf, pos);
                    event.appname = OptSpan::some(Span::new(pos, end));
                    return if buf.get(end) == Some(&b' ') {
                        end + 1
                    } else {
                        end
                    };
                }
                _ => return pos,
            }
        }
        _ if bare => name_end,
        _ => return pos,
    };
    event.appname = OptSpan::some(Span::new(pos, name_end));
    if buf.get(msg) == Some(&b' ') {
        msg += 1;
    }
    msg
}

/// A timestamp at `pos` followed by SP or the end. Lenient mode also takes ISO 8601 / RFC 3339,
/// a leading `*` or `.` (Cisco: clock not synchronised / was synchronised) and a trailing `:`.
fn timestamp_at(buf: &[u8], pos: usize, strict: bool, clock: Clock) -> Option<Found> {
    let mut p = pos;
    if !strict && matches!(buf.get(p), Some(b'*' | b'.')) {
        p += 1;
    }
    let rest = &buf[p..];
    let (civil, len) = match parse_bsd(rest, strict) {
        Some(found) => found,
        None if strict => return None,
        None => {
            // ISO: the token up to SP (minus a Cisco-style trailing colon).
            if !rest.first().is_some_and(u8::is_ascii_digit) {
                return None;
            }
            let mut end = rest.iter().position(|&c| c == b' ').unwrap_or(rest.len());
            let token_len = end;
            if rest[..end].last() == Some(&b':') {
                end -= 1;
            }
            (parse_rfc3339(&rest[..end], false)?, token_len)
        }
    };
    let mut next = p + len;
    if !strict && buf.get(next) == Some(&b':') {
        next += 1;
    }
    match buf.get(next) {
        None => {}
        Some(b' ') => next += 1,
        Some(_) => return None,
    }
    Some(Found {
        ts: resolve(civil, clock),
        next,
    })
}

/// The instant of a reading. A year-less reading takes the receive year, or the year before when
/// that would put it more than a day after the receive time (a December event read in January).
fn resolve(civil: Civil, clock: Clock) -> Option<Timestamp> {
    if let Some(year) = civil.year {
        return civil.to_timestamp(year, clock.offset);
    }
    let ts = civil.to_timestamp(clock.year, clock.offset);
    let limit = clock
        .received
        .nanos
        .saturating_add(SECS_PER_DAY * NANOS_PER_SEC);
    match ts {
        Some(t) if t.nanos > limit => civil.to_timestamp(clock.year - 1, clock.offset),
        // Feb 29 read in a common year: it was last year's only if last year was leap.
        None => civil.to_timestamp(clock.year - 1, clock.offset),
        t => t,
    }
}

/// Cisco IOS: `NNN: ` message counter, then an optional `hostname: `, then the timestamp.
/// Returns the timestamp and the hostname; `None` if the frame does not have that shape.
fn cisco(buf: &[u8], pos: usize, clock: Clock) -> Option<(Found, Option<Span>)> {
    let digits = buf[pos..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0
        || buf.get(pos + digits) != Some(&b':')
        || buf.get(pos + digits + 1) != Some(&b' ')
    {
        return None;
    }
    let p = pos + digits + 2;
    if let Some(found) = timestamp_at(buf, p, false, clock) {
        return Some((found, None));
    }
    let end = word_end(buf, p);
    if end > p + 1 && buf[end - 1] == b':' && buf.get(end) == Some(&b' ') {
        let found = timestamp_at(buf, end + 1, false, clock)?;
        return Some((found, Some(Span::new(p, end - 1))));
    }
    None
}
