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
//! The crate knows no component type. A server declares its component sets with
//! [`component_set!`] (each type implementing [`ComponentConfig`] beside its code) and loads
//! `Config<R>` for its [`Registry`] `R`.

mod component;
pub mod delivery;
mod diagnostic;
mod interpolate;
mod json;
mod keys;
mod load;
pub mod node;
pub mod raw;
mod runtime;
mod template;
pub mod tls;
mod toml_doc;
pub mod unit_tests;
mod units;
mod validate;
mod yaml;

use std::path::Path;

pub use component::{
    Component, ComponentConfig, ComponentKind, ComponentLoader, ComponentSet, Protocol, Registry,
    Resource,
};
pub use delivery::{BufferConfig, BufferKind, RetryConfig, SyncMode, WhenFull};
pub use diagnostic::{ConfigErrors, Diagnostic, Pos, Severity};
pub use interpolate::interpolate;
pub use keys::keys_of;
pub use load::{ConfigFormat, TOP_LEVEL_KEYS};
pub use loghaul_tls::{Role as TlsRole, TlsConfig, TlsError};
pub use runtime::{ApiConfig, Config, Limits, TimeZoneSetting};
pub use template::{KNOWN_FIELDS, PathTemplate, TemplateError, TemplatePart, push_path_component};
pub use unit_tests::{FieldValue, TestEvent, TestInput, TestOutput, UnitTest};
pub use units::{DURATION_HINT, SIZE_HINT, parse_duration, parse_size};
pub use validate::{
    DEFAULT_API_ADDRESS, DEFAULT_MEMORY_LIMIT, DEFAULT_SHUTDOWN_TIMEOUT, TZ_HINT, Validator,
    addresses_overlap, facility_hint, parse_address, parse_timezone, severity_hint,
};

/// The process's lookup: `file:PATH` reads a secret file, anything else is an environment
/// variable.
fn env_var(name: &str) -> Option<String> {
    match name.strip_prefix("file:") {
        Some(path) => interpolate::file_var(path),
        None => std::env::var(name).ok(),
    }
}

/// Reads and checks a `tls` map's files for one end: `Ok` with warnings (what works here but
/// fails with some peers), or what is wrong.
pub type TlsCheck<'a> = dyn Fn(&TlsConfig, TlsRole) -> Result<Vec<String>, TlsError> + 'a;

/// What loading reads besides the configuration text: the values of `${VAR}` (and the secret
/// files of `${file:PATH}`), and the files a `tls` map names. [`Config::load`] and
/// [`Config::from_str`] use the process's ([`Environment::process`]); tests and fuzz targets
/// pass their own, so that what a text means does not depend on the machine.
#[derive(Clone, Copy)]
pub struct Environment<'a> {
    /// The value of `${NAME}` (`NAME` is `file:PATH` for a secret file); `None`: unset.
    pub vars: &'a dyn Fn(&str) -> Option<String>,
    /// Whether the files a validated `tls` map names make a working config for its end of the
    /// connections ([`loghaul_tls::check`], which reads them, for the process).
    pub tls: &'a TlsCheck<'a>,
}

impl Environment<'_> {
    /// The process's environment variables and file system.
    pub fn process() -> Environment<'static> {
        Environment {
            vars: &env_var,
            tls: &loghaul_tls::check,
        }
    }
}

impl<'a> Environment<'a> {
    /// `vars` for `${VAR}`s, and the real file system.
    pub fn with_vars(vars: &'a dyn Fn(&str) -> Option<String>) -> Environment<'a> {
        Environment {
            vars,
            tls: &loghaul_tls::check,
        }
    }
}

impl<R: Registry> Config<R> {
    /// Reads and validates the file at `path`; the format comes from the extension (`.toml`,
    /// `.json`, anything else YAML) and `${VAR}`s from the process environment.
    ///
    /// # Errors
    ///
    /// Every problem found: unreadable file, interpolation, syntax, schema and validation errors.
    pub fn load(path: &Path) -> Result<Config<R>, ConfigErrors> {
        load::load_path(path, Environment::process())
    }

    /// Loads several files as one configuration: the components of all of them, each global
    /// setting (`api`, `data_dir`, ...) from the one file that sets it. A component id in two
    /// files, or a global setting in two, is an error naming both places. One path is
    /// [`Config::load`].
    ///
    /// # Errors
    ///
    /// As [`Config::load`], for any of the files, and the conflicts between them.
    pub fn load_all(paths: &[std::path::PathBuf]) -> Result<Config<R>, ConfigErrors> {
        load::load_paths(paths, Environment::process())
    }

    /// [`Config::load`] with variables looked up by `vars` instead of the environment.
    ///
    /// # Errors
    ///
    /// As [`Config::load`].
    pub fn load_with_vars(
        path: &Path,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config<R>, ConfigErrors> {
        load::load_path(path, Environment::with_vars(vars))
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
    ) -> Result<Config<R>, ConfigErrors> {
        load::load_str(text, format, origin, Environment::process())
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
    ) -> Result<Config<R>, ConfigErrors> {
        load::load_str(text, format, origin, Environment::with_vars(vars))
    }

    /// Reads a side file of unit tests (a document holding `tests:` only) and checks its tests
    /// against this configuration's components; `${VAR}`s come from the process environment.
    ///
    /// # Errors
    ///
    /// Every problem found, located in that file.
    pub fn load_tests(&self, path: &Path) -> Result<Vec<UnitTest<R::Condition>>, ConfigErrors> {
        load::load_tests_path(self, path, Environment::process())
    }

    /// [`Config::load_tests`] for text; `origin` names it in diagnostics.
    ///
    /// # Errors
    ///
    /// Every problem found.
    pub fn tests_from_str(
        &self,
        text: &str,
        format: ConfigFormat,
        origin: &str,
    ) -> Result<Vec<UnitTest<R::Condition>>, ConfigErrors> {
        load::load_tests_str(
            self,
            text,
            format,
            origin,
            Environment::with_vars(&|_| None),
        )
    }

    /// [`Config::from_str`] in the environment `env`: its variables, and its way of checking
    /// the files `tls` maps name.
    ///
    /// # Errors
    ///
    /// Every problem found.
    pub fn from_str_in(
        text: &str,
        format: ConfigFormat,
        origin: &str,
        env: Environment<'_>,
    ) -> Result<Config<R>, ConfigErrors> {
        load::load_str(text, format, origin, env)
    }
}
