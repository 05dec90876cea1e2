//! Finds where each request ends in a forward-protocol stream.
//!
//! A connection is a plain concatenation of msgpack values with no length prefix, so the only
//! way to know a request is complete is to walk its structure. [`Splitter`] does that
//! incrementally: it keeps its position and the element counts of the containers it is inside,
//! and when a read ends mid-request it resumes there on the next call instead of starting over.
//! A 16MiB request arriving in 128KiB reads is walked once, not 128 times. Blobs are skipped by
//! their length, so a PackedForward request costs a few header reads however large its entries.
//!
//! ```text
//! buf: [93 a3 'a' 'p' 'p' c6 00 10 00 00 <1MiB of entries> 81 a4 ...]
//!       │  └tag┘            └bin32 header┘ └─ skipped ─┘     └option┘
//!       └ array of 3: the stack holds [3], then [2], [1], [2 (map entries)], ... [] = complete
//! ```

use super::msgpack::{Extent, ReadError, extent};

/// Why a stream cannot be split any further (the connection must be closed: there is no way
/// to find the next request boundary after any of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// The request is longer than the limit (it may not even have arrived yet).
    TooLarge { limit: usize },
    /// Containers nest deeper than the limit.
    TooDeep { limit: usize },
    /// A byte that is no msgpack value.
    Invalid,
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitError::TooLarge { limit } => {
                write!(f, "request larger than max_request_size ({limit} bytes)")
            }
            SplitError::TooDeep { limit } => {
                write!(f, "msgpack values nested deeper than {limit} levels")
            }
            SplitError::Invalid => f.write_str("invalid msgpack (marker 0xc1)"),
        }
    }
}

/// Containers nested deeper than this end the connection (the decoder caps records lower).
pub const MAX_DEPTH: usize = 256;

/// An incremental splitter for one connection.
#[derive(Debug, Clone)]
pub struct Splitter {
    max_request: usize,
    /// Offset, from the start of the current request, of the next header to read.
    pos: usize,
    /// Values still to read in each open container, innermost last.
    stack: Vec<u64>,
    /// The request's structure is complete; its last blob may still be arriving.
    done: bool,
    /// Values walked in the current request (every header read counts one), and in the last
    /// complete one: an upper bound on the fields decoding it can make.
    nodes: u64,
    last_nodes: u64,
}

impl Splitter {
    /// A splitter refusing requests longer than `max_request` bytes.
    pub fn new(max_request: usize) -> Splitter {
        Splitter {
            max_request,
            pos: 0,
            stack: Vec::new(),
            done: false,
            nodes: 0,
            last_nodes: 0,
        }
    }

