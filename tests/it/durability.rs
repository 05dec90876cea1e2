//! Fault tests of the durability promises (see docs/durability.md): a downstream that is gone for
//! a minute while events keep coming, a disk buffer damaged on disk between two runs, a disk
//! buffer whose file system fills up, one stalled sink beside a healthy one, and a memory budget
//! under overload. Every event is numbered, so loss and duplicates are counted exactly.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::*;

/// The trailing numbers of a text file's lines.
fn numbers(path: &Path) -> Vec<u64> {
    written_text(path)
        .lines()
        .filter(|l| !l.is_empty())
        .map(trailing_number)
        .collect()
}

/// Waits until every number below `n` is in `path` at least once; returns the numbers.
fn wait_all(path: &Path, n: u64, timeout: Duration) -> Vec<u64> {
    let deadline = Instant::now() + timeout;
    loop {
        let got = numbers(path);
        let (counts, _) = tally(&got, n);
        let missing = counts.iter().filter(|&&c| c == 0).count();
        if missing == 0 {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {n} numbers still missing from {} after {timeout:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A receiver: `fluent` (forward) or `http_server` source into a text file, on a fixed port when
/// given (a restart takes the port its sender knows).
fn receiver(kind: &str, port: Option<u16>, out: &Path) -> String {
    let address = port.map_or_else(
        || "127.0.0.1:{TCP}".to_owned(),
        |p| format!("127.0.0.1:{p}"),
    );
    let source = match kind {
        "fluent" => format!("{{ type: fluent, address: \"{address}\" }}"),
        _ => format!("{{ type: http_server, address: \"{address}\", paths: [\"/in\"] }}"),
    };
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  in: {source}
sinks:
  out: {{ type: file, inputs: [in], path: "{}", encoding: text, flush_interval: 50ms }}
"#,
        out.display()
    )
}

/// A sender: raw syslog over TCP into `sink` (its YAML map, without `inputs`), with `extra`
/// top-level keys.
fn sender(sink: &str, extra: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 3s
{extra}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  up: {{ inputs: [in], {sink} }}
"#
    )
}

fn http_sink(port: u16, buffer: &str) -> String {
    format!(
        "type: http, uri: \"http://127.0.0.1:{port}/in\", encoding: ndjson, retry: {{ initial: 50ms, max: 500ms }}, buffer: {{ {buffer} }}"
    )
}

/// The events of a numbered send through a text pipeline: `message` ends with the number.
fn assert_none_lost(got: &[u64], n: u64, what: &str) -> usize {
    let (counts, out_of_range) = tally(got, n);
    let missing: Vec<u64> = (0..n).filter(|&i| counts[i as usize] == 0).collect();
    assert!(
        missing.is_empty() && out_of_range.is_empty(),
        "{what}: {} missing (first {:?}), {} out of range",
        missing.len(),
        &missing[..missing.len().min(10)],
        out_of_range.len()
    );
    counts.iter().filter(|&&c| c > 1).count()
}

/// The count a log line says: the number after ` events=` on the first line holding `marker`.
fn logged_events(log: &str, marker: &str) -> u64 {
    log.lines()
        .find(|l| l.contains(marker))
        .and_then(|l| l.split(" events=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no `{marker}` with a count in the log:\n{}",
                tail(log, 4000)
            )
        })
}

/// After `a` stopped (its ports held by `hold`): starts a receiver of `kind` on `port`, where
/// `a`'s sink sends, then `a` again. Returns the receiver and the file it writes.
fn restart_with_receiver(
    a: &mut Server,
    hold: PortHold,
    kind: &str,
    port: u16,
) -> (Server, PathBuf) {
    let b = Server::start(&receiver(kind, Some(port), Path::new("{DIR}/out.log")));
    let out = b.path("out.log");
    a.restart();
    drop(hold);
    (b, out)
}

/// The downstream (a second loghaul's `fluent` source) is stopped for 60 s while 300,000 events
/// flow into a `fluent` sink with a disk buffer; it comes back and gets every event. The
/// buffer's backlog rises while it is gone and falls to nothing after.
#[test]
fn disk_buffer_rides_out_a_minute_long_outage_losing_nothing() {
    const N: u64 = 300_000;
    const OUTAGE: Duration = Duration::from_secs(60);
    let mut b = Server::start(&receiver("fluent", None, Path::new("{DIR}/out.log")));
    let out = b.path("out.log");
    let port = b.ports.tcp;
    let a = Server::start(&sender(
        &format!(
            "type: fluent, servers: [{{ address: \"127.0.0.1:{port}\" }}], reconnect_max_interval: 1s, buffer: {{ type: disk, max_size: 256MiB, sync: every_batch }}"
        ),
        "",
    ));
    send_tcp(a.ports.tcp, &numbered("outage", 0..N / 3));
    wait_all(&out, N / 3, Duration::from_secs(60));

    b.stop();
    let down = Instant::now();
    send_tcp(a.ports.tcp, &numbered("outage", N / 3..N));
    // The backlog rises: the events wait on disk, not in memory.
    a.wait_metric("loghaul_disk_buffer_records", "up", None, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut peak_bytes = 0;
    while Instant::now() < deadline {
        peak_bytes = a.metric("loghaul_disk_buffer_bytes", "up", None);
        if peak_bytes > 5 << 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        peak_bytes > 5 << 20,
        "200,000 events wait on disk: {peak_bytes} bytes"
    );
    let backlog = a.metric("loghaul_disk_buffer_records", "up", None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.health().0 != 503 {
        assert!(
            Instant::now() < deadline,
            "the sink reports the outage: {}",
            a.health().1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(OUTAGE.saturating_sub(down.elapsed()));

    let b2 = Server::start(&receiver("fluent", Some(port), &out));
    let got = wait_all(&out, N, Duration::from_secs(120));
    let dups = assert_none_lost(&got, N, "after a 60 s outage");
    // The backlog falls to nothing once the receiver has acknowledged everything, in batches
    // and in events.
    a.wait_metric_eq("loghaul_disk_buffer_records", "up", None, 0);
    a.wait_metric_eq("loghaul_disk_buffer_events", "up", None, 0);
    eprintln!(
        "outage: backlog peaked at >= {backlog} batches ({peak_bytes} bytes on disk); {dups} events delivered twice"
    );
    a.finish();
    b2.finish();
}

/// A memory-buffered sink whose receiver is down when loghaul is stopped: the last part of
/// `shutdown_timeout` writes to disk what the sink holds (retrying) and what waits in its queue,
/// and the next start delivers all of it once the receiver is up. Syslog cannot resend, so
/// anything not written would be lost: every event must arrive.
#[test]
fn a_stop_writes_an_undrained_memory_buffer_to_disk_and_the_next_start_delivers_it() {
    const N: u64 = 20_000;
    let port = free_tcp_port();
    let mut a = Server::start(&sender(
        &format!(
            "type: http, uri: \"http://127.0.0.1:{port}/in\", encoding: ndjson, concurrency: 1, max_events: 100, retry: {{ initial: 50ms, max: 200ms }}, buffer: {{ type: memory, max_events: 100000 }}"
        ),
        "",
    ));
    send_tcp(a.ports.tcp, &numbered("spill", 0..N));
    a.wait_metric("loghaul_component_received_events_total", "in", None, N);
    a.signal("TERM");
    let status = a
        .wait_exit(Duration::from_secs(10))
        .expect("exits within shutdown_timeout");
    // The sink never finished (its request is still failing), but everything it held is on
    // disk: the stop is clean.
    assert!(status.success(), "{status}\n{}", tail(&a.stderr(), 3000));
    let hold = a.hold_ports();
    let spilled = logged_events(&a.stderr(), "wrote it to disk");
    assert!(spilled >= N, "{spilled} of {N} events written to disk");
    let inspect = output_text(&loghaul(&[
        "buffer",
        "inspect",
        a.path("loghaul-data/buffers/up").to_str().unwrap(),
    ]));
    assert!(!inspect.contains("damage"), "{inspect}");

    let (b, out) = restart_with_receiver(&mut a, hold, "http", port);
    let got = wait_all(&out, N, Duration::from_secs(60));
    a.wait_metric_eq("loghaul_disk_buffer_records", "up", None, 0);
    let dups = assert_none_lost(&got, N, "after a stop with the sink down");
    // Duplicates only from what the sink had in hand and partly delivered: none here, since its
    // receiver was down the whole time.
    assert_eq!(dups, 0);
    eprintln!("spill: {spilled} events written to disk at the stop, all delivered after");
    a.finish();
    b.finish();
}

/// A disk-buffered sink whose server is down holds a backlog at SIGTERM: everything is safe in
/// the buffer, so loghaul stops at once (not after `shutdown_timeout`), exits 0 and says how
/// much waits there; the next start, with the server up, delivers the backlog, each event once.
#[test]
fn a_stop_with_a_disk_buffered_backlog_is_clean_and_quick() {
    const N: u64 = 20_000;
    let port = free_tcp_port();
    let mut a = Server::start(
        &sender(&http_sink(port, "type: disk, sync: every_batch"), "")
            .replace("shutdown_timeout: 3s", "shutdown_timeout: 60s"),
    );
    send_tcp(a.ports.tcp, &numbered("backlog", 0..N));
    // Sent into the disk buffer (the sink itself takes no more than its queue holds).
    a.wait_metric("loghaul_component_sent_events_total", "in", None, N);
    let stopping = Instant::now();
    a.signal("TERM");
    let status = a
        .wait_exit(Duration::from_secs(60))
        .expect("exits within shutdown_timeout");
    let took = stopping.elapsed();
    let log = a.stderr();
    assert!(status.success(), "{status}\n{}", tail(&log, 3000));
    assert!(
        took < Duration::from_secs(15),
        "the stop took {took:?} with everything on disk (shutdown_timeout is 60s)"
    );
    let waiting = logged_events(&log, "Stopped with events waiting in the disk buffer");
    assert_eq!(waiting, N, "every event waits in the buffer");
    let hold = a.hold_ports();
    let (b, out) = restart_with_receiver(&mut a, hold, "http", port);
    let got = wait_all(&out, N, Duration::from_secs(60));
    a.wait_metric_eq("loghaul_disk_buffer_records", "up", None, 0);
    let dups = assert_none_lost(&got, N, "after a stop with a disk-buffered backlog");
    assert_eq!(dups, 0, "nothing was in flight: the server was down");
    eprintln!("disk-buffered backlog: stop took {took:?}, all {N} delivered after");
    a.finish();
    b.finish();
}

/// A file source feeding a `fluent` sink whose server is down, with a memory buffer: at the stop
/// the buffer goes to disk and the lines it held are settled for the source, so its checkpoint
/// moves past them. The next start (server up) delivers each line once: what was saved is not
/// read from the file again.
#[test]
fn lines_saved_to_disk_at_a_stop_are_not_read_from_the_file_again() {
    const N: u64 = 20_000;
    let port = free_port_pair();
    // Not healthy: its sink's server is down.
    let mut a = Server::start_answering(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 8s
sources:
  app: {{ type: file, include: ["{{DIR}}/app.log"], read_from: beginning }}
sinks:
  up:
    type: fluent
    inputs: [app]
    servers: [{{ address: "127.0.0.1:{port}" }}]
    require_ack: true
    connect_timeout: 500ms
    reconnect_max_interval: 500ms
    buffer: {{ type: memory, max_events: 100000 }}
"#
    ));
    let lines: String = (0..N).map(|i| format!("file line {i}\n")).collect();
    fs::write(a.path("app.log"), lines).expect("write app.log");
    // Every line read and queued for the sink (which takes from its queue only what it can send:
    // its server is down).
    a.wait_metric("loghaul_component_sent_events_total", "app", None, N);
    a.signal("TERM");
    let status = a
        .wait_exit(Duration::from_secs(20))
        .expect("exits within shutdown_timeout");
    let log = a.stderr();
    assert!(status.success(), "{status}\n{}", tail(&log, 3000));
    assert!(log.contains("wrote it to disk"), "{}", tail(&log, 3000));
    let hold = a.hold_ports();
    let (b, out) = restart_with_receiver(&mut a, hold, "fluent", port);
    wait_all(&out, N, Duration::from_secs(60));
    // Nothing more comes: the file is not read again from an old checkpoint. A line appended now
    // is read after anything read again, and delivered after it in order: once it is in, so is
    // every copy.
    let mut app = fs::OpenOptions::new()
        .append(true)
        .open(a.path("app.log"))
        .expect("open app.log");
    app.write_all(format!("file line {N}\n").as_bytes())
        .expect("append to app.log");
    wait_all(&out, N + 1, Duration::from_secs(60));
    let got: Vec<u64> = numbers(&out).into_iter().filter(|&n| n < N).collect();
    let dups = assert_none_lost(&got, N, "a file source behind a stuck sink, across a stop");
    assert_eq!(
        dups,
        0,
        "{dups} lines delivered twice\n{}",
        tail(&a.stderr(), 6000)
    );
    a.finish();
    b.finish();
}

/// What fluentd does with its file buffer, reproduced: a 20 MB PackedForward request with a
/// `chunk`, into a `fluent` sink whose server is down. The request cannot be acknowledged while
/// the sink holds its events; the stop writes them to disk, and only then is the request
/// acknowledged (before the exit, which is clean). The next start, with the server up,
/// delivers every event of the request once.
#[test]
fn a_20mb_forward_request_is_acknowledged_once_a_stop_wrote_it_to_disk() {
    use std::io::{Read, Write};
    const N: u64 = 100_000;
    let port = free_port_pair();
    // Not healthy: its sink's server is down.
    let mut a = Server::spawn(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 8s
sources:
  in: {{ type: fluent, address: "127.0.0.1:{{TCP}}" }}
sinks:
  up:
    type: fluent
    inputs: [in]
    servers: [{{ address: "127.0.0.1:{port}" }}]
    require_ack: true
    connect_timeout: 500ms
    reconnect_max_interval: 500ms
    buffer: {{ type: memory, max_events: 1000000 }}
"#
    ));
    // [tag, str32(entries), {"chunk": id}] as fluentd's out_forward sends its chunks.
    let pad = "p".repeat(170);
    let mut entries = Vec::new();
    for i in 0..N {
        let message = format!("fluentd chunk {pad} {i}");
        entries.extend_from_slice(&[0x92, 0xce]);
        entries.extend_from_slice(&1_700_000_000u32.to_be_bytes());
        entries.extend_from_slice(&[0x81, 0xa7]);
        entries.extend_from_slice(b"message");
        entries.push(0xda);
        entries.extend_from_slice(&(message.len() as u16).to_be_bytes());
        entries.extend_from_slice(message.as_bytes());
    }
    assert!(entries.len() > 20_000_000, "{} bytes", entries.len());
    let chunk = b"Y2h1bmstb2YtMjBtYg==\n";
    let mut request = vec![0x93, 0xa3, b'a', b'p', b'p', 0xdb];
    request.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    request.extend_from_slice(&entries);
    request.extend_from_slice(&[0x81, 0xa5]);
    request.extend_from_slice(b"chunk");
    request.push(0xa0 | chunk.len() as u8);
    request.extend_from_slice(chunk);
    let mut ack = vec![0x81, 0xa3, b'a', b'c', b'k', 0xa0 | chunk.len() as u8];
    ack.extend_from_slice(chunk);

    a.wait_api(Duration::from_secs(20));
    let mut client = connect(a.ports.tcp);
    client.write_all(&request).expect("send the request");
    // All of it in the sink's memory buffer (the sink itself holds what it keeps retrying).
    a.wait_metric("loghaul_component_sent_events_total", "in", None, N);
    // Not acknowledged while the sink holds the events (its server is down).
    client
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .expect("timeout");
    let mut got = [0u8; 64];
    assert!(
        client.read(&mut got).is_err(),
        "no ack while the events are only in memory"
    );
    a.signal("TERM");
    client
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = client.read_to_end(&mut answer);
    assert_eq!(answer, ack, "the ack, once the events are on disk");
    let status = a
        .wait_exit(Duration::from_secs(20))
        .expect("exits within shutdown_timeout");
    let log = a.stderr();
    assert!(status.success(), "{status}\n{}", tail(&log, 3000));
    let hold = a.hold_ports();
    let (b, out) = restart_with_receiver(&mut a, hold, "fluent", port);
    let got = wait_all(&out, N, Duration::from_secs(90));
    a.wait_metric_eq("loghaul_disk_buffer_records", "up", None, 0);
    let dups = assert_none_lost(&got, N, "a 20 MB request across a stop");
    // A duplicate means a connection broke after the receiver wrote and before it acked; its
    // warnings (and the sender's) say why, first in the message since long logs get cut.
    assert_eq!(
        dups,
        0,
        "the server was down: nothing was in flight.\nreceiver:\n{}\nsender:\n{}",
        warnings(&b.stderr()),
        warnings(&a.stderr())
    );
    a.finish();
    b.finish();
}

/// The WARN and ERROR lines of a server's log, at most the last 20.
fn warnings(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Between two runs, bytes are flipped in the middle of a sealed segment and the open one loses
/// its tail. On restart the damaged segment is salvaged (its damaged original quarantined), the
/// torn tail cut, every other batch delivered, what was lost counted, and the pipeline goes on.
#[test]
fn damaged_disk_buffer_is_salvaged_and_the_pipeline_keeps_running() {
    const N: u64 = 30_000;
    let dead = free_tcp_port();
    // 4 MiB of buffer: segments of 1 MiB, so 30,000 events (about 2.7 MB) fill a sealed one and more.
    let mut a = Server::start(&sender(
        &http_sink(dead, "type: disk, max_size: 4MiB, sync: every_batch"),
        "",
    ));
    // Several sends, each waited for, so the log holds many batches written one group at a
    // time (a group may overflow a segment: all at once could make a single segment).
    for chunk in 0..20 {
        send_tcp(
            a.ports.tcp,
            &numbered("salvage", chunk * N / 20..(chunk + 1) * N / 20),
        );
        a.wait_metric("loghaul_disk_buffer_records", "up", None, chunk + 1);
    }
    a.signal("TERM");
    assert!(a.wait_exit(Duration::from_secs(20)).is_some(), "stops");

    let buffer = a.dir.path().join("loghaul-data/buffers/up");
    let mut segments: Vec<PathBuf> = fs::read_dir(&buffer)
        .expect("the buffer directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    assert!(
        segments.len() >= 2,
        "a sealed segment and the open one: {segments:?}"
    );
    // Flip 64 bytes in the middle of the first (sealed) segment.
    let first = &segments[0];
    let mut bytes = fs::read(first).expect("read segment");
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xff;
    }
    fs::write(first, &bytes).expect("write segment");
    // Cut the tail of the last (open) one.
    let last = segments.last().expect("a segment");
    let len = fs::metadata(last).expect("stat").len();
    fs::OpenOptions::new()
        .write(true)
        .open(last)
        .and_then(|f| f.set_len(len - 100))
        .expect("truncate the open segment");
    let inspect = std::process::Command::new(BIN)
        .args(["buffer", "inspect"])
        .arg(&buffer)
        .output()
        .expect("run buffer inspect");
    let report = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(inspect.status.success(), "{report}");
    assert!(
        report.contains("damage"),
        "inspect shows the damage:\n{report}"
    );

    // Restart on the same data, now with a receiver that takes everything.
    let b = Server::start(&receiver("http", None, Path::new("{DIR}/out.log")));
    let out = b.path("out.log");
    let data_dir = a.dir.path().join("loghaul-data");
    let a2 = Server::start(&sender(
        &http_sink(b.ports.tcp, "type: disk, max_size: 4MiB, sync: every_batch"),
        &format!("data_dir: \"{}\"", data_dir.display()),
    ));
    a2.wait_metric(
        "loghaul_disk_buffer_quarantined_segments_total",
        "up",
        None,
        1,
    );
    a2.wait_metric("loghaul_disk_buffer_torn_bytes_total", "up", None, 1);
    // The pipeline runs: new events arrive too.
    send_tcp(a2.ports.tcp, &numbered("salvage", N..N + 1000));
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let got = numbers(&out);
        let (counts, _) = tally(&got, N + 1000);
        if counts[N as usize..].iter().all(|&c| c > 0) {
            a2.wait_metric_eq("loghaul_disk_buffer_records", "up", None, 0);
            break numbers(&out);
        }
        assert!(
            Instant::now() < deadline,
            "new events after the restart arrive"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // What is missing is whole batches: the damaged record(s) and the torn last one, each a run
    // of consecutive numbers.
    let (counts, _) = tally(&got, N);
    let missing: Vec<u64> = (0..N).filter(|&i| counts[i as usize] == 0).collect();
    let runs =
        missing.windows(2).filter(|w| w[1] != w[0] + 1).count() + usize::from(!missing.is_empty());
    let damaged = a2.metric("loghaul_disk_buffer_damaged_records_total", "up", None);
    assert!(damaged >= 1, "the damaged records are counted");
    assert!(
        !missing.is_empty() && runs as u64 <= damaged + 1,
        "{} events missing in {runs} runs; {damaged} damaged records counted (+1 torn)",
        missing.len()
    );
    assert!(
        missing.len() < (N / 2) as usize,
        "every undamaged record was delivered: {} missing",
        missing.len()
    );
    assert!(
        fs::read_dir(buffer.join("quarantine"))
            .expect("quarantine/")
            .count()
            >= 1,
        "the damaged segment is kept in quarantine/"
    );
    eprintln!(
        "salvage: {} of {N} events lost in {runs} runs ({damaged} damaged records)",
        missing.len()
    );
    a2.finish();
    b.finish();
}

/// The disk buffer's own file system fills up while its sink is down: intake blocks (the TCP
/// sender waits), health says why, nothing crashes; once the sink is back the buffer drains,
/// space comes back, intake resumes and every event arrives.
#[test]
fn disk_buffer_on_a_full_file_system_blocks_intake_and_loses_nothing() {
    // About 55 MB of buffer records, 7 MB on the wire: far more than the 4 MiB file system and
    // the memory budget in front of the buffer hold.
    const N: u64 = 600_000;
    let tmpfs = Tmpfs::mount("4M").unwrap_or_else(|| {
        panic!("mounting a tmpfs needs root (CI and the dev machines run as root)")
    });
    let mut b = Server::start(&receiver("http", None, Path::new("{DIR}/out.log")));
    let out = b.path("out.log");
    let port = b.ports.tcp;
    b.stop();
    // max_size above what the file system holds: the disk, not the limit, is what fills.
    // The smallest memory budget, so what waits in front of the buffer is bounded too.
    let a = Server::start(&sender(
        &http_sink(port, "type: disk, max_size: 64MiB, sync: every_batch"),
        &format!(
            "data_dir: \"{}\"\nlimits: {{ memory: 16MiB }}",
            tmpfs.0.display()
        ),
    ));
    let port_in = a.ports.tcp;
    let sender = std::thread::spawn(move || send_tcp(port_in, &numbered("full", 0..N)));
    a.wait_metric("loghaul_disk_buffer_write_errors_total", "up", None, 1);
    // Intake stops: the source reads no more (the rest waits in the kernel's socket buffers and
    // in the sender).
    let received = |a: &Server| a.metric("loghaul_component_received_events_total", "in", None);
    std::thread::sleep(Duration::from_secs(1));
    let stalled_at = received(&a);
    // A fixed wait is the test: a stall is no progress while time passes. A slow machine
    // only makes it stricter (the sender never stops offering more).
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        stalled_at < N && received(&a) == stalled_at,
        "intake blocks while the buffer cannot write: {stalled_at} then {} of {N}",
        received(&a)
    );
    assert_eq!(a.health().0, 503, "degraded: {}", a.health().1);
    assert!(
        a.stderr().contains("No space left on device"),
        "the log says why: {}",
        tail(&a.stderr(), 2000)
    );

    let b2 = Server::start(&receiver("http", Some(port), &out));
    sender
        .join()
        .expect("the sender finishes once space comes back");
    let got = wait_all(&out, N, Duration::from_secs(120));
    let dups = assert_none_lost(&got, N, "through a full buffer file system");
    eprintln!("full buffer disk: {dups} events delivered twice");
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.health().0 != 200 {
        assert!(Instant::now() < deadline, "healthy again: {}", a.health().1);
        std::thread::sleep(Duration::from_millis(100));
    }
    a.finish();
    b2.finish();
}

/// Two sinks of one source: one stalled (its server never answers) with a disk buffer, one
/// healthy. The healthy one gets every event at once; the stalled one's buffer holds them. Once
/// the stalled buffer is full, `when_full` decides: `drop_newest` drops for the stalled sink
/// only (counted), so the healthy sink still gets everything.
#[test]
fn a_stalled_sink_with_a_disk_buffer_does_not_hold_back_the_other() {
    const N: u64 = 200_000;
    let dead = free_tcp_port();
    for (buffer, when_full) in [
        ("max_size: 256MiB", "block"),
        ("max_size: 1MiB", "drop_newest"),
    ] {
        let server = Server::start(&format!(
            r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}", format: raw }}
sinks:
  healthy: {{ type: file, inputs: [in], path: "{{DIR}}/out.log", encoding: text, flush_interval: 50ms }}
  stalled: {{ type: http, inputs: [in], uri: "http://127.0.0.1:{dead}/in", retry: {{ initial: 50ms, max: 500ms }}, buffer: {{ type: disk, {buffer}, when_full: {when_full} }} }}
"#
        ));
        send_tcp(server.ports.tcp, &numbered("isolation", 0..N));
        let got = wait_all(&server.path("out.log"), N, Duration::from_secs(60));
        assert_none_lost(&got, N, "the healthy sink");
        assert_eq!(
            server.metric("loghaul_component_sent_events_total", "stalled", None),
            0
        );
        if when_full == "block" {
            server.wait_metric("loghaul_disk_buffer_records", "stalled", None, 1);
        } else {
            server.wait_metric(
                "loghaul_component_discarded_events_total",
                "stalled",
                Some("reason=\"buffer_full\""),
                1,
            );
            assert!(
                server.metric("loghaul_disk_buffer_bytes", "stalled", None) <= 1 << 20,
                "the full buffer stays within max_size"
            );
        }
        // The stalled sink cannot finish: stop without waiting for a clean exit code.
        let mut server = server;
        server.signal("TERM");
        assert!(server.wait_exit(Duration::from_secs(20)).is_some());
    }
}

/// POSTs `body` to `port` `/in` in a loop until `until`; returns (2xx answers, other answers).
fn post_loop(port: u16, body: &[u8], until: Instant) -> (u64, u64) {
    use std::io::{Read, Write};
    let (mut ok, mut refused) = (0, 0);
    while Instant::now() < until {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let head = format!(
            "POST /in HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        if s.write_all(head.as_bytes())
            .and_then(|()| s.write_all(body))
            .is_err()
        {
            refused += 1;
            continue;
        }
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        if answer.starts_with(b"HTTP/1.1 2") {
            ok += 1;
        } else {
            refused += 1;
        }
    }
    (ok, refused)
}

/// Many clients POST large bodies as fast as they can (far more than the sink takes: it is a
/// server that never answers) into a server with a small memory budget: sources wait once the
/// budget is spent (and answer 503 after `ack_timeout`), so peak RSS stays within the budget
/// plus the documented margin (docs/durability.md).
#[test]
fn memory_budget_bounds_rss_under_overload() {
    const BUDGET_MIB: u64 = 32;
    const CLIENTS: u64 = 16;
    // The documented margin: 64 MiB, plus 256 KiB per busy connection (docs/durability.md).
    const MARGIN_MIB: u64 = 64 + CLIENTS / 4;
    let dead = free_tcp_port();
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
limits: {{ memory: {BUDGET_MIB}MiB }}
sources:
  in: {{ type: http_server, address: "127.0.0.1:{{TCP}}", paths: ["/in"], ack_timeout: 1s }}
sinks:
  stalled: {{ type: http, inputs: [in], uri: "http://127.0.0.1:{dead}/in", retry: {{ initial: 50ms, max: 200ms }} }}
"#
    ));
    // 2 MiB bodies of 100-byte JSON events.
    let mut body = Vec::with_capacity(2 << 20);
    let mut i = 0;
    while body.len() < (2 << 20) - 128 {
        body.extend_from_slice(
            format!(
                "{{\"message\":\"overload {i:>10}\",\"pad\":\"{:>50}\"}}\n",
                "x"
            )
            .as_bytes(),
        );
        i += 1;
    }
    let body = std::sync::Arc::new(body);
    let anon = server.watch_anon();
    let until = Instant::now() + Duration::from_secs(8);
    let port = server.ports.tcp;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let body = body.clone();
            std::thread::spawn(move || post_loop(port, &body, until))
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for c in clients {
        let (o, r) = c.join().expect("client thread");
        ok += o;
        refused += r;
    }
    let peak_mib = anon.peak_mib();
    eprintln!(
        "memory budget {BUDGET_MIB} MiB: peak anonymous RSS {peak_mib} MiB (VmHWM {} MiB); {ok} bodies accepted, {refused} refused (503) under overload",
        server.peak_rss_kib() / 1024
    );
    assert!(
        refused > 0,
        "the overload was real: some requests were refused"
    );
    assert!(
        peak_mib <= BUDGET_MIB + MARGIN_MIB,
        "peak anonymous RSS {peak_mib} MiB is over the budget ({BUDGET_MIB} MiB) plus the margin ({MARGIN_MIB} MiB)"
    );
    let mut server = server;
    server.signal("TERM");
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
}

/// An agent tailing a large file into a forward receiver that takes bytes and never acks: the
/// tailer must stop reading once the budget is spent (acks withheld, queues full), and the
/// agent's memory stay within the budget plus the documented margin. With the default budget
/// (256 MiB) the same agent holds about 160 MiB, so the figure is the budget's doing.
#[test]
fn an_agent_tailing_into_a_stalled_receiver_stays_within_its_budget() {
    const BUDGET_MIB: u64 = 32;
    const MARGIN_MIB: u64 = 64;
    const LINES: u64 = 1_000_000;
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let stalled_port = stalled.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in stalled.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while matches!(std::io::Read::read(&mut conn, &mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let files = tempfile::tempdir().expect("temp dir");
    let log = files.path().join("app.log");
    {
        let mut w = std::io::BufWriter::new(fs::File::create(&log).expect("create log"));
        for i in 0..LINES {
            writeln!(w, "{:<100} {i:08}", "agent payload line").expect("write log");
        }
        w.flush().expect("flush log");
    }
    let server = Server::start(&format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
limits: {{ memory: {BUDGET_MIB}MiB }}
sources:
  tail: {{ type: file, include: ["{}"], data_dir: "{{DIR}}/state", read_from: beginning }}
sinks:
  up: {{ type: fluent, inputs: [tail], servers: [{{ address: "127.0.0.1:{stalled_port}" }}], ack_timeout: 60s }}
"#,
        log.display()
    ));
    let anon = server.watch_anon();
    // Reading stops once the budget is spent; wait until it has stopped.
    let mut read = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = server.metric("loghaul_component_received_events_total", "tail", None);
        if now == read && now > 0 {
            break;
        }
        read = now;
    }
    let used = server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("loghaul_memory_used_bytes "))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let peak_mib = anon.peak_mib();
    eprintln!(
        "memory budget {BUDGET_MIB} MiB: {read} of {LINES} lines read, {used} bytes charged, peak anonymous RSS {peak_mib} MiB (VmHWM {} MiB)",
        server.peak_rss_kib() / 1024
    );
    assert!(read > 0, "the agent read nothing");
    assert!(
        read < LINES,
        "back-pressure held the tailer: it read all {LINES} lines into a receiver that acks nothing"
    );
    assert!(
        peak_mib <= BUDGET_MIB + MARGIN_MIB,
        "peak anonymous RSS {peak_mib} MiB is over the budget ({BUDGET_MIB} MiB) plus the margin ({MARGIN_MIB} MiB)"
    );
    let mut server = server;
    server.signal("KILL");
    let _ = server.wait_exit(Duration::from_secs(5));
}

