//! loghaul killed with SIGKILL under load and started again: every event it acknowledged is in
//! its output afterwards.
//!
//! ```text
//! loghaul bench gen ──forward, acks──▶ loghaul (fluent ─▶ file) ──▶ {DIR}/out.jsonl
//!   --reconnect: sends again            ▲ SIGKILL mid-stream, then started again
//!   what was not acknowledged           │ on the same port, config and output file
//!   --acked-log ──▶ {DIR}/acked.log: `GEN FIRST LAST` per acknowledged request
//! ```
//!
//! The generator records what the server acknowledged, as it reads the acks, so the test needs
//! no model of its own of what was sent: every sequence number in the acked log must be in the
//! output. That is at least once: a request whose events were written but whose ack died with
//! the process is sent again and may be written twice, so repeats are counted, reported, and
//! bounded by the events the generator sent again. Lines are read for their markers
//! (`gen=G seq=S`); a line the kill cut short must be gone after the restart (the file sink cuts
//! a torn last line before it appends), so such a line fails the test, after being read for
//! whatever markers it still holds so that it hides no event.
//!
//! A second test kills loghaul 50 times in a row under the load of a forward client written
//! here ([`crate::acking_client`]), and checks every line of the output and every acknowledged
//! event at the end.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::acking_client::{AckingClient, Load, Output as ClientOutput};
use crate::harness::*;

/// Events the generator sends.
const COUNT: u64 = 500_000;
/// Events acknowledged before the kill.
const KILL_AFTER: u64 = 100_000;
/// How long the generator may take, the outage included.
const GEN_TIMEOUT: Duration = Duration::from_secs(120);

/// A fluent source into a JSON-lines file. `sink_options` is added to the sink's mapping, so
/// the same test runs over each way the sink may hold its events (e.g.
/// `, buffer: { type: disk, sync: every_batch }`).
fn config(sink_options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fin: {{ type: fluent, address: "127.0.0.1:{{TCP}}" }}
sinks:
  out: {{ type: file, inputs: [fin], path: "{{DIR}}/out.jsonl", encoding: json{sink_options} }} # BUFFER
"#
    )
}

/// SIGKILL while the generator's acknowledged requests pile up, a restart on the same port a
/// second later: the generator reconnects and sends again what was not acknowledged, and every
/// event of the acked log is in the output.
#[test]
fn kill_9_under_load_loses_no_acknowledged_event() {
    kill_9_under_load("");
}

/// The same with a disk buffer in front of the file sink, fsynced per batch: the client's acks
/// now mean "in the buffer, on disk", and what the buffer held at the kill is delivered after
/// the restart.
#[test]
fn kill_9_under_load_with_a_disk_buffer_loses_no_acknowledged_event() {
    kill_9_under_load(", buffer: { type: disk, sync: every_batch }");
}

