//! TLS on loghaul's listeners and clients, driven by real TLS clients: OpenSSL's `s_client`,
//! rsyslog forwarding with its GnuTLS stream driver, npm's `@fluent-org/logger`, curl, and
//! loghaul's own fluent sink; mutual TLS with the right CA, another CA and none; certificates
//! rotated under four sending clients; and hostile clients (garbage, a stalled handshake, a
//! reconnect loop, a flood of idle connections from one address).
//!
//! Certificates come from a throwaway CA (`loghaul_tls::pki`), written as PEM files the way an
//! operator's would be.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loghaul_tls::pki::{Ca, Leaf};
use loghaul_tls::rustls;
use serde_json::json;

use crate::harness::*;

/// A CA, the server's certificate (serial 1, for `localhost` and 127.0.0.1) and whatever else a
/// test issues, in one folder.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-pki-")
            .tempdir()
            .expect("temp dir");
        let ca = Ca::new("loghaul test CA").expect("CA");
        ca.write(&dir.path().join("ca.crt")).expect("write CA");
        let pki = Pki { dir, ca };
        pki.issue("server", Leaf::new("localhost").serial(1));
        pki
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn issue(&self, name: &str, leaf: Leaf) {
        self.ca
            .issue(&leaf)
            .expect("issue")
            .write(self.dir.path(), name)
            .expect("write certificate");
    }

    /// The `tls` map of a listener with the server certificate, and `extra` keys.
    pub(crate) fn listener(&self, extra: &str) -> String {
        format!(
            ", tls: {{ cert: \"{}\", key: \"{}\"{extra} }}",
            self.path("server.crt").display(),
            self.path("server.key").display()
        )
    }

    /// A rustls client trusting the CA, with the certificate `name` when given.
    fn client(&self, name: Option<&str>) -> Arc<rustls::ClientConfig> {
        let config = loghaul_tls::TlsConfig {
            ca: Some(self.path("ca.crt")),
            cert: name.map(|n| self.path(&format!("{n}.crt"))),
            key: name.map(|n| self.path(&format!("{n}.key"))),
            ..loghaul_tls::TlsConfig::default()
        };
        let files = loghaul_tls::Files::read(&config).expect("read client files");
        loghaul_tls::build_client(&config, &files).expect("client config")
    }
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `port` whose handshake has finished.
fn tls_connect(port: u16, config: &Arc<rustls::ClientConfig>) -> Result<TlsStream, String> {
    let tcp = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(config.clone(), name).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    Ok(stream)
}

/// The serial number of the certificate the server at `port` presents to a new connection.
fn served_serial(stream: &TlsStream) -> String {
    let certs = stream.conn.peer_certificates().expect("server certificate");
    loghaul_tls::describe(&certs[0]).expect("parses").serial
}

/// `openssl s_client` sending `input` to `port` (closing once it is sent), with `args` added.
fn s_client(port: u16, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", "localhost", "-quiet", "-no_ign_eof"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl is installed (scripts/install-peers.sh)");
    let mut stdin = child.stdin.take().expect("stdin");
    // A refused handshake closes the pipe under us: that is an outcome, not a test failure.
    let _ = stdin.write_all(input);
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().ok().flatten().is_none() {
        assert!(Instant::now() < deadline, "openssl s_client did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("s_client output")
}

/// A plain TCP connection to 127.0.0.1:`port` from the loopback address `from`.
fn connect_from(from: [u8; 4], port: u16) -> Option<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    s.bind(&SocketAddr::from((from, 0)).into()).ok()?;
    s.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .ok()?;
    Some(s)
}

/// RFC 3164 lines `tag N` for `range`.
fn lines(tag: &str, range: std::ops::Range<u64>) -> Vec<u8> {
    range
        .flat_map(|n| line3164(&format!("{tag} {n}")).into_bytes())
        .collect()
}

fn numbers_of(events: &[serde_json::Value]) -> Vec<u64> {
    events.iter().map(|e| trailing_number(message(e))).collect()
}

