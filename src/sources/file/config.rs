//! The `file` source's configuration: its schema as written and its validation.

use std::path::PathBuf;
use std::time::Duration;

use loghaul_config::raw::{RawDuration, RawSize};
use loghaul_config::{ComponentConfig, Validator};
use serde::Deserialize;

use super::lines::{Mode, Multiline, Rules};

/// Default `max_line_size`: 100KiB, as the syslog source's `max_length`.
pub const DEFAULT_MAX_LINE_SIZE: usize = 100 << 10;
/// Default `max_open_files`.
pub const DEFAULT_MAX_OPEN_FILES: usize = 1024;
/// Default `max_read_size`: 256KiB per file per turn. A turn's read becomes one batch; at 1MiB a
/// file read at full speed kept some 2MiB of text and tables per batch in flight for the same
/// rate (`tail`: 7.0–7.3M lines/s at 26–35MiB RSS, against 6.2–7.2M/s at 38–69MiB).
pub const DEFAULT_MAX_READ_SIZE: usize = 256 << 10;
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_GLOB_INTERVAL: Duration = Duration::from_secs(1);
pub const DEFAULT_ROTATE_WAIT: Duration = Duration::from_secs(5);
/// Default `partial_line_timeout`: long enough that a writer flushing a buffer mid-line
/// (log4j's, stdio's) completes the line first.
pub const DEFAULT_PARTIAL_LINE_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_MULTILINE_TIMEOUT: Duration = Duration::from_secs(1);

/// `type: file`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFileSource {
    /// Globs of the files to tail. Required.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// Globs of files to leave alone even when `include` matches them.
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
    /// `beginning` or `end`: where to start files found at the very first start. Default
    /// `beginning`.
    #[serde(default)]
    pub read_from: Option<ReadFrom>,
    /// Where the checkpoints are kept. Default `<data_dir>/<source id>`.
    #[serde(default)]
    pub data_dir: Option<String>,
    /// How often checkpoints are written. Default `1s`.
    #[serde(default)]
    pub checkpoint_interval: Option<RawDuration>,
    /// How often the globs are matched again. Default `1s`.
    #[serde(default)]
    pub glob_interval: Option<RawDuration>,
    /// How long a file renamed away or deleted is kept after its last byte was read. Default `5s`.
    #[serde(default)]
    pub rotate_wait: Option<RawDuration>,
    /// Longest event; longer lines are cut. Default `100KiB`.
    #[serde(default)]
    pub max_line_size: Option<RawSize>,
    /// Most files open at once. Default `1024`.
    #[serde(default)]
    pub max_open_files: Option<usize>,
    /// Most bytes read from one file before the next gets its turn. Default `1MiB`.
    #[serde(default)]
    pub max_read_size: Option<RawSize>,
    /// How long a line without its newline waits before it is emitted. Default `5s`.
    #[serde(default)]
    pub partial_line_timeout: Option<RawDuration>,
    /// Field for the file's path (`""`: none). Default `file`.
    #[serde(default)]
    pub file_key: Option<String>,
    /// Field for the host name (`""`: none). Default `host`.
    #[serde(default)]
    pub host_key: Option<String>,
    /// Field for the line's byte offset. Default: none.
    #[serde(default)]
    pub offset_key: Option<String>,
    /// Joining lines into one event.
    #[serde(default)]
    pub multiline: Option<RawMultiline>,
}

/// `multiline:`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMultiline {
    pub start_pattern: String,
    pub condition_pattern: String,
    pub mode: RawMode,
    #[serde(default)]
    pub timeout: Option<RawDuration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawMode {
    ContinueThrough,
    ContinuePast,
    HaltBefore,
    HaltWith,
}

/// Where files seen for the first time start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadFrom {
    Beginning,
    End,
}

/// A `file` source, validated.
#[derive(Clone, Debug)]
pub struct FileSourceConfig {
    pub include: Vec<glob::Pattern>,
    pub exclude: Vec<glob::Pattern>,
    pub read_from: ReadFrom,
    /// `None`: the top-level `data_dir` joined with the source id.
    pub data_dir: Option<PathBuf>,
    pub checkpoint_interval: Duration,
    pub glob_interval: Duration,
    pub rotate_wait: Duration,
    pub max_open_files: usize,
    pub max_read_size: usize,
    pub partial_line_timeout: Duration,
    pub file_key: Option<String>,
    pub host_key: Option<String>,
    pub offset_key: Option<String>,
    pub rules: Rules,
}

impl PartialEq for FileSourceConfig {
    fn eq(&self, other: &FileSourceConfig) -> bool {
        // Regexes have no equality of their own: two configs are equal when written alike.
        let ml = |c: &FileSourceConfig| {
            c.rules.multiline.as_ref().map(|m| {
                (
                    m.start.as_str().to_owned(),
                    m.condition.as_str().to_owned(),
                    m.mode,
                    m.timeout,
                )
            })
        };
        self.include == other.include
            && self.exclude == other.exclude
            && self.read_from == other.read_from
            && self.data_dir == other.data_dir
            && self.checkpoint_interval == other.checkpoint_interval
            && self.glob_interval == other.glob_interval
            && self.rotate_wait == other.rotate_wait
            && self.max_open_files == other.max_open_files
            && self.max_read_size == other.max_read_size
            && self.partial_line_timeout == other.partial_line_timeout
            && self.file_key == other.file_key
            && self.host_key == other.host_key
            && self.offset_key == other.offset_key
            && self.rules.max_line == other.rules.max_line
            && ml(self) == ml(other)
    }
}

