//! The `opentelemetry` source with the OpenTelemetry Python SDK's own exporters (OTLP/HTTP
//! protobuf, OTLP/gRPC, and OTLP/JSON from the SDK's protobuf messages), and bad requests sent
//! by `curl`: each answered with the status the OTLP specification names, counted, while other
//! clients go on.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{SecondsFormat, TimeZone as _, Utc};
use serde_json::json;

use crate::harness::*;

const COUNT: u64 = 10_000;
/// The sender's times: record i happened at BASE + i·1000003 + 7 ns, was observed at BASE + i.
const BASE: i64 = 1_700_000_000_000_000_000;

fn config(options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  otel: {{ type: opentelemetry, address: "127.0.0.1:{{TCP}}"{options} }}
sinks:
  out: {{ type: file, inputs: [otel], path: "{{DIR}}/out.jsonl", encoding: json, flush_interval: 50ms }}
"#
    )
}

fn otlp_sender() -> Command {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "the OpenTelemetry Python SDK is not installed ({} is missing): run scripts/install-clients.sh",
        python.display()
    );
    let mut cmd = Command::new(python);
    cmd.arg(dir.join("otlp_send.py"));
    cmd
}

fn rfc3339(nanos: i64) -> String {
    Utc.timestamp_nanos(nanos)
        .to_rfc3339_opts(SecondsFormat::Nanos, true)
}