/// OpenSSL's command-line client delivers syslog over TLS; a client that talks plain TCP to the
/// TLS port gets nothing in and is counted.
#[test]
fn s_client_delivers_syslog_over_tls_and_plain_text_is_refused() {
    let pki = Pki::new();
    let server = Server::start(&syslog_config(&pki.listener("")));
    let ca = pki.path("ca.crt");
    let out = s_client(
        server.ports.tcp,
        &["-CAfile", ca.to_str().expect("utf-8")],
        &lines("tls", 0..100),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("verify return:1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = wait_lines(&server.out(), 100, Duration::from_secs(20));
    assert_each_once(&numbers_of(&events), 100, "s_client over TLS");
    assert_eq!(events[0]["appname"], json!("app"));
    assert!(
        events[0].get("tls_subject").is_none(),
        "no client certificate"
    );

    send_tcp(server.ports.tcp, &lines("plain", 0..10));
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"tls\""),
        1,
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        read_lines(&server.out()).len(),
        100,
        "nothing from the plain client"
    );
    server.finish();
}

/// rsyslog relays 100,000 numbered messages with omfwd over TLS (its GnuTLS stream driver,
/// verifying loghaul's certificate by name): all arrive, none twice.
#[test]
fn rsyslog_relays_100k_messages_over_tls_exactly_once() {
    const N: u64 = 100_000;
    let pki = Pki::new();
    let server = Server::start(&syslog_config(&pki.listener("")));
    let port = free_tcp_port();
    let rsyslog = crate::rsyslog::Rsyslog::relay(
        port,
        server.ports.tcp,
        &format!(
            " DefaultNetstreamDriverCAFile=\"{}\"",
            pki.path("ca.crt").display()
        ),
        " StreamDriver=\"gtls\" StreamDriverMode=\"1\" StreamDriverAuthMode=\"x509/name\" \
         StreamDriverPermittedPeers=\"localhost\"",
    );
    let mut s = connect(port);
    s.write_all(&lines("relay", 0..N))
        .expect("write to rsyslogd");
    drop(s);
    let events = wait_lines(&server.out(), N as usize, Duration::from_secs(120));
    assert_each_once(&numbers_of(&events), N, "rsyslog over TLS");
    assert_eq!(events[0]["hostname"], json!("host"), "{}", events[0]);
    drop(rsyslog);
    server.finish();
}

/// The forward protocol over TLS, from npm's `@fluent-org/logger` (its `tls` option, with acks)
/// and from loghaul's own `fluent` sink.
#[test]
fn forward_over_tls_from_the_npm_logger_and_the_fluent_sink() {
    let pki = Pki::new();
    let receiver = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: fluent, address: "127.0.0.1:{{TCP}}"{} }}
sinks:
  out: {{ type: file, inputs: [in], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        pki.listener("")
    ));
    let ca = pki.path("ca.crt");
    let sent = run_bounded(
        crate::forward_clients::node_script("send.mjs")
            .args(["--port", &receiver.ports.tcp.to_string()])
            .args(["--tag", "node.tls", "--count", "1000", "--run", "tls"])
            .args(["--mode", "PackedForward", "--ack", "--batch", "100"])
            .args([
                "--tls-ca",
                ca.to_str().expect("utf-8"),
                "--servername",
                "localhost",
            ]),
        Duration::from_secs(60),
    );
    assert!(sent.status.success(), "{}", output_text(&sent));
    assert!(output_text(&sent).contains("\"tls\":true"));
    let events = wait_lines(&receiver.out(), 1000, Duration::from_secs(30));
    let mut ns: Vec<u64> = events.iter().filter_map(|e| e["n"].as_u64()).collect();
    ns.sort_unstable();
    assert_eq!(ns, (0..1000).collect::<Vec<_>>());

    let sender = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
sinks:
  up: {{ type: fluent, inputs: [in], servers: [{{ address: "127.0.0.1:{}" }}], tls: {{ ca: "{}", server_name: localhost }} }}
"#,
        receiver.ports.tcp,
        ca.display()
    ));
    send_tcp(sender.ports.tcp, &lines("sink", 0..1000));
    let events = wait_lines(&receiver.out(), 2000, Duration::from_secs(30));
    let from_sink: Vec<u64> = events
        .iter()
        .filter(|e| e.get("appname") == Some(&json!("app")))
        .map(|e| trailing_number(message(e)))
        .collect();
    assert_each_once(&from_sink, 1000, "fluent sink over TLS");
    sender.finish();
    receiver.finish();
}

