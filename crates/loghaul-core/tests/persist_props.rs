//! Property tests of the batch encoding: arbitrary bytes never panic the decoder, a valid
//! encoding cut anywhere is refused, whatever it accepts upholds every batch invariant, and any
//! valid batch comes back the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bytes::Bytes;
use loghaul_core::{
    Event, EventBatch, Field, Flags, OptSpan, SdElement, SdParam, Span, Timestamp, Value,
    decode_batch, encode_batch, encoded_len_events, encoded_size,
};
use proptest::prelude::*;

/// Draws from a list of random numbers, then zeros once it runs out: shrinking the list shrinks
/// the batch built from it.
struct Draw<'a> {
    numbers: &'a [u64],
    at: usize,
}

impl Draw<'_> {
    fn next(&mut self) -> u64 {
        let n = self.numbers.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        n
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn chance(&mut self) -> bool {
        self.below(2) == 1
    }

    fn span(&mut self, arena: usize) -> Span {
        let start = self.below(arena as u64 + 1) as usize;
        let end = start + self.below((arena - start) as u64 + 1) as usize;
        Span::new(start, end)
    }

    fn opt_span(&mut self, arena: usize) -> OptSpan {
        if self.chance() {
            self.span(arena).into()
        } else {
            OptSpan::NONE
        }
    }

    fn opt_u8(&mut self) -> Option<u8> {
        self.chance().then(|| self.next() as u8)
    }
}

/// A record of up to `depth` levels below this one, laid out as decoders do: the slots first,
/// nested containers' children after them. Returns its range in `fields`.
fn record(fields: &mut Vec<Field>, d: &mut Draw<'_>, arena: usize, depth: u32) -> (u32, u32) {
    let n = d.below(4) as usize;
    let start = fields.len();
    let empty = Field {
        name: Span::EMPTY,
        value: Value::Null,
    };
    fields.resize(start + n, empty);
    for i in 0..n {
        let kinds = if depth > 0 { 11 } else { 9 };
        let value = match d.below(kinds) {
            0 => Value::Str(d.span(arena)),
            1 => Value::Bytes(d.span(arena)),
            2 => Value::Int(d.next() as i64),
            3 => Value::UInt(d.next()),
            4 => Value::Float(f64::from_bits(d.next())),
            5 => Value::Bool(d.chance()),
            6 => Value::Null,
            7 => Value::Ext(d.next() as i8, d.span(arena)),
            // An empty container may point anywhere inside the table.
            8 => {
                let at = d.below(fields.len() as u64 + 1) as u32;
                Value::Map(at, at)
            }
            9 => {
                let (a, b) = record(fields, d, arena, depth - 1);
                Value::Map(a, b)
            }
            _ => {
                let (a, b) = record(fields, d, arena, depth - 1);
                Value::Array(a, b)
            }
        };
        fields[start + i] = Field {
            name: d.span(arena),
            value,
        };
    }
    (start as u32, (start + n) as u32)
}

