//! The `file` source against real files: rotation by rename, copytruncate, delete and recreate,
//! inode reuse and replacement, each across a restart; exact resumption after SIGTERM (also
//! while a slow sink holds most of the file in flight), no loss after SIGKILL; `read_from`;
//! multiline (Java and Python fixtures in tests/data/multiline); partial lines, CRLF and a 50MB
//! line; bad input (binary data, a directory, a deleted file, an unreadable file, broken
//! checkpoints, a full data_dir, a sink that cannot write); a thousand files through 256 open
//! ones; checkpoints that wait for the sink's acknowledgement; and `validate`.
//!
//! ```text
//! test ──writes, renames, truncates──▶ {WORK}/logs/*.log ──▶ loghaul (file ─▶ file sink) ──▶ {WORK}/out.jsonl
//!                                                              └── {WORK}/data/logs/checkpoints.json
//! ```
//!
//! A restart is a new [`Server`] on the same [`Work`] folder: the logs, the data_dir and the
//! output (the file sink appends) outlive every server of a test. Lines are numbered and of one
//! width (`app event seq 000123`), so what arrived is checked number by number
//! ([`assert_each_once`]) and a line's byte offset is `n * width`.
//!
//! The tests use short intervals (`glob_interval` and `checkpoint_interval` 100ms, `rotate_wait`
//! 1s) so that a rotation or a checkpoint takes effect within a fraction of a second; every wait
//! is still bounded by [`WAIT`] and asserts on what arrived, never on how fast.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

/// Bound of every "until these lines arrived" wait.
const WAIT: Duration = Duration::from_secs(30);

/// Runs loghaul as `nobody`: the tests run as root, which reads any file whatever its mode.
const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

// ---------------------------------------------------------------------------------------------
// 1. Rotation, each across a restart
// ---------------------------------------------------------------------------------------------

/// logrotate's default (rename, create): rotated while loghaul runs, and again while it is
/// stopped, with the old writer appending to the renamed file after each rotation. The glob
/// matches only the live name, so after the restart the source must find the renamed file by
/// its identity in its old directory and read it to its end.
#[test]
fn file_source_rename_rotation_glob_matches_only_the_live_name() {
    rename_rotation("{LOGS}/app.log");
}

/// As above with `app.log*`: the rotated files stay matched under new names and must not be
/// read again.
#[test]
fn file_source_rename_rotation_glob_matches_rotated_names_too() {
    rename_rotation("{LOGS}/app.log*");
}

fn rename_rotation(include: &str) {
    let work = Work::new();
    let cfg = tail_config(&[include], "");
    let app = work.log("app.log");
    let rotated = |n: u32| work.log(&format!("app.log.{n}"));

    append(&app, "app", 0..100);
    let mut server = work.start(&cfg);
    work.wait_count(100);

    // Rotation while running: the writer's last lines go to the renamed file, then it reopens.
    append(&app, "app", 100..150);
    rename(&app, &rotated(1));
    append(&rotated(1), "app", 150..200);
    append(&app, "app", 200..300);
    work.wait_count(300);
    server.stop();

    // Rotation while stopped, logrotate's shift: .1 -> .2, app.log -> .1, a new app.log.
    append(&app, "app", 300..340);
    rename(&rotated(1), &rotated(2));
    rename(&app, &rotated(1));
    append(&rotated(1), "app", 340..360);
    append(&app, "app", 360..400);
    let server = work.start(&cfg);
    let events = work.wait_count(400);
    assert_each_once(
        &work.numbers(),
        400,
        &format!("{include}: rotated while running and while stopped"),
    );

    // Lines read under the live name carry it (those read from a renamed file may carry either).
    let app_path = app.display().to_string();
    for e in &events {
        let n = trailing_number(message(e));
        if !(100..360).contains(&n) {
            assert_eq!(
                e.get("file").and_then(Value::as_str),
                Some(app_path.as_str()),
                "line {n} was read from {app_path}: {e}"
            );
        }
    }
    server.finish();
}

/// Rotation faster than the glob interval (an hour here): every 50ms the live file is renamed
/// over the previous rotated one and a new one is started, so a file exists under a matched
/// name for about 100ms. File system events must ask for a scan at once; a source that only
/// globbed would never see most files and lose their lines without a trace.
#[test]
fn file_source_rotation_faster_than_the_glob_interval_loses_nothing() {
    let work = Work::new();
    let cfg =
        tail_config(&["{LOGS}/app.log*"], "").replace("glob_interval: 100ms", "glob_interval: 1h");
    let app = work.log("app.log");
    let rotated = work.log("app.log.1");
    append(&app, "app", 0..100);
    let server = work.start(&cfg);
    for round in 1..40u64 {
        std::thread::sleep(Duration::from_millis(50));
        rename(&app, &rotated);
        append(&app, "app", round * 100..(round + 1) * 100);
    }
    work.wait_count(4000);
    assert_each_once(
        &work.numbers(),
        4000,
        "rotated every 50ms, glob_interval 1h",
    );
    server.finish();
}

/// logrotate's `copytruncate`: the file is copied (the copy excluded by the config, as users
/// do, since it holds lines already read) and truncated in place while its writer keeps
/// appending. Running, the new content outgrows the old offset at once, so only the changed
/// first bytes can tell; stopped, once shorter than the checkpoint's offset and once longer.
///
/// `glob_interval` is 1s here: a source that compares first bytes only when it globs would
/// read the new content from the old offset in the meantime, and this makes that window wide
/// enough to be certain rather than a race.
#[test]
fn file_source_copytruncate_with_the_copy_excluded() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/app.log*"], "exclude: [\"{LOGS}/app.log.*\"]")
        .replace("glob_interval: 100ms", "glob_interval: 1s");
    let app = work.log("app.log");
    let copy = work.log("app.log.1");

    append(&app, "app", 0..100);
    let mut server = work.start(&cfg);
    work.wait_count(100);
    // copytruncate loses what the tailer had not read at the truncation (it is only in the
    // excluded copy): that race is the tool's, so the lines are let in before the copy.
    append(&app, "app", 100..150);
    work.wait_count(150);
    copy_truncate(&app, &copy);
    // 200 lines in one write: past the old offset before the source looks again.
    append(&app, "app", 150..350);
    work.wait_count(350);
    assert_each_once(&work.numbers(), 350, "copytruncate while running");
    let truncations = wait_file_metric(&server, "loghaul_file_truncations_total", "logs", None, 1);
    server.stop();

    // Stopped; new content shorter than the checkpoint's offset.
    copy_truncate(&app, &copy);
    append(&app, "app", 350..400);
    let mut server = work.start(&cfg);
    work.wait_count(400);
    assert_each_once(
        &work.numbers(),
        400,
        "copytruncate while stopped, shorter content",
    );
    server.stop();

    // Stopped; new content longer than the checkpoint's offset (only the first bytes differ).
    copy_truncate(&app, &copy);
    append(&app, "app", 400..700);
    let server = work.start(&cfg);
    work.wait_count(700);
    assert_each_once(
        &work.numbers(),
        700,
        "copytruncate while stopped, longer content",
    );
    eprintln!("copytruncate: loghaul_file_truncations_total {truncations} after the first run");
    server.finish();
}

/// The file is deleted and a new one created at its path: while running (the lines written
/// just before the delete must still be read from the open file) and while stopped (the new
/// file, likely on the freed inode, must be read from its start).
#[test]
fn file_source_delete_and_recreate() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/app.log"], "");
    let app = work.log("app.log");

    append(&app, "app", 0..100);
    let mut server = work.start(&cfg);
    work.wait_count(100);
    append(&app, "app", 100..150);
    remove(&app);
    append(&app, "app", 150..250);
    work.wait_count(250);
    assert_each_once(&work.numbers(), 250, "deleted and recreated while running");
    server.stop();

    let old_ino = ino(&app);
    remove(&app);
    append(&app, "app", 250..400);
    let reused = ino(&app) == old_ino;
    let server = work.start(&cfg);
    work.wait_count(400);
    assert_each_once(
        &work.numbers(),
        400,
        &format!("deleted and recreated while stopped (inode reused: {reused})"),
    );
    server.finish();
}

