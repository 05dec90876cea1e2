//! The `kafka` source's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, source};

const SERVERS: &str = "bootstrap_servers: \"127.0.0.1:9092\"\n";

fn kafka(rest: &str) -> String {
    source(&format!(
        "type: kafka\n{SERVERS}group_id: loghaul\ntopics: [logs]\n{rest}"
    ))
}

#[test]
fn required_keys() {
    let t = source("type: kafka\ngroup_id: g\ntopics: [logs]");
    error_at(&t, "  x:", "missing required field `bootstrap_servers`");
    let t = source(&format!("type: kafka\n{SERVERS}topics: [logs]"));
    error_at(&t, "  x:", "missing required field `group_id`");
    let t = source(&format!("type: kafka\n{SERVERS}group_id: g"));
    error_at(&t, "  x:", "missing required field `topics`");
}

#[test]
fn wrong_types_and_bad_enum_values() {
    let t = source(&format!("type: kafka\n{SERVERS}group_id: g\ntopics: logs"));
    error_at(&t, "topics", "expected");
    error_at(&kafka("decoding: avro"), "decoding", "unknown value `avro`");
    error_at(
        &kafka("auto_offset_reset: never"),
        "auto_offset_reset",
        "unknown value `never`",
    );
    error_at(
        &kafka("librdkafka_options: []"),
        "librdkafka_options",
        "expected",
    );
    error_at(&kafka("group: g"), "group:", "unknown key `group`");
}

#[test]
fn empty_values() {
    let t = source("type: kafka\nbootstrap_servers: \" \"\ngroup_id: g\ntopics: [logs]");
    error_at(&t, "bootstrap_servers", "`bootstrap_servers` is empty");
    let t = source(&format!(
        "type: kafka\n{SERVERS}group_id: \"\"\ntopics: [logs]"
    ));
    error_at(&t, "group_id", "`group_id` is empty");
    let t = source(&format!("type: kafka\n{SERVERS}group_id: g\ntopics: []"));
    error_at(
        &t,
        "topics",
        "`topics` needs at least one topic, and no empty one",
    );
    let t = source(&format!(
        "type: kafka\n{SERVERS}group_id: g\ntopics: [logs, \"\"]"
    ));
    error_at(
        &t,
        "topics",
        "`topics` needs at least one topic, and no empty one",
    );
}

#[test]
fn topic_patterns_and_ranges() {
    let t = source(&format!(
        "type: kafka\n{SERVERS}group_id: g\ntopics: [\"^logs-(\"]"
    ));
    error_at(&t, "topics", "is not a regular expression");
    ok(&source(&format!(
        "type: kafka\n{SERVERS}group_id: g\ntopics: [\"^logs-.*\"]"
    )));
    error_at(
        &kafka("max_batch_events: 0"),
        "max_batch_events",
        "`max_batch_events` must be greater than 0",
    );
}

#[cfg(feature = "kafka")]
#[test]
fn librdkafka_checks_its_options() {
    error_at(
        &kafka("librdkafka_options:\n  no.such.setting: \"1\""),
        "no.such.setting",
        "librdkafka refuses the settings",
    );
}

#[test]
fn tls_goes_through_librdkafka_options() {
    error_at(
        &kafka("tls: { ca: /etc/ssl/ca.pem }"),
        "tls:",
        "the kafka source takes TLS and SASL through `librdkafka_options`",
    );
}