/// A server certificate made as Fluentd's users make theirs (`openssl req -x509`: self-signed,
/// `CA:TRUE`, the host in the common name only), given to the `fluent` sink as its `ca`, is
/// trusted as it is. The sink ends its TLS connections with a close_notify (the receiver sees
/// a clean end, no read error), and a sink the receiver refuses (a wrong shared key) logs the
/// reason the PONG gave.
#[test]
fn fluent_sink_pins_an_openssl_self_signed_certificate_closes_cleanly_and_logs_a_refusal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = (dir.path().join("self.crt"), dir.path().join("self.key"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        ])
        .args(["-subj", "/CN=fluentd.example"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed (scripts/install-peers.sh)");
    assert!(made.status.success(), "{}", output_text(&made));
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .expect("openssl x509");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"),
        "openssl req -x509 made no CA:TRUE certificate: the case this test is about"
    );
    let receiver_config = format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: fluent, address: "127.0.0.1:{{TCP}}", shared_key: right, tls: {{ cert: "{}", key: "{}" }} }}
sinks:
  out: {{ type: file, inputs: [in], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        cert.display(),
        key.display()
    );
    // It works, but not with every client: validate says so, and why.
    let (valid, said) = validate(&receiver_config);
    assert!(valid, "{said}");
    assert!(
        said.contains("CA:TRUE") && said.contains("no subject alternative names"),
        "{said}"
    );
    let receiver = Server::start(&receiver_config);
    let sender = |shared_key: &str| {
        Server::spawn(&format!(
            r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
sinks:
  up: {{ type: fluent, inputs: [in], servers: [{{ address: "127.0.0.1:{}" }}], shared_key: {shared_key}, self_hostname: sender, require_ack: true, tls: {{ ca: "{}" }} }}
"#,
            receiver.ports.tcp,
            cert.display()
        ))
    };
    let mut good = sender("right");
    good.wait_healthy(Duration::from_secs(20))
        .expect("the sink shakes hands with the pinned server");
    send_tcp(good.ports.tcp, &lines("pinned", 0..1000));
    let events = wait_lines(&receiver.out(), 1000, Duration::from_secs(30));
    let got: Vec<u64> = events.iter().map(|e| trailing_number(message(e))).collect();
    assert_each_once(
        &got,
        1000,
        "fluent sink to a pinned self-signed certificate",
    );
    good.stop();
    receiver.wait_metric_eq("loghaul_open_connections", "in", None, 0);
    assert_eq!(
        receiver.metric("loghaul_component_errors_total", "in", None),
        0,
        "the sink's close must be clean (close_notify):\n{}",
        receiver.stderr()
    );

    let refused = sender("wrong");
    refused.wait_api(Duration::from_secs(20));
    send_tcp(refused.ports.tcp, &lines("refused", 0..10));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !refused.stderr().contains("shared_key mismatch") {
        assert!(
            Instant::now() < deadline,
            "the sink does not log the PONG's reason:\n{}",
            refused.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    receiver.finish();
}

/// `http_server` over TLS with curl (`--cacert`), over HTTP/1.1 and HTTP/2 (agreed by ALPN),
/// and with a client certificate whose subject lands in the events.
#[test]
fn http_server_over_tls_with_curl() {
    let pki = Pki::new();
    pki.issue("agent", Leaf::new("agent-7").organization("Example"));
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: http_server, address: "127.0.0.1:{{TCP}}", paths: ["/in"]{} }}
sinks:
  out: {{ type: file, inputs: [in], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        pki.listener(&format!(", ca: \"{}\"", pki.path("ca.crt").display()))
    ));
    let url = format!("https://localhost:{}/in", server.ports.tcp);
    let ca = pki.path("ca.crt");
    let curl = |extra: &[&str], n: u64| {
        let out = run_bounded(
            Command::new("curl")
                .args([
                    "-sS",
                    "--fail-with-body",
                    "--cacert",
                    ca.to_str().expect("utf-8"),
                ])
                .args([
                    "--resolve",
                    &format!("localhost:{}:127.0.0.1", server.ports.tcp),
                ])
                .args(["-H", "content-type: application/json"])
                .args(["-d", &format!("{{\"message\":\"curl {n}\"}}")])
                .args(extra)
                .arg(&url),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "curl {extra:?}: {}",
            output_text(&out)
        );
        assert!(
            output_text(&out).contains("\"accepted\":1"),
            "{}",
            output_text(&out)
        );
    };
    curl(&["--http1.1"], 0);
    curl(&["--http2"], 1);
    let (cert, key) = (pki.path("agent.crt"), pki.path("agent.key"));
    curl(
        &[
            "--cert",
            cert.to_str().expect("utf-8"),
            "--key",
            key.to_str().expect("utf-8"),
        ],
        2,
    );
    let events = wait_lines(&server.out(), 3, Duration::from_secs(20));
    assert_each_once(&numbers_of(&events), 3, "curl over TLS");
    let with_cert = find_message(&events, "curl 2");
    // RFC 4514, as documented: no space after the comma.
    assert_eq!(
        with_cert["tls_subject"],
        json!("CN=agent-7,O=Example"),
        "{with_cert}"
    );
    assert!(find_message(&events, "curl 0").get("tls_subject").is_none());

    // Plain HTTP to the TLS port: refused in the handshake, counted.
    let plain = run_bounded(
        Command::new("curl")
            .args(["-sS", "-d", "{}"])
            .arg(format!("http://127.0.0.1:{}/in", server.ports.tcp)),
        Duration::from_secs(30),
    );
    assert!(!plain.status.success());
    server.wait_metric(
        "loghaul_component_errors_total",
        "in",
        Some("kind=\"tls\""),
        1,
    );
    server.finish();
}