/// `loghaul buffer inspect DIR`: (records pending after the cursor, bytes of segments).
fn inspect_pending(dir: &Path) -> (u64, u64) {
    let report = output_text(&loghaul(&["buffer", "inspect", dir.to_str().unwrap()]));
    // "segments: 2 (1234 bytes), records: 40, pending after the cursor: 40"
    let line = report
        .lines()
        .find(|l| l.starts_with("segments: "))
        .unwrap_or_else(|| panic!("no segments line in:\n{report}"));
    let number_after = |key: &str| -> u64 {
        line.split(key)
            .nth(1)
            .and_then(|rest| {
                rest.trim_start()
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {key:?} in {line:?}"))
    };
    let bytes = line
        .split('(')
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {line:?}"));
    (number_after("pending after the cursor:"), bytes)
}

/// The disk buffer gauges of sink `id`, from one scrape: (records, bytes).
fn buffer_gauges(server: &Server, id: &str) -> (u64, u64) {
    let text = server.metrics_text();
    let get = |name: &str| {
        parse_metric(&text, name, id, None).unwrap_or_else(|| panic!("no {name} for {id}"))
    };
    (
        get("loghaul_disk_buffer_records"),
        get("loghaul_disk_buffer_bytes"),
    )
}

/// Compares sink `id`'s buffer gauges with `loghaul buffer inspect` of `dir` until they agree,
/// and returns them. A write may land between the reads, so only a comparison during which the
/// gauges did not move counts, and a few are tried.
fn assert_gauges_agree_with_inspect(
    server: &Server,
    id: &str,
    dir: &Path,
    when: &str,
) -> (u64, u64) {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let before = buffer_gauges(server, id);
        let inspected = inspect_pending(dir);
        let after = buffer_gauges(server, id);
        if before == after && before == inspected {
            return before;
        }
        seen.push(format!(
            "gauges {before:?}/{after:?}, inspect {inspected:?}"
        ));
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{when}: the buffer gauges (records, bytes) never agreed with `buffer inspect`:\n{}",
        seen.join("\n")
    );
}

/// Waits until sink `id`'s own queue is full: the disk buffer's reader then waits for room in it,
/// which is when gauges kept by that reader went stale.
fn wait_sink_queue_full(server: &Server, id: &str) {
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    loop {
        let text = server.metrics_text();
        let queued = parse_metric(&text, "loghaul_buffer_batches", id, None);
        let capacity = parse_metric(&text, "loghaul_buffer_max_batches", id, None);
        if queued.is_some() && queued == capacity {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the queue of sink {id} did not fill: {queued:?} of {capacity:?} batches"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A sink whose server is down, with a disk buffer, while events flow in: once the sink's own
/// queue is full the buffer's reader waits for room in it for as long as the server stays
/// down, and the gauges must still show what the log holds (`buffer inspect`), batch for batch
/// and byte for byte. The API stops with the stop, so the last scrape before SIGTERM is the
/// last word: it must agree with what the stopped log holds. A start on that log reports its
/// backlog from the first scrape, although its reader waits from the start. The backlog in
/// events is every event sent, before the stop and after it.
#[test]
fn disk_buffer_gauges_agree_with_inspect_while_the_sink_is_stuck_and_across_a_stop() {
    const ROUNDS: u64 = 15;
    const PER_ROUND: u64 = 20_000;
    let dead = free_tcp_port();
    let buffer = "type: disk, max_size: 256MiB, sync: every_batch";
    let mut a = Server::start(&sender(&http_sink(dead, buffer), ""));
    let dir = a.path("loghaul-data/buffers/up");
    let port = a.ports.tcp;
    let flowing = std::thread::spawn(move || {
        for round in 0..ROUNDS {
            send_tcp(
                port,
                &numbered("stuck", round * PER_ROUND..(round + 1) * PER_ROUND),
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    wait_sink_queue_full(&a, "up");
    let mut last = (0, 0);
    while !flowing.is_finished() {
        last = assert_gauges_agree_with_inspect(&a, "up", &dir, "while events flow in");
        std::thread::sleep(Duration::from_millis(200));
    }
    flowing.join().expect("the sender");
    a.wait_metric(
        "loghaul_component_received_events_total",
        "in",
        None,
        ROUNDS * PER_ROUND,
    );
    let at_stop = assert_gauges_agree_with_inspect(&a, "up", &dir, "with everything written");
    // The sink acknowledged nothing: every event received waits in the buffer.
    a.wait_metric_eq("loghaul_disk_buffer_events", "up", None, ROUNDS * PER_ROUND);
    let queue = a.metric("loghaul_buffer_max_batches", "up", None);
    assert!(
        at_stop.0 > queue && at_stop.0 >= last.0,
        "the backlog outgrew the sink's queue ({queue} batches): {at_stop:?}, earlier {last:?}"
    );

    a.signal("TERM");
    assert!(
        a.wait_exit(Duration::from_secs(20)).is_some(),
        "stops within shutdown_timeout"
    );
    assert_eq!(
        inspect_pending(&dir),
        at_stop,
        "the last scrape before the stop told what the stopped log holds"
    );

    // Started again on the same log with the server still down: its reader waits from the
    // first batch on.
    let data_dir = a.dir.path().join("loghaul-data");
    let mut b = Server::start_answering(&sender(
        &http_sink(dead, buffer),
        &format!("data_dir: \"{}\"", data_dir.display()),
    ));
    let resumed = assert_gauges_agree_with_inspect(&b, "up", &dir, "after a restart");
    assert_eq!(
        resumed, at_stop,
        "nothing was delivered or written meanwhile"
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_redelivered_records_total", "up", None),
        at_stop.0
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_events", "up", None),
        ROUNDS * PER_ROUND,
        "the events of the batches found at start"
    );
    // Three more failed attempts of the sink later (its server is still down), the reader
    // still waits.
    let tried = b.wait_metric("loghaul_component_errors_total", "up", None, 1);
    b.wait_metric("loghaul_component_errors_total", "up", None, tried + 3);
    assert_eq!(buffer_gauges(&b, "up"), at_stop);
    b.signal("TERM");
    assert!(b.wait_exit(Duration::from_secs(20)).is_some());
}

/// The reason `/health` gives for component `id`, when it gives one.
fn health_reason(server: &Server, id: &str) -> (u16, Option<String>) {
    let (code, body) = server.health();
    let reason = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["components"][id].as_str().map(str::to_owned));
    (code, reason)
}

/// Writes a file in `dir` until the file system is full; returns its path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = fs::File::create(&path).expect("create the filler");
    let chunk = vec![0x55u8; 64 << 10];
    let mut written = 0usize;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
        assert!(written < 1 << 30, "{} never filled up", dir.display());
    }
    let _ = file.sync_all();
    path
}

/// A sink whose server is down, and whose disk buffer's file system is full: both failures
/// show. Every failed write is counted as it happens, although the buffer's reader waits for
/// room in the sink's queue meanwhile, and `/health` names the buffer's failure beside the
/// sink's own, at every poll (one reason must not replace the other); once space comes back,
/// the buffer's reason goes and the sink's stays.
#[test]
fn a_full_buffer_disk_is_counted_and_named_in_health_beside_the_sinks_own_failure() {
    let tmpfs = Tmpfs::mount("16M").unwrap_or_else(|| {
        panic!("mounting a tmpfs needs root (CI and the dev machines run as root)")
    });
    let dead = free_tcp_port();
    // One request of one batch in the sink's hands: the rest waits in its queue.
    let a = Server::start(&sender(
        &format!(
            "type: http, uri: \"http://127.0.0.1:{dead}/in\", encoding: ndjson, concurrency: 1, max_events: 100, retry: {{ initial: 50ms, max: 500ms }}, buffer: {{ type: disk, max_size: 64MiB, sync: every_batch }}"
        ),
        &format!("data_dir: \"{}\"", tmpfs.0.display()),
    ));
    // Enough small batches that the sink's queue fills and the buffer's reader waits on it.
    for round in 0..60 {
        send_tcp(
            a.ports.tcp,
            &numbered("full", round * 100..(round + 1) * 100),
        );
        a.wait_metric(
            "loghaul_component_received_events_total",
            "in",
            None,
            (round + 1) * 100,
        );
    }
    wait_sink_queue_full(&a, "up");
    let sink_reason = loop {
        if let (503, Some(reason)) = health_reason(&a, "up") {
            break reason;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !sink_reason.contains("disk buffer"),
        "only the sink fails so far: {sink_reason}"
    );
    assert_eq!(
        a.metric("loghaul_disk_buffer_write_errors_total", "up", None),
        0
    );

    let filler = fill(&tmpfs.0);
    let port = a.ports.tcp;
    let more = std::thread::spawn(move || send_tcp(port, &numbered("full", 6000..8000)));
    let errors = a.wait_metric("loghaul_disk_buffer_write_errors_total", "up", None, 1);
    let warnings = a.stderr().matches("No space left on device").count();
    assert!(warnings > 0, "the log says why");
    for _ in 0..10 {
        let (code, reason) = health_reason(&a, "up");
        let reason = reason.unwrap_or_default();
        assert_eq!(code, 503, "{reason}");
        let (sink, buffer) = reason
            .split_once("; disk buffer: ")
            .unwrap_or_else(|| panic!("both failures are named: {reason:?}"));
        assert!(
            !sink.is_empty() && !sink.contains("disk buffer"),
            "the sink's own reason comes first: {reason:?}"
        );
        assert!(
            buffer.contains("No space left on device"),
            "the buffer's reason: {reason:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Retried with backoff, every failure counted.
    a.wait_metric(
        "loghaul_disk_buffer_write_errors_total",
        "up",
        None,
        errors + 1,
    );

    fs::remove_file(&filler).expect("remove the filler");
    more.join()
        .expect("the sender finishes once space comes back");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, reason) = health_reason(&a, "up");
        let reason = reason.unwrap_or_default();
        if !reason.contains("disk buffer") {
            assert_eq!(code, 503, "the sink's own failure stays: {reason:?}");
            assert!(!reason.is_empty());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the buffer's reason goes once it writes again: {reason:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    a.wait_metric("loghaul_component_received_events_total", "in", None, 8000);
    let mut a = a;
    a.signal("TERM");
    assert!(a.wait_exit(Duration::from_secs(20)).is_some());
}

/// POSTs `body` (NDJSON) to `/in` on `port`; returns the status code of the answer.
fn post(port: u16, body: &[u8]) -> u16 {
    use std::io::{Read, Write};
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("set a read timeout");
    let head = format!(
        "POST /in HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .expect("send the request");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"))
}

/// Where the last record of a segment starts, and its payload's length (the frame layout of
/// `crates/loghaul-buffer/src/lib.rs`: after the 8-byte segment header, records of a 20-byte
/// frame header, magic, len, crc, seq, then the payload).
fn last_record(segment: &[u8]) -> (usize, usize) {
    let mut at = 8;
    let mut last = None;
    while at + 20 <= segment.len() {
        assert_eq!(
            &segment[at..at + 4],
            &0x4C48_5245u32.to_le_bytes(),
            "a record at {at}"
        );
        let len = u32::from_le_bytes(segment[at + 4..at + 8].try_into().unwrap()) as usize;
        last = Some((at, len));
        at += 20 + len;
    }
    assert_eq!(at, segment.len(), "the segment ends with a whole record");
    last.expect("the segment holds a record")
}

/// Acknowledged batches of a known size are in a disk buffer whose sink is down; between two
/// runs its last record is cut in the middle (a lost write, a file cut short). The next start
/// cuts the torn tail, and reports the batch and its events as lost: in the log line, in
/// `damaged_records_total` and in `lost_events_total`. The batches before it wait as before,
/// and `loghaul_disk_buffer_events` counts their events.
#[test]
fn a_cut_buffer_tail_reports_the_batch_and_the_events_it_lost() {
    const POSTS: u64 = 20;
    const PER_POST: u64 = 500;
    let dead = free_tcp_port();
    let config = |extra: &str| {
        format!(
            r#"api: {{ address: "127.0.0.1:{{API}}" }}
shutdown_timeout: 2s
{extra}
sources:
  in: {{ type: http_server, address: "127.0.0.1:{{TCP}}", paths: ["/in"] }}
sinks:
  up: {{ type: http, inputs: [in], uri: "http://127.0.0.1:{dead}/in", encoding: ndjson, retry: {{ initial: 50ms, max: 500ms }}, buffer: {{ type: disk, max_size: 64MiB, sync: every_batch }} }}
"#
        )
    };
    let mut a = Server::start(&config(""));
    for post_no in 0..POSTS {
        let body: String = (post_no * PER_POST..(post_no + 1) * PER_POST)
            .map(|i| format!("{{\"message\":\"cut {i}\"}}\n"))
            .collect();
        // 200 once the buffer holds the batch, fsynced: the events are acknowledged.
        assert_eq!(post(a.ports.tcp, body.as_bytes()), 200, "POST {post_no}");
    }
    assert_eq!(
        a.metric("loghaul_disk_buffer_records", "up", None),
        POSTS,
        "one batch per request"
    );
    assert_eq!(
        a.metric("loghaul_disk_buffer_events", "up", None),
        POSTS * PER_POST
    );
    a.signal("TERM");
    assert!(a.wait_exit(Duration::from_secs(20)).is_some(), "stops");

    let buffer = a.path("loghaul-data/buffers/up");
    let mut segments: Vec<PathBuf> = fs::read_dir(&buffer)
        .expect("the buffer directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    let last = segments.last().expect("a segment");
    let data = fs::read(last).expect("read the segment");
    let (start, len) = last_record(&data);
    let payload = &data[start + 20..];
    assert_eq!(&payload[..4], b"LHB\x01", "an encoded batch");
    assert_eq!(
        u32::from_le_bytes(payload[4..8].try_into().unwrap()),
        PER_POST as u32,
        "the batch's event count"
    );
    let cut_to = start + 20 + len / 2;
    fs::OpenOptions::new()
        .write(true)
        .open(last)
        .and_then(|f| f.set_len(cut_to as u64))
        .expect("cut the segment");

    let data_dir = a.dir.path().join("loghaul-data");
    let mut b = Server::start_answering(&config(&format!("data_dir: \"{}\"", data_dir.display())));
    let log = b.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("Disk buffer was damaged"))
        .unwrap_or_else(|| panic!("no recovery warning:\n{}", tail(&log, 4000)));
    assert!(
        line.contains(&format!("lost_records=1 lost_events={PER_POST} ")),
        "{line}"
    );
    assert!(
        line.contains(&format!("torn_bytes={} ", 20 + len / 2)),
        "{line}"
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_damaged_records_total", "up", None),
        1
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_lost_events_total", "up", None),
        PER_POST
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_torn_bytes_total", "up", None),
        (20 + len / 2) as u64
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_records", "up", None),
        POSTS - 1,
        "the batches before the cut still wait"
    );
    assert_eq!(
        b.metric("loghaul_disk_buffer_events", "up", None),
        (POSTS - 1) * PER_POST,
        "and so do their events, without the lost batch's"
    );
    b.signal("TERM");
    assert!(b.wait_exit(Duration::from_secs(20)).is_some());
}
