//! A fixed workload for instruction counting of the `basic` path: newline framing plus the raw
//! decoder (no parsing, no encoding), over 128KiB reads of generator-shaped lines.
//!
//! ```text
//! cargo build --release -p loghaul-codec --example frame_count
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     $CARGO_TARGET_DIR/release/examples/frame_count
//! ```
//!
//! Instructions per event = total Ir / the event count it prints. An argument sets the line
//! length (1..=128 bytes before the newline; default 128): `basic` sends 64.

use std::hint::black_box;
use std::process::ExitCode;

use bytes::Bytes;
use loghaul_codec::syslog::Format;
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Frame, Framer, FramingMode, FramingStats,
};
use loghaul_core::{EventBatch, Timestamp};

/// What `loghaul bench gen --format raw` sends (128 bytes and a newline).
const LINE: &[u8] = b"gen=0 seq=0000000042 t=1795326819448902199 lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incid";
const READ: usize = 128 * 1024;
const READS: usize = 200;

fn main() -> ExitCode {
    let line = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => LINE,
        Some(Ok(n @ 1..=128)) => &LINE[..n],
        Some(_) => {
            eprintln!("usage: frame_count [LINE_BYTES, 1..=128]");
            return ExitCode::FAILURE;
        }
    };
    let mut buf = Vec::with_capacity(READ + line.len() + 1);
    while buf.len() + line.len() < READ {
        buf.extend_from_slice(line);
        buf.push(b'\n');
    }
    let arena = Bytes::from(buf);
    let received = Timestamp::from_nanos(1_796_083_200_500_000_000, 6);
    let ip = "192.0.2.1".parse().ok();
    let mut decoder = Decoder::new(DecodeOptions {
        format: Format::Raw,
        ..DecodeOptions::default()
    });
    let mut framer = Framer::new(FramingMode::Newline, 64 * 1024);
    let mut frames: Vec<Frame> = Vec::with_capacity(1024);
    let mut events = 0usize;
    for _ in 0..READS {
        frames.clear();
        let mut fstats = FramingStats::default();
        framer.decode(&arena, &mut frames, &mut fstats);
        let mut batch = EventBatch::new(arena.clone(), "count".into(), "syslog");
        let mut stats = DecodeStats::default();
        decoder.decode_batch(&mut batch, &frames, received, ip, &mut stats);
        events += black_box(batch.events.len());
    }
    println!("{events} events");
    ExitCode::SUCCESS
}
