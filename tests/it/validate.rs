//! Broken configurations: `loghaul validate` prints a located error
//! (`FILE:LINE:COL: error: ...`) for every broken config and exits non-zero; `loghaul run` with
//! a broken config fails the same way before it binds anything.
//!
//! The broken configs live in tests/broken/*.yaml;
//! the first line of each says what must be reported:
//!
//! ```text
//! # expect: 7:5 unknown key        <- LINE:COL, then a substring of the error
//! # hint: did you mean             <- optional: a substring of the `  hint: ...` line
//! ```

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::*;

fn broken_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken")
}

/// Writes `text` (after [`render`]) to a fresh temp dir as `name`.
fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let ports = Ports::new();
    let path = dir.join(name);
    std::fs::write(&path, render(text, &ports, dir)).expect("write config");
    path
}

const VALID: &str = r#"api: { address: "127.0.0.1:{API}" }
sources:
  tcp_in: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}", format: auto, framing: auto, max_length: 100KiB, max_connections: 10000 }
  udp_in: { type: syslog, mode: udp, address: "127.0.0.1:{UDP}", format: rfc5424, strict: false, timezone: UTC }
transforms:
  f: { type: filter, inputs: [tcp_in], min_severity: warning }
sinks:
  out: { type: file, inputs: [f, udp_in], path: "{DIR}/%Y-%m-%d/{{ appname }}.jsonl", encoding: json, flush_interval: 100ms }
  c: { type: console, inputs: [tcp_in], encoding: text }
"#;

/// `max_lenght` sits at line 8, column 5.
const UNKNOWN_KEY: &str = r#"api:
  address: "127.0.0.1:{API}"
sources:
  tcp_in:
    type: syslog
    mode: tcp
    address: "127.0.0.1:{TCP}"
    max_lenght: 1KiB
sinks:
  out:
    type: file
    inputs: [tcp_in]
    path: "{DIR}/out.jsonl"
"#;

/// `nope` (an input nothing defines) sits at line 12, column 9; the `inputs` key at 10:5.
const MISSING_INPUT: &str = r#"api:
  address: "127.0.0.1:{API}"
sources:
  tcp_in:
    type: syslog
    mode: tcp
    address: "127.0.0.1:{TCP}"
sinks:
  out:
    inputs:
      - tcp_in
      - nope
    type: file
    path: "{DIR}/out.jsonl"
"#;

