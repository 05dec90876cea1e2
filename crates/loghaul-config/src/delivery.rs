//! What every sink has besides its own options: its `buffer` (where events wait for it, how many,
//! and what happens when that is full) and its `retry` policy (how failures that may pass are
//! retried, and when to give up and send events to the dead-letter file).
//!
//! ```yaml
//! sinks:
//!   out:
//!     type: http
//!     buffer: { type: disk, max_size: 1GiB, when_full: block, sync: every_batch }
//!     retry: { initial: 100ms, max: 30s, max_attempts: 10 }   # default: forever
//! ```

use std::time::Duration;

use serde::Deserialize;

use crate::raw::{RawDuration, RawSize};
use crate::validate::Validator;

/// Default `buffer.max_events` of a memory buffer.
pub const DEFAULT_MEMORY_MAX_EVENTS: usize = 500_000;
/// Default `buffer.max_size` of a disk buffer.
pub const DEFAULT_DISK_MAX_SIZE: u64 = 1 << 30;
/// The smallest `buffer.max_size` of a disk buffer: room for a few segments' worth of batches.
pub const MIN_DISK_MAX_SIZE: u64 = 1 << 20;
/// Default `retry.initial`.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(100);
/// Default `retry.max`.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);

/// A sink's buffer: the queue between its inputs and itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferConfig {
    pub kind: BufferKind,
    pub when_full: WhenFull,
}

impl Default for BufferConfig {
    fn default() -> BufferConfig {
        BufferConfig {
            kind: BufferKind::Memory { max_events: None },
            when_full: WhenFull::Block,
        }
    }
}

/// Where a sink's waiting events are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// In memory; `max_events` caps the events queued (`None`: the sink's own queue of batches
    /// alone bounds it).
    Memory { max_events: Option<usize> },
    /// In a segmented log under `data_dir/buffers/SINK`, up to `max_size` bytes on disk.
    Disk { max_size: u64, sync: SyncMode },
}

/// When a disk buffer fsyncs, and so when its events count as committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// After every group of batches written (concurrent senders share one fsync).
    EveryBatch,
    /// Every interval; batches are acknowledged after the fsync that covers them.
    Interval(Duration),
    /// Never explicitly: the kernel writes back when it likes. Events are acknowledged once
    /// written; a power loss may lose them, a crash of loghaul does not.
    Never,
}

/// What a full buffer does with the next batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenFull {
    /// Wait for room: the sources push back.
    Block,
    /// Drop the batch for this sink, count it, and report it errored to acknowledging sources.
    DropNewest,
}

/// How a sink retries what failed for a reason that may pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// The first wait; it doubles (with jitter) up to `max`.
    pub initial: Duration,
    pub max: Duration,
    /// Attempts before giving up and sending the events to the dead-letter file; `None`:
    /// retry forever.
    pub max_attempts: Option<u32>,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            initial: DEFAULT_RETRY_INITIAL,
            max: DEFAULT_RETRY_MAX,
            max_attempts: None,
        }
    }
}

impl RetryConfig {
    /// The wait after the `attempt`-th failure (1-based): `initial` doubled per failure, capped at
    /// `max`, without jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doubled = self
            .initial
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        doubled.min(self.max)
    }

    /// Whether `attempts` failures exhaust the policy.
    pub fn exhausted(&self, attempts: u32) -> bool {
        self.max_attempts.is_some_and(|max| attempts >= max)
    }
}

/// `buffer:` as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBuffer {
    /// `memory` (default) or `disk`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Memory buffers: the most events queued.
    #[serde(default)]
    pub max_events: Option<usize>,
    /// Disk buffers: the most bytes on disk.
    #[serde(default)]
    pub max_size: Option<RawSize>,
    /// `block` (default) or `drop_newest`.
    #[serde(default)]
    pub when_full: Option<String>,
    /// Disk buffers: `every_batch` (default), a duration such as `50ms`, or `never`.
    #[serde(default)]
    pub sync: Option<String>,
}

/// `retry:` as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    #[serde(default)]
    pub initial: Option<RawDuration>,
    #[serde(default)]
    pub max: Option<RawDuration>,
    /// A count, or `forever` (the default).
    #[serde(default)]
    pub max_attempts: Option<RawAttempts>,
}

/// `max_attempts` as written: a count or `forever`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawAttempts(pub String);

impl<'de> Deserialize<'de> for RawAttempts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawAttempts, D::Error> {
        crate::raw::scalar_text(d, "a number of attempts or `forever`").map(RawAttempts)
    }
}

const BUFFER_TYPES: &str = "buffer types: memory, disk";
const WHEN_FULL_HINT: &str = "when_full: block (the sources wait) or drop_newest";
const SYNC_HINT: &str = "sync: every_batch, never, or an interval such as 50ms";

