//! Raw types → runtime types, with every semantic check.
//!
//! Checks, each reported at the position of the key or value at fault:
//! ids (syntax, unique across sections), addresses, sizes, durations, time zones, templates,
//! TCP-only options on UDP sources, zero limits, facility and severity names, inputs (present,
//! existing, not a sink, not repeated), cycles among transforms, and listening-address collisions
//! (between sources of one protocol, and between TCP sources and the API). Warnings: components
//! whose output nobody reads.
//!
//! Invariant: returns `Some(Config)` only if it pushed no error.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use loghaul_core::names;

use crate::component::{ComponentKind, Protocol, Registry, Resource};
use crate::diagnostic::{Diagnostic, Pos, closest, did_you_mean};
use crate::node::Node;
use crate::raw::{RawDuration, RawSize};
use crate::runtime::{ApiConfig, Config, Limits, TimeZoneSetting};
use crate::units::{DURATION_HINT, SIZE_HINT, parse_duration, parse_size};

/// Default API address.
pub const DEFAULT_API_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8686);
/// Default `data_dir`.
pub const DEFAULT_DATA_DIR: &str = "./loghaul-data";
/// Default `limits.memory`.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 << 20;
/// The smallest `limits.memory`: below it a few large batches would stall every source.
pub const MIN_MEMORY_LIMIT: usize = 16 << 20;
/// Default `shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

const ADDRESS_HINT: &str =
    "write HOST:PORT with an IP address or localhost, e.g. \"0.0.0.0:5514\" or \"[::]:5514\"";
/// The hint for a bad time zone setting.
pub const TZ_HINT: &str = "use UTC, local, or a fixed offset such as +02:00 or -05:30";

/// Diagnostics with positions looked up in the node tree.
pub(crate) struct Ctx<'a> {
    pub(crate) origin: &'a str,
    pub(crate) root: &'a Node,
    /// The text `root` was parsed from (positions inside string values are found in it).
    pub(crate) text: &'a str,
    pub(crate) diags: &'a mut Vec<Diagnostic>,
    pub(crate) errors: usize,
    /// Checks the files of a `tls` map (see [`crate::Environment::tls`]).
    pub(crate) tls_check: &'a crate::TlsCheck<'a>,
}

impl Ctx<'_> {
    /// Position of the key at `path` (for sequence elements: the element).
    pub(crate) fn key_pos(&self, path: &[&str]) -> Option<Pos> {
        self.root.find(path).and_then(|(k, _)| k)
    }

    /// Position of the value at `path`, falling back to its key.
    pub(crate) fn val_pos(&self, path: &[&str]) -> Option<Pos> {
        self.root.find(path).and_then(|(k, n)| n.pos.or(k))
    }

    pub(crate) fn error(
        &mut self,
        pos: Option<Pos>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.errors += 1;
        self.diags
            .push(Diagnostic::error(self.origin, pos, message).with_hint(hint));
    }

    pub(crate) fn warn(
        &mut self,
        pos: Option<Pos>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.diags
            .push(Diagnostic::warning(self.origin, pos, message).with_hint(hint));
    }

    fn size(
        &mut self,
        raw: Option<&RawSize>,
        path: &[&str],
        default: usize,
        nonzero: bool,
    ) -> Option<usize> {
        let Some(RawSize(text)) = raw else {
            return Some(default);
        };
        let key = path.last().copied().unwrap_or("size");
        match parse_size(text).map(usize::try_from) {
            Ok(Ok(0)) if nonzero => {
                self.error(
                    self.val_pos(path),
                    format!("`{key}` must be greater than 0"),
                    Some(SIZE_HINT.to_owned()),
                );
                None
            }
            Ok(Ok(n)) => Some(n),
            Ok(Err(_)) => {
                self.error(self.val_pos(path), format!("`{key}` is too large"), None);
                None
            }
            Err(msg) => {
                self.error(self.val_pos(path), msg, Some(SIZE_HINT.to_owned()));
                None
            }
        }
    }

    pub(crate) fn duration(
        &mut self,
        raw: Option<&RawDuration>,
        path: &[&str],
        default: Duration,
        nonzero: bool,
    ) -> Option<Duration> {
        let Some(RawDuration(text)) = raw else {
            return Some(default);
        };
        let key = path.last().copied().unwrap_or("duration");
        match parse_duration(text) {
            Ok(d) if nonzero && d.is_zero() => {
                self.error(
                    self.val_pos(path),
                    format!("`{key}` must be greater than 0"),
                    Some(DURATION_HINT.to_owned()),
                );
                None
            }
            Ok(d) => Some(d),
            Err(msg) => {
                self.error(self.val_pos(path), msg, Some(DURATION_HINT.to_owned()));
                None
            }
        }
    }

    fn positive(&mut self, value: Option<usize>, path: &[&str], default: usize) -> Option<usize> {
        match value {
            None => Some(default),
            Some(0) => {
                let key = path.last().copied().unwrap_or("value");
                self.error(
                    self.val_pos(path),
                    format!("`{key}` must be greater than 0"),
                    Some(format!("the default is {default}")),
                );
                None
            }
            Some(n) => Some(n),
        }
    }

    fn address(&mut self, text: &str, path: &[&str]) -> Option<SocketAddr> {
        match parse_address(text) {
            Ok(a) => Some(a),
            Err(msg) => {
                self.error(self.val_pos(path), msg, Some(ADDRESS_HINT.to_owned()));
                None
            }
        }
    }
}

