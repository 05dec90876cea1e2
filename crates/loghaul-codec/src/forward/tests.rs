//! Wire tests: hand-built msgpack requests in every mode, time encoding and option, and the
//! bad inputs, split and decoded as a connection would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;

use bytes::{Bytes, BytesMut};
use loghaul_core::{EventBatch, Timestamp, Value};

use super::msgpack::*;
use super::*;

const LIMITS: Limits = Limits {
    max_decompressed_size: 1 << 20,
};

/// Splits and decodes a whole stream; returns the requests, the batch (arena frozen), the
/// stats, and the first error, if any.
fn decode_stream(stream: &[u8]) -> (Vec<Request>, EventBatch, DecodeStats, Option<String>) {
    decode_stream_as(stream, false)
}

/// [`decode_stream`] into a batch whose records are decoded (`raw` false) or only walked.
fn decode_stream_as(
    stream: &[u8],
    raw: bool,
) -> (Vec<Request>, EventBatch, DecodeStats, Option<String>) {
    let mut buf = BytesMut::from(stream);
    let mut splitter = Splitter::new(1 << 20);
    let mut ranges = Vec::new();
    let mut at = 0;
    let mut error = None;
    loop {
        match splitter.split(&buf[at..]) {
            Ok(Some(n)) => {
                ranges.push((at, at + n));
                at += n;
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let mut arena = buf.split_to(at);
    let mut batch = EventBatch::new(Bytes::new(), "src".into(), "fluent");
    batch.raw_records = raw;
    let mut decoder = Decoder::new(LIMITS);
    let mut requests = Vec::new();
    for (s, e) in ranges {
        match decoder.decode(&mut arena, s, e, &mut batch, 0) {
            Ok(r) => requests.push(r),
            Err(e) => {
                error.get_or_insert(e.to_string());
                break;
            }
        }
    }
    batch.arena = arena.freeze();
    (requests, batch, decoder.stats, error)
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn text(batch: &EventBatch, v: Value) -> String {
    match v {
        Value::Str(s) | Value::Bytes(s) => String::from_utf8_lossy(batch.str(s)).into_owned(),
        other => format!("{other:?}"),
    }
}

fn message(batch: &EventBatch, i: usize) -> String {
    String::from_utf8_lossy(batch.str(batch.events[i].message.or_empty())).into_owned()
}

/// An entry `[time, {"message": msg, "n": n}]` with `time` already encoded.
fn entry(out: &mut Vec<u8>, time: &[u8], msg: &str, n: i64) {
    write_array_len(out, 2);
    out.extend_from_slice(time);
    write_map_len(out, 2);
    write_str(out, b"message");
    write_str(out, msg.as_bytes());
    write_str(out, b"n");
    write_int(out, n);
}

fn event_time(sec: u32, nsec: u32) -> Vec<u8> {
    let mut t = Vec::new();
    write_event_time(&mut t, sec, nsec);
    t
}

fn option(out: &mut Vec<u8>, pairs: &[(&str, &str)]) {
    write_map_len(out, pairs.len());
    for (k, v) in pairs {
        write_str(out, k.as_bytes());
        write_str(out, v.as_bytes());
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The Message-mode example of the protocol summary, byte for byte.
#[test]
fn message_mode_with_event_time() {
    let bytes = hex(
        "93 a8 74 61 67 2e 6e 61 6d 65 d7 00 55 ec e6 f8 07 5b cd 15 81 a7 6d 65 73 73 61 67 65 a3 62 61 72",
    );
    let (reqs, batch, stats, err) = decode_stream(&bytes);
    assert_eq!(err, None);
    assert_eq!(reqs[0].mode, Mode::Message);
    assert_eq!(reqs[0].chunk, None);
    assert_eq!(batch.len(), 1);
    let e = batch.events[0];
    assert_eq!(batch.str(e.tag.or_empty()), b"tag.name");
    assert_eq!(message(&batch, 0), "bar");
    assert_eq!(
        e.timestamp,
        Some(Timestamp::from_nanos(1_441_588_984_123_456_789, 9))
    );
    // The message was lifted out of the record, which is now empty.
    assert!(batch.fields_of(&e).is_empty());
    assert_eq!(stats, DecodeStats::default());
}

#[test]
fn every_time_encoding() {
    let mut ext8 = vec![0xc7, 0x08, 0x00];
    ext8.extend_from_slice(&1_700_000_000u32.to_be_bytes());
    ext8.extend_from_slice(&5u32.to_be_bytes());
    let mut uint32 = Vec::new();
    write_uint(&mut uint32, 1_700_000_000);
    let fixint = vec![0x05];
    let mut with_metadata = Vec::new();
    write_array_len(&mut with_metadata, 2);
    with_metadata.extend_from_slice(&event_time(1_700_000_000, 7));
    write_map_len(&mut with_metadata, 1);
    write_str(&mut with_metadata, b"otlp");
    write_str(&mut with_metadata, b"x");
    let mut int_with_metadata = Vec::new();
    write_array_len(&mut int_with_metadata, 2);
    write_int(&mut int_with_metadata, 1_700_000_001);
    write_map_len(&mut int_with_metadata, 0);
    let zero = event_time(0, 0);
    let mut blob = Vec::new();
    for (i, t) in [
        &event_time(1_700_000_000, 999_999_999),
        &ext8,
        &uint32,
        &fixint,
        &with_metadata,
        &int_with_metadata,
        &zero,
    ]
    .iter()
    .enumerate()
    {
        entry(&mut blob, t, &format!("m{i}"), i as i64);
    }
    let mut req = Vec::new();
    write_array_len(&mut req, 2);
    write_str(&mut req, b"t");
    write_bin(&mut req, &blob);
    let (_, batch, stats, err) = decode_stream(&req);
    assert_eq!(err, None);
    assert_eq!(stats.invalid_events, 0);
    let times: Vec<Option<Timestamp>> = batch.events.iter().map(|e| e.timestamp).collect();
    assert_eq!(
        times,
        [
            Some(Timestamp::from_nanos(1_700_000_000_999_999_999, 9)),
            Some(Timestamp::from_nanos(1_700_000_000_000_000_005, 9)),
            Some(Timestamp::from_nanos(1_700_000_000_000_000_000, 0)),
            Some(Timestamp::from_nanos(5_000_000_000, 0)),
            Some(Timestamp::from_nanos(1_700_000_000_000_000_007, 9)),
            Some(Timestamp::from_nanos(1_700_000_001_000_000_000, 0)),
            None, // 0 means "now": the receive time stands in.
        ]
    );
}

fn forward_request(tag: &str, entries: &[Vec<u8>], opt: Option<&[(&str, &str)]>) -> Vec<u8> {
    let mut req = Vec::new();
    write_array_len(&mut req, 2 + usize::from(opt.is_some()));
    write_str(&mut req, tag.as_bytes());
    write_array_len(&mut req, entries.len());
    for e in entries {
        req.extend_from_slice(e);
    }
    if let Some(o) = opt {
        option(&mut req, o);
    }
    req
}

fn packed_request(tag: &str, blob: &[u8], as_str: bool, opt: Option<&[(&str, &str)]>) -> Vec<u8> {
    let mut req = Vec::new();
    write_array_len(&mut req, 2 + usize::from(opt.is_some()));
    write_str(&mut req, tag.as_bytes());
    if as_str {
        // fluentd's out_forward: str32 holding binary msgpack.
        req.push(0xdb);
        req.extend_from_slice(&(blob.len() as u32).to_be_bytes());
        req.extend_from_slice(blob);
    } else {
        write_bin(&mut req, blob);
    }
    if let Some(o) = opt {
        option(&mut req, o);
    }
    req
}

fn entries(n: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let list: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut e = Vec::new();
            entry(
                &mut e,
                &event_time(1_700_000_000 + i as u32, 0),
                &format!("e{i}"),
                i as i64,
            );
            e
        })
        .collect();
    let blob = list.concat();
    (list, blob)
}

#[test]
fn forward_packed_and_compressed_modes_with_chunks() {
    let (list, blob) = entries(3);
    let chunk = "p8n9gmxTQVC8/nh2wlKKeQ==\n"; // out_forward's Base64.encode64 keeps the "\n"
    let mut stream = forward_request("fwd", &list, Some(&[("chunk", chunk)]));
    stream.extend(packed_request("pk", &blob, false, Some(&[("size", "3")])));
    stream.extend(packed_request(
        "pks",
        &blob,
        true,
        Some(&[("compressed", "text")]),
    ));
    stream.extend(packed_request(
        "gz",
        &gzip(&blob),
        false,
        Some(&[("compressed", "gzip"), ("chunk", "c2")]),
    ));
    // Several gzip members, as the spec allows, and sent as str as fluentd does.
    let mut members = gzip(&list[0]);
    members.extend(gzip(&[list[1].clone(), list[2].clone()].concat()));
    stream.extend(packed_request(
        "gz2",
        &members,
        true,
        Some(&[("compressed", "gzip")]),
    ));
    let zstd = zstd::bulk::compress(&blob, 3).unwrap();
    stream.extend(packed_request(
        "zs",
        &zstd,
        false,
        Some(&[("compressed", "zstd")]),
    ));
    let (reqs, batch, stats, err) = decode_stream(&stream);
    assert_eq!(err, None);
    let modes: Vec<Mode> = reqs.iter().map(|r| r.mode).collect();
    assert_eq!(
        modes,
        [
            Mode::Forward,
            Mode::PackedForward,
            Mode::PackedForward,
            Mode::CompressedPackedForward,
            Mode::CompressedPackedForward,
            Mode::CompressedPackedForward,
        ]
    );
    assert!(reqs.iter().all(|r| r.events == 3));
    assert_eq!(batch.len(), 18);
    let chunk_of = |r: &Request| r.chunk.map(|(s, e)| batch.arena[s..e].to_vec());
    assert_eq!(chunk_of(&reqs[0]), Some(chunk.as_bytes().to_vec()));
    assert_eq!(chunk_of(&reqs[3]), Some(b"c2".to_vec()));
    assert_eq!(chunk_of(&reqs[1]), None);
    for (i, e) in batch.events.iter().enumerate() {
        assert_eq!(message(&batch, i), format!("e{}", i % 3));
        let fields = batch.fields_of(e);
        assert_eq!(fields.len(), 1);
        assert_eq!(batch.str(fields[0].name), b"n");
        assert_eq!(fields[0].value, Value::Int((i % 3) as i64));
    }
    let tags: Vec<&[u8]> = batch
        .events
        .iter()
        .step_by(3)
        .map(|e| batch.str(e.tag.or_empty()))
        .collect();
    assert_eq!(tags, [&b"fwd"[..], b"pk", b"pks", b"gz", b"gz2", b"zs"]);
    assert_eq!(stats, DecodeStats::default());
}

#[test]
fn records_keep_every_value_type_nested() {
    let mut rec = Vec::new();
    write_map_len(&mut rec, 9);
    write_str(&mut rec, b"s");
    write_str(&mut rec, b"text");
    write_str(&mut rec, b"b");
    write_bin(&mut rec, &[0xff, 0x00]);
    write_str(&mut rec, b"i");
    write_int(&mut rec, -5);
    write_str(&mut rec, b"u");
    write_uint(&mut rec, u64::MAX);
    write_str(&mut rec, b"f");
    write_f64(&mut rec, 1.5);
    write_str(&mut rec, b"t");
    write_bool(&mut rec, true);
    write_str(&mut rec, b"z");
    write_nil(&mut rec);
    write_str(&mut rec, b"m");
    write_map_len(&mut rec, 1);
    write_str(&mut rec, b"list");
    write_array_len(&mut rec, 2);
    write_int(&mut rec, 1);
    write_map_len(&mut rec, 1);
    write_str(&mut rec, b"deep");
    write_str(&mut rec, b"yes");
    write_str(&mut rec, b"x");
    write_ext(&mut rec, 5, &[1, 2, 3]);
    let mut req = Vec::new();
    write_array_len(&mut req, 3);
    write_str(&mut req, b"tag");
    write_int(&mut req, 1);
    req.extend(rec);
    let (_, batch, _, err) = decode_stream(&req);
    assert_eq!(err, None);
    let e = batch.events[0];
    assert!(e.message.is_none(), "no message key: no message");
    assert_eq!(batch.fields_of(&e).len(), 9);
    assert_eq!(text(&batch, batch.lookup(&e, "s").unwrap()), "text");
    assert!(matches!(batch.lookup(&e, "b"), Some(Value::Bytes(_))));
    assert_eq!(batch.lookup(&e, "i"), Some(Value::Int(-5)));
    assert_eq!(batch.lookup(&e, "u"), Some(Value::UInt(u64::MAX)));
    assert_eq!(batch.lookup(&e, "f"), Some(Value::Float(1.5)));
    assert_eq!(batch.lookup(&e, "t"), Some(Value::Bool(true)));
    assert_eq!(batch.lookup(&e, "z"), Some(Value::Null));
    assert_eq!(batch.lookup(&e, "m.list.0"), Some(Value::Int(1)));
    assert_eq!(
        text(&batch, batch.lookup(&e, "m.list.1.deep").unwrap()),
        "yes"
    );
    assert!(matches!(batch.lookup(&e, "x"), Some(Value::Ext(5, s)) if batch.str(s) == [1, 2, 3]));
}

#[test]
fn invalid_events_are_dropped_and_counted_the_rest_kept() {
    let mut blob = Vec::new();
    entry(&mut blob, &event_time(1, 0), "ok1", 1);
    // A float time (fluentd refuses those).
    let mut float = Vec::new();
    write_f64(&mut float, 1.5);
    entry(&mut blob, &float, "float", 2);
    // A record that is not a map.
    write_array_len(&mut blob, 2);
    write_int(&mut blob, 1);
    write_str(&mut blob, b"not a map");
    // An entry of the wrong length.
    write_array_len(&mut blob, 3);
    write_int(&mut blob, 1);
    write_map_len(&mut blob, 0);
    write_nil(&mut blob);
    // A key that is not a string.
    write_array_len(&mut blob, 2);
    write_int(&mut blob, 1);
    write_map_len(&mut blob, 1);
    write_int(&mut blob, 7);
    write_map_len(&mut blob, 1);
    write_str(&mut blob, b"nested");
    write_int(&mut blob, 1);
    entry(&mut blob, &event_time(2, 0), "ok2", 6);
    let stream = packed_request("t", &blob, false, Some(&[("chunk", "c")]));
    let (reqs, batch, stats, err) = decode_stream(&stream);
    assert_eq!(err, None);
    assert_eq!(reqs[0].events, 2);
    assert!(reqs[0].chunk.is_some(), "the request is still acked");
    assert_eq!(stats.invalid_events, 4);
    assert_eq!(
        (message(&batch, 0), message(&batch, 1)),
        ("ok1".into(), "ok2".into())
    );
    assert_eq!(batch.lookup(&batch.events[1], "n"), Some(Value::Int(6)));
}

#[test]
fn a_tag_that_is_not_a_string_drops_the_events_and_keeps_the_ack() {
    let (list, _) = entries(2);
    let mut req = Vec::new();
    write_array_len(&mut req, 3);
    write_int(&mut req, 42);
    write_array_len(&mut req, 2);
    req.extend(list.concat());
    option(&mut req, &[("chunk", "c")]);
    let (reqs, batch, stats, err) = decode_stream(&req);
    assert_eq!(err, None);
    assert_eq!(
        (reqs[0].events, batch.len(), stats.invalid_events),
        (0, 0, 2)
    );
    assert!(reqs[0].chunk.is_some());
}

#[test]
fn other_signals_and_heartbeats() {
    let (_, blob) = entries(2);
    let mut req = Vec::new();
    write_array_len(&mut req, 3);
    write_str(&mut req, b"m");
    write_bin(&mut req, &blob);
    write_map_len(&mut req, 1);
    write_str(&mut req, b"fluent_signal");
    write_int(&mut req, 1);
    let mut stream = vec![0xc0];
    stream.extend(req);
    let (reqs, batch, stats, err) = decode_stream(&stream);
    assert_eq!(err, None);
    assert_eq!(reqs[0].mode, Mode::Heartbeat);
    assert_eq!(batch.len(), 0);
    assert_eq!(stats.other_signals, 2);
    // Anything else at the top level (here JSON's `[`, an integer to msgpack) ends the stream.
    let (_, _, _, err) = decode_stream(br#"["tag",1,{"a":1}]"#);
    assert!(
        err.unwrap_or_default()
            .contains("neither a request nor a heartbeat")
    );
}

#[test]
fn bad_requests_are_errors_that_keep_nothing() {
    let (list, blob) = entries(2);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("one element", vec![0x91, 0xa1, b't'], "array of 2 to 4"),
        (
            "five elements",
            {
                let mut r = vec![0x95, 0xa1, b't', 0x01, 0x80, 0x80, 0x80];
                r.truncate(7);
                r
            },
            "array of 2 to 4",
        ),
        (
            "message mode with 2",
            vec![0x92, 0xa1, b't', 0x01],
            "wrong number",
        ),
        (
            "truncated packed entries",
            packed_request("t", &blob[..blob.len() - 3], false, None),
            "runs past",
        ),
        (
            "not gzip",
            packed_request("t", b"plain bytes", false, Some(&[("compressed", "gzip")])),
            "cannot decompress",
        ),
        (
            "snappy",
            packed_request("t", &blob, false, Some(&[("compressed", "snappy")])),
            "unknown compression",
        ),
        (
            "option not a map",
            {
                let mut r = forward_request("t", &list, None);
                r[0] = 0x93;
                r.push(0x01);
                r
            },
            "option is not a map",
        ),
    ];
    for (name, bytes, want) in cases {
        let (_, batch, _, err) = decode_stream(&bytes);
        let err = err.unwrap_or_else(|| panic!("{name}: accepted"));
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(batch.len(), 0, "{name}: nothing kept");
    }
}

#[test]
fn a_gzip_bomb_stops_at_the_limit() {
    // Of zeros: every entry is invalid, so it is refused long before the limit.
    let zeros = vec![0u8; 4 << 20];
    let bomb = gzip(&zeros);
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let req = packed_request("t", &bomb, false, Some(&[("compressed", "gzip")]));
    let (_, batch, stats, err) = decode_stream(&req);
    assert!(err.unwrap_or_default().contains("no valid event"));
    assert_eq!(batch.len(), 0);
    assert_eq!(stats.invalid_events, 0, "a refused request counts nothing");
    // Of valid entries with a long string each: the inflated size is what stops it.
    let mut entries = Vec::new();
    while entries.len() < 4 << 20 {
        entry(&mut entries, &[0x01], &"x".repeat(60_000), 1);
    }
    let req = packed_request("t", &gzip(&entries), false, Some(&[("compressed", "gzip")]));
    let (_, batch, _, err) = decode_stream(&req);
    assert!(err.unwrap_or_default().contains("max_decompressed_size"));
    assert_eq!(batch.len(), 0, "nothing of the refused request stays");
}

#[test]
fn encoded_entries_decode_to_the_same_events() {
    let (_, blob) = entries(4);
    let (_, batch, _, _) = decode_stream(&packed_request("relay", &blob, false, None));
    let mut out = Vec::new();
    let start = begin_packed(&mut out, b"relay");
    for e in &batch.events {
        encode_entry(&batch, e, false, &mut out);
    }
    finish_packed(&mut out, start, batch.len(), Some(b"id\n"), false);
    let (reqs, again, _, err) = decode_stream(&out);
    assert_eq!(err, None);
    assert_eq!(reqs[0].events, 4);
    assert_eq!(
        reqs[0].chunk.map(|(s, e)| again.arena[s..e].to_vec()),
        Some(b"id\n".to_vec())
    );
    for (a, b) in batch.events.iter().zip(&again.events) {
        assert_eq!(a.timestamp, b.timestamp);
        assert_eq!(
            batch.str(a.message.or_empty()),
            again.str(b.message.or_empty())
        );
        assert_eq!(batch.lookup(a, "n"), again.lookup(b, "n"));
    }
    let mut ack = Vec::new();
    write_ack(&mut ack, b"id\n");
    assert_eq!(ack, [0x81, 0xa3, b'a', b'c', b'k', 0xa3, b'i', b'd', b'\n']);
    assert_eq!(
        read_ack(&ack).map(|s| &ack[s.start as usize..s.end as usize]),
        Some(&b"id\n"[..])
    );
}

/// The first forward hop writes the event's origin into the record; a relayed record goes out
/// with the keys it came with, and a record's own `source_type` is never overwritten.
#[test]
fn the_origin_goes_into_the_record_at_the_first_hop_only() {
    let (_, blob) = entries(2);
    let (_, mut batch, _, _) = decode_stream(&packed_request("relay", &blob, false, None));
    let reencode = |batch: &EventBatch| {
        let mut out = Vec::new();
        let start = begin_packed(&mut out, b"t");
        for e in &batch.events {
            encode_entry(batch, e, false, &mut out);
        }
        finish_packed(&mut out, start, batch.len(), None, false);
        let (_, again, _, err) = decode_stream(&out);
        assert_eq!(err, None);
        again
    };
    let text = |b: &EventBatch, v: Value| match v {
        Value::Str(s) => b.str(s).to_vec(),
        other => panic!("not a string: {other:?}"),
    };
    let relayed = reencode(&batch);
    for e in &relayed.events {
        assert_eq!(relayed.lookup(e, "source_type"), None);
        assert_eq!(relayed.lookup(e, "source_ip"), None);
    }
    batch.source_type = "syslog";
    let peer = batch.peer_index(Some(std::net::Ipv4Addr::new(192, 0, 2, 7).into()));
    for e in &mut batch.events {
        e.peer = peer;
    }
    let first = reencode(&batch);
    for e in &first.events {
        assert_eq!(
            first.lookup(e, "source_type").map(|v| text(&first, v)),
            Some(b"syslog".to_vec())
        );
        assert_eq!(
            first.lookup(e, "source_ip").map(|v| text(&first, v)),
            Some(b"192.0.2.7".to_vec())
        );
    }
    // A record that has its own `source_type` keeps it.
    let mut again = reencode(&first);
    again.source_type = "http_server";
    let kept = reencode(&again);
    for e in &kept.events {
        let v = kept.lookup(e, "source_type").map(|v| text(&kept, v));
        assert_eq!(v, Some(b"syslog".to_vec()));
        let n = kept
            .fields_of(e)
            .iter()
            .filter(|f| kept.str(f.name) == b"source_type")
            .count();
        assert_eq!(n, 1, "one source_type key");
    }
}

/// Regression: a key that is a container or an extension was skipped by its header only, which
/// put the reader out of step: the valid event after it was dropped (and its request acked), or
/// the request was refused as malformed on every resend.
#[test]
fn a_key_of_any_type_leaves_the_neighbouring_events_intact() {
    let t = event_time(1_700_000_000, 0);
    for key in [
        vec![0x92, 0x01, 0x02],
        vec![0xd6, 0x05, 0xdb, 0xff, 0xff, 0xff],
        vec![0x81, 0xa1, b'k', 0xc0],
        vec![0x2a],
    ] {
        let mut bad = Vec::new();
        write_array_len(&mut bad, 2);
        bad.extend_from_slice(&t);
        write_map_len(&mut bad, 2);
        bad.extend_from_slice(&key);
        write_str(&mut bad, b"v");
        write_str(&mut bad, b"message");
        write_str(&mut bad, b"a");
        let mut good = Vec::new();
        entry(&mut good, &t, "b", 2);
        let stream = forward_request("t", &[bad, good], Some(&[("chunk", "c")]));
        let (reqs, batch, stats, err) = decode_stream(&stream);
        assert_eq!(err, None, "key {key:02x?}");
        assert_eq!(
            (reqs[0].events, stats.invalid_events),
            (1, 1),
            "key {key:02x?}"
        );
        assert_eq!(message(&batch, 0), "b", "key {key:02x?}");
        assert!(reqs[0].chunk.is_some());
    }
}

/// Regression: container counts that lie inside a packed blob (which the splitter does not walk)
/// each reserved slots for the whole rest of the request, level after level.
#[test]
fn lying_nested_counts_reserve_nothing() {
    let mut blob = Vec::new();
    write_array_len(&mut blob, 2);
    write_int(&mut blob, 1);
    write_map_len(&mut blob, 1);
    write_str(&mut blob, b"k");
    for _ in 0..8 {
        blob.extend_from_slice(&[0xdd, 0x00, 0x00, 0xff, 0xff]); // array of 65,535 items
    }
    blob.resize(blob.len() + 60_000, 0xc0);
    let req = packed_request("t", &blob, false, None);
    let (_, batch, _, err) = decode_stream(&req);
    assert!(err.is_some(), "the lie is found");
    assert!(
        batch.fields.capacity() < 200_000,
        "reserved {} slots for a 60KB request",
        batch.fields.capacity()
    );
}

/// Regression: a few KB of gzip holding millions of 3-byte entries `[1, {}]` decoded to
/// gigabytes of events (96 bytes each); the decoded tables now count against the same limit.
#[test]
fn tiny_compressed_entries_cannot_decode_past_the_limit() {
    let entries: Vec<u8> = std::iter::repeat_n([0x92u8, 0x01, 0x80], 200_000)
        .flatten()
        .collect();
    let req = packed_request("t", &gzip(&entries), false, Some(&[("compressed", "gzip")]));
    // 600KB decompressed is within the 1MiB limit; 200,000 events of 96 bytes are not.
    let (_, batch, _, err) = decode_stream(&req);
    assert!(
        err.unwrap_or_default().contains("max_decompressed_size"),
        "refused"
    );
    assert_eq!(batch.len(), 0);
}

#[test]
fn compressed_requests_are_told_from_their_headers() {
    let (list, blob) = entries(2);
    assert!(is_compressed(&packed_request(
        "t",
        &gzip(&blob),
        false,
        Some(&[("size", "2"), ("compressed", "gzip")])
    )));
    assert!(is_compressed(&packed_request(
        "t",
        &blob,
        true,
        Some(&[("compressed", "zstd")])
    )));
    assert!(!is_compressed(&packed_request(
        "t",
        &blob,
        false,
        Some(&[("compressed", "text")])
    )));
    assert!(!is_compressed(&packed_request("t", &blob, false, None)));
    assert!(!is_compressed(&forward_request(
        "t",
        &list,
        Some(&[("compressed", "gzip")])
    )));
    assert!(!is_compressed(&[0xc0]));
}

#[test]
fn chunk_ids_are_padded_base64_of_16_bytes() {
    // RFC 4648 material, padded to 16 bytes: "foobar" then ten zeros.
    let mut raw = [0u8; 16];
    raw[..6].copy_from_slice(b"foobar");
    assert_eq!(&chunk_id(&raw), b"Zm9vYmFyAAAAAAAAAAAAAA==");
    assert_eq!(&chunk_id(&[0xff; 16]), b"/////////////////////w==");
}

// ---- the entry stream -------------------------------------------------------------------------

/// Every event of `batch` as a JSON line, with its tag.
fn json_lines(batch: &EventBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            crate::encode::encode_json(batch, e, &mut out);
            let tag = String::from_utf8_lossy(batch.str(e.tag.or_empty())).into_owned();
            format!("{tag} {}", String::from_utf8_lossy(&out))
        })
        .collect()
}

/// What reading `stream` as a connection does: fed `piece` bytes at a time, each step allowed
/// `allowance` bytes, a new batch started after every `every` steps (0: never). Returns every
/// event as a JSON line, every chunk, and the first error.
fn read_as_stream(
    stream: &[u8],
    piece: usize,
    allowance: usize,
    every: usize,
) -> (Vec<String>, Vec<Vec<u8>>, Option<RequestError>) {
    read_as_stream_as(stream, piece, allowance, every, false)
}

/// [`read_as_stream`] into batches whose records are decoded (`raw` false) or only walked (then
/// decoded by [`decode_raw`] for the JSON lines).
fn read_as_stream_as(
    stream: &[u8],
    piece: usize,
    allowance: usize,
    every: usize,
    raw: bool,
) -> (Vec<String>, Vec<Vec<u8>>, Option<RequestError>) {
    let new_batch = || {
        let mut b = EventBatch::new(Bytes::new(), "src".into(), "fluent");
        b.raw_records = raw;
        b
    };
    let mut reader = Stream::new(1 << 20, 1 << 20);
    let mut buf = BytesMut::new();
    let mut arena = BytesMut::new();
    let mut batch = new_batch();
    let (mut lines, mut chunks) = (Vec::new(), Vec::new());
    let mut fed = 0;
    let mut steps = 0;
    let mut emit = |reader: &mut Stream, arena: &mut BytesMut, batch: &mut EventBatch| {
        let mut old = std::mem::take(arena);
        reader.carry(&mut old, arena);
        let mut full = std::mem::replace(batch, new_batch());
        full.arena = old.freeze();
        assert_eq!(full.raw_records, raw);
        assert!(
            !raw || full.fields.is_empty(),
            "walked records fill no table"
        );
        lines.extend(json_lines(&decode_raw(&full)));
    };
    loop {
        if !reader.in_request() {
            match carries_entries(&buf) {
                Some(true) => match reader.begin(&mut buf, &mut arena, &batch) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => {
                        emit(&mut reader, &mut arena, &mut batch);
                        return (lines, chunks, Some(e));
                    }
                },
                Some(false) => panic!("only entry-carrying requests here"),
                None => {}
            }
        } else {
            let mut room = allowance;
            loop {
                match reader.step(&mut buf, &mut arena, &mut batch, room) {
                    Ok(Step::NeedRoom(cost)) => {
                        assert!(cost > room, "asked for no more than it had");
                        room = cost;
                    }
                    Ok(Step::Progress) => break,
                    Ok(Step::Done(r)) => {
                        chunks.extend(r.chunk.map(|(s, e)| arena[s..e].to_vec()));
                        break;
                    }
                    Ok(Step::NeedInput) => {
                        room = 0;
                        break;
                    }
                    Err(e) => {
                        emit(&mut reader, &mut arena, &mut batch);
                        return (lines, chunks, Some(e));
                    }
                }
            }
            steps += 1;
            if every > 0 && steps % every == 0 {
                emit(&mut reader, &mut arena, &mut batch);
            }
            if room != 0 {
                continue;
            }
        }
        if fed == stream.len() {
            break;
        }
        let end = (fed + piece).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
    }
    emit(&mut reader, &mut arena, &mut batch);
    assert!(!reader.in_request(), "the stream ended inside a request");
    (lines, chunks, None)
}

/// Requests of every entry-carrying kind, with small, large and very large entries.
fn mixed_stream() -> Vec<u8> {
    let (list, blob) = entries(40);
    let mut big = Vec::new();
    entry(
        &mut big,
        &event_time(1_700_000_000, 5),
        &"y".repeat(300_000),
        7,
    );
    let mut with_big = blob.clone();
    with_big.extend_from_slice(&big);
    with_big.extend_from_slice(&blob);
    let mut stream = forward_request("fwd", &list, Some(&[("chunk", "c1")]));
    stream.extend(packed_request(
        "bin",
        &with_big,
        false,
        Some(&[("chunk", "c2")]),
    ));
    stream.extend(packed_request(
        "str",
        &blob,
        true,
        Some(&[("compressed", "text")]),
    ));
    stream.extend(packed_request(
        "gz",
        &[gzip(&with_big), gzip(&blob)].concat(),
        true,
        Some(&[("compressed", "gzip"), ("chunk", "c3")]),
    ));
    stream.extend(packed_request(
        "zs",
        &zstd::bulk::compress(&with_big, 3).unwrap(),
        false,
        Some(&[("compressed", "zstd"), ("chunk", "c4")]),
    ));
    stream.extend(forward_request(
        "fwd2",
        &[big.clone(), list[0].clone()],
        None,
    ));
    stream.extend(packed_request(
        "empty",
        &[],
        false,
        Some(&[("compressed", "gzip")]),
    ));
    stream
}

/// However the bytes arrive, however little each step may decode and wherever new batches
/// start, the stream reads the same events as the whole decode, and the same chunks; records
/// only walked (a deliver's batches) decode later to exactly the same.
#[test]
fn the_stream_reads_what_the_whole_decode_reads() {
    let stream = mixed_stream();
    let (reqs, whole, _, err) = decode_stream(&stream);
    assert_eq!(err, None);
    let want = json_lines(&whole);
    let want_chunks: Vec<Vec<u8>> = reqs
        .iter()
        .filter_map(|r| r.chunk.map(|(s, e)| whole.arena[s..e].to_vec()))
        .collect();
    assert_eq!(want.len(), 40 + 81 + 40 + 121 + 81 + 2);
    let (_, raw, _, err) = decode_stream_as(&stream, true);
    assert_eq!(err, None);
    assert!(raw.raw_records && raw.fields.is_empty());
    assert_eq!(json_lines(&decode_raw(&raw)), want);
    for raw in [false, true] {
        for (piece, allowance, every) in [
            (stream.len(), 1 << 20, 0),
            (1, 1 << 20, 0),
            (7, 4096, 3),
            (1000, 100, 1),
            (65_536, 1 << 20, 2),
            (3000, 64 << 10, 5),
        ] {
            let (lines, chunks, err) = read_as_stream_as(&stream, piece, allowance, every, raw);
            let case = format!("raw {raw} piece {piece} allowance {allowance} every {every}");
            assert_eq!(err, None, "{case}");
            assert_eq!(lines, want, "{case}");
            assert_eq!(chunks, want_chunks, "{case}");
        }
    }
}

/// A walk refuses what a decode refuses, and errs where it errs: the same events are kept, the
/// same counted invalid, the same requests refused.
#[test]
fn a_walk_refuses_what_a_decode_refuses() {
    let t = event_time(1_700_000_000, 0);
    let mut streams = Vec::new();
    // Invalid entries of every kind beside valid ones.
    let mut blob = Vec::new();
    entry(&mut blob, &t, "ok1", 1);
    let mut float = Vec::new();
    write_f64(&mut float, 1.5);
    entry(&mut blob, &float, "float", 2);
    for key in [
        vec![0x92, 0x01, 0x02],
        vec![0x2a],
        vec![0x81, 0xa1, b'k', 0xc0],
    ] {
        write_array_len(&mut blob, 2);
        blob.extend_from_slice(&t);
        write_map_len(&mut blob, 1);
        blob.extend_from_slice(&key);
        write_str(&mut blob, b"v");
    }
    // Nesting past the limit.
    write_array_len(&mut blob, 2);
    blob.extend_from_slice(&t);
    write_map_len(&mut blob, 1);
    write_str(&mut blob, b"deep");
    for _ in 0..MAX_RECORD_DEPTH + 1 {
        write_array_len(&mut blob, 1);
    }
    write_nil(&mut blob);
    entry(&mut blob, &event_time(2, 0), "ok2", 6);
    streams.push(packed_request("t", &blob, false, Some(&[("chunk", "c")])));
    // A lying nested count.
    let mut lie = Vec::new();
    write_array_len(&mut lie, 2);
    write_int(&mut lie, 1);
    write_map_len(&mut lie, 1);
    write_str(&mut lie, b"k");
    lie.extend_from_slice(&[0xdd, 0x00, 0x00, 0xff, 0xff]);
    lie.resize(lie.len() + 100, 0xc0);
    streams.push(packed_request("t", &lie, false, None));
    // Message mode, and a message that is not the first key.
    let mut msg = Vec::new();
    write_array_len(&mut msg, 3);
    write_str(&mut msg, b"m");
    msg.extend_from_slice(&t);
    write_map_len(&mut msg, 3);
    write_str(&mut msg, b"a");
    write_int(&mut msg, 1);
    write_str(&mut msg, b"message");
    write_str(&mut msg, b"hello");
    write_str(&mut msg, b"message");
    write_str(&mut msg, b"second");
    streams.push(msg);
    for (i, stream) in streams.iter().enumerate() {
        let (reqs, decoded, stats, err) = decode_stream(stream);
        let (raw_reqs, raw, raw_stats, raw_err) = decode_stream_as(stream, true);
        assert_eq!(raw_reqs, reqs, "stream {i}");
        assert_eq!((raw_stats, raw_err.clone()), (stats, err), "stream {i}");
        assert_eq!(
            json_lines(&decode_raw(&raw)),
            json_lines(&decoded),
            "stream {i}"
        );
    }
}

/// A walked record goes out as it came, byte for byte, after a time written as the sink is set
/// to write it; decoded again it is the same event.
#[test]
fn a_walked_record_is_passed_on_byte_for_byte() {
    let mut blob = Vec::new();
    let mut ints = Vec::new();
    // `message` after another key: the decode lifts it out, the pass keeps its place.
    for (time, n) in [(event_time(1_700_000_000, 123_456_789), 1), (vec![0x05], 2)] {
        let mut e = Vec::new();
        write_array_len(&mut e, 2);
        e.extend_from_slice(&time);
        write_map_len(&mut e, 2);
        write_str(&mut e, b"n");
        write_int(&mut e, n);
        write_str(&mut e, b"message");
        write_str(&mut e, b"m");
        ints.push(e[1 + time.len()..].to_vec());
        blob.extend_from_slice(&e);
    }
    let stream = packed_request("t", &blob, false, None);
    let (_, decoded, _, _) = decode_stream(&stream);
    let (_, raw, _, _) = decode_stream_as(&stream, true);
    for time_as_integer in [false, true] {
        let mut want = Vec::new();
        let mut got = Vec::new();
        for (i, (d, r)) in decoded.events.iter().zip(&raw.events).enumerate() {
            let mut one = Vec::new();
            encode_entry(&raw, r, time_as_integer, &mut one);
            // The time as the decoded event's entry writes it, then the record as it came.
            let mut time = Vec::new();
            encode_entry(&decoded, d, time_as_integer, &mut time);
            let time_len = time.len() - encoded_record_len(&time);
            let mut expected = time[..time_len].to_vec();
            expected.extend_from_slice(&ints[i]);
            assert_eq!(
                one, expected,
                "entry {i}, time_as_integer {time_as_integer}"
            );
            // An entry that came as the sink writes it (an EventTime) is copied whole.
            let as_is = entry_as_is(&raw, r, time_as_integer);
            assert_eq!(as_is.is_some(), i == 0 && !time_as_integer, "entry {i}");
            assert!(as_is.is_none_or(|e| e == one), "entry {i}");
            assert_eq!(entry_as_is(&decoded, d, time_as_integer), None);
            want.push(time);
            got.push(one);
        }
        let relayed = |entries: &[Vec<u8>]| {
            let (_, b, _, err) =
                decode_stream(&packed_request("t", &entries.concat(), false, None));
            assert_eq!(err, None);
            json_lines(&b)
        };
        assert_eq!(relayed(&got), relayed(&want));
    }
    // The walk's word on which entries go out as they are stays with the undecoded batch: a
    // decoded one carries no such flag (a remap would see it as one of the event's flags).
    assert!(
        raw.events
            .first()
            .is_some_and(|e| e.flags.contains(loghaul_core::Flags::ENTRY_AS_IS))
    );
    assert!(decode_raw(&raw).events.iter().all(|e| e.flags.is_empty()));
}

/// The length of the record at the end of one encoded entry.
fn encoded_record_len(entry: &[u8]) -> usize {
    let mut r = Reader::new(entry, 1);
    r.skip().unwrap();
    entry.len() - r.pos()
}

/// A step decodes no more than its allowance can hold: the memory the batch gains in one step
/// stays within it (one entry larger than that is asked for with its exact cost first).
#[test]
fn a_step_stays_within_its_allowance() {
    let (_, blob) = entries(2000);
    let tiny: Vec<u8> = [0x92, 0x00, 0x80].repeat(50_000);
    for body in [blob, tiny] {
        let req = packed_request("t", &body, false, None);
        let mut reader = Stream::new(1 << 20, 1 << 20);
        let mut buf = BytesMut::from(&req[..]);
        let mut arena = BytesMut::new();
        let mut batch = EventBatch::new(Bytes::new(), "src".into(), "fluent");
        assert_eq!(reader.begin(&mut buf, &mut arena, &batch), Ok(true));
        let held = |batch: &EventBatch, arena: &BytesMut| {
            batch.events.len() * std::mem::size_of::<loghaul_core::Event>()
                + batch.fields.len() * std::mem::size_of::<loghaul_core::Field>()
                + arena.len()
        };
        let allowance = 64 << 10;
        loop {
            let before = held(&batch, &arena);
            let step = reader
                .step(&mut buf, &mut arena, &mut batch, allowance)
                .unwrap();
            assert!(
                held(&batch, &arena) - before <= allowance,
                "a step took {} bytes, allowed {allowance}",
                held(&batch, &arena) - before
            );
            if matches!(step, Step::Done(_)) {
                break;
            }
        }
    }
}

#[test]
fn a_stream_of_mostly_invalid_entries_is_refused_early() {
    let mut body = vec![0x00; 10_000];
    let (_, good) = entries(5);
    body.splice(0..0, good);
    let req = packed_request("t", &body, false, Some(&[("chunk", "z")]));
    let (lines, chunks, err) = read_as_stream(&req, 4096, 1 << 20, 0);
    assert_eq!(
        err,
        Some(RequestError::MostlyInvalid {
            invalid: MAX_INVALID,
            valid: 5
        })
    );
    assert!(lines.is_empty() && chunks.is_empty(), "nothing of it stays");
    // A few invalid entries among many valid ones are dropped and counted, as fluentd does.
    let (_, mut blob) = entries(3000);
    blob.extend([0x00; 999]);
    let req = packed_request("t", &blob, false, None);
    let (lines, _, err) = read_as_stream(&req, 4096, 1 << 20, 0);
    assert_eq!((lines.len(), err), (3000, None));
}

#[test]
fn the_option_must_agree_with_the_entries() {
    let (_, blob) = entries(3);
    for (body, option, want) in [
        (blob.clone(), "gzip", "decompression"),
        (gzip(&blob), "text", "malformed"),
        (gzip(&blob), "zstd", "decompression"),
        (blob.clone(), "snappy", "unknown"),
    ] {
        let req = packed_request("t", &body, false, Some(&[("compressed", option)]));
        let (lines, _, err) = read_as_stream(&req, 100, 1 << 20, 0);
        let err = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains(want) || err.contains("decompress"),
            "{option}: {err}"
        );
        assert!(lines.is_empty(), "{option}: nothing of it stays");
    }
}