/// Validates `buffer:`.
pub(crate) fn validate_buffer(
    raw: Option<RawBuffer>,
    v: &mut Validator<'_, '_>,
) -> Option<BufferConfig> {
    let Some(raw) = raw else {
        return Some(BufferConfig::default());
    };
    let mut ok = true;
    let when_full = match raw.when_full.as_deref() {
        None | Some("block") => WhenFull::Block,
        Some("drop_newest") => WhenFull::DropNewest,
        Some(other) => {
            v.error(
                &["buffer", "when_full"],
                format!("unknown `when_full` value `{other}`"),
                Some(WHEN_FULL_HINT.to_owned()),
            );
            ok = false;
            WhenFull::Block
        }
    };
    let kind = match raw.kind.as_deref() {
        None | Some("memory") => {
            for (set, key) in [
                (raw.max_size.is_some(), "max_size"),
                (raw.sync.is_some(), "sync"),
            ] {
                if set {
                    v.error_at_key(
                        &["buffer", key],
                        format!("`{key}` is for disk buffers"),
                        Some(
                            "add `type: disk`, or use `max_events` to bound a memory buffer".into(),
                        ),
                    );
                    ok = false;
                }
            }
            if raw.max_events == Some(0) {
                v.error(
                    &["buffer", "max_events"],
                    "`max_events` must be greater than 0",
                    Some(format!("the default is {DEFAULT_MEMORY_MAX_EVENTS}")),
                );
                ok = false;
            }
            BufferKind::Memory {
                max_events: raw.max_events,
            }
        }
        Some("disk") => {
            if raw.max_events.is_some() {
                v.error_at_key(
                    &["buffer", "max_events"],
                    "`max_events` is for memory buffers",
                    Some("bound a disk buffer with `max_size`, e.g. 1GiB".into()),
                );
                ok = false;
            }
            let max_size = v
                .size_at(
                    raw.max_size.as_ref(),
                    &["buffer", "max_size"],
                    DEFAULT_DISK_MAX_SIZE as usize,
                    true,
                )
                .map(|n| n as u64);
            if let Some(n) = max_size
                && n < MIN_DISK_MAX_SIZE
            {
                v.error(
                    &["buffer", "max_size"],
                    "`max_size` of a disk buffer must be at least 1MiB",
                    None,
                );
                ok = false;
            }
            let sync = match raw.sync.as_deref() {
                None | Some("every_batch") => Some(SyncMode::EveryBatch),
                Some("never") => Some(SyncMode::Never),
                Some(text) => match crate::units::parse_duration(text) {
                    Ok(d) if !d.is_zero() => Some(SyncMode::Interval(d)),
                    _ => {
                        v.error(
                            &["buffer", "sync"],
                            format!("unknown `sync` value `{text}`"),
                            Some(SYNC_HINT.to_owned()),
                        );
                        None
                    }
                },
            };
            match (max_size, sync) {
                (Some(max_size), Some(sync)) => BufferKind::Disk { max_size, sync },
                _ => return None,
            }
        }
        Some(other) => {
            v.error(
                &["buffer", "type"],
                format!("unknown buffer type `{other}`"),
                Some(BUFFER_TYPES.to_owned()),
            );
            return None;
        }
    };
    ok.then_some(BufferConfig { kind, when_full })
}

/// Validates `retry:`.
pub(crate) fn validate_retry(
    raw: Option<RawRetry>,
    v: &mut Validator<'_, '_>,
) -> Option<RetryConfig> {
    let Some(raw) = raw else {
        return Some(RetryConfig::default());
    };
    let initial = v.duration_at(
        raw.initial.as_ref(),
        &["retry", "initial"],
        DEFAULT_RETRY_INITIAL,
        true,
    );
    let max = v.duration_at(raw.max.as_ref(), &["retry", "max"], DEFAULT_RETRY_MAX, true);
    let max_attempts = match raw.max_attempts.as_ref().map(|a| a.0.as_str()) {
        None | Some("forever") => Some(None),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if n > 0 => Some(Some(n)),
            _ => {
                v.error(
                    &["retry", "max_attempts"],
                    format!("`max_attempts` must be a positive count or `forever`, not `{text}`"),
                    None,
                );
                None
            }
        },
    };
    let (initial, max, max_attempts) = (initial?, max?, max_attempts?);
    if max < initial {
        v.error(
            &["retry", "max"],
            "`retry.max` is shorter than `retry.initial`",
            None,
        );
        return None;
    }
    Some(RetryConfig {
        initial,
        max,
        max_attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = RetryConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            max_attempts: Some(3),
        };
        assert_eq!(r.backoff(1), Duration::from_millis(100));
        assert_eq!(r.backoff(2), Duration::from_millis(200));
        assert_eq!(r.backoff(4), Duration::from_millis(800));
        assert_eq!(r.backoff(5), Duration::from_secs(1));
        assert_eq!(r.backoff(400), Duration::from_secs(1));
        assert!(!r.exhausted(2));
        assert!(r.exhausted(3));
        assert!(!RetryConfig::default().exhausted(u32::MAX));
    }
}
