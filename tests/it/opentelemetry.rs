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
use serde_json::{Value, json};

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

/// The OpenTelemetry Collector built by scripts/install-peers.sh from the Collector's Go
/// modules (bench/peers/otelcol), run with a config of the test's.
struct Collector {
    child: Option<std::process::Child>,
    config: PathBuf,
    log: PathBuf,
    /// The port of its `otlp` receiver's HTTP protocol.
    port: u16,
}

impl Collector {
    fn binary() -> PathBuf {
        let path = std::env::var_os("LOGHAUL_OTELCOL").map_or_else(
            || PathBuf::from("/opt/loghaul-peers/otelcol/otelcol-loghaul"),
            PathBuf::from,
        );
        assert!(
            path.exists(),
            "the OpenTelemetry Collector is not built ({} is missing): run scripts/install-peers.sh",
            path.display()
        );
        path
    }

    /// Starts it on `config` (`{PORT}` replaced by a free port, its `otlp` receiver's), and
    /// waits until that port takes connections.
    fn start(dir: &std::path::Path, name: &str, config: &str) -> Collector {
        let port = free_tcp_port();
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config.replace("{PORT}", &port.to_string())).expect("write config");
        let mut c = Collector {
            child: None,
            config: path,
            log: dir.join(format!("{name}.log")),
            port,
        };
        c.run();
        c
    }

    /// Writes a new config (same `{PORT}`) for the next [`Collector::run`].
    fn reconfigure(&mut self, config: &str) {
        std::fs::write(
            &self.config,
            config.replace("{PORT}", &self.port.to_string()),
        )
        .expect("write config");
    }

    fn run(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("collector log");
        let child = Command::new(Self::binary())
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the Collector");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(std::process::Child::try_wait) {
                panic!("the Collector exited ({status}): {}", self.log_text());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the Collector did not listen within 30 s: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        tail(
            &std::fs::read_to_string(&self.log).unwrap_or_default(),
            6000,
        )
        .to_owned()
    }

    /// SIGTERM, as a service manager stops it (its exporters flush), and waits for it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "the Collector did not stop within 30 s: {}",
                        self.log_text()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- Collector log ---\n{}", self.log_text());
        }
    }
}

/// A Collector receiving OTLP/HTTP on `{PORT}` into a file exporter writing `out`.
fn collector_to_file(out: &std::path::Path) -> String {
    collector_receiving("http", out)
}

/// A Collector receiving OTLP over `protocol` (`http` or `grpc`) on `{PORT}` into a file
/// exporter writing `out`.
fn collector_receiving(protocol: &str, out: &std::path::Path) -> String {
    collector_receiving_with(protocol, "", out)
}

/// [`collector_receiving`] with `receiver` (YAML lines at the protocol's indent) added to the
/// receiver's protocol settings.
fn collector_receiving_with(protocol: &str, receiver: &str, out: &std::path::Path) -> String {
    format!(
        r#"receivers:
  otlp:
    protocols:
      {protocol}:
        endpoint: "127.0.0.1:{{PORT}}"
{receiver}
exporters:
  file:
    path: "{}"
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
"#,
        out.display()
    )
}

/// Every log record in a file exporter's output (one `ExportLogsServiceRequest` in OTLP/JSON a
/// line), each with its resource's and scope's.
fn collector_records(out: &std::path::Path) -> Vec<(Value, Value, Value)> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut records = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).expect("a JSON line from the Collector");
        for rl in request["resourceLogs"].as_array().into_iter().flatten() {
            for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                for r in sl["logRecords"].as_array().into_iter().flatten() {
                    records.push((r.clone(), rl["resource"].clone(), sl["scope"].clone()));
                }
            }
        }
    }
    records
}

