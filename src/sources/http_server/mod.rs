//! The `http_server` source: events POSTed as JSON, NDJSON or text (gzip or zstd bodies) over
//! HTTP/1.1 or h2c (told apart by peeking at the HTTP/2 preface),
//! answered once the sinks committed them (`{"accepted": N}`), on the shared listener; `GET
//! /health` for load balancers; and an `echo` mode that answers every request with its path and
//! the time, for the lab's HTTP experiment.
//!
//! ```text
//! request ─► /health? ─► echo mode? ─► auth ─► path ─► POST? ─► content type ─► encoding
//!         ─► body (≤ max_body_size, within request_timeout; a chunked body's announced sizes
//!            are watched) ─► inflate (≤ max_decompressed_size, one MiB at a time)
//!         ─► decode (≤ max_events_per_request; a bad line refuses the whole body)
//!         ─► fan-out ─► wait for the sinks' commit (≤ ack_timeout)
//!         ─► 200 {"accepted": N} | 503 + Retry-After
//! ```
//!
//! Memory: each stage is charged to the memory budget before it allocates: the body as it
//! arrives (its `Content-Length` at once), the inflated bytes a MiB at a time, then the most
//! that decoding can make of them ([`http_body::estimate`]), shrunk to what it made. A request
//! that needs more than the whole budget is refused (413); one that waits past `ack_timeout`
//! for the budget is answered 503 with `Retry-After`.
//!
//! Every refusal has a JSON body saying what was wrong, and is counted.
//!
//! The `opentelemetry` source runs the same listener with [`config::Protocol::Otlp`]: its
//! requests are handled by [`otlp`] after `/health` and auth, with the same body, memory and
//! acknowledgement steps.

mod chunks;
pub mod config;
mod idle;
mod otlp;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use loghaul_codec::http_body::{self, Encoding, Format, InflateError};
use loghaul_codec::inflate::Inflater;
use loghaul_core::budget::Charge;
use loghaul_core::{BatchNotifier, BatchStatus, MemoryBudget};

pub use config::HttpServerConfig;
use config::{Auth, Protocol, ResponseMode};

use super::{BuildSource, RunningSource, SourceContext};
use crate::metrics::{ComponentMetrics, ErrorKind, Health};
use crate::net::listener::Conn;
use crate::net::tls::{MaybeTls, Stream};
use crate::pipeline::{BoxFuture, Fanout};

/// Largest request head (request line and headers); more is answered 431.
const MAX_HEAD: usize = 64 * 1024;
/// An HTTP/1 connection that has read nothing for this long (one to two of these) gives hyper
/// and its buffers back until its next request; see [`idle`].
const IDLE_GRACE: Duration = Duration::from_millis(50);
/// From this many open connections on the source, an HTTP/1 connection gives hyper back as soon
/// as it is idle, without the grace: memory then matters more than what a new hyper connection
/// costs its next request, and a burst of thousands of requests must not leave thousands of
/// hyper connections waiting out their grace at once.
const PARK_AT_ONCE_FROM: i64 = 1_000;

struct Ctx {
    id: Arc<str>,
    config: HttpServerConfig,
    metrics: Arc<ComponentMetrics>,
    fanout: Fanout,
    acknowledgements: bool,
}

impl BuildSource for HttpServerConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async move {
            let options = cx.serve_options(
                crate::net::listener::Limits {
                    max_connections: self.max_connections,
                    max_per_client: self.max_connections_per_client,
                    // request_timeout bounds an idle HTTP connection.
                    idle_timeout: None,
                },
                &[b"h2", b"http/1.1"],
            )?;
            let listener = cx.listen(self.address, None).await?;
            let ctx = Arc::new(Ctx {
                id: cx.id,
                config: self.clone(),
                metrics: cx.metrics,
                fanout: cx.fanout,
                acknowledgements: cx.acknowledgements,
            });
            let shutdown = cx.shutdown;
            let running: RunningSource = Box::pin(async move {
                ctx.metrics.set_health(Health::Running, None);
                let handler_ctx = ctx.clone();
                crate::net::listener::serve(
                    listener,
                    options,
                    Some(ctx.metrics.clone()),
                    shutdown,
                    move |conn| serve_connection(conn, handler_ctx.clone()),
                )
                .await;
                ctx.metrics.set_health(Health::Stopped, None);
            });
            Ok(running)
        })
    }

    fn hands_over(&self) -> bool {
        true
    }
}

