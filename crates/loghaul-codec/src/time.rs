//! Hand-written calendar arithmetic and timestamp parsers for the syslog formats.
//!
//! ```text
//! RFC 3339 / RFC 5424:  2003-10-11T22:14:15.003Z   1985-04-12T19:20:50.52-04:00
//! BSD (RFC 3164):       Oct 11 22:14:15   Oct  1 22:14:15   Oct 16 2009 23:47:31   Mar  1 00:00:32.123
//! ```
//!
//! Everything works on byte slices with digit arithmetic; no allocation, no chrono, and no panics
//! (all indexing goes through `get`, all arithmetic that could overflow `i64` nanoseconds is
//! checked, so a year like 9999 yields "unusable" rather than an overflow).

use std::cell::Cell;

use loghaul_core::Timestamp;

pub(crate) const NANOS_PER_SEC: i64 = 1_000_000_000;
pub(crate) const SECS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number since 1970-01-01: (year, month 1..=12, day 1..=31).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

pub(crate) fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

thread_local! {
    /// The last date [`checked_days`] accepted, packed, and its day number: a stream's events
    /// mostly share their date.
    static LAST_DATE: Cell<(i64, i64)> = const { Cell::new((-1, 0)) };
}

/// The day number of a date, or `None` if the date does not exist.
#[inline]
fn checked_days(year: i64, month: u32, day: u32) -> Option<i64> {
    // Packing is unambiguous for the years and two-digit fields parsers produce; anything else
    // skips the cache (-1, the empty key, is never a packed date).
    let cacheable = (0..=9999).contains(&year) && month < 256 && day < 256;
    let key = year << 16 | i64::from(month) << 8 | i64::from(day);
    if cacheable {
        let (last, days) = LAST_DATE.with(Cell::get);
        if last == key {
            return Some(days);
        }
    }
    if month == 0 || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if cacheable {
        LAST_DATE.with(|last| last.set((key, days)));
    }
    Some(days)
}

/// A wall-clock reading before its zone is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Civil {
    /// `None` for BSD timestamps, which carry no year.
    pub year: Option<i64>,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
    pub frac_digits: u8,
    /// Seconds east of UTC, when the text said (`Z` is `Some(0)`).
    pub offset: Option<i32>,
}

impl Civil {
    /// The instant, with `default_offset` for zone-less readings; `None` if the date does not
    /// exist or does not fit in `i64` nanoseconds.
    #[inline]
    pub(crate) fn to_timestamp(self, year: i64, default_offset: i32) -> Option<Timestamp> {
        let days = checked_days(year, self.month, self.day)?;
        let secs = days
            .checked_mul(SECS_PER_DAY)?
            .checked_add(i64::from(self.hour * 3600 + self.minute * 60 + self.second))?
            .checked_sub(i64::from(self.offset.unwrap_or(default_offset)))?;
        let nanos = secs
            .checked_mul(NANOS_PER_SEC)?
            .checked_add(i64::from(self.nanos))?;
        Some(Timestamp::from_nanos(nanos, self.frac_digits))
    }
}

#[inline]
pub(crate) fn digit_of(c: u8) -> Option<u32> {
    let v = c.wrapping_sub(b'0');
    (v < 10).then_some(u32::from(v))
}

#[inline]
fn digit(b: &[u8], i: usize) -> Option<u32> {
    digit_of(*b.get(i)?)
}

#[inline]
fn num2(b: &[u8], i: usize) -> Option<u32> {
    let &[x, y] = b.get(i..)?.first_chunk::<2>()?;
    Some(digit_of(x)? * 10 + digit_of(y)?)
}

#[inline]
fn num4(b: &[u8], i: usize) -> Option<u32> {
    let &[w, x, y, z] = b.get(i..)?.first_chunk::<4>()?;
    Some(((digit_of(w)? * 10 + digit_of(x)?) * 10 + digit_of(y)?) * 10 + digit_of(z)?)
}

