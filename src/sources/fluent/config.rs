//! The `fluent` source's configuration: its schema as written, its validation and what it
//! claims.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Resource, TlsRole, Validator};
use serde::Deserialize;

/// The Fluentd forward protocol's port.
pub const DEFAULT_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 24224);
/// Default `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default `max_request_size`: 16MiB, as fluentd's `chunk_size_limit` suggests for real senders.
pub const DEFAULT_MAX_REQUEST_SIZE: usize = 16 << 20;
/// Default `max_events_per_request`: ten million, twice what a 256 MB chunk of fluentd's file
/// buffer holds in 50-byte records.
pub const DEFAULT_MAX_EVENTS_PER_REQUEST: usize = 10_000_000;
/// Default `max_decompressed_size`: 256MiB, fluentd's `decompression_size_limit`.
pub const DEFAULT_MAX_DECOMPRESSED_SIZE: usize = 256 << 20;

/// `type: fluent`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFluentSource {
    /// `HOST:PORT` to listen on (TCP, and the UDP heartbeat on the same port number). Default
    /// `127.0.0.1:24224`.
    #[serde(default)]
    pub address: Option<String>,
    /// Most concurrent connections. Default `10000`.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Most concurrent connections from one client address. Default: no limit of its own.
    #[serde(default)]
    pub max_connections_per_client: Option<usize>,
    /// Close a connection whose client sent nothing for this long. Default: never (a quiet
    /// client is no fault).
    #[serde(default)]
    pub idle_timeout: Option<RawDuration>,
    /// Largest value held whole while it arrives: a Message-mode request, one entry of a
    /// Forward or PackedForward request, a request's head or option (the entries of a
    /// Forward or PackedForward request are read one by one, whatever their total). More
    /// closes the connection. Default `16MiB`.
    #[serde(default)]
    pub max_request_size: Option<RawSize>,
    /// Most entries one request may carry; more closes the connection (the request is not
    /// acknowledged). Default `10000000`.
    #[serde(default)]
    pub max_events_per_request: Option<usize>,
    /// Largest output of decompressing one request's entries; more closes the connection
    /// (a decompression bomb costs no more than this). Default `256MiB`.
    #[serde(default)]
    pub max_decompressed_size: Option<RawSize>,
    /// Require the handshake with this shared key (fluentd's `<security>`). Default: none.
    #[serde(default)]
    pub shared_key: Option<String>,
    /// With `shared_key`: also require one of these users (fluentd's `user_auth`).
    #[serde(default)]
    pub users: Option<Vec<RawUser>>,
    /// The name this server gives in the handshake. Default: the machine's host name.
    #[serde(default)]
    pub self_hostname: Option<String>,
    /// Answer UDP heartbeats on the same port number. Default `true`.
    #[serde(default)]
    pub heartbeat: Option<bool>,
    /// Socket receive buffer (`SO_RCVBUF`) of accepted connections. Default: the OS's.
    #[serde(default)]
    pub receive_buffer: Option<RawSize>,
}

/// A user of the handshake.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUser {
    pub username: String,
    pub password: String,
}

/// A `fluent` source, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluentSourceConfig {
    pub address: SocketAddr,
    pub max_connections: usize,
    /// Most concurrent connections from one address, if limited.
    pub max_connections_per_client: Option<usize>,
    /// Close a connection quiet this long, if set.
    pub idle_timeout: Option<std::time::Duration>,
    pub max_request_size: usize,
    pub max_events_per_request: usize,
    pub max_decompressed_size: usize,
    /// `Some` when the handshake is required.
    pub security: Option<Security>,
    pub self_hostname: String,
    pub heartbeat: bool,
    pub receive_buffer: Option<usize>,
}

