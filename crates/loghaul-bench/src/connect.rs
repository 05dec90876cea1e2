//! The generator's stream connections: plain TCP, or TLS over it (rustls with ring, through
//! `loghaul-tls`), for the `tcp://`, `tls://`, `fluent://` and `fluent+tls://` targets.
//!
//! A [`Connector`] is made once per generator connection, before the clock starts: it resolves
//! the address and, for TLS, reads the PEM files and builds the client config. Every
//! [`Connector::connect`] then returns a [`Stream`] whose handshake is complete, so a send never
//! pays for one; only `--connect-per-message` (a new connection for every message) does, and
//! that is what it measures.
//!
//! Resumption is off: every handshake is a full one, as a fleet of clients each connecting once
//! would make, and as `tls_handshake` means to count. A long-lived connection does only one.
//!
//! ```text
//! Connector::new ─► (addr, Option<(Arc<ClientConfig>, ServerName)>)   before the clock
//! Connector::connect ─► TCP connect ─► not to itself? ─► TLS handshake (≤ 10s) ─► Stream
//! Stream::close ─► close_notify ─► shutdown(Write)  [─► wait_closed: read to the server's EOF]
//! ```
//!
//! A TLS connection always ends with [`Stream::wait_closed`]: a TLS server sends things the
//! generator never reads (TLS 1.3 session tickets, its own close_notify), and a socket closed
//! with unread bytes is reset by the kernel, which throws away what it still had to send: the
//! last megabytes of a run. A plain syslog or unacknowledged forward server sends nothing, so a
//! plain connection is only half-closed and dropped, as before TLS existed.

use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use loghaul_tls::rustls;
use loghaul_tls::rustls::pki_types::ServerName;
use loghaul_tls::rustls::{ClientConnection, StreamOwned};

use crate::target::resolve;

/// How long a TLS handshake may take before the connection is given up: a server that does not
/// speak TLS on the port would otherwise hold the generator forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Stream::wait_closed`] waits for the server to close its end.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Plaintext rustls encrypts ahead of the socket: a whole 128KiB block, so that sending one is
/// one encryption pass and one `writev`, not one per 64KiB (rustls's default).
const TLS_BUFFER: usize = 1 << 20;

/// The client side of TLS: `--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-server-name`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsClientOptions {
    /// PEM CA certificates the server's certificate must chain to (the system's trust store
    /// when absent).
    pub ca: Option<PathBuf>,
    /// PEM certificate chain presented to the server (mutual TLS), with `key`.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// The name the server's certificate is checked against (default: the host of the target).
    pub server_name: Option<String>,
}

/// Where a generator connection goes, and how: made once, connected once or per message.
#[derive(Clone)]
pub struct Connector {
    scheme: &'static str,
    addr: SocketAddr,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.addr)
    }
}

impl Connector {
    /// Resolves `addr` (`HOST:PORT`) and, with `tls`, builds the client config from its files.
    /// `scheme` names the target in messages (`tls`, `fluent+tls`, ...).
    ///
    /// # Errors
    /// The address does not resolve; a PEM file cannot be read or does not make a client
    /// config; the server name is not a DNS name or an IP address.
    pub fn new(scheme: &'static str, addr: &str, tls: Option<&TlsClientOptions>) -> Result<Self> {
        let sa = resolve(addr)?;
        let tls = match tls {
            None => None,
            Some(opts) => Some(
                client_config(addr, opts)
                    .with_context(|| format!("setting up TLS for {scheme}://{addr}"))?,
            ),
        };
        Ok(Self {
            scheme,
            addr: sa,
            tls,
        })
    }

    /// The target as a URL, for messages.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Connects (within `timeout`, if given), with no Nagle delay, and completes the TLS
    /// handshake when the target speaks TLS.
    ///
    /// # Errors
    /// The connection is refused or times out, it reached itself, or the handshake fails.
    pub fn connect(&self, timeout: Option<Duration>) -> Result<Stream> {
        let tcp = match timeout {
            Some(t) => TcpStream::connect_timeout(&self.addr, t),
            None => TcpStream::connect(self.addr),
        }
        .with_context(|| format!("connecting to {}", self.url()))?;
        not_to_itself(&tcp)?;
        // The tail of a rate-limited send is small; without NODELAY it could wait for an ACK.
        tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
        let Some((config, name)) = &self.tls else {
            return Ok(Stream::Plain(tcp));
        };
        let mut tcp = tcp;
        let mut conn = ClientConnection::new(Arc::clone(config), name.clone())
            .with_context(|| format!("starting TLS with {}", self.url()))?;
        conn.set_buffer_limit(Some(TLS_BUFFER));
        tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .context("setting the handshake timeout")?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .with_context(|| format!("TLS handshake with {}", self.url()))?;
        }
        tcp.set_read_timeout(None)
            .context("clearing the handshake timeout")?;
        Ok(Stream::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }
}

