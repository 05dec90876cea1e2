//! TOML → [`Node`], using `toml`'s spanned document tree so keys and values keep positions.
//!
//! TOML is typed, so its scalars become typed nodes (`Kind::Str`, `Kind::Int`...), never
//! [`Kind::Plain`]; datetimes become strings (no field of ours takes one, and the type error then
//! reads naturally).

use toml::de::{DeTable, DeValue};

use crate::diagnostic::Pos;
use crate::node::{Entry, Kind, Node};

/// Maps byte offsets to 1-based line and character column.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    /// Indexes `text`'s line starts.
    pub(crate) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    /// The position of byte `offset` (clamped to the text).
    pub(crate) fn pos(&self, offset: usize) -> Pos {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|s| *s <= offset).max(1);
        let start = self.starts[line - 1];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count())
            + 1;
        Pos::new(line, column)
    }
}

/// Parses a TOML document.
///
/// # Errors
///
/// The syntax error, with its position and the parser's message.
pub fn parse(text: &str) -> Result<Node, (Option<Pos>, String)> {
    let index = LineIndex::new(text);
    match DeTable::parse(text) {
        Ok(table) => {
            let span = table.span();
            Ok(table_node(
                table.into_inner(),
                Some(index.pos(span.start)),
                &index,
            ))
        }
        Err(e) => {
            let pos = e.span().map(|s| index.pos(s.start));
            Err((
                pos,
                format!("TOML syntax error: {}", e.message().trim_end()),
            ))
        }
    }
}

fn table_node(table: DeTable<'_>, pos: Option<Pos>, index: &LineIndex<'_>) -> Node {
    let entries = table
        .into_iter()
        .map(|(k, v)| {
            let key_pos = Some(index.pos(k.span().start));
            Entry {
                key: k.into_inner().into_owned(),
                key_pos,
                value: value_node(v, index),
            }
        })
        .collect();
    Node::new(Kind::Map(entries), pos)
}

fn value_node(v: toml::Spanned<DeValue<'_>>, index: &LineIndex<'_>) -> Node {
    let pos = Some(index.pos(v.span().start));
    let kind = match v.into_inner() {
        DeValue::String(s) => Kind::Str(s.into_owned()),
        DeValue::Integer(i) => match i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()) {
            Ok(n) => Kind::Int(n),
            Err(_) => Kind::Str(i.as_str().to_owned()),
        },
        DeValue::Float(f) => match f.as_str().replace('_', "").parse::<f64>() {
            Ok(n) => Kind::Float(n),
            Err(_) => Kind::Str(f.as_str().to_owned()),
        },
        DeValue::Boolean(b) => Kind::Bool(b),
        DeValue::Datetime(d) => Kind::Str(d.to_string()),
        DeValue::Array(a) => Kind::Seq(a.into_iter().map(|e| value_node(e, index)).collect()),
        DeValue::Table(t) => return table_node(t, pos, index),
    };
    Node::new(kind, pos)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn spans_become_positions() {
        let n = parse("a = 1\n[sinks.archive]\ninputs = [\"x\", \"y\"]\n").unwrap();
        let (kp, v) = n.find(&["sinks", "archive", "inputs"]).unwrap();
        assert_eq!(kp, Some(Pos::new(3, 1)));
        assert_eq!(v.pos, Some(Pos::new(3, 10)));
        assert_eq!(n.find(&["a"]).unwrap().1.kind, Kind::Int(1));
        assert_eq!(
            n.find(&["sinks", "archive"]).unwrap().0,
            Some(Pos::new(2, 8))
        );
    }

    #[test]
    fn syntax_error_has_position() {
        let (pos, msg) = parse("a = 1\nb = [\n").unwrap_err();
        assert!(pos.is_some());
        assert!(msg.starts_with("TOML syntax error"), "{msg}");
    }

    #[test]
    fn line_index() {
        let i = LineIndex::new("ab\nçd\n");
        assert_eq!(i.pos(0), Pos::new(1, 1));
        assert_eq!(i.pos(3), Pos::new(2, 1));
        assert_eq!(i.pos(5), Pos::new(2, 2));
    }
}
