//! One log event: numeric fields inline, string fields as [`Span`]s into its batch's arena.
//!
//! An `Event` is only meaningful together with the [`crate::EventBatch`] that holds its arena; it
//! is `Copy`-cheap to move between batches that share the same arena (filters do that).

use std::net::IpAddr;

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

/// A point in time: nanoseconds since the Unix epoch (UTC), plus how many fractional-second
/// digits the sender wrote, so output keeps the precision it was given (`.003` stays `.003`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    pub nanos: i64,
    /// 0 (whole seconds) to 9 (nanoseconds).
    pub frac_digits: u8,
}

impl Timestamp {
    pub fn from_nanos(nanos: i64, frac_digits: u8) -> Timestamp {
        Timestamp {
            nanos,
            frac_digits: frac_digits.min(9),
        }
    }

    /// The current wall-clock time with microsecond digits (what receive times carry).
    pub fn now() -> Timestamp {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        Timestamp {
            nanos,
            frac_digits: 6,
        }
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

    #[inline]
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    #[inline]
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    #[inline]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A log event. Absent fields are `None` and are omitted on output, never written as null.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Event {
    /// When the event happened, as the sender said; `None` when it said nothing usable.
    pub timestamp: Option<Timestamp>,
    /// When loghaul read it.
    pub received: Timestamp,
    pub hostname: Option<Span>,
    pub appname: Option<Span>,
    pub procid: Option<Span>,
    pub msgid: Option<Span>,
    /// The message text; present on every event (possibly empty).
    pub message: Span,
    /// Syslog facility code 0..=23.
    pub facility: Option<u8>,
    /// Syslog severity code 0..=7.
    pub severity: Option<u8>,
    /// RFC 5424 VERSION.
    pub version: Option<u8>,
    /// Range into [`crate::EventBatch::sd_elements`]; `None` when the sender sent NILVALUE or
    /// the format has no structured data.
    pub structured_data: Option<(u32, u32)>,
    /// Range into [`crate::EventBatch::fields`] for extra named fields (later sources).
    pub fields: (u32, u32),
    /// Routing tag (Fluentd forward protocol); `None` for syslog.
    pub tag: Option<Span>,
    pub source_ip: Option<IpAddr>,
    pub flags: Flags,
}
