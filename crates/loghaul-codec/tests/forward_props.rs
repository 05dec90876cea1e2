//! Property tests of the forward-protocol codec: arbitrary bytes never panic the splitter or the
//! decoder, a valid stream split at any point decodes the same, and what loghaul encodes decodes
//! back to the same events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::{Bytes, BytesMut};
use loghaul_codec::encode_json;
use loghaul_codec::forward::msgpack::*;
use loghaul_codec::forward::{
    Decoder, Limits, Splitter, begin_packed, encode_entry, finish_packed,
};
use loghaul_core::EventBatch;
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    max_decompressed_size: 1 << 20,
};

/// Feeds `stream` `step` bytes per read through a splitter and the decoder, as a connection
/// does; returns every event's JSON line (or the first error).
fn run(stream: &[u8], step: usize) -> Result<Vec<String>, String> {
    let mut splitter = Splitter::new(1 << 20);
    let mut decoder = Decoder::new(LIMITS);
    let mut pending = BytesMut::new();
    let mut lines = Vec::new();
    let mut fed = 0;
    while fed < stream.len() {
        let next = (fed + step.max(1)).min(stream.len());
        pending.extend_from_slice(&stream[fed..next]);
        fed = next;
        let mut arena = BytesMut::new();
        let mut batch = EventBatch::new(Bytes::new(), "p".into(), "fluent");
        loop {
            match splitter.split(&pending) {
                Ok(Some(n)) => {
                    let start = arena.len();
                    arena.unsplit(pending.split_to(n));
                    decoder
                        .decode(&mut arena, start, start + n, &mut batch, 0)
                        .map_err(|e| e.to_string())?;
                }
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
        batch.arena = arena.freeze();
        for e in &batch.events {
            let mut out = Vec::new();
            encode_json(&batch, e, &mut out);
            lines.push(String::from_utf8(out).map_err(|e| e.to_string())?);
        }
    }
    Ok(lines)
}

/// A record value of bounded depth.
fn value() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|v| {
            let mut o = Vec::new();
            write_int(&mut o, v);
            o
        }),
        any::<String>().prop_map(|s| {
            let mut o = Vec::new();
            write_str(&mut o, s.as_bytes());
            o
        }),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(|b| {
            let mut o = Vec::new();
            write_bin(&mut o, &b);
            o
        }),
        any::<bool>().prop_map(|b| {
            let mut o = Vec::new();
            write_bool(&mut o, b);
            o
        }),
        Just(vec![0xc0]),
        (-1e9f64..1e9).prop_map(|f| {
            let mut o = Vec::new();
            write_f64(&mut o, f);
            o
        }),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|items| {
                let mut o = Vec::new();
                write_array_len(&mut o, items.len());
                items.iter().for_each(|i| o.extend_from_slice(i));
                o
            }),
            prop::collection::vec(("[a-z]{1,6}", inner), 0..4).prop_map(|entries| {
                let mut o = Vec::new();
                write_map_len(&mut o, entries.len());
                for (k, v) in entries {
                    write_str(&mut o, k.as_bytes());
                    o.extend_from_slice(&v);
                }
                o
            }),
        ]
    })
}

/// An entry: an EventTime and a record with a message and some fields.
fn entry() -> impl Strategy<Value = Vec<u8>> {
    (
        1u32..4_000_000_000,
        0u32..1_000_000_000,
        "[ -~]{0,40}",
        prop::collection::vec(("[a-z]{1,8}", value()), 0..5),
    )
        .prop_map(|(sec, nsec, message, fields)| {
            let mut o = Vec::new();
            write_array_len(&mut o, 2);
            write_event_time(&mut o, sec, nsec);
            write_map_len(&mut o, fields.len() + 1);
            write_str(&mut o, b"message");
            write_str(&mut o, message.as_bytes());
            for (k, v) in fields {
                write_str(&mut o, k.as_bytes());
                o.extend_from_slice(&v);
            }
            o
        })
}

/// A request in one of the uncompressed modes, with a chunk.
fn request() -> impl Strategy<Value = Vec<u8>> {
    (0u8..3, prop::collection::vec(entry(), 1..6)).prop_map(|(mode, entries)| {
        let mut o = Vec::new();
        match mode {
            0 => {
                // Message mode: one entry's time and record, then the option.
                let e = &entries[0];
                write_array_len(&mut o, 4);
                write_str(&mut o, b"m.tag");
                o.extend_from_slice(&e[1..]);
            }
            1 => {
                write_array_len(&mut o, 3);
                write_str(&mut o, b"f.tag");
                write_array_len(&mut o, entries.len());
                entries.iter().for_each(|e| o.extend_from_slice(e));
            }
            _ => {
                write_array_len(&mut o, 3);
                write_str(&mut o, b"p.tag");
                write_bin(&mut o, &entries.concat());
            }
        }
        write_map_len(&mut o, 1);
        write_str(&mut o, b"chunk");
        write_str(&mut o, b"id==\n");
        o
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), step in 1usize..50) {
        let _ = run(&bytes, step);
    }

    #[test]
    fn msgpack_shaped_noise_never_panics(
        parts in prop::collection::vec(prop_oneof![value(), request(), prop::collection::vec(any::<u8>(), 0..8)], 0..6),
        step in 1usize..50,
    ) {
        let _ = run(&parts.concat(), step);
    }

    #[test]
    fn a_valid_stream_split_anywhere_decodes_the_same(
        requests in prop::collection::vec(request(), 1..4),
        step in 1usize..200,
    ) {
        let stream = requests.concat();
        let whole = run(&stream, stream.len()).unwrap();
        prop_assert!(!whole.is_empty());
        prop_assert_eq!(run(&stream, step).unwrap(), whole);
    }

    #[test]
    fn encoded_entries_decode_to_the_same_json(requests in prop::collection::vec(request(), 1..3)) {
        let stream = requests.concat();
        let mut arena = BytesMut::from(&stream[..]);
        let mut batch = EventBatch::new(Bytes::new(), "p".into(), "fluent");
        let mut splitter = Splitter::new(1 << 20);
        let mut decoder = Decoder::new(LIMITS);
        let mut at = 0;
        while let Ok(Some(n)) = splitter.split(&arena[at..]) {
            decoder.decode(&mut arena, at, at + n, &mut batch, 0).unwrap();
            at += n;
        }
        batch.arena = arena.freeze();
        // Relayed one event per request under its own tag, as the fluent sink does per tag run.
        let mut relayed = Vec::new();
        for e in &batch.events {
            let tag = batch.str(e.tag.or_empty()).to_vec();
            let start = begin_packed(&mut relayed, &tag);
            encode_entry(&batch, e, false, &mut relayed);
            finish_packed(&mut relayed, start, 1, None, false);
        }
        let normalize = |lines: Vec<String>| -> Vec<serde_json::Value> {
            lines
                .iter()
                .map(|l| {
                    let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                    // Only the receive hop's own fields may differ.
                    v.as_object_mut().map(|o| o.remove("source_ip"));
                    v
                })
                .collect()
        };
        let before = normalize(run(&stream, stream.len()).unwrap());
        let after = normalize(run(&relayed, relayed.len()).unwrap());
        prop_assert_eq!(after, before);
    }
}
