//! TLS on loghaul's connections: the server end every listener shares (through the one TCP
//! listener) and the client end network sinks use, both reloading their files while they run.
//!
//! ```text
//!  accept ─► limits ─► task: handshake (≤ tls.handshake_timeout; a failure or a timeout is
//!                            counted as errors_total{kind="tls"} and costs nothing more)
//!                          ─► handler(Conn { stream: Stream::Tls, tls_subject, .. })
//!
//!  every second: the cert/key/ca files' bytes changed? ─► new config for new handshakes
//!                (established connections keep theirs); a broken file keeps the old config,
//!                and is reported once
//! ```

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use loghaul_tls::{Reload, TlsConfig, Watched};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::metrics::{ComponentMetrics, ErrorKind};
use crate::pipeline::ShutdownSignal;

/// The field every event of a connection gets when its client presented a certificate: the
/// certificate's subject (`CN=agent-7,O=Example`), for routing (`{{ tls_subject }}`) and audit.
pub const TLS_SUBJECT: &str = "tls_subject";

/// How often the certificate files are read again.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// A connection that may speak TLS: plain TCP, or TLS over it (`T` is the server or client end
/// of tokio-rustls).
pub enum MaybeTls<T> {
    Plain(TcpStream),
    Tls(Box<T>),
}

/// An accepted connection.
pub type Stream = MaybeTls<tokio_rustls::server::TlsStream<TcpStream>>;
/// A connection a client opened.
pub type ClientStream = MaybeTls<tokio_rustls::client::TlsStream<TcpStream>>;

impl<T: AsyncRead + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The server end of TLS for one listener.
pub struct TlsServer {
    watched: Watched<rustls::ServerConfig>,
    handshake_timeout: Duration,
}

/// What a finished handshake gives the connection's handler.
pub struct Accepted {
    pub stream: Stream,
    /// The subject of the client's certificate, when it presented one.
    pub subject: Option<Arc<str>>,
}

impl TlsServer {
    /// Loads the files and starts watching them (until shutdown). `alpn` lists the application
    /// protocols offered (HTTP: `h2`, `http/1.1`).
    ///
    /// # Errors
    ///
    /// The files do not make a server config (validation read them already, so only when they
    /// changed since).
    pub fn start(
        config: &TlsConfig,
        alpn: &'static [&'static [u8]],
        metrics: Arc<ComponentMetrics>,
        shutdown: ShutdownSignal,
    ) -> anyhow::Result<Arc<TlsServer>> {
        let watched = Watched::server(config, alpn).context("TLS")?;
        let server = Arc::new(TlsServer {
            watched,
            handshake_timeout: config.handshake_timeout,
        });
        spawn_reloader(server.clone(), |s| &s.watched, metrics, Some(shutdown));
        Ok(server)
    }

    /// Runs the handshake on an accepted socket, bounded by `handshake_timeout`.
    ///
    /// # Errors
    ///
    /// The handshake failed or timed out; the message says which (a retry by the same client
    /// will fail the same way unless it changes its certificate or protocol).
    pub async fn accept(&self, tcp: TcpStream) -> Result<Accepted, String> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.watched.current());
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => {
                let subject =
                    loghaul_tls::peer_subject(tls.get_ref().1.peer_certificates()).map(Arc::from);
                Ok(Accepted {
                    stream: MaybeTls::Tls(Box::new(tls)),
                    subject,
                })
            }
            Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
            Err(_) => Err(format!(
                "TLS handshake not finished within {:?}",
                self.handshake_timeout
            )),
        }
    }
}

/// The client end of TLS for one sink.
pub struct TlsClient {
    watched: Watched<rustls::ClientConfig>,
    server_name: Option<String>,
}

impl TlsClient {
    /// Loads the files and starts watching them (for as long as the client is held).
    ///
    /// # Errors
    ///
    /// The files do not make a client config.
    pub fn start(
        config: &TlsConfig,
        metrics: Arc<ComponentMetrics>,
    ) -> anyhow::Result<Arc<TlsClient>> {
        let watched = Watched::client(config).context("TLS")?;
        let client = Arc::new(TlsClient {
            watched,
            server_name: config.server_name.clone(),
        });
        spawn_reloader(client.clone(), |c| &c.watched, metrics, None);
        Ok(client)
    }

