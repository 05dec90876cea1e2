//! The Fluentd forward protocol on the wire, against the real binary: hand-built msgpack over raw
//! TCP (and one UDP datagram for the heartbeat), the exact bytes loghaul answers, and the JSON
//! lines it writes. `docs/specs/forward.md` is the reference for every expectation here.
//!
//! The first half is what well-behaved clients send: every mode (Message with 3 and 4 elements,
//! Forward, PackedForward as `bin` and as fluentd's `str32`, CompressedPackedForward with gzip,
//! several members included, and zstd), every time encoding, every option and the acks. The
//! second half is the bad inputs, one test each, named `bad_forward_*`. Each of those asserts
//! that (a) a well-behaved client on another connection is still served, its event written and
//! its chunk acked, (b) the bad input is counted under the right `errors_total{kind}` (and
//! `discarded_events_total{reason}` when events were dropped), and (c) nothing crashed: `/health`
//! is 200 at the end and SIGTERM ends loghaul with exit 0.
//!
//! Requests are built by hand from literal bytes and a few header helpers, not with loghaul's
//! encoder, so loghaul is checked against the protocol rather than against itself; gzip comes
//! from flate2 (a dependency of the binary), zstd frames are built by hand (raw and RLE blocks),
//! and handshake digests come from coreutils' `sha512sum`. A failure prints what was sent and
//! what came back (hex), the source's non-zero metrics and the tail of loghaul's stderr.

use std::fmt::Write as _;
use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;

/// The source's id in every configuration here.
const SRC: &str = "fwd";
const ERRORS: &str = "loghaul_component_errors_total";
const DISCARDED: &str = "loghaul_component_discarded_events_total";
/// The tag of most requests.
const TAG: &str = "wire.test";
/// The handshake's secret and the server's name in the shared-key tests.
const KEY: &str = "wire-secret";
const SERVER_HOST: &str = "loghaul-wire";
/// How long "no answer" is watched for: acks go out within a flush interval (100ms here).
const SILENCE: Duration = Duration::from_millis(600);

/// A `fluent` source on `{TCP}` (its UDP heartbeat on the same number) into `{DIR}/out.jsonl`;
/// `options` is appended inside the source's mapping, e.g. `", max_request_size: 64KiB"`.
fn config(options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  fwd: {{ type: fluent, address: "127.0.0.1:{{TCP}}"{options} }}
sinks:
  out: {{ type: file, inputs: [fwd], path: "{{DIR}}/out.jsonl", encoding: json, flush_interval: 100ms }}
"#
    )
}

fn shared_key_config() -> String {
    config(&format!(
        r#", shared_key: "{KEY}", self_hostname: "{SERVER_HOST}""#
    ))
}

// ---------------------------------------------------------------------------------------------
// msgpack, by hand
// ---------------------------------------------------------------------------------------------

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A `str` with the shortest header (fixstr, str8, str16, str32), as msgpack-ruby writes it.
fn s(text: impl AsRef<[u8]>) -> Vec<u8> {
    let b = text.as_ref();
    let mut out = match b.len() {
        n @ 0..=31 => vec![0xa0 | n as u8],
        n @ 32..=255 => vec![0xd9, n as u8],
        n @ 256..=65_535 => cat(&[&[0xda], &(n as u16).to_be_bytes()]),
        n => cat(&[&[0xdb], &(n as u32).to_be_bytes()]),
    };
    out.extend_from_slice(b);
    out
}

/// A `str32` whatever the length: what fluentd's out_forward sends its entries blob as.
fn str32(b: &[u8]) -> Vec<u8> {
    cat(&[&[0xdb], &(b.len() as u32).to_be_bytes(), b])
}

/// A `bin` with the shortest header (bin8, bin16, bin32).
fn bin(b: &[u8]) -> Vec<u8> {
    let head = match b.len() {
        n @ 0..=255 => vec![0xc4, n as u8],
        n @ 256..=65_535 => cat(&[&[0xc5], &(n as u16).to_be_bytes()]),
        n => cat(&[&[0xc6], &(n as u32).to_be_bytes()]),
    };
    cat(&[&head, b])
}

fn arr(n: usize) -> Vec<u8> {
    match n {
        0..=15 => vec![0x90 | n as u8],
        _ => cat(&[&[0xdc], &(n as u16).to_be_bytes()]),
    }
}

fn map(n: usize) -> Vec<u8> {
    match n {
        0..=15 => vec![0x80 | n as u8],
        _ => cat(&[&[0xde], &(n as u16).to_be_bytes()]),
    }
}

/// `ce`: uint32, what Python and Ruby send for current epoch seconds.
fn uint32(v: u32) -> Vec<u8> {
    cat(&[&[0xce], &v.to_be_bytes()])
}

/// `d2`: int32.
fn int32(v: i32) -> Vec<u8> {
    cat(&[&[0xd2], &v.to_be_bytes()])
}

/// EventTime as fixext8: `d7 00 | sec u32 | nsec u32`.
fn event_time(sec: u32, nsec: u32) -> Vec<u8> {
    cat(&[&[0xd7, 0x00], &sec.to_be_bytes(), &nsec.to_be_bytes()])
}

/// EventTime as ext8 with length 8: `c7 08 00 | sec u32 | nsec u32`.
fn event_time_ext8(sec: u32, nsec: u32) -> Vec<u8> {
    cat(&[&[0xc7, 0x08, 0x00], &sec.to_be_bytes(), &nsec.to_be_bytes()])
}

/// A map with `str` keys and already-encoded values.
fn record(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut out = map(pairs.len());
    for (k, v) in pairs {
        out.extend_from_slice(&s(k));
        out.extend_from_slice(v);
    }
    out
}

/// `{"message": text}`.
fn msg(text: &str) -> Vec<u8> {
    record(&[("message", s(text))])
}

/// An Entry `[time, record]`.
fn entry(time: &[u8], rec: &[u8]) -> Vec<u8> {
    cat(&[&arr(2), time, rec])
}

/// `{"chunk": id}`.
fn chunk_option(chunk: &str) -> Vec<u8> {
    record(&[("chunk", s(chunk))])
}

/// What loghaul must answer for `chunk`: `{"ack": chunk}`, the value a `str`, byte for byte.
fn ack(chunk: impl AsRef<[u8]>) -> Vec<u8> {
    cat(&[&[0x81, 0xa3, b'a', b'c', b'k'], &s(chunk)])
}

/// Message mode: `[tag, time, record]`, or `[tag, time, record, {"chunk": id}]`.
fn message_request(tag: &str, time: &[u8], rec: &[u8], chunk: Option<&str>) -> Vec<u8> {
    match chunk {
        None => cat(&[&arr(3), &s(tag), time, rec]),
        Some(c) => cat(&[&arr(4), &s(tag), time, rec, &chunk_option(c)]),
    }
}

/// A Message-mode request of `{"message": text}` at uint32 `now`, acked as `chunk`.
fn simple_request(text: &str, chunk: Option<&str>) -> Vec<u8> {
    message_request(TAG, &uint32(now_secs()), &msg(text), chunk)
}

fn now_secs() -> u32 {
    now_unix() as u32
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).expect("gzip in memory");
    e.finish().expect("gzip in memory")
}

/// A zstd frame built by hand: magic, a frame header with a 2MiB window and no content size
/// (`00 58`), and `data` cut at `cuts` into raw blocks (Block_Type 0; 3-byte little-endian
/// header `size << 3 | type << 1 | last`). Checked against the zstd CLI when written.
fn zstd_raw(data: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58];
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(data.len());
    for (i, w) in bounds.windows(2).enumerate() {
        let block = &data[w[0]..w[1]];
        let last = u32::from(i + 2 == bounds.len());
        let header = ((block.len() as u32) << 3) | last;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.extend_from_slice(block);
    }
    out
}

/// A zstd bomb: `blocks` RLE blocks (Block_Type 1) of 128KiB of `byte`, 4 bytes apiece.
fn zstd_rle_bomb(byte: u8, blocks: usize) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58];
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let header = ((128u32 * 1024) << 3) | (1 << 1) | last;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(byte);
    }
    out
}

/// A decoded msgpack value, for reading HELO and PONG (the only things loghaul says besides
/// acks, which are compared byte for byte).
#[derive(Debug, Clone, PartialEq)]
enum Mp {
    Nil,
    Bool(bool),
    Int(i64),
    Str(Vec<u8>),
    Bin(Vec<u8>),
    Arr(Vec<Mp>),
    Map(Vec<(Mp, Mp)>),
}

impl Mp {
    fn bytes(&self) -> &[u8] {
        match self {
            Mp::Str(b) | Mp::Bin(b) => b,
            other => panic!("expected str or bin, got {other:?}"),
        }
    }
}

