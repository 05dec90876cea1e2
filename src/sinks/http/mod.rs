//! The `http` sink: events POSTed in batches (NDJSON, a JSON array or text; gzip or zstd) over
//! keep-alive connections pooled per `HOST:PORT`, as many requests in flight as `concurrency`
//! allows (a fixed number, or `adaptive`: see [`concurrency`]), retried with backoff until the
//! server takes them; acknowledged only on a 2xx. The URI and header values may be templates over
//! the events' fields: each request then holds events of one rendered target (see
//! [`partition`]).
//!
//! ```text
//! input ─► partition (by rendered uri + headers, when templated) ─► encode into that target's
//!          request ─(max_events | max_bytes | timeout)─► compress ─► bounded channel
//!       ─► workers (one per slot) ─► wait for a slot of the limiter ─► POST on a pooled connection
//!          2xx: commit Delivered   408, 429, 5xx, timeout, connection error: back off (Retry-After
//!          honoured) and send again   other 4xx: commit Rejected, counted, logged with the status
//! ```
//!
//! While the server refuses or is down, workers hold their requests, the channel and then the
//! input queue fill, and the sources feeding the sink push back: nothing is dropped for a
//! retryable failure. A batch spanning requests holds an acknowledgement in each. Each worker
//! holds at most one request, so at most `concurrency` (or `max_concurrency`) requests are held
//! besides the channel's.

pub mod concurrency;
pub mod config;
mod grpc;
pub mod partition;
mod replay;
pub mod target;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderValue};
use hyper_util::rt::TokioIo;
use loghaul_core::BatchStatus;
use loghaul_core::budget::Charge;
use loghaul_core::finalizer::Ack;
use tokio::sync::mpsc;

use concurrency::{Limiter, Signal};
use config::Compression;
pub use config::HttpSinkConfig;
use partition::{Batcher, Ready};
use target::Target;

use super::{BuildSink, BuiltSink, Retry, SinkContext, SinkError, SinkThread};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::net::tls::{MaybeTls, TlsClient};
use crate::pipeline::dlq::DeadLetters;
use crate::pipeline::{Input, QUEUE_BATCHES};

/// Requests filled and waiting for a worker. Small: the workers hold the ones being sent, and
/// past this the input queue pushes back on the sources.
const CHANNEL_REQUESTS: usize = 4;

/// One request's worth of events.
struct Request {
    body: Bytes,
    events: usize,
    acks: Vec<Ack>,
    target: Arc<Target>,
    /// The body's bytes, held against the memory budget until the request is done with (sent,
    /// or dead-lettered): the batches it was made of are let go once encoded, and a request that
    /// is retried against a server that is down would otherwise hold memory nobody counts.
    _charge: Option<Charge>,
}

impl BuildSink for HttpSinkConfig {
    /// The server of a fixed `uri` accepts a TCP connection.
    fn check(&self) -> Vec<String> {
        let config::UriSpec::Static(uri) = &self.uri else {
            return Vec::new();
        };
        let Some(host) = uri.host() else {
            return Vec::new();
        };
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        match super::reachable(&format!("{host}:{port}")) {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!("uri `{uri}`: {e}")],
        }
    }

    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        let mut config = self.clone();
        config.retry = cx.retry.unwrap_or_default();
        let config = Arc::new(config);
        let tls = cx.tls_client(self.https, true)?;
        let dead = Arc::new(DeadLetters::new(&cx.id, &cx.data_dir, &cx.metrics));
        let metrics = cx.metrics;
        Ok(BuiltSink {
            prepare: None,
            queue_batches: QUEUE_BATCHES,
            thread: SinkThread::Shared,
            run: Box::new(move |input| Box::pin(run(config, tls, metrics, dead, input))),
        })
    }

    fn replay(
        &self,
        cx: SinkContext,
        letters: Vec<crate::pipeline::dlq::DeadLetter>,
    ) -> Option<crate::pipeline::BoxFuture<'static, crate::sinks::Replayed>> {
        let mut config = self.clone();
        config.retry = cx.retry.unwrap_or_default();
        let tls = match cx.tls_client(self.https, false) {
            Ok(tls) => tls,
            Err(error) => {
                let why = SinkError::permanent(format!("{error:#}"));
                return Some(Box::pin(async move {
                    crate::sinks::Replayed {
                        delivered: 0,
                        failed: letters.into_iter().map(|l| (l, why.clone())).collect(),
                    }
                }));
            }
        };
        Some(Box::pin(replay::replay(Arc::new(config), tls, letters)))
    }
}

