//! Syslog decoders: frames in a batch arena become [`Event`]s whose string fields are spans into
//! that same arena (zero-copy; structured data goes to the batch's side tables).
//!
//! Invariants every path upholds:
//! - every frame yields exactly one event; nothing is ever dropped. A frame that cannot be parsed
//!   becomes an event whose `message` is the raw frame text, flagged `PARSE_ERROR`;
//! - every span lies inside the frame it came from (so inside the arena);
//! - bytes are never rewritten: invalid UTF-8 is flagged (`INVALID_UTF8`) and left for encoders
//!   to replace; SD-PARAM escapes are resolved by encoders, too;
//! - `timestamp` is always `Some`: the sender's time when usable, else the receive time.
//!
//! Format selection (`Format::Auto`) follows what rsyslog and Vector do on a shared port:
//!
//! ```text
//! <165>1 2003-10-11T22:14:15.003Z host app - ID47 [sd@1 a="b"] msg   <PRI> VERSION SP -> RFC 5424
//! <34>Oct 11 22:14:15 host su[12]: msg                               anything else -> RFC 3164
//! ```

mod rfc3164;
mod rfc5424;

use std::net::IpAddr;

use loghaul_core::{Event, EventBatch, Flags, SdElement, SdParam, Span, Timestamp};

use crate::framing::Frame;
use crate::time::{SECS_PER_DAY, civil_from_days};

/// Which syslog dialect frames are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// RFC 5424 when the frame starts `<PRI>VERSION SP`, RFC 3164 otherwise.
    #[default]
    Auto,
    Rfc3164,
    Rfc5424,
    /// No parsing: the whole frame is the message.
    Raw,
}

/// The zone of timestamps that carry none (BSD timestamps, ISO timestamps without offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeZone {
    #[default]
    Utc,
    /// Seconds east of UTC.
    Fixed(i32),
    /// The server's zone (`TZ`, else /etc/localtime), at the receive time: a daylight-saving
    /// change applies from the first message received after it.
    Local,
}

/// Seconds east of UTC of the server's zone at `unix_secs`.
fn local_offset_at(unix_secs: i64) -> i32 {
    use chrono::{Offset, TimeZone as _};
    // A UTC instant always maps to exactly one local time; 0 only if it is out of range.
    chrono::Local
        .timestamp_opt(unix_secs, 0)
        .single()
        .map_or(0, |t| t.offset().fix().local_minus_utc())
}

/// How a [`Decoder`] reads frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeOptions {
    pub format: Format,
    /// Reject what the RFCs reject (the event then carries the raw text and `PARSE_ERROR`).
    /// Off by default: real senders bend the RFCs and we would rather keep their fields.
    pub strict: bool,
    pub timezone: TimeZone,
}

/// Counters a source turns into metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DecodeStats {
    pub parse_errors: u64,
    pub invalid_utf8: u64,
}

/// Why a parser gave up (the decoder then emits the raw-text event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fail {
    /// `<...>` present but not a valid PRI.
    BadPri,
    Other,
}

/// What parsers need to complete zone-less and year-less timestamps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    pub received: Timestamp,
    /// Seconds east of UTC for zone-less timestamps.
    pub offset: i32,
    /// The year of `received` in that zone.
    pub year: i64,
}

/// Output tables a parser appends structured data to.
pub(crate) struct SdOut<'a> {
    pub elements: &'a mut Vec<SdElement>,
    pub params: &'a mut Vec<SdParam>,
}

/// Decodes frames into events. Holds only options and a small cache, so one per connection (or
/// per source task) is cheap.
#[derive(Debug, Clone)]
pub struct Decoder {
    opts: DecodeOptions,
    /// The local day of the last receive time and its year: BSD timestamps need the year, and
    /// computing it once per day instead of per event keeps the hot path short.
    cached_day: i64,
    cached_year: i64,
    /// For [`TimeZone::Local`]: the receive time's minute when the offset was last looked up,
    /// and that offset. Zones in use today change offset on whole minutes, so looking up once a
    /// minute misses no change.
    local_minute: i64,
    local_offset: i32,
    /// SD elements and params per 64 frames in the last batch: the next batch reserves room for
    /// as many, so its side tables are not grown (and copied) a few times on the way, and a
    /// stream without structured data reserves none.
    sd_density: (usize, usize),
}

/// The structured data per 64 frames reserved before any batch is seen: one element and two
/// params per frame, a common RFC 5424 shape.
const SD_DENSITY: (usize, usize) = (64, 128);

