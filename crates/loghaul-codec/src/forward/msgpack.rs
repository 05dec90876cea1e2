//! The msgpack subset the forward protocol needs, by hand: a bounds-checked reader over a
//! complete message and append-only writers. No allocation, no UTF-8 validation (see
//! `forward.md`: fluentd sends binary msgpack inside `str32`).
//!
//! ```text
//! marker  0x00-0x7f fixint   0x80-0x8f fixmap    0x90-0x9f fixarray  0xa0-0xbf fixstr
//!         0xc0 nil  0xc2/c3 false/true  0xc4-c6 bin8/16/32  0xc7-c9 ext8/16/32
//!         0xca/cb float32/64  0xcc-cf uint8..64  0xd0-d3 int8..64  0xd4-d8 fixext1..16
//!         0xd9-db str8/16/32  0xdc/dd array16/32  0xde/df map16/32  0xe0-0xff negative fixint
//! ```
//! All lengths and numbers are big-endian.

use std::fmt;

/// The type of one msgpack value, as read from its header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Head {
    Nil,
    Bool(bool),
    Int(i64),
    /// Unsigned integers past `i64::MAX`.
    UInt(u64),
    Float(f64),
    /// A `str`: its bytes follow the header.
    Str(usize),
    /// A `bin`: its bytes follow the header.
    Bin(usize),
    /// An extension value of the given type: its data follows the header.
    Ext(i8, usize),
    Array(usize),
    Map(usize),
}

/// Where reading stopped being possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The message ends before the value does.
    Truncated,
    /// `0xc1`, the one byte msgpack never uses.
    InvalidMarker,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadError::Truncated => "truncated msgpack value",
            ReadError::InvalidMarker => "invalid msgpack marker 0xc1",
        })
    }
}

/// The size of a value's header and of the payload that follows it (containers: the number of
/// child values, which are not part of the payload), from as many bytes as are available.
/// `Ok(None)`: `bytes` does not hold the whole header yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extent {
    /// A scalar or blob: header length plus payload length.
    Leaf(usize),
    /// A container: header length and the number of child values.
    Container(usize, u64),
}