/// A batch that upholds every invariant, built from `arena` and random `numbers`.
fn build(arena: Vec<u8>, numbers: &[u64]) -> EventBatch {
    let d = &mut Draw { numbers, at: 0 };
    let len = arena.len();
    let source_type =
        ["syslog", "fluent", "file", "http_server", "a_test_source"][d.below(5) as usize];
    let source = "in_é".repeat(d.below(3) as usize);
    let mut b = EventBatch::new(Bytes::from(arena), source.into(), source_type);
    b.received = Timestamp::from_nanos(d.next() as i64, d.below(10) as u8);
    for _ in 0..d.below(4) {
        let v = d.next();
        b.peers.push(if v & 1 == 0 {
            IpAddr::V4(Ipv4Addr::from((v >> 1) as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from((u128::from(v) << 64) | u128::from(d.next())))
        });
    }
    for _ in 0..d.below(6) {
        let mut e = Event {
            hostname: d.opt_span(len),
            appname: d.opt_span(len),
            procid: d.opt_span(len),
            msgid: d.opt_span(len),
            message: d.opt_span(len),
            tag: d.opt_span(len),
            facility: d.opt_u8(),
            severity: d.opt_u8(),
            version: d.opt_u8(),
            flags: Flags(d.next() as u8),
            ..Event::default()
        };
        if d.chance() {
            e.timestamp = Some(Timestamp::from_nanos(d.next() as i64, d.below(10) as u8));
        }
        if d.chance() {
            let start = b.sd_elements.len() as u32;
            for _ in 0..d.below(3) {
                let first = b.sd_params.len() as u32;
                for _ in 0..d.below(3) {
                    b.sd_params.push(SdParam {
                        name: d.span(len),
                        value: d.span(len),
                        escaped: d.chance(),
                    });
                }
                b.sd_elements.push(SdElement {
                    id: d.span(len),
                    params: (first, b.sd_params.len() as u32),
                });
            }
            e.structured_data = Some((start, b.sd_elements.len() as u32));
        }
        e.fields = record(&mut b.fields, d, len, 2);
        if !b.peers.is_empty() && d.below(4) != 0 {
            e.peer = d.below(b.peers.len() as u64) as u16;
        }
        b.events.push(e);
    }
    b
}

fn batch() -> impl Strategy<Value = EventBatch> {
    (
        proptest::collection::vec(any::<u8>(), 0..48),
        proptest::collection::vec(any::<u64>(), 0..300),
    )
        .prop_map(|(arena, numbers)| build(arena, &numbers))
}

fn encoded(batch: &EventBatch) -> Vec<u8> {
    let mut out = Vec::new();
    encode_batch(batch, &mut out);
    out
}

/// Panics (by indexing) where a batch breaks an invariant that `EventBatch` documents.
fn check_invariants(b: &EventBatch) {
    let arena = |s: Span| &b.arena[s.start as usize..s.end as usize];
    let opt = |s: OptSpan| s.get().map(arena);
    for e in &b.events {
        for s in [e.hostname, e.appname, e.procid, e.msgid, e.message, e.tag] {
            opt(s);
        }
        if let Some((start, end)) = e.structured_data {
            let _ = &b.sd_elements[start as usize..end as usize];
        }
        let _ = &b.fields[e.fields.0 as usize..e.fields.1 as usize];
        assert!(e.peer == Event::NO_PEER || usize::from(e.peer) < b.peers.len());
        if let Some(t) = e.timestamp {
            assert!(t.frac_digits() <= 9);
        }
    }
    for el in &b.sd_elements {
        arena(el.id);
        let _ = &b.sd_params[el.params.0 as usize..el.params.1 as usize];
    }
    for p in &b.sd_params {
        arena(p.name);
        arena(p.value);
    }
    for (i, f) in b.fields.iter().enumerate() {
        arena(f.name);
        match f.value {
            Value::Str(s) | Value::Bytes(s) | Value::Ext(_, s) => {
                arena(s);
            }
            Value::Map(start, end) | Value::Array(start, end) => {
                let _ = &b.fields[start as usize..end as usize];
                assert!(start == end || start as usize > i, "a container loops back");
            }
            _ => {}
        }
    }
}

/// Every part of two batches, floats compared by their bits.
fn assert_same(a: &EventBatch, b: &EventBatch) {
    assert_eq!(a.arena, b.arena);
    assert_eq!(a.events, b.events);
    for (x, y) in a.events.iter().zip(&b.events) {
        assert_eq!(
            x.timestamp.map(Timestamp::frac_digits),
            y.timestamp.map(Timestamp::frac_digits)
        );
    }
    assert_eq!(a.sd_elements, b.sd_elements);
    assert_eq!(a.sd_params, b.sd_params);
    assert_eq!(a.fields.len(), b.fields.len());
    for (x, y) in a.fields.iter().zip(&b.fields) {
        assert_eq!(x.name, y.name);
        match (x.value, y.value) {
            (Value::Float(p), Value::Float(q)) => assert_eq!(p.to_bits(), q.to_bits()),
            (p, q) => assert_eq!(p, q),
        }
    }
    assert_eq!(a.received, b.received);
    assert_eq!(a.received.frac_digits(), b.received.frac_digits());
    assert_eq!(a.peers, b.peers);
    assert_eq!(a.source, b.source);
    assert_eq!(a.source_type, b.source_type);
    assert!(!b.finalizer.is_tracked());
}

/// An encoding's header with the given counts (and a source, a source_type of one byte each),
/// followed by `fill` repeated to the length the counts call for.
fn forged(counts: [u8; 6], fill: &[u8]) -> Vec<u8> {
    let widths = [17, 80, 16, 17, 18, 1];
    let [events, sd_elements, sd_params, fields, peers, arena] = counts.map(u32::from);
    let mut out = b"LHB\x01".to_vec();
    for n in [events, sd_elements, sd_params, fields, peers, arena, 1, 1] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&[0; 9]);
    let body: usize = 2 + [peers, events, sd_elements, sd_params, fields, arena]
        .iter()
        .zip(widths)
        .map(|(n, w)| *n as usize * w)
        .sum::<usize>();
    out.extend((0..body).map(|i| fill.get(i % fill.len().max(1)).copied().unwrap_or(0)));
    out
}

