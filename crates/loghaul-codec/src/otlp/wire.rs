//! Protocol Buffers wire format, the part OTLP uses: a reader over a borrowed message that
//! never panics and never reads past its slice, and a writer for the messages loghaul answers
//! and sends.
//!
//! ```text
//! message := (key value)*          key := varint (field number << 3 | wire type)
//! wire type 0: varint   1: 8 bytes LE   2: varint length + bytes   5: 4 bytes LE
//! ```
//! Groups (wire types 3 and 4) are long deprecated and absent from OTLP: they are refused.

use std::fmt;

/// Why a message does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// Offset in the whole request where the problem was found.
    pub offset: usize,
    pub what: &'static str,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for WireError {}

/// One field's value as it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// Length-delimited: the range `start..end` of the whole request.
    Len(usize, usize),
}

/// Reads the fields of one message: the range `pos..end` of `buf`, where `buf` is the whole
/// request, so that ranges stay offsets into it.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    /// A reader of the whole of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            end: buf.len(),
        }
    }

    /// A reader of the message nested at `start..end` (a [`Wire::Len`] of this buffer).
    pub fn nested(&self, start: usize, end: usize) -> Reader<'a> {
        let end = end.min(self.buf.len());
        Reader {
            buf: self.buf,
            pos: start.min(end),
            end,
        }
    }

    pub fn bytes(&self, start: usize, end: usize) -> &'a [u8] {
        self.buf.get(start..end).unwrap_or_default()
    }

    fn error(&self, what: &'static str) -> WireError {
        WireError {
            offset: self.pos,
            what,
        }
    }

    /// Most varints on the wire (keys, lengths under 128) are one byte, and most of the rest
    /// (a record's or a body's length) two: read those without the loop.
    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        if self.pos < self.end
            && let Some(&b) = self.buf.get(self.pos)
        {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
            if self.pos + 1 < self.end
                && let Some(&c) = self.buf.get(self.pos + 1)
                && c < 0x80
            {
                self.pos += 2;
                return Ok(u64::from(b & 0x7f) | (u64::from(c) << 7));
            }
        }
        self.varint_slow()
    }

    fn varint_slow(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf[..self.end].get(self.pos) else {
                return Err(self.error("a varint runs past the end of its message"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(self.error("a varint is longer than 64 bits"));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("a varint is longer than 64 bits"))
    }

    #[inline]
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let Some(bytes) = self.buf[..self.end].get(self.pos..self.pos + N) else {
            return Err(self.error("a fixed-size value runs past the end of its message"));
        };
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        self.pos += N;
        Ok(out)
    }

    /// The next field's number and value; `None` at the end of the message.
    ///
    /// # Errors
    ///
    /// The message is truncated or malformed (a field number of 0, a group, a length past
    /// the end).
    #[inline(always)]
    pub fn field(&mut self) -> Result<Option<(u32, Wire)>, WireError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let at = self.pos;
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            self.pos = at;
            return Err(self.error("a field number is out of range"));
        }
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(self.fixed::<8>()?)),
            5 => Wire::Fixed32(u32::from_le_bytes(self.fixed::<4>()?)),
            2 => {
                let len = self.varint()?;
                let start = self.pos;
                let Some(end) = usize::try_from(len)
                    .ok()
                    .and_then(|l| start.checked_add(l))
                    .filter(|&e| e <= self.end)
                else {
                    return Err(self.error("a length runs past the end of its message"));
                };
                self.pos = end;
                Wire::Len(start, end)
            }
            _ => {
                self.pos = at;
                return Err(self.error("a field has a wire type OTLP never uses (a group)"));
            }
        };
        Ok(Some((number as u32, wire)))
    }

    /// Where the reader is, for errors found by the caller.
    pub fn offset(&self) -> usize {
        self.pos
    }
}

