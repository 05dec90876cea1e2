//! The check of `transform`'s two output files, after each run (outside its timing): whatever
//! the subject, the same fields for the same input, and every event in the file of its severity.
//!
//! ```text
//! every line of both files:   its "severity" belongs to its file (emerg…err → errors, the rest →
//!                             other)
//! every Nth line (≈ SAMPLE):  decoded in full; exactly the fields of FIELDS (no `user`, no
//!                             `session`); pipeline = "lab"; gen, seq, t, user_name (= the
//!                             pair `user`), action, status, latency_ms, note equal to the
//!                             pairs of the line's own `message`; severity = the status's
//! ```
//!
//! The message is the one the generator sent, so the pairs read back from it
//! ([`crate::payload::key_values`]) are what the subject had to parse, and the status in it
//! fixes the severity the generator gave the event ([`crate::payload::kv_severity`]): a subject
//! that parsed the PRI wrong, or routed an event into the wrong file, fails. Loss and
//! duplicates over both files are the meter's (one set of books: an event in both files is a
//! duplicate); the check adds that both files hold lines, and that every line is an event.

use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::payload::{key_values, kv_severity};

/// The fields every output line has, and no other: the syslog fields as in `syslog`, the
/// message's pairs (`user` renamed `user_name`, `session` deleted) and the added `pipeline`.
pub const FIELDS: &[&str] = &[
    "timestamp",
    "hostname",
    "appname",
    "procid",
    "facility",
    "severity",
    "message",
    "source_ip",
    "source_type",
    "gen",
    "seq",
    "t",
    "user_name",
    "action",
    "status",
    "latency_ms",
    "note",
    "pipeline",
];

/// Lines decoded in full per file, about.
pub const SAMPLE: u64 = 2_000;

/// Severity names, by code (as loghaul, rsyslog and syslog-ng all write them).
const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

/// Problems quoted in full, at most.
const QUOTED: usize = 5;

/// Which of the two files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Errors,
    Other,
}

impl Class {
    fn of(severity: &str) -> Option<Class> {
        let code = SEVERITIES.iter().position(|s| *s == severity)?;
        Some(if code <= 3 {
            Class::Errors
        } else {
            Class::Other
        })
    }

    fn file(self) -> &'static str {
        match self {
            Class::Errors => "errors",
            Class::Other => "other",
        }
    }
}

/// What the check found in one run's two files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCheck {
    /// Lines in the errors file (severity `err` or more severe).
    pub errors_lines: u64,
    /// Lines in the other file.
    pub other_lines: u64,
    /// Lines decoded and compared in full.
    pub decoded: u64,
    /// Lines that failed a check.
    pub problems: u64,
    /// The first problems, each with its file and line number.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_problems: Vec<String>,
}

impl OutputCheck {
    /// Whether every line passed.
    pub fn ok(&self) -> bool {
        self.problems == 0
    }

    fn problem(&mut self, class: Class, line: u64, what: String) {
        self.problems += 1;
        if self.first_problems.len() < QUOTED {
            self.first_problems
                .push(format!("{} file, line {line}: {what}", class.file()));
        }
    }
}

/// Checks the files `errors` and `other` (see the module doc). `events` is what the meter
/// counted in them (distinct events plus duplicates): every line must be one.
///
/// # Errors
/// A file cannot be read.
pub fn check(errors: &Path, other: &Path, events: u64) -> Result<OutputCheck> {
    let mut out = OutputCheck::default();
    for (class, path) in [(Class::Errors, errors), (Class::Other, other)] {
        let lines = check_file(class, path, &mut out)?;
        match class {
            Class::Errors => out.errors_lines = lines,
            Class::Other => out.other_lines = lines,
        }
        // Both files get events: a third of the generator's statuses are logged at err or
        // more severe (any run of more than a few dozen events has both).
        if lines == 0 && events >= 100 {
            out.problem(class, 0, "no lines".into());
        }
    }
    let lines = out.errors_lines + out.other_lines;
    if lines != events {
        out.problems += 1;
        out.first_problems.push(format!(
            "{lines} lines in the two files, {events} events in them (the meter's count)"
        ));
    }
    Ok(out)
}