/// OTLP/JSON attributes as one map (`[{key, value: {intValue: "5"}}]` → `{"key": 5}`).
fn attributes(list: &Value) -> serde_json::Map<String, Value> {
    fn any(v: &Value) -> Value {
        if let Some(s) = v.get("stringValue") {
            return s.clone();
        }
        if let Some(b) = v.get("boolValue") {
            return b.clone();
        }
        if let Some(i) = v.get("intValue") {
            return match i {
                Value::String(s) => json!(s.parse::<i64>().unwrap_or_default()),
                other => other.clone(),
            };
        }
        if let Some(d) = v.get("doubleValue") {
            return d.clone();
        }
        if let Some(a) = v.get("arrayValue") {
            return Value::Array(
                a["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(any)
                    .collect(),
            );
        }
        if let Some(m) = v.get("kvlistValue") {
            return Value::Object(attributes(&m["values"]));
        }
        Value::Null
    }
    list.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            (
                kv["key"].as_str().unwrap_or_default().to_owned(),
                any(&kv["value"]),
            )
        })
        .collect()
}

/// The acceptance path of the sink: 100,000 syslog events to the Collector, which is stopped
/// for 10 s mid-stream; its file output has every one, with the documented mapping.
#[test]
fn otlp_sink_delivers_to_the_collector_through_its_stop() {
    const N: usize = 100_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("collector.jsonl");
    let mut collector = Collector::start(dir.path(), "collector", &collector_to_file(&out));
    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc3164 }}
sinks:
  otlp: {{ type: opentelemetry, inputs: [in], uri: "http://127.0.0.1:{}/v1/logs", timeout: 100ms }}
"#,
        collector.port
    ));
    let line = |i: usize| {
        format!(
            "<{}>Nov 27 10:00:00 host-{} app[7]: event {i}\n",
            16 * 8 + 4,
            i % 5
        )
    };
    let first: String = (0..N / 2).map(line).collect();
    send_tcp(sender.ports.tcp, first.as_bytes());
    sender.wait_metric(
        "loghaul_component_sent_events_total",
        "otlp",
        None,
        (N / 2) as u64,
    );
    collector.stop();
    let rest: String = (N / 2..N).map(line).collect();
    send_tcp(sender.ports.tcp, rest.as_bytes());
    // The outage itself is what is tested: ten seconds of refused connections.
    std::thread::sleep(Duration::from_secs(10));
    assert!(
        sender.metric("loghaul_component_errors_total", "otlp", None) > 0,
        "the sink met no refusal while the Collector was down"
    );
    // Its file exporter starts its file anew: the second run writes a file of its own.
    let out2 = dir.path().join("collector-2.jsonl");
    collector.reconfigure(&collector_to_file(&out2));
    collector.run();
    sender.wait_metric(
        "loghaul_component_sent_events_total",
        "otlp",
        None,
        N as u64,
    );
    // Stopped, the Collector has flushed its file exporter.
    collector.stop();
    let mut records = collector_records(&out);
    records.extend(collector_records(&out2));
    let mut seen = vec![0u32; N];
    for (r, resource, _) in &records {
        let body = r["body"]["stringValue"].as_str().unwrap_or_default();
        let i: usize = body
            .strip_prefix("event ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected record {r}"));
        seen[i] += 1;
        assert_eq!(r["severityNumber"], 13, "{r}");
        assert_eq!(r["severityText"], "warning", "{r}");
        let attrs = attributes(&r["attributes"]);
        assert_eq!(attrs["syslog.facility"], "local0", "{r}");
        assert_eq!(attrs["syslog.procid"], "7", "{r}");
        let res = attributes(&resource["attributes"]);
        assert_eq!(res["host.name"], format!("host-{}", i % 5), "{r}");
        assert_eq!(res["service.name"], "app", "{r}");
    }
    let lost = seen.iter().filter(|&&n| n == 0).count();
    assert_eq!(
        lost,
        0,
        "events the Collector never got (of {N}; {} records)",
        records.len()
    );
}

