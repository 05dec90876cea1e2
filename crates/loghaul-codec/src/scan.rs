//! Byte search: the parsers' short scans (tokens, names, values), the framer's newline masks.
//!
//! [`find`] classifies 16 bytes a step (see [`crate::simd`]): a few compares, one mask and a
//! `trailing_zeros` per step, whatever the number of target bytes. The last bytes of a slice are
//! read as its last 16 (already seen bytes masked off), so a scan near the end does not fall
//! back to a byte loop; only a slice shorter than 16 bytes is copied into a padded chunk.

use crate::simd::{V, lanes};

const HI: u64 = 0x8080_8080_8080_8080;

/// The index of the first byte of `s` at or after `from` that `set` flags, where `set` maps 16
/// bytes to a lane set for each flagged byte; `None` if there is none or `from` is past the end.
#[inline(always)]
pub(crate) fn find(s: &[u8], from: usize, set: impl Fn(V) -> V) -> Option<usize> {
    // An index and one test per step keep the loop to a single induction variable.
    let mut i = from;
    while let Some(chunk) = s
        .get(i..i.wrapping_add(16))
        .and_then(|c| c.first_chunk::<16>())
    {
        let m = set(V::load(chunk)).mask();
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += 16;
    }
    find_tail(s, i, set)
}

/// [`find`] from `i` when fewer than 16 bytes are left: the last 16 bytes of `s` with the ones
/// before `i` masked off, or the rest padded to 16 when `s` is shorter than that.
#[inline(always)]
fn find_tail(s: &[u8], i: usize, set: impl Fn(V) -> V) -> Option<usize> {
    let rest = s.len().checked_sub(i).filter(|&n| n > 0)?;
    let m = match s.last_chunk::<16>() {
        // `rest < 16`, so the skipped part is 1..=15 bytes.
        Some(last) => set(V::load(last)).mask() >> (16 - rest),
        None => {
            let mut chunk = [0u8; 16];
            chunk.get_mut(..rest)?.copy_from_slice(s.get(i..)?);
            set(V::load(&chunk)).mask() & lanes(rest)
        }
    };
    (m != 0).then(|| i + m.trailing_zeros() as usize)
}

/// The first `c` at or after `from`.
#[inline(always)]
pub(crate) fn find_byte(s: &[u8], from: usize, c: u8) -> Option<usize> {
    find(s, from, |v| v.eq(c))
}

/// Bit k set where `block[k] == c`: 64 bytes classified at once, so a caller that wants every
/// match (all the newlines of a read) walks the set bits instead of starting a search per match.
#[inline(always)]
pub(crate) fn eq_mask64(block: &[u8; 64], c: u8) -> u64 {
    let (chunks, _) = block.as_chunks::<16>();
    chunks.iter().enumerate().fold(0, |m, (k, chunk)| {
        m | u64::from(V::load(chunk).eq(c).mask()) << (16 * k)
    })
}

/// The key=value scanner's classes of the 64 bytes of `s` from `at` (zero bytes past its end,
/// which are in neither): bit k of the first mask is set where byte `at + k` is a space or a
/// quote, of the second where it is `=`. One block classified serves every token in it, so a
/// token's end is a `trailing_zeros`, not a loop whose exit depends on the token's length.
#[inline]
pub fn kv_masks64(s: &[u8], at: usize) -> (u64, u64) {
    let rest = s.get(at..).unwrap_or_default();
    let mut padded = [0u8; 64];
    let block = match rest.first_chunk::<64>() {
        Some(block) => block,
        None => {
            if let Some(room) = padded.get_mut(..rest.len()) {
                room.copy_from_slice(rest);
            }
            &padded
        }
    };
    let (chunks, _) = block.as_chunks::<16>();
    chunks
        .iter()
        .enumerate()
        .fold((0, 0), |(delim, eq), (k, chunk)| {
            let v = V::load(chunk);
            (
                delim | u64::from(v.eq(b' ').or(v.eq(b'"')).mask()) << (16 * k),
                eq | u64::from(v.eq(b'=').mask()) << (16 * k),
            )
        })
}

/// `end` moved back over the trailing bytes of `buf[start..end]` that `debris` accepts: line-end
/// leftovers such as LF, CR and NUL, which must all be at most CR. Nearly every line ends in a
/// byte above CR, so one compare usually decides.
#[inline(always)]
pub(crate) fn trim_end(buf: &[u8], start: usize, end: usize, debris: impl Fn(u8) -> bool) -> usize {
    let mut end = end;
    if end > start && buf.get(end - 1).is_some_and(|&c| c <= b'\r') {
        while end > start && buf.get(end - 1).is_some_and(|&c| debris(c)) {
            end -= 1;
        }
    }
    end
}

/// Lanes that end a lenient SD-NAME: `=`, SP, `]`, `"`.
#[inline(always)]
pub(crate) fn name_end(v: V) -> V {
    v.eq(b'=').or(v.eq(b' ')).or(v.eq(b']')).or(v.eq(b'"'))
}

/// Lanes that end a strict SD-NAME: those and anything outside PRINTUSASCII (33..=126).
#[inline(always)]
pub(crate) fn strict_name_end(v: V) -> V {
    // Signed, bytes from 0x80 up are below 33 too.
    name_end(v).or(v.lt_signed(33)).or(v.eq(0x7f))
}