/// `http_server` over TLS, where hyper holds an HTTP/1.1 connection for its whole life and its
/// header timer both cuts off a slow client and closes a keep-alive connection idle between
/// requests: a client silent after its handshake is counted as `errors_total{kind="timeout"}`,
/// one that idles out after a request is closed too but not counted.
#[test]
fn http_server_over_tls_counts_slow_clients_but_not_idle_keep_alive() {
    let pki = Pki::new();
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: http_server, address: "127.0.0.1:{{TCP}}", request_timeout: 500ms{} }}
sinks:
  out: {{ type: file, inputs: [in], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        pki.listener("")
    ));
    let client = pki.client(None);
    let mut silent = tls_connect(server.ports.tcp, &client).expect("handshake");
    let mut kept = tls_connect(server.ports.tcp, &client).expect("handshake");
    let body = r#"{"message":"kept"}"#;
    write!(
        kept,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write a request");
    // Both are read to their end: the server closes each after request_timeout (a TLS stream
    // closed without close_notify ends in an error, which is an end as well).
    let to_end = |s: &mut TlsStream| {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    let answer = to_end(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(to_end(&mut silent), "", "the silent client got an answer");
    let timeouts = Some("kind=\"timeout\"");
    server.wait_metric_eq("loghaul_component_errors_total", "in", timeouts, 1);
    assert_eq!(
        server.metric("loghaul_component_errors_total", "in", None),
        1,
        "only the silent client is an error"
    );
    server.finish();
}

/// Mutual TLS: a client certificate from the right CA is accepted and its subject is on every
/// event (and routes them: the file path names it); one from another CA, and none at all, are
/// refused in the handshake and counted.
#[test]
fn mutual_tls_accepts_the_right_ca_and_refuses_others() {
    let pki = Pki::new();
    pki.issue("agent", Leaf::new("agent-7"));
    let stranger = Ca::new("another CA").expect("CA");
    stranger
        .issue(&Leaf::new("intruder"))
        .expect("issue")
        .write(pki.dir.path(), "intruder")
        .expect("write");
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}"{} }}
sinks:
  out: {{ type: file, inputs: [in], path: "{{DIR}}/by-client/{{{{ tls_subject }}}}.jsonl", flush_interval: 50ms }}
"#,
        pki.listener(&format!(
            ", ca: \"{}\", verify_client: true",
            pki.path("ca.crt").display()
        ))
    ));
    let port = server.ports.tcp;
    let ca = pki.path("ca.crt");
    let ca = ca.to_str().expect("utf-8");
    let as_client = |name: &str| {
        let (cert, key) = (
            pki.path(&format!("{name}.crt")),
            pki.path(&format!("{name}.key")),
        );
        vec![
            "-CAfile".to_owned(),
            ca.to_owned(),
            "-cert".to_owned(),
            cert.display().to_string(),
            "-key".to_owned(),
            key.display().to_string(),
        ]
    };
    let args = as_client("agent");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    s_client(port, &args, &lines("mtls", 0..50));
    // Field values in paths keep only [A-Za-z0-9._-]; `CN=agent-7` becomes `CN_agent-7`.
    let dir = server.path("by-client");
    let deadline = Instant::now() + Duration::from_secs(20);
    let file = loop {
        let found = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok);
        if let Some(f) = found {
            break f.path();
        }
        assert!(Instant::now() < deadline, "no file under {}", dir.display());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        file.to_string_lossy().contains("agent-7"),
        "routed by subject: {}",
        file.display()
    );
    let events = wait_lines(&file, 50, Duration::from_secs(20));
    assert_each_once(&numbers_of(&events), 50, "mutual TLS");
    assert!(
        events
            .iter()
            .all(|e| e["tls_subject"] == json!("CN=agent-7"))
    );

    let refused_before =
        server.metric("loghaul_component_errors_total", "in", Some("kind=\"tls\""));
    let intruder = as_client("intruder");
    let intruder: Vec<&str> = intruder.iter().map(String::as_str).collect();
    s_client(port, &intruder, &lines("intruder", 0..5));
    s_client(port, &["-CAfile", ca], &lines("anonymous", 0..5));
    // And a rustls client: the refusal is in the handshake itself.
    let refused = tls_connect(port, &pki.client(Some("intruder"))).and_then(|mut s| {
        s.write_all(b"x\n").map_err(|e| e.to_string())?;
        s.flush().map_err(|e| e.to_string())?;
        let mut buf = [0u8; 1];
        match s.read(&mut buf) {
            Ok(0) => Err("closed".to_owned()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    });
    assert!(refused.is_err(), "a certificate from another CA is refused");
    server.wait_metric(
        "loghaul_component_errors_total",
        "in",
        Some("kind=\"tls\""),
        refused_before + 3,
    );
    std::thread::sleep(Duration::from_millis(300));
    let files = std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(files, 1, "nothing from refused clients");
    server.finish();
}

/// The certificate is replaced (cert and key, by rename) while four clients keep sending over
/// connections they opened before: new connections get the new certificate (by serial), the
/// old ones go on to the end, and nothing is lost. A broken replacement keeps the good one.
#[test]
fn rotated_certificates_serve_new_connections_while_old_ones_finish() {
    let pki = Pki::new();
    let server = Server::start(&syslog_config(&pki.listener("")));
    let port = server.ports.tcp;
    let client = pki.client(None);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    for c in 0..4u64 {
        let mut stream = tls_connect(port, &client).expect("handshake");
        assert_eq!(served_serial(&stream), "01");
        let (stop, sent) = (stop.clone(), sent.clone());
        senders.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 2_000 {
                let chunk: Vec<u8> = (n..n + 100)
                    .flat_map(|i| line3164(&format!("c{c} {i}")).into_bytes())
                    .collect();
                stream
                    .write_all(&chunk)
                    .expect("the old connection goes on");
                n += 100;
                sent.fetch_add(100, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
            stream.conn.send_close_notify();
            let _ = stream.flush();
            // Read what the server sent (its session tickets, its close) before dropping the
            // socket: a socket closed with unread data sends RST, and the server's kernel then
            // discards what the server had not read yet, the test's last lines among it.
            let _ = stream.sock.shutdown(std::net::Shutdown::Write);
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            n
        }));
    }
    while sent.load(Ordering::Relaxed) < 4_000 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // The operator's rotation: a new certificate and key, each written by rename.
    pki.issue("server", Leaf::new("localhost").serial(2));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stream = tls_connect(port, &client).expect("handshake after the rotation");
        if served_serial(&stream) == "02" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(server.stderr().contains("TLS files changed"));

    // A broken rotation (a certificate without its key): reported, the good one stays.
    let tls_errors = server.metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"tls\""),
    );
    let next = pki
        .ca
        .issue(&Leaf::new("localhost").serial(3))
        .expect("issue");
    std::fs::write(pki.path("server.crt"), next.cert_pem).expect("write");
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"tls\""),
        tls_errors + 1,
    );
    let stream = tls_connect(port, &client).expect("still served");
    assert_eq!(served_serial(&stream), "02");
    drop(stream);

    stop.store(true, Ordering::Relaxed);
    let per_client: Vec<u64> = senders
        .into_iter()
        .map(|t| t.join().expect("sender"))
        .collect();
    let total: u64 = per_client.iter().sum();
    let events = wait_lines(&server.out(), total as usize, Duration::from_secs(30));
    for (c, n) in per_client.iter().enumerate() {
        let mine: Vec<u64> = events
            .iter()
            .map(message)
            .filter(|m| m.starts_with(&format!("c{c} ")))
            .map(trailing_number)
            .collect();
        assert_each_once(&mine, *n, &format!("client {c} across the rotation"));
    }
    server.finish();
}