/// The rustls client config for `opts` (no resumption: see the module doc) and the name to
/// check the server's certificate against.
fn client_config(
    addr: &str,
    opts: &TlsClientOptions,
) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>)> {
    let cfg = loghaul_tls::TlsConfig {
        ca: opts.ca.clone(),
        cert: opts.cert.clone(),
        key: opts.key.clone(),
        server_name: opts.server_name.clone(),
        ..loghaul_tls::TlsConfig::default()
    };
    let files = loghaul_tls::Files::read(&cfg).map_err(|e| anyhow!(e))?;
    let built = loghaul_tls::build_client(&cfg, &files).map_err(|e| anyhow!(e))?;
    let mut config = (*built).clone();
    config.resumption = rustls::client::Resumption::disabled();
    let host = match &opts.server_name {
        Some(name) => name.clone(),
        None => host_of(addr).to_string(),
    };
    let name = ServerName::try_from(host.clone())
        .map_err(|e| anyhow!("{host:?} is no server name: {e}"))?;
    Ok((Arc::new(config), name))
}

/// The host of `HOST:PORT` (`[::1]:514` → `::1`).
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// Connecting to a port of this machine where nothing listens can connect the socket to itself
/// (TCP simultaneous open, when the kernel picks that same port as the local one): it would read
/// its own bytes back as answers, and hold the port the server needs.
///
/// # Errors
/// The connection's two ends are the same address.
pub fn not_to_itself(stream: &TcpStream) -> Result<()> {
    if let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr())
        && local == peer
    {
        bail!("the connection reached itself ({local}): no server listens there");
    }
    Ok(())
}

/// A connection of the generator, its handshake done.
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// The TCP socket underneath (for timeouts and addresses).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// The protocol version and cipher suite, for TLS (`TLSv1_3 TLS13_AES_256_GCM_SHA384`).
    pub fn tls_description(&self) -> Option<String> {
        let Stream::Tls(s) = self else {
            return None;
        };
        let version = s.conn.protocol_version()?;
        let suite = s.conn.negotiated_cipher_suite()?;
        Some(format!("{version:?} {:?}", suite.suite()))
    }

    /// Ends a long-lived stream: [`Stream::close`], and for TLS [`Stream::wait_closed`] (see the
    /// module doc).
    ///
    /// # Errors
    /// What is still buffered cannot be written, or a TLS server does not close its end.
    pub fn finish(&mut self) -> Result<()> {
        self.close()?;
        if matches!(self, Stream::Tls(_)) {
            self.wait_closed()?;
        }
        Ok(())
    }

    /// Ends the stream cleanly: TLS's close_notify, then a half-close, so the server sees the
    /// end of the stream before the socket goes.
    ///
    /// # Errors
    /// What is still buffered cannot be written.
    pub fn close(&mut self) -> Result<()> {
        if let Stream::Tls(s) = self {
            s.conn.send_close_notify();
        }
        self.flush().context("flushing the connection")?;
        let _ = self.tcp().shutdown(Shutdown::Write);
        Ok(())
    }

    /// After [`Stream::close`]: reads whatever the server still sends (TLS session tickets, its
    /// close_notify) until it closes its end. Closing with such bytes unread would make the
    /// kernel reset the connection rather than end it, and a reset throws away what the kernel
    /// had not sent yet; waiting also makes a connection count only once the server is done with
    /// it. Over TLS the bytes go through rustls, so a server that refused the session after the
    /// handshake (a TLS 1.3 server checks a client certificate only once the client has
    /// finished) is an error here, not a silent loss.
    ///
    /// # Errors
    /// The server did not close within 10s, or ended the TLS session with an alert.
    pub fn wait_closed(&mut self) -> Result<()> {
        use std::io::ErrorKind;
        self.tcp()
            .set_read_timeout(Some(CLOSE_TIMEOUT))
            .context("setting the close timeout")?;
        let mut sink = [0u8; 4096];
        loop {
            match self.read(&mut sink) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    bail!("the server did not close the connection within {CLOSE_TIMEOUT:?}")
                }
                // The end of the connection without a close_notify, or a reset: the server is
                // done with it.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::UnexpectedEof
                            | ErrorKind::ConnectionReset
                            | ErrorKind::ConnectionAborted
                            | ErrorKind::BrokenPipe
                    ) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(e).context("the server ended the TLS session"),
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("127.0.0.1:6514"), "127.0.0.1");
        assert_eq!(host_of("localhost:6514"), "localhost");
        assert_eq!(host_of("[::1]:6514"), "::1");
        assert_eq!(host_of("logs.example.com:6514"), "logs.example.com");
    }

    /// A connection that reached itself is refused like one that found no server.
    #[test]
    fn a_connection_to_itself_is_no_connection() {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let own = socket.local_addr().unwrap();
        socket.connect(&own).unwrap();
        let stream: TcpStream = socket.into();
        assert_eq!(stream.peer_addr().unwrap(), stream.local_addr().unwrap());
        let error = not_to_itself(&stream).err().unwrap();
        assert!(error.to_string().contains("reached itself"), "{error:#}");
    }

    /// Files that do not make a client config are reported with the target.
    #[test]
    fn a_missing_ca_file_is_named() {
        let opts = TlsClientOptions {
            ca: Some(PathBuf::from("/nonexistent/ca.crt")),
            ..TlsClientOptions::default()
        };
        let error = Connector::new("tls", "127.0.0.1:1", Some(&opts))
            .err()
            .unwrap();
        let text = format!("{error:#}");
        assert!(
            text.contains("tls://127.0.0.1:1") && text.contains("/nonexistent/ca.crt"),
            "{text}"
        );
    }
}
