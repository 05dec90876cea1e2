//! The operations API: `GET /health` and `GET /metrics` (Prometheus text) over HTTP/1.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Registry;
use crate::topology::ShutdownSignal;

pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until shutdown.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, mut shutdown: ShutdownSignal) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.wait() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    tracing::warn!(%error, "Failed to accept an API connection.");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(handle(&req, &registry)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn handle(req: &Request<Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => match registry.health() {
            Ok(()) => respond(
                StatusCode::OK,
                "application/json",
                r#"{"status":"ok"}"#.into(),
            ),
            Err(bad) => {
                let components: serde_json::Map<String, serde_json::Value> = bad
                    .into_iter()
                    .map(|(id, reason)| (id, serde_json::Value::String(reason)))
                    .collect();
                let body = serde_json::json!({"status": "unhealthy", "components": components});
                respond(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "application/json",
                    body.to_string(),
                )
            }
        },
        (&Method::GET, "/metrics") => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            registry.render(),
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "application/json",
            r#"{"error":"not found: try /health or /metrics"}"#.into(),
        ),
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