/// One value from the start of `b` and its length; `None` while incomplete. Only the types
/// a HELO or PONG holds are known.
fn parse_mp(b: &[u8]) -> Option<(Mp, usize)> {
    let m = *b.first()?;
    let blob = |hdr: usize, n: usize| -> Option<(Vec<u8>, usize)> {
        Some((b.get(hdr..hdr + n)?.to_vec(), hdr + n))
    };
    let items = |hdr: usize, n: usize| -> Option<(Vec<Mp>, usize)> {
        let mut at = hdr;
        let mut v = Vec::new();
        for _ in 0..n {
            let (item, len) = parse_mp(b.get(at..)?)?;
            v.push(item);
            at += len;
        }
        Some((v, at))
    };
    Some(match m {
        0x00..=0x7f => (Mp::Int(i64::from(m)), 1),
        0xc0 => (Mp::Nil, 1),
        0xc2 | 0xc3 => (Mp::Bool(m == 0xc3), 1),
        0xa0..=0xbf => {
            let (v, n) = blob(1, usize::from(m & 0x1f))?;
            (Mp::Str(v), n)
        }
        0xd9 => {
            let (v, n) = blob(2, usize::from(*b.get(1)?))?;
            (Mp::Str(v), n)
        }
        0xc4 => {
            let (v, n) = blob(2, usize::from(*b.get(1)?))?;
            (Mp::Bin(v), n)
        }
        0x90..=0x9f => {
            let (v, n) = items(1, usize::from(m & 0x0f))?;
            (Mp::Arr(v), n)
        }
        0x80..=0x8f => {
            let (v, n) = items(1, 2 * usize::from(m & 0x0f))?;
            let mut it = v.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            (Mp::Map(pairs), n)
        }
        other => panic!(
            "unexpected msgpack marker {other:#04x} from loghaul in {}",
            hex(b)
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// Diagnostics
// ---------------------------------------------------------------------------------------------

/// `b` as spaced hex, cut after 600 bytes.
fn hex(b: &[u8]) -> String {
    const MAX: usize = 600;
    let mut out = b
        .iter()
        .take(MAX)
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    if b.len() > MAX {
        let _ = write!(out, " ... ({} bytes in all)", b.len());
    }
    out
}

/// Every non-zero series of the source and the sink.
fn nonzero_metrics(server: &Server) -> String {
    match http_get(server.ports.api, "/metrics") {
        Some((_, body)) => body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.contains("component_id=\"fwd\"") || l.contains("component_id=\"out\""))
            .filter(|l| !l.ends_with(" 0"))
            .collect::<Vec<_>>()
            .join("\n"),
        None => "(no answer from /metrics)".into(),
    }
}

/// What a failure message carries: the bytes both ways, the metrics, loghaul's stderr.
fn explain(server: &Server, sent: &[u8], got: &[u8]) -> String {
    format!(
        "\n--- sent on this connection ({} bytes) ---\n{}\n--- received ({} bytes) ---\n{}\n\
         --- non-zero metrics of fwd and out ---\n{}\n--- loghaul stderr (tail) ---\n{}",
        sent.len(),
        hex(sent),
        got.len(),
        hex(got),
        nonzero_metrics(server),
        tail(&server.stderr(), 3000)
    )
}

/// Waits until `name{component_id="fwd",extra}` reaches `want`, then asserts it is exactly that
/// (a counter past `want` counted the same input twice).
fn expect_count(server: &Server, name: &str, extra: Option<&str>, want: u64, what: &str) {
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    let mut v = 0;
    for _ in 0..10_000 {
        v = parse_metric(&server.metrics_text(), name, SRC, extra).unwrap_or(0);
        if v >= want || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(
        v,
        want,
        "{what}: {name}{{component_id=\"{SRC}\"{}}} is {v}, expected {want}{}",
        extra.map(|e| format!(",{e}")).unwrap_or_default(),
        explain(server, &[], &[])
    );
}

/// The source's errors by kind, exactly: every kind named is checked, and their sum must be the
/// whole of `errors_total` (no other kind was counted).
fn expect_errors(server: &Server, kinds: &[(&str, u64)], what: &str) {
    for (kind, n) in kinds {
        expect_count(server, ERRORS, Some(&format!("kind=\"{kind}\"")), *n, what);
    }
    let total: u64 = kinds.iter().map(|(_, n)| n).sum();
    expect_count(server, ERRORS, None, total, &format!("{what} (all kinds)"));
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

/// A raw forward connection that remembers what it sent and received, for failure messages.
struct Client<'s> {
    server: &'s Server,
    stream: TcpStream,
    sent: Vec<u8>,
    got: Vec<u8>,
}

impl<'s> Client<'s> {
    fn connect(server: &'s Server) -> Client<'s> {
        Client {
            server,
            stream: connect(server.ports.tcp),
            sent: Vec::new(),
            got: Vec::new(),
        }
    }

    fn explain(&self) -> String {
        explain(self.server, &self.sent, &self.got)
    }

    /// Writes `bytes`; a failure is a test failure.
    fn send(&mut self, bytes: &[u8]) {
        self.sent.extend_from_slice(bytes);
        if let Err(e) = self.stream.write_all(bytes) {
            panic!(
                "writing {} bytes failed: {e}{}",
                bytes.len(),
                self.explain()
            );
        }
    }

    /// Writes `bytes` to a server that may close the connection under us (bad input).
    fn send_lossy(&mut self, bytes: &[u8]) {
        self.sent.extend_from_slice(bytes);
        let _ = self.stream.write_all(bytes);
    }

    /// Reads until `n` bytes arrived, the connection ended or `timeout` passed; returns what was
    /// read and why it stopped short, if it did.
    fn read_up_to(&mut self, n: usize, timeout: Duration) -> (Vec<u8>, Option<String>) {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..100_000 {
            if out.len() >= n {
                return (out, None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (out, Some(format!("nothing more within {timeout:?}")));
            }
            self.stream
                .set_read_timeout(Some(left))
                .expect("set_read_timeout");
            let want = (n - out.len()).min(buf.len());
            match self.stream.read(&mut buf[..want]) {
                Ok(0) => return (out, Some("the server closed the connection".into())),
                Ok(k) => {
                    out.extend_from_slice(&buf[..k]);
                    self.got.extend_from_slice(&buf[..k]);
                }
                Err(e) if matches!(e.kind(), IoErrorKind::WouldBlock | IoErrorKind::TimedOut) => {
                    return (out, Some(format!("nothing more within {timeout:?}")));
                }
                Err(e) if e.kind() == IoErrorKind::Interrupted => {}
                Err(e) => return (out, Some(format!("read failed: {e}"))),
            }
        }
        (out, Some("read loop bound reached".into()))
    }

    /// Asserts the next bytes from loghaul are exactly `want`.
    fn expect(&mut self, want: &[u8], what: &str) {
        let (got, short) = self.read_up_to(want.len(), ARRIVE_TIMEOUT);
        assert!(
            got == want,
            "{what}: expected {} bytes\n  {}\nbut read {} bytes{}\n  {}{}",
            want.len(),
            hex(want),
            got.len(),
            short.map(|why| format!(" ({why})")).unwrap_or_default(),
            hex(&got),
            self.explain()
        );
    }

    /// Asserts loghaul sends nothing for `SILENCE` and keeps the connection open.
    fn expect_silence(&mut self, what: &str) {
        let (got, why) = self.read_up_to(1, SILENCE);
        let quiet = got.is_empty() && why.as_deref().is_some_and(|w| w.starts_with("nothing"));
        assert!(
            quiet,
            "{what}: expected no answer and an open connection, but read {} bytes ({})\n  {}{}",
            got.len(),
            why.unwrap_or_else(|| "no error".into()),
            hex(&got),
            self.explain()
        );
    }

    /// Asserts loghaul closes the connection (FIN or reset) within `ARRIVE_TIMEOUT`, having sent
    /// exactly `want` first.
    fn expect_closed_after(&mut self, want: &[u8], what: &str) {
        let (got, why) = self.read_up_to(want.len() + 1, ARRIVE_TIMEOUT);
        let closed = why
            .as_deref()
            .is_some_and(|w| w.starts_with("the server closed") || w.starts_with("read failed"));
        assert!(
            got == want && closed,
            "{what}: expected loghaul to send {} bytes\n  {}\nand close the connection; it sent {} bytes ({})\n  {}{}",
            want.len(),
            hex(want),
            got.len(),
            why.unwrap_or_else(|| "and kept the connection open".into()),
            hex(&got),
            self.explain()
        );
    }

    /// Reads one msgpack value (HELO, PONG).
    fn read_value(&mut self, what: &str) -> Mp {
        let mut have = Vec::new();
        for _ in 0..1000 {
            if let Some((v, n)) = parse_mp(&have) {
                assert_eq!(n, have.len(), "{what}: bytes after the value");
                return v;
            }
            let (more, why) = self.read_up_to(1, ARRIVE_TIMEOUT);
            if more.is_empty() {
                panic!(
                    "{what}: incomplete after {} bytes ({}){}",
                    have.len(),
                    why.unwrap_or_default(),
                    self.explain()
                );
            }
            have.extend_from_slice(&more);
        }
        panic!("{what}: no complete value in 1000 reads{}", self.explain());
    }
}

/// The event of `lines` whose message is `text` (exactly one), with the client's context.
fn event_with<'a>(lines: &'a [Value], text: &str, c: &Client<'_>) -> &'a Value {
    let found: Vec<&Value> = lines
        .iter()
        .filter(|v| v["message"] == json!(text))
        .collect();
    assert!(
        found.len() == 1,
        "expected exactly one event with message {text:?}, found {}; the file holds:\n{}{}",
        found.len(),
        lines
            .iter()
            .map(|v| truncate_json(v, 300))
            .collect::<Vec<_>>()
            .join("\n"),
        c.explain()
    );
    found[0]
}

/// Sends a Message-mode request with a chunk on `c`, expects its ack byte for byte, and then
/// (acks come only once the sink has written) finds its event in the file. Returns every line.
fn request_is_served(c: &mut Client<'_>, label: &str) -> Vec<Value> {
    let text = format!("good client {label}");
    let chunk = format!("good/{label}==");
    c.send(&simple_request(&text, Some(&chunk)));
    c.expect(&ack(&chunk), &format!("the ack of {text:?}"));
    let lines = read_lines(&c.server.out());
    let e = event_with(&lines, &text, c);
    assert_eq!(e["tag"], json!(TAG), "{e}");
    lines
}

/// (a) of every bad-input test: a new connection is served. Returns every line so far.
fn good_client_is_served(server: &Server, label: &str) -> Vec<Value> {
    let mut c = Client::connect(server);
    request_is_served(&mut c, label)
}

/// As [`good_client_is_served`] on a `shared_key` server: the handshake first.
fn good_client_is_served_after_handshake(server: &Server, label: &str) -> Vec<Value> {
    let mut c = Client::connect(server);
    handshake(&mut c);
    request_is_served(&mut c, label)
}

/// Lowercase hex SHA-512 of the concatenation of `parts`, by coreutils' `sha512sum`.
fn sha512_hex(parts: &[&[u8]]) -> String {
    let mut child = Command::new("sha512sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha512sum (coreutils)");
    child
        .stdin
        .take()
        .expect("sha512sum stdin")
        .write_all(&parts.concat())
        .expect("write to sha512sum");
    let out = child.wait_with_output().expect("sha512sum output");
    assert!(out.status.success(), "sha512sum failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha512sum printed a digest")
        .to_string()
}

/// Reads HELO; returns its nonce (checking the HELO's shape on the way).
fn read_helo(c: &mut Client<'_>) -> Vec<u8> {
    let helo = c.read_value("HELO");
    let Mp::Arr(items) = &helo else {
        panic!("HELO is not an array: {helo:?}{}", c.explain());
    };
    assert_eq!(items.len(), 2, "HELO has 2 elements: {helo:?}");
    assert_eq!(items[0], Mp::Str(b"HELO".to_vec()), "{helo:?}");
    let Mp::Map(options) = &items[1] else {
        panic!("HELO's options are not a map: {helo:?}");
    };
    let get = |k: &str| {
        options
            .iter()
            .find(|(key, _)| key.bytes() == k.as_bytes())
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("HELO has no {k:?}: {helo:?}"))
    };
    let nonce = get("nonce").bytes().to_vec();
    assert_eq!(nonce.len(), 16, "the nonce is 16 random bytes: {helo:?}");
    assert_eq!(
        get("auth").bytes(),
        b"",
        "no users: auth is empty: {helo:?}"
    );
    assert_eq!(get("keepalive"), Mp::Bool(true), "{helo:?}");
    nonce
}

/// `["PING", host, salt, digest, "", ""]`.
fn ping(host: &str, salt: &str, digest: &str) -> Vec<u8> {
    cat(&[
        &arr(6),
        &s("PING"),
        &s(host),
        &s(salt),
        &s(digest),
        &s(""),
        &s(""),
    ])
}

/// A refusing PONG, as fluentd sends it: `["PONG", false, reason, "", ""]`.
fn pong_refused(reason: &str) -> Vec<u8> {
    cat(&[&arr(5), &s("PONG"), &[0xc2], &s(reason), &s(""), &s("")])
}

/// The client side of a successful handshake, checking the server's PONG digest.
fn handshake(c: &mut Client<'_>) {
    handshake_sending(c, &[]);
}

/// As [`handshake`], writing `with_ping` (requests) in the same write as the PING.
fn handshake_sending(c: &mut Client<'_>, with_ping: &[u8]) {
    let nonce = read_helo(c);
    let (host, salt) = ("wire-client", "0f1e2d3c4b5a69788796a5b4c3d2e1f0");
    let digest = sha512_hex(&[salt.as_bytes(), host.as_bytes(), &nonce, KEY.as_bytes()]);
    c.send(&cat(&[&ping(host, salt, &digest), with_ping]));
    let want = sha512_hex(&[
        salt.as_bytes(),
        SERVER_HOST.as_bytes(),
        &nonce,
        KEY.as_bytes(),
    ]);
    let pong = c.read_value("PONG");
    assert_eq!(
        pong,
        Mp::Arr(vec![
            Mp::Str(b"PONG".to_vec()),
            Mp::Bool(true),
            Mp::Str(Vec::new()),
            Mp::Str(SERVER_HOST.as_bytes().to_vec()),
            Mp::Str(want.into_bytes()),
        ]),
        "the PONG of a valid PING{}",
        c.explain()
    );
}

// ---------------------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------------------

/// The Message-mode example of the protocol summary, byte for byte: 3 elements, EventTime, no
/// option, so no answer. Checks every field loghaul writes for it.
#[test]
fn forward_message_mode_three_elements() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let spec_example = [
        0x93, 0xa8, b't', b'a', b'g', b'.', b'n', b'a', b'm', b'e', 0xd7, 0x00, 0x55, 0xec, 0xe6,
        0xf8, 0x07, 0x5b, 0xcd, 0x15, 0x81, 0xa7, b'm', b'e', b's', b's', b'a', b'g', b'e', 0xa3,
        b'b', b'a', b'r',
    ];
    c.send(&spec_example);
    c.expect_silence("no chunk: no answer");
    let lines = wait_for_line(&server.out(), "message \"bar\"", |v| {
        v["message"] == json!("bar")
    });
    assert_eq!(lines.len(), 1, "{lines:?}");
    let e = &lines[0];
    assert_eq!(
        e,
        &json!({
            "timestamp": "2015-09-07T01:23:04.123456789Z",
            "message": "bar",
            "source_ip": "127.0.0.1",
            "source_type": "fluent",
            "tag": "tag.name",
        }),
        "{}",
        c.explain()
    );
    expect_count(
        &server,
        "loghaul_component_received_events_total",
        None,
        1,
        "one event",
    );
    drop(c);
    expect_errors(&server, &[], "a valid request");
    server.finish();
}

/// Message mode with 4 elements: the option's `chunk` is acked byte for byte once written;
/// `size` and unknown option keys change nothing.
#[test]
fn forward_message_mode_four_elements_with_chunk() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let chunk = "p8n9gmxTQVC8/nh2wlKKeQ==";
    let option = record(&[
        ("size", vec![0x01]),
        ("chunk", s(chunk)),
        ("x-unknown", record(&[("nested", arr(0))])),
    ]);
    let req = cat(&[
        &arr(4),
        &s("app.four"),
        &uint32(1_700_000_000),
        &record(&[("message", s("four elements")), ("level", s("info"))]),
        &option,
    ]);
    c.send(&req);
    c.expect(&ack(chunk), "the ack of a 4-element Message");
    // 81 a3 "ack" b8 <24 bytes>: the summary's example shape.
    assert_eq!(&ack(chunk)[..6], &[0x81, 0xa3, b'a', b'c', b'k', 0xb8]);
    let lines = read_lines(&server.out());
    let e = event_with(&lines, "four elements", &c);
    assert_eq!(e["tag"], json!("app.four"), "{e}");
    assert_eq!(e["level"], json!("info"), "{e}");
    assert_eq!(e["timestamp"], json!("2023-11-14T22:13:20Z"), "{e}");
    assert_keys(
        e,
        &[
            "timestamp",
            "message",
            "source_ip",
            "source_type",
            "tag",
            "level",
        ],
    );
    c.expect_silence("one ack per chunk, nothing more");
    drop(c);
    server.finish();
}

/// Forward mode: the 2-element form Fluent Bit sends (no option) and the 3-element form with
/// `{size, chunk}`.
#[test]
fn forward_forward_mode_with_and_without_option() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let entries = |a: &str, b: &str| {
        cat(&[
            &arr(2),
            &entry(&uint32(1_700_000_001), &msg(a)),
            &entry(&event_time(1_700_000_002, 500), &msg(b)),
        ])
    };
    c.send(&cat(&[&arr(2), &s("fb.two"), &entries("fw 1", "fw 2")]));
    c.expect_silence("Forward without option: no answer");
    let option = record(&[("size", vec![0x02]), ("chunk", s("fw-chunk"))]);
    c.send(&cat(&[
        &arr(3),
        &s("fb.three"),
        &entries("fw 3", "fw 4"),
        &option,
    ]));
    c.expect(&ack("fw-chunk"), "the ack of a Forward request");
    let lines = wait_lines(&server.out(), 4, ARRIVE_TIMEOUT);
    assert_eq!(lines.len(), 4, "{lines:?}");
    for (text, tag, time) in [
        ("fw 1", "fb.two", "2023-11-14T22:13:21Z"),
        ("fw 2", "fb.two", "2023-11-14T22:13:22.000000500Z"),
        ("fw 3", "fb.three", "2023-11-14T22:13:21Z"),
        ("fw 4", "fb.three", "2023-11-14T22:13:22.000000500Z"),
    ] {
        let e = event_with(&lines, text, &c);
        assert_eq!(
            (&e["tag"], &e["timestamp"]),
            (&json!(tag), &json!(time)),
            "{e}"
        );
    }
    // Entries keep their order in the file.
    let order: Vec<&str> = lines.iter().map(message).collect();
    assert_eq!(order, ["fw 1", "fw 2", "fw 3", "fw 4"]);
    drop(c);
    expect_errors(&server, &[], "valid Forward requests");
    server.finish();
}

/// Entry `i` of a Packed request: `[EventTime(1700000000 + i, 1), {"message": "prefix i", "i": i}]`.
fn packed_entry(prefix: &str, i: usize) -> Vec<u8> {
    entry(
        &event_time(1_700_000_000 + i as u32, 1),
        &record(&[
            ("message", s(format!("{prefix} {i}"))),
            ("i", vec![i as u8]),
        ]),
    )
}

/// The entries of a Packed request: `n` Entries concatenated, no array header.
fn packed_entries(prefix: &str, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| packed_entry(prefix, i))
        .collect::<Vec<_>>()
        .concat()
}

/// Asserts `lines` hold events `prefix 0..n` with tag `tag`, once each.
fn assert_entries(lines: &[Value], prefix: &str, n: usize, tag: &str, c: &Client<'_>) {
    for i in 0..n {
        let e = event_with(lines, &format!("{prefix} {i}"), c);
        assert_eq!(e["tag"], json!(tag), "{e}");
        assert_eq!(e["i"], json!(i), "{e}");
        let (t, digits) = parse_rfc3339_utc(e["timestamp"].as_str().expect("timestamp"));
        assert_eq!((t as u64, digits), (1_700_000_000 + i as u64, 9), "{e}");
    }
}

/// PackedForward: the blob as `bin` (what the spec asks) and as `str32` with
/// `{size, compressed: "text", chunk}`: fluentd's out_forward's exact shape, whose "string"
/// holds binary msgpack (EventTime bytes are no UTF-8).
#[test]
fn forward_packed_forward_as_bin_and_as_str32() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let blob = packed_entries("bin", 3);
    let option = record(&[("size", vec![0x03]), ("chunk", s("packed-bin"))]);
    c.send(&cat(&[&arr(3), &s("packed.bin"), &bin(&blob), &option]));
    c.expect(&ack("packed-bin"), "PackedForward as bin");

    let blob = packed_entries("str32", 4);
    let chunk = "qvM3rrGLm5S0fDf8Nf5mBQ==\n";
    let option = record(&[
        ("size", vec![0x04]),
        ("compressed", s("text")),
        ("chunk", s(chunk)),
    ]);
    c.send(&cat(&[&arr(3), &s("packed.str32"), &str32(&blob), &option]));
    c.expect(&ack(chunk), "PackedForward as str32 with compressed: text");

    // Without an option: no answer, still written.
    let blob = packed_entries("bare", 2);
    c.send(&cat(&[&arr(2), &s("packed.bare"), &bin(&blob)]));
    c.expect_silence("PackedForward without option");
    let lines = wait_lines(&server.out(), 9, ARRIVE_TIMEOUT);
    assert_eq!(lines.len(), 9);
    assert_entries(&lines, "bin", 3, "packed.bin", &c);
    assert_entries(&lines, "str32", 4, "packed.str32", &c);
    assert_entries(&lines, "bare", 2, "packed.bare", &c);
    drop(c);
    expect_errors(&server, &[], "valid PackedForward requests");
    server.finish();
}

