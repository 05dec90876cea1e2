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
//! Invariants: a block holds whole frames only; `frame_ends`, `bodies` and `slots` have one entry per
//! message; the text `gen=` occurs exactly once per message (the filler never contains `=`), which is
//! what lets the meter find markers without parsing the surrounding format.

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
    mut frame: impl FnMut(&mut Block, &[u8], usize),
) -> Result<Vec<Block>> {
    if spec.block_bytes == 0 || spec.blocks == 0 {
        bail!("block size and block count must be positive");
    }
    let multiple = multiple.max(1);
    let mut rng = Rng::new(spec.seed);
    // Header timestamps are fixed at generation time: they only have to parse, while the marker
    // carries the real send time.
    let now = chrono::Utc::now();
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
            let slot = write_body(&mut body, spec, gen_id, &mut rng, &now);
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
    use chrono::{Datelike, Timelike};
    let host = HOSTS[rng.below(HOSTS.len())];
    let app = APPS[rng.below(APPS.len())];
    let pid = 100 + rng.below(30_000);
    // Facilities 0..=23, severities 0..=7.
    let pri = rng.below(24) * 8 + rng.below(8);
    let json_close = match spec.format {
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
    };
    out.extend_from_slice(format!("gen={gen_id} seq=").as_bytes());
    let slot = out.len();
    out.extend_from_slice(&[b'0'; SEQ_DIGITS]);
    out.extend_from_slice(b" t=");
    out.extend_from_slice(&[b'0'; TIME_DIGITS]);
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
