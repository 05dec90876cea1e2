//! A forward-protocol client that waits for acknowledgements and sends again what it did not
//! get one for, as Fluentd's `out_forward` does with `require_ack_response`: the crash and
//! full-disk tests drive loghaul with it and then check that every event it acknowledged is in
//! the output.
//!
//! ```text
//! request: [tag, bin32(entries), {"size": n, "chunk": id}]      at most WINDOW unacknowledged
//! entry:   [EventTime, {"message": "ackclient seq=SSSSSSSSSS xxxx…"}]
//! answer:  {"ack": id}, one per request, in request order
//! ```
//!
//! Requests are made with the codec's encoder (`begin_packed`, `finish_packed`, `chunk_id`) and
//! answers read with `read_ack`; the entries are written with its msgpack writers. After a
//! connection breaks (the server killed or stopped) the client connects again, as often as it
//! takes, and first sends again every request still unacknowledged, in order. So the output may
//! hold an event twice (written, but its ack died with the server), never miss an acknowledged
//! one. The client records which events were acknowledged as it reads the acks.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use loghaul_codec::forward::msgpack::{
    write_array_len, write_event_time, write_map_len, write_str,
};
use loghaul_codec::forward::{
    CHUNK_ID_LEN, begin_packed, chunk_id, finish_packed, read_ack, write_ack,
};
use serde_json::Value;

/// Requests sent and not yet acknowledged, at most.
const WINDOW: usize = 4;
/// What every event's message starts with, before its sequence number.
const PREFIX: &str = "ackclient seq=";

/// What to send.
#[derive(Clone, Copy)]
pub struct Load {
    /// Events per request.
    pub per_request: u64,
    /// Events in all; `None`: until [`AckingClient::finish`].
    pub total: Option<u64>,
    /// Bytes of padding in every message (a longer line is written in more pages).
    pub pad: usize,
    /// A pause after each new request, to keep the output file small.
    pub pause: Duration,
}

/// The client, running on its own thread.
pub struct AckingClient {
    thread: Option<JoinHandle<Report>>,
    stop: Arc<AtomicBool>,
    /// Stop waiting for acknowledgements this many milliseconds after the client was told to
    /// stop (set by `finish`).
    patience_ms: Arc<AtomicU64>,
    acked: Arc<Mutex<Vec<(u64, u64)>>>,
}

/// What the client did.
#[derive(Debug, Default)]
pub struct Report {
    /// Events made into requests (sequence numbers `0..sent`).
    pub sent: u64,
    /// Acknowledged sequence numbers, as `(first, last)` ranges.
    pub acked: Vec<(u64, u64)>,
    /// Connections made after the first.
    pub reconnects: u64,
    /// Requests sent again after a reconnect.
    pub resent_requests: u64,
    /// Why it gave up, if it did.
    pub error: Option<String>,
}

impl Report {
    /// Every acknowledged sequence number (with repeats if a range came back twice).
    pub fn acked_seqs(&self) -> Vec<u64> {
        self.acked.iter().flat_map(|&(a, b)| a..=b).collect()
    }
}