/// Bytes that make small counts, offsets and kinds (and absent spans) often enough for forged
/// items to pass some checks and reach the next.
fn filler() -> impl Strategy<Value = u8> {
    prop_oneof![6 => Just(0u8), 2 => 1u8..4, 1 => Just(255u8), 1 => any::<u8>()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_batches_round_trip(b in batch()) {
        let data = encoded(&b);
        prop_assert_eq!(data.len(), encoded_size(&b));
        prop_assert_eq!(encoded_len_events(&data), Some(b.events.len() as u32));
        let back = decode_batch(Bytes::from(data.clone())).unwrap();
        assert_same(&b, &back);
        // And the encoding is canonical: the batch read back writes the same bytes.
        prop_assert_eq!(encoded(&back), data);
    }

    #[test]
    fn a_valid_encoding_cut_anywhere_is_refused(b in batch()) {
        let data = Bytes::from(encoded(&b));
        for cut in 0..data.len() {
            prop_assert!(decode_batch(data.slice(..cut)).is_err(), "cut at {}", cut);
        }
        let mut longer = data.to_vec();
        longer.push(0);
        prop_assert!(decode_batch(Bytes::from(longer)).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = encoded_len_events(&data);
        if let Ok(b) = decode_batch(Bytes::from(data.clone())) {
            check_invariants(&b);
        }
        let mut tagged = b"LHB\x01".to_vec();
        tagged.extend_from_slice(&data);
        if let Ok(b) = decode_batch(Bytes::from(tagged)) {
            check_invariants(&b);
        }
    }

    /// Right lengths and random contents: every item is checked, not only the header.
    #[test]
    fn forged_items_are_checked(
        counts in proptest::array::uniform6(0u8..6),
        fill in proptest::collection::vec(filler(), 1..64),
    ) {
        if let Ok(b) = decode_batch(Bytes::from(forged(counts, &fill))) {
            check_invariants(&b);
        }
    }

    /// A damaged encoding is refused, or decodes to a batch as sound as any other.
    #[test]
    fn damaged_encodings_decode_to_sound_batches_or_not_at_all(
        b in batch(),
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut data = encoded(&b);
        for (at, byte) in damage {
            let at = at.index(data.len());
            data[at] = byte;
        }
        if let Ok(back) = decode_batch(Bytes::from(data)) {
            check_invariants(&back);
            let again = decode_batch(Bytes::from(encoded(&back))).unwrap();
            assert_same(&back, &again);
        }
    }
}
