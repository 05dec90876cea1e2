//! The `kafka` sink and source against a real broker (Apache Kafka 4.3.1, one KRaft node, from
//! `scripts/install-kafka.sh`), with Debian's `kcat` and the broker's own `DumpLogSegments` as
//! independent readers. Every event is numbered, so loss and duplicates are exact.
//!
//! ```text
//! test ─TCP syslog─► loghaul A (kafka sink) ─► broker ─► loghaul B1, B2 (one consumer group) ─► files
//! ```

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use loghaul_bench::kafka::Broker;
use serde_json::Value;

use crate::harness::*;

/// Members of a new group started together join its first rebalance, not one after the other:
/// the broker waits this long for them (by default a test broker does not wait, and a fast first
/// member may read a whole topic before the second has joined).
const GROUP_FORMS: &str = "group.initial.rebalance.delay.ms=3000";

fn broker(dir: &Path, extra: &[&str]) -> Broker {
    Broker::start(&dir.join("broker"), extra)
        .unwrap_or_else(|e| panic!("{e:#} (scripts/install-kafka.sh installs the broker)"))
}

/// Syslog over TCP into a `kafka` sink with `sink` options (a YAML map's inner keys).
fn producer(address: &str, topic: &str, sink: &str) -> Server {
    Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 10s
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  k: {{ type: kafka, inputs: [in], bootstrap_servers: "{address}", topic: "{topic}"{sink} }}
"#
    ))
}

/// A member of consumer group `group` reading `topic` into a JSON-lines file.
fn consumer(address: &str, topic: &str, group: &str) -> Server {
    Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  k: {{ type: kafka, bootstrap_servers: "{address}", group_id: {group}, topics: [{topic}] }}
sinks:
  out: {{ type: file, inputs: [k], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#
    ))
}

/// The numbers of every event in the consumers' files.
fn consumed(servers: &[&Server]) -> Vec<u64> {
    let mut all = Vec::new();
    for s in servers {
        // A consumer that has read nothing yet has no file yet; one that is reading may be in
        // the middle of a line.
        if s.out().exists() {
            for_each_written_line(&s.out(), |v: Value| all.push(trailing_number(message(&v))));
        }
    }
    all
}