/// Hostile TLS clients each cost one connection and a counter, and a good client is served
/// all along: garbage instead of a ClientHello, a handshake that stops halfway (cut off by
/// `handshake_timeout`), 200 connections opened and dropped in a tight loop, and a flood of idle
/// connections from one address held to `max_connections_per_client` while another address and
/// another listener go on; that listener lets a silent client go after its `idle_timeout`.
#[test]
fn hostile_tls_clients_cost_a_connection_and_a_counter() {
    let pki = Pki::new();
    let other_port = free_tcp_port();
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", max_connections_per_client: 20{} }}
  plain: {{ type: syslog, mode: tcp, address: "127.0.0.1:{other_port}", idle_timeout: 1s }}
sinks:
  out: {{ type: file, inputs: [tcp_in, plain], path: "{{DIR}}/out.jsonl", flush_interval: 50ms }}
"#,
        pki.listener(", handshake_timeout: 1s")
    ));
    let port = server.ports.tcp;
    let client = pki.client(None);
    let errors = || {
        server.metric(
            "loghaul_component_errors_total",
            "tcp_in",
            Some("kind=\"tls\""),
        )
    };
    let good = |range: std::ops::Range<u64>| {
        let mut s = tls_connect(port, &client).expect("a good client is served");
        s.write_all(&lines("good", range)).expect("write");
        s.conn.send_close_notify();
        let _ = s.flush();
    };
    good(0..10);

    // Garbage.
    let mut g = connect(port);
    g.write_all(&pseudo_random_bytes(7, 4096))
        .expect("write garbage");
    let mut buf = [0u8; 64];
    g.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let _ = g.read(&mut buf);
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"tls\""),
        1,
    );

    // Half a handshake: the first bytes of a TLS record, then silence.
    let mut half = connect(port);
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .expect("write");
    let stalled_at = Instant::now();
    good(10..20);
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let closed = half.read(&mut buf);
    assert!(
        matches!(closed, Ok(0)) || closed.is_err(),
        "closed: {closed:?}"
    );
    assert!(
        stalled_at.elapsed() < Duration::from_secs(8),
        "cut off by handshake_timeout"
    );

    // A reconnect loop, from an address of its own (the limit per client address would
    // otherwise hold the good client back while the loop's connections are being closed).
    let before = errors();
    for _ in 0..200 {
        drop(connect_from([127, 0, 0, 3], port));
    }
    good(20..30);
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"tls\""),
        before + 1,
    );

    // Idle connections from 127.0.0.2: 20 held (until their handshake times out), the rest
    // refused at once, counted; 127.0.0.1 and the other listener are served meanwhile.
    let limit_before = server.metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"connection_limit\""),
    );
    let flood: Vec<socket2::Socket> = (0..60)
        .filter_map(|_| connect_from([127, 0, 0, 2], port))
        .collect();
    assert_eq!(flood.len(), 60, "the kernel accepts them all");
    server.wait_metric(
        "loghaul_component_errors_total",
        "tcp_in",
        Some("kind=\"connection_limit\""),
        limit_before + 40,
    );
    good(30..40);
    send_tcp(other_port, &lines("other", 0..10));
    // A client of the plain listener that says nothing is let go after its idle_timeout.
    let mut quiet = connect(other_port);
    quiet
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let opened = Instant::now();
    assert!(
        matches!(quiet.read(&mut buf), Ok(0)),
        "closed by the server"
    );
    assert!(
        opened.elapsed() < Duration::from_secs(5),
        "{:?}",
        opened.elapsed()
    );
    drop(flood);
    let events = wait_lines(&server.out(), 50, Duration::from_secs(20));
    let good_ns: Vec<u64> = events
        .iter()
        .map(message)
        .filter(|m| m.starts_with("good "))
        .map(trailing_number)
        .collect();
    assert_each_once(&good_ns, 40, "the good client");
    server.finish();
}

