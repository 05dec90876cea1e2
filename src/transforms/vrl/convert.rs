//! How an event of a batch becomes a VRL value and how VRL values become events of a new
//! batch: the table in `docs/vrl.md`, in code.
//!
//! To VRL, an event is the object its JSON line shows: the record's keys, then loghaul's own
//! fields a record key does not shadow (`timestamp` a VRL timestamp, `facility` and `severity`
//! names, `structured_data` an object of objects). Strings are slices of the batch's arena (no
//! copy). Back, a key named like one of loghaul's own fields with a value of that field's kind
//! becomes the field again; everything else is the record. What the program did not change
//! keeps its representation (a msgpack `bin`, an unsigned integer, an extension value, the
//! sender's key order and a timestamp's digits), so a program that changes nothing changes no
//! byte of any output.

use std::net::IpAddr;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use loghaul_core::batch::{Field, SdElement, SdParam, Value};
use loghaul_core::{Event, EventBatch, Flags, Span, Timestamp, names};
use vrl::value::{KeyString, ObjectMap, Value as Vrl};

use super::fast::{Arena, Key, KeyOf, Machine, Name, V, original_field};

/// Deeper than any decoder builds (they stop well before); a guard, not a limit users meet.
const MAX_DEPTH: usize = 128;

/// loghaul's own fields by the name they have in VRL (and in JSON output).
const OWN: [&str; 14] = loghaul_codec::encode::FIXED_FIELDS;

/// The VRL object of `event`.
pub fn to_vrl(batch: &EventBatch, event: &Event) -> Vrl {
    let mut obj = ObjectMap::new();
    for field in batch.fields_of(event) {
        // The first of a repeated key wins, as encoders write it.
        obj.entry(key(batch, field.name))
            .or_insert_with(|| value_to_vrl(batch, field.value, 0));
    }
    let mut own = |name: &str, value: Option<Vrl>| {
        if let Some(value) = value {
            obj.entry(KeyString::from(name)).or_insert(value);
        }
    };
    let text = |span: loghaul_core::OptSpan| span.get().map(|s| Vrl::Bytes(slice(batch, s)));
    own(
        "timestamp",
        Some(Vrl::Timestamp(datetime(batch.time_of(event)))),
    );
    own("hostname", text(event.hostname));
    own("appname", text(event.appname));
    own("procid", text(event.procid));
    own("msgid", text(event.msgid));
    own(
        "facility",
        event.facility.and_then(names::facility_name).map(Vrl::from),
    );
    own(
        "severity",
        event.severity.and_then(names::severity_name).map(Vrl::from),
    );
    own("version", event.version.map(|v| Vrl::Integer(i64::from(v))));
    own(
        "structured_data",
        event
            .structured_data
            .map(|_| structured_data(batch, batch.sd_elements_of(event))),
    );
    own("message", text(event.message));
    own(
        "source_ip",
        batch.source_ip(event).map(|ip| Vrl::from(ip.to_string())),
    );
    own("source_type", Some(Vrl::from(batch.source_type)));
    own("tag", text(event.tag));
    own(
        "flags",
        (!event.flags.is_empty()).then(|| {
            Vrl::Array(
                FLAG_NAMES
                    .iter()
                    .filter(|(f, _)| event.flags.contains(*f))
                    .map(|(_, n)| Vrl::from(*n))
                    .collect(),
            )
        }),
    );
    Vrl::Object(obj)
}

/// The metadata object (`%`) of an event: where it came from, what no output writes.
pub fn metadata(batch: &EventBatch, event: &Event) -> Vrl {
    let mut obj = ObjectMap::new();
    obj.insert("source_id".into(), Vrl::from(&*batch.source));
    obj.insert("source_type".into(), Vrl::from(batch.source_type));
    obj.insert(
        "received_at".into(),
        Vrl::Timestamp(datetime(batch.received)),
    );
    if let Some(ip) = batch.source_ip(event) {
        obj.insert("source_ip".into(), Vrl::from(ip.to_string()));
    }
    if let Some(tag) = event.tag.get() {
        obj.insert("tag".into(), Vrl::Bytes(slice(batch, tag)));
    }
    Vrl::Object(obj)
}

const FLAG_NAMES: [(Flags, &str); 3] = [
    (Flags::PARSE_ERROR, "parse_error"),
    (Flags::TRUNCATED, "truncated"),
    (Flags::INVALID_UTF8, "invalid_utf8"),
];

fn slice(batch: &EventBatch, span: Span) -> Bytes {
    let (start, end) = (span.start as usize, span.end as usize);
    if start <= end && end <= batch.arena.len() {
        batch.arena.slice(start..end)
    } else {
        Bytes::new()
    }
}

fn key(batch: &EventBatch, name: Span) -> KeyString {
    KeyString::from(String::from_utf8_lossy(batch.str(name)).into_owned())
}

pub fn datetime(ts: Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(ts.unix_seconds(), ts.subsec_nanos()).unwrap_or_default()
}

