//! The agent → deliver → receiver tree, all loghaul, with acknowledgements end to end: a tailing
//! agent forwards to two deliver processes, which forward to two receivers. One receiver, one
//! deliver process and the agent itself are killed (SIGKILL) mid-stream and brought back. Every
//! numbered line must arrive at least once (duplicates are counted and reported), and the
//! agent's checkpoint must never pass a line that had not reached a receiver's file.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

const LINES: u64 = 60_000;
/// Every line is this long (newline included), so a checkpoint offset names a line count.
const LINE_LEN: u64 = 64;

fn line(seq: u64) -> String {
    let s = format!("{:<54} {:08}\n", "tree agent-0 payload", seq);
    debug_assert_eq!(s.len() as u64, LINE_LEN);
    s
}

fn receiver_config(port: u16, out: &Path) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fwd: {{ type: fluent, address: "127.0.0.1:{port}" }}
sinks:
  out: {{ type: file, inputs: [fwd], path: "{}", encoding: json, flush_interval: 50ms }}
"#,
        out.display()
    )
}

fn forward_sink(ports: &[u16]) -> String {
    let servers: Vec<String> = ports
        .iter()
        .map(|p| format!("{{ address: \"127.0.0.1:{p}\" }}"))
        .collect();
    format!(
        "type: fluent, servers: [{}], ack_timeout: 3s, connect_timeout: 1s, reconnect_max_interval: 500ms",
        servers.join(", ")
    )
}

fn deliver_config(port: u16, receivers: &[u16]) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fwd: {{ type: fluent, address: "127.0.0.1:{port}" }}
sinks:
  next: {{ inputs: [fwd], {} }}
"#,
        forward_sink(receivers)
    )
}

fn agent_config(log: &Path, state: &Path, delivers: &[u16]) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tail:
    type: file
    include: ["{}"]
    data_dir: "{}"
    glob_interval: 100ms
    checkpoint_interval: 100ms
sinks:
  up: {{ inputs: [tail], {} }}
"#,
        log.display(),
        state.display(),
        forward_sink(delivers)
    )
}

/// Sequence numbers in every receiver output file under `dir` (files still being written may end
/// in a partial line, which is skipped).
fn received(dir: &Path) -> Vec<u64> {
    let mut seqs = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return seqs;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().ends_with(".jsonl") {
            continue;
        }
        let bytes = fs::read(entry.path()).unwrap_or_default();
        for l in bytes.split(|&b| b == b'\n') {
            if let Ok(v) = serde_json::from_slice::<Value>(l) {
                seqs.push(trailing_number(message(&v)));
            }
        }
    }
    seqs
}

/// The agent's checkpointed offset of its file, if a checkpoint was written.
fn checkpoint_offset(state: &Path) -> Option<u64> {
    let doc: Value =
        serde_json::from_slice(&fs::read(state.join("checkpoints.json")).ok()?).ok()?;
    doc["files"].as_array()?.first()?["offset"].as_u64()
}

#[test]
fn every_line_arrives_through_the_tree_while_nodes_are_killed() {
    let shared = tempfile::tempdir().expect("tempdir");
    let log = shared.path().join("agent.log");
    let state = shared.path().join("agent-state");
    let outs = shared.path().join("received");
    fs::create_dir_all(&outs).expect("mkdir");
    fs::File::create(&log).expect("create log");

    let r_ports = [free_tcp_port(), free_tcp_port()];
    let d_ports = [free_tcp_port(), free_tcp_port()];
    let out_file = |name: &str| -> PathBuf { outs.join(format!("{name}.jsonl")) };
    let mut r0 = Server::start(&receiver_config(r_ports[0], &out_file("r0-a")));
    let r1 = Server::start(&receiver_config(r_ports[1], &out_file("r1")));
    let mut d0 = Server::start(&deliver_config(d_ports[0], &r_ports));
    let d1 = Server::start(&deliver_config(d_ports[1], &r_ports));
    let mut agent = Server::start(&agent_config(&log, &state, &d_ports));

    // The writer appends 1,000 lines every 100ms while the nodes are killed and restarted.
    let mut writer = fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("open log");
    let mut violations: Vec<String> = Vec::new();
    let mut next = 0u64;
    let mut step = 0u32;
    while next < LINES {
        let mut chunk = String::with_capacity(1000 * LINE_LEN as usize);
        for seq in next..(next + 1000).min(LINES) {
            chunk.push_str(&line(seq));
        }
        writer.write_all(chunk.as_bytes()).expect("append");
        next = (next + 1000).min(LINES);
        step += 1;
        match step {
            10 => {
                r0.signal("KILL");
                r0.wait_exit(STOP_TIMEOUT);
            }
            20 => r0 = Server::start(&receiver_config(r_ports[0], &out_file("r0-b"))),
            25 => {
                d0.signal("KILL");
                d0.wait_exit(STOP_TIMEOUT);
            }
            35 => d0 = Server::start(&deliver_config(d_ports[0], &r_ports)),
            40 => {
                agent.signal("KILL");
                agent.wait_exit(STOP_TIMEOUT);
            }
            45 => agent = Server::start(&agent_config(&log, &state, &d_ports)),
            _ => {}
        }
        // The checkpoint may only cover lines already written by a receiver: read it first,
        // then what the receivers hold.
        if step.is_multiple_of(5)
            && let Some(offset) = checkpoint_offset(&state)
        {
            let covered = offset / LINE_LEN;
            let got = received(&outs);
            let (counts, _) = tally(&got, LINES);
            if let Some(missing) = (0..covered).find(|&i| counts[i as usize] == 0) {
                violations.push(format!(
                    "step {step}: checkpoint at line {covered}, but line {missing} had not reached a receiver"
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(writer);

    // At least once: wait until every number is in some receiver's file.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = received(&outs);
    loop {
        let (counts, _) = tally(&got, LINES);
        if counts.iter().all(|&c| c > 0) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        got = received(&outs);
    }
    let (counts, out_of_range) = tally(&got, LINES);
    let missing: Vec<u64> = (0..LINES).filter(|&i| counts[i as usize] == 0).collect();
    let duplicates: u64 = counts.iter().map(|&c| u64::from(c.saturating_sub(1))).sum();
    let mut per_file: HashMap<String, usize> = HashMap::new();
    for entry in fs::read_dir(&outs).expect("read outs").flatten() {
        let n = fs::read(entry.path())
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0);
        per_file.insert(entry.file_name().to_string_lossy().into_owned(), n);
    }
    println!(
        "tree: {} events for {LINES} lines, {duplicates} duplicates (resent after the kills), per receiver file: {per_file:?}",
        got.len()
    );
    assert!(
        missing.is_empty(),
        "{} lines never arrived (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        out_of_range.is_empty(),
        "unexpected numbers {out_of_range:?}"
    );
    assert!(violations.is_empty(), "{violations:#?}");
    // Both receivers took part, and the restarted one too.
    for name in ["r0-a.jsonl", "r1.jsonl"] {
        assert!(
            per_file.get(name).copied().unwrap_or(0) > 0,
            "{name} got nothing"
        );
    }
    // Once everything arrived, the checkpoint reaches the end of the file.
    let deadline = Instant::now() + Duration::from_secs(20);
    while checkpoint_offset(&state) != Some(LINES * LINE_LEN) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(checkpoint_offset(&state), Some(LINES * LINE_LEN));
    agent.finish();
    d0.finish();
    d1.finish();
    r0.finish();
    r1.finish();
}
