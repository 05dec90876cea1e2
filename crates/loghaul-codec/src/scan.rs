//! Byte search for the parsers' short scans (tokens, names, values).
//!
//! - [`find`] works a word at a time: eight bytes per step with plain integer arithmetic, which
//!   beats both a byte loop and a `memchr` call on the 5..50-byte stretches syslog fields are made
//!   of, as long as it looks for one to three bytes (header fields, tags, SD values).
//! - [`find_class`] looks each byte up in a class table, eight lookups per step. Each target byte
//!   costs the word search about four instructions per word, so for SD-NAMEs (four bytes, and a
//!   range in strict mode) a few bytes long, one lookup per byte is cheaper.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// `c` in every byte of a word.
#[inline(always)]
const fn splat(c: u8) -> u64 {
    LO * c as u64
}

/// High bit set in each byte of `x` equal to `c`. Only the lowest flagged byte is exact (borrows
/// can flag bytes above it), which is all [`find`] uses.
#[inline(always)]
pub(crate) fn eq(x: u64, c: u8) -> u64 {
    let y = x ^ splat(c);
    y.wrapping_sub(LO) & !y & HI
}

/// The index of the first byte of `s` at or after `from` that `byte` accepts, where `word` flags
/// (at least, and exactly at the lowest flag) those bytes in a little-endian word; `None` if
/// there is none or `from` is past the end.
#[inline(always)]
pub(crate) fn find(
    s: &[u8],
    from: usize,
    word: impl Fn(u64) -> u64,
    byte: impl Fn(u8) -> bool,
) -> Option<usize> {
    // An index and one test per word keep the loop to a single induction variable.
    let mut i = from;
    while let Some(chunk) = s.get(i..i.wrapping_add(8)) {
        let mut w = [0; 8];
        w.copy_from_slice(chunk);
        let m = word(u64::from_le_bytes(w));
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    let at = i;
    s.get(at..)?.iter().position(|&c| byte(c)).map(|k| at + k)
}

/// The first `c` at or after `from`.
#[inline(always)]
pub(crate) fn find_byte(s: &[u8], from: usize, c: u8) -> Option<usize> {
    find(s, from, |w| eq(w, c), |b| b == c)
}

/// Byte classes for [`find_class`], one bit each.
pub(crate) mod class {
    /// Ends a lenient SD-NAME: `=`, SP, `]`, `"`.
    pub(crate) const NAME_END: u8 = 1;
    /// Ends a strict SD-NAME: those and anything outside PRINTUSASCII (33..=126).
    pub(crate) const STRICT_NAME_END: u8 = 2;
}

const fn classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let name_end = matches!(b, b'=' | b' ' | b']' | b'"');
        if name_end {
            t[c] |= class::NAME_END;
        }
        if name_end || b < 33 || b > 126 {
            t[c] |= class::STRICT_NAME_END;
        }
        c += 1;
    }
    t
}

static CLASSES: [u8; 256] = classes();

/// Whether `c` is in any of the classes in `mask`.
#[inline(always)]
pub(crate) fn is(c: u8, mask: u8) -> bool {
    CLASSES[usize::from(c)] & mask != 0
}

/// The index of the first byte of `s` at or after `from` in any of the classes in `mask`; `None`
/// if there is none or `from` is past the end.
#[inline(always)]
pub(crate) fn find_class(s: &[u8], from: usize, mask: u8) -> Option<usize> {
    let mut rest = s.get(from..)?;
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        // Spelled out rather than a loop, which the compiler does not always unroll: eight
        // lookups with no bounds test between them.
        let &[c0, c1, c2, c3, c4, c5, c6, c7] = chunk;
        let k = if is(c0, mask) {
            0
        } else if is(c1, mask) {
            1
        } else if is(c2, mask) {
            2
        } else if is(c3, mask) {
            3
        } else if is(c4, mask) {
            4
        } else if is(c5, mask) {
            5
        } else if is(c6, mask) {
            6
        } else if is(c7, mask) {
            7
        } else {
            rest = tail;
            continue;
        };
        return Some(s.len() - rest.len() + k);
    }
    let at = s.len() - rest.len();
    rest.iter().position(|&c| is(c, mask)).map(|k| at + k)
}