async fn run(
    config: Arc<HttpSinkConfig>,
    tls: Option<Arc<TlsClient>>,
    metrics: Arc<ComponentMetrics>,
    dead: Arc<DeadLetters>,
    mut input: Input,
) {
    metrics.set_health(Health::Running, None);
    let slots = config.concurrency.slots();
    let pool = Arc::new(Pool::new(slots, tls));
    if let Some(uri) = config.healthcheck_uri.clone() {
        // A warning only: the server may come up after loghaul, and requests are retried.
        let (config, metrics, pool) = (config.clone(), metrics.clone(), pool.clone());
        tokio::spawn(async move {
            if let Err(why) = healthcheck(&config, &pool, uri.clone()).await {
                tracing::warn!(component = %metrics.id, %uri, reason = %why, "The HTTP sink's health check failed; events are sent (and retried) anyway.");
            }
        });
    }
    let mut batcher = match Batcher::new(config.clone(), metrics.clone()) {
        Ok(b) => b,
        Err(why) => {
            // Validation built the same target, so this is a bug, not a config error.
            tracing::error!(component = %metrics.id, reason = %why, "The HTTP sink cannot build its requests.");
            metrics.set_health(Health::Degraded, Some(why));
            return;
        }
    };
    let missing = config.is_templated().then(|| {
        metrics.counter(
            "loghaul_http_sink_template_missing_events_total",
            "Events sent with `-` for a template field (uri, headers) they do not have.",
            &[],
        )
    });
    let limiter = Arc::new(Limiter::new(config.concurrency, &metrics));
    let (tx, rx) = mpsc::channel::<Request>(CHANNEL_REQUESTS.min(slots));
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = crate::pipeline::TaskGroup::default();
    for task in (0..slots).map(|_| {
        let shared = Shared {
            config: config.clone(),
            metrics: metrics.clone(),
            limiter: limiter.clone(),
            pool: pool.clone(),
            dead: dead.clone(),
        };
        tokio::spawn(worker(shared, rx.clone()))
    }) {
        workers.push(task);
    }
    let mut ready: Vec<Ready> = Vec::new();
    // The budget the batches were charged to, reached through the first charged batch (a
    // disk buffer's batches are outside the budget, and so are their requests).
    let mut budget: Option<Charge> = None;
    loop {
        let deadline = batcher.next_deadline();
        tokio::select! {
            delivery = input.recv() => {
                let Some(delivery) = delivery else { break };
                let batch = delivery.batch.clone();
                if budget.is_none() {
                    budget = batch.charge.as_ref().map(|c| c.sibling());
                }
                batcher.begin(Some(&delivery.ack));
                for event in &batch.events {
                    batcher.add(&batch, event, &mut ready);
                    for full in ready.drain(..) {
                        send(&config, &tx, full, budget.as_ref()).await;
                    }
                }
                drop(batch);
                let stats = batcher.take_stats();
                if let Some(counter) = &missing {
                    counter.fetch_add(i64::try_from(stats.missing).unwrap_or(i64::MAX), Ordering::Relaxed);
                }
                if stats.invalid > 0 {
                    metrics.discarded(DiscardReason::Invalid, stats.invalid);
                }
                // The requests' own acks carry this batch's fate.
                delivery.ack.commit(BatchStatus::Delivered);
            }
            () = sleep_until(deadline) => {
                batcher.expire(tokio::time::Instant::now(), &mut ready);
                for full in ready.drain(..) {
                    send(&config, &tx, full, budget.as_ref()).await;
                }
            }
        }
    }
    batcher.flush(&mut ready);
    for full in ready.drain(..) {
        send(&config, &tx, full, budget.as_ref()).await;
    }
    drop(tx);
    workers.join().await;
    metrics.set_health(Health::Stopped, None);
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Finishes and compresses a request and hands it to the workers (waiting while they are all
/// busy: back-pressure), its body charged to `budget`'s budget.
async fn send(
    config: &HttpSinkConfig,
    tx: &mpsc::Sender<Request>,
    ready: Ready,
    budget: Option<&Charge>,
) {
    let Ready {
        mut filling,
        target,
    } = ready;
    if filling.events == 0 {
        return;
    }
    match config.encoding {
        config::Encoding::JsonArray => filling.buf.push(b']'),
        config::Encoding::Otlp | config::Encoding::OtlpGrpc => {
            filling.otlp.finish(&mut filling.buf);
        }
        config::Encoding::OtlpJson => {
            filling.otlp.finish(&mut filling.buf);
            match loghaul_codec::otlp::json::from_logs_request(&filling.buf) {
                Ok(json) => filling.buf = json,
                // The sink's own protobuf: never malformed. Were it, the receiver refuses it
                // and the events are dead-lettered with its answer.
                Err(e) => {
                    tracing::error!(reason = %e, "An OTLP request could not be written as JSON.")
                }
            }
        }
        _ => {}
    }
    let body = compress(config, filling.buf);
    let charge = budget.map(|b| {
        let charge = b.sibling();
        charge.grow(body.capacity());
        charge
    });
    let request = Request {
        body: Bytes::from(body),
        events: filling.events,
        acks: filling.acks,
        target,
        _charge: charge,
    };
    // A closed channel means every worker is gone: the acks drop uncommitted (Errored).
    let _ = tx.send(request).await;
}

/// A request body as the sink's `compression` says; for gRPC, the message framed, compressed
/// inside its frame.
fn compress(config: &HttpSinkConfig, buf: Vec<u8>) -> Vec<u8> {
    if config.encoding == config::Encoding::OtlpGrpc {
        return match config.compression {
            Compression::Gzip => {
                let packed = gzip(buf);
                let mut out = Vec::with_capacity(5 + packed.len());
                out.push(1);
                out.extend_from_slice(&(packed.len() as u32).to_be_bytes());
                out.extend_from_slice(&packed);
                out
            }
            // Validation allows only gzip or none with gRPC.
            _ => loghaul_codec::otlp::grpc::frame(&buf),
        };
    }
    match config.compression {
        Compression::None => buf,
        Compression::Gzip => gzip(buf),
        Compression::Zstd => {
            crate::pipeline::cpu_heavy(|| zstd::bulk::compress(&buf, 3).unwrap_or_default())
        }
    }
}

fn gzip(buf: Vec<u8>) -> Vec<u8> {
    crate::pipeline::cpu_heavy(|| {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(
            Vec::with_capacity(buf.len() / 4),
            flate2::Compression::fast(),
        );
        // Writing into a Vec cannot fail.
        let _ = e.write_all(&buf);
        e.finish().unwrap_or_default()
    })
}

/// What one attempt of a request came to: the round trip of a 2xx, or why not (retryable
/// with the server's `Retry-After`, if it gave one; permanent when the server refused the
/// events for good, caused by its [`Answer`]).
type Outcome = Result<Duration, SinkError>;

/// A status the server answered with, and the start of its body: the cause of a refusal.
#[derive(Debug)]
struct Answer {
    status: u16,
    excerpt: String,
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server answered {}: {}", self.status, self.excerpt)
    }
}

impl std::error::Error for Answer {}

/// What a non-2xx status means: 408, 429 and 5xx may pass (the server is busy or restarting),
/// any other status refuses these events for good. OTLP names its own list: 429, 502, 503 and
/// 504 are retried, and every other status must not be.
fn judge_status(encoding: config::Encoding, status: u16) -> Retry {
    if encoding.is_otlp() {
        return if matches!(status, 429 | 502 | 503 | 504) {
            Retry::Retryable
        } else {
            Retry::Permanent
        };
    }
    if status == 408 || status == 429 || (500..600).contains(&status) {
        Retry::Retryable
    } else {
        Retry::Permanent
    }
}

/// The wait before the next attempt: the server's `Retry-After` when it gave one, else the
/// backoff with jitter.
fn next_wait(error: &SinkError, backoff: Duration) -> Duration {
    error.retry_after().unwrap_or_else(|| jitter(backoff))
}

/// The backoff after `backoff`: doubled, up to `max`.
fn next_backoff(backoff: Duration, max: Duration) -> Duration {
    (backoff * 2).min(max)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// What every worker shares.
struct Shared {
    config: Arc<HttpSinkConfig>,
    metrics: Arc<ComponentMetrics>,
    limiter: Arc<Limiter>,
    pool: Arc<Pool>,
    dead: Arc<DeadLetters>,
}

async fn worker(shared: Shared, rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Request>>>) {
    let Shared {
        config,
        metrics,
        limiter,
        pool,
        dead,
    } = shared;
    loop {
        let request = {
            let mut rx = rx.lock().await;
            rx.recv().await
        };
        let Some(request) = request else { return };
        let mut backoff = config.retry.initial;
        let mut attempts: u32 = 0;
        loop {
            // A slot per attempt, not per request: a request backing off leaves its slot to
            // others, and a lowered limit applies to retries at once.
            let permit = limiter.acquire().await;
            let outcome = attempt(&config, &pool, &request).await;
            permit.finish(match &outcome {
                Ok(rtt) => Signal::Success(*rtt),
                Err(e) if e.is_retryable() => Signal::BackPressure,
                Err(_) => Signal::Neutral,
            });
            match outcome {
                Ok(_) => {
                    metrics.sent(request.events, request.body.len());
                    if metrics.health().0 == Health::Degraded {
                        metrics.set_health(Health::Running, None);
                    }
                    for ack in request.acks {
                        ack.commit(BatchStatus::Delivered);
                    }
                    break;
                }
                Err(error) if error.is_permanent() => {
                    metrics.error(ErrorKind::Ack, 1);
                    let (status, excerpt) = error
                        .cause::<Answer>()
                        .map_or((0, ""), |a| (a.status, a.excerpt.as_str()));
                    crate::warn_limited!(metrics, status, uri = %request.target.uri, body = %excerpt, events = request.events, "The server refused events for good; they go to the dead-letter file.");
                    dead_letter(&config, &metrics, &dead, request, &error, attempts + 1);
                    break;
                }
                Err(error) if config.retry.exhausted(attempts + 1) => {
                    metrics.error(ErrorKind::Io, 1);
                    crate::warn_limited!(metrics, reason = %error, attempts = attempts + 1, "Retries exhausted; the events go to the dead-letter file.");
                    let error = error.exhausted(format_args!(" (after {} attempts)", attempts + 1));
                    dead_letter(&config, &metrics, &dead, request, &error, attempts + 1);
                    break;
                }
                Err(error) => {
                    attempts += 1;
                    metrics.error(ErrorKind::Io, 1);
                    metrics.set_health(Health::Degraded, Some(error.to_string()));
                    crate::warn_limited!(metrics, reason = %error, "Request not accepted; retrying with backoff.");
                    tokio::time::sleep(next_wait(&error, backoff)).await;
                    backoff = next_backoff(backoff, config.retry.max);
                }
            }
        }
    }
}

/// Writes a request's events to the dead-letter file and reports them rejected; if even that
/// fails, they are lost to this sink and reported errored.
fn dead_letter(
    config: &HttpSinkConfig,
    metrics: &ComponentMetrics,
    dead: &DeadLetters,
    request: Request,
    error: &SinkError,
    attempts: u32,
) {
    let written = match events_of_body(config, &request.body) {
        Ok(events) => dead
            .write(
                events.iter().map(|e| &e[..]),
                error,
                attempts,
                Some(&request.target.key)
                    .filter(|k| !k.is_empty())
                    .map(String::as_str),
            )
            .map_err(|e| format!("cannot write {}: {e}", dead.path().display())),
        Err(e) => Err(e),
    };
    let status = match written {
        Ok(_) => BatchStatus::Rejected,
        Err(why) => {
            metrics.discarded(DiscardReason::WriteFailed, request.events as u64);
            crate::warn_limited!(metrics, reason = %why, events = request.events, "Events could not be dead-lettered; they are lost to this sink.");
            BatchStatus::Errored
        }
    };
    for ack in request.acks {
        ack.commit(status);
    }
}

/// A request body back into its events' encodings (decompressed; one per line, or per array
/// item): the rare path of dead letters, so it may parse.
fn events_of_body(config: &HttpSinkConfig, body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use std::io::Read as _;
    if config.encoding == config::Encoding::OtlpGrpc {
        let (compressed, message) = loghaul_codec::otlp::grpc::unframe(body)?;
        let mut plain = Vec::new();
        if compressed {
            flate2::read::GzDecoder::new(message)
                .read_to_end(&mut plain)
                .map_err(|e| format!("cannot inflate the message: {e}"))?;
        } else {
            plain = message.to_vec();
        }
        return otlp_events(&plain);
    }
    let plain = match config.compression {
        Compression::None => body.to_vec(),
        Compression::Gzip => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .map_err(|e| format!("cannot inflate the request: {e}"))?;
            out
        }
        Compression::Zstd => {
            zstd::decode_all(body).map_err(|e| format!("cannot decompress the request: {e}"))?
        }
    };
    Ok(match config.encoding {
        config::Encoding::OtlpJson => otlp_events(
            &loghaul_codec::otlp::json::logs_request(&plain)
                .map_err(|e| format!("the request does not decode: {e}"))?,
        )?,
        config::Encoding::Otlp | config::Encoding::OtlpGrpc => otlp_events(&plain)?,
        config::Encoding::Ndjson | config::Encoding::Text => plain
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        config::Encoding::JsonArray => {
            serde_json::from_slice::<Vec<Box<serde_json::value::RawValue>>>(&plain)
                .map_err(|e| format!("the request is not a JSON array: {e}"))?
                .into_iter()
                .map(|v| v.get().as_bytes().to_vec())
                .collect()
        }
    })
}

/// An OTLP request's records back as their events' JSON lines.
fn otlp_events(proto: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use loghaul_codec::otlp::logs;
    let body = Bytes::copy_from_slice(proto);
    logs::measure(&body).map_err(|e| format!("the request does not decode: {e}"))?;
    let batch = logs::decode(&body, "dead-letter".into())
        .map_err(|e| format!("the request does not decode: {e}"))?
        .batch;
    Ok(batch
        .events
        .iter()
        .map(|e| {
            let mut line = Vec::new();
            loghaul_codec::encode::encode_json(&batch, e, &mut line);
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            line
        })
        .collect())
}

/// `d` plus up to half of it again, so senders that failed together do not retry together.
fn jitter(d: Duration) -> Duration {
    let noise = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(noise % 1000) / 2000.0)
}