impl AckingClient {
    /// Starts sending to the forward source on `127.0.0.1:port`, connecting as often as it
    /// takes.
    pub fn spawn(port: u16, load: Load) -> AckingClient {
        let stop = Arc::new(AtomicBool::new(false));
        let patience_ms = Arc::new(AtomicU64::new(u64::MAX));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, patience_ms, acked) = (stop.clone(), patience_ms.clone(), acked.clone());
            std::thread::spawn(move || run(port, load, &stop, &patience_ms, &acked))
        };
        AckingClient {
            thread: Some(thread),
            stop,
            patience_ms,
            acked,
        }
    }

    /// How many events have been acknowledged so far.
    pub fn acked_events(&self) -> u64 {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .map(|&(a, b)| b - a + 1)
            .sum()
    }

    /// Waits until at least `n` events are acknowledged, at most `timeout`; returns whether
    /// they were.
    pub fn wait_acked(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.acked_events() < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Sends no new requests, waits (at most `patience`) until every request sent is
    /// acknowledged, and says what happened.
    pub fn finish(mut self, patience: Duration) -> Report {
        self.patience_ms
            .store(patience.as_millis() as u64, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("joined once")
            .join()
            .expect("the client thread panicked")
    }
}

impl Drop for AckingClient {
    fn drop(&mut self) {
        // A test that failed early: make the thread give up at once.
        self.patience_ms.store(0, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request: its chunk id, the sequence numbers of its events, and its bytes.
struct Request {
    chunk: [u8; CHUNK_ID_LEN],
    first: u64,
    last: u64,
    bytes: Vec<u8>,
}

fn request(first: u64, n: u64, pad: &str) -> Request {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&first.to_be_bytes());
    raw[8..].copy_from_slice(b"ackclien");
    let chunk = chunk_id(&raw);
    let mut bytes = Vec::with_capacity(n as usize * (pad.len() + 48));
    let start = begin_packed(&mut bytes, b"crash.test");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    for seq in first..first + n {
        write_array_len(&mut bytes, 2);
        write_event_time(&mut bytes, now.as_secs() as u32, now.subsec_nanos());
        write_map_len(&mut bytes, 1);
        write_str(&mut bytes, b"message");
        write_str(&mut bytes, format!("{PREFIX}{seq:010} {pad}").as_bytes());
    }
    finish_packed(&mut bytes, start, n as usize, Some(&chunk), false);
    Request {
        chunk,
        first,
        last: first + n - 1,
        bytes,
    }
}

fn connect(port: u16) -> Option<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_nodelay(true).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(100))).ok()?;
    // A server that stopped reading (a full disk holds its sink) must not hold the client in
    // a write for ever: the connection is dropped and its requests sent again on a new one.
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(s)
}

fn run(
    port: u16,
    load: Load,
    stop: &AtomicBool,
    patience_ms: &AtomicU64,
    acked: &Mutex<Vec<(u64, u64)>>,
) -> Report {
    let pad = "x".repeat(load.pad);
    let mut probe = Vec::new();
    write_ack(&mut probe, &[b'A'; CHUNK_ID_LEN]);
    let ack_len = probe.len();
    let mut report = Report::default();
    let mut pending: VecDeque<Request> = VecDeque::new();
    let mut conn: Option<TcpStream> = None;
    let mut connected_before = false;
    let mut inbox = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut stopped_at: Option<Instant> = None;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        if stopping {
            let since = *stopped_at.get_or_insert_with(Instant::now);
            let patience = Duration::from_millis(patience_ms.load(Ordering::SeqCst));
            if since.elapsed() >= patience && !pending.is_empty() {
                report.error = Some(format!(
                    "{} requests still unacknowledged {patience:?} after the stop",
                    pending.len()
                ));
                break;
            }
        }
        let done_sending = stopping || load.total.is_some_and(|t| report.sent >= t);
        if done_sending && pending.is_empty() {
            break;
        }
        let Some(s) = conn.as_mut() else {
            let Some(mut s) = connect(port) else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            if connected_before {
                report.reconnects += 1;
            }
            connected_before = true;
            inbox.clear();
            let resent = pending.iter().try_for_each(|r| s.write_all(&r.bytes));
            report.resent_requests += pending.len() as u64;
            if resent.is_ok() {
                conn = Some(s);
            }
            continue;
        };
        while !done_sending && pending.len() < WINDOW {
            let n = match load.total {
                Some(t) => load.per_request.min(t - report.sent),
                None => load.per_request,
            };
            if n == 0 {
                break;
            }
            pending.push_back(request(report.sent, n, &pad));
            report.sent += n;
            let written = pending.back().map(|r| s.write_all(&r.bytes));
            if !matches!(written, Some(Ok(()))) {
                conn = None;
                break;
            }
            std::thread::sleep(load.pause);
        }
        let Some(s) = conn.as_mut() else { continue };
        match s.read(&mut buf) {
            Ok(0) => conn = None,
            Ok(n) => inbox.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => conn = None,
        }
        while inbox.len() >= ack_len {
            let answer = &inbox[..ack_len];
            let chunk =
                read_ack(answer).map(|span| &answer[span.start as usize..span.end as usize]);
            let front = pending.front();
            match (chunk, front) {
                (Some(c), Some(r)) if c == r.chunk => {
                    acked.lock().unwrap().push((r.first, r.last));
                    report.acked.push((r.first, r.last));
                    pending.pop_front();
                }
                _ => {
                    report.error = Some(format!(
                        "an answer that acknowledges no request in order: {answer:02x?} \
                         (waiting for {:?})",
                        front.map(|r| String::from_utf8_lossy(&r.chunk).into_owned())
                    ));
                    return report;
                }
            }
            inbox.drain(..ack_len);
        }
    }
    report
}

