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

use crate::diagnostic::{Diagnostic, Pos, closest, did_you_mean};
use crate::load::Loaded;
use crate::node::Node;
use crate::raw::{RawDuration, RawName, RawSink, RawSize, RawSource, RawTransform};
use crate::runtime::{
    ApiConfig, BlackholeSinkConfig, Config, ConsoleSinkConfig, FileSinkConfig, FilterConfig,
    SinkConfig, SourceConfig, SyslogMode, SyslogSourceConfig, TimeZoneSetting, TransformConfig,
};
use crate::template::PathTemplate;
use crate::units::{DURATION_HINT, SIZE_HINT, parse_duration, parse_size};

/// Default API address.
pub const DEFAULT_API_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8686);
/// Default `shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default syslog `max_length`: 100KiB.
pub const DEFAULT_MAX_LENGTH: usize = 100 * 1024;
/// Default syslog `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default file sink `flush_interval`.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Default file sink `idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default file sink `max_open_files`.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

const ADDRESS_HINT: &str =
    "write HOST:PORT with an IP address or localhost, e.g. \"0.0.0.0:5514\" or \"[::]:5514\"";
const TZ_HINT: &str = "use UTC, local, or a fixed offset such as +02:00 or -05:30";

/// Diagnostics with positions looked up in the node tree.
struct Ctx<'a> {
    origin: &'a str,
    root: &'a Node,
    diags: &'a mut Vec<Diagnostic>,
    errors: usize,
}

