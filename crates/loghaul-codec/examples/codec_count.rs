//! A fixed workload for instruction counting (wall clock is too noisy on shared machines):
//! decode and JSON-encode N events of one kind, in batches of 1000 frames.
//!
//! ```text
//! cargo build --release -p loghaul-codec --example codec_count
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     $CARGO_TARGET_DIR/release/examples/codec_count 3164     # or 5424
//! callgrind_annotate /tmp/cg.out | head -40
//! ```
//!
//! Instructions per event = total Ir / N (setup is a small fraction of it).

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
    let line = match std::env::args().nth(1).as_deref() {
        Some("3164") | None => RFC3164,
        Some("5424") => RFC5424,
        Some(other) => {
            eprintln!("usage: codec_count [3164|5424] (got {other})");
            return ExitCode::FAILURE;
        }
    };
    let mut buf = Vec::new();
    for _ in 0..BATCH {
        buf.extend_from_slice(line);
        buf.push(b'\n');
    }
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
    for _ in 0..N / BATCH {
        let mut batch = EventBatch::new(arena.clone(), "count".into(), "syslog");
        let mut stats = DecodeStats::default();
        decoder.decode_batch(&mut batch, &frames, received, ip, &mut stats);
        out.clear();
        for e in &batch.events {
            loghaul_codec::encode_json(&batch, e, &mut out);
        }
        total += black_box(out.len());
    }
    println!("{N} events, {total} bytes of JSON");
    ExitCode::SUCCESS
}