/// Parses `HOST:PORT` where HOST is an IP literal (IPv6 in brackets) or `localhost`.
///
/// # Errors
///
/// A message saying what is wrong with the address.
pub fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let t = text.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(format!("address `{text}` has no port"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("invalid port `{port}` in address `{text}`"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(format!(
            "IPv6 address `{host}` must be in brackets: [{host}]:{port}"
        ));
    }
    Err(format!(
        "`{host}` in address `{text}` is not an IP address or localhost"
    ))
}

/// Parses a time zone setting: `UTC`, `local`, `+HH:MM`, `-HH:MM` (also `+HHMM`, `+HH`).
///
/// # Errors
///
/// A message saying what is wrong.
pub fn parse_timezone(text: &str) -> Result<TimeZoneSetting, String> {
    let t = text.trim();
    match t.to_ascii_lowercase().as_str() {
        "utc" | "z" => return Ok(TimeZoneSetting::Utc),
        "local" => return Ok(TimeZoneSetting::Local),
        _ => {}
    }
    let bad = || format!("invalid time zone `{text}`");
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    let colon_ok = match rest.find(':') {
        None => true,
        Some(i) => i == 2 && rest.matches(':').count() == 1,
    };
    if !colon_ok
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || !(digits.len() == 2 || digits.len() == 4)
    {
        return Err(bad());
    }
    let hours: i32 = digits[..2].parse().map_err(|_| bad())?;
    let minutes: i32 = digits
        .get(2..)
        .filter(|m| !m.is_empty())
        .map_or(Ok(0), str::parse)
        .map_err(|_| bad())?;
    if hours > 23 || minutes > 59 {
        return Err(format!("time zone offset `{text}` is out of range"));
    }
    Ok(TimeZoneSetting::Fixed(sign * (hours * 3600 + minutes * 60)))
}

/// Whether two listening addresses would conflict: same port (not 0) and either the same IP or
/// one is a wildcard covering the other (`::` covers IPv4 too, as Linux binds it dual-stack).
pub fn addresses_overlap(a: SocketAddr, b: SocketAddr) -> bool {
    fn covers(x: SocketAddr, y: SocketAddr) -> bool {
        x.ip().is_unspecified() && (x.is_ipv6() || y.is_ipv4())
    }
    a.port() == b.port() && a.port() != 0 && (a.ip() == b.ip() || covers(a, b) || covers(b, a))
}

fn id_is_valid(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The hint for an unknown severity name: the closest name and the accepted ones.
pub fn severity_hint(name: &str) -> String {
    let mut all: Vec<&str> = names::SEVERITIES.to_vec();
    all.extend([
        "emergency",
        "panic",
        "critical",
        "error",
        "warn",
        "informational",
    ]);
    let list = format!("accepted: {} (or a code 0-7)", names::SEVERITIES.join(", "));
    match closest(name, all) {
        Some(c) => format!("did you mean '{c}'? {list}"),
        None => list,
    }
}

/// The hint for an unknown facility name: the closest name and the accepted ones.
pub fn facility_hint(name: &str) -> String {
    let list = format!(
        "accepted: {} (or a code 0-23)",
        names::FACILITIES.join(", ")
    );
    match closest(name, names::FACILITIES) {
        Some(c) => format!("did you mean '{c}'? {list}"),
        None => list,
    }
}

/// A component's view of validation: reports at positions inside its own entry, and the
/// helpers that parse sizes, durations and addresses with the project's hints. (A unit test's
/// conditions are checked through one too: its entry is `tests`, and its id the test's index.)
pub struct Validator<'v, 'a> {
    pub(crate) cx: &'v mut Ctx<'a>,
    /// The section the entry is in: `sources`, `transforms`, `sinks` or `tests`.
    pub(crate) section: &'static str,
    pub(crate) id: &'v str,
}

impl<'v> Validator<'v, '_> {
    /// The component's id.
    pub fn id(&self) -> &str {
        self.id
    }

    /// The full path of `key` in the document. It borrows the id, not `self`, so the caller can
    /// go on to report through `self.cx`.
    fn path<'p>(&self, key: &[&'p str]) -> Vec<&'p str>
    where
        'v: 'p,
    {
        let mut path = vec![self.section, self.id];
        path.extend_from_slice(key);
        path
    }

    /// Whether the entry sets `key` (a dotted path is given as several keys).
    pub fn has(&self, key: &[&str]) -> bool {
        self.cx.root.find(&self.path(key)).is_some()
    }

    /// An error at the value of `key` (the entry itself when `key` is empty).
    pub fn error(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.val_pos(&self.path(key));
        self.cx.error(pos, message, hint);
    }

    /// An error at a place inside the string value of `key` (a program's diagnostic): `line`
    /// and `column` are 0-based, in characters, within the string as loaded. Mapped onto the
    /// file through the value's form (a YAML block scalar `|`/`>`, a TOML multi-line string,
    /// a quoted or plain scalar); the value's start when the form is not recognised.
    pub fn error_in_value(
        &mut self,
        key: &[&str],
        (line, column): (usize, usize),
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        let start = self.cx.val_pos(&self.path(key));
        let pos = start.map(|p| inside_value(self.cx.text, p, line, column).unwrap_or(p));
        self.cx.error(pos, message, hint);
    }

    /// An error at `key` itself rather than its value (for keys that should not be there).
    pub fn error_at_key(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.key_pos(&self.path(key));
        self.cx.error(pos, message, hint);
    }

    /// A warning at the value of `key`.
    pub fn warn(&mut self, key: &[&str], message: impl Into<String>, hint: Option<String>) {
        let pos = self.cx.val_pos(&self.path(key));
        self.cx.warn(pos, message, hint);
    }

    /// A size (`64KiB`), or `default` when not set.
    pub fn size(
        &mut self,
        raw: Option<&RawSize>,
        key: &'static str,
        default: usize,
        nonzero: bool,
    ) -> Option<usize> {
        let path = self.path(&[key]);
        self.cx.size(raw, &path, default, nonzero)
    }

    /// A size at a nested key (`buffer.max_size`), or `default` when not set.
    pub fn size_at(
        &mut self,
        raw: Option<&RawSize>,
        key: &[&str],
        default: usize,
        nonzero: bool,
    ) -> Option<usize> {
        let path = self.path(key);
        self.cx.size(raw, &path, default, nonzero)
    }

    /// A duration (`500ms`), or `default` when not set.
    pub fn duration(
        &mut self,
        raw: Option<&RawDuration>,
        key: &'static str,
        default: Duration,
        nonzero: bool,
    ) -> Option<Duration> {
        let path = self.path(&[key]);
        self.cx.duration(raw, &path, default, nonzero)
    }

    /// A duration at a nested key (`multiline.timeout`), or `default` when not set.
    pub fn duration_at(
        &mut self,
        raw: Option<&RawDuration>,
        key: &[&str],
        default: Duration,
        nonzero: bool,
    ) -> Option<Duration> {
        let path = self.path(key);
        self.cx.duration(raw, &path, default, nonzero)
    }

    /// A count that must be positive, or `default` when not set.
    pub fn positive(
        &mut self,
        value: Option<usize>,
        key: &'static str,
        default: usize,
    ) -> Option<usize> {
        let path = self.path(&[key]);
        self.cx.positive(value, &path, default)
    }

    /// An optional count that must be positive when given (`max_connections_per_client`).
    /// `None` when it was given and is invalid (the error is recorded); `Some(None)` when not
    /// given.
    pub fn optional_positive(
        &mut self,
        value: Option<usize>,
        key: &'static str,
    ) -> Option<Option<usize>> {
        match value {
            None => Some(None),
            Some(n) => self.positive(Some(n), key, n).map(Some),
        }
    }

    /// A listening address `HOST:PORT` at `key` (a path of keys for nested values).
    pub fn address(&mut self, text: &str, key: &[&str]) -> Option<SocketAddr> {
        let path = self.path(key);
        self.cx.address(text, &path)
    }
}

