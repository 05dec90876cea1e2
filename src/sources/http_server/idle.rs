//! Idle keep-alive connections without hyper: what lets 10,000 of them cost a few MiB.
//!
//! hyper's HTTP/1 connection keeps an 8KiB read buffer, an 8KiB write buffer, the service's
//! future slot and a header map for as long as it lives, so an idle keep-alive connection cost
//! about 15KB of RSS. Here hyper runs only while a connection has work: once it has read nothing
//! for [`super::IDLE_GRACE`] (checked every `IDLE_GRACE`, so a busy connection never pays for
//! this), every response is on the wire and hyper's read buffer is empty, hyper is closed (it is
//! idle, so that sends nothing) and the socket is taken back
//! ([`hyper::server::conn::http1::Connection::into_parts`]). The connection then waits for its
//! next request with no buffer at all, and a new hyper connection serves it.
//!
//! ```text
//! accept ─► preface peek ─► hyper serves ─► idle: every response written, nothing read
//!                                 ▲           for IDLE_GRACE ─► hyper put aside ─┐
//!                                 └── readable (≤ request_timeout, else close) ◄─┘
//! ```
//!
//! What is idle is seen from outside hyper, after one of its polls returned `Pending`:
//! - no request is in flight: [`InFlight`] counts from the service call until hyper drops the
//!   response body (which holds it), which it does once the body's last bytes are in its write
//!   buffer;
//! - hyper's write buffer is empty and its read buffer was empty: since the last read that
//!   returned bytes, a write took everything hyper handed it (with `pipeline_flush`, hyper writes
//!   only when its read buffer is empty, and it writes its whole buffer at once);
//! - hyper's last read found the socket empty.
//!
//! If hyper is not idle after all, `graceful_shutdown` only turns keep-alive off: the response
//! in progress is sent with `Connection: close` and the connection ends, as on shutdown.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::chunks::{Watch, Watched};

/// What the connection task sees of hyper's progress on one connection.
#[derive(Default)]
pub struct Progress {
    in_flight: AtomicUsize,
    /// Since the last read that returned bytes, a write took everything it was given.
    flushed: AtomicBool,
    /// The last read found nothing to read.
    read_pending: AtomicBool,
    /// Reads that returned something: whether the connection did anything in a while.
    reads: AtomicUsize,
    /// Requests the service was called for, in all.
    requests: AtomicUsize,
}

impl Progress {
    /// hyper has nothing to do until the client sends more (see the module docs).
    pub fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
            && self.flushed.load(Ordering::Relaxed)
            && self.read_pending.load(Ordering::Relaxed)
    }

    /// Changes whenever hyper reads something.
    pub fn activity(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many requests the connection has made.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    fn read_something(&self) {
        self.flushed.store(false, Ordering::Relaxed);
        self.read_pending.store(false, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
    }
}

/// One request, from the service call until hyper has buffered the whole response.
pub struct InFlight(Arc<Progress>);

impl InFlight {
    pub fn new(progress: Arc<Progress>) -> InFlight {
        progress.in_flight.fetch_add(1, Ordering::Relaxed);
        progress.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(progress)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The socket as hyper sees it: bytes hyper had read but not parsed when it was put aside come
/// first, and every read and write is noted in [`Progress`].
pub struct Io {
    /// The socket, with the watch on chunk sizes that lives as long as the connection (every
    /// byte passes it once, when it is read from the socket; a prefix given back is not).
    stream: TokioIo<Watched<TcpStream>>,
    prefix: Bytes,
    progress: Arc<Progress>,
}

impl Io {
    pub fn new(stream: TcpStream, watch: Watch, progress: Arc<Progress>) -> Io {
        Io {
            stream: TokioIo::new(Watched::new(stream, watch)),
            prefix: Bytes::new(),
            progress,
        }
    }

    /// The socket back from hyper, with what hyper had read and not parsed (kept only if any:
    /// an empty `Bytes` from hyper still holds its 8KiB buffer).
    pub fn take_back(mut self, unparsed: Bytes) -> Io {
        if !unparsed.is_empty() {
            self.prefix = unparsed;
        }
        self.progress.flushed.store(false, Ordering::Relaxed);
        self.progress.read_pending.store(false, Ordering::Relaxed);
        self
    }

    /// Something to read is already here: no need to wait for the socket.
    pub fn has_prefix(&self) -> bool {
        !self.prefix.is_empty()
    }

    pub fn stream(&self) -> &TcpStream {
        self.stream.inner().get_ref()
    }

    pub fn into_stream(self) -> TcpStream {
        self.stream.into_inner().into_inner()
    }
}

impl Read for Io {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                this.prefix = Bytes::new();
            }
            this.progress.read_something();
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        if r.is_pending() {
            this.progress.read_pending.store(true, Ordering::Relaxed);
        } else {
            // Bytes, an end of file or an error: hyper has something new to look at.
            this.progress.read_something();
        }
        r
    }
}

impl Write for Io {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        let all = matches!(r, Poll::Ready(Ok(n)) if n == buf.len());
        self.progress.flushed.store(all, Ordering::Relaxed);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let r = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        let all = matches!(r, Poll::Ready(Ok(n)) if n == total);
        self.progress.flushed.store(all, Ordering::Relaxed);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