/// CompressedPackedForward with gzip: one member as `bin`; two members concatenated (a stream
/// `Zlib::GzipReader` reads as one) as `str32`, fluentd's way; a member per entry.
#[test]
fn forward_compressed_packed_forward_gzip() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let gz = gzip(&packed_entries("gz one", 5));
    let option = record(&[
        ("size", vec![0x05]),
        ("compressed", s("gzip")),
        ("chunk", s("gz-1")),
    ]);
    c.send(&cat(&[&arr(3), &s("gz.one"), &bin(&gz), &option]));
    c.expect(&ack("gz-1"), "gzip, one member, bin");

    let all = packed_entries("gz two", 6);
    let cut = packed_entry("gz two", 0).len() + packed_entry("gz two", 1).len();
    let two = cat(&[&gzip(&all[..cut]), &gzip(&all[cut..])]);
    let option = record(&[
        ("size", vec![0x06]),
        ("compressed", s("gzip")),
        ("chunk", s("gz-2\n")),
    ]);
    c.send(&cat(&[&arr(3), &s("gz.two"), &str32(&two), &option]));
    c.expect(&ack("gz-2\n"), "gzip, two members, str32");

    // A member cut inside an entry: members are one stream, not one entry each.
    let all = packed_entries("gz mid", 3);
    let mid = all.len() / 2;
    let split = cat(&[&gzip(&all[..mid]), &gzip(&all[mid..])]);
    let option = record(&[("compressed", s("gzip")), ("chunk", s("gz-3"))]);
    c.send(&cat(&[&arr(3), &s("gz.mid"), &bin(&split), &option]));
    c.expect(&ack("gz-3"), "gzip, members cut mid-entry");

    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 14, "5 + 6 + 3 events");
    assert_entries(&lines, "gz one", 5, "gz.one", &c);
    assert_entries(&lines, "gz two", 6, "gz.two", &c);
    assert_entries(&lines, "gz mid", 3, "gz.mid", &c);
    drop(c);
    expect_errors(&server, &[], "valid gzip requests");
    server.finish();
}

