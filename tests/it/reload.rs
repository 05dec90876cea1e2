//! Reloading a running server: SIGHUP, `POST /reload` and `--watch-config` move the graph to
//! the new configuration without refusing or cutting a connection and without losing or
//! duplicating an event; a broken configuration leaves the graph running and says why.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

const TCP_CLIENTS: u64 = 4;
const PER_TCP_CLIENT: u64 = 100_000;
const HTTP_REQUESTS: u64 = 100;
const PER_REQUEST: u64 = 1_000;

/// `POST path` on the API; the status and body of the answer.
fn api_post(port: u16, path: &str) -> (u16, String) {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set a read timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read the answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

/// The last reload as `/health` reports it.
fn last_reload(server: &Server) -> Value {
    let (_, body) = server.health();
    let health: Value = serde_json::from_str(&body).expect("/health is JSON");
    health["last_reload"].clone()
}

/// Waits until `/health` reports a reload other than `before` (a signal has no answer).
fn wait_reload(server: &Server, before: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = last_reload(server);
        if now != *before && !now.is_null() {
            return now;
        }
        assert!(Instant::now() < deadline, "no reload reported: {now}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The configuration template (see [`render`]) of a step, with `http` and `tcp2` the ports of
/// the HTTP source and of the second syslog source.
fn template(http: u16, tcp2: u16, step: &Step) -> String {
    let second = if step.second {
        format!("  tcp2: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{tcp2}\" }}\n")
    } else {
        String::new()
    };
    let limit = step
        .limit
        .map(|n| format!(", max_connections: {n}"))
        .unwrap_or_default();
    let mut inputs = vec!["tcp_in", "http_in"];
    if step.second {
        inputs.push("tcp2");
    }
    let inputs = inputs.join(", ");
    let (transforms, sink_inputs) = if step.remap {
        (
            format!(
                "transforms:\n  stage:\n    type: remap\n    inputs: [{inputs}]\n    source: '.stage = \"remapped\"'\n"
            ),
            "stage".to_owned(),
        )
    } else {
        (String::new(), inputs)
    };
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}"{limit} }}
  http_in: {{ type: http_server, address: "127.0.0.1:{http}", paths: ["/in"] }}
{second}{transforms}sinks:
  out: {{ type: file, inputs: [{sink_inputs}], path: "{{DIR}}/{file}", encoding: json, flush_interval: 100ms }}
"#,
        file = step.sink,
    )
}

/// What a step of the test configures: `sink` the file the sink writes, `remap` whether the
/// remap stands between the sources and the sink, `second` whether the second syslog source
/// exists, `limit` a `max_connections` that makes the first syslog source a changed one (its
/// socket then handed over).
struct Step {
    sink: &'static str,
    remap: bool,
    second: bool,
    limit: Option<u32>,
}

/// One HTTP/1.1 keep-alive connection posting NDJSON to `/in`; every answer must be 200.
fn http_client(port: u16) {
    let stream = connect(port);
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("set a read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut writer = stream;
    for r in 0..HTTP_REQUESTS {
        let mut body = Vec::new();
        for i in 0..PER_REQUEST {
            let seq = r * PER_REQUEST + i;
            writeln!(body, "{{\"message\":\"http seq {seq}\"}}").expect("build the body");
        }
        write!(
            writer,
            "POST /in HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .and_then(|()| writer.write_all(&body))
        .expect("the HTTP connection stays open across reloads");
        let mut status = String::new();
        reader.read_line(&mut status).expect("read the status line");
        assert!(status.contains(" 200 "), "request {r}: {status:?}");
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read a header");
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().expect("a content length");
            }
        }
        let mut rest = vec![0u8; length];
        reader.read_exact(&mut rest).expect("read the body");
    }
}

/// One syslog connection kept open from the first event to the last, paced so the load lasts
/// through every reload.
fn tcp_client(port: u16, client: u64, paced: Duration) -> TcpStream {
    let mut s = connect(port);
    s.set_write_timeout(Some(Duration::from_secs(60)))
        .expect("set a write timeout");
    let mut chunk = Vec::with_capacity(500 * 48);
    for i in 0..PER_TCP_CLIENT {
        let seq = client * PER_TCP_CLIENT + i;
        chunk.extend_from_slice(line3164(&format!("tcp seq {seq}")).as_bytes());
        if chunk.len() >= 500 * 30 || i + 1 == PER_TCP_CLIENT {
            s.write_all(&chunk)
                .expect("the syslog connection stays open across reloads");
            chunk.clear();
            std::thread::sleep(paced);
        }
    }
    s
}

/// Sends one line on a new connection (a marker that shows which configuration runs).
fn marker(port: u16, text: &str) {
    let mut s = connect(port);
    s.write_all(line3164(text).as_bytes())
        .expect("send a marker");
}

/// The events of `path` whose message is `text`.
fn find(path: &Path, text: &str) -> Vec<Value> {
    if !path.exists() {
        return Vec::new();
    }
    read_lines(path)
        .into_iter()
        .filter(|e| message(e) == text)
        .collect()
}

fn wait_marker(server: &Server, file: &str, text: &str) -> Value {
    let path = server.path(file);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(e) = find(&path, text).pop() {
            return e;
        }
        assert!(Instant::now() < deadline, "{text} never reached {file}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reload_under_load_loses_nothing_duplicates_nothing_and_cuts_no_connection() {
    let http = free_tcp_port();
    let tcp2 = free_tcp_port();
    let mut step = Step {
        sink: "a.jsonl",
        remap: false,
        second: false,
        limit: None,
    };
    let mut server = Server::start(&template(http, tcp2, &step));
    let ports = server.ports;
    let dir = server.dir.path().to_path_buf();
    let config_path = server.config_path.clone();
    let write = |step: &Step, extra: &str| {
        let text = render(&template(http, tcp2, step), &ports, &dir) + extra;
        std::fs::write(&config_path, text).expect("write the configuration");
    };

    let paced = Duration::from_millis(40);
    let tcp: Vec<_> = (0..TCP_CLIENTS)
        .map(|c| std::thread::spawn(move || tcp_client(ports.tcp, c, paced)))
        .collect();
    let web = std::thread::spawn(move || http_client(http));
    std::thread::sleep(Duration::from_millis(800));

    // (a) The sink's path changes, by SIGHUP.
    step.sink = "b.jsonl";
    write(&step, "");
    let before = last_reload(&server);
    server.signal("HUP");
    let reload = wait_reload(&server, &before);
    assert_eq!(reload["result"], "applied", "{reload}");
    assert_eq!(reload["trigger"], "signal");
    assert_eq!(reload["changed"], serde_json::json!(["out"]));
    marker(ports.tcp, "marker a");
    wait_marker(&server, "b.jsonl", "marker a");
    std::thread::sleep(Duration::from_millis(500));

    // (b) A remap is inserted between the sources and the sink, through the API.
    step.remap = true;
    write(&step, "");
    let (status, body) = api_post(ports.api, "/reload");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(answer["result"], "applied", "{answer}");
    assert_eq!(answer["added"], serde_json::json!(["stage"]));
    marker(ports.tcp, "marker b");
    assert_eq!(
        wait_marker(&server, "b.jsonl", "marker b")["stage"],
        "remapped"
    );
    std::thread::sleep(Duration::from_millis(500));

    // (c) A second syslog source is added, and the first changes (its socket handed over while
    // four connections are open on it); then the second is removed.
    step.second = true;
    step.limit = Some(5_000);
    write(&step, "");
    let (status, body) = api_post(ports.api, "/reload");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(answer["added"], serde_json::json!(["tcp2"]), "{answer}");
    assert_eq!(answer["changed"], serde_json::json!(["tcp_in"]), "{answer}");
    marker(tcp2, "marker c");
    assert_eq!(
        wait_marker(&server, "b.jsonl", "marker c")["stage"],
        "remapped"
    );
    marker(ports.tcp, "marker c2");
    wait_marker(&server, "b.jsonl", "marker c2");
    std::thread::sleep(Duration::from_millis(500));
    step.second = false;
    write(&step, "");
    let (status, body) = api_post(ports.api, "/reload");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(answer["removed"], serde_json::json!(["tcp2"]), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", tcp2)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the removed source still listens"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // (d) A broken configuration is refused; the graph runs on.
    write(&step, "  oops: { type: nope }\n");
    let (status, body) = api_post(ports.api, "/reload");
    assert_eq!(status, 422, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(answer["result"], "failed");
    assert!(
        answer["error"].as_str().unwrap_or("").contains("nope"),
        "{answer}"
    );
    let health = last_reload(&server);
    assert_eq!(health["result"], "failed", "{health}");
    marker(ports.tcp, "marker d");
    wait_marker(&server, "b.jsonl", "marker d");

    let open: Vec<TcpStream> = tcp
        .into_iter()
        .map(|t| t.join().expect("a syslog client failed"))
        .collect();
    web.join().expect("the HTTP client failed");
    let text = server.metrics_text();
    // A clean stop writes what is in flight; then every line is on disk.
    server.stop();
    drop(open);

    // Every numbered event once, across both files.
    let mut seen: HashMap<String, u32> = HashMap::new();
    for file in ["a.jsonl", "b.jsonl"] {
        for_each_line(&server.path(file), |e| {
            let m = message(&e);
            if m.contains(" seq ") {
                *seen.entry(m.to_owned()).or_default() += 1;
            }
        });
    }
    let total = TCP_CLIENTS * PER_TCP_CLIENT + HTTP_REQUESTS * PER_REQUEST;
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "duplicated: {twice:?}");
    assert_eq!(
        seen.len() as u64,
        total,
        "lost {}",
        total - seen.len() as u64
    );
    assert!(
        find(&server.path("a.jsonl"), "marker a").is_empty(),
        "the marker after (a) went to the old path"
    );
    assert!(
        text.contains("loghaul_config_reloads_total{result=\"applied\"} 4"),
        "{}",
        text.lines()
            .filter(|l| l.contains("reloads"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(text.contains("loghaul_config_reloads_total{result=\"failed\"} 1"));
}

/// `--watch-config`: a change of a VRL program the configuration names, and nothing else,
/// reloads the remap that runs it.
#[test]
fn a_changed_vrl_file_alone_reloads_with_watch_config() {
    let template = r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
transforms:
  mark: { type: remap, inputs: [tcp_in], file: "{DIR}/mark.vrl" }
sinks:
  out: { type: file, inputs: [mark], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#;
    // The program must exist before the server validates its configuration.
    let dir = tempfile::tempdir().expect("a temp dir");
    let program = dir.path().join("mark.vrl");
    std::fs::write(&program, ".version = 1\n").expect("write the program");
    let template = template.replace("{DIR}/mark.vrl", &program.display().to_string());
    let mut server = Server::start_with_env(&template, &[("LOGHAUL_WATCH_CONFIG", "1")]);
    let mut keep = connect(server.ports.tcp);
    keep.write_all(line3164("before").as_bytes())
        .expect("send an event");
    assert_eq!(wait_marker(&server, "out.jsonl", "before")["version"], 1);

    let before = last_reload(&server);
    std::fs::write(&program, ".version = 2\n").expect("change the program");
    let reload = wait_reload(&server, &before);
    assert_eq!(reload["trigger"], "watch", "{reload}");
    assert_eq!(reload["changed"], serde_json::json!(["mark"]), "{reload}");
    // The connection opened before the reload carries on.
    keep.write_all(line3164("after").as_bytes())
        .expect("the connection stays open");
    assert_eq!(wait_marker(&server, "out.jsonl", "after")["version"], 2);

    // A broken program is refused; the running one stays.
    let before = last_reload(&server);
    std::fs::write(&program, ".version = \n").expect("break the program");
    let reload = wait_reload(&server, &before);
    assert_eq!(reload["result"], "failed", "{reload}");
    keep.write_all(line3164("still").as_bytes())
        .expect("the connection stays open");
    assert_eq!(wait_marker(&server, "out.jsonl", "still")["version"], 2);
    server.stop();
}

/// A sink whose server was wrong, its events waiting in its disk buffer: a reload that fixes
/// the address rebuilds the sink, and the new one delivers what the buffer held (the buffer
/// carried over), each event once.
#[test]
fn a_changed_sink_takes_its_disk_buffer_over() {
    const N: u64 = 20_000;
    let mut receiver = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  in: { type: http_server, address: "127.0.0.1:{TCP}", paths: ["/in"] }
sinks:
  out: { type: file, inputs: [in], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#,
    );
    let nowhere = free_tcp_port();
    let sender_template = |port: u16| {
        format!(
            r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
sinks:
  up:
    type: http
    inputs: [in]
    uri: "http://127.0.0.1:{port}/in"
    encoding: ndjson
    retry: {{ initial: 50ms, max: 200ms }}
    buffer: {{ type: disk, max_size: 256MiB, sync: every_batch }}
"#
        )
    };
    let mut sender = Server::start_answering(&sender_template(nowhere));
    let mut payload = Vec::new();
    for i in 0..N {
        payload.extend_from_slice(line3164(&format!("buffered seq {i}")).as_bytes());
    }
    send_tcp(sender.ports.tcp, &payload);
    sender.wait_metric("loghaul_disk_buffer_events", "up", None, N);

    let text = render(
        &sender_template(receiver.ports.tcp),
        &sender.ports,
        sender.dir.path(),
    );
    std::fs::write(&sender.config_path, text).expect("write the configuration");
    let (status, body) = api_post(sender.ports.api, "/reload");
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("the answer is JSON");
    assert_eq!(answer["changed"], serde_json::json!(["up"]), "{answer}");

    let events = wait_lines(&receiver.out(), N as usize, Duration::from_secs(60));
    let mut seen = vec![0u32; N as usize];
    for e in &events {
        let n: usize = message(e)
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a numbered event");
        seen[n] += 1;
    }
    assert!(seen.iter().all(|&c| c == 1), "every event once");
    sender.stop();
    receiver.stop();
}
