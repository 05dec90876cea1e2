//! Pre-generated payload blocks: the generator's messages, built from the payload seed
//! (`--seed`) before the clock starts.
//!
//! Every message carries a marker that any server passes through untouched, because it sits in the
//! message text:
//!
//! ```text
//! gen=3 seq=0000000042 t=1732240000123456 <filler words ...>
//!       ^^^^^^^^^^ 10 digits   ^^^^^^^^^^^^^^^^ 16 digits: send time, µs since the Unix epoch
//! ```
//!
//! The sequence number and the send time live in fixed-width slots, so a block is reused for ever:
//! before each send the generator patches the slots in place ([`Block::stamp`]) and writes the block's
//! bytes with one system call. No message is formatted on the hot path.
//!
//! After the marker comes the message's [`Content`]: filler words (every scenario but one), or
//! key=value pairs whose status sets the message's severity (`transform`):
//!
//! ```text
//! <PRI>Nov 27 06:09:00 web01 nginx[1234]: gen=3 seq=0000000042 t=1732240000123456 user=u4821
//!   action=login status=503 latency_ms=87 session=9f2c4e1a7b3d5c60 note="cache miss retry"
//!   PRI = facility × 8 + the status's severity (503: alert); the note's words pad to the size
//! ```
//!
//! Invariants: a block holds whole frames only; `frame_ends`, `bodies` and `slots` have one entry per
//! message; the text `gen=` occurs exactly once per message (filler words never contain `=`, and no
//! key ends in `gen`), which is what lets the meter find markers without parsing the surrounding
//! format.

use anyhow::{Result, bail};
use clap::ValueEnum;
use serde::Serialize;

/// Width of the sequence-number slot.
pub const SEQ_DIGITS: usize = 10;
/// Width of the send-time slot (microseconds since the epoch: 16 digits until the year 2286).
pub const TIME_DIGITS: usize = 16;
/// Bytes between the start of the sequence slot and the start of the time slot (`" t="`).
pub const TIME_OFFSET: usize = SEQ_DIGITS + 3;

/// Message format of the generated payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `<PRI>Mmm dd hh:mm:ss host app[pid]: MSG` (BSD syslog).
    Rfc3164,
    /// `<PRI>1 TIMESTAMP host app pid msgid [SD] MSG` with structured data.
    Rfc5424,
    /// The marker and filler only: one line, no header.
    Raw,
    /// One JSON object per message with the marker in `message`.
    Json,
}

/// What a message's text holds after its marker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Content {
    /// Filler words up to the message size: no `=`, no quotes, nothing to parse.
    #[default]
    Words,
    /// key=value pairs, `user=u4821 action=login status=503 latency_ms=87
    /// session=9f2c4e1a7b3d5c60 note="cache miss retry"`, the note's words padding to the
    /// message size; the severity in PRI is the status's (503: alert), so a load mixes all
    /// eight severities, a third of them `err` or more severe.
    KeyValue,
}

/// How messages are delimited on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Each message ends with `\n`.
    Newline,
    /// RFC 6587 octet counting: `LEN SP MSG`, no trailing newline.
    OctetCounting,
}

/// What a block generator needs to know.
#[derive(Clone, Debug)]
pub struct PayloadSpec {
    /// Message format.
    pub format: Format,
    /// Stream framing.
    pub framing: Framing,
    /// Target length of a message body in bytes (the header and marker count; the filler pads).
    pub message_size: usize,
    /// Seed of the pseudo-random content: the same seed gives the same bytes.
    pub seed: u64,
    /// What follows the marker.
    pub content: Content,
    /// Approximate bytes per block.
    pub block_bytes: usize,
    /// Number of distinct blocks to cycle through.
    pub blocks: usize,
}

impl Default for PayloadSpec {
    fn default() -> Self {
        Self {
            format: Format::Raw,
            framing: Framing::Newline,
            message_size: 100,
            seed: 1,
            content: Content::Words,
            block_bytes: 128 * 1024,
            blocks: 8,
        }
    }
}

