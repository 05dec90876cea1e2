//! The one TCP listener every stream protocol shares: bind, accept, the connection limits (in
//! all, and per client address), one task per connection, TLS, and the drain on shutdown. Syslog
//! over TCP, the forward protocol, HTTP and the API each give it a handler for one connection.
//!
//! ```text
//! bind (before anything runs) ─► accept ─► limits? ─► spawn: TLS handshake? ─► handler(conn) ─┐
//!          shutdown ─► stop accepting ─► accept what the kernel already                        │
//!                      queued (served in drain mode) ─► wait for every connection task ◄───────┘
//! ```
//!
//! A refused connection (over a limit) or a failed handshake costs one accept and a counter; the
//! handshake runs on the connection's own task, bounded by `tls.handshake_timeout`, so a client
//! that stalls or sends garbage holds nothing but its own socket, briefly.
//!
//! Shutdown is cooperative: handlers see the signal through [`Conn::read`], which, once shutdown
//! has started, keeps reading until the client closes or has been quiet for [`DRAIN_IDLE`], so a
//! sender that finished just before SIGTERM loses nothing.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::tls::{Stream, TlsServer};
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
    pub stream: Stream,
    pub peer: SocketAddr,
    /// The subject of the client's TLS certificate, when it presented one.
    pub tls_subject: Option<Arc<str>>,
    pub shutdown: ShutdownSignal,
    /// When the drain of this connection ends, once shutdown has started.
    drain_until: Option<tokio::time::Instant>,
    /// How long a read may wait for the client while running (`None`: for ever).
    idle_timeout: Option<Duration>,
    /// Where a connection cut off for its idle timeout is counted.
    metrics: Option<Arc<ComponentMetrics>>,
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
    /// The client sent nothing for the listener's `idle_timeout`: stop. Already counted as
    /// `errors_total{kind="timeout"}` and logged.
    Idle,
    /// The socket failed.
    Error(std::io::Error),
}

impl Conn {
    /// Reads into `buf` once. While running it waits as long as it takes; once shutdown has
    /// started it waits at most [`DRAIN_IDLE`], so the connection ends when its client goes quiet.
    pub async fn read<B: bytes::BufMut + ?Sized>(&mut self, buf: &mut B) -> Read {
        if self.shutdown.is_triggered() {
            return self.drain_read(buf).await;
        }
        let idle = async {
            match self.idle_timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // read_buf is cancel-safe: if shutdown (or the idle timeout) wins, no bytes were
            // taken.
            r = self.stream.read_buf(buf) => Self::outcome(r),
            _ = self.shutdown.wait() => self.drain_read(buf).await,
            () = idle => {
                // Counted here, once for every handler: a client that connects and goes quiet is
                // cut off by this and by nothing else.
                if let Some(m) = &self.metrics {
                    m.error(ErrorKind::Timeout, 1);
                    let idle_timeout = self.idle_timeout.unwrap_or_default();
                    crate::warn_limited!(m, peer = %self.peer, ?idle_timeout, "Closed a connection whose client sent nothing within idle_timeout.");
                }
                Read::Idle
            }
        }
    }

