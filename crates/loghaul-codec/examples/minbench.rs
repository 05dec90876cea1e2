#![allow(clippy::unwrap_used)]
use bytes::Bytes;
use loghaul_codec::*;
use loghaul_core::{EventBatch, Timestamp};
use std::hint::black_box;
use std::time::Instant;
const RFC3164: &[u8] =
    b"<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick on /dev/pts/8";
const RFC5424: &[u8] = b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] An application event log entry...";
fn main() {
    let received = Timestamp::now();
    let ip = "192.0.2.1".parse().ok();
    for (name, line) in [("3164", RFC3164), ("5424", RFC5424)] {
        let mut buf = Vec::new();
        for _ in 0..1000 {
            buf.extend_from_slice(line);
            buf.push(b'\n');
        }
        let mut frames = Vec::new();
        Framer::new(FramingMode::Auto, 65536).decode(
            &buf,
            &mut frames,
            &mut FramingStats::default(),
        );
        let arena = Bytes::from(buf);
        let mut d = Decoder::new(DecodeOptions::default());
        let mut out = Vec::with_capacity(1 << 20);
        let (mut bp, mut be, mut bb) = (u128::MAX, u128::MAX, u128::MAX);
        for _ in 0..2000 {
            let t0 = Instant::now();
            let mut batch = EventBatch::new(arena.clone(), "b".into(), "syslog");
            d.decode_batch(
                &mut batch,
                &frames,
                received,
                ip,
                &mut DecodeStats::default(),
            );
            let t1 = Instant::now();
            out.clear();
            for e in &batch.events {
                encode_json(&batch, e, &mut out);
            }
            black_box(out.len());
            let t2 = Instant::now();
            bp = bp.min((t1 - t0).as_nanos());
            be = be.min((t2 - t1).as_nanos());
            bb = bb.min((t2 - t0).as_nanos());
        }
        println!(
            "{name}: parse {} ns/ev, encode {} ns/ev, both {} ns/ev",
            bp / 1000,
            be / 1000,
            bb / 1000
        );
    }
}
