//! The `http_server` source with a real client (`curl`): every body format and encoding, the
//! request's own fields, refusals that say why (and accept nothing), acknowledged writes that
//! wait for the file sink, echo mode, a slow client that cannot hold others back, and slow
//! clients cut off and counted.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

fn config(options: &str, out: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  web: {{ type: http_server, address: "127.0.0.1:{{TCP}}"{options} }}
sinks:
  out: {{ type: file, inputs: [web], path: "{out}", encoding: json, flush_interval: 50ms }}
"#
    )
}

/// `curl` with `args`; returns (status, body).
fn curl(args: &[&str]) -> (u16, String) {
    let out = run_bounded(
        Command::new("curl")
            .args([
                "-s",
                "-S",
                "--max-time",
                "30",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
            ])
            .args(args),
        Duration::from_secs(40),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn post(
    port: u16,
    path: &str,
    content_type: &str,
    body_file: &Path,
    extra: &[&str],
) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let ct = format!("Content-Type: {content_type}");
    let data = format!("@{}", body_file.display());
    let mut args = vec!["-H", ct.as_str(), "--data-binary", data.as_str()];
    args.extend_from_slice(extra);
    args.push(url.as_str());
    curl(&args)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn http_server_curl_posts_every_format_and_encoding() {
    let server = Server::start(&config(
        ", tag_from_path: true, headers: [X-Request-Id], query_parameters: [env]",
        "{DIR}/out.jsonl",
    ));
    let port = server.ports.tcp;
    let dir = server.dir.path();
    let body = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        p
    };
    let object = body(
        "object.json",
        br#"{"message":"obj 1","n":{"deep":[1,{"k":null}],"f":1.5}}"#,
    );
    let array = body(
        "array.json",
        br#"[{"message":"arr 2"},{"message":"arr 3","ok":true}]"#,
    );
    let ndjson = body(
        "lines.ndjson",
        b"{\"message\":\"nd 4\"}\n\n{\"message\":\"nd 5\"}\n",
    );
    let text = body("lines.txt", b"text 6\r\ntext 7\n");
    let gz = body("lines.txt.gz", &gzip(b"gzip 8\ngzip 9\n"));
    let zst = body(
        "lines.ndjson.zst",
        &zstd::encode_all(&b"{\"message\":\"zstd 10\"}\n"[..], 3).unwrap(),
    );
    let cases: [(&Path, &str, &[&str], &str); 6] = [
        (
            &object,
            "application/json",
            &["-H", "X-Request-Id: r1"],
            "/app.web?env=prod&other=x",
        ),
        (&array, "application/json; charset=utf-8", &[], "/"),
        (&ndjson, "application/x-ndjson", &[], "/"),
        (&text, "text/plain", &[], "/"),
        (&gz, "text/plain", &["-H", "Content-Encoding: gzip"], "/"),
        (
            &zst,
            "application/x-ndjson",
            &["-H", "Content-Encoding: zstd"],
            "/",
        ),
    ];
    let mut accepted = 0;
    for (file, ct, extra, path) in cases {
        let (status, resp) = post(port, path, ct, file, extra);
        assert_eq!(status, 200, "{}: {resp}", file.display());
        let v: Value = serde_json::from_str(&resp).unwrap();
        accepted += v["accepted"].as_u64().unwrap();
    }
    assert_eq!(accepted, 10);

    // Bad JSON on the third line: 400 naming it, and nothing of that body is written.
    let bad = body(
        "bad.ndjson",
        b"{\"message\":\"bad 90\"}\n{\"message\":\"bad 91\"}\n{\"message\":,}\n",
    );
    let (status, resp) = post(port, "/", "application/x-ndjson", &bad, &[]);
    assert_eq!(status, 400, "{resp}");
    let v: Value = serde_json::from_str(&resp).unwrap();
    assert_eq!(v["line"], 3, "{resp}");
    assert_eq!(v["offset"], 53, "{resp}");
    assert_eq!(v["accepted"], 0);

    let events = wait_lines(&server.out(), 10, ARRIVE_TIMEOUT);
    std::thread::sleep(Duration::from_millis(300));
    let events = if read_lines(&server.out()).len() > events.len() {
        read_lines(&server.out())
    } else {
        events
    };
    let mut numbers: Vec<u64> = events.iter().map(|e| trailing_number(message(e))).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (1..=10).collect::<Vec<_>>(),
        "bad lines must not be written"
    );
    let obj = find_message(&events, "obj 1");
    assert_eq!(obj["n"]["deep"][1]["k"], Value::Null);
    assert_eq!(obj["n"]["f"], 1.5);
    assert_eq!(obj["tag"], "app.web");
    assert_eq!(obj["x-request-id"], "r1");
    assert_eq!(obj["env"], "prod");
    assert!(
        obj.get("other").is_none(),
        "only the configured query parameters: {obj}"
    );
    assert_eq!(find_message(&events, "arr 3")["ok"], true);
    assert_eq!(
        find_message(&events, "text 6")["source_type"],
        "http_server"
    );
    server.finish();
}