/// The SDK's records through loghaul (source → sink) arrive at the Collector as the SDK sent
/// them, field by field; and the Collector's `otlp_http` exporter delivers into loghaul.
#[test]
fn otlp_records_pass_through_loghaul_to_the_collector_and_back_unchanged() {
    const N: u64 = 2_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("collector.jsonl");
    let mut collector = Collector::start(dir.path(), "collector", &collector_to_file(&out));
    let relay = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  otel: {{ type: opentelemetry, address: "127.0.0.1:{{TCP}}" }}
sinks:
  onward: {{ type: opentelemetry, inputs: [otel], uri: "http://127.0.0.1:{}/v1/logs", timeout: 50ms }}
"#,
        collector.port
    ));
    let mut cmd = otlp_sender();
    cmd.args([
        "--protocol",
        "http",
        "--endpoint",
        &format!("http://127.0.0.1:{}/v1/logs", relay.ports.tcp),
        "--count",
        &N.to_string(),
    ]);
    let sent = run_bounded(&mut cmd, Duration::from_secs(120));
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    relay.wait_metric("loghaul_component_sent_events_total", "onward", None, N);
    collector.stop();
    let records = collector_records(&out);
    assert_eq!(records.len() as u64, N, "records at the Collector");
    let mut seen = vec![false; N as usize];
    for (r, resource, scope) in &records {
        let attrs = attributes(&r["attributes"]);
        let n = attrs["n"].as_i64().expect("n");
        seen[n as usize] = true;
        let warn = n % 2 == 0;
        assert_eq!(
            Value::Object(attrs.clone()),
            json!({"n": n, "protocol": "http", "ok": true, "ratio": 0.25, "tags": ["a", "b"]}),
            "{r}"
        );
        assert_eq!(
            r["body"],
            json!({"stringValue": format!("http {n}")}),
            "{r}"
        );
        assert_eq!(
            r["timeUnixNano"],
            (BASE + n * 1_000_003 + 7).to_string(),
            "{r}"
        );
        assert_eq!(r["observedTimeUnixNano"], (BASE + n).to_string(), "{r}");
        assert_eq!(r["severityNumber"], if warn { 13 } else { 17 }, "{r}");
        assert_eq!(
            r["severityText"],
            if warn { "WARN" } else { "ERROR" },
            "{r}"
        );
        assert_eq!(scope["name"], "loghaul.test", "{r}");
        assert_eq!(scope["version"], "1.0", "{r}");
        let res = attributes(&resource["attributes"]);
        assert_eq!(res["service.name"], "otlp-test");
        assert_eq!(res["host.name"], "sdk-host");
        assert_eq!(res["telemetry.sdk.language"], "python");
        assert_eq!(
            res.len(),
            6,
            "the SDK's resource, no more, no less: {resource}"
        );
    }
    assert!(seen.iter().all(|&s| s), "every record once");

    // And the other way: the Collector's otlp_http exporter into loghaul's source.
    let receiver = Server::start(&config(""));
    let mut forwarder = Collector::start(
        dir.path(),
        "forwarder",
        &format!(
            r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: "127.0.0.1:{{PORT}}"
exporters:
  otlp_http:
    endpoint: "http://127.0.0.1:{}"
    compression: gzip
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [otlp_http]
"#,
            receiver.ports.tcp
        ),
    );
    let mut cmd = otlp_sender();
    cmd.args([
        "--protocol",
        "http",
        "--endpoint",
        &format!("http://127.0.0.1:{}/v1/logs", forwarder.port),
        "--count",
        &N.to_string(),
        "--tag",
        "via-collector",
    ]);
    let sent = run_bounded(&mut cmd, Duration::from_secs(120));
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let lines = wait_lines(&receiver.out(), N as usize, ARRIVE_TIMEOUT);
    forwarder.stop();
    for e in &lines {
        let n = e["attributes"]["n"].as_i64().expect("n");
        assert_eq!(e["message"], format!("via-collector {n}"), "{e}");
        assert_eq!(e["timestamp"], rfc3339(BASE + n * 1_000_003 + 7), "{e}");
        assert_eq!(e["appname"], "otlp-test", "{e}");
        assert_eq!(e["scope"]["name"], "loghaul.test", "{e}");
    }
}

/// `encoding: json`: OTLP/JSON requests, which the Collector reads as it reads protobuf.
#[test]
fn otlp_sink_json_requests_reach_the_collector() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("collector.jsonl");
    let mut collector = Collector::start(dir.path(), "collector", &collector_to_file(&out));
    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc5424 }}
sinks:
  otlp: {{ type: opentelemetry, inputs: [in], uri: "http://127.0.0.1:{}/v1/logs", encoding: json, compression: none, timeout: 50ms }}