#[inline]
fn byte_is(b: &[u8], i: usize, c: u8) -> bool {
    b.get(i) == Some(&c)
}

/// `hh:mm:ss` at `i`, range-checked. A leap second (60) is refused when strict, and read as 59
/// otherwise: loghaul's timestamps cannot represent it and a one-second error beats a lost time.
#[inline(always)]
fn hms(b: &[u8], i: usize, strict: bool) -> Option<(u32, u32, u32)> {
    let &[h1, h2, c1, m1, m2, c2, s1, s2] = b.get(i..)?.first_chunk::<8>()?;
    if c1 != b':' || c2 != b':' {
        return None;
    }
    let h = digit_of(h1)? * 10 + digit_of(h2)?;
    let m = digit_of(m1)? * 10 + digit_of(m2)?;
    let s = digit_of(s1)? * 10 + digit_of(s2)?;
    if h > 23 || m > 59 {
        return None;
    }
    match s {
        0..=59 => Some((h, m, s)),
        60 if !strict => Some((h, m, 59)),
        _ => None,
    }
}

/// `.digits` at `i`: (nanos, digit count kept, bytes consumed). At most `max_digits` are allowed;
/// digits beyond the ninth are read and dropped (lenient input with picoseconds).
#[inline(always)]
fn fraction(b: &[u8], i: usize, max_digits: usize) -> Option<(u32, u8, usize)> {
    let Some((b'.', digits)) = b.get(i..).and_then(<[u8]>::split_first) else {
        return Some((0, 0, 0));
    };
    let mut n = 0usize;
    let mut value = 0u32;
    for &c in digits {
        let Some(d) = digit_of(c) else { break };
        if n < 9 {
            value = value * 10 + d;
        }
        n += 1;
    }
    if n == 0 || n > max_digits {
        return None;
    }
    let kept = n.min(9);
    let nanos = value * POW10[9 - kept];
    Some((nanos, kept as u8, n + 1))
}

/// 10^k for k in 0..=9.
const POW10: [u32; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// Parse a whole RFC 3339 token (RFC 5424 TIMESTAMP, or an ISO timestamp inside RFC 3164).
///
/// Strict is RFC 5424 §6.2.3: upper-case `T` and `Z`, 1..6 fraction digits, an offset, no leap
/// second. Lenient also takes lower case, up to 9 (or more, dropped) fraction digits, `+hhmm`,
/// and no offset at all (the caller's zone applies).
pub(crate) fn parse_rfc3339(b: &[u8], strict: bool) -> Option<Civil> {
    // `YYYY-MM-DDT` read in one go.
    let &[y1, y2, y3, y4, dash1, mo1, mo2, dash2, d1, d2, t] = b.first_chunk::<11>()?;
    if dash1 != b'-' || dash2 != b'-' {
        return None;
    }
    match t {
        b'T' => {}
        b't' if !strict => {}
        _ => return None,
    }
    let year = ((digit_of(y1)? * 10 + digit_of(y2)?) * 10 + digit_of(y3)?) * 10 + digit_of(y4)?;
    let month = digit_of(mo1)? * 10 + digit_of(mo2)?;
    let day = digit_of(d1)? * 10 + digit_of(d2)?;
    let (hour, minute, second) = hms(b, 11, strict)?;
    let (nanos, frac_digits, flen) = fraction(b, 19, if strict { 6 } else { usize::MAX })?;
    let mut i = 19 + flen;
    let offset = match b.get(i) {
        Some(b'Z') => {
            i += 1;
            Some(0)
        }
        Some(b'z') if !strict => {
            i += 1;
            Some(0)
        }
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num2(b, i + 1)?;
            let (om, len) = if byte_is(b, i + 3, b':') {
                (num2(b, i + 4)?, 6)
            } else if !strict {
                (num2(b, i + 3)?, 5)
            } else {
                return None;
            };
            if oh > 23 || om > 59 {
                return None;
            }
            i += len;
            let secs = (oh * 3600 + om * 60) as i32;
            Some(if sign == b'-' { -secs } else { secs })
        }
        None if !strict => None,
        _ => return None,
    };
    if i != b.len() || month == 0 || month > 12 || day == 0 {
        return None;
    }
    let year = i64::from(year);
    if day > days_in_month(year, month) {
        return None;
    }
    Some(Civil {
        year: Some(year),
        month,
        day,
        hour,
        minute,
        second,
        nanos,
        frac_digits,
        offset,
    })
}

