//! The bare loop: loghaul's own codec with no pipeline around it, the yardstick loghaul's pipeline
//! is measured against (`bench bare`, hidden; the `bare` subject of `bench run`).
//!
//! One OS thread per connection reads up to 128KiB, frames, decodes and JSON-encodes with
//! `loghaul-codec` exactly as loghaul's syslog source and file sink do (same framer, decoder
//! options, arena and encoder), and appends the result with one `write` per read to the one output
//! file, under a lock so that writes of different connections never interleave. There are no
//! queues, no batching across connections, no metrics, no acknowledgements and no flow control
//! beyond TCP's: what is left of loghaul's cost when the pipeline is taken away. For `basic` it
//! decodes and counts, publishing the count to a file (as the EventMachine counter does) instead
//! of writing lines.
//!
//! For `forward` it does what loghaul's `fluent` source and file sink do instead: the forward
//! `Splitter` finds the complete requests of each read, the forward `Decoder` appends their events
//! to one batch per read (cut at 8MiB of arena, as the source cuts), and the JSON encoder writes
//! them. The one protocol duty it keeps is the ack: a request with a `chunk` is answered once its
//! events are written (a client waiting for acks would stall otherwise), in request order. A
//! stream that breaks the protocol ends its connection, as in loghaul.
//!
//! For `tail` it reads a file instead of connections ([`tail`]): one thread reads the file in
//! 256KiB chunks (the `file` source's `max_read_size`), cuts lines with memchr as the source cuts
//! them (a `\r` before the newline dropped, lines over `max_line_size` cut and flagged, lines that
//! are not UTF-8 flagged), builds one batch per read with the `file` and `host` fields the source
//! adds, JSON-encodes it and appends it with one `write`. No checkpoints, acknowledgements,
//! rotation or partial-line timeout: at the end of the file it naps and looks again.
//!
//! It is a measuring instrument, not a server: a write error ends the process with a message, and
//! it runs until it is killed.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::{Bytes, BytesMut};
use loghaul_codec::forward::{self, Limits, Splitter, write_ack};
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Format, Frame, Framer, FramingMode, FramingStats,
    encode_json,
};
use loghaul_core::{Event, EventBatch, Field, Flags, OptSpan, Span, Timestamp, Value};

use crate::scenarios::Scenario;
use crate::subjects::{Input, SubjectKind};

/// Bytes asked of each `read`, as loghaul's TCP source asks (`READ_SIZE` in its `tcp.rs`).
const READ_SIZE: usize = 128 * 1024;
/// How often the `basic` count is published.
const PUBLISH_EVERY: Duration = Duration::from_millis(10);
/// The `fluent` source's defaults (`max_request_size`, `max_decompressed_size` in its config) and
/// its batch cut (`BATCH_BYTES` in its `connection.rs`).
const MAX_REQUEST: usize = 16 << 20;
const MAX_DECOMPRESSED: usize = 256 << 20;
const BATCH_BYTES: usize = 8 << 20;
/// The `file` source's defaults: bytes read from a file per turn (`max_read_size`) and the
/// longest event (`max_line_size`).
const TAIL_READ: usize = 256 << 10;
const MAX_LINE: usize = 100 * 1024;
/// The longest nap at the end of the tailed file, as the source's when nothing was read.
const TAIL_IDLE_MAX: Duration = Duration::from_millis(50);

/// The wire of an input as loghaul's bench config sets it (see `subjects::loghaul`).
#[derive(Clone, Copy, Debug)]
enum Wire {
    Syslog(Format, FramingMode),
    Forward,
}