/// Checks one file's lines into `out`; returns how many there are.
fn check_file(class: Class, path: &Path, out: &mut OutputCheck) -> Result<u64> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::with_capacity(4096);
    let mut n = 0u64;
    // Every `stride`th line is decoded, from the size of the first: about SAMPLE per file.
    let mut stride = 0u64;
    loop {
        line.clear();
        let got = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if got == 0 {
            break;
        }
        n += 1;
        if stride == 0 {
            stride = (size / (got as u64 * SAMPLE)).max(1);
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match severity_of(text) {
            Some(sev) if Class::of(sev) == Some(class) => {}
            Some(sev) => out.problem(class, n, format!("severity {sev:?} in the wrong file")),
            None => out.problem(class, n, "no severity".into()),
        }
        if (n - 1).is_multiple_of(stride) {
            out.decoded += 1;
            if let Err(why) = check_line(text) {
                out.problem(class, n, why);
            }
        }
    }
    Ok(n)
}

/// The value of the line's `"severity":"…"`, found without decoding the line.
fn severity_of(line: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"severity\":\"";
    let at = memchr::memmem::find(line, KEY)? + KEY.len();
    let len = memchr::memchr(b'"', &line[at..])?;
    std::str::from_utf8(&line[at..at + len]).ok()
}

