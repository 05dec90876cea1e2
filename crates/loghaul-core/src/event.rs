//! One log event: numeric fields inline, string fields as [`Span`]s into its batch's arena.
//!
//! An `Event` is only meaningful together with the [`crate::EventBatch`] that holds its arena; it
//! is `Copy`-cheap to move between batches that share the same arena (filters do that).

/// A byte range inside a batch's arena. Offsets are `u32`: a batch arena never exceeds 4GiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    /// The empty span at offset 0.
    pub const EMPTY: Span = Span { start: 0, end: 0 };

    #[inline]
    pub fn new(start: usize, end: usize) -> Span {
        debug_assert!(start <= end);
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    #[inline]
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    #[inline]
    pub fn is_empty(self) -> bool {
        self.end == self.start
    }

    /// This span shifted right by `base` bytes: parsers work on one frame and the batch builder
    /// rebases their spans onto the arena.
    #[inline]
    pub fn offset(self, base: u32) -> Span {
        Span {
            start: self.start + base,
            end: self.end + base,
        }
    }
}

/// An optional [`Span`] in 8 bytes (`Option<Span>` takes 12): absent is a start of `u32::MAX`,
/// an offset no arena reaches. Every event is written once per frame on the hot path, so each
/// byte of [`Event`] costs throughput (measured: 56 more bytes per event cost 17% of the `basic`
/// scenario's rate).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptSpan(Span);

impl OptSpan {
    pub const NONE: OptSpan = OptSpan(Span {
        start: u32::MAX,
        end: u32::MAX,
    });

    #[inline]
    pub fn some(span: Span) -> OptSpan {
        debug_assert!(span.start != u32::MAX, "a span at 4GiB is out of any arena");
        OptSpan(span)
    }

    #[inline]
    pub fn get(self) -> Option<Span> {
        if self.0.start == u32::MAX {
            None
        } else {
            Some(self.0)
        }
    }

    #[inline]
    pub fn is_some(self) -> bool {
        self.0.start != u32::MAX
    }

    /// The span, or the empty span when absent (for readers that treat both alike).
    #[inline]
    pub fn or_empty(self) -> Span {
        self.get().unwrap_or(Span::EMPTY)
    }

    #[inline]
    pub fn is_none(self) -> bool {
        self.0.start == u32::MAX
    }
}

impl Default for OptSpan {
    fn default() -> OptSpan {
        OptSpan::NONE
    }
}

impl From<Option<Span>> for OptSpan {
    #[inline]
    fn from(span: Option<Span>) -> OptSpan {
        span.map_or(OptSpan::NONE, OptSpan::some)
    }
}

impl From<Span> for OptSpan {
    #[inline]
    fn from(span: Span) -> OptSpan {
        OptSpan::some(span)
    }
}

impl std::fmt::Debug for OptSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A point in time: nanoseconds since the Unix epoch (UTC), plus how many fractional-second
/// digits the sender wrote, so output keeps the precision it was given (`.003` stays `.003`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    pub nanos: i64,
    /// 0 (whole seconds) to 9 (nanoseconds). An enum rather than a `u8` so that
    /// `Option<Timestamp>` fits in 16 bytes instead of 24.
    frac_digits: Digits,
}

/// The number of fractional-second digits, 0 to 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
enum Digits {
    #[default]
    D0,
    D1,
    D2,
    D3,
    D4,
    D5,
    D6,
    D7,
    D8,
    D9,
}

impl Digits {
    const ALL: [Digits; 10] = [
        Digits::D0,
        Digits::D1,
        Digits::D2,
        Digits::D3,
        Digits::D4,
        Digits::D5,
        Digits::D6,
        Digits::D7,
        Digits::D8,
        Digits::D9,
    ];
}

impl Timestamp {
    /// `frac_digits` above 9 is read as 9.
    #[inline]
    pub fn from_nanos(nanos: i64, frac_digits: u8) -> Timestamp {
        Timestamp {
            nanos,
            frac_digits: Digits::ALL[usize::from(frac_digits.min(9))],
        }
    }

    /// A time from a protocol that carries nanoseconds but not the digits they were written
    /// with (a forward EventTime, a VRL timestamp): the fewest of 0, 3, 6 or 9 digits that
    /// write it exactly, as Vector's RFC 3339 output does. A time that crossed a hop as
    /// nanoseconds is written as it was before (`12:00:00Z` stays `12:00:00Z`, `.003` stays
    /// `.003`), except that a fraction whose last three written digits were zeros comes out
    /// shorter: `.120000` as `.120`, the same instant.
    #[inline]
    pub fn from_nanos_shortest(nanos: i64) -> Timestamp {
        let frac = nanos.rem_euclid(1_000_000_000);
        let digits = if frac == 0 {
            0
        } else if frac % 1_000_000 == 0 {
            3
        } else if frac % 1_000 == 0 {
            6
        } else {
            9
        };
        Timestamp::from_nanos(nanos, digits)
    }

    /// The current wall-clock time with microsecond digits (what receive times carry).
    pub fn now() -> Timestamp {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        // Truncated to what the six digits show, so the time is the same wherever it is written
        // or carried (a forward EventTime holds all nine).
        Timestamp::from_nanos(nanos - nanos % 1_000, 6)
    }

    /// How many fractional-second digits the time is written with, 0 to 9.
    #[inline]
    pub fn frac_digits(self) -> u8 {
        self.frac_digits as u8
    }

    pub fn unix_seconds(self) -> i64 {
        self.nanos.div_euclid(1_000_000_000)
    }