/// What loading found of one component, kept even when its type's config failed to load, so
/// that components naming it as an input get no spurious "unknown input".
pub(crate) struct Declared {
    pub id: String,
    pub kind: ComponentKind,
    pub key_pos: Option<Pos>,
    pub inputs: Vec<String>,
    pub resources: Vec<Resource>,
    /// Its named outputs; `None` when its config did not load (any output name is then
    /// accepted, to report nothing spurious).
    pub outputs: Option<Vec<String>>,
    /// Whether its id is an output too (see `ComponentConfig::has_default_output`).
    pub default_output: bool,
}

/// Validates the loaded document into a [`Config`], pushing diagnostics.
pub(crate) fn validate<R: Registry>(
    root: &Node,
    text: &str,
    origin: &str,
    tls_check: &crate::TlsCheck<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Config<R>> {
    let mut cx = Ctx {
        origin,
        root,
        text,
        diags,
        errors: 0,
        tls_check,
    };
    let mut declared: Vec<Declared> = Vec::new();
    let loaded = crate::load::read_sections::<R>(&mut cx, &mut declared);

    // Ids: syntax and uniqueness across sections (within a section the parsers already refuse
    // duplicate keys).
    let mut seen: HashMap<&str, ComponentKind> = HashMap::new();
    let mut order: Vec<&Declared> = declared.iter().collect();
    order.sort_by_key(|d| d.key_pos);
    for d in &order {
        if !id_is_valid(&d.id) {
            cx.error(
                d.key_pos,
                format!("invalid {} id `{}`", d.kind, d.id),
                Some("ids may contain ASCII letters, digits, `_`, `-` and `.`".to_owned()),
            );
        }
        if let Some(first) = seen.get(d.id.as_str()) {
            cx.error(
                d.key_pos,
                format!("id `{}` is already used by a {first}", d.id),
                Some(
                    "component ids must be unique across sources, transforms and sinks".to_owned(),
                ),
            );
        } else {
            seen.insert(&d.id, d.kind);
        }
    }
    // With duplicate ids (already an error) the first declaration wins.
    let mut kind_of: HashMap<&str, ComponentKind> = HashMap::new();
    let mut outputs_of: HashMap<&str, Option<&[String]>> = HashMap::new();
    for d in &order {
        kind_of.entry(d.id.as_str()).or_insert(d.kind);
        outputs_of
            .entry(d.id.as_str())
            .or_insert(d.outputs.as_deref());
    }
    for kind in [ComponentKind::Source, ComponentKind::Sink] {
        let section = kind.section();
        // A section that is there but not a map has its own error already.
        let malformed = root
            .find(&[section])
            .is_some_and(|(_, n)| !n.is_null() && n.entries().is_none());
        if !malformed && !declared.iter().any(|d| d.kind == kind) {
            let pos = cx.key_pos(&[section]);
            let example = if kind == ComponentKind::Source {
                "sources: { syslog_udp: { type: syslog, mode: udp, address: \"0.0.0.0:5514\" } }"
            } else {
                "sinks: { out: { type: console, inputs: [...] } }"
            };
            cx.error(
                pos,
                format!("no {section} defined"),
                Some(format!("add at least one, e.g. {example}")),
            );
        }
    }

    // API.
    let api_raw = loaded.api.clone().unwrap_or_default();
    let api = match &api_raw.address {
        Some(a) => cx.address(a, &["api", "address"]),
        None => Some(DEFAULT_API_ADDRESS),
    };
    let api_enabled = api_raw.enabled.unwrap_or(true);
    let api_tls = match api_raw.tls.clone() {
        None => Some(None),
        Some(raw) => crate::tls::validate_tls(
            raw,
            loghaul_tls::Role::Server,
            &mut crate::tls::At {
                cx: &mut cx,
                base: vec!["api"],
            },
        ),
    };
    let api_token = match api_raw.token.clone() {
        Some(t) if t.trim().is_empty() => {
            cx.error(
                cx.val_pos(&["api", "token"]),
                "`api.token` is empty",
                Some("give a long random string, e.g. from a secret file: ${file:/run/secrets/api-token}".to_owned()),
            );
            None
        }
        t => Some(t),
    };
    // An API reachable from other machines shows and (later) changes the server's state: it
    // needs a credential, and the default is to not serve it that way at all.
    if api_enabled
        && let (Some(address), Some(token), Some(tls)) = (api, &api_token, &api_tls)
        && !address.ip().is_loopback()
        && token.is_none()
        && !tls.as_ref().is_some_and(|t| t.verify_client)
    {
        cx.error(
            cx.val_pos(&["api", "address"]),
            format!("the API listens on {address}, beyond this machine, with no access control"),
            Some(
                "set `api.token` (clients send `Authorization: Bearer TOKEN`), or `api.tls` with                  `ca` and `verify_client: true`; or listen on 127.0.0.1"
                    .to_owned(),
            ),
        );
    }

    let shutdown_timeout = cx.duration(
        loaded.shutdown_timeout.as_ref(),
        &["shutdown_timeout"],
        DEFAULT_SHUTDOWN_TIMEOUT,
        false,
    );

    let data_dir = match loaded.data_dir.as_deref() {
        Some("") => {
            cx.error(
                cx.val_pos(&["data_dir"]),
                "`data_dir` is empty",
                Some(format!("omit it for the default, {DEFAULT_DATA_DIR}")),
            );
            None
        }
        Some(d) => Some(std::path::PathBuf::from(d)),
        None => Some(std::path::PathBuf::from(DEFAULT_DATA_DIR)),
    };

    let limits = loaded.limits.clone().unwrap_or_default();
    let memory = cx
        .size(
            limits.memory.as_ref(),
            &["limits", "memory"],
            DEFAULT_MEMORY_LIMIT,
            true,
        )
        .and_then(|m| {
            if m < MIN_MEMORY_LIMIT {
                cx.error(
                    cx.val_pos(&["limits", "memory"]),
                    "`limits.memory` must be at least 16MiB",
                    Some("the default is 256MiB".to_owned()),
                );
                None
            } else {
                Some(m)
            }
        });

    // Listening-address collisions, reported on the later component.
    let claims: Vec<(&Declared, &Resource)> = declared
        .iter()
        .flat_map(|d| d.resources.iter().map(move |r| (d, r)))
        .collect();
    for (j, (b, rb)) in claims.iter().enumerate() {
        for (a, ra) in &claims[..j] {
            if ra.protocol == rb.protocol && addresses_overlap(ra.address, rb.address) {
                cx.error(
                    cx.val_pos(&[b.kind.section(), &b.id, rb.key]),
                    format!(
                        "{} `{}` and {} `{}` both listen on {} port {} ({} overlaps {})",
                        b.kind,
                        b.id,
                        a.kind,
                        a.id,
                        rb.protocol.as_str(),
                        rb.address.port(),
                        rb.address,
                        ra.address
                    ),
                    Some(
                        "give each source its own port, or bind them to distinct addresses"
                            .to_owned(),
                    ),
                );
            }
        }
        if let (Some(api_addr), true, Protocol::Tcp) = (api, api_enabled, rb.protocol)
            && addresses_overlap(api_addr, rb.address)
        {
            cx.error(
                cx.val_pos(&[b.kind.section(), &b.id, rb.key]),
                format!(
                    "TCP {} `{}` listens on the API's address {api_addr}",
                    b.kind, b.id
                ),
                Some("use another port, or move the API with `api.address`".to_owned()),
            );
        }
    }

    // Inputs, over every component that was declared (failed ones have been reported).
    let readable: Vec<&str> = order
        .iter()
        .filter(|d| d.kind != ComponentKind::Sink)
        .map(|d| d.id.as_str())
        .collect();
    let mut read_ids: HashSet<&str> = HashSet::new();
    for d in declared.iter().filter(|d| d.kind != ComponentKind::Source) {
        let (kind, id, section) = (d.kind, d.id.as_str(), d.kind.section());
        // `inputs` that are not a list already have their error (one mistake, one error).
        let not_a_list = cx
            .root
            .find(&[section, id, "inputs"])
            .is_some_and(|(_, n)| !matches!(n.kind, crate::node::Kind::Seq(_)));
        if d.inputs.is_empty() && !not_a_list {
            let example = readable.first().copied().unwrap_or("my_source");
            let pos = cx
                .root
                .find(&[section, id, "inputs"])
                .and_then(|(k, n)| n.pos.or(k))
                .or(d.key_pos);
            cx.error(
                pos,
                format!("{kind} `{id}` has no inputs"),
                Some(format!(
                    "list at least one source or transform id, e.g. inputs: [{example}]"
                )),
            );
        }
        let mut listed = HashSet::new();
        for (i, input) in d.inputs.iter().enumerate() {
            let idx = i.to_string();
            let pos = cx.val_pos(&[section, id, "inputs", &idx]);
            if !listed.insert(input.as_str()) {
                cx.error(
                    pos,
                    format!("input `{input}` is listed twice"),
                    Some("list each input once".to_owned()),
                );
                continue;
            }
            let (read, found) = resolve_input(input, &kind_of, &outputs_of);
            read_ids.insert(read);
            match found {
                Resolved::Component(ComponentKind::Sink) => cx.error(
                    pos,
                    format!("input `{input}` is a sink; sinks cannot be inputs"),
                    Some("inputs name sources or transforms".to_owned()),
                ),
                Resolved::Component(_)
                    if !declared
                        .iter()
                        .find(|d| d.id == *input)
                        .is_none_or(|d| d.default_output) =>
                {
                    let outputs = outputs_of
                        .get(input.as_str())
                        .copied()
                        .flatten()
                        .unwrap_or_default();
                    let list: Vec<String> =
                        outputs.iter().map(|o| format!("`{input}.{o}`")).collect();
                    cx.error(
                        pos,
                        format!("`{input}` has only named outputs"),
                        Some(format!("read one of {}", list.join(", "))),
                    );
                }
                Resolved::Component(_) | Resolved::Output => {}
                Resolved::NoSuchOutput { owner, outputs } => {
                    no_such_output(&mut cx, pos, input, owner, &outputs, "list");
                }
                // With nothing to read from, "no sources defined" already says it all.
                Resolved::Unknown if readable.is_empty() => {}
                Resolved::Unknown => {
                    let hint = did_you_mean(input, &readable, "defined sources and transforms");
                    cx.error(
                        pos,
                        format!("unknown input `{input}`: no source or transform has this id"),
                        Some(hint),
                    );
                }
            }
        }
    }

    // Cycles run through named outputs too: `a.x` is read from `a`.
    let owners: Vec<Vec<String>> = declared
        .iter()
        .filter(|d| d.kind == ComponentKind::Transform)
        .map(|d| {
            d.inputs
                .iter()
                .map(|i| resolve_input(i, &kind_of, &outputs_of).0.to_owned())
                .collect()
        })
        .collect();
    let graph: Vec<(&str, &[String])> = declared
        .iter()
        .filter(|d| d.kind == ComponentKind::Transform)
        .zip(&owners)
        .map(|(d, inputs)| (d.id.as_str(), inputs.as_slice()))
        .collect();
    report_cycles(&mut cx, &graph);

    for d in &declared {
        if d.kind != ComponentKind::Sink && !read_ids.contains(d.id.as_str()) {
            cx.warn(
                d.key_pos,
                format!(
                    "{} `{}` is not an input of any transform or sink; its events are dropped",
                    d.kind, d.id
                ),
                Some(format!(
                    "add `{}` to some component's inputs, or remove it",
                    d.id
                )),
            );
        }
    }

    // Unit tests name components and their outputs: read once those are all known.
    let tests = match root.entry(crate::unit_tests::TESTS_KEY) {
        Some(entry) => {
            let graph = crate::unit_tests::Graph {
                kind_of: &kind_of,
                outputs_of: &outputs_of,
            };
            crate::unit_tests::read_tests::<R>(entry, &mut cx, &graph)
        }
        None => Vec::new(),
    };

    if cx.errors > 0 {
        return None;
    }
    Some(Config {
        api: if api_enabled {
            api.map(|address| ApiConfig {
                address,
                token: api_token.flatten(),
                tls: api_tls.flatten(),
            })
        } else {
            None
        },
        shutdown_timeout: shutdown_timeout?,
        data_dir: data_dir?,
        limits: Limits { memory: memory? },
        sources: loaded.sources,
        transforms: loaded.transforms,
        sinks: loaded.sinks,
        tests,
        warnings: Vec::new(),
    })
}

/// The file position of character `column` of line `line` of the string whose value starts at
/// `start` in `text`.
fn inside_value(text: &str, start: Pos, line: usize, column: usize) -> Option<Pos> {
    let first = text.lines().nth(start.line.checked_sub(1)?)?;
    let at: String = first.chars().skip(start.column.saturating_sub(1)).collect();
    let head = at.trim_end();
    let block = head.starts_with('|') || head.starts_with('>');
    let triple = head.starts_with("\"\"\"") || head.starts_with("'''");
    if block || (triple && head.len() == 3) {
        // The string starts on the next line. A block scalar's lines share the indentation of
        // its first non-blank line, which the string does not hold.
        let indent = text
            .lines()
            .skip(start.line)
            .find(|l| !l.trim().is_empty())
            .map_or(0, |l| l.chars().take_while(|c| *c == ' ').count());
        let indent = if block { indent } else { 0 };
        return Some(Pos::new(start.line + 1 + line, indent + column + 1));
    }
    let opening = if triple {
        3
    } else if head.starts_with('"') || head.starts_with('\'') {
        1
    } else {
        0
    };
    Some(if line == 0 {
        Pos::new(start.line, start.column + opening + column)
    } else if opening == 0 {
        // Only a block scalar spans lines unfolded; where the parser places its value at its
        // first line of content, every line has that line's indentation.
        Pos::new(start.line + line, start.column + column)
    } else {
        Pos::new(start.line + line, column + 1)
    })
}

/// The error for `ID.NAME` where `ID` has no output `NAME`; `verb` is what the hint asks of
/// the default output (`list` it in `inputs`, `name` it in a test).
pub(crate) fn no_such_output(
    cx: &mut Ctx<'_>,
    pos: Option<Pos>,
    id: &str,
    owner: &str,
    outputs: &[&str],
    verb: &str,
) {
    let output = &id[owner.len() + 1..];
    let hint = if outputs.is_empty() {
        format!("`{owner}` has only its default output: {verb} `{owner}`")
    } else {
        did_you_mean(output, outputs, &format!("outputs of `{owner}`"))
    };
    cx.error(
        pos,
        format!("`{owner}` has no output `{output}`"),
        Some(hint),
    );
}

/// What an entry of `inputs` names.
pub(crate) enum Resolved<'a> {
    /// A component's default output (or a sink, which is an error).
    Component(ComponentKind),
    /// A named output of a component.
    Output,
    /// `ID.NAME` where `ID` exists but has no output `NAME`.
    NoSuchOutput {
        owner: &'a str,
        outputs: Vec<&'a str>,
    },
    Unknown,
}

