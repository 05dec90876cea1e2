//! Debian's rsyslogd, with its own private config, relays 100,000 numbered
//! messages to loghaul with omfwd over TCP: all arrive, none twice.
//!
//! ```text
//! test ──TCP──▶ rsyslogd (imptcp, private config) ──omfwd TCP──▶ loghaul ──▶ out.jsonl
//! ```
//!
//! rsyslogd runs as an ordinary foreground child (`-n -f CONF -i PIDFILE`) with a private work
//! directory, never as a system service; it is killed when the test ends, pass or fail.

use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

const RSYSLOGD: &str = "/usr/sbin/rsyslogd";
const MESSAGES: u64 = 100_000;

/// A private rsyslogd child process.
pub struct Rsyslog {
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rsyslog {
    /// Starts rsyslogd listening on 127.0.0.1:`port` (imptcp) and forwarding everything to
    /// 127.0.0.1:`target` with omfwd over TCP, behind a queue big enough for the whole test and
    /// retrying forever, so nothing is lost inside rsyslog itself.
    fn start(port: u16, target: u16) -> Rsyslog {
        Rsyslog::relay(port, target, "", "")
    }

    /// As [`Rsyslog::start`], with `global` added to its `global()` statement and `action` to
    /// its omfwd action (the stream driver settings of a relay over TLS).
    pub fn relay(port: u16, target: u16, global: &str, action: &str) -> Rsyslog {
        assert!(
            std::path::Path::new(RSYSLOGD).exists(),
            "{RSYSLOGD} is missing: run scripts/install-peers.sh (as root) to install rsyslog from Debian"
        );
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-rsyslog-")
            .tempdir()
            .expect("temp dir");
        let work = dir.path().join("work");
        fs::create_dir_all(&work).expect("mkdir work");
        let conf = dir.path().join("rsyslog.conf");
        fs::write(
            &conf,
            format!(
                r#"global(workDirectory="{work}" maxMessageSize="64k"{global})
module(load="imptcp")
main_queue(queue.type="LinkedList" queue.size="300000")
input(type="imptcp" address="127.0.0.1" port="{port}" ruleset="relay")
ruleset(name="relay") {{
  action(type="omfwd" target="127.0.0.1" port="{target}" protocol="tcp"
         queue.type="LinkedList" queue.size="300000" queue.dequeueBatchSize="1024"
         action.resumeRetryCount="-1" action.resumeInterval="1"{action})
}}
"#,
                work = work.display()
            ),
        )
        .expect("write rsyslog.conf");
        let log = dir.path().join("rsyslogd.log");
        let child = Command::new(RSYSLOGD)
            .arg("-n")
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(dir.path().join("rsyslogd.pid"))
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).expect("log file"))
            .stderr(fs::File::create(dir.path().join("rsyslogd.stderr")).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {RSYSLOGD}: {e}"));
        let mut r = Rsyslog {
            child: Some(child),
            log,
            _dir: dir,
        };
        r.wait_listening(port);
        r
    }

    pub fn output(&self) -> String {
        let mut s = fs::read_to_string(&self.log).unwrap_or_default();
        if let Some(dir) = self.log.parent() {
            s.push_str(&fs::read_to_string(dir.join("rsyslogd.stderr")).unwrap_or_default());
        }
        s
    }

    fn wait_listening(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..1000 {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "rsyslogd exited during start with {status}:\n{}",
                    self.output()
                );
            }
            // An empty probe connection is harmless to imptcp.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "rsyslogd does not listen on {addr} after 20s:\n{}",
            self.output()
        );
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- rsyslogd output ---\n{}", tail(&self.output(), 8000));
        }
    }
}

#[test]
fn rsyslog_relays_100k_messages_exactly_once() {
    let server = Server::start(&syslog_config(""));
    let rsyslog_port = free_tcp_port();
    let rsyslog = Rsyslog::start(rsyslog_port, server.ports.tcp);

    // One connection, large writes: what a busy relay client does.
    let mut payload = Vec::with_capacity(4 << 20);
    for n in 0..MESSAGES {
        payload.extend_from_slice(line3164(&format!("msg {n}")).as_bytes());
    }
    let mut s = connect(rsyslog_port);
    for chunk in payload.chunks(256 * 1024) {
        s.write_all(chunk).expect("write to rsyslogd");
    }
    drop(s);

    let lines = wait_raw_lines(&server.out(), MESSAGES as usize, Duration::from_secs(120));
    let mut numbers = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let e = parse_line(line);
        if i == 0 {
            // rsyslog's default forward template: <PRI>TIMESTAMP HOSTNAME TAG MSG.
            assert_eq!(
                e["hostname"],
                json!("host"),
                "hostname after the relay: {e}"
            );
            assert_eq!(e["appname"], json!("app"), "appname after the relay: {e}");
            assert_eq!(
                e["facility"],
                json!("user"),
                "facility after the relay: {e}"
            );
            assert_eq!(
                e["severity"],
                json!("notice"),
                "severity after the relay: {e}"
            );
            assert_eq!(e["source_ip"], json!("127.0.0.1"), "source_ip: {e}");
        }
        let msg = message(&e);
        assert!(msg.starts_with("msg "), "unexpected message {msg:?} in {e}");
        assert!(flags(&e).is_empty(), "no flags expected: {e}");
        numbers.push(trailing_number(msg));
    }
    assert_each_once(&numbers, MESSAGES, "rsyslog relay");
    drop(rsyslog);
    assert_eq!(
        server.metric("loghaul_component_sent_events_total", "out", None),
        MESSAGES,
        "file sink sent_events"
    );
    server.finish();
}
