//! Every file in `tests/broken/` must fail to load with the error its header promises.
//!
//! ```text
//! # expect: LINE:COL substring-of-the-message
//! # hint: substring-of-that-error's-hint        (optional)
//! ```
//!
//! The same files drive the CLI's `loghaul validate` integration test, which reads only the
//! `# expect:` line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use loghaul_config::Config;

struct Expectation {
    line: usize,
    column: usize,
    message: String,
    hint: Option<String>,
}

fn expectation(path: &Path) -> Expectation {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let rest = first.strip_prefix("# expect: ").unwrap_or_else(|| {
        panic!(
            "{}: first line must be `# expect: LINE:COL message`",
            path.display()
        )
    });
    let (pos, message) = rest.split_once(' ').unwrap();
    let (line, column) = pos.split_once(':').unwrap();
    let hint = lines
        .next()
        .and_then(|l| l.strip_prefix("# hint: "))
        .map(str::to_owned);
    Expectation {
        line: line.parse().unwrap(),
        column: column.parse().unwrap(),
        message: message.to_owned(),
        hint,
    }
}

#[test]
fn every_broken_config_fails_where_its_header_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    paths.sort();
    assert!(
        paths.len() >= 8,
        "expected at least 8 broken configs, found {}",
        paths.len()
    );
    let mut failures = Vec::new();
    for path in &paths {
        let want = expectation(path);
        let errors = match Config::load(path) {
            Ok(_) => {
                failures.push(format!("{}: loaded without errors", path.display()));
                continue;
            }
            Err(e) => e,
        };
        let found = errors.iter().find(|d| {
            d.line == Some(want.line)
                && d.column == Some(want.column)
                && d.message.contains(&want.message)
        });
        match (found, &want.hint) {
            (None, _) => failures.push(format!(
                "{}: no error at {}:{} containing {:?}; got:\n{errors}",
                path.display(),
                want.line,
                want.column,
                want.message
            )),
            (Some(d), Some(h)) if !d.hint.as_deref().unwrap_or_default().contains(h.as_str()) => {
                failures.push(format!(
                    "{}: hint {:?} does not contain {h:?}",
                    path.display(),
                    d.hint
                ))
            }
            _ => {}
        }
        // The file name is the origin, so the CLI prints `FILE:LINE:COL`.
        assert!(errors.to_string().starts_with(&path.display().to_string()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn missing_file_is_a_clear_error() {
    let err = Config::load(Path::new("/nonexistent/loghaul.yaml")).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("/nonexistent/loghaul.yaml: error: cannot read config file:"),
        "{text}"
    );
    assert!(text.contains("hint: check the path"), "{text}");
}
