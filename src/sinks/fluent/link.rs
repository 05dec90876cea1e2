//! One server of the `fluent` sink: a task that keeps a connection to it (reconnecting with
//! backoff while it is down, which is how a server is probed back), writes the requests the
//! sink hands it, and reads their acks.
//!
//! ```text
//! sink ──Outgoing{seq, bytes}──► link ──write──► server
//! sink ◄──LinkEvent───────────── link ◄──{"ack": id}── (in request order)
//!        Up | Down(reason) | Acked(seq) | Failed(seqs)
//! ```
//!
//! The link never keeps a request it could not get acknowledged: on an ack timeout, a
//! mismatched ack, a closed or broken connection, every request still outstanding (and every
//! one queued to it) goes back to the sink as `Failed`, to be sent again on another server or
//! after the reconnect. While down, requests that still reach it are handed back at once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use loghaul_codec::forward::{Splitter, handshake, read_ack};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::config::{ClientSecurity, FluentSinkConfig};
use crate::metrics::ErrorKind;
use crate::net::tls::{ClientStream, MaybeTls, TlsClient};
use crate::sinks::SinkError;

/// First wait before reconnecting to a server that is down; doubled up to
/// `reconnect_max_interval`.
const RECONNECT_MIN: Duration = Duration::from_millis(200);
/// A connection that lived this long resets the reconnect backoff.
const STABLE: Duration = Duration::from_secs(5);
/// The largest message a server may send us (acks and handshake messages are tiny).
const MAX_REPLY: usize = 64 * 1024;

/// A request for one server.
#[derive(Debug)]
pub struct Outgoing {
    pub seq: u64,
    /// The chunk id the ack must echo (empty without `require_ack`).
    pub chunk: Bytes,
    pub bytes: Bytes,
}

/// What a link tells the sink.
#[derive(Debug)]
pub enum LinkEvent {
    Up(usize),
    /// The connection failed or broke, what kind of failure, and why: always retryable, since
    /// the link's requests go back to the sink to be sent again.
    Down(usize, ErrorKind, SinkError),
    Acked(usize, u64),
    Failed(usize, Vec<u64>),
}

/// Runs the link of server `index` until the sink drops its sender.
pub async fn run(
    index: usize,
    config: Arc<FluentSinkConfig>,
    tls: Option<Arc<TlsClient>>,
    mut rx: mpsc::Receiver<Outgoing>,
    events: mpsc::UnboundedSender<LinkEvent>,
) {
    let address = config
        .servers
        .get(index)
        .map(|s| s.address.clone())
        .unwrap_or_default();
    let mut backoff = RECONNECT_MIN;
    loop {
        let (kind, reason, failed) = match connect(&address, &config, tls.as_deref()).await {
            Ok(stream) => {
                let _ = events.send(LinkEvent::Up(index));
                let connected = Instant::now();
                let ended = match stream {
                    // Owned halves, without the lock a generic split takes on every read.
                    MaybeTls::Plain(tcp) => {
                        let (rd, wr) = tcp.into_split();
                        serve(rd, wr, &config, &mut rx, &events, index).await
                    }
                    MaybeTls::Tls(tls) => {
                        let (rd, wr) = tokio::io::split(*tls);
                        serve(rd, wr, &config, &mut rx, &events, index).await
                    }
                };
                // A server that accepts and closes at once (a full max_connections, a load
                // balancer without backends) must not be retried at full speed: the backoff
                // starts over only after a connection that lasted.
                if connected.elapsed() >= STABLE {
                    backoff = RECONNECT_MIN;
                }
                match ended {
                    Ended::Closed => return,
                    Ended::Broken(kind, reason, failed) => (kind, reason, failed),
                }
            }
            Err((kind, reason)) => (kind, reason, Vec::new()),
        };
        // Down first, so the sink does not hand the failed requests straight back to this link.
        let _ = events.send(LinkEvent::Down(index, kind, SinkError::retryable(reason)));
        if !failed.is_empty() {
            let _ = events.send(LinkEvent::Failed(index, failed));
        }
        // Down: hand back whatever reaches us until it is time to try again.
        let until = Instant::now() + backoff;
        backoff = (backoff * 2).min(config.reconnect_max_interval);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                msg = rx.recv() => match msg {
                    Some(o) => { let _ = events.send(LinkEvent::Failed(index, vec![o.seq])); }
                    None => return,
                },
            }
        }
    }
}