async fn serve_connection(conn: Conn, ctx: Arc<Ctx>) {
    let Conn {
        stream,
        peer,
        tls_subject,
        mut shutdown,
        ..
    } = conn;
    let stream = match stream {
        MaybeTls::Plain(tcp) => tcp,
        // Over TLS the protocol was agreed in the handshake (ALPN); a client that offered
        // none speaks HTTP/1.1.
        MaybeTls::Tls(tls) => {
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let stream = MaybeTls::Tls(tls);
            if h2 {
                serve_http2(stream, &ctx, tls_subject, &mut shutdown).await;
            } else {
                serve_http1_tls(stream, &ctx, peer, tls_subject, &mut shutdown).await;
            }
            return;
        }
    };
    // A client that connects and says nothing is cut off like one trickling its headers.
    let h2 = tokio::select! {
        version = opens_with_h2_preface(&stream, ctx.config.request_timeout) => version,
        () = shutdown.wait() => return,
    };
    match h2 {
        Ok(Some(true)) => serve_http2(stream, &ctx, None, &mut shutdown).await,
        Ok(Some(false)) => serve_http1(stream, &ctx, peer, &mut shutdown).await,
        Ok(None) => {}
        Err(Silent) => ctx.cut_off(peer),
    }
}

impl Ctx {
    /// Counts and logs a connection cut off because its client did not send a whole request
    /// head within `request_timeout` (a slow or stalled client).
    fn cut_off(&self, peer: std::net::SocketAddr) {
        self.metrics.error(ErrorKind::Timeout, 1);
        let request_timeout = self.config.request_timeout;
        crate::warn_limited!(self.metrics, %peer, ?request_timeout, "Closed a connection whose client sent no whole request head within request_timeout.");
    }
}

