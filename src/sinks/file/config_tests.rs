//! The `file` sink's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, sink, warning_at};

const BASE: &str = "type: file\npath: \"/tmp/loghaul/%Y-%m-%d.log\"\n";

#[test]
fn required_keys_types_and_enums() {
    error_at(&sink("type: file"), "  x:", "missing required field `path`");
    error_at(&sink("type: file\npath: [a, b]"), "path", "expected");
    error_at(
        &sink(&format!("{BASE}encoding: xml")),
        "encoding",
        "unknown value `xml`",
    );
    error_at(
        &sink(&format!("{BASE}thread: dedicated")),
        "thread",
        "unknown value `dedicated`",
    );
    error_at(
        &sink(&format!("{BASE}max_open_files: -1")),
        "max_open_files",
        "expected a non-negative integer",
    );
    error_at(
        &sink(&format!("{BASE}flush: 1s")),
        "flush:",
        "unknown key `flush`",
    );
}

#[test]
fn path_templates() {
    let t = sink("type: file\npath: \"/tmp/{{ appname\"");
    error_at(&t, "path", "unterminated");
    let t = sink("type: file\npath: \"/tmp/{{ appnme }}.log\"");
    warning_at(&t, "path", "appname");
}

#[test]
fn out_of_range_values() {
    for key in [
        "flush_interval: 0s",
        "idle_timeout: 0s",
        "max_open_files: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &sink(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    error_at(
        &sink(&format!("{BASE}idle_timeout: 5 minutes")),
        "idle_timeout",
        "unit",
    );
}

#[test]
fn takes_no_tls() {
    error_at(
        &sink(&format!("{BASE}tls: {{ ca: /c.pem }}")),
        "tls:",
        "`type: file` does not use TLS",
    );
}
