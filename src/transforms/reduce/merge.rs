//! Vector's merge strategies: how the values one field takes across a group's events become
//! the merged event's value.
//!
//! A field's merger is made from its first value (by its strategy, or by the default for the
//! value's type) and given every later value. Defaults, as Vector's: numbers are summed,
//! timestamps keep the first (and the last goes to `FIELD_end`), anything else keeps the
//! first. One exception of loghaul's: `version` (the RFC 5424 header's, an integer) keeps the
//! first, as a sum of protocol versions means nothing.
//!
//! Values are held as owned VRL values (their bytes copied out of the input batches, so a
//! group pins no input arena), and each merger knows roughly what it holds, for the memory
//! budget.

use std::collections::HashSet;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use vrl::value::{ObjectMap, Value as Vrl};

/// A merge strategy, by Vector's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Keep the first value.
    Discard,
    /// Keep the last value that is not null.
    Retain,
    Sum,
    Max,
    Min,
    /// Every value, in an array.
    Array,
    /// Strings joined by a space; arrays concatenated.
    Concat,
    /// Strings joined by a newline.
    ConcatNewline,
    /// Strings joined with nothing between them.
    ConcatRaw,
    ShortestArray,
    LongestArray,
    /// Every distinct value, arrays and objects flattened one level, in an array.
    FlatUnique,
}

impl Strategy {
    pub const NAMES: [(&'static str, Strategy); 12] = [
        ("discard", Strategy::Discard),
        ("retain", Strategy::Retain),
        ("sum", Strategy::Sum),
        ("max", Strategy::Max),
        ("min", Strategy::Min),
        ("array", Strategy::Array),
        ("concat", Strategy::Concat),
        ("concat_newline", Strategy::ConcatNewline),
        ("concat_raw", Strategy::ConcatRaw),
        ("shortest_array", Strategy::ShortestArray),
        ("longest_array", Strategy::LongestArray),
        ("flat_unique", Strategy::FlatUnique),
    ];

    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
    }
}

/// A running sum, minimum or maximum: integers until a float comes (Vector's precision rule).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(v: &Vrl) -> Option<Num> {
        match v {
            Vrl::Integer(i) => Some(Num::Int(*i)),
            Vrl::Float(f) => Some(Num::Float(f.into_inner())),
            _ => None,
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn value(self) -> Vrl {
        match self {
            Num::Int(i) => Vrl::Integer(i),
            Num::Float(f) => Vrl::from_f64_or_zero(f),
        }
    }
}

/// How one field's values are being merged.
#[derive(Clone, Debug)]
pub enum Merger {
    First(Vrl),
    Retain(Vrl),
    Sum(Num),
    Max(Num),
    Min(Num),
    Array(Vec<Vrl>),
    Concat {
        text: Vec<u8>,
        separator: &'static [u8],
    },
    ConcatArray(Vec<Vrl>),
    ShortestArray(Vec<Vrl>),
    LongestArray(Vec<Vrl>),
    FlatUnique {
        seen: HashSet<u128>,
        values: Vec<Vrl>,
    },
    /// A timestamp's first and last values.
    Window {
        first: DateTime<Utc>,
        last: DateTime<Utc>,
    },
}

fn expected(what: &str, v: &Vrl) -> String {
    format!("expected {what}, found {}", v.kind_str())
}

impl Merger {
    /// The default merger of field `name` whose first value is `v` (`version`, the syslog
    /// header's, is no quantity: it keeps the first).
    pub fn default_for(name: &str, v: Vrl) -> Merger {
        match v {
            Vrl::Integer(_) if name == "version" => Merger::First(v),
            Vrl::Integer(_) | Vrl::Float(_) => {
                Num::of(&v).map_or(Merger::First(Vrl::Null), Merger::Sum)
            }
            Vrl::Timestamp(t) => Merger::Window { first: t, last: t },
            other => Merger::First(other),
        }
    }

