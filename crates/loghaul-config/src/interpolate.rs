//! `${VAR}` / `${VAR:-default}` / `${file:PATH}` substitution in the raw config text, before any
//! parsing.
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

const HINT: &str =
    "write ${VAR}, ${VAR:-default} or ${file:/path/to/secret}; use $$ for a literal $";

/// The largest file `${file:PATH}` reads: a secret, not a document.
pub const MAX_SECRET_FILE: u64 = 64 * 1024;

/// What the process-wide lookup gives for `file:PATH`: the file's text without the final
/// newline such files usually end with; `None` when it cannot be read, is not UTF-8 or is over
/// [`MAX_SECRET_FILE`].
pub fn file_var(path: &str) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_SECRET_FILE + 1)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_SECRET_FILE {
        return None;
    }
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Some(text.strip_suffix('\r').unwrap_or(text).to_owned())
}

/// Substitutes variables in `text`, looking each name up with `lookup` (a secret file's
/// reference `${file:PATH}` as the name `file:PATH`).
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
                    if let Some(path) = inner.strip_prefix("file:") {
                        // A secret mounted as a file (Docker and Kubernetes secrets), read by
                        // the same lookup as variables (see `file_var`).
                        match lookup(&inner) {
                            Some(text) => out.push_str(&text),
                            None => errors.push((
                                pos,
                                format!("cannot read the secret file `{path}`"),
                                format!(
                                    "the file must exist, be readable by loghaul and hold at most {} KiB of text",
                                    MAX_SECRET_FILE / 1024
                                ),
                            )),
                        }
                        i += close + 3;
                        continue;
                    }
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
    fn secret_files_are_read_through_the_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cr3t\n").unwrap();
        let lookup = |name: &str| name.strip_prefix("file:").and_then(file_var);
        let text = format!("token: ${{file:{}}}\n", path.display());
        assert_eq!(
            interpolate(&text, true, &lookup).unwrap(),
            "token: s3cr3t\n"
        );
        let e = interpolate("t: ${file:/nonexistent/x}\n", true, &lookup).unwrap_err();
        assert_eq!(e[0].0, Pos::new(1, 4));
        assert!(
            e[0].1
                .contains("cannot read the secret file `/nonexistent/x`"),
            "{e:?}"
        );
        std::fs::write(&path, vec![b'x'; MAX_SECRET_FILE as usize + 1]).unwrap();
        assert!(interpolate(&text, true, &lookup).is_err(), "too large");
        // A lookup that reads no files (tests, fuzzing) refuses every file reference.
        assert!(interpolate(&text, true, &env).is_err());
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