thread_local! {
    /// The `YYYY-MM-DDTHH:MM` the last [`rfc3339_utc_prefix`] timestamp started with, as a
    /// little-endian number, and the seconds from the epoch to that minute: a stream's timestamps
    /// mostly share their minute, so its date and time of day are checked and converted once. It
    /// starts out holding a true pair, so a hit is right whatever the input.
    static LAST_MINUTE: Cell<(u128, i64)> =
        const { Cell::new((u128::from_le_bytes(*b"1970-01-01T00:00"), 0)) };
}

/// The seconds from the epoch to the minute `YYYY-MM-DDTHH:MM` (upper-case `T`) names, or `None`
/// if the text is not a real minute.
fn minute_secs(m: &[u8; 16]) -> Option<i64> {
    let &[
        y1,
        y2,
        y3,
        y4,
        dash1,
        mo1,
        mo2,
        dash2,
        d1,
        d2,
        t,
        h1,
        h2,
        colon,
        mi1,
        mi2,
    ] = m;
    if dash1 != b'-' || dash2 != b'-' || t != b'T' || colon != b':' {
        return None;
    }
    let year = ((digit_of(y1)? * 10 + digit_of(y2)?) * 10 + digit_of(y3)?) * 10 + digit_of(y4)?;
    let month = digit_of(mo1)? * 10 + digit_of(mo2)?;
    let day = digit_of(d1)? * 10 + digit_of(d2)?;
    let hour = digit_of(h1)? * 10 + digit_of(h2)?;
    let minute = digit_of(mi1)? * 10 + digit_of(mi2)?;
    let year = i64::from(year);
    if month == 0 || month > 12 || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * SECS_PER_DAY + i64::from(hour * 3600 + minute * 60))
}

