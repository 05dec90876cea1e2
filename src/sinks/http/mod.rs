//! The `http` sink: events POSTed in batches (NDJSON, a JSON array or text; gzip or zstd) over
//! keep-alive connections, `concurrency` requests in flight, retried with backoff until the
//! server takes them; acknowledged only on a 2xx.
//!
//! ```text
//! input ─► encode into the request being filled ─(max_events | max_bytes | timeout)─► compress
//!       ─► bounded channel ─► N workers, one keep-alive connection each ─► POST
//!          2xx: commit Delivered   408, 429, 5xx, timeout, connection error: back off (Retry-After
//!          honoured) and send again   other 4xx: commit Rejected, counted, logged with the status
//! ```
//!
//! While the server refuses or is down, workers hold their requests, the channel and then the
//! input queue fill, and the sources feeding the sink push back: nothing is dropped for a
//! retryable failure. A batch spanning requests holds an acknowledgement in each.

pub mod config;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{self, HeaderValue};
use hyper_util::rt::TokioIo;
use loghaul_core::BatchStatus;
use loghaul_core::finalizer::Ack;
use tokio::sync::{Mutex, mpsc};

pub use config::HttpSinkConfig;
use config::{Compression, Encoding};

use super::{BuildSink, BuiltSink, SinkContext, SinkThread};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{Input, QUEUE_BATCHES};

/// One request's worth of events.
struct Request {
    body: Bytes,
    events: usize,
    acks: Vec<Ack>,
}

/// The request being filled.
#[derive(Default)]
struct Filling {
    buf: Vec<u8>,
    events: usize,
    acks: Vec<Ack>,
    since: Option<tokio::time::Instant>,
}

impl BuildSink for HttpSinkConfig {
    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        let config = Arc::new(self.clone());
        let metrics = cx.metrics;
        Ok(BuiltSink {
            prepare: None,
            queue_batches: QUEUE_BATCHES,
            thread: SinkThread::Shared,
            run: Box::new(move |input| Box::pin(run(config, metrics, input))),
        })
    }
}

