//! The live console in a real browser: Debian's chromium, headless, driven through
//! chromium-driver by Selenium (tests/clients/python/console.py), as a person at 2 a.m. would
//! use it: a wrong token shows nothing, the right one shows every component with rates that
//! move, and the tap panel streams events. The screenshot is kept in
//! `target/test-artifacts/console.png`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

#[test]
fn the_console_shows_every_component_with_moving_rates_and_a_wrong_token_gets_nothing() {
    let mut server = Server::start_answering(&routed_config(", token: \"s3cret-token\""));
    let port = server.ports.tcp;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut s = connect(port);
            let mut i = 0u64;
            // Bounded: at most 90 s, a rate that changes from one second to the next.
            for round in 0..900u64 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut chunk = String::new();
                for _ in 0..(500 + (round % 7) * 300) {
                    let pri = if i.is_multiple_of(3) { 11 } else { 13 };
                    chunk.push_str(&format!("<{pri}>Oct 11 22:14:15 host app: load {i}\n"));
                    i += 1;
                }
                s.write_all(chunk.as_bytes()).expect("send load");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("create target/test-artifacts");
    let screenshot = artifacts.join("console.png");
    let _ = std::fs::remove_file(&screenshot);
    let python =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python/.venv/bin/python");
    assert!(
        python.exists(),
        "the Python clients are not installed: run scripts/install-clients.sh"
    );
    let out = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python/console.py"))
        .arg(format!("http://127.0.0.1:{}/", server.ports.api))
        .arg("s3cret-token")
        .arg(&screenshot)
        .args(["in", "sev", "out"])
        .output()
        .expect("run console.py (scripts/install-clients.sh installs Selenium)");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().expect("the load thread");
    assert!(
        out.status.success(),
        "console.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).expect("console.py prints JSON");
    // A wrong token: told so, and nothing of the pipeline shown.
    assert!(
        seen["wrong_token_alert"]
            .as_str()
            .unwrap_or("")
            .contains("refused"),
        "{seen}"
    );
    assert_eq!(seen["wrong_token_rows"], 0, "{seen}");
    assert_eq!(seen["wrong_token_nodes"], 0, "{seen}");
    // Every component of the running configuration, in the graph and in the table.
    let mut nodes: Vec<&str> = seen["graph_nodes"]
        .as_array()
        .expect("graph nodes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["in", "out", "sev"], "{seen}");
    let edges = seen["edges"].to_string();
    for edge in ["in>sev", "sev.errors>out", "sev._unmatched>out"] {
        assert!(edges.contains(edge), "edge {edge}: {edges}");
    }
    // Rates that are not zero and that move between two reads.
    let rates: Vec<&str> = seen["rates"]
        .as_array()
        .expect("two rates")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(rates.len(), 2, "{seen}");
    assert!(rates.iter().all(|r| *r != "0"), "{seen}");
    assert_ne!(rates[0], rates[1], "the rates move: {seen}");
    assert!(
        seen["tap_first"].as_str().unwrap_or("").contains("load "),
        "{seen}"
    );
    assert!(
        std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot in {}",
        screenshot.display()
    );
    server.stop();
}