pub fn value_to_vrl(batch: &EventBatch, value: Value, depth: usize) -> Vrl {
    match value {
        Value::Str(s) | Value::Bytes(s) => Vrl::Bytes(slice(batch, s)),
        Value::Int(i) => Vrl::Integer(i),
        // Past i64::MAX: VRL has no wider integer.
        Value::UInt(u) => float(u as f64),
        Value::Float(f) => float(f),
        Value::Bool(b) => Vrl::Boolean(b),
        Value::Null => Vrl::Null,
        Value::Map(..) if depth >= MAX_DEPTH => Vrl::Null,
        Value::Array(..) if depth >= MAX_DEPTH => Vrl::Null,
        Value::Map(..) => {
            let mut obj = ObjectMap::new();
            for f in batch.children(value) {
                obj.entry(key(batch, f.name))
                    .or_insert_with(|| value_to_vrl(batch, f.value, depth + 1));
            }
            Vrl::Object(obj)
        }
        Value::Array(..) => Vrl::Array(
            batch
                .children(value)
                .iter()
                .map(|f| value_to_vrl(batch, f.value, depth + 1))
                .collect(),
        ),
        // As JSON output writes it.
        Value::Ext(ty, data) => {
            let mut obj = ObjectMap::new();
            obj.insert("ext_type".into(), Vrl::Integer(i64::from(ty)));
            let hex: String = batch.str(data).iter().map(|b| format!("{b:02x}")).collect();
            obj.insert("hex".into(), Vrl::from(hex));
            Vrl::Object(obj)
        }
    }
}

/// NaN has no VRL float; JSON output writes it as `null` too.
fn float(f: f64) -> Vrl {
    if f.is_nan() {
        Vrl::Null
    } else {
        Vrl::from_f64_or_zero(f)
    }
}

/// `{"id":{"name":"value","rep":["a","b"]}}`, as JSON output writes it: elements with the same
/// id merged, a repeated name's values an array, escapes resolved.
fn structured_data(batch: &EventBatch, elements: &[SdElement]) -> Vrl {
    let mut obj = ObjectMap::new();
    for el in elements {
        let Vrl::Object(params) = obj
            .entry(key(batch, el.id))
            .or_insert_with(|| Vrl::Object(ObjectMap::new()))
        else {
            continue;
        };
        for p in batch.params_of(el) {
            let value = Vrl::Bytes(sd_value(batch, p));
            match params.get_mut(key(batch, p.name).as_str()) {
                Some(Vrl::Array(items)) => items.push(value),
                Some(first) => {
                    let first = std::mem::replace(first, Vrl::Null);
                    params.insert(key(batch, p.name), Vrl::Array(vec![first, value]));
                }
                None => {
                    params.insert(key(batch, p.name), value);
                }
            }
        }
    }
    Vrl::Object(obj)
}

fn sd_value(batch: &EventBatch, p: &SdParam) -> Bytes {
    if !p.escaped {
        return slice(batch, p.value);
    }
    Bytes::from(loghaul_codec::syslog::unescape_param(batch.str(p.value)))
}

/// Builds a batch of the events VRL programs produced from the events of `input`.
pub struct Builder<'a> {
    input: &'a EventBatch,
    /// Bytes appended after the input's arena (spans past its end point here).
    extra: Vec<u8>,
    events: Vec<Event>,
    fields: Vec<Field>,
    sd_elements: Vec<SdElement>,
    sd_params: Vec<SdParam>,
    peers: Vec<IpAddr>,
    /// Spans of the fast path's literals already appended, by literal index.
    lits: Vec<Option<Span>>,
    /// Reused per event by the fast path's output.
    /// The input record's keys that stay, with their values now.
    scratch_entries: Vec<(Field, V)>,
    /// The overlay slots that become new record keys, by index (sorting indices moves less
    /// than sorting the slots).
    scratch_new: Vec<u32>,
    /// The last sort of new keys: their names in the overlay's order and the order it found
    /// (positions in that list). A batch's events are usually alike, and the same names in the
    /// same order sort the same way when no two of them share their first eight bytes (the
    /// only case where [`Name::order`] reads the bytes).
    sorted: SortMemo,
}

/// The last sort of new keys (see `Builder::sorted`).
#[derive(Default)]
struct SortMemo {
    names: Vec<Name>,
    order: Vec<u32>,
    /// Whether `order` may be reused for the same `names`.
    reusable: bool,
    /// Scratch for applying `order`.
    out: Vec<u32>,
}

/// A read-only view of the output arena.
struct ArenaView<'a> {
    input: &'a [u8],
    extra: &'a [u8],
}

impl<'a> ArenaView<'a> {
    fn get(&self, span: Span) -> &'a [u8] {
        let (s, e) = (span.start as usize, span.end as usize);
        if e <= self.input.len() {
            self.input.get(s..e).unwrap_or_default()
        } else {
            let base = self.input.len();
            self.extra
                .get(s.saturating_sub(base)..e.saturating_sub(base))
                .unwrap_or_default()
        }
    }

    fn key(&self, literals: &'a [Box<[u8]>], k: Key) -> &'a [u8] {
        match k.get() {
            KeyOf::Span(s) => self.get(s),
            KeyOf::Lit(i) => literals.get(i as usize).map_or(&[][..], |b| &b[..]),
        }
    }
}

