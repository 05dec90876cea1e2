//! Fuzz the forward-protocol source's whole read path: the first byte picks a chunk size, the
//! rest is a connection's stream. It is split into requests (read by read, as a connection
//! would), each request decoded (all modes, gzip and zstd entries, bounded by small limits),
//! and every event encoded to JSON and back to a forward entry. Splitting must not depend on
//! how the reads cut the stream, spans must stay in the arena, JSON must be valid UTF-8, and
//! re-encoded entries must decode again. The same requests read as a deliver reads them (records
//! walked, not decoded) must keep the same events, decode later to the same JSON, and pass on
//! as entries that decode again.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use loghaul_codec::encode_json;
use loghaul_codec::forward::{
    DecodeStats, Decoder, Limits, RequestError, Splitter, begin_packed, decode_raw, encode_entry,
    entry_as_is, finish_packed,
};
use loghaul_core::EventBatch;

const MAX_REQUEST: usize = 64 * 1024;
const LIMITS: Limits = Limits {
    max_decompressed_size: 256 * 1024,
};

/// Request lengths of `stream` fed `step` bytes at a time, and whether it ended in an error.
fn split(stream: &[u8], step: usize) -> (Vec<usize>, bool) {
    let mut s = Splitter::new(MAX_REQUEST);
    let (mut lens, mut start, mut end) = (Vec::new(), 0, 0);
    while end < stream.len() {
        end = (end + step).min(stream.len());
        loop {
            match s.split(&stream[start..end]) {
                Ok(Some(n)) => {
                    lens.push(n);
                    start += n;
                }
                Ok(None) => break,
                Err(_) => return (lens, true),
            }
        }
    }
    (lens, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let whole = split(stream, usize::MAX);
    let step = usize::from(first % 97) + 1;
    assert_eq!(split(stream, step), whole, "the reads changed the requests");

    let (batch, stats, refused) = decode(stream, &whole.0, false);
    let (raw, raw_stats, _) = decode(stream, &whole.0, true);
    // A walk keeps no decoded records, so it is not refused for their size: past that, it
    // must read what the decode read.
    if !matches!(refused, Some(RequestError::TooLarge { .. })) {
        assert_eq!(
            raw_stats, stats,
            "a walk drops and refuses what a decode does"
        );
        assert_eq!(raw.len(), batch.len(), "a walk keeps what a decode keeps");
        let walked = decode_raw(&raw);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (x, y) in batch.events.iter().zip(&walked.events) {
            a.clear();
            b.clear();
            encode_json(&batch, x, &mut a);
            encode_json(&walked, y, &mut b);
            assert_eq!(a, b, "a walked record decodes to what the decode read");
        }
    }
    // Passed on as they came, the walked records read back as the same number of events.
    let mut passed = Vec::new();
    let start = begin_packed(&mut passed, b"fuzz");
    for event in &raw.events {
        let at = passed.len();
        encode_entry(&raw, event, false, &mut passed);
        // An entry the walk said goes out as it is reads as the encoder writes it.
        if let Some(as_is) = entry_as_is(&raw, event, false) {
            assert_eq!(as_is, &passed[at..], "an entry passed on as it is");
        }
    }
    finish_packed(&mut passed, start, raw.len(), Some(b"c"), false);
    assert_eq!(reread(passed), raw.len(), "passed-on entries decode again");

    let mut json = Vec::new();
    let mut request = Vec::new();
    let packed = begin_packed(&mut request, b"fuzz");
    for event in &batch.events {
        for span in [event.message.get(), event.tag.get()].into_iter().flatten() {
            assert!(span.start <= span.end && span.end as usize <= batch.arena.len());
        }
        for field in batch.fields_of(event) {
            assert!(field.name.end as usize <= batch.arena.len());
        }
        json.clear();
        encode_json(&batch, event, &mut json);
        assert!(std::str::from_utf8(&json).is_ok(), "JSON output is UTF-8");
        encode_entry(&batch, event, false, &mut request);
    }
    finish_packed(&mut request, packed, batch.len(), Some(b"c"), false);
    // What loghaul sends on must read back as the same number of events.
    assert_eq!(
        reread(request),
        batch.len(),
        "re-encoded events decode again"
    );
});

/// The requests of `stream` (of lengths `lens`) decoded into one batch, its records decoded or
/// only walked (`raw`), up to the first refused request; the decoder's counts, and why that
/// request was refused.
fn decode(
    stream: &[u8],
    lens: &[usize],
    raw: bool,
) -> (EventBatch, DecodeStats, Option<RequestError>) {
    let mut buf = BytesMut::from(stream);
    let mut arena = BytesMut::new();
    let mut batch = EventBatch::new(Bytes::new(), "fuzz".into(), "fluent");
    batch.peers.push([127, 0, 0, 1].into());
    batch.raw_records = raw;
    let mut decoder = Decoder::new(LIMITS);
    let mut refused = None;
    for &n in lens {
        let start = arena.len();
        arena.unsplit(buf.split_to(n));
        if let Err(e) = decoder.decode(&mut arena, start, start + n, &mut batch, 0) {
            refused = Some(e);
            break;
        }
    }
    batch.arena = arena.freeze();
    (batch, decoder.stats, refused)
}

/// How many events the one request `request` decodes to.
fn reread(request: Vec<u8>) -> usize {
    let mut again = BytesMut::from(&request[..]);
    let mut s = Splitter::new(usize::MAX);
    let Ok(Some(n)) = s.split(&again) else {
        panic!("an encoded request is one complete value");
    };
    assert_eq!(n, again.len());
    let mut out = EventBatch::new(Bytes::new(), "fuzz".into(), "fluent");
    Decoder::new(LIMITS)
        .decode(&mut again, 0, n, &mut out, 0)
        .unwrap_or_else(|e| panic!("re-encoded request: {e}"))
        .events
}
