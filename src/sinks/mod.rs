//! Sinks: components that write batches out. Each sink runs on its own OS thread with a
//! single-threaded runtime, because its writes are blocking file or stdout writes that must not
//! stall the source tasks sharing the main runtime's workers.

pub mod blackhole;
pub mod console;
pub mod encoder;
pub mod file;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Bumped on SIGHUP; file sinks compare it to the generation they opened their files under and
/// reopen everything when it moved (logrotate's `postrotate` sends SIGHUP).
pub type ReopenGeneration = Arc<AtomicU64>;
