//! Chunk sizes seen as they arrive: an HTTP/1 request whose chunked body announces more than
//! `max_body_size` is refused (413) as soon as the size line arrives, not after waiting
//! `request_timeout` for data that will never come (hyper reads a chunk's size and then waits
//! for its bytes, and says nothing of the size to the handler).
//!
//! ```text
//! socket bytes ─► Watch::feed (every byte once, as hyper reads it) ─► head: Content-Length,
//!   Transfer-Encoding: chunked ─► body: size line ─► data ─► CRLF ─► … ─► 0 ─► trailers ─► head
//!   a size (or the sizes so far) past max_body_size ─► Flags::set(request n)
//! handler of request n: Flags::oversized(n) resolves ─► 413
//! ```
//!
//! The watch follows the framing only to find the size lines; anything it does not understand
//! (a line longer than a head may be, a size that is no hexadecimal number) turns it off for the
//! rest of the connection and leaves the request to hyper, which refuses it by itself.
//! Requests are numbered in order, as hyper serves them one at a time; the watch may run ahead
//! of the handler on a pipelined connection, so a flag names its request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// The longest line the watch reads (a head's line, a chunk's size line); hyper refuses heads
/// larger than this anyway.
const MAX_LINE: usize = 64 * 1024;

/// What the watch and the request handlers of one connection share.
#[derive(Debug, Default)]
pub struct Flags {
    /// 1 + the number of the first request found oversized; 0 while none is.
    oversized: AtomicU64,
    /// Requests the handlers have started: the next one's number.
    started: AtomicU64,
    notify: Notify,
}

impl Flags {
    /// The number of the request a handler starts on now.
    pub fn next_request(&self) -> u64 {
        self.started.fetch_add(1, Ordering::Relaxed)
    }

    fn set(&self, request: u64) {
        if self
            .oversized
            .compare_exchange(0, request + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.notify.notify_waiters();
        }
    }

    /// Resolves once request `n`'s body is known to be larger than allowed; never otherwise.
    pub async fn oversized(&self, n: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a flag set between the two wakes us.
            notified.as_mut().enable();
            if self.oversized.load(Ordering::Acquire) == n + 1 {
                return;
            }
            notified.await;
        }
    }
}

/// Where in the HTTP/1 framing the next byte is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A request line or a header line (`lines` so far in this head).
    Head { lines: usize },
    /// A chunk's size line.
    Size,
    /// A chunk's data, this many bytes to go.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, up to the empty line.
    Trailers,
    /// A body of a known length, this many bytes to go.
    Fixed(u64),
    /// Something the watch does not follow: it sees nothing more.
    Off,
}

/// Follows one connection's HTTP/1 framing.
#[derive(Debug)]
pub struct Watch {
    flags: Arc<Flags>,
    max: u64,
    state: State,
    line: Vec<u8>,
    /// The request whose head or body is being read.
    request: u64,
    /// What the head said.
    chunked: bool,
    length: u64,
    /// Body bytes the chunk sizes of this request announced so far.
    announced: u64,
}

impl Watch {
    /// A watch refusing bodies larger than `max` bytes, reporting to `flags`.
    pub fn new(flags: Arc<Flags>, max: usize) -> Watch {
        Watch {
            flags,
            max: max as u64,
            state: State::Head { lines: 0 },
            line: Vec::new(),
            request: 0,
            chunked: false,
            length: 0,
            announced: 0,
        }
    }