/// `loghaul validate` on `config` (rendered into a fresh folder): its exit status and output.
fn validate(config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("loghaul.yaml");
    std::fs::write(&path, render(config, &Ports::new(), dir.path())).expect("write config");
    let out = loghaul(&["validate", "-c", path.to_str().expect("utf-8")]);
    (out.status.success(), output_text(&out))
}

/// What is wrong with TLS material or its place is a `validate` error at the right key, naming
/// the file: a key that does not match its certificate, an expired certificate, a file that
/// cannot be read, `verify_client` without `ca`, and `tls` where no TLS is spoken.
#[test]
fn validate_names_the_tls_file_and_key_that_are_wrong() {
    let pki = Pki::new();
    pki.issue("other", Leaf::new("other"));
    let now = now_unix() as i64;
    pki.issue(
        "old",
        Leaf::new("localhost").valid(now - 10 * 86_400, now - 86_400),
    );
    let p = |name: &str| pki.path(name).display().to_string();
    let syslog = |tls: &str| {
        format!(
            "api: {{ address: \"127.0.0.1:{{API}}\" }}\nsources:\n  in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{{TCP}}\", tls: {tls} }}\nsinks:\n  out: {{ type: blackhole, inputs: [in] }}\n"
        )
    };
    let (ok, text) = validate(&syslog(&format!(
        "{{ cert: \"{}\", key: \"{}\" }}",
        p("server.crt"),
        p("server.key")
    )));
    assert!(ok, "{text}");
    for (tls, want) in [
        (
            format!(
                "{{ cert: \"{}\", key: \"{}\" }}",
                p("server.crt"),
                p("other.key")
            ),
            format!("{}: the key does not match the certificate", p("other.key")),
        ),
        (
            format!(
                "{{ cert: \"{}\", key: \"{}\" }}",
                p("old.crt"),
                p("old.key")
            ),
            format!(
                "{}: the certificate for `CN=localhost` expired",
                p("old.crt")
            ),
        ),
        (
            format!(
                "{{ cert: \"{}\", key: \"{}\" }}",
                p("nope.crt"),
                p("server.key")
            ),
            format!("{}: cannot read", p("nope.crt")),
        ),
        (
            format!(
                "{{ cert: \"{}\", key: \"{}\", verify_client: true }}",
                p("server.crt"),
                p("server.key")
            ),
            "`verify_client` needs `ca`".to_owned(),
        ),
        (
            "{ ca: /x }".to_owned(),
            "a TLS listener needs `cert` and `key`".to_owned(),
        ),
    ] {
        let (ok, text) = validate(&syslog(&tls));
        assert!(!ok && text.contains(&want), "want {want:?} in:\n{text}");
        // Located on the `tls` line.
        assert!(text.contains("loghaul.yaml:3:"), "{text}");
    }
    let (ok, text) = validate(
        "api: { address: \"127.0.0.1:{API}\" }\nsources:\n  in: { type: syslog, mode: udp, address: \"127.0.0.1:{UDP}\", tls: { cert: a, key: b } }\nsinks:\n  out: { type: file, inputs: [in], path: \"{DIR}/o\", tls: { ca: c } }\n",
    );
    assert!(!ok, "{text}");
    assert!(text.contains("`tls` applies to `mode: tcp` only"), "{text}");
    assert!(text.contains("`type: file` does not use TLS"), "{text}");
}

