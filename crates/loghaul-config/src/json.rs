//! JSON → [`Node`].
//!
//! `serde_json` checks the syntax first, because its messages speak JSON ("trailing comma").
//! The positions then come from reading the same text with the YAML parser: JSON is valid YAML
//! 1.2 flow syntax, so keys and values get `line:column` for free. If the YAML parser ever
//! disagrees, we fall back to `serde_json`'s tree without positions rather than fail.

use crate::diagnostic::Pos;
use crate::node::{Entry, Kind, Node};

/// Parses a JSON document.
///
/// # Errors
///
/// The syntax error, with its position and `serde_json`'s message.
pub fn parse(text: &str) -> Result<Node, (Option<Pos>, String)> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        let pos = (e.line() > 0).then(|| Pos::new(e.line(), e.column().max(1)));
        // serde_json appends " at line L column C"; the position is printed separately.
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
        (pos, format!("JSON syntax error: {msg}"))
    })?;
    match crate::yaml::parse(text) {
        Ok(node) => Ok(node),
        Err(_) => Ok(from_value(value)),
    }
}

fn from_value(v: serde_json::Value) -> Node {
    use serde_json::Value;
    let kind = match v {
        Value::Null => Kind::Null,
        Value::Bool(b) => Kind::Bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Kind::Int(i),
            None => Kind::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Kind::Str(s),
        Value::Array(a) => Kind::Seq(a.into_iter().map(from_value).collect()),
        Value::Object(o) => Kind::Map(
            o.into_iter()
                .map(|(key, v)| Entry {
                    key,
                    key_pos: None,
                    value: from_value(v),
                })
                .collect(),
        ),
    };
    Node::new(kind, None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_errors() {
        let n = parse("{\n  \"sinks\": {\"a\": {\"inputs\": []}}\n}").unwrap();
        assert_eq!(
            n.find(&["sinks", "a", "inputs"]).unwrap().0,
            Some(Pos::new(2, 19))
        );
        let (pos, msg) = parse("{\n  \"a\": 1,\n}").unwrap_err();
        assert_eq!(pos, Some(Pos::new(3, 1)));
        assert!(msg.contains("trailing comma"), "{msg}");
        assert_eq!(
            from_value(serde_json::json!({"a": [1]}))
                .find(&["a", "0"])
                .unwrap()
                .1
                .kind,
            Kind::Int(1)
        );
    }
}