/// A reusable buffer of whole frames whose marker slots are patched before each send.
#[derive(Clone, Debug)]
pub struct Block {
    /// The frames, back to back.
    pub bytes: Vec<u8>,
    /// End offset (exclusive) of each message's frame in `bytes`.
    pub frame_ends: Vec<usize>,
    /// Body (the message without framing) of each message, as `(start, end)` offsets.
    pub bodies: Vec<(usize, usize)>,
    /// Offset of each message's sequence slot; its time slot is at `slot + TIME_OFFSET`.
    pub slots: Vec<usize>,
}

impl Block {
    /// Number of messages in the block.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the block holds no message.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes covering the first `n` frames.
    pub fn prefix(&self, n: usize) -> &[u8] {
        match n {
            0 => &[],
            n => &self.bytes[..self.frame_ends[n - 1]],
        }
    }

    /// Ends the frame that the block's bytes end with: `body` is where the message text lies in
    /// `bytes`, `slot` the offset of its sequence slot.
    pub fn end_frame(&mut self, body: (usize, usize), slot: usize) {
        self.frame_ends.push(self.bytes.len());
        self.bodies.push(body);
        self.slots.push(slot);
    }

    /// Writes consecutive sequence numbers (taken from `seq`, which advances) and the send time into
    /// the first `n` messages.
    pub fn stamp(&mut self, n: usize, seq: &mut SeqCounter, time: &[u8; TIME_DIGITS]) {
        for &slot in &self.slots[..n] {
            let dst = &mut self.bytes[slot..slot + TIME_OFFSET + TIME_DIGITS];
            dst[..SEQ_DIGITS].copy_from_slice(&seq.digits);
            dst[TIME_OFFSET..].copy_from_slice(time);
            seq.increment();
        }
    }
}

/// A decimal counter kept as ASCII so that stamping a message is a copy, not a formatting call.
#[derive(Clone, Debug)]
pub struct SeqCounter {
    digits: [u8; SEQ_DIGITS],
}

impl SeqCounter {
    /// A counter starting at `value` (reduced modulo 10^10).
    pub fn new(value: u64) -> Self {
        let mut digits = [b'0'; SEQ_DIGITS];
        let mut v = value;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (v % 10) as u8;
            v /= 10;
        }
        Self { digits }
    }

    /// Adds one, carrying through the ASCII digits.
    #[inline]
    pub fn increment(&mut self) {
        for d in self.digits.iter_mut().rev() {
            if *d == b'9' {
                *d = b'0';
            } else {
                *d += 1;
                return;
            }
        }
    }

    /// The current value as ASCII digits.
    pub fn digits(&self) -> &[u8; SEQ_DIGITS] {
        &self.digits
    }
}

/// Formats microseconds since the epoch into the fixed-width time slot.
pub fn time_digits(micros: u64) -> [u8; TIME_DIGITS] {
    let mut out = [b'0'; TIME_DIGITS];
    let mut v = micros;
    for d in out.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out
}

/// Microseconds since the Unix epoch, from the wall clock (the meter compares it with its own clock on
/// the same machine).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// splitmix64: small, seedable, and good enough for filler text; a dependency would buy nothing here.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

