//! The lab's own small HTTP/1.x server (`loghaul bench httpd`): the `ceiling` subject of
//! `http_echo` (the least work a server can do per request, so it shows where the load tool
//! itself saturates) and the one receiver every client of `http_client` talks to (it serves the
//! download and discards uploads, counting them).
//!
//! ```text
//! GET  /download   -> the --download-bytes payload (the same bytes for every client)
//! GET  /empty      -> an empty body (a client's start-up and one request, nothing moved)
//! GET  /stats      -> {"requests": N, "bytes": N}: POSTs and body bytes received so far
//! POST any path    -> body read and discarded (Content-Length only), then the echo answer
//! any other GET    -> "<path> <time>\n", the echo answer the published experiment's servers gave
//! ```
//!
//! Hand-written on purpose: a request head is found with one `memmem`, and nothing is parsed that
//! the answer does not need. HTTP/1.0 and `Connection: close` close after the answer; pipelined
//! requests are answered in order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Longest request head accepted; a longer one closes the connection.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// Serves on `127.0.0.1:port` until killed, on a runtime of `threads` workers.
///
/// # Errors
/// The port cannot be bound or the runtime cannot start.
pub fn run(port: u16, download_bytes: usize, threads: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // A deterministic, incompressible-looking payload: every client downloads the same bytes.
    let mut payload = Vec::with_capacity(download_bytes);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while payload.len() < download_bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        payload.extend_from_slice(&x.to_le_bytes());
    }
    payload.truncate(download_bytes);
    let payload = Bytes::from(payload);
    rt.block_on(async move {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let socket = tokio::net::TcpSocket::new_v4().context("creating a socket")?;
        socket.set_reuseaddr(true).context("SO_REUSEADDR")?;
        socket
            .bind(addr)
            .with_context(|| format!("binding {addr}"))?;
        // ab and wrk open thousands of connections at once: a short backlog would drop SYNs and
        // show up as the load tool's connect errors, not as this server's speed.
        let listener: TcpListener = socket.listen(8192).context("listen")?;
        let stats = Arc::new(Stats::default());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // EMFILE and friends: wait a moment instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            };
            let stats = stats.clone();
            let payload = payload.clone();
            tokio::spawn(async move {
                let _ = serve(stream, &stats, &payload).await;
            });
        }
    })
}

/// What the head of one request asks for.
struct Head<'a> {
    method: &'a [u8],
    path: &'a [u8],
    keep_alive: bool,
    content_length: usize,
    chunked: bool,
}

fn parse_head(head: &[u8]) -> Option<Head<'_>> {
    let mut lines = head.split(|&b| b == b'\n');
    let line = lines.next()?.strip_suffix(b"\r").unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let method = parts.next()?;
    let path = parts.next()?;
    let version = parts.next()?;
    let mut keep_alive = version == b"HTTP/1.1";
    let mut content_length = 0usize;
    let mut chunked = false;
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            content_length = std::str::from_utf8(value).ok()?.parse().ok()?;
        } else if name.eq_ignore_ascii_case(b"connection") {
            if value.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = !value.eq_ignore_ascii_case(b"identity");
        }
    }
    Some(Head {
        method,
        path,
        keep_alive,
        content_length,
        chunked,
    })
}

async fn serve(mut stream: TcpStream, stats: &Stats, payload: &Bytes) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(512);
    loop {
        // Find a whole head, reading more as needed.
        let end = loop {
            if let Some(i) = memchr::memmem::find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_HEAD {
                return Ok(());
            }
            if read_more(&mut stream, &mut buf).await? == 0 {
                return Ok(());
            }
        };
        let Some(head) = parse_head(&buf[..end]) else {
            stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await?;
            return Ok(());
        };
        if head.chunked {
            // The clients here all send Content-Length; refusing keeps this server small.
            stream
                .write_all(b"HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await?;
            return Ok(());
        }
        let keep_alive = head.keep_alive;
        let is_post = head.method == b"POST";
        let content_length = head.content_length;
        out.clear();
        let body = if head.method == b"GET" && head.path == b"/download" {
            payload.clone()
        } else if head.method == b"GET" && head.path == b"/empty" {
            Bytes::new()
        } else if head.method == b"GET" && head.path == b"/stats" {
            Bytes::from(format!(
                "{{\"requests\": {}, \"bytes\": {}}}\n",
                stats.requests.load(Ordering::Relaxed),
                stats.bytes.load(Ordering::Relaxed)
            ))
        } else {
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let mut b = Vec::with_capacity(head.path.len() + now.len() + 2);
            b.extend_from_slice(head.path);
            b.push(b' ');
            b.extend_from_slice(now.as_bytes());
            b.push(b'\n');
            Bytes::from(b)
        };
        buf.drain(..end);
        if is_post {
            // Discard the body: what is already buffered, then straight from the socket.
            let mut left = content_length;
            let have = left.min(buf.len());
            buf.drain(..have);
            left -= have;
            // On the heap and only for bodies: an idle connection's future stays small.
            let mut sink = vec![0u8; left.min(64 * 1024)];
            while left > 0 {
                let want = left.min(sink.len());
                let n = stream.read(&mut sink[..want]).await?;
                if n == 0 {
                    return Ok(());
                }
                left -= n;
            }
            stats.requests.fetch_add(1, Ordering::Relaxed);
            stats
                .bytes
                .fetch_add(content_length as u64, Ordering::Relaxed);
        }
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(if keep_alive {
            b"\r\nConnection: keep-alive\r\n\r\n"
        } else {
            b"\r\nConnection: close\r\n\r\n"
        });
        if body.len() <= 4096 {
            out.extend_from_slice(&body);
            stream.write_all(&out).await?;
        } else {
            stream.write_all(&out).await?;
            stream.write_all(&body).await?;
        }
        if !keep_alive {
            let _ = stream.shutdown().await;
            return Ok(());
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(4096);
    }
    stream.read_buf(buf).await
}

/// One `GET path` (HTTP/1.0, so the server closes after answering) to `127.0.0.1:port`: the body
/// of a 200 answer, or an error naming what came back.
///
/// # Errors
/// No connection, no HTTP answer, or a status other than 200.
pub fn get(port: u16, path: &str) -> Result<String> {
    use std::io::{Read as _, Write as _};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())?;
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        anyhow::bail!("GET {path}: no HTTP answer: {text:?}");
    };
    let status = head.lines().next().unwrap_or("");
    if !status.starts_with("HTTP/1.") || status.split_whitespace().nth(1) != Some("200") {
        anyhow::bail!("GET {path} answered {status:?}");
    }
    Ok(body.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        let h = parse_head(b"GET /a HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(h.path, b"/a");
        assert!(!h.keep_alive);
        let h = parse_head(b"POST /u HTTP/1.1\r\ncontent-length: 12\r\n\r\n").unwrap();
        assert!(h.keep_alive);
        assert_eq!(h.content_length, 12);
        let h = parse_head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
        assert!(h.keep_alive);
        let h = parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        assert!(!h.keep_alive);
        assert!(parse_head(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_none());
    }
}
