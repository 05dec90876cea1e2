//! `tls`, which every listening source, every network sink and the API take: the keys as
//! written, and their validation, which reads the PEM files so that a key that does not match
//! its certificate, an expired certificate or an unreadable file is a `validate` error with the
//! file's path, not a failed start or a failed handshake later.
//!
//! ```yaml
//! sources:
//!   in:
//!     type: syslog
//!     mode: tcp
//!     address: "0.0.0.0:6514"
//!     tls: { cert: /etc/loghaul/server.crt, key: /etc/loghaul/server.key,
//!            ca: /etc/loghaul/clients-ca.crt, verify_client: true, min_version: "1.3" }
//! ```
//!
//! Whether a component speaks TLS, and at which end, is its type's business
//! ([`crate::ComponentConfig::tls_role`]); the loader reads `tls` for every component and asks.

use std::path::PathBuf;

use loghaul_tls::{Role, TlsConfig, TlsVersion};
use serde::{Deserialize, Deserializer};

use crate::raw::{RawDuration, scalar_text};
use crate::validate::{Ctx, Validator};

/// `tls:` as written.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// `false` turns TLS off while keeping the rest of the map. Default `true`.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// PEM certificate chain (leaf first). Required on listeners; a client's own certificate
    /// for mutual TLS on sinks.
    #[serde(default)]
    pub cert: Option<String>,
    /// PEM private key of `cert`.
    #[serde(default)]
    pub key: Option<String>,
    /// PEM CA certificates: listeners verify client certificates with them, clients the
    /// server's (default on clients: the system's trust store).
    #[serde(default)]
    pub ca: Option<String>,
    /// Listeners: refuse clients without a certificate signed by `ca`. Default `false`.
    #[serde(default)]
    pub verify_client: Option<bool>,
    /// `"1.2"` (default) or `"1.3"`.
    #[serde(default)]
    pub min_version: Option<RawVersion>,
    /// IANA names of the cipher suites allowed (default: rustls's).
    #[serde(default)]
    pub ciphers: Option<Vec<String>>,
    /// Clients: the name the server's certificate must carry (default: the address's host).
    #[serde(default)]
    pub server_name: Option<String>,
    /// Listeners: how long a client may take to finish the handshake. Default `10s`.
    #[serde(default)]
    pub handshake_timeout: Option<RawDuration>,
    /// Clients: `false` accepts a server certificate that does not carry the server's name
    /// (its chain, or its pin, is still verified). Default `true`.
    #[serde(default)]
    pub verify_hostname: Option<bool>,
}

/// A TLS version as written: `1.2` may come as a YAML number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawVersion(pub String);

impl<'de> Deserialize<'de> for RawVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        scalar_text(d, "a TLS version: \"1.2\" or \"1.3\"").map(RawVersion)
    }
}

/// Where a `tls` map sits in the document, for positioned errors: `[sources, ID]` or `[api]`.
pub(crate) struct At<'c, 'a, 'p> {
    pub(crate) cx: &'c mut Ctx<'a>,
    pub(crate) base: Vec<&'p str>,
}

impl<'p> At<'_, '_, 'p> {
    /// A component's `tls`.
    pub(crate) fn component<'c, 'a>(v: &'c mut Validator<'p, 'a>) -> At<'c, 'a, 'p> {
        At {
            base: vec![v.section, v.id],
            cx: v.cx,
        }
    }

    fn path<'k>(&self, key: &[&'k str]) -> Vec<&'k str>
    where
        'p: 'k,
    {
        let mut path = self.base.clone();
        path.extend_from_slice(key);
        path
    }

    fn error(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.val_pos(&self.path(key));
        self.cx.error(pos, message, hint);
    }

    fn warn(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.val_pos(&self.path(key));
        self.cx.warn(pos, message, hint);
    }

    fn error_at_key(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.key_pos(&self.path(key));
        self.cx.error(pos, message, hint);
    }

    fn duration_at(
        &mut self,
        raw: Option<&RawDuration>,
        key: &[&str],
        default: std::time::Duration,
    ) -> Option<std::time::Duration> {
        let path = self.path(key);
        self.cx.duration(raw, &path, default, true)
    }
}