/// The API bound beyond loopback needs a token (or client certificates): `validate` says so.
/// With a token, a request without it is refused (401), and one with it is served.
#[test]
fn the_api_beyond_loopback_needs_and_checks_a_token() {
    let (ok, text) = validate(
        "api: { address: \"0.0.0.0:{API}\" }\nsources:\n  in: { type: syslog, mode: tcp, address: \"127.0.0.1:{TCP}\" }\nsinks:\n  out: { type: blackhole, inputs: [in] }\n",
    );
    assert!(!ok, "{text}");
    assert!(
        text.contains("beyond this machine, with no access control"),
        "{text}"
    );
    assert!(text.contains("api.token"), "the hint names the fix: {text}");

    let dir = tempfile::tempdir().expect("temp dir");
    let secret = dir.path().join("api-token");
    std::fs::write(&secret, "api-s3cr3t-7f1c\n").expect("write secret");
    // Not `start`: it waits for /health, which needs the token too.
    let server = Server::start_answering(&format!(
        "api: {{ address: \"0.0.0.0:{{API}}\", token: \"${{file:{}}}\" }}\nsources:\n  in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{{TCP}}\" }}\nsinks:\n  out: {{ type: blackhole, inputs: [in] }}\n",
        secret.display()
    ));
    let request = |auth: Option<&str>| {
        let mut s = connect(server.ports.api);
        let header = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n"
        )
        .expect("write");
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        reply
    };
    assert!(
        request(None).starts_with("HTTP/1.1 401"),
        "{}",
        request(None)
    );
    assert!(request(Some("Bearer wrong")).starts_with("HTTP/1.1 401"));
    let ok = request(Some("Bearer api-s3cr3t-7f1c"));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("loghaul_component_received_events_total"));
    assert!(
        !server.stderr().contains("api-s3cr3t-7f1c"),
        "the token is never logged"
    );
    // Drop the server by hand: `finish` checks health through the API without the token.
    drop(server);
}