#[test]
fn otlp_sdk_records_arrive_once_over_http_grpc_and_json() {
    let mut server = Server::start(&config(""));
    let port = server.ports.tcp;
    let http = format!("http://127.0.0.1:{port}/v1/logs");
    let grpc = format!("http://127.0.0.1:{port}");
    let count = COUNT.to_string();
    // All three at once, as three applications would.
    let senders: Vec<_> = [
        ("http", http.as_str(), true),
        ("grpc", grpc.as_str(), true),
        ("json", http.as_str(), false),
    ]
    .into_iter()
    .map(|(protocol, endpoint, gzip)| {
        let mut cmd = otlp_sender();
        cmd.args([
            "--protocol",
            protocol,
            "--endpoint",
            endpoint,
            "--count",
            &count,
        ]);
        if gzip {
            cmd.arg("--gzip");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start otlp_send.py");
        (protocol, child)
    })
    .collect();
    for (protocol, child) in senders {
        let out = child.wait_with_output().expect("otlp_send.py ran");
        assert!(
            out.status.success(),
            "the SDK's {protocol} export failed: {}\nserver: {}",
            String::from_utf8_lossy(&out.stderr),
            tail(&server.stderr(), 3000)
        );
    }
    // Acknowledged: every export returned only once the file sink committed its records.
    let lines = read_lines(&server.out());
    assert_eq!(lines.len() as u64, 3 * COUNT, "records written");
    let mut seen: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for e in &lines {
        let attrs = &e["attributes"];
        let protocol = attrs["protocol"]
            .as_str()
            .expect("protocol attribute")
            .to_owned();
        let n = attrs["n"].as_i64().expect("n attribute");
        let warn = n % 2 == 0;
        let want = json!({
            "timestamp": rfc3339(BASE + n * 1_000_003 + 7),
            "observed_timestamp": rfc3339(BASE + n),
            "hostname": "sdk-host",
            "appname": "otlp-test",
            "message": format!("{protocol} {n}"),
            "severity": if warn { "warning" } else { "err" },
            "severity_number": if warn { 13 } else { 17 },
            "severity_text": if warn { "WARN" } else { "ERROR" },
            "source_type": "opentelemetry",
            "attributes": {"n": n, "protocol": protocol, "ok": true, "ratio": 0.25, "tags": ["a", "b"]},
            "scope": {"name": "loghaul.test", "version": "1.0"},
        });
        for (k, v) in want.as_object().expect("object") {
            assert_eq!(&e[k], v, "{k} of {protocol} record {n}: {e}");
        }
        let resources = &e["resources"];
        assert_eq!(resources["service.name"], "otlp-test", "{e}");
        assert_eq!(resources["host.name"], "sdk-host", "{e}");
        assert_eq!(resources["telemetry.sdk.language"], "python", "{e}");
        seen.entry(protocol).or_default().push(n as u32);
    }
    for protocol in ["http", "grpc", "json"] {
        let mut ns = seen.remove(protocol).unwrap_or_default();
        ns.sort_unstable();
        assert_eq!(
            ns,
            (0..COUNT as u32).collect::<Vec<_>>(),
            "{protocol}: each record once"
        );
    }
    assert!(seen.is_empty(), "records of no sender: {seen:?}");
    assert_eq!(
        server.metric("loghaul_component_received_events_total", "otel", None),
        3 * COUNT
    );
    assert_eq!(
        server.metric("loghaul_component_errors_total", "otel", None),
        0,
        "{}",
        server.stderr()
    );
    server.stop();
}

/// curl's answer: (HTTP status, the response's headers, body).
fn curl(args: &[&str]) -> (u16, String, Vec<u8>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let headers = dir.path().join("headers");
    let h = headers.to_string_lossy().into_owned();
    let out = run_bounded(
        Command::new("curl")
            .args([
                "-s",
                "-S",
                "--max-time",
                "30",
                "-D",
                &h,
                "-o",
                "-",
                "-w",
                "%{http_code}",
            ])
            .args(args),
        Duration::from_secs(40),
    );
    let mut body = out.stdout;
    let code = body.split_off(body.len().saturating_sub(3));
    let code = String::from_utf8_lossy(&code).parse().unwrap_or(0);
    let headers = std::fs::read_to_string(&headers)
        .unwrap_or_default()
        .to_ascii_lowercase();
    (code, headers, body)
}

/// A valid `ExportLogsServiceRequest` of one record whose body is `text`.
fn request(text: &str) -> Vec<u8> {
    use loghaul_codec::otlp::wire::Writer;
    let mut w = Writer::default();
    w.message(1, |w| {
        w.message(2, |w| {
            w.message(2, |w| {
                w.fixed64(1, 1_700_000_000_000_000_000);
                w.message(5, |w| w.bytes(1, text.as_bytes()));
                w.message(6, |w| {
                    w.bytes(1, b"padding");
                    w.message(2, |w| w.bytes(1, &[b'x'; 200]));
                });
            });
        });
    });
    w.buf
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

#[test]
fn otlp_bad_requests_get_the_specified_status_are_counted_and_stall_no_one() {
    let server = Server::start(&config(
        ", max_body_size: 64KiB, max_decompressed_size: 1MiB",
    ));
    let port = server.ports.tcp;
    let dir = server.dir.path();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write body");
        format!("@{}", p.display())
    };
    let url = format!("http://127.0.0.1:{port}/v1/logs");
    let proto = ["-H", "Content-Type: application/x-protobuf"];
    // A client that sends half a request head and waits: it holds no one else back.
    let mut stalled = connect(port);
    stalled
        .write_all(b"POST /v1/logs HTTP/1.1\r\nHost: x\r\n")
        .expect("partial head");

    let whole = request("fine");
    let cut = file("cut.bin", &whole[..whole.len() / 2]);
    let (code, headers, body) = curl(&[&proto[..], &["--data-binary", &cut, &url]].concat());
    assert_eq!(
        code,
        400,
        "truncated protobuf: {}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        headers.contains("content-type: application/x-protobuf"),
        "{headers}"
    );
    assert!(String::from_utf8_lossy(&body).contains("no valid ExportLogsServiceRequest"));

    let text = file("text.txt", b"hello");
    let (code, _, body) = curl(&[
        "-H",
        "Content-Type: text/plain",
        "--data-binary",
        &text,
        &url,
    ]);
    assert_eq!(
        code,
        415,
        "wrong content type: {}",
        String::from_utf8_lossy(&body)
    );

    let bomb = file("bomb.gz", &gzip(&vec![0u8; 16 << 20]));
    let (code, _, body) = curl(
        &[
            &proto[..],
            &["-H", "Content-Encoding: gzip", "--data-binary", &bomb, &url],
        ]
        .concat(),
    );
    assert_eq!(code, 413, "gzip bomb: {}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("max_decompressed_size"));

    let big = file("big.bin", &request(&"y".repeat(100_000)));
    let (code, _, body) = curl(&[&proto[..], &["--data-binary", &big, &url]].concat());
    assert_eq!(code, 413, "oversized: {}", String::from_utf8_lossy(&body));

    let (code, _, body) = curl(
        &[
            &proto[..],
            &[
                "--data-binary",
                &cut,
                &format!("http://127.0.0.1:{port}/v1/traces"),
            ],
        ]
        .concat(),
    );
    assert_eq!(
        code,
        404,
        "another signal: {}",
        String::from_utf8_lossy(&body)
    );

    // gRPC: a message cut short of the length its prefix announces, and another service.
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(whole.len() as u32).to_be_bytes());
    framed.extend_from_slice(&whole[..10]);
    let grpc_cut = file("grpc-cut.bin", &framed);
    let grpc = |path: &str, body: &str| {
        curl(&[
            "--http2-prior-knowledge",
            "-H",
            "Content-Type: application/grpc",
            "-H",
            "TE: trailers",
            "--data-binary",
            body,
            &format!("http://127.0.0.1:{port}{path}"),
        ])
    };
    let (code, headers, _) = grpc(
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        &grpc_cut,
    );
    assert_eq!(code, 200, "gRPC answers in its status");
    assert!(
        headers.contains("grpc-status: 3"),
        "cut gRPC message: {headers}"
    );
    assert!(headers.contains("grpc-message: "), "{headers}");
    let (_, headers, _) = grpc(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        &grpc_cut,
    );
    assert!(
        headers.contains("grpc-status: 12"),
        "traces over gRPC: {headers}"
    );

    // A good request still goes through, over HTTP and gRPC, while the stalled client waits.
    let good = file("good.bin", &request("after the bad ones"));
    let (code, headers, body) = curl(&[&proto[..], &["--data-binary", &good, &url]].concat());
    assert_eq!(
        (code, body.len()),
        (200, 0),
        "a full success has an empty response"
    );
    assert!(
        headers.contains("content-type: application/x-protobuf"),
        "{headers}"
    );
    let mut framed = vec![0u8];
    let msg = request("over grpc");
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    let grpc_good = file("grpc-good.bin", &framed);
    let (code, headers, body) = grpc(
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        &grpc_good,
    );
    assert_eq!(code, 200);
    assert!(
        headers.contains("content-type: application/grpc"),
        "{headers}"
    );
    // One empty ExportLogsServiceResponse, framed; its status 0 comes in the trailers.
    assert_eq!(body, [0, 0, 0, 0, 0]);
    let lines = wait_lines(&server.out(), 2, ARRIVE_TIMEOUT);
    let messages: Vec<&str> = lines.iter().map(message).collect();
    assert_eq!(messages, ["after the bad ones", "over grpc"]);

    let errors = |kind: &str| {
        server.metric(
            "loghaul_component_errors_total",
            "otel",
            Some(&format!("kind=\"{kind}\"")),
        )
    };
    assert_eq!(
        errors("parse"),
        2,
        "the cut protobuf and the cut gRPC message"
    );
    assert_eq!(errors("decompression"), 1, "the bomb");
    assert_eq!(errors("oversized"), 1);
    assert_eq!(
        errors("protocol"),
        3,
        "wrong type, traces over HTTP and gRPC"
    );
    drop(stalled);
    server.finish();
}

/// The `opentelemetry` sink to an OTLP receiver (here loghaul's own source): syslog events
/// become records with the documented fields, and none is lost while the receiver is down for
/// a while mid-stream (the sink retries what OTLP says to retry).
#[test]
fn otlp_sink_delivers_syslog_events_and_loses_none_while_the_receiver_is_down() {
    let mut receiver = Server::start(&config(""));
    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc3164 }}