/// Resolves an input to the component it reads from, and what it is. An id holding a dot names
/// that component when one has it; otherwise the part before the last dot names a component and
/// the rest one of its outputs (`route.errors`).
pub(crate) fn resolve_input<'a>(
    input: &'a str,
    kind_of: &HashMap<&'a str, ComponentKind>,
    outputs_of: &HashMap<&'a str, Option<&'a [String]>>,
) -> (&'a str, Resolved<'a>) {
    if let Some(kind) = kind_of.get(input) {
        return (input, Resolved::Component(*kind));
    }
    let Some((owner, output)) = input.rsplit_once('.') else {
        return (input, Resolved::Unknown);
    };
    match (kind_of.get(owner), outputs_of.get(owner)) {
        (Some(ComponentKind::Sink), _) => (owner, Resolved::Component(ComponentKind::Sink)),
        (Some(_), Some(None)) => (owner, Resolved::Output),
        (Some(_), Some(Some(outputs))) if outputs.iter().any(|o| o == output) => {
            (owner, Resolved::Output)
        }
        (Some(_), Some(Some(outputs))) => (
            owner,
            Resolved::NoSuchOutput {
                owner,
                outputs: outputs.iter().map(String::as_str).collect(),
            },
        ),
        _ => (input, Resolved::Unknown),
    }
}

