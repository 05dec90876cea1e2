//! The parser against [`super::reference`], the parser before the fast paths: generated frames
//! (a grammar of what senders write, right and wrong, then random damage) must give the same
//! result, the same event and the same structured-data rows in both modes. Frames run one after
//! another on one thread, so the timestamp cache sees hits and misses with every kind of text
//! after the minute.

use loghaul_core::{Event, SdElement, SdParam, Span, Timestamp};

use super::{looks_like, parse, reference};
use crate::syslog::{Clock, Fail, SdOut};

/// xorshift64*: a fixed seed gives the same frames on every run. `bad` is how often (percent) a
/// choice takes a wrong variant; each frame sets it, so some frames are clean and some are not.
struct Rng {
    state: u64,
    bad: usize,
}

impl Rng {
    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a [u8] {
        items[self.below(items.len())].as_bytes()
    }

    /// One of `good`, or (`bad` percent of the time) one of `wrong`.
    fn choose<'a>(&mut self, good: &[&'a str], wrong: &[&'a str]) -> &'a [u8] {
        if self.chance(self.bad) {
            self.pick(wrong)
        } else {
            self.pick(good)
        }
    }

    fn digits(&mut self, out: &mut Vec<u8>, n: usize) {
        for _ in 0..n {
            out.push(b'0' + self.below(10) as u8);
        }
    }

    /// `n` bytes from `alphabet`.
    fn text(&mut self, out: &mut Vec<u8>, n: usize, alphabet: &[u8]) {
        for _ in 0..n {
            out.push(alphabet[self.below(alphabet.len())]);
        }
    }
}

const NAME_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@._-";
const TRICKY: &[u8] = b" []\"\\=-<>:.+Zz0123456789Tt\x00\x1d\x7f\xc3\xa9\xff}";

fn timestamp(rng: &mut Rng, out: &mut Vec<u8>) {
    if rng.chance(10) {
        out.extend_from_slice(
            rng.choose(&["-"], &["yesterday", "2003-10-11", "", "2003-10-11T22:14"]),
        );
        return;
    }
    // A few minutes many frames share (cache hits), and some that are not real minutes.
    out.extend_from_slice(rng.choose(
        &[
            "2003-10-11T22:14",
            "2026-11-22T05:53",
            "2026-11-22T05:53",
            "2026-11-22T05:54",
            "2004-02-29T00:00",
            "2000-02-29T12:00",
            "0000-01-01T00:00",
            "9999-12-31T23:59",
            "1677-09-21T00:12",
            "2262-04-11T23:47",
            "1970-01-01T00:00",
        ],
        &[
            "2003-02-29T00:00",
            "1900-02-29T12:00",
            "2003-13-01T00:00",
            "2003-00-10T00:00",
            "2003-10-32T00:00",
            "2003-10-00T00:00",
            "2003-04-31T00:00",
            "2003-10-11T24:00",
            "2003-10-11T23:60",
            "2003-10-11t22:14",
            "2003-10-11 22:14",
            "2003/10/11T22:14",
        ],
    ));
    if rng.chance(rng.bad / 2) {
        let at = out.len() - 1 - rng.below(16);
        out[at] = TRICKY[rng.below(TRICKY.len())];
    }
    out.extend_from_slice(rng.choose(
        &[":15", ":00", ":59", ":07"],
        &[":60", ":61", ":99", ":5", ":5x", ":", "", "x15"],
    ));
    if rng.chance(70) {
        out.push(b'.');
        // 1..=6 digits are what RFC 5424 allows; 0 and 7.. only lenient mode (or nothing).
        let n = if rng.chance(rng.bad) {
            rng.below(13)
        } else {
            1 + rng.below(6)
        };
        rng.digits(out, n);
    }
    out.extend_from_slice(rng.choose(
        &[
            "Z", "Z", "Z", "+05:30", "-07:00", "+00:00", "+23:59", "-23:59",
        ],
        &[
            "z", "-0700", "+0530", "+24:00", "+00:60", "", "Z+07:00", "ZZ", "+5:30", "-", "+05:3",
            "Zx",
        ],
    ));
}

fn header_field(rng: &mut Rng, out: &mut Vec<u8>, max: usize) {
    if rng.chance(rng.bad) {
        match rng.below(2) {
            0 => out.extend_from_slice(rng.pick(&["", "hôst", "a\x01b", "a\x7fb", "--", "-x"])),
            _ => out.extend(std::iter::repeat_n(b'x', max + 1)),
        }
        return;
    }
    match rng.below(10) {
        0..=3 => out.push(b'-'),
        4 => out.extend(std::iter::repeat_n(b'x', max)),
        _ => {
            let n = 1 + rng.below(24);
            rng.text(out, n, NAME_CHARS);
        }
    }
}