const HOSTS: &[&str] = &[
    "web01",
    "web02",
    "db-primary",
    "cache3",
    "edge-fra1",
    "build7",
];
const APPS: &[&str] = &["nginx", "sshd", "postgres", "cron", "kernel", "app"];
const WORDS: &[&str] = &[
    "request",
    "served",
    "user",
    "session",
    "opened",
    "closed",
    "latency",
    "upstream",
    "cache",
    "miss",
    "hit",
    "connection",
    "reset",
    "timeout",
    "retry",
    "ok",
    "path",
    "/api/v1/items",
    "GET",
    "POST",
    "200",
    "404",
    "503",
    "bytes",
    "client",
    "worker",
    "queue",
    "flushed",
    "rotated",
    "disk",
];
/// The actions of key=value messages.
const ACTIONS: &[&str] = &[
    "login", "logout", "view", "search", "upload", "download", "purchase", "delete",
];
/// The statuses of key=value messages, each with the severity it is logged at: every severity
/// once at least, `err` or more severe for 4 draws in 12.
const STATUSES: &[(u16, usize)] = &[
    (200, 6),
    (200, 6),
    (200, 6),
    (201, 5),
    (204, 7),
    (304, 7),
    (404, 4),
    (429, 4),
    (500, 3),
    (502, 2),
    (503, 1),
    (507, 0),
];

/// The severity (0 `emerg` … 7 `debug`) of a key=value message with `status` (`None`: not a
/// status the generator sends).
pub fn kv_severity(status: u16) -> Option<usize> {
    STATUSES
        .iter()
        .find(|(s, _)| *s == status)
        .map(|&(_, severity)| severity)
}

/// The pairs of a generated key=value text, in order: space-separated `key=value` or
/// `key="quoted value"` tokens (the generator's own shape, not every key=value dialect); `None`
/// when a token is not one.
pub fn key_values(text: &str) -> Option<Vec<(&str, &str)>> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start_matches(' ');
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        if key.is_empty() || key.contains([' ', '"']) {
            return None;
        }
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => {
                let (value, after) = quoted.split_once('"')?;
                if !(after.is_empty() || after.starts_with(' ')) {
                    return None;
                }
                (value, after)
            }
            None => after.split_at(after.find(' ').unwrap_or(after.len())),
        };
        pairs.push((key, value));
        rest = after.trim_start_matches(' ');
    }
    Some(pairs)
}

