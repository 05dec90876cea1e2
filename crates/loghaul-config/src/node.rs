//! A format-neutral document tree whose every node remembers where it came from.
//!
//! YAML, TOML and JSON are all parsed into [`Node`]s first; the raw serde types are then
//! deserialized from this tree through [`NodeDe`]. Going through our own tree, instead of each
//! format's serde deserializer, is what gives every error — type errors, unknown keys, and the
//! semantic errors found later by validation — a `line:column`, in every format alike.
//!
//! Invariants: map keys are unique (duplicates are reported when the tree is built) and keep file
//! order; YAML plain scalars stay unresolved ([`Kind::Plain`]) until a type is asked for, so
//! `contains: 404` is the string `"404"` while `max_connections: 404` is the number.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use crate::diagnostic::{Pos, did_you_mean};

/// One value of the document with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The value.
    pub kind: Kind,
    /// Where the value starts, when the format gives positions.
    pub pos: Option<Pos>,
}

/// The value of a [`Node`].
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// An explicit null (`~`, `null`, or an empty YAML value).
    Null,
    /// A boolean from a typed format.
    Bool(bool),
    /// An integer from a typed format.
    Int(i64),
    /// A float from a typed format.
    Float(f64),
    /// A string that was quoted (or is a string by its format's rules).
    Str(String),
    /// A YAML plain scalar whose type depends on what is asked of it.
    Plain(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in file order.
    Map(Vec<Entry>),
}

/// One key of a mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// Where the key starts.
    pub key_pos: Option<Pos>,
    /// The value.
    pub value: Node,
}

/// A YAML 1.2 core-schema plain scalar, resolved.
#[derive(Debug, PartialEq)]
pub(crate) enum Resolved<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

/// Resolves a plain scalar with the YAML 1.2 core schema (not 1.1: `yes` and `on` are strings).
pub(crate) fn resolve_plain(s: &str) -> Resolved<'_> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        _ => {}
    }
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    let int = if let Some(hex) = s.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = s.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(i) = int {
        return Resolved::Int(i);
    }
    let floaty = digits.bytes().any(|b| b.is_ascii_digit())
        && digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if floaty && let Ok(f) = s.parse::<f64>() {
        return Resolved::Float(f);
    }
    Resolved::Str(s)
}

impl Node {
    /// A node without children.
    pub fn new(kind: Kind, pos: Option<Pos>) -> Node {
        Node { kind, pos }
    }

    /// True for nulls, including YAML's empty value.
    pub fn is_null(&self) -> bool {
        match &self.kind {
            Kind::Null => true,
            Kind::Plain(s) => resolve_plain(s) == Resolved::Null,
            _ => false,
        }
    }

    /// The entries when this is a mapping.
    pub fn entries(&self) -> Option<&[Entry]> {
        match &self.kind {
            Kind::Map(e) => Some(e),
            _ => None,
        }
    }

    /// The entry for `key` when this is a mapping.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries()?.iter().find(|e| e.key == key)
    }

    /// A scalar's text, whatever its type.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.kind {
            Kind::Str(s) | Kind::Plain(s) => Some(s.clone()),
            Kind::Int(i) => Some(i.to_string()),
            Kind::Float(f) => Some(f.to_string()),
            Kind::Bool(b) => Some(b.to_string()),
            Kind::Null | Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    /// The node at `path` (map keys, or decimal indexes into sequences), with the position of the
    /// key that leads to it (for sequence elements, the element's own position).
    ///
    /// This is the path → position index validation uses: `["sinks", "archive", "inputs", "1"]`.
    pub fn find(&self, path: &[&str]) -> Option<(Option<Pos>, &Node)> {
        let mut cur = self;
        let mut key_pos = self.pos;
        for seg in path {
            match &cur.kind {
                Kind::Map(entries) => {
                    let e = entries.iter().find(|e| e.key == *seg)?;
                    key_pos = e.key_pos;
                    cur = &e.value;
                }
                Kind::Seq(items) => {
                    cur = items.get(seg.parse::<usize>().ok()?)?;
                    key_pos = cur.pos;
                }
                _ => return None,
            }
        }
        Some((key_pos, cur))
    }

    /// What this node is, for "invalid type" messages.
    fn unexpected(&self) -> de::Unexpected<'_> {
        match &self.kind {
            Kind::Null => de::Unexpected::Unit,
            Kind::Bool(b) => de::Unexpected::Bool(*b),
            Kind::Int(i) => de::Unexpected::Signed(*i),
            Kind::Float(f) => de::Unexpected::Float(*f),
            Kind::Str(s) => de::Unexpected::Str(s),
            Kind::Plain(s) => match resolve_plain(s) {
                Resolved::Null => de::Unexpected::Unit,
                Resolved::Bool(b) => de::Unexpected::Bool(b),
                Resolved::Int(i) => de::Unexpected::Signed(i),
                Resolved::Float(f) => de::Unexpected::Float(f),
                Resolved::Str(s) => de::Unexpected::Str(s),
            },
            Kind::Seq(_) => de::Unexpected::Seq,
            Kind::Map(_) => de::Unexpected::Map,
        }
    }
}