    pub fn subsec_nanos(self) -> u32 {
        self.nanos.rem_euclid(1_000_000_000) as u32
    }
}

/// Per-event condition flags: set by decoders, counted by sources, written by encoders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// The frame could not be parsed in the configured format; `message` holds the raw text.
    pub const PARSE_ERROR: Flags = Flags(1);
    /// The frame was longer than `max_length` and was cut.
    pub const TRUNCATED: Flags = Flags(2);
    /// Some string field holds bytes that are not valid UTF-8 (encoders replace them lossily).
    pub const INVALID_UTF8: Flags = Flags(4);
    /// In a batch of undecoded forward records ([`crate::EventBatch::raw_records`]) only: the
    /// event's entry reads `[EventTime, record]` exactly as the forward encoder writes it, so a
    /// sink copies it whole without reading it again. Set where the entry is walked, while its
    /// bytes are at hand; cleared when the records are decoded.
    pub const ENTRY_AS_IS: Flags = Flags(8);

    #[inline]
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    #[inline]
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    #[inline]
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }

    #[inline]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A log event. Absent fields are `None` and are omitted on output, never written as null.
///
/// Kept small (see [`OptSpan`]): what all events of a read share (when it was read, from where)
/// lives in the [`crate::EventBatch`], and optional fields fold `None` into their value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    /// When the event happened, as the sender said; `None` when it said nothing usable (the
    /// batch's receive time stands in for it on output).
    pub timestamp: Option<Timestamp>,
    pub hostname: OptSpan,
    pub appname: OptSpan,
    pub procid: OptSpan,
    pub msgid: OptSpan,
    /// The message text: always present (possibly empty) on syslog events; on record events
    /// (forward, HTTP/JSON) the record's top-level `message` string, lifted out of the record,
    /// and absent when the record has none (see `docs/specs/events.md`).
    pub message: OptSpan,
    /// Syslog facility code 0..=23.
    pub facility: Option<u8>,
    /// Syslog severity code 0..=7.
    pub severity: Option<u8>,
    /// RFC 5424 VERSION.
    pub version: Option<u8>,
    /// Range into [`crate::EventBatch::sd_elements`]; `None` when the sender sent NILVALUE or
    /// the format has no structured data.
    pub structured_data: Option<(u32, u32)>,
    /// Range into [`crate::EventBatch::fields`]: the event's record, its top-level keys in the
    /// order the sender wrote them (nested maps and arrays are ranges further along the table).
    pub fields: (u32, u32),
    /// Routing tag (the Fluentd forward protocol's tag); `None` for syslog.
    pub tag: OptSpan,
    /// Index into [`crate::EventBatch::peers`] of the sender's address; [`Event::NO_PEER`] when
    /// unknown.
    pub peer: u16,
    pub flags: Flags,
}

impl Event {
    /// [`Event::peer`] of an event whose sender is unknown.
    pub const NO_PEER: u16 = u16::MAX;
}

impl Default for Event {
    fn default() -> Event {
        Event {
            timestamp: None,
            hostname: OptSpan::NONE,
            appname: OptSpan::NONE,
            procid: OptSpan::NONE,
            msgid: OptSpan::NONE,
            message: OptSpan::NONE,
            facility: None,
            severity: None,
            version: None,
            structured_data: None,
            fields: (0, 0),
            tag: OptSpan::NONE,
            peer: Event::NO_PEER,
            flags: Flags::default(),
        }
    }
}

// The budget the hot path was measured with; growing it needs a new measurement.
const _: () = assert!(std::mem::size_of::<Event>() <= 96);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_span_round_trips_and_keeps_empty_spans() {
        for span in [
            None,
            Some(Span::EMPTY),
            Some(Span::new(3, 9)),
            Some(Span::new(7, 7)),
        ] {
            let opt = OptSpan::from(span);
            assert_eq!(opt.get(), span);
            assert_eq!(opt.is_some(), span.is_some());
            assert_eq!(opt.is_none(), span.is_none());
            assert_eq!(format!("{opt:?}"), format!("{span:?}"));
        }
        assert_eq!(OptSpan::default(), OptSpan::NONE);
        assert_eq!(Event::default().hostname.get(), None);
        assert_eq!(Event::default().peer, Event::NO_PEER);
    }

    #[test]
    fn compact_fields_are_as_small_as_intended() {
        assert_eq!(std::mem::size_of::<OptSpan>(), 8);
        assert_eq!(std::mem::size_of::<Option<Timestamp>>(), 16);
    }

    #[test]
    fn timestamp_digits_are_clamped_and_kept() {
        for d in 0..=9 {
            assert_eq!(Timestamp::from_nanos(5, d).frac_digits(), d);
        }
        assert_eq!(Timestamp::from_nanos(5, 200).frac_digits(), 9);
        for (nanos, digits) in [
            (1_700_000_000_000_000_000, 0),
            (1_700_000_000_003_000_000, 3),
            (1_700_000_000_120_000_000, 3),
            (1_700_000_000_123_456_000, 6),
            (1_700_000_000_123_456_789, 9),
            (-1_500_000_000, 3),
            (-2_000_000_000, 0),
        ] {
            assert_eq!(
                Timestamp::from_nanos_shortest(nanos).frac_digits(),
                digits,
                "{nanos}"
            );
        }
        assert_eq!(Timestamp::now().frac_digits(), 6);
        // Ordered by time first.
        assert!(Timestamp::from_nanos(1, 9) < Timestamp::from_nanos(2, 0));
    }
}