fn globs(cx: &mut Validator<'_, '_>, key: &str, raw: &[String]) -> Option<Vec<glob::Pattern>> {
    let mut ok = true;
    let mut out = Vec::with_capacity(raw.len());
    for (i, text) in raw.iter().enumerate() {
        if text.is_empty() {
            cx.error(
                &[key, &i.to_string()],
                "an empty glob matches nothing",
                None,
            );
            ok = false;
            continue;
        }
        match glob::Pattern::new(text) {
            Ok(p) => out.push(p),
            Err(e) => {
                cx.error(
                    &[key, &i.to_string()],
                    format!("`{text}` is not a valid glob: {e}"),
                    Some("`*` and `?` match within a name, `**` any depth, `[...]` a set".into()),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn regex(cx: &mut Validator<'_, '_>, key: &str, text: &str) -> Option<regex::bytes::Regex> {
    match regex::bytes::Regex::new(text) {
        Ok(r) => Some(r),
        Err(e) => {
            // The regex crate's message spans several lines with a caret under the problem.
            cx.error(
                &["multiline", key],
                format!("`{key}` is not a valid regular expression:\n{e}"),
                Some("the syntax is Rust's `regex` crate's (like RE2: no look-around)".into()),
            );
            None
        }
    }
}

fn key(raw: Option<String>, default: Option<&str>) -> Option<String> {
    match raw {
        Some(k) if k.is_empty() => None,
        Some(k) => Some(k),
        None => default.map(str::to_owned),
    }
}

impl ComponentConfig for FileSourceConfig {
    const TYPE: &'static str = "file";
    type Raw = RawFileSource;

    fn validate(s: RawFileSource, cx: &mut Validator<'_, '_>) -> Option<FileSourceConfig> {
        let include = match &s.include {
            None => {
                cx.error(
                    &[],
                    "a `file` source needs `include`",
                    Some("e.g. include: [\"/var/log/app/*.log\"]".into()),
                );
                None
            }
            Some(list) if list.is_empty() => {
                cx.error(
                    &["include"],
                    "`include` is empty: nothing would be read",
                    None,
                );
                None
            }
            Some(list) => globs(cx, "include", list),
        };
        let exclude = globs(cx, "exclude", s.exclude.as_deref().unwrap_or_default());
        let checkpoint_interval = cx.duration(
            s.checkpoint_interval.as_ref(),
            "checkpoint_interval",
            DEFAULT_CHECKPOINT_INTERVAL,
            true,
        );
        let glob_interval = cx.duration(
            s.glob_interval.as_ref(),
            "glob_interval",
            DEFAULT_GLOB_INTERVAL,
            true,
        );
        let rotate_wait = cx.duration(
            s.rotate_wait.as_ref(),
            "rotate_wait",
            DEFAULT_ROTATE_WAIT,
            false,
        );
        let partial_line_timeout = cx.duration(
            s.partial_line_timeout.as_ref(),
            "partial_line_timeout",
            DEFAULT_PARTIAL_LINE_TIMEOUT,
            true,
        );
        let max_line = cx.size(
            s.max_line_size.as_ref(),
            "max_line_size",
            DEFAULT_MAX_LINE_SIZE,
            true,
        );
        let max_open_files =
            cx.positive(s.max_open_files, "max_open_files", DEFAULT_MAX_OPEN_FILES);
        let max_read_size = cx.size(
            s.max_read_size.as_ref(),
            "max_read_size",
            DEFAULT_MAX_READ_SIZE,
            true,
        );
        let mut ok = true;
        if let Some(m) = max_read_size
            && m > u32::MAX as usize / 4
        {
            cx.error(&["max_read_size"], "`max_read_size` is over 1GiB", None);
            ok = false;
        }
        if let Some(m) = max_line
            && m > u32::MAX as usize / 4
        {
            cx.error(&["max_line_size"], "`max_line_size` is over 1GiB", None);
            ok = false;
        }
        let data_dir = match s.data_dir.as_deref() {
            Some("") => {
                cx.error(
                    &["data_dir"],
                    "`data_dir` is empty",
                    Some("omit it for the default, <data_dir>/<source id>".into()),
                );
                ok = false;
                None
            }
            other => other.map(PathBuf::from),
        };
        let multiline = match s.multiline {
            None => Some(None),
            Some(m) => {
                let start = regex(cx, "start_pattern", &m.start_pattern);
                let condition = regex(cx, "condition_pattern", &m.condition_pattern);
                let timeout = cx.duration_at(
                    m.timeout.as_ref(),
                    &["multiline", "timeout"],
                    DEFAULT_MULTILINE_TIMEOUT,
                    true,
                );
                let mode = match m.mode {
                    RawMode::ContinueThrough => Mode::ContinueThrough,
                    RawMode::ContinuePast => Mode::ContinuePast,
                    RawMode::HaltBefore => Mode::HaltBefore,
                    RawMode::HaltWith => Mode::HaltWith,
                };
                match (start, condition, timeout) {
                    (Some(start), Some(condition), Some(timeout)) => Some(Some(Multiline {
                        start,
                        condition,
                        mode,
                        timeout,
                    })),
                    _ => None,
                }
            }
        };
        let config = FileSourceConfig {
            include: include?,
            exclude: exclude?,
            read_from: s.read_from.unwrap_or(ReadFrom::Beginning),
            data_dir,
            checkpoint_interval: checkpoint_interval?,
            glob_interval: glob_interval?,
            rotate_wait: rotate_wait?,
            max_open_files: max_open_files?,
            max_read_size: max_read_size?,
            partial_line_timeout: partial_line_timeout?,
            file_key: key(s.file_key, Some("file")),
            host_key: key(s.host_key, Some("host")),
            offset_key: key(s.offset_key, None),
            rules: Rules {
                max_line: max_line?,
                multiline: multiline?,
            },
        };
        ok.then_some(config)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
