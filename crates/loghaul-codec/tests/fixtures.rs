//! Runs every case of the syslog fixtures (`tests/data/syslog-vectors.jsonl`, sources in
//! `tests/data/README.md`)
//! through the framer, the decoder and the JSON encoder, and compares the output with the
//! expectation (or its `alt_expect` variant). `valid: false` cases must be flagged `parse_error`
//! in strict mode; valid cases not marked `lenient` must also pass in strict mode.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use bytes::Bytes;
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Format, Frame, Framer, FramingMode, FramingStats,
    TimeZone, encode_json,
};
use loghaul_core::names::{facility_name, severity_name};
use loghaul_core::{EventBatch, Flags, Timestamp};
use serde_json::{Map, Value as J};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Per frame: valid, lenient, acceptable expectations, the frame's own format (mixed streams).
type FrameExpect = (bool, bool, Vec<Map<String, J>>, Option<Format>);

fn fixtures_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/syslog-vectors.jsonl")
}

/// 2026-12-01T00:00:00.5Z: late in the year, so year-less fixture dates stay in the same year
/// unless the rollback rule applies (it never matters: year-less dates compare without a year).
fn received() -> Timestamp {
    Timestamp::from_nanos(
        days_from_civil(2026, 12, 1) * 86_400 * 1_000_000_000 + 500_000_000,
        1,
    )
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// `YYYY-MM-DDThh:mm:ss[.f][Z|±hh:mm]` to Unix nanoseconds (no offset = UTC).
fn instant(s: &str) -> i64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let days = days_from_civil(n(0, 4), n(5, 7), n(8, 10));
    let mut secs = days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19);
    let mut rest = &s[19..];
    let mut nanos = 0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits: String = r.chars().take_while(char::is_ascii_digit).collect();
        nanos = format!("{digits:0<9}")[..9].parse::<i64>().unwrap();
        rest = &r[digits.len()..];
    }
    if rest.len() == 6 {
        let off =
            rest[1..3].parse::<i64>().unwrap() * 3600 + rest[4..6].parse::<i64>().unwrap() * 60;
        secs -= if rest.starts_with('-') { -off } else { off };
    }
    secs * 1_000_000_000 + nanos
}

struct Decoded {
    batch: EventBatch,
    json: Vec<J>,
}

fn decode(bytes: &[u8], frames: &[Frame], format: Format, strict: bool) -> Decoded {
    let mut batch = EventBatch::new(Bytes::copy_from_slice(bytes), "fixtures".into(), "syslog");
    let opts = DecodeOptions {
        format,
        strict,
        timezone: TimeZone::Utc,
    };
    let mut stats = DecodeStats::default();
    Decoder::new(opts).decode_batch(&mut batch, frames, received(), None, &mut stats);
    assert_eq!(batch.events.len(), frames.len(), "one event per frame");
    let json = batch
        .events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            encode_json(&batch, e, &mut out);
            serde_json::from_slice(&out).expect("encoder output is JSON")
        })
        .collect();
    Decoded { batch, json }
}

fn frame_all(bytes: &[u8], mode: FramingMode) -> Vec<Frame> {
    let mut framer = Framer::new(mode, 64 * 1024);
    let mut frames = Vec::new();
    let mut stats = FramingStats::default();
    let consumed = framer.decode(bytes, &mut frames, &mut stats);
    let rest = &bytes[consumed..];
    let mut tail = Vec::new();
    framer.finish(rest, &mut tail, &mut stats);
    frames.extend(tail.into_iter().map(|f| Frame {
        start: f.start + consumed as u32,
        end: f.end + consumed as u32,
        truncated: f.truncated,
    }));
    frames
}

/// Compare one decoded event with one expectation; returns the mismatches.
fn mismatches(d: &Decoded, i: usize, raw: &[u8], expect: &Map<String, J>) -> Vec<String> {
    let got = &d.json[i];
    let event = &d.batch.events[i];
    let mut bad = Vec::new();
    let field = |k: &str| got.get(k).cloned().unwrap_or(J::Null);
    for (key, want) in expect {
        let ok = match key.as_str() {
            "facility" => {
                field(key)
                    == want
                        .as_u64()
                        .and_then(|c| facility_name(c as u8))
                        .map_or(J::Null, J::from)
            }
            "severity" => {
                field(key)
                    == want
                        .as_u64()
                        .and_then(|c| severity_name(c as u8))
                        .map_or(J::Null, J::from)
            }
            "hostname" | "appname" | "procid" | "msgid" | "structured_data" | "version" => {
                field(key) == *want
            }
            "message" => {
                if let Some(b) = expect.get("message_b64").and_then(J::as_str) {
                    d.batch.str(event.message.or_empty()) == b64(b).as_slice()
                } else {
                    let want = want.as_str().unwrap_or("");
                    field(key).as_str().unwrap_or("") == want
                }
            }
            "timestamp" => {
                let ts = event.timestamp.expect("timestamp is always set");
                match want.as_str() {
                    None => ts == received(),
                    Some(w) if w.starts_with("--") => {
                        let ours = field(key).as_str().unwrap_or_default().to_string();
                        ours.len() > 6 && ours[5..ours.len() - 1] == w[2..]
                    }
                    Some(w) => ts.nanos == instant(w),
                }
            }
            // Fields loghaul does not model (Cisco counter, rsyslog's pseudo-facility label).
            "message_counter" | "facility_label" | "message_b64" => true,
            other => panic!("unknown expectation key {other}"),
        };
        if !ok {
            bad.push(format!("{key}: want {want}, got {}", field(key)));
        }
    }
    // A valid message must not be flagged as a parse error, unless the expectation itself is the
    // raw-text fallback (rsyslog keeps an invalid PRI message whole).
    let fallback = expect.get("message").and_then(J::as_str).map(str::as_bytes) == Some(raw);
    if event.flags.contains(Flags::PARSE_ERROR) && !fallback {
        bad.push("flagged parse_error".into());
    }
    bad
}