/// Serves HTTP/2 until the client closes or shutdown ends it gracefully.
async fn serve_http2<S>(
    stream: S,
    ctx: &Arc<Ctx>,
    subject: Option<Arc<str>>,
    shutdown: &mut crate::pipeline::ShutdownSignal,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder =
        hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD as u32)
        // A peer that stops answering pings is gone: free its streams.
        .keep_alive_interval(ctx.config.request_timeout)
        .keep_alive_timeout(ctx.config.request_timeout);
    // Boxed, so an HTTP/1 connection's task does not carry room for it.
    let mut connection =
        Box::pin(builder.serve_connection(TokioIo::new(stream), service(ctx, None, subject, None)));
    tokio::select! {
        _ = connection.as_mut() => {}
        () = shutdown.wait() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// HTTP/1 over TLS: hyper keeps the connection for its whole life (an idle TLS session cannot
/// be put aside and picked up again the way a plain socket is), with the same header timeout,
/// which is also the idle timeout between requests.
async fn serve_http1_tls(
    stream: Stream,
    ctx: &Arc<Ctx>,
    peer: std::net::SocketAddr,
    subject: Option<Arc<str>>,
    shutdown: &mut crate::pipeline::ShutdownSignal,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.config.request_timeout)
        .max_buf_size(MAX_HEAD)
        .pipeline_flush(true);
    // Counts the requests, so that a header timeout is told apart from a keep-alive connection
    // that idled out after serving some: here hyper's header timer is both.
    let progress = Arc::new(idle::Progress::default());
    let flags = Arc::new(chunks::Flags::default());
    let watch = chunks::Watch::new(flags.clone(), ctx.config.max_body_size);
    let connection = builder.serve_connection(
        TokioIo::new(chunks::Watched::new(stream, watch)),
        service(ctx, Some(progress.clone()), subject, Some(flags)),
    );
    tokio::pin!(connection);
    tokio::select! {
        ended = connection.as_mut() => {
            if ended.is_err_and(|e| e.is_timeout()) && progress.requests() == 0 {
                ctx.cut_off(peer);
            }
        }
        () = shutdown.wait() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Reply>, Infallible>> + Send>>;

/// The subject of the client's TLS certificate, carried to the request handler.
#[derive(Clone)]
struct TlsSubject(Arc<str>);

/// An HTTP/1 request's number on its connection, and where its connection's watch on chunk
/// sizes reports (see [`chunks`]).
#[derive(Clone)]
struct ChunkWatch(Arc<chunks::Flags>, u64);

/// The service both protocols run; on HTTP/1, each request is counted in `progress` until its
/// response is buffered, and numbered for the watch on its chunk sizes (`chunks`).
fn service(
    ctx: &Arc<Ctx>,
    progress: Option<Arc<idle::Progress>>,
    subject: Option<Arc<str>>,
    chunks: Option<Arc<chunks::Flags>>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<Reply>,
    Error = Infallible,
    Future = ServiceFuture,
> + use<> {
    let ctx = ctx.clone();
    hyper::service::service_fn(move |req: Request<Incoming>| -> ServiceFuture {
        let ctx = ctx.clone();
        let in_flight = progress.clone().map(idle::InFlight::new);
        // Boxed: hyper's HTTP/1 connection keeps a slot the size of this future for as long as
        // it lives.
        let subject = subject.clone();
        // Numbered now: hyper calls the service for each request in the connection's order.
        let watch = chunks
            .as_ref()
            .map(|f| ChunkWatch(f.clone(), f.next_request()));
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            if let Some(subject) = subject {
                parts.extensions.insert(TlsSubject(subject));
            }
            if let Some(watch) = watch {
                parts.extensions.insert(watch);
            }
            let mut body = Some(body);
            let resp = handle(&parts, &mut body, &ctx).await;
            if parts.version == hyper::Version::HTTP_2
                && let Some(unread) = body.as_mut()
            {
                drain(unread).await;
            }
            let mut resp = resp;
            let trailers = resp.extensions_mut().remove::<Trailers>().map(|t| t.0);
            Ok::<_, Infallible>(resp.map(|reply| Reply {
                reply,
                trailers,
                _unread: body,
                _in_flight: in_flight,
            }))
        })
    })
}

/// HTTP/1 on one connection: hyper while it has work, nothing but the socket while it is idle
/// (see [`idle`]).
async fn serve_http1(
    stream: tokio::net::TcpStream,
    ctx: &Arc<Ctx>,
    peer: std::net::SocketAddr,
    shutdown: &mut crate::pipeline::ShutdownSignal,
) {
    let progress = Arc::new(idle::Progress::default());
    let flags = Arc::new(chunks::Flags::default());
    let watch = chunks::Watch::new(flags.clone(), ctx.config.max_body_size);
    let mut io = idle::Io::new(stream, watch, progress.clone());
    // The preface peek saw bytes: hyper starts at once.
    let mut head_timeout = ctx.config.request_timeout;
    loop {
        match serve_until_idle(io, ctx, peer, (&progress, &flags), shutdown, head_timeout).await {
            Some(back) if !shutdown.is_triggered() => io = back,
            _ => return,
        }
        // Idle: no hyper, no buffer. The wait for the next request and its head together take
        // at most request_timeout, as hyper's header timer alone did when it waited here. A
        // connection that idles out here, between requests, is housekeeping, not counted.
        let deadline = tokio::time::Instant::now() + ctx.config.request_timeout;
        if !io.has_prefix() {
            tokio::select! {
                biased;
                // hyper's last read found the socket empty, so this waits for real.
                readable = tokio::time::timeout_at(deadline, io.stream().readable()) => {
                    if !matches!(readable, Ok(Ok(()))) {
                        return;
                    }
                }
                // An idle connection closes at once on shutdown, as hyper closes one.
                () = shutdown.wait() => return,
            }
        }
        head_timeout = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_millis(1));
    }
}

