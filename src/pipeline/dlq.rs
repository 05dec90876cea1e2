//! Dead letters: events a sink can never deliver (an HTTP 400, a path that can never be
//! created, retries exhausted under a finite `retry.max_attempts`) are appended to the sink's
//! dead-letter file instead of being dropped, and `loghaul dlq replay` sends them again once the
//! cause is fixed.
//!
//! ```text
//! <data_dir>/dlq/<sink>.jsonl, one line per event, `event` always last:
//! {"time":"2026-11-25T14:00:00.123Z","sink":"out","reason":"the server answered 400: …",
//!  "attempts":1,"target":"http://h:8080/x","event":{…the event as the sink encoded it…}}
//! ```
//!
//! `event` is the JSON the sink sent (or a JSON string holding the line, for text encodings).
//! `target` is the sink's partition key where it has one (the rendered URI and headers of the
//! HTTP sink), so a replay goes where the event was meant to go.
//!
//! A replay first claims the file by renaming it (`<sink>.jsonl.replaying`), so the server goes
//! on appending new dead letters to a fresh file and no line is replayed by two runs. A line
//! that fails again is appended to the fresh file; the claimed file is removed when the replay
//! ends. A replay that was interrupted leaves its claimed file, and the next one resumes it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::metrics::ComponentMetrics;
use crate::sinks::SinkError;

/// One dead letter as read back.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub reason: String,
    pub attempts: u32,
    /// The sink's partition key, if it has one.
    pub target: Option<String>,
    /// The event's JSON text, exactly as written.
    pub event: String,
}

/// A sink's dead-letter file.
pub struct DeadLetters {
    sink: String,
    path: PathBuf,
    written: Arc<AtomicI64>,
    /// Serialises appends from the sink's concurrent workers so lines never interleave.
    lock: std::sync::Mutex<()>,
}

/// Where the dead-letter files of `data_dir` live.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("dlq")
}

/// The dead-letter file of sink `id`.
pub fn path(data_dir: &Path, id: &str) -> PathBuf {
    dir(data_dir).join(format!("{id}.jsonl"))
}

