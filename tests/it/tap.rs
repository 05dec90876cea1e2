//! `loghaul tap`: live events from a running server's outputs through its API, sampled so the
//! pipeline never waits for a viewer.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

fn tap(server: &Server, args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg("tap")
        .arg("--api")
        .arg(format!("http://127.0.0.1:{}", server.ports.api))
        .args(args)
        .env_remove("LOGHAUL_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn loghaul tap")
}

#[test]
fn tap_prints_sampled_events_of_a_named_output_that_match_its_condition() {
    let mut server = Server::start(&routed_config(""));
    let mut child = tap(
        &server,
        &[
            "sev.errors",
            "--condition",
            r#"ends_with(string!(.message), "7")"#,
            "--limit",
            "3",
        ],
    );
    // The tap attaches when the API takes the request: send until it has seen its three.
    let mut s = connect(server.ports.tcp);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0u64;
    while child.try_wait().expect("poll the tap").is_none() {
        assert!(
            Instant::now() < deadline,
            "the tap did not end at its limit"
        );
        let mut chunk = String::new();
        for _ in 0..100 {
            // Odd numbers are errors, even ones notices.
            let pri = if i % 2 == 1 { 11 } else { 13 };
            chunk.push_str(&format!("<{pri}>Oct 11 22:14:15 host app: msg {i}\n"));
            i += 1;
        }
        s.write_all(chunk.as_bytes()).expect("send events");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("the tap's output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in &lines {
        assert_eq!(l["output"], "sev.errors");
        assert_eq!(l["event"]["severity"], "err");
        assert!(message(&l["event"]).ends_with('7'), "{l}");
    }
    // Asked for an output that does not exist: refused, naming the ones that do.
    let refused = tap(&server, &["nope"]).wait_with_output().expect("run tap");
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(
        text.contains("sev.errors") && text.contains("nope"),
        "{text}"
    );
    server.stop();
}

#[test]
fn tapping_everything_under_load_changes_nothing_else_and_shows_what_it_skipped() {
    const CONNECTIONS: u64 = 4;
    const PER_CONNECTION: u64 = 50_000;
    let mut server = Server::start(&routed_config(""));
    let mut child = tap(&server, &["--rate", "50/s", "--format", "logfmt"]);
    // Wait until the tap is attached (one event shows it).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        send_tcp(server.ports.tcp, line3164("probe").as_bytes());
        std::thread::sleep(Duration::from_millis(200));
        if server.metric("loghaul_component_sent_events_total", "in", None) > 0
            && std::fs::metadata(server.out()).is_ok_and(|m| m.len() > 0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "nothing arrived");
    }
    let senders: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let port = server.ports.tcp;
            std::thread::spawn(move || {
                let mut payload = Vec::new();
                for i in 0..PER_CONNECTION {
                    let seq = c * PER_CONNECTION + i;
                    payload.extend_from_slice(line3164(&format!("load seq {seq}")).as_bytes());
                }
                send_tcp(port, &payload);
            })
        })
        .collect();
    for s in senders {
        s.join().expect("a sender");
    }
    // Every event once in the file, tapped or not.
    let total = (CONNECTIONS * PER_CONNECTION) as usize;
    let mut seen = vec![0u8; total];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        seen.iter_mut().for_each(|c| *c = 0);
        for_each_written_line(&server.out(), |e| {
            if let Some(n) = message(&e).strip_prefix("load seq ") {
                let n: usize = n.parse().expect("a number");
                seen[n] = seen[n].saturating_add(1);
            }
        });
        if seen.iter().all(|&c| c >= 1) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every event once, tapped or not"
    );
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("stop the tap");
    let out = child.wait_with_output().expect("the tap's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.lines().count() >= 1, "the tap printed events");
    assert!(
        stdout.lines().all(|l| l.starts_with("output=")),
        "logfmt lines: {}",
        tail(&stdout, 500)
    );
    assert!(
        stderr.contains("skipped"),
        "the skipped count is shown: {stderr}"
    );
    server.stop();
}