/// The most structured data per 64 frames reserved ahead, whatever a batch held: a batch of
/// pathological frames grows its tables like any other, but does not make later batches
/// reserve for its like.
const SD_DENSITY_MAX: usize = 64 * 16;

impl Decoder {
    pub fn new(opts: DecodeOptions) -> Decoder {
        Decoder {
            opts,
            cached_day: i64::MIN,
            cached_year: 1970,
            local_minute: i64::MIN,
            local_offset: 0,
            sd_density: SD_DENSITY,
        }
    }

    pub fn options(&self) -> DecodeOptions {
        self.opts
    }

    fn clock(&mut self, received: Timestamp) -> Clock {
        let offset = match self.opts.timezone {
            TimeZone::Utc => 0,
            TimeZone::Fixed(secs) => secs,
            TimeZone::Local => {
                let minute = received.unix_seconds().div_euclid(60);
                if minute != self.local_minute {
                    self.local_minute = minute;
                    self.local_offset = local_offset_at(received.unix_seconds());
                }
                self.local_offset
            }
        };
        let day = received
            .unix_seconds()
            .saturating_add(i64::from(offset))
            .div_euclid(SECS_PER_DAY);
        if day != self.cached_day {
            self.cached_day = day;
            self.cached_year = civil_from_days(day).0;
        }
        Clock {
            received,
            offset,
            year: self.cached_year,
        }
    }

    /// Decode `frames` (ranges into `batch.arena`) into events appended to `batch.events`, with
    /// structured data appended to `batch.sd_elements` / `batch.sd_params`. Every frame yields
    /// exactly one event; see the module docs for what happens to bad input.
    pub fn decode_batch(
        &mut self,
        batch: &mut EventBatch,
        frames: &[Frame],
        received: Timestamp,
        source_ip: Option<IpAddr>,
        stats: &mut DecodeStats,
    ) {
        let clock = self.clock(received);
        let opts = self.opts;
        batch.received = received;
        let peer = batch.peer_index(source_ip);
        let EventBatch {
            arena,
            events,
            sd_elements,
            sd_params,
            ..
        } = batch;
        let arena: &[u8] = arena;
        // One vectorised pass over every framed byte (frames are in order) usually proves the
        // whole batch ASCII, and then no frame needs its own UTF-8 check.
        let all_ascii = match (frames.first(), frames.last()) {
            (Some(first), Some(last)) => arena
                .get(first.start as usize..last.end as usize)
                .is_some_and(crate::scan::is_ascii),
            _ => true,
        };
        if opts.format == Format::Raw && all_ascii {
            // Nothing to parse: every event is the same but for its message span and flags.
            let template = Event {
                timestamp: Some(clock.received),
                peer,
                ..Event::default()
            };
            // The template is filled in first, a few vector stores per event, and then only
            // the spans and flags are written: building each event whole from the template
            // went through the stack, twice the instructions.
            let first = events.len();
            events.resize(first + frames.len(), template);
            for (event, frame) in events.iter_mut().skip(first).zip(frames) {
                let (start, end) = frame_bounds(arena, *frame);
                event.message = Span::new(start, end).into();
                if frame.truncated {
                    event.flags.insert(Flags::TRUNCATED);
                }
            }
            return;
        }
        events.reserve(frames.len());
        let marks = (sd_elements.len(), sd_params.len());
        if matches!(opts.format, Format::Auto | Format::Rfc5424) {
            // Most RFC 5424 senders send structured data: growing the side tables from empty
            // cost a dozen reallocations per batch, and more than one when reserved for the
            // wrong shape.
            let per = |density: usize| frames.len().saturating_mul(density).div_ceil(64);
            sd_elements.reserve(per(self.sd_density.0));
            sd_params.reserve(per(self.sd_density.1));
        }
        for frame in frames {
            // Decoded in place: an event is large, and moving it into the vector would cost a
            // `memcpy` call per event.
            events.push(Event::default());
            let Some(event) = events.last_mut() else {
                continue;
            };
            decode_frame(
                arena,
                *frame,
                opts,
                clock,
                peer,
                all_ascii,
                &mut SdOut {
                    elements: sd_elements,
                    params: sd_params,
                },
                stats,
                event,
            );
        }
        let added = (
            sd_elements.len().saturating_sub(marks.0),
            sd_params.len().saturating_sub(marks.1),
        );
        if !frames.is_empty() {
            let density = |n: usize| {
                n.saturating_mul(64)
                    .div_ceil(frames.len())
                    .min(SD_DENSITY_MAX)
            };
            self.sd_density = (density(added.0), density(added.1));
        }
    }
}

