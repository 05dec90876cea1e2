//! The `fluent` sink's configuration errors, each at the line of the key that causes it.

#![allow(clippy::expect_used)]

use crate::config::testing::{error_at, ok, sink, warning_at};

const BASE: &str = "type: fluent\nservers: [{ address: \"127.0.0.1:24224\" }]\n";

#[test]
fn required_keys_types_and_enums() {
    error_at(
        &sink("type: fluent"),
        "  x:",
        "missing required field `servers`",
    );
    error_at(
        &sink("type: fluent\nservers: host:24224"),
        "servers",
        "expected",
    );
    error_at(
        &sink("type: fluent\nservers: [{ weight: 3 }]"),
        "servers",
        "missing required field `address`",
    );
    error_at(
        &sink(&format!("{BASE}load_balance: random")),
        "load_balance",
        "unknown value `random`",
    );
    error_at(
        &sink(&format!("{BASE}compression: lz4")),
        "compression",
        "unknown value `lz4`",
    );
    error_at(
        &sink(&format!("{BASE}require_ack: 2")),
        "require_ack",
        "expected",
    );
    error_at(
        &sink(&format!("{BASE}address: x")),
        "address: x",
        "unknown key `address`",
    );
}

#[test]
fn servers() {
    error_at(
        &sink("type: fluent\nservers: []"),
        "servers",
        "`servers` is empty",
    );
    let t = sink("type: fluent\nservers:\n  - address: \"aggregator\"");
    error_at(&t, "aggregator", "has no port");
    let t = sink("type: fluent\nservers:\n  - address: \"aggregator:0\"");
    error_at(&t, "aggregator", "invalid port `0`");
    let t = sink("type: fluent\nservers:\n  - address: \":24224\"");
    error_at(&t, ":24224", "has no host");
    let t = sink("type: fluent\nservers:\n  - address: \"a:24224\"\n    weight: 0");
    error_at(&t, "weight", "`weight` must be greater than 0");
    let t = sink("type: fluent\nservers:\n  - { address: \"a:24224\", standby: true }");
    error_at(&t, "standby: true", "every server is a standby");
    ok(&sink(
        "type: fluent\nservers:\n  - { address: \"a:24224\" }\n  - { address: \"b:24224\", standby: true }",
    ));
}

#[test]
fn tag_template() {
    error_at(
        &sink(&format!("{BASE}tag: \"app.{{{{ appname\"")),
        "tag",
        "unterminated",
    );
    warning_at(
        &sink(&format!("{BASE}tag: \"app.{{{{ appnme }}}}\"")),
        "tag",
        "appname",
    );
}

#[test]
fn authentication() {
    error_at(
        &sink(&format!("{BASE}shared_key: \"\"")),
        "shared_key",
        "`shared_key` is empty",
    );
    let t = sink(&format!("{BASE}shared_key: k\nusername: u"));
    error_at(&t, "username", "`username` and `password` go together");
    let t = sink(&format!("{BASE}shared_key: k\npassword: p"));
    error_at(&t, "password", "`username` and `password` go together");
    let t = sink(&format!("{BASE}username: u\npassword: p"));
    error_at(&t, "username", "user authentication needs `shared_key`");
    let t = sink(&format!("{BASE}password: p"));
    error_at(&t, "password", "user authentication needs `shared_key`");
    ok(&sink(&format!(
        "{BASE}shared_key: k\nusername: u\npassword: p"
    )));
}

#[test]
fn out_of_range_values() {
    for key in [
        "ack_timeout: 0s",
        "connect_timeout: 0s",
        "reconnect_max_interval: 0s",
        "max_events: 0",
        "max_bytes: 0",
        "max_in_flight: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &sink(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    error_at(
        &sink(&format!("{BASE}max_bytes: 1 PB")),
        "max_bytes",
        "size",
    );
}

#[test]
fn tls_is_the_client_end() {
    let t = sink(&format!("{BASE}tls:\n  verify_client: true"));
    error_at(
        &t,
        "verify_client",
        "`tls.verify_client` means nothing to a client",
    );
    let t = sink(&format!("{BASE}tls:\n  handshake_timeout: 5s"));
    error_at(&t, "handshake_timeout", "means nothing to a client");
    let t = sink(&format!("{BASE}tls:\n  cert: /no/such/c.pem"));
    error_at(
        &t,
        "cert: /no/such/c.pem",
        "has one of `cert` and `key` but no `key`",
    );
    let t = sink(&format!("{BASE}tls:\n  ca: /no/such/ca.pem"));
    error_at(&t, "ca:", "cannot read");
}

/// A Fluentd user's spellings name loghaul's keys (and none suggests the server-side
/// `verify_client`).
#[test]
fn fluentd_spellings_name_loghauls_keys() {
    let hint = |body: &str| {
        crate::config::testing::load(&sink(&format!("{BASE}{body}")))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    for (body, want) in [
        ("require_ack_response: true", "loghaul's is 'require_ack'"),
        ("compress: gzip", "loghaul's is 'compression'"),
        ("tls:\n  tls_cert_path: /c.pem", "loghaul's is 'ca'"),
        ("tls:\n  private_key_path: /k.pem", "loghaul's is 'key'"),
        (
            "tls:\n  tls_verify_hostname: false",
            "loghaul's is 'verify_hostname'",
        ),
        (
            "tls:\n  tls_allow_self_signed_cert: true",
            "loghaul's is 'ca'",
        ),
    ] {
        let e = hint(body);
        assert!(e.contains("unknown key") && e.contains(want), "{body}: {e}");
        assert!(!e.contains("verify_client"), "{body}: {e}");
    }
    // Elsewhere the usual suggestion stands.
    let e = hint("requre_ack: true");
    assert!(e.contains("did you mean 'require_ack'?"), "{e}");
}

/// `tls.verify_hostname: false` is a client's choice, taken with a warning; a listener refuses it.
#[test]
fn verify_hostname_false_warns_on_a_client_and_is_refused_on_a_listener() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = loghaul_tls::pki::Ca::new("test CA").expect("CA");
    let ca_file = dir.path().join("ca.crt");
    ca.write(&ca_file).expect("write CA");
    warning_at(
        &sink(&format!(
            "{BASE}tls:\n  ca: {}\n  verify_hostname: false",
            ca_file.display()
        )),
        "verify_hostname",
        "the server's name is not checked",
    );
    error_at(
        "sources:\n  in:\n    type: fluent\n    tls: { cert: a.crt, key: a.key, verify_hostname: false }\n",
        "verify_hostname",
        "means nothing to a listener",
    );
}