/// CompressedPackedForward with `compressed: "zstd"` (fluentd ≥ 1.19): a hand-built frame of
/// two raw blocks, cut inside an entry, as `bin` and as `str32`.
#[test]
fn forward_compressed_packed_forward_zstd() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let all = packed_entries("zstd", 4);
    let frame = zstd_raw(&all, &[all.len() / 3]);
    let option = record(&[
        ("size", vec![0x04]),
        ("compressed", s("zstd")),
        ("chunk", s("zstd-1")),
    ]);
    c.send(&cat(&[&arr(3), &s("z.bin"), &bin(&frame), &option]));
    c.expect(&ack("zstd-1"), "zstd as bin");
    let all = packed_entries("zstd str", 2);
    let option = record(&[("compressed", s("zstd")), ("chunk", s("zstd-2"))]);
    c.send(&cat(&[
        &arr(3),
        &s("z.str"),
        &str32(&zstd_raw(&all, &[])),
        &option,
    ]));
    c.expect(&ack("zstd-2"), "zstd as str32");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 6);
    assert_entries(&lines, "zstd", 4, "z.bin", &c);
    assert_entries(&lines, "zstd str", 2, "z.str", &c);
    drop(c);
    expect_errors(&server, &[], "valid zstd requests");
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// Times and records
// ---------------------------------------------------------------------------------------------

/// Every time encoding: positive fixint, uint32 `ce`, int32 `d2`, EventTime as fixext8 and as
/// ext8, `[EventTime, {metadata}]` and `[int, {}]` (Fluent Bit ≥ 2.1), and 0 (int or EventTime)
/// meaning "now"; also the other int widths, a negative int, EventTime as ext16, and the msgpack
/// Timestamp extension (type -1). Scalar times go in Message mode, every one of them in Forward and
/// PackedForward entries.
#[test]
fn forward_time_encodings() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let meta = record(&[("trace_id", s("abc")), ("otlp", map(0))]);
    // (name, encoded time, expected timestamp; None: "now")
    let times: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("fixint", vec![0x7f], Some("1970-01-01T00:02:07Z")),
        (
            "uint32",
            uint32(1_700_000_000),
            Some("2023-11-14T22:13:20Z"),
        ),
        ("int32", int32(1_700_000_003), Some("2023-11-14T22:13:23Z")),
        (
            "fixext8",
            event_time(1_441_588_984, 123_456_789),
            Some("2015-09-07T01:23:04.123456789Z"),
        ),
        (
            "ext8",
            event_time_ext8(1_441_588_984, 5),
            Some("2015-09-07T01:23:04.000000005Z"),
        ),
        (
            "whole EventTime",
            event_time(1_441_588_984, 0),
            Some("2015-09-07T01:23:04Z"),
        ),
        (
            "EventTime with metadata",
            cat(&[&arr(2), &event_time(1_441_588_985, 987_654_321), &meta]),
            Some("2015-09-07T01:23:05.987654321Z"),
        ),
        (
            "int with metadata",
            cat(&[&arr(2), &uint32(1_700_000_004), &map(0)]),
            Some("2023-11-14T22:13:24Z"),
        ),
        (
            "uint16",
            vec![0xcd, 0xff, 0xff],
            Some("1970-01-01T18:12:15Z"),
        ),
        (
            "uint64",
            cat(&[&[0xcf], &1_700_000_005u64.to_be_bytes()]),
            Some("2023-11-14T22:13:25Z"),
        ),
        (
            "int64",
            cat(&[&[0xd3], &1_700_000_006i64.to_be_bytes()]),
            Some("2023-11-14T22:13:26Z"),
        ),
        // fluentd takes any Integer; before 1970 is still a time.
        ("negative int32", int32(-1), Some("1969-12-31T23:59:59Z")),
        (
            "ext16 EventTime",
            cat(&[
                &[0xc8, 0x00, 0x08, 0x00],
                &1_441_588_984u32.to_be_bytes(),
                &42u32.to_be_bytes(),
            ]),
            Some("2015-09-07T01:23:04.000000042Z"),
        ),
        (
            "EventTime 5ns after the epoch",
            event_time(0, 5),
            Some("1970-01-01T00:00:00.000000005Z"),
        ),
        // The msgpack Timestamp extension (type -1), in its three sizes.
        (
            "timestamp32",
            cat(&[&[0xd6, 0xff], &1_441_588_984u32.to_be_bytes()]),
            Some("2015-09-07T01:23:04Z"),
        ),
        (
            "timestamp64",
            cat(&[
                &[0xd7, 0xff],
                &((250_000_000u64 << 34) | 1_441_588_984).to_be_bytes(),
            ]),
            Some("2015-09-07T01:23:04.250Z"),
        ),
        (
            "timestamp96",
            cat(&[
                &[0xc7, 0x0c, 0xff],
                &7u32.to_be_bytes(),
                &1_441_588_984i64.to_be_bytes(),
            ]),
            Some("2015-09-07T01:23:04.000000007Z"),
        ),
        ("int zero", vec![0x00], None),
        ("EventTime zero", event_time(0, 0), None),
    ];
    let before = now_unix();
    let mut expected = Vec::new();
    for (i, (name, time, _)) in times.iter().enumerate() {
        if time[0] & 0xf0 != 0x90 {
            // Scalar times alone: Message mode (an array there would make it Forward mode).
            let text = format!("message {name}");
            c.send(&message_request(
                TAG,
                time,
                &msg(&text),
                Some(&format!("m{i}")),
            ));
            c.expect(&ack(format!("m{i}")), &format!("Message with time {name}"));
            expected.push((text, i));
        }
    }
    let forward_entries: Vec<Vec<u8>> = times
        .iter()
        .map(|(name, time, _)| entry(time, &msg(&format!("forward {name}"))))
        .collect();
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &cat(&[&arr(times.len()), &forward_entries.concat()]),
        &chunk_option("forward"),
    ]));
    c.expect(&ack("forward"), "Forward with every time encoding");
    let packed: Vec<Vec<u8>> = times
        .iter()
        .map(|(name, time, _)| entry(time, &msg(&format!("packed {name}"))))
        .collect();
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &str32(&packed.concat()),
        &chunk_option("packed"),
    ]));
    c.expect(&ack("packed"), "PackedForward with every time encoding");
    let after = now_unix();
    for (i, (name, _, _)) in times.iter().enumerate() {
        expected.push((format!("forward {name}"), i));
        expected.push((format!("packed {name}"), i));
    }
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), expected.len(), "one event per time: {lines:?}");
    for (text, i) in &expected {
        let e = event_with(&lines, text, &c);
        let ts = e["timestamp"].as_str().expect("a timestamp");
        match times[*i].2 {
            Some(want) => assert_eq!(ts, want, "time encoding {:?}: {e}", times[*i].0),
            None => {
                let (t, _) = parse_rfc3339_utc(ts);
                assert!(
                    t >= before.floor() - 1.0 && t <= after + 1.0,
                    "time 0 means now ({before:.3}..{after:.3}), got {ts}: {e}"
                );
            }
        }
        assert_keys(
            e,
            &["timestamp", "message", "source_ip", "source_type", "tag"],
        );
    }
    drop(c);
    expect_errors(&server, &[], "valid times");
    server.finish();
}

/// A record's values as the JSON line holds them: nested maps and arrays, `str` and `bin`
/// (invalid UTF-8 replaced), signed, unsigned past i64::MAX, float, bool, nil, an extension,
/// and a `message` that is not a string (it stays in the record).
#[test]
fn forward_record_values() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let nested = record(&[
        (
            "list",
            cat(&[
                &arr(3),
                &[0x01],
                &s("two"),
                &record(&[("three", vec![0x03])]),
            ]),
        ),
        ("empty", map(0)),
        ("deeper", record(&[("k", record(&[("k", s("v"))]))])),
    ]);
    let rec = record(&[
        ("message", s("values")),
        ("str", s("plain \"quoted\" é")),
        ("bin", bin(b"raw\x00bin")),
        ("bad_utf8", bin(b"a\xffb")),
        ("neg", vec![0xfb]),
        (
            "i64",
            cat(&[&[0xd3], &(-1_234_567_890_123i64).to_be_bytes()]),
        ),
        ("u64", cat(&[&[0xcf], &u64::MAX.to_be_bytes()])),
        ("f64", cat(&[&[0xcb], &1.5f64.to_be_bytes()])),
        ("f32", cat(&[&[0xca], &0.25f32.to_be_bytes()])),
        ("yes", vec![0xc3]),
        ("no", vec![0xc2]),
        ("nil", vec![0xc0]),
        ("ext", vec![0xd4, 0x05, 0xab]),
        ("nested", nested),
    ]);
    c.send(&message_request(
        "rec.values",
        &uint32(1_700_000_000),
        &rec,
        Some("rv"),
    ));
    let rec2 = record(&[
        ("message", record(&[("text", s("a map"))])),
        ("n", vec![0x07]),
    ]);
    c.send(&message_request(
        "rec.map_message",
        &uint32(1_700_000_000),
        &rec2,
        Some("rv2"),
    ));
    c.expect(&cat(&[&ack("rv"), &ack("rv2")]), "acks of the records");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 2, "{lines:?}");
    let e = event_with(&lines, "values", &c);
    let want = json!({
        "timestamp": "2023-11-14T22:13:20Z",
        "message": "values",
        "source_ip": "127.0.0.1",
        "source_type": "fluent",
        "tag": "rec.values",
        "str": "plain \"quoted\" é",
        "bin": "raw\u{0}bin",
        "bad_utf8": "a\u{FFFD}b",
        "neg": -5,
        "i64": -1_234_567_890_123i64,
        "u64": u64::MAX,
        "f64": 1.5,
        "f32": 0.25,
        "yes": true,
        "no": false,
        "nil": null,
        "ext": {"ext_type": 5, "hex": "ab"},
        "nested": {"list": [1, "two", {"three": 3}], "empty": {}, "deeper": {"k": {"k": "v"}}},
    });
    assert_eq!(e, &want, "{}", c.explain());
    let e = lines
        .iter()
        .find(|v| v["tag"] == json!("rec.map_message"))
        .expect("the map-message event");
    assert_eq!(e["message"], json!({"text": "a map"}), "{e}");
    assert_eq!(e["n"], json!(7), "{e}");
    drop(c);
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// Options and acks
// ---------------------------------------------------------------------------------------------

/// `chunk` values are echoed byte for byte as `str`: Base64.encode64's trailing "\n", a 64-char
/// hex SHA-256 (older Fluent Bit: a str8 header), one byte, multi-byte UTF-8, bytes that are no
/// UTF-8, a chunk sent as `bin`, and a chunk that is not the option's first key.
#[test]
fn forward_ack_echoes_the_chunk_byte_for_byte() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("encode64 newline", b"p8n9gmxTQVC8/nh2wlKKeQ==\n".to_vec()),
        ("hex sha256", sha.as_bytes().to_vec()),
        ("one byte", b"x".to_vec()),
        ("utf-8", "chunk-é-✓".as_bytes().to_vec()),
        ("not utf-8", b"\xff\xfe\x00chunk".to_vec()),
    ];
    for (name, chunk) in &cases {
        let option = cat(&[&map(1), &s("chunk"), &s(chunk)]);
        c.send(&cat(&[
            &arr(4),
            &s(TAG),
            &uint32(1_700_000_000),
            &msg(name),
            &option,
        ]));
        c.expect(&ack(chunk), &format!("ack of chunk {name}"));
    }
    assert_eq!(
        &ack(sha)[5..7],
        &[0xd9, 64],
        "a 64-byte chunk is acked as str8"
    );
    // Sent as bin: acked as str (a bin ack makes @fluent-org/logger time out).
    let option = cat(&[&map(1), &s("chunk"), &bin(b"as-bin")]);
    c.send(&cat(&[
        &arr(4),
        &s(TAG),
        &uint32(1_700_000_000),
        &msg("bin chunk"),
        &option,
    ]));
    c.expect(&ack("as-bin"), "a bin chunk is acked as str");
    // Last of several keys.
    let option = record(&[
        ("size", vec![0x01]),
        ("compressed", s("text")),
        ("chunk", s("last-key")),
    ]);
    c.send(&cat(&[
        &arr(4),
        &s(TAG),
        &uint32(1_700_000_000),
        &msg("last key"),
        &option,
    ]));
    c.expect(&ack("last-key"), "chunk as the last option key");
    c.expect_silence("one ack per request");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), cases.len() + 2);
    drop(c);
    server.finish();
}

