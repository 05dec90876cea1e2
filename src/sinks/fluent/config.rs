//! The `fluent` sink's configuration: its schema as written and its validation.

use std::time::Duration;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, PathTemplate, Validator};
use serde::Deserialize;

/// Default `ack_timeout`.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `reconnect_max_interval`.
pub const DEFAULT_RECONNECT_MAX: Duration = Duration::from_secs(10);
/// Default `max_events` per request.
pub const DEFAULT_MAX_EVENTS: usize = 10_000;
/// Default `max_bytes` per request.
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;
/// Default `max_in_flight` requests per server connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

/// `type: fluent` (sink), as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFluentSink {
    /// The forward servers to send to. Required, at least one.
    pub servers: Vec<RawServer>,
    /// `round_robin` (by weight) or `least_outstanding` (the server with the fewest requests
    /// waiting for an ack). Default `round_robin`.
    #[serde(default)]
    pub load_balance: Option<LoadBalance>,
    /// Wait for the server's ack of every request, resending on timeout or disconnect
    /// (at-least-once). Default `true`; `false` counts a request delivered once written.
    #[serde(default)]
    pub require_ack: Option<bool>,
    /// How long to wait for an ack before the server is taken as down. Default `30s`.
    #[serde(default)]
    pub ack_timeout: Option<RawDuration>,
    /// How long a connection attempt may take. Default `5s`.
    #[serde(default)]
    pub connect_timeout: Option<RawDuration>,
    /// Longest wait between reconnection attempts to a server that is down. Default `10s`.
    #[serde(default)]
    pub reconnect_max_interval: Option<RawDuration>,
    /// `none` or `gzip` (CompressedPackedForward). Default `none`.
    #[serde(default)]
    pub compression: Option<Compression>,
    /// Send times as whole seconds (for receivers older than Fluentd v0.14) instead of
    /// EventTime with nanoseconds. Default `false`.
    #[serde(default)]
    pub time_as_integer: Option<bool>,
    /// The tag, as a template (`app.{{ appname }}`). Default: the event's own tag, else
    /// `loghaul.SOURCE_TYPE`.
    #[serde(default)]
    pub tag: Option<String>,
    /// Authenticate with this shared key (the server's `<security>`).
    #[serde(default)]
    pub shared_key: Option<String>,
    /// With `shared_key`: the user to authenticate as.
    #[serde(default)]
    pub username: Option<String>,
    /// With `username`: its password.
    #[serde(default)]
    pub password: Option<String>,
    /// The name this client gives in the handshake; it must differ from the server's. Default:
    /// the machine's host name.
    #[serde(default)]
    pub self_hostname: Option<String>,
    /// Most events per request. Default `10000`.
    #[serde(default)]
    pub max_events: Option<usize>,
    /// Most bytes of entries per request. Default `1MiB`.
    #[serde(default)]
    pub max_bytes: Option<RawSize>,
    /// Requests sent on one connection before their acks. Default `8`.
    #[serde(default)]
    pub max_in_flight: Option<usize>,
}

/// One server.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `HOST:PORT`; HOST may be a name, resolved at each connection.
    pub address: String,
    /// Share of the requests under `round_robin`. Default `60`, as fluentd's.
    #[serde(default)]
    pub weight: Option<u32>,
    /// Used only while every other server is down. Default `false`.
    #[serde(default)]
    pub standby: Option<bool>,
}

/// How requests are spread over the servers that are up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalance {
    #[default]
    RoundRobin,
    LeastOutstanding,
}

/// How request entries are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

/// A server, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub address: String,
    pub weight: u32,
    pub standby: bool,
}

/// The client side of the handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecurity {
    pub shared_key: String,
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("shared_key", &"<redacted>")
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// A `fluent` sink, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluentSinkConfig {
    pub servers: Vec<Server>,
    pub load_balance: LoadBalance,
    pub require_ack: bool,
    pub ack_timeout: Duration,
    pub connect_timeout: Duration,
    pub reconnect_max_interval: Duration,
    pub compression: Compression,
    pub time_as_integer: bool,
    pub tag: Option<PathTemplate>,
    pub security: Option<ClientSecurity>,
    pub self_hostname: String,
    pub max_events: usize,
    pub max_bytes: usize,
    pub max_in_flight: usize,
}

/// Checks `HOST:PORT` for a client address (a name is allowed: it is resolved when connecting).
fn client_address(text: &str) -> Result<String, String> {
    let t = text.trim();
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(format!("address `{text}` has no port"));
    };
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("invalid port `{port}` in address `{text}`"));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("address `{text}` has no host"));
    }
    Ok(t.to_owned())
}

impl ComponentConfig for FluentSinkConfig {
    const TYPE: &'static str = "fluent";
    type Raw = RawFluentSink;