fn merged(expect: &J, alt: Option<&J>) -> Vec<Map<String, J>> {
    let base = expect.as_object().cloned().unwrap_or_default();
    let mut out = vec![base.clone()];
    if let Some(alt) = alt.and_then(J::as_object) {
        let mut m = base;
        m.extend(alt.clone());
        out.push(m);
    }
    out
}

fn format_of(case: &J) -> Option<Format> {
    match case["format"].as_str() {
        Some("rfc3164") => Some(Format::Rfc3164),
        Some("rfc5424") => Some(Format::Rfc5424),
        _ => None,
    }
}

#[test]
fn every_fixture() -> TestResult {
    let text = std::fs::read_to_string(fixtures_path())?;
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: J = serde_json::from_str(line)?;
        count += 1;
        let id = case["id"].as_str().unwrap_or("?").to_string();
        let bytes = match case.get("input_b64").and_then(J::as_str) {
            Some(b) => b64(b),
            None => case["input"]
                .as_str()
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
        };
        let valid = case["valid"].as_bool() == Some(true);
        let lenient = case["lenient"].as_bool() == Some(true);
        let mut formats = vec![Format::Auto];
        formats.extend(format_of(&case));

        // Each framing mode under test, with the frames it must produce.
        let modes: Vec<FramingMode> = match case["framing"].as_str() {
            Some("octet-counting") => vec![FramingMode::OctetCounting, FramingMode::Auto],
            Some("non-transparent") => vec![FramingMode::Newline, FramingMode::Auto],
            _ => vec![],
        };
        let mut runs: Vec<(String, Vec<Frame>)> = Vec::new();
        if modes.is_empty() {
            runs.push((
                "unframed".into(),
                vec![Frame {
                    start: 0,
                    end: bytes.len() as u32,
                    truncated: false,
                }],
            ));
        }
        for mode in modes {
            runs.push((format!("{mode:?}"), frame_all(&bytes, mode)));
        }

        for (how, frames) in &runs {
            let per_frame: Vec<FrameExpect> = match case.get("frames").and_then(J::as_array) {
                Some(fs) => fs
                    .iter()
                    .map(|f| {
                        (
                            f["valid"].as_bool() == Some(true),
                            lenient,
                            merged(&f["expect"], f.get("alt_expect")),
                            format_of(f),
                        )
                    })
                    .collect(),
                None => vec![(
                    valid,
                    lenient,
                    merged(&case["expect"], case.get("alt_expect")),
                    None,
                )],
            };
            if per_frame.len() != frames.len() {
                failures.push(format!(
                    "{id} [{how}]: {} frames, want {}",
                    frames.len(),
                    per_frame.len()
                ));
                continue;
            }
            for (i, (valid, lenient, expects, frame_format)) in per_frame.iter().enumerate() {
                let f = frames[i];
                let raw = &bytes[f.start as usize..f.end as usize];
                let mut fmts = formats.clone();
                fmts.extend(*frame_format);
                for &format in &fmts {
                    if *valid {
                        let modes: &[bool] = if *lenient { &[false] } else { &[false, true] };
                        for &strict in modes {
                            let d = decode(&bytes, frames, format, strict);
                            let results: Vec<Vec<String>> =
                                expects.iter().map(|e| mismatches(&d, i, raw, e)).collect();
                            if results.iter().all(|r| !r.is_empty()) {
                                failures.push(format!(
                                    "{id} [{how} frame {i} {format:?} strict={strict}]: {:?}\n    output: {}",
                                    results[0], d.json[i]
                                ));
                            }
                        }
                    } else {
                        let d = decode(&bytes, frames, format, true);
                        let ev = &d.batch.events[i];
                        // An octet frame cut at EOF is already flagged; either flag tells the user.
                        let flagged = ev.flags.contains(Flags::PARSE_ERROR)
                            || ev.flags.contains(Flags::TRUNCATED);
                        let trimmed = raw.strip_suffix(b"\n").unwrap_or(raw);
                        if !flagged
                            || (ev.flags.contains(Flags::PARSE_ERROR)
                                && d.batch.str(ev.message.or_empty()) != trimmed)
                        {
                            failures.push(format!(
                                "{id} [{how} {format:?}]: strict accepted invalid input: {}",
                                d.json[i]
                            ));
                        }
                    }
                }
            }
        }
        // frame-oc-truncated has no per-frame list: the framer must hand over the short frame.
        if case.get("frames").is_none() && case["framing"].as_str() == Some("octet-counting") {
            for (how, frames) in &runs {
                if !frames.iter().all(|f| f.truncated) {
                    failures.push(format!("{id} [{how}]: short frame not marked truncated"));
                }
            }
        }
    }
    assert_eq!(count, 55, "every fixture is read");
    assert!(
        failures.is_empty(),
        "{} fixture failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}