/// A deleted file's inode given to a new file at the same path, longer than the old one: only
/// the first bytes tell them apart. While running, the file is one loghaul closed to stay within
/// `max_open_files: 1` (it still knows its identity and offset, and a closed file's inode is
/// freed at once); then while stopped, against the checkpoint.
#[test]
fn file_source_inode_reuse_is_not_taken_for_the_old_file() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/*.log"], "max_open_files: 1");
    let (a, b) = (work.log("a.log"), work.log("b.log"));

    append(&a, "first", 0..100);
    append(&b, "other", 100..200);
    let mut server = work.start(&cfg);
    work.wait_count(200);
    let closed = wait_one_closed(&server, &a, &b);
    let old_ino = ino(&closed);
    remove(&closed);
    let reused_running = create_on_inode(&closed, old_ino, &lines("second", 200..400));
    work.wait_count(400);
    assert_each_once(
        &work.numbers(),
        400,
        &format!(
            "{} recreated on its inode while running (reproduced: {reused_running})",
            closed.display()
        ),
    );
    server.stop();

    let old_ino = ino(&a);
    remove(&a);
    let reused_stopped = create_on_inode(&a, old_ino, &lines("third", 400..800));
    let server = work.start(&cfg);
    work.wait_count(800);
    assert_each_once(
        &work.numbers(),
        800,
        &format!("a.log recreated on its inode while stopped (reproduced: {reused_stopped})"),
    );
    if !(reused_running && reused_stopped) {
        eprintln!(
            "inode reuse was not reproduced on this file system (running: {reused_running}, \
             stopped: {reused_stopped}); only no loss and no duplicate were checked there"
        );
    }
    server.finish();
}

/// Waits until loghaul holds exactly one of `a` and `b` open; returns the other.
fn wait_one_closed(server: &Server, a: &Path, b: &Path) -> PathBuf {
    let deadline = Instant::now() + WAIT;
    for _ in 0..100_000 {
        match (holds_open(server, a), holds_open(server, b)) {
            (true, false) => return b.to_path_buf(),
            (false, true) => return a.to_path_buf(),
            _ => {}
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "with max_open_files: 1 loghaul should hold one of {} and {} open",
        a.display(),
        b.display()
    );
}

/// While loghaul is stopped the file is replaced by another of the same size: once by a rename
/// over it (a new inode), once rewritten in place (same inode, same size, other first bytes).
#[test]
fn file_source_file_replaced_while_stopped() {
    let work = Work::new();
    // The source's own data_dir holds checkpoints.json itself.
    let cfg = tail_config(&["{LOGS}/app.log"], "data_dir: \"{WORK}/state\"");
    let app = work.log("app.log");

    append(&app, "gen1", 0..100);
    let mut server = work.start(&cfg);
    work.wait_count(100);
    server.stop();

    let staged = work.log("app.log.new");
    append(&staged, "gen2", 100..200);
    rename(&staged, &app);
    let mut server = work.start(&cfg);
    work.wait_count(200);
    assert_each_once(&work.numbers(), 200, "replaced by a rename while stopped");
    server.stop();

    let before = fs::metadata(&app).expect("stat app.log");
    fs::write(&app, lines("gen3", 200..300)).expect("rewrite app.log in place");
    let after = fs::metadata(&app).expect("stat app.log");
    assert_eq!(
        (before.ino(), before.len()),
        (after.ino(), after.len()),
        "the in-place rewrite should keep the inode and the size"
    );
    let server = work.start(&cfg);
    work.wait_count(300);
    assert_each_once(&work.numbers(), 300, "rewritten in place while stopped");
    let state = work.dir.path().join("state/checkpoints.json");
    assert!(state.is_file(), "no checkpoints at {}", state.display());
    assert!(
        !work.checkpoints_path().exists(),
        "checkpoints under the top-level data_dir although the source has its own"
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 2. Restarts
// ---------------------------------------------------------------------------------------------

/// N lines, a clean stop, M more lines, a start: exactly N+M events, each with the fields the
/// contract names, and `offset_key` giving each line's byte offset.
#[test]
fn file_source_restart_resumes_exactly_with_every_field() {
    const N: u64 = 1000;
    const M: u64 = 500;
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/app.log"], "offset_key: offset");
    let app = work.log("app.log");
    let width = line("app", 0).len() as u64;
    let begin = now_unix();

    append(&app, "app", 0..N);
    let mut server = work.start(&cfg);
    work.wait_count(N as usize);
    server.stop();
    append(&app, "app", N..N + M);
    let server = work.start(&cfg);
    let events = work.wait_count((N + M) as usize);
    let end = now_unix();
    assert_each_once(&work.numbers(), N + M, "lines before and after a restart");

    let host = kernel_hostname();
    let app_path = app.display().to_string();
    for e in &events {
        assert_keys(
            e,
            &[
                "timestamp",
                "message",
                "source_type",
                "file",
                "host",
                "offset",
            ],
        );
        assert_eq!(e["source_type"], "file", "{e}");
        assert_eq!(e["file"], app_path.as_str(), "{e}");
        assert_eq!(e["host"], host.as_str(), "{e}");
        assert!(flags(e).is_empty(), "no flags expected: {e}");
        let n = trailing_number(message(e));
        assert_eq!(message(e), line("app", n).trim_end(), "{e}");
        assert_eq!(
            number_field(e, "offset"),
            n * width,
            "offset of line {n}: {e}"
        );
        // The time the line was read: within this test's run.
        let (t, _) = parse_rfc3339_utc(e["timestamp"].as_str().expect("timestamp string"));
        assert!(
            t >= begin - 1.0 && t <= end + 1.0,
            "timestamp {t} outside the test's run [{begin}, {end}]: {e}"
        );
    }
    // The contract's place for them: <top-level data_dir>/<source id>/checkpoints.json.
    let checkpoints = work.checkpoints_path();
    assert!(
        checkpoints.is_file(),
        "no checkpoints at {}",
        checkpoints.display()
    );
    server.finish();
}

/// SIGTERM while the sink lags far behind the source (it writes into a pipe the test drains at
/// about 4MB/s, so most of a 500,000-line file is read and queued but not yet written), then a
/// start and more lines: every line once. Shutdown drains the queue within a few seconds, and
/// the last checkpoint must cover exactly what was written.
#[test]
fn file_source_sigterm_while_the_sink_lags_resumes_exactly() {
    stop_while_the_sink_lags(500_000, 40 << 10, false);
}

/// As above with a sink so slow (about 1MB/s for an 8MB file) that draining it at SIGTERM takes
/// several seconds more, well within `shutdown_timeout` (30s): loghaul exits 0 having written
/// every event, so a restart must not read any of them again.
#[test]
fn file_source_sigterm_with_a_long_drain_resumes_exactly() {
    stop_while_the_sink_lags(400_000, 12 << 10, false);
}

/// SIGKILL while the sink lags: nothing is lost (lines may repeat: the checkpoint trails what
/// was written), and the checkpoint file is whole JSON (it is written aside and renamed).
#[test]
fn file_source_sigkill_while_the_sink_lags_loses_nothing() {
    stop_while_the_sink_lags(500_000, 40 << 10, true);
}

/// Writes `n` lines, starts loghaul with its file sink writing text into a pipe drained at
/// `per_tick` bytes every 10ms, stops it (SIGTERM, or SIGKILL when `kill`) once a tenth has
/// come out, starts it again and appends 1,000 lines.
fn stop_while_the_sink_lags(n: u64, per_tick: usize, kill: bool) {
    const MORE: u64 = 1000;
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/big.log"], "")
        .replace("encoding: json", "encoding: text")
        .replace("{WORK}/out.jsonl", "{WORK}/pipe");
    let big = work.log("big.log");
    write_in_chunks(&big, "big", 0..n);
    let pipe = SlowPipe::start(&work.dir.path().join("pipe"), &work.out(), per_tick);

    let mut server = work.start(&cfg);
    wait_raw_lines(&work.out(), (n / 10) as usize, WAIT);
    let before_stop = text_numbers(&work.out()).len() as u64;
    // The premise: the pipe's rate bounds what was written when the stop came.
    assert!(
        before_stop < n / 2,
        "{before_stop} of {n} lines were out before the stop: the sink did not lag"
    );
    let stopped_at = Instant::now();
    if kill {
        server.signal("KILL");
        assert!(
            server.wait_exit(Duration::from_secs(10)).is_some(),
            "loghaul did not die of SIGKILL"
        );
    } else {
        server.stop();
    }
    let stop_took = stopped_at.elapsed();
    let after_stop = text_numbers(&work.out()).len() as u64;
    if let Ok(bytes) = fs::read(work.checkpoints_path()) {
        assert!(
            serde_json::from_slice::<Value>(&bytes).is_ok(),
            "checkpoints.json is not whole JSON after the stop: {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
        );
    }
    let width = line("big", 0).len() as u64;
    let checkpointed = checkpoint_offset(&work.checkpoints_path(), &big) / width;

    let server = work.start(&cfg);
    append(&big, "big", n..n + MORE);
    wait_each_at_least_once(&work.out(), n + MORE, text_numbers);
    server.finish();
    pipe.stop();
    let numbers = text_numbers(&work.out());
    eprintln!(
        "{}: {before_stop} of {n} lines out when the stop came, {after_stop} once loghaul had \
         exited ({stop_took:?} later), its last checkpoint at line {checkpointed}; {} events in \
         all for {} lines",
        if kill { "SIGKILL" } else { "SIGTERM" },
        numbers.len(),
        n + MORE
    );
    if kill {
        let (_, out_of_range) = tally(&numbers, n + MORE);
        assert!(out_of_range.is_empty(), "unknown numbers {out_of_range:?}");
    } else {
        assert_each_once(
            &numbers,
            n + MORE,
            &format!(
                "lines across a SIGTERM while the sink lagged ({after_stop} of {n} written by \
                 the exit, which took {stop_took:?}; last checkpoint at line {checkpointed})"
            ),
        );
    }
}

/// `read_from: end` skips what the files hold at the source's first start only: a file that
/// appears later, or while loghaul is stopped, is read from its start, and a restart resumes.
#[test]
fn file_source_read_from_end_applies_to_the_first_start_only() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/*.log"], "read_from: end");
    let a = work.log("a.log");
    append(&a, "a", 0..50);

    let mut server = work.start(&cfg);
    // The source takes its end-of-file position when it first sees a.log; wait for that.
    wait_file_metric(&server, "loghaul_file_watched_files", "logs", None, 1);
    append(&a, "a", 50..100);
    append(&work.log("b.log"), "b", 100..150);
    work.wait_count(100);
    server.stop();
    append(&a, "a", 150..200);
    append(&work.log("c.log"), "c", 200..250);
    let server = work.start(&cfg);
    work.wait_count(200);
    let shifted: Vec<u64> = work.numbers().iter().map(|&n| n.wrapping_sub(50)).collect();
    assert_each_once(
        &shifted,
        200,
        "lines 50..250 (0..50 were there before the first start)",
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 3. Multiline, partial lines, CRLF
// ---------------------------------------------------------------------------------------------

/// Events of `java.log`: one per dated line, each exception with its `Caused by:`, `Suppressed:`
/// and `... N more` lines.
const JAVA_EVENTS: usize = 12;
/// Events of `python.log`: one per dated line, tracebacks (one chained) with their log line.
const PYTHON_EVENTS: usize = 10;

/// The Java fixture with `continue_through` (written in 1000-byte pieces cut anywhere, and
/// again with CRLF line ends), the Python fixture with `halt_before`, and a shell command cut
/// with `\` with `continue_past`. Each group must be one event: its lines joined by `\n`,
/// without `\r`, exactly as the fixture holds them.
#[test]
fn file_source_multiline_java_python_and_backslash_continuations() {
    let work = Work::new();
    let java = fixture("java.log");
    let python = fixture("python.log");
    let java_groups = groups_by_date(&java);
    let python_groups = groups_by_date(&python);
    assert_eq!(
        java_groups.len(),
        JAVA_EVENTS,
        "tests/data/multiline/java.log"
    );
    assert_eq!(
        python_groups.len(),
        PYTHON_EVENTS,
        "tests/data/multiline/python.log"
    );
    let cont = "2026-11-20 10:00:00 deploy: starting\n\
                run --image shop:2.4.1 \\\n  --replicas 3 \\\n  --env PROFILE=prod\n\
                2026-11-20 10:00:05 deploy: done\n";
    let cont_groups = [
        "2026-11-20 10:00:00 deploy: starting",
        "run --image shop:2.4.1 \\\n  --replicas 3 \\\n  --env PROFILE=prod",
        "2026-11-20 10:00:05 deploy: done",
    ];

    let server = work.start(
        r#"api: { address: "127.0.0.1:{API}" }
data_dir: "{WORK}/data"
sources:
  java:
    type: file
    include: ["{LOGS}/java*.log"]
    glob_interval: 100ms
    checkpoint_interval: 100ms
    multiline:
      start_pattern: '^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} '
      condition_pattern: '^(\s|Caused by: |[\w$]+(\.[\w$]+)+(: |$))'
      mode: continue_through
      timeout: 500ms
  python:
    type: file
    include: ["{LOGS}/python.log"]
    glob_interval: 100ms
    checkpoint_interval: 100ms
    file_key: path
    host_key: ""
    multiline:
      start_pattern: '^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} '
      condition_pattern: '^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} '
      mode: halt_before
      timeout: 500ms
  shell:
    type: file
    include: ["{LOGS}/deploy.log"]
    glob_interval: 100ms
    checkpoint_interval: 100ms
    multiline:
      start_pattern: '\\$'
      condition_pattern: '\\$'
      mode: continue_past
      timeout: 500ms
sinks:
  out: { type: file, inputs: [java, python, shell], path: "{WORK}/out.jsonl", encoding: json, flush_interval: 100ms }
"#,
    );
    let java_path = work.log("java.log");
    let crlf_path = work.log("java-crlf.log");
    let python_path = work.log("python.log");
    let deploy_path = work.log("deploy.log");
    fs::write(&python_path, &python).expect("write python.log");
    fs::write(&crlf_path, java.replace('\n', "\r\n")).expect("write java-crlf.log");
    fs::write(&deploy_path, cont).expect("write deploy.log");
    // Pieces that cut lines anywhere, a little apart (well within the multiline timeout).
    for piece in java.as_bytes().chunks(1000) {
        append_bytes(&java_path, piece);
        std::thread::sleep(Duration::from_millis(20));
    }

    let total = 2 * JAVA_EVENTS + PYTHON_EVENTS + cont_groups.len();
    wait_lines(&work.out(), total, WAIT);
    // A group wrongly split in two shows its second part when the multiline timer fires: a
    // fixed wait of two of its timeouts is the test, as only time makes it fire.
    std::thread::sleep(Duration::from_millis(1000));
    let events = read_lines(&work.out());
    assert_eq!(
        events.len(),
        total,
        "{} events, expected {total} ({JAVA_EVENTS} per Java file, {PYTHON_EVENTS} Python, {} shell)",
        events.len(),
        cont_groups.len()
    );
    assert_messages(&events, "file", &java_path, &java_groups);
    assert_messages(&events, "file", &crlf_path, &java_groups);
    assert_messages(&events, "path", &python_path, &python_groups);
    let cont_groups: Vec<String> = cont_groups.iter().map(|s| s.to_string()).collect();
    assert_messages(&events, "file", &deploy_path, &cont_groups);
    let host = kernel_hostname();
    for e in &events {
        assert_eq!(e["source_type"], "file", "{e}");
        assert!(flags(e).is_empty(), "no flags expected: {e}");
        if e.get("path").is_some() {
            assert_keys(e, &["timestamp", "message", "source_type", "path"]);
        } else {
            assert_eq!(e["host"], host.as_str(), "{e}");
        }
    }
    server.finish();
}

/// A last line without a newline is emitted once `partial_line_timeout` passes, and not again
/// when bytes are appended (they start a new line); one left at shutdown is emitted once too,
/// and a restart does not read it again. CRLF loses its `\r`.
#[test]
fn file_source_partial_last_line_is_emitted_once_and_crlf_loses_its_cr() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/plain.log"], "partial_line_timeout: 1s");
    let plain = work.log("plain.log");
    append_bytes(&plain, b"crlf 000000\r\nlf 000001\npartial 000002");

    let mut server = work.start(&cfg);
    let events = work.wait_count(3);
    let messages: Vec<&str> = events.iter().map(message).collect();
    assert_eq!(messages, ["crlf 000000", "lf 000001", "partial 000002"]);
    // Three timeouts with nothing appended: still one event for it. A fixed wait is the test:
    // what must not happen is the partial-line timer firing again, and only time makes it fire.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(read_lines(&work.out()).len(), 3, "the partial line again");
    append_bytes(&plain, b"appended 000003\n");
    work.wait_count(4);

    // At shutdown: wait until the source has read the partial line, then stop at once.
    append_bytes(&plain, b"at shutdown 000004");
    let size = fs::metadata(&plain).expect("stat").len();
    wait_file_metric(&server, "loghaul_file_read_bytes_total", "logs", None, size);
    server.stop();
    let server = work.start(&cfg);
    append_bytes(&plain, b"after restart 000005\n");
    let events = work.wait_count(6);
    let messages: Vec<&str> = events.iter().map(message).collect();
    assert_eq!(
        messages,
        [
            "crlf 000000",
            "lf 000001",
            "partial 000002",
            "appended 000003",
            "at shutdown 000004",
            "after restart 000005"
        ]
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 4. max_line_size
// ---------------------------------------------------------------------------------------------

/// A 50MiB line without a newline in the middle of a file, written in 1MiB pieces while the
/// source reads: one event of exactly `max_line_size` bytes flagged `truncated`, the rest
/// counted as skipped, the lines after it read, and loghaul's memory bounded.
#[test]
fn file_source_max_line_size_cuts_a_50mb_line() {
    const BIG: usize = 50 << 20;
    const MAX: usize = 64 << 10;
    let work = Work::new();
    // A long partial_line_timeout: the line is written in pieces, and a pause between two
    // must not end it early.
    let cfg = tail_config(
        &["{LOGS}/app.log"],
        "max_line_size: 64KiB\npartial_line_timeout: 10s",
    );
    let app = work.log("app.log");
    let server = work.start(&cfg);
    append(&app, "app", 0..100);
    work.wait_count(100);

    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&app)
        .expect("open app.log");
    let mut piece = vec![b'x'; 1 << 20];
    piece[..4].copy_from_slice(b"big ");
    for i in 0..BIG / piece.len() {
        f.write_all(&piece).expect("write the big line");
        if i == 0 {
            piece[..4].copy_from_slice(b"xxxx");
        }
    }
    f.write_all(b"\n").expect("end the big line");
    drop(f);
    append(&app, "app", 100..200);

    let events = work.wait_count(201);
    let (big, numbered): (Vec<&Value>, Vec<&Value>) =
        events.iter().partition(|e| message(e).starts_with("big "));
    assert_eq!(big.len(), 1, "one event for the big line");
    let big = big[0];
    assert_eq!(message(big).len(), MAX, "the cut line's length");
    assert!(
        message(big)[4..].bytes().all(|b| b == b'x'),
        "the cut line holds the line's first bytes"
    );
    assert!(
        flags(big).contains(&"truncated".to_string()),
        "the cut line is flagged: {}",
        truncate_json(big, 300)
    );
    let numbers: Vec<u64> = numbered
        .iter()
        .map(|e| trailing_number(message(e)))
        .collect();
    assert_each_once(&numbers, 200, "lines around the big line");

    let skipped = wait_file_metric(
        &server,
        "loghaul_file_skipped_bytes_total",
        "logs",
        Some("reason=\"line_too_long\""),
        (BIG - MAX) as u64,
    );
    // Whether the newline that ends the line counts as skipped is the source's choice.
    assert!(
        skipped <= (BIG - MAX + 1) as u64,
        "skipped_bytes_total{{reason=\"line_too_long\"}} = {skipped}, expected {} (+1)",
        BIG - MAX
    );
    let peak = server.peak_rss_kib();
    eprintln!("50MiB line: loghaul's peak RSS {} MiB", peak / 1024);
    assert!(
        peak < 300 * 1024,
        "loghaul's peak RSS reached {} MiB reading a 50MiB line cut at 64KiB",
        peak / 1024
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 5. Bad input
// ---------------------------------------------------------------------------------------------

/// A binary file and a directory matched by the glob: the binary's "lines" arrive with their
/// invalid bytes replaced and flagged, the directory is passed over (`*` does not enter it),
/// numbered lines after the binary data and in another file all arrive, and loghaul stays up.
#[test]
fn file_source_binary_file_and_directory_in_the_glob() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/*.log"], "");
    let blob = work.log("blob.log");
    let mut binary = pseudo_random_bytes(0x5eed_f11e, 64 << 10);
    binary.push(b'\n');
    append_bytes(&blob, &binary);
    append(&blob, "blob", 50..100);
    append(&work.log("a.log"), "a", 0..50);
    fs::create_dir(work.log("dir.log")).expect("mkdir dir.log");
    append(&work.log("dir.log/inner.log"), "inner", 100..110);

    // The binary part's lines: every LF ends one, a CR before it is dropped; an empty line may
    // or may not be an event.
    let segments: Vec<&[u8]> = binary[..binary.len() - 1].split(|&b| b == b'\n').collect();
    let non_empty = segments
        .iter()
        .filter(|s| !s.is_empty() && *s != b"\r")
        .count();

    let server = work.start(&cfg);
    wait_for_line(&work.out(), "line 99 of blob.log", |e| {
        e.get("message").and_then(Value::as_str) == Some("blob event seq 000099")
    });
    wait_for_line(&work.out(), "line 49 of a.log", |e| {
        e.get("message").and_then(Value::as_str) == Some("a event seq 000049")
    });
    // A file created now is found by a later scan, one that would also have entered the
    // directory: once its line is in, so is anything read from there.
    append_bytes(&work.log("zz.log"), b"scanned again\n");
    wait_for_line(&work.out(), "the line of zz.log", |e| {
        e.get("message").and_then(Value::as_str) == Some("scanned again")
    });
    let events = read_lines(&work.out());
    let is_numbered = |m: &str| {
        (m.starts_with("a event seq ") || m.starts_with("blob event seq ")) && m.len() <= 22
    };
    let numbers: Vec<u64> = events
        .iter()
        .map(message)
        .filter(|m| is_numbered(m))
        .map(trailing_number)
        .collect();
    assert_each_once(&numbers, 100, "numbered lines beside binary data");
    let inner = work.log("dir.log/inner.log").display().to_string();
    assert!(
        !events.iter().any(|e| e["file"] == inner.as_str()),
        "a file inside a directory matched by `*.log` was read"
    );
    let blob_path = blob.display().to_string();
    let binary_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["file"] == blob_path.as_str() && !is_numbered(message(e)))
        .collect();
    assert!(
        binary_events.len() >= non_empty && binary_events.len() <= segments.len(),
        "{} events from the binary part, expected {non_empty} (non-empty lines) to {} (all lines)",
        binary_events.len(),
        segments.len()
    );
    let replaced: Vec<&&Value> = binary_events
        .iter()
        .filter(|e| message(e).contains('\u{FFFD}'))
        .collect();
    assert!(
        !replaced.is_empty(),
        "no binary line has its invalid bytes replaced by U+FFFD"
    );
    // docs/configuration.md, Output: `flags` holds "invalid_utf8" when "some bytes [were]
    // replaced by U+FFFD".
    let unflagged = replaced
        .iter()
        .filter(|e| !flags(e).contains(&"invalid_utf8".to_string()))
        .count();
    assert_eq!(
        unflagged,
        0,
        "{unflagged} of {} events with bytes replaced by U+FFFD lack the invalid_utf8 flag \
         (errors_total{{kind=\"invalid_utf8\"}} = {}); e.g. {}",
        replaced.len(),
        file_metric(
            &server,
            "loghaul_component_errors_total",
            "logs",
            Some("kind=\"invalid_utf8\"")
        ),
        truncate_json(replaced[0], 300)
    );
    server.finish();
}

/// A file deleted while the source has it open: the lines written just before the delete are
/// read from the open file, nothing is counted as lost, and the file is let go after
/// `rotate_wait`.
#[test]
fn file_source_file_deleted_while_open() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/*.log"], "");
    let a = work.log("a.log");
    append(&a, "a", 0..100);
    let server = work.start(&cfg);
    work.wait_count(100);
    append(&a, "a", 100..200);
    remove(&a);
    work.wait_count(200);
    assert_each_once(&work.numbers(), 200, "lines written before the delete");
    wait_not_open(&server, &a);
    wait_file_metric(&server, "loghaul_file_released_total", "logs", None, 1);
    wait_gauge_eq(&server, "loghaul_file_open_files", "logs", 0);
    wait_gauge_eq(&server, "loghaul_file_watched_files", "logs", 0);
    let lost = file_metric(
        &server,
        "loghaul_file_skipped_bytes_total",
        "logs",
        Some("reason=\"deleted_unread\""),
    );
    assert_eq!(
        lost, 0,
        "bytes counted as deleted unread, yet every line arrived"
    );
    server.finish();
}

/// A file loghaul may not read (loghaul runs as nobody): counted in `unreadable_total`, logged
/// once while it stays so, and read from its start once its mode is fixed.
#[test]
fn file_source_unreadable_file_is_counted_logged_once_and_read_when_fixed() {
    let work = Work::new();
    work.open_to_everyone();
    let cfg = tail_config(&["{LOGS}/*.log"], "");
    append(&work.log("a.log"), "a", 0..50);
    let b = work.log("b.log");
    append(&b, "b", 50..100);
    fs::set_permissions(&b, fs::Permissions::from_mode(0o000)).expect("chmod 000 b.log");

    let server = work.start_as_nobody(&cfg);
    work.wait_count(50);
    let unreadable = wait_file_metric(&server, "loghaul_file_unreadable_total", "logs", None, 1);
    // Ten more scans that found the file still unreadable (each one counts it): ten chances to
    // log it again.
    wait_file_metric(
        &server,
        "loghaul_file_unreadable_total",
        "logs",
        None,
        unreadable + 10,
    );
    let b_name = b.display().to_string();
    let mentions = server
        .stderr()
        .lines()
        .filter(|l| l.contains(&b_name))
        .count();
    assert_eq!(
        mentions,
        1,
        "lines of loghaul's log naming {b_name} while it was unreadable (expected one):\n{}",
        server.stderr()
    );
    fs::set_permissions(&b, fs::Permissions::from_mode(0o644)).expect("chmod 644 b.log");
    work.wait_count(100);
    assert_each_once(&work.numbers(), 100, "lines of a file readable only later");
    eprintln!(
        "unreadable file: loghaul_file_unreadable_total {unreadable} when first seen, {} at the end",
        file_metric(&server, "loghaul_file_unreadable_total", "logs", None)
    );
    server.finish();
}

/// A checkpoint file that is not JSON, then one cut in half: loghaul starts, warns, and reads
/// from `read_from` (the beginning here), so the old lines come again and nothing is lost.
#[test]
fn file_source_corrupt_and_truncated_checkpoints() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/app.log"], "");
    let app = work.log("app.log");
    let checkpoints = work.checkpoints_path();

    append(&app, "app", 0..100);
    let mut server = work.start(&cfg);
    work.wait_count(100);
    server.stop();
    let whole =
        fs::read(&checkpoints).unwrap_or_else(|e| panic!("read {}: {e}", checkpoints.display()));
    assert!(
        serde_json::from_slice::<Value>(&whole).is_ok(),
        "checkpoints.json after a clean stop is not JSON: {:?}",
        String::from_utf8_lossy(&whole)
    );

    fs::write(&checkpoints, b"\x00\x01 not json {{{").expect("corrupt checkpoints.json");
    append(&app, "app", 100..120);
    let mut server = work.start(&cfg);
    work.wait_count(100 + 120);
    assert_warned_about_checkpoints(&server, "a corrupt checkpoints.json");
    server.stop();
    let (counts, extra) = tally(&work.numbers(), 130);
    assert!(extra.is_empty(), "unknown numbers {extra:?}");
    assert!(
        counts[..100].iter().all(|&c| c == 2) && counts[100..120].iter().all(|&c| c == 1),
        "after a corrupt checkpoint lines 0..100 should be there twice, 100..120 once: {:?}",
        summarize_counts(&counts)
    );

    let written = fs::read(&checkpoints).expect("read checkpoints.json");
    fs::write(&checkpoints, &written[..written.len() / 2]).expect("truncate checkpoints.json");
    append(&app, "app", 120..130);
    let server = work.start(&cfg);
    work.wait_count(220 + 130);
    assert_warned_about_checkpoints(&server, "a truncated checkpoints.json");
    let (counts, extra) = tally(&work.numbers(), 130);
    assert!(extra.is_empty(), "unknown numbers {extra:?}");
    assert!(
        counts[..100].iter().all(|&c| c == 3)
            && counts[100..120].iter().all(|&c| c == 2)
            && counts[120..].iter().all(|&c| c == 1),
        "after a truncated checkpoint, expected 0..100 three times, 100..120 twice, 120..130 once: {:?}",
        summarize_counts(&counts)
    );
    server.finish();
}

/// The data_dir cannot take the checkpoints (a full tmpfs, or where mounting is not allowed,
/// a folder loghaul's uid may not write): tailing goes on and the failures are counted; once
/// there is room again the checkpoint is written and a restart resumes exactly.
#[test]
fn file_source_data_dir_full_keeps_tailing_and_counts_errors() {
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/app.log"], "");
    let app = work.log("app.log");
    let blocked = BlockedDataDir::new(&work);
    eprintln!("data_dir blocked by: {}", blocked.how());

    append(&app, "app", 0..100);
    let mut server = blocked.start(&work, &cfg);
    work.wait_count(100);
    let errors = wait_file_metric(
        &server,
        "loghaul_component_errors_total",
        "logs",
        Some("kind=\"checkpoint\""),
        1,
    );
    append(&app, "app", 100..200);
    work.wait_count(200);

    blocked.unblock();
    append(&app, "app", 200..210);
    work.wait_count(210);
    let size = fs::metadata(&app).expect("stat").len();
    wait_checkpoint(
        &work.checkpoints_path(),
        &app,
        |o| o == size,
        "the file's size",
    );
    server.stop();

    append(&app, "app", 210..250);
    let server = blocked.start(&work, &cfg);
    work.wait_count(250);
    assert_each_once(
        &work.numbers(),
        250,
        "lines across a full data_dir and a restart",
    );
    eprintln!("data_dir full: {errors} checkpoint errors counted when first seen");
    server.finish();
}

/// A sink that cannot write (its folder is a regular file): the batches come back errored, the
/// source reads those lines again (counted as `rewound`) until the sink can write, and then
/// every line arrives once.
#[test]
fn file_source_sink_failure_rewinds_and_loses_nothing() {
    let work = Work::new();
    let cfg =
        tail_config(&["{LOGS}/app.log"], "").replace("{WORK}/out.jsonl", "{WORK}/outdir/out.jsonl");
    let outdir = work.dir.path().join("outdir");
    fs::write(&outdir, b"not a folder").expect("write outdir as a file");
    append(&work.log("app.log"), "app", 0..100);

    let server = work.start_unhealthy(&cfg);
    wait_file_metric(
        &server,
        "loghaul_component_discarded_events_total",
        "out",
        Some("reason=\"write_failed\""),
        1,
    );
    let rewound = wait_file_metric(
        &server,
        "loghaul_file_reread_bytes_total",
        "logs",
        Some("reason=\"rewound\""),
        1,
    );
    remove(&outdir);
    fs::create_dir(&outdir).expect("mkdir outdir");
    let out = outdir.join("out.jsonl");
    wait_lines(&out, 100, WAIT);
    assert_each_once(
        &sequence_numbers(&out),
        100,
        "lines read again after the sink failed",
    );
    eprintln!("sink failure: {rewound} bytes counted as rewound when first seen");
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 6. Many files
// ---------------------------------------------------------------------------------------------

/// 1,000 files of 5 lines in 10 folders (`**`), at most 256 open: every line once, then 5 more
/// lines in every 7th file, every one once; `open_files` never seen above 256.
#[test]
fn file_source_1000_files_through_256_open() {
    const FILES: u64 = 1000;
    let work = Work::new();
    let cfg = tail_config(&["{LOGS}/**/*.log"], "max_open_files: 256");
    let path = |k: u64| work.log(&format!("d{}/f{k:04}.log", k % 10));
    for k in 0..FILES {
        append(&path(k), "many", k * 10..k * 10 + 5);
    }
    let server = work.start(&cfg);
    let max_open = OpenFilesWatch::start(server.ports.api);

    work.wait_count(5000);
    let mut expected: BTreeSet<u64> = (0..FILES).flat_map(|k| k * 10..k * 10 + 5).collect();
    assert_set_once(&work.numbers(), &expected, "first pass over 1,000 files");
    for k in (0..FILES).step_by(7) {
        append(&path(k), "many", k * 10 + 5..k * 10 + 10);
        expected.extend(k * 10 + 5..k * 10 + 10);
    }
    work.wait_count(expected.len());
    assert_set_once(&work.numbers(), &expected, "appends to every 7th file");

    wait_gauge_eq(&server, "loghaul_file_watched_files", "logs", FILES);
    let opened = file_metric(&server, "loghaul_file_opened_total", "logs", None);
    let closed = file_metric(&server, "loghaul_file_closed_total", "logs", None);
    let (max, samples) = max_open.stop();
    eprintln!(
        "1,000 files: opened {opened}, closed {closed}, open_files at most {max} in {samples} samples"
    );
    assert!(samples > 0, "no /metrics sample of loghaul_file_open_files");
    assert!(
        max <= 256,
        "loghaul_file_open_files reached {max}, above max_open_files 256"
    );
    assert!(
        opened >= FILES,
        "opened_total {opened}, below the {FILES} files"
    );
    assert!(
        closed >= FILES - 256,
        "closed_total {closed}: at most 256 open means at least {} closed",
        FILES - 256
    );
    server.finish();
}