#[test]
fn validate_reports_every_broken_config_with_its_location() {
    let dir = broken_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 6,
        "at least 6 broken configs expected in {}, found {}",
        dir.display(),
        files.len()
    );
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read broken config");
        let first = text.lines().next().unwrap_or("");
        // An optional second line `# hint: substring` names what the hint must say.
        let hint = text
            .lines()
            .nth(1)
            .and_then(|l| l.strip_prefix("# hint:"))
            .map(str::trim);
        let Some(expect) = first.strip_prefix("# expect:") else {
            failures.push(format!(
                "{}: first line is not `# expect: LINE:COL substring`: {first:?}",
                file.display()
            ));
            continue;
        };
        let expect = expect.trim();
        let (location, substring) = expect.split_once(' ').unwrap_or((expect, ""));
        let substring = substring.trim();
        let shown = file.display().to_string();
        let out = loghaul(&["validate", "-c", &shown]);
        let text = output_text(&out);
        let located = format!("{shown}:{location}");
        if out.status.success() {
            failures.push(format!("{shown}: validate exited 0; output:\n{text}"));
        } else if !text.contains(&located) {
            failures.push(format!(
                "{shown}: output lacks {located:?}; output:\n{text}"
            ));
        } else if !text.contains(substring) {
            failures.push(format!(
                "{shown}: output lacks {substring:?}; output:\n{text}"
            ));
        } else if !text.contains(&format!("{located}: error:")) {
            failures.push(format!(
                "{shown}: expected `{located}: error: ...`; output:\n{text}"
            ));
        } else if let Some(hint) = hint
            && !text
                .lines()
                .any(|l| l.starts_with("  hint: ") && l.contains(hint))
        {
            failures.push(format!(
                "{shown}: no `  hint: ...{hint}...` line; output:\n{text}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} broken configs not reported as expected:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn validate_accepts_a_valid_config() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_config(dir.path(), "valid.yaml", VALID);
    let out = loghaul(&["validate", "-c", &path.display().to_string()]);
    assert!(
        out.status.success(),
        "validate rejected a valid config:\n{}",
        output_text(&out)
    );
}

#[test]
fn config_default_prints_a_valid_config() {
    let out = loghaul(&["config", "default"]);
    assert!(
        out.status.success(),
        "config default failed:\n{}",
        output_text(&out)
    );
    let yaml = String::from_utf8(out.stdout).expect("config default prints UTF-8");
    assert!(
        yaml.contains("sources"),
        "config default printed no sources:\n{yaml}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("default.yaml");
    std::fs::write(&path, &yaml).expect("write default.yaml");
    let out = loghaul(&["validate", "-c", &path.display().to_string()]);
    assert!(
        out.status.success(),
        "the embedded default does not validate:\n{}\n--- config ---\n{yaml}",
        output_text(&out)
    );
}

#[test]
fn version_flag_prints_the_version() {
    let out = loghaul(&["--version"]);
    assert!(
        out.status.success(),
        "--version failed: {}",
        output_text(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("loghaul ") && text.contains(env!("CARGO_PKG_VERSION")),
        "--version printed {text:?}"
    );
}

#[test]
fn bad_input_unknown_config_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_config(dir.path(), "unknown.yaml", UNKNOWN_KEY);
    let shown = path.display().to_string();
    let out = loghaul(&["validate", "-c", &shown]);
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "validate accepted an unknown key:\n{text}"
    );
    assert!(
        text.contains(&format!("{shown}:8:5: error:")),
        "expected `{shown}:8:5: error: ...`, got:\n{text}"
    );
    assert!(
        text.contains("max_lenght"),
        "the error does not name the unknown key:\n{text}"
    );
    assert!(
        text.contains("hint:") && text.contains("max_length"),
        "no hint naming the closest key `max_length`:\n{text}"
    );
}

#[test]
fn bad_input_sink_reads_missing_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_config(dir.path(), "dangling.yaml", MISSING_INPUT);
    let shown = path.display().to_string();
    let out = loghaul(&["validate", "-c", &shown]);
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "validate accepted a sink reading a missing input:\n{text}"
    );
    // The item itself is the best place; the `inputs` key is acceptable.
    assert!(
        text.contains(&format!("{shown}:12:9: error:"))
            || text.contains(&format!("{shown}:10:5: error:")),
        "expected `{shown}:12:9: error: ...` (or 10:5, the inputs key), got:\n{text}"
    );
    assert!(
        text.contains("nope"),
        "the error does not name the missing input:\n{text}"
    );

    // `run` refuses it too, before starting anything.
    let out = run_bounded(
        std::process::Command::new(BIN)
            .args(["run", "-c", &shown])
            .current_dir(dir.path()),
        Duration::from_secs(30),
    );
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "run accepted a sink reading a missing input:\n{text}"
    );
    assert!(
        text.contains("nope"),
        "run's error does not name the missing input:\n{text}"
    );
}

/// `run` validates before it binds: with both of the config's ports already taken by us, the
/// only error may be the located config error, never "address in use".
#[test]
fn run_with_unknown_key_fails_with_located_error_and_binds_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Taken first, then written into the config: a port picked free and bound later can be
    // taken meanwhile by another process of the suite.
    let tcp = TcpListener::bind("127.0.0.1:0").expect("occupy a source port");
    let api = TcpListener::bind("127.0.0.1:0").expect("occupy an API port");
    let port = |l: &TcpListener| l.local_addr().expect("local address").port();
    let ports = Ports {
        tcp: port(&tcp),
        udp: port(&tcp),
        api: port(&api),
    };
    let path = dir.path().join("unknown.yaml");
    std::fs::write(&path, render(UNKNOWN_KEY, &ports, dir.path())).expect("write config");
    let shown = path.display().to_string();
    let out = run_bounded(
        std::process::Command::new(BIN)
            .args(["run", "-c", &shown])
            .current_dir(dir.path()),
        Duration::from_secs(30),
    );
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "run accepted an unknown key:\n{text}"
    );
    assert!(
        text.contains(&format!("{shown}:8:5")),
        "run's error is not located at {shown}:8:5:\n{text}"
    );
    assert!(
        text.contains("max_lenght"),
        "run's error does not name the unknown key:\n{text}"
    );
    let lower = text.to_lowercase();
    assert!(
        !lower.contains("in use") && !lower.contains("cannot listen"),
        "run tried to bind before validating:\n{text}"
    );
    assert!(
        !dir.path().join("out.jsonl").exists(),
        "run created the output file of an invalid config"
    );
}

/// Two sources on the same TCP address: caught by validation, not by a failing bind.
#[test]
fn validate_rejects_a_port_collision() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = write_config(
        dir.path(),
        "collision.yaml",
        r#"sources:
  a: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
  b: { type: syslog, mode: tcp, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: file, inputs: [a, b], path: "{DIR}/out.jsonl" }
"#,
    );
    let shown = path.display().to_string();
    let out = loghaul(&["validate", "-c", &shown]);
    let text = output_text(&out);
    assert!(
        !out.status.success(),
        "validate accepted two sources on one port:\n{text}"
    );
    assert!(
        text.contains(&format!("{shown}:3:")) || text.contains(&format!("{shown}:2:")),
        "the collision is not located at either source (lines 2 and 3):\n{text}"
    );
}

