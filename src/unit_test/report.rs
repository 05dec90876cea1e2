//! How `loghaul test` shows a failure: what was expected (the assertion that failed, and for
//! `assert_eq!` each side's value) against what came out (the event, as pretty JSON, as its
//! JSON line shows it).
//!
//! ```text
//! test parses the status ... failed
//!   output `parse`: 1 event came out; none passed its conditions
//!     event 1 of 1, condition 1:
//!       expected: assert_eq!(.status, 200)
//!       error:    assertion failed: 404 == 200
//!       left:     404   (.status)
//!       right:    200   (200)
//!       actual event out of `parse`:
//!         {
//!           "message": "status=404",
//!           "status": 404
//!         }
//! ```

use std::fmt::Write as _;

use loghaul_core::{Event, EventBatch};

use super::Miss;

/// The graph could not be run (a transform that would not build).
pub fn cannot_run(error: &anyhow::Error) -> String {
    format!("  cannot run the test: {error:#}\n")
}

/// `extract_from` got nothing.
pub fn no_events(id: &str) -> String {
    format!("  output `{id}`: no event came out\n")
}

/// No event out of `id` passed its conditions: each event with the first that failed on it.
pub fn conditions_failed(
    id: &str,
    events: &[(&EventBatch, &Event)],
    misses: &[Miss<'_>],
) -> String {
    let mut out = String::new();
    let n = events.len();
    let _ = writeln!(
        out,
        "  output `{id}`: {n} event{} came out; none passed its conditions",
        super::plural(n)
    );
    for (i, ((batch, event), miss)) in events.iter().zip(misses).enumerate() {
        let _ = writeln!(
            out,
            "    event {} of {n}, condition {}:",
            i + 1,
            miss.index + 1
        );
        let source = &miss.condition.source;
        let expected = miss
            .failed
            .as_ref()
            .and_then(|f| f.span)
            .and_then(|(start, end)| source.get(start..end))
            .unwrap_or(source);
        field(&mut out, "expected", expected.trim());
        match &miss.failed {
            Some(failed) => field(&mut out, "error", &failed.message),
            None => field(&mut out, "error", "the condition is not true"),
        }
        if let Some([(left, left_value), (right, right_value)]) = &miss.sides {
            let width = left_value.len().max(right_value.len());
            field(&mut out, "left", &format!("{left_value:width$}   ({left})"));
            field(
                &mut out,
                "right",
                &format!("{right_value:width$}   ({right})"),
            );
        }
        let _ = writeln!(out, "      actual event out of `{id}`:");
        indented(&mut out, &pretty_event(batch, event), 8);
    }
    out
}

/// Events came out of an id of `no_outputs_from`.
pub fn unexpected_events(id: &str, events: &[(&EventBatch, &Event)]) -> String {
    let mut out = String::new();
    let n = events.len();
    let _ = writeln!(
        out,
        "  no_outputs_from `{id}`: expected no event, {n} came out"
    );
    for (i, (batch, event)) in events.iter().enumerate() {
        let _ = writeln!(out, "    event {} of {n}:", i + 1);
        indented(&mut out, &pretty_event(batch, event), 6);
    }
    out
}

/// `      name:     value`, further lines of the value aligned under its first.
fn field(out: &mut String, name: &str, value: &str) {
    let label = format!("{name}:");
    for (i, line) in value.lines().enumerate() {
        let label = if i == 0 { label.as_str() } else { "" };
        let _ = writeln!(out, "      {label:<10}{line}");
    }
}

fn indented(out: &mut String, text: &str, by: usize) {
    for line in text.lines() {
        let _ = writeln!(out, "{:by$}{line}", "");
    }
}

/// The event as its JSON line shows it, pretty-printed with its keys in the line's order.
pub fn pretty_event(batch: &EventBatch, event: &Event) -> String {
    let mut line = Vec::new();
    loghaul_codec::encode::encode_json(batch, event, &mut line);
    pretty_json(&String::from_utf8_lossy(&line))
}

/// Indents compact JSON, two spaces a level, keeping its keys' order (a `serde_json::Value`
/// would sort them).
pub fn pretty_json(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = compact.trim().chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    chars.next();
                    out.push(c);
                    out.push(close);
                } else {
                    out.push(c);
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}