/// The most authorities whose idle connections are kept: a templated host of high cardinality
/// reconnects rather than holding a socket per host.
const POOL_AUTHORITIES: usize = 64;

/// Idle keep-alive connections by `HOST:PORT`: a worker takes one for an attempt and puts it
/// back once the answer was read whole, so connections are reused across workers and a
/// templated URI's hosts each get their own.
struct Pool {
    idle: Mutex<HashMap<String, Vec<Sender>>>,
    /// HTTP/2 connections, for OTLP/gRPC.
    h2: grpc::Connections,
    /// Idle connections kept per authority: no more than could be in flight at once.
    per_authority: usize,
    /// TLS for new connections (an https:// URI).
    tls: Option<Arc<TlsClient>>,
}

impl Pool {
    fn new(per_authority: usize, tls: Option<Arc<TlsClient>>) -> Pool {
        Pool {
            idle: Mutex::new(HashMap::new()),
            h2: grpc::Connections::default(),
            per_authority,
            tls,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Sender>>> {
        // Only whole pushes and pops happen under the lock: a poisoned map is still sound.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection to `authority` that the server has not closed, if any.
    fn take(&self, authority: &str) -> Option<Sender> {
        let mut idle = self.idle();
        let list = idle.get_mut(authority)?;
        while let Some(sender) = list.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, authority: &str, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle();
        if let Some(list) = idle.get_mut(authority) {
            if list.len() < self.per_authority {
                list.push(sender);
            }
            return;
        }
        if idle.len() >= POOL_AUTHORITIES {
            idle.retain(|_, list| {
                list.retain(|s| !s.is_closed());
                !list.is_empty()
            });
            if idle.len() >= POOL_AUTHORITIES {
                // Full of live connections to other hosts: this one is simply not kept.
                return;
            }
        }
        idle.insert(authority.to_owned(), vec![sender]);
    }
}

/// GET `uri` once; Ok on a 2xx.
async fn healthcheck(config: &HttpSinkConfig, pool: &Pool, uri: hyper::Uri) -> Result<(), String> {
    let authority = config::authority(&uri).ok_or("no host")?;
    let check = async {
        let mut sender = connect(&authority, pool.tls.as_deref(), config.request_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let mut req = hyper::Request::get(uri.clone()).header(header::HOST, authority.as_str());
        if let Some(value) = &config.authorization {
            req = req.header(header::AUTHORIZATION, value.as_str());
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("answered {}", resp.status()))
        }
    };
    tokio::time::timeout(config.request_timeout, check)
        .await
        .map_err(|_| "no answer in time".to_owned())?
}

/// A keep-alive HTTP/1.1 connection to `authority` (over TLS when `tls` is given), its driver
/// spawned.
///
/// # Errors
///
/// The connection or a handshake failed or timed out: retryable (the server may come up).
async fn connect(
    authority: &str,
    tls: Option<&TlsClient>,
    timeout: Duration,
) -> Result<Sender, SinkError> {
    let stream = open_stream(authority, tls, &[], timeout).await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| {
            SinkError::retryable(format!("HTTP handshake with {authority} failed")).with_cause(e)
        })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// A TCP connection to `authority` (TLS over it when `tls` is given), within `timeout`.
///
/// # Errors
///
/// The connection or the TLS handshake failed or timed out: retryable.
async fn open_stream(
    authority: &str,
    tls: Option<&TlsClient>,
    alpn: &[&[u8]],
    timeout: Duration,
) -> Result<MaybeTls<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>, SinkError> {
    let open = async {
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| {
                SinkError::retryable(format!("cannot connect to {authority}")).with_cause(e)
            })?;
        let _ = stream.set_nodelay(true);
        match tls {
            None => Ok(MaybeTls::Plain(stream)),
            Some(tls) => tls
                .connect_alpn(stream, crate::net::tls::host_of(authority), alpn)
                .await
                .map_err(|e| {
                    SinkError::retryable(format!("TLS handshake with {authority} failed"))
                        .with_cause(e)
                }),
        }
    };
    tokio::time::timeout(timeout, open)
        .await
        .map_err(|_| SinkError::retryable(format!("connecting to {authority} timed out")))?
}

/// A connection to `authority` ready for a request: a pooled one, or a new one when there is
/// none or the pooled one turns out to be gone (the server closed it while it was idle, which
/// is no sign of load and so no reason to retry or to lower the limit).
async fn ready_connection(
    config: &HttpSinkConfig,
    pool: &Pool,
    authority: &str,
) -> Result<Sender, SinkError> {
    if let Some(mut sender) = pool.take(authority)
        && sender.ready().await.is_ok()
    {
        return Ok(sender);
    }
    let mut sender = connect(authority, pool.tls.as_deref(), config.request_timeout).await?;
    sender
        .ready()
        .await
        .map_err(|e| SinkError::retryable("connection lost").with_cause(e))?;
    Ok(sender)
}

async fn attempt(config: &HttpSinkConfig, pool: &Pool, request: &Request) -> Outcome {
    if config.encoding == config::Encoding::OtlpGrpc {
        return grpc::attempt(config, &pool.h2, pool.tls.as_deref(), request).await;
    }
    let target = &request.target;
    let mut sender = ready_connection(config, pool, &target.authority).await?;
    let mut req = hyper::Request::new(Full::new(request.body.clone()));
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = target.uri.clone();
    *req.headers_mut() = target.headers.clone();
    let started = Instant::now();
    // A connection whose request failed or timed out is dropped, never pooled: its state is
    // unknown.
    let response =
        match tokio::time::timeout(config.request_timeout, sender.send_request(req)).await {
            Err(_) => {
                return Err(SinkError::retryable(format!(
                    "no answer within request_timeout ({:?})",
                    config.request_timeout
                )));
            }
            Ok(Err(e)) => return Err(SinkError::retryable("request failed").with_cause(e)),
            Ok(Ok(r)) => r,
        };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(300)));
    // The body is read whole (bounded by the deadline) so the connection can be used again.
    let left = config.request_timeout.saturating_sub(started.elapsed());
    let body = match tokio::time::timeout(left, response.into_body().collect()).await {
        Ok(Ok(b)) => {
            pool.put(&target.authority, sender);
            b.to_bytes()
        }
        _ => Bytes::new(),
    };
    let rtt = started.elapsed();
    if status.is_success() {
        if config.encoding.is_otlp()
            && let Some((rejected, why)) = otlp_partial_success(config.encoding, &body)
        {
            // Taken, with some records refused for good: OTLP forbids sending them again, and
            // the answer does not say which. Said, not retried.
            tracing::warn!(uri = %target.uri, rejected, reason = %why, "The OTLP server took a request but rejected some of its log records.");
        }
        return Ok(rtt);
    }
    Err(refusal(
        config.encoding,
        status.as_u16(),
        &body,
        retry_after,
    ))
}

