//! YAML → [`Node`], the one place that knows which YAML crate we use.
//!
//! `serde_yaml` is archived; we read events from `saphyr-parser` (maintained, YAML 1.2, gives
//! line and column for every event) and build the located tree ourselves. Anchors and aliases are
//! expanded; tags other than `!!str` are ignored; a second document is an error, because a config
//! split over two documents is almost certainly a mistake.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::diagnostic::Pos;
use crate::node::{Entry, Kind, Node};

/// A problem found while reading YAML: a syntax error or a duplicate key.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    /// Where.
    pub pos: Option<Pos>,
    /// What.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

fn pos(span: &Span) -> Option<Pos> {
    // saphyr's lines are 1-based and its columns 0-based.
    Some(Pos::new(span.start.line(), span.start.col() + 1))
}

/// A collection being built.
enum Frame {
    Seq {
        node: Node,
        anchor: usize,
    },
    Map {
        node: Node,
        anchor: usize,
        key: Option<(String, Option<Pos>)>,
    },
}

/// Parses one YAML document into a [`Node`]; an empty document is [`Kind::Null`].
///
/// Syntax errors stop the parse (there is nothing sensible to recover); duplicate keys do not,
/// and are all returned.
pub fn parse(text: &str) -> Result<Node, Vec<YamlError>> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut errors = Vec::new();
    let mut documents = 0usize;

    for item in Parser::new_from_str(text) {
        let (event, span) = match item {
            Ok(ok) => ok,
            Err(e) => {
                let m = e.marker();
                errors.push(YamlError {
                    pos: Some(Pos::new(m.line(), m.col() + 1)),
                    message: format!("YAML syntax error: {}", e.info()),
                    hint: Some("check the indentation and quoting around this point".to_owned()),
                });
                return Err(errors);
            }
        };
        let finished = match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    errors.push(YamlError {
                        pos: pos(&span),
                        message: "a config file holds one YAML document; found a second".to_owned(),
                        hint: Some("remove the `---` line, or merge the documents".to_owned()),
                    });
                    return Err(errors);
                }
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let is_str_tag = tag
                    .as_ref()
                    .is_some_and(|t| t.handle == "tag:yaml.org,2002:" && t.suffix == "str")
                    || tag
                        .as_ref()
                        .is_some_and(|t| t.handle == "!!" && t.suffix == "str");
                let kind = if style == ScalarStyle::Plain && !is_str_tag {
                    Kind::Plain(value.into_owned())
                } else {
                    Kind::Str(value.into_owned())
                };
                let node = Node::new(kind, pos(&span));
                if anchor != 0 {
                    anchors.insert(anchor, node.clone());
                }
                Some(node)
            }
            Event::Alias(id) => match anchors.get(&id) {
                Some(n) => {
                    let mut n = n.clone();
                    n.pos = pos(&span);
                    Some(n)
                }
                None => {
                    errors.push(YamlError {
                        pos: pos(&span),
                        message: "alias to an unknown anchor".to_owned(),
                        hint: None,
                    });
                    return Err(errors);
                }
            },
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq {
                    node: Node::new(Kind::Seq(Vec::new()), pos(&span)),
                    anchor,
                });
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map {
                    node: Node::new(Kind::Map(Vec::new()), pos(&span)),
                    anchor,
                    key: None,
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::Seq { node, anchor } | Frame::Map { node, anchor, .. }) => {
                    if anchor != 0 {
                        anchors.insert(anchor, node.clone());
                    }
                    Some(node)
                }
                None => None,
            },
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => None,
        };
        if let Some(node) = finished {
            attach(&mut stack, &mut root, node, &mut errors);
        }
    }
    if errors.is_empty() {
        Ok(root.unwrap_or(Node::new(Kind::Null, Some(Pos::new(1, 1)))))
    } else {
        Err(errors)
    }
}

/// Hands a finished node to its parent: a sequence element, a map key, or a map value.
fn attach(stack: &mut [Frame], root: &mut Option<Node>, node: Node, errors: &mut Vec<YamlError>) {
    match stack.last_mut() {
        None => *root = Some(node),
        Some(Frame::Seq { node: parent, .. }) => {
            if let Kind::Seq(items) = &mut parent.kind {
                items.push(node);
            }
        }
        Some(Frame::Map {
            node: parent, key, ..
        }) => match key.take() {
            None => {
                let text = match node.kind {
                    Kind::Str(s) | Kind::Plain(s) => s,
                    _ => {
                        errors.push(YamlError {
                            pos: node.pos,
                            message: "map keys must be plain strings".to_owned(),
                            hint: None,
                        });
                        String::new()
                    }
                };
                *key = Some((text, node.pos));
            }
            Some((k, key_pos)) => {
                if let Kind::Map(entries) = &mut parent.kind {
                    if let Some(first) = entries.iter().find(|e| e.key == k) {
                        let first_line = first
                            .key_pos
                            .map_or(String::new(), |p| format!(" (first at line {})", p.line));
                        errors.push(YamlError {
                            pos: key_pos,
                            message: format!("duplicate key `{k}`{first_line}"),
                            hint: Some(
                                "each key may appear once per map; ids must be unique".to_owned(),
                            ),
                        });
                    } else {
                        entries.push(Entry {
                            key: k,
                            key_pos,
                            value: node,
                        });
                    }
                }
            }
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_keys_and_values() {
        let n = parse("a: 1\nsinks:\n  archive:\n    inputs: [x, \"y\"]\n").unwrap();
        let (kp, v) = n.find(&["sinks", "archive", "inputs"]).unwrap();
        assert_eq!(kp, Some(Pos::new(4, 5)));
        assert_eq!(v.pos, Some(Pos::new(4, 13)));
        let (kp, v) = n.find(&["sinks", "archive", "inputs", "1"]).unwrap();
        assert_eq!(kp, Some(Pos::new(4, 17)));
        assert_eq!(v.kind, Kind::Str("y".into()));
    }

    #[test]
    fn duplicate_keys_and_syntax_errors() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e[0].pos, Some(Pos::new(3, 1)));
        assert!(
            e[0].message.contains("duplicate key `a`"),
            "{}",
            e[0].message
        );
        let e = parse("a: [1,\n").unwrap_err();
        assert!(e[0].message.starts_with("YAML syntax error"));
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn anchors_empty_and_json() {
        let n = parse("x: &v [a, b]\ny: *v\n").unwrap();
        assert!(matches!(&n.find(&["y"]).unwrap().1.kind, Kind::Seq(v) if v.len() == 2));
        assert!(parse("# only a comment\n").unwrap().is_null());
        let n = parse("{\"a\": {\"b\": [1, \"x\"]},\n\t\"c\": true}").unwrap();
        assert_eq!(n.find(&["c"]).unwrap().0, Some(Pos::new(2, 2)));
    }
}