/// Runs hyper on the connection until it is idle (then gives the socket back) or ends (then
/// closes it, as hyper does).
async fn serve_until_idle(
    io: idle::Io,
    ctx: &Arc<Ctx>,
    peer: std::net::SocketAddr,
    (progress, flags): (&Arc<idle::Progress>, &Arc<chunks::Flags>),
    shutdown: &mut crate::pipeline::ShutdownSignal,
    head_timeout: Duration,
) -> Option<idle::Io> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // A client trickling its headers (slowloris) is cut off; the body has its own bound.
        // hyper also runs this timer while a keep-alive connection waits for its next request,
        // so it is the idle timeout too (and the wait in `serve_http1` once hyper is put aside).
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_HEAD)
        .pipeline_flush(true);
    // Boxed, so the task of an idle connection holds none of it.
    let mut connection = Box::new(builder.serve_connection(
        io,
        service(ctx, Some(progress.clone()), None, Some(flags.clone())),
    ));
    let mut closing = false;
    let ended = {
        let stop = shutdown.wait();
        tokio::pin!(stop);
        // Checked every IDLE_GRACE, not after every request: a busy connection keeps hyper
        // (below PARK_AT_ONCE_FROM connections).
        let grace = tokio::time::sleep(IDLE_GRACE);
        tokio::pin!(grace);
        let mut seen = progress.activity();
        std::future::poll_fn(|cx| {
            if !closing && stop.as_mut().poll(cx).is_ready() {
                closing = true;
                Pin::new(&mut *connection).graceful_shutdown();
            }
            if let Poll::Ready(r) = connection.poll_without_shutdown(cx) {
                return Poll::Ready(Some(r));
            }
            if closing {
                return Poll::Pending;
            }
            let at_once = ctx.metrics.open_connections.load(Ordering::Relaxed) >= PARK_AT_ONCE_FROM;
            if at_once {
                if !progress.is_idle() {
                    return Poll::Pending;
                }
            } else {
                if grace.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let activity = progress.activity();
                if activity != seen || !progress.is_idle() {
                    seen = activity;
                    grace
                        .as_mut()
                        .reset(tokio::time::Instant::now() + IDLE_GRACE);
                    let _ = grace.as_mut().poll(cx);
                    return Poll::Pending;
                }
            }
            // Idle, so this sends nothing and hyper is done at once.
            Pin::new(&mut *connection).graceful_shutdown();
            match connection.poll_without_shutdown(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(None),
                Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
                // Not idle after all: it ends after its response, as on shutdown.
                Poll::Pending => {
                    closing = true;
                    Poll::Pending
                }
            }
        })
        .await
    };
    let parts = connection.into_parts();
    match ended {
        None => Some(parts.io.take_back(parts.read_buf)),
        // Done (the client closed, asked to close, or shutdown): shut down our side, as
        // hyper's own future does.
        Some(Ok(())) => {
            let mut stream = parts.io.into_stream();
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut stream).await;
            None
        }
        // hyper runs here only once the client has sent something (the preface peek, or the
        // socket readable again after idling), so its header timer firing means a request
        // head that did not arrive whole in time.
        Some(Err(e)) => {
            if e.is_timeout() {
                ctx.cut_off(peer);
            }
            None
        }
    }
}

/// Most a refused HTTP/2 request's body is read for, so the client sees a finished request and
/// the answer (curl reports a reset stream as failed even after the answer came).
const DRAIN_MAX: usize = 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(1);

/// Reads and drops what is left of a refused request's body, within [`DRAIN_MAX`] and
/// [`DRAIN_TIME`]; past them the stream is reset as usual.
async fn drain(body: &mut Incoming) {
    use hyper::body::Body as _;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let mut seen = 0usize;
    while !body.is_end_stream() && seen <= DRAIN_MAX {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => seen += frame.data_ref().map_or(0, Bytes::len),
            _ => break,
        }
    }
}

/// A response body that keeps the request's unread body until the response is sent: HTTP/2
/// then resets the request stream with NO_ERROR, which clients accept with the early answer (a
/// 413, a 401), instead of CANCEL, which some report as a failed request.
struct Reply {
    reply: Full<Bytes>,
    /// Sent after the body (gRPC's status), over HTTP/2.
    trailers: Option<hyper::HeaderMap>,
    _unread: Option<Incoming>,
    /// On HTTP/1, the request counts as in flight until hyper drops this body, which it does
    /// once the last bytes are in its write buffer (see [`idle`]).
    _in_flight: Option<idle::InFlight>,
}

impl hyper::body::Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        match std::pin::Pin::new(&mut self.reply).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(
                self.trailers
                    .take()
                    .map(|t| Ok(hyper::body::Frame::trailers(t))),
            ),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reply.is_end_stream() && self.trailers.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.reply.size_hint()
    }
}

/// Trailers a handler's response carries to [`Reply`] (in the response's extensions).
#[derive(Clone)]
struct Trailers(hyper::HeaderMap);

/// HTTP/2's connection preface, which an h2c client with prior knowledge sends first.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A client that said nothing, or no more than a prefix of the HTTP/2 preface, in time.
struct Silent;