/// Whether every byte of `s` is ASCII: words OR-ed together (the compiler vectorises the fold),
/// no early exit, since the answer is nearly always yes.
#[inline]
pub(crate) fn is_ascii(s: &[u8]) -> bool {
    let (words, tail) = s.as_chunks::<8>();
    let acc = words
        .iter()
        .fold(0u64, |acc, w| acc | u64::from_ne_bytes(*w));
    let tail = tail.iter().fold(0u8, |acc, &b| acc | b);
    (acc & HI) == 0 && tail < 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_check_sees_every_byte() {
        for len in 0..40 {
            let s = vec![b'a'; len];
            assert!(is_ascii(&s));
            for at in 0..len {
                let mut t = s.clone();
                t[at] = 0x80;
                assert!(!is_ascii(&t), "{len} {at}");
                t[at] = 0xff;
                assert!(!is_ascii(&t), "{len} {at}");
            }
        }
    }

    /// Every string of `a`s up to 39 bytes with `first` at every position (and `second` three
    /// bytes later, which must not hide it), searched from every start: `search` must agree with
    /// a byte-by-byte scan for the bytes `hit` accepts.
    fn sweep(
        first: u8,
        second: u8,
        hit: impl Fn(u8) -> bool,
        search: impl Fn(&[u8], usize) -> Option<usize>,
    ) {
        for len in 0..40 {
            for at in 0..len {
                for from in 0..=len + 1 {
                    let mut s = vec![b'a'; len];
                    s[at] = first;
                    if at + 3 < len {
                        s[at + 3] = second;
                    }
                    let want = if from > len {
                        None
                    } else {
                        s[from..].iter().position(|&c| hit(c)).map(|k| k + from)
                    };
                    assert_eq!(search(&s, from), want, "{len} {at} {from}");
                }
            }
        }
    }

    #[test]
    fn finds_the_first_match_anywhere() {
        sweep(
            b' ',
            b' ',
            |c| c == b' ',
            |s, from| find_byte(s, from, b' '),
        );
        // Bytes that differ from the target by a borrow-prone amount.
        let s = [0x21u8, 0x20, 0x1f, 0x00, 0xff, 0x20, 0x21, 0xa0, 0x20];
        assert_eq!(find_byte(&s, 0, 0x20), Some(1));
        assert_eq!(find_byte(&s, 2, 0x20), Some(5));
        assert_eq!(find_byte(&s, 6, 0x20), Some(8));
        let any = |s: &[u8]| {
            find(
                s,
                0,
                |w| eq(w, b'=') | eq(w, b']'),
                |b| b == b'=' || b == b']',
            )
        };
        assert_eq!(any(b"abcdefghij]k=l"), Some(10));
        assert_eq!(any(b"abc=]"), Some(3));
        assert_eq!(any(b"abcdefgh"), None);
    }

    #[test]
    fn classes_are_the_sets_the_parsers_use() {
        for c in 0..=255u8 {
            let name_end = matches!(c, b'=' | b' ' | b']' | b'"');
            assert_eq!(is(c, class::NAME_END), name_end, "{c}");
            assert_eq!(
                is(c, class::STRICT_NAME_END),
                name_end || !(33..=126).contains(&c),
                "{c}"
            );
        }
    }

    #[test]
    fn find_class_finds_the_first_match_anywhere() {
        sweep(
            b'=',
            b' ',
            |c| c == b'=' || c == b' ',
            |s, from| find_class(s, from, class::NAME_END),
        );
        assert_eq!(find_class(b"ab\x7fc=", 0, class::NAME_END), Some(4));
        assert_eq!(find_class(b"ab\x7fc=", 0, class::STRICT_NAME_END), Some(2));
        assert_eq!(find_class(b"abcdefghijk", 3, class::NAME_END), None);
    }
}
