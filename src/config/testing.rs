//! What the components' configuration tests share: one component's keys placed in a minimal
//! configuration, loaded through the real loader and registry, and errors found by the line
//! they point at (so a test names the key it expects the error at, not a line number that moves
//! when the text around it changes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loghaul_config::{ConfigErrors, ConfigFormat};

use super::Config;

/// Indents `body` (one `key: value` per line) under a component id.
fn indented(body: &str) -> String {
    body.lines().map(|l| format!("    {l}\n")).collect()
}

/// A configuration whose source `x` has the keys `body` (`type: ...` first), read by a sink.
pub fn source(body: &str) -> String {
    format!(
        "sources:\n  x:\n{}sinks:\n  out: {{ type: blackhole, inputs: [x] }}\n",
        indented(body)
    )
}

/// A configuration whose transform `x` has the keys `body`, between a source and a sink.
pub fn transform(body: &str) -> String {
    format!(
        "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
         transforms:\n  x:\n    inputs: [in]\n{}\
         sinks:\n  out: {{ type: blackhole, inputs: [x] }}\n",
        indented(body)
    )
}

/// A configuration whose sink `x` has the keys `body`, reading a source.
pub fn sink(body: &str) -> String {
    format!(
        "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
         sinks:\n  x:\n    inputs: [in]\n{}",
        indented(body)
    )
}

/// Loads YAML `text` with no `${VAR}` set.
pub fn load(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_str_with_vars(text, ConfigFormat::Yaml, "t.yaml", &|_| None)
}

/// Loads `text`, which must be valid.
#[track_caller]
pub fn ok(text: &str) -> Config {
    load(text).unwrap_or_else(|e| panic!("expected a valid config, got:\n{e}\nfor:\n{text}"))
}

/// Asserts that `text` fails to load with an error on the (first) line containing `at` whose
/// message contains `message`.
#[track_caller]
pub fn error_at(text: &str, at: &str, message: &str) {
    let line = text
        .lines()
        .position(|l| l.contains(at))
        .unwrap_or_else(|| panic!("`{at}` is not in:\n{text}"))
        + 1;
    let errors = match load(text) {
        Ok(_) => panic!("expected an error at line {line} ({at}) for:\n{text}"),
        Err(e) => e,
    };
    assert!(
        errors
            .iter()
            .any(|d| d.is_error() && d.line == Some(line) && d.message.contains(message)),
        "no error at line {line} ({at}) containing {message:?}; got:\n{errors}\nfor:\n{text}"
    );
}

/// Asserts that `text` loads with a warning on the line containing `at` that contains `message`.
#[track_caller]
pub fn warning_at(text: &str, at: &str, message: &str) {
    let line = text
        .lines()
        .position(|l| l.contains(at))
        .expect("`at` in text")
        + 1;
    let config = ok(text);
    assert!(
        config
            .warnings()
            .iter()
            .any(|d| d.line == Some(line) && d.message.contains(message)),
        "no warning at line {line} containing {message:?}; got: {:?}",
        config.warnings()
    );
}
