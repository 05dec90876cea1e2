//! The `file` sink's configuration: its schema as written and its validation.

use std::time::Duration;

use loghaul_config::raw::RawDuration;
use loghaul_config::{ComponentConfig, PathTemplate, Validator};
use serde::Deserialize;

use crate::sinks::SinkThread;
use crate::sinks::encoder::Encoding;

/// Default `flush_interval`.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Default `idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `max_open_files`.
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;

/// `type: file`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFileSink {
    /// Path template: strftime specifiers and `{{ field }}` references. Required.
    pub path: String,
    /// `json` (one object per line) or `text`. Default `json`.
    #[serde(default)]
    pub encoding: Option<Encoding>,
    /// How often buffered writes are flushed. Default `1s`.
    #[serde(default)]
    pub flush_interval: Option<RawDuration>,
    /// Close a file not written to for this long. Default `30s`.
    #[serde(default)]
    pub idle_timeout: Option<RawDuration>,
    /// Most files held open at once; the least recently written is closed first. Default `256`.
    #[serde(default)]
    pub max_open_files: Option<usize>,
    /// Where the writes run: `own` (a thread of its own) or `shared` (the worker threads).
    /// Default `own`.
    #[serde(default)]
    pub thread: Option<SinkThread>,
}

/// A file sink, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// The parsed path template.
    pub path: PathTemplate,
    /// The template as written, for messages.
    pub path_raw: String,
    /// Output encoding.
    pub encoding: Encoding,
    /// How often writes are flushed (> 0).
    pub flush_interval: Duration,
    /// Close files idle this long (> 0).
    pub idle_timeout: Duration,
    /// Most files open at once (> 0).
    pub max_open_files: usize,
    /// Where the writes run.
    pub thread: SinkThread,
}

impl ComponentConfig for FileSinkConfig {
    const TYPE: &'static str = "file";
    type Raw = RawFileSink;

    fn validate(f: RawFileSink, cx: &mut Validator<'_, '_>) -> Option<FileSinkConfig> {
        let path = match PathTemplate::parse(&f.path) {
            Ok((t, warnings)) => {
                for w in warnings {
                    cx.warn(&["path"], w, None);
                }
                Some(t)
            }
            Err(e) => {
                cx.error(
                    &["path"],
                    format!("{} (at character {})", e.message, e.offset + 1),
                    Some(e.hint),
                );
                None
            }
        };
        let flush_interval = cx.duration(
            f.flush_interval.as_ref(),
            "flush_interval",
            DEFAULT_FLUSH_INTERVAL,
            true,
        );
        let idle_timeout = cx.duration(
            f.idle_timeout.as_ref(),
            "idle_timeout",
            DEFAULT_IDLE_TIMEOUT,
            true,
        );
        let max_open_files =
            cx.positive(f.max_open_files, "max_open_files", DEFAULT_MAX_OPEN_FILES);
        Some(FileSinkConfig {
            path: path?,
            path_raw: f.path,
            encoding: f.encoding.unwrap_or_default(),
            flush_interval: flush_interval?,
            idle_timeout: idle_timeout?,
            max_open_files: max_open_files?,
            thread: f.thread.unwrap_or(SinkThread::Shared),
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
