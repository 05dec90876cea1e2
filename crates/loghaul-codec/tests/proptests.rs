//! Property tests: arbitrary bytes never panic the framer or the decoders, chunking never changes
//! what the framer produces, every decoded event encodes to valid JSON, and valid UTF-8 message
//! text survives decode + encode unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use loghaul_codec::framing::{ChunkedFrames, frame_in_chunks};
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Format, Frame, Framer, FramingMode, FramingStats,
    TimeZone, encode_json, encode_text,
};
use loghaul_core::{EventBatch, Timestamp};
use proptest::prelude::*;
use serde_json::Value as J;

/// Bytes that hit the interesting branches more often than uniform noise would.
fn syslogish() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => any::<u8>(),
        2 => b'0'..=b'9',
        1 => Just(b'\n'),
        1 => Just(b' '),
        1 => Just(b'<'),
        1 => Just(b'>'),
        1 => Just(b'['),
        1 => Just(b']'),
        1 => Just(b'"'),
        1 => Just(b'\\'),
        1 => Just(b':'),
        1 => Just(b'-'),
    ];
    let prefix = prop_oneof![
        Just(&b""[..]),
        Just(&b"<13>1 "[..]),
        Just(&b"<165>1 2003-10-11T22:14:15.003Z host app 12 ID [a@1 b=\""[..]),
        Just(&b"<34>Oct 11 22:14:15 "[..]),
        Just(&b"<189>52: *Mar  1 00:00:32.123: "[..]),
        Just(&b"<13>2003-10-11T22:14:15"[..]),
        Just(&b"12 "[..]),
    ];
    (prefix, prop::collection::vec(byte, 0..300)).prop_map(|(p, mut b)| {
        let mut v = p.to_vec();
        v.append(&mut b);
        v
    })
}

fn modes() -> impl Strategy<Value = FramingMode> {
    prop_oneof![
        Just(FramingMode::Auto),
        Just(FramingMode::Newline),
        Just(FramingMode::OctetCounting)
    ]
}

fn formats() -> impl Strategy<Value = Format> {
    prop_oneof![
        Just(Format::Auto),
        Just(Format::Rfc3164),
        Just(Format::Rfc5424),
        Just(Format::Raw)
    ]
}

/// Feed `input` in chunks the way a connection task does; returns frames as bytes.
fn frame_chunked(mode: FramingMode, max: usize, input: &[u8], chunks: &[usize]) -> ChunkedFrames {
    frame_in_chunks(mode, max, input, chunks)
}

/// Newline framing as RFC 6587 §3.4.2 and the framer's contract say, one byte at a time: a line
/// without its trailing CRs and NULs (empty ones dropped); a line longer than `max` cut there
/// and marked, and the rest of it up to the newline dropped.
fn newline_reference(input: &[u8], max: usize) -> Vec<(Vec<u8>, bool)> {
    let trimmed = |mut line: &[u8]| {
        while let [rest @ .., b'\r' | 0] = line {
            line = rest;
        }
        line.to_vec()
    };
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < input.len() {
        let window = &input[pos..input.len().min(pos + max + 1)];
        match window.iter().position(|&c| c == b'\n') {
            Some(i) => {
                out.push((trimmed(&window[..i]), false));
                pos += i + 1;
            }
            None if window.len() > max => {
                out.push((window[..max].to_vec(), true));
                pos = match input[pos + max..].iter().position(|&c| c == b'\n') {
                    Some(i) => pos + max + i + 1,
                    None => input.len(),
                };
            }
            None => {
                out.push((trimmed(window), false));
                pos = input.len();
            }
        }
    }
    out.retain(|(line, _)| !line.is_empty());
    out
}

fn received() -> Timestamp {
    Timestamp::from_nanos(1_700_000_000_123_456_000, 6)
}