async fn run(config: Arc<HttpSinkConfig>, metrics: Arc<ComponentMetrics>, mut input: Input) {
    metrics.set_health(Health::Running, None);
    if let Some(uri) = config.healthcheck_uri.clone() {
        // A warning only: the server may come up after loghaul, and requests are retried.
        let (config, metrics) = (config.clone(), metrics.clone());
        tokio::spawn(async move {
            if let Err(why) = healthcheck(&config, uri.clone()).await {
                tracing::warn!(component = %metrics.id, %uri, reason = %why, "The HTTP sink's health check failed; events are sent (and retried) anyway.");
            }
        });
    }
    let (tx, rx) = mpsc::channel::<Request>(config.concurrency);
    let rx = Arc::new(Mutex::new(rx));
    let workers: Vec<_> = (0..config.concurrency)
        .map(|_| tokio::spawn(worker(config.clone(), metrics.clone(), rx.clone())))
        .collect();
    let mut filling = Filling::default();
    loop {
        let deadline = filling.since.map(|t| t + config.timeout);
        tokio::select! {
            delivery = input.recv() => {
                let Some(delivery) = delivery else { break };
                let batch = delivery.batch.clone();
                let mut in_this_request = false;
                for event in &batch.events {
                    if !in_this_request {
                        // Each request holding some of this batch's events reports on it.
                        filling.acks.push(batch.finalizer.ack());
                        in_this_request = true;
                    }
                    if filling.events == 0 {
                        filling.since = Some(tokio::time::Instant::now());
                        if config.encoding == Encoding::JsonArray {
                            filling.buf.push(b'[');
                        }
                    } else if config.encoding == Encoding::JsonArray {
                        filling.buf.push(b',');
                    }
                    match config.encoding {
                        Encoding::Text => loghaul_codec::encode::encode_text(&batch, event, &mut filling.buf),
                        Encoding::Ndjson => loghaul_codec::encode::encode_json(&batch, event, &mut filling.buf),
                        Encoding::JsonArray => {
                            loghaul_codec::encode::encode_json(&batch, event, &mut filling.buf);
                            if filling.buf.last() == Some(&b'\n') {
                                filling.buf.pop();
                            }
                        }
                    }
                    filling.events += 1;
                    if filling.events >= config.max_events || filling.buf.len() >= config.max_bytes {
                        let full = std::mem::take(&mut filling);
                        send(&config, &tx, full).await;
                        in_this_request = false;
                    }
                }
                drop(batch);
                // The requests' own acks carry this batch's fate.
                delivery.ack.commit(BatchStatus::Delivered);
            }
            () = sleep_until(deadline) => {
                let full = std::mem::take(&mut filling);
                send(&config, &tx, full).await;
            }
        }
    }
    let last = std::mem::take(&mut filling);
    send(&config, &tx, last).await;
    drop(tx);
    for w in workers {
        let _ = w.await;
    }
    metrics.set_health(Health::Stopped, None);
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Finishes and compresses a request and hands it to the workers (waiting while they are all
/// busy: back-pressure).
async fn send(config: &HttpSinkConfig, tx: &mpsc::Sender<Request>, mut filling: Filling) {
    if filling.events == 0 {
        return;
    }
    if config.encoding == Encoding::JsonArray {
        filling.buf.push(b']');
    }
    let body = match config.compression {
        Compression::None => filling.buf,
        Compression::Gzip => crate::pipeline::cpu_heavy(|| {
            use std::io::Write as _;
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(filling.buf.len() / 4),
                flate2::Compression::fast(),
            );
            // Writing into a Vec cannot fail.
            let _ = e.write_all(&filling.buf);
            e.finish().unwrap_or_default()
        }),
        Compression::Zstd => {
            crate::pipeline::cpu_heavy(|| zstd::bulk::compress(&filling.buf, 3).unwrap_or_default())
        }
    };
    let request = Request {
        body: Bytes::from(body),
        events: filling.events,
        acks: filling.acks,
    };
    // A closed channel means every worker is gone: the acks drop uncommitted (Errored).
    let _ = tx.send(request).await;
}

enum Outcome {
    Done,
    /// Try again after the server's `Retry-After`, if it gave one.
    Retry(String, Option<Duration>),
    /// The server refused these events for good.
    Permanent(u16, String),
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn worker(
    config: Arc<HttpSinkConfig>,
    metrics: Arc<ComponentMetrics>,
    rx: Arc<Mutex<mpsc::Receiver<Request>>>,
) {
    let mut conn: Option<Sender> = None;
    loop {
        let request = {
            let mut rx = rx.lock().await;
            rx.recv().await
        };
        let Some(request) = request else { return };
        let mut backoff = config.retry_initial;
        loop {
            match attempt(&config, &mut conn, &request).await {
                Outcome::Done => {
                    metrics.sent(request.events, request.body.len());
                    if metrics.health().0 == Health::Degraded {
                        metrics.set_health(Health::Running, None);
                    }
                    for ack in request.acks {
                        ack.commit(BatchStatus::Delivered);
                    }
                    break;
                }
                Outcome::Permanent(status, excerpt) => {
                    metrics.discarded(DiscardReason::WriteFailed, request.events as u64);
                    metrics.error(ErrorKind::Ack, 1);
                    crate::warn_limited!(metrics, status, body = %excerpt, events = request.events, "The server refused events for good; they are reported rejected.");
                    for ack in request.acks {
                        ack.commit(BatchStatus::Rejected);
                    }
                    break;
                }
                Outcome::Retry(why, retry_after) => {
                    metrics.error(ErrorKind::Io, 1);
                    metrics.set_health(Health::Degraded, Some(why.clone()));
                    crate::warn_limited!(metrics, reason = %why, "Request not accepted; retrying with backoff.");
                    let wait = retry_after.unwrap_or_else(|| jitter(backoff));
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(config.retry_max);
                }
            }
        }
    }
}

/// `d` plus up to half of it again, so senders that failed together do not retry together.
fn jitter(d: Duration) -> Duration {
    let noise = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d + d.mul_f64(f64::from(noise % 1000) / 2000.0)
}

/// GET `uri` once; Ok on a 2xx.
async fn healthcheck(config: &HttpSinkConfig, uri: hyper::Uri) -> Result<(), String> {
    let authority = config::authority(&uri).ok_or("no host")?;
    let check = async {
        let mut sender = connect(&authority, config.request_timeout).await?;
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

/// A keep-alive HTTP/1.1 connection to `authority`, its driver spawned.
async fn connect(authority: &str, timeout: Duration) -> Result<Sender, String> {
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| format!("connecting to {authority} timed out"))?
        .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {authority} failed: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn attempt(config: &HttpSinkConfig, conn: &mut Option<Sender>, request: &Request) -> Outcome {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        match connect(&config.authority, config.request_timeout).await {
            Ok(c) => *conn = Some(c),
            Err(why) => return Outcome::Retry(why, None),
        }
    }
    let Some(sender) = conn.as_mut() else {
        return Outcome::Retry("no connection".into(), None);
    };
    if let Err(e) = sender.ready().await {
        *conn = None;
        return Outcome::Retry(format!("connection lost: {e}"), None);
    }
    let mut builder = hyper::Request::post(config.uri.clone())
        .header(header::HOST, config.authority.as_str())
        .header(
            header::CONTENT_TYPE,
            match config.encoding {
                Encoding::Ndjson => "application/x-ndjson",
                Encoding::JsonArray => "application/json",
                Encoding::Text => "text/plain",
            },
        );
    match config.compression {
        Compression::None => {}
        Compression::Gzip => builder = builder.header(header::CONTENT_ENCODING, "gzip"),
        Compression::Zstd => builder = builder.header(header::CONTENT_ENCODING, "zstd"),
    }
    for (k, v) in &config.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    if let Some(value) = &config.authorization {
        builder = builder.header(header::AUTHORIZATION, value.as_str());
    }
    let req = match builder.body(Full::new(request.body.clone())) {
        Ok(r) => r,
        Err(e) => return Outcome::Permanent(0, format!("the request cannot be built: {e}")),
    };
    let started = Instant::now();
    let response =
        match tokio::time::timeout(config.request_timeout, sender.send_request(req)).await {
            Err(_) => {
                *conn = None;
                return Outcome::Retry(
                    format!(
                        "no answer within request_timeout ({:?})",
                        config.request_timeout
                    ),
                    None,
                );
            }
            Ok(Err(e)) => {
                *conn = None;
                return Outcome::Retry(format!("request failed: {e}"), None);
            }
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
    let body = tokio::time::timeout(left, response.into_body().collect())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if status.is_success() {
        return Outcome::Done;
    }
    let code = status.as_u16();
    let excerpt = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if code == 408 || code == 429 || status.is_server_error() {
        return Outcome::Retry(
            format!("the server answered {code}: {excerpt}"),
            retry_after,
        );
    }
    Outcome::Permanent(code, excerpt)
}