/// The body of the crash test, over a sink configured with `sink_options` (see [`config`]).
fn kill_9_under_load(sink_options: &str) {
    let started = Instant::now();
    let mut server = Server::start(&config(sink_options));
    let acked_log = server.path("acked.log");
    let mut generator = Generator::spawn(&server, &acked_log);

    // 1. Load until enough is acknowledged, then SIGKILL.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked = 0;
    while acked < KILL_AFTER {
        assert!(
            Instant::now() < deadline,
            "only {acked} events acknowledged after 60s\n{}",
            generator.output()
        );
        assert!(
            generator.exit().is_none(),
            "the generator ended before the kill ({acked} events acknowledged)\n{}",
            generator.output()
        );
        std::thread::sleep(Duration::from_millis(5));
        acked = read_acked(&acked_log).len() as u64;
    }
    server.signal("KILL");
    assert!(
        server.wait_exit(Duration::from_secs(10)).is_some(),
        "loghaul did not die of SIGKILL"
    );
    let held = server.hold_ports();
    let acked_at_kill = read_acked(&acked_log).len() as u64;

    // 2. A second without a server, then the same config, port and output file again.
    std::thread::sleep(Duration::from_secs(1));
    server.restart();
    drop(held);

    // 3. The generator gets every request acknowledged in the end.
    let status = generator.wait(GEN_TIMEOUT);
    assert!(
        status.success(),
        "the generator exited with {status}\n{}",
        generator.output()
    );
    let summary: Value = serde_json::from_str(generator.stdout().trim()).unwrap_or_else(|e| {
        panic!(
            "the generator's summary is no JSON ({e})\n{}",
            generator.output()
        )
    });
    let figure = |key: &str| -> u64 {
        summary["recovery"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no recovery.{key} in the summary: {summary}"))
    };
    let (reconnects, resent_requests, resent_events) = (
        figure("reconnects"),
        figure("resent_requests"),
        figure("resent_events"),
    );
    assert_eq!(summary["sent"], COUNT, "{summary}");
    assert!(
        reconnects >= 1,
        "the generator never reconnected: {summary}"
    );
    let acked = read_acked(&acked_log);
    assert_each_once(&acked, COUNT, "events in the acked log");

    // 4. Every acknowledged event is in the output; repeats only among those sent again.
    let out = server.out();
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    let mut output = Output::read(&out);
    while output.missing() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        output = Output::read(&out);
    }
    let repeated = output.counts.iter().filter(|&&c| c > 1).count() as u64;
    let copies: u64 = output
        .counts
        .iter()
        .map(|&c| u64::from(c.saturating_sub(1)))
        .sum();
    eprintln!(
        "kill -9 under load{}: {acked_at_kill} of {COUNT} events acknowledged at the kill; \
         {reconnects} reconnection(s), {resent_requests} request(s) ({resent_events} events) \
         sent again; {} lines in the output ({} torn by the kill), {repeated} events written \
         more than once ({copies} extra copies); {:.1}s",
        if sink_options.is_empty() {
            String::new()
        } else {
            format!(" ({})", sink_options.trim_start_matches(", "))
        },
        output.lines,
        output.torn,
        started.elapsed().as_secs_f64()
    );
    eprint!("{}", tail(&generator.stderr(), 2000));
    let missing: Vec<u64> = (0..COUNT)
        .filter(|&s| output.counts[s as usize] == 0)
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged events are not in the output (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        output.out_of_range.is_empty(),
        "sequence numbers the generator never sent: {:?}",
        &output.out_of_range[..output.out_of_range.len().min(10)]
    );
    assert_eq!(
        output.torn, 0,
        "damaged lines after one kill: a torn line was not cut before the restart appended"
    );
    // A disk buffer delivers again what it held after its saved cursor at the restart (the
    // sink may have written some of it before the kill), and says how many events that was.
    let redelivered = parse_metric(
        &server.metrics_text(),
        "loghaul_disk_buffer_redelivered_events_total",
        "out",
        None,
    )
    .unwrap_or(0);
    eprintln!("the disk buffer delivered {redelivered} events again after the restart");
    assert!(
        repeated <= resent_events + redelivered,
        "{repeated} events written more than once, but only {resent_events} were sent again \
         and {redelivered} delivered again from the buffer"
    );
    server.finish();
}

/// The sequence numbers of every event in the acked log (`GEN FIRST LAST` lines, generator 0).
fn read_acked(path: &Path) -> Vec<u64> {
    // Only whole lines: the generator may be appending the next ones.
    let whole = written_text(path);
    let mut seqs = Vec::new();
    for line in whole.lines() {
        let f: Vec<u64> = line
            .split(' ')
            .map(|w| {
                w.parse()
                    .unwrap_or_else(|_| panic!("bad acked log line {line:?}"))
            })
            .collect();
        assert!(
            f.len() == 3 && f[0] == 0 && f[1] <= f[2],
            "bad acked log line {line:?}"
        );
        seqs.extend(f[1]..=f[2]);
    }
    seqs
}