// ---------------------------------------------------------------------------------------------
// 7. Acknowledgements
// ---------------------------------------------------------------------------------------------

/// With acknowledgements, a checkpoint never passes what the sink delivered: a `fluent` sink
/// aimed at a port where nothing listens keeps it at 0, across a restart; once a receiver
/// (another loghaul) comes up everything arrives (at least once) and the checkpoint catches up.
#[test]
fn file_source_acknowledgements_hold_the_checkpoint_until_delivery() {
    let work = Work::new();
    let port = free_tcp_port();
    let cfg = forwarding_config(port, true);
    let a = work.log("a.log");
    let checkpoints = work.checkpoints_path();

    let mut sender = work.start_unhealthy(&cfg);
    append(&a, "a", 0..200);
    let size = fs::metadata(&a).expect("stat").len();
    wait_file_metric(&sender, "loghaul_file_read_bytes_total", "logs", None, size);
    // A fixed wait is the test here: what must not happen is the checkpoint timer's write, and
    // only time makes it fire (six of its 100ms intervals).
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        checkpoint_offset(&checkpoints, &a),
        0,
        "checkpoint moved while nothing was delivered: {}",
        fs::read_to_string(&checkpoints).unwrap_or_default()
    );
    stop_any_status(&mut sender);
    assert_eq!(
        checkpoint_offset(&checkpoints, &a),
        0,
        "checkpoint moved at shutdown although nothing was delivered: {}",
        fs::read_to_string(&checkpoints).unwrap_or_default()
    );

    // Now the server is up: its stop at the end must flush (exit 0), and a loaded machine may
    // take longer than the first stop's 2 s, which only had to pass.
    let sender =
        work.start_unhealthy(&cfg.replace("shutdown_timeout: 2s", "shutdown_timeout: 10s"));
    append(&a, "a", 200..250);
    let receiver = Server::start(
        &r#"api: { address: "127.0.0.1:{API}" }
sources:
  fin: { type: fluent, address: "127.0.0.1:{PORT}" }
sinks:
  out: { type: file, inputs: [fin], path: "{DIR}/out.jsonl", encoding: json, flush_interval: 100ms }
"#
        .replace("{PORT}", &port.to_string()),
    );
    let numbers = wait_each_at_least_once(&receiver.out(), 250, sequence_numbers);
    let size = fs::metadata(&a).expect("stat").len();
    wait_checkpoint(&checkpoints, &a, |o| o == size, "the file's size");
    append(&a, "a", 250..300);
    let all = wait_each_at_least_once(&receiver.out(), 300, sequence_numbers);
    eprintln!(
        "acknowledgements: {} events for 250 lines at the first check, {} for 300 at the end",
        numbers.len(),
        all.len()
    );
    sender.finish();
    receiver.finish();
}

