//! Fuzz the configuration loader: arbitrary text, in the format the first byte picks (YAML, TOML,
//! JSON), goes through `${VAR}` interpolation (with fixed variables), the crate's parsers, the
//! located tree, serde into each component's raw schema, and validation. The registry is a small
//! one defined here through the crate's public API, shaped like the server's (syslog, fluent and
//! http_server sources, a filter transform, file, console, blackhole, fluent and http sinks), so
//! the inputs the real configs use reach every stage. Its types take no `tls` (the loader refuses
//! the key for them, after reading it): validating `tls` reads the certificate files it names, and
//! a fuzz target must not depend on the machine's files.
//!
//! Invariants: the loader never panics, never overflows the stack, and ends; an error result holds
//! at least one error, each positioned at a 1-based line of the text (or its end); an accepted config has
//! sources and sinks, unique ids, inputs that name sources or transforms, only warnings in
//! `warnings`, and components whose validated values keep their promises (non-zero sizes and
//! durations).
#![no_main]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use loghaul_config::raw::{RawDuration, RawName, RawSize};
use loghaul_config::{
    ComponentConfig, Config, ConfigFormat, PathTemplate, Registry, Resource, TimeZoneSetting,
    Validator, facility_hint, parse_timezone, severity_hint,
};
use serde::Deserialize;