/// Waits until every number below `n` was consumed at least once; returns them all.
fn wait_consumed(servers: &[&Server], n: u64, timeout: Duration) -> Vec<u64> {
    let deadline = Instant::now() + timeout;
    loop {
        let got = consumed(servers);
        let (counts, _) = tally(&got, n);
        let missing = counts.iter().filter(|&&c| c == 0).count();
        if missing == 0 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {n} events not consumed after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What `tally` says, checked: none missing, none out of range; returns how many came twice.
fn none_lost(got: &[u64], n: u64, what: &str) -> usize {
    let (counts, out_of_range) = tally(got, n);
    let missing = counts.iter().filter(|&&c| c == 0).count();
    assert!(
        missing == 0 && out_of_range.is_empty(),
        "{what}: {missing} missing, {} out of range",
        out_of_range.len()
    );
    counts.iter().filter(|&&c| c > 1).count()
}

/// Polls `done` until it holds, failing with `what` (and the limit) once `limit` has passed.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 1,000,000 numbered syslog events through the kafka sink, the broker, and a consumer group of
/// two loghaul instances into files: none lost; duplicates reported. Each message carries its
/// topic, partition, offset and key as fields, and the two consumers share the partitions.
#[test]
fn a_million_events_through_kafka_to_a_group_of_two() {
    const N: u64 = 1_000_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let b = broker(dir.path(), &[GROUP_FORMS]);
    let a = producer(
        &b.address(),
        "logs",
        ", key: \"{{ message }}\", compression: lz4",
    );
    let c1 = consumer(&b.address(), "logs", "aggregators");
    let c2 = consumer(&b.address(), "logs", "aggregators");
    let mut conn = connect(a.ports.tcp);
    use std::io::Write as _;
    for chunk in (0..N).step_by(100_000) {
        conn.write_all(&numbered("event", chunk..chunk + 100_000))
            .expect("send");
    }
    drop(conn);
    let got = wait_consumed(&[&c1, &c2], N, Duration::from_secs(240));
    let dups = none_lost(&got, N, "a million through Kafka");
    let one = &read_lines(&c1.out())[0];
    assert_eq!(one["kafka_topic"], "logs", "{one}");
    assert!(
        one["kafka_partition"].is_i64() && one["kafka_offset"].is_i64(),
        "{one}"
    );
    assert_eq!(one["kafka_key"].as_str(), Some(message(one)), "{one}");
    let share = |s: &Server| s.metric("loghaul_component_received_events_total", "k", None);
    let (s1, s2) = (share(&c1), share(&c2));
    assert!(s1 > 0 && s2 > 0, "both members read: {s1} and {s2}");
    assert_eq!(
        a.metric("loghaul_component_sent_events_total", "k", None),
        N
    );
    eprintln!("kafka: {N} events, {dups} delivered twice; the group's members read {s1} and {s2}");
    a.finish();
    c1.finish();
    c2.finish();
}

/// One of two consumers is killed mid-run: the group rebalances, the other reads the rest;
/// nothing is lost (what the dead one had not committed is read again: duplicates, reported).
#[test]
fn a_consumer_killed_mid_run_loses_nothing() {
    const N: u64 = 300_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let b = broker(dir.path(), &[GROUP_FORMS]);
    let a = producer(&b.address(), "logs", "");
    let mut c1 = consumer(&b.address(), "logs", "killable");
    let c2 = consumer(&b.address(), "logs", "killable");
    send_tcp(a.ports.tcp, &numbered("kill", 0..N / 3));
    // The producer gets its idempotence id and the group forms before anything flows: on a busy
    // machine (the whole suite beside the broker) the id alone has taken most of 20 s, and once
    // over 90 s while the broker's coordinator was still loading. Each step has its own limit,
    // so a failure says which did not happen.
    wait_until(
        Duration::from_secs(180),
        "the producer sent nothing",
        || a.metric("loghaul_component_sent_events_total", "k", None) > 0,
    );
    wait_until(
        Duration::from_secs(90),
        "the first consumer read nothing of what the producer sent",
        || c1.metric("loghaul_component_received_events_total", "k", None) > 0,
    );
    c1.signal("KILL");
    c1.wait_exit(Duration::from_secs(10));
    send_tcp(a.ports.tcp, &numbered("kill", N / 3..N));
    let got = wait_consumed(&[&c1, &c2], N, Duration::from_secs(180));
    let dups = none_lost(&got, N, "one consumer killed");
    eprintln!("kafka: a consumer killed; {dups} events delivered twice");
    a.finish();
    c2.finish();
}

/// The broker stops for 30 s while the sink produces with a disk buffer: the backlog waits on
/// disk (the buffer's gauges rise), and once the broker is back every event arrives.
#[test]
fn a_broker_outage_with_a_disk_buffer_loses_nothing() {
    const N: u64 = 200_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut b = broker(dir.path(), &[]);
    let a = producer(
        &b.address(),
        "outage",
        ", queue_max_bytes: 1MiB, buffer: { type: disk, max_size: 256MiB }",
    );
    let c = consumer(&b.address(), "outage", "outage");
    send_tcp(a.ports.tcp, &numbered("outage", 0..N / 4));
    wait_consumed(&[&c], N / 4, Duration::from_secs(60));
    b.stop();
    let down = Instant::now();
    send_tcp(a.ports.tcp, &numbered("outage", N / 4..N));
    a.wait_metric("loghaul_disk_buffer_records", "k", None, 1);
    let deadline = Instant::now() + Duration::from_secs(25);
    let mut backlog = 0;
    while Instant::now() < deadline && backlog < 100_000 {
        backlog = a.metric("loghaul_disk_buffer_bytes", "k", None);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        backlog >= 100_000,
        "the backlog waits on disk: {backlog} bytes"
    );
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down.elapsed()));
    b.start_again().expect("the broker comes back");
    let got = wait_consumed(&[&c], N, Duration::from_secs(180));
    let dups = none_lost(&got, N, "after a 30 s broker outage");
    a.wait_metric_eq("loghaul_disk_buffer_records", "k", None, 0);
    eprintln!("kafka: 30 s outage, {backlog} bytes waited on disk, {dups} delivered twice");
    a.finish();
    c.finish();
}