impl<'a> Builder<'a> {
    pub fn new(input: &'a EventBatch) -> Builder<'a> {
        Builder {
            input,
            extra: Vec::new(),
            events: Vec::with_capacity(input.len()),
            fields: Vec::new(),
            sd_elements: Vec::new(),
            sd_params: Vec::new(),
            peers: input.peers.clone(),
            lits: Vec::new(),
            scratch_entries: Vec::new(),
            scratch_new: Vec::new(),
            sorted: SortMemo::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Adds the event(s) a program left in `value` for the input event `orig`: an object is
    /// one event, an array one event per item (a non-object item becomes `{"message": item}`,
    /// as Vector does), anything else one event with it as its message.
    pub fn push(&mut self, orig: &Event, value: &Vrl) {
        match value {
            Vrl::Object(obj) => self.push_object(orig, obj),
            Vrl::Array(items) => {
                for item in items {
                    match item {
                        Vrl::Object(obj) => self.push_object(orig, obj),
                        other => self.push_object(orig, &message_only(other)),
                    }
                }
            }
            other => self.push_object(orig, &message_only(other)),
        }
    }

    /// The output arena as the fast path reads and appends to it.
    pub fn arena(&mut self) -> Arena<'_> {
        Arena {
            input: &self.input.arena,
            extra: &mut self.extra,
        }
    }

    /// Adds the event the fast path left in `m`'s overlay over `orig`, by the same rules as
    /// [`Builder::push`] applies to the VRL runtime's object (the differential tests hold the
    /// two to one output).
    pub fn push_fast(&mut self, orig: &Event, m: &Machine, literals: &[Box<[u8]>]) {
        let input = self.input;
        let orig_fields = input.fields_of(orig);
        // loghaul's own fields a key of the sender's record shadows.
        let mut shadow = [false; OWN.len()];
        for f in orig_fields {
            if let Some(i) = own_index(input.str(f.name)) {
                shadow[i] = true;
            }
        }
        // What the program did to each own field (the overlay knows which names are own).
        let mut own_over: [Option<Option<V>>; OWN.len()] = [None; OWN.len()];
        for slot in &m.overlay {
            if let Some(i) = slot.own {
                own_over[usize::from(i)] = Some(slot.value);
            }
        }
        // Built where it stays: an event built on the stack and pushed was copied in wide loads
        // that stalled on the field-by-field stores just before (store forwarding).
        let mut events = std::mem::take(&mut self.events);
        let first = events.is_empty();
        events.push(Event {
            fields: (0, 0),
            ..Event::default()
        });
        let Some(event) = events.last_mut() else {
            // Not reached: the event was just pushed.
            self.events = events;
            return;
        };
        let mut taken = [false; OWN.len()];
        if !shadow.contains(&true) && own_over.iter().all(Option::is_none) {
            // The usual case: the program left loghaul's own fields alone. The event is copied
            // whole, with what `copy_own` would change field by field (a branch per field).
            *event = Event {
                fields: (0, 0),
                structured_data: None,
                facility: orig.facility.filter(|c| names::facility_name(*c).is_some()),
                severity: orig.severity.filter(|c| names::severity_name(*c).is_some()),
                peer: match self.input.source_ip(orig) {
                    Some(_) => orig.peer,
                    None => Event::default().peer,
                },
                ..*orig
            };
            if orig.structured_data.is_some() {
                self.copy_sd(event, orig);
            }
            // Only the timestamp's is read below (no slot is an own field here).
            taken[0] = orig.timestamp.is_some();
        } else {
            for i in 0..OWN.len() {
                if shadow[i] {
                    continue;
                }
                taken[i] = match own_over[i] {
                    // Untouched: as it was. (Every own field an event has is of its own kind,
                    // so none is left over for the record.)
                    None => self.copy_own(event, orig, i),
                    Some(None) => false,
                    Some(Some(v)) => self.own_field_fast(event, orig, i, v, literals),
                };
            }
        }
        if !taken[0] {
            event.timestamp = None;
        }
        // The record: the input record's keys in its order, then new keys in VRL's order.
        let mut entries: Vec<(Field, V)> = std::mem::take(&mut self.scratch_entries);
        entries.clear();
        let mut new: Vec<u32> = std::mem::take(&mut self.scratch_new);
        new.clear();
        {
            let view = ArenaView {
                input: &input.arena,
                extra: &self.extra,
            };
            let current = |name: &[u8]| -> Option<V> {
                let n = Name::of(name);
                for slot in m.overlay.iter().rev() {
                    if slot.name.same(|| view.key(literals, slot.key), n, || name) {
                        return slot.value;
                    }
                }
                original_field(input, orig, name)
            };
            for (j, f) in orig_fields.iter().enumerate() {
                let name = input.str(f.name);
                if orig_fields[..j].iter().any(|g| input.str(g.name) == name) {
                    continue;
                }
                if let Some(v) = current(name) {
                    entries.push((*f, v));
                }
            }
            for (at, slot) in m.overlay.iter().enumerate() {
                if slot.value.is_none() {
                    continue;
                }
                if slot
                    .own
                    .is_some_and(|i| taken[usize::from(i)] || shadow[usize::from(i)])
                {
                    continue;
                }
                if !orig_fields.is_empty() {
                    let name = view.key(literals, slot.key);
                    if orig_fields.iter().any(|f| input.str(f.name) == name) {
                        continue;
                    }
                }
                new.push(at as u32);
            }
            if new.len() > 1 {
                let overlay = &m.overlay[..];
                let slot = |i: u32| overlay.get(i as usize);
                let name = |i: u32| slot(i).map(|s| s.name).unwrap_or_default();
                let memo = &mut self.sorted;
                let same = memo.reusable
                    && memo.names.len() == new.len()
                    && new.iter().zip(&memo.names).all(|(i, n)| name(*i) == *n);
                if !same {
                    memo.names.clear();
                    memo.names.extend(new.iter().map(|i| name(*i)));
                    memo.order.clear();
                    memo.order.extend(0..new.len() as u32);
                    let at = |p: u32| new.get(p as usize).and_then(|i| slot(*i));
                    memo.order.sort_by(|a, b| match (at(*a), at(*b)) {
                        (Some(a), Some(b)) => a.name.order(
                            || view.key(literals, a.key),
                            b.name,
                            || view.key(literals, b.key),
                        ),
                        _ => std::cmp::Ordering::Equal,
                    });
                    memo.reusable = memo.order.windows(2).all(|w| {
                        let pre = |p: u32| memo.names.get(p as usize).map(|n| n.pre());
                        pre(w[0]) != pre(w[1])
                    });
                }
                memo.out.clear();
                memo.out.extend(
                    memo.order
                        .iter()
                        .filter_map(|p| new.get(*p as usize).copied()),
                );
                std::mem::swap(&mut new, &mut memo.out);
            }
        }
        let start = self.fields.len();
        let n = entries.len() + new.len();
        if first {
            // The batch's events are usually alike: room for as many entries each as the first
            // has, rather than growing (and copying) the table a dozen times.
            self.fields.reserve(n * self.input.len());
        }
        // The top level's entries are laid out first (a nested value's children are appended
        // after them), and each is then written in place, field by field: a `Field` made
        // whole and pushed went through the stack in pieces and was copied in wider loads
        // that stalled on those stores (store forwarding), once per field.
        self.fields.resize(
            start + n,
            Field {
                name: Span::EMPTY,
                value: Value::Null,
            },
        );
        let mut i = start;
        for (f, v) in entries.drain(..) {
            let value = self.value_fast(v, Some(f.value), m, literals);
            write_field(&mut self.fields, &mut i, f.name, value);
        }
        for at in &new {
            // Read in place: a copy of the slot went through the stack in pieces too.
            let Some(slot) = m.overlay.get(*at as usize) else {
                continue;
            };
            let Some(v) = &slot.value else {
                continue;
            };
            let name = self.key_span(slot.key, literals);
            // The common kinds are stored from their own arms, straight into the table.
            match v {
                V::Str(s) => write_field(&mut self.fields, &mut i, name, Value::Str(*s)),
                V::Int(n) => write_field(&mut self.fields, &mut i, name, Value::Int(*n)),
                v => {
                    let value = self.value_fast(*v, None, m, literals);
                    write_field(&mut self.fields, &mut i, name, value);
                }
            }
        }
        if i < start + n && self.fields.len() == start + n {
            // Nothing was appended after the top level: the unused entries go.
            self.fields.truncate(i);
        }
        event.fields = (start as u32, i as u32);
        self.events = events;
        self.scratch_entries = entries;
        self.scratch_new = new;
    }

    /// Copies loghaul's own field `i` of `orig` unchanged; whether the event has it.
    fn copy_own(&mut self, event: &mut Event, orig: &Event, i: usize) -> bool {
        match i {
            0 => {
                event.timestamp = orig.timestamp;
                true
            }
            1 => copy_span(&mut event.hostname, orig.hostname),
            2 => copy_span(&mut event.appname, orig.appname),
            3 => copy_span(&mut event.procid, orig.procid),
            4 => copy_span(&mut event.msgid, orig.msgid),
            5 => {
                event.facility = orig.facility.filter(|c| names::facility_name(*c).is_some());
                event.facility.is_some()
            }
            6 => {
                event.severity = orig.severity.filter(|c| names::severity_name(*c).is_some());
                event.severity.is_some()
            }
            7 => {
                event.version = orig.version;
                orig.version.is_some()
            }
            8 => match orig.structured_data {
                Some(_) => {
                    self.copy_sd(event, orig);
                    true
                }
                None => false,
            },
            9 => copy_span(&mut event.message, orig.message),
            10 => match self.input.source_ip(orig) {
                Some(_) => {
                    event.peer = orig.peer;
                    true
                }
                None => false,
            },
            11 => true,
            12 => copy_span(&mut event.tag, orig.tag),
            13 => {
                event.flags = orig.flags;
                !orig.flags.is_empty()
            }
            _ => false,
        }
    }

    fn key_span(&mut self, k: Key, literals: &[Box<[u8]>]) -> Span {
        match k.get() {
            KeyOf::Span(s) => s,
            KeyOf::Lit(i) => self.lit_span(i, literals),
        }
    }

    /// A literal's span, appended once per batch.
    fn lit_span(&mut self, i: u32, literals: &[Box<[u8]>]) -> Span {
        let i = i as usize;
        if self.lits.len() <= i {
            self.lits.resize(i + 1, None);
        }
        if let Some(span) = self.lits[i] {
            return span;
        }
        let bytes = literals.get(i).map_or(&[][..], |b| &b[..]);
        let span = self.text(bytes);
        self.lits[i] = Some(span);
        span
    }

    /// The span of a string value of the fast path.
    fn text_fast(&mut self, v: V, literals: &[Box<[u8]>]) -> Option<Span> {
        match v {
            V::Str(s) | V::Rec(Value::Str(s) | Value::Bytes(s)) => Some(s),
            V::Static(s) => Some(self.text(s)),
            V::Lit(i) => Some(self.lit_span(i, literals)),
            _ => None,
        }
    }

    fn fast_bytes<'s>(&'s self, v: V, literals: &'s [Box<[u8]>]) -> Option<&'s [u8]> {
        let view = ArenaView {
            input: &self.input.arena,
            extra: &self.extra,
        };
        match v {
            V::Str(s) | V::Rec(Value::Str(s) | Value::Bytes(s)) => Some(view.get(s)),
            V::Static(s) => Some(s),
            V::Lit(i) => literals.get(i as usize).map(|b| &b[..]),
            _ => None,
        }
    }

    fn own_field_fast(
        &mut self,
        event: &mut Event,
        orig: &Event,
        i: usize,
        v: V,
        literals: &[Box<[u8]>],
    ) -> bool {
        let input = self.input;
        let name = OWN.get(i).copied().unwrap_or_default();
        match name {
            "timestamp" => {
                let V::Ts(nanos) = v else { return false };
                set_time(event, input, orig, nanos);
                true
            }
            "facility" | "severity" => match self.fast_bytes(v, literals) {
                Some(b) => set_pri(event, name, b),
                None => false,
            },
            "version" => match v {
                V::Int(i) | V::Rec(Value::Int(i)) => set_version(event, i),
                _ => false,
            },
            "structured_data" => match v {
                V::Sd => {
                    self.copy_sd(event, orig);
                    true
                }
                V::Rec(c @ Value::Map(..)) => match value_to_vrl(input, c, 0) {
                    Vrl::Object(obj) => self.structured_data(event, orig, &obj),
                    _ => false,
                },
                _ => false,
            },
            "source_ip" => match v {
                V::Peer => {
                    event.peer = orig.peer;
                    true
                }
                other => match self.fast_bytes(other, literals).map(<[u8]>::to_vec) {
                    Some(b) => self.own_field(event, orig, name, &Vrl::Bytes(Bytes::from(b))),
                    None => false,
                },
            },
            "source_type" => self
                .fast_bytes(v, literals)
                .is_some_and(|b| b == input.source_type.as_bytes()),
            "flags" => match v {
                V::Flags => {
                    event.flags = orig.flags;
                    true
                }
                _ => false,
            },
            name => match self.text_fast(v, literals) {
                Some(span) => match text_slot(event, name) {
                    Some(slot) => {
                        *slot = span.into();
                        true
                    }
                    None => false,
                },
                None => false,
            },
        }
    }

    /// A record value of the fast path, as [`Builder::value`] makes the VRL runtime's.
    fn value_fast(
        &mut self,
        v: V,
        orig: Option<Value>,
        m: &Machine,
        literals: &[Box<[u8]>],
    ) -> Value {
        if let Some(o) = orig
            && !matches!(o, Value::Map(..) | Value::Array(..))
            && self.same_scalar(o, v, literals)
        {
            return o;
        }
        match v {
            V::Str(_) | V::Static(_) | V::Lit(_) | V::Rec(Value::Str(_) | Value::Bytes(_)) => {
                match self.text_fast(v, literals) {
                    Some(span) => Value::Str(span),
                    None => Value::Null,
                }
            }
            V::Int(i) | V::Rec(Value::Int(i)) => Value::Int(i),
            V::Float(f) | V::Rec(Value::Float(f)) if !f.is_nan() => Value::Float(f),
            V::Float(_) | V::Rec(Value::Float(_)) => Value::Null,
            V::Rec(Value::UInt(u)) => Value::Float(u as f64),
            V::Bool(b) | V::Rec(Value::Bool(b)) => Value::Bool(b),
            V::Null | V::Rec(Value::Null) => Value::Null,
            V::Ts(nanos) => {
                let ts = datetime(Timestamp::from_nanos(nanos, 9));
                let text = ts.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
                Value::Str(self.text(text.as_bytes()))
            }
            V::Rec(other) => {
                let vrl = value_to_vrl(self.input, other, 0);
                self.value(&vrl, orig, 0)
            }
            V::Obj(_) | V::Arr(_) => {
                let vrl = self.fast_to_vrl(m, v, literals);
                self.value(&vrl, orig, 0)
            }
            V::Sd | V::Peer | V::Flags => Value::Null,
        }
    }

    /// Whether a scalar of the input record equals a fast-path value as VRL compares them.
    fn same_scalar(&self, o: Value, v: V, literals: &[Box<[u8]>]) -> bool {
        match (o, v) {
            (Value::Str(s) | Value::Bytes(s), v) => self
                .fast_bytes(v, literals)
                .is_some_and(|b| b == self.input.str(s)),
            (Value::Int(a), V::Int(b) | V::Rec(Value::Int(b))) => a == b,
            (Value::UInt(a), V::Float(b)) => (a as f64) == b,
            (Value::UInt(a), V::Rec(Value::UInt(b))) => a == b,
            (Value::Float(a), V::Float(b) | V::Rec(Value::Float(b))) => {
                (a.is_nan() && b.is_nan()) || a == b
            }
            (Value::Float(a), V::Null | V::Rec(Value::Null)) => a.is_nan(),
            (Value::Bool(a), V::Bool(b) | V::Rec(Value::Bool(b))) => a == b,
            (Value::Null, V::Null | V::Rec(Value::Null)) => true,
            (Value::Null, V::Rec(Value::Float(f))) => f.is_nan(),
            (Value::Ext(..), V::Rec(other)) => {
                value_to_vrl(self.input, o, 0) == value_to_vrl(self.input, other, 0)
            }
            _ => false,
        }
    }

    fn fast_to_vrl(&self, m: &Machine, v: V, literals: &[Box<[u8]>]) -> Vrl {
        match v {
            V::Null => Vrl::Null,
            V::Bool(b) => Vrl::Boolean(b),
            V::Int(i) => Vrl::Integer(i),
            V::Float(f) => float(f),
            V::Ts(n) => Vrl::Timestamp(datetime(Timestamp::from_nanos(n, 9))),
            V::Rec(x) => value_to_vrl(self.input, x, 0),
            V::Obj(i) => self.obj_to_vrl(m, i, literals),
            V::Arr(i) => Vrl::Array(
                m.arr(i)
                    .iter()
                    .map(|item| self.fast_to_vrl(m, *item, literals))
                    .collect(),
            ),
            V::Str(_) | V::Static(_) | V::Lit(_) => Vrl::Bytes(Bytes::copy_from_slice(
                self.fast_bytes(v, literals).unwrap_or_default(),
            )),
            V::Sd | V::Peer | V::Flags => Vrl::Null,
        }
    }

    fn obj_to_vrl(&self, m: &Machine, i: u32, literals: &[Box<[u8]>]) -> Vrl {
        let view = ArenaView {
            input: &self.input.arena,
            extra: &self.extra,
        };
        let mut obj = ObjectMap::new();
        for (k, _, v) in m.obj(i) {
            let name = String::from_utf8_lossy(view.key(literals, *k)).into_owned();
            obj.insert(KeyString::from(name), self.fast_to_vrl(m, *v, literals));
        }
        Vrl::Object(obj)
    }

    /// Adds `orig` unchanged (a program that failed on it, when its events go on unchanged).
    pub fn push_unchanged(&mut self, orig: &Event) {
        let value = to_vrl(self.input, orig);
        self.push(orig, &value);
    }

    fn push_object(&mut self, orig: &Event, obj: &ObjectMap) {
        let input = self.input;
        let shadowed = |name: &str| {
            input
                .fields_of(orig)
                .iter()
                .any(|f| input.str(f.name) == name.as_bytes())
        };
        let mut event = Event {
            fields: (0, 0),
            ..Event::default()
        };
        // Keys that become loghaul's own fields are left out of the record.
        let mut taken = [false; OWN.len()];
        for (i, name) in OWN.iter().enumerate() {
            // A key the sender's record had stays in the record, where it was.
            if shadowed(name) {
                continue;
            }
            let Some(value) = obj.get(*name) else {
                continue;
            };
            taken[i] = self.own_field(&mut event, orig, name, value);
        }
        if !taken[0] {
            // No timestamp to write: output writes the batch's receive time, as for events
            // whose sender gave none.
            event.timestamp = None;
        }
        // The record: keys the input record had, in its order, then new keys in VRL's order.
        let orig_fields = input.fields_of(orig);
        let mut entries: Vec<(&str, &Vrl, Option<Field>)> = Vec::with_capacity(obj.len());
        let mut seen = std::collections::HashSet::new();
        for f in orig_fields {
            let name = String::from_utf8_lossy(input.str(f.name));
            if let Some((k, v)) = obj.get_key_value(name.as_ref())
                && seen.insert(k.as_str())
            {
                entries.push((k.as_str(), v, Some(*f)));
            }
        }
        for (k, v) in obj {
            if seen.contains(k.as_str()) {
                continue;
            }
            if let Some(i) = OWN.iter().position(|o| *o == k.as_str())
                && taken[i]
            {
                continue;
            }
            entries.push((k.as_str(), v, None));
        }
        let start = self.fields.len();
        let n = entries.len();
        self.fields.extend(entries.iter().map(|_| Field {
            name: Span::EMPTY,
            value: Value::Null,
        }));
        for (i, (k, v, orig_field)) in entries.into_iter().enumerate() {
            let name = match orig_field {
                Some(f) if input.str(f.name) == k.as_bytes() => f.name,
                _ => self.text(k.as_bytes()),
            };
            let value = self.value(v, orig_field.map(|f| f.value), 0);
            self.fields[start + i] = Field { name, value };
        }
        // The entries just reserved are the top level; nested children come after them.
        event.fields = (start as u32, (start + n) as u32);
        self.events.push(event);
    }

    /// Sets loghaul's own field `name` from `value` when the value is of the field's kind;
    /// returns whether it did (otherwise the key stays in the record, shadowing the field).
    fn own_field(&mut self, event: &mut Event, orig: &Event, name: &str, value: &Vrl) -> bool {
        let input = self.input;
        let text = text_of(value);
        match (name, value) {
            ("timestamp", Vrl::Timestamp(t)) => match t.timestamp_nanos_opt() {
                Some(nanos) => {
                    set_time(event, input, orig, nanos);
                    true
                }
                None => false,
            },
            ("facility" | "severity", _) if let Some(b) = text => set_pri(event, name, b),
            ("version", Vrl::Integer(v)) => set_version(event, *v),
            (name, _) if let (Some(b), Some(_)) = (text, text_slot(event, name)) => {
                let span = self.bytes(b);
                if let Some(slot) = text_slot(event, name) {
                    *slot = span.into();
                }
                true
            }
            ("structured_data", Vrl::Object(obj)) => self.structured_data(event, orig, obj),
            ("source_ip", _) if let Some(b) = text => {
                match std::str::from_utf8(b)
                    .ok()
                    .and_then(|s| s.parse::<IpAddr>().ok())
                {
                    Some(ip) => {
                        event.peer = match self.peers.iter().position(|p| *p == ip) {
                            Some(i) => i as u16,
                            None if self.peers.len() < usize::from(Event::NO_PEER) => {
                                self.peers.push(ip);
                                (self.peers.len() - 1) as u16
                            }
                            None => return false,
                        };
                        true
                    }
                    None => false,
                }
            }
            // The batch says it for every event; a program cannot change it per event.
            ("source_type", _) if let Some(b) = text => b == input.source_type.as_bytes(),
            ("flags", Vrl::Array(items)) => {
                let mut flags = Flags::default();
                for item in items {
                    let Some(b) = text_of(item) else {
                        return false;
                    };
                    match FLAG_NAMES.iter().find(|(_, n)| n.as_bytes() == b) {
                        Some((f, _)) => flags.insert(*f),
                        None => return false,
                    }
                }
                event.flags = flags;
                true
            }
            _ => false,
        }
    }

    /// Gives `event` the structured data of `orig` as it was (its order, escapes, repeated ids).
    fn copy_sd(&mut self, event: &mut Event, orig: &Event) {
        let first = self.sd_elements.len() as u32;
        for el in self.input.sd_elements_of(orig) {
            let p0 = self.sd_params.len() as u32;
            self.sd_params.extend_from_slice(self.input.params_of(el));
            self.sd_elements.push(SdElement {
                id: el.id,
                params: (p0, self.sd_params.len() as u32),
            });
        }
        event.structured_data = Some((first, self.sd_elements.len() as u32));
    }

    /// `structured_data` back into the batch's tables; false when its shape is not SD's (an
    /// object of objects of strings or arrays of strings).
    fn structured_data(&mut self, event: &mut Event, orig: &Event, obj: &ObjectMap) -> bool {
        let shape_ok = obj.values().all(|params| match params {
            Vrl::Object(p) => p.values().all(|v| match v {
                Vrl::Array(items) => items.iter().all(|i| text_of(i).is_some()),
                one => text_of(one).is_some(),
            }),
            _ => false,
        });
        if !shape_ok {
            return false;
        }
        // Unchanged: keep the elements as they were (their order, escapes, repeated ids).
        if orig.structured_data.is_some()
            && structured_data(self.input, self.input.sd_elements_of(orig))
                == Vrl::Object(obj.clone())
        {
            self.copy_sd(event, orig);
            return true;
        }
        let first = self.sd_elements.len() as u32;
        for (id, params) in obj {
            let Vrl::Object(params) = params else {
                continue;
            };
            let id = self.text(id.as_bytes());
            let p0 = self.sd_params.len() as u32;
            for (name, value) in params {
                let name = self.text(name.as_bytes());
                let values: &[Vrl] = match value {
                    Vrl::Array(items) => items,
                    one => std::slice::from_ref(one),
                };
                for v in values {
                    if let Some(b) = text_of(v) {
                        let value = self.bytes(b);
                        self.sd_params.push(SdParam {
                            name,
                            value,
                            escaped: false,
                        });
                    }
                }
            }
            self.sd_elements.push(SdElement {
                id,
                params: (p0, self.sd_params.len() as u32),
            });
        }
        event.structured_data = Some((first, self.sd_elements.len() as u32));
        true
    }

    /// A record value, keeping `orig`'s representation when the program left it as it was.
    pub fn value(&mut self, v: &Vrl, orig: Option<Value>, depth: usize) -> Value {
        if let Some(o) = orig
            && !matches!(o, Value::Map(..) | Value::Array(..))
            && value_to_vrl(self.input, o, depth) == *v
        {
            return o;
        }
        match v {
            Vrl::Bytes(b) => Value::Str(self.bytes(b)),
            Vrl::String(t) => Value::Str(self.bytes(t.as_bytes())),
            Vrl::Regex(r) => Value::Str(self.text(r.as_str().as_bytes())),
            Vrl::Integer(i) => Value::Int(*i),
            Vrl::Float(f) => Value::Float(f.into_inner()),
            Vrl::Boolean(b) => Value::Bool(*b),
            Vrl::Null => Value::Null,
            Vrl::Timestamp(t) => {
                let text = t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
                Value::Str(self.text(text.as_bytes()))
            }
            Vrl::Object(_) | Vrl::Array(_) if depth >= MAX_DEPTH => Value::Null,
            Vrl::Object(obj) => {
                let orig_children: &[Field] = match orig {
                    Some(o @ Value::Map(..)) => self.input.children(o),
                    _ => &[],
                };
                // Keys the input map had, in its order, then new ones.
                let mut entries: Vec<(&str, &Vrl, Option<Field>)> = Vec::with_capacity(obj.len());
                let mut seen = std::collections::HashSet::new();
                for f in orig_children {
                    let name = String::from_utf8_lossy(self.input.str(f.name));
                    if let Some((k, v)) = obj.get_key_value(name.as_ref())
                        && seen.insert(k.as_str())
                    {
                        entries.push((k.as_str(), v, Some(*f)));
                    }
                }
                for (k, v) in obj {
                    if !seen.contains(k.as_str()) {
                        entries.push((k.as_str(), v, None));
                    }
                }
                let start = self.fields.len();
                let n = entries.len();
                self.fields.extend(entries.iter().map(|_| Field {
                    name: Span::EMPTY,
                    value: Value::Null,
                }));
                for (i, (k, v, of)) in entries.into_iter().enumerate() {
                    let name = match of {
                        Some(f) if self.input.str(f.name) == k.as_bytes() => f.name,
                        _ => self.text(k.as_bytes()),
                    };
                    let value = self.value(v, of.map(|f| f.value), depth + 1);
                    self.fields[start + i] = Field { name, value };
                }
                Value::Map(start as u32, (start + n) as u32)
            }
            Vrl::Array(items) => {
                let orig_items: &[Field] = match orig {
                    Some(o @ Value::Array(..)) => self.input.children(o),
                    _ => &[],
                };
                let start = self.fields.len();
                self.fields.extend(items.iter().map(|_| Field {
                    name: Span::EMPTY,
                    value: Value::Null,
                }));
                for (i, item) in items.iter().enumerate() {
                    let of = orig_items.get(i).map(|f| f.value);
                    let value = self.value(item, of, depth + 1);
                    self.fields[start + i] = Field {
                        name: Span::EMPTY,
                        value,
                    };
                }
                Value::Array(start as u32, (start + items.len()) as u32)
            }
        }
    }

    /// The span of `b`: where it already lies in the input's arena (a value the program moved
    /// or left alone), else appended.
    fn bytes(&mut self, b: &[u8]) -> Span {
        let arena = &self.input.arena;
        let base = arena.as_ptr() as usize;
        let at = b.as_ptr() as usize;
        if !b.is_empty() && at >= base && at + b.len() <= base + arena.len() {
            let start = at - base;
            return Span::new(start, start + b.len());
        }
        self.text(b)
    }

    fn text(&mut self, s: &[u8]) -> Span {
        let start = self.input.arena.len() + self.extra.len();
        self.extra.extend_from_slice(s);
        Span::new(start, start + s.len())
    }

    /// The batch: the input's arena with what was appended, the input's finalizer (the source
    /// learns the fate of its events from whichever batches carry them on).
    pub fn finish(self) -> EventBatch {
        let input = self.input;
        let arena = if self.extra.is_empty() {
            input.arena.clone()
        } else {
            // Sixteen zero bytes close it: the text appended here (a program's new keys and
            // literals) lies at the very end, and the JSON encoder reads strings 16 bytes at a
            // time from the arena, taking a slower path for one that ends closer than that.
            let mut arena = Vec::with_capacity(input.arena.len() + self.extra.len() + PAD);
            arena.extend_from_slice(&input.arena);
            arena.extend_from_slice(&self.extra);
            arena.extend_from_slice(&[0; PAD]);
            Bytes::from(arena)
        };
        let mut out = EventBatch::new(arena, input.source.clone(), input.source_type);
        out.events = self.events;
        out.fields = self.fields;
        out.sd_elements = self.sd_elements;
        out.sd_params = self.sd_params;
        out.peers = self.peers;
        out.received = input.received;
        out.finalizer = input.finalizer.clone();
        out
    }
}

/// Zero bytes after an output arena's appended text (see [`Builder::finish`]).
const PAD: usize = 16;

/// The event's time from a program's timestamp: the original one (its digits) when unchanged.
fn set_time(event: &mut Event, input: &EventBatch, orig: &Event, nanos: i64) {
    event.timestamp = if nanos == input.time_of(orig).nanos {
        orig.timestamp
    } else {
        Some(Timestamp::from_nanos_shortest(nanos))
    };
}

/// The event's text field named `name` (`hostname`, `appname`, `procid`, `msgid`, `message`,
/// `tag`).
fn text_slot<'e>(event: &'e mut Event, name: &str) -> Option<&'e mut loghaul_core::OptSpan> {
    Some(match name {
        "hostname" => &mut event.hostname,
        "appname" => &mut event.appname,
        "procid" => &mut event.procid,
        "msgid" => &mut event.msgid,
        "message" => &mut event.message,
        "tag" => &mut event.tag,
        _ => return None,
    })
}