/// Without acknowledgements the checkpoint moves once events are queued, delivered or not.
#[test]
fn file_source_without_acknowledgements_the_checkpoint_moves_ahead() {
    let work = Work::new();
    let port = free_tcp_port();
    let mut sender = work.start_unhealthy(&forwarding_config(port, false));
    let a = work.log("a.log");
    append(&a, "a", 0..200);
    wait_checkpoint(&work.checkpoints_path(), &a, |o| o > 0, "past 0");
    assert_eq!(
        file_metric(&sender, "loghaul_component_sent_events_total", "fwd", None),
        0,
        "events counted as sent to a port where nothing listens"
    );
    stop_any_status(&mut sender);
}

/// A file source into a `fluent` sink at 127.0.0.1:`port`, reconnecting quickly, with a short
/// shutdown_timeout (it cannot deliver while nothing listens).
fn forwarding_config(port: u16, acknowledgements: bool) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
data_dir: "{{WORK}}/data"
shutdown_timeout: 2s
sources:
  logs:
    type: file
    include: ["{{LOGS}}/*.log"]
    acknowledgements: {acknowledgements}
    glob_interval: 100ms
    checkpoint_interval: 100ms
    rotate_wait: 1s
sinks:
  fwd:
    type: fluent
    inputs: [logs]
    servers: [{{ address: "127.0.0.1:{port}" }}]
    connect_timeout: 1s
    ack_timeout: 2s
    reconnect_max_interval: 300ms