/// What a JSON-lines output file holds of the client's events.
#[derive(Debug)]
pub struct Output {
    /// How often each sequence number occurs.
    pub counts: Vec<u32>,
    pub lines: usize,
    /// Lines that are no JSON object with a client message (with their number, at most 5).
    pub bad: Vec<(usize, String)>,
    pub bad_count: usize,
    /// Sequence numbers the client never sent.
    pub out_of_range: Vec<u64>,
    /// Whether the file ends with a newline (or is empty).
    pub ends_whole: bool,
}

impl Output {
    /// Reads `path`, every line of it, for the client's events with sequence numbers below
    /// `sent`.
    pub fn read(path: &std::path::Path, sent: u64) -> Output {
        let bytes = std::fs::read(path).unwrap_or_default();
        let mut out = Output {
            counts: vec![0; sent as usize],
            lines: 0,
            bad: Vec::new(),
            bad_count: 0,
            out_of_range: Vec::new(),
            ends_whole: bytes.last().is_none_or(|&b| b == b'\n'),
        };
        for line in bytes.split(|&b| b == b'\n') {
            if line.is_empty() {
                continue;
            }
            out.lines += 1;
            let seq = serde_json::from_slice::<Value>(line).ok().and_then(|v| {
                let m = v.get("message")?.as_str()?;
                m.strip_prefix(PREFIX)?.get(..10)?.parse::<u64>().ok()
            });
            match seq {
                Some(s) if s < sent => out.counts[s as usize] += 1,
                Some(s) => out.out_of_range.push(s),
                None => {
                    out.bad_count += 1;
                    if out.bad.len() < 5 {
                        out.bad
                            .push((out.lines, shorten(&String::from_utf8_lossy(line))));
                    }
                }
            }
        }
        out
    }

    /// The acknowledged sequence numbers that are not in the output.
    pub fn missing(&self, acked: &[u64]) -> Vec<u64> {
        acked
            .iter()
            .copied()
            .filter(|&s| self.counts.get(s as usize).is_none_or(|&c| c == 0))
            .collect()
    }

    /// Asserts that every line is one of the client's events and the file ends with a newline.
    pub fn assert_every_line_whole(&self, what: &str) {
        assert!(
            self.bad_count == 0 && self.ends_whole,
            "{what}: {} of {} lines are no whole JSON event (first: {:?}); the file ends {}",
            self.bad_count,
            self.lines,
            self.bad,
            if self.ends_whole {
                "with a newline"
            } else {
                "inside a line"
            }
        );
        assert!(
            self.out_of_range.is_empty(),
            "{what}: sequence numbers the client never sent: {:?}",
            &self.out_of_range[..self.out_of_range.len().min(10)]
        );
    }
}

/// A line's start and end, for messages: a glued line shows where one event runs into another.
fn shorten(line: &str) -> String {
    if line.len() <= 400 {
        return line.to_owned();
    }
    let mut head = 200;
    while !line.is_char_boundary(head) {
        head -= 1;
    }
    format!("{} … {}", &line[..head], crate::harness::tail(line, 200))
}