/// Sets `facility` or `severity` from its canonical name; false for any other text.
fn set_pri(event: &mut Event, name: &str, b: &[u8]) -> bool {
    let text = std::str::from_utf8(b).ok();
    let (code, canonical) = if name == "facility" {
        let code = text.and_then(names::facility_code);
        (code, code.and_then(names::facility_name))
    } else {
        let code = text.and_then(names::severity_code);
        (code, code.and_then(names::severity_name))
    };
    match code {
        Some(c) if canonical.is_some_and(|n| n.as_bytes() == b) => {
            if name == "facility" {
                event.facility = Some(c);
            } else {
                event.severity = Some(c);
            }
            true
        }
        _ => false,
    }
}

/// Sets the RFC 5424 version from an integer that fits; false otherwise.
fn set_version(event: &mut Event, v: i64) -> bool {
    match u8::try_from(v) {
        Ok(v) => {
            event.version = Some(v);
            true
        }
        Err(_) => false,
    }
}

/// The index in OWN of a name, if it is one of loghaul's own fields.
fn own_index(name: &[u8]) -> Option<usize> {
    super::fast::own_of(Name::of(name), name).map(usize::from)
}

/// Writes entry `*i` of the output table (laid out before) field by field, and moves on.
/// Inlined, each caller's value is stored where it stays rather than made on the stack and
/// copied in (a store-forwarding stall per field).
#[inline(always)]
fn write_field(fields: &mut [Field], i: &mut usize, name: Span, value: Value) {
    if let Some(slot) = fields.get_mut(*i) {
        slot.name = name;
        slot.value = value;
    }
    *i += 1;
}

/// Copies an optional text field; whether there was one.
fn copy_span(slot: &mut loghaul_core::OptSpan, from: loghaul_core::OptSpan) -> bool {
    *slot = from;
    from.is_some()
}

/// The bytes of a string value.
fn text_of(value: &Vrl) -> Option<&[u8]> {
    match value {
        Vrl::Bytes(b) => Some(b),
        Vrl::String(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn message_only(value: &Vrl) -> ObjectMap {
    let mut obj = ObjectMap::new();
    obj.insert("message".into(), value.clone());
    obj
}