#[inline]
fn be(bytes: &[u8], at: usize, n: usize) -> Option<u64> {
    let s = bytes.get(at..at + n)?;
    Some(s.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
}

/// The extent of the value whose header starts `bytes`, without reading its payload.
pub(crate) fn extent(bytes: &[u8]) -> Result<Option<Extent>, ReadError> {
    let Some(&m) = bytes.first() else {
        return Ok(None);
    };
    let len = |n: usize| be(bytes, 1, n).map(|v| v as usize);
    let e = match m {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Extent::Leaf(1),
        0x80..=0x8f => Extent::Container(1, u64::from(m & 0x0f) * 2),
        0x90..=0x9f => Extent::Container(1, u64::from(m & 0x0f)),
        0xa0..=0xbf => Extent::Leaf(1 + usize::from(m & 0x1f)),
        0xc1 => return Err(ReadError::InvalidMarker),
        0xc4 | 0xd9 => match len(1) {
            Some(n) => Extent::Leaf(2 + n),
            None => return Ok(None),
        },
        0xc5 | 0xda => match len(2) {
            Some(n) => Extent::Leaf(3 + n),
            None => return Ok(None),
        },
        0xc6 | 0xdb => match len(4) {
            Some(n) => Extent::Leaf(5 + n),
            None => return Ok(None),
        },
        // ext: length, type byte, data.
        0xc7 => match len(1) {
            Some(n) => Extent::Leaf(3 + n),
            None => return Ok(None),
        },
        0xc8 => match len(2) {
            Some(n) => Extent::Leaf(4 + n),
            None => return Ok(None),
        },
        0xc9 => match len(4) {
            Some(n) => Extent::Leaf(6 + n),
            None => return Ok(None),
        },
        0xca => Extent::Leaf(5),
        0xcb => Extent::Leaf(9),
        0xcc | 0xd0 => Extent::Leaf(2),
        0xcd | 0xd1 => Extent::Leaf(3),
        0xce | 0xd2 => Extent::Leaf(5),
        0xcf | 0xd3 => Extent::Leaf(9),
        0xd4 => Extent::Leaf(3),
        0xd5 => Extent::Leaf(4),
        0xd6 => Extent::Leaf(6),
        0xd7 => Extent::Leaf(10),
        0xd8 => Extent::Leaf(18),
        0xdc => match be(bytes, 1, 2) {
            Some(n) => Extent::Container(3, n),
            None => return Ok(None),
        },
        0xdd => match be(bytes, 1, 4) {
            Some(n) => Extent::Container(5, n),
            None => return Ok(None),
        },
        0xde => match be(bytes, 1, 2) {
            Some(n) => Extent::Container(3, n * 2),
            None => return Ok(None),
        },
        0xdf => match be(bytes, 1, 4) {
            Some(n) => Extent::Container(5, n * 2),
            None => return Ok(None),
        },
    };
    Ok(Some(e))
}

/// A cursor over one complete msgpack message (or a region of one). Every read is
/// bounds-checked: a lie in a length is [`ReadError::Truncated`], never a panic.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `bytes` from offset `pos`.
    #[inline]
    pub fn new(bytes: &'a [u8], pos: usize) -> Reader<'a> {
        Reader { bytes, pos }
    }

    /// The offset of the next value.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Whether every byte up to `end` has been read.
    #[inline]
    pub fn at(&self, end: usize) -> bool {
        self.pos >= end
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, ReadError> {
        let b = *self.bytes.get(self.pos).ok_or(ReadError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn uint(&mut self, n: usize) -> Result<u64, ReadError> {
        let v = be(self.bytes, self.pos, n).ok_or(ReadError::Truncated)?;
        self.pos += n;
        Ok(v)
    }

    /// Reads one value's header. Blob and extension payloads are not consumed: take them with
    /// [`Reader::take`]; container children follow as values of their own.
    #[inline]
    pub fn head(&mut self) -> Result<Head, ReadError> {
        let m = self.byte()?;
        let h = match m {
            0x00..=0x7f => Head::Int(i64::from(m)),
            0xe0..=0xff => Head::Int(i64::from(m as i8)),
            0x80..=0x8f => Head::Map(usize::from(m & 0x0f)),
            0x90..=0x9f => Head::Array(usize::from(m & 0x0f)),
            0xa0..=0xbf => Head::Str(usize::from(m & 0x1f)),
            0xc0 => Head::Nil,
            0xc1 => return Err(ReadError::InvalidMarker),
            0xc2 => Head::Bool(false),
            0xc3 => Head::Bool(true),
            0xc4 => Head::Bin(self.uint(1)? as usize),
            0xc5 => Head::Bin(self.uint(2)? as usize),
            0xc6 => Head::Bin(self.uint(4)? as usize),
            0xc7 => {
                let n = self.uint(1)? as usize;
                Head::Ext(self.byte()? as i8, n)
            }
            0xc8 => {
                let n = self.uint(2)? as usize;
                Head::Ext(self.byte()? as i8, n)
            }
            0xc9 => {
                let n = self.uint(4)? as usize;
                Head::Ext(self.byte()? as i8, n)
            }
            0xca => Head::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Head::Float(f64::from_bits(self.uint(8)?)),
            0xcc => Head::Int(self.uint(1)? as i64),
            0xcd => Head::Int(self.uint(2)? as i64),
            0xce => Head::Int(self.uint(4)? as i64),
            0xcf => {
                let v = self.uint(8)?;
                match i64::try_from(v) {
                    Ok(i) => Head::Int(i),
                    Err(_) => Head::UInt(v),
                }
            }
            0xd0 => Head::Int(i64::from(self.uint(1)? as u8 as i8)),
            0xd1 => Head::Int(i64::from(self.uint(2)? as u16 as i16)),
            0xd2 => Head::Int(i64::from(self.uint(4)? as u32 as i32)),
            0xd3 => Head::Int(self.uint(8)? as i64),
            0xd4 => Head::Ext(self.byte()? as i8, 1),
            0xd5 => Head::Ext(self.byte()? as i8, 2),
            0xd6 => Head::Ext(self.byte()? as i8, 4),
            0xd7 => Head::Ext(self.byte()? as i8, 8),
            0xd8 => Head::Ext(self.byte()? as i8, 16),
            0xd9 => Head::Str(self.uint(1)? as usize),
            0xda => Head::Str(self.uint(2)? as usize),
            0xdb => Head::Str(self.uint(4)? as usize),
            0xdc => Head::Array(self.uint(2)? as usize),
            0xdd => Head::Array(self.uint(4)? as usize),
            0xde => Head::Map(self.uint(2)? as usize),
            0xdf => Head::Map(self.uint(4)? as usize),
        };
        Ok(h)
    }

    /// Consumes `n` payload bytes; returns their offsets `(start, end)`.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<(usize, usize), ReadError> {
        let start = self.pos;
        let end = start.checked_add(n).ok_or(ReadError::Truncated)?;
        if end > self.bytes.len() {
            return Err(ReadError::Truncated);
        }
        self.pos = end;
        Ok((start, end))
    }

    /// The bytes at `(start, end)` of the underlying message.
    #[inline]
    pub fn slice(&self, (start, end): (usize, usize)) -> &'a [u8] {
        self.bytes.get(start..end).unwrap_or_default()
    }

    /// Skips one whole value, children included (iteratively: depth costs no stack).
    pub fn skip(&mut self) -> Result<(), ReadError> {
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            match self.head()? {
                Head::Str(n) | Head::Bin(n) | Head::Ext(_, n) => {
                    self.take(n)?;
                }
                Head::Array(n) => pending += n as u64,
                Head::Map(n) => pending += 2 * n as u64,
                _ => {}
            }
        }
        Ok(())
    }

    /// Bytes left after the cursor.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Consumes exactly `N` payload bytes.
    #[inline]
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let s = self.take(N)?;
        self.slice(s).try_into().map_err(|_| ReadError::Truncated)
    }

    /// Reads a `str` or `bin` and returns its offsets; anything else is skipped whole (payload
    /// and children too, so the cursor is at the next value either way) and gives `None`.
    #[inline]
    pub fn blob(&mut self) -> Result<Option<(usize, usize)>, ReadError> {
        match self.head()? {
            Head::Str(n) | Head::Bin(n) => self.take(n).map(Some),
            Head::Ext(_, n) => self.take(n).map(|_| None),
            Head::Array(n) => (0..n).try_for_each(|_| self.skip()).map(|()| None),
            Head::Map(n) => (0..2 * n).try_for_each(|_| self.skip()).map(|()| None),
            _ => Ok(None),
        }
    }
}