/// The wire the bare loop reads in `scenario`, if it runs it.
fn wire(scenario: &dyn Scenario) -> Result<Wire> {
    if let Some(why) = scenario.why_not(SubjectKind::Bare) {
        bail!("{why}");
    }
    Ok(match scenario.input() {
        Some(Input::CountedLines | Input::RawLines) => {
            Wire::Syslog(Format::Raw, FramingMode::Newline)
        }
        Some(Input::Rfc3164) => Wire::Syslog(Format::Rfc3164, FramingMode::Newline),
        Some(Input::Rfc5424) => Wire::Syslog(Format::Rfc5424, FramingMode::OctetCounting),
        Some(Input::Forward) => Wire::Forward,
        // The bare loop has no transforms (no scenario reading key=value lists it).
        Some(Input::KeyValue) => bail!("the bare loop has no transforms"),
        // Nor an HTTP server (no scenario reading OTLP lists it).
        Some(Input::Otlp) => bail!("the bare loop reads no OTLP"),
        None => bail!("`{}` reads no connections", scenario.name()),
    })
}

/// Where a connection's events go.
enum Sink {
    /// JSON lines appended to the shared output file.
    File(Arc<Mutex<File>>),
    /// Only counted (`basic`).
    Count(Arc<AtomicU64>),
}

/// Serves `listener` until the process is killed: JSON lines into `out`, or for `basic` the event
/// count published into `out` every 10ms.
///
/// # Errors
/// The output cannot be created or a connection cannot be accepted.
pub fn serve(listener: &TcpListener, scenario: &dyn Scenario, out: &Path) -> Result<()> {
    let wire = wire(scenario)?;
    let count = Arc::new(AtomicU64::new(0));
    let file = if scenario.input() == Some(Input::CountedLines) {
        let (count, out) = (Arc::clone(&count), out.to_path_buf());
        std::thread::spawn(move || publish_forever(&count, &out));
        None
    } else {
        let f = File::create(out).with_context(|| format!("creating {}", out.display()))?;
        Some(Arc::new(Mutex::new(f)))
    };
    loop {
        let (stream, peer) = listener.accept().context("accepting a connection")?;
        let sink = match &file {
            Some(f) => Sink::File(Arc::clone(f)),
            None => Sink::Count(Arc::clone(&count)),
        };
        std::thread::spawn(move || {
            let served = match (wire, sink) {
                (Wire::Syslog(format, mode), sink) => connection(stream, peer, format, mode, sink),
                (Wire::Forward, Sink::File(file)) => forward_connection(stream, peer, &file),
                (Wire::Forward, Sink::Count(_)) => Ok(()),
            };
            if let Err(e) = served {
                // A lost write is lost data: stop loudly rather than measure a broken run.
                eprintln!("bare: {e:#}");
                std::process::exit(1);
            }
        });
    }
}

/// Writes the count to `out` every [`PUBLISH_EVERY`] (by rename, so a reader never sees half a
/// number).
fn publish_forever(count: &AtomicU64, out: &Path) {
    let tmp = out.with_extension("tmp");
    loop {
        std::thread::sleep(PUBLISH_EVERY);
        let n = count.load(Ordering::Relaxed).to_string();
        if std::fs::write(&tmp, n).is_ok() {
            let _ = std::fs::rename(&tmp, out);
        }
    }
}

/// One connection's codec state and output.
struct Connection {
    peer: SocketAddr,
    framer: Framer,
    decoder: Decoder,
    source: Arc<str>,
    frames: Vec<Frame>,
    fstats: FramingStats,
    dstats: DecodeStats,
    json: Vec<u8>,
    sink: Sink,
}

/// Reads one connection to its end.
fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    format: Format,
    mode: FramingMode,
    sink: Sink,
) -> Result<()> {
    let mut c = Connection {
        peer,
        framer: Framer::new(mode, loghaul_codec::framing::DEFAULT_MAX_LENGTH),
        decoder: Decoder::new(DecodeOptions {
            format,
            ..DecodeOptions::default()
        }),
        source: Arc::from("in"),
        frames: Vec::new(),
        fstats: FramingStats::default(),
        dstats: DecodeStats::default(),
        json: Vec::with_capacity(4 * READ_SIZE),
        sink,
    };
    let mut read = vec![0u8; READ_SIZE];
    let mut pending = BytesMut::with_capacity(2 * READ_SIZE);
    loop {
        let n = match stream.read(&mut read) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A reset ends the connection as it ends loghaul's.
            Err(_) => break,
        };
        // One copy of what was just read (still in cache): std has no read into spare capacity.
        pending.extend_from_slice(&read[..n]);
        let used = c.framer.decode(&pending, &mut c.frames, &mut c.fstats);
        c.emit(&mut pending, used)?;
    }
    let used = c.framer.finish(&pending, &mut c.frames, &mut c.fstats);
    c.emit(&mut pending, used)
}