/// Whether the client opens with the HTTP/2 preface (h2c with prior knowledge) or speaks HTTP/1;
/// `Ok(None)` when it closed (or the socket failed), [`Silent`] when it said nothing that tells
/// within `timeout`. Peeking leaves the bytes in the socket for whichever protocol serves them
/// and allocates nothing per connection.
async fn opens_with_h2_preface(
    stream: &tokio::net::TcpStream,
    timeout: Duration,
) -> Result<Option<bool>, Silent> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let Ok(peeked) = tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await else {
            return Err(Silent);
        };
        let Ok(n) = peeked else {
            return Ok(None);
        };
        if n == 0 {
            return Ok(None);
        }
        if buf[..n] != H2_PREFACE[..n] {
            return Ok(Some(false));
        }
        if n == H2_PREFACE.len() {
            return Ok(Some(true));
        }
        // A prefix of the preface so far ("P", "PRI * HT"…): the socket stays readable, so wait a
        // little before peeking again instead of spinning.
        tokio::time::sleep(Duration::from_millis(5)).await;
        if tokio::time::Instant::now() >= deadline {
            return Err(Silent);
        }
    }
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn refuse(ctx: &Ctx, status: StatusCode, kind: ErrorKind, error: &str) -> Response<Full<Bytes>> {
    ctx.metrics.error(kind, 1);
    json_response(status, serde_json::json!({ "error": error }))
}

