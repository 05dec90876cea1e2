//! YAML → [`Node`], the one place that knows which YAML crate we use.
//!
//! `serde_yaml` is archived; we read events from `saphyr-parser` (maintained, YAML 1.2, gives
//! line and column for every event) and build the located tree ourselves. Anchors and aliases are
//! expanded, within [`MAX_ALIAS_BYTES`]; tags other than `!!str` are ignored; a second document is
//! an error, because a config split over two documents is almost certainly a mistake.

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

/// The most memory (roughly, in bytes) that expanding aliases may add to the tree. Each alias is a
/// copy of its anchor's node, and anchors may hold aliases, so a few hundred bytes of nested
/// aliases ("billion laughs") would otherwise expand into gigabytes; real configs alias a few
/// small blocks.
const MAX_ALIAS_BYTES: usize = 16 << 20;

/// What a scalar or a key adds to the tree, roughly in bytes: the node and its text.
fn text_cost(text: &str) -> usize {
    std::mem::size_of::<Node>() + text.len()
}

fn pos(span: &Span) -> Option<Pos> {
    // saphyr's lines are 1-based and its columns 0-based.
    Some(Pos::new(span.start.line(), span.start.col() + 1))
}

/// A collection being built, with its cost so far (see [`MAX_ALIAS_BYTES`]).
enum Frame {
    Seq {
        node: Node,
        anchor: usize,
        cost: usize,
    },
    Map {
        node: Node,
        anchor: usize,
        key: Option<(String, Option<Pos>)>,
        cost: usize,
    },
}

/// Parses one YAML document into a [`Node`]; an empty document is [`Kind::Null`].
///
/// Syntax errors stop the parse (there is nothing sensible to recover); duplicate keys do not,
/// and are all returned.
pub fn parse(text: &str) -> Result<Node, Vec<YamlError>> {
    let mut stack: Vec<Frame> = Vec::new();
    // Each anchored node with its cost, which every alias to it adds to `aliased`.
    let mut anchors: HashMap<usize, (Node, usize)> = HashMap::new();
    let mut aliased = 0usize;
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
                let cost = match &kind {
                    Kind::Plain(s) | Kind::Str(s) => text_cost(s),
                    _ => std::mem::size_of::<Node>(),
                };
                let node = Node::new(kind, pos(&span));
                if anchor != 0 {
                    anchors.insert(anchor, (node.clone(), cost));
                }
                Some((node, cost))
            }
            Event::Alias(id) => match anchors.get(&id) {
                Some((n, cost)) => {
                    aliased = aliased.saturating_add(*cost);
                    if aliased > MAX_ALIAS_BYTES {
                        errors.push(YamlError {
                            pos: pos(&span),
                            message: format!("aliases expand past {} MiB", MAX_ALIAS_BYTES >> 20),
                            hint: Some(
                                "anchors that alias other anchors multiply; write the values out"
                                    .to_owned(),
                            ),
                        });
                        return Err(errors);
                    }
                    let mut n = n.clone();
                    n.pos = pos(&span);
                    Some((n, *cost))
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
                    cost: std::mem::size_of::<Node>(),
                });
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map {
                    node: Node::new(Kind::Map(Vec::new()), pos(&span)),
                    anchor,
                    key: None,
                    cost: std::mem::size_of::<Node>(),
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(
                    Frame::Seq { node, anchor, cost }
                    | Frame::Map {
                        node, anchor, cost, ..
                    },
                ) => {
                    if anchor != 0 {
                        anchors.insert(anchor, (node.clone(), cost));
                    }
                    Some((node, cost))
                }
                None => None,
            },
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => None,
        };
        if let Some((node, cost)) = finished {
            attach(&mut stack, &mut root, node, cost, &mut errors);
        }
    }
    if errors.is_empty() {
        Ok(root.unwrap_or(Node::new(Kind::Null, Some(Pos::new(1, 1)))))
    } else {
        Err(errors)
    }
}

/// Hands a finished node (and its cost) to its parent: a sequence element, a map key, or a map
/// value.
fn attach(
    stack: &mut [Frame],
    root: &mut Option<Node>,
    node: Node,
    node_cost: usize,
    errors: &mut Vec<YamlError>,
) {
    match stack.last_mut() {
        None => *root = Some(node),
        Some(Frame::Seq {
            node: parent, cost, ..
        }) => {
            *cost = cost.saturating_add(node_cost);
            if let Kind::Seq(items) = &mut parent.kind {
                items.push(node);
            }
        }
        Some(Frame::Map {
            node: parent,
            key,
            cost,
            ..
        }) => {
            *cost = cost.saturating_add(node_cost);
            attach_to_map(parent, key, node, errors);
        }
    }
}

/// A map's next key, or the value of the key before it.
fn attach_to_map(
    parent: &mut Node,
    key: &mut Option<(String, Option<Pos>)>,
    node: Node,
    errors: &mut Vec<YamlError>,
) {
    match key.take() {
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

    #[test]
    fn billion_laughs_is_refused_not_expanded() {
        // Found with the `config` fuzz target: nine levels of anchors, each aliasing the one
        // before ten times, is 431 bytes of YAML and 10^9 nodes once expanded; loading it ran
        // past the target's 2 GiB memory limit.
        let mut text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n".to_owned();
        for i in 1..9 {
            let aliases = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{aliases}]\n"));
        }
        let e = parse(&text).unwrap_err();
        assert!(
            e[0].message.contains("aliases expand past"),
            "{}",
            e[0].message
        );
        assert!(
            e[0].pos.is_some_and(|p| p.line > 1 && p.line <= 9),
            "{:?}",
            e[0].pos
        );
        // Aliases within reason still expand: a block reused by a few hundred sinks.
        let mut text =
            "common: &c {inputs: [a, b, c], encoding: json, path: ./x.jsonl}\n".to_owned();
        for i in 0..500 {
            text.push_str(&format!("s{i}: *c\n"));
        }
        let n = parse(&text).unwrap();
        assert!(
            matches!(&n.find(&["s499", "inputs"]).unwrap().1.kind, Kind::Seq(v) if v.len() == 3)
        );
    }
}