fn decode(arena: &[u8], frames: &[Frame], format: Format, strict: bool) -> EventBatch {
    let mut batch = EventBatch::new(Bytes::copy_from_slice(arena), "p".into(), "syslog");
    let opts = DecodeOptions {
        format,
        strict,
        timezone: TimeZone::Fixed(-7 * 3600),
    };
    let mut stats = DecodeStats::default();
    Decoder::new(opts).decode_batch(
        &mut batch,
        frames,
        received(),
        "::1".parse().ok(),
        &mut stats,
    );
    batch
}

fn whole(input: &[u8]) -> [Frame; 1] {
    [Frame {
        start: 0,
        end: input.len() as u32,
        truncated: false,
    }]
}

fn json_of(batch: &EventBatch, i: usize) -> J {
    let mut out = Vec::new();
    encode_json(batch, &batch.events[i], &mut out);
    assert_eq!(out.last(), Some(&b'\n'));
    assert_eq!(
        out.iter().filter(|&&b| b == b'\n').count(),
        1,
        "one line per event"
    );
    serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("invalid JSON ({e}): {}", String::from_utf8_lossy(&out)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A batch decoded at once (which takes the raw fast path when every framed byte is ASCII)
    /// gives each frame exactly the event that frame gets when decoded alone, whatever the other
    /// frames hold; and a raw event is its frame's text with the receive time.
    #[test]
    fn batch_decoding_matches_frame_by_frame(
        input in syslogish(),
        format in formats(),
        max in 1usize..200,
    ) {
        let mut frames = Vec::new();
        let mut stats = FramingStats::default();
        let mut framer = Framer::new(FramingMode::Newline, max);
        let used = framer.decode(&input, &mut frames, &mut stats);
        framer.finish(&input[used..], &mut Vec::new(), &mut stats);
        let batch = decode(&input, &frames, format, false);
        prop_assert_eq!(batch.events.len(), frames.len());
        for (i, frame) in frames.iter().enumerate() {
            let alone = decode(&input, std::slice::from_ref(frame), format, false);
            prop_assert_eq!(json_of(&batch, i), json_of(&alone, 0));
            let (got, want) = (batch.events[i], alone.events[0]);
            prop_assert_eq!(got.flags, want.flags);
            if format == Format::Raw {
                let mut text = &input[frame.start as usize..frame.end as usize];
                while let [rest @ .., b'\n' | b'\r' | b'\0'] = text {
                    text = rest;
                }
                prop_assert_eq!(got.message.get().map_or(&b""[..], |m| batch.str(m)), text);
                prop_assert_eq!(got.timestamp, Some(received()));
                prop_assert_eq!(got.flags.contains(loghaul_core::Flags::TRUNCATED), frame.truncated);
                prop_assert_eq!(
                    got.flags.contains(loghaul_core::Flags::INVALID_UTF8),
                    std::str::from_utf8(text).is_err()
                );
            }
        }
    }

    #[test]
    fn framer_chunking_is_invisible(
        input in syslogish(),
        mode in modes(),
        max in 1usize..80,
        chunks in prop::collection::vec(1usize..40, 1..8),
    ) {
        let all_at_once = frame_chunked(mode, max, &input, &[usize::MAX]);
        prop_assert_eq!(frame_chunked(mode, max, &input, &chunks), all_at_once.clone());
        prop_assert_eq!(frame_chunked(mode, max, &input, &[1]), all_at_once);
    }

    /// Newline framing against a byte-by-byte reference, over lines that span the framer's
    /// 64-byte blocks, sit at their edges and run past `max`, in any chunking.
    #[test]
    fn newline_framing_matches_a_byte_by_byte_reference(
        input in prop::collection::vec(
            prop_oneof![8 => Just(b'a'), 2 => Just(b'\n'), 1 => Just(b'\r'), 1 => Just(0u8), 1 => any::<u8>()],
            0..1500,
        ),
        max in 1usize..300,
        chunks in prop::collection::vec(1usize..200, 1..6),
    ) {
        let (frames, _) = frame_chunked(FramingMode::Newline, max, &input, &chunks);
        prop_assert_eq!(frames, newline_reference(&input, max));
    }

    #[test]
    fn framer_survives_arbitrary_bytes(input in prop::collection::vec(any::<u8>(), 0..2000), mode in modes(), max in 0usize..5000) {
        frame_chunked(mode, max, &input, &[7, 300, 1]);
    }

    #[test]
    fn decoders_survive_anything_and_emit_valid_json(input in syslogish(), format in formats(), strict in any::<bool>()) {
        let batch = decode(&input, &whole(&input), format, strict);
        prop_assert_eq!(batch.events.len(), 1);
        let ev = batch.events[0];
        let spans = [ev.message.get(), ev.hostname.get(), ev.appname.get(), ev.procid.get(), ev.msgid.get()];
        for s in spans.into_iter().flatten() {
            prop_assert!(s.start <= s.end && s.end as usize <= input.len());
        }
        for p in &batch.sd_params {
            prop_assert!(p.value.end as usize <= input.len() && p.name.end as usize <= input.len());
        }
        prop_assert!(ev.timestamp.is_some());
        json_of(&batch, 0);
        let mut text = Vec::new();
        encode_text(&batch, &ev, &mut text);
        prop_assert!(std::str::from_utf8(&text).is_ok());
    }

    #[test]
    fn decoders_survive_framed_uniform_noise(input in prop::collection::vec(any::<u8>(), 0..600), strict in any::<bool>()) {
        let mut framer = Framer::new(FramingMode::Auto, 128);
        let (mut frames, mut fs) = (Vec::new(), FramingStats::default());
        let n = framer.decode(&input, &mut frames, &mut fs);
        let mut tail = Vec::new();
        framer.finish(&input[n..], &mut tail, &mut fs);
        frames.extend(tail.iter().map(|f| Frame { start: f.start + n as u32, end: f.end + n as u32, truncated: f.truncated }));
        for format in [Format::Auto, Format::Rfc3164, Format::Rfc5424] {
            let batch = decode(&input, &frames, format, strict);
            prop_assert_eq!(batch.events.len(), frames.len());
            for i in 0..frames.len() {
                json_of(&batch, i);
            }
        }
    }

    #[test]
    fn valid_utf8_message_round_trips(msg in any::<String>(), strict in any::<bool>()) {
        // Trailers are stripped and a leading BOM is dropped by design; everything else survives.
        let msg = msg.trim_end_matches(['\n', '\r', '\0']).trim_start_matches('\u{feff}');
        let cases: [(String, Format); 4] = [
            (msg.to_string(), Format::Raw),
            (format!("<13>1 - - - - - - {msg}"), Format::Auto),
            (format!("<13>1 2024-01-02T03:04:05Z h a p m [x y=\"z\"] {msg}"), Format::Rfc5424),
            (format!("<13>Jan  2 03:04:05 host app[1]: {msg}"), Format::Auto),
        ];
        for (input, format) in cases {
            let batch = decode(input.as_bytes(), &whole(input.as_bytes()), format, strict);
            let v = json_of(&batch, 0);
            prop_assert_eq!(v["message"].as_str(), Some(msg), "input {:?}", input);
            prop_assert!(v.get("flags").is_none(), "{}", v);
        }
    }

    #[test]
    fn json_escaping_matches_lossy_utf8(
        bytes in prop::collection::vec(prop_oneof![8 => 0x20u8..0x7f, 1 => any::<u8>()], 0..80),
    ) {
        // ASCII-heavy input of every length exercises the word-at-a-time paths and their tails.
        let mut out = vec![b'"'];
        loghaul_codec::encode::escape_json(&bytes, &mut out);
        out.push(b'"');
        let back: String = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(back, String::from_utf8_lossy(&bytes).into_owned());
    }

    #[test]
    fn sd_values_round_trip_through_escaping(value in any::<String>()) {
        let escaped: String = value
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' | ']' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let input = format!("<13>1 - - - - - [id@1 k=\"{escaped}\"] m");
        let batch = decode(input.as_bytes(), &whole(input.as_bytes()), Format::Auto, false);
        let v = json_of(&batch, 0);
        prop_assert_eq!(v["structured_data"]["id@1"]["k"].as_str(), Some(value.as_str()), "{}", v);
    }
}