/// An OTLP answer's `partial_success`: how many records the server rejected, and why.
fn otlp_partial_success(encoding: config::Encoding, body: &[u8]) -> Option<(u64, String)> {
    if encoding == config::Encoding::Otlp {
        return loghaul_codec::otlp::partial_success(body);
    }
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let p = v.get("partialSuccess")?;
    let rejected = match p.get("rejectedLogRecords")? {
        serde_json::Value::String(s) => s.parse().ok()?,
        n => n.as_u64()?,
    };
    let why = p
        .get("errorMessage")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    (rejected != 0).then_some((rejected, why))
}

/// The error of a non-2xx answer: its status and the start of its body (an OTLP server's
/// `Status` message), retryable or not as [`judge_status`] says, with the server's
/// `Retry-After`.
fn refusal(
    encoding: config::Encoding,
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
) -> SinkError {
    let excerpt = match encoding {
        config::Encoding::Otlp => loghaul_codec::otlp::status_message(body),
        config::Encoding::OtlpJson => serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_owned)),
        _ => None,
    }
    .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    SinkError::from_cause(judge_status(encoding, status), Answer { status, excerpt })
        .with_retry_after(retry_after)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use http_body_util::BodyExt as _;
    use hyper::body::Incoming;
    use loghaul_config::ConfigFormat;
    use loghaul_core::{BatchNotifier, BatchStatusReceiver, Event, EventBatch, Span};

    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use crate::pipeline::{Fanout, input_queue};
    use crate::sinks::SinkConfig;

    type TestResult = anyhow::Result<()>;

    fn config(options: &str) -> anyhow::Result<HttpSinkConfig> {
        let text = format!(
            "sources:\n  in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:5514\" }}\nsinks:\n  up: {{ type: http, inputs: [in], {options} }}\n"
        );
        let config =
            crate::config::Config::from_str_with_vars(&text, ConfigFormat::Yaml, "t.yaml", &|_| {
                None
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        match config.sink("up").map(|s| &s.config) {
            Some(SinkConfig::Http(c)) => Ok(c.clone()),
            _ => anyhow::bail!("not an http sink"),
        }
    }

    #[test]
    fn busy_and_failing_servers_are_retried_and_other_refusals_are_permanent() {
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert_eq!(
                judge_status(config::Encoding::Ndjson, status),
                Retry::Retryable,
                "{status}"
            );
        }
        for status in [300, 400, 401, 403, 404, 413, 422] {
            assert_eq!(
                judge_status(config::Encoding::Ndjson, status),
                Retry::Permanent,
                "{status}"
            );
        }
    }

    #[test]
    fn otlp_retries_only_what_its_specification_lists() {
        for status in [429, 502, 503, 504] {
            assert_eq!(
                judge_status(config::Encoding::Otlp, status),
                Retry::Retryable,
                "{status}"
            );
        }
        for status in [400, 404, 408, 413, 500, 501, 505] {
            assert_eq!(
                judge_status(config::Encoding::Otlp, status),
                Retry::Permanent,
                "{status}"
            );
        }
        // An OTLP failure's body is a google.rpc.Status: its message is the reason shown.
        let status = loghaul_codec::otlp::status(
            loghaul_codec::otlp::Code::InvalidArgument,
            "bad field",
            None,
            false,
        );
        let e = refusal(config::Encoding::Otlp, 400, &status, None);
        assert!(e.is_permanent());
        assert!(e.to_string().contains("bad field"), "{e}");
    }

    #[test]
    fn a_refusal_says_the_status_and_the_start_of_the_body() {
        let body = "x".repeat(500);
        let e = refusal(
            config::Encoding::Ndjson,
            503,
            body.as_bytes(),
            Some(Duration::from_secs(7)),
        );
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(
            e.to_string(),
            format!("the server answered 503: {}", &body[..200])
        );
        let e = refusal(config::Encoding::Ndjson, 400, b"bad field", None);
        assert!(e.is_permanent());
        assert_eq!(e.to_string(), "the server answered 400: bad field");
        let answer = e.cause::<Answer>().map(|a| (a.status, a.excerpt.clone()));
        assert_eq!(answer, Some((400, "bad field".to_owned())));
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap_with_at_most_half_again_of_jitter() {
        let max = Duration::from_secs(1);
        let mut backoff = Duration::from_millis(100);
        let mut schedule = Vec::new();
        for _ in 0..6 {
            schedule.push(backoff.as_millis());
            backoff = next_backoff(backoff, max);
        }
        assert_eq!(schedule, [100, 200, 400, 800, 1000, 1000]);
        for _ in 0..100 {
            let d = Duration::from_millis(100);
            let j = jitter(d);
            assert!(j >= d && j <= d + d / 2, "{j:?}");
        }
        // The server's Retry-After wins over the backoff.
        let asked = SinkError::retryable("busy").with_retry_after(Some(Duration::from_secs(9)));
        assert_eq!(next_wait(&asked, max), Duration::from_secs(9));
        let w = next_wait(&SinkError::retryable("busy"), max);
        assert!(w >= max && w <= max + max / 2);
    }

    #[test]
    fn a_request_body_comes_back_as_its_events_whatever_the_encoding() -> TestResult {
        for (options, body) in [
            ("encoding: ndjson", &b"{\"a\":1}\n{\"a\":2}\n"[..]),
            ("encoding: json_array", &b"[{\"a\":1},{\"a\":2}]"[..]),
            ("encoding: text", &b"one\ntwo\n"[..]),
        ] {
            for compression in ["none", "gzip", "zstd"] {
                let config = config(&format!(
                    "uri: \"http://h:1/x\", {options}, compression: {compression}"
                ))?;
                let events = events_of_body(&config, &compress(&config, body.to_vec()))
                    .map_err(|e| anyhow::anyhow!(e))?;
                assert_eq!(events.len(), 2, "{options} {compression}");
                assert!(
                    events[0] == b"{\"a\":1}" || events[0] == b"one",
                    "{options} {compression}: {:?}",
                    String::from_utf8_lossy(&events[0])
                );
            }
        }
        Ok(())
    }

    /// A server on 127.0.0.1:0 that answers each request with the next status of `script`
    /// (the last one for ever after), with `Retry-After` when given, and says when each request
    /// came, in virtual time.
    struct Scripted {
        port: u16,
        requests: Arc<Mutex<Vec<tokio::time::Instant>>>,
    }

    async fn scripted(script: Vec<(u16, Option<u64>, &'static str)>) -> anyhow::Result<Scripted> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let script = Arc::new(script);
        let next = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, script, next) = (seen.clone(), script.clone(), next.clone());
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let (seen, script, next) = (seen.clone(), script.clone(), next.clone());
                    async move {
                        let _ = req.into_body().collect().await;
                        if let Ok(mut seen) = seen.lock() {
                            seen.push(tokio::time::Instant::now());
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let (status, retry_after, body) = script[i.min(script.len() - 1)];
                        let mut resp = hyper::Response::builder().status(status);
                        if let Some(s) = retry_after {
                            resp = resp.header(header::RETRY_AFTER, s.to_string());
                        }
                        resp.body(Full::new(Bytes::from_static(body.as_bytes())))
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Scripted { port, requests })
    }

    impl Scripted {
        fn times(&self) -> Vec<tokio::time::Instant> {
            self.requests.lock().map(|r| r.clone()).unwrap_or_default()
        }
    }

    fn batch(messages: &[&'static str]) -> (EventBatch, BatchStatusReceiver) {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let text: &'static str = messages.concat().leak();
        let mut b = EventBatch::new(Bytes::from_static(text.as_bytes()), "src".into(), "test");
        let mut at = 0;
        for m in messages {
            b.events.push(Event {
                message: Span::new(at, at + m.len()).into(),
                ..Event::default()
            });
            at += m.len();
        }
        b.finalizer = finalizer;
        (b, status)
    }

    struct Sink {
        fanout: Fanout,
        metrics: Arc<ComponentMetrics>,
        task: tokio::task::JoinHandle<()>,
        dead: std::path::PathBuf,
        _dir: tempfile::TempDir,
    }

    /// The sink's run loop on `config`, fed by a fan-out.
    fn sink(config: HttpSinkConfig) -> anyhow::Result<Sink> {
        let dir = tempfile::tempdir()?;
        let reg = Registry::default();
        let metrics = reg.register("up", ComponentKind::Sink, "http");
        let dead = Arc::new(DeadLetters::new("up", dir.path(), &metrics));
        let path = dead.path().to_path_buf();
        let (tx, input) = input_queue(metrics.clone(), None, QUEUE_BATCHES);
        let fanout = Fanout::new(vec![tx], reg.register("src", ComponentKind::Source, "test"));
        let task = tokio::spawn(run(Arc::new(config), None, metrics.clone(), dead, input));
        Ok(Sink {
            fanout,
            metrics,
            task,
            dead: path,
            _dir: dir,
        })
    }

    fn http_config(port: u16, options: &str) -> anyhow::Result<HttpSinkConfig> {
        let mut config = config(&format!(
            "uri: \"http://127.0.0.1:{port}/x\", encoding: text, timeout: 10ms{options}"
        ))?;
        config.retry = loghaul_config::RetryConfig::default();
        Ok(config)
    }

    fn dead_letters(sink: &Sink) -> anyhow::Result<Vec<crate::pipeline::dlq::DeadLetter>> {
        let text = std::fs::read_to_string(&sink.dead)?;
        text.lines()
            .map(|l| crate::pipeline::dlq::parse_line(l).map_err(|e| anyhow::anyhow!(e)))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_server_is_retried_with_backoff_until_it_takes_the_events() -> TestResult {
        let server = scripted(vec![
            (503, None, "busy"),
            (503, None, "busy"),
            (200, None, ""),
        ])
        .await?;
        let sink = sink(http_config(server.port, "")?)?;
        let (b, status) = batch(&["a", "b"]);
        sink.fanout.send(b).await;
        assert_eq!(status.await, BatchStatus::Delivered);
        let times = server.times();
        assert_eq!(times.len(), 3);
        // Waits of 100 ms then 200 ms, each with up to half again of jitter.
        let first = times[1] - times[0];
        let second = times[2] - times[1];
        assert!(
            first >= Duration::from_millis(100) && first <= Duration::from_millis(151),
            "{first:?}"
        );
        assert!(
            second >= Duration::from_millis(200) && second <= Duration::from_millis(301),
            "{second:?}"
        );
        assert_eq!(sink.metrics.errors(ErrorKind::Io), 2);
        assert_eq!(sink.metrics.sent_events.load(Ordering::Relaxed), 2);
        assert_eq!(sink.metrics.health().0, Health::Running, "healthy again");
        assert!(!sink.dead.exists(), "nothing dead-lettered");
        drop(sink.fanout);
        sink.task.await?;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_sets_the_wait_instead_of_the_backoff() -> TestResult {
        let server = scripted(vec![(429, Some(7), "slow down"), (200, None, "")]).await?;
        let sink = sink(http_config(server.port, "")?)?;
        let (b, status) = batch(&["a"]);
        sink.fanout.send(b).await;
        assert_eq!(status.await, BatchStatus::Delivered);
        let times = server.times();
        assert_eq!(times.len(), 2);
        let waited = times[1] - times[0];
        assert!(
            waited >= Duration::from_secs(7) && waited < Duration::from_millis(7050),
            "{waited:?}"
        );
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_dead_lettered_at_once_with_the_answer() -> TestResult {
        let server = scripted(vec![(400, None, "bad field"), (200, None, "")]).await?;
        let sink = sink(http_config(server.port, "")?)?;
        let (b, status) = batch(&["one", "two"]);
        sink.fanout.send(b).await;
        assert_eq!(status.await, BatchStatus::Rejected);
        assert_eq!(server.times().len(), 1, "never retried");
        assert_eq!(sink.metrics.errors(ErrorKind::Ack), 1);
        let letters = dead_letters(&sink)?;
        let events: Vec<&str> = letters.iter().map(|l| l.event.as_str()).collect();
        assert_eq!(events, ["\"one\"", "\"two\""]);
        assert!(
            letters
                .iter()
                .all(|l| l.reason == "the server answered 400: bad field")
        );
        assert!(letters.iter().all(|l| l.attempts == 1));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn exhausted_retries_dead_letter_the_events_with_the_last_reason() -> TestResult {
        let server = scripted(vec![(503, None, "busy")]).await?;
        let mut config = http_config(server.port, "")?;
        config.retry.max_attempts = Some(3);
        let sink = sink(config)?;
        let (b, status) = batch(&["one"]);
        sink.fanout.send(b).await;
        assert_eq!(status.await, BatchStatus::Rejected);
        assert_eq!(server.times().len(), 3);
        let letters = dead_letters(&sink)?;
        assert_eq!(letters.len(), 1);
        assert_eq!(
            letters[0].reason,
            "the server answered 503: busy (after 3 attempts)"
        );
        assert_eq!(letters[0].attempts, 3);
        assert_eq!(sink.metrics.errors(ErrorKind::Io), 3);
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_partly_filled_request_goes_out_after_timeout() -> TestResult {
        let server = scripted(vec![(200, None, "")]).await?;
        let sink = sink(http_config(server.port, ", max_events: 100")?)?;
        let sent = tokio::time::Instant::now();
        let (b, status) = batch(&["a"]);
        sink.fanout.send(b).await;
        assert_eq!(status.await, BatchStatus::Delivered);
        let times = server.times();
        assert_eq!(times.len(), 1);
        let waited = times[0] - sent;
        assert!(
            waited >= Duration::from_millis(10) && waited < Duration::from_millis(20),
            "{waited:?}"
        );
        Ok(())
    }
}