#[test]
fn http_server_h2c_with_prior_knowledge() {
    let server = Server::start(&config(", max_body_size: 1KiB", "{DIR}/out.jsonl"));
    let port = server.ports.tcp;
    let dir = server.dir.path();
    let ndjson = dir.join("lines.ndjson");
    fs::write(&ndjson, b"{\"message\":\"h2 1\"}\n{\"message\":\"h2 2\"}\n").unwrap();
    let big = dir.join("big.txt");
    fs::write(&big, vec![b'x'; 4096]).unwrap();
    // curl speaks h2c with prior knowledge (one request: curl 7.88 cannot reuse such a connection).
    let url = format!("http://127.0.0.1:{port}/");
    let out = run_bounded(
        Command::new("curl")
            .args(["-s", "-S", "--max-time", "30", "--http2-prior-knowledge"])
            .args(["-H", "Content-Type: application/x-ndjson"])
            .args(["--data-binary", &format!("@{}", ndjson.display())])
            .args(["-w", "\n%{http_version} %{http_code}\n", url.as_str()]),
        Duration::from_secs(40),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n2 200\n"), "{text}");
    // Node's http2 client multiplexes 50 POSTs on one connection.
    let script = format!(
        r#"const h2 = require("node:http2");
const s = h2.connect("http://127.0.0.1:{port}");
let done = 0, ok = 0;
for (let i = 0; i < 50; i++) {{
  const r = s.request({{":method": "POST", ":path": "/", "content-type": "text/plain"}});
  r.on("response", (h) => {{ if (h[":status"] === 200) ok++; }});
  r.on("data", () => {{}});
  r.on("end", () => {{ if (++done === 50) {{ console.log("ok " + ok); s.close(); }} }});
  r.end("node h2 " + (100 + i) + "\n");
}}
s.on("error", (e) => {{ console.error(e); process.exit(1); }});
"#
    );
    let out = run_bounded(
        Command::new("node").args(["-e", &script]),
        Duration::from_secs(40),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok 50",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Limits hold over HTTP/2 as over HTTP/1.
    let (status, resp) = post(port, "/", "text/plain", &big, &["--http2-prior-knowledge"]);
    assert_eq!(status, 413, "{resp}");
    // HTTP/1 still works on the same port.
    let (status, resp) = post(port, "/", "application/x-ndjson", &ndjson, &["--http1.1"]);
    assert_eq!(status, 200, "{resp}");
    let events = wait_lines(&server.out(), 54, ARRIVE_TIMEOUT);
    assert_eq!(events.len(), 54);
    server.finish();
}

#[test]
fn http_server_refusals_say_why() {
    let server = Server::start(&config(
        ", max_body_size: 1MiB, max_decompressed_size: 1MiB, auth: { bearer: s3cret }",
        "{DIR}/out.jsonl",
    ));
    let port = server.ports.tcp;
    let dir = server.dir.path();
    let auth = ["-H", "Authorization: Bearer s3cret"];
    let small = dir.join("small.txt");
    fs::write(&small, b"hello 1\n").unwrap();

    let (status, resp) = post(
        port,
        "/",
        "text/plain",
        &small,
        &["-H", "Authorization: Bearer wrong", "-D", "-"],
    );
    assert_eq!(status, 401, "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{resp}"
    );
    assert!(resp.contains("credentials"), "{resp}");
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
    let (status, resp) = post(
        port,
        "/",
        "text/plain",
        &small,
        &["-H", "Authorization: bearer s3cret"],
    );
    assert_eq!(status, 200, "a lower-case scheme: {resp}");
    let (status, resp) = post(
        port,
        "/",
        "text/plain",
        &small,
        &["-H", "Authorization: Bearer S3CRET"],
    );
    assert_eq!(status, 401, "the token in the wrong case: {resp}");

    let (status, resp) = post(
        port,
        "/",
        "application/x-www-form-urlencoded",
        &small,
        &auth,
    );
    assert_eq!(status, 415, "{resp}");
    assert!(resp.contains("application/x-ndjson"), "{resp}");

    let big = dir.join("big.txt");
    fs::write(&big, vec![b'x'; 2 << 20]).unwrap();
    let (status, resp) = post(port, "/", "text/plain", &big, &auth);
    assert_eq!(status, 413, "{resp}");
    assert!(resp.contains("max_body_size"), "{resp}");

    // A gzip bomb: 200MB of zeros in about 200KB; refused at 1MiB of output.
    let bomb = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..200 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap()
    };
    assert!(bomb.len() < 1 << 20, "the bomb itself fits the body limit");
    let bomb_file = dir.join("bomb.gz");
    fs::write(&bomb_file, &bomb).unwrap();
    let (status, resp) = post(
        port,
        "/",
        "text/plain",
        &bomb_file,
        &["-H", "Content-Encoding: gzip", auth[0], auth[1]],
    );
    assert_eq!(status, 413, "{resp}");
    assert!(resp.contains("max_decompressed_size"), "{resp}");

    let deep = dir.join("deep.json");
    fs::write(&deep, "[".repeat(100_000)).unwrap();
    let (status, resp) = post(port, "/", "application/json", &deep, &auth);
    assert_eq!(status, 400, "{resp}");

    let url = format!("http://127.0.0.1:{port}/");
    let (status, resp) = curl(&["-H", auth[1], url.as_str()]);
    assert_eq!(status, 405, "{resp}");

    // After all that, a good request is served and, with the lower-case one, is all that is
    // written.
    let (status, resp) = post(port, "/", "text/plain", &small, &auth);
    assert_eq!(status, 200, "{resp}");
    let events = wait_lines(&server.out(), 2, ARRIVE_TIMEOUT);
    assert!(events.iter().all(|e| message(e) == "hello 1"), "{events:?}");
    assert!(
        server.metric(
            "loghaul_component_errors_total",
            "web",
            Some("kind=\"auth\"")
        ) >= 1
    );
    server.finish();
}

#[test]
fn http_server_acknowledges_only_what_the_sink_wrote() {
    // The sink cannot write until it is unblocked.
    let blocked = BlockedOutput::new();
    let out = blocked.out.clone();
    let server = Server::start(&config(", ack_timeout: 1s", &out.to_string_lossy()));
    let port = server.ports.tcp;
    let body = server.dir.path().join("b.txt");

    let mut ok: Vec<u64> = Vec::new();
    let mut refused = 0;
    for i in 0..40u64 {
        if i == 20 {
            blocked.unblock();
        }
        fs::write(&body, format!("ack {i}\n")).unwrap();
        let (status, resp) = post(port, "/", "text/plain", &body, &["-D", "-"]);
        match status {
            200 => ok.push(i),
            503 => {
                assert!(
                    resp.to_ascii_lowercase().contains("retry-after: 1"),
                    "{resp}"
                );
                refused += 1;
            }
            other => panic!("unexpected {other}: {resp}"),
        }
    }
    assert!(
        refused >= 1,
        "a sink that cannot write must not be acknowledged"
    );
    assert!(!ok.is_empty(), "once the sink recovers, requests succeed");
    // Every event that got a 200 is in the output (some refused ones may be too: at least once).
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    loop {
        let got: Vec<u64> = read_lines(&out)
            .iter()
            .map(|e| trailing_number(message(e)))
            .collect();
        let missing: Vec<&u64> = ok.iter().filter(|i| !got.contains(i)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged but not written: {missing:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.finish();
}

#[test]
fn http_server_echo_mode_and_a_slow_client() {
    let server = Server::start(&config(
        ", response: echo, request_timeout: 1s",
        "{DIR}/out.jsonl",
    ));
    let port = server.ports.tcp;
    // A slowloris: the request line a byte at a time. It must be cut off, and must not hold
    // anyone else up meanwhile.
    let mut slow = connect(port);
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{port}/some/path");
    for b in b"GET /slow HTTP/1.1\r\nHost: x\r\n".iter().take(6) {
        if slow.write_all(&[*b]).is_err() {
            break;
        }
        let (status, resp) = curl(&[url.as_str()]);
        assert_eq!(status, 200, "{resp}");
        assert!(
            resp.starts_with("/some/path 20"),
            "echo answers the path and the time: {resp}"
        );
        std::thread::sleep(Duration::from_millis(400));
    }
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the slow client was not cut off by request_timeout"
    );
    server.finish();
}

/// Slow clients (slowloris) of every kind the source cuts off at `request_timeout`, at once:
/// connected and silent, a request head trickled a byte at a time without end, the HTTP/2
/// preface begun and left unfinished. Each is closed and counted as
/// `errors_total{kind="timeout"}`, exactly once, and a good request meanwhile is served. A
/// keep-alive client that idles out after a request is closed too, but that is housekeeping
/// and is not counted.
#[test]
fn http_server_slow_clients_are_cut_off_and_counted_as_timeouts() {
    let server = Server::start(&config(", request_timeout: 500ms", "{DIR}/out.jsonl"));
    let port = server.ports.tcp;
    let every = Duration::from_millis(50);
    let head = b"POST / HTTP/1.1\r\nHost: loghaul\r\nX-Slow: ".repeat(20);
    let kinds: [(&str, &[u8], usize); 3] = [
        ("silent", b"", 4),
        ("trickling its head", &head, 4),
        (
            "stopping inside the HTTP/2 preface",
            b"PRI * HTTP/2.0\r\n",
            2,
        ),
    ];
    let slow: Vec<_> = kinds
        .iter()
        .flat_map(|&(what, bytes, n)| {
            (0..n).map(move |_| {
                let bytes = bytes.to_vec();
                let closed = std::thread::spawn(move || {
                    slow_client(port, &bytes, every, Duration::from_secs(10))
                });
                (what, closed)
            })
        })
        .collect();
    let mut kept = connect(port);
    assert_eq!(exchange(&mut kept, "served beside slow clients"), 200);
    for (what, closed) in slow {
        assert!(
            closed.join().unwrap(),
            "a client {what} was not cut off by request_timeout"
        );
    }
    let cut: u64 = kinds.iter().map(|k| k.2 as u64).sum();
    let timeouts = Some("kind=\"timeout\"");
    server.wait_metric_eq("loghaul_component_errors_total", "web", timeouts, cut);
    // The keep-alive connection idles out after its request: closed, not counted.
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    assert!(
        matches!(kept.read_to_end(&mut rest), Ok(0)),
        "the idle keep-alive connection was not closed: {rest:?}"
    );
    assert_eq!(
        server.metric("loghaul_component_errors_total", "web", timeouts),
        cut,
        "a keep-alive connection closed idle between requests was counted"
    );
    assert_eq!(
        server.metric("loghaul_component_errors_total", "web", None),
        cut,
        "slow clients counted under other kinds too"
    );
    let stderr = server.stderr();
    assert!(
        stderr.contains("Closed a connection whose client sent no whole request head"),
        "no warning about the slow clients:\n{}",
        tail(&stderr, 3000)
    );
    server.finish();
}

/// Sends `bytes` on a new connection and returns everything the server answers until it closes
/// (or 10 s pass).
fn raw_exchange(port: u16, bytes: &[u8]) -> String {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Broken requests on the wire: each gets its status (or is cut off), is counted, and a good
/// request from another client meanwhile is served; a 1GB gzip bomb inflates no further than
/// `max_decompressed_size`.
#[test]
fn http_server_broken_wire_input() {
    let server = Server::start(&config(
        ", request_timeout: 1s, max_body_size: 2MiB, max_decompressed_size: 1MiB",
        "{DIR}/out.jsonl",
    ));
    let port = server.ports.tcp;
    let good = |n: u32| {
        let mut s = connect(port);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(exchange(&mut s, &format!("good {n}\n")), 200);
    };

    // Content-Length promises more than comes, then silence: cut off after request_timeout,
    // while another client is served.
    let mut silent = connect(port);
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    silent
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\nonly this")
        .unwrap();
    good(1);
    let started = Instant::now();
    let mut answer = Vec::new();
    let _ = silent.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // A chunked body whose chunk size is not hex: the connection cannot be read any further, so
    // it is closed (hyper answers nothing once the framing is lost); the error is counted below.
    let protocol_before = server.metric(
        "loghaul_component_errors_total",
        "web",
        Some("kind=\"protocol\""),
    );
    let answer = raw_exchange(
        port,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad 1\r\n0\r\n\r\n",
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.metric(
        "loghaul_component_errors_total",
        "web",
        Some("kind=\"protocol\""),
    ) <= protocol_before
    {
        assert!(
            Instant::now() < deadline,
            "the broken chunk was not counted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    good(2);

    // A chunk announcing 2^64-1 bytes, and nothing after it: 413 as the size arrives (waiting
    // for the body would end in a 408 after request_timeout); the same for chunks adding up
    // past max_body_size, and after a good request on a keep-alive connection.
    for (what, request) in [
        (
            "one huge chunk",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n".to_vec(),
        ),
        (
            "chunks past max_body_size in all",
            [
                &b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n"[..],
                &vec![b'x'; 1 << 20],
                b"\r\n100001\r\n",
            ]
            .concat(),
        ),
        (
            "after a good request",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\ngood 5\nPOST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffff\r\n".to_vec(),
        ),
    ] {
        let mut s = connect(port);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&request).unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.contains("HTTP/1.1 413"), "{what}: {answer}");
        assert!(answer.contains("max_body_size"), "{what}: {answer}");
    }

    // Headers over 64KiB.
    let mut big = b"GET /health HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..1000 {
        big.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(80)).as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    assert!(big.len() > 64 * 1024);
    let answer = raw_exchange(port, &big);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "refused or cut off: {answer}"
    );
    good(3);

    // A 1GB gzip bomb (about 1MB on the wire): 413 at 1MiB of output, memory bounded.
    let bomb = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap()
    };
    assert!(
        bomb.len() < 2 << 20,
        "the bomb fits the body limit: {}",
        bomb.len()
    );
    let bomb_file = server.dir.path().join("bomb.gz");
    fs::write(&bomb_file, &bomb).unwrap();
    let (status, resp) = post(
        port,
        "/",
        "text/plain",
        &bomb_file,
        &["-H", "Content-Encoding: gzip"],
    );
    assert_eq!(status, 413, "{resp}");
    good(4);

    let events = wait_lines(&server.out(), 5, ARRIVE_TIMEOUT);
    let mut numbers: Vec<u64> = events.iter().map(|e| trailing_number(message(e))).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        [1, 2, 3, 4, 5],
        "only the good requests are written"
    );
    assert!(server.metric("loghaul_component_errors_total", "web", None) >= 3);
    server.finish();
}

/// The tests that open 10,000 connections take turns: together they would pass the test
/// process's descriptor limit.
static TEN_THOUSAND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One keep-alive HTTP/1.1 exchange on `s`: POSTs `body` as text, returns the status.
fn exchange(s: &mut std::net::TcpStream, body: &str) -> u16 {
    let req = format!(
        "POST / HTTP/1.1\r\nHost: loghaul\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    // Read the head, then exactly Content-Length bytes of body.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).unwrap_or(0) == 0 {
            return 0;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).unwrap();
    status
}

#[test]
fn http_server_2000_keep_alive_clients_and_10000_idle_connections() {
    const CLIENTS: u64 = 2_000;
    const EACH: u64 = 10;
    let _turn = TEN_THOUSAND.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&config(", max_connections: 20000", "{DIR}/out.jsonl"));
    let port = server.ports.tcp;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(CLIENTS as usize));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut s = connect(port);
                    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    // Every client is connected before any sends: 2,000 at once.
                    barrier.wait();
                    (0..EACH)
                        .map(|i| exchange(&mut s, &format!("kept alive {}\n", c * EACH + i)))
                        .filter(|&st| st == 200)
                        .count() as u64
                })
                .unwrap()
        })
        .collect();
    let ok: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        ok,
        CLIENTS * EACH,
        "every request on every connection answered 200"
    );
    let numbers: Vec<u64> = wait_lines(&server.out(), (CLIENTS * EACH) as usize, ARRIVE_TIMEOUT)
        .iter()
        .map(|e| trailing_number(message(e)))
        .collect();
    assert_each_once(&numbers, CLIENTS * EACH, "2,000 clients × 10 requests");

    // 10,000 connections opened and left idle: a new client is still served.
    let rss_before = server.peak_rss_kib();
    let idle: Vec<std::net::TcpStream> = (0..10_000).map(|_| connect(port)).collect();
    server.wait_metric("loghaul_open_connections", "web", None, 10_000);
    let body = server.dir.path().join("late.txt");
    fs::write(&body, b"late 1\n").unwrap();
    let (status, resp) = post(port, "/", "text/plain", &body, &[]);
    assert_eq!(status, 200, "{resp}");
    let rss = server.peak_rss_kib();
    println!("10,000 idle connections: peak RSS {rss} KiB (before them: {rss_before} KiB)");
    assert!(
        rss < 512 * 1024,
        "10,000 idle connections must not cost unbounded memory: peak RSS {rss} KiB"
    );
    drop(idle);
    server.finish();
}