/// Secrets given by `${VAR}` and `${file:PATH}` (a fluent shared key, a user's password, an
/// http_server bearer token, the API token, an http sink's password) never appear in
/// `validate` output, in the log at debug level, or in metrics.
#[test]
fn secrets_never_reach_output_logs_or_metrics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("key");
    std::fs::write(&file, "file-s3cr3t-91ab\n").expect("write secret");
    let web = free_tcp_port();
    let config = format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fwd: {{ type: fluent, address: "127.0.0.1:{{TCP}}", shared_key: "${{file:{f}}}", users: [{{ username: u, password: "${{ENV_SECRET}}" }}] }}
  web: {{ type: http_server, address: "127.0.0.1:{web}", auth: {{ bearer: "${{ENV_SECRET}}" }} }}
sinks:
  up: {{ type: http, inputs: [fwd, web], uri: "http://127.0.0.1:9/in", username: u, password: "${{file:{f}}}" }}
"#,
        f = file.display()
    );
    let secrets = ["file-s3cr3t-91ab", "env-s3cr3t-5d2e"];
    let env = [("ENV_SECRET", "env-s3cr3t-5d2e"), ("LOGHAUL_LOG", "debug")];
    let path = dir.path().join("loghaul.yaml");
    std::fs::write(&path, render(&config, &Ports::new(), dir.path())).expect("write");
    let out = run_bounded(
        Command::new(BIN)
            .args(["validate", "-c", path.to_str().expect("utf-8")])
            .envs(env),
        Duration::from_secs(30),
    );
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    // A config with an error elsewhere: the errors are printed, the secrets are not.
    let broken = config.replace("type: http,", "type: http, max_events: 0,");
    std::fs::write(&path, render(&broken, &Ports::new(), dir.path())).expect("write");
    let bad = run_bounded(
        Command::new(BIN)
            .args(["validate", "-c", path.to_str().expect("utf-8")])
            .envs(env),
        Duration::from_secs(30),
    );
    let bad_text = output_text(&bad);
    assert!(
        !bad.status.success() && bad_text.contains("max_events"),
        "{bad_text}"
    );

    let server = Server::start_with_env(&config, &env);
    let metrics = server.metrics_text();
    for secret in secrets {
        for (what, seen) in [
            ("validate", &text),
            ("validate with an error", &bad_text),
            ("the log", &server.stderr()),
            ("stdout", &server.stdout()),
            ("metrics", &metrics),
        ] {
            assert!(!seen.contains(secret), "{secret} in {what}:\n{seen}");
        }
    }
    server.finish();
}