impl DeadLetters {
    pub fn new(id: &str, data_dir: &Path, metrics: &ComponentMetrics) -> DeadLetters {
        DeadLetters {
            sink: id.to_owned(),
            path: path(data_dir, id),
            written: metrics.counter(
                "loghaul_dead_letter_events_total",
                "Events the sink could never deliver, written to its dead-letter file.",
                &[],
            ),
            lock: std::sync::Mutex::new(()),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line per event and syncs the file: when this returns `Ok`, the events are
    /// safe there and the sink may report them rejected rather than lost. `events` are the
    /// sink's encoded events (JSON objects, or text lines); `error` is why they could not be
    /// delivered (a permanent one, or retries exhausted, or a failure no one would retry), and
    /// its text is their `reason`.
    ///
    /// # Errors
    ///
    /// The file cannot be created or written (the caller then reports the events errored).
    pub fn write<'a>(
        &self,
        events: impl IntoIterator<Item = &'a [u8]>,
        error: &SinkError,
        attempts: u32,
        target: Option<&str>,
    ) -> std::io::Result<usize> {
        let reason = error.to_string();
        let time = chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let mut head = String::with_capacity(128);
        head.push_str("{\"time\":\"");
        head.push_str(&time);
        head.push_str("\",\"sink\":");
        head.push_str(&json_string(&self.sink));
        head.push_str(",\"reason\":");
        head.push_str(&json_string(&reason));
        head.push_str(",\"attempts\":");
        head.push_str(&attempts.to_string());
        if let Some(target) = target {
            head.push_str(",\"target\":");
            head.push_str(&json_string(target));
        }
        head.push_str(",\"event\":");
        let mut out = Vec::new();
        let mut n = 0;
        for event in events {
            let event = trim_line(event);
            if event.is_empty() {
                continue;
            }
            out.extend_from_slice(head.as_bytes());
            if is_json_object(event) {
                out.extend_from_slice(event);
            } else {
                out.extend_from_slice(json_string(&String::from_utf8_lossy(event)).as_bytes());
            }
            out.extend_from_slice(b"}\n");
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        let _guard = self.lock.lock();
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Opened per write: dead letters are rare, and a replay may have renamed the file away.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        file.write_all(&out)?;
        file.sync_data()?;
        self.written.fetch_add(n as i64, Ordering::Relaxed);
        Ok(n)
    }
}

fn trim_line(event: &[u8]) -> &[u8] {
    let mut e = event;
    while let [rest @ .., b'\n' | b'\r'] = e {
        e = rest;
    }
    e
}

/// Whether `bytes` is one JSON object (what JSON encoders make of an event).
fn is_json_object(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'{') && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Parses one line of a dead-letter file.
///
/// # Errors
///
/// The line is not a dead letter (damaged, or not written by loghaul): said in words.
pub fn parse_line(line: &str) -> Result<DeadLetter, String> {
    #[derive(serde::Deserialize)]
    struct Head {
        reason: String,
        #[serde(default)]
        attempts: u32,
        #[serde(default)]
        target: Option<String>,
        event: Box<serde_json::value::RawValue>,
    }
    let head: Head = serde_json::from_str(line).map_err(|e| format!("not a dead letter: {e}"))?;
    Ok(DeadLetter {
        reason: head.reason,
        attempts: head.attempts,
        target: head.target,
        event: head.event.get().to_owned(),
    })
}

/// Per-sink counts of a `dlq` directory, for `loghaul dlq stats`.
#[derive(Debug, Default)]
pub struct Stats {
    pub files: Vec<FileStats>,
}

#[derive(Debug, Default)]
pub struct FileStats {
    pub path: PathBuf,
    pub events: usize,
    pub bytes: u64,
    pub damaged_lines: usize,
    pub first_time: Option<String>,
    pub last_time: Option<String>,
    /// Reasons and how many events each, most frequent first.
    pub reasons: Vec<(String, usize)>,
}

/// Reads every dead-letter file under `dir` (live and claimed ones).
///
/// # Errors
///
/// The directory exists but cannot be read.
pub fn stats(dir: &Path) -> std::io::Result<Stats> {
    let mut stats = Stats::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(stats),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut file = FileStats {
            bytes: text.len() as u64,
            path,
            ..FileStats::default()
        };
        let mut reasons: std::collections::HashMap<String, usize> = Default::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            #[derive(serde::Deserialize)]
            struct Time {
                #[serde(default)]
                time: Option<String>,
            }
            match parse_line(line) {
                Ok(letter) => {
                    file.events += 1;
                    *reasons.entry(letter.reason).or_default() += 1;
                    if let Ok(Time { time: Some(t) }) = serde_json::from_str::<Time>(line) {
                        if file.first_time.is_none() {
                            file.first_time = Some(t.clone());
                        }
                        file.last_time = Some(t);
                    }
                }
                Err(_) => file.damaged_lines += 1,
            }
        }
        let mut reasons: Vec<(String, usize)> = reasons.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        file.reasons = reasons;
        stats.files.push(file);
    }
    Ok(stats)
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.files.is_empty() {
            return writeln!(f, "no dead letters");
        }
        for file in &self.files {
            writeln!(
                f,
                "{}: {} events, {} bytes{}",
                file.path.display(),
                file.events,
                file.bytes,
                if file.damaged_lines > 0 {
                    format!(", {} damaged lines", file.damaged_lines)
                } else {
                    String::new()
                }
            )?;
            if let (Some(first), Some(last)) = (&file.first_time, &file.last_time) {
                writeln!(f, "  from {first} to {last}")?;
            }
            for (reason, n) in file.reasons.iter().take(10) {
                writeln!(f, "  {n:>8}  {reason}")?;
            }
        }
        Ok(())
    }
}