/// Several requests written back to back on one connection, without waiting for acks: the acks
/// come in request order, one per chunk, none for requests without one, also when a request's
/// only event is invalid (answered at once) or is a metrics signal. Once in one write, once as
/// one write per request.
#[test]
fn forward_acks_in_request_order_for_pipelined_requests() {
    let server = Server::start(&config(""));
    let t = uint32(1_700_000_000);
    let requests = |round: &str| -> Vec<(Vec<u8>, Option<String>)> {
        let ch = |n: u32| format!("{round}-chunk-{n}");
        vec![
            (
                message_request(TAG, &t, &msg(&format!("{round} a")), Some(&ch(1))),
                Some(ch(1)),
            ),
            (vec![0xc0], None),
            (
                cat(&[
                    &arr(2),
                    &s(TAG),
                    &cat(&[&arr(1), &entry(&t, &msg(&format!("{round} b")))]),
                ]),
                None,
            ),
            (
                cat(&[
                    &arr(3),
                    &s(TAG),
                    &str32(&entry(&t, &msg(&format!("{round} c")))),
                    &record(&[("compressed", s("text")), ("chunk", s(ch(2)))]),
                ]),
                Some(ch(2)),
            ),
            (
                // A float time: dropped, and still acked, in its place.
                message_request(
                    TAG,
                    &cat(&[&[0xcb], &1.7e9f64.to_be_bytes()]),
                    &msg(&format!("{round} float")),
                    Some(&ch(3)),
                ),
                Some(ch(3)),
            ),
            (
                cat(&[
                    &arr(3),
                    &s(TAG),
                    &bin(&gzip(&entry(&t, &msg(&format!("{round} d"))))),
                    &record(&[("compressed", s("gzip")), ("chunk", s(ch(4)))]),
                ]),
                Some(ch(4)),
            ),
            (
                cat(&[
                    &arr(3),
                    &s(TAG),
                    &bin(&entry(&t, &msg(&format!("{round} metrics")))),
                    &record(&[("fluent_signal", vec![0x01]), ("chunk", s(ch(5)))]),
                ]),
                Some(ch(5)),
            ),
            (
                message_request(TAG, &t, &msg(&format!("{round} e")), Some(&ch(6))),
                Some(ch(6)),
            ),
        ]
    };
    for (round, one_write) in [("together", true), ("apart", false)] {
        let mut c = Client::connect(&server);
        let reqs = requests(round);
        let want: Vec<u8> = reqs
            .iter()
            .filter_map(|(_, chunk)| chunk.as_ref().map(ack))
            .collect::<Vec<_>>()
            .concat();
        if one_write {
            c.send(
                &reqs
                    .iter()
                    .map(|(r, _)| r.clone())
                    .collect::<Vec<_>>()
                    .concat(),
            );
        } else {
            for (r, _) in &reqs {
                c.send(r);
                std::thread::sleep(Duration::from_millis(3));
            }
        }
        c.expect(&want, &format!("six acks in request order ({round})"));
        c.expect_silence("no ack beyond the six");
        let lines = read_lines(&server.out());
        for x in ["a", "b", "c", "d", "e"] {
            event_with(&lines, &format!("{round} {x}"), &c);
        }
        for x in ["float", "metrics"] {
            let text = format!("{round} {x}");
            assert!(
                !lines.iter().any(|v| v["message"] == json!(text)),
                "{text:?} must not be written{}",
                c.explain()
            );
        }
    }
    expect_errors(&server, &[("parse", 2)], "the two float times");
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"invalid\""),
        2,
        "the floats",
    );
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"unsupported\""),
        2,
        "the metrics",
    );
    server.finish();
}

/// No `chunk`, no answer, in every mode, and the connection stays open for what follows.
#[test]
fn forward_no_chunk_no_answer() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let t = uint32(1_700_000_000);
    c.send(&message_request(TAG, &t, &msg("quiet message"), None));
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &cat(&[&arr(1), &entry(&t, &msg("quiet forward"))]),
        &record(&[("size", vec![0x01])]),
    ]));
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &str32(&entry(&t, &msg("quiet packed"))),
        &record(&[("size", vec![0x01]), ("compressed", s("text"))]),
    ]));
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(&gzip(&entry(&t, &msg("quiet gzip")))),
        &record(&[("compressed", s("gzip"))]),
    ]));
    // A nil option is no option.
    c.send(&cat(&[&arr(4), &s(TAG), &t, &msg("nil option"), &[0xc0]]));
    c.expect_silence("requests without chunk");
    let lines = wait_lines(&server.out(), 5, ARRIVE_TIMEOUT);
    for text in [
        "quiet message",
        "quiet forward",
        "quiet packed",
        "quiet gzip",
        "nil option",
    ] {
        event_with(&lines, text, &c);
    }
    request_is_served(&mut c, "after requests without chunk");
    drop(c);
    expect_errors(&server, &[], "requests without chunk");
    server.finish();
}

/// `fluent_signal: 1` (metrics) and `2` (traces): skipped, counted as discarded `unsupported`,
/// still acked; `0` and no key are logs.
#[test]
fn forward_fluent_signal_other_than_logs_is_skipped() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let t = uint32(1_700_000_000);
    let signal = |sig: u8, chunk: &str, blob: &[u8]| {
        cat(&[
            &arr(3),
            &s(TAG),
            &bin(blob),
            &record(&[("fluent_signal", vec![sig]), ("chunk", s(chunk))]),
        ])
    };
    let two = cat(&[&entry(&t, &msg("metric 1")), &entry(&t, &msg("metric 2"))]);
    c.send(&signal(1, "sig-1", &two));
    c.expect(&ack("sig-1"), "fluent_signal 1 is acked");
    // A trace's record is a bin cmetrics/ctraces payload in real life; here a map will do.
    c.send(&signal(2, "sig-2", &entry(&t, &msg("trace 1"))));
    c.expect(&ack("sig-2"), "fluent_signal 2 is acked");
    c.send(&signal(0, "sig-0", &entry(&t, &msg("signal 0 is logs"))));
    c.expect(&ack("sig-0"), "fluent_signal 0 is acked");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 1, "only the logs are written: {lines:?}");
    event_with(&lines, "signal 0 is logs", &c);
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"unsupported\""),
        3,
        "3 signals",
    );
    drop(c);
    expect_errors(&server, &[], "signals are no errors");
    server.finish();
}

/// A msgpack nil on TCP is a heartbeat: no answer, the connection stays and serves requests.
#[test]
fn forward_tcp_heartbeat_nil() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    c.send(&[0xc0]);
    c.expect_silence("a nil heartbeat");
    c.send(&[0xc0, 0xc0, 0xc0]);
    c.expect_silence("three nil heartbeats");
    request_is_served(&mut c, "after heartbeats");
    c.send(&[0xc0]);
    c.expect_silence("a heartbeat after a request");
    request_is_served(&mut c, "after another heartbeat");
    drop(c);
    expect_errors(&server, &[], "heartbeats are no errors");
    expect_count(
        &server,
        "loghaul_component_received_events_total",
        None,
        2,
        "heartbeats are no events",
    );
    server.finish();
}

/// The UDP heartbeat: a datagram `00` to the TCP port's number is answered with one `00` byte,
/// to the sender's address (in_forward answers any datagram so).
#[test]
fn forward_udp_heartbeat() {
    let server = Server::start(&config(""));
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind a UDP client");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("set_read_timeout");
    for (i, payload) in [&[0x00u8][..], &[0x00], b"ping?"].iter().enumerate() {
        sock.send_to(payload, ("127.0.0.1", server.ports.udp))
            .expect("send a heartbeat");
        let mut buf = [0u8; 64];
        let (n, from) = sock.recv_from(&mut buf).unwrap_or_else(|e| {
            panic!(
                "heartbeat {i} ({}): no answer within 5s: {e}{}",
                hex(payload),
                explain(&server, payload, &[])
            )
        });
        assert_eq!(
            &buf[..n],
            &[0x00],
            "heartbeat {i}: the answer is one 00 byte"
        );
        assert_eq!(
            from.port(),
            server.ports.tcp,
            "answered from the forward port"
        );
    }
    good_client_is_served(&server, "beside UDP heartbeats");
    expect_errors(&server, &[], "heartbeats are no errors");
    server.finish();
}

/// Requests written a byte at a time (with pauses, so loghaul reads them in many pieces), and a
/// 3MiB PackedForward in 64KiB writes: the resumable splitter puts each back together.
#[test]
fn forward_requests_split_across_reads() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    c.stream.set_nodelay(true).expect("set_nodelay");
    let small = message_request(
        TAG,
        &event_time(1_700_000_000, 7),
        &msg("one byte at a time"),
        Some("bytewise"),
    );
    let gz = cat(&[
        &arr(3),
        &s(TAG),
        &str32(&gzip(&packed_entries("bytewise gzip", 3))),
        &record(&[("compressed", s("gzip")), ("chunk", s("bytewise-gz"))]),
    ]);
    for b in small.iter().chain(&gz) {
        c.send(&[*b]);
        std::thread::sleep(Duration::from_micros(300));
    }
    c.expect(
        &cat(&[&ack("bytewise"), &ack("bytewise-gz")]),
        "acks of requests sent a byte at a time",
    );
    let pad = "x".repeat(1000);
    let big_entries: Vec<u8> = (0..3000)
        .map(|i| {
            entry(
                &uint32(1_700_000_000),
                &record(&[("message", s(format!("big {i}"))), ("pad", s(&pad))]),
            )
        })
        .collect::<Vec<_>>()
        .concat();
    let big = cat(&[&arr(3), &s("big"), &bin(&big_entries), &chunk_option("big")]);
    assert!(big.len() > 3_000_000);
    for piece in big.chunks(64 * 1024) {
        c.send(piece);
        std::thread::sleep(Duration::from_millis(1));
    }
    c.expect(&ack("big"), "a 3MiB request in 64KiB writes");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 1 + 3 + 3000);
    event_with(&lines, "one byte at a time", &c);
    assert_entries(&lines, "bytewise gzip", 3, TAG, &c);
    let bigs: Vec<u64> = lines
        .iter()
        .filter(|v| v["tag"] == json!("big"))
        .map(|v| {
            assert_eq!(
                v["pad"].as_str().map(str::len),
                Some(1000),
                "{}",
                truncate_json(v, 200)
            );
            trailing_number(message(v))
        })
        .collect();
    assert_each_once(&bigs, 3000, "entries of the 3MiB request");
    drop(c);
    expect_errors(&server, &[], "requests in pieces");
    server.finish();
}