const MONTHS: &[&str] = &[
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Builds `spec.blocks` blocks for generator `gen_id`. Every generator gets the same content for the
/// same seed; only the marker's generator id differs.
///
/// # Errors
/// Fails when the spec cannot produce a message (a zero block size).
pub fn build_blocks(spec: &PayloadSpec, gen_id: u32) -> Result<Vec<Block>> {
    let framing = spec.framing;
    build_blocks_with(spec, gen_id, 1, |block, body, slot| {
        let frame_start = block.bytes.len();
        let body_start = match framing {
            Framing::Newline => frame_start,
            Framing::OctetCounting => {
                block
                    .bytes
                    .extend_from_slice(format!("{} ", body.len()).as_bytes());
                block.bytes.len()
            }
        };
        block.bytes.extend_from_slice(body);
        let body_end = block.bytes.len();
        if framing == Framing::Newline {
            block.bytes.push(b'\n');
        }
        block.end_frame((body_start, body_end), body_start + slot);
    })
}

/// The general form of [`build_blocks`]: the same seeded bodies, each wrapped by `frame`, which
/// appends the message's frame to the block and ends it with [`Block::end_frame`]. It gets the
/// body and the offset of the sequence slot within it. A block ends at the first multiple of
/// `multiple` messages at or past `spec.block_bytes` (the fluent target cuts requests of a fixed
/// number of events from a block, and a block that is a whole number of them never leaves a
/// short request behind).
///
/// # Errors
/// Fails when the spec cannot produce a message (a zero block size).
pub fn build_blocks_with(
    spec: &PayloadSpec,
    gen_id: u32,
    multiple: usize,
    frame: impl FnMut(&mut Block, &[u8], usize),
) -> Result<Vec<Block>> {
    // Header timestamps are fixed at generation time: they only have to parse, while the marker
    // carries the real send time.
    build_blocks_at(spec, gen_id, multiple, &chrono::Utc::now(), frame)
}

/// [`build_blocks_with`] with the headers' time `now` (the tests fix it).
fn build_blocks_at(
    spec: &PayloadSpec,
    gen_id: u32,
    multiple: usize,
    now: &chrono::DateTime<chrono::Utc>,
    mut frame: impl FnMut(&mut Block, &[u8], usize),
) -> Result<Vec<Block>> {
    if spec.block_bytes == 0 || spec.blocks == 0 {
        bail!("block size and block count must be positive");
    }
    let multiple = multiple.max(1);
    let mut rng = Rng::new(spec.seed);
    let mut blocks = Vec::with_capacity(spec.blocks);
    for _ in 0..spec.blocks {
        let mut block = Block {
            bytes: Vec::with_capacity(spec.block_bytes + 4096),
            frame_ends: Vec::new(),
            bodies: Vec::new(),
            slots: Vec::new(),
        };
        let mut body = Vec::with_capacity(spec.message_size + 256);
        while block.bytes.len() < spec.block_bytes || !block.len().is_multiple_of(multiple) {
            body.clear();
            let slot = write_body(&mut body, spec, gen_id, &mut rng, now);
            let before = block.len();
            frame(&mut block, &body, slot);
            if block.len() != before + 1 {
                bail!("a frame builder must end exactly one frame per message");
            }
        }
        blocks.push(block);
    }
    Ok(blocks)
}

/// Writes one message body and returns the offset of its sequence slot within the body.
fn write_body(
    out: &mut Vec<u8>,
    spec: &PayloadSpec,
    gen_id: u32,
    rng: &mut Rng,
    now: &chrono::DateTime<chrono::Utc>,
) -> usize {
    if spec.content == Content::KeyValue {
        return write_kv_body(out, spec, gen_id, rng, now);
    }
    let host = HOSTS[rng.below(HOSTS.len())];
    let app = APPS[rng.below(APPS.len())];
    let pid = 100 + rng.below(30_000);
    // Facilities 0..=23, severities 0..=7.
    let pri = rng.below(24) * 8 + rng.below(8);
    let json_close = write_header(out, spec.format, pri, (host, app, pid), rng, now);
    let slot = write_marker(out, gen_id);
    let tail = if json_close { 2 } else { 0 };
    // Filler: words until the body reaches the requested size. Words contain no '=' so the marker is
    // the only `gen=` in the message, and no quote or backslash so JSON output needs no escaping.
    while out.len() + tail < spec.message_size {
        out.push(b' ');
        let word = WORDS[rng.below(WORDS.len())].as_bytes();
        let room = spec.message_size - tail - out.len();
        out.extend_from_slice(&word[..word.len().min(room.max(1))]);
    }
    if json_close {
        out.extend_from_slice(b"\"}");
    }
    slot
}

/// A key=value message body (see [`Content::KeyValue`]); returns the offset of its sequence
/// slot. The note holds two words at least, then words (the last one cut) up to the size.
fn write_kv_body(
    out: &mut Vec<u8>,
    spec: &PayloadSpec,
    gen_id: u32,
    rng: &mut Rng,
    now: &chrono::DateTime<chrono::Utc>,
) -> usize {
    use std::io::Write as _;
    let host = HOSTS[rng.below(HOSTS.len())];
    let app = APPS[rng.below(APPS.len())];
    let pid = 100 + rng.below(30_000);
    let facility = rng.below(24);
    let (status, severity) = STATUSES[rng.below(STATUSES.len())];
    let json_close = write_header(
        out,
        spec.format,
        facility * 8 + severity,
        (host, app, pid),
        rng,
        now,
    );
    let slot = write_marker(out, gen_id);
    // Inside a JSON string the note's quotes are escaped.
    let quote: &[u8] = if json_close { b"\\\"" } else { b"\"" };
    let _ = write!(
        out,
        " user=u{} action={} status={status} latency_ms={} session={:016x} note=",
        rng.below(100_000),
        ACTIONS[rng.below(ACTIONS.len())],
        1 + rng.below(2000),
        rng.next_u64(),
    );
    out.extend_from_slice(quote);
    let tail = quote.len() + if json_close { 2 } else { 0 };
    let mut words = 0;
    loop {
        // Room for a space and one character at least, once the note has its two words.
        let room = spec.message_size.saturating_sub(out.len() + tail);
        if words >= 2 && room < 2 {
            break;
        }
        let word = WORDS[rng.below(WORDS.len())].as_bytes();
        if words > 0 {
            out.push(b' ');
        }
        let take = if words >= 2 {
            word.len().min(room - 1)
        } else {
            word.len()
        };
        out.extend_from_slice(&word[..take]);
        words += 1;
    }
    out.extend_from_slice(quote);
    if json_close {
        out.extend_from_slice(b"\"}");
    }
    slot
}

/// Writes the message's header in `format` and returns whether the body is inside a JSON string
/// (to be closed with `"}`). RFC5424 draws its ids from `rng`.
fn write_header(
    out: &mut Vec<u8>,
    format: Format,
    pri: usize,
    (host, app, pid): (&str, &str, usize),
    rng: &mut Rng,
    now: &chrono::DateTime<chrono::Utc>,
) -> bool {
    use chrono::{Datelike, Timelike};
    match format {
        Format::Raw => false,
        Format::Rfc3164 => {
            let month = MONTHS[(now.month0() as usize) % 12];
            out.extend_from_slice(
                format!(
                    "<{pri}>{month} {:>2} {:02}:{:02}:{:02} {host} {app}[{pid}]: ",
                    now.day(),
                    now.hour(),
                    now.minute(),
                    now.second()
                )
                .as_bytes(),
            );
            false
        }
        Format::Rfc5424 => {
            let ts = now.format("%Y-%m-%dT%H:%M:%S%.6fZ");
            let event_id = 1000 + rng.below(9000);
            out.extend_from_slice(
                format!(
                    "<{pri}>1 {ts} {host} {app} {pid} ID{} [exampleSDID@32473 iut=\"3\" \
                     eventSource=\"Application\" eventID=\"{event_id}\"][meta@32473 \
                     sequenceId=\"{}\"] ",
                    rng.below(100),
                    rng.below(1_000_000)
                )
                .as_bytes(),
            );
            false
        }
        Format::Json => {
            out.extend_from_slice(
                format!("{{\"host\":\"{host}\",\"app\":\"{app}\",\"pid\":{pid},\"message\":\"")
                    .as_bytes(),
            );
            true
        }
    }
}

/// Writes the marker with empty slots and returns the offset of its sequence slot.
fn write_marker(out: &mut Vec<u8>, gen_id: u32) -> usize {
    out.extend_from_slice(format!("gen={gen_id} seq=").as_bytes());
    let slot = out.len();
    out.extend_from_slice(&[b'0'; SEQ_DIGITS]);
    out.extend_from_slice(b" t=");
    out.extend_from_slice(&[b'0'; TIME_DIGITS]);
    slot
}

/// How many of `total` messages generator `index` of `generators` sends: the first `total % n` get one
/// more. The meter uses the same split to know each generator's expected range.
pub fn share(total: u64, generators: usize, index: usize) -> u64 {
    let n = generators.max(1) as u64;
    total / n + u64::from((index as u64) < total % n)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn seq_counter_carries() {
        let mut c = SeqCounter::new(99);
        c.increment();
        assert_eq!(c.digits(), b"0000000100");
        let mut c = SeqCounter::new(9_999_999_999);
        c.increment();
        assert_eq!(c.digits(), b"0000000000");
    }

    #[test]
    fn blocks_have_one_marker_per_message_and_valid_framing() {
        for format in [Format::Raw, Format::Rfc3164, Format::Rfc5424, Format::Json] {
            for framing in [Framing::Newline, Framing::OctetCounting] {
                let spec = PayloadSpec {
                    format,
                    framing,
                    message_size: 150,
                    block_bytes: 4096,
                    blocks: 2,
                    ..PayloadSpec::default()
                };
                let mut blocks = build_blocks(&spec, 7).unwrap();
                let mut seq = SeqCounter::new(5);
                let n = blocks[0].len();
                blocks[0].stamp(n, &mut seq, &time_digits(1_732_240_000_123_456));
                let b = &blocks[0];
                let text = std::str::from_utf8(&b.bytes).unwrap();
                assert_eq!(text.matches("gen=").count(), n, "{format:?}");
                assert!(text.contains("gen=7 seq=0000000005 t=1732240000123456"));
                let mut start = 0;
                for (i, &end) in b.frame_ends.iter().enumerate() {
                    let (bs, be) = b.bodies[i];
                    match framing {
                        Framing::Newline => assert_eq!(b.bytes[end - 1], b'\n'),
                        Framing::OctetCounting => {
                            let head = std::str::from_utf8(&b.bytes[start..bs]).unwrap();
                            assert_eq!(head.trim().parse::<usize>().unwrap(), be - bs);
                        }
                    }
                    if format == Format::Json {
                        let v: serde_json::Value =
                            serde_json::from_slice(&b.bytes[bs..be]).unwrap();
                        assert!(v["message"].as_str().unwrap().starts_with("gen=7 "));
                    }
                    start = end;
                }
            }
        }
    }

    /// FNV-1a, 64 bits: a stable digest of the bytes (std's hasher may change between releases).
    fn fnv(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The digest of every format's blocks, framings and sizes, with the headers' time fixed.
    fn digests(content: Content) -> Vec<(String, u64)> {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-27T06:09:00.123456Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut out = Vec::new();
        for format in [Format::Raw, Format::Rfc3164, Format::Rfc5424, Format::Json] {
            {
                for message_size in [64, 128, 256] {
                    let spec = PayloadSpec {
                        format,
                        message_size,
                        content,
                        block_bytes: 4096,
                        blocks: 2,
                        ..PayloadSpec::default()
                    };
                    let blocks = build_blocks_at(&spec, 3, 1, &now, |block, b, slot| {
                        let start = block.bytes.len();
                        block.bytes.extend_from_slice(b);
                        let end = block.bytes.len();
                        block.bytes.push(b'\n');
                        block.end_frame((start, end), start + slot);
                    })
                    .unwrap();
                    let bytes: Vec<u8> = blocks.iter().flat_map(|b| b.bytes.clone()).collect();
                    out.push((format!("{format:?} {message_size}"), fnv(&bytes)));
                }
            }
        }
        out
    }

    /// The word-filled payloads every scenario but `transform` sends are byte for byte those
    /// the lab sent before key=value bodies were added (digests taken then).
    #[test]
    fn word_payloads_are_unchanged() {
        let got = digests(Content::Words);
        let want: &[u64] = &[
            3582533105009629662,
            8766046214540090562,
            14714249606668401292,
            17052515262192560201,
            3478210996790830097,
            12439940908247810220,
            2873704947594035058,
            2873704947594035058,
            8163686402431386201,
            18058263426957019357,
            3158312917642414678,
            7571677913432610850,
        ];
        assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), want, "{got:?}");
    }

    /// Key=value messages: the marker once, the pairs in their order, the severity in PRI the
    /// status's, a quoted note of two words at least padding to the size; every severity in a
    /// block, a third or so of them `err` or more severe; the same bytes for the same seed.
    #[test]
    fn key_value_messages_carry_their_pairs_and_the_statuss_severity() {
        for (format, size) in [
            (Format::Rfc3164, 256),
            (Format::Rfc3164, 64),
            (Format::Rfc5424, 400),
            (Format::Raw, 200),
            (Format::Json, 256),
        ] {
            let spec = PayloadSpec {
                format,
                message_size: size,
                content: Content::KeyValue,
                block_bytes: 16 * 1024,
                blocks: 2,
                ..PayloadSpec::default()
            };
            let blocks = build_blocks(&spec, 2).unwrap();
            // The same bytes for the same seed (at the same time: the headers carry it).
            let now = chrono::Utc::now();
            let again = || {
                build_blocks_at(&spec, 2, 1, &now, |block, b, slot| {
                    block.bytes.extend_from_slice(b);
                    block.end_frame((0, 0), slot);
                })
                .unwrap()
            };
            assert!(again()[1].bytes == again()[1].bytes, "{format:?}");
            let mut severities = [0usize; 8];
            for b in &blocks {
                for &(start, end) in &b.bodies {
                    let body = std::str::from_utf8(&b.bytes[start..end]).unwrap();
                    let text = if format == Format::Json {
                        let v: serde_json::Value = serde_json::from_str(body).unwrap();
                        v["message"].as_str().unwrap().to_string()
                    } else {
                        body.to_string()
                    };
                    assert_eq!(text.matches("gen=").count(), 1, "{text}");
                    let kv = &text[text.find("gen=").unwrap()..];
                    let pairs = key_values(kv).unwrap_or_else(|| panic!("{kv}"));
                    let keys: Vec<&str> = pairs.iter().map(|p| p.0).collect();
                    assert_eq!(
                        keys,
                        [
                            "gen",
                            "seq",
                            "t",
                            "user",
                            "action",
                            "status",
                            "latency_ms",
                            "session",
                            "note"
                        ],
                        "{text}"
                    );
                    let value = |k: &str| pairs.iter().find(|p| p.0 == k).unwrap().1;
                    assert_eq!(value("gen"), "2");
                    assert!(value("user").starts_with('u'), "{text}");
                    assert!(ACTIONS.contains(&value("action")), "{text}");
                    assert_eq!(value("session").len(), 16, "{text}");
                    assert!(value("note").split(' ').count() >= 2, "{text}");
                    assert!(!value("note").ends_with(' '), "{text}");
                    let severity = kv_severity(value("status").parse().unwrap()).unwrap();
                    severities[severity] += 1;
                    match format {
                        Format::Rfc3164 | Format::Rfc5424 => {
                            let pri: usize = body[1..body.find('>').unwrap()].parse().unwrap();
                            assert_eq!(pri % 8, severity, "{body}");
                        }
                        Format::Raw | Format::Json => {}
                    }
                    // The note pads the body to the size, when the pairs leave room.
                    if size >= 256 {
                        assert!((end - start).abs_diff(size) <= 1, "{body}");
                    }
                }
            }
            assert!(severities.iter().all(|&n| n > 0), "{severities:?}");
            let errors: usize = severities[..4].iter().sum();
            let all: usize = severities.iter().sum();
            assert!(errors * 4 > all && errors * 2 < all, "{severities:?}");
        }
    }

    #[test]
    fn key_values_reads_the_generators_shape_only() {
        assert_eq!(
            key_values(r#" a=1 b="two words" c="" d=x"#).unwrap(),
            [("a", "1"), ("b", "two words"), ("c", ""), ("d", "x")]
        );
        for bad in ["a", "a=1 b", r#"a="open"#, r#"a="x"y"#, "=1"] {
            assert_eq!(key_values(bad), None, "{bad}");
        }
    }

    #[test]
    fn same_seed_same_bytes() {
        let spec = PayloadSpec::default();
        let a = build_blocks(&spec, 0).unwrap();
        let b = build_blocks(&spec, 0).unwrap();
        assert_eq!(a[3].bytes, b[3].bytes);
    }

    #[test]
    fn share_splits_exactly() {
        let total: u64 = (0..4).map(|i| share(10, 4, i)).sum();
        assert_eq!(total, 10);
        assert_eq!(share(10, 4, 0), 3);
        assert_eq!(share(10, 4, 3), 2);
    }
}
