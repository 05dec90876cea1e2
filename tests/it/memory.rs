//! The memory budget (`limits.memory`) against requests built to take memory: small on the
//! wire, huge once inflated or decoded. Clients are written here (raw HTTP/1.1 and raw forward
//! protocol), one at a time and four at once, while good clients go on being served; the peak
//! RSS (`VmHWM` from `/proc`) must stay within the budget plus the documented overhead
//! (docs/durability.md), and every refusal is counted.
//!
//! ```text
//! HTTP gzip of 90 MiB of `{}` lines (31M events)   ─► 413: more than limits.memory holds
//! HTTP 10 MiB of `{}` lines (3.5M events)           ─► 413: more than max_events_per_request
//! forward gzip of 240 MiB of `[1, {}]` entries      ─► read as a stream, within the budget;
//!                                                       refused at max_events_per_request
//! forward gzip of 240 MiB of zeros                   ─► refused as mostly invalid entries
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::harness::*;

const BUDGET_MIB: u64 = 64;
/// What loghaul holds besides the budget (docs/durability.md): the runtime, the allocator's
/// slack, and per busy connection a read buffer, a decoding step and a decompressor.
const OVERHEAD_MIB: u64 = 64;
/// The forward source's bound on entries per request here.
const MAX_ENTRIES: u64 = 1_000_000;

fn config(fwd: u16) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
limits: {{ memory: {BUDGET_MIB}MiB }}
sources:
  web: {{ type: http_server, address: "127.0.0.1:{{TCP}}", paths: ["/in"], ack_timeout: 3s }}
  fwd: {{ type: fluent, address: "127.0.0.1:{fwd}", max_events_per_request: {MAX_ENTRIES} }}
sinks:
  out: {{ type: file, inputs: [web, fwd], path: "{{DIR}}/out.jsonl", encoding: json }}
