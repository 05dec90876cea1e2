//! Word-at-a-time byte search for the parsers' short scans (tokens, names, values): eight bytes
//! per step with plain integer arithmetic, which beats both a byte loop and a `memchr` call on
//! the 5..50-byte stretches syslog fields are made of.

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `x` equal to `c`. Only the lowest flagged byte is exact (borrows
/// can flag bytes above it), which is all [`find`] uses.
#[inline(always)]
pub(crate) fn eq(x: u64, c: u8) -> u64 {
    let y = x ^ (LO * u64::from(c));
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
    let mut rest = s.get(from..)?;
    while let Some((chunk, tail)) = rest.split_first_chunk::<8>() {
        let m = word(u64::from_le_bytes(*chunk));
        if m != 0 {
            return Some(s.len() - rest.len() + (m.trailing_zeros() / 8) as usize);
        }
        rest = tail;
    }
    let at = s.len() - rest.len();
    rest.iter().position(|&c| byte(c)).map(|k| at + k)
}

/// The first `c` at or after `from`.
#[inline(always)]
pub(crate) fn find_byte(s: &[u8], from: usize, c: u8) -> Option<usize> {
    find(s, from, |w| eq(w, c), |b| b == c)
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

    #[test]
    fn finds_the_first_match_anywhere() {
        for len in 0..40 {
            for at in 0..len {
                for from in 0..=len + 1 {
                    let mut s = vec![b'a'; len];
                    s[at] = b' ';
                    // A second match later must not hide the first.
                    if at + 3 < len {
                        s[at + 3] = b' ';
                    }
                    let want = if from > len {
                        None
                    } else {
                        s[from..].iter().position(|&c| c == b' ').map(|k| k + from)
                    };
                    assert_eq!(find_byte(&s, from, b' '), want, "{len} {at} {from}");
                }
            }
        }
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
}