impl Connection {
    /// Decodes the framed prefix `used` of `pending` as one batch and writes (or counts) it.
    fn emit(&mut self, pending: &mut BytesMut, used: usize) -> Result<()> {
        let arena = pending.split_to(used.min(pending.len())).freeze();
        if self.frames.is_empty() {
            return Ok(());
        }
        let mut batch = EventBatch::new(arena, Arc::clone(&self.source), "syslog");
        batch.events.reserve(self.frames.len());
        self.decoder.decode_batch(
            &mut batch,
            &self.frames,
            Timestamp::now(),
            Some(self.peer.ip()),
            &mut self.dstats,
        );
        self.frames.clear();
        match &mut self.sink {
            Sink::Count(count) => {
                count.fetch_add(batch.events.len() as u64, Ordering::Relaxed);
            }
            Sink::File(file) => {
                self.json.clear();
                for e in &batch.events {
                    encode_json(&batch, e, &mut self.json);
                }
                // A poisoned lock only means another connection's thread died mid-write, and
                // that ends the process anyway.
                let mut f = file
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                f.write_all(&self.json).context("writing the output")?;
            }
        }
        Ok(())
    }
}

/// Reads one forward-protocol connection to its end (or to a request that breaks the protocol),
/// appending its events to `file` as JSON lines and answering its chunks once they are written.
fn forward_connection(mut stream: TcpStream, peer: SocketAddr, file: &Mutex<File>) -> Result<()> {
    let source: Arc<str> = Arc::from("in");
    let mut splitter = Splitter::new(MAX_REQUEST);
    let mut decoder = forward::Decoder::new(Limits {
        max_decompressed_size: MAX_DECOMPRESSED,
    });
    let mut read = vec![0u8; READ_SIZE];
    let mut pending = BytesMut::with_capacity(2 * READ_SIZE);
    let mut json = Vec::with_capacity(4 * READ_SIZE);
    let mut acks = Vec::new();
    let mut broken = false;
    while !broken {
        let n = match stream.read(&mut read) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&read[..n]);
        let new_batch = || {
            let mut batch = EventBatch::new(Bytes::new(), Arc::clone(&source), "fluent");
            batch.peers.push(peer.ip());
            batch
        };
        let mut arena = BytesMut::new();
        let mut batch = new_batch();
        loop {
            let len = match splitter.split(&pending) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(_) => {
                    broken = true;
                    break;
                }
            };
            let start = arena.len();
            arena.unsplit(pending.split_to(len));
            match decoder.decode(&mut arena, start, start + len, &mut batch, 0) {
                Ok(request) => {
                    if let Some((s, e)) = request.chunk {
                        write_ack(&mut acks, arena.get(s..e).unwrap_or_default());
                    }
                }
                Err(_) => {
                    broken = true;
                    break;
                }
            }
            if arena.len() >= BATCH_BYTES {
                let full = std::mem::replace(&mut batch, new_batch());
                write_forward(
                    &mut stream,
                    std::mem::take(&mut arena),
                    full,
                    &mut json,
                    &mut acks,
                    file,
                )?;
            }
        }
        write_forward(&mut stream, arena, batch, &mut json, &mut acks, file)?;
    }
    Ok(())
}

/// Writes one batch of forward events as JSON lines, then the acks of its requests (a client
/// that went away only ends its connection's acks, never the loop).
fn write_forward(
    stream: &mut TcpStream,
    arena: BytesMut,
    mut batch: EventBatch,
    json: &mut Vec<u8>,
    acks: &mut Vec<u8>,
    file: &Mutex<File>,
) -> Result<()> {
    batch.arena = arena.freeze();
    batch.received = Timestamp::now();
    json.clear();
    for e in &batch.events {
        encode_json(&batch, e, json);
    }
    if !json.is_empty() {
        let mut f = file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.write_all(json).context("writing the output")?;
    }
    if !acks.is_empty() {
        let _ = stream.write_all(acks);
        acks.clear();
    }
    Ok(())
}