fn echo(path: &str) -> Response<Full<Bytes>> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut resp = Response::new(Full::new(Bytes::from(format!("{path} {now}\n"))));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// `body` is taken when the request's body is read; a refusal leaves it in place, so the caller
/// can keep it until the response is sent.
async fn handle(
    req: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
    ctx: &Ctx,
) -> Response<Full<Bytes>> {
    let path = req.uri.path().to_owned();
    if req.method == Method::GET && path == "/health" {
        return match ctx.metrics.health().0 {
            Health::Running => json_response(StatusCode::OK, serde_json::json!({"status": "ok"})),
            h => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": format!("{h:?}").to_lowercase()}),
            ),
        };
    }
    if ctx.config.response == ResponseMode::Echo {
        return echo(&path);
    }
    if let Some(Auth::Header(expected)) = &ctx.config.auth {
        let given = req
            .headers
            .get(header::AUTHORIZATION)
            .map_or(&b""[..], HeaderValue::as_bytes);
        if !crate::net::http::authorization_matches(given, expected) {
            let scheme = if expected.starts_with("Basic ") {
                "Basic realm=\"loghaul\""
            } else {
                "Bearer realm=\"loghaul\""
            };
            let mut resp = refuse(
                ctx,
                StatusCode::UNAUTHORIZED,
                ErrorKind::Auth,
                "missing or wrong credentials",
            );
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(scheme));
            return resp;
        }
    }
    if ctx.config.protocol == Protocol::Otlp {
        return otlp::handle(req, body, ctx).await;
    }
    let Some(prefix) = ctx
        .config
        .paths
        .iter()
        .filter(|p| path.starts_with(p.as_str()))
        .max_by_key(|p| p.len())
    else {
        return refuse(
            ctx,
            StatusCode::NOT_FOUND,
            ErrorKind::Protocol,
            "no such path",
        );
    };
    if req.method != Method::POST {
        let mut resp = refuse(
            ctx,
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Protocol,
            "events are sent with POST",
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    let content_type = req
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let format = match content_type.as_deref() {
        Some("application/json") => Format::Json,
        Some("application/x-ndjson" | "application/ndjson" | "application/jsonlines") => {
            Format::Ndjson
        }
        Some("text/plain") => Format::Text,
        other => {
            return refuse(
                ctx,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorKind::Protocol,
                &format!(
                    "content type {} is not accepted: send application/json, application/x-ndjson or text/plain",
                    other.map_or("(none)".to_owned(), |t| format!("`{t}`"))
                ),
            );
        }
    };
    let encoding = req
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let encoding = match encoding.as_deref() {
        None | Some("identity" | "") => None,
        Some(e @ ("gzip" | "zstd")) => Encoding::from_name(e),
        Some(other) => {
            return refuse(
                ctx,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorKind::Decompression,
                &format!("content encoding `{other}` is not accepted: gzip, zstd or none"),
            );
        }
    };
    let max = ctx.config.max_body_size;
    let too_large = || {
        refuse(
            ctx,
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Oversized,
            &format!("the body is larger than max_body_size ({max} bytes)"),
        )
    };
    if let Some(len) = req
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > max as u64
    {
        return too_large();
    }
    // Request-level fields, read before the body consumes the request.
    let tag = if ctx.config.tag_from_path {
        let rest = path[prefix.len()..].trim_start_matches('/');
        (!rest.is_empty()).then(|| rest.to_owned())
    } else {
        None
    };
    let mut extra: Vec<(String, String)> = Vec::new();
    if let Some(TlsSubject(subject)) = req.extensions.get::<TlsSubject>() {
        extra.push((crate::net::tls::TLS_SUBJECT.to_owned(), subject.to_string()));
    }
    for name in &ctx.config.headers {
        if let Some(v) = req.headers.get(name.as_str()).and_then(|v| v.to_str().ok()) {
            extra.push((name.clone(), v.to_owned()));
        }
    }
    if !ctx.config.query_parameters.is_empty()
        && let Some(query) = req.uri.query()
    {
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if ctx.config.query_parameters.iter().any(|q| q == k) {
                extra.push((k.to_owned(), v.to_owned()));
            }
        }
    }
    let Some(body) = body.take() else {
        return refuse(
            ctx,
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Protocol,
            "the body was already read",
        );
    };
    // Every byte the request makes is charged to the memory budget before it exists: the body
    // as it arrives, the inflated body step by step, then what decoding it can take at most
    // (see `http_body::estimate`). Requests that do not fit now wait (503 after ack_timeout);
    // one that could never fit is refused (413).
    let mut share = Share::new(
        ctx.fanout.budget().cloned(),
        tokio::time::Instant::now() + ctx.config.ack_timeout,
    );
    let watch = req.extensions.get::<ChunkWatch>();
    let body = match read_body(body, declared_length(&req.headers), watch, ctx, &mut share).await {
        Ok(body) => body,
        Err(refusal) => return refusal.respond(ctx),
    };
    let wire_bytes = body.len();
    let body = match encoding {
        None => body,
        Some(e) => match inflate(e, body, ctx, &mut share).await {
            Ok(inflated) => inflated,
            Err(refusal) => return refusal.respond(ctx),
        },
    };
    let extra_refs: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let estimate = http_body::estimate(&body, format, tag.as_deref(), &extra_refs);
    let max_events = ctx.config.max_events_per_request;
    if estimate.events > max_events && format != Format::Json {
        return Refusal::TooManyEvents(max_events).respond(ctx);
    }
    // The body stays until its batch is made.
    if let Err(refusal) = share.hold(body.len() + estimate.bytes()).await {
        return refusal.respond(ctx);
    }
    let decoded = crate::pipeline::cpu_heavy(|| {
        http_body::decode_within(
            body,
            format,
            tag.as_deref(),
            &extra_refs,
            ctx.id.clone(),
            Some(estimate),
        )
    });
    let mut batch = match decoded {
        Ok(b) => b,
        Err(e) => {
            ctx.metrics.error(ErrorKind::Parse, 1);
            crate::warn_limited!(ctx.metrics, line = e.line, offset = e.offset, error = %e.message, "Refused a request body that does not decode; nothing of it was accepted.");
            return json_response(
                StatusCode::BAD_REQUEST,
                serde_json::json!({
                    "error": e.message,
                    "line": e.line,
                    "offset": e.offset,
                    "accepted": 0,
                }),
            );
        }
    };
    if batch.len() > max_events {
        // JSON arrays are counted once parsed: their estimate counts every object.
        return Refusal::TooManyEvents(max_events).respond(ctx);
    }
    batch.charge = share
        .exactly(loghaul_core::budget::batch_bytes(&batch))
        .map(Arc::new);
    let n = batch.len();
    ctx.metrics.received(n, wire_bytes);
    if n == 0 {
        return json_response(StatusCode::OK, serde_json::json!({ "accepted": 0 }));
    }
    match deliver(ctx, batch).await {
        Outcome::Accepted(n) => json_response(StatusCode::OK, serde_json::json!({ "accepted": n })),
        Outcome::Busy(why) => busy(ctx, why),
        Outcome::Refused(why) => {
            refuse(ctx, StatusCode::INTERNAL_SERVER_ERROR, ErrorKind::Ack, why)
        }
    }
}