    /// The merger `strategy` makes of a first value `v`.
    ///
    /// # Errors
    ///
    /// The strategy cannot take a value of that type (`sum` of a string).
    pub fn new(strategy: Strategy, v: Vrl) -> Result<Merger, String> {
        Ok(match strategy {
            Strategy::Discard => Merger::First(v),
            Strategy::Retain => Merger::Retain(v),
            Strategy::Sum => Merger::Sum(Num::of(&v).ok_or_else(|| expected("a number", &v))?),
            Strategy::Max => Merger::Max(Num::of(&v).ok_or_else(|| expected("a number", &v))?),
            Strategy::Min => Merger::Min(Num::of(&v).ok_or_else(|| expected("a number", &v))?),
            Strategy::Array => Merger::Array(vec![v]),
            Strategy::Concat => match v {
                Vrl::Array(items) => Merger::ConcatArray(items),
                other => Merger::Concat {
                    text: string(&other).ok_or_else(|| expected("a string or an array", &other))?,
                    separator: b" ",
                },
            },
            Strategy::ConcatNewline | Strategy::ConcatRaw => Merger::Concat {
                text: string(&v).ok_or_else(|| expected("a string", &v))?,
                separator: if strategy == Strategy::ConcatNewline {
                    b"\n"
                } else {
                    b""
                },
            },
            Strategy::ShortestArray | Strategy::LongestArray => match v {
                Vrl::Array(items) if strategy == Strategy::ShortestArray => {
                    Merger::ShortestArray(items)
                }
                Vrl::Array(items) => Merger::LongestArray(items),
                other => return Err(expected("an array", &other)),
            },
            Strategy::FlatUnique => {
                let mut m = Merger::FlatUnique {
                    seen: HashSet::new(),
                    values: Vec::new(),
                };
                m.add(v)?;
                m
            }
        })
    }

    /// Merges a later value in.
    ///
    /// # Errors
    ///
    /// The merger cannot take a value of that type; it is left as it was.
    pub fn add(&mut self, v: Vrl) -> Result<(), String> {
        match self {
            Merger::First(_) => {}
            Merger::Retain(old) => {
                if v != Vrl::Null {
                    *old = v;
                }
            }
            Merger::Sum(n) => {
                let add = Num::of(&v).ok_or_else(|| expected("a number", &v))?;
                *n = match (*n, add) {
                    (Num::Int(a), Num::Int(b)) => Num::Int(a.wrapping_add(b)),
                    (a, b) => Num::Float(a.float() + b.float()),
                };
            }
            Merger::Max(n) => extreme(n, &v, true)?,
            Merger::Min(n) => extreme(n, &v, false)?,
            Merger::Array(items) => items.push(v),
            Merger::Concat { text, separator } => {
                let s = string(&v).ok_or_else(|| expected("a string", &v))?;
                text.extend_from_slice(separator);
                text.extend_from_slice(&s);
            }
            Merger::ConcatArray(items) => match v {
                Vrl::Array(more) => items.extend(more),
                other => items.push(other),
            },
            Merger::ShortestArray(items) => match v {
                Vrl::Array(a) if a.len() < items.len() => *items = a,
                Vrl::Array(_) => {}
                other => return Err(expected("an array", &other)),
            },
            Merger::LongestArray(items) => match v {
                Vrl::Array(a) if a.len() > items.len() => *items = a,
                Vrl::Array(_) => {}
                other => return Err(expected("an array", &other)),
            },
            Merger::FlatUnique { seen, values } => {
                let mut insert = |v: Vrl| {
                    let mut h = xxhash_rust::xxh3::Xxh3::new();
                    crate::transforms::dedupe::feed(&mut h, &v);
                    if seen.insert(h.digest128()) {
                        values.push(v);
                    }
                };
                match v {
                    Vrl::Object(obj) => obj.into_values().for_each(&mut insert),
                    Vrl::Array(items) => items.into_iter().for_each(&mut insert),
                    other => insert(other),
                }
            }
            Merger::Window { last, .. } => match v {
                Vrl::Timestamp(t) => *last = t,
                other => return Err(expected("a timestamp", &other)),
            },
        }
        Ok(())
    }

    /// Writes the merged value into `obj` under `key` (and a timestamp's last value under
    /// `KEY_end`).
    pub fn insert_into(self, obj: &mut ObjectMap, key: &str) {
        let value = match self {
            Merger::First(v) | Merger::Retain(v) => v,
            Merger::Sum(n) | Merger::Max(n) | Merger::Min(n) => n.value(),
            Merger::Array(items)
            | Merger::ConcatArray(items)
            | Merger::ShortestArray(items)
            | Merger::LongestArray(items)
            | Merger::FlatUnique { values: items, .. } => Vrl::Array(items),
            Merger::Concat { text, .. } => Vrl::Bytes(Bytes::from(text)),
            Merger::Window { first, last } => {
                obj.insert(format!("{key}_end").into(), Vrl::Timestamp(last));
                Vrl::Timestamp(first)
            }
        };
        obj.insert(key.into(), value);
    }

