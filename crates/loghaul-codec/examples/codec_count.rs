//! A fixed workload for instruction counting (wall clock is too noisy on shared machines):
//! decode and JSON-encode N events of one kind, in batches of 1000 frames.
//!
//! ```text
//! cargo build --release -p loghaul-codec --example codec_count
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     $CARGO_TARGET_DIR/release/examples/codec_count 3164     # or 5424, 5424b
//! callgrind_annotate /tmp/cg.out | head -40
//! ```
//!
//! `3164` and `5424` repeat one RFC example line; `5424b` is 1000 distinct lines shaped like the
//! load generator's (two SD elements, microsecond timestamps that advance, varying header fields),
//! so per-batch caches see what they would on a real stream.
//!
//! Instructions per event = total Ir / N (setup is a small fraction of it). A second argument
//! sets N (default 200,000; a multiple of 1000), e.g. a few million for a `perf record` profile.

use std::hint::black_box;
use std::process::ExitCode;

use bytes::Bytes;
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Frame, Framer, FramingMode, FramingStats,
};
use loghaul_core::{EventBatch, Timestamp};

const RFC3164: &[u8] =
    b"<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick on /dev/pts/8";
const RFC5424: &[u8] = b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] An application event log entry...";
const BATCH: usize = 1000;
const N: usize = 200_000;

fn main() -> ExitCode {
    let mut buf = Vec::new();
    match std::env::args().nth(1).as_deref() {
        Some("3164") | None => repeat(&mut buf, RFC3164),
        Some("5424") => repeat(&mut buf, RFC5424),
        Some("5424b") => loadgen_5424(&mut buf),
        Some(other) => {
            eprintln!("usage: codec_count [3164|5424|5424b] [N] (got {other})");
            return ExitCode::FAILURE;
        }
    }
    let n = match std::env::args().nth(2).map(|a| a.parse::<usize>()) {
        None => N,
        Some(Ok(n)) if n >= BATCH => n,
        Some(_) => {
            eprintln!("codec_count: N must be a whole number of at least {BATCH}");
            return ExitCode::FAILURE;
        }
    };
    let mut frames: Vec<Frame> = Vec::new();
    Framer::new(FramingMode::Auto, 64 * 1024).decode(
        &buf,
        &mut frames,
        &mut FramingStats::default(),
    );
    let arena = Bytes::from(buf);
    // A fixed receive time keeps runs comparable (2026-12-01T00:00:00.5Z).
    let received = Timestamp::from_nanos(1_796_083_200_500_000_000, 6);
    let ip = "192.0.2.1".parse().ok();
    let mut decoder = Decoder::new(DecodeOptions::default());
    let mut out = Vec::with_capacity(BATCH * 512);
    let mut total = 0usize;
    for _ in 0..n / BATCH {
        let mut batch = EventBatch::new(arena.clone(), "count".into(), "syslog");
        let mut stats = DecodeStats::default();
        decoder.decode_batch(&mut batch, &frames, received, ip, &mut stats);
        out.clear();
        for e in &batch.events {
            loghaul_codec::encode_json(&batch, e, &mut out);
        }
        total += black_box(out.len());
    }
    println!("{} events, {total} bytes of JSON", n / BATCH * BATCH);
    ExitCode::SUCCESS
}

/// `BATCH` copies of `line`, newline-terminated.
fn repeat(buf: &mut Vec<u8>, line: &[u8]) {
    for _ in 0..BATCH {
        buf.extend_from_slice(line);
        buf.push(b'\n');
    }
}

/// `BATCH` lines like loghaul-bench's RFC 5424 payload, from a fixed seed:
/// `<89>1 2026-11-22T05:53:39.439475Z build7 sshd 10690 ID45 [exampleSDID@32473 iut="3"
/// eventSource="Application" eventID="3048"][meta@32473 sequenceId="60533"] gen=0 seq=.. t=..`
fn loadgen_5424(buf: &mut Vec<u8>) {
    const HOSTS: [&str; 4] = ["build7", "web01", "db-primary", "edge3.example.net"];
    const APPS: [&str; 4] = ["sshd", "nginx", "postgres", "cron"];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // 2026-11-22T05:53:39.439475Z, advancing ~1 ms per line: one batch spans about a second.
    let base_micros = 39_439_475u64;
    for k in 0..BATCH as u64 {
        let micros = base_micros + k * 997;
        let line = format!(
            "<{pri}>1 2026-11-22T05:53:{sec:02}.{frac:06}Z {host} {app} {pid} ID{id} \
             [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"{event}\"]\
             [meta@32473 sequenceId=\"{sequence}\"] gen=0 seq={k:010} t={t}",
            pri = below(24) * 8 + below(8),
            sec = micros / 1_000_000,
            frac = micros % 1_000_000,
            host = HOSTS[below(4) as usize],
            app = APPS[below(4) as usize],
            pid = 100 + below(30_000),
            id = below(100),
            event = 1000 + below(9000),
            sequence = below(1_000_000),
            t = 1_795_326_819_448_902_199u64 + k * 997_000,
        );
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
    }
}
