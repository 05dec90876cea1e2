//! loghaul's integration tests: one test binary (`cargo test --test it`) that drives the real
//! `loghaul` executable with real clients (util-linux `logger`, Debian's rsyslogd) and raw
//! sockets, and reads what it writes.
//!
//! Layout, ripgrep-style: [`harness`] is the small DSL (start a server on free ports, send bytes,
//! wait for lines, read metrics, stop with SIGTERM); every other module holds the tests of one
//! area. Regression tests are named after the bad input or bug they cover
//! (`bad_input_octet_count_with_non_digits`).
//!
//! Peers: `logger` and `/usr/sbin/rsyslogd` must be installed (`scripts/install-peers.sh`);
//! tests that need them fail, never skip, when they are missing.

// Tests state their expectations with expect()/unwrap(): a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;

mod acking_client;

mod api;
mod bad_input;
mod config;
mod console;
mod crash;
mod durability;
mod file_sink;
mod file_source;
mod file_tree;
mod formats;
mod forward_clients;
mod forward_wire;
mod framing;
mod hops;
mod http_server;
mod http_sink;
mod kafka;
mod listener;
mod logger;
mod memory;
mod opentelemetry;
mod operations;
mod package;
mod reload;
mod routing;
mod rsyslog;
mod shutdown;
mod stateful;
mod tap;
mod tls;
mod top;
mod transforms;
mod unit_tests;
mod validate;
mod vrl_docs;
mod web_console;
