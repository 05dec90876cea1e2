//! The operations API: `GET /` (the live console, a page of its own), `GET /health`,
//! `GET /metrics` (Prometheus text), `GET /graph` (every component's counters as JSON),
//! `POST /reload` (load the configuration again; answered once the reload is over) and
//! `GET /tap` (live events, as lines of JSON for as long as the client reads) over HTTP/1.1,
//! behind a bearer token (`api.token`, every path but the page itself) and TLS (`api.tls`) when
//! configured; validation refuses an API reachable from other machines that has neither a token
//! nor client certificates.

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

/// What the API checks of every request, and the TLS of its listener.
pub struct Access {
    /// The `Authorization` value every request must carry, if any.
    pub authorization: Option<String>,
    pub tls: Option<loghaul_config::TlsConfig>,
}

impl Access {
    pub fn of(config: &loghaul_config::ApiConfig) -> Access {
        Access {
            authorization: config.token.as_ref().map(|t| format!("Bearer {t}")),
            tls: config.tls.clone(),
        }
    }
}

/// Serves until shutdown; connections in flight then finish their current request.
///
/// # Errors
///
/// The TLS files no longer make a server config (they changed since validation).
pub fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    access: Access,
    shutdown: ShutdownSignal,
    reload: Option<tokio::sync::mpsc::Sender<crate::server::ReloadRequest>>,
) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    // The API is no pipeline component: its refusals are logged (rate-limited) under `api`.
    let metrics = crate::metrics::ComponentMetrics::detached(
        "api",
        loghaul_config::ComponentKind::Source,
        "api",
    );
    let tls = match &access.tls {
        Some(config) => Some(crate::net::tls::TlsServer::start(
            config,
            &[b"http/1.1"],
            metrics.clone(),
            shutdown.clone(),
        )?),
        None => None,
    };
    let options = listener::ServeOptions {
        max_connections: MAX_CONNECTIONS,
        max_per_client: None,
        tls,
        // hyper's own timers bound an HTTP connection's idleness.
        idle_timeout: None,
        retire: None,
    };
    let authorization = Arc::new(access.authorization);
    let reload = Arc::new(reload);
    Ok(listener::serve(
        listener,
        options,
        Some(metrics.clone()),
        shutdown,
        move |conn: Conn| {
            let registry = registry.clone();
            let authorization = authorization.clone();
            let metrics = metrics.clone();
            let reload = reload.clone();
            async move {
                let Conn {
                    stream,
                    peer,
                    mut shutdown,
                    ..
                } = conn;
                let service = hyper::service::service_fn(move |req| {
                    let registry = registry.clone();
                    let authorization = authorization.clone();
                    let metrics = metrics.clone();
                    let reload = reload.clone();
                    async move {
                        // The console page holds no data: it asks for the token itself.
                        if req.uri().path() == "/" && req.method() == Method::GET {
                            return Ok::<_, Infallible>(console());
                        }
                        if let Some(expected) = authorization.as_deref()
                            && !authorized(&req, expected)
                        {
                            crate::warn_limited!(metrics, %peer, path = req.uri().path(), "Refused an API request without the right token.");
                            return Ok::<_, Infallible>(unauthorized());
                        }
                        if req.uri().path() == "/tap" {
                            return Ok::<_, Infallible>(tap(&req, &registry));
                        }
                        if req.uri().path() == "/reload" {
                            return Ok::<_, Infallible>(
                                reload_now(&req, reload.as_ref().as_ref()).await,
                            );
                        }
                        Ok::<_, Infallible>(handle(&req, &registry))
                    }
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
    ))
}

/// Whether the request carries the expected `Authorization` (its credentials compared in
/// constant time, its scheme in any case).
fn authorized(req: &Request<Incoming>, expected: &str) -> bool {
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map_or(&b""[..], hyper::header::HeaderValue::as_bytes);
    crate::net::http::authorization_matches(given, expected)
}

fn unauthorized() -> Response<ApiBody> {
    let mut resp = respond(
        StatusCode::UNAUTHORIZED,
        "application/json",
        r#"{"error":"this API needs `Authorization: Bearer TOKEN` (api.token)"}"#.into(),
    );
    resp.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer realm=\"loghaul\""),
    );
    resp
}

/// The live console: one page, its script and style inline, embedded in the binary.
const CONSOLE: &str = include_str!("console.html");

/// `GET /`: the console page. It reaches nothing but this API (its policy says so).
fn console() -> Response<ApiBody> {
    let mut resp = respond(
        StatusCode::OK,
        "text/html; charset=utf-8",
        CONSOLE.to_owned(),
    );
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        hyper::header::HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'",
        ),
    );
    h.insert(
        hyper::header::X_FRAME_OPTIONS,
        hyper::header::HeaderValue::from_static("DENY"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    resp
}

/// A response body: a whole one, or a tap's lines as they come.
pub enum ApiBody {
    Whole(Full<Bytes>),
    Lines(tokio::sync::mpsc::Receiver<Bytes>),
}

impl hyper::body::Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ApiBody::Whole(full) => std::pin::Pin::new(full).poll_frame(cx),
            ApiBody::Lines(rx) => rx
                .poll_recv(cx)
                .map(|line| line.map(|l| Ok(hyper::body::Frame::data(l)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ApiBody::Whole(full) => full.is_end_stream(),
            ApiBody::Lines(_) => false,
        }
    }

    // The exact size of a whole body: it goes out with `Content-Length`, not chunked.
    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ApiBody::Whole(full) => full.size_hint(),
            ApiBody::Lines(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// `GET /tap?outputs=A,B.NAME&condition=VRL&limit=N&rate=N`: events sent on the named outputs
/// (every output when none is named) as lines of JSON, `{"output":..,"event":{..}}`, with
/// `{"skipped":N}` once a second while some are skipped, until `limit` events were sent or
/// the client goes. At most `rate` events a second (default 100).
fn tap(req: &Request<Incoming>, registry: &Arc<Registry>) -> Response<ApiBody> {
    let bad = |why: String| {
        respond(
            StatusCode::BAD_REQUEST,
            "application/json",
            serde_json::json!({ "error": why }).to_string(),
        )
    };
    if req.method() != Method::GET {
        return bad("use GET /tap".to_owned());
    }
    let mut options = crate::tap::TapOptions {
        rate: 100.0,
        ..crate::tap::TapOptions::default()
    };
    let query = req.uri().query().unwrap_or("");
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "outputs" => options.outputs.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            ),
            "condition" => match crate::transforms::vrl::compile_condition(&value) {
                Ok(program) => options.condition = Some(program),
                Err(why) => return bad(format!("condition: {why}")),
            },
            "limit" => match value.parse() {
                Ok(n) => options.limit = Some(n),
                Err(_) => return bad(format!("limit: `{value}` is no number")),
            },
            "rate" => match value.trim_end_matches("/s").parse::<f64>() {
                Ok(n) if n > 0.0 => options.rate = n,
                _ => return bad(format!("rate: `{value}` is no positive number")),
            },
            other => {
                return bad(format!(
                    "unknown parameter `{other}`: outputs, condition, limit, rate"
                ));
            }
        }
    }
    let mut stream = match registry.taps.open(options) {
        Ok(stream) => stream,
        Err(why) => {
            return respond(
                StatusCode::NOT_FOUND,
                "application/json",
                serde_json::json!({ "error": why }).to_string(),
            );
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let registry = registry.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                line = stream.next() => match line {
                    Some(line) => {
                        if tx.send(line).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
                // The client went away.
                () = tx.closed() => break,
            }
        }
        stream.close(&registry.taps);
    });
    let mut resp = Response::new(ApiBody::Lines(rx));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// `POST /reload`: asks the server to reload and answers with the outcome (200 when the
/// running graph took the configuration or it was unchanged, 422 when it was refused).
async fn reload_now(
    req: &Request<Incoming>,
    reload: Option<&tokio::sync::mpsc::Sender<crate::server::ReloadRequest>>,
) -> Response<ApiBody> {
    if req.method() != Method::POST {
        let mut resp = respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "application/json",
            r#"{"error":"use POST /reload"}"#.into(),
        );
        resp.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("POST"),
        );
        return resp;
    }
    let unavailable = |why: &str| {
        respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "application/json",
            serde_json::json!({ "error": why }).to_string(),
        )
    };
    let Some(reload) = reload else {
        return unavailable("this server does not reload");
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    if reload.send(tx).await.is_err() {
        return unavailable("the server is stopping");
    }
    match rx.await {
        Ok(outcome) => {
            let status = if outcome.result == "failed" {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::OK
            };
            let body = serde_json::to_string(&outcome).unwrap_or_default();
            respond(status, "application/json", body)
        }
        Err(_) => unavailable("the server is stopping"),
    }
}

fn handle(req: &Request<Incoming>, registry: &Registry) -> Response<ApiBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => {
            let mut body = match registry.health() {
                Ok(()) => serde_json::json!({"status": "ok"}),
                Err(bad) => {
                    let components: serde_json::Map<String, serde_json::Value> = bad
                        .into_iter()
                        .map(|(id, reason)| (id, serde_json::Value::String(reason)))
                        .collect();
                    serde_json::json!({"status": "unhealthy", "components": components})
                }
            };
            let status = if body["status"] == "ok" {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            if let Some(last) = registry.last_reload() {
                body["last_reload"] = serde_json::to_value(last).unwrap_or_default();
            }
            respond(status, "application/json", body.to_string())
        }
        (&Method::GET, "/graph") => respond(
            StatusCode::OK,
            "application/json",
            registry.graph().to_string(),
        ),
        (&Method::GET, "/metrics") => respond(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            registry.render(),
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "application/json",
            r#"{"error":"not found: try /health, /metrics, /graph, /tap or POST /reload"}"#.into(),
        ),
    }
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<ApiBody> {
    let mut resp = Response::new(ApiBody::Whole(Full::new(Bytes::from(body))));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
