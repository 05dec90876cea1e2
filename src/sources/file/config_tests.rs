//! The `file` source's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, source};

const BASE: &str = "type: file\ninclude: [\"/var/log/app/*.log\"]\n";

#[test]
fn include_is_required_and_not_empty() {
    error_at(
        &source("type: file"),
        "type: file",
        "a `file` source needs `include`",
    );
    error_at(
        &source("type: file\ninclude: []"),
        "include",
        "`include` is empty",
    );
    error_at(
        &source("type: file\ninclude: /var/log/*.log"),
        "include",
        "expected",
    );
}

#[test]
fn globs() {
    let t = source("type: file\ninclude:\n  - /a/*.log\n  - \"\"");
    error_at(&t, "- \"\"", "an empty glob matches nothing");
    let t = source("type: file\ninclude:\n  - \"/a/[z-a\"");
    error_at(&t, "/a/[z-a", "is not a valid glob");
    let t = source(&format!("{BASE}exclude:\n  - \"/a/***\""));
    error_at(&t, "/a/***", "is not a valid glob");
}

#[test]
fn bad_enum_values_and_unknown_keys() {
    error_at(
        &source(&format!("{BASE}read_from: middle")),
        "read_from",
        "unknown value `middle`",
    );
    error_at(
        &source(&format!("{BASE}includes: []")),
        "includes",
        "unknown key",
    );
    let t = source(&format!(
        "{BASE}multiline:\n  start_pattern: \"^\\\\S\"\n  condition_pattern: \"^\\\\s\"\n  mode: sideways"
    ));
    error_at(&t, "mode: sideways", "unknown value `sideways`");
    let t = source(&format!(
        "{BASE}multiline:\n  start_pattern: \"^x\"\n  mode: halt_before"
    ));
    error_at(&t, "multiline:", "`condition_pattern`");
}

#[test]
fn out_of_range_values() {
    for key in [
        "checkpoint_interval: 0s",
        "glob_interval: 0s",
        "partial_line_timeout: 0s",
        "max_line_size: 0",
        "max_open_files: 0",
        "max_read_size: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &source(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    // `rotate_wait: 0s` is allowed: forget a rotated file as soon as it is read.
    ok(&source(&format!("{BASE}rotate_wait: 0s")));
    error_at(
        &source(&format!("{BASE}rotate_wait: later")),
        "rotate_wait",
        "duration",
    );
    error_at(
        &source(&format!("{BASE}max_read_size: 2GiB")),
        "max_read_size",
        "`max_read_size` is over 1GiB",
    );
    error_at(
        &source(&format!("{BASE}max_line_size: 2GiB")),
        "max_line_size",
        "`max_line_size` is over 1GiB",
    );
}

#[test]
fn data_dir_and_multiline() {
    error_at(
        &source(&format!("{BASE}data_dir: \"\"")),
        "data_dir",
        "`data_dir` is empty",
    );
    let t = source(&format!(
        "{BASE}multiline:\n  start_pattern: \"(\"\n  condition_pattern: \"^x\"\n  mode: halt_before"
    ));
    error_at(
        &t,
        "start_pattern",
        "`start_pattern` is not a valid regular expression",
    );
    let t = source(&format!(
        "{BASE}multiline:\n  start_pattern: \"^x\"\n  condition_pattern: \"[\"\n  mode: halt_before"
    ));
    error_at(
        &t,
        "condition_pattern",
        "`condition_pattern` is not a valid regular expression",
    );
    let t = source(&format!(
        "{BASE}multiline:\n  start_pattern: \"^x\"\n  condition_pattern: \"^y\"\n  mode: halt_before\n  timeout: 0s"
    ));
    error_at(&t, "timeout", "`timeout` must be greater than 0");
}

#[test]
fn takes_no_tls() {
    error_at(
        &source(&format!("{BASE}tls: {{ enabled: true }}")),
        "tls:",
        "`type: file` does not use TLS",
    );
}