/// What went out with an earlier batch stays when the request then breaks; the rest of it goes.
#[test]
fn a_break_takes_back_only_what_is_still_in_the_batch() {
    let (_, mut blob) = entries(200);
    blob.extend([0xc1, 0x00]);
    let req = packed_request("t", &blob, false, Some(&[("chunk", "x")]));
    // A few entries per step, a new batch every 7 steps: the steps since the last one are
    // taken back.
    let (lines, chunks, err) = read_as_stream(&req, 512, 2048, 7);
    assert!(err.is_some());
    assert!(chunks.is_empty());
    assert!(!lines.is_empty() && lines.len() < 200, "{}", lines.len());
}

#[test]
fn an_entry_over_max_value_is_refused() {
    let mut big = Vec::new();
    entry(
        &mut big,
        &event_time(1_700_000_000, 0),
        &"z".repeat(2 << 20),
        1,
    );
    let req = packed_request("t", &big, false, None);
    let (_, _, err) = read_as_stream(&req, 64 << 10, 1 << 20, 0);
    assert_eq!(err, Some(RequestError::ValueTooLarge { limit: 1 << 20 }));
}

#[test]
fn a_request_of_more_entries_than_allowed_is_refused() {
    let (_, blob) = entries(11);
    let req = packed_request("t", &blob, false, Some(&[("chunk", "c")]));
    let mut reader = Stream::new(1 << 20, 1 << 20);
    reader.set_max_entries(10);
    let mut buf = BytesMut::from(&req[..]);
    let (mut arena, mut batch) = (
        BytesMut::new(),
        EventBatch::new(Bytes::new(), "s".into(), "fluent"),
    );
    assert_eq!(reader.begin(&mut buf, &mut arena, &batch), Ok(true));
    let err = loop {
        match reader.step(&mut buf, &mut arena, &mut batch, 1 << 20) {
            Ok(Step::Done(_)) => panic!("11 entries passed a bound of 10"),
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    assert_eq!(err, RequestError::TooManyEvents { limit: 10 });
    assert!(batch.is_empty());
    let (_, blob) = entries(10);
    let req = packed_request("t", &blob, false, None);
    let mut buf = BytesMut::from(&req[..]);
    assert_eq!(reader.begin(&mut buf, &mut arena, &batch), Ok(true));
    while !matches!(
        reader.step(&mut buf, &mut arena, &mut batch, 1 << 20),
        Ok(Step::Done(_))
    ) {}
    assert_eq!(batch.len(), 10);
}

/// Decoding a request in the middle of an arena leaves the arena's bytes where they were (a
/// caller walks on to the next request by its offset); what a compressed request makes is
/// appended after all of them.
#[test]
fn decoding_in_place_leaves_what_follows_where_it_was() {
    let (list, blob) = entries(5);
    let mut stream = packed_request("plain", &blob, false, Some(&[("chunk", "a")]));
    stream.extend(packed_request(
        "gz",
        &gzip(&blob),
        false,
        Some(&[("compressed", "gzip"), ("chunk", "b")]),
    ));
    stream.extend(forward_request("fwd", &list, Some(&[("chunk", "c")])));
    let mut arena = BytesMut::from(&stream[..]);
    let mut batch = EventBatch::new(Bytes::new(), "s".into(), "fluent");
    let mut decoder = Decoder::new(LIMITS);
    let mut splitter = Splitter::new(1 << 20);
    let mut at = 0;
    let mut chunks = Vec::new();
    while at < stream.len() {
        let n = splitter.split(&arena[at..stream.len()]).unwrap().unwrap();
        let r = decoder
            .decode(&mut arena, at, at + n, &mut batch, 0)
            .unwrap();
        chunks.push(r.chunk.map(|(s, e)| arena[s..e].to_vec()).unwrap());
        assert_eq!(
            &arena[..stream.len()],
            &stream[..],
            "the arena moved under the requests"
        );
        at += n;
    }
    assert_eq!(chunks, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    batch.arena = arena.freeze();
    assert_eq!(batch.len(), 15);
    assert_eq!(message(&batch, 5), "e0");
}
