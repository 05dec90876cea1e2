//! Codec benchmarks: parse + encode per event for typical RFC 3164 and RFC 5424 lines and for a
//! forward-protocol PackedForward request (measured over batches of 1000 events, reported per
//! element), JSON records as the Kafka source and the HTTP server read them, and framing
//! throughput over 1 MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Frame, Framer, FramingMode, FramingStats, encode_json,
};
use loghaul_core::{EventBatch, Timestamp};

const RFC3164: &[u8] =
    b"<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick on /dev/pts/8";
const RFC5424: &[u8] = b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] An application event log entry...";
/// The shape loghaul-bench sends: two SD elements, microsecond timestamp, message after SD.
const RFC5424_LOADGEN: &[u8] = b"<89>1 2026-11-22T05:53:39.439475Z build7 sshd 10690 ID45 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"3048\"][meta@32473 sequenceId=\"60533\"] gen=0 seq=0000000000 t=1795326819448902199";
const BATCH: usize = 1000;

/// `BATCH` copies of `line`, newline-separated, and their frames.
fn batch_of(line: &[u8]) -> (Bytes, Vec<Frame>) {
    let mut buf = Vec::new();
    for _ in 0..BATCH {
        buf.extend_from_slice(line);
        buf.push(b'\n');
    }
    let mut frames = Vec::new();
    let n = Framer::new(FramingMode::Auto, 64 * 1024).decode(
        &buf,
        &mut frames,
        &mut FramingStats::default(),
    );
    assert_eq!((n, frames.len()), (buf.len(), BATCH));
    (Bytes::from(buf), frames)
}

fn parse_encode(c: &mut Criterion) {
    let received = Timestamp::now();
    let ip = "192.0.2.1".parse().ok();
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, line) in [
        ("rfc3164", RFC3164),
        ("rfc5424_sd", RFC5424),
        ("rfc5424_loadgen", RFC5424_LOADGEN),
    ] {
        let (arena, frames) = batch_of(line);
        let mut decoder = Decoder::new(DecodeOptions::default());
        let mut out = Vec::with_capacity(BATCH * 512);
        group.bench_function(format!("{name}/parse+encode"), |b| {
            b.iter(|| {
                let mut batch = EventBatch::new(arena.clone(), "bench".into(), "syslog");
                let mut stats = DecodeStats::default();
                decoder.decode_batch(&mut batch, &frames, received, ip, &mut stats);
                out.clear();
                for e in &batch.events {
                    encode_json(&batch, e, &mut out);
                }
                black_box(out.len())
            })
        });
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| {
                let mut batch = EventBatch::new(arena.clone(), "bench".into(), "syslog");
                let mut stats = DecodeStats::default();
                decoder.decode_batch(&mut batch, &frames, received, ip, &mut stats);
                black_box(batch.events.len())
            })
        });
        let mut batch = EventBatch::new(arena.clone(), "bench".into(), "syslog");
        decoder.decode_batch(
            &mut batch,
            &frames,
            received,
            ip,
            &mut DecodeStats::default(),
        );
        group.bench_function(format!("{name}/encode"), |b| {
            b.iter(|| {
                out.clear();
                for e in &batch.events {
                    encode_json(&batch, e, &mut out);
                }
                black_box(out.len())
            })
        });
    }
    group.finish();
}

fn framing(c: &mut Criterion) {
    let mut buf = Vec::with_capacity(1 << 20);
    while buf.len() + RFC3164.len() < 1 << 20 {
        buf.extend_from_slice(RFC3164);
        buf.push(b'\n');
    }
    buf.resize(1 << 20, b'x');
    let mut group = c.benchmark_group("framing");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    let mut frames = Vec::with_capacity(buf.len() / 64);
    for mode in [FramingMode::Newline, FramingMode::Auto] {
        group.bench_function(format!("{mode:?}/1MiB"), |b| {
            b.iter(|| {
                frames.clear();
                let mut framer = Framer::new(mode, 64 * 1024);
                let n = framer.decode(black_box(&buf), &mut frames, &mut FramingStats::default());
                black_box((n, frames.len()))
            })
        });
    }
    group.finish();
}

