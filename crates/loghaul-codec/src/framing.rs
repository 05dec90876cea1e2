//! Stream framing: split the bytes of one TCP connection into syslog frames.
//!
//! Two framings from RFC 6587, and an `Auto` mode that picks one per message:
//!
//! ```text
//! non-transparent (newline):  <13>Oct 11 22:14:15 host app: hello\n<14>...\n
//! octet counting (§3.4.1):    48 <1>1 2003-10-11T22:14:15.003Z host.local - - - -25 <3>1 ...
//!                             ^^ MSG-LEN, one SP, then exactly MSG-LEN octets, no trailer
//! ```
//!
//! Contract with the caller (a connection task):
//! - `buf` passed to [`Framer::decode`] is every byte read and not yet consumed; frames are byte
//!   ranges into it; the returned count of consumed bytes is split off and becomes the batch arena.
//! - Unconsumed bytes are at most one partial frame, bounded by about `max_length` bytes (plus the
//!   length prefix), so a peer that never sends a newline cannot make the caller buffer without
//!   limit: a long line is cut at `max_length` and the rest is discarded up to the next newline.
//! - The framer never panics and always makes progress: when it consumes nothing, it needs more
//!   bytes than `buf` holds.
//! - Feeding the same stream in any chunking yields the same frames (state carries across calls).

use memchr::memchr;

use crate::scan;

/// The longest frame sources accept by default (their `max_length`): 100KiB.
pub const DEFAULT_MAX_LENGTH: usize = 100 * 1024;

/// How a stream is split into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FramingMode {
    /// Per message: a frame that starts with a digit is octet-counted, anything else (usually
    /// `<`) is newline-terminated, as RFC 6587 §3.4 suggests receivers detect it.
    #[default]
    Auto,
    /// Non-transparent framing (RFC 6587 §3.4.2) with LF as the trailer.
    Newline,
    /// Octet counting (RFC 6587 §3.4.1): `MSG-LEN SP SYSLOG-MSG`.
    OctetCounting,
}

/// One frame: a byte range in the buffer passed to [`Framer::decode`] or [`Framer::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub start: u32,
    pub end: u32,
    /// The frame was cut at `max_length` (or at EOF before its counted length).
    pub truncated: bool,
}

impl Frame {
    #[inline]
    fn new(start: usize, end: usize, truncated: bool) -> Frame {
        // Buffers are bounded by max_length far below 4GiB; `as` cannot panic either way.
        Frame {
            start: start as u32,
            end: end as u32,
            truncated,
        }
    }
}

/// Counters the connection task turns into metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FramingStats {
    /// Frames cut at `max_length` or at EOF.
    pub truncated: u64,
    /// Octet-counted frames whose MSG-LEN was missing or malformed.
    pub invalid_octet_count: u64,
    /// Empty lines and `0 ` octet counts: nothing to decode.
    pub empty_frames: u64,
}

/// The most MSG-LEN digits we read before calling the count malformed: 10 digits already exceed
/// any sane `max_length`, and stopping early bounds the work on garbage.
const MAX_LEN_DIGITS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At a frame boundary.
    Start,
    /// Dropping bytes up to and including the next LF (after a cut line or a bad count).
    Discard,
    /// Dropping the rest of an octet-counted frame that was cut at `max_length`.
    Skip(u64),
}

/// What the length prefix at the start of a frame says.
enum Count {
    /// `LEN SP`: the message starts at `msg_start`.
    Len { len: u64, msg_start: usize },
    /// All digits so far and the buffer ended: wait for more bytes.
    NeedMore,
    /// Not a valid MSG-LEN.
    Invalid,
}

fn parse_count(b: &[u8]) -> Count {
    let mut len: u64 = 0;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'0'..=b'9' if i < MAX_LEN_DIGITS => len = len * 10 + u64::from(c - b'0'),
            b' ' if i > 0 => {
                return Count::Len {
                    len,
                    msg_start: i + 1,
                };
            }
            _ => return Count::Invalid,
        }
    }
    Count::NeedMore
}

/// A stateful splitter for one connection. See the module docs for the contract.
#[derive(Debug, Clone)]
pub struct Framer {
    mode: FramingMode,
    max_length: usize,
    state: State,
}

