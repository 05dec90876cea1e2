//! Bounded, incremental decompression of gzip (one or more members back to back) and zstd (one
//! or more frames): input in whatever pieces it arrives, output in pieces no larger than the
//! caller asks for, so a caller can charge each piece to its memory budget before it exists and
//! stop a bomb exactly at its bound.
//!
//! ```text
//! input pieces ─► Inflater::inflate(input, out, room) ─► ≤ room bytes appended to `out`,
//!                                                         input bytes consumed returned
//! no more input ─► Inflater::inflate(&[], out, room) until nothing comes ─► finish()
//! ```
//!
//! Invariants: nothing here panics on input; the output never passes the limit given at
//! creation by more than the byte that proves it too large; a zstd frame may not ask for a
//! window larger than [`ZSTD_WINDOW_LOG_MAX`] (a small frame that declares a huge window would
//! otherwise make the decoder allocate it).

use flate2::{Decompress, FlushDecompress, Status};
use zstd::stream::raw::{DParameter, Decoder as ZstdDecoder, InBuffer, Operation as _, OutBuffer};

/// A compression the inflater reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// gzip, possibly several members back to back (as `cat a.gz b.gz` makes them).
    Gzip,
    /// zstd, one frame or several.
    Zstd,
}

impl Encoding {
    /// The encoding a `Content-Encoding` token or forward `compressed` value (already trimmed
    /// and lower-cased) names, if it is one of these.
    pub fn from_name(name: &str) -> Option<Encoding> {
        match name {
            "gzip" => Some(Encoding::Gzip),
            "zstd" => Some(Encoding::Zstd),
            _ => None,
        }
    }