/// An error from deserializing a [`Node`], located at the node that caused it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeError {
    /// What went wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
    /// Where, once known.
    pub pos: Option<Pos>,
    /// Set once a node has claimed the error, so outer nodes leave its position alone.
    located: bool,
    /// The field, for a missing field error: reported at the key that owns the map.
    pub missing: Option<&'static str>,
}

impl DeError {
    /// An error with a known position and hint.
    pub fn at(pos: Option<Pos>, message: impl Into<String>, hint: Option<String>) -> DeError {
        DeError {
            message: message.into(),
            hint,
            pos,
            located: true,
            missing: None,
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            hint: None,
            pos: None,
            located: false,
            missing: None,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        DeError {
            message: format!("missing required field `{field}`"),
            missing: Some(field),
            ..DeError::custom("")
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let hint = match crate::diagnostic::closest(variant, expected.iter().copied()) {
            Some(c) => format!(
                "did you mean '{c}'? accepted values: {}",
                expected.join(", ")
            ),
            None => format!("accepted values: {}", expected.join(", ")),
        };
        DeError {
            message: format!("unknown value `{variant}`"),
            hint: Some(hint),
            ..DeError::custom("")
        }
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        <DeError as de::Error>::invalid_type(unexp, exp)
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        // serde names Rust types ("expected usize"); say what to write instead.
        let expected = match exp.to_string().as_str() {
            "usize" | "u64" | "u32" | "u16" | "u8" => "a non-negative integer".to_owned(),
            "i64" | "i32" => "an integer".to_owned(),
            "a boolean" => "true or false".to_owned(),
            "a sequence" => "a list".to_owned(),
            other => other.to_owned(),
        };
        let got = match unexp {
            de::Unexpected::Unit => "null (nothing)".to_owned(),
            de::Unexpected::Seq => "a list".to_owned(),
            de::Unexpected::Map => "a map".to_owned(),
            other => other.to_string(),
        };
        DeError::custom(format!("expected {expected}, found {got}"))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        // A Fluentd user's spelling names loghaul's key, where this map has it.
        let fluentd = FLUENTD_SPELLINGS
            .iter()
            .find(|(theirs, ours, _)| *theirs == field && expected.contains(ours))
            .map(|(_, ours, why)| {
                format!("`{field}` is Fluentd's name; loghaul's is '{ours}'{why}")
            });
        DeError {
            message: format!("unknown key `{field}`"),
            hint: Some(fluentd.unwrap_or_else(|| did_you_mean(field, expected, "valid keys"))),
            ..DeError::custom("")
        }
    }
}

/// Fluentd's names for keys loghaul spells otherwise (`out_forward`, `<transport tls>`), with
/// loghaul's and what to know: the hint an unknown key gets where its map has loghaul's key.
const FLUENTD_SPELLINGS: &[(&str, &str, &str)] = &[
    ("require_ack_response", "require_ack", ""),
    ("ack_response_timeout", "ack_timeout", ""),
    ("compress", "compression", " (`gzip`)"),
    ("tls_cert_path", "ca", " (the CA certificate to trust)"),
    ("ca_path", "ca", ""),
    ("cert_path", "cert", ""),
    ("tls_client_cert_path", "cert", ""),
    ("private_key_path", "key", ""),
    ("tls_client_private_key_path", "key", ""),
    ("client_cert_auth", "verify_client", ""),
    ("tls_verify_hostname", "verify_hostname", " (in `tls`)"),
    (
        "tls_allow_self_signed_cert",
        "ca",
        " (give the server's own certificate: it is trusted as it is)",
    ),
];

/// Unknown keys found while deserializing; recorded instead of returned so one typo does not hide
/// the rest of the component's errors.
pub type Extra = RefCell<Vec<DeError>>;

/// A serde `Deserializer` over a [`Node`].
pub struct NodeDe<'a> {
    node: &'a Node,
    key: Option<&'a str>,
    key_pos: Option<Pos>,
    skip: &'a [&'a str],
    extra: &'a Extra,
}

impl<'a> NodeDe<'a> {
    /// A deserializer for `node`, whose owning key (if any) is at `key_pos`. Keys in `skip` are
    /// ignored in the top-level map (the component loader uses it for `type`).
    pub fn new(
        node: &'a Node,
        key_pos: Option<Pos>,
        skip: &'a [&'a str],
        extra: &'a Extra,
    ) -> Self {
        NodeDe {
            node,
            key: None,
            key_pos,
            skip,
            extra,
        }
    }

    /// Names the key this node is the value of, so value errors can say which key they are about.
    pub fn with_key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }

    fn locate(&self, mut e: DeError) -> DeError {
        if !e.located {
            e.pos = if e.missing.is_some() {
                self.key_pos.or(self.node.pos)
            } else {
                self.node.pos
            };
            e.located = true;
            if let (None, Some(key)) = (e.missing, self.key) {
                e.message = format!("`{key}`: {}", e.message);
            }
        }
        e
    }

    fn invalid_type(&self, exp: &dyn de::Expected) -> DeError {
        self.locate(de::Error::invalid_type(self.node.unexpected(), exp))
    }

    fn visit_map_entries<'de, V: Visitor<'de>>(
        &self,
        entries: Vec<&'a Entry>,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let access = MapAccess {
            entries: entries.into_iter(),
            value: None,
            extra: self.extra,
        };
        visitor.visit_map(access).map_err(|e| self.locate(e))
    }
}

