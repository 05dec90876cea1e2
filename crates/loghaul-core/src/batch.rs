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

use std::sync::Arc;

use bytes::Bytes;

use crate::event::{Event, Span};
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
}
