//! `EventBatch`: the unit that moves through loghaul. One arena, many events, side tables for
//! structured data and extra fields, and the finalizer that reports the batch's fate.
//!
//! ```text
//! arena:  <13>Oct 11 22:14:15 host app[1]: hello\n<14>Oct 11 ...
//!                             ^^^^ ^^^ ^    ^^^^^
//!                             hostname/appname/procid/message spans of events[0]
//! sd_elements[e.structured_data.0 .. +1]  -> SdElement { id, params: range into sd_params }
//! fields[e.fields.0 .. e.fields.1]        -> Field { name, value }
//! ```
//!
//! Invariant: every `Span` stored in the batch (in events, sd tables and fields) lies inside
//! `arena`. Decoders uphold it; `str()` still clamps so a bug cannot become a panic.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::event::{Event, Span, Timestamp};
use crate::finalizer::Finalizer;

/// One RFC 5424 SD-ELEMENT: its SD-ID and a range into [`EventBatch::sd_params`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdElement {
    pub id: Span,
    pub params: (u32, u32),
}

/// One SD-PARAM. `value` is the raw text between the quotes: `\"`, `\\` and `\]` are still
/// escaped when `escaped` is true, and encoders resolve them on output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdParam {
    pub name: Span,
    pub value: Span,
    pub escaped: bool,
}

/// The value of an extra field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Str(Span),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    /// A JSON document kept as text in the arena (nested maps and arrays from JSON or msgpack
    /// sources); encoders write it verbatim.
    Json(Span),
}

/// An extra named field of an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field {
    pub name: Span,
    pub value: Value,
}

/// A batch of events sharing one arena.
#[derive(Debug, Clone)]
pub struct EventBatch {
    /// The bytes every span points into.
    pub arena: Bytes,
    pub events: Vec<Event>,
    pub sd_elements: Vec<SdElement>,
    pub sd_params: Vec<SdParam>,
    pub fields: Vec<Field>,
    /// When the batch's bytes were read: the time written for events that carry none of their
    /// own.
    pub received: Timestamp,
    /// The senders' addresses; [`Event::peer`] indexes it. One entry for a TCP connection's
    /// batch, one per run of datagrams from the same sender for UDP.
    pub peers: Vec<IpAddr>,
    /// The id of the component that produced the batch (for metrics and errors).
    pub source: Arc<str>,
    /// `syslog`, `http`, `forward`... written as `source_type` on output.
    pub source_type: &'static str,
    /// Reports the batch's fate to its source; `Finalizer::none()` for sources that cannot ack.
    pub finalizer: Finalizer,
}

impl EventBatch {
    /// An empty batch over `arena`.
    pub fn new(arena: Bytes, source: Arc<str>, source_type: &'static str) -> EventBatch {
        EventBatch {
            arena,
            events: Vec::new(),
            sd_elements: Vec::new(),
            sd_params: Vec::new(),
            fields: Vec::new(),
            received: Timestamp::default(),
            peers: Vec::new(),
            source,
            source_type,
            finalizer: Finalizer::none(),
        }
    }

