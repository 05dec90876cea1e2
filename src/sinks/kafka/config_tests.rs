//! The `kafka` sink's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, sink, warning_at};

const BASE: &str = "type: kafka\nbootstrap_servers: \"127.0.0.1:9092\"\ntopic: logs\n";

#[test]
fn required_keys_types_and_enums() {
    error_at(
        &sink("type: kafka\ntopic: logs"),
        "  x:",
        "missing required field `bootstrap_servers`",
    );
    error_at(
        &sink("type: kafka\nbootstrap_servers: \"h:9092\""),
        "  x:",
        "missing required field `topic`",
    );
    error_at(
        &sink(&format!("{BASE}encoding: avro")),
        "encoding",
        "unknown value `avro`",
    );
    error_at(
        &sink(&format!("{BASE}compression: brotli")),
        "compression",
        "unknown value",
    );
    error_at(
        &sink(&format!("{BASE}idempotence: maybe")),
        "idempotence",
        "expected",
    );
    error_at(&sink(&format!("{BASE}headers: [a]")), "headers", "expected");
    error_at(
        &sink(&format!("{BASE}topics: [a]")),
        "topics:",
        "unknown key `topics`",
    );
}

#[test]
fn servers_and_topics() {
    let t = sink("type: kafka\nbootstrap_servers: \"\"\ntopic: logs");
    error_at(&t, "bootstrap_servers", "`bootstrap_servers` is empty");
    let t = sink("type: kafka\nbootstrap_servers: \"h:9092\"\ntopic: \"logs/{{ appname }}\"");
    error_at(&t, "topic:", "is not a Kafka topic name");
    let t = sink("type: kafka\nbootstrap_servers: \"h:9092\"\ntopic: \"\"");
    error_at(&t, "topic:", "is not a Kafka topic name");
    let t = sink("type: kafka\nbootstrap_servers: \"h:9092\"\ntopic: \"logs-{{ appname\"");
    error_at(&t, "topic:", "unterminated");
    let t = sink("type: kafka\nbootstrap_servers: \"h:9092\"\ntopic: \"logs-{{ appnme }}\"");
    warning_at(&t, "topic:", "appname");
    ok(&sink(
        "type: kafka\nbootstrap_servers: \"h:9092\"\ntopic: \"logs-{{ appname }}\"",
    ));
    error_at(
        &sink(&format!("{BASE}key: \"{{{{ host\"")),
        "key:",
        "unterminated",
    );
}

#[test]
fn acks_and_idempotence() {
    error_at(
        &sink(&format!("{BASE}acks: 2")),
        "acks",
        "`acks: 2` is not one of all, 1 or 0",
    );
    error_at(
        &sink(&format!("{BASE}acks: some")),
        "acks",
        "is not one of all, 1 or 0",
    );
    error_at(
        &sink(&format!("{BASE}acks: 1")),
        "acks",
        "the idempotent producer needs `acks: all`",
    );
    ok(&sink(&format!("{BASE}acks: 1\nidempotence: false")));
    ok(&sink(&format!("{BASE}acks: -1")));
}

#[test]
fn out_of_range_values() {
    for key in [
        "batch_max_events: 0",
        "batch_max_bytes: 0",
        "queue_max_bytes: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &sink(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    // No lingering is allowed: every message is sent at once.
    ok(&sink(&format!("{BASE}linger: 0ms")));
    error_at(&sink(&format!("{BASE}linger: 5")), "linger", "has no unit");
}

#[test]
fn headers() {
    let t = sink(&format!("{BASE}headers:\n  \"\": x"));
    error_at(&t, "\"\": x", "a header name is empty");
    let t = sink(&format!("{BASE}headers:\n  X-App: \"{{{{ appname\""));
    error_at(&t, "X-App", "unterminated");
}

#[cfg(feature = "kafka")]
#[test]
fn librdkafka_checks_its_options() {
    let t = sink(&format!(
        "{BASE}librdkafka_options:\n  compression.codec: rar"
    ));
    error_at(
        &t,
        "compression.codec: rar",
        "librdkafka refuses the settings",
    );
}

#[test]
fn tls_goes_through_librdkafka_options() {
    error_at(
        &sink(&format!("{BASE}tls: {{ ca: /c.pem }}")),
        "tls:",
        "the kafka sink takes TLS and SASL through `librdkafka_options`",
    );
}
