//! The one TCP listener every stream protocol shares: bind, accept, the connection limit, one
//! task per connection, and the drain on shutdown. Syslog over TCP, the forward protocol and the
//! API each give it a handler for one connection; TLS will be added here, once, for all of them.
//!
//! ```text
//! bind (before anything runs) ─► accept ─► limit? ─► spawn handler(conn) ─┐
//!          shutdown ─► stop accepting ─► accept what the kernel already    │
//!                      queued (served in drain mode) ─► wait for every ◄───┘
//!                      connection task
//! ```
//!
//! Shutdown is cooperative: handlers see the signal through [`Conn::read`], which, once shutdown
//! has started, keeps reading until the client closes or has been quiet for [`DRAIN_IDLE`], so a
//! sender that finished just before SIGTERM loses nothing.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::metrics::{ComponentMetrics, ErrorKind};
use crate::pipeline::ShutdownSignal;

/// During shutdown, a connection that has been quiet this long is considered drained.
pub const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// During shutdown, a connection is read for at most this long in all: a client that never
/// pauses must not hold the shutdown until `shutdown_timeout` (and the forced exit that loses
/// what is queued).
pub const DRAIN_MAX: Duration = Duration::from_secs(5);

/// Binds a listener (called before anything starts, so a busy port fails the whole start).
/// `receive_buffer` sets SO_RCVBUF on the listener, which accepted sockets inherit.
///
/// # Errors
///
/// The address is in use or not available; retrying will not help until it is freed.
pub async fn bind(addr: SocketAddr, receive_buffer: Option<usize>) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if let Some(size) = receive_buffer {
        socket.set_recv_buffer_size(u32::try_from(size).unwrap_or(u32::MAX))?;
    }
    socket.bind(addr)?;
    // A deep backlog: thousands of clients reconnecting at once must not see resets.
    socket.listen(4096)
}

/// One accepted connection, as a handler gets it.
pub struct Conn {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub shutdown: ShutdownSignal,
    /// When the drain of this connection ends, once shutdown has started.
    drain_until: Option<tokio::time::Instant>,
}

/// What [`Conn::read`] saw.
#[derive(Debug)]
pub enum Read {
    /// Bytes were appended to the buffer.
    Data,
    /// The client closed its side.
    Eof,
    /// Shutdown has started and the client has been quiet for [`DRAIN_IDLE`]: stop.
    Drained,
    /// The socket failed.
    Error(std::io::Error),
}

impl Conn {
    /// Reads into `buf` once. While running it waits as long as it takes; once shutdown has
    /// started it waits at most [`DRAIN_IDLE`], so the connection ends when its client goes quiet.
    pub async fn read(&mut self, buf: &mut BytesMut) -> Read {
        if self.shutdown.is_triggered() {
            return self.drain_read(buf).await;
        }
        tokio::select! {
            // read_buf is cancel-safe: if shutdown wins, no bytes were taken.
            r = self.stream.read_buf(buf) => Self::outcome(r),
            _ = self.shutdown.wait() => self.drain_read(buf).await,
        }
    }

    /// A read during shutdown: at most [`DRAIN_IDLE`] of silence, and nothing past
    /// [`DRAIN_MAX`] from the start of the drain.
    async fn drain_read(&mut self, buf: &mut BytesMut) -> Read {
        let now = tokio::time::Instant::now();
        let until = *self.drain_until.get_or_insert(now + DRAIN_MAX);
        let wait = DRAIN_IDLE.min(until.saturating_duration_since(now));
        if wait.is_zero() {
            return Read::Drained;
        }
        match tokio::time::timeout(wait, self.stream.read_buf(buf)).await {
            Ok(r) => Self::outcome(r),
            Err(_) => Read::Drained,
        }
    }

    fn outcome(r: std::io::Result<usize>) -> Read {
        match r {
            Ok(0) => Read::Eof,
            Ok(_) => Read::Data,
            Err(e) => Read::Error(e),
        }
    }
}

/// Accepts until shutdown, runs `handler` on its own task for every connection (at most
/// `max_connections` at once; more are refused and counted), then serves what the kernel had
/// already queued and waits for every connection to end.
///
/// `metrics`, when given, counts open connections, refusals and accept errors.
pub async fn serve<H, F>(
    listener: TcpListener,
    max_connections: usize,
    metrics: Option<Arc<ComponentMetrics>>,
    mut shutdown: ShutdownSignal,
    handler: H,
) where
    H: Fn(Conn) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(max_connections.max(1)));
    let handler = Arc::new(handler);
    let mut connections = JoinSet::new();
    let conn_shutdown = shutdown.clone();
    let spawn = |connections: &mut JoinSet<()>,
                 stream: TcpStream,
                 peer: SocketAddr,
                 permit: Option<tokio::sync::OwnedSemaphorePermit>| {
        let handler = handler.clone();
        let metrics = metrics.clone();
        let shutdown = conn_shutdown.clone();
        connections.spawn(async move {
            let _ = stream.set_nodelay(true);
            // Counted by a guard, so a handler that panics (or a task aborted at exit) still
            // leaves the gauge right.
            let _open = metrics.map(OpenConnection::new);
            handler(Conn {
                stream,
                peer,
                shutdown,
                drain_until: None,
            })
            .await;
            drop(permit);
        });
    };
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        if let Some(m) = &metrics {
                            m.error(ErrorKind::ConnectionLimit, 1);
                            crate::warn_limited!(m, %peer, max_connections, "Refused a connection over max_connections.");
                        }
                        continue;
                    };
                    spawn(&mut connections, stream, peer, Some(permit));
                }
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning on the error.
                    match &metrics {
                        Some(m) => {
                            m.error(ErrorKind::Io, 1);
                            crate::warn_limited!(m, %error, "Failed to accept a connection.");
                        }
                        None => tracing::warn!(%error, "Failed to accept a connection."),
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Connections the kernel completed but we had not accepted yet belong to clients whose
    // writes already returned: serve them too (in drain mode) instead of resetting them.
    for (stream, peer) in accept_backlog(listener) {
        spawn(&mut connections, stream, peer, None);
    }
    while connections.join_next().await.is_some() {}
}

/// One open connection in a source's `open_connections` gauge, for as long as it lives.
struct OpenConnection(Arc<ComponentMetrics>);

impl OpenConnection {
    fn new(metrics: Arc<ComponentMetrics>) -> OpenConnection {
        metrics.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts, with real non-blocking `accept(2)` calls (not the reactor's cached readiness), every
/// connection still queued on the listener, then closes it.
fn accept_backlog(listener: TcpListener) -> Vec<(TcpStream, SocketAddr)> {
    let mut accepted = Vec::new();
    let Ok(std_listener) = listener.into_std() else {
        return accepted;
    };
    // Bounded: whatever arrives while this loop runs is the last we take.
    for _ in 0..100_000 {
        match std_listener.accept() {
            Ok((stream, peer)) => {
                if stream.set_nonblocking(true).is_ok()
                    && let Ok(stream) = TcpStream::from_std(stream)
                {
                    accepted.push((stream, peer));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    accepted
}
