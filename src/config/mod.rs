//! The server's configuration: the component sets this binary has (the [`Components`] registry
//! over the source, transform and sink enums) and the embedded default configuration. Loading
//! and validation are `loghaul-config`'s; each component's schema lives beside its code.

use loghaul_config::{ConfigErrors, ConfigFormat, Registry, Validator};

use crate::sinks::SinkConfig;
use crate::sources::SourceConfig;
use crate::transforms::TransformConfig;

/// The component types this server has.
#[derive(Clone, Debug, PartialEq)]
pub struct Components;

impl Registry for Components {
    type Source = SourceConfig;
    type Transform = TransformConfig;
    type Sink = SinkConfig;
    type Condition = crate::transforms::vrl::Program;

    /// A unit test's condition is VRL that returns a boolean: assertions (`assert_eq!`), which
    /// abort with their message, or a boolean expression.
    fn condition(source: &str, v: &mut Validator<'_, '_>, key: &[&str]) -> Option<Self::Condition> {
        crate::transforms::vrl::compile(source, crate::transforms::vrl::Expect::Boolean, v, key)
    }
}

/// A validated configuration of this server.
pub type Config = loghaul_config::Config<Components>;

/// What building a kafka source or sink says in a build without the `kafka` feature.
#[cfg_attr(feature = "kafka", allow(dead_code))]
pub const NO_KAFKA: &str =
    "this build has no Kafka support (the `kafka` feature, which builds librdkafka, is off)";

/// The embedded default configuration, a commented YAML file: syslog over TCP and UDP on
/// 127.0.0.1:5514, JSON lines into `./loghaul-data/%Y-%m-%d.jsonl`, the API on 127.0.0.1:8686.
pub const DEFAULT_YAML: &str = include_str!("default.yaml");

/// The default configuration, parsed (without environment variables: the embedded file uses
/// none, and a user's environment must not change what "the default" means).
///
/// # Errors
///
/// Never in a released build: a test pins that the embedded file loads without a diagnostic.
pub fn default_config() -> Result<Config, ConfigErrors> {
    Config::from_str_with_vars(DEFAULT_YAML, ConfigFormat::Yaml, "<default>", &|_| None)
}

#[cfg(test)]
mod docs_tests;
#[cfg(test)]
mod examples_tests;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