fn sd_name(rng: &mut Rng, out: &mut Vec<u8>) {
    if rng.chance(rng.bad) {
        out.extend_from_slice(rng.pick(&["", "a b", "a\"b", "a=b", "é", "a\x01", "x}"]));
        return;
    }
    match rng.below(12) {
        0 => out.extend(std::iter::repeat_n(b'n', 31 + rng.below(3))),
        1 => out.extend(std::iter::repeat_n(b'n', 1 + rng.below(40))),
        2 => out.extend_from_slice(rng.pick(&["exampleSDID@32473", "meta@32473", "id1", "a"])),
        _ => {
            let n = 1 + rng.below(20);
            rng.text(out, n, NAME_CHARS);
        }
    }
}

fn sd_value(rng: &mut Rng, out: &mut Vec<u8>) {
    let n = rng.below(24);
    for _ in 0..n {
        match rng.below(20) {
            0 => out.extend_from_slice(rng.choose(&["\\\"", "\\\\", "\\]", "\\n"], &["\\"])),
            1 if rng.chance(rng.bad) => out.push(b']'),
            2 => out.push(b' '),
            3 => out.extend_from_slice("é".as_bytes()),
            _ => out.push(NAME_CHARS[rng.below(NAME_CHARS.len())]),
        }
    }
}

fn structured_data(rng: &mut Rng, out: &mut Vec<u8>) {
    if rng.chance(20) {
        out.push(b'-');
        return;
    }
    for _ in 0..1 + rng.below(3) {
        out.push(b'[');
        sd_name(rng, out);
        for _ in 0..rng.below(5) {
            out.extend_from_slice(rng.choose(&[" "], &["  ", ""]));
            sd_name(rng, out);
            out.extend_from_slice(rng.choose(&["="], &[" =", "= ", " = ", ""]));
            out.extend_from_slice(rng.choose(&["\""], &["", "'"]));
            sd_value(rng, out);
            out.extend_from_slice(rng.choose(&["\""], &[""]));
        }
        out.extend_from_slice(rng.choose(&["]"], &[" ]", "  ]", ""]));
        if rng.chance(rng.bad) {
            out.push(b' ');
        }
    }
}

/// One frame: the grammar of RFC 5424 with wrong choices mixed in, then maybe some damage.
fn frame(rng: &mut Rng) -> Vec<u8> {
    rng.bad = [0, 0, 2, 5, 10, 30][rng.below(6)];
    let mut out = Vec::new();
    if rng.chance(90) {
        out.extend_from_slice(rng.choose(
            &["<165>", "<13>", "<0>", "<7>", "<191>", "<99>", "<10>"],
            &[
                "<192>", "<200>", "<002>", "<01>", "<09>", "<1", "<>", "<1234>", "<12a>", "165>",
                "", "<1>>",
            ],
        ));
    } else {
        out.push(b'<');
        let n = rng.below(5);
        rng.digits(&mut out, n);
        out.push(b'>');
    }
    out.extend_from_slice(rng.choose(
        &["1", "1", "1", "2", "9", "12", "123"],
        &["0", "1234", "01", "", "x", "1x"],
    ));
    out.extend_from_slice(rng.choose(&[" "], &["  ", ""]));
    timestamp(rng, &mut out);
    for max in [255, 48, 128, 32] {
        out.extend_from_slice(rng.choose(&[" "], &["  ", ""]));
        header_field(rng, &mut out, max);
    }
    out.extend_from_slice(rng.choose(&[" "], &["  ", ""]));
    structured_data(rng, &mut out);
    out.extend_from_slice(rng.choose(
        &[
            "",
            " msg",
            " An application event log entry...",
            "  two",
            " \u{feff}msg",
            " \u{feff}",
            " [not sd]",
        ],
        &["x", "\u{feff}"],
    ));
    if rng.chance(rng.bad) {
        for _ in 0..1 + rng.below(3) {
            if out.is_empty() {
                break;
            }
            let at = rng.below(out.len());
            match rng.below(4) {
                0 => out[at] = TRICKY[rng.below(TRICKY.len())],
                1 => out.insert(at, TRICKY[rng.below(TRICKY.len())]),
                2 => {
                    out.remove(at);
                }
                _ => out.truncate(at),
            }
        }
    }
    out
}

/// The event, the result and the rows a parser leaves, starting from what `decode_frame` sets up
/// and side tables that already hold another frame's rows.
type Outcome = (Result<(), Fail>, Event, Vec<SdElement>, Vec<SdParam>);