    /// The bytes of a span; empty if the span is out of range (a decoder bug, never a panic).
    #[inline]
    pub fn str(&self, span: Span) -> &[u8] {
        self.arena
            .get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The structured-data elements of an event (empty when it has none).
    #[inline]
    pub fn sd_elements_of(&self, event: &Event) -> &[SdElement] {
        match event.structured_data {
            Some((start, end)) => self
                .sd_elements
                .get(start as usize..end as usize)
                .unwrap_or_default(),
            None => &[],
        }
    }

    /// The params of one structured-data element.
    #[inline]
    pub fn params_of(&self, element: &SdElement) -> &[SdParam] {
        self.sd_params
            .get(element.params.0 as usize..element.params.1 as usize)
            .unwrap_or_default()
    }

    /// The address `event` was received from, when known.
    #[inline]
    pub fn source_ip(&self, event: &Event) -> Option<IpAddr> {
        self.peers.get(usize::from(event.peer)).copied()
    }

    /// The index for [`Event::peer`] of events received from `ip`: the last entry of
    /// [`EventBatch::peers`] when it is the same address, else a new one. [`Event::NO_PEER`] for
    /// `None`, and (never in practice: UDP batches hold at most a few thousand datagrams) when
    /// the table is full.
    pub fn peer_index(&mut self, ip: Option<IpAddr>) -> u16 {
        let Some(ip) = ip else {
            return Event::NO_PEER;
        };
        if self.peers.last() != Some(&ip) {
            if self.peers.len() >= usize::from(Event::NO_PEER) {
                return Event::NO_PEER;
            }
            self.peers.push(ip);
        }
        (self.peers.len() - 1) as u16
    }

    /// When `event` happened: its own timestamp, else when its batch was read.
    #[inline]
    pub fn time_of(&self, event: &Event) -> Timestamp {
        event.timestamp.unwrap_or(self.received)
    }

    /// The extra fields of an event.
    #[inline]
    pub fn fields_of(&self, event: &Event) -> &[Field] {
        self.fields
            .get(event.fields.0 as usize..event.fields.1 as usize)
            .unwrap_or_default()
    }

    /// A batch holding only the events `keep` accepts, sharing this batch's arena, side tables
    /// and finalizer (filters use it; no event data is copied).
    pub fn retain_view(&self, mut keep: impl FnMut(&EventBatch, &Event) -> bool) -> EventBatch {
        let events = self
            .events
            .iter()
            .filter(|e| keep(self, e))
            .copied()
            .collect();
        EventBatch {
            arena: self.arena.clone(),
            events,
            sd_elements: self.sd_elements.clone(),
            sd_params: self.sd_params.clone(),
            fields: self.fields.clone(),
            received: self.received,
            peers: self.peers.clone(),
            source: self.source.clone(),
            source_type: self.source_type,
            finalizer: self.finalizer.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_resolve_and_clamp() {
        let mut b = EventBatch::new(Bytes::from_static(b"hello world"), "src".into(), "test");
        b.events.push(Event {
            message: Span::new(6, 11),
            ..Event::default()
        });
        assert_eq!(b.str(b.events[0].message), b"world");
        assert_eq!(b.str(Span::new(6, 99)), b"");
        assert!(b.sd_elements_of(&b.events[0]).is_empty());
        let only_none = b.retain_view(|_, _| false);
        assert!(only_none.is_empty());
        assert_eq!(only_none.arena, b.arena);
    }

    #[test]
    fn peers_are_shared_by_runs_of_the_same_sender() {
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [0xfe80, 0, 0, 0, 0, 0, 0, 1].into();
        let mut batch = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        let idx: Vec<u16> = [Some(a), Some(a), None, Some(b), Some(a)]
            .into_iter()
            .map(|ip| batch.peer_index(ip))
            .collect();
        assert_eq!(idx, [0, 0, Event::NO_PEER, 1, 2]);
        assert_eq!(batch.peers, [a, b, a]);
        for (i, want) in idx.iter().zip([Some(a), Some(a), None, Some(b), Some(a)]) {
            let event = Event {
                peer: *i,
                ..Event::default()
            };
            assert_eq!(batch.source_ip(&event), want);
        }
        // An index past the table is no address, never a panic.
        let stray = Event {
            peer: 9,
            ..Event::default()
        };
        assert_eq!(batch.source_ip(&stray), None);
        // A view keeps the table, so its events keep their senders.
        batch.events.push(Event {
            peer: 1,
            ..Event::default()
        });
        let view = batch.retain_view(|_, _| true);
        assert_eq!(view.source_ip(&view.events[0]), Some(b));
    }

    #[test]
    fn events_without_a_timestamp_take_the_batch_receive_time() {
        let mut batch = EventBatch::new(Bytes::from_static(b"x"), "src".into(), "test");
        batch.received = Timestamp::from_nanos(42_000, 6);
        let own = Timestamp::from_nanos(7, 3);
        let with = Event {
            timestamp: Some(own),
            ..Event::default()
        };
        assert_eq!(batch.time_of(&with), own);
        assert_eq!(batch.time_of(&Event::default()), batch.received);
        assert_eq!(batch.retain_view(|_, _| true).received, batch.received);
    }
}