/// The handshake's secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Security {
    pub shared_key: String,
    /// `(username, password)`; empty: no user authentication.
    pub users: Vec<(String, String)>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets never reach logs or `config` output.
        f.debug_struct("Security")
            .field("shared_key", &"<redacted>")
            .field(
                "users",
                &self.users.iter().map(|(u, _)| u).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl FluentSourceConfig {
    /// The listener's connection limits.
    pub fn limits(&self) -> crate::net::listener::Limits {
        crate::net::listener::Limits {
            max_connections: self.max_connections,
            max_per_client: self.max_connections_per_client,
            idle_timeout: self.idle_timeout,
        }
    }
}

impl ComponentConfig for FluentSourceConfig {
    const TYPE: &'static str = "fluent";
    type Raw = RawFluentSource;

    fn validate(s: RawFluentSource, cx: &mut Validator<'_, '_>) -> Option<FluentSourceConfig> {
        let address = match &s.address {
            Some(a) => cx.address(a, &["address"]),
            None => Some(DEFAULT_ADDRESS),
        };
        let max_connections = cx.positive(
            s.max_connections,
            "max_connections",
            DEFAULT_MAX_CONNECTIONS,
        );
        let idle_timeout = match &s.idle_timeout {
            None => Some(None),
            Some(raw) => cx
                .duration(Some(raw), "idle_timeout", std::time::Duration::ZERO, true)
                .map(Some),
        };
        let per_client =
            cx.optional_positive(s.max_connections_per_client, "max_connections_per_client");
        let max_request_size = cx.size(
            s.max_request_size.as_ref(),
            "max_request_size",
            DEFAULT_MAX_REQUEST_SIZE,
            true,
        );
        let max_events_per_request = cx.positive(
            s.max_events_per_request,
            "max_events_per_request",
            DEFAULT_MAX_EVENTS_PER_REQUEST,
        );
        let max_decompressed_size = cx.size(
            s.max_decompressed_size.as_ref(),
            "max_decompressed_size",
            DEFAULT_MAX_DECOMPRESSED_SIZE,
            true,
        );
        let receive_buffer = match &s.receive_buffer {
            None => Some(None),
            Some(r) => cx.size(Some(r), "receive_buffer", 0, true).map(Some),
        };
        let mut ok = true;
        if s.shared_key.as_deref() == Some("") {
            cx.error(
                &["shared_key"],
                "`shared_key` is empty",
                Some("set a secret, e.g. shared_key: ${FLUENT_SHARED_KEY}".to_owned()),
            );
            ok = false;
        }
        let users: Vec<(String, String)> = s
            .users
            .unwrap_or_default()
            .into_iter()
            .map(|u| (u.username, u.password))
            .collect();
        if !users.is_empty() && s.shared_key.is_none() {
            cx.error_at_key(
                &["users"],
                "`users` needs `shared_key`: user authentication is part of the handshake",
                Some("add shared_key, or remove users".to_owned()),
            );
            ok = false;
        }
        if let Some(i) = users.iter().position(|(u, _)| u.is_empty()) {
            cx.error(
                &["users", &i.to_string(), "username"],
                "a user needs a name",
                None,
            );
            ok = false;
        }
        let security = s
            .shared_key
            .map(|shared_key| Security { shared_key, users });
        if s.self_hostname.as_deref() == Some("") {
            cx.error(&["self_hostname"], "`self_hostname` is empty", None);
            ok = false;
        }
        let config = FluentSourceConfig {
            address: address?,
            max_connections: max_connections?,
            max_connections_per_client: per_client?,
            idle_timeout: idle_timeout?,
            max_request_size: max_request_size?,
            max_events_per_request: max_events_per_request?,
            max_decompressed_size: max_decompressed_size?,
            security,
            self_hostname: s.self_hostname.unwrap_or_else(crate::net::host_name),
            heartbeat: s.heartbeat.unwrap_or(true),
            receive_buffer: receive_buffer?,
        };
        ok.then_some(config)
    }

    fn resources(&self) -> Vec<Resource> {
        let mut claims = vec![Resource::tcp(self.address, "address")];
        if self.heartbeat {
            claims.push(Resource::udp(self.address, "address"));
        }
        claims
    }

    fn tls_role(&self) -> Result<TlsRole, String> {
        Ok(TlsRole::Server)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
