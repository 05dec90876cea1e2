//! The `opentelemetry` source's requests: OTLP logs over HTTP (`POST /v1/logs`, binary
//! protobuf or JSON, gzip or zstd) and over gRPC (`LogsService/Export` on HTTP/2, h2c or
//! TLS), on the same listener and with the same limits, memory charges and acknowledgements as
//! `http_server`.
//!
//! ```text
//! request ─► path: /v1/logs (HTTP) | LogsService/Export (gRPC) | another signal (refused)
//!         ─► body (≤ max_body_size) ─► inflate (Content-Encoding, or grpc-encoding) ─► JSON?
//!         ─► decode within a charged bound (else measure, charge, decode) ─► fan-out ─► commit
//!         ─► 200 ExportLogsServiceResponse (partial_success for rejected records)
//!          | HTTP 4xx/5xx + google.rpc.Status | gRPC status in trailers (+ RetryInfo)
//! ```
//!
//! What is retryable follows the specification: a full pipeline or a sink that failed is 503
//! with `Retry-After` (gRPC UNAVAILABLE with a `RetryInfo`); bad data is 400 (INVALID_ARGUMENT);
//! too large is 413 (RESOURCE_EXHAUSTED without `RetryInfo`), never retried.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use loghaul_codec::http_body::Encoding;
use loghaul_codec::otlp::{self, Code, grpc, logs};

use super::{
    ChunkWatch, Ctx, Outcome, Refusal, Share, TlsSubject, Trailers, declared_length, deliver,
    inflate, read_body,
};
use crate::metrics::ErrorKind;

/// How a request is answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Protobuf,
    Json,
    Grpc,
}

/// A refusal: its HTTP status (OTLP/HTTP), gRPC code, error kind counted, text, and whether
/// the client should retry (`Retry-After`, `RetryInfo`).
struct Answer {
    http: StatusCode,
    code: Code,
    kind: ErrorKind,
    message: String,
    retry: bool,
}

impl Answer {
    fn new(http: StatusCode, code: Code, kind: ErrorKind, message: impl Into<String>) -> Answer {
        Answer {
            http,
            code,
            kind,
            message: message.into(),
            retry: false,
        }
    }

    fn bad(message: impl Into<String>) -> Answer {
        Answer::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidArgument,
            ErrorKind::Parse,
            message,
        )
    }

    fn busy(message: impl Into<String>, kind: ErrorKind) -> Answer {
        Answer {
            retry: true,
            ..Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Code::Unavailable,
                kind,
                message,
            )
        }
    }

    fn from_refusal(refusal: Refusal) -> Answer {
        let too_large = |kind, message: String| {
            Answer::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::ResourceExhausted,
                kind,
                message,
            )
        };
        match refusal {
            Refusal::TooLarge(max) => too_large(
                ErrorKind::Oversized,
                format!("the body is larger than max_body_size ({max} bytes)"),
            ),
            Refusal::InflatesPast(max) => too_large(
                ErrorKind::Decompression,
                format!("the body inflates past max_decompressed_size ({max} bytes)"),
            ),
            Refusal::TooManyEvents(max) => too_large(
                ErrorKind::Oversized,
                format!(
                    "the request holds more log records than max_events_per_request ({max}); send smaller requests"
                ),
            ),
            Refusal::Memory { needs, limit } => too_large(
                ErrorKind::MemoryLimit,
                format!(
                    "the request needs up to {needs} bytes of memory, more than limits.memory ({limit} bytes) holds; send smaller requests"
                ),
            ),
            Refusal::Broken(e, why) => Answer {
                kind: ErrorKind::Decompression,
                ..Answer::bad(format!("the {e} body does not decompress: {why}"))
            },
            Refusal::Busy => Answer::busy(
                "the memory budget (limits.memory) stayed spent; try again",
                ErrorKind::MemoryLimit,
            ),
            Refusal::Slow => Answer::new(
                StatusCode::REQUEST_TIMEOUT,
                Code::Unavailable,
                ErrorKind::Io,
                "the body did not arrive within request_timeout",
            ),
            Refusal::Read(why) => Answer {
                kind: ErrorKind::Protocol,
                ..Answer::bad(format!("the body could not be read: {why}"))
            },
        }
    }

    /// The response, counted.
    fn respond(self, ctx: &Ctx, mode: Mode) -> Response<Full<Bytes>> {
        ctx.metrics.error(self.kind, 1);
        crate::warn_limited!(ctx.metrics, status = self.http.as_u16(), error = %self.message, "Refused an OTLP request.");
        let retry_after = self.retry.then_some(1);
        if mode == Mode::Grpc {
            // Trailers-only: the status in the response's headers, no body.
            let mut resp = grpc_response(Bytes::new());
            let h = resp.headers_mut();
            h.insert("grpc-status", HeaderValue::from(u16::from(self.code as u8)));
            if let Ok(v) = HeaderValue::from_str(&percent_encode(&self.message)) {
                h.insert("grpc-message", v);
            }
            if let Some(seconds) = retry_after {
                let details = otlp::status(self.code, &self.message, Some(seconds), false);
                // Binary gRPC metadata (`-bin` headers) is base64 without padding.
                let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&details);
                if let Ok(v) = HeaderValue::from_str(&b64) {
                    h.insert("grpc-status-details-bin", v);
                }
            }
            return resp;
        }
        let json = mode == Mode::Json;
        let body = otlp::status(self.code, &self.message, None, json);
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = self.http;
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, content_type(mode));
        if let Some(seconds) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        resp
    }
}