/// Whether every byte of `s` is ASCII: words OR-ed together (the compiler vectorises the fold),
/// no early exit, since the answer is nearly always yes.
#[inline]
pub fn is_ascii(s: &[u8]) -> bool {
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
    fn kv_masks_flag_spaces_quotes_and_equals_only() {
        let s: Vec<u8> = (0..150u32)
            .map(|i| b" \"=a\x00\xa0"[(i * 7 % 6) as usize])
            .collect();
        for at in [0, 1, 63, 64, 100, 149, 150, 151] {
            let (delim, eq) = kv_masks64(&s, at);
            for k in 0..64 {
                let b = s.get(at + k).copied();
                assert_eq!(
                    delim >> k & 1 == 1,
                    matches!(b, Some(b' ' | b'"')),
                    "{at}+{k}"
                );
                assert_eq!(eq >> k & 1 == 1, b == Some(b'='), "{at}+{k}");
            }
        }
    }

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

    /// Every string of `a`s up to 47 bytes with `first` at every position (and `second` three
    /// bytes later, which must not hide it), searched from every start: `search` must agree with
    /// a byte-by-byte scan for the bytes `hit` accepts. Lengths below, at and above 16 and 32
    /// take the padded chunk, whole chunks and the overlapping last chunk.
    fn sweep(
        first: u8,
        second: u8,
        hit: impl Fn(u8) -> bool,
        search: impl Fn(&[u8], usize) -> Option<usize>,
    ) {
        for len in 0..48 {
            for at in 0..len.max(1) {
                for from in 0..=len + 1 {
                    let mut s = vec![b'a'; len];
                    if at < len {
                        s[at] = first;
                    }
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
        // Padding bytes (zeros) must not be found, even when the target is zero.
        sweep(0, 0, |c| c == 0, |s, from| find_byte(s, from, 0));
        let s = [0x21u8, 0x20, 0x1f, 0x00, 0xff, 0x20, 0x21, 0xa0, 0x20];
        assert_eq!(find_byte(&s, 0, 0x20), Some(1));
        assert_eq!(find_byte(&s, 2, 0x20), Some(5));
        assert_eq!(find_byte(&s, 6, 0x20), Some(8));
        let any = |s: &[u8]| find(s, 0, |v| v.eq(b'=').or(v.eq(b']')));
        assert_eq!(any(b"abcdefghijklmnopqrstuvwxyz]k=l"), Some(26));
        assert_eq!(any(b"abcdefghij]k=l"), Some(10));
        assert_eq!(any(b"abc=]"), Some(3));
        assert_eq!(any(b"abcdefgh"), None);
        assert_eq!(any(b"abcdefghijklmnopqrstuvwxyz"), None);
    }

    #[test]
    fn mask64_flags_every_match_in_its_lane() {
        for c in [b'\n', 0, 0xff] {
            for lane in 0..64 {
                let mut block = [b'a'; 64];
                block[lane] = c;
                block[(lane + 17) % 64] = c;
                let want = 1u64 << lane | 1u64 << ((lane + 17) % 64);
                assert_eq!(eq_mask64(&block, c), want, "{c} {lane}");
            }
            assert_eq!(eq_mask64(&[b'a'; 64], c), 0);
            assert_eq!(eq_mask64(&[c; 64], c), u64::MAX);
        }
    }

    #[test]
    fn trim_end_drops_only_trailing_debris() {
        let crlf = |c: u8| matches!(c, b'\r' | b'\n' | 0);
        let cut = |s: &[u8], start: usize| trim_end(s, start, s.len(), crlf);
        assert_eq!(cut(b"abc\r\n\0", 0), 3);
        assert_eq!(cut(b"abc", 0), 3);
        // A tab is below CR but not debris; debris inside the line stays.
        assert_eq!(cut(b"abc\t\r", 0), 4);
        assert_eq!(cut(b"a\rbc\n", 0), 4);
        // Never past `start`, whatever precedes it.
        assert_eq!(cut(b"\r\r\r", 1), 1);
        assert_eq!(cut(b"", 0), 0);
        assert_eq!(
            trim_end(b"ab\r", 0, 9, crlf),
            9,
            "an end past the slice is left alone"
        );
    }

    #[test]
    fn name_ends_are_the_sets_the_parsers_use() {
        for c in 0..=255u8 {
            let lenient = matches!(c, b'=' | b' ' | b']' | b'"');
            let strict = lenient || !(33..=126).contains(&c);
            // In every lane, and found from every start.
            for lane in 0..20 {
                let mut s = vec![b'a'; 20];
                s[lane] = c;
                let at = |hit: bool| if hit { Some(lane) } else { None };
                assert_eq!(find(&s, 0, name_end), at(lenient), "{c} {lane}");
                assert_eq!(find(&s, 0, strict_name_end), at(strict), "{c} {lane}");
            }
        }
        sweep(
            b'=',
            b' ',
            |c| c == b'=' || c == b' ',
            |s, from| find(s, from, name_end),
        );
        sweep(
            0x7f,
            b'x',
            |c| c == 0x7f,
            |s, from| find(s, from, strict_name_end),
        );
        assert_eq!(find(b"ab\x7fc=", 0, name_end), Some(4));
        assert_eq!(find(b"ab\x7fc=", 0, strict_name_end), Some(2));
        assert_eq!(find(b"abcdefghijk", 3, name_end), None);
    }
}