"#,
        collector.port
    ));
    let lines: String = (0..1_000)
        .map(|i| {
            format!(
                "<165>1 2026-11-27T10:00:00.123456Z web app 9 ID{i} [ex@32473 k=\"v\\\"q\"] json {i}\n"
            )
        })
        .collect();
    send_tcp(sender.ports.tcp, lines.as_bytes());
    sender.wait_metric("loghaul_component_sent_events_total", "otlp", None, 1_000);
    collector.stop();
    let records = collector_records(&out);
    assert_eq!(records.len(), 1_000);
    let mut seen = vec![0u8; 1_000];
    for (r, resource, _) in &records {
        let body = r["body"]["stringValue"].as_str().unwrap_or_default();
        let i: usize = body
            .strip_prefix("json ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected record {r}"));
        seen[i] += 1;
        let sent = chrono::DateTime::parse_from_rfc3339("2026-11-27T10:00:00.123456Z")
            .ok()
            .and_then(|t| t.timestamp_nanos_opt())
            .expect("a time");
        assert_eq!(r["timeUnixNano"], sent.to_string(), "{r}");
        assert_eq!(r["severityNumber"], 10, "notice is INFO2: {r}");
        let attrs = attributes(&r["attributes"]);
        assert_eq!(attrs["syslog.msgid"], format!("ID{i}"), "{r}");
        assert_eq!(
            attrs["syslog.structured_data"],
            json!({"ex@32473": {"k": "v\"q"}}),
            "{r}"
        );
        assert_eq!(attributes(&resource["attributes"])["host.name"], "web");
    }
    assert!(seen.iter().all(|&n| n == 1), "each record once");
}

/// Over TLS, as on every listener: the SDK's HTTP and gRPC exporters trusting the server's CA
/// (gRPC agrees on HTTP/2 by ALPN).
#[test]
fn otlp_sdk_exports_over_tls() {
    let pki = crate::tls::Pki::new();
    let ca_file = pki.path("ca.crt");
    let server = Server::start(&config(&pki.listener("")));
    let port = server.ports.tcp;
    for (protocol, endpoint) in [
        ("http", format!("https://localhost:{port}/v1/logs")),
        ("grpc", format!("https://localhost:{port}")),
    ] {
        let mut cmd = otlp_sender();
        cmd.args([
            "--protocol",
            protocol,
            "--endpoint",
            &endpoint,
            "--count",
            "500",
        ])
        .arg("--ca")
        .arg(&ca_file)
        // `requests` lets these variables override the CA a session was given (the HTTP
        // exporter's `certificate_file`): a machine that sets them would test its own
        // trust store instead.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE");
        let out = run_bounded(&mut cmd, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "{protocol} over TLS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lines = wait_lines(&server.out(), 1_000, ARRIVE_TIMEOUT);
    for protocol in ["http", "grpc"] {
        let n = lines
            .iter()
            .filter(|e| e["attributes"]["protocol"] == protocol)
            .count();
        assert_eq!(n, 500, "{protocol} records");
    }
}

/// `protocol: grpc`: OTLP/gRPC calls (gzip-compressed messages) to the Collector's gRPC
/// receiver and to loghaul's own source.
#[test]
fn otlp_sink_grpc_calls_reach_the_collector_and_loghaul() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("collector.jsonl");
    let mut collector =
        Collector::start(dir.path(), "collector", &collector_receiving("grpc", &out));
    let receiver = Server::start(&config(""));
    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc3164 }}
sinks:
  collector: {{ type: opentelemetry, inputs: [in], protocol: grpc, uri: "http://127.0.0.1:{}", timeout: 50ms, max_events: 300 }}
  loghaul: {{ type: opentelemetry, inputs: [in], protocol: grpc, uri: "http://127.0.0.1:{}", compression: none, timeout: 50ms }}