"#
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// POSTs `body` as NDJSON (gzip-encoded when `gzip`); returns the status line's code, or 0
/// when the connection ended without an answer.
fn post(port: u16, body: &[u8], gzip: bool) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let encoding = if gzip {
        "Content-Encoding: gzip\r\n"
    } else {
        ""
    };
    let head = format!(
        "POST /in HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n{encoding}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A CompressedPackedForward request of `entries` (gzip), acked as `chunk`.
fn compressed_request(tag: &str, entries: &[u8], chunk: &str) -> Vec<u8> {
    let blob = gzip(entries);
    let mut r = vec![0x93, 0xa0 | tag.len() as u8];
    r.extend_from_slice(tag.as_bytes());
    r.push(0xc6);
    r.extend_from_slice(&(blob.len() as u32).to_be_bytes());
    r.extend_from_slice(&blob);
    r.extend_from_slice(&[0x82, 0xaa]);
    r.extend_from_slice(b"compressed");
    r.extend_from_slice(&[0xa4]);
    r.extend_from_slice(b"gzip");
    r.extend_from_slice(&[0xa5]);
    r.extend_from_slice(b"chunk");
    r.push(0xa0 | chunk.len() as u8);
    r.extend_from_slice(chunk.as_bytes());
    r
}

/// Sends a forward request; returns what came back before the connection closed.
fn send_forward(port: u16, request: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let _ = s.write_all(request);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    answer
}

/// A good client of each kind is served: an HTTP POST answered 200, a forward Message-mode
/// request acknowledged.
fn good_clients_are_served(web: u16, fwd: u16, n: u32) {
    assert_eq!(
        post(
            web,
            format!("{{\"message\":\"good http {n}\"}}\n").as_bytes(),
            false
        ),
        200,
        "a good HTTP client, round {n}"
    );
    let chunk = format!("good{n}");
    let mut request = vec![0x94, 0xa4];
    request.extend_from_slice(b"good");
    request.push(0xce);
    request.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    let message = format!("good forward {n}");
    request.extend_from_slice(&[0x81, 0xa7]);
    request.extend_from_slice(b"message");
    request.push(0xa0 | message.len() as u8);
    request.extend_from_slice(message.as_bytes());
    request.extend_from_slice(&[0x81, 0xa5]);
    request.extend_from_slice(b"chunk");
    request.push(0xa0 | chunk.len() as u8);
    request.extend_from_slice(chunk.as_bytes());
    let answer = send_forward(fwd, &request);
    assert!(
        answer.ends_with(chunk.as_bytes()),
        "a good forward client, round {n}: {answer:?}"
    );
}

/// Runs `bomb` once, then four at once.
fn once_and_four_at_once(bomb: impl Fn() + Send + Sync + 'static) {
    let bomb = std::sync::Arc::new(bomb);
    bomb();
    let four: Vec<_> = (0..4)
        .map(|_| {
            let bomb = bomb.clone();
            std::thread::spawn(move || bomb())
        })
        .collect();
    for t in four {
        t.join().unwrap();
    }
}

#[test]
fn bombs_stay_within_the_memory_budget() {
    let fwd = free_port_pair();
    let server = Server::start(&config(fwd));
    let web = server.ports.tcp;
    good_clients_are_served(web, fwd, 0);
    let base_kib = server.peak_rss_kib();

    // 90 MiB of `{}` lines in about 90 KB of gzip: it could never fit 64 MiB.
    let http_gzip = gzip(&b"{}\n".repeat((90 << 20) / 3));
    assert!(http_gzip.len() < 200 << 10, "{} bytes", http_gzip.len());
    once_and_four_at_once(move || {
        let status = post(web, &http_gzip, true);
        assert!(matches!(status, 413 | 503), "a gzip bomb: {status}");
    });
    good_clients_are_served(web, fwd, 1);

    // 10 MiB of `{}` lines uncompressed: 3.5M events, past max_events_per_request.
    let plain = b"{}\n".repeat((10 << 20) / 3);
    once_and_four_at_once(move || {
        let status = post(web, &plain, false);
        assert!(
            matches!(status, 413 | 503),
            "10 MiB of empty objects: {status}"
        );
    });
    good_clients_are_served(web, fwd, 2);

    // 240 MiB of 3-byte entries in about 240 KB: read as a stream within the budget, refused
    // at max_events_per_request (the entries before it are written, never acknowledged).
    let entries = compressed_request("bomb", &[0x92, 0x01, 0x80].repeat((240 << 20) / 3), "bomb");
    assert!(entries.len() < 400 << 10, "{} bytes", entries.len());
    once_and_four_at_once(move || {
        let answer = send_forward(fwd, &entries);
        assert!(
            answer.is_empty(),
            "no ack for a refused request: {answer:?}"
        );
    });
    good_clients_are_served(web, fwd, 3);

    // 240 MiB of zeros: not one entry is an event; refused after a thousand.
    let zeros = compressed_request("zeros", &vec![0u8; 240 << 20], "zeros");
    once_and_four_at_once(move || {
        let answer = send_forward(fwd, &zeros);
        assert!(
            answer.is_empty(),
            "no ack for a refused request: {answer:?}"
        );
    });
    good_clients_are_served(web, fwd, 4);

    let peak_kib = server.peak_rss_kib();
    let text = server.metrics_text();
    let count = |id: &str, kind: &str| {
        parse_metric(
            &text,
            "loghaul_component_errors_total",
            id,
            Some(&format!("kind=\"{kind}\"")),
        )
        .unwrap_or(0)
    };
    eprintln!(
        "memory budget {BUDGET_MIB} MiB: peak RSS {} MiB (at start {} MiB); web refusals: \
         memory_limit {}, oversized {}; fwd refusals: oversized {}, protocol {}",
        peak_kib / 1024,
        base_kib / 1024,
        count("web", "memory_limit"),
        count("web", "oversized"),
        count("fwd", "oversized"),
        count("fwd", "protocol"),
    );
    assert!(
        peak_kib / 1024 <= BUDGET_MIB + OVERHEAD_MIB,
        "peak RSS {} MiB is over the budget ({BUDGET_MIB} MiB) and the overhead ({OVERHEAD_MIB} MiB)",
        peak_kib / 1024
    );
    // Every bomb was refused and counted: five of each kind.
    assert_eq!(
        count("web", "memory_limit") + count("web", "oversized"),
        10,
        "the HTTP bombs"
    );
    assert_eq!(count("fwd", "oversized"), 5, "the forward bombs of entries");
    assert_eq!(count("fwd", "protocol"), 5, "the forward bombs of zeros");
    let lines = read_lines(&server.out());
    for n in 0..5 {
        for what in ["http", "forward"] {
            let text = format!("good {what} {n}");
            assert!(
                lines
                    .iter()
                    .any(|v| v["message"] == serde_json::json!(text)),
                "{text} is written"
            );
        }
    }
    server.finish();
}