#[test]
fn http_server_10000_idle_keep_alive_connections_cost_little_and_are_served_again() {
    // Every connection makes one request and then idles, as load balancers' and shippers' pools
    // do: an idle connection gives hyper and its buffers back (15KB of RSS each before), and is
    // served again as soon as it sends.
    const N: u64 = 10_000;
    let _turn = TEN_THOUSAND.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&config(", max_connections: 20000", "{DIR}/out.jsonl"));
    let port = server.ports.tcp;
    let rss_before = server.peak_rss_kib();
    let mut conns: Vec<std::net::TcpStream> = (0..N)
        .map(|i| {
            let mut s = connect(port);
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            assert_eq!(exchange(&mut s, &format!("first {i}\n")), 200);
            s
        })
        .collect();
    // Idle for longer than the grace before a connection is put aside.
    std::thread::sleep(Duration::from_millis(500));
    let rss = server.peak_rss_kib();
    println!("{N} idle keep-alive connections: peak RSS {rss} KiB (before them: {rss_before} KiB)");
    assert!(
        rss < 100 * 1024,
        "{N} idle keep-alive connections must fit in 100MiB: peak RSS {rss} KiB"
    );
    let mut ok = 0;
    for (i, s) in (N..).zip(conns.iter_mut()) {
        if exchange(s, &format!("second {i}\n")) == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, N, "every idle connection is served again");
    let numbers: Vec<u64> = wait_lines(&server.out(), (2 * N) as usize, ARRIVE_TIMEOUT)
        .iter()
        .map(|e| trailing_number(message(e)))
        .collect();
    assert_each_once(&numbers, 2 * N, "10,000 connections × 2 requests");
    drop(conns);
    server.finish();
}