impl Framer {
    /// A framer that cuts frames at `max_length` bytes (at least 1).
    pub fn new(mode: FramingMode, max_length: usize) -> Framer {
        Framer {
            mode,
            max_length: max_length.max(1),
            state: State::Start,
        }
    }

    /// Scan `buf` (all unconsumed bytes read so far), push complete frames (ranges relative to
    /// `buf`) to `frames`, and return how many leading bytes of `buf` are consumed. The
    /// unconsumed tail is a partial frame to pass again, with more bytes, on the next call.
    pub fn decode(
        &mut self,
        buf: &[u8],
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> usize {
        let mut pos = 0;
        loop {
            match self.state {
                State::Discard => match memchr(b'\n', &buf[pos..]) {
                    Some(i) => {
                        pos += i + 1;
                        self.state = State::Start;
                    }
                    None => return buf.len(),
                },
                State::Skip(left) => {
                    let avail = (buf.len() - pos) as u64;
                    if avail < left {
                        self.state = State::Skip(left - avail);
                        return buf.len();
                    }
                    // `left <= avail` fits in usize.
                    pos += left as usize;
                    self.state = State::Start;
                }
                State::Start => {
                    let Some(&first) = buf.get(pos) else {
                        return pos;
                    };
                    let step = match self.mode {
                        FramingMode::Newline => {
                            pos = self.newline_run(buf, pos, frames, stats);
                            if pos >= buf.len() {
                                return pos;
                            }
                            self.newline(buf, pos, frames, stats)
                        }
                        FramingMode::OctetCounting => self.octet(buf, pos, false, frames, stats),
                        FramingMode::Auto if first.is_ascii_digit() => {
                            self.octet(buf, pos, true, frames, stats)
                        }
                        FramingMode::Auto => self.newline(buf, pos, frames, stats),
                    };
                    match step {
                        Some(next) => pos = next,
                        None => return pos,
                    }
                }
            }
        }
    }

    /// At EOF: emit whatever partial frame is left (newline frames whole, short octet-counted
    /// frames marked truncated), reset the state, and consume all of `buf`.
    pub fn finish(
        &mut self,
        buf: &[u8],
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> usize {
        let pos = self.decode(buf, frames, stats);
        let state = std::mem::replace(&mut self.state, State::Start);
        if state != State::Start || pos >= buf.len() {
            return buf.len();
        }
        let rest = &buf[pos..];
        let octet = match self.mode {
            FramingMode::Newline => false,
            FramingMode::OctetCounting => true,
            FramingMode::Auto => rest[0].is_ascii_digit(),
        };
        if octet {
            let count = parse_count(rest);
            let counted_syslog = |msg_start: usize| rest.get(msg_start) == Some(&b'<');
            match count {
                Count::Len { len, msg_start }
                    if self.mode == FramingMode::Auto && len > 0 && !counted_syslog(msg_start) => {}
                Count::Len { len, msg_start } => {
                    // decode() left it, so fewer than `len` (<= max_length) bytes follow. A count
                    // with none of its message after it is nothing to decode, like `0 `: a frame
                    // would be an empty event.
                    let start = pos + msg_start;
                    if len > 0 && start < buf.len() {
                        frames.push(Frame::new(start, buf.len(), true));
                        stats.truncated += 1;
                    } else {
                        stats.empty_frames += 1;
                    }
                    return buf.len();
                }
                // A bare number at EOF: in Auto mode it is a line of text, keep it.
                Count::NeedMore if self.mode == FramingMode::Auto => {}
                Count::Invalid if self.mode == FramingMode::Auto => stats.invalid_octet_count += 1,
                _ => {
                    stats.invalid_octet_count += 1;
                    return buf.len();
                }
            }
        }
        // decode() would have cut a line longer than max_length, so this one fits.
        push_line(buf, pos, buf.len(), frames, stats);
        buf.len()
    }

    /// Newline mode's fast path: every complete line from `pos` on. The bytes are classified 64
    /// at a time into a mask of newlines whose set bits are the line ends, so a short line costs
    /// a few instructions instead of a search of its own. Returns where it stopped: at the start
    /// of a partial line, or of a line too long for `max_length`, which [`Framer::newline`] then
    /// handles.
    fn newline_run(
        &mut self,
        buf: &[u8],
        pos: usize,
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> usize {
        let mut start = pos;
        let mut block = pos;
        while let Some(bytes) = buf.get(block..).and_then(|rest| rest.first_chunk::<64>()) {
            let newlines = scan::eq_mask64(bytes, b'\n');
            if !self.lines_ending_in(newlines, block, &mut start, buf, frames, stats) {
                return start;
            }
            block += 64;
        }
        // The last bytes (fewer than 64) through a zero-padded copy, once per read: zeros are
        // not newlines.
        let rest = buf.get(block..).unwrap_or_default();
        let mut padded = [0u8; 64];
        if let Some(head) = padded.get_mut(..rest.len()) {
            head.copy_from_slice(rest);
            let newlines = scan::eq_mask64(&padded, b'\n');
            self.lines_ending_in(newlines, block, &mut start, buf, frames, stats);
        }
        start
    }

    /// Push the lines that end at the set bits of `newlines` (bit k: a newline at `block + k`),
    /// the first of them starting at `start`, which moves past each; `false` at a line longer
    /// than `max_length`, with `start` at it.
    #[inline(always)]
    fn lines_ending_in(
        &self,
        mut newlines: u64,
        block: usize,
        start: &mut usize,
        buf: &[u8],
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> bool {
        while newlines != 0 {
            let end = block + newlines.trailing_zeros() as usize;
            newlines &= newlines - 1;
            if end - *start > self.max_length {
                return false;
            }
            push_line(buf, *start, end, frames, stats);
            *start = end + 1;
        }
        true
    }

    /// A newline-terminated frame at `pos`; returns where the next frame starts, or `None` when
    /// more bytes are needed.
    fn newline(
        &mut self,
        buf: &[u8],
        pos: usize,
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> Option<usize> {
        // Look one byte past max_length so a line of exactly max_length bytes is not cut.
        let window = &buf[pos..buf.len().min(pos.saturating_add(self.max_length + 1))];
        match memchr(b'\n', window) {
            Some(i) => {
                push_line(buf, pos, pos + i, frames, stats);
                Some(pos + i + 1)
            }
            None if window.len() > self.max_length => {
                frames.push(Frame::new(pos, pos + self.max_length, true));
                stats.truncated += 1;
                self.state = State::Discard;
                Some(pos + self.max_length)
            }
            None => None,
        }
    }

    /// An octet-counted frame at `pos`. In Auto mode (`fallback`) a malformed count makes the
    /// message newline-framed instead, so its bytes are not lost.
    fn octet(
        &mut self,
        buf: &[u8],
        pos: usize,
        fallback: bool,
        frames: &mut Vec<Frame>,
        stats: &mut FramingStats,
    ) -> Option<usize> {
        let rest = &buf[pos..];
        match parse_count(rest) {
            Count::NeedMore => None,
            Count::Len { len: 0, msg_start } => {
                stats.empty_frames += 1;
                Some(pos + msg_start)
            }
            // Auto mode: a count is only a count when a syslog message (`<PRI>`) follows it.
            // Otherwise it is the start of a line of text such as `200 OK` or `12 apples`, and
            // reading it as a count would swallow the lines after it.
            Count::Len { msg_start, .. } if fallback && rest.get(msg_start) != Some(&b'<') => {
                if msg_start >= rest.len() {
                    return None;
                }
                self.newline(buf, pos, frames, stats)
            }
            Count::Len { len, msg_start } => {
                let start = pos + msg_start;
                let avail = (buf.len() - start) as u64;
                let max = self.max_length as u64;
                if len > max {
                    if avail < max {
                        return None;
                    }
                    frames.push(Frame::new(start, start + self.max_length, true));
                    stats.truncated += 1;
                    self.state = State::Skip(len - max);
                    Some(start + self.max_length)
                } else if avail < len {
                    None
                } else {
                    let end = start + len as usize;
                    frames.push(Frame::new(start, end, false));
                    Some(end)
                }
            }
            Count::Invalid if fallback => {
                // Count it once, when the line is complete, not on every call that waits for it.
                let next = self.newline(buf, pos, frames, stats)?;
                stats.invalid_octet_count += 1;
                Some(next)
            }
            Count::Invalid => {
                // Senders that append a LF (or CRLF) after each counted frame are common and
                // harmless: step over line ends between frames without complaint.
                if matches!(rest[0], b'\n' | b'\r') {
                    return Some(pos + 1);
                }
                stats.invalid_octet_count += 1;
                self.state = State::Discard;
                Some(pos)
            }
        }
    }
}

/// Push the line `buf[start..end]` without its trailing CR and NULs, or count it as empty.
#[inline]
fn push_line(
    buf: &[u8],
    start: usize,
    end: usize,
    frames: &mut Vec<Frame>,
    stats: &mut FramingStats,
) {
    let end = scan::trim_end(buf, start, end, |c| matches!(c, b'\r' | b'\0'));
    if end == start {
        stats.empty_frames += 1;
    } else {
        frames.push(Frame::new(start, end, false));
    }
}

/// Frames as owned bytes with their `truncated` flag, and the stats, from [`frame_in_chunks`].
#[doc(hidden)]
pub type ChunkedFrames = (Vec<(Vec<u8>, bool)>, FramingStats);

/// Test support (unit tests, proptests, the fuzz target): drives a [`Framer`] the way a connection
/// task does, feeding `input` in chunks of the given sizes (cycled) and calling `finish` at the
/// end. Panics when an invariant breaks: consumption past the buffer, a frame outside the consumed
/// bytes, or a partial frame buffered beyond `max_length` plus a length prefix.
#[doc(hidden)]
pub fn frame_in_chunks(
    mode: FramingMode,
    max_length: usize,
    input: &[u8],
    chunks: &[usize],
) -> ChunkedFrames {
    let mut framer = Framer::new(mode, max_length);
    let mut stats = FramingStats::default();
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut frames = Vec::new();
    let mut at = 0;
    let mut sizes = chunks.iter().copied().cycle();
    while at < input.len() {
        let n = sizes.next().unwrap_or(1).clamp(1, input.len() - at);
        buf.extend_from_slice(&input[at..at + n]);
        at += n;
        frames.clear();
        let consumed = framer.decode(&buf, &mut frames, &mut stats);
        assert!(consumed <= buf.len(), "consumed past the buffer");
        for f in &frames {
            assert!(
                f.start <= f.end && f.end as usize <= consumed,
                "frame outside consumed bytes"
            );
            out.push((buf[f.start as usize..f.end as usize].to_vec(), f.truncated));
        }
        buf.drain(..consumed);
        assert!(
            buf.len() <= max_length.max(1) + MAX_LEN_DIGITS + 2,
            "buffered {} bytes with max_length {max_length}",
            buf.len()
        );
    }
    frames.clear();
    assert_eq!(
        framer.finish(&buf, &mut frames, &mut stats),
        buf.len(),
        "finish must consume all"
    );
    for f in &frames {
        assert!(
            f.start <= f.end && f.end as usize <= buf.len(),
            "frame outside the buffer"
        );
        out.push((buf[f.start as usize..f.end as usize].to_vec(), f.truncated));
    }
    (out, stats)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Frames as (bytes, truncated), so results of different chunkings compare equal.
    type Out = (Vec<(Vec<u8>, bool)>, FramingStats);

    /// Drive a framer the way a connection task does: append each chunk, decode, split off the
    /// consumed bytes, and `finish` at EOF. Also checks the buffering bound.
    fn run(mode: FramingMode, max: usize, input: &[u8], chunks: &[usize]) -> Out {
        frame_in_chunks(mode, max, input, chunks)
    }

    fn whole(mode: FramingMode, max: usize, input: &[u8]) -> Out {
        let out = run(mode, max, input, &[usize::MAX]);
        // Every chunking must agree with the whole-buffer result.
        assert_eq!(run(mode, max, input, &[1]), out, "byte by byte");
        assert_eq!(run(mode, max, input, &[2, 3, 7]), out, "2,3,7");
        assert_eq!(run(mode, max, input, &[5, 1, 13]), out, "5,1,13");
        out
    }

    fn texts(out: &Out) -> Vec<&[u8]> {
        out.0.iter().map(|(b, _)| b.as_slice()).collect()
    }

    #[test]
    fn auto_reads_digits_as_a_count_only_before_a_syslog_message() {
        // Regression: `200 OK ...` swallowed the next 200 bytes as one octet-counted frame.
        let input = b"200 OK GET /index.html\n12 apples\n5 <1>x\nplain\n";
        let out = whole(FramingMode::Auto, 1000, input);
        let expected: Vec<&[u8]> =
            vec![b"200 OK GET /index.html", b"12 apples", b"<1>x\n", b"plain"];
        assert_eq!(texts(&out), expected);
    }

    #[test]
    fn newline_frames_strip_cr_and_nul_and_skip_empty_lines() {
        let out = whole(FramingMode::Newline, 1024, b"a\r\n\nbb\0\0\n\r\nccc");
        assert_eq!(texts(&out), vec![&b"a"[..], b"bb", b"ccc"]);
        assert_eq!(out.1.empty_frames, 2);
        assert!(out.0.iter().all(|(_, t)| !t));
    }

    #[test]
    fn newline_partial_line_waits_then_finishes() {
        let mut f = Framer::new(FramingMode::Newline, 100);
        let (mut frames, mut stats) = (Vec::new(), FramingStats::default());
        assert_eq!(f.decode(b"one\ntw", &mut frames, &mut stats), 4);
        assert_eq!(frames, vec![Frame::new(0, 3, false)]);
        frames.clear();
        assert_eq!(f.finish(b"tw", &mut frames, &mut stats), 2);
        assert_eq!(frames, vec![Frame::new(0, 2, false)]);
    }

    #[test]
    fn newline_long_line_is_cut_and_rest_discarded() {
        let out = whole(FramingMode::Newline, 4, b"abcdefghij\nxy\nabcd\nabcde");
        assert_eq!(texts(&out), vec![&b"abcd"[..], b"xy", b"abcd", b"abcd"]);
        let flags: Vec<bool> = out.0.iter().map(|(_, t)| *t).collect();
        assert_eq!(flags, vec![true, false, false, true]);
        assert_eq!(out.1.truncated, 2);
    }

    #[test]
    fn ten_megabyte_line_never_buffers_more_than_max_length() {
        let mut f = Framer::new(FramingMode::Newline, 1000);
        let (mut frames, mut stats) = (Vec::new(), FramingStats::default());
        let chunk = vec![b'x'; 64 * 1024];
        let mut buf: Vec<u8> = Vec::new();
        for _ in 0..160 {
            buf.extend_from_slice(&chunk);
            let n = f.decode(&buf, &mut frames, &mut stats);
            buf.drain(..n);
            assert!(buf.len() <= 1001);
        }
        buf.extend_from_slice(b"tail\nnext\n");
        let n = f.decode(&buf, &mut frames, &mut stats);
        assert_eq!(n, buf.len());
        assert_eq!(frames.len(), 2);
        assert!(frames[0].truncated);
        assert_eq!(
            &buf[frames[1].start as usize..frames[1].end as usize],
            b"next"
        );
        assert_eq!(stats.truncated, 1);
    }

    #[test]
    fn octet_counting_back_to_back_frames() {
        let input = b"5 hello3 abc\n2 xy";
        let out = whole(FramingMode::OctetCounting, 100, input);
        assert_eq!(texts(&out), vec![&b"hello"[..], b"abc", b"xy"]);
        assert_eq!(out.1, FramingStats::default());
    }

    #[test]
    fn octet_counting_keeps_counted_newlines() {
        let out = whole(FramingMode::OctetCounting, 100, b"4 a\nb\n3 xyz");
        assert_eq!(texts(&out), vec![&b"a\nb\n"[..], b"xyz"]);
    }

    #[test]
    fn octet_counting_bad_count_resyncs_at_newline() {
        let out = whole(
            FramingMode::OctetCounting,
            100,
            b"12a <13>bad\n3 abc x\n2 ok",
        );
        assert_eq!(texts(&out), vec![&b"abc"[..], b"ok"]);
        assert_eq!(out.1.invalid_octet_count, 2);
    }

    #[test]
    fn octet_counting_missing_len_and_zero_len() {
        let out = whole(FramingMode::OctetCounting, 100, b" 3 abc\n0 2 hi");
        assert_eq!(texts(&out), vec![&b"hi"[..]]);
        assert_eq!(out.1.invalid_octet_count, 1);
        assert_eq!(out.1.empty_frames, 1);
    }

    #[test]
    fn octet_count_above_max_length_is_cut_and_skipped() {
        let out = whole(FramingMode::OctetCounting, 4, b"10 01234567893 abc");
        assert_eq!(
            out.0,
            vec![(b"0123".to_vec(), true), (b"abc".to_vec(), false)]
        );
        assert_eq!(out.1.truncated, 1);
    }

    #[test]
    fn octet_short_frame_at_eof_is_truncated() {
        let out = whole(FramingMode::OctetCounting, 100, b"16 <1>1");
        assert_eq!(out.0, vec![(b"<1>1".to_vec(), true)]);
        assert_eq!(out.1.truncated, 1);
    }

    #[test]
    fn octet_count_at_eof_without_its_message_is_not_an_empty_frame() {
        // Found by the `framing` fuzz target: `23 ` and then EOF gave an empty frame (truncated),
        // which the source would have decoded into an empty event.
        let out = whole(FramingMode::OctetCounting, 0, b"23 ");
        assert!(out.0.is_empty(), "{:?}", out.0);
        assert_eq!(out.1.empty_frames, 1);
        let out = whole(FramingMode::OctetCounting, 100, b"3 abc16 ");
        assert_eq!(texts(&out), vec![&b"abc"[..]]);
        assert_eq!((out.1.truncated, out.1.empty_frames), (0, 1));
        // One byte of it is a (truncated) frame, as before.
        let out = whole(FramingMode::OctetCounting, 100, b"16 <");
        assert_eq!(out.0, vec![(b"<".to_vec(), true)]);
    }

    #[test]
    fn octet_too_many_digits_is_invalid() {
        let out = whole(FramingMode::OctetCounting, 100, b"12345678901 x\n1 y");
        assert_eq!(texts(&out), vec![&b"y"[..]]);
        assert_eq!(out.1.invalid_octet_count, 1);
    }

    #[test]
    fn auto_mixes_framings_per_message() {
        let input = b"<13>one\n4 <1>2x<14>three\r\n";
        let out = whole(FramingMode::Auto, 100, input);
        assert_eq!(texts(&out), vec![&b"<13>one"[..], b"<1>2", b"x<14>three"]);
    }

    #[test]
    fn auto_malformed_count_is_newline_framed() {
        let out = whole(
            FramingMode::Auto,
            100,
            b"12a <13>keep me\n2024-01-01 also\n3 abc",
        );
        // `3 abc` is a line, not a count: no syslog message (`<PRI>`) follows the count.
        assert_eq!(
            texts(&out),
            vec![&b"12a <13>keep me"[..], b"2024-01-01 also", b"3 abc"]
        );
        assert_eq!(out.1.invalid_octet_count, 2);
    }

    #[test]
    fn auto_bare_number_at_eof_is_kept() {
        let out = whole(FramingMode::Auto, 100, b"<1>a\n42");
        assert_eq!(texts(&out), vec![&b"<1>a"[..], b"42"]);
    }

    #[test]
    fn discard_state_survives_across_calls() {
        let mut f = Framer::new(FramingMode::Newline, 3);
        let (mut frames, mut stats) = (Vec::new(), FramingStats::default());
        assert_eq!(f.decode(b"abcdef", &mut frames, &mut stats), 6);
        assert_eq!(frames, vec![Frame::new(0, 3, true)]);
        frames.clear();
        assert_eq!(f.decode(b"gh", &mut frames, &mut stats), 2);
        assert!(frames.is_empty());
        assert_eq!(f.decode(b"i\nok\n", &mut frames, &mut stats), 5);
        assert_eq!(frames, vec![Frame::new(2, 4, false)]);
    }

    #[test]
    fn empty_input_and_zero_max_length_are_harmless() {
        let mut f = Framer::new(FramingMode::Auto, 0);
        let (mut frames, mut stats) = (Vec::new(), FramingStats::default());
        assert_eq!(f.decode(b"", &mut frames, &mut stats), 0);
        assert_eq!(f.finish(b"", &mut frames, &mut stats), 0);
        let out = whole(FramingMode::Newline, 0, b"ab\n");
        assert_eq!(out.0, vec![(b"a".to_vec(), true)]);
    }
}