"#,
        collector.port, receiver.ports.tcp
    ));
    let lines: String = (0..2_000)
        .map(|i| format!("<13>Nov 27 10:00:00 host-{} app: grpc {i}\n", i % 2))
        .collect();
    send_tcp(sender.ports.tcp, lines.as_bytes());
    sender.wait_metric(
        "loghaul_component_sent_events_total",
        "collector",
        None,
        2_000,
    );
    let got = wait_lines(&receiver.out(), 2_000, ARRIVE_TIMEOUT);
    collector.stop();
    let records = collector_records(&out);
    assert_eq!(records.len(), 2_000, "records at the Collector");
    // Requests in flight at once may land in any order: each record once is what counts.
    let number = |text: &str| -> usize {
        text.strip_prefix("grpc ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected message {text}"))
    };
    let mut seen = vec![0u8; 2_000];
    for (r, resource, _) in &records {
        let i = number(r["body"]["stringValue"].as_str().unwrap_or_default());
        seen[i] += 1;
        assert_eq!(r["severityNumber"], 10, "{r}");
        assert_eq!(
            attributes(&resource["attributes"])["host.name"],
            format!("host-{}", i % 2)
        );
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "each record once at the Collector"
    );
    let mut seen = vec![0u8; 2_000];
    for e in &got {
        seen[number(message(e))] += 1;
        assert_eq!(e["severity_number"], 10, "{e}");
        assert_eq!(e["severity_text"], "notice", "{e}");
    }
    assert!(seen.iter().all(|&n| n == 1), "each record once at loghaul");
    assert_eq!(
        sender.metric("loghaul_component_errors_total", "collector", None),
        0
    );
}

/// `protocol: grpc` with an `https://` uri: gRPC over TLS, agreeing on `h2` by ALPN, to the
/// Collector's gRPC receiver (grpc-go refuses a TLS client that offers no `h2`) and to loghaul's
/// own source; the receivers' certificate is verified with the test's CA.
#[test]
fn otlp_sink_grpc_over_tls_reaches_the_collector_and_loghaul() {
    let pki = crate::tls::Pki::new();
    let ca_file = pki.path("ca.crt");
    let (cert, key) = (pki.path("server.crt"), pki.path("server.key"));
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("collector.jsonl");
    let mut collector = Collector::start(
        dir.path(),
        "collector",
        &collector_receiving_with(
            "grpc",
            &format!(
                "        tls:\n          cert_file: \"{}\"\n          key_file: \"{}\"",
                cert.display(),
                key.display()
            ),
            &out,
        ),
    );
    let receiver = Server::start(&config(&pki.listener("")));
    let tls = format!(
        "tls: {{ ca: \"{}\", server_name: localhost }}",
        ca_file.display()
    );
    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: rfc3164 }}
sinks:
  collector: {{ type: opentelemetry, inputs: [in], protocol: grpc, uri: "https://127.0.0.1:{}", timeout: 50ms, {tls} }}
  loghaul: {{ type: opentelemetry, inputs: [in], protocol: grpc, uri: "https://127.0.0.1:{}", timeout: 50ms, {tls} }}
"#,
        collector.port, receiver.ports.tcp
    ));
    let lines: String = (0..1_000)
        .map(|i| format!("<13>Nov 27 10:00:00 host app: tls {i}\n"))
        .collect();
    send_tcp(sender.ports.tcp, lines.as_bytes());
    sender.wait_metric(
        "loghaul_component_sent_events_total",
        "collector",
        None,
        1_000,
    );
    let got = wait_lines(&receiver.out(), 1_000, ARRIVE_TIMEOUT);
    collector.stop();
    let number = |text: &str| -> usize {
        text.strip_prefix("tls ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected message {text}"))
    };
    let mut seen = vec![0u8; 1_000];
    for (r, _, _) in &collector_records(&out) {
        seen[number(r["body"]["stringValue"].as_str().unwrap_or_default())] += 1;
    }
    assert!(
        seen.iter().all(|&n| n == 1),
        "each record once at the Collector"
    );
    let mut seen = vec![0u8; 1_000];
    for e in &got {
        seen[number(message(e))] += 1;
    }
    assert!(seen.iter().all(|&n| n == 1), "each record once at loghaul");
    for sink in ["collector", "loghaul"] {
        assert_eq!(
            sender.metric("loghaul_component_errors_total", sink, None),
            0,
            "{sink}: {}",
            sender.stderr()
        );
    }
}
