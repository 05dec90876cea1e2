//! Where each event's bytes begin and end in what was read from one file: lines, over-long lines
//! cut at `max_line_size`, and multiline groups.
//!
//! The tailer hands over a *region*: the bytes it carried from the last read (an unfinished line,
//! an open group) followed by the bytes just read. [`Lines::split`] finds the complete lines, turns
//! them into [`Piece`]s (spans of the region) and says from where the region must be carried
//! into the next one. Nothing is copied here: a piece is a span, and a multiline group is one
//! span too, because a group's lines sit next to each other in the file, joined by their own
//! newlines (a `\r` before an inner newline is removed by the caller, which must copy then).
//!
//! ```text
//! region:  [ carried: open group | partial line ][ bytes just read ............ ]
//!                                               ^ scan for newlines from here
//! after:   pieces for every finished line/group; keep_from = start of what is still open
//! ```

use std::time::{Duration, Instant};

use regex::bytes::Regex;

/// How lines become events.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The most bytes of one event; longer lines are cut, the rest skipped.
    pub max_line: usize,
    pub multiline: Option<Multiline>,
}

/// Joining lines into one event, as Vector's `multiline` does.
#[derive(Debug, Clone)]
pub struct Multiline {
    pub start: Regex,
    pub condition: Regex,
    pub mode: Mode,
    pub timeout: Duration,
}

/// What `condition_pattern` decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Lines matching the condition join the group; the first that does not ends it.
    ContinueThrough,
    /// Lines matching the condition join the group, and so does the first that does not,
    /// which ends it.
    ContinuePast,
    /// Lines not matching the condition join the group; one that matches ends it and starts
    /// the next.
    HaltBefore,
    /// Lines join the group up to and including the first that matches.
    HaltWith,
}

/// One event's bytes: `region[start..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub start: usize,
    pub end: usize,
    /// Cut at `max_line_size` (or a group split there).
    pub truncated: bool,
    /// A multiline group with `\r\n` between some of its lines: the `\r`s must go.
    pub inner_cr: bool,
}

/// What a call did with the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The region's bytes before this are finished with (emitted or skipped); the rest must be
    /// carried to the front of the next region.
    pub keep_from: usize,
    /// Bytes dropped because a line was longer than `max_line_size`.
    pub skipped: u64,
}

#[derive(Debug, Clone, Copy)]
struct Group {
    start: usize,
    /// End of the last line's text (before its `\r\n` or `\n`).
    end: usize,
    inner_cr: bool,
    /// Split at `max_line_size` already: the next piece is flagged too.
    split: bool,
}

/// The state of one file's lines between reads. Positions are relative to the next region's
/// start (the carried bytes come first).
#[derive(Debug, Default)]
pub struct Lines {
    /// Inside an over-long line whose head was emitted: bytes up to its newline are skipped.
    skipping: bool,
    /// Where the unfinished line starts.
    line_start: usize,
    group: Option<Group>,
    /// When the open group last took a line.
    touched: Option<Instant>,
}

impl Lines {
    /// Whether anything is held back (an open group or an unfinished line in `carried` bytes).
    pub fn holds(&self, carried: usize) -> bool {
        self.group.is_some() || self.line_start < carried
    }

    /// When the open group is due to be emitted, if one is open.
    pub fn group_deadline(&self, rules: &Rules) -> Option<Instant> {
        let ml = rules.multiline.as_ref()?;
        self.group.as_ref()?;
        self.touched.map(|t| t + ml.timeout)
    }

    /// Forgets everything held (the file was truncated or rewound: its bytes are read again).
    pub fn reset(&mut self) {
        *self = Lines::default();
    }