/// The frame's bytes without a trailing LF/CRLF/NUL, clamped to the arena: a trailer some
/// senders add even with octet counting is never part of the message, and a framing bug must
/// not become a panic.
#[inline(always)]
fn frame_bounds(arena: &[u8], frame: Frame) -> (usize, usize) {
    let end = (frame.end as usize).min(arena.len());
    let start = (frame.start as usize).min(end);
    let end = crate::scan::trim_end(arena, start, end, |c| matches!(c, b'\n' | b'\r' | b'\0'));
    (start, end)
}

/// Decode one frame into `event`, which is `Event::default()`; see the module docs for the
/// invariants.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn decode_frame(
    arena: &[u8],
    frame: Frame,
    opts: DecodeOptions,
    clock: Clock,
    peer: u16,
    ascii: bool,
    sd: &mut SdOut<'_>,
    stats: &mut DecodeStats,
    event: &mut Event,
) {
    let (start, end) = frame_bounds(arena, frame);
    let buf = &arena[..end];
    // Only the fields that differ from the default: the event is large, and writing it whole
    // again would double the cost of creating it.
    event.message = Span::new(start, end).into();
    event.peer = peer;
    if frame.truncated {
        event.flags.insert(Flags::TRUNCATED);
    }
    // Most frames are ASCII (`ascii`: the whole batch was, else checked a word at a time here);
    // only the others need the full UTF-8 validation.
    let text = &buf[start..];
    if !ascii && !crate::scan::is_ascii(text) && std::str::from_utf8(text).is_err() {
        event.flags.insert(Flags::INVALID_UTF8);
        stats.invalid_utf8 += 1;
    }
    let marks = (sd.elements.len(), sd.params.len());
    let result = match opts.format {
        Format::Raw => Ok(()),
        Format::Rfc5424 => rfc5424::parse(buf, start, opts.strict, clock, sd, event),
        Format::Rfc3164 => rfc3164::parse(buf, start, opts.strict, clock, event),
        Format::Auto if rfc5424::looks_like(&buf[start..]) => {
            rfc5424::parse(buf, start, opts.strict, clock, sd, event)
        }
        Format::Auto => rfc3164::parse(buf, start, opts.strict, clock, event),
    };
    if let Err(fail) = result {
        stats.parse_errors += 1;
        sd.elements.truncate(marks.0);
        sd.params.truncate(marks.1);
        let flags = event.flags;
        *event = Event {
            timestamp: None,
            message: Span::new(start, end).into(),
            peer,
            flags,
            ..Event::default()
        };
        event.flags.insert(Flags::PARSE_ERROR);
        if fail == Fail::BadPri && !opts.strict {
            // rsyslog's LOG_PRI_INVLD: an invalid PRI is read as severity debug (no facility),
            // so routing rules still see a severity.
            event.severity = Some(7);
        }
    }
    if event.timestamp.is_none() {
        event.timestamp = Some(clock.received);
    }
}

/// `<PRI>` at `pos`: Ok((prival, index after '>')), or why not.
pub(crate) enum Pri {
    Ok(u8, usize),
    Missing,
    Invalid,
}

/// Parse PRI = "<" PRIVAL ">" with PRIVAL 0..=191, 1..3 digits. Leading zeros are forbidden by
/// RFC 5424 §6.2.1 (strict only; rsyslog accepts them).
pub(crate) fn parse_pri(buf: &[u8], pos: usize, strict: bool) -> Pri {
    if buf.get(pos) != Some(&b'<') {
        return Pri::Missing;
    }
    let mut value: u32 = 0;
    let mut n = 0;
    loop {
        match buf.get(pos + 1 + n) {
            Some(&c @ b'0'..=b'9') if n < 3 => {
                value = value * 10 + u32::from(c - b'0');
                n += 1;
            }
            Some(b'>') if n > 0 => break,
            _ => return Pri::Invalid,
        }
    }
    if value > 191 || (strict && n > 1 && buf.get(pos + 1) == Some(&b'0')) {
        return Pri::Invalid;
    }
    Pri::Ok(value as u8, pos + n + 2)
}

#[inline]
pub(crate) fn set_pri(event: &mut Event, prival: u8) {
    event.facility = Some(prival >> 3);
    event.severity = Some(prival & 7);
}

/// An SD-PARAM value as written between its quotes with its `\"`, `\\` and `\]` escapes
/// resolved (RFC 5424 6.3.3; a backslash before anything else stays).
pub fn unescape_param(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && matches!(raw.get(i + 1), Some(b'"' | b'\\' | b']')) {
            i += 1;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests;