/// `rfc5424::parse` and `reference::parse`.
type Parser = fn(&[u8], usize, bool, Clock, &mut SdOut<'_>, &mut Event) -> Result<(), Fail>;

fn run(parser: Parser, buf: &[u8], start: usize, strict: bool, clock: Clock) -> Outcome {
    let mut elements = vec![SdElement {
        id: Span::new(0, 1),
        params: (0, 1),
    }];
    let mut params = vec![SdParam {
        name: Span::new(0, 1),
        value: Span::new(0, 0),
        escaped: false,
    }];
    let mut event = Event {
        message: Span::new(start, buf.len()).into(),
        ..Event::default()
    };
    let result = parser(
        buf,
        start,
        strict,
        clock,
        &mut SdOut {
            elements: &mut elements,
            params: &mut params,
        },
        &mut event,
    );
    (result, event, elements, params)
}

#[test]
fn same_as_reference_on_generated_frames() {
    let clocks = [
        Clock {
            received: Timestamp::from_nanos(1_710_504_000_123_456_000, 6),
            offset: 0,
            year: 2024,
        },
        Clock {
            received: Timestamp::from_nanos(1_700_000_000_123_456_000, 6),
            offset: -7 * 3600,
            year: 2023,
        },
    ];
    let mut rng = Rng {
        state: 0x9e37_79b9_7f4a_7c15,
        bad: 0,
    };
    let mut parsed = [0usize; 2];
    for case in 0..200_000 {
        let mut buf = frame(&mut rng);
        // Frames sit anywhere in a batch arena, after other frames.
        let start = if rng.chance(20) {
            let prefix = b"<13>1 - - - - - - earlier frame\n";
            buf.splice(0..0, prefix.iter().copied());
            prefix.len()
        } else {
            0
        };
        assert_eq!(
            looks_like(&buf[start..]),
            reference::looks_like(&buf[start..]),
            "looks_like({:?})",
            String::from_utf8_lossy(&buf[start..])
        );
        for strict in [false, true] {
            let clock = clocks[case % 2];
            let new = run(parse, &buf, start, strict, clock);
            let old = run(reference::parse, &buf, start, strict, clock);
            assert_eq!(
                new,
                old,
                "strict={strict} frame {:?}",
                String::from_utf8_lossy(&buf[start..])
            );
            parsed[usize::from(strict)] += usize::from(new.0.is_ok());
        }
    }
    // The grammar must reach the success paths often, not only the errors.
    assert!(parsed[0] > 60_000 && parsed[1] > 20_000, "{parsed:?}");
}

#[test]
fn sd_values_with_escapes_and_brackets() {
    let clock = Clock {
        received: Timestamp::from_nanos(0, 6),
        offset: 0,
        year: 2024,
    };
    let cases: &[&str] = &[
        r#"<13>1 - - - - - [x a="q\"t"] m"#,
        r#"<13>1 - - - - - [x a="b\\"] m"#,
        r#"<13>1 - - - - - [x a="b\]c"] m"#,
        r#"<13>1 - - - - - [x a="b]c"] m"#,
        r#"<13>1 - - - - - [x a="\"\"\"\"\"\"\"\"\"\"\""] m"#,
        r#"<13>1 - - - - - [x a="0123456789abcdef\"0123456789"] m"#,
        r#"<13>1 - - - - - [x a="unterminated"#,
        r#"<13>1 - - - - - [x a="unterminated\"#,
        r#"<13>1 - - - - - [x a="ends in backslash\"#,
        r#"<13>1 - - - - - [x a="\"#,
        r#"<13>1 - - - - - [x a=""#,
        r#"<13>1 - - - - - [x a="]"#,
        r#"<13>1 - - - - - [x a=""]"#,
        r#"<13>1 - - - - - [x a="" b=""][y]"#,
        r#"<13>1 - - - - - [x a = "1"]"#,
        r#"<13>1 - - - - - [x  a="1"  ]"#,
        r#"<13>1 - - - - - [x a="1"b="2"]"#,
        r#"<13>1 - - - - - [x a=1]"#,
        r#"<13>1 - - - - - [x a]"#,
        r#"<13>1 - - - - - [x ="1"]"#,
        r#"<13>1 - - - - - [x]"#,
        r#"<13>1 - - - - - [x"#,
        r#"<13>1 - - - - - ["#,
        r#"<13>1 - - - - - []"#,
        r#"<13>1 - - - - - [x][x]"#,
        r#"<13>1 - - - - - [nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn a="1"]"#,
        r#"<13>1 - - - - - [nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn a="1"]"#,
        "<13>1 - - - - - [x\x7f a=\"1\"]",
        "<13>1 - - - - - [x\u{e9} a=\"1\"]",
        "<13>1 - - - - - [x a\x01=\"1\"]",
    ];
    for input in cases {
        for strict in [false, true] {
            let buf = input.as_bytes();
            assert_eq!(
                run(parse, buf, 0, strict, clock),
                run(reference::parse, buf, 0, strict, clock),
                "strict={strict} {input:?}"
            );
        }
    }
    // And what they mean, for the escape cases the fast paths treat specially.
    let (result, _, _, params) = run(parse, cases[4].as_bytes(), 0, false, clock);
    assert_eq!(result, Ok(()));
    assert_eq!(params[1].value.len(), 22);
    assert!(params[1].escaped);
    let (result, _, elements, params) = run(parse, cases[3].as_bytes(), 0, false, clock);
    assert_eq!(result, Ok(()));
    assert_eq!((elements.len(), params.len()), (2, 2));
    assert!(!params[1].escaped);
    for input in &cases[6..=11] {
        let (result, event, elements, _) = run(parse, input.as_bytes(), 0, false, clock);
        assert_eq!(result, Ok(()), "{input}");
        assert_eq!(elements.len(), 1, "lenient keeps unparsed SD as text");
        assert_eq!(event.message.or_empty().start, 16);
    }
}
