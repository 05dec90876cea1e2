//! Sixteen bytes at a time: the byte classification the parsers' scans and the JSON escaper use.
//!
//! A [`V`] holds 16 bytes; comparisons give a [`V`] of 0xff / 0x00 lanes and [`V::mask`] turns
//! that into one bit per byte (bit k for byte k), so "where is the first interesting byte" is a
//! `trailing_zeros` and "is any of the first n interesting" is one AND.
//!
//! On x86_64 this is SSE2, which every x86_64 CPU has (`pcmpeqb`, `pcmpgtb`, `pmovmskb`: one
//! instruction each). The word-at-a-time search it replaced took four instructions per target
//! byte per 8 bytes, and the table scan for SD-NAMEs three per byte. Elsewhere a portable
//! version does the same byte by byte; it is also compiled in tests, to hold the SSE2 one to it.
//!
//! The intrinsics are `unsafe` to call from code that does not itself enable SSE2 (the compiler
//! does not count the target's baseline), so each is wrapped once here, under one `SAFETY:` note
//! for all of them; see `docs/conventions.md` ("Unsafe code").

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use sse2::V;

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) use portable::V;

/// The mask of the first `n` lanes (all 16 when `n >= 16`), to AND with [`V::mask`].
#[inline(always)]
pub(crate) fn lanes(n: usize) -> u32 {
    (1u32 << n.min(16)) - 1
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };

    /// 16 bytes in an SSE2 register.
    #[derive(Clone, Copy)]
    pub(crate) struct V(__m128i);

    // SAFETY (every block below): the intrinsics need only SSE2, which the cfg on this module
    // guarantees is enabled for the target, so they cannot meet a CPU without it; the one load
    // reads exactly the 16 bytes its `&[u8; 16]` refers to.
    impl V {
        #[inline(always)]
        pub(crate) fn load(chunk: &[u8; 16]) -> V {
            // An unaligned load: `chunk` has no alignment beyond a byte's.
            V(unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) })
        }

        /// 0xff in each lane equal to `c`.
        #[inline(always)]
        pub(crate) fn eq(self, c: u8) -> V {
            V(unsafe { _mm_cmpeq_epi8(self.0, _mm_set1_epi8(c as i8)) })
        }

        /// 0xff in each lane below `c` as signed bytes: for `c <= 0x80`, the bytes below `c`
        /// and every byte from 0x80 up (control characters and non-ASCII in one compare).
        #[inline(always)]
        pub(crate) fn lt_signed(self, c: i8) -> V {
            V(unsafe { _mm_cmplt_epi8(self.0, _mm_set1_epi8(c)) })
        }

        /// 0xff in each lane at most `c` as unsigned bytes (`min(v, c) == v`).
        #[inline(always)]
        pub(crate) fn le(self, c: u8) -> V {
            V(unsafe { _mm_cmpeq_epi8(_mm_min_epu8(self.0, _mm_set1_epi8(c as i8)), self.0) })
        }

        #[inline(always)]
        pub(crate) fn or(self, other: V) -> V {
            V(unsafe { _mm_or_si128(self.0, other.0) })
        }

        /// Bit k set when lane k is set (lanes are all-ones or all-zeros).
        #[inline(always)]
        pub(crate) fn mask(self) -> u32 {
            (unsafe { _mm_movemask_epi8(self.0) }) as u32 & 0xffff
        }
    }
}

/// The same operations, one byte at a time: the implementation where SSE2 is not there, and the
/// reference the SSE2 one is tested against.
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), cfg(test))]
mod portable {
    #[derive(Clone, Copy)]
    pub(crate) struct V([u8; 16]);

    impl V {
        #[inline(always)]
        pub(crate) fn load(chunk: &[u8; 16]) -> V {
            V(*chunk)
        }

        #[inline(always)]
        fn map(self, f: impl Fn(u8) -> bool) -> V {
            V(self.0.map(|b| if f(b) { 0xff } else { 0 }))
        }

        #[inline(always)]
        pub(crate) fn eq(self, c: u8) -> V {
            self.map(|b| b == c)
        }

        #[inline(always)]
        pub(crate) fn lt_signed(self, c: i8) -> V {
            self.map(|b| (b as i8) < c)
        }

        #[inline(always)]
        pub(crate) fn le(self, c: u8) -> V {
            self.map(|b| b <= c)
        }

        #[inline(always)]
        pub(crate) fn or(self, other: V) -> V {
            let mut out = self.0;
            for (o, b) in out.iter_mut().zip(other.0) {
                *o |= b;
            }
            V(out)
        }

        #[inline(always)]
        pub(crate) fn mask(self) -> u32 {
            self.0
                .iter()
                .enumerate()
                .fold(0, |m, (k, &b)| m | (u32::from(b >> 7) << k))
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", target_feature = "sse2"))]
mod tests {
    use super::{portable, sse2};

    /// Every operation on chunks holding every byte value at every lane agrees with the
    /// byte-by-byte version.
    #[test]
    fn sse2_agrees_with_the_portable_version() {
        for value in 0..=255u8 {
            for lane in 0..16 {
                let mut chunk = [b'a'; 16];
                chunk[lane] = value;
                chunk[(lane + 5) % 16] = value.wrapping_add(1);
                let (s, p) = (sse2::V::load(&chunk), portable::V::load(&chunk));
                for c in [0u8, b' ', b'"', b'\\', b']', 0x7f, 0x80, 0xff, value] {
                    assert_eq!(s.eq(c).mask(), p.eq(c).mask(), "{value} {lane} eq {c}");
                }
                for c in [0u8, 0x1f, 0x20, 0x7f, 0x80, 0xfe, 0xff] {
                    assert_eq!(s.le(c).mask(), p.le(c).mask(), "{value} {lane} le {c}");
                }
                for c in [0i8, 0x20, 33, 127, -128, -1] {
                    assert_eq!(
                        s.lt_signed(c).mask(),
                        p.lt_signed(c).mask(),
                        "{value} {lane} lt {c}"
                    );
                }
                assert_eq!(
                    s.eq(value).or(s.eq(b'a')).mask(),
                    p.eq(value).or(p.eq(b'a')).mask(),
                    "{value} {lane} or"
                );
                assert_eq!(s.eq(value).mask() & (1 << lane), 1 << lane);
            }
        }
    }
}
