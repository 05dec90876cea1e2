//! Sources: components that accept events from the outside world and push batches downstream.

pub mod syslog;