    /// The token as written in `Content-Encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Zstd => "zstd",
        }
    }

    /// The encoding whose magic number `data` starts with, if any: gzip `1f 8b`, zstd
    /// `28 b5 2f fd`.
    pub fn sniff(data: &[u8]) -> Option<Encoding> {
        if data.starts_with(&[0x1f, 0x8b]) {
            Some(Encoding::Gzip)
        } else if data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Encoding::Zstd)
        } else {
            None
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why compressed data was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InflateError {
    /// It inflates past the limit.
    TooLarge,
    /// It is not valid gzip or zstd, or it ends in the middle of a member or frame; the
    /// decompressor's reason.
    Broken(String),
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::TooLarge => f.write_str("the data inflates past its limit"),
            InflateError::Broken(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for InflateError {}

/// The largest zstd window accepted: 2^23 bytes (8 MiB), what `zstd -19` uses. Frames made
/// with `--long` or `--ultra` ask for more and are refused.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// One stream being inflated.
pub struct Inflater {
    state: State,
    /// Bytes produced so far.
    produced: u64,
    limit: u64,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("produced", &self.produced)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

enum State {
    /// `None` between members: the next input byte starts a new one.
    Gzip(Option<Box<Decompress>>),
    /// `in_frame`: the last call ended inside a frame (more input is owed).
    Zstd {
        decoder: Box<ZstdDecoder<'static>>,
        in_frame: bool,
    },
}

impl Inflater {
    /// An inflater of `encoding` that refuses to produce more than `limit` bytes.
    ///
    /// # Errors
    ///
    /// The zstd decoder could not be made (out of memory).
    pub fn new(encoding: Encoding, limit: usize) -> Result<Inflater, InflateError> {
        let state = match encoding {
            Encoding::Gzip => State::Gzip(None),
            Encoding::Zstd => {
                let mut decoder =
                    ZstdDecoder::new().map_err(|e| InflateError::Broken(e.to_string()))?;
                decoder
                    .set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
                    .map_err(|e| InflateError::Broken(e.to_string()))?;
                State::Zstd {
                    decoder: Box::new(decoder),
                    in_frame: false,
                }
            }
        };
        Ok(Inflater {
            state,
            produced: 0,
            limit: limit as u64,
        })
    }

    /// Bytes produced so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Inflates from `input`, appending at most `room` bytes to `out`. Returns how many bytes of
    /// `input` it consumed. Call again with the rest of the input (or none, once all of it was
    /// given) while it produces output; it produces nothing only when it needs more input or
    /// the stream is complete ([`Inflater::finish`] tells which).
    ///
    /// # Errors
    ///
    /// [`InflateError::TooLarge`] once the output passes the limit (at most one byte past it
    /// was produced); [`InflateError::Broken`] when the input is not what the encoding says.
    pub fn inflate(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        room: usize,
    ) -> Result<usize, InflateError> {
        // One byte past the limit is allowed, to know the data is too large.
        let left = self.limit.saturating_add(1).saturating_sub(self.produced);
        let room = room.min(usize::try_from(left).unwrap_or(usize::MAX));
        let before = out.len();
        out.reserve(room);
        let cap = before + room;
        let consumed = match &mut self.state {
            State::Gzip(member) => inflate_gzip(member, input, out, cap)?,
            State::Zstd { decoder, in_frame } => inflate_zstd(decoder, in_frame, input, out, cap)?,
        };
        self.produced += (out.len() - before) as u64;
        if self.produced > self.limit {
            return Err(InflateError::TooLarge);
        }
        Ok(consumed)
    }

    /// Checks that the stream ended where a member or frame ends, once every input byte was
    /// given and [`Inflater::inflate`] produced nothing more.
    ///
    /// # Errors
    ///
    /// [`InflateError::Broken`]: the data stops in the middle of a member or frame.
    pub fn finish(&self) -> Result<(), InflateError> {
        let open = match &self.state {
            State::Gzip(member) => member.is_some(),
            State::Zstd { in_frame, .. } => *in_frame,
        };
        if open {
            Err(InflateError::Broken(
                "the compressed data ends in the middle of a stream".to_owned(),
            ))
        } else {
            Ok(())
        }
    }
}

/// Gives the decompressor `cap - out.len()` bytes of room at the end of `out`, and keeps what
/// it wrote: `made(room)` returns how many bytes it put there.
fn with_room(
    out: &mut Vec<u8>,
    cap: usize,
    made: impl FnOnce(&mut [u8]) -> Result<usize, InflateError>,
) -> Result<usize, InflateError> {
    let len = out.len();
    out.resize(cap, 0);
    let result = made(out.get_mut(len..).unwrap_or_default());
    let n = *result.as_ref().unwrap_or(&0);
    out.truncate(len + n);
    result
}

/// gzip: zlib in gzip mode checks each member's header, CRC and length; members follow each
/// other until the input ends.
fn inflate_gzip(
    member: &mut Option<Box<Decompress>>,
    mut input: &[u8],
    out: &mut Vec<u8>,
    cap: usize,
) -> Result<usize, InflateError> {
    let mut consumed = 0;
    while out.len() < cap {
        if member.is_none() {
            if input.is_empty() {
                break;
            }
            *member = Some(Box::new(Decompress::new_gzip(15)));
        }
        let Some(d) = member.as_mut() else {
            break;
        };
        let in_before = d.total_in();
        let mut status = Ok(Status::Ok);
        let made = with_room(out, cap, |room| {
            let out_before = d.total_out();
            status = d.decompress(input, room, FlushDecompress::None);
            Ok((d.total_out() - out_before) as usize)
        })?;
        let used = (d.total_in() - in_before) as usize;
        consumed += used;
        input = input.get(used..).unwrap_or_default();
        match status {
            Ok(Status::StreamEnd) => *member = None,
            Ok(Status::Ok | Status::BufError) if used == 0 && made == 0 => break,
            Ok(_) => {}
            Err(e) => return Err(InflateError::Broken(e.to_string())),
        }
    }
    Ok(consumed)
}

/// zstd: the decoder starts a new frame by itself after one ends.
fn inflate_zstd(
    decoder: &mut ZstdDecoder<'static>,
    in_frame: &mut bool,
    input: &[u8],
    out: &mut Vec<u8>,
    cap: usize,
) -> Result<usize, InflateError> {
    let mut src = InBuffer::around(input);
    while out.len() < cap {
        let before = src.pos();
        let mut hint = 0;
        let made = with_room(out, cap, |room| {
            let mut dst = OutBuffer::around(room);
            hint = decoder
                .run(&mut src, &mut dst)
                .map_err(|e| InflateError::Broken(e.to_string()))?;
            Ok(dst.pos())
        })?;
        if made > 0 || src.pos() > before {
            *in_frame = hint != 0;
        }
        if made == 0 && src.pos() == before {
            break;
        }
    }
    Ok(src.pos())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// Inflates `data` given in pieces of `step` bytes, `room` bytes of output at a time.
    fn run(
        encoding: Encoding,
        data: &[u8],
        step: usize,
        room: usize,
        limit: usize,
    ) -> Result<Vec<u8>, InflateError> {
        let mut i = Inflater::new(encoding, limit)?;
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let end = (at + step).min(data.len());
            let before = out.len();
            let used = i.inflate(&data[at..end], &mut out, room)?;
            assert!(
                out.len() - before <= room,
                "one call produced more than its room"
            );
            at += used;
            if used == 0 && out.len() == before && end == data.len() {
                break;
            }
        }
        i.finish()?;
        Ok(out)
    }

    #[test]
    fn pieces_of_any_size_inflate_to_the_same_bytes() {
        let body: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let gz = gzip(&body);
        let z = zstd::bulk::compress(&body, 3).unwrap();
        for (encoding, data) in [(Encoding::Gzip, &gz), (Encoding::Zstd, &z)] {
            for (step, room) in [(1, 7), (13, 4096), (4096, 1), (data.len(), 1 << 20)] {
                assert_eq!(
                    run(encoding, data, step, room, body.len()).unwrap(),
                    body,
                    "{encoding} step {step} room {room}"
                );
            }
        }
    }

    #[test]
    fn members_and_frames_back_to_back_are_one_stream() {
        let two = [gzip(b"one\n"), gzip(b"two\n")].concat();
        assert_eq!(run(Encoding::Gzip, &two, 3, 2, 100).unwrap(), b"one\ntwo\n");
        let z = [
            zstd::bulk::compress(b"one\n", 3).unwrap(),
            zstd::bulk::compress(b"two\n", 3).unwrap(),
        ]
        .concat();
        assert_eq!(run(Encoding::Zstd, &z, 5, 3, 100).unwrap(), b"one\ntwo\n");
        assert_eq!(run(Encoding::Gzip, &gzip(b""), 1, 1, 0).unwrap(), b"");
        assert_eq!(run(Encoding::Gzip, b"", 1, 1, 0).unwrap(), b"");
    }

    #[test]
    fn a_bomb_stops_one_byte_past_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        for (encoding, data) in [
            (Encoding::Gzip, gzip(&zeros)),
            (Encoding::Zstd, zstd::bulk::compress(&zeros, 3).unwrap()),
        ] {
            let mut i = Inflater::new(encoding, 1024).unwrap();
            let mut out = Vec::new();
            assert_eq!(
                i.inflate(&data, &mut out, 1 << 20),
                Err(InflateError::TooLarge),
                "{encoding}"
            );
            assert_eq!(
                out.len(),
                1025,
                "{encoding}: one byte past the limit, no more"
            );
        }
    }

    #[test]
    fn broken_and_cut_streams_say_why() {
        for encoding in [Encoding::Gzip, Encoding::Zstd] {
            assert!(matches!(
                run(encoding, b"not compressed at all", 4, 10, 100),
                Err(InflateError::Broken(_))
            ));
        }
        let gz = gzip(b"a longer body that is cut short, well before its end");
        assert!(matches!(
            run(Encoding::Gzip, &gz[..gz.len() - 6], 5, 10, 100),
            Err(InflateError::Broken(_))
        ));
        let z = zstd::bulk::compress(&[7u8; 5000], 3).unwrap();
        assert!(matches!(
            run(Encoding::Zstd, &z[..z.len() - 2], 5, 10, 10_000),
            Err(InflateError::Broken(_))
        ));
    }

    #[test]
    fn a_huge_zstd_window_is_refused() {
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.set_parameter(zstd::stream::raw::CParameter::WindowLog(27))
            .unwrap();
        c.set_parameter(zstd::stream::raw::CParameter::EnableLongDistanceMatching(
            true,
        ))
        .unwrap();
        // A frame without its content size, so the window it declares is what it asks for.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::WindowLog(27))
            .unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::EnableLongDistanceMatching(
            true,
        ))
        .unwrap();
        std::io::Write::write_all(&mut enc, &vec![1u8; 1 << 20]).unwrap();
        let big_window = enc.finish().unwrap();
        drop(c);
        assert!(matches!(
            run(Encoding::Zstd, &big_window, 1 << 20, 1 << 20, 16 << 20),
            Err(InflateError::Broken(_))
        ));
    }

    #[test]
    fn the_magic_tells_the_encoding() {
        assert_eq!(Encoding::sniff(&gzip(b"x")), Some(Encoding::Gzip));
        assert_eq!(
            Encoding::sniff(&zstd::bulk::compress(b"x", 1).unwrap()),
            Some(Encoding::Zstd)
        );
        assert_eq!(Encoding::sniff(&[0x92, 0x01, 0x80]), None);
        assert_eq!(Encoding::from_name("zstd"), Some(Encoding::Zstd));
        assert_eq!(Encoding::from_name("br"), None);
    }
}