    fn validate(s: RawFluentSink, cx: &mut Validator<'_, '_>) -> Option<FluentSinkConfig> {
        let mut ok = true;
        if s.servers.is_empty() {
            cx.error(
                &["servers"],
                "`servers` is empty",
                Some(
                    "list at least one, e.g. servers: [{ address: \"127.0.0.1:24224\" }]"
                        .to_owned(),
                ),
            );
            ok = false;
        }
        let mut servers = Vec::new();
        for (i, raw) in s.servers.iter().enumerate() {
            let idx = i.to_string();
            match client_address(&raw.address) {
                Ok(address) => servers.push(Server {
                    address,
                    weight: raw.weight.unwrap_or(60),
                    standby: raw.standby.unwrap_or(false),
                }),
                Err(msg) => {
                    cx.error(
                        &["servers", idx.as_str(), "address"],
                        msg,
                        Some("write HOST:PORT, e.g. \"aggregator:24224\"".to_owned()),
                    );
                    ok = false;
                }
            }
            if raw.weight == Some(0) {
                cx.error(
                    &["servers", idx.as_str(), "weight"],
                    "`weight` must be greater than 0",
                    Some(
                        "use standby: true for a server used only when the others are down"
                            .to_owned(),
                    ),
                );
                ok = false;
            }
        }
        if !servers.is_empty() && servers.iter().all(|s| s.standby) {
            cx.error(
                &["servers"],
                "every server is a standby: nothing would be sent while they are all up",
                Some("make at least one server a primary (standby: false)".to_owned()),
            );
            ok = false;
        }
        let tag = match &s.tag {
            None => Some(None),
            Some(t) => match PathTemplate::parse(t) {
                Ok((template, warnings)) => {
                    for w in warnings {
                        cx.warn(&["tag"], w, None);
                    }
                    Some(Some(template))
                }
                Err(e) => {
                    cx.error(
                        &["tag"],
                        format!("{} (at character {})", e.message, e.offset + 1),
                        Some(e.hint),
                    );
                    None
                }
            },
        };
        let security = match (&s.shared_key, &s.username, &s.password) {
            (Some(key), user, password) => {
                if key.is_empty() {
                    cx.error(&["shared_key"], "`shared_key` is empty", None);
                    ok = false;
                }
                match (user, password) {
                    (Some(u), Some(p)) => Some(ClientSecurity {
                        shared_key: key.clone(),
                        user: Some((u.clone(), p.clone())),
                    }),
                    (None, None) => Some(ClientSecurity {
                        shared_key: key.clone(),
                        user: None,
                    }),
                    (Some(_), None) | (None, Some(_)) => {
                        cx.error_at_key(
                            &[if user.is_some() {
                                "username"
                            } else {
                                "password"
                            }],
                            "`username` and `password` go together",
                            Some("set both, or neither".to_owned()),
                        );
                        ok = false;
                        None
                    }
                }
            }
            (None, None, None) => None,
            (None, ..) => {
                cx.error_at_key(
                    &[if s.username.is_some() {
                        "username"
                    } else {
                        "password"
                    }],
                    "user authentication needs `shared_key`",
                    Some("add shared_key: the handshake carries the user".to_owned()),
                );
                ok = false;
                None
            }
        };
        let ack_timeout = cx.duration(
            s.ack_timeout.as_ref(),
            "ack_timeout",
            DEFAULT_ACK_TIMEOUT,
            true,
        );
        let connect_timeout = cx.duration(
            s.connect_timeout.as_ref(),
            "connect_timeout",
            DEFAULT_CONNECT_TIMEOUT,
            true,
        );
        let reconnect_max_interval = cx.duration(
            s.reconnect_max_interval.as_ref(),
            "reconnect_max_interval",
            DEFAULT_RECONNECT_MAX,
            true,
        );
        let max_events = cx.positive(s.max_events, "max_events", DEFAULT_MAX_EVENTS);
        let max_bytes = cx.size(s.max_bytes.as_ref(), "max_bytes", DEFAULT_MAX_BYTES, true);
        let max_in_flight = cx.positive(s.max_in_flight, "max_in_flight", DEFAULT_MAX_IN_FLIGHT);
        let config = FluentSinkConfig {
            servers,
            load_balance: s.load_balance.unwrap_or_default(),
            require_ack: s.require_ack.unwrap_or(true),
            ack_timeout: ack_timeout?,
            connect_timeout: connect_timeout?,
            reconnect_max_interval: reconnect_max_interval?,
            compression: s.compression.unwrap_or_default(),
            time_as_integer: s.time_as_integer.unwrap_or(false),
            tag: tag?,
            security,
            self_hostname: s.self_hostname.unwrap_or_else(crate::net::host_name),
            max_events: max_events?,
            max_bytes: max_bytes?,
            max_in_flight: max_in_flight?,
        };
        ok.then_some(config)
    }

    fn tls_role(&self) -> Result<loghaul_config::TlsRole, String> {
        Ok(loghaul_config::TlsRole::Client)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