impl Ctx<'_> {
    /// Position of the key at `path` (for sequence elements: the element).
    fn key_pos(&self, path: &[&str]) -> Option<Pos> {
        self.root.find(path).and_then(|(k, _)| k)
    }

    /// Position of the value at `path`, falling back to its key.
    fn val_pos(&self, path: &[&str]) -> Option<Pos> {
        self.root.find(path).and_then(|(k, n)| n.pos.or(k))
    }

    fn error(&mut self, pos: Option<Pos>, message: impl Into<String>, hint: Option<String>) {
        self.errors += 1;
        self.diags
            .push(Diagnostic::error(self.origin, pos, message).with_hint(hint));
    }

    fn warn(&mut self, pos: Option<Pos>, message: impl Into<String>, hint: Option<String>) {
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

    fn duration(
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

fn severity_hint(name: &str) -> String {
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

fn facility_hint(name: &str) -> String {
    let list = format!(
        "accepted: {} (or a code 0-23)",
        names::FACILITIES.join(", ")
    );
    match closest(name, names::FACILITIES) {
        Some(c) => format!("did you mean '{c}'? {list}"),
        None => list,
    }
}

/// Validates the loaded raw config into a [`Config`], pushing diagnostics.
pub(crate) fn validate(
    loaded: &Loaded,
    root: &Node,
    origin: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Config> {
    let mut cx = Ctx {
        origin,
        root,
        diags,
        errors: 0,
    };
    let raw = &loaded.raw;

    // Ids: syntax and uniqueness across sections (within a section the parsers already refuse
    // duplicate keys).
    let mut seen: HashMap<&str, &'static str> = HashMap::new();
    let mut declared: Vec<_> = loaded.declared.iter().collect();
    declared.sort_by_key(|d| d.key_pos);
    for d in &declared {
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
    let mut kind_of: HashMap<&str, &str> = HashMap::new();
    for d in &declared {
        kind_of.entry(d.id.as_str()).or_insert(d.kind);
    }
    for (kind, section) in [("source", "sources"), ("sink", "sinks")] {
        // A section that is there but not a map has its own error already.
        let malformed = root
            .find(&[section])
            .is_some_and(|(_, n)| !n.is_null() && n.entries().is_none());
        if !malformed && !loaded.declared.iter().any(|d| d.kind == kind) {
            let pos = cx.key_pos(&[section]);
            let example = if kind == "source" {
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
    let api_raw = raw.api.clone().unwrap_or_default();
    let api = match &api_raw.address {
        Some(a) => cx.address(a, &["api", "address"]),
        None => Some(DEFAULT_API_ADDRESS),
    };
    let api_enabled = api_raw.enabled.unwrap_or(true);

    let shutdown_timeout = cx.duration(
        raw.shutdown_timeout.as_ref(),
        &["shutdown_timeout"],
        DEFAULT_SHUTDOWN_TIMEOUT,
        false,
    );

    // Sources.
    let mut sources = Vec::new();
    let mut binds: Vec<(&str, SyslogMode, SocketAddr)> = Vec::new();
    for (id, source) in &raw.sources.0 {
        let RawSource::Syslog(s) = source;
        let p = |k: &'static str| ["sources", id.as_str(), k];
        let address = cx.address(&s.address, &p("address"));
        if s.mode == SyslogMode::Udp {
            for (key, why) in [
                ("framing", "each UDP datagram is one message"),
                ("max_connections", "UDP has no connections"),
            ] {
                if cx.root.find(&p(key)).is_some() {
                    cx.error(
                        cx.key_pos(&p(key)),
                        format!("`{key}` applies only to TCP sources; source `{id}` is UDP"),
                        Some(format!("remove `{key}`: {why}")),
                    );
                }
            }
        }
        let max_length = cx.size(
            s.max_length.as_ref(),
            &p("max_length"),
            DEFAULT_MAX_LENGTH,
            true,
        );
        let receive_buffer = match &s.receive_buffer {
            None => Some(None),
            Some(r) => cx.size(Some(r), &p("receive_buffer"), 0, true).map(Some),
        };
        let max_connections = cx.positive(
            s.max_connections,
            &p("max_connections"),
            DEFAULT_MAX_CONNECTIONS,
        );
        let timezone = match &s.timezone {
            None => Some(TimeZoneSetting::Utc),
            Some(t) => match parse_timezone(t) {
                Ok(tz) => Some(tz),
                Err(msg) => {
                    cx.error(cx.val_pos(&p("timezone")), msg, Some(TZ_HINT.to_owned()));
                    None
                }
            },
        };
        if let Some(addr) = address {
            binds.push((id, s.mode, addr));
        }
        if let (
            Some(address),
            Some(max_length),
            Some(receive_buffer),
            Some(max_connections),
            Some(timezone),
        ) = (
            address,
            max_length,
            receive_buffer,
            max_connections,
            timezone,
        ) {
            sources.push((
                id.clone(),
                SourceConfig::Syslog(SyslogSourceConfig {
                    mode: s.mode,
                    address,
                    format: s.format.unwrap_or_default(),
                    framing: s.framing.unwrap_or_default(),
                    max_length,
                    max_connections,
                    receive_buffer,
                    strict: s.strict.unwrap_or(false),
                    timezone,
                }),
            ));
        }
    }

    // Listening-address collisions, reported on the later source.
    for (j, (id_b, mode_b, addr_b)) in binds.iter().enumerate() {
        for (id_a, mode_a, addr_a) in &binds[..j] {
            if mode_a == mode_b && addresses_overlap(*addr_a, *addr_b) {
                let proto = if *mode_b == SyslogMode::Tcp {
                    "TCP"
                } else {
                    "UDP"
                };
                cx.error(
                    cx.val_pos(&["sources", id_b, "address"]),
                    format!("source `{id_b}` and source `{id_a}` both listen on {proto} port {} ({addr_b} overlaps {addr_a})", addr_b.port()),
                    Some("give each source its own port, or bind them to distinct addresses".to_owned()),
                );
            }
        }
        if let (Some(api_addr), true, SyslogMode::Tcp) = (api, api_enabled, mode_b)
            && addresses_overlap(api_addr, *addr_b)
        {
            cx.error(
                cx.val_pos(&["sources", id_b, "address"]),
                format!("TCP source `{id_b}` listens on the API's address {api_addr}"),
                Some("use another port, or move the API with `api.address`".to_owned()),
            );
        }
    }

    // Transforms.
    let mut transforms = Vec::new();
    for (id, transform) in &raw.transforms.0 {
        let RawTransform::Filter(f) = transform;
        let base = ["transforms", id.as_str()];
        let min_severity = match &f.min_severity {
            None => Some(None),
            Some(RawName(name)) => match name
                .parse::<u8>()
                .ok()
                .filter(|c| *c < 8)
                .or_else(|| names::severity_code(name))
            {
                Some(c) => Some(Some(c)),
                None => {
                    cx.error(
                        cx.val_pos(&[base[0], base[1], "min_severity"]),
                        format!("unknown severity `{name}`"),
                        Some(severity_hint(name)),
                    );
                    None
                }
            },
        };
        let facilities = match &f.facilities {
            None => Some(None),
            Some(list) => {
                let mut codes = Some(Vec::new());
                if list.is_empty() {
                    cx.error(
                        cx.val_pos(&[base[0], base[1], "facilities"]),
                        "`facilities: []` matches no event",
                        Some("remove `facilities` to keep every facility".to_owned()),
                    );
                    codes = None;
                }
                for (i, RawName(name)) in list.iter().enumerate() {
                    let idx = i.to_string();
                    match name
                        .parse::<u8>()
                        .ok()
                        .filter(|c| *c < 24)
                        .or_else(|| names::facility_code(name))
                    {
                        Some(c) => {
                            if let Some(v) = codes.as_mut() {
                                v.push(c);
                            }
                        }
                        None => {
                            cx.error(
                                cx.val_pos(&[base[0], base[1], "facilities", &idx]),
                                format!("unknown facility `{name}`"),
                                Some(facility_hint(name)),
                            );
                            codes = None;
                        }
                    }
                }
                codes.map(Some)
            }
        };
        if f.appnames.as_ref().is_some_and(Vec::is_empty) {
            cx.error(
                cx.val_pos(&[base[0], base[1], "appnames"]),
                "`appnames: []` matches no event",
                Some("remove `appnames` to keep every app".to_owned()),
            );
        }
        if let (Some(min_severity), Some(facilities)) = (min_severity, facilities) {
            transforms.push((
                id.clone(),
                TransformConfig::Filter(FilterConfig {
                    inputs: f.inputs.clone(),
                    min_severity,
                    facilities,
                    appnames: f.appnames.clone(),
                    contains: f.contains.clone(),
                }),
            ));
        }
    }

    // Sinks.
    let mut sinks = Vec::new();
    for (id, sink) in &raw.sinks.0 {
        match sink {
            RawSink::File(f) => {
                let p = |k: &'static str| ["sinks", id.as_str(), k];
                let path = match PathTemplate::parse(&f.path) {
                    Ok((t, warnings)) => {
                        for w in warnings {
                            cx.warn(cx.val_pos(&p("path")), w, None);
                        }
                        Some(t)
                    }
                    Err(e) => {
                        cx.error(
                            cx.val_pos(&p("path")),
                            format!("{} (at character {})", e.message, e.offset + 1),
                            Some(e.hint),
                        );
                        None
                    }
                };
                let flush_interval = cx.duration(
                    f.flush_interval.as_ref(),
                    &p("flush_interval"),
                    DEFAULT_FLUSH_INTERVAL,
                    true,
                );
                let idle_timeout = cx.duration(
                    f.idle_timeout.as_ref(),
                    &p("idle_timeout"),
                    DEFAULT_IDLE_TIMEOUT,
                    true,
                );
                let max_open_files = cx.positive(
                    f.max_open_files,
                    &p("max_open_files"),
                    DEFAULT_MAX_OPEN_FILES,
                );
                if let (
                    Some(path),
                    Some(flush_interval),
                    Some(idle_timeout),
                    Some(max_open_files),
                ) = (path, flush_interval, idle_timeout, max_open_files)
                {
                    sinks.push((
                        id.clone(),
                        SinkConfig::File(FileSinkConfig {
                            inputs: f.inputs.clone(),
                            path,
                            path_raw: f.path.clone(),
                            encoding: f.encoding.unwrap_or_default(),
                            flush_interval,
                            idle_timeout,
                            max_open_files,
                        }),
                    ));
                }
            }
            RawSink::Console(c) => sinks.push((
                id.clone(),
                SinkConfig::Console(ConsoleSinkConfig {
                    inputs: c.inputs.clone(),
                    encoding: c.encoding.unwrap_or_default(),
                }),
            )),
            RawSink::Blackhole(b) => sinks.push((
                id.clone(),
                SinkConfig::Blackhole(BlackholeSinkConfig {
                    inputs: b.inputs.clone(),
                }),
            )),
        }
    }

    // Inputs, over every component that loaded (failed ones have already been reported).
    let input_lists: Vec<(&str, &str, &[String])> = raw
        .transforms
        .0
        .iter()
        .map(|(id, RawTransform::Filter(f))| ("transform", id.as_str(), f.inputs.as_slice()))
        .chain(raw.sinks.0.iter().map(|(id, s)| {
            let inputs = match s {
                RawSink::File(f) => f.inputs.as_slice(),
                RawSink::Console(c) => c.inputs.as_slice(),
                RawSink::Blackhole(b) => b.inputs.as_slice(),
            };
            ("sink", id.as_str(), inputs)
        }))
        .collect();
    let readable: Vec<&str> = loaded
        .declared
        .iter()
        .filter(|d| d.kind != "sink")
        .map(|d| d.id.as_str())
        .collect();
    let mut read_ids: HashSet<&str> = HashSet::new();
    for (kind, id, inputs) in &input_lists {
        let section = if *kind == "transform" {
            "transforms"
        } else {
            "sinks"
        };
        if inputs.is_empty() {
            let example = readable.first().copied().unwrap_or("my_source");
            cx.error(
                cx.val_pos(&[section, id, "inputs"]),
                format!("{kind} `{id}` has no inputs"),
                Some(format!(
                    "list at least one source or transform id, e.g. inputs: [{example}]"
                )),
            );
        }
        let mut listed = HashSet::new();
        for (i, input) in inputs.iter().enumerate() {
            let idx = i.to_string();
            let pos = cx.val_pos(&[section, id, "inputs", &idx]);
            read_ids.insert(input.as_str());
            if !listed.insert(input.as_str()) {
                cx.error(
                    pos,
                    format!("input `{input}` is listed twice"),
                    Some("list each input once".to_owned()),
                );
                continue;
            }
            match kind_of.get(input.as_str()) {
                Some(&"sink") => cx.error(
                    pos,
                    format!("input `{input}` is a sink; sinks cannot be inputs"),
                    Some("inputs name sources or transforms".to_owned()),
                ),
                Some(_) => {}
                // With nothing to read from, "no sources defined" already says it all.
                None if readable.is_empty() => {}
                None => {
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

    report_cycles(&mut cx, raw);

    for d in &loaded.declared {
        if d.kind != "sink" && !read_ids.contains(d.id.as_str()) {
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

    if cx.errors > 0 {
        return None;
    }
    Some(Config {
        api: if api_enabled {
            api.map(|address| ApiConfig { address })
        } else {
            None
        },
        shutdown_timeout: shutdown_timeout?,
        sources,
        transforms,
        sinks,
        warnings: Vec::new(),
    })
}

/// Reports each cycle among transforms once, in data-flow order (`a -> b` means b reads a).
fn report_cycles(cx: &mut Ctx<'_>, raw: &crate::raw::RawConfig) {
    let graph: Vec<(&str, &[String])> = raw
        .transforms
        .0
        .iter()
        .map(|(id, RawTransform::Filter(f))| (id.as_str(), f.inputs.as_slice()))
        .collect();
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
