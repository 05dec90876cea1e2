//! The `syslog` source's configuration: its schema as written, its validation and what it claims.

use std::net::SocketAddr;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{
    ComponentConfig, Resource, TZ_HINT, TimeZoneSetting, TlsRole, Validator, parse_timezone,
};
use serde::Deserialize;

/// Default `max_length`: 100KiB.
pub const DEFAULT_MAX_LENGTH: usize = loghaul_codec::framing::DEFAULT_MAX_LENGTH;
/// Default `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// `type: syslog`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSyslogSource {
    /// `tcp` or `udp`. Required.
    pub mode: SyslogMode,
    /// `HOST:PORT` to listen on, HOST an IP literal or `localhost`. Required.
    pub address: String,
    /// Message format: `auto`, `rfc3164`, `rfc5424` or `raw`. Default `auto`.
    #[serde(default)]
    pub format: Option<SyslogFormat>,
    /// TCP framing: `auto`, `newline` or `octet_counting`. Default `auto`; TCP only.
    #[serde(default)]
    pub framing: Option<Framing>,
    /// Longest accepted message; longer ones are truncated (and flagged `truncated`). Default `100KiB`.
    #[serde(default)]
    pub max_length: Option<RawSize>,
    /// Most concurrent TCP connections. Default `10000`; TCP only.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Most concurrent TCP connections from one client address. Default: no limit of its own.
    #[serde(default)]
    pub max_connections_per_client: Option<usize>,
    /// Close a connection whose client sent nothing for this long. Default: never (a quiet
    /// client is no fault).
    #[serde(default)]
    pub idle_timeout: Option<RawDuration>,
    /// Socket receive buffer (`SO_RCVBUF`). Default: 4MiB requested for UDP (the kernel caps it
    /// at `net.core.rmem_max`), the OS default for TCP.
    #[serde(default)]
    pub receive_buffer: Option<RawSize>,
    /// Parse exactly as the RFCs say instead of leniently; messages that fail are still kept, as raw
    /// text flagged `parse_error`.
    #[serde(default)]
    pub strict: Option<bool>,
    /// Zone for timestamps that carry none: `UTC`, `local`, `+HH:MM` or `-HH:MM`. Default `UTC`.
    #[serde(default)]
    pub timezone: Option<String>,
}

/// A syslog source, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyslogSourceConfig {
    /// Transport.
    pub mode: SyslogMode,
    /// Where it listens.
    pub address: SocketAddr,
    /// Message format.
    pub format: SyslogFormat,
    /// TCP framing (always `Auto` for UDP).
    pub framing: Framing,
    /// Longest accepted message, in bytes (> 0).
    pub max_length: usize,
    /// Most concurrent TCP connections (> 0).
    pub max_connections: usize,
    /// Most concurrent TCP connections from one address, if limited.
    pub max_connections_per_client: Option<usize>,
    /// Close a connection quiet this long, if set.
    pub idle_timeout: Option<std::time::Duration>,
    /// `SO_RCVBUF`, when set.
    pub receive_buffer: Option<usize>,
    /// Reject what does not parse instead of keeping it raw.
    pub strict: bool,
    /// Zone for timestamps without one.
    pub timezone: TimeZoneSetting,
}

/// Syslog transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyslogMode {
    /// Stream sockets; see [`Framing`].
    Tcp,
    /// One message per datagram.
    Udp,
}

/// Syslog message format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyslogFormat {
    /// RFC 5424 when the message says so, else RFC 3164, else raw.
    #[default]
    Auto,
    /// BSD syslog.
    Rfc3164,
    /// IETF syslog.
    Rfc5424,
    /// No parsing: the whole message is the body.
    Raw,
}

/// How messages are delimited on a TCP stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Octet counting when a frame starts with a digit, newline otherwise (RFC 6587).
    #[default]
    Auto,
    /// One message per line.
    Newline,
    /// `LEN SP MSG` frames (RFC 6587 §3.4.1).
    OctetCounting,
}

impl ComponentConfig for SyslogSourceConfig {
    const TYPE: &'static str = "syslog";
    type Raw = RawSyslogSource;

    fn validate(s: RawSyslogSource, cx: &mut Validator<'_, '_>) -> Option<SyslogSourceConfig> {
        let address = cx.address(&s.address, &["address"]);
        if s.mode == SyslogMode::Udp {
            for (key, why) in [
                ("framing", "each UDP datagram is one message"),
                ("max_connections", "UDP has no connections"),
                ("max_connections_per_client", "UDP has no connections"),
                ("idle_timeout", "UDP has no connections"),
            ] {
                if cx.has(&[key]) {
                    let id = cx.id().to_owned();
                    cx.error_at_key(
                        &[key],
                        format!("`{key}` applies only to TCP sources; source `{id}` is UDP"),
                        Some(format!("remove `{key}`: {why}")),
                    );
                }
            }
        }
        let max_length = cx.size(
            s.max_length.as_ref(),
            "max_length",
            DEFAULT_MAX_LENGTH,
            true,
        );
        let receive_buffer = match &s.receive_buffer {
            None => Some(None),
            Some(r) => cx.size(Some(r), "receive_buffer", 0, true).map(Some),
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
        let timezone = match &s.timezone {
            None => Some(TimeZoneSetting::Utc),
            Some(t) => match parse_timezone(t) {
                Ok(tz) => Some(tz),
                Err(msg) => {
                    cx.error(&["timezone"], msg, Some(TZ_HINT.to_owned()));
                    None
                }
            },
        };
        Some(SyslogSourceConfig {
            mode: s.mode,
            address: address?,
            format: s.format.unwrap_or_default(),
            framing: s.framing.unwrap_or_default(),
            max_length: max_length?,
            max_connections: max_connections?,
            max_connections_per_client: per_client?,
            idle_timeout: idle_timeout?,
            receive_buffer: receive_buffer?,
            strict: s.strict.unwrap_or(false),
            timezone: timezone?,
        })
    }

    fn resources(&self) -> Vec<Resource> {
        vec![match self.mode {
            SyslogMode::Tcp => Resource::tcp(self.address, "address"),
            SyslogMode::Udp => Resource::udp(self.address, "address"),
        }]
    }

    fn tls_role(&self) -> Result<TlsRole, String> {
        match self.mode {
            SyslogMode::Tcp => Ok(TlsRole::Server),
            SyslogMode::Udp => Err(
                "`tls` applies to `mode: tcp` only (syslog over TLS is RFC 5425, over TCP)".into(),
            ),
        }
    }
}

impl SyslogSourceConfig {
    /// The listener's connection limits.
    pub fn limits(&self) -> crate::net::listener::Limits {
        crate::net::listener::Limits {
            max_connections: self.max_connections,
            max_per_client: self.max_connections_per_client,
            idle_timeout: self.idle_timeout,
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