fn content_type(mode: Mode) -> HeaderValue {
    HeaderValue::from_static(match mode {
        Mode::Protobuf => "application/x-protobuf",
        Mode::Json => "application/json",
        Mode::Grpc => "application/grpc",
    })
}

fn grpc_response(body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, content_type(Mode::Grpc));
    resp
}

/// gRPC's `grpc-message` encoding: printable ASCII but `%` as is, the rest percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn header_str(req: &hyper::http::request::Parts, name: impl header::AsHeaderName) -> Option<&str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// The memory a request's tables (events, entries) may take per byte of protobuf before its
/// decoding stops and measures it first: records as the SDKs and the Collector send them take
/// 2 to 4 (a resource's attributes are repeated in each of its records).
const TABLES_PER_BYTE: usize = 8;

/// Bodies from this size on are decoded off the worker (`cpu_heavy`); smaller ones, as
/// exporters send them (hundreds of records, tens of KB), take less than handing the worker's
/// other tasks to another thread would.
const INLINE_MAX: usize = 256 * 1024;

fn cpu<T>(len: usize, f: impl FnOnce() -> T) -> T {
    if len < INLINE_MAX {
        f()
    } else {
        crate::pipeline::cpu_heavy(f)
    }
}

/// Handles one request to the `opentelemetry` source (after `/health` and auth).
pub(super) async fn handle(
    req: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
    ctx: &Ctx,
) -> Response<Full<Bytes>> {
    let path = req.uri.path();
    let content = header_str(req, header::CONTENT_TYPE)
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let grpc = content.starts_with("application/grpc");
    let http_mode = if content == "application/json" {
        Mode::Json
    } else {
        Mode::Protobuf
    };
    if grpc {
        if path != grpc::LOGS_EXPORT {
            let why = if grpc::OTHER_EXPORTS.contains(&path) {
                format!("{path}: this server receives logs only, not this signal")
            } else {
                format!(
                    "{path}: no such method; OTLP logs go to {}",
                    grpc::LOGS_EXPORT
                )
            };
            return Answer::new(
                StatusCode::NOT_FOUND,
                Code::Unimplemented,
                ErrorKind::Protocol,
                why,
            )
            .respond(ctx, Mode::Grpc);
        }
        if content != "application/grpc" && content != "application/grpc+proto" {
            return Answer::bad(format!(
                "content type `{content}` is not accepted: OTLP/gRPC is application/grpc (protobuf)"
            ))
            .respond(ctx, Mode::Grpc);
        }
        return receive(req, body, ctx, Mode::Grpc).await;
    }
    if path != "/v1/logs" {
        let why = if matches!(
            path,
            "/v1/traces" | "/v1/metrics" | "/v1development/profiles"
        ) {
            format!("{path}: this server receives logs only (POST /v1/logs), not this signal")
        } else {
            format!("{path}: no such path; OTLP logs are sent with POST /v1/logs")
        };
        return Answer::new(
            StatusCode::NOT_FOUND,
            Code::Unimplemented,
            ErrorKind::Protocol,
            why,
        )
        .respond(ctx, http_mode);
    }
    if req.method != Method::POST {
        let mut resp = Answer::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Code::InvalidArgument,
            ErrorKind::Protocol,
            "logs are sent with POST",
        )
        .respond(ctx, http_mode);
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    }
    if content != "application/x-protobuf" && content != "application/json" {
        let shown = if content.is_empty() {
            "(none)".to_owned()
        } else {
            format!("`{content}`")
        };
        return Answer::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            ErrorKind::Protocol,
            format!(
                "content type {shown} is not accepted: OTLP/HTTP is application/x-protobuf or application/json"
            ),
        )
        .respond(ctx, http_mode);
    }
    receive(req, body, ctx, http_mode).await
}