    /// Emits the finished lines and groups of `region`, whose bytes before `from` were seen by an
    /// earlier call (they hold no newline past the open group).
    pub fn split(
        &mut self,
        region: &[u8],
        from: usize,
        rules: &Rules,
        now: Instant,
        out: &mut Vec<Piece>,
    ) -> Progress {
        let mut skipped = 0u64;
        let mut pos = from.min(region.len());
        if self.skipping {
            match memchr::memchr(b'\n', &region[pos..]) {
                Some(i) => {
                    // The newline itself is not counted, as for a line cut in one read.
                    skipped += i as u64;
                    self.skipping = false;
                    pos += i + 1;
                    self.line_start = pos;
                }
                None => {
                    skipped += (region.len() - pos) as u64;
                    self.line_start = region.len();
                    let keep_from = self.keep_from();
                    self.rebase(keep_from);
                    return Progress { keep_from, skipped };
                }
            }
        }
        for i in memchr::memchr_iter(b'\n', &region[pos..]) {
            let nl = pos + i;
            let start = self.line_start;
            let mut end = nl;
            if end > start && region[end - 1] == b'\r' {
                end -= 1;
            }
            if end - start > rules.max_line {
                skipped += (end - start - rules.max_line) as u64;
                self.line(region, start, start + rules.max_line, true, rules, now, out);
            } else {
                self.line(region, start, end, false, rules, now, out);
            }
            self.line_start = nl + 1;
        }
        // An unfinished line already past the limit is cut now, so what is carried stays
        // bounded however long the line grows (a 50MB line without a newline costs no memory).
        let tail = region.len() - self.line_start;
        if tail > rules.max_line {
            let start = self.line_start;
            self.line(region, start, start + rules.max_line, true, rules, now, out);
            skipped += (tail - rules.max_line) as u64;
            self.skipping = true;
            self.line_start = region.len();
        }
        let keep_from = self.keep_from();
        self.rebase(keep_from);
        Progress { keep_from, skipped }
    }

    /// Emits what is held back in `region` (the carried bytes): the unfinished line if
    /// `partial_due` (no newline will come in time: the writer paused, the file was released,
    /// or the server stops), and the open group if `partial_due` or its timeout passed.
    pub fn flush(
        &mut self,
        region: &[u8],
        partial_due: bool,
        rules: &Rules,
        now: Instant,
        out: &mut Vec<Piece>,
    ) -> Progress {
        if partial_due && !self.skipping && self.line_start < region.len() {
            let start = self.line_start;
            let end = region.len().min(start + rules.max_line);
            self.line(region, start, end, false, rules, now, out);
            self.line_start = region.len();
        }
        if partial_due {
            self.skipping = false;
        }
        let group_due = self.group_deadline(rules).is_some_and(|d| d <= now);
        if partial_due || group_due {
            self.emit_group(out);
        }
        let keep_from = self.keep_from();
        self.rebase(keep_from);
        Progress {
            keep_from,
            skipped: 0,
        }
    }

    fn keep_from(&self) -> usize {
        self.group.as_ref().map_or(self.line_start, |g| g.start)
    }

    fn rebase(&mut self, by: usize) {
        self.line_start -= by;
        if let Some(g) = &mut self.group {
            g.start -= by;
            g.end -= by;
        }
    }