/// Writes a message; nested messages are written to a scratch writer and then appended as
/// one length-delimited field (their length must come first).
#[derive(Debug, Default, Clone)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, number: u32, wire: u8) {
        self.varint((u64::from(number) << 3) | u64::from(wire));
    }

    /// A varint field (int32, int64, uint32, uint64, bool, enum), written even when zero.
    pub fn uint(&mut self, number: u32, v: u64) {
        self.key(number, 0);
        self.varint(v);
    }

    pub fn int(&mut self, number: u32, v: i64) {
        self.uint(number, v as u64);
    }

    pub fn fixed64(&mut self, number: u32, v: u64) {
        self.key(number, 1);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn fixed32(&mut self, number: u32, v: u32) {
        self.key(number, 5);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn double(&mut self, number: u32, v: f64) {
        self.fixed64(number, v.to_bits());
    }

    /// A string, bytes or nested message field.
    pub fn bytes(&mut self, number: u32, v: &[u8]) {
        self.key(number, 2);
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
    }

    /// A nested message written by `f`, its length found after writing it (the space for the
    /// length is reserved, then the body moved when the length takes more than one byte).
    pub fn message(&mut self, number: u32, f: impl FnOnce(&mut Writer)) {
        self.key(number, 2);
        let len_at = self.buf.len();
        self.buf.push(0);
        let start = self.buf.len();
        f(self);
        let len = self.buf.len() - start;
        if len < 0x80 {
            self.buf[len_at] = len as u8;
            return;
        }
        let mut prefix = Writer::default();
        prefix.varint(len as u64);
        // Replace the one reserved byte by the whole prefix.
        self.buf
            .splice(len_at..start, prefix.buf.iter().copied())
            .for_each(drop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_output_reads_back() {
        let mut w = Writer::default();
        w.uint(1, 150);
        w.fixed64(2, 7);
        w.bytes(3, b"abc");
        w.message(4, |m| m.bytes(1, &[b'x'; 300]));
        w.fixed32(5, 9);
        w.int(6, -1);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.field(), Ok(Some((1, Wire::Varint(150)))));
        assert_eq!(r.field(), Ok(Some((2, Wire::Fixed64(7)))));
        let Ok(Some((3, Wire::Len(a, b)))) = r.field() else {
            panic!("no bytes field")
        };
        assert_eq!(r.bytes(a, b), b"abc");
        let Ok(Some((4, Wire::Len(a, b)))) = r.field() else {
            panic!("no message field")
        };
        let mut inner = r.nested(a, b);
        let Ok(Some((1, Wire::Len(x, y)))) = inner.field() else {
            panic!("no nested field")
        };
        assert_eq!(y - x, 300);
        assert_eq!(inner.field(), Ok(None));
        assert_eq!(r.field(), Ok(Some((5, Wire::Fixed32(9)))));
        assert_eq!(r.field(), Ok(Some((6, Wire::Varint(u64::MAX)))));
        assert_eq!(r.field(), Ok(None));
    }

    #[test]
    fn varints_of_every_length_read_back_and_stop_at_their_message() {
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, (1u64 << shift) | 1] {
                let mut w = Writer::default();
                w.uint(1, v);
                assert_eq!(Reader::new(&w.buf).field(), Ok(Some((1, Wire::Varint(v)))));
            }
        }
        // A two-byte varint whose second byte lies past the end of its message: an error,
        // although the byte is in the buffer.
        let buf = [0x0a, 0x02, 0x08, 0x96, 0x01];
        let mut r = Reader::new(&buf);
        let Ok(Some((1, Wire::Len(a, b)))) = r.field() else {
            panic!("no message field")
        };
        assert!(r.nested(a, b).field().is_err());
        assert_eq!(
            Reader::new(&buf[2..]).field(),
            Ok(Some((1, Wire::Varint(150))))
        );
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bad in [
            &[0x0a, 0x05, b'a'][..], // length past the end
            &[0x08][..],             // varint missing
            &[0x08, 0xff, 0xff][..], // varint runs out
            &[0x00, 0x01][..],       // field number 0
            &[0x0b][..],             // a group
            &[0x09, 1, 2, 3][..],    // fixed64 short
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
        ] {
            let mut r = Reader::new(bad);
            assert!(r.field().is_err(), "{bad:?}");
        }
    }
}