/// What the output file holds: how often each sequence number of `0..COUNT` occurs.
struct Output {
    counts: Vec<u32>,
    out_of_range: Vec<u64>,
    lines: usize,
    /// Lines that are not one JSON event: a write the kill cut short (and what the restarted
    /// process appended to it).
    torn: usize,
}

impl Output {
    fn read(path: &Path) -> Output {
        let bytes = fs::read(path).unwrap_or_default();
        let mut seqs = Vec::with_capacity(COUNT as usize + 10_000);
        let (mut lines, mut torn) = (0, 0);
        // Only whole lines: the sink may be writing the next ones.
        let whole = whole_lines(&bytes);
        for line in whole.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            let message = serde_json::from_slice::<Value>(line)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned));
            match message {
                Some(m) => {
                    let found = markers(m.as_bytes());
                    assert_eq!(found.len(), 1, "an event with {} markers: {m}", found.len());
                    seqs.extend(found);
                }
                None => {
                    torn += 1;
                    seqs.extend(markers(line));
                }
            }
        }
        let (counts, out_of_range) = tally(&seqs, COUNT);
        Output {
            counts,
            out_of_range,
            lines,
            torn,
        }
    }

    fn missing(&self) -> usize {
        self.counts.iter().filter(|&&c| c == 0).count()
    }
}

/// The sequence numbers of the complete `gen=0 seq=SSSSSSSSSS ` markers in `text`.
fn markers(text: &[u8]) -> Vec<u64> {
    const MARK: &[u8] = b"gen=0 seq=";
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].windows(MARK.len()).position(|w| w == MARK) {
        let start = at + i + MARK.len();
        let digits = text.get(start..start + 10);
        if let Some(d) = digits
            && d.iter().all(u8::is_ascii_digit)
            && text.get(start + 10) == Some(&b' ')
        {
            found.push(std::str::from_utf8(d).unwrap().parse().unwrap());
        }
        at = start;
    }
    found
}

