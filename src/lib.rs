//! loghaul as a library: the configuration and its component registry ([`config`]), the
//! components ([`sources`], [`transforms`], [`sinks`]), the pipeline they are joined by
//! ([`pipeline`], [`topology`]), the network layer ([`net`]), metrics and the HTTP API, and
//! [`server`], which runs it all. The `loghaul` binary parses the command line and calls
//! [`server`]; tests and fuzz targets use the same parts in-process.

pub mod api;
pub mod config;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod logging;
pub mod metrics;
pub mod net;
pub mod pipeline;
pub mod server;
pub mod sinks;
pub mod sources;
pub mod systemd;
pub mod tap;
pub mod tap_client;
pub mod top;
pub mod topology;
pub mod transforms;
pub mod unit_test;
pub mod watch;