/// 1..=7 fraction digits at the start of `w`, read without a loop: (nanoseconds, digit count).
/// `None` when the first byte is not a digit or all eight are (a longer fraction).
#[inline(always)]
fn short_fraction(w: &[u8; 8]) -> Option<(u32, usize)> {
    const LO: u64 = 0x0101_0101_0101_0101;
    // Digits become 0..=9; the first byte above 9 ends the digits. `t + 0x76` sets a byte's top
    // bit from 10 on, `| t` covers bytes that are 0x80 and up; carries only ever go up from a
    // flagged byte, so the lowest flag is exact.
    let t = u64::from_le_bytes(*w) ^ (LO * 0x30);
    let stop = (t.wrapping_add(LO * 0x76) | t) & (LO * 0x80);
    let n = (stop.trailing_zeros() / 8) as usize;
    if n == 0 || n == 8 {
        return None;
    }
    // The digits moved to the top bytes (zeros below read as leading zeros), then summed in
    // pairs, fours and eights.
    let v = t << (8 * (8 - n));
    let v = (v.wrapping_mul(10 << 8 | 1) >> 8) & 0x00ff_00ff_00ff_00ff;
    let v = (v.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_ffff_0000_ffff;
    let v = v.wrapping_mul(10_000 << 32 | 1) >> 32;
    Some((v as u32 * POW10[9 - n], n))
}

/// The usual RFC 5424 TIMESTAMP, `YYYY-MM-DDTHH:MM:SS[.fraction]Z` with up to 7 fraction
/// digits, at the start of `b`: its instant (`None` if that does not fit in `i64` nanoseconds, as
/// [`Civil::to_timestamp`] says) and the length of the text. Every other shape (offsets, lower
/// case, a leap second, a bad date, 8+ digits, a frame that ends within 28 bytes) gives `None`,
/// and callers take [`parse_rfc3339`], the reference, which reads whatever this accepts the same
/// way.
#[inline(always)]
pub(crate) fn rfc3339_utc_prefix(b: &[u8], strict: bool) -> Option<(Option<Timestamp>, usize)> {
    // A fixed window, so no test below depends on the length: the longest text read here is
    // 28 bytes, and a frame always has more than that after a timestamp (at least the fields).
    let w: &[u8; 28] = b.first_chunk()?;
    let (minute, rest) = w.split_first_chunk::<16>()?;
    let key = u128::from_le_bytes(*minute);
    let (last, cached) = LAST_MINUTE.with(Cell::get);
    let minute_secs = if key == last {
        cached
    } else {
        let secs = minute_secs(minute)?;
        LAST_MINUTE.with(|c| c.set((key, secs)));
        secs
    };
    let [b':', s1, s2, sep, digits @ ..] = rest else {
        return None;
    };
    let second = digit_of(*s1)? * 10 + digit_of(*s2)?;
    if second > 59 {
        return None;
    }
    let (nanos, n) = match sep {
        b'Z' => (0, 0),
        b'.' => short_fraction(digits.first_chunk::<8>()?)?,
        _ => return None,
    };
    // `Z` ends the text: at 19 without a fraction, else after the `.` and the digits.
    let end = if n == 0 { 19 } else { 20 + n };
    if (strict && n > 6) || w.get(end) != Some(&b'Z') {
        return None;
    }
    let ts = (minute_secs + i64::from(second))
        .checked_mul(NANOS_PER_SEC)
        .and_then(|ns| ns.checked_add(i64::from(nanos)))
        .map(|ns| Timestamp::from_nanos(ns, n as u8));
    Some((ts, end + 1))
}

/// A month from its three-letter English name. Strict wants RFC 3164's `Jan` spelling; lenient
/// takes any case (`AUG` is common from network gear).
pub(crate) fn month_from_name(b: &[u8], strict: bool) -> Option<u32> {
    const fn key(name: &[u8; 3]) -> u32 {
        u32::from_le_bytes([name[0], name[1], name[2], 0])
    }
    let &[a, b_, c] = b.first_chunk::<3>()?;
    let exact = key(&[a, b_, c]);
    // ASCII letters, and only they, become lower-case letters under `| 0x20`.
    let folded = exact | 0x0020_2020;
    if strict && exact != folded & !0x20 {
        return None;
    }
    let m = match folded {
        k if k == key(b"jan") => 1,
        k if k == key(b"feb") => 2,
        k if k == key(b"mar") => 3,
        k if k == key(b"apr") => 4,
        k if k == key(b"may") => 5,
        k if k == key(b"jun") => 6,
        k if k == key(b"jul") => 7,
        k if k == key(b"aug") => 8,
        k if k == key(b"sep") => 9,
        k if k == key(b"oct") => 10,
        k if k == key(b"nov") => 11,
        k if k == key(b"dec") => 12,
        _ => return None,
    };
    Some(m)
}

/// A BSD timestamp at the start of `b`: (reading, bytes consumed).
///
/// Strict is exactly RFC 3164 `Mmm dd hh:mm:ss` with a space-padded day. Lenient also takes an
/// unpadded single-digit day (`Jan 5`), a year after the day (`Oct 16 2009 23:47:31`, Cisco) and
/// fractional seconds (`00:00:32.123`).
pub(crate) fn parse_bsd(b: &[u8], strict: bool) -> Option<(Civil, usize)> {
    let month = month_from_name(b, strict)?;
    // The common shape, `Mmm dd hh:mm:ss` (day two digits or space-padded) without a fraction,
    // read in one go; everything else takes the general path below.
    if let Some(&[_, _, _, b' ', d1, d2, b' ', _, _, b':', _, _, b':', _, _]) =
        b.first_chunk::<15>()
        && b.get(15) != Some(&b'.')
        && let Some(d2) = digit_of(d2)
        && let Some(d1) = if d1 == b' ' { Some(0) } else { digit_of(d1) }
        && let Some((hour, minute, second)) = hms(b, 7, strict)
    {
        let day = d1 * 10 + d2;
        if day == 0 || day > 31 {
            return None;
        }
        let civil = Civil {
            year: None,
            month,
            day,
            hour,
            minute,
            second,
            nanos: 0,
            frac_digits: 0,
            offset: None,
        };
        return Some((civil, 15));
    }
    if !byte_is(b, 3, b' ') {
        return None;
    }
    let (day, mut i) = match (b.get(4), digit(b, 5)) {
        (Some(b' '), Some(d)) => (d, 6),
        (Some(_), Some(d2)) => (digit(b, 4)? * 10 + d2, 6),
        (Some(_), None) if !strict && byte_is(b, 5, b' ') => (digit(b, 4)?, 5),
        _ => return None,
    };
    if !byte_is(b, i, b' ') {
        return None;
    }
    i += 1;
    let mut year = None;
    if !strict
        && byte_is(b, i + 4, b' ')
        && let Some(y) = num4(b, i)
    {
        year = Some(i64::from(y));
        i += 5;
    }
    let (hour, minute, second) = hms(b, i, strict)?;
    i += 8;
    let (nanos, frac_digits, flen) = if strict {
        (0, 0, 0)
    } else {
        fraction(b, i, usize::MAX)?
    };
    i += flen;
    if day == 0 || day > 31 {
        return None;
    }
    Some((
        Civil {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanos,
            frac_digits,
            offset: None,
        },
        i,
    ))
}

#[inline]
fn put2(buf: &mut [u8], at: usize, v: u32) {
    buf[at] = b'0' + (v / 10 % 10) as u8;
    buf[at + 1] = b'0' + (v % 10) as u8;
}

/// `YYYY-MM-DDTHH:MM:SS` of a second since the epoch, and the year (the text holds its last four
/// digits, so it is exact only for years 0..=9999).
fn format_second(secs: i64) -> ([u8; 19], i64) {
    let (y, mo, d) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let y4 = y.rem_euclid(10_000) as u32;
    let sod = secs.rem_euclid(SECS_PER_DAY) as u32;
    let mut buf = *b"0000-00-00T00:00:00";
    put2(&mut buf, 0, y4 / 100);
    put2(&mut buf, 2, y4 % 100);
    put2(&mut buf, 5, mo);
    put2(&mut buf, 8, d);
    put2(&mut buf, 11, sod / 3600);
    put2(&mut buf, 14, sod / 60 % 60);
    put2(&mut buf, 17, sod % 60);
    (buf, y)
}

/// The length of `YYYY-MM-DDTHH:MM:SS`, the head of an RFC 3339 text.
pub(crate) const RFC3339_HEAD: usize = 19;

thread_local! {
    /// The last second formatted on this thread and its text (padded to a copy-friendly size):
    /// events written together mostly share their second, and the calendar arithmetic is most of
    /// the cost of a timestamp.
    static LAST_SECOND: Cell<(i64, [u8; 24])> = const { Cell::new((i64::MIN, [0; 24])) };
}

/// The three decimal digits of 0..=999, padded to four bytes.
static DIGITS3: [[u8; 4]; 1000] = {
    let mut table = [[0u8; 4]; 1000];
    let mut i = 0;
    while i < 1000 {
        table[i] = [
            b'0' + (i / 100) as u8,
            b'0' + (i / 10 % 10) as u8,
            b'0' + (i % 10) as u8,
            0,
        ];
        i += 1;
    }
    table
};

/// `.ddd` with exactly `ts.frac_digits` digits (nothing when 0), then `Z`, at the start of
/// `buf` (the rest of it is scratch); returns the length.
#[inline]
pub(crate) fn fraction_into(ts: Timestamp, buf: &mut [u8; 16]) -> usize {
    let digits = usize::from(ts.frac_digits());
    if digits == 0 {
        buf[0] = b'Z';
        return 1;
    }
    // Three digits per table step (written in place, no copies), as many steps as `digits`
    // needs, then `Z` cuts them to `digits`: truncated, as the sender's digits are kept.
    // Below 10^9 already; the `%` shows the compiler so, which keeps the indexing unchecked.
    let n = ts.subsec_nanos() as usize % 1_000_000_000;
    buf[0] = b'.';
    buf[1..5].copy_from_slice(&DIGITS3[n / 1_000_000]);
    if digits > 3 {
        buf[4..8].copy_from_slice(&DIGITS3[n / 1000 % 1000]);
        if digits > 6 {
            buf[7..11].copy_from_slice(&DIGITS3[n % 1000]);
        }
    }
    buf[1 + digits] = b'Z';
    2 + digits
}

/// The date and time of day of `ts` (`YYYY-MM-DDTHH:MM:SS`) into the first [`RFC3339_HEAD`]
/// bytes of `buf` (the rest of it is scratch): the head of its RFC 3339 text (see
/// [`write_rfc3339`]), the fraction comes from [`fraction_into`]. Fixed-size pieces written in
/// place let the JSON encoder skip any copies. `false` (and `buf` untouched) for years outside
/// 0..=9999 (unreachable for i64 nanoseconds).
#[inline]
pub(crate) fn rfc3339_head_into(ts: Timestamp, buf: &mut [u8; 24]) -> bool {
    let secs = ts.unix_seconds();
    LAST_SECOND.with(|last| {
        let (s, text) = last.get();
        if s == secs {
            *buf = text;
            return true;
        }
        let (text, year) = format_second(secs);
        if !(0..=9999).contains(&year) {
            return false;
        }
        let mut padded = [0; 24];
        padded[..RFC3339_HEAD].copy_from_slice(&text);
        last.set((secs, padded));
        *buf = padded;
        true
    })
}

/// RFC 3339 in UTC with exactly `frac_digits` fraction digits: `2003-10-11T22:14:15.003Z`.
pub(crate) fn write_rfc3339(ts: Timestamp, out: &mut Vec<u8>) {
    let mut frac = [0u8; 16];
    let frac_len = fraction_into(ts, &mut frac);
    let mut head = [0u8; 24];
    if !rfc3339_head_into(ts, &mut head) {
        // Unreachable for i64 nanoseconds (years 1677..2262); kept total for safety.
        let (text, year) = format_second(ts.unix_seconds());
        out.extend_from_slice(year.to_string().as_bytes());
        out.extend_from_slice(&text[4..]);
        out.extend_from_slice(&frac[..frac_len]);
        return;
    }
    // Fixed-size copies (inlined) and a cut beat variable-size `memcpy` calls.
    let end = out.len() + RFC3339_HEAD + frac_len;
    out.extend_from_slice(&head);
    out.truncate(end - frac_len);
    out.extend_from_slice(&frac);
    out.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trips_over_a_wide_range() {
        for z in (-800_000..800_000).step_by(97) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
            assert!(d >= 1 && d <= days_in_month(y, m));
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    fn ts(s: &str, strict: bool) -> Option<Timestamp> {
        let c = parse_rfc3339(s.as_bytes(), strict)?;
        c.to_timestamp(c.year?, 0)
    }

    fn fmt(t: Timestamp) -> String {
        let mut out = Vec::new();
        write_rfc3339(t, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn rfc3339_examples() {
        let a = ts("1985-04-12T23:20:50.52Z", true);
        let b = ts("1985-04-12T19:20:50.52-04:00", true);
        assert_eq!(a, b);
        assert_eq!(a.map(|t| t.nanos), Some(482_196_050_520_000_000));
        assert_eq!(a.map(fmt).as_deref(), Some("1985-04-12T23:20:50.52Z"));
        let c = ts("2003-08-24T05:14:15.000003-07:00", true);
        assert_eq!(c.map(fmt).as_deref(), Some("2003-08-24T12:14:15.000003Z"));
        assert_eq!(ts("2003-08-24T05:14:15.000000003-07:00", true), None);
        let d = ts("2003-08-24T05:14:15.000000003-07:00", false);
        assert_eq!(
            d.map(fmt).as_deref(),
            Some("2003-08-24T12:14:15.000000003Z")
        );
        assert_eq!(ts("2003-09-31T22:14:15.003Z", false), None);
        assert_eq!(ts("2006-01-02T15:04:05Z+07:00", false), None);
        assert_eq!(
            ts("2004-02-29T00:00:00z", false).map(fmt).as_deref(),
            Some("2004-02-29T00:00:00Z")
        );
        assert_eq!(ts("2004-02-29T00:00:00z", true), None);
        assert_eq!(
            ts("9999-12-31T23:59:59Z", true),
            None,
            "overflows i64 nanos: unusable"
        );
        assert_eq!(ts("2016-12-31T23:59:60Z", true), None);
    }

    /// What the RFC 5424 parser's general path makes of a TIMESTAMP token.
    fn general(token: &[u8], strict: bool) -> Option<Option<Timestamp>> {
        let c = parse_rfc3339(token, strict)?;
        Some(c.to_timestamp(c.year.unwrap_or(2024), 0))
    }

    /// Checks [`rfc3339_utc_prefix`] on `text` followed by the rest of a frame, and at the very
    /// end of one, against the general path; returns whether it answered.
    fn fast_agrees(text: &[u8], strict: bool) -> bool {
        let mut answered = false;
        for tail in [&b" host app - - - msg"[..], b""] {
            let framed = [text, tail].concat();
            let Some((ts, len)) = rfc3339_utc_prefix(&framed, strict) else {
                continue;
            };
            // The caller uses the answer only when a SP ends the text there.
            if framed.get(len) == Some(&b' ') || len == framed.len() {
                assert_eq!(
                    Some(ts),
                    general(&framed[..len], strict),
                    "{:?} strict={strict}",
                    String::from_utf8_lossy(text)
                );
                answered |= len == text.len();
            }
        }
        answered
    }

    #[test]
    fn utc_prefix_reads_fractions_of_any_length_like_the_general_parser() {
        for strict in [false, true] {
            assert!(fast_agrees(b"2003-10-11T22:14:15Z", strict));
            for n in 0..=12 {
                let text = format!("2003-10-11T22:14:15.{}Z", &"908070605040"[..n]);
                let answered = fast_agrees(text.as_bytes(), strict);
                // The usual shapes must take the fast path, or it is not one.
                assert_eq!(
                    answered,
                    (1..=7).contains(&n) && (n <= 6 || !strict),
                    "{text} {strict}"
                );
            }
            for digits in [
                "0", "000000", "999999", "000001", "1000000", "0000000", "9999999",
            ] {
                fast_agrees(format!("2026-11-22T05:53:39.{digits}Z").as_bytes(), strict);
            }
        }
        let read = rfc3339_utc_prefix(b"2026-11-22T05:53:39.4394751Z x", false);
        let ts = Timestamp::from_nanos(1_795_326_819_439_475_100, 7);
        assert_eq!(read, Some((Some(ts), 28)));
    }

    #[test]
    fn utc_prefix_leaves_every_other_shape_to_the_general_parser() {
        for strict in [false, true] {
            for text in [
                "2003-10-11T22:14:15.003+05:30",
                "2003-10-11T22:14:15-07:00",
                "2003-10-11T22:14:15.003z",
                "2003-10-11t22:14:15.003Z",
                "2003-10-11T22:14:15.003",
                "2003-10-11T22:14:15.Z",
                "2016-12-31T23:59:60Z",
                "2016-12-31T23:59:60.5Z",
                "2003-02-29T00:00:00Z",
                "2003-13-01T00:00:00Z",
                "2003-00-01T00:00:00Z",
                "2003-04-31T00:00:00Z",
                "2003-10-00T00:00:00Z",
                "2003-10-11T24:00:00Z",
                "2003-10-11T23:60:00Z",
                "2003-10-11T23:59:61Z",
                "2003-10-11T22:14:15ZZ",
                "2003-10-11T22:14:1",
                "2003-10-11T22:14",
            ] {
                assert!(!fast_agrees(text.as_bytes(), strict), "{text}");
            }
            for text in [
                "2004-02-29T00:00:00Z",
                "2000-02-29T12:00:00.5Z",
                "0000-01-01T00:00:00Z",
                "9999-12-31T23:59:59.999999Z",
                "1677-09-21T00:12:44Z",
                "1677-09-21T00:12:43.145224191Z",
                "2262-04-11T23:47:16.854775807Z",
                "2262-04-11T23:47:16.854775808Z",
                "1970-01-01T00:00:00Z",
            ] {
                // Strict mode allows at most 6 fraction digits (and takes the general path to
                // say no).
                let digits = text.split_once('.').map_or(0, |(_, f)| f.len() - 1);
                let fast = digits <= 7 && (!strict || digits <= 6);
                assert_eq!(fast_agrees(text.as_bytes(), strict), fast, "{text}");
            }
        }
    }

    #[test]
    fn utc_prefix_checks_every_byte() {
        // Every byte value at every position, with the cache holding the unchanged minute, then
        // holding whatever the last change left there.
        let good = *b"2003-10-11T22:14:15.123456Z";
        for strict in [false, true] {
            for k in 0..good.len() {
                for c in 0..=255u8 {
                    assert!(fast_agrees(&good, strict));
                    let mut t = good;
                    t[k] = c;
                    fast_agrees(&t, strict);
                    fast_agrees(&t, strict);
                }
            }
        }
    }

    #[test]
    fn hms_checks_every_byte() {
        assert_eq!(hms(b"23:59:60", 0, false), Some((23, 59, 59)));
        assert_eq!(hms(b"23:59:60", 0, true), None);
        assert_eq!(hms(b"x00:00:00", 1, true), Some((0, 0, 0)));
        assert_eq!(hms(b"00:00:0", 0, false), None);
        let good = *b"12:34:56";
        assert_eq!(hms(&good, 0, true), Some((12, 34, 56)));
        for k in 0..8 {
            for c in 0..=255u8 {
                let mut t = good;
                t[k] = c;
                let valid = if k == 2 || k == 5 {
                    c == b':'
                } else {
                    c.is_ascii_digit() && !(matches!(k, 3 | 6) && c > b'5') && !(k == 0 && c > b'2')
                };
                let got = hms(&t, 0, false);
                assert_eq!(got.is_some(), valid, "{k} {c}");
            }
        }
    }

    #[test]
    fn bsd_forms() {
        let p = |s: &str, strict| {
            parse_bsd(s.as_bytes(), strict)
                .map(|(c, n)| (c.month, c.day, c.year, c.hour, c.second, c.frac_digits, n))
        };
        assert_eq!(
            p("Oct 11 22:14:15 x", true),
            Some((10, 11, None, 22, 15, 0, 15))
        );
        assert_eq!(
            p("Mar  6 16:57:54", true),
            Some((3, 6, None, 16, 54, 0, 15))
        );
        assert_eq!(p("Jan 5 10:01:00", true), None);
        assert_eq!(p("Jan 5 10:01:00", false), Some((1, 5, None, 10, 0, 0, 14)));
        assert_eq!(p("AUG 10 22:18:24", true), None);
        assert_eq!(
            p("AUG 10 22:18:24", false),
            Some((8, 10, None, 22, 24, 0, 15))
        );
        assert_eq!(
            p("Oct 16 2009 23:47:31", false),
            Some((10, 16, Some(2009), 23, 31, 0, 20))
        );
        assert_eq!(
            p("Jan  8 19:46:03.295:", false),
            Some((1, 8, None, 19, 3, 3, 19))
        );
        assert_eq!(p("Jan 32 10:01:00", false), None);
        assert_eq!(p("Jan 12 25:01:00", false), None);
        assert_eq!(p("Ja", false), None);
    }
}