/// Reports each cycle among transforms once, in data-flow order (`a -> b` means b reads a).
fn report_cycles(cx: &mut Ctx<'_>, graph: &[(&str, &[String])]) {
    let index: HashMap<&str, usize> = graph
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (*id, i))
        .collect();
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut state = vec![0u8; graph.len()];
    let mut reported: HashSet<Vec<usize>> = HashSet::new();
    for start in 0..graph.len() {
        if state[start] != 0 {
            continue;
        }
        // Iterative DFS: (node, next input to look at).
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let inputs = graph[node].1;
            if *next >= inputs.len() {
                state[node] = 2;
                stack.pop();
                continue;
            }
            let input_idx = *next;
            *next += 1;
            let Some(&target) = index.get(inputs[input_idx].as_str()) else {
                continue;
            };
            match state[target] {
                0 => {
                    state[target] = 1;
                    stack.push((target, 0));
                }
                1 => {
                    let from = stack.iter().position(|(n, _)| *n == target).unwrap_or(0);
                    let members: Vec<usize> = stack[from..].iter().map(|(n, _)| *n).collect();
                    let mut key = members.clone();
                    key.sort_unstable();
                    if reported.insert(key) {
                        // The stack follows "reads from" edges; print it reversed, as data flows.
                        let mut names: Vec<&str> =
                            members.iter().rev().map(|n| graph[*n].0).collect();
                        names.insert(0, graph[target].0);
                        let idx = input_idx.to_string();
                        cx.error(
                            cx.val_pos(&["transforms", graph[node].0, "inputs", &idx]),
                            format!("cycle among transforms: {}", names.join(" -> ")),
                            Some(
                                "a transform cannot read, directly or indirectly, from itself"
                                    .to_owned(),
                            ),
                        );
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_address("0.0.0.0:5514").unwrap().port(), 5514);
        assert_eq!(
            parse_address("localhost:80").unwrap(),
            "127.0.0.1:80".parse().unwrap()
        );
        assert!(parse_address("[::]:5514").unwrap().is_ipv6());
        assert!(parse_address("0.0.0.0").unwrap_err().contains("no port"));
        assert!(
            parse_address("example.com:80")
                .unwrap_err()
                .contains("not an IP address")
        );
        assert!(
            parse_address("1.2.3.4:99999")
                .unwrap_err()
                .contains("invalid port")
        );
        assert!(parse_address("::1:80").unwrap_err().contains("brackets"));
    }

    #[test]
    fn overlaps() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(addresses_overlap(a("0.0.0.0:514"), a("127.0.0.1:514")));
        assert!(addresses_overlap(a("127.0.0.1:514"), a("0.0.0.0:514")));
        assert!(addresses_overlap(a("[::]:514"), a("127.0.0.1:514")));
        assert!(!addresses_overlap(a("0.0.0.0:514"), a("[::1]:514")));
        assert!(!addresses_overlap(a("127.0.0.1:514"), a("127.0.0.2:514")));
        assert!(!addresses_overlap(a("127.0.0.1:514"), a("127.0.0.1:515")));
        assert!(!addresses_overlap(a("127.0.0.1:0"), a("127.0.0.1:0")));
    }

    #[test]
    fn timezones() {
        assert_eq!(parse_timezone("UTC"), Ok(TimeZoneSetting::Utc));
        assert_eq!(parse_timezone("local"), Ok(TimeZoneSetting::Local));
        assert_eq!(parse_timezone("+02:00"), Ok(TimeZoneSetting::Fixed(7200)));
        assert_eq!(parse_timezone("-05:30"), Ok(TimeZoneSetting::Fixed(-19800)));
        assert_eq!(parse_timezone("+0100"), Ok(TimeZoneSetting::Fixed(3600)));
        assert_eq!(parse_timezone("+01"), Ok(TimeZoneSetting::Fixed(3600)));
        assert!(parse_timezone("Europe/Paris").is_err());
        assert!(
            parse_timezone("+25:00")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(parse_timezone("+1:00").is_err());
        assert!(parse_timezone("+01:0:0").is_err());
    }
}