    /// The length of the first complete value at the start of `buf`, or `None` when `buf`
    /// holds only part of it. Call again with the same start and more bytes appended; after a
    /// `Some`, the next call starts a new value at the start of the buffer it is given.
    ///
    /// # Errors
    ///
    /// The stream can no longer be split: see [`SplitError`].
    pub fn split(&mut self, buf: &[u8]) -> Result<Option<usize>, SplitError> {
        loop {
            if self.pos > self.max_request {
                return Err(SplitError::TooLarge {
                    limit: self.max_request,
                });
            }
            if self.done {
                if self.pos > buf.len() {
                    // The last blob is not all here yet: keep the position.
                    return Ok(None);
                }
                let len = self.pos;
                self.pos = 0;
                self.done = false;
                self.last_nodes = std::mem::take(&mut self.nodes);
                return Ok(Some(len));
            }
            let Some(rest) = buf.get(self.pos..) else {
                // A blob runs past what has arrived.
                return Ok(None);
            };
            let Some(e) = extent(rest).map_err(|_: ReadError| SplitError::Invalid)? else {
                return Ok(None);
            };
            self.nodes += 1;
            match e {
                Extent::Leaf(n) => {
                    self.pos += n;
                    self.value_done();
                }
                Extent::Container(n, 0) => {
                    self.pos += n;
                    self.value_done();
                }
                Extent::Container(n, children) => {
                    self.pos += n;
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(SplitError::TooDeep { limit: MAX_DEPTH });
                    }
                    self.stack.push(children);
                    continue;
                }
            }
            self.done = self.stack.is_empty();
        }
    }

    /// One value finished: count it in its container, closing containers that are full.
    #[inline]
    fn value_done(&mut self) {
        while let Some(top) = self.stack.last_mut() {
            *top -= 1;
            if *top > 0 {
                return;
            }
            self.stack.pop();
        }
    }

    /// Bytes of the current request walked so far (0 between requests).
    pub fn pending(&self) -> usize {
        self.pos
    }

    /// The number of msgpack values in the value [`Splitter::split`] last returned: no
    /// decoding of it can make more fields than this.
    pub fn last_nodes(&self) -> u64 {
        self.last_nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::msgpack::*;

    fn packed(tag: &[u8], entries: usize) -> Vec<u8> {
        let mut blob = Vec::new();
        for i in 0..entries {
            write_array_len(&mut blob, 2);
            write_int(&mut blob, 1_700_000_000 + i as i64);
            write_map_len(&mut blob, 1);
            write_str(&mut blob, b"message");
            write_str(&mut blob, format!("event {i}").as_bytes());
        }
        let mut out = Vec::new();
        write_array_len(&mut out, 3);
        write_str(&mut out, tag);
        write_bin(&mut out, &blob);
        write_map_len(&mut out, 1);
        write_str(&mut out, b"chunk");
        write_str(&mut out, b"abc==");
        out
    }

    /// Splits `stream` fed in pieces of `step` bytes, as a connection would.
    fn feed(stream: &[u8], step: usize, limit: usize) -> Result<Vec<usize>, SplitError> {
        let mut s = Splitter::new(limit);
        let mut lens = Vec::new();
        let (mut start, mut end) = (0, 0);
        while end < stream.len() {
            end = (end + step).min(stream.len());
            while let Some(n) = s.split(&stream[start..end])? {
                lens.push(n);
                start += n;
            }
        }
        assert_eq!(start, stream.len(), "every byte belongs to a request");
        Ok(lens)
    }

    #[test]
    fn requests_split_the_same_whatever_the_reads() {
        let a = packed(b"app.a", 50);
        let b = [0xc0]; // a heartbeat
        let c = packed(b"app.c", 1);
        let mut stream = a.clone();
        stream.extend_from_slice(&b);
        stream.extend_from_slice(&c);
        for step in [1, 2, 3, 7, 64, 1000, stream.len()] {
            assert_eq!(
                feed(&stream, step, 1 << 20),
                Ok(vec![a.len(), 1, c.len()]),
                "step {step}"
            );
        }
    }

    #[test]
    fn a_large_blob_is_skipped_by_its_length() {
        let big = packed(b"t", 20_000);
        let mut s = Splitter::new(16 << 20);
        // The header alone tells where the blob ends; only then is the option map read.
        assert_eq!(s.split(&big[..20]), Ok(None));
        assert!(s.pending() > big.len() - 20, "jumped past the blob");
        assert_eq!(s.split(&big), Ok(Some(big.len())));
    }

    #[test]
    fn limits_end_the_stream() {
        let big = packed(b"t", 1000);
        assert_eq!(
            feed(&big, 100, 1000),
            Err(SplitError::TooLarge { limit: 1000 })
        );
        // Known too large from the blob header, before the bytes arrive.
        let mut s = Splitter::new(1000);
        assert_eq!(
            s.split(&big[..12]),
            Err(SplitError::TooLarge { limit: 1000 })
        );
        let deep = vec![0x91; MAX_DEPTH + 1];
        assert_eq!(
            Splitter::new(1 << 20).split(&deep),
            Err(SplitError::TooDeep { limit: MAX_DEPTH })
        );
        assert_eq!(
            Splitter::new(1 << 20).split(&[0x92, 0xc1]),
            Err(SplitError::Invalid)
        );
        // An array claiming 4 billion items is bounded by the size limit, not by memory.
        let mut s = Splitter::new(1 << 10);
        let mut huge = vec![0xdd, 0xff, 0xff, 0xff, 0xff];
        huge.extend(std::iter::repeat_n(0xc0, 2000));
        assert_eq!(s.split(&huge), Err(SplitError::TooLarge { limit: 1 << 10 }));
    }
}