/// A PackedForward request of `BATCH` entries shaped like the lab's: EventTime and a record with
/// a 100-byte message.
fn packed_request() -> Vec<u8> {
    use loghaul_codec::forward::msgpack::*;
    let mut entries = Vec::new();
    for i in 0..BATCH {
        write_array_len(&mut entries, 2);
        write_event_time(&mut entries, 1_795_326_819, 439_475_000 + i as u32);
        write_map_len(&mut entries, 1);
        write_str(&mut entries, b"message");
        let msg = format!(
            "gen=0 seq={i:010} t=1795326819448902 lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod"
        );
        write_str(&mut entries, &msg.as_bytes()[..100]);
    }
    let mut req = Vec::new();
    write_array_len(&mut req, 3);
    write_str(&mut req, b"bench.gen");
    write_bin(&mut req, &entries);
    write_map_len(&mut req, 1);
    write_str(&mut req, b"size");
    write_uint(&mut req, BATCH as u64);
    req
}

fn forward(c: &mut Criterion) {
    use bytes::BytesMut;
    use loghaul_codec::forward::{Decoder as Fwd, Limits, Splitter, encode_entry};
    let req = packed_request();
    let limits = Limits {
        max_decompressed_size: 1 << 30,
    };
    let mut group = c.benchmark_group("forward");
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut decoder = Fwd::new(limits);
    let decode = |decoder: &mut Fwd| {
        let mut arena = BytesMut::from(&req[..]);
        let n = Splitter::new(1 << 24)
            .split(&arena)
            .ok()
            .flatten()
            .unwrap_or(0);
        let mut batch = EventBatch::new(Bytes::new(), "bench".into(), "fluent");
        batch.peers.push([192, 0, 2, 1].into());
        decoder.decode(&mut arena, 0, n, &mut batch, 0).unwrap();
        batch.arena = arena.freeze();
        batch
    };
    group.bench_function("packed/split+decode", |b| {
        b.iter(|| black_box(decode(&mut decoder).events.len()))
    });
    let batch = decode(&mut decoder);
    assert_eq!(batch.len(), BATCH);
    let mut out = Vec::with_capacity(BATCH * 512);
    group.bench_function("packed/encode_json", |b| {
        b.iter(|| {
            out.clear();
            for e in &batch.events {
                encode_json(&batch, e, &mut out);
            }
            black_box(out.len())
        })
    });
    group.bench_function("packed/encode_entry", |b| {
        b.iter(|| {
            out.clear();
            for e in &batch.events {
                encode_entry(&batch, e, false, &mut out);
            }
            black_box(out.len())
        })
    });
    group.finish();
}

/// A JSON line as loghaul's own file and Kafka sinks write it (what a Kafka consumer of
/// loghaul's topic reads, 340 bytes).
const JSON_LINE: &[u8] = br#"{"timestamp":"2026-11-26T12:10:22.637184Z","hostname":"web-03.example.net","appname":"nginx","procid":"21877","facility":"local4","severity":"notice","message":"GET /api/v2/orders?page=3 HTTP/1.1 200 512 0.004 \"Mozilla/5.0 (X11; Linux x86_64)\" gen=0 seq=0000001234","source_ip":"192.0.2.17","source_type":"syslog"}"#;

fn json(c: &mut Criterion) {
    use loghaul_codec::record::RecordBuilder;
    use loghaul_core::Event;
    let mut group = c.benchmark_group("json");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("record", |b| {
        b.iter(|| {
            let mut r = RecordBuilder::default();
            for _ in 0..BATCH {
                r.json_record(JSON_LINE, Event::default(), &[]).unwrap();
            }
            black_box(r.events.len())
        })
    });
    group.finish();
}

criterion_group!(benches, parse_encode, forward, json, framing);
criterion_main!(benches);