sinks:
  otlp: {{ type: opentelemetry, inputs: [in], uri: "http://127.0.0.1:{}/v1/logs", timeout: 50ms, max_events: 500 }}
"#,
        receiver.ports.tcp
    ));
    let line = |i: usize| {
        format!(
            "<{}>Nov 27 10:00:00 host-{} app{}[42]: event {i}\n",
            16 * 8 + 3 + (i % 2) * 3,
            i % 3,
            i % 2
        )
    };
    let half: String = (0..5_000).map(line).collect();
    send_tcp(sender.ports.tcp, half.as_bytes());
    wait_lines(&receiver.out(), 5_000, ARRIVE_TIMEOUT);
    receiver.stop();
    let hold = receiver.hold_ports();
    let rest: String = (5_000..10_000).map(line).collect();
    send_tcp(sender.ports.tcp, rest.as_bytes());
    // The sink meets a refused connection and retries: wait until it has, then bring the
    // receiver back.
    sender.wait_metric("loghaul_component_errors_total", "otlp", None, 1);
    receiver.restart();
    drop(hold);
    let lines = wait_lines(&receiver.out(), 10_000, ARRIVE_TIMEOUT);
    let mut seen = vec![0u32; 10_000];
    for e in &lines {
        let text = message(e);
        let i: usize = text
            .strip_prefix("event ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected message {text}"));
        seen[i] += 1;
        let err = i.is_multiple_of(2);
        assert_eq!(e["hostname"], format!("host-{}", i % 3), "{e}");
        assert_eq!(e["appname"], format!("app{}", i % 2), "{e}");
        assert_eq!(e["severity"], if err { "err" } else { "info" }, "{e}");
        assert_eq!(e["severity_number"], if err { 17 } else { 9 }, "{e}");
        assert_eq!(
            e["resources"],
            json!({"host.name": format!("host-{}", i % 3), "service.name": format!("app{}", i % 2)}),
            "{e}"
        );
        assert_eq!(e["attributes"]["syslog.facility"], "local0", "{e}");
        assert_eq!(e["attributes"]["syslog.procid"], "42", "{e}");
        assert!(
            e["timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with("10:00:00.000000000Z")),
            "{e}"
        );
    }
    let missing: Vec<usize> = (0..10_000).filter(|&i| seen[i] == 0).collect();
    assert!(
        missing.is_empty(),
        "lost: {} events, first {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    // At least once: a request the receiver took as it stopped may come twice, never zero.
    receiver.stop();
}
