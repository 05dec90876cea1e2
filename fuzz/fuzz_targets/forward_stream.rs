//! Fuzz the forward source's streaming read path as a connection runs it: the first two bytes
//! pick how the rest arrives (pieces of 1 to 256 bytes), how much memory each decoding step may
//! take, and how often a new batch starts in the middle of a request. Requests that carry
//! entries go through `forward::Stream`, the rest through the whole-request decoder. Nothing may
//! panic, every span must stay inside its batch's arena, and when neither path finds an error,
//! the events must be exactly those of decoding the same stream whole.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use loghaul_codec::encode_json;
use loghaul_codec::forward::{Decoder, Limits, Splitter, Step, Stream, carries_entries};
use loghaul_core::EventBatch;

const MAX_VALUE: usize = 64 * 1024;
const LIMITS: Limits = Limits {
    max_decompressed_size: 256 * 1024,
};

fn batch() -> EventBatch {
    let mut b = EventBatch::new(Bytes::new(), "fuzz".into(), "fluent");
    b.peers.push([127, 0, 0, 1].into());
    b
}

/// Every event of `batch` (its arena set) as JSON, its spans checked.
fn lines(batch: &EventBatch, out: &mut Vec<Vec<u8>>) {
    for event in &batch.events {
        for span in [event.message.get(), event.tag.get()].into_iter().flatten() {
            assert!(span.start <= span.end && span.end as usize <= batch.arena.len());
        }
        for field in batch.fields_of(event) {
            assert!(field.name.end as usize <= batch.arena.len());
        }
        let mut json = Vec::new();
        encode_json(batch, event, &mut json);
        out.push(json);
    }
}

/// The stream decoded whole, request by request, up to its first error.
fn whole(stream: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut s = Splitter::new(usize::MAX);
    let mut buf = BytesMut::from(stream);
    let mut decoder = Decoder::new(LIMITS);
    let mut out = Vec::new();
    loop {
        let n = match s.split(&buf) {
            Ok(Some(n)) => n,
            Ok(None) => return (out, !buf.is_empty()),
            Err(_) => return (out, true),
        };
        let mut arena = buf.split_to(n);
        let mut b = batch();
        let failed = decoder.decode(&mut arena, 0, n, &mut b, 0).is_err();
        b.arena = arena.freeze();
        lines(&b, &mut out);
        if failed {
            return (out, true);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let piece = usize::from(*a) + 1;
    let allowance = 1024 << (b & 7);
    let every = usize::from(b >> 3);
    let (want, whole_failed) = whole(stream);

    let mut reader = Stream::new(MAX_VALUE, LIMITS.max_decompressed_size);
    let mut decoder = Decoder::new(LIMITS);
    let mut splitter = Splitter::new(MAX_VALUE);
    let (mut buf, mut arena, mut current) = (BytesMut::new(), BytesMut::new(), batch());
    let mut got = Vec::new();
    let (mut fed, mut steps, mut failed) = (0, 0, false);
    let mut emit = |reader: &mut Stream, arena: &mut BytesMut, current: &mut EventBatch| {
        let mut old = std::mem::take(arena);
        reader.carry(&mut old, arena);
        let mut full = std::mem::replace(current, batch());
        full.arena = old.freeze();
        lines(&full, &mut got);
    };
    'read: while fed < stream.len() {
        let end = (fed + piece).min(stream.len());
        buf.extend_from_slice(&stream[fed..end]);
        fed = end;
        loop {
            if reader.in_request() {
                let mut room = allowance;
                let step = loop {
                    match reader.step(&mut buf, &mut arena, &mut current, room) {
                        Ok(Step::NeedRoom(cost)) => {
                            assert!(cost > room);
                            if cost > 64 << 20 {
                                break Err(());
                            }
                            room = cost;
                        }
                        other => break other.map_err(|_| ()),
                    }
                };
                steps += 1;
                if every > 0 && steps % every == 0 {
                    emit(&mut reader, &mut arena, &mut current);
                }
                match step {
                    Ok(Step::NeedInput) => continue 'read,
                    Ok(_) => continue,
                    Err(()) => {
                        failed = true;
                        break 'read;
                    }
                }
            }
            match carries_entries(&buf) {
                Some(true) => match reader.begin(&mut buf, &mut arena, &current) {
                    Ok(true) => continue,
                    Ok(false) => continue 'read,
                    Err(_) => {
                        failed = true;
                        break 'read;
                    }
                },
                None => continue 'read,
                Some(false) => match splitter.split(&buf) {
                    Ok(Some(n)) => {
                        let start = arena.len();
                        arena.unsplit(buf.split_to(n));
                        if decoder
                            .decode(&mut arena, start, start + n, &mut current, 0)
                            .is_err()
                        {
                            failed = true;
                            break 'read;
                        }
                    }
                    Ok(None) => continue 'read,
                    Err(_) => {
                        failed = true;
                        break 'read;
                    }
                },
            }
        }
    }
    emit(&mut reader, &mut arena, &mut current);
    let unfinished = reader.in_request() || !buf.is_empty();
    if !failed && !whole_failed && !unfinished {
        assert_eq!(got, want, "streamed and whole decoding differ");
    }
});