    /// Roughly the bytes it holds.
    pub fn bytes(&self) -> usize {
        const BASE: usize = 48;
        BASE + match self {
            Merger::First(v) | Merger::Retain(v) => value_bytes(v),
            Merger::Sum(_) | Merger::Max(_) | Merger::Min(_) | Merger::Window { .. } => 0,
            Merger::Array(items)
            | Merger::ConcatArray(items)
            | Merger::ShortestArray(items)
            | Merger::LongestArray(items) => items.iter().map(value_bytes).sum(),
            Merger::FlatUnique { values, .. } => values.iter().map(|v| value_bytes(v) + 32).sum(),
            Merger::Concat { text, .. } => text.capacity(),
        }
    }
}

/// Keeps the larger (`max`) or smaller of `n` and `v`; an integer compared with a float
/// becomes a float if it wins (Vector's).
fn extreme(n: &mut Num, v: &Vrl, max: bool) -> Result<(), String> {
    let other = Num::of(v).ok_or_else(|| expected("a number", v))?;
    let wins = match (*n, other) {
        (Num::Int(a), Num::Int(b)) => {
            if max {
                b > a
            } else {
                b < a
            }
        }
        (a, b) => {
            if max {
                b.float() > a.float()
            } else {
                b.float() < a.float()
            }
        }
    };
    if wins {
        *n = match (*n, other) {
            (Num::Float(_), Num::Int(i)) => Num::Float(i as f64),
            (_, b) => b,
        };
    }
    Ok(())
}

