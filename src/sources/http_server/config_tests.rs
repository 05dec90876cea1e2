//! The `http_server` source's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, source};

const BASE: &str = "type: http_server\naddress: \"127.0.0.1:8080\"\n";

#[test]
fn wrong_types_and_bad_enum_values() {
    error_at(&source(&format!("{BASE}paths: /logs")), "paths", "expected");
    error_at(
        &source(&format!("{BASE}tag_from_path: 3")),
        "tag_from_path",
        "expected",
    );
    error_at(
        &source(&format!("{BASE}response: maybe")),
        "response",
        "unknown value `maybe`",
    );
    error_at(
        &source(&format!("{BASE}auth: {{ token: t }}")),
        "auth",
        "unknown key `token`",
    );
    error_at(
        &source(&format!("{BASE}path: /x")),
        "path:",
        "unknown key `path`",
    );
}

#[test]
fn bad_address_and_out_of_range_values() {
    error_at(
        &source("type: http_server\naddress: \"host.invalid:80\""),
        "address",
        "not an IP address",
    );
    for key in [
        "max_body_size: 0",
        "max_decompressed_size: 0",
        "max_events_per_request: 0",
        "max_connections: 0",
        "max_connections_per_client: 0",
        "request_timeout: 0s",
        "ack_timeout: 0ms",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &source(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    error_at(
        &source(&format!("{BASE}request_timeout: soon")),
        "request_timeout",
        "duration",
    );
}

#[test]
fn paths() {
    let t = source(&format!("{BASE}paths:\n  - /ok\n  - logs"));
    error_at(&t, "- logs", "path `logs` does not start with `/`");
    let t = source(&format!("{BASE}paths:\n  - /health"));
    error_at(&t, "- /health", "`/health` is the load balancers' check");
}

#[test]
fn auth_is_a_bearer_or_a_user() {
    for auth in [
        "auth: {}",
        "auth: { bearer: \"\" }",
        "auth: { username: u }",
        "auth: { bearer: t, username: u, password: p }",
        "auth: { username: \"\", password: p }",
    ] {
        error_at(
            &source(&format!("{BASE}{auth}")),
            "auth:",
            "`auth` takes either a non-empty `bearer` token, or `username` and `password`",
        );
    }
    ok(&source(&format!("{BASE}auth: {{ bearer: t }}")));
    ok(&source(&format!(
        "{BASE}auth: {{ username: u, password: p }}"
    )));
}

#[test]
fn tls() {
    error_at(
        &source(&format!("{BASE}tls: {{ min_version: \"1.1\" }}")),
        "tls:",
        "unknown TLS version `1.1`",
    );
    error_at(
        &source(&format!(
            "{BASE}tls:\n  cert: /no/such/c.pem\n  key: /no/such/k.pem\n  handshake_timeout: 0s"
        )),
        "handshake_timeout",
        "`handshake_timeout` must be greater than 0",
    );
}