/// Validates `raw` for the `role` end of connections; `None` (after reporting) when it is
/// wrong, `Some(None)` when TLS is off.
pub(crate) fn validate_tls(
    raw: RawTls,
    role: Role,
    v: &mut At<'_, '_, '_>,
) -> Option<Option<TlsConfig>> {
    if raw.enabled == Some(false) {
        return Some(None);
    }
    let mut ok = true;
    let min_version = match &raw.min_version {
        None => TlsVersion::V1_2,
        Some(RawVersion(text)) => match TlsVersion::parse(text) {
            Some(version) => version,
            None => {
                v.error(
                    &["tls", "min_version"],
                    format!("unknown TLS version `{text}`"),
                    Some("use \"1.2\" or \"1.3\" (quoted)".to_owned()),
                );
                ok = false;
                TlsVersion::V1_2
            }
        },
    };
    let handshake_timeout = v.duration_at(
        raw.handshake_timeout.as_ref(),
        &["tls", "handshake_timeout"],
        loghaul_tls::DEFAULT_HANDSHAKE_TIMEOUT,
    );
    for (key, given, wrong_end) in [
        ("verify_client", raw.verify_client.is_some(), Role::Client),
        (
            "handshake_timeout",
            raw.handshake_timeout.is_some(),
            Role::Client,
        ),
        ("server_name", raw.server_name.is_some(), Role::Server),
        (
            "verify_hostname",
            raw.verify_hostname.is_some(),
            Role::Server,
        ),
    ] {
        if given && role == wrong_end {
            let (what, other) = match role {
                Role::Client => ("a client", "listeners"),
                Role::Server => ("a listener", "clients"),
            };
            v.error_at_key(
                &["tls", key],
                format!("`tls.{key}` means nothing to {what}"),
                Some(format!("it is for {other}")),
            );
            ok = false;
        }
    }
    if role == Role::Server && (raw.cert.is_none() || raw.key.is_none()) {
        v.error(
            &["tls"],
            "a TLS listener needs `cert` and `key`",
            Some("give the PEM certificate chain and its private key".to_owned()),
        );
        ok = false;
    }
    if raw.verify_client == Some(true) && raw.ca.is_none() {
        v.error(
            &["tls", "verify_client"],
            "`verify_client` needs `ca`",
            Some("the CA whose signature client certificates must carry".to_owned()),
        );
        ok = false;
    }
    if role == Role::Client && raw.verify_hostname == Some(false) {
        v.warn(
            &["tls", "verify_hostname"],
            "the server's name is not checked: any server holding a certificate that `ca` (or the system's store) trusts is taken for this one",
            Some("prefer `server_name` with the name the certificate carries".to_owned()),
        );
    }
    if raw.cert.is_some() != raw.key.is_some() {
        let missing = if raw.cert.is_some() { "key" } else { "cert" };
        v.error(
            &["tls"],
            format!("`tls` has one of `cert` and `key` but no `{missing}`"),
            None,
        );
        ok = false;
    }
    let config = TlsConfig {
        cert: raw.cert.map(PathBuf::from),
        key: raw.key.map(PathBuf::from),
        ca: raw.ca.map(PathBuf::from),
        verify_client: raw.verify_client.unwrap_or(false),
        min_version,
        ciphers: raw.ciphers,
        server_name: raw.server_name,
        handshake_timeout: handshake_timeout?,
        verify_hostname: raw.verify_hostname.unwrap_or(true),
    };
    if !ok {
        return None;
    }
    // The files themselves: read and checked now, with the key that named the bad one.
    match (v.cx.tls_check)(&config, role) {
        Ok(concerns) => {
            for concern in concerns {
                v.warn(&["tls", "cert"], concern, None);
            }
        }
        Err(error) => {
            let key = match &error.path {
                Some(p) if config.cert.as_ref() == Some(p) => "cert",
                Some(p) if config.key.as_ref() == Some(p) => "key",
                Some(p) if config.ca.as_ref() == Some(p) => "ca",
                _ if error.message.contains("cipher") => "ciphers",
                _ => "",
            };
            let at: Vec<&str> = if key.is_empty() {
                vec!["tls"]
            } else {
                vec!["tls", key]
            };
            v.error(&at, error.to_string(), None);
            return None;
        }
    }
    Some(Some(config))
}