/// With `shared_key`: HELO, PING, PONG carrying the server's digest, then requests; and a
/// client that writes its first request in the same write as its PING (the bytes after the
/// PING are requests, not lost).
#[test]
fn forward_shared_key_handshake() {
    let server = Server::start(&shared_key_config());
    good_client_is_served_after_handshake(&server, "after a handshake");
    let mut c = Client::connect(&server);
    handshake_sending(
        &mut c,
        &simple_request("sent with the PING", Some("with-ping")),
    );
    c.expect(&ack("with-ping"), "a request written with the PING");
    request_is_served(&mut c, "after the request sent with the PING");
    let lines = read_lines(&server.out());
    event_with(&lines, "sent with the PING", &c);
    drop(c);
    expect_errors(&server, &[], "valid handshakes");
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

/// 64KiB of pseudo-random bytes: loghaul gives up on the stream (at the first byte that is no
/// msgpack, a request of the wrong shape, or the end of the connection mid-value), counts it,
/// writes nothing, and serves the others meanwhile.
#[test]
fn bad_forward_random_bytes() {
    let server = Server::start(&config(""));
    let garbage = pseudo_random_bytes(0xf1ae_47d5, 64 * 1024);
    let mut bad = Client::connect(&server);
    bad.send_lossy(&garbage[..32 * 1024]);
    good_client_is_served(&server, "while random bytes arrive");
    bad.send_lossy(&garbage[32 * 1024..]);
    let _ = bad.stream.shutdown(Shutdown::Write);
    bad.expect_closed_after(&[], "random bytes");
    let lines = good_client_is_served(&server, "after random bytes");
    assert_eq!(
        lines.len(),
        2,
        "nothing of the random bytes is written: {lines:?}"
    );
    // This seed's stream starts with a value that is no array: `protocol`, and the close.
    expect_errors(&server, &[("protocol", 1)], "random bytes");
    server.finish();
}

/// A top-level value that is not an array (a map, a string, an int) is no request: fluentd skips
/// it, loghaul closes that connection (no client sends one; a run of them is another protocol on
/// the wrong port) and counts it once as `protocol`.
#[test]
fn bad_forward_top_level_value_not_an_array() {
    let server = Server::start(&config(""));
    let values: [(&str, Vec<u8>); 3] = [
        ("a map", record(&[("a", vec![0x01])])),
        ("a string", s("just a string")),
        ("an integer", vec![0x2a]),
    ];
    for (i, (name, bytes)) in values.iter().enumerate() {
        let mut bad = Client::connect(&server);
        bad.send_lossy(bytes);
        bad.expect_closed_after(&[], &format!("a top-level value that is {name}"));
        expect_errors(&server, &[("protocol", i as u64 + 1)], name);
    }
    good_client_is_served(&server, "on another connection");
    server.finish();
}

/// Arrays of the wrong shape: 1 element, 5 elements, Message mode with 2, Forward with 4, and
/// entries that are not an array. Each closes its connection, counted as `protocol`; nothing of
/// the request is written (not even the Forward request's valid entry), no ack.
#[test]
fn bad_forward_array_of_the_wrong_shape() {
    let server = Server::start(&config(""));
    let t = uint32(1_700_000_000);
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        ("1 element", cat(&[&arr(1), &s(TAG)])),
        (
            "5 elements",
            cat(&[
                &arr(5),
                &s(TAG),
                &t,
                &msg("five"),
                &chunk_option("five"),
                &[0xc0],
            ]),
        ),
        ("Message with 2", cat(&[&arr(2), &s(TAG), &t])),
        (
            "Forward with 4",
            cat(&[
                &arr(4),
                &s(TAG),
                &cat(&[&arr(1), &entry(&t, &msg("forward of four"))]),
                &chunk_option("four"),
                &[0xc0],
            ]),
        ),
        (
            "option not a map",
            cat(&[
                &arr(4),
                &s(TAG),
                &t,
                &msg("option is a string"),
                &s("chunk"),
            ]),
        ),
    ];
    for (i, (name, bytes)) in shapes.iter().enumerate() {
        let mut bad = Client::connect(&server);
        bad.send_lossy(bytes);
        bad.expect_closed_after(&[], &format!("wrong shape: {name}"));
        expect_errors(&server, &[("protocol", i as u64 + 1)], name);
    }
    let lines = good_client_is_served(&server, "after wrong shapes");
    assert_eq!(
        lines.len(),
        1,
        "nothing of the wrong shapes is written: {lines:?}"
    );
    server.finish();
}

/// A tag that is not a string (an int, a map, nil): fluentd drops the events and still acks.
/// Nothing is written for them, the ack comes, and each dropped event is counted as a `parse`
/// error and discarded `invalid`. The connection goes on.
#[test]
fn bad_forward_tag_not_a_string() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let t = uint32(1_700_000_000);
    c.send(&cat(&[
        &arr(4),
        &[0x2a],
        &t,
        &msg("int tag"),
        &chunk_option("int-tag"),
    ]));
    c.expect(&ack("int-tag"), "Message with an int tag is still acked");
    c.send(&cat(&[
        &arr(3),
        &record(&[("not", s("a tag"))]),
        &cat(&[
            &arr(2),
            &entry(&t, &msg("map tag 1")),
            &entry(&t, &msg("map tag 2")),
        ]),
        &chunk_option("map-tag"),
    ]));
    c.expect(&ack("map-tag"), "Forward with a map tag is still acked");
    c.send(&cat(&[
        &arr(3),
        &[0xc0],
        &bin(&entry(&t, &msg("nil tag"))),
        &chunk_option("nil-tag"),
    ]));
    c.expect(
        &ack("nil-tag"),
        "PackedForward with a nil tag is still acked",
    );
    // The sink writes in order: once this one is in, the dropped ones would be too.
    let lines = request_is_served(&mut c, "after tags that are no string");
    assert_eq!(
        lines.len(),
        1,
        "no event of a non-string tag is written: {lines:?}"
    );
    expect_errors(&server, &[("parse", 4)], "four events with a bad tag");
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"invalid\""),
        4,
        "bad tags",
    );
    good_client_is_served(&server, "on another connection");
    drop(c);
    server.finish();
}

/// A time that is a float (float64 and float32): fluentd refuses it ("time must be a
/// Fluent::EventTime (or Integer)"), drops the event and acks. In a Forward request only that
/// entry is dropped.
#[test]
fn bad_forward_time_is_a_float() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let f64_time = cat(&[&[0xcb], &1_700_000_000.5f64.to_be_bytes()]);
    let f32_time = cat(&[&[0xca], &1.7e9f32.to_be_bytes()]);
    c.send(&message_request(
        TAG,
        &f64_time,
        &msg("float64 time"),
        Some("f64"),
    ));
    c.expect(&ack("f64"), "Message with a float64 time is still acked");
    c.send(&message_request(
        TAG,
        &f32_time,
        &msg("float32 time"),
        Some("f32"),
    ));
    c.expect(&ack("f32"), "Message with a float32 time is still acked");
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &cat(&[
            &arr(3),
            &entry(&uint32(1_700_000_000), &msg("good before the float")),
            &entry(&f64_time, &msg("float in forward")),
            &entry(&uint32(1_700_000_001), &msg("good after the float")),
        ]),
        &chunk_option("mixed"),
    ]));
    c.expect(&ack("mixed"), "Forward with one float time is acked");
    let lines = read_lines(&server.out());
    assert_eq!(lines.len(), 2, "only the two good entries: {lines:?}");
    event_with(&lines, "good before the float", &c);
    event_with(&lines, "good after the float", &c);
    expect_errors(&server, &[("parse", 3)], "three float times");
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"invalid\""),
        3,
        "float times",
    );
    good_client_is_served(&server, "after float times");
    request_is_served(&mut c, "on the same connection after float times");
    drop(c);
    server.finish();
}

/// A PackedForward blob (a complete `bin`) whose entries are truncated: the request is broken,
/// the connection closes (`protocol`), and nothing of it is written, not even its first,
/// complete entry; no ack.
#[test]
fn bad_forward_packed_entries_truncated() {
    let server = Server::start(&config(""));
    let whole = packed_entries("truncated", 2);
    let blob = &whole[..whole.len() - 3];
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(blob),
        &record(&[("size", vec![0x02]), ("chunk", s("trunc"))]),
    ]));
    bad.expect_closed_after(&[], "truncated entries: no ack, closed");
    expect_errors(&server, &[("protocol", 1)], "truncated entries");
    let lines = good_client_is_served(&server, "after truncated entries");
    assert_eq!(lines.len(), 1, "nothing of the broken request: {lines:?}");
    server.finish();
}

/// `compressed: "gzip"` on bytes that are no gzip: `decompression`, the connection closes,
/// nothing written, no ack.
#[test]
fn bad_forward_gzip_blob_not_gzip() {
    let server = Server::start(&config(""));
    let mut bad = Client::connect(&server);
    let plain = packed_entries("not gzip", 2);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(&plain),
        &record(&[("compressed", s("gzip")), ("chunk", s("nogz"))]),
    ]));
    bad.expect_closed_after(&[], "a blob that is no gzip");
    expect_errors(&server, &[("decompression", 1)], "no gzip");
    // A gzip member cut short is broken too.
    let mut bad = Client::connect(&server);
    let gz = gzip(&packed_entries("cut gzip", 20));
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(&gz[..gz.len() - 12]),
        &record(&[("compressed", s("gzip")), ("chunk", s("cutgz"))]),
    ]));
    bad.expect_closed_after(&[], "a gzip stream cut short");
    expect_errors(&server, &[("decompression", 2)], "gzip cut short");
    let lines = good_client_is_served(&server, "after broken gzip");
    assert_eq!(lines.len(), 1, "nothing of the broken gzip: {lines:?}");
    server.finish();
}