    /// One finished line, `region[start..end]` without its newline.
    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        region: &[u8],
        start: usize,
        end: usize,
        truncated: bool,
        rules: &Rules,
        now: Instant,
        out: &mut Vec<Piece>,
    ) {
        let single = Piece {
            start,
            end,
            truncated,
            inner_cr: false,
        };
        let Some(ml) = &rules.multiline else {
            out.push(single);
            return;
        };
        if truncated {
            // An over-long line ends any group: what follows it is skipped up to its newline,
            // and a group cannot span skipped bytes.
            self.emit_group(out);
            out.push(single);
            return;
        }
        let text = &region[start..end];
        if self.group.is_none() {
            return self.begin(region, start, end, ml, now, out);
        }
        let matched = ml.condition.is_match(text);
        match ml.mode {
            Mode::ContinueThrough if matched => self.join(region, start, end, rules, now, out),
            Mode::ContinueThrough => {
                self.emit_group(out);
                self.begin(region, start, end, ml, now, out);
            }
            Mode::ContinuePast => {
                self.join(region, start, end, rules, now, out);
                if !matched {
                    self.emit_group(out);
                }
            }
            Mode::HaltBefore if matched => {
                self.emit_group(out);
                self.begin(region, start, end, ml, now, out);
            }
            Mode::HaltBefore => self.join(region, start, end, rules, now, out),
            Mode::HaltWith => {
                self.join(region, start, end, rules, now, out);
                if matched {
                    self.emit_group(out);
                }
            }
        }
    }

    /// A line with no group open: it starts one if it matches `start_pattern`, else it is an
    /// event of its own. As in Vector, `condition_pattern` is not applied to a group's first
    /// line.
    fn begin(
        &mut self,
        region: &[u8],
        start: usize,
        end: usize,
        ml: &Multiline,
        now: Instant,
        out: &mut Vec<Piece>,
    ) {
        let text = &region[start..end];
        if !ml.start.is_match(text) {
            out.push(Piece {
                start,
                end,
                truncated: false,
                inner_cr: false,
            });
            return;
        }
        self.group = Some(Group {
            start,
            end,
            inner_cr: false,
            split: false,
        });
        self.touched = Some(now);
    }

    fn join(
        &mut self,
        region: &[u8],
        start: usize,
        end: usize,
        rules: &Rules,
        now: Instant,
        out: &mut Vec<Piece>,
    ) {
        self.touched = Some(now);
        let Some(g) = &mut self.group else {
            return;
        };
        if end - g.start > rules.max_line {
            // The group would pass the limit: what it has so far goes out (flagged), and this
            // line opens its continuation, so no line is lost.
            g.split = true;
            self.emit_group(out);
            self.group = Some(Group {
                start,
                end,
                inner_cr: false,
                split: true,
            });
            return;
        }
        if region.get(g.end) == Some(&b'\r') {
            g.inner_cr = true;
        }
        g.end = end;
    }

    fn emit_group(&mut self, out: &mut Vec<Piece>) {
        if let Some(g) = self.group.take() {
            out.push(Piece {
                start: g.start,
                end: g.end,
                truncated: g.split,
                inner_cr: g.inner_cr,
            });
        }
        self.touched = None;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rules(max: usize, ml: Option<(&str, &str, Mode)>) -> Rules {
        Rules {
            max_line: max,
            multiline: ml.map(|(s, c, mode)| Multiline {
                start: Regex::new(s).unwrap(),
                condition: Regex::new(c).unwrap(),
                mode,
                timeout: Duration::from_millis(100),
            }),
        }
    }

    /// Feeds `input` in reads of `step` bytes, carrying as the tailer does, and returns the
    /// events (with `\r`s of inner newlines removed), the bytes skipped and what is still held.
    fn feed(input: &[u8], step: usize, rules: &Rules) -> (Vec<(String, bool)>, u64, Vec<u8>) {
        let now = Instant::now();
        let mut lines = Lines::default();
        let mut carry: Vec<u8> = Vec::new();
        let mut events = Vec::new();
        let mut skipped = 0;
        let mut pieces = Vec::new();
        for chunk in input.chunks(step.max(1)) {
            let from = carry.len();
            let mut region = std::mem::take(&mut carry);
            region.extend_from_slice(chunk);
            pieces.clear();
            let p = lines.split(&region, from, rules, now, &mut pieces);
            skipped += p.skipped;
            for piece in &pieces {
                let mut text = region[piece.start..piece.end].to_vec();
                if piece.inner_cr {
                    text = String::from_utf8_lossy(&text)
                        .replace("\r\n", "\n")
                        .into_bytes();
                }
                events.push((String::from_utf8_lossy(&text).into_owned(), piece.truncated));
            }
            carry = region[p.keep_from..].to_vec();
        }
        (events, skipped, carry)
    }

    fn texts(events: &[(String, bool)]) -> Vec<&str> {
        events.iter().map(|(t, _)| t.as_str()).collect()
    }

    #[test]
    fn lines_split_the_same_whatever_the_read_size() {
        let input = b"one\r\ntwo\n\nthree\nfour";
        for step in 1..input.len() + 1 {
            let (events, skipped, carry) = feed(input, step, &rules(100, None));
            assert_eq!(texts(&events), ["one", "two", "", "three"], "step {step}");
            assert_eq!(skipped, 0);
            assert_eq!(carry, b"four");
        }
    }

    #[test]
    fn long_lines_are_cut_and_the_rest_skipped_without_holding_it() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\nshort\n");
        input.extend(vec![b'y'; 30]);
        for step in [1, 3, 7, 64, 1000] {
            let (events, skipped, carry) = feed(&input, step, &rules(8, None));
            assert_eq!(
                events,
                [
                    ("xxxxxxxx".to_owned(), true),
                    ("short".to_owned(), false),
                    ("yyyyyyyy".to_owned(), true)
                ],
                "step {step}"
            );
            assert_eq!(skipped, 42 + 22, "step {step}");
            assert!(carry.is_empty(), "an over-long tail is never carried");
        }
    }

    #[test]
    fn flush_emits_the_partial_line_once() {
        let r = rules(100, None);
        let now = Instant::now();
        let mut lines = Lines::default();
        let mut out = Vec::new();
        let p = lines.split(b"a\nbc", 0, &r, now, &mut out);
        assert_eq!(p.keep_from, 2);
        assert!(lines.holds(2));
        out.clear();
        let p = lines.flush(b"bc", true, &r, now, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].start, out[0].end), (0, 2));
        assert_eq!(p.keep_from, 2, "nothing is carried after the flush");
        // More bytes of "the same line" are a new line, never a repeat.
        out.clear();
        let p = lines.split(b"d\n", 0, &r, now, &mut out);
        assert_eq!((out[0].start, out[0].end), (0, 1));
        assert_eq!(p.keep_from, 2);
    }

    const JAVA: &str = "2026-11-25 INFO started\n\
        2026-11-25 ERROR failed\n\
        java.lang.IllegalStateException: boom\n\
        \tat a.B.c(B.java:10)\n\
        \tat a.B.d(B.java:20)\n\
        Caused by: java.io.IOException: disk\n\
        \t... 12 more\n\
        2026-11-25 INFO next\n";

    #[test]
    fn continue_through_joins_a_java_stack_trace() {
        let r = rules(
            10_000,
            Some((
                r"^\d{4}-",
                r"^(\s|Caused by|[\w.]+(Exception|Error))",
                Mode::ContinueThrough,
            )),
        );
        for step in [1, 5, 17, 4096] {
            let (events, _, carry) = feed(JAVA.as_bytes(), step, &r);
            assert_eq!(events.len(), 2, "step {step}: {events:?}");
            assert_eq!(events[0].0, "2026-11-25 INFO started");
            assert!(
                events[1]
                    .0
                    .starts_with("2026-11-25 ERROR failed\njava.lang")
            );
            assert!(events[1].0.ends_with("\t... 12 more"));
            assert_eq!(
                carry, b"2026-11-25 INFO next\n",
                "the last group is still open"
            );
        }
    }

    #[test]
    fn halt_before_joins_a_python_traceback() {
        let input = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\nValueError: bad\nplain line\nTraceback (most recent call last):\n  File \"y.py\"\nKeyError: 'k'\n";
        // A traceback runs until its exception line, which it includes.
        let r = rules(10_000, Some((r"^Traceback", r"^\S", Mode::HaltWith)));
        let (events, _, carry) = feed(input.as_bytes(), 3, &r);
        assert_eq!(
            texts(&events),
            [
                "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\nValueError: bad",
                "plain line",
                "Traceback (most recent call last):\n  File \"y.py\"\nKeyError: 'k'",
            ]
        );
        assert!(carry.is_empty());
        // halt_before: a group runs until the next line that starts one.
        let r = rules(10_000, Some((r"^\S", r"^\S", Mode::HaltBefore)));
        let (events, _, _) = feed(b"a\n b\n c\nd\n e\nf\n", 2, &r);
        assert_eq!(texts(&events), ["a\n b\n c", "d\n e"]);
    }

    #[test]
    fn continue_past_takes_the_line_after_a_continuation_marker() {
        let r = rules(10_000, Some((r"\\$", r"\\$", Mode::ContinuePast)));
        let (events, _, _) = feed(b"one \\\ntwo \\\nthree\nfour\n", 4, &r);
        assert_eq!(texts(&events), ["one \\\ntwo \\\nthree", "four"]);
    }

    #[test]
    fn groups_lose_inner_carriage_returns_and_split_at_the_limit() {
        let r = rules(12, Some((r"^\S", r"^\s", Mode::ContinueThrough)));
        let (events, skipped, _) = feed(b"abc\r\n def\r\n ghijk\r\nz\r\n", 5, &r);
        assert_eq!(
            events,
            [("abc\n def".to_owned(), true), (" ghijk".to_owned(), true)]
        );
        assert_eq!(skipped, 0, "a split group loses nothing");
    }

    #[test]
    fn an_open_group_is_emitted_after_its_timeout() {
        let r = rules(100, Some((r"^\S", r"^\s", Mode::ContinueThrough)));
        let t0 = Instant::now();
        let mut lines = Lines::default();
        let mut out = Vec::new();
        let p = lines.split(b"a\n b\n", 0, &r, t0, &mut out);
        assert!(out.is_empty());
        assert_eq!(p.keep_from, 0);
        let region = b"a\n b\n";
        let p = lines.flush(region, false, &r, t0 + Duration::from_millis(50), &mut out);
        assert!(out.is_empty(), "not due yet");
        assert_eq!(p.keep_from, 0);
        let p = lines.flush(region, false, &r, t0 + Duration::from_millis(150), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(&region[out[0].start..out[0].end], b"a\n b");
        assert_eq!(p.keep_from, region.len());
    }
}