    /// Follows `bytes`, the next ones read from the connection.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.state {
                State::Off => return,
                State::Data(n) | State::Fixed(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(bytes.len());
                    bytes = &bytes[k..];
                    let left = n - k as u64;
                    self.state = match (self.state, left) {
                        (State::Data(_), 0) => State::DataEnd,
                        (State::Data(_), _) => State::Data(left),
                        (_, 0) => self.next_request(),
                        _ => State::Fixed(left),
                    };
                }
                _ => {
                    let (done, rest) = match memchr::memchr(b'\n', bytes) {
                        Some(i) => (true, i + 1),
                        None => (false, bytes.len()),
                    };
                    if self.line.len() + rest > MAX_LINE {
                        self.state = State::Off;
                        self.line = Vec::new();
                        return;
                    }
                    self.line.extend_from_slice(&bytes[..rest]);
                    bytes = &bytes[rest..];
                    if done {
                        let line = std::mem::take(&mut self.line);
                        self.line_done(line.trim_ascii_end());
                        self.line = line;
                        self.line.clear();
                    }
                }
            }
        }
    }

    /// The framing after a whole line.
    fn line_done(&mut self, line: &[u8]) {
        self.state = match self.state {
            // Empty lines before a request line are allowed (RFC 9112 §2.2).
            State::Head { lines: 0 } if line.is_empty() => State::Head { lines: 0 },
            State::Head { lines } if !line.is_empty() => {
                if lines > 0 {
                    self.header(line);
                }
                State::Head { lines: lines + 1 }
            }
            State::Head { .. } => {
                if self.chunked {
                    State::Size
                } else if self.length > 0 {
                    State::Fixed(self.length)
                } else {
                    self.next_request()
                }
            }
            State::Size => {
                let digits = line.split(|&b| b == b';').next().unwrap_or_default();
                match parse_hex(digits.trim_ascii()) {
                    Some(0) => State::Trailers,
                    Some(size) => {
                        self.announced = self.announced.saturating_add(size);
                        if self.announced > self.max {
                            self.flags.set(self.request);
                        }
                        State::Data(size)
                    }
                    None => State::Off,
                }
            }
            State::DataEnd if line.is_empty() => State::Size,
            State::Trailers if line.is_empty() => self.next_request(),
            State::Trailers => State::Trailers,
            _ => State::Off,
        };
    }

    fn header(&mut self, line: &[u8]) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The last coding is what frames the body.
            self.chunked = value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"content-length") {
            self.length = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }

    /// A request's body is over: the next bytes start a new request.
    fn next_request(&mut self) -> State {
        self.request += 1;
        self.chunked = false;
        self.length = 0;
        self.announced = 0;
        State::Head { lines: 0 }
    }
}

/// A connection's stream with a [`Watch`] on what is read from it.
pub struct Watched<S> {
    inner: S,
    watch: Watch,
}

impl<S> Watched<S> {
    pub fn new(inner: S, watch: Watch) -> Watched<S> {
        Watched { inner, watch }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(new) = buf.filled().get(before..) {
            this.watch.feed(new);
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A chunk size: hexadecimal digits; a number past `u64` counts as the largest.
fn parse_hex(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in digits {
        let d = char::from(b).to_digit(16)?;
        n = n.saturating_mul(16).saturating_add(u64::from(d));
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged(stream: &[u8], pieces: usize, max: usize) -> Option<u64> {
        let flags = Arc::new(Flags::default());
        let mut watch = Watch::new(flags.clone(), max);
        for piece in stream.chunks(pieces) {
            watch.feed(piece);
        }
        match flags.oversized.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        }
    }

    #[test]
    fn a_huge_chunk_is_flagged_for_its_request_as_its_size_arrives() {
        let ok = b"POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: t\r\n\r\n";
        let fixed = b"POST /in HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}\r\n";
        let huge =
            b"POST /in HTTP/1.1\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\nFFFFFFFFFFFFFFFF\r\n";
        let stream = [&ok[..], fixed, ok, huge].concat();
        for pieces in [1, 2, 7, stream.len()] {
            assert_eq!(
                flagged(&stream, pieces, 1024),
                Some(3),
                "pieces of {pieces}"
            );
        }
        assert_eq!(flagged(&[&ok[..], fixed].concat(), 3, 1024), None);
        // Sizes add up: many chunks past the limit in all.
        let many = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n";
        let mut stream = many.to_vec();
        stream.extend(vec![b'x'; 1024]);
        stream.extend_from_slice(b"\r\n1\r\n");
        assert_eq!(flagged(&stream, 100, 1024), Some(0));
        assert_eq!(flagged(&stream[..stream.len() - 5], 100, 1024), None);
    }

    #[test]
    fn what_it_cannot_follow_turns_it_off() {
        let bad = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nFFFFFFFF\r\n";
        assert_eq!(flagged(bad, 4, 10), None);
        let long = [b"GET /".as_slice(), &vec![b'a'; MAX_LINE + 1]].concat();
        assert_eq!(flagged(&long, 4096, 10), None);
    }

    #[tokio::test]
    async fn the_handler_of_the_flagged_request_hears_of_it() {
        let flags = Arc::new(Flags::default());
        let first = flags.next_request();
        let second = flags.next_request();
        let waiter = {
            let flags = flags.clone();
            tokio::spawn(async move { flags.oversized(second).await })
        };
        flags.set(second);
        let heard = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        assert!(matches!(heard, Ok(Ok(()))));
        let first_hears =
            tokio::time::timeout(std::time::Duration::from_millis(50), flags.oversized(first))
                .await;
        assert!(
            first_hears.is_err(),
            "another request's flag is not this one's"
        );
    }
}