/// What became of a request's events.
enum Outcome {
    /// Sent on (and, with acknowledgements, committed by every sink).
    Accepted(usize),
    /// Not now: the client should send them again.
    Busy(&'static str),
    /// A sink refused them for good.
    Refused(&'static str),
}

/// Sends `batch` on and, with acknowledgements, waits for the sinks' commit, all within
/// `ack_timeout`.
async fn deliver(ctx: &Ctx, mut batch: loghaul_core::EventBatch) -> Outcome {
    let n = batch.len();
    let status = if ctx.acknowledgements {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        batch.finalizer = finalizer;
        Some(status)
    } else {
        None
    };
    // Never an unbounded wait: queues full for ack_timeout, or sinks that do not commit in that
    // time, get 503 and a Retry-After; the client sends again (at least once).
    let deadline = tokio::time::Instant::now() + ctx.config.ack_timeout;
    if tokio::time::timeout_at(deadline, ctx.fanout.send(batch))
        .await
        .is_err()
    {
        return Outcome::Busy("the pipeline is full; try again");
    }
    let Some(status) = status else {
        return Outcome::Accepted(n);
    };
    match tokio::time::timeout_at(deadline, status).await {
        Ok(BatchStatus::Delivered) => Outcome::Accepted(n),
        Ok(BatchStatus::Errored) => Outcome::Busy("a sink could not write the events; try again"),
        Ok(BatchStatus::Rejected) => Outcome::Refused("a sink refused the events for good"),
        Err(_) => {
            Outcome::Busy("the sinks did not commit the events within ack_timeout; try again")
        }
    }
}

fn busy(ctx: &Ctx, error: &str) -> Response<Full<Bytes>> {
    let mut resp = refuse(ctx, StatusCode::SERVICE_UNAVAILABLE, ErrorKind::Ack, error);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The `Content-Length` a request declares, if any.
fn declared_length(headers: &hyper::HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
}

/// Why a request was not taken, before its events were sent on.
enum Refusal {
    /// The body passed `max_body_size`.
    TooLarge(usize),
    /// The body inflates past `max_decompressed_size`.
    InflatesPast(usize),
    /// The body is no valid data of its `Content-Encoding`.
    Broken(Encoding, String),
    /// The body holds more events than `max_events_per_request`.
    TooManyEvents(usize),
    /// Decoding it needs more memory than the whole budget holds.
    Memory { needs: usize, limit: usize },
    /// The budget stayed spent until the deadline.
    Busy,
    /// The body did not arrive within `request_timeout`.
    Slow,
    /// Reading the body failed.
    Read(String),
}

impl Refusal {
    fn respond(self, ctx: &Ctx) -> Response<Full<Bytes>> {
        match self {
            Refusal::TooLarge(max) => refuse(
                ctx,
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::Oversized,
                &format!("the body is larger than max_body_size ({max} bytes)"),
            ),
            Refusal::InflatesPast(max) => refuse(
                ctx,
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::Decompression,
                &format!("the body inflates past max_decompressed_size ({max} bytes)"),
            ),
            Refusal::Broken(e, why) => refuse(
                ctx,
                StatusCode::BAD_REQUEST,
                ErrorKind::Decompression,
                &format!("the {e} body does not decompress: {why}"),
            ),
            Refusal::TooManyEvents(max) => refuse(
                ctx,
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::Oversized,
                &format!(
                    "the body holds more events than max_events_per_request ({max}); send them in smaller requests"
                ),
            ),
            Refusal::Memory { needs, limit } => {
                crate::warn_limited!(
                    ctx.metrics,
                    needs,
                    limit,
                    "Refused a request that needs more memory than limits.memory holds."
                );
                refuse(
                    ctx,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorKind::MemoryLimit,
                    &format!(
                        "the request needs up to {needs} bytes of memory (its body, inflated, then decoded), more than limits.memory ({limit} bytes) holds; send smaller requests"
                    ),
                )
            }
            Refusal::Busy => {
                let mut resp = refuse(
                    ctx,
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorKind::MemoryLimit,
                    "the memory budget (limits.memory) stayed spent; try again",
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                resp
            }
            Refusal::Slow => refuse(
                ctx,
                StatusCode::REQUEST_TIMEOUT,
                ErrorKind::Io,
                "the body did not arrive within request_timeout",
            ),
            Refusal::Read(why) => refuse(
                ctx,
                StatusCode::BAD_REQUEST,
                ErrorKind::Protocol,
                &format!("the body could not be read: {why}"),
            ),
        }
    }
}

/// A request's share of the memory budget, grown before each allocation it covers.
struct Share {
    budget: Option<Arc<MemoryBudget>>,
    charge: Option<Charge>,
    /// How long growing it may wait for the budget.
    deadline: tokio::time::Instant,
}

impl Share {
    fn new(budget: Option<Arc<MemoryBudget>>, deadline: tokio::time::Instant) -> Share {
        Share {
            budget,
            charge: None,
            deadline,
        }
    }

    /// Holds at least `total` bytes, waiting for them until the deadline.
    async fn hold(&mut self, total: usize) -> Result<(), Refusal> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        if total > budget.limit() {
            return Err(Refusal::Memory {
                needs: total,
                limit: budget.limit(),
            });
        }
        let held = self.charge.as_ref().map_or(0, Charge::bytes);
        if total <= held {
            return Ok(());
        }
        let more = match budget.try_charge(total - held) {
            Some(more) => more,
            None => tokio::time::timeout_at(self.deadline, budget.charge(total - held))
                .await
                .map_err(|_| Refusal::Busy)?,
        };
        match &self.charge {
            Some(charge) => charge.absorb(more),
            None => self.charge = Some(more),
        }
        Ok(())
    }

    /// Holds exactly `bytes` from now on (what is held beyond them goes back at once), and
    /// hands the charge over.
    fn exactly(self, bytes: usize) -> Option<Charge> {
        let charge = self.charge?;
        charge.resize(bytes);
        Some(charge)
    }

    /// The most the share can ever hold: the budget's limit.
    fn limit(&self) -> usize {
        self.budget.as_ref().map_or(usize::MAX, |b| b.limit())
    }

    /// Holds exactly `bytes` from now on.
    fn set(&self, bytes: usize) {
        if let Some(charge) = &self.charge {
            charge.resize(bytes);
        }
    }
}

/// Reads the body as it arrives, each piece charged before it is kept, within `max_body_size`
/// (told by a chunk size that announces more as soon as it arrives, through `watch`) and
/// `request_timeout`.
async fn read_body(
    mut body: Incoming,
    declared: Option<usize>,
    watch: Option<&ChunkWatch>,
    ctx: &Ctx,
    share: &mut Share,
) -> Result<Bytes, Refusal> {
    let max = ctx.config.max_body_size;
    if let Some(len) = declared {
        share.hold(len).await?;
    }
    // Reserved at once for the same reason as the inflated body (see `inflate`).
    let mut out = Vec::with_capacity(declared.unwrap_or(max).min(max));
    let deadline = tokio::time::Instant::now() + ctx.config.request_timeout;
    let oversized = async {
        match watch {
            Some(ChunkWatch(flags, n)) => flags.oversized(*n).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(oversized);
    loop {
        let frame = tokio::select! {
            biased;
            () = &mut oversized => return Err(Refusal::TooLarge(max)),
            frame = tokio::time::timeout_at(deadline, body.frame()) => frame,
        };
        let frame = match frame {
            Err(_) => return Err(Refusal::Slow),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(Refusal::Read(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if out.len() + data.len() > max {
            return Err(Refusal::TooLarge(max));
        }
        share.hold(out.len() + data.len()).await?;
        out.extend_from_slice(&data);
    }
    Ok(Bytes::from(out))
}

/// Output inflated per step: each step is charged before it runs, and runs where blocking is
/// allowed.
const INFLATE_STEP: usize = 1 << 20;

/// Inflates `body` within `max_decompressed_size`, charging each step before it runs; the
/// compressed body is given back once it is inflated.
async fn inflate(
    encoding: Encoding,
    body: Bytes,
    ctx: &Ctx,
    share: &mut Share,
) -> Result<Bytes, Refusal> {
    let max = ctx.config.max_decompressed_size;
    let broken = |e: InflateError| match e {
        InflateError::TooLarge => Refusal::InflatesPast(max),
        InflateError::Broken(why) => Refusal::Broken(encoding, why),
    };
    let mut inflater = Inflater::new(encoding, max).map_err(broken)?;
    // Room for the most it may inflate to, reserved at once: only the pages written take
    // memory, while a vector doubling as it fills would copy itself and leave the old copies'
    // pages with the allocator (twice the memory at the peak, outside the charge).
    let mut out = Vec::with_capacity(max.min(share.limit()).saturating_add(INFLATE_STEP + 1));
    let mut input = &body[..];
    loop {
        share.hold(body.len() + out.len() + INFLATE_STEP).await?;
        let before = out.len();
        let used = crate::pipeline::cpu_heavy(|| inflater.inflate(input, &mut out, INFLATE_STEP))
            .map_err(broken)?;
        input = input.get(used..).unwrap_or_default();
        if used == 0 && out.len() == before {
            break;
        }
    }
    if !input.is_empty() {
        return Err(Refusal::Broken(
            encoding,
            "bytes after the end of the compressed data".to_owned(),
        ));
    }
    inflater.finish().map_err(broken)?;
    share.set(out.len());
    Ok(Bytes::from(out))
}