/// A gzip bomb: about 16KB that inflate to 16MiB of entries, with `max_decompressed_size: 1MiB`
/// and `limits.memory: 32MiB`. Refused as `oversized` once 1MiB is inflated, without inflating
/// the rest: the connection closed, no ack. The entries before the bound decode to events (a
/// 3-byte entry is a 96-byte event) in batches charged to the memory budget, which may be
/// written (never acknowledged), so peak RSS grows by the budget at most, not by what the bomb
/// would inflate to. The zstd bomb of nils after it is refused as mostly invalid entries.
#[test]
fn bad_forward_gzip_bomb() {
    let server = Server::start(&format!(
        "limits: {{ memory: 32MiB }}\n{}",
        config(", max_decompressed_size: 1MiB")
    ));
    good_client_is_served(&server, "before the bomb");
    let base_kib = server.peak_rss_kib();
    // [0, {}] entries: valid msgpack all the way, so only the size can refuse it.
    let inflated: Vec<u8> = [0x92, 0x00, 0x80].repeat((16 << 20) / 3);
    let bomb = gzip(&inflated);
    assert!(bomb.len() < 64 * 1024, "the bomb is {} bytes", bomb.len());
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s("bomb"),
        &bin(&bomb),
        &record(&[("compressed", s("gzip")), ("chunk", s("bomb"))]),
    ]));
    bad.expect_closed_after(&[], "a gzip bomb");
    expect_errors(&server, &[("oversized", 1)], "a gzip bomb");
    let lines = good_client_is_served(&server, "after the bomb");
    let of_bomb = lines.iter().filter(|v| v["tag"] == json!("bomb")).count();
    assert!(
        of_bomb <= (1 << 20) / 3,
        "only entries within the first 1MiB may be written, not {of_bomb}"
    );
    assert_eq!(lines.len() - of_bomb, 2, "the good clients' events");
    let grown_kib = server.peak_rss_kib().saturating_sub(base_kib);
    assert!(
        grown_kib < 48 * 1024,
        "peak RSS grew by {grown_kib} KiB for a bomb capped at 1MiB in a 32MiB budget{}",
        bad.explain()
    );
    // Entries that inflate to just under the limit are accepted.
    let mut c = Client::connect(&server);
    let fits = entry(
        &[0x01],
        &record(&[("message", s("f")), ("pad", s("p".repeat(1000)))]),
    );
    let n = (1 << 20) / fits.len();
    c.send(&cat(&[
        &arr(3),
        &s("fits"),
        &bin(&gzip(&fits.repeat(n))),
        &record(&[("compressed", s("gzip")), ("chunk", s("fits"))]),
    ]));
    c.expect(&ack("fits"), "entries inflating to just under 1MiB");
    let lines = read_lines(&server.out());
    assert_eq!(
        lines.iter().filter(|v| v["tag"] == json!("fits")).count(),
        n,
        "all {n} entries under the limit are written"
    );
    server.finish();
}

/// The zstd bomb: 40 RLE blocks of 128KiB (5MiB) of nils in 166 bytes: every entry is invalid,
/// so the request is refused as mostly invalid after the first thousand (`protocol`, and the
/// thousand counted as `parse`), closed, nothing written. 16MiB of valid tiny entries
/// compressed with zstd, with `max_decompressed_size: 1MiB`: `oversized`. A zstd blob that is
/// no zstd: `decompression`.
#[test]
fn bad_forward_zstd_bomb() {
    let server = Server::start(&config(", max_decompressed_size: 1MiB"));
    let bomb = zstd_rle_bomb(0xc0, 40);
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(&bomb),
        &record(&[("compressed", s("zstd")), ("chunk", s("zbomb"))]),
    ]));
    bad.expect_closed_after(&[], "a zstd bomb of nils");
    expect_errors(
        &server,
        &[("protocol", 1), ("parse", 1000)],
        "a zstd bomb of nils",
    );
    let inflated: Vec<u8> = [0x92, 0x00, 0x80].repeat((16 << 20) / 3);
    let bomb = zstd::bulk::compress(&inflated, 3).unwrap();
    assert!(bomb.len() < 64 * 1024, "the bomb is {} bytes", bomb.len());
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s("zbomb"),
        &bin(&bomb),
        &record(&[("compressed", s("zstd")), ("chunk", s("zbomb2"))]),
    ]));
    bad.expect_closed_after(&[], "a zstd bomb of valid entries");
    expect_errors(
        &server,
        &[("protocol", 1), ("parse", 1000), ("oversized", 1)],
        "a zstd bomb of valid entries",
    );
    // A zstd blob that is no zstd.
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(b"\x28\xb5\x2f\xfdnot really zstd"),
        &record(&[("compressed", s("zstd")), ("chunk", s("nozstd"))]),
    ]));
    bad.expect_closed_after(&[], "a blob that is no zstd");
    expect_errors(
        &server,
        &[
            ("protocol", 1),
            ("parse", 1000),
            ("oversized", 1),
            ("decompression", 1),
        ],
        "a broken zstd frame",
    );
    let lines = good_client_is_served(&server, "after the zstd bombs");
    assert_eq!(
        lines.iter().filter(|v| v["tag"] == json!(TAG)).count(),
        1,
        "nothing of the bomb of nils"
    );
    server.finish();
}

/// `compressed: "snappy"`: a compression loghaul (and fluentd) does not know: `decompression`,
/// closed, nothing written, no ack.
#[test]
fn bad_forward_compressed_snappy() {
    let server = Server::start(&config(""));
    let mut bad = Client::connect(&server);
    bad.send_lossy(&cat(&[
        &arr(3),
        &s(TAG),
        &bin(&packed_entries("snappy", 1)),
        &record(&[("compressed", s("snappy")), ("chunk", s("snappy"))]),
    ]));
    bad.expect_closed_after(&[], "compressed: snappy");
    expect_errors(&server, &[("decompression", 1)], "snappy");
    let lines = good_client_is_served(&server, "after snappy");
    assert_eq!(lines.len(), 1, "nothing of the snappy request");
    server.finish();
}

/// A PackedForward request of exactly `total` bytes, acked as `chunk`, with one entry.
fn request_of_size(total: usize, chunk: &str) -> Vec<u8> {
    let build = |pad: usize| {
        let e = entry(
            &uint32(1_700_000_000),
            &record(&[("message", s(chunk)), ("pad", s("p".repeat(pad)))]),
        );
        cat(&[&arr(3), &s(TAG), &bin(&e), &chunk_option(chunk)])
    };
    let fixed = build(0).len();
    for pad in (total.saturating_sub(fixed + 16)..=total.saturating_sub(fixed)).rev() {
        let r = build(pad);
        if r.len() == total {
            return r;
        }
    }
    panic!("no request of exactly {total} bytes");
}

/// `max_request_size` (64KiB here) bounds what is held whole: a request of exactly 64KiB with
/// one entry is accepted; one whose one entry is over it closes the connection as `oversized`
/// (nothing of it written), and so does a Message-mode request over it. A Forward
/// array of many small entries, 500KiB in all, is no value held whole: it is read entry by entry,
/// written and acknowledged.
#[test]
fn bad_forward_request_over_max_request_size() {
    let server = Server::start(&config(", max_request_size: 64KiB"));
    let mut c = Client::connect(&server);
    c.send(&request_of_size(64 * 1024, "exactly-64KiB"));
    c.expect(
        &ack("exactly-64KiB"),
        "a request of exactly max_request_size",
    );
    drop(c);

    // The request's head and option take less than 100 bytes: its entry is over 64KiB.
    let mut bad = Client::connect(&server);
    bad.send_lossy(&request_of_size(64 * 1024 + 100, "one-byte-over"));
    bad.expect_closed_after(&[], "an entry over max_request_size");
    expect_errors(&server, &[("oversized", 1)], "an entry over");

    let mut bad = Client::connect(&server);
    bad.send_lossy(&message_request(
        TAG,
        &uint32(now_secs()),
        &record(&[
            ("message", s("huge message")),
            ("pad", s("p".repeat(70_000))),
        ]),
        Some("huge-message"),
    ));
    bad.expect_closed_after(&[], "a Message-mode request over max_request_size");
    expect_errors(&server, &[("oversized", 2)], "a huge Message-mode request");

    let mut c = Client::connect(&server);
    let e = entry(&uint32(1_700_000_000), &msg("many small entries"));
    let count = (500 * 1024) / e.len();
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &[0xdd],
        &(count as u32).to_be_bytes(),
    ]));
    for _ in 0..count / 50 {
        c.send(&e.repeat(50));
    }
    c.send(&e.repeat(count % 50));
    c.send(&chunk_option("many"));
    c.expect(
        &ack("many"),
        "a Forward array past max_request_size, read entry by entry",
    );

    let lines = good_client_is_served(&server, "after oversized requests");
    assert_eq!(
        lines.len(),
        2 + count,
        "the 64KiB request, the long Forward array and the good client"
    );
    assert!(
        lines.iter().all(
            |v| v["message"] != json!("one-byte-over") && v["message"] != json!("huge message")
        ),
        "nothing of an oversized request is written"
    );
    server.finish();
}

/// With `shared_key`, a PING of 5 elements: `["PONG", false, "invalid ping message", "", ""]`,
/// then the connection is closed; counted as `auth`.
#[test]
fn bad_forward_ping_with_5_elements() {
    let server = Server::start(&shared_key_config());
    let mut bad = Client::connect(&server);
    let nonce = read_helo(&mut bad);
    let digest = sha512_hex(&[b"salt", b"host", &nonce, KEY.as_bytes()]);
    bad.send(&cat(&[
        &arr(5),
        &s("PING"),
        &s("host"),
        &s("salt"),
        &s(&digest),
        &s(""),
    ]));
    bad.expect_closed_after(&pong_refused("invalid ping message"), "a 5-element PING");
    expect_errors(&server, &[("auth", 1)], "a 5-element PING");
    good_client_is_served_after_handshake(&server, "after a 5-element PING");
    server.finish();
}

/// With `shared_key`, a PING whose digest is not that of the key: `["PONG", false,
/// "shared_key mismatch", "", ""]`, closed, `auth`. Requests sent after it are not read.
#[test]
fn bad_forward_ping_wrong_digest() {
    let server = Server::start(&shared_key_config());
    let mut bad = Client::connect(&server);
    let nonce = read_helo(&mut bad);
    let wrong = sha512_hex(&[b"salt", b"host", &nonce, b"not-the-key"]);
    bad.send(&ping("host", "salt", &wrong));
    bad.send_lossy(&simple_request("after a wrong PING", Some("sneaky")));
    bad.expect_closed_after(&pong_refused("shared_key mismatch"), "a wrong digest");
    expect_errors(&server, &[("auth", 1)], "a wrong digest");
    // Requests without a handshake at all are no PING either.
    let mut bad = Client::connect(&server);
    read_helo(&mut bad);
    bad.send_lossy(&simple_request("no handshake", Some("no-handshake")));
    bad.expect_closed_after(
        &pong_refused("invalid ping message"),
        "a request for a PING",
    );
    expect_errors(&server, &[("auth", 2)], "a request instead of PING");
    let lines = good_client_is_served_after_handshake(&server, "after wrong PINGs");
    assert_eq!(
        lines.len(),
        1,
        "nothing of unauthenticated clients: {lines:?}"
    );
    server.finish();
}

