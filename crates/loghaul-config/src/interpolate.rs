//! `${VAR}` / `${VAR:-default}` substitution in the raw config text, before any parsing.
//!
//! Substituting text (not values) lets a variable fill any part of any format, as Vector and
//! docker-compose do. `$$` is a literal `$`; a `$` followed by anything else is left alone.
//! `:-` uses the default when the variable is unset *or empty*, as in the shell. Lines whose first
//! non-blank character is `#` are copied untouched in YAML and TOML, so a commented-out example
//! never fails a load. Positions reported after a substitution on the same line refer to the
//! substituted text; lines are never added or removed unless a value holds a newline.

use crate::diagnostic::Pos;

/// An interpolation problem: position, message, hint.
pub type InterpolationError = (Pos, String, String);

const HINT: &str = "write ${VAR} or ${VAR:-default}; use $$ for a literal $";

/// Substitutes variables in `text`, looking each name up with `lookup`.
///
/// # Errors
///
/// Every unset variable without a default and every malformed `${...}`, with positions.
pub fn interpolate(
    text: &str,
    skip_comment_lines: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<InterpolationError>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    for (line_no, line) in text.split_inclusive('\n').enumerate() {
        if skip_comment_lines && line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c != '$' {
                out.push(c);
                i += 1;
                continue;
            }
            let pos = Pos::new(line_no + 1, i + 1);
            match chars.get(i + 1) {
                Some('$') => {
                    out.push('$');
                    i += 2;
                }
                Some('{') => {
                    let Some(close) = chars[i + 2..].iter().position(|c| *c == '}') else {
                        errors.push((
                            pos,
                            "unterminated `${` (no `}` on this line)".to_owned(),
                            HINT.to_owned(),
                        ));
                        out.extend(&chars[i..]);
                        break;
                    };
                    let inner: String = chars[i + 2..i + 2 + close].iter().collect();
                    let (name, default) = match inner.split_once(":-") {
                        Some((n, d)) => (n, Some(d)),
                        None => (inner.as_str(), None),
                    };
                    if !is_var_name(name) {
                        errors.push((
                            pos,
                            format!("invalid variable reference `${{{inner}}}`"),
                            HINT.to_owned(),
                        ));
                    } else {
                        match (lookup(name), default) {
                            (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                            (Some(v), _) => out.push_str(&v),
                            (None, Some(d)) => out.push_str(d),
                            (None, None) => errors.push((
                                pos,
                                format!("environment variable `{name}` is not set"),
                                format!("set {name}, or give a default: ${{{name}:-value}}"),
                            )),
                        }
                    }
                    i += close + 3;
                }
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn is_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("10.0.0.1".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn set_unset_default_escape() {
        let ok = |t: &str| interpolate(t, true, &env).unwrap();
        assert_eq!(ok("a: ${HOST}:514"), "a: 10.0.0.1:514");
        assert_eq!(ok("a: ${NOPE:-x y}"), "a: x y");
        assert_eq!(ok("a: ${HOST:-x}"), "a: 10.0.0.1");
        assert_eq!(ok("a: ${EMPTY:-dflt}"), "a: dflt");
        assert_eq!(ok("a: ${EMPTY}."), "a: .");
        assert_eq!(ok("a: ${NOPE:-}"), "a: ");
        assert_eq!(ok("price: $$5 and $${HOST}"), "price: $5 and ${HOST}");
        assert_eq!(ok("a: $HOST $ 5$"), "a: $HOST $ 5$");
        assert_eq!(
            ok("  # ${UNSET} in a comment\nb: 1\n"),
            "  # ${UNSET} in a comment\nb: 1\n"
        );
        assert_eq!(ok("é: ${HOST}\n"), "é: 10.0.0.1\n");
    }

    #[test]
    fn errors_have_positions() {
        let e = interpolate("a: 1\nb: x${NOPE}y ${ALSO}\n", true, &env).unwrap_err();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, Pos::new(2, 5));
        assert!(e[0].1.contains("`NOPE` is not set"));
        assert_eq!(e[0].2, "set NOPE, or give a default: ${NOPE:-value}");
        assert_eq!(e[1].0, Pos::new(2, 14));
        let e = interpolate("a: ${OPEN\n", true, &env).unwrap_err();
        assert!(e[0].1.contains("unterminated"));
        let e = interpolate("a: ${9x}\n", true, &env).unwrap_err();
        assert!(e[0].1.contains("invalid variable reference"));
        // JSON has no comments, so nothing is skipped there.
        assert!(interpolate("# ${NOPE}", false, &env).is_err());
    }
}
