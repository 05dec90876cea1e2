//! OTLP/gRPC requests of the `opentelemetry` sink (`protocol: grpc`): one HTTP/2 connection per
//! `HOST:PORT` (cleartext, or TLS agreeing on `h2`), shared by every worker (HTTP/2 multiplexes their calls), and the call's status
//! read from the response's trailers (or its headers, for a trailers-only answer).
//!
//! What is retried is what OTLP says for gRPC: CANCELLED, DEADLINE_EXCEEDED, ABORTED,
//! OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS, and RESOURCE_EXHAUSTED when the server sent a
//! `RetryInfo` (it is throttling, not refusing); every other status is permanent.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::config::HttpSinkConfig;
use super::{Answer, Outcome, Request};
use crate::net::tls::TlsClient;
use crate::sinks::{Retry, SinkError};

type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// The HTTP/2 connections, by `HOST:PORT`.
#[derive(Default)]
pub(super) struct Connections(Mutex<HashMap<String, H2>>);

impl Connections {
    /// A live connection to `authority`: the shared one, or a new one.
    async fn get(
        &self,
        authority: &str,
        tls: Option<&TlsClient>,
        timeout: Duration,
    ) -> Result<H2, SinkError> {
        let shared = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(authority)
            .filter(|c| !c.is_closed())
            .cloned();
        if let Some(mut c) = shared
            && c.ready().await.is_ok()
        {
            return Ok(c);
        }
        // Cleartext HTTP/2 by prior knowledge, or TLS agreeing on `h2` by ALPN (gRPC servers
        // refuse a TLS connection without it).
        let stream = super::open_stream(authority, tls, &[b"h2"], timeout).await?;
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| {
                SinkError::retryable(format!("HTTP/2 handshake with {authority} failed"))
                    .with_cause(e)
            })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(authority.to_owned(), sender.clone());
        Ok(sender)
    }
}

/// gRPC status codes OTLP says to retry.
fn judge(code: u32, retry_info: bool) -> Retry {
    match code {
        1 | 4 | 10 | 11 | 14 | 15 => Retry::Retryable,
        8 if retry_info => Retry::Retryable,
        _ => Retry::Permanent,
    }
}