"#
    )
}

// ---------------------------------------------------------------------------------------------
// validate
// ---------------------------------------------------------------------------------------------

/// A broken config: what it shows, the source's fields, where the error must point (`|` marks
/// the column in a piece of the line; `None`: on the component), what the error must say, and
/// what its hint must name.
type Case = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
    Option<&'static str>,
);

/// Broken `file` source configs: each is refused by `validate` with an error located on the
/// culprit and saying what is wrong.
#[test]
fn file_source_validate_reports_bad_configs() {
    let cases: [Case; 8] = [
        (
            "missing include",
            "glob_interval: 1s",
            None,
            &["`include`"],
            None,
        ),
        (
            "bad start_pattern",
            "include: [\"/var/log/*.log\"]\nmultiline: { start_pattern: '^(\\d{4}-', condition_pattern: '^\\s', mode: continue_through }",
            Some("start_pattern: |'^(\\d{4}-'"),
            &["start_pattern", "unclosed"],
            None,
        ),
        (
            "bad condition_pattern",
            "include: [\"/var/log/*.log\"]\nmultiline:\n  start_pattern: '^\\d'\n  condition_pattern: '^[\\s'\n  mode: continue_through",
            Some("condition_pattern: |'^[\\s'"),
            &["condition_pattern", "unclosed"],
            None,
        ),
        (
            "unknown mode",
            "include: [\"/var/log/*.log\"]\nmultiline:\n  start_pattern: '^\\d'\n  condition_pattern: '^\\s'\n  mode: continue_thru",
            Some("mode: |continue_thru"),
            &["unknown value `continue_thru`"],
            Some("continue_through"),
        ),
        (
            "unknown read_from",
            "include: [\"/var/log/*.log\"]\nread_from: start",
            Some("read_from: |start"),
            &["unknown value `start`"],
            Some("beginning"),
        ),
        (
            "zero checkpoint_interval",
            "include: [\"/var/log/*.log\"]\ncheckpoint_interval: 0s",
            Some("checkpoint_interval: |0s"),
            &["checkpoint_interval", "greater than 0"],
            None,
        ),
        (
            "zero max_open_files",
            "include: [\"/var/log/*.log\"]\nmax_open_files: 0",
            Some("max_open_files: |0"),
            &["max_open_files", "greater than 0"],
            None,
        ),
        (
            "misspelt multiline key",
            "include: [\"/var/log/*.log\"]\nmultiline:\n  start_patern: '^\\d'\n  condition_pattern: '^\\s'\n  mode: continue_through",
            Some("|start_patern"),
            &["unknown key `start_patern`"],
            Some("start_pattern"),
        ),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let mut failures = Vec::new();
    for (i, (what, fields, culprit, says, hint)) in cases.iter().enumerate() {
        let text = source_only_config(fields);
        let path = dir.path().join(format!("case{i}.yaml"));
        fs::write(&path, &text).expect("write config");
        let shown = path.display().to_string();
        // A missing field is reported on the component: its id (3:3, as for other types) or
        // its `type` (4:5).
        let places = match culprit {
            Some(c) => vec![locate(&text, c)],
            None => vec![(3, 3), (4, 5)],
        };
        let out = loghaul(&["validate", "-c", &shown]);
        let output = output_text(&out);
        let located: Vec<String> = places
            .iter()
            .map(|(line, col)| format!("{shown}:{line}:{col}: error:"))
            .collect();
        let mut problems = Vec::new();
        if out.status.success() {
            problems.push("validate exited 0".to_string());
        }
        if !located.iter().any(|l| output.contains(l)) {
            problems.push(format!("no `{}`", located.join("` or `")));
        }
        for s in says.iter() {
            if !output.contains(s) {
                problems.push(format!("does not say {s:?}"));
            }
        }
        if let Some(h) = hint
            && !output
                .lines()
                .any(|l| l.starts_with("  hint: ") && l.contains(h))
        {
            problems.push(format!("no hint naming {h:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{what}: {}\n--- config ---\n{text}--- output ---\n{output}",
                problems.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} broken file source configs not reported as expected:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

/// Every documented field of the `file` source, and the top-level `data_dir`, are accepted.
#[test]
fn file_source_validate_accepts_every_documented_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "data_dir: \"{}/data\"\n{}",
        dir.path().display(),
        source_only_config(
            r#"include: ["/var/log/app/*.log", "/var/log/app/**/*.log.1"]
exclude: ["/var/log/app/debug*.log", "*.gz"]
read_from: end
acknowledgements: false
data_dir: "/var/lib/loghaul/app"
checkpoint_interval: 2s
glob_interval: 500ms
rotate_wait: 10s
max_line_size: 256KiB
max_open_files: 64
max_read_size: 512KiB
partial_line_timeout: 3s
file_key: path
host_key: ""
offset_key: offset
multiline:
  start_pattern: '^\d{4}-\d{2}-\d{2}'
  condition_pattern: '^\s+(at |\.\.\.|Caused by)'
  mode: continue_through
  timeout: 2s"#,
        )
    );
    let path = dir.path().join("file.yaml");
    fs::write(&path, &text).expect("write config");
    let out = loghaul(&["validate", "-c", &path.display().to_string()]);
    assert!(
        out.status.success(),
        "validate rejected a file source with every documented field:\n{}\n--- config ---\n{text}",
        output_text(&out)
    );
    for mode in ["continue_past", "halt_before", "halt_with"] {
        let text = source_only_config(&format!(
            "include: [\"/var/log/*.log\"]\nread_from: beginning\nmultiline: {{ start_pattern: '^\\S', condition_pattern: '^\\s', mode: {mode} }}"
        ));
        fs::write(&path, &text).expect("write config");
        let out = loghaul(&["validate", "-c", &path.display().to_string()]);
        assert!(
            out.status.success(),
            "validate rejected mode {mode}:\n{}",
            output_text(&out)
        );
    }
}

/// A config whose only source is the file source `logs` with `fields` (YAML lines, indented
/// here), into a console sink.
fn source_only_config(fields: &str) -> String {
    let fields: String = fields.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "api: {{ enabled: false }}\nsources:\n  logs:\n    type: file\n{fields}sinks:\n  out: {{ type: console, inputs: [logs] }}\n"
    )
}

/// The 1-based line and column of `|` in `marked` (a piece of one line with `|` inserted),
/// found in `text`.
fn locate(text: &str, marked: &str) -> (usize, usize) {
    let bar = marked.find('|').expect("a `|` in the marked text");
    let needle = marked.replacen('|', "", 1);
    for (i, l) in text.lines().enumerate() {
        if let Some(c) = l.find(&needle) {
            return (i + 1, c + bar + 1);
        }
    }
    panic!("{needle:?} not in the config:\n{text}");
}

// ---------------------------------------------------------------------------------------------
// The test's folder and config
// ---------------------------------------------------------------------------------------------

/// A test's folder: `logs/` (what loghaul tails), `data/` (its data_dir) and `out.jsonl` (its
/// file sink), shared by every server the test starts.
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new() -> Work {
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-file-")
            .tempdir()
            .expect("create temp dir");
        fs::create_dir(dir.path().join("logs")).expect("mkdir logs");
        Work { dir }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(name)
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out.jsonl")
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Where the contract puts source `logs`' checkpoints under the top-level data_dir.
    fn checkpoints_path(&self) -> PathBuf {
        self.data().join("logs").join("checkpoints.json")
    }

    /// `template` with `{WORK}` and `{LOGS}` filled in (the harness fills the rest).
    fn render(&self, template: &str) -> String {
        template
            .replace("{WORK}", &self.dir.path().display().to_string())
            .replace(
                "{LOGS}",
                &self.dir.path().join("logs").display().to_string(),
            )
    }

    fn start(&self, template: &str) -> Server {
        Server::start(&self.render(template))
    }

    /// Starts loghaul and waits until its API answers, healthy or not (a sink with no server
    /// up, or a source that cannot write its checkpoints, makes `/health` answer 503).
    fn start_unhealthy(&self, template: &str) -> Server {
        self.start_serving(template, &[])
    }

    /// As [`Work::start_unhealthy`], through `wrapper` (see [`Server::start_wrapped`]).
    fn start_serving(&self, template: &str, wrapper: &[&str]) -> Server {
        let mut server =
            Server::spawn_wrapped(&self.render(template), "loghaul.yaml", &[], wrapper);
        let deadline = Instant::now() + START_TIMEOUT;
        for _ in 0..100_000 {
            if let Some(status) = server.wait_exit(Duration::ZERO) {
                panic!(
                    "loghaul exited during start with {status}:\n{}",
                    server.stderr()
                );
            }
            if http_get(server.ports.api, "/metrics").is_some_and(|(code, _)| code == 200) {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "loghaul's API did not answer within {START_TIMEOUT:?}:\n{}",
                server.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("API poll loop bound reached");
    }

    fn start_as_nobody(&self, template: &str) -> Server {
        Server::start_wrapped(&self.render(template), "loghaul.yaml", &[], &AS_NOBODY)
    }

    /// Lets a loghaul running as nobody create its data_dir and output here.
    fn open_to_everyone(&self) {
        fs::set_permissions(self.dir.path(), fs::Permissions::from_mode(0o777))
            .expect("chmod 777 the test folder");
    }

    /// Waits until the output holds at least `n` events (then a little longer, for extra ones);
    /// returns them all.
    fn wait_count(&self, n: usize) -> Vec<Value> {
        wait_lines(&self.out(), n, WAIT)
    }

    /// The sequence number of every event written so far.
    fn numbers(&self) -> Vec<u64> {
        sequence_numbers(&self.out())
    }
}

/// The usual config: a file source `logs` on `include` with the tests' short intervals and
/// `options` (YAML lines of the source's fields), into `{WORK}/out.jsonl`.
fn tail_config(include: &[&str], options: &str) -> String {
    let include = include
        .iter()
        .map(|g| format!("\"{g}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let options: String = options.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
data_dir: "{{WORK}}/data"
sources:
  logs:
    type: file
    include: [{include}]
    glob_interval: 100ms
    checkpoint_interval: 100ms
    rotate_wait: 1s
{options}sinks:
  out: {{ type: file, inputs: [logs], path: "{{WORK}}/out.jsonl", encoding: json, flush_interval: 100ms }}
"#
    )
}

// ---------------------------------------------------------------------------------------------
// Writing logs
// ---------------------------------------------------------------------------------------------

/// Line `n` of a file tagged `tag`; lines of one tag have one width.
fn line(tag: &str, n: u64) -> String {
    format!("{tag} event seq {n:06}\n")
}

fn lines(tag: &str, range: Range<u64>) -> Vec<u8> {
    range.flat_map(|n| line(tag, n).into_bytes()).collect()
}

/// Appends lines `range` in one write, as a logger with `O_APPEND` does.
fn append(path: &Path, tag: &str, range: Range<u64>) {
    append_bytes(path, &lines(tag, range));
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    }
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .unwrap_or_else(|e| panic!("append to {}: {e}", path.display()));
}

/// Writes lines `range` to a new file in 1MiB writes.
fn write_in_chunks(path: &Path, tag: &str, range: Range<u64>) {
    let mut f = fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    let mut buf = Vec::with_capacity(1 << 20);
    for n in range {
        buf.extend_from_slice(line(tag, n).as_bytes());
        if buf.len() >= 1 << 20 {
            f.write_all(&buf).expect("write");
            buf.clear();
        }
    }
    f.write_all(&buf).expect("write");
}

fn rename(from: &Path, to: &Path) {
    fs::rename(from, to)
        .unwrap_or_else(|e| panic!("rename {} to {}: {e}", from.display(), to.display()));
}

fn remove(path: &Path) {
    fs::remove_file(path).unwrap_or_else(|e| panic!("rm {}: {e}", path.display()));
}

/// logrotate's copytruncate: copy, then truncate the original in place.
fn copy_truncate(path: &Path, copy: &Path) {
    fs::copy(path, copy).unwrap_or_else(|e| panic!("copy {}: {e}", path.display()));
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(0))
        .unwrap_or_else(|e| panic!("truncate {}: {e}", path.display()));
}

fn ino(path: &Path) -> u64 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .ino()
}

/// How many empty files [`create_on_inode`] creates at most, looking for the inode (tests
/// running alongside free inodes too, and the lower ones are given out first).
const PROBES: usize = 4096;

/// Creates `path` holding `content` on inode `ino` if the file system gives it out again (ext4
/// and overlayfs usually give the lowest free inode of the folder's group, which a just-freed
/// one often is): empty probe files that no glob matches are created next to `path` until one
/// gets `ino` (at most [`PROBES`]); that one is filled and renamed to `path`, the others are
/// removed. Without reuse `path` is simply created. Returns whether the inode was reused.
fn create_on_inode(path: &Path, ino: u64, content: &[u8]) -> bool {
    let dir = path.parent().expect("a file in a folder");
    let mut misses = Vec::new();
    let mut hit = None;
    for i in 0..PROBES {
        let probe = dir.join(format!(".probe-{i}"));
        fs::File::create(&probe).expect("create a probe file");
        if fs::metadata(&probe).expect("stat probe").ino() == ino {
            hit = Some(probe);
            break;
        }
        misses.push(probe);
    }
    for p in misses {
        remove(&p);
    }
    match hit {
        Some(probe) => {
            fs::write(&probe, content).expect("fill the probe");
            rename(&probe, path);
            true
        }
        None => {
            fs::write(path, content).expect("create the new file");
            false
        }
    }
}

/// The Java or Python fixture's text.
fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/multiline")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The fixtures' events, worked out without regexes: a line that starts with a date
/// (`2026-...`) starts an event, every other line belongs to the one before.
fn groups_by_date(text: &str) -> Vec<String> {
    let mut groups: Vec<String> = Vec::new();
    for l in text.lines() {
        let b = l.as_bytes();
        let dated = b.len() > 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-';
        match groups.last_mut() {
            Some(g) if !dated => {
                g.push('\n');
                g.push_str(l);
            }
            _ => groups.push(l.to_string()),
        }
    }
    groups
}

// ---------------------------------------------------------------------------------------------
// Reading what arrived
// ---------------------------------------------------------------------------------------------

/// The messages of the events read from `file` (its path in field `key`) equal `want`, in order.
fn assert_messages(events: &[Value], key: &str, file: &Path, want: &[String]) {
    let file = file.display().to_string();
    let got: Vec<&str> = events
        .iter()
        .filter(|e| e.get(key).and_then(Value::as_str) == Some(file.as_str()))
        .map(message)
        .collect();
    if let Some(i) = (0..got.len().max(want.len()))
        .find(|&i| got.get(i).copied() != want.get(i).map(String::as_str))
    {
        panic!(
            "{file}: {} events, expected {}; the first difference is event {i}:\n--- got ---\n{}\n--- expected ---\n{}",
            got.len(),
            want.len(),
            got.get(i).copied().unwrap_or("(none)"),
            want.get(i).map(String::as_str).unwrap_or("(none)")
        );
    }
}

/// The trailing number of every line of a text-encoded output.
fn text_numbers(path: &Path) -> Vec<u64> {
    written_text(path)
        .lines()
        .filter(|l| !l.is_empty())
        .map(trailing_number)
        .collect()
}

/// Waits until the output at `path` holds every number in `0..n` at least once; returns them
/// all.
fn wait_each_at_least_once(path: &Path, n: u64, read: fn(&Path) -> Vec<u64>) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut numbers = Vec::new();
    for _ in 0..100_000 {
        if path.exists() {
            numbers = read(path);
            let (counts, _) = tally(&numbers, n);
            if counts.iter().all(|&c| c > 0) {
                return numbers;
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (counts, _) = tally(&numbers, n);
    let missing: Vec<u64> = (0..n).filter(|&i| counts[i as usize] == 0).collect();
    panic!(
        "{}: {} of {n} numbers never arrived (first {:?})",
        path.display(),
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Every number in `expected` exactly once, nothing else.
fn assert_set_once(numbers: &[u64], expected: &BTreeSet<u64>, what: &str) {
    let order: Vec<u64> = expected.iter().copied().collect();
    let dense: Vec<u64> = numbers
        .iter()
        .map(|n| match order.binary_search(n) {
            Ok(i) => i as u64,
            // Out of range for assert_each_once, which reports it.
            Err(_) => u64::MAX - n,
        })
        .collect();
    assert_each_once(&dense, order.len() as u64, what);
}

/// `{count: how many numbers}` of a tally, for failure messages.
fn summarize_counts(counts: &[u32]) -> BTreeMap<u32, usize> {
    let mut m = BTreeMap::new();
    for &c in counts {
        *m.entry(c).or_insert(0) += 1;
    }
    m
}

/// A field holding a number, written as a JSON number or a decimal string.
fn number_field(e: &Value, key: &str) -> u64 {
    match e.get(key) {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .unwrap_or_else(|| panic!("no number in field {key:?}: {e}"))
}

fn assert_warned_about_checkpoints(server: &Server, what: &str) {
    let stderr = server.stderr();
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.to_lowercase().contains("checkpoint")),
        "no warning about {what} in loghaul's log:\n{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics, file descriptors, checkpoints
// ---------------------------------------------------------------------------------------------

/// A file-source metric summed over its series (every `pattern`), 0 while no series exists.
fn file_metric(server: &Server, name: &str, component: &str, extra: Option<&str>) -> u64 {
    parse_metric(&server.metrics_text(), name, component, extra).unwrap_or(0)
}

/// Waits until [`file_metric`] reaches `at_least` (a series may appear only when first
/// counted); returns the value read.
fn wait_file_metric(
    server: &Server,
    name: &str,
    component: &str,
    extra: Option<&str>,
    at_least: u64,
) -> u64 {
    let deadline = Instant::now() + WAIT;
    let mut v = 0;
    for _ in 0..100_000 {
        v = file_metric(server, name, component, extra);
        if v >= at_least || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        v >= at_least,
        "{name}{{component_id=\"{component}\"{}}} = {v}, expected at least {at_least} within {WAIT:?}; series:\n{}",
        extra.map(|e| format!(",{e}")).unwrap_or_default(),
        series_of(server, name)
    );
    v
}

/// Waits until gauge `name` equals `want`.
fn wait_gauge_eq(server: &Server, name: &str, component: &str, want: u64) {
    let deadline = Instant::now() + WAIT;
    let mut v = None;
    for _ in 0..100_000 {
        v = parse_metric(&server.metrics_text(), name, component, None);
        if v == Some(want) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        v,
        Some(want),
        "{name}{{component_id=\"{component}\"}} did not reach {want} within {WAIT:?}; series:\n{}",
        series_of(server, name)
    );
}

fn series_of(server: &Server, name: &str) -> String {
    server
        .metrics_text()
        .lines()
        .filter(|l| l.starts_with(name))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Samples `loghaul_file_open_files{component_id="logs"}` every 20ms in a thread.
struct OpenFilesWatch {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OpenFilesWatch {
    fn start(api: u16) -> OpenFilesWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let max = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, max, samples) = (stop.clone(), max.clone(), samples.clone());
            std::thread::spawn(move || {
                // Bounded: 60 s of samples at most.
                for _ in 0..3000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Some((200, text)) = http_get(api, "/metrics")
                        && let Some(v) =
                            parse_metric(&text, "loghaul_file_open_files", "logs", None)
                    {
                        max.fetch_max(v, Ordering::SeqCst);
                        samples.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        OpenFilesWatch {
            stop,
            max,
            samples,
            thread: Some(thread),
        }
    }

    /// (the largest value seen, how many samples).
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("open files watcher");
        }
        (
            self.max.load(Ordering::SeqCst),
            self.samples.load(Ordering::SeqCst),
        )
    }
}

impl Drop for OpenFilesWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Whether loghaul has a descriptor on `path` (deleted or not).
fn holds_open(server: &Server, path: &Path) -> bool {
    let name = path.display().to_string();
    fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .map(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                fs::read_link(e.path())
                    .map(|t| t == Path::new(&name) || t == Path::new(&format!("{name} (deleted)")))
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false)
}

/// Waits until loghaul holds no descriptor on `path`.
fn wait_not_open(server: &Server, path: &Path) {
    let deadline = Instant::now() + WAIT;
    for _ in 0..100_000 {
        if !holds_open(server, path) {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "loghaul still holds {} open {WAIT:?} after it was deleted (rotate_wait is 1s)",
        path.display()
    );
}

/// Every (path, offset) record of a checkpoints.json. The file's layout is the source's own;
/// the contract says a record holds the identity, the path and the offset, so any object with a
/// numeric `offset` (or `position`) is taken for one, with its `path` (or `file`) if it has one.
fn checkpoint_records(path: &Path) -> Vec<(Option<String>, u64)> {
    let Ok(bytes) = fs::read(path) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{} is not JSON ({e}): {:?}",
            path.display(),
            String::from_utf8_lossy(&bytes)
        )
    });
    let mut out = Vec::new();
    let mut stack = vec![&v];
    for _ in 0..1_000_000 {
        let Some(v) = stack.pop() else { break };
        match v {
            Value::Object(m) => {
                let offset = ["offset", "position"]
                    .iter()
                    .find_map(|k| m.get(*k).and_then(Value::as_u64));
                if let Some(offset) = offset {
                    let p = ["path", "file"]
                        .iter()
                        .find_map(|k| m.get(*k).and_then(Value::as_str))
                        .map(str::to_string);
                    out.push((p, offset));
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    out
}

/// The checkpointed offset of `file` (0 when it has none yet): the largest offset among the
/// records naming it, or among all records when none names a path.
fn checkpoint_offset(checkpoints: &Path, file: &Path) -> u64 {
    let records = checkpoint_records(checkpoints);
    let name = file.display().to_string();
    let named: Vec<u64> = records
        .iter()
        .filter(|(p, _)| p.as_deref() == Some(name.as_str()))
        .map(|(_, o)| *o)
        .collect();
    if !named.is_empty() {
        return named.into_iter().max().unwrap_or(0);
    }
    if records.iter().all(|(p, _)| p.is_none()) {
        return records.iter().map(|(_, o)| *o).max().unwrap_or(0);
    }
    0
}

/// Waits until `file`'s checkpointed offset satisfies `ok`.
fn wait_checkpoint(checkpoints: &Path, file: &Path, ok: impl Fn(u64) -> bool, what: &str) {
    let deadline = Instant::now() + WAIT;
    let mut offset = 0;
    for _ in 0..100_000 {
        offset = checkpoint_offset(checkpoints, file);
        if ok(offset) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        ok(offset),
        "{}'s checkpoint is {offset}, expected {what}, within {WAIT:?}; {}:\n{}",
        file.display(),
        checkpoints.display(),
        fs::read_to_string(checkpoints).unwrap_or_else(|e| format!("({e})"))
    );
}

/// SIGTERM and a bounded wait for the exit, whatever its status (a sink that cannot deliver
/// makes shutdown end at shutdown_timeout with status 1).
fn stop_any_status(server: &mut Server) {
    server.signal("TERM");
    let status = server.wait_exit(STOP_TIMEOUT);
    assert!(
        status.is_some(),
        "loghaul did not exit within {STOP_TIMEOUT:?} of SIGTERM"
    );
}

// ---------------------------------------------------------------------------------------------
// A sink that lags
// ---------------------------------------------------------------------------------------------

/// A named pipe the file sink writes into, copied by a thread to a regular file at most
/// `per_tick` bytes every 10ms: a sink slower than the source, which fills loghaul's queues
/// with events read but not yet written. The pipe is opened once for the whole test
/// (non-blocking, so that no writer is needed to open it and none makes reads return 0), so
/// every server the test starts writes to the same reader.
struct SlowPipe {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowPipe {
    fn start(fifo: &Path, out: &Path, per_tick: usize) -> SlowPipe {
        let made = run_bounded(Command::new("mkfifo").arg(fifo), Duration::from_secs(10));
        assert!(made.status.success(), "mkfifo: {}", output_text(&made));
        let mut reader = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo)
                .unwrap_or_else(|e| panic!("open {}: {e}", fifo.display()))
        };
        let mut copy = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .unwrap_or_else(|e| panic!("create {}: {e}", out.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = vec![0u8; per_tick];
                // Bounded: two minutes of ticks.
                for _ in 0..12_000 {
                    match reader.read(&mut buf) {
                        Ok(0) => {
                            // No writer: done once the test says so.
                            if stop.load(Ordering::SeqCst) {
                                break;
                            }
                        }
                        Ok(k) => copy.write_all(&buf[..k]).expect("copy from the pipe"),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("read the pipe: {e}"),
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        SlowPipe {
            stop,
            thread: Some(thread),
        }
    }

    /// Waits for the copy to end (once no server writes to the pipe).
    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("pipe copier");
        }
    }
}

impl Drop for SlowPipe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// A data_dir that cannot be written
// ---------------------------------------------------------------------------------------------

/// `{WORK}/data` made unwritable for checkpoints: a 1MiB tmpfs filled up when this process may
/// mount (root in most containers), else a root-owned folder with loghaul run as nobody.
enum BlockedDataDir {
    Full { mount: PathBuf, filler: PathBuf },
    ReadOnly { dir: PathBuf },
}

impl BlockedDataDir {
    fn new(work: &Work) -> BlockedDataDir {
        let data = work.data();
        fs::create_dir(&data).expect("mkdir data");
        let mounted = run_bounded(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
                .arg(&data),
            Duration::from_secs(10),
        )
        .status
        .success();
        // The source's own folder exists; only files in it cannot be written.
        fs::create_dir(data.join("logs")).expect("mkdir data/logs");
        if mounted {
            let filler = data.join("filler");
            let mut f = fs::File::create(&filler).expect("create filler");
            let chunk = vec![0u8; 64 << 10];
            // 1MiB of tmpfs: full after 16 chunks, bounded at 64.
            for _ in 0..64 {
                if f.write_all(&chunk).and_then(|()| f.sync_all()).is_err() {
                    break;
                }
            }
            BlockedDataDir::Full {
                mount: data,
                filler,
            }
        } else {
            work.open_to_everyone();
            BlockedDataDir::ReadOnly {
                dir: data.join("logs"),
            }
        }
    }

    fn how(&self) -> String {
        match self {
            BlockedDataDir::Full { mount, .. } => format!("a full tmpfs at {}", mount.display()),
            BlockedDataDir::ReadOnly { dir } => {
                format!(
                    "{} not writable by nobody (mount not permitted)",
                    dir.display()
                )
            }
        }
    }

    fn start(&self, work: &Work, template: &str) -> Server {
        // Checkpoints that cannot be written may make the source Degraded before /health
        // was ever asked.
        match self {
            BlockedDataDir::Full { .. } => work.start_serving(template, &[]),
            BlockedDataDir::ReadOnly { .. } => work.start_serving(template, &AS_NOBODY),
        }
    }

    fn unblock(&self) {
        match self {
            BlockedDataDir::Full { filler, .. } => remove(filler),
            BlockedDataDir::ReadOnly { dir } => {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o777))
                    .expect("chmod 777 data/logs");
            }
        }
    }
}

impl Drop for BlockedDataDir {
    fn drop(&mut self) {
        if let BlockedDataDir::Full { mount, .. } = self {
            // Lazy: a server killed by a failing test may still hold a file there.
            let _ = Command::new("umount").arg("-l").arg(&*mount).status();
        }
    }
}