macro_rules! forward_to_any {
    ($($m:ident)*) => {$(
        fn $m<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            self.deserialize_any(visitor)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.node.kind {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(*b),
            Kind::Int(i) => visitor.visit_i64(*i),
            Kind::Float(f) => visitor.visit_f64(*f),
            Kind::Str(s) => visitor.visit_str(s),
            Kind::Plain(s) => match resolve_plain(s) {
                Resolved::Null => visitor.visit_unit(),
                Resolved::Bool(b) => visitor.visit_bool(b),
                Resolved::Int(i) => visitor.visit_i64(i),
                Resolved::Float(f) => visitor.visit_f64(f),
                Resolved::Str(s) => visitor.visit_str(s),
            },
            Kind::Seq(items) => {
                let access = SeqAccess {
                    items: items.iter(),
                    extra: self.extra,
                };
                visitor.visit_seq(access)
            }
            Kind::Map(entries) => return self.visit_map_entries(entries.iter().collect(), visitor),
        };
        r.map_err(|e| self.locate(e))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            // A plain scalar asked for as a string is the string it reads as, `404` included.
            Kind::Str(s) | Kind::Plain(s) => visitor.visit_str(s).map_err(|e| self.locate(e)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.node.is_null() {
            visitor.visit_none().map_err(|e| self.locate(e))
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let Kind::Map(entries) = &self.node.kind else {
            if self.node.is_null() {
                // `api:` with nothing under it means "all defaults", as an empty map would.
                return self.visit_map_entries(Vec::new(), visitor);
            }
            return Err(self.invalid_type(&"a map"));
        };
        let mut kept = Vec::with_capacity(entries.len());
        for e in entries {
            if self.skip.contains(&e.key.as_str()) {
                continue;
            }
            if fields.contains(&e.key.as_str()) {
                kept.push(e);
            } else {
                let mut err: DeError = de::Error::unknown_field(&e.key, fields);
                err.pos = e.key_pos;
                err.located = true;
                self.extra.borrow_mut().push(err);
            }
        }
        self.visit_map_entries(kept, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Str(s) | Kind::Plain(s) => {
                let d: de::value::StrDeserializer<'_, DeError> = s.as_str().into_deserializer();
                visitor.visit_enum(d).map_err(|e| self.locate(e))
            }
            _ => {
                let mut e = self.invalid_type(&"a string");
                e.hint = Some(format!("accepted values: {}", variants.join(", ")));
                Err(e)
            }
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    forward_to_any! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char deserialize_bytes deserialize_byte_buf
        deserialize_unit deserialize_seq deserialize_map
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_any(v)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, v: V) -> Result<V::Value, DeError> {
        self.deserialize_any(v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        v: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_any(v)
    }
}

struct SeqAccess<'a> {
    items: std::slice::Iter<'a, Node>,
    extra: &'a Extra,
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some(node) => seed
                .deserialize(NodeDe::new(node, node.pos, &[], self.extra))
                .map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapAccess<'a> {
    entries: std::vec::IntoIter<&'a Entry>,
    value: Option<&'a Entry>,
    extra: &'a Extra,
}

impl<'de> de::MapAccess<'de> for MapAccess<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(entry);
        let d: de::value::StrDeserializer<'_, DeError> = entry.key.as_str().into_deserializer();
        seed.deserialize(d).map(Some).map_err(|mut e| {
            if !e.located {
                e.pos = entry.key_pos;
                e.located = true;
            }
            e
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some(e) => {
                seed.deserialize(NodeDe::new(&e.value, e.key_pos, &[], self.extra).with_key(&e.key))
            }
            None => Err(de::Error::custom("value asked for before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn core_schema() {
        assert_eq!(resolve_plain("~"), Resolved::Null);
        assert_eq!(resolve_plain(""), Resolved::Null);
        assert_eq!(resolve_plain("True"), Resolved::Bool(true));
        assert_eq!(resolve_plain("yes"), Resolved::Str("yes"));
        assert_eq!(resolve_plain("-12"), Resolved::Int(-12));
        assert_eq!(resolve_plain("0x1f"), Resolved::Int(31));
        assert_eq!(resolve_plain("1.5"), Resolved::Float(1.5));
        assert_eq!(resolve_plain("30s"), Resolved::Str("30s"));
        assert_eq!(resolve_plain("1e3"), Resolved::Float(1000.0));
        assert_eq!(resolve_plain("127.0.0.1:80"), Resolved::Str("127.0.0.1:80"));
        assert_eq!(resolve_plain("inf"), Resolved::Str("inf"));
    }
}