/// kcat, an independent client, sees the keys and headers the sink set, and the broker's own
/// log dump the compression codec.
#[test]
fn kcat_sees_keys_headers_and_the_codec() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = broker(dir.path(), &[]);
    let a = producer(
        &b.address(),
        "tagged-{{ message }}",
        ", encoding: text, key: \"k-{{ message }}\", compression: zstd, headers: { origin: loghaul, text: \"{{ message }}\" }",
    );
    send_tcp(a.ports.tcp, b"alpha\nalpha\n");
    a.wait_metric("loghaul_component_sent_events_total", "k", None, 2);
    let out = run_bounded(
        Command::new("kcat")
            .args(["-C", "-b", &b.address(), "-t", "tagged-alpha", "-e", "-q"])
            .args(["-f", "%k|%h|%s\n"]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines, ["k-alpha|origin=loghaul,text=alpha|alpha"; 2],
        "{text}"
    );
    let mut dumped = String::new();
    for part in 0..4 {
        let dir = b.data_dir().join(format!("tagged-alpha-{part}"));
        let Some(log) = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "log"))
        else {
            continue;
        };
        let out = run_bounded(
            Broker::tool("org.apache.kafka.tools.DumpLogSegments")
                .args(["--files", log.to_str().expect("utf-8")]),
            Duration::from_secs(60),
        );
        dumped.push_str(&output_text(&out));
    }
    assert!(dumped.contains("compresscodec: zstd"), "{dumped}");
    // loghaul's own consumer sees the same key and headers, here through a disk buffer, which
    // finds nothing damaged in them.
    let c = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  k: {{ type: kafka, bootstrap_servers: "{addr}", group_id: h, topics: [tagged-alpha], decoding: text }}
sinks:
  out: {{ type: file, inputs: [k], path: "{{DIR}}/out.jsonl", flush_interval: 50ms, buffer: {{ type: disk, max_size: 64MiB }} }}
"#,
        addr = b.address()
    ));
    for e in wait_lines(&c.out(), 2, Duration::from_secs(60)) {
        assert_eq!(e["kafka_key"], "k-alpha", "{e}");
        assert_eq!(e["kafka_headers"]["origin"], "loghaul", "{e}");
        assert_eq!(e["kafka_headers"]["text"], "alpha", "{e}");
    }
    assert_eq!(
        c.metric("loghaul_disk_buffer_damaged_records_total", "out", None),
        0
    );
    c.finish();
    a.finish();
}

/// Failures that are the broker's to report, each clear and counted, none stopping the
/// pipeline (a file sink beside the kafka sink gets every event): a topic that does not exist
/// with auto-creation off, and a message over the broker's size limit (the producer's batches
/// kept under it, as they must be), become dead letters; a broker that never answers leaves the
/// sink degraded, holding its events.
#[test]
fn kafka_failures_are_clear_counted_and_the_pipeline_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = broker(
        dir.path(),
        &["auto.create.topics.enable=false", "message.max.bytes=2000"],
    );
    let create = run_bounded(
        Broker::tool("org.apache.kafka.tools.TopicCommand").args([
            "--bootstrap-server",
            &b.address(),
            "--create",
            "--topic",
            "small",
            "--partitions",
            "1",
        ]),
        Duration::from_secs(60),
    );
    assert!(create.status.success(), "{}", output_text(&create));
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    // Accepts and never answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  missing: {{ type: kafka, inputs: [in], bootstrap_servers: "{addr}", topic: nonexistent, idempotence: false, librdkafka_options: {{ topic.metadata.propagation.max.ms: "2000" }} }}
  small: {{ type: kafka, inputs: [in], bootstrap_servers: "{addr}", topic: small, idempotence: false, batch_max_bytes: 1000 }}
  silent: {{ type: kafka, inputs: [in], bootstrap_servers: "127.0.0.1:{silent_port}", topic: x, librdkafka_options: {{ api.version.request.timeout.ms: "2000" }} }}
  file: {{ type: file, inputs: [in], path: "{{DIR}}/out.log", encoding: text, flush_interval: 50ms }}
