//! The `fluent` source's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, source};

const BASE: &str = "type: fluent\naddress: \"127.0.0.1:24224\"\n";

#[test]
fn wrong_types_and_unknown_keys() {
    error_at(
        &source(&format!("{BASE}heartbeat: often")),
        "heartbeat",
        "expected",
    );
    error_at(&source(&format!("{BASE}users: alice")), "users", "expected");
    error_at(
        &source(&format!("{BASE}sharedkey: s")),
        "sharedkey",
        "unknown key",
    );
    let t = source(&format!(
        "{BASE}shared_key: s\nusers:\n  - {{ username: alice }}"
    ));
    error_at(&t, "username: alice", "`password`");
}

#[test]
fn bad_address_and_out_of_range_values() {
    error_at(
        &source("type: fluent\naddress: \"0.0.0.0\""),
        "address",
        "has no port",
    );
    for key in [
        "max_connections: 0",
        "max_connections_per_client: 0",
        "idle_timeout: 0s",
        "max_request_size: 0",
        "max_events_per_request: 0",
        "max_decompressed_size: 0",
        "receive_buffer: 0",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        error_at(
            &source(&format!("{BASE}{key}")),
            key,
            &format!("`{name}` must be greater than 0"),
        );
    }
    error_at(
        &source(&format!("{BASE}max_request_size: 1 ton")),
        "max_request_size",
        "invalid size",
    );
}

#[test]
fn shared_key_and_users() {
    error_at(
        &source(&format!("{BASE}shared_key: \"\"")),
        "shared_key",
        "`shared_key` is empty",
    );
    let t = source(&format!(
        "{BASE}users:\n  - {{ username: alice, password: pw }}"
    ));
    error_at(&t, "users:", "`users` needs `shared_key`");
    let t = source(&format!(
        "{BASE}shared_key: s\nusers:\n  - {{ username: alice, password: pw }}\n  - {{ username: \"\", password: pw }}"
    ));
    error_at(&t, "username: \"\"", "a user needs a name");
    ok(&source(&format!(
        "{BASE}shared_key: s\nusers:\n  - {{ username: alice, password: pw }}"
    )));
}

#[test]
fn self_hostname_and_tls() {
    error_at(
        &source(&format!("{BASE}self_hostname: \"\"")),
        "self_hostname",
        "`self_hostname` is empty",
    );
    error_at(
        &source(&format!("{BASE}tls: {{ key: /no/such/key.pem }}")),
        "tls:",
        "needs `cert` and `key`",
    );
    error_at(
        &source(&format!("{BASE}tls:\n  verify_client: true")),
        "verify_client",
        "`verify_client` needs `ca`",
    );
}