/// The file a replay works from: a claimed file left by an interrupted replay, else the live
/// file renamed to a claimed one. `None` when there is nothing to replay.
///
/// # Errors
///
/// The live file exists but cannot be renamed.
pub fn claim(data_dir: &Path, id: &str) -> std::io::Result<Option<PathBuf>> {
    let live = path(data_dir, id);
    let claimed = live.with_extension("jsonl.replaying");
    if claimed.exists() {
        return Ok(Some(claimed));
    }
    match std::fs::rename(&live, &claimed) {
        Ok(()) => Ok(Some(claimed)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `loghaul dlq replay --sink ID`: claims the sink's dead letters, sends them again through the
/// sink's own replay, puts back what fails again, and says what happened. Returns the summary
/// line.
///
/// # Errors
///
/// No such sink, a sink type that cannot replay, or the files cannot be read or written.
///
/// Also an error when some letters failed again or were damaged: the summary says how many,
/// and where they are kept.
pub fn replay_command(config: &crate::config::Config, id: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use loghaul_config::ComponentSet as _;
    let Some(sink) = config.sinks.iter().find(|s| s.id == id) else {
        let ids: Vec<&str> = config.sinks.iter().map(|s| s.id.as_str()).collect();
        anyhow::bail!(
            "no sink `{id}` in the configuration (sinks: {})",
            ids.join(", ")
        );
    };
    let data_dir = &config.data_dir;
    let registry = crate::metrics::Registry::default();
    let metrics = registry.register(
        id,
        loghaul_config::ComponentKind::Sink,
        sink.config.type_name(),
    );
    let cx = || crate::sinks::SinkContext {
        id: id.into(),
        metrics: metrics.clone(),
        reopen: Default::default(),
        retry: sink.retry,
        data_dir: data_dir.clone(),
        tls: sink.tls.clone(),
    };
    // Asked with nothing to send: whether this sink type can replay at all, before any file moves.
    if sink.config.component().replay(cx(), Vec::new()).is_none() {
        anyhow::bail!(
            "sinks of type `{}` cannot replay dead letters; they stay in {}",
            sink.config.type_name(),
            path(data_dir, id).display()
        );
    }
    let Some(claimed) = claim(data_dir, id)
        .with_context(|| format!("cannot claim {}", path(data_dir, id).display()))?
    else {
        return Ok(format!("no dead letters for sink `{id}`"));
    };
    let text = std::fs::read_to_string(&claimed)
        .with_context(|| format!("cannot read {}", claimed.display()))?;
    let mut letters = Vec::new();
    let mut damaged = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match parse_line(line) {
            Ok(letter) => letters.push(letter),
            Err(_) => damaged.push(line),
        }
    }
    let total = letters.len();
    let replay = sink
        .config
        .component()
        .replay(cx(), letters)
        .context("the sink cannot replay")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start a runtime")?;
    let replayed = runtime.block_on(replay);
    let dead = DeadLetters::new(id, data_dir, &metrics);
    for (letter, error) in &replayed.failed {
        dead.write(
            [letter.event.as_bytes()],
            error,
            letter.attempts + 1,
            letter.target.as_deref(),
        )
        .with_context(|| format!("cannot write {}", dead.path().display()))?;
    }
    if !damaged.is_empty() {
        let keep = claimed.with_extension("damaged");
        let mut out = damaged.join("\n");
        out.push('\n');
        std::fs::write(&keep, out).with_context(|| format!("cannot write {}", keep.display()))?;
    }
    std::fs::remove_file(&claimed)
        .with_context(|| format!("cannot remove {}", claimed.display()))?;
    let mut summary = format!(
        "sink `{id}`: replayed {} of {total} dead letters",
        replayed.delivered
    );
    if !replayed.failed.is_empty() {
        summary.push_str(&format!(
            "; {} failed again and are back in {}",
            replayed.failed.len(),
            dead.path().display()
        ));
    }
    if !damaged.is_empty() {
        summary.push_str(&format!(
            "; {} damaged lines kept in {}",
            damaged.len(),
            claimed.with_extension("damaged").display()
        ));
    }
    // A replay that left letters behind did not do its job: the command fails (exit 1), so a
    // script that runs it learns so.
    if !replayed.failed.is_empty() || !damaged.is_empty() {
        anyhow::bail!("{summary}");
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ComponentKind, Registry};

    #[test]
    fn lines_round_trip_and_count() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let reg = Registry::default();
        let metrics = reg.register("out", ComponentKind::Sink, "http");
        let dlq = DeadLetters::new("out", dir.path(), &metrics);
        let n = dlq.write(
            [
                &b"{\"message\":\"a\",\"n\":1}\n"[..],
                &b"plain \"text\" line"[..],
                &b"\n"[..],
            ],
            &SinkError::permanent("the server answered 400: bad"),
            2,
            Some("http://127.0.0.1:1/x"),
        )?;
        assert_eq!(n, 2);
        let text = std::fs::read_to_string(dlq.path())?;
        let letters: Vec<DeadLetter> = text.lines().map(parse_line).collect::<Result<_, _>>()?;
        assert_eq!(letters.len(), 2);
        assert_eq!(letters[0].event, "{\"message\":\"a\",\"n\":1}");
        assert_eq!(letters[0].reason, "the server answered 400: bad");
        assert_eq!(letters[0].attempts, 2);
        assert_eq!(letters[0].target.as_deref(), Some("http://127.0.0.1:1/x"));
        assert_eq!(letters[1].event, "\"plain \\\"text\\\" line\"");
        let stats = stats(&super::dir(dir.path()))?;
        assert_eq!(stats.files.len(), 1);
        assert_eq!(stats.files[0].events, 2);
        assert_eq!(stats.files[0].reasons[0].1, 2);

        let claimed = claim(dir.path(), "out")?;
        assert!(claimed.as_ref().is_some_and(|p| p.exists()));
        assert!(!dlq.path().exists(), "new dead letters go to a fresh file");
        // An interrupted replay is resumed, not claimed anew.
        assert_eq!(claim(dir.path(), "out")?, claimed);
        Ok(())
    }
}