    /// A client whose files are read once, for a one-shot job (`dlq replay`).
    ///
    /// # Errors
    ///
    /// The files do not make a client config.
    pub fn load(config: &TlsConfig) -> anyhow::Result<Arc<TlsClient>> {
        Ok(Arc::new(TlsClient {
            watched: Watched::client(config).context("TLS")?,
            server_name: config.server_name.clone(),
        }))
    }

    /// Runs the handshake over `tcp`, verifying the server as `host` (or `tls.server_name`).
    ///
    /// # Errors
    ///
    /// The handshake failed: the server's certificate is not trusted or not for that name, or
    /// the connection broke. Retrying helps only if the connection broke.
    pub async fn connect(&self, tcp: TcpStream, host: &str) -> io::Result<ClientStream> {
        self.handshake(self.watched.current(), tcp, host).await
    }

    /// [`TlsClient::connect`] offering the application protocols `alpn` (`h2` for gRPC, whose
    /// servers refuse a TLS connection that did not agree on HTTP/2), and refusing a server
    /// that picks none of them; with no `alpn`, exactly [`TlsClient::connect`].
    ///
    /// # Errors
    ///
    /// As [`TlsClient::connect`]; also when the server agreed on no protocol of `alpn`
    /// (a retry does not help: the server speaks something else).
    pub async fn connect_alpn(
        &self,
        tcp: TcpStream,
        host: &str,
        alpn: &[&[u8]],
    ) -> io::Result<ClientStream> {
        if alpn.is_empty() {
            return self.connect(tcp, host).await;
        }
        // A copy per connection: these connections are long-lived and few (one per server).
        let mut config = (*self.watched.current()).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let stream = self.handshake(Arc::new(config), tcp, host).await?;
        let agreed = match &stream {
            MaybeTls::Tls(tls) => tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec),
            MaybeTls::Plain(_) => None,
        };
        match agreed {
            Some(p) if alpn.contains(&p.as_slice()) => Ok(stream),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the server agreed on no application protocol of {:?} (ALPN)",
                    alpn.iter()
                        .map(|p| String::from_utf8_lossy(p))
                        .collect::<Vec<_>>()
                ),
            )),
        }
    }

    async fn handshake(
        &self,
        config: Arc<rustls::ClientConfig>,
        tcp: TcpStream,
        host: &str,
    ) -> io::Result<ClientStream> {
        let name = self.server_name.as_deref().unwrap_or(host);
        let name = rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not a server name: {e}"),
            )
        })?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let tls = connector.connect(name, tcp).await?;
        Ok(MaybeTls::Tls(Box::new(tls)))
    }
}

/// The host of a `HOST:PORT` address (without the brackets of an IPv6 literal): the name a
/// server's certificate must carry.
pub fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Polls `watched` every [`RELOAD_EVERY`] until shutdown (or until nobody holds the owner),
/// reporting what changed.
fn spawn_reloader<S: Send + Sync + 'static, T: Send + Sync + 'static>(
    owner: Arc<S>,
    watched: fn(&S) -> &Watched<T>,
    metrics: Arc<ComponentMetrics>,
    shutdown: Option<ShutdownSignal>,
) {
    // A weak reference: the poller ends with the last user of the config, not only at shutdown.
    let owner = Arc::downgrade(&owner);
    let mut shutdown = shutdown;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            match &mut shutdown {
                Some(shutdown) => tokio::select! {
                    _ = tick.tick() => {}
                    () = shutdown.wait() => return,
                },
                None => {
                    tick.tick().await;
                }
            }
            let Some(owner) = owner.upgrade() else { return };
            let w = watched(&owner);
            // Reading a few small files: cheap, but off the runtime's workers all the same.
            match crate::pipeline::cpu_heavy(|| w.poll()) {
                Reload::Unchanged => {}
                Reload::Reloaded => {
                    tracing::info!(component = %metrics.id, "TLS files changed; new connections use them.");
                }
                Reload::Failed(error) => {
                    metrics.error(ErrorKind::Tls, 1);
                    tracing::error!(component = %metrics.id, %error, "New TLS files cannot be used; the ones loaded before stay in use.");
                }
            }
        }
    });
}