/// `validate --check` tries what the sinks need: a path that can never be written and a server
/// nobody listens on are errors (plain `validate` cannot know); once they are right, ok. It
/// leaves nothing behind (its probes are removed).
#[test]
fn validate_check_tries_the_sinks_paths_and_servers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = Server::start(
        r#"api: { address: "127.0.0.1:{API}" }
sources:
  in: { type: fluent, address: "127.0.0.1:{TCP}" }
sinks:
  out: { type: blackhole, inputs: [in] }
"#,
    );
    let nobody = free_tcp_port();
    let config = |path: &str, port: u16| {
        format!(
            "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:{{UDP}}\" }}\nsinks:\n  files: {{ type: file, inputs: [in], path: \"{path}\" }}\n  up: {{ type: fluent, inputs: [in], servers: [{{ address: \"127.0.0.1:{port}\" }}] }}\n"
        )
    };
    let bad = write_config(
        dir.path(),
        "bad.yaml",
        &config("/proc/nope/%Y.jsonl", nobody),
    );
    let bad = bad.to_string_lossy().into_owned();
    let plain = loghaul(&["validate", &bad]);
    assert!(plain.status.success(), "plain validate cannot know");
    let checked = loghaul(&["validate", "--check", &bad]);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success());
    assert!(
        stderr.contains("sink `files`: path `/proc/nope/%Y.jsonl`: cannot create /proc/nope"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("sink `up`: 127.0.0.1:{nobody}: cannot connect")),
        "{stderr}"
    );

    let out_dir = dir.path().join("logs/new");
    let good = write_config(
        dir.path(),
        "good.yaml",
        &config(
            &format!("{}/%Y.jsonl", out_dir.display()),
            receiver.ports.tcp,
        ),
    );
    let checked = loghaul(&["validate", "--check", &good.to_string_lossy()]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(
        !dir.path().join("logs").exists(),
        "the probe directory is removed"
    );
    receiver.finish();
}

/// Several files make one configuration: `-c` more than once, or `--config-dir` (its files in
/// name order). Components spread over the files work together; an id or a global setting in
/// two files is one error, naming both places.
#[test]
fn several_files_make_one_configuration_and_conflicts_name_both_places() {
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = dir.path().join("conf.d");
    std::fs::create_dir(&conf).expect("mkdir conf.d");
    let ports = Ports::new();
    std::fs::write(
        conf.join("10-sources.yaml"),
        render(
            "api: { address: \"127.0.0.1:{API}\" }\nsources:\n  in: { type: syslog, mode: tcp, address: \"127.0.0.1:{TCP}\" }\n",
            &ports,
            dir.path(),
        ),
    )
    .expect("write");
    std::fs::write(
        conf.join("20-sinks.yaml"),
        render(
            "sinks:\n  out: { type: file, inputs: [in], path: \"{DIR}/out.jsonl\", encoding: json, flush_interval: 100ms }\n",
            &ports,
            dir.path(),
        ),
    )
    .expect("write");
    let conf_s = conf.to_string_lossy().into_owned();
    let ok = loghaul(&["validate", "--config-dir", &conf_s]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    // It runs, and an event crosses from one file's source to the other's sink.
    let mut child = std::process::Command::new(BIN)
        .args(["run", "--config-dir", &conf_s])
        .env_remove("LOGHAUL_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run loghaul");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while http_get(ports.api, "/health").map(|(s, _)| s) != Some(200) {
        assert!(std::time::Instant::now() < deadline, "never healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    send_tcp(ports.tcp, line3164("across files").as_bytes());
    let events = wait_lines(&dir.path().join("out.jsonl"), 1, Duration::from_secs(30));
    assert_eq!(message(&events[0]), "across files");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().expect("wait").success());

    // A third file that sets `api` again and reuses the sink's id: two errors, both places.
    std::fs::write(
        conf.join("30-more.yaml"),
        "api: { address: \"127.0.0.1:1\" }\nsinks:\n  out: { type: blackhole, inputs: [in] }\n",
    )
    .expect("write");
    let bad = loghaul(&["validate", "--config-dir", &conf_s]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        stderr.contains("30-more.yaml:1:1: error: `api` is set here and in ")
            && stderr.contains("10-sources.yaml:1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("30-more.yaml:3:3: error: `out` is defined twice: here and in ")
            && stderr.contains("20-sinks.yaml:2"),
        "{stderr}"
    );
    // Two -c files are the same as the folder's two.
    let two = loghaul(&[
        "validate",
        "-c",
        &conf.join("10-sources.yaml").to_string_lossy(),
        "-c",
        &conf.join("20-sinks.yaml").to_string_lossy(),
    ]);
    assert!(
        two.status.success(),
        "{}",
        String::from_utf8_lossy(&two.stderr)
    );
}