/// The encoding named by `header` (`Content-Encoding`, `grpc-encoding`).
fn encoding(req: &hyper::http::request::Parts, header: &str) -> Result<Option<Encoding>, Answer> {
    let value = header_str(req, header).map(|v| v.trim().to_ascii_lowercase());
    match value.as_deref() {
        None | Some("identity" | "") => Ok(None),
        Some(e @ ("gzip" | "zstd")) => Ok(Encoding::from_name(e)),
        Some(other) => Err(Answer::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::Unimplemented,
            ErrorKind::Decompression,
            format!("{header} `{other}` is not accepted: gzip, zstd or identity"),
        )),
    }
}

async fn receive(
    req: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
    ctx: &Ctx,
    mode: Mode,
) -> Response<Full<Bytes>> {
    match take(req, body, ctx, mode).await {
        Ok((n, rejected)) => {
            let message = if rejected == 0 {
                String::new()
            } else {
                format!(
                    "{rejected} log record(s) nest deeper than {} levels and were not accepted",
                    logs::MAX_DEPTH
                )
            };
            if rejected != 0 {
                ctx.metrics.error(ErrorKind::Parse, rejected as u64);
                crate::warn_limited!(
                    ctx.metrics,
                    rejected,
                    accepted = n,
                    "Rejected OTLP log records nested too deep; the rest of the request was accepted."
                );
            }
            let answer = otlp::logs_response(rejected, &message, mode == Mode::Json);
            if mode == Mode::Grpc {
                let mut resp = grpc_response(Bytes::from(grpc::frame(&answer)));
                let mut trailers = hyper::HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                resp.extensions_mut().insert(Trailers(trailers));
                return resp;
            }
            let mut resp = Response::new(Full::new(Bytes::from(answer)));
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, content_type(mode));
            resp
        }
        Err(answer) => answer.respond(ctx, mode),
    }
}