/// Reads `input` from its beginning and follows it as it grows, until the process is killed,
/// appending to `out` for every line the JSON line loghaul's `file` source and file sink write:
/// the line as `message`, the read time, `source_type` `"file"`, the `file` path (as given) and
/// this machine's `host`.
///
/// # Errors
/// A file cannot be opened, read or written.
pub fn tail(input: &Path, out: &Path) -> Result<()> {
    let mut file = File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut output = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let host = host_name();
    let source: Arc<str> = Arc::from("in");
    let mut arena = BytesMut::new();
    // The unfinished last line of a read, carried to the front of the next.
    let mut carry: Vec<u8> = Vec::new();
    let mut events: Vec<Event> = Vec::new();
    let mut json = Vec::with_capacity(4 * TAIL_READ);
    let mut idle = Duration::from_millis(1);
    loop {
        // Reclaims the last read's buffer (its batch is gone), so the pages stay mapped.
        arena.reserve(carry.len() + TAIL_READ + 256);
        let mut put = |bytes: &[u8]| {
            let start = arena.len();
            arena.extend_from_slice(bytes);
            Span::new(start, arena.len())
        };
        // What every event of the read shares goes first, as in the source's batches.
        let shared = [
            (put(b"file"), put(input.as_os_str().as_bytes())),
            (put(b"host"), put(host.as_bytes())),
        ];
        let base = arena.len();
        let from = carry.len();
        arena.extend_from_slice(&carry);
        // Zeroed before reading, as the source's buffer is: std reads into initialised bytes.
        arena.resize(base + from + TAIL_READ, 0);
        let n = loop {
            match file.read(&mut arena[base + from..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).with_context(|| format!("reading {}", input.display())),
            }
        };
        arena.truncate(base + from + n);
        if n == 0 {
            arena.clear();
            std::thread::sleep(idle);
            idle = (idle * 2).min(TAIL_IDLE_MAX);
            continue;
        }
        idle = Duration::from_millis(1);
        let region = &arena[base..];
        // Nearly every read is ASCII (one vectorised pass); only the others are checked line by
        // line, as the source checks them.
        let check_utf8 = !loghaul_codec::is_ascii(region);
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &region[from..]).map(|i| from + i) {
            let mut end = nl;
            if end > start && region[end - 1] == b'\r' {
                end -= 1;
            }
            let mut flags = Flags::default();
            if end - start > MAX_LINE {
                end = start + MAX_LINE;
                flags.insert(Flags::TRUNCATED);
            }
            if check_utf8 && std::str::from_utf8(&region[start..end]).is_err() {
                flags.insert(Flags::INVALID_UTF8);
            }
            events.push(Event {
                message: OptSpan::some(Span::new(base + start, base + end)),
                fields: (0, shared.len() as u32),
                flags,
                ..Event::default()
            });
            start = nl + 1;
        }
        carry.clear();
        carry.extend_from_slice(&region[start..]);
        if events.is_empty() {
            arena.clear();
            continue;
        }
        let mut batch = EventBatch::new(arena.split().freeze(), Arc::clone(&source), "file");
        batch.events = std::mem::take(&mut events);
        batch.fields = shared
            .iter()
            .map(|&(name, value)| Field {
                name,
                value: Value::Str(value),
            })
            .collect();
        batch.received = Timestamp::now();
        json.clear();
        for e in &batch.events {
            encode_json(&batch, e, &mut json);
        }
        output.write_all(&json).context("writing the output")?;
        events = std::mem::take(&mut batch.events);
        events.clear();
    }
}

/// This machine's name as loghaul's `file` source gives it (`host`).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "loghaul".to_owned())
}