/// Appends an array header for `n` items.
pub fn write_array_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(0xdc);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Appends a map header for `n` entries.
pub fn write_map_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x80 | n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(0xde);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Appends a `str` (the bytes as they are: msgpack does not check them, nor does loghaul).
pub fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if let Ok(n) = u8::try_from(n) {
        out.extend_from_slice(&[0xd9, n]);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(0xda);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// Appends a `bin` header for `n` bytes (the caller appends the bytes).
pub fn write_bin_len(out: &mut Vec<u8>, n: usize) {
    if let Ok(n) = u8::try_from(n) {
        out.extend_from_slice(&[0xc4, n]);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(0xc5);
        out.extend_from_slice(&n.to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Appends a `bin`.
pub fn write_bin(out: &mut Vec<u8>, b: &[u8]) {
    write_bin_len(out, b.len());
    out.extend_from_slice(b);
}

/// Appends an integer in its shortest form.
pub fn write_int(out: &mut Vec<u8>, v: i64) {
    if (0..128).contains(&v) {
        out.push(v as u8);
    } else if (-32..0).contains(&v) {
        out.push(v as i8 as u8);
    } else if v >= 0 {
        write_uint(out, v as u64);
    } else if let Ok(v) = i8::try_from(v) {
        out.extend_from_slice(&[0xd0, v as u8]);
    } else if let Ok(v) = i16::try_from(v) {
        out.push(0xd1);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = i32::try_from(v) {
        out.push(0xd2);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends an unsigned integer in its shortest form.
pub fn write_uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if let Ok(v) = u8::try_from(v) {
        out.extend_from_slice(&[0xcc, v]);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(0xcd);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(0xce);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends a float64.
pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    out.push(0xcb);
    out.extend_from_slice(&v.to_bits().to_be_bytes());
}

/// Appends a boolean.
pub fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.push(if v { 0xc3 } else { 0xc2 });
}

/// Appends nil.
pub fn write_nil(out: &mut Vec<u8>) {
    out.push(0xc0);
}

/// Appends an extension value.
pub fn write_ext(out: &mut Vec<u8>, ty: i8, data: &[u8]) {
    match data.len() {
        1 => out.push(0xd4),
        2 => out.push(0xd5),
        4 => out.push(0xd6),
        8 => out.push(0xd7),
        16 => out.push(0xd8),
        n => {
            if let Ok(n) = u8::try_from(n) {
                out.extend_from_slice(&[0xc7, n]);
            } else if let Ok(n) = u16::try_from(n) {
                out.push(0xc8);
                out.extend_from_slice(&n.to_be_bytes());
            } else {
                out.push(0xc9);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
    }
    out.push(ty as u8);
    out.extend_from_slice(data);
}

/// Appends a Fluentd EventTime (`fixext8`, type 0: seconds and nanoseconds, unsigned 32-bit
/// big-endian each).
pub fn write_event_time(out: &mut Vec<u8>, seconds: u32, nanos: u32) {
    out.extend_from_slice(&[0xd7, 0x00]);
    out.extend_from_slice(&seconds.to_be_bytes());
    out.extend_from_slice(&nanos.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Vec<Head> {
        let mut r = Reader::new(bytes, 0);
        let mut out = Vec::new();
        while !r.at(bytes.len()) {
            let h = r.head().unwrap_or_else(|e| panic!("{e}"));
            if let Head::Str(n) | Head::Bin(n) | Head::Ext(_, n) = h {
                r.take(n).unwrap_or_else(|e| panic!("{e}"));
            }
            out.push(h);
        }
        out
    }

    #[test]
    fn integers_round_trip_in_their_shortest_form() {
        for (v, len) in [
            (0i64, 1),
            (127, 1),
            (128, 2),
            (255, 2),
            (256, 3),
            (65_536, 5),
            (1 << 40, 9),
            (-1, 1),
            (-32, 1),
            (-33, 2),
            (-129, 3),
            (-40_000, 5),
            (i64::MIN, 9),
            (i64::MAX, 9),
        ] {
            let mut out = Vec::new();
            write_int(&mut out, v);
            assert_eq!(out.len(), len, "{v}");
            assert_eq!(read_all(&out), [Head::Int(v)]);
            assert_eq!(extent(&out), Ok(Some(Extent::Leaf(len))));
        }
        let mut out = Vec::new();
        write_uint(&mut out, u64::MAX);
        assert_eq!(read_all(&out), [Head::UInt(u64::MAX)]);
    }

    #[test]
    fn blobs_and_containers_of_every_width() {
        for n in [0usize, 31, 32, 255, 256, 65_535, 65_536] {
            let data = vec![b'x'; n];
            let mut out = Vec::new();
            write_str(&mut out, &data);
            write_bin(&mut out, &data);
            write_array_len(&mut out, n);
            write_map_len(&mut out, n);
            write_ext(&mut out, 5, &data);
            let mut r = Reader::new(&out, 0);
            assert_eq!(r.head(), Ok(Head::Str(n)));
            assert_eq!(r.take(n).map(|s| r.slice(s).len()), Ok(n));
            assert_eq!(r.blob().map(|b| b.map(|s| s.1 - s.0)), Ok(Some(n)));
            assert_eq!(r.head(), Ok(Head::Array(n)));
            assert_eq!(r.head(), Ok(Head::Map(n)));
            assert_eq!(r.head(), Ok(Head::Ext(5, n)));
        }
    }

    #[test]
    fn event_time_is_fixext8_type_0() {
        let mut out = Vec::new();
        write_event_time(&mut out, 1_441_588_984, 123_456_789);
        assert_eq!(
            out,
            [0xd7, 0x00, 0x55, 0xec, 0xe6, 0xf8, 0x07, 0x5b, 0xcd, 0x15]
        );
    }

    #[test]
    fn lies_in_lengths_are_errors_not_panics() {
        let mut r = Reader::new(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'a'], 0);
        assert_eq!(r.head(), Ok(Head::Str(u32::MAX as usize)));
        assert_eq!(r.take(u32::MAX as usize), Err(ReadError::Truncated));
        let mut r = Reader::new(&[0xc1], 0);
        assert_eq!(r.head(), Err(ReadError::InvalidMarker));
        let mut r = Reader::new(&[0xcd, 0x01], 0);
        assert_eq!(r.head(), Err(ReadError::Truncated));
        let mut r = Reader::new(&[0x92, 0x01], 0);
        assert_eq!(r.skip(), Err(ReadError::Truncated));
        assert_eq!(extent(&[0xda, 0x00]), Ok(None));
        assert_eq!(extent(&[]), Ok(None));
    }
}