/// `loghaul bench gen` as a child process, killed if the test ends first.
struct Generator {
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Generator {
    /// One connection to the server's fluent source, as fast as it goes, acks on, reconnecting.
    fn spawn(server: &Server, acked_log: &Path) -> Generator {
        let (stdout, stderr) = (server.path("gen.stdout"), server.path("gen.stderr"));
        let child = Command::new(BIN)
            .args(["bench", "gen", "--target"])
            .arg(format!("fluent://127.0.0.1:{}", server.ports.tcp))
            .args(["--format", "raw", "--count", &COUNT.to_string()])
            .args(["--connections", "1", "--rate", "0"])
            .args(["--fluent-mode", "packed", "--batch", "500", "--ack"])
            .args(["--reconnect", "60s", "--acked-log"])
            .arg(acked_log)
            .arg("--json")
            .env_remove("LOGHAUL_CONFIG")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).expect("create the generator's stdout"))
            .stderr(fs::File::create(&stderr).expect("create the generator's stderr"))
            .spawn()
            .expect("spawn loghaul bench gen");
        Generator {
            child: Some(child),
            stdout,
            stderr,
        }
    }

    /// The exit status, if it has exited.
    fn exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Waits for the exit (at most `timeout`; then the test fails).
    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the generator did not finish within {timeout:?}\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stdout(&self) -> String {
        fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its stdout and stderr, for failure messages.
    fn output(&self) -> String {
        format!(
            "--- generator stdout ---\n{}\n--- generator stderr ---\n{}",
            self.stdout(),
            tail(&self.stderr(), 4000)
        )
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Kills in [`kill_9_in_a_loop_never_glues_lines_and_loses_no_acknowledged_event`].
const CYCLES: u32 = 50;

/// SIGKILL 50 times in a row, each time a moment (0 to 60ms, varied) after the restarted server
/// acknowledged its first request, under the load of a client that sends again after every
/// restart what was not acknowledged. At the end every line of the output is a whole JSON event
/// and every acknowledged event is in it.
///
/// A kill lands inside one of the sink's writes only now and then, so every fifth outage also
/// leaves what such a kill leaves: the first half of a line appended without its newline. The
/// restarted server must cut it before appending (its repair counter says so before the next
/// kill); without the cut, the next line is glued onto it and the test fails.
#[test]
fn kill_9_in_a_loop_never_glues_lines_and_loses_no_acknowledged_event() {
    const TORN_TAILS: &str = "loghaul_file_sink_torn_tails_repaired_total";
    let started = Instant::now();
    let mut server = Server::start(&config(", flush_interval: 50ms"));
    let out = server.out();
    let client = AckingClient::spawn(
        server.ports.tcp,
        Load {
            per_request: 100,
            total: None,
            pad: 100,
            pause: Duration::from_millis(1),
        },
    );
    let (mut repaired, mut injected) = (0, 0);
    let mut torn_now = false;
    let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
    for cycle in 0..CYCLES {
        // Under acknowledged load: this server has acknowledged a request.
        let before = client.acked_events();
        assert!(
            client.wait_acked(before + 1, Duration::from_secs(20)),
            "cycle {cycle}: nothing acknowledged within 20s of the start\n{}",
            tail(&server.stderr(), 4000)
        );
        if torn_now {
            // The file was opened (an event was written) and its torn tail cut on the way.
            server.wait_metric(TORN_TAILS, "out", None, 1);
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(rng % 61));
        repaired += server.metric(TORN_TAILS, "out", None);
        server.signal("KILL");
        assert!(
            server.wait_exit(Duration::from_secs(10)).is_some(),
            "cycle {cycle}: loghaul did not die of SIGKILL"
        );
        let held = server.hold_ports();
        torn_now = cycle % 5 == 4;
        if torn_now {
            tear_last_line(&out);
            injected += 1;
        }
        server.restart();
        drop(held);
    }
    let report = client.finish(Duration::from_secs(30));
    assert!(
        report.error.is_none(),
        "the client: {:?}\n{}",
        report.error,
        tail(&server.stderr(), 4000)
    );
    repaired += server.metric(TORN_TAILS, "out", None);
    server.assert_healthy();
    server.stop();
    let output = ClientOutput::read(&out, report.sent);
    output.assert_every_line_whole(&format!("after {CYCLES} kills"));
    let acked = report.acked_seqs();
    let missing = output.missing(&acked);
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events are not in the output (first {:?})",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        report.reconnects >= u64::from(CYCLES),
        "the client reconnected {} times in {CYCLES} kills",
        report.reconnects
    );
    assert!(
        repaired >= injected,
        "{injected} torn tails laid down, {repaired} repaired"
    );
    let repeated = output.counts.iter().filter(|&&c| c > 1).count();
    eprintln!(
        "kill -9 x{CYCLES}: {} events sent, {} acknowledged, {} lines in the output ({repeated} \
         events more than once); {} reconnections, {} requests sent again; {repaired} torn \
         tails repaired ({injected} laid down by the test); {:.1}s",
        report.sent,
        acked.len(),
        output.lines,
        report.reconnects,
        report.resent_requests,
        started.elapsed().as_secs_f64()
    );
}

/// Appends the first half of the file's last whole line, without a newline: what a kill in
/// the middle of the sink's write of that line leaves (the line itself is already in the file,
/// so the half line holds no event the output would otherwise miss).
fn tear_last_line(path: &Path) {
    use std::io::Write as _;
    let bytes = fs::read(path).unwrap_or_default();
    let whole = whole_lines(&bytes);
    let last = whole[..whole.len().saturating_sub(1)]
        .rsplit(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    assert!(!last.is_empty(), "no line to tear in {}", path.display());
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(&last[..last.len() / 2])
        .unwrap();
}