/// What every validated component can check about itself.
trait Checked {
    fn check(&self);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Tcp,
    Udp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SyslogFormat {
    Auto,
    Rfc3164,
    Rfc5424,
    Raw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Framing {
    Auto,
    Newline,
    OctetCounting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Encoding {
    Json,
    Text,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSyslog {
    mode: Mode,
    address: String,
    #[serde(default)]
    format: Option<SyslogFormat>,
    #[serde(default)]
    framing: Option<Framing>,
    #[serde(default)]
    max_length: Option<RawSize>,
    #[serde(default)]
    max_connections: Option<usize>,
    #[serde(default)]
    receive_buffer: Option<RawSize>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    timezone: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct Syslog {
    mode: Mode,
    address: SocketAddr,
    format: SyslogFormat,
    framing: Framing,
    max_length: usize,
    max_connections: usize,
    receive_buffer: Option<usize>,
    strict: bool,
    timezone: TimeZoneSetting,
}

impl ComponentConfig for Syslog {
    const TYPE: &'static str = "syslog";
    type Raw = RawSyslog;

    fn validate(s: RawSyslog, cx: &mut Validator<'_, '_>) -> Option<Syslog> {
        let address = cx.address(&s.address, &["address"]);
        if s.mode == Mode::Udp {
            for key in ["framing", "max_connections"] {
                if cx.has(&[key]) {
                    cx.error_at_key(&[key], format!("`{key}` applies only to TCP"), None);
                }
            }
        }
        let max_length = cx.size(s.max_length.as_ref(), "max_length", 100 * 1024, true);
        let receive_buffer = match &s.receive_buffer {
            None => Some(None),
            Some(r) => cx.size(Some(r), "receive_buffer", 0, true).map(Some),
        };
        let max_connections = cx.positive(s.max_connections, "max_connections", 10_000);
        let timezone = match s.timezone.as_deref().map(parse_timezone) {
            None => Some(TimeZoneSetting::Utc),
            Some(Ok(tz)) => Some(tz),
            Some(Err(e)) => {
                cx.error(&["timezone"], e, None);
                None
            }
        };
        Some(Syslog {
            mode: s.mode,
            address: address?,
            format: s.format.unwrap_or(SyslogFormat::Auto),
            framing: s.framing.unwrap_or(Framing::Auto),
            max_length: max_length?,
            max_connections: max_connections?,
            receive_buffer: receive_buffer?,
            strict: s.strict.unwrap_or(false),
            timezone: timezone?,
        })
    }

    fn resources(&self) -> Vec<Resource> {
        match self.mode {
            Mode::Tcp => vec![Resource::tcp(self.address, "address")],
            Mode::Udp => vec![Resource::udp(self.address, "address")],
        }
    }
}

impl Checked for Syslog {
    fn check(&self) {
        assert!(self.max_length > 0 && self.max_connections > 0);
        assert_ne!(self.receive_buffer, Some(0));
        if let TimeZoneSetting::Fixed(secs) = self.timezone {
            assert!(secs.abs() < 24 * 3600, "a zone offset of {secs}s");
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    username: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFluentSource {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    max_connections: Option<usize>,
    #[serde(default)]
    max_request_size: Option<RawSize>,
    #[serde(default)]
    max_decompressed_size: Option<RawSize>,
    #[serde(default)]
    shared_key: Option<String>,
    #[serde(default)]
    users: Option<Vec<RawUser>>,
    #[serde(default)]
    self_hostname: Option<String>,
    #[serde(default)]
    heartbeat: Option<bool>,
}

#[derive(Clone, Debug, PartialEq)]
struct FluentSource {
    address: SocketAddr,
    max_request_size: usize,
    max_decompressed_size: usize,
    users: Vec<(String, String)>,
}

impl ComponentConfig for FluentSource {
    const TYPE: &'static str = "fluent";
    type Raw = RawFluentSource;

    fn validate(s: RawFluentSource, cx: &mut Validator<'_, '_>) -> Option<FluentSource> {
        let address = cx.address(
            s.address.as_deref().unwrap_or("0.0.0.0:24224"),
            &["address"],
        );
        let _ = cx.positive(s.max_connections, "max_connections", 10_000);
        let max_request_size = cx.size(
            s.max_request_size.as_ref(),
            "max_request_size",
            16 << 20,
            true,
        );
        let max_decompressed_size = cx.size(
            s.max_decompressed_size.as_ref(),
            "max_decompressed_size",
            64 << 20,
            true,
        );
        let users: Vec<(String, String)> = s
            .users
            .unwrap_or_default()
            .into_iter()
            .map(|u| (u.username, u.password))
            .collect();
        if !users.is_empty() && s.shared_key.is_none() {
            cx.error(&["users"], "users need a shared_key", None);
        }
        let _ = (s.self_hostname, s.heartbeat);
        Some(FluentSource {
            address: address?,
            max_request_size: max_request_size?,
            max_decompressed_size: max_decompressed_size?,
            users,
        })
    }

    fn resources(&self) -> Vec<Resource> {
        vec![Resource::tcp(self.address, "address")]
    }
}

impl Checked for FluentSource {
    fn check(&self) {
        assert!(self.max_request_size > 0 && self.max_decompressed_size > 0);
        let _ = &self.users;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttpServer {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    paths: Option<Vec<String>>,
    #[serde(default)]
    tag_from_path: Option<bool>,
    #[serde(default)]
    headers: Option<Vec<String>>,
    #[serde(default)]
    max_body_size: Option<RawSize>,
    #[serde(default)]
    max_decompressed_size: Option<RawSize>,
    #[serde(default)]
    request_timeout: Option<RawDuration>,
    #[serde(default)]
    ack_timeout: Option<RawDuration>,
}

#[derive(Clone, Debug, PartialEq)]
struct HttpServer {
    address: SocketAddr,
    paths: Vec<String>,
    max_body_size: usize,
    max_decompressed_size: usize,
    request_timeout: Duration,
    ack_timeout: Duration,
}

impl ComponentConfig for HttpServer {
    const TYPE: &'static str = "http_server";
    type Raw = RawHttpServer;

    fn validate(s: RawHttpServer, cx: &mut Validator<'_, '_>) -> Option<HttpServer> {
        let address = cx.address(s.address.as_deref().unwrap_or("0.0.0.0:8080"), &["address"]);
        let paths = s.paths.unwrap_or_else(|| vec!["/".to_owned()]);
        if let Some(p) = paths.iter().find(|p| !p.starts_with('/')) {
            cx.error(
                &["paths"],
                format!("path `{p}` does not start with `/`"),
                None,
            );
        }
        let max_body_size = cx.size(s.max_body_size.as_ref(), "max_body_size", 10 << 20, true);
        let max_decompressed_size = cx.size(
            s.max_decompressed_size.as_ref(),
            "max_decompressed_size",
            100 << 20,
            true,
        );
        let request_timeout = cx.duration(
            s.request_timeout.as_ref(),
            "request_timeout",
            Duration::from_secs(30),
            true,
        );
        let ack_timeout = cx.duration(
            s.ack_timeout.as_ref(),
            "ack_timeout",
            Duration::from_secs(30),
            true,
        );
        let _ = (s.tag_from_path, s.headers);
        Some(HttpServer {
            address: address?,
            paths,
            max_body_size: max_body_size?,
            max_decompressed_size: max_decompressed_size?,
            request_timeout: request_timeout?,
            ack_timeout: ack_timeout?,
        })
    }

    fn resources(&self) -> Vec<Resource> {
        vec![Resource::tcp(self.address, "address")]
    }
}

impl Checked for HttpServer {
    fn check(&self) {
        assert!(self.max_body_size > 0 && self.max_decompressed_size > 0);
        assert!(!self.request_timeout.is_zero() && !self.ack_timeout.is_zero());
        assert!(self.paths.iter().all(|p| p.starts_with('/')));
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    #[serde(default)]
    min_severity: Option<RawName>,
    #[serde(default)]
    facilities: Option<Vec<RawName>>,
    #[serde(default)]
    appnames: Option<Vec<String>>,
    #[serde(default)]
    contains: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    min_severity: Option<u8>,
    facilities: Option<Vec<u8>>,
    appnames: Option<Vec<String>>,
    contains: Option<String>,
}

impl ComponentConfig for Filter {
    const TYPE: &'static str = "filter";
    type Raw = RawFilter;

    fn validate(f: RawFilter, cx: &mut Validator<'_, '_>) -> Option<Filter> {
        let code = |name: &str, max: u8, by_name: fn(&str) -> Option<u8>| {
            name.parse::<u8>()
                .ok()
                .filter(|c| *c < max)
                .or_else(|| by_name(name))
        };
        let min_severity = match &f.min_severity {
            None => Some(None),
            Some(RawName(name)) => match code(name, 8, loghaul_core::names::severity_code) {
                Some(c) => Some(Some(c)),
                None => {
                    cx.error(
                        &["min_severity"],
                        format!("unknown severity `{name}`"),
                        Some(severity_hint(name)),
                    );
                    None
                }
            },
        };
        let facilities = match &f.facilities {
            None => Some(None),
            Some(names) => {
                let mut codes = Vec::new();
                let mut ok = true;
                for RawName(name) in names {
                    match code(name, 24, loghaul_core::names::facility_code) {
                        Some(c) => codes.push(c),
                        None => {
                            ok = false;
                            cx.error(
                                &["facilities"],
                                format!("unknown facility `{name}`"),
                                Some(facility_hint(name)),
                            );
                        }
                    }
                }
                ok.then_some(Some(codes))
            }
        };
        Some(Filter {
            min_severity: min_severity?,
            facilities: facilities?,
            appnames: f.appnames,
            contains: f.contains,
        })
    }
}

impl Checked for Filter {
    fn check(&self) {
        assert!(self.min_severity.is_none_or(|s| s < 8));
        assert!(self.facilities.iter().flatten().all(|f| *f < 24));
        let _ = (&self.appnames, &self.contains);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    path: String,
    #[serde(default)]
    encoding: Option<Encoding>,
    #[serde(default)]
    flush_interval: Option<RawDuration>,
    #[serde(default)]
    idle_timeout: Option<RawDuration>,
    #[serde(default)]
    max_open_files: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
struct File {
    path: PathTemplate,
    encoding: Encoding,
    flush_interval: Duration,
    idle_timeout: Duration,
    max_open_files: usize,
}

impl ComponentConfig for File {
    const TYPE: &'static str = "file";
    type Raw = RawFile;

    fn validate(f: RawFile, cx: &mut Validator<'_, '_>) -> Option<File> {
        let path = match PathTemplate::parse(&f.path) {
            Ok((t, warnings)) => {
                for w in warnings {
                    cx.warn(&["path"], w, None);
                }
                Some(t)
            }
            Err(e) => {
                cx.error(&["path"], e.message, Some(e.hint));
                None
            }
        };
        let flush_interval = cx.duration(
            f.flush_interval.as_ref(),
            "flush_interval",
            Duration::from_secs(1),
            true,
        );
        let idle_timeout = cx.duration(
            f.idle_timeout.as_ref(),
            "idle_timeout",
            Duration::from_secs(30),
            true,
        );
        let max_open_files = cx.positive(f.max_open_files, "max_open_files", 256);
        Some(File {
            path: path?,
            encoding: f.encoding.unwrap_or(Encoding::Json),
            flush_interval: flush_interval?,
            idle_timeout: idle_timeout?,
            max_open_files: max_open_files?,
        })
    }
}

impl Checked for File {
    fn check(&self) {
        assert!(!self.flush_interval.is_zero() && !self.idle_timeout.is_zero());
        assert!(self.max_open_files > 0);
        let _ = (&self.path, self.encoding);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsole {
    #[serde(default)]
    encoding: Option<Encoding>,
}

#[derive(Clone, Debug, PartialEq)]
struct Console {
    encoding: Encoding,
}

impl ComponentConfig for Console {
    const TYPE: &'static str = "console";
    type Raw = RawConsole;

    fn validate(c: RawConsole, _: &mut Validator<'_, '_>) -> Option<Console> {
        Some(Console {
            encoding: c.encoding.unwrap_or(Encoding::Json),
        })
    }
}

impl Checked for Console {
    fn check(&self) {
        let _ = self.encoding;
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlackhole {}

#[derive(Clone, Debug, PartialEq)]
struct Blackhole;

impl ComponentConfig for Blackhole {
    const TYPE: &'static str = "blackhole";
    type Raw = RawBlackhole;

    fn validate(_: RawBlackhole, _: &mut Validator<'_, '_>) -> Option<Blackhole> {
        Some(Blackhole)
    }
}

impl Checked for Blackhole {
    fn check(&self) {}
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFluentSink {
    address: String,
    #[serde(default)]
    shared_key: Option<String>,
    #[serde(default)]
    timeout: Option<RawDuration>,
}

#[derive(Clone, Debug, PartialEq)]
struct FluentSink {
    address: String,
    timeout: Duration,
}

impl ComponentConfig for FluentSink {
    const TYPE: &'static str = "fluent";
    type Raw = RawFluentSink;

    fn validate(s: RawFluentSink, cx: &mut Validator<'_, '_>) -> Option<FluentSink> {
        if !s.address.contains(':') {
            cx.error(&["address"], "the address has no port", None);
        }
        let timeout = cx.duration(s.timeout.as_ref(), "timeout", Duration::from_secs(30), true);
        let _ = s.shared_key;
        Some(FluentSink {
            address: s.address,
            timeout: timeout?,
        })
    }
}

impl Checked for FluentSink {
    fn check(&self) {
        assert!(!self.timeout.is_zero());
        let _ = &self.address;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Compression {
    None,
    Gzip,
    Zstd,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttpSink {
    uri: String,
    #[serde(default)]
    encoding: Option<Encoding>,
    #[serde(default)]
    compression: Option<Compression>,
    #[serde(default)]
    max_events: Option<usize>,
    #[serde(default)]
    max_bytes: Option<RawSize>,
    #[serde(default)]
    timeout: Option<RawDuration>,
    #[serde(default)]
    headers: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Clone, Debug, PartialEq)]
struct HttpSink {
    uri: String,
    compression: Compression,
    max_events: usize,
    max_bytes: usize,
    timeout: Duration,
}

impl ComponentConfig for HttpSink {
    const TYPE: &'static str = "http";
    type Raw = RawHttpSink;

    fn validate(s: RawHttpSink, cx: &mut Validator<'_, '_>) -> Option<HttpSink> {
        if !(s.uri.starts_with("http://") || s.uri.starts_with("https://")) {
            cx.error(&["uri"], "the uri is not http:// or https://", None);
        }
        let max_events = cx.positive(s.max_events, "max_events", 1000);
        let max_bytes = cx.size(s.max_bytes.as_ref(), "max_bytes", 1 << 20, true);
        let timeout = cx.duration(s.timeout.as_ref(), "timeout", Duration::from_secs(1), true);
        let _ = (s.encoding, s.headers);
        Some(HttpSink {
            uri: s.uri,
            compression: s.compression.unwrap_or(Compression::None),
            max_events: max_events?,
            max_bytes: max_bytes?,
            timeout: timeout?,
        })
    }
}

impl Checked for HttpSink {
    fn check(&self) {
        assert!(self.max_events > 0 && self.max_bytes > 0 && !self.timeout.is_zero());
        let _ = (&self.uri, self.compression);
    }
}

loghaul_config::component_set! {
    /// The sources of the fuzzed registry.
    pub enum Sources: Source as dyn Checked {
        Syslog(Syslog),
        Fluent(FluentSource),
        HttpServer(HttpServer),
    }
}

loghaul_config::component_set! {
    /// The transforms of the fuzzed registry.
    pub enum Transforms: Transform as dyn Checked {
        Filter(Filter),
    }
}

loghaul_config::component_set! {
    /// The sinks of the fuzzed registry.
    pub enum Sinks: Sink as dyn Checked {
        File(File),
        Console(Console),
        Blackhole(Blackhole),
        Fluent(FluentSink),
        Http(HttpSink),
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Fuzzed;

impl Registry for Fuzzed {
    type Source = Sources;
    type Transform = Transforms;
    type Sink = Sinks;
}

/// The environment the fuzzed configs see: a few set variables (one empty, one holding a
/// reference that must stay text) and one secret file, everything else unset. Nothing is read
/// from the machine, so a run does not depend on its files.
fn vars(name: &str) -> Option<String> {
    match name {
        "file:/run/secrets/token" => Some("s3cr3t".to_owned()),
        "HOST" => Some("127.0.0.1".to_owned()),
        "PORT" => Some("5514".to_owned()),
        "DIR" => Some("./loghaul-data".to_owned()),
        "SIZE" => Some("64KiB".to_owned()),
        "EMPTY" => Some(String::new()),
        "NESTED" => Some("${HOST}".to_owned()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let format = match first % 3 {
        0 => ConfigFormat::Yaml,
        1 => ConfigFormat::Toml,
        _ => ConfigFormat::Json,
    };
    let text = String::from_utf8_lossy(rest);
    match Config::<Fuzzed>::from_str_with_vars(&text, format, "fuzz", &vars) {
        Err(errors) => {
            assert!(
                errors.iter().any(|d| d.is_error()),
                "an Err without an error"
            );
            // The variables hold no line break, so interpolation keeps the text's lines. YAML
            // also breaks lines at a lone CR, and reports an error at the end of the text on the
            // line after the last one even when the text does not end with a line break; so a
            // position may be on any line up to one past the last break.
            let lines = text.bytes().filter(|b| matches!(b, b'\n' | b'\r')).count() + 2;
            for d in errors.iter() {
                assert_eq!(d.origin, "fuzz");
                assert!(!d.message.is_empty());
                if let Some(line) = d.line {
                    assert!(line >= 1 && line <= lines, "line {line} of {lines}: {d}");
                }
                assert!(d.column.is_none_or(|c| c >= 1), "column 0: {d}");
                assert!(!d.to_string().is_empty());
            }
        }
        Ok(config) => {
            assert!(!config.sources.is_empty() && !config.sinks.is_empty());
            assert!(config.warnings.iter().all(|w| !w.is_error()));
            let mut ids = HashSet::new();
            for id in config
                .sources
                .iter()
                .map(|c| &c.id)
                .chain(config.transforms.iter().map(|c| &c.id))
                .chain(config.sinks.iter().map(|c| &c.id))
            {
                assert!(ids.insert(id.as_str()), "id `{id}` twice");
            }
            let readable: HashSet<&str> = config
                .sources
                .iter()
                .map(|c| c.id.as_str())
                .chain(config.transforms.iter().map(|c| c.id.as_str()))
                .collect();
            for (id, inputs) in config
                .transforms
                .iter()
                .map(|c| (&c.id, &c.inputs))
                .chain(config.sinks.iter().map(|c| (&c.id, &c.inputs)))
            {
                assert!(!inputs.is_empty(), "`{id}` has no inputs");
                for input in inputs {
                    assert!(readable.contains(input.as_str()), "`{id}` reads `{input}`");
                }
            }
            for c in &config.sources {
                c.config.component().check();
            }
            for c in &config.transforms {
                c.config.component().check();
            }
            for c in &config.sinks {
                c.config.component().check();
            }
        }
    }
});
