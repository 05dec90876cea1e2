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
use crate::net::listener::{self, Conn};
use crate::pipeline::ShutdownSignal;

/// Most API connections served at once (scrapers and health checks, not clients).
const MAX_CONNECTIONS: usize = 256;

/// Binds the API's listener (before anything starts, so a busy port fails the start).
///
/// # Errors
///
/// The address is in use or not available.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    listener::bind(addr, None).await
}

/// Serves until shutdown; connections in flight then finish their current request.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, shutdown: ShutdownSignal) {
    listener::serve(
        listener,
        MAX_CONNECTIONS,
        None,
        shutdown,
        move |conn: Conn| {
            let registry = registry.clone();
            async move {
                let Conn {
                    stream,
                    mut shutdown,
                    ..
                } = conn;
                let service = hyper::service::service_fn(move |req| {
                    let registry = registry.clone();
                    async move { Ok::<_, Infallible>(handle(&req, &registry)) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                tokio::pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => {}
                    _ = shutdown.wait() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
            }
        },
    )
    .await;
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