/// One line decoded and compared in full (see the module doc).
pub(crate) fn check_line(line: &[u8]) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON ({e})"))?;
    let object = value.as_object().ok_or("not a JSON object")?;
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = FIELDS.to_vec();
    want.sort_unstable();
    if keys != want {
        let extra: Vec<&str> = keys.iter().filter(|k| !want.contains(k)).copied().collect();
        let missing: Vec<&str> = want.iter().filter(|k| !keys.contains(k)).copied().collect();
        return Err(format!("fields: missing {missing:?}, extra {extra:?}"));
    }
    let field = |k: &str| object.get(k).and_then(serde_json::Value::as_str);
    if field("pipeline") != Some("lab") {
        return Err(format!("pipeline {:?}", object.get("pipeline")));
    }
    let message = field("message").ok_or("message is not a string")?;
    let pairs_at = message.find("gen=").ok_or("no marker in the message")?;
    let pairs = key_values(&message[pairs_at..])
        .ok_or_else(|| format!("the message's pairs cannot be read: {message:?}"))?;
    for (key, sent) in &pairs {
        let written = match *key {
            "session" => continue,
            "user" => "user_name",
            k => k,
        };
        if field(written) != Some(*sent) {
            return Err(format!(
                "{written} {:?}, the message has {key}={sent:?}",
                object.get(written)
            ));
        }
    }
    let status = pairs
        .iter()
        .find(|p| p.0 == "status")
        .and_then(|p| p.1.parse().ok())
        .and_then(kv_severity)
        .ok_or("the message has no status the generator sends")?;
    if field("severity") != Some(SEVERITIES[status]) {
        return Err(format!(
            "severity {:?}, the status's is {:?}",
            object.get("severity"),
            SEVERITIES[status]
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A line as each subject writes it (its own key order and message), for one event:
    /// status 500 (err) or 200 (info).
    fn line(subject: &str, status: u16) -> String {
        let severity = if status == 500 { "err" } else { "info" };
        let message = format!(
            "gen=1 seq=0000000007 t=1732240000123456 user=u123 action=login status={status} \
             latency_ms=12 session=abcdef note=\"two words\""
        );
        let json = |m: &str| serde_json::to_string(m).unwrap();
        match subject {
            // loghaul: the syslog fields, then the record's keys in order.
            "loghaul" => format!(
                r#"{{"timestamp":"2026-11-27T06:09:00Z","hostname":"web01","appname":"nginx","procid":"1234","facility":"user","severity":"{severity}","message":{},"source_ip":"127.0.0.1","source_type":"syslog","action":"login","gen":"1","latency_ms":"12","note":"two words","pipeline":"lab","seq":"0000000007","status":"{status}","t":"1732240000123456","user_name":"u123"}}"#,
                json(&message)
            ),
            // syslog-ng: format-json sorts the keys.
            "syslog-ng" => format!(
                r#"{{"user_name":"u123","timestamp":"2026-11-27T06:09:00+00:00","t":"1732240000123456","status":"{status}","source_type":"syslog","source_ip":"127.0.0.1","severity":"{severity}","seq":"0000000007","procid":"1234","pipeline":"lab","note":"two words","message":{},"latency_ms":"12","hostname":"web01","gen":"1","facility":"user","appname":"nginx","action":"login"}}"#,
                json(&message)
            ),
            // rsyslog: its msg keeps the space after the tag.
            "rsyslog" => format!(
                r#"{{"timestamp":"2026-11-27T06:09:00+00:00","hostname":"web01","appname":"nginx","procid":"1234","facility":"user","severity":"{severity}","message":{},"source_ip":"127.0.0.1","source_type":"syslog","note":"two words","pipeline":"lab","latency_ms":"12","status":"{status}","action":"login","t":"1732240000123456","seq":"0000000007","gen":"1","user_name":"u123"}}"#,
                json(&format!(" {message}"))
            ),
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_subjects_lines_pass() {
        for subject in ["loghaul", "syslog-ng", "rsyslog"] {
            for status in [500, 200] {
                assert_eq!(check_line(line(subject, status).as_bytes()), Ok(()), "{subject}");
            }
        }
    }

    /// Each way a subject could get the job wrong fails, saying how.
    #[test]
    fn wrong_lines_fail_saying_why() {
        let good = line("loghaul", 500);
        let cases = [
            (good.replace(r#""user_name""#, r#""user""#), "missing [\"user_name\"]"),
            (
                good.replace(r#""t":"#, r#""session":"abcdef","t":"#),
                "extra [\"session\"]",
            ),
            (good.replace(r#""lab""#, r#""prod""#), "pipeline"),
            (good.replace(r#""note":"two words""#, r#""note":"\"two""#), "note"),
            (good.replace(r#""user_name":"u123""#, r#""user_name":"u12""#), "user_name"),
            (
                good.replace(r#""severity":"err""#, r#""severity":"crit""#),
                "the status's is \"err\"",
            ),
            (good.replace(r#""latency_ms":"12""#, r#""latency_ms":12"#), "latency_ms"),
            (good[..good.len() - 1].to_string(), "not JSON"),
        ];
        for (bad, why) in cases {
            let err = check_line(bad.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{why:?} in {err:?}");
        }
    }

    /// Both files read whole: each line's severity in its file, every line an event, both files
    /// with lines.
    #[test]
    fn files_are_checked_line_by_line_and_as_a_split() {
        let dir = tempfile::tempdir().unwrap();
        let (errors, other) = (dir.path().join("e.log"), dir.path().join("o.log"));
        let write = |path: &Path, lines: &[String]| {
            std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>())
                .unwrap();
        };
        let err_line = line("syslog-ng", 500);
        let info_line = line("syslog-ng", 200);
        write(&errors, &vec![err_line.clone(); 60]);
        write(&other, &vec![info_line.clone(); 90]);
        let ok = check(&errors, &other, 150).unwrap();
        assert!(ok.ok(), "{ok:?}");
        assert_eq!((ok.errors_lines, ok.other_lines, ok.decoded), (60, 90, 150));
        // An event in the wrong file; a count that does not add up.
        write(&other, &[info_line.clone(), err_line.clone()]);
        let bad = check(&errors, &other, 61).unwrap();
        assert_eq!(bad.problems, 2, "{bad:?}");
        assert!(
            bad.first_problems[0].starts_with("other file, line 2: severity \"err\""),
            "{bad:?}"
        );
        assert!(bad.first_problems[1].contains("62 lines"), "{bad:?}");
        // A file with no lines, where there were events enough for both.
        std::fs::remove_file(&other).unwrap();
        write(&errors, &vec![err_line; 120]);
        let empty = check(&errors, &other, 120).unwrap();
        assert_eq!(empty.first_problems, ["other file, line 0: no lines"]);
    }
}