enum Ended {
    /// The sink is done with this link.
    Closed,
    /// The connection broke: what kind of failure, why, and the requests it did not get acked.
    Broken(ErrorKind, String, Vec<u64>),
}

/// Connects (over TLS when `tls` is given) and, with a shared key, completes the handshake.
async fn connect(
    address: &str,
    config: &FluentSinkConfig,
    tls: Option<&TlsClient>,
) -> Result<ClientStream, (ErrorKind, String)> {
    let open = async {
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| (ErrorKind::Io, format!("cannot connect to {address}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        match tls {
            None => Ok(MaybeTls::Plain(tcp)),
            Some(tls) => tls
                .connect(tcp, crate::net::tls::host_of(address))
                .await
                .map_err(|e| {
                    (
                        ErrorKind::Tls,
                        format!("TLS handshake with {address} failed: {e}"),
                    )
                }),
        }
    };
    let mut stream = tokio::time::timeout(config.connect_timeout, open)
        .await
        .map_err(|_| {
            (
                ErrorKind::Io,
                format!("cannot connect to {address}: timed out"),
            )
        })??;
    if let Some(security) = &config.security {
        tokio::time::timeout(
            config.connect_timeout,
            client_handshake(&mut stream, security, &config.self_hostname),
        )
        .await
        .map_err(|_| {
            (
                ErrorKind::Auth,
                format!("handshake with {address} timed out"),
            )
        })?
        .map_err(|e| {
            (
                ErrorKind::Auth,
                format!("handshake with {address} failed: {e}"),
            )
        })?;
    }
    Ok(stream)
}

/// Reads one complete msgpack message.
async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<BytesMut, String> {
    let mut splitter = Splitter::new(MAX_REPLY);
    loop {
        match splitter.split(buf) {
            Ok(Some(n)) => return Ok(buf.split_to(n)),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        buf.reserve(4096);
        match stream.read_buf(buf).await {
            Ok(0) => return Err("the server closed the connection".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    security: &ClientSecurity,
    self_hostname: &str,
) -> Result<(), String> {
    let mut buf = BytesMut::new();
    let helo = handshake::read_helo(&read_message(stream, &mut buf).await?)?;
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|e| e.to_string())?;
    // A 32-character hex salt, as fluentd's out_forward sends.
    let salt: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let key = security.shared_key.as_bytes();
    let mut out = Vec::new();
    handshake::write_ping(
        &mut out,
        &helo,
        self_hostname.as_bytes(),
        salt.as_bytes(),
        key,
        security
            .user
            .as_ref()
            .map(|(u, p)| (u.as_bytes(), p.as_bytes())),
    );
    stream.write_all(&out).await.map_err(|e| e.to_string())?;
    let pong = handshake::read_pong(&read_message(stream, &mut buf).await?)?;
    if !pong.accepted {
        return Err(format!("refused: {}", pong.reason));
    }
    if pong.hostname == self_hostname.as_bytes() {
        return Err(
            "the server gives the same hostname as this client's self_hostname: set a distinct self_hostname"
                .to_owned(),
        );
    }
    let want = handshake::digest(&[salt.as_bytes(), &pong.hostname, &helo.nonce, key]);
    if !handshake::constant_time_eq(want.as_bytes(), &pong.digest) {
        return Err("the server's PONG digest does not match the shared key".to_owned());
    }
    Ok(())
}

/// Writes requests and reads their acks until the connection breaks or the sink is done, then
/// closes the connection: over TLS with a close_notify, so the server sees a clean end (Fluentd
/// warns `unexpected eof while reading` at a close without one).
async fn serve<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    rd: R,
    mut wr: W,
    config: &FluentSinkConfig,
    rx: &mut mpsc::Receiver<Outgoing>,
    events: &mpsc::UnboundedSender<LinkEvent>,
    index: usize,
) -> Ended {
    let ended = exchange(rd, &mut wr, config, rx, events, index).await;
    // Bounded: a server that stopped reading must not hold the sink.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, wr.shutdown()).await;
    ended
}

/// How long a close (TLS close_notify, TCP FIN) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

async fn exchange<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut rd: R,
    wr: &mut W,
    config: &FluentSinkConfig,
    rx: &mut mpsc::Receiver<Outgoing>,
    events: &mpsc::UnboundedSender<LinkEvent>,
    index: usize,
) -> Ended {
    let mut outstanding: VecDeque<(Outgoing, Instant)> = VecDeque::new();
    let mut buf = BytesMut::with_capacity(4096);
    let mut splitter = Splitter::new(MAX_REPLY);
    let mut closing = false;
    let broken = loop {
        let deadline = outstanding
            .front()
            .map(|(_, sent)| *sent + config.ack_timeout);
        let room = outstanding.len() < config.max_in_flight && !closing;
        tokio::select! {
            msg = rx.recv(), if room => match msg {
                Some(o) => {
                    // A server that stops reading must not hold the write (and every request
                    // behind it) past ack_timeout: the deadline covers the write too.
                    match tokio::time::timeout(config.ack_timeout, wr.write_all(&o.bytes)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            outstanding.push_back((o, Instant::now()));
                            break (ErrorKind::Io, format!("write failed: {e}"));
                        }
                        Err(_) => {
                            outstanding.push_back((o, Instant::now()));
                            break (ErrorKind::Ack, format!("the server took no data for ack_timeout ({:?})", config.ack_timeout));
                        }
                    }
                    if config.require_ack {
                        outstanding.push_back((o, Instant::now()));
                    } else {
                        let _ = events.send(LinkEvent::Acked(index, o.seq));
                    }
                }
                None if outstanding.is_empty() => return Ended::Closed,
                None => closing = true,
            },
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => break (ErrorKind::Io, "the server closed the connection".to_owned()),
                Err(e) => break (ErrorKind::Io, format!("read failed: {e}")),
                Ok(_) => {
                    let mut mismatch = None;
                    loop {
                        let n = match splitter.split(&buf) {
                            Ok(Some(n)) => n,
                            Ok(None) => break,
                            Err(e) => { mismatch = Some(format!("unreadable reply: {e}")); break; }
                        };
                        let msg = buf.split_to(n);
                        let acked = read_ack(&msg).map(|s| &msg[s.start as usize..s.end as usize]);
                        match (acked, outstanding.front()) {
                            (Some(id), Some((front, _))) if id == front.chunk.as_ref() => {
                                if let Some((done, _)) = outstanding.pop_front() {
                                    let _ = events.send(LinkEvent::Acked(index, done.seq));
                                }
                            }
                            (Some(_), _) => { mismatch = Some("an ack for a request not sent or out of order".to_owned()); break; }
                            (None, _) => { mismatch = Some("a reply that is no ack (does the server require shared_key?)".to_owned()); break; }
                        }
                    }
                    if let Some(why) = mismatch {
                        break (ErrorKind::Ack, why);
                    }
                    if closing && outstanding.is_empty() {
                        return Ended::Closed;
                    }
                    if buf.capacity() - buf.len() < 1024 {
                        buf.reserve(4096);
                    }
                }
            },
            _ = sleep_until_opt(deadline) => {
                break (ErrorKind::Ack, format!("no ack within ack_timeout ({:?})", config.ack_timeout));
            }
        }
    };
    // Everything not acknowledged goes back to the sink, queued requests too.
    let mut failed: Vec<u64> = outstanding.into_iter().map(|(o, _)| o.seq).collect();
    while let Ok(o) = rx.try_recv() {
        failed.push(o.seq);
    }
    Ended::Broken(broken.0, broken.1, failed)
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