/// With `shared_key`, a PING that was valid once, replayed on a new connection: each HELO
/// carries a fresh nonce and the digest covers it, so the copy is refused (`shared_key
/// mismatch`), closed and counted; and a PING cut off halfway, then the connection closed, or
/// left hanging: refused, counted, nothing read.
#[test]
fn bad_forward_replayed_or_truncated_ping() {
    let server = Server::start(&shared_key_config());
    let (host, salt) = ("replayer", "0f1e2d3c4b5a69788796a5b4c3d2e1f0");
    let mut first = Client::connect(&server);
    let nonce = read_helo(&mut first);
    let digest = sha512_hex(&[salt.as_bytes(), host.as_bytes(), &nonce, KEY.as_bytes()]);
    let recorded = ping(host, salt, &digest);
    first.send(&recorded);
    let pong = first.read_value("PONG");
    assert!(
        matches!(&pong, Mp::Arr(v) if v.get(1) == Some(&Mp::Bool(true))),
        "the original PING is accepted: {pong:?}"
    );
    drop(first);

    let mut replay = Client::connect(&server);
    let fresh = read_helo(&mut replay);
    assert_ne!(fresh, nonce, "every HELO has a nonce of its own");
    replay.send(&recorded);
    replay.send_lossy(&simple_request("after a replayed PING", Some("replayed")));
    replay.expect_closed_after(&pong_refused("shared_key mismatch"), "a replayed PING");
    expect_errors(&server, &[("auth", 1)], "a replayed PING");

    let mut half = Client::connect(&server);
    read_helo(&mut half);
    half.send(&recorded[..recorded.len() / 2]);
    drop(half);
    expect_errors(&server, &[("auth", 2)], "half a PING, then gone");
    let lines = good_client_is_served_after_handshake(&server, "after a replayed PING");
    assert_eq!(lines.len(), 1, "nothing of the replaying client: {lines:?}");
    server.finish();
}

/// A client that sends a whole request and half of the next, then goes away: the whole one is
/// written and acked before the close, the half is dropped and counted (`protocol`); meanwhile
/// other clients are served.
#[test]
fn bad_forward_half_request_then_gone() {
    let server = Server::start(&config(""));
    let mut bad = Client::connect(&server);
    let whole = simple_request("whole before half", Some("whole"));
    let next = simple_request("the half one", Some("half"));
    bad.send(&whole);
    bad.expect(&ack("whole"), "the whole request's ack");
    bad.send(&next[..next.len() / 2]);
    good_client_is_served(&server, "while half a request waits");
    bad.expect_silence("half a request: nothing to answer yet");
    let _ = bad.stream.shutdown(Shutdown::Write);
    bad.expect_closed_after(&[], "the client went away mid-request");
    expect_errors(&server, &[("protocol", 1)], "half a request");

    // Whole and half in one write, then FIN at once: the whole one is still acked.
    let mut bad = Client::connect(&server);
    let whole = simple_request("whole with half, one write", Some("whole-2"));
    bad.send(&cat(&[&whole, &next[..next.len() - 1]]));
    let _ = bad.stream.shutdown(Shutdown::Write);
    bad.expect_closed_after(&ack("whole-2"), "ack owed before a half request");
    expect_errors(&server, &[("protocol", 2)], "two half requests");

    let lines = good_client_is_served(&server, "after half requests");
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(!lines.iter().any(|v| v["message"] == json!("the half one")));
    server.finish();
}

/// 1,000 connections that each send one heartbeat `nil` and stay idle: no answer on any, no
/// error; a good client is still served; all of them close cleanly.
#[test]
fn bad_forward_1000_idle_heartbeat_connections() {
    const N: usize = 1000;
    let (soft, hard) = raise_nofile_limit();
    assert!(
        soft >= 2 * N as u64 + 200,
        "this test opens {N} sockets and needs RLIMIT_NOFILE >= {} (soft {soft}, hard {hard}); run the tests under `ulimit -n 65536` as scripts/test.sh does",
        2 * N + 200
    );
    let server = Server::start(&config(""));
    let mut conns: Vec<TcpStream> = (0..N).map(|_| connect(server.ports.tcp)).collect();
    for s in &mut conns {
        s.write_all(&[0xc0]).expect("write a heartbeat");
    }
    server.wait_metric_eq("loghaul_open_connections", SRC, None, N as u64);
    good_client_is_served(&server, "beside 1000 idle connections");
    std::thread::sleep(Duration::from_millis(200));
    for (i, s) in conns.iter_mut().enumerate().step_by(50) {
        s.set_nonblocking(true).expect("set_nonblocking");
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Err(e) if e.kind() == IoErrorKind::WouldBlock => {}
            other => panic!(
                "idle connection {i}: expected no answer and an open connection, read {other:?}{}",
                explain(&server, &[0xc0], &[])
            ),
        }
    }
    expect_errors(&server, &[], "heartbeats on idle connections");
    drop(conns);
    server.wait_metric_eq("loghaul_open_connections", SRC, None, 0);
    good_client_is_served(&server, "after 1000 idle connections");
    expect_errors(&server, &[], "closing idle connections");
    server.finish();
}

/// With `idle_timeout`, clients that connect and say nothing, or send half a request and stall,
/// are cut off: each is counted as `errors_total{kind="timeout"}` (the half requests as
/// `protocol` too: a request the connection ended in the middle of), and a good client is
/// served meanwhile.
#[test]
fn bad_forward_silent_and_stalled_clients_cut_off_by_idle_timeout() {
    let server = Server::start(&config(", idle_timeout: 500ms"));
    let port = server.ports.tcp;
    let half = simple_request("never finished", Some("c2xvdw=="));
    let half = half[..half.len() / 2].to_vec();
    let every = Duration::from_millis(20);
    let slow: Vec<_> = [Vec::new(), Vec::new(), Vec::new(), half.clone(), half]
        .into_iter()
        .map(|bytes| {
            std::thread::spawn(move || slow_client(port, &bytes, every, Duration::from_secs(10)))
        })
        .collect();
    good_client_is_served(&server, "beside silent clients");
    for closed in slow {
        assert!(closed.join().unwrap(), "a silent client was not cut off");
    }
    expect_errors(
        &server,
        &[("timeout", 5), ("protocol", 2)],
        "silent and stalled clients",
    );
    good_client_is_served(&server, "after silent clients");
    server.finish();
}

/// A good request with a chunk and, right behind it in the same write, a broken one. The good
/// request's events are written, so its ack is owed: loghaul sends it, then closes the
/// connection (docs/specs/forward.md: a broken request closes the connection "after the
/// requests before it were handled"). Without the ack the client would resend events already
/// written: duplicates.
#[test]
fn bad_forward_broken_request_after_a_good_one_still_acks_the_good_one() {
    let server = Server::start(&config(""));
    for (name, broken) in [
        ("a wrong shape", cat(&[&arr(1), &s(TAG)])),
        ("the byte c1", vec![0xc1]),
    ] {
        let text = format!("good before {name}");
        let mut c = Client::connect(&server);
        c.send_lossy(&cat(&[&simple_request(&text, Some("owed")), &broken]));
        // Its event is written...
        wait_for_line(&server.out(), &text, |v| v["message"] == json!(text));
        // ...so its ack is owed.
        c.expect_closed_after(
            &ack("owed"),
            &format!("the ack owed for a written request followed by {name}"),
        );
    }
    expect_errors(&server, &[("protocol", 2)], "two broken streams");
    good_client_is_served(&server, "after broken streams");
    server.finish();
}

/// Entries that are well-formed msgpack but no valid event: a record that is not a map, a key
/// that is not a string, a record nested 64 maps deep, an entry of 3 elements, an entry that is
/// not an array. Each is dropped and counted (`parse`, discarded `invalid`); the rest of the
/// request is written and acked. A record nested 63 maps deep is fine.
#[test]
fn bad_forward_invalid_entries() {
    let server = Server::start(&config(""));
    let mut c = Client::connect(&server);
    let t = uint32(1_700_000_000);
    let nested = |depth: usize| {
        let mut inner = s("bottom");
        for _ in 0..depth {
            inner = record(&[("k", inner)]);
        }
        record(&[("message", s(format!("deep {depth}"))), ("k", inner)])
    };
    let entries = [
        entry(&t, &msg("valid 1")),
        entry(&t, &s("a string record")),
        entry(&t, &cat(&[&map(1), &[0x01], &s("int key")])),
        entry(&t, &nested(64)),
        entry(&t, &nested(63)),
        cat(&[&arr(3), &t, &msg("three elements"), &[0xc0]]),
        s("not an entry"),
        entry(&t, &msg("valid 2")),
    ];
    c.send(&cat(&[
        &arr(3),
        &s(TAG),
        &cat(&[&arr(entries.len()), &entries.concat()]),
        &chunk_option("invalid-entries"),
    ]));
    c.expect(
        &ack("invalid-entries"),
        "a Forward request with invalid entries",
    );
    c.send(&cat(&[
        &arr(4),
        &s(TAG),
        &t,
        &arr(0),
        &chunk_option("array-record"),
    ]));
    c.expect(&ack("array-record"), "a Message whose record is an array");
    let lines = request_is_served(&mut c, "after invalid entries");
    assert_eq!(
        lines.len(),
        4,
        "valid 1, deep 63, valid 2, the good client: {lines:?}"
    );
    event_with(&lines, "valid 1", &c);
    event_with(&lines, "valid 2", &c);
    let mut v = &event_with(&lines, "deep 63", &c)["k"];
    for _ in 1..63 {
        v = &v["k"];
    }
    assert_eq!(
        v["k"],
        json!("bottom"),
        "the 63-deep record is written whole"
    );
    expect_errors(&server, &[("parse", 6)], "six invalid entries");
    expect_count(
        &server,
        DISCARDED,
        Some("reason=\"invalid\""),
        6,
        "invalid entries",
    );
    good_client_is_served(&server, "on another connection");
    drop(c);
    server.finish();
}

/// A connection that speaks JSON (fluentd's in_forward switches to JSON when a connection's
/// first byte is `[` or `{`; that is an extension, not the protocol, and loghaul does not
/// support it). docs/specs/forward.md says such connections "are read as msgpack and closed as
/// malformed": the connection is closed and counted as `protocol`, nothing is written or
/// answered. (Every ASCII byte is a positive fixint, a top-level value that is no request.)
#[test]
fn bad_forward_json_connection() {
    let server = Server::start(&config(""));
    let cases: [(&str, &[u8]); 2] = [
        (
            "JSON array (Message mode)",
            br#"["wire.json",1700000000,{"message":"json"},{"chunk":"json-chunk"}]"#,
        ),
        ("JSON object", br#"{"message":"a JSON object"}"#),
    ];
    for (i, (name, text)) in cases.iter().enumerate() {
        let mut bad = Client::connect(&server);
        bad.send_lossy(text);
        let (got, why) = bad.read_up_to(1, Duration::from_secs(3));
        let closed = why
            .as_deref()
            .is_some_and(|w| w.starts_with("the server closed") || w.starts_with("read failed"));
        assert!(
            got.is_empty() && closed,
            "a connection starting with a {name} must be closed as malformed \
             (docs/specs/forward.md); loghaul sent {} bytes and, after 3s: {}{}",
            got.len(),
            why.unwrap_or_else(|| "-".into()),
            bad.explain()
        );
        let protocol = parse_metric(
            &server.metrics_text(),
            ERRORS,
            SRC,
            Some("kind=\"protocol\""),
        );
        assert!(
            protocol.unwrap_or(0) > i as u64,
            "the {name} connection is not counted as a protocol error{}",
            bad.explain()
        );
    }
    let lines = good_client_is_served(&server, "after JSON");
    assert_eq!(lines.len(), 1, "nothing of the JSON: {lines:?}");
    server.finish();
}