/// The bytes of a string value.
fn string(v: &Vrl) -> Option<Vec<u8>> {
    match v {
        Vrl::Bytes(b) => Some(b.to_vec()),
        Vrl::String(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

/// Roughly what a value holds.
pub fn value_bytes(v: &Vrl) -> usize {
    const VALUE: usize = 40;
    VALUE
        + match v {
            Vrl::Bytes(b) => b.len(),
            Vrl::String(s) => s.as_bytes().len(),
            Vrl::Object(obj) => obj.iter().map(|(k, v)| k.len() + 24 + value_bytes(v)).sum(),
            Vrl::Array(items) => items.iter().map(value_bytes).sum(),
            _ => 0,
        }
}

/// `v` with every string copied out of whatever buffer it was a slice of (an input batch's
/// arena), so that holding it pins nothing else.
pub fn owned(v: Vrl) -> Vrl {
    match v {
        Vrl::Bytes(b) => Vrl::Bytes(Bytes::copy_from_slice(&b)),
        Vrl::Object(obj) => Vrl::Object(obj.into_iter().map(|(k, v)| (k, owned(v))).collect()),
        Vrl::Array(items) => Vrl::Array(items.into_iter().map(owned).collect()),
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Vector's table of which strategy takes which first value, and what merging two values
    //! gives.

    use super::*;

    fn merge(a: Vrl, b: Vrl, s: Strategy) -> Result<Vrl, String> {
        let mut m = Merger::new(s, a)?;
        m.add(b)?;
        let mut obj = ObjectMap::new();
        m.insert_into(&mut obj, "out");
        Ok(obj.remove("out").unwrap())
    }

    fn json(v: serde_json::Value) -> Vrl {
        Vrl::from(v)
    }

    #[test]
    fn which_strategy_takes_which_first_value() {
        use Strategy::*;
        let now = Vrl::Timestamp(Utc::now());
        // (value, strategies that take it) as Vector's `initial_values` test has it.
        let all = [
            Discard,
            Retain,
            Sum,
            Max,
            Min,
            Array,
            Concat,
            ConcatNewline,
            ConcatRaw,
            ShortestArray,
            LongestArray,
            FlatUnique,
        ];
        let cases: [(Vrl, &[Strategy]); 7] = [
            (
                Vrl::from("foo"),
                &[
                    Discard,
                    Retain,
                    Array,
                    Concat,
                    ConcatNewline,
                    ConcatRaw,
                    FlatUnique,
                ],
            ),
            (
                Vrl::from(42),
                &[Discard, Retain, Sum, Max, Min, Array, FlatUnique],
            ),
            (
                Vrl::from_f64_or_zero(4.2),
                &[Discard, Retain, Sum, Max, Min, Array, FlatUnique],
            ),
            (Vrl::from(true), &[Discard, Retain, Array, FlatUnique]),
            (now, &[Discard, Retain, Array, FlatUnique]),
            (
                json(serde_json::json!([])),
                &[
                    Discard,
                    Retain,
                    Array,
                    Concat,
                    ShortestArray,
                    LongestArray,
                    FlatUnique,
                ],
            ),
            (
                json(serde_json::json!({})),
                &[Discard, Retain, Array, FlatUnique],
            ),
        ];
        for (value, takes) in cases {
            for s in all {
                assert_eq!(
                    Merger::new(s, value.clone()).is_ok(),
                    takes.contains(&s),
                    "{s:?} of {value:?}"
                );
            }
        }
        assert!(Merger::new(Strategy::Retain, Vrl::Null).is_ok());
    }

    #[test]
    fn merging_two_values() {
        use Strategy::*;
        let s = |v: &str| Vrl::from(v);
        assert_eq!(merge(s("foo"), s("bar"), Discard), Ok(s("foo")));
        assert_eq!(merge(s("foo"), s("bar"), Retain), Ok(s("bar")));
        assert_eq!(merge(s("foo"), Vrl::Null, Retain), Ok(s("foo")));
        assert_eq!(
            merge(s("foo"), s("bar"), Array),
            Ok(json(serde_json::json!(["foo", "bar"])))
        );
        assert_eq!(merge(s("foo"), s("bar"), Concat), Ok(s("foo bar")));
        assert_eq!(merge(s("foo"), s("bar"), ConcatNewline), Ok(s("foo\nbar")));
        assert_eq!(merge(s("foo"), s("bar"), ConcatRaw), Ok(s("foobar")));
        assert!(merge(s("foo"), Vrl::from(42), Concat).is_err());
        assert_eq!(merge(Vrl::from(21), Vrl::from(21), Sum), Ok(Vrl::from(42)));
        assert_eq!(
            merge(Vrl::from(1), Vrl::from_f64_or_zero(0.5), Sum),
            Ok(Vrl::from_f64_or_zero(1.5)),
            "a float makes the sum a float"
        );
        assert_eq!(merge(Vrl::from(41), Vrl::from(42), Max), Ok(Vrl::from(42)));
        assert_eq!(merge(Vrl::from(42), Vrl::from(41), Max), Ok(Vrl::from(42)));
        assert_eq!(merge(Vrl::from(42), Vrl::from(43), Min), Ok(Vrl::from(42)));
        assert_eq!(merge(Vrl::from(43), Vrl::from(42), Min), Ok(Vrl::from(42)));
        let a = |v: serde_json::Value| json(v);
        assert_eq!(
            merge(a(serde_json::json!([4])), a(serde_json::json!([2])), Concat),
            Ok(a(serde_json::json!([4, 2])))
        );
        assert_eq!(
            merge(
                a(serde_json::json!([34])),
                a(serde_json::json!([42, 43])),
                ShortestArray
            ),
            Ok(a(serde_json::json!([34])))
        );
        assert_eq!(
            merge(
                a(serde_json::json!([34])),
                a(serde_json::json!([42, 43])),
                LongestArray
            ),
            Ok(a(serde_json::json!([42, 43])))
        );
        assert_eq!(
            merge(
                a(serde_json::json!([1, 2])),
                a(serde_json::json!({"x": 2, "y": 3})),
                FlatUnique
            ),
            Ok(a(serde_json::json!([1, 2, 3])))
        );
        let (t1, t2) = (Utc::now(), Utc::now() + chrono::Duration::seconds(5));
        let mut m = Merger::default_for("timestamp", Vrl::Timestamp(t1));
        m.add(Vrl::Timestamp(t2)).unwrap();
        let mut obj = ObjectMap::new();
        m.insert_into(&mut obj, "timestamp");
        assert_eq!(obj.get("timestamp"), Some(&Vrl::Timestamp(t1)));
        assert_eq!(obj.get("timestamp_end"), Some(&Vrl::Timestamp(t2)));
        let mut v = Merger::default_for("version", Vrl::from(1));
        v.add(Vrl::from(1)).unwrap();
        let mut n = Merger::default_for("n", Vrl::from(1));
        n.add(Vrl::from(1)).unwrap();
        assert!(matches!(
            (v, n),
            (Merger::First(_), Merger::Sum(Num::Int(2)))
        ));
    }
}
