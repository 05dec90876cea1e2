//! loghaul's configuration: loading, `${VAR}` interpolation and validation into runtime types.
//!
//! YAML is the primary format; TOML and JSON are accepted by file extension. Whatever the format,
//! the text is interpolated, parsed into a located tree ([`node`]), deserialized into the raw
//! schema ([`raw`]) and validated into the runtime types ([`Config`] and friends), all before
//! anything binds a port. Every problem found is reported, each at `FILE:LINE:COL` with a hint
//! where one helps:
//!
//! ```text
//! loghaul.yaml:7:5: error: unknown key `adress`
//!   hint: did you mean 'address'?
//! loghaul.yaml:14:14: error: unknown input `syslog_tpc`: no source or transform has this id
//!   hint: did you mean 'syslog_tcp'?
//! ```
//!
//! ```
//! use loghaul_config::{Config, ConfigFormat};
//! let config = Config::from_str(Config::default_yaml(), ConfigFormat::Yaml, "default").unwrap();
//! assert_eq!(config.sources.len(), 2);
//! ```

mod diagnostic;
mod interpolate;
mod json;
mod load;
pub mod node;
pub mod raw;
mod runtime;
mod template;
mod toml_doc;
mod units;
mod validate;
mod yaml;

use std::path::Path;

pub use diagnostic::{ConfigErrors, Diagnostic, Pos, Severity};
pub use interpolate::interpolate;
pub use load::ConfigFormat;
pub use runtime::{
    ApiConfig, BlackholeSinkConfig, Config, ConsoleSinkConfig, Encoding, FileSinkConfig,
    FilterConfig, Framing, SinkConfig, SourceConfig, SyslogFormat, SyslogMode, SyslogSourceConfig,
    TimeZoneSetting, TransformConfig,
};
pub use template::{KNOWN_FIELDS, PathTemplate, TemplateError, TemplatePart, push_path_component};
pub use units::{parse_duration, parse_size};
pub use validate::{
    DEFAULT_API_ADDRESS, DEFAULT_FLUSH_INTERVAL, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_LENGTH, DEFAULT_MAX_OPEN_FILES, DEFAULT_SHUTDOWN_TIMEOUT, addresses_overlap,
    parse_address, parse_timezone,
};

/// The embedded default configuration, a commented YAML file.
const DEFAULT_YAML: &str = include_str!("default.yaml");

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn no_vars(_: &str) -> Option<String> {
    None
}

impl Config {
    /// Reads and validates the file at `path`; the format comes from the extension (`.toml`,
    /// `.json`, anything else YAML) and `${VAR}`s from the process environment.
    ///
    /// # Errors
    ///
    /// Every problem found: unreadable file, interpolation, syntax, schema and validation errors.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        load::load_path(path, &env_var)
    }

    /// [`Config::load`] with variables looked up by `vars` instead of the environment.
    ///
    /// # Errors
    ///
    /// As [`Config::load`].
    pub fn load_with_vars(
        path: &Path,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        load::load_path(path, vars)
    }

    /// Validates configuration text; `origin` names it in diagnostics (a path, or `<stdin>`).
    /// `${VAR}`s come from the process environment.
    ///
    /// # Errors
    ///
    /// Every problem found.
    pub fn from_str(
        text: &str,
        format: ConfigFormat,
        origin: &str,
    ) -> Result<Config, ConfigErrors> {
        load::load_str(text, format, origin, &env_var)
    }

    /// [`Config::from_str`] with variables looked up by `vars` instead of the environment.
    ///
    /// # Errors
    ///
    /// Every problem found.
    pub fn from_str_with_vars(
        text: &str,
        format: ConfigFormat,
        origin: &str,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        load::load_str(text, format, origin, vars)
    }

    /// The embedded default configuration: syslog over TCP and UDP on 127.0.0.1:5514, JSON lines
    /// into `./loghaul-data/%Y-%m-%d.jsonl`, the API on 127.0.0.1:8686.
    pub fn default_yaml() -> &'static str {
        DEFAULT_YAML
    }

    /// The default configuration, parsed.
    ///
    /// The embedded file is parsed without environment variables; a test pins that it parses and
    /// equals [`Config::builtin`], which is returned should the embedded file ever fail.
    pub fn default_config() -> Config {
        load::load_str(DEFAULT_YAML, ConfigFormat::Yaml, "<default>", &no_vars)
            .unwrap_or_else(|_| Config::builtin())
    }

    /// The default configuration, built in code (equal to the parsed [`Config::default_yaml`]).
    pub fn builtin() -> Config {
        use std::net::{IpAddr, Ipv4Addr, SocketAddr};
        let listen = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 5514);
        let syslog = |mode| {
            SourceConfig::Syslog(SyslogSourceConfig {
                mode,
                address: listen,
                format: SyslogFormat::Auto,
                framing: Framing::Auto,
                max_length: DEFAULT_MAX_LENGTH,
                max_connections: DEFAULT_MAX_CONNECTIONS,
                receive_buffer: None,
                strict: false,
                timezone: TimeZoneSetting::Utc,
            })
        };
        let path_raw = "./loghaul-data/%Y-%m-%d.jsonl".to_owned();
        let path = PathTemplate {
            parts: vec![
                TemplatePart::Literal("./loghaul-data/".to_owned()),
                TemplatePart::Strftime("%Y-%m-%d".to_owned()),
                TemplatePart::Literal(".jsonl".to_owned()),
            ],
            has_time: true,
            has_fields: false,
        };
        let inputs = vec!["syslog_tcp".to_owned(), "syslog_udp".to_owned()];
        Config {
            api: Some(ApiConfig {
                address: DEFAULT_API_ADDRESS,
            }),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            sources: vec![
                ("syslog_tcp".to_owned(), syslog(SyslogMode::Tcp)),
                ("syslog_udp".to_owned(), syslog(SyslogMode::Udp)),
            ],
            transforms: Vec::new(),
            sinks: vec![(
                "archive".to_owned(),
                SinkConfig::File(FileSinkConfig {
                    inputs,
                    path,
                    path_raw,
                    encoding: Encoding::Json,
                    flush_interval: DEFAULT_FLUSH_INTERVAL,
                    idle_timeout: DEFAULT_IDLE_TIMEOUT,
                    max_open_files: DEFAULT_MAX_OPEN_FILES,
                }),
            )],
            warnings: Vec::new(),
        }
    }

    /// Warnings found while loading (the configuration works, but maybe not as meant).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The source with this id.
    pub fn source(&self, id: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|(i, _)| i == id).map(|(_, c)| c)
    }

    /// The transform with this id.
    pub fn transform(&self, id: &str) -> Option<&TransformConfig> {
        self.transforms
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, c)| c)
    }

    /// The sink with this id.
    pub fn sink(&self, id: &str) -> Option<&SinkConfig> {
        self.sinks.iter().find(|(i, _)| i == id).map(|(_, c)| c)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::default_config()
    }
}

#[cfg(test)]
mod tests;