    /// A read during shutdown: at most [`DRAIN_IDLE`] of silence, and nothing past
    /// [`DRAIN_MAX`] from the start of the drain.
    async fn drain_read<B: bytes::BufMut + ?Sized>(&mut self, buf: &mut B) -> Read {
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

/// What a listening source's configuration says of its connections' limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `max_connections`.
    pub max_connections: usize,
    /// `max_connections_per_client`.
    pub max_per_client: Option<usize>,
    /// `idle_timeout`.
    pub idle_timeout: Option<Duration>,
}

/// How a listener limits and secures its connections.
#[derive(Clone)]
pub struct ServeOptions {
    /// The most connections open at once; more are refused and counted.
    pub max_connections: usize,
    /// The most connections open at once from one client address (`None`: no limit of its own).
    pub max_per_client: Option<usize>,
    /// TLS on every connection.
    pub tls: Option<Arc<TlsServer>>,
    /// A connection whose client sends nothing this long is closed (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Fires when a reload hands the listening socket to the source's successor: stop
    /// accepting (the successor accepts on the same socket, so no client is refused), and keep
    /// serving the open connections until their clients close them or the server stops.
    pub retire: Option<ShutdownSignal>,
}

/// Accepts until shutdown, runs `handler` on its own task for every connection (within the
/// limits of `options`; more are refused and counted), then serves what the kernel had already
/// queued and waits for every connection to end.
///
/// `metrics`, when given, counts open connections, refusals, failed handshakes and accept
/// errors.
pub async fn serve<H, F>(
    listener: TcpListener,
    options: ServeOptions,
    metrics: Option<Arc<ComponentMetrics>>,
    mut shutdown: ShutdownSignal,
    handler: H,
) where
    H: Fn(Conn) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let ServeOptions {
        max_connections,
        max_per_client,
        tls,
        idle_timeout,
        retire,
    } = options;
    let mut retire = retire;
    let retired = async move {
        match retire.as_mut() {
            Some(signal) => signal.wait().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(retired);
    let mut handed_over = false;
    let limit = Arc::new(Semaphore::new(max_connections.max(1)));
    let per_client = Arc::new(PerClient::default());
    let handler = Arc::new(handler);
    let mut connections = JoinSet::new();
    let conn_shutdown = shutdown.clone();
    let spawn = |connections: &mut JoinSet<()>,
                 stream: TcpStream,
                 peer: SocketAddr,
                 permit: Option<(tokio::sync::OwnedSemaphorePermit, ClientSlot)>| {
        let handler = handler.clone();
        let metrics = metrics.clone();
        let shutdown = conn_shutdown.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _ = stream.set_nodelay(true);
            // Counted by a guard, so a handler that panics (or a task aborted at exit) still
            // leaves the gauge right.
            let _open = metrics.clone().map(OpenConnection::new);
            let (stream, tls_subject) = match tls {
                None => (Stream::Plain(stream), None),
                Some(tls) => match tls.accept(stream).await {
                    Ok(accepted) => (accepted.stream, accepted.subject),
                    Err(reason) => {
                        if let Some(m) = &metrics {
                            m.error(ErrorKind::Tls, 1);
                            crate::warn_limited!(m, %peer, %reason, "Refused a TLS connection.");
                        }
                        return;
                    }
                },
            };
            handler(Conn {
                stream,
                peer,
                tls_subject,
                shutdown,
                drain_until: None,
                idle_timeout,
                metrics,
            })
            .await;
            drop(permit);
        });
    };
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            () = &mut retired => {
                handed_over = true;
                break;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        if let Some(m) = &metrics {
                            m.error(ErrorKind::ConnectionLimit, 1);
                            crate::warn_limited!(m, %peer, max_connections, "Refused a connection over max_connections.");
                        }
                        continue;
                    };
                    let Some(slot) = per_client.take(peer.ip(), max_per_client) else {
                        if let Some(m) = &metrics {
                            m.error(ErrorKind::ConnectionLimit, 1);
                            crate::warn_limited!(m, %peer, max_connections_per_client = max_per_client.unwrap_or_default(), "Refused a connection over max_connections_per_client.");
                        }
                        continue;
                    };
                    spawn(&mut connections, stream, peer, Some((permit, slot)));
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
    // writes already returned: serve them too (in drain mode) instead of resetting them. After
    // a handover they are the successor's to accept.
    if handed_over {
        drop(listener);
    } else {
        for (stream, peer) in accept_backlog(listener) {
            spawn(&mut connections, stream, peer, None);
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Open connections per client address.
#[derive(Default)]
struct PerClient(std::sync::Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in its client's count, given back when dropped.
struct ClientSlot(Option<(Arc<PerClient>, IpAddr)>);

impl PerClient {
    /// A slot for one more connection from `ip`, unless it has `max` already.
    fn take(self: &Arc<Self>, ip: IpAddr, max: Option<usize>) -> Option<ClientSlot> {
        let Some(max) = max else {
            return Some(ClientSlot(None));
        };
        let mut open = self.0.lock().ok()?;
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot(Some((self.clone(), ip))))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Some((clients, ip)) = self.0.take()
            && let Ok(mut open) = clients.0.lock()
            && let Some(n) = open.get_mut(&ip)
        {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;
    use tokio::sync::mpsc;

    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::{ShutdownTrigger, shutdown_pair};

    /// What a test handler reports: each read's outcome, by connection number.
    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Data(usize, Vec<u8>),
        Eof(usize),
        Drained(usize),
        Idle(usize),
        Error(usize),
    }

    struct Server {
        addr: SocketAddr,
        metrics: Arc<ComponentMetrics>,
        trigger: ShutdownTrigger,
        seen: mpsc::UnboundedReceiver<Seen>,
        task: tokio::task::JoinHandle<()>,
    }

    /// A listener on 127.0.0.1:0 whose handler reads until the connection ends, reporting
    /// every read.
    async fn server(options: ServeOptions) -> anyhow::Result<Server> {
        let listener = bind("127.0.0.1:0".parse()?, None).await?;
        let addr = listener.local_addr()?;
        let metrics = Registry::default().register("in", ComponentKind::Source, "test");
        let (trigger, signal) = shutdown_pair();
        let (tx, seen) = mpsc::unbounded_channel();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handler = move |mut conn: Conn| {
            let tx = tx.clone();
            let n = next.fetch_add(1, Ordering::Relaxed);
            async move {
                let mut buf = bytes::BytesMut::with_capacity(1024);
                loop {
                    let seen = match conn.read(&mut buf).await {
                        Read::Data => Seen::Data(n, buf.split().to_vec()),
                        Read::Eof => Seen::Eof(n),
                        Read::Drained => Seen::Drained(n),
                        Read::Idle => Seen::Idle(n),
                        Read::Error(_) => Seen::Error(n),
                    };
                    let end = !matches!(seen, Seen::Data(..));
                    let _ = tx.send(seen);
                    if end {
                        return;
                    }
                }
            }
        };
        let task = tokio::spawn(serve(
            listener,
            options,
            Some(metrics.clone()),
            signal,
            handler,
        ));
        Ok(Server {
            addr,
            metrics,
            trigger,
            seen,
            task,
        })
    }

    fn options(max_connections: usize) -> ServeOptions {
        ServeOptions {
            max_connections,
            max_per_client: None,
            tls: None,
            idle_timeout: None,
            retire: None,
        }
    }

    async fn next(server: &mut Server) -> anyhow::Result<Seen> {
        tokio::time::timeout(Duration::from_secs(120), server.seen.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the handler is gone"))
    }

    /// Whether the server closed `client` without reading from it (a refusal).
    async fn closed_by_server(client: &mut TcpStream) -> anyhow::Result<bool> {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut byte)).await?;
        Ok(matches!(n, Ok(0) | Err(_)))
    }

    #[tokio::test]
    async fn connections_over_max_connections_are_refused_and_counted() -> anyhow::Result<()> {
        let mut server = server(options(1)).await?;
        let mut a = TcpStream::connect(server.addr).await?;
        a.write_all(b"a").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(0, b"a".to_vec()));
        let mut b = TcpStream::connect(server.addr).await?;
        assert!(closed_by_server(&mut b).await?, "the second is refused");
        assert_eq!(server.metrics.errors(ErrorKind::ConnectionLimit), 1);
        assert_eq!(server.metrics.open_connections.load(Ordering::Relaxed), 1);
        // The first one's end frees its place.
        drop(a);
        assert_eq!(next(&mut server).await?, Seen::Eof(0));
        let mut c = TcpStream::connect(server.addr).await?;
        c.write_all(b"c").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(1, b"c".to_vec()));
        drop(c);
        assert_eq!(next(&mut server).await?, Seen::Eof(1));
        server.trigger.trigger();
        tokio::time::timeout(Duration::from_secs(10), server.task).await??;
        assert_eq!(server.metrics.open_connections.load(Ordering::Relaxed), 0);
        Ok(())
    }

    #[tokio::test]
    async fn max_connections_per_client_refuses_the_extra_ones_of_one_address() -> anyhow::Result<()>
    {
        let mut server = server(ServeOptions {
            max_per_client: Some(1),
            ..options(10)
        })
        .await?;
        let mut a = TcpStream::connect(server.addr).await?;
        a.write_all(b"a").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(0, b"a".to_vec()));
        let mut b = TcpStream::connect(server.addr).await?;
        assert!(closed_by_server(&mut b).await?);
        assert_eq!(server.metrics.errors(ErrorKind::ConnectionLimit), 1);
        drop(a);
        assert_eq!(next(&mut server).await?, Seen::Eof(0));
        let mut c = TcpStream::connect(server.addr).await?;
        c.write_all(b"c").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(1, b"c".to_vec()));
        Ok(())
    }

    #[test]
    fn per_client_slots_count_up_to_the_limit_and_come_back_when_dropped() {
        let clients = Arc::new(PerClient::default());
        let ip: IpAddr = [10, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 2].into();
        let first = clients.take(ip, Some(2));
        let second = clients.take(ip, Some(2));
        assert!(first.is_some() && second.is_some());
        assert!(
            clients.take(ip, Some(2)).is_none(),
            "a third is over the limit"
        );
        assert!(
            clients.take(other, Some(2)).is_some(),
            "limits are per address"
        );
        drop(first);
        assert!(clients.take(ip, Some(2)).is_some());
        // No limit: always a slot, and nothing counted.
        assert!(clients.take(ip, None).is_some());
        drop(second);
        assert!(clients.0.lock().map(|m| m.is_empty()).unwrap_or(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_client_is_cut_off_at_idle_timeout() -> anyhow::Result<()> {
        let idle = Duration::from_secs(30);
        let mut server = server(ServeOptions {
            idle_timeout: Some(idle),
            ..options(10)
        })
        .await?;
        let client = TcpStream::connect(server.addr).await?;
        let connected = tokio::time::Instant::now();
        assert_eq!(next(&mut server).await?, Seen::Idle(0));
        let waited = connected.elapsed();
        assert!(
            waited >= idle && waited < idle + Duration::from_secs(1),
            "{waited:?}"
        );
        assert_eq!(server.metrics.errors(ErrorKind::Timeout), 1);
        drop(client);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn at_shutdown_a_connection_is_read_until_its_client_goes_quiet() -> anyhow::Result<()> {
        let mut server = server(options(10)).await?;
        let mut client = TcpStream::connect(server.addr).await?;
        client.write_all(b"before").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(0, b"before".to_vec()));
        server.trigger.trigger();
        // Sent after the signal, within DRAIN_IDLE: still read.
        client.write_all(b"after").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(0, b"after".to_vec()));
        let quiet = tokio::time::Instant::now();
        assert_eq!(next(&mut server).await?, Seen::Drained(0));
        let waited = quiet.elapsed();
        assert!(
            waited >= DRAIN_IDLE && waited < DRAIN_IDLE + Duration::from_millis(50),
            "{waited:?}"
        );
        tokio::time::timeout(Duration::from_secs(10), server.task).await??;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_pauses_is_cut_off_at_drain_max() -> anyhow::Result<()> {
        let mut server = server(options(10)).await?;
        let mut client = TcpStream::connect(server.addr).await?;
        client.write_all(b"x").await?;
        assert_eq!(next(&mut server).await?, Seen::Data(0, b"x".to_vec()));
        server.trigger.trigger();
        let started = tokio::time::Instant::now();
        let writer = tokio::spawn(async move {
            // Every 100 ms: never quiet for DRAIN_IDLE.
            while client.write_all(b"y").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        loop {
            match next(&mut server).await? {
                Seen::Data(..) => continue,
                Seen::Drained(0) => break,
                other => anyhow::bail!("unexpected {other:?}"),
            }
        }
        let waited = started.elapsed();
        assert!(
            waited >= DRAIN_MAX && waited < DRAIN_MAX + DRAIN_IDLE,
            "{waited:?}"
        );
        tokio::time::timeout(Duration::from_secs(10), server.task).await??;
        writer.abort();
        Ok(())
    }
}
