//! The `syslog` source's configuration errors, each at the line of the key that causes it.

use crate::config::testing::{error_at, ok, source};

const TCP: &str = "type: syslog\nmode: tcp\naddress: \"127.0.0.1:5514\"\n";
const UDP: &str = "type: syslog\nmode: udp\naddress: \"127.0.0.1:5514\"\n";

#[test]
fn required_keys() {
    error_at(
        &source("type: syslog\nmode: tcp"),
        "  x:",
        "missing required field `address`",
    );
    error_at(
        &source("type: syslog\naddress: \"127.0.0.1:5514\""),
        "  x:",
        "missing required field `mode`",
    );
}

#[test]
fn wrong_types_and_bad_enum_values() {
    let t = source(&format!("{TCP}max_connections: lots"));
    error_at(&t, "max_connections", "expected");
    let t = source(&format!("{TCP}strict: sometimes"));
    error_at(&t, "strict", "expected");
    let t = source("type: syslog\nmode: sctp\naddress: \"127.0.0.1:5514\"");
    error_at(&t, "mode: sctp", "unknown value `sctp`");
    let t = source(&format!("{TCP}format: rfc9999"));
    error_at(&t, "format:", "unknown value `rfc9999`");
    let t = source(&format!("{TCP}framing: lines"));
    error_at(&t, "framing:", "unknown value `lines`");
    let t = source(&format!("{TCP}adress: x"));
    error_at(&t, "adress", "unknown key `adress`");
}

#[test]
fn bad_addresses() {
    let t = source("type: syslog\nmode: tcp\naddress: \"127.0.0.1\"");
    error_at(&t, "address:", "has no port");
    let t = source("type: syslog\nmode: tcp\naddress: \"127.0.0.1:99999\"");
    error_at(&t, "address:", "invalid port");
    let t = source("type: syslog\nmode: tcp\naddress: \"example.com:514\"");
    error_at(&t, "address:", "is not an IP address or localhost");
}

#[test]
fn out_of_range_values() {
    for key in [
        "max_length: 0",
        "receive_buffer: 0",
        "max_connections: 0",
        "max_connections_per_client: 0",
        "idle_timeout: 0s",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        let t = source(&format!("{TCP}{key}"));
        error_at(&t, key, &format!("`{name}` must be greater than 0"));
    }
    let t = source(&format!("{TCP}max_length: 12 parsecs"));
    error_at(&t, "max_length", "invalid size");
    let t = source(&format!("{TCP}idle_timeout: 10"));
    error_at(&t, "idle_timeout", "has no unit");
}

#[test]
fn time_zones() {
    let t = source(&format!("{TCP}timezone: Mars/Olympus"));
    error_at(&t, "timezone", "invalid time zone");
    let t = source(&format!("{TCP}timezone: \"+25:00\""));
    error_at(&t, "timezone", "out of range");
    ok(&source(&format!("{TCP}timezone: \"-05:30\"")));
}

#[test]
fn udp_refuses_what_only_tcp_has() {
    for key in [
        "framing: newline",
        "max_connections: 5",
        "max_connections_per_client: 2",
        "idle_timeout: 1m",
    ] {
        let name = key.split(':').next().unwrap_or_default();
        let t = source(&format!("{UDP}{key}"));
        error_at(&t, key, &format!("`{name}` applies only to TCP sources"));
    }
    let t = source(&format!("{UDP}tls: {{ cert: /c.pem, key: /k.pem }}"));
    error_at(&t, "tls:", "`tls` applies to `mode: tcp` only");
}

#[test]
fn tls_on_tcp() {
    let t = source(&format!("{TCP}tls: {{ cert: /no/such/cert.pem }}"));
    error_at(&t, "tls:", "needs `cert` and `key`");
    let t = source(&format!("{TCP}tls:\n  server_name: example.com"));
    error_at(
        &t,
        "server_name",
        "`tls.server_name` means nothing to a listener",
    );
    let t = source(&format!(
        "{TCP}tls:\n  cert: /no/such/cert.pem\n  key: /no/such/key.pem"
    ));
    error_at(&t, "cert:", "cannot read");
}