/// Reads, decodes and delivers a request's log records: how many were accepted and how many
/// rejected.
async fn take(
    req: &hyper::http::request::Parts,
    body: &mut Option<Incoming>,
    ctx: &Ctx,
    mode: Mode,
) -> Result<(usize, usize), Answer> {
    let http_encoding = encoding(req, header::CONTENT_ENCODING.as_str())?;
    let grpc_encoding = if mode == Mode::Grpc {
        encoding(req, "grpc-encoding")?
    } else {
        None
    };
    let max = ctx.config.max_body_size;
    if declared_length(&req.headers).is_some_and(|len| len > max) {
        return Err(Answer::from_refusal(Refusal::TooLarge(max)));
    }
    let Some(incoming) = body.take() else {
        return Err(Answer::bad("the body was already read"));
    };
    let mut share = Share::new(
        ctx.fanout.budget().cloned(),
        tokio::time::Instant::now() + ctx.config.ack_timeout,
    );
    let watch = req.extensions.get::<ChunkWatch>();
    let raw = read_body(
        incoming,
        declared_length(&req.headers),
        watch,
        ctx,
        &mut share,
    )
    .await
    .map_err(Answer::from_refusal)?;
    let wire_bytes = raw.len();
    let mut message = match http_encoding {
        None => raw,
        Some(e) => inflate(e, raw, ctx, &mut share)
            .await
            .map_err(Answer::from_refusal)?,
    };
    if mode == Mode::Grpc {
        let (compressed, inner) = grpc::unframe(&message).map_err(Answer::bad)?;
        let inner = message.slice_ref(inner);
        message = match (compressed, grpc_encoding) {
            (false, _) => inner,
            (true, Some(e)) => inflate(e, inner, ctx, &mut share)
                .await
                .map_err(Answer::from_refusal)?,
            (true, None) => {
                return Err(Answer::bad(
                    "the gRPC message is flagged compressed but the request names no grpc-encoding",
                ));
            }
        };
    }
    if mode == Mode::Json {
        let json = message;
        let bound = cpu(json.len(), || otlp::json::memory_bound(&json));
        share
            .hold(json.len().saturating_add(bound))
            .await
            .map_err(Answer::from_refusal)?;
        let proto = cpu(json.len(), || otlp::json::logs_request(&json))
            .map_err(|e| Answer::bad(format!("the OTLP/JSON request does not decode: {e}")))?;
        message = Bytes::from(proto);
        share.set(message.len());
    }
    let bad = |e: otlp::wire::WireError| {
        Answer::bad(format!(
            "the request is no valid ExportLogsServiceRequest: {e}"
        ))
    };
    let max_events = ctx.config.max_events_per_request;
    // The request's bytes and the arena that starts as their copy, plus the tables: first a
    // bound that what exporters send stays under, so that one walk builds the batch; a
    // request that would take more is measured, charged exactly, and built.
    let tables = message.len().saturating_mul(TABLES_PER_BYTE);
    share
        .hold(message.len().saturating_mul(2).saturating_add(tables))
        .await
        .map_err(Answer::from_refusal)?;
    let quick = cpu(message.len(), || {
        logs::decode_within(&message, ctx.id.clone(), tables, max_events)
    })
    .map_err(bad)?;
    let decoded = match quick {
        Some(decoded) => decoded,
        None => {
            let measure = cpu(message.len(), || logs::measure(&message)).map_err(bad)?;
            if measure.records > max_events {
                return Err(Answer::from_refusal(Refusal::TooManyEvents(max_events)));
            }
            share
                .hold(
                    message
                        .len()
                        .saturating_mul(2)
                        .saturating_add(measure.bytes()),
                )
                .await
                .map_err(Answer::from_refusal)?;
            cpu(message.len(), || logs::decode(&message, ctx.id.clone())).map_err(bad)?
        }
    };
    drop(message);
    let mut batch = decoded.batch;
    if let Some(TlsSubject(subject)) = req.extensions.get::<TlsSubject>() {
        batch.add_field(crate::net::tls::TLS_SUBJECT, subject);
    }
    batch.charge = share
        .exactly(loghaul_core::budget::batch_bytes(&batch))
        .map(Arc::new);
    let n = batch.len();
    ctx.metrics.received(n, wire_bytes);
    if n == 0 {
        return Ok((0, decoded.rejected));
    }
    match deliver(ctx, batch).await {
        Outcome::Accepted(n) => Ok((n, decoded.rejected)),
        Outcome::Busy(why) => Err(Answer::busy(why, ErrorKind::Ack)),
        Outcome::Refused(why) => Err(Answer::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::Internal,
            ErrorKind::Ack,
            why,
        )),
    }
}