/// `grpc-message`'s percent-encoding undone.
fn percent_decode(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(&String::from_utf8_lossy(h), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(s[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One call of `LogsService/Export` with the request's framed message.
pub(super) async fn attempt(
    config: &HttpSinkConfig,
    connections: &Connections,
    tls: Option<&TlsClient>,
    request: &Request,
) -> Outcome {
    let target = &request.target;
    let mut sender = connections
        .get(&target.authority, tls, config.request_timeout)
        .await?;
    let mut req = hyper::Request::new(Full::new(request.body.clone()));
    *req.method_mut() = hyper::Method::POST;
    *req.uri_mut() = target.uri.clone();
    *req.headers_mut() = target.headers.clone();
    // HTTP/2 carries the authority in the URI; a Host header is not allowed.
    req.headers_mut().remove(hyper::header::HOST);
    let started = Instant::now();
    let call = async {
        let response = sender
            .send_request(req)
            .await
            .map_err(|e| SinkError::retryable("the gRPC call failed").with_cause(e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let collected = response
            .into_body()
            .collect()
            .await
            .map_err(|e| SinkError::retryable("the gRPC answer was cut").with_cause(e))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        Ok::<_, SinkError>((status, headers, trailers, collected.to_bytes()))
    };
    let (status, headers, trailers, body) = tokio::time::timeout(config.request_timeout, call)
        .await
        .map_err(|_| {
            SinkError::retryable(format!(
                "no answer within request_timeout ({:?})",
                config.request_timeout
            ))
        })??;
    let rtt = started.elapsed();
    if !status.is_success() {
        // Not a gRPC answer at all (a proxy's): judged as OTLP/HTTP's statuses are.
        return Err(super::refusal(
            config.encoding,
            status.as_u16(),
            &body,
            None,
        ));
    }
    let field = |name: &str| {
        trailers
            .get(name)
            .or_else(|| headers.get(name))
            .map(HeaderValue::as_bytes)
    };
    let code = field("grpc-status")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u32>().ok());
    match code {
        Some(0) => {
            if let Some((rejected, why)) = grpc_partial_success(&body) {
                tracing::warn!(uri = %target.uri, rejected, reason = %why, "The OTLP server took a request but rejected some of its log records.");
            }
            Ok(rtt)
        }
        Some(code) => {
            let message = field("grpc-message")
                .map(percent_decode)
                .unwrap_or_default();
            let delay = field("grpc-status-details-bin").and_then(retry_delay);
            let retry_info = delay.is_some();
            let error = SinkError::from_cause(
                judge(code, retry_info),
                Answer {
                    status: code as u16,
                    excerpt: format!("gRPC status {code}: {message}"),
                },
            );
            // The server's RetryInfo says how long to wait (capped as Retry-After is).
            Err(error.with_retry_after(delay.map(|d| d.min(Duration::from_secs(300)))))
        }
        None => Err(SinkError::retryable(
            "the answer carries no grpc-status (not a gRPC server?)",
        )),
    }
}

/// The delay of the `google.rpc.RetryInfo` in a `grpc-status-details-bin` value (a
/// `google.rpc.Status`, base64 with or without padding); `None` when it holds none.
fn retry_delay(value: &[u8]) -> Option<Duration> {
    use base64::Engine as _;
    use loghaul_codec::otlp::wire::{Reader, Wire};
    let trimmed: Vec<u8> = value.iter().copied().filter(|&b| b != b'=').collect();
    let status = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(&trimmed)
        .ok()?;
    let mut r = Reader::new(&status);
    while let Ok(Some((n, w))) = r.field() {
        // details (3): Any { type_url (1), value (2) }
        let (3, Wire::Len(a, b)) = (n, w) else {
            continue;
        };
        let mut any = r.nested(a, b);
        let (mut is_retry, mut body) = (false, None);
        while let Ok(Some((n, w))) = any.field() {
            match (n, w) {
                (1, Wire::Len(x, y)) => {
                    is_retry = any.bytes(x, y).ends_with(b"google.rpc.RetryInfo");
                }
                (2, Wire::Len(x, y)) => body = Some((x, y)),
                _ => {}
            }
        }
        let (Some((x, y)), true) = (body, is_retry) else {
            continue;
        };
        // RetryInfo { Duration retry_delay = 1 }; Duration { int64 seconds = 1; int32 nanos = 2 }
        let mut info = any.nested(x, y);
        let mut delay = Duration::ZERO;
        while let Ok(Some((n, w))) = info.field() {
            if let (1, Wire::Len(p, q)) = (n, w) {
                let mut d = info.nested(p, q);
                while let Ok(Some((n, w))) = d.field() {
                    match (n, w) {
                        (1, Wire::Varint(s)) => delay += Duration::from_secs(s.min(86_400)),
                        (2, Wire::Varint(ns)) => {
                            delay += Duration::from_nanos(ns.min(999_999_999));
                        }
                        _ => {}
                    }
                }
            }
        }
        return Some(delay);
    }
    None
}

/// The `partial_success` of a framed `ExportLogsServiceResponse`.
fn grpc_partial_success(body: &[u8]) -> Option<(u64, String)> {
    let (_, message) = loghaul_codec::otlp::grpc::unframe(body).ok()?;
    loghaul_codec::otlp::partial_success(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlps_retryable_codes_and_grpc_messages() {
        for code in [1, 4, 10, 11, 14, 15] {
            assert_eq!(judge(code, false), Retry::Retryable, "{code}");
        }
        for code in [2, 3, 5, 6, 7, 9, 12, 13, 16] {
            assert_eq!(judge(code, false), Retry::Permanent, "{code}");
        }
        assert_eq!(judge(8, false), Retry::Permanent);
        assert_eq!(judge(8, true), Retry::Retryable);
        assert_eq!(percent_decode(b"bad%20field%3A x%"), "bad field: x%");
    }

    #[test]
    fn a_retry_info_gives_its_delay() {
        use base64::Engine as _;
        let status = loghaul_codec::otlp::status(
            loghaul_codec::otlp::Code::Unavailable,
            "busy",
            Some(7),
            false,
        );
        for engine in [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::STANDARD_NO_PAD,
        ] {
            let value = engine.encode(&status);
            assert_eq!(retry_delay(value.as_bytes()), Some(Duration::from_secs(7)));
        }
        let plain =
            loghaul_codec::otlp::status(loghaul_codec::otlp::Code::Internal, "x", None, false);
        let value = base64::engine::general_purpose::STANDARD.encode(&plain);
        assert_eq!(retry_delay(value.as_bytes()), None);
        assert_eq!(retry_delay(b"%%%"), None);
    }
}