"#,
        addr = b.address()
    ));
    let big = "x".repeat(5000);
    let mut lines = numbered("ok", 0..100);
    lines.extend_from_slice(format!("{big} 100\n").as_bytes());
    send_tcp(server.ports.tcp, &lines);
    let out = server.path("out.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while written_text(&out).lines().count() < 101 {
        assert!(Instant::now() < deadline, "the file sink gets every event");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The missing topic: every event a dead letter, saying why.
    server.wait_metric("loghaul_dead_letter_events_total", "missing", None, 101);
    let dlq = std::fs::read_to_string(server.path("loghaul-data/dlq/missing.jsonl"))
        .expect("dead letters");
    assert!(dlq.contains("Unknown topic"), "{}", tail(&dlq, 600));
    // The big one refused by the broker, the others delivered.
    server.wait_metric("loghaul_dead_letter_events_total", "small", None, 1);
    let dlq =
        std::fs::read_to_string(server.path("loghaul-data/dlq/small.jsonl")).expect("dead letters");
    assert!(dlq.contains("too large"), "{}", tail(&dlq, 600));
    assert_eq!(dlq.lines().count(), 1, "only the big one");
    let kcat = run_bounded(
        Command::new("kcat").args(["-C", "-b", &b.address(), "-t", "small", "-e", "-q"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        String::from_utf8_lossy(&kcat.stdout).lines().count(),
        100,
        "the others arrived"
    );
    // The silent broker: errors counted, the sink degraded, nothing crashed.
    server.wait_metric(
        "loghaul_component_errors_total",
        "silent",
        Some("kind=\"io\""),
        1,
    );
    let (status, health) = server.health();
    assert_eq!(status, 503, "{health}");
    assert!(health.contains("silent"), "{health}");
    send_tcp(server.ports.tcp, b"still served 1\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("still served 1")
    {
        assert!(Instant::now() < deadline, "the pipeline goes on");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(server);
}

/// TLS and SASL through `librdkafka_options`, as a secured cluster asks for them: the broker's
/// `SASL_SSL` listener (a certificate from a test CA, SASL `PLAIN`) takes the sink's messages and
/// hands them to the source, each verifying the broker against the CA; a sink with a wrong
/// password is refused, counted and degraded with the broker's reason, and never lets the
/// password out into `/health` or the log.
#[test]
fn sasl_over_tls_through_librdkafka_options() {
    use loghaul_tls::pki::{Ca, Leaf};
    const N: u64 = 20_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("loghaul kafka test CA").expect("CA");
    let ca_path = dir.path().join("ca.crt");
    ca.write(&ca_path).expect("write CA");
    let issued = ca.issue(&Leaf::new("localhost")).expect("issue");
    // Kafka's PEM key store: the (unencrypted PKCS#8) key and its certificate in one file.
    let store = dir.path().join("broker.pem");
    std::fs::write(&store, format!("{}\n{}", issued.key_pem, issued.cert_pem)).expect("write");
    let sasl_port = free_tcp_port();
    let listeners = format!(
        "listeners=PLAINTEXT://127.0.0.1:{{port}},CONTROLLER://127.0.0.1:{{controller_port}},\
         SASL_SSL://127.0.0.1:{sasl_port}"
    );
    let advertised = format!(
        "advertised.listeners=PLAINTEXT://127.0.0.1:{{port}},SASL_SSL://127.0.0.1:{sasl_port}"
    );
    let key_store = format!("ssl.keystore.location={}", store.display());
    let b = broker(
        dir.path(),
        &[
            &listeners,
            &advertised,
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_loghaul=\"s3cret-pass\";",
            "ssl.keystore.type=PEM",
            &key_store,
        ],
    );
    let secured = |password: &str| {
        format!(
            "librdkafka_options: {{ security.protocol: SASL_SSL, sasl.mechanisms: PLAIN, \
             sasl.username: loghaul, sasl.password: \"{password}\", ssl.ca.location: \"{}\" }}",
            ca_path.display()
        )
    };
    let address = format!("127.0.0.1:{sasl_port}");
    let a = producer(&address, "secure", &format!(", {}", secured("s3cret-pass")));
    let c = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  k: {{ type: kafka, bootstrap_servers: "{address}", group_id: g, topics: [secure], {} }}
sinks:
  out: {{ type: file, inputs: [k], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        secured("s3cret-pass")
    ));
    send_tcp(a.ports.tcp, &numbered("secure", 0..N));
    let got = wait_consumed(&[&c], N, Duration::from_secs(120));
    let dups = none_lost(&got, N, "over SASL_SSL");
    eprintln!("over SASL_SSL: {N} events, {dups} duplicates");
    // Only the secured listener carried them: the plaintext one is there, and kcat over TLS with
    // the same credentials reads the topic independently of loghaul.
    let kcat = run_bounded(
        Command::new("kcat").args([
            "-C",
            "-b",
            &address,
            "-t",
            "secure",
            "-e",
            "-q",
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=loghaul",
            "-X",
            "sasl.password=s3cret-pass",
            "-X",
            &format!("ssl.ca.location={}", ca_path.display()),
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(
        String::from_utf8_lossy(&kcat.stdout).lines().count() as u64,
        N,
        "kcat over SASL_SSL: {}",
        tail(&output_text(&kcat), 600)
    );
    // A wrong password: refused by the broker, counted, degraded, the secret kept out.
    let wrong = producer(&address, "secure", &format!(", {}", secured("wrong-pass")));
    send_tcp(wrong.ports.tcp, b"never 1\n");
    wrong.wait_metric(
        "loghaul_component_errors_total",
        "k",
        Some("kind=\"io\""),
        1,
    );
    let (status, health) = wrong.health();
    assert_eq!(status, 503, "{health}");
    assert!(health.contains("uthentication"), "{health}");
    assert!(!health.contains("wrong-pass"), "{health}");
    assert!(
        !wrong.stderr().contains("wrong-pass"),
        "the log keeps the password out"
    );
    drop(wrong);
    drop(b);
}
