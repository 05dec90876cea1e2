//! Whole-pipeline tests of the server's configuration: text in, `Config` or located diagnostics
//! out, over the real component sets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loghaul_config::{ApiConfig, ConfigErrors, ConfigFormat, Diagnostic, TimeZoneSetting};

use super::*;
use crate::sinks::encoder::Encoding;
use crate::sources::syslog::config::{DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_LENGTH};
use crate::sources::syslog::{Framing, SyslogFormat};

fn vars(name: &str) -> Option<String> {
    match name {
        "PORT" => Some("6514".to_owned()),
        _ => None,
    }
}

fn ok(text: &str) -> Config {
    match Config::from_str_with_vars(text, ConfigFormat::Yaml, "t.yaml", &vars) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

fn errs(text: &str) -> ConfigErrors {
    match Config::from_str_with_vars(text, ConfigFormat::Yaml, "t.yaml", &vars) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e,
    }
}

fn at(e: &ConfigErrors, line: usize, column: usize, msg: &str) -> Diagnostic {
    e.iter()
        .find(|d| d.line == Some(line) && d.column == Some(column) && d.message.contains(msg))
        .cloned()
        .unwrap_or_else(|| panic!("no error at {line}:{column} containing {msg:?}; got:\n{e}"))
}

const VALID_YAML: &str = r#"
api:
  address: "127.0.0.1:9000"
shutdown_timeout: 1m30s
sources:
  tcp_in:
    type: syslog
    mode: tcp
    address: "0.0.0.0:${PORT}"
    framing: octet_counting
    max_length: 64KiB
    max_connections: 50
    receive_buffer: 4MiB
    strict: true
    timezone: "+02:00"
  udp_in:
    type: syslog
    mode: udp
    address: "[::]:5514"
    format: rfc5424
transforms:
  important:
    type: filter
    inputs: [tcp_in, udp_in]
    min_severity: warn
    facilities: [auth, local0, 3]
    appnames: [sshd]
    contains: "Failed"
sinks:
  archive:
    type: file
    inputs: [important]
    path: "/var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl"
    encoding: text
    flush_interval: 500ms
    idle_timeout: 5m
    max_open_files: 64
  screen:
    type: console
    inputs: [tcp_in, udp_in]
"#;

const VALID_TOML: &str = r#"
shutdown_timeout = "1m30s"

[api]
address = "127.0.0.1:9000"

[sources.tcp_in]
type = "syslog"
mode = "tcp"
address = "0.0.0.0:${PORT}"
framing = "octet_counting"
max_length = "64KiB"
max_connections = 50
receive_buffer = "4MiB"
strict = true
timezone = "+02:00"

[sources.udp_in]
type = "syslog"
mode = "udp"
address = "[::]:5514"
format = "rfc5424"

[transforms.important]
type = "filter"
inputs = ["tcp_in", "udp_in"]
min_severity = "warn"
facilities = ["auth", "local0", 3]
appnames = ["sshd"]
contains = "Failed"

[sinks.archive]
type = "file"
inputs = ["important"]
path = "/var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl"
encoding = "text"
flush_interval = "500ms"
idle_timeout = "5m"
max_open_files = 64

[sinks.screen]
type = "console"
inputs = ["tcp_in", "udp_in"]
"#;

const VALID_JSON: &str = r#"{
  "api": {"address": "127.0.0.1:9000"},
  "shutdown_timeout": "1m30s",
  "sources": {
    "tcp_in": {"type": "syslog", "mode": "tcp", "address": "0.0.0.0:${PORT}", "framing": "octet_counting",
               "max_length": "64KiB", "max_connections": 50, "receive_buffer": "4MiB", "strict": true,
               "timezone": "+02:00"},
    "udp_in": {"type": "syslog", "mode": "udp", "address": "[::]:5514", "format": "rfc5424"}
  },
  "transforms": {
    "important": {"type": "filter", "inputs": ["tcp_in", "udp_in"], "min_severity": "warn",
                  "facilities": ["auth", "local0", 3], "appnames": ["sshd"], "contains": "Failed"}
  },
  "sinks": {
    "archive": {"type": "file", "inputs": ["important"], "path": "/var/log/loghaul/%Y-%m-%d/{{ appname }}.jsonl",
                "encoding": "text", "flush_interval": "500ms", "idle_timeout": "5m", "max_open_files": 64},
    "screen": {"type": "console", "inputs": ["tcp_in", "udp_in"]}
  }
}"#;

#[test]
fn valid_yaml_becomes_runtime_types() {
    let c = ok(VALID_YAML);
    assert_eq!(
        c.api,
        Some(ApiConfig {
            address: "127.0.0.1:9000".parse().unwrap(),
            token: None,
            tls: None,
        })
    );
    assert_eq!(c.shutdown_timeout, std::time::Duration::from_secs(90));
    let ids: Vec<&str> = c.sources.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["tcp_in", "udp_in"], "file order is kept");
    let SourceConfig::Syslog(tcp) = &c.source("tcp_in").unwrap().config else {
        panic!("a syslog source")
    };
    assert_eq!(tcp.address, "0.0.0.0:6514".parse().unwrap());
    assert_eq!(tcp.framing, Framing::OctetCounting);
    assert_eq!(tcp.max_length, 65536);
    assert_eq!(tcp.max_connections, 50);
    assert_eq!(tcp.receive_buffer, Some(4 << 20));
    assert!(tcp.strict);
    assert_eq!(tcp.timezone, TimeZoneSetting::Fixed(7200));
    let SourceConfig::Syslog(udp) = &c.source("udp_in").unwrap().config else {
        panic!("a syslog source")
    };
    assert_eq!(udp.format, SyslogFormat::Rfc5424);
    assert_eq!(
        (udp.framing, udp.max_length, udp.max_connections),
        (Framing::Auto, DEFAULT_MAX_LENGTH, DEFAULT_MAX_CONNECTIONS)
    );
    let TransformConfig::Filter(f) = &c.transform("important").unwrap().config else {
        panic!("`important` is a filter");
    };
    assert_eq!(f.min_severity, Some(4));
    assert_eq!(f.facilities, Some(vec![4, 16, 3]));
    assert_eq!(f.appnames.as_deref(), Some(&["sshd".to_owned()][..]));
    assert_eq!(f.contains.as_deref(), Some("Failed"));
    let archive = c.sink("archive").unwrap();
    let SinkConfig::File(file) = &archive.config else {
        panic!("archive is a file sink")
    };
    assert_eq!(archive.inputs, ["important"]);
    assert!(file.path.has_time && file.path.has_fields);
    assert_eq!(file.encoding, Encoding::Text);
    assert_eq!(file.flush_interval, std::time::Duration::from_millis(500));
    assert_eq!(file.idle_timeout, std::time::Duration::from_secs(300));
    assert_eq!(file.max_open_files, 64);
    assert_eq!(c.sink("screen").unwrap().inputs, ["tcp_in", "udp_in"]);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn toml_and_json_give_the_same_config() {
    let yaml = ok(VALID_YAML);
    let toml = Config::from_str_with_vars(VALID_TOML, ConfigFormat::Toml, "t.toml", &vars).unwrap();
    let json = Config::from_str_with_vars(VALID_JSON, ConfigFormat::Json, "t.json", &vars).unwrap();
    assert_eq!(toml, yaml);
    assert_eq!(json, yaml);
}

#[test]
fn format_by_extension() {
    use std::path::Path;
    assert_eq!(
        ConfigFormat::from_path(Path::new("a.toml")),
        ConfigFormat::Toml
    );
    assert_eq!(
        ConfigFormat::from_path(Path::new("a.JSON")),
        ConfigFormat::Json
    );
    assert_eq!(
        ConfigFormat::from_path(Path::new("a.yml")),
        ConfigFormat::Yaml
    );
    assert_eq!(
        ConfigFormat::from_path(Path::new("loghaul")),
        ConfigFormat::Yaml
    );
}

#[test]
fn default_config_parses() {
    let parsed = default_config().unwrap();
    assert!(parsed.warnings().is_empty());
    let ids: Vec<&str> = parsed.sources.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["syslog_tcp", "syslog_udp", "forward"]);
    for source in &parsed.sources[..2] {
        let SourceConfig::Syslog(s) = &source.config else {
            panic!("a syslog source")
        };
        assert_eq!(s.address, "127.0.0.1:5514".parse().unwrap());
    }
    let SourceConfig::Fluent(forward) = &parsed.sources[2].config else {
        panic!("a fluent source")
    };
    assert_eq!(forward.address, "127.0.0.1:24224".parse().unwrap());
    assert!(forward.security.is_none());
    let archive = parsed.sink("archive").unwrap();
    let SinkConfig::File(f) = &archive.config else {
        panic!("default has a file sink")
    };
    assert_eq!(f.path_raw, "./loghaul-data/%Y-%m-%d.jsonl");
    assert_eq!(archive.inputs, ["syslog_tcp", "syslog_udp", "forward"]);
    assert_eq!(
        parsed.api,
        Some(ApiConfig {
            address: "127.0.0.1:8686".parse().unwrap(),
            token: None,
            tls: None,
        })
    );
    assert!(
        DEFAULT_YAML.starts_with('#'),
        "the default is a commented file"
    );
}

/// Broken configs, each asserting the exact position and hint.
#[test]
fn broken_configs_exact_positions_and_hints() {
    const SRC: &str =
        "sources:\n  in:\n    type: syslog\n    mode: tcp\n    address: \"0.0.0.0:5514\"\n";
    const SINK: &str = "sinks:\n  out:\n    type: console\n    inputs: [in]\n";
    let cases: Vec<(String, usize, usize, &str, &str)> = vec![
        (
            format!("{SRC}    max_lenght: 1KiB\n{SINK}"),
            6,
            5,
            "unknown key `max_lenght`",
            "did you mean 'max_length'?",
        ),
        (
            format!("{SRC}    format: rfc5242\n{SINK}"),
            6,
            13,
            "`format`: unknown value `rfc5242`",
            "did you mean 'rfc5424'? accepted values: auto, rfc3164, rfc5424, raw",
        ),
        (
            format!("{SRC}    framing: octets\n{SINK}"),
            6,
            14,
            "unknown value `octets`",
            "did you mean 'octet_counting'? accepted values: auto, newline, octet_counting",
        ),
        (
            format!("{SRC}    max_length: 1.5MiB\n{SINK}"),
            6,
            17,
            "invalid size `1.5MiB`",
            loghaul_config::SIZE_HINT,
        ),
        (
            format!("shutdown_timeout: soon\n{SRC}{SINK}"),
            1,
            19,
            "invalid duration `soon`",
            loghaul_config::DURATION_HINT,
        ),
        (
            format!("{SRC}{SINK}    encodng: text\n"),
            10,
            5,
            "unknown key `encodng`",
            "did you mean 'encoding'?",
        ),
        (
            format!("{SRC}sinks:\n  out:\n    type: consol\n    inputs: [in]\n"),
            8,
            11,
            "unknown sink type `consol`",
            "did you mean 'console'?",
        ),
        (
            format!("{SRC}sinks:\n  out:\n    inputs: [in]\n"),
            7,
            3,
            "sink `out` has no `type`",
            "add `type: file` (one of: file, console, blackhole, fluent, http, kafka, opentelemetry)",
        ),
        (
            format!("{SRC}sinks:\n  out:\n    type: console\n    inputs: [inn]\n"),
            9,
            14,
            "unknown input `inn`",
            "did you mean 'in'?",
        ),
        (
            format!(
                "{SRC}sinks:\n  out:\n    type: file\n    inputs: [in]\n    path: \"x/{{{{ app-name }}}}.log\"\n"
            ),
            10,
            11,
            "invalid field name `app-name`",
            "did you mean '{{ appname }}'?",
        ),
        (
            format!(
                "{SRC}transforms:\n  t:\n    type: filter\n    inputs: [in]\n    facilities: [auth, kernel]\n{SINK}"
            ),
            10,
            24,
            "unknown facility `kernel`",
            "did you mean 'kern'?",
        ),
        (
            format!("api:\n  adress: \"127.0.0.1:1\"\n{SRC}{SINK}"),
            2,
            3,
            "unknown key `adress`",
            "did you mean 'address'?",
        ),
        (
            format!("{SRC}sinks:\n  out:\n    type: console\n    inputs: [in, in]\n"),
            9,
            18,
            "input `in` is listed twice",
            "list each input once",
        ),
        (
            format!(
                "{SRC}  in:\n    type: syslog\n    mode: udp\n    address: \"0.0.0.0:5514\"\n{SINK}"
            ),
            6,
            3,
            "duplicate key `in`",
            "each key may appear once per map",
        ),
    ];
    for (text, line, column, msg, hint) in cases {
        let e = errs(&text);
        let d = at(&e, line, column, msg);
        let got = d.hint.unwrap_or_default();
        assert!(
            got.starts_with(hint),
            "hint {got:?} should start with {hint:?} for:\n{text}"
        );
    }
}

/// One run reports every problem: the first type error of each component that fails to
/// deserialize, each further bad value in it (the loader retries without the key at fault), every
/// unknown key, and every semantic error of the components that did deserialize.
#[test]
fn all_errors_are_collected() {
    let text = "\
sources:
  a:
    type: syslog
    mode: tccp
    address: \"0.0.0.0:1\"
    max_connections: -1
    strict: maybe
  b:
    type: syslog
    mode: udp
    address: \"0.0.0.0:2\"
    bogus: 1
    other: 2
  c:
    type: syslog
    mode: tcp
    address: nowhere
    max_length: 0
sinks:
  s:
    type: file
    inputs: [a, b, c, d]
    path: \"%Q\"
    idle_timeout: 0s
";
    let e = errs(text);
    at(&e, 4, 11, "unknown value `tccp`");
    at(
        &e,
        6,
        22,
        "`max_connections`: expected a non-negative integer, found integer `-1`",
    );
    at(&e, 7, 13, "`strict`: expected true or false");
    at(&e, 12, 5, "unknown key `bogus`");
    at(&e, 13, 5, "unknown key `other`");
    at(&e, 17, 14, "`nowhere` has no port");
    at(&e, 18, 17, "`max_length` must be greater than 0");
    at(&e, 22, 23, "unknown input `d`");
    at(&e, 23, 11, "invalid strftime specifier `%Q`");
    at(&e, 24, 19, "`idle_timeout` must be greater than 0");
    assert_eq!(e.len(), 10, "{e}");
    let lines: Vec<usize> = e.iter().filter_map(|d| d.line).collect();
    assert!(
        lines.windows(2).all(|w| w[0] <= w[1]),
        "sorted by position: {lines:?}"
    );
}

#[test]
fn cycles_are_shown_in_data_flow_order() {
    let text = "\
sources:
  in:
    type: syslog
    mode: udp
    address: \"0.0.0.0:5514\"
transforms:
  a:
    type: filter
    inputs: [in, c]
  b:
    type: filter
    inputs: [a]
  c:
    type: filter
    inputs: [b]
  self:
    type: filter
    inputs: [self]
sinks:
  out:
    type: console
    inputs: [c, self]
";
    let e = errs(text);
    // Reported where the loop closes: `b` reading `a`.
    at(&e, 12, 14, "cycle among transforms: a -> b -> c -> a");
    at(&e, 18, 14, "cycle among transforms: self -> self");
    assert_eq!(
        e.iter().filter(|d| d.message.contains("cycle")).count(),
        2,
        "{e}"
    );
}

#[test]
fn ports_protocols_and_the_api() {
    let two = |a: &str, b: &str, api: &str| {
        format!(
            "{api}sources:\n  x:\n    type: syslog\n    {a}\n  y:\n    type: syslog\n    {b}\nsinks:\n  out:\n    type: console\n    inputs: [x, y]\n"
        )
    };
    // TCP and UDP on one port, different addresses, port 0: all fine.
    ok(&two(
        "mode: tcp\n    address: \"0.0.0.0:5514\"",
        "mode: udp\n    address: \"0.0.0.0:5514\"",
        "",
    ));
    ok(&two(
        "mode: tcp\n    address: \"127.0.0.1:5514\"",
        "mode: tcp\n    address: \"127.0.0.2:5514\"",
        "",
    ));
    ok(&two(
        "mode: tcp\n    address: \"127.0.0.1:0\"",
        "mode: tcp\n    address: \"127.0.0.1:0\"",
        "",
    ));
    // UDP may share the API's port; a disabled API frees it.
    ok(&two(
        "mode: udp\n    address: \"127.0.0.1:8686\"",
        "mode: tcp\n    address: \"127.0.0.1:1\"",
        "",
    ));
    ok(&two(
        "mode: tcp\n    address: \"127.0.0.1:8686\"",
        "mode: tcp\n    address: \"127.0.0.1:1\"",
        "api:\n  enabled: false\n",
    ));
    let e = errs(&two(
        "mode: udp\n    address: \"[::]:514\"",
        "mode: udp\n    address: \"localhost:514\"",
        "",
    ));
    at(&e, 9, 14, "both listen on UDP port 514");
    let e = errs(&two(
        "mode: tcp\n    address: \"127.0.0.1:9000\"",
        "mode: tcp\n    address: \"127.0.0.1:1\"",
        "api:\n  address: \"0.0.0.0:9000\"\n",
    ));
    at(&e, 7, 14, "listens on the API's address 0.0.0.0:9000");
    let c = ok(&two(
        "mode: tcp\n    address: \"127.0.0.1:1\"",
        "mode: tcp\n    address: \"127.0.0.1:2\"",
        "api:\n  enabled: false\n",
    ));
    assert_eq!(c.api, None);
}

#[test]
fn warnings_do_not_fail_the_load() {
    let text = "\
sources:
  used:
    type: syslog
    mode: udp
    address: \"0.0.0.0:5514\"
  unused:
    type: syslog
    mode: udp
    address: \"0.0.0.0:5515\"
sinks:
  out:
    type: file
    inputs: [used]
    path: \"logs/{{ appnme }}.log\"
";
    let c = ok(text);
    let w = c.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!((w[0].line, w[0].column), (Some(6), Some(3)));
    assert!(w[0].message.contains("source `unused` is not an input"));
    assert!(w[0].to_string().starts_with("t.yaml:6:3: warning: "));
    assert_eq!((w[1].line, w[1].column), (Some(14), Some(11)));
    assert!(w[1].message.contains("did you mean 'appname'"));
}

#[test]
fn interpolation_in_the_pipeline() {
    let text = "sources:\n  in:\n    type: syslog\n    mode: udp\n    address: \"${HOST:-127.0.0.1}:${PORT}\"\n    # ${NOT_SET} is only a comment\nsinks:\n  out:\n    type: file\n    inputs: [in]\n    path: \"cost-$$5.log\"\n";
    let c = ok(text);
    let SourceConfig::Syslog(s) = &c.source("in").unwrap().config else {
        panic!("a syslog source")
    };
    assert_eq!(s.address, "127.0.0.1:6514".parse().unwrap());
    let SinkConfig::File(f) = &c.sink("out").unwrap().config else {
        panic!()
    };
    assert_eq!(f.path_raw, "cost-$5.log");
    let e = errs("a: ${NOPE}\nb: ${ALSO_NOPE}\n");
    assert_eq!(e.len(), 2);
    at(&e, 1, 4, "`NOPE` is not set");
    at(&e, 2, 4, "`ALSO_NOPE` is not set");
}

#[test]
fn toml_and_json_errors_are_located() {
    let toml = "[sources.in]\ntype = \"syslog\"\nmode = \"tcp\"\naddress = \"0.0.0.0:5514\"\nmax_lenght = 5\n\n[sinks.out]\ntype = \"console\"\ninputs = [\"inn\"]\n";
    let e = Config::from_str_with_vars(toml, ConfigFormat::Toml, "t.toml", &vars).unwrap_err();
    assert_eq!(
        at(&e, 5, 1, "unknown key `max_lenght`").hint.as_deref(),
        Some("did you mean 'max_length'?")
    );
    assert_eq!(
        at(&e, 9, 11, "unknown input `inn`").hint.as_deref(),
        Some("did you mean 'in'?")
    );
    let e =
        Config::from_str_with_vars("[sources\n", ConfigFormat::Toml, "t.toml", &vars).unwrap_err();
    assert!(e.0[0].message.starts_with("TOML syntax error"), "{e}");
    assert_eq!(e.0[0].line, Some(1));

    let json = "{\n  \"sources\": {\"in\": {\"type\": \"syslog\", \"mode\": \"tcp\", \"address\": \"0.0.0.0:5514\"}},\n  \"sinks\": {\"out\": {\"type\": \"console\", \"inputs\": [\"in\"], \"encoding\": \"xml\"}}\n}\n";
    let e = Config::from_str_with_vars(json, ConfigFormat::Json, "t.json", &vars).unwrap_err();
    assert_eq!(
        at(&e, 3, 70, "unknown value `xml`").hint.as_deref(),
        Some("accepted values: json, text")
    );
    let e = Config::from_str_with_vars("{\"sources\": {,}}", ConfigFormat::Json, "t.json", &vars)
        .unwrap_err();
    assert_eq!((e.0[0].line, e.0[0].column), (Some(1), Some(14)));
    assert!(e.0[0].message.starts_with("JSON syntax error"), "{e}");
}

#[test]
fn odd_documents() {
    let e = errs("");
    assert!(e.iter().any(|d| d.message == "no sources defined"));
    assert!(e.iter().any(|d| d.message == "no sinks defined"));
    let e = errs("- a\n- b\n");
    at(&e, 1, 1, "must be a map of sections");
    let e = errs("sources:\n  in: 5\nsinks:\n  out:\n    type: console\n    inputs: [in]\n");
    at(&e, 2, 7, "source `in` must be a map with a `type` key");
    let e = errs(
        "sources:\n  \"bad id\":\n    type: syslog\n    mode: udp\n    address: \"0.0.0.0:1\"\nsinks:\n  out:\n    type: console\n    inputs: [\"bad id\"]\n",
    );
    at(&e, 2, 3, "invalid source id `bad id`");
}

// Every file in `tests/broken/` must fail to load with the error its header promises:
//
//     # expect: LINE:COL substring-of-the-message
//     # hint: substring-of-that-error's-hint        (optional)
//
// The same files drive the CLI's `loghaul validate` integration test, which reads only the
// `# expect:` line.

use std::path::Path;

struct Expectation {
    line: usize,
    column: usize,
    message: String,
    hint: Option<String>,
}

fn expectation(path: &Path) -> Expectation {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let rest = first.strip_prefix("# expect: ").unwrap_or_else(|| {
        panic!(
            "{}: first line must be `# expect: LINE:COL message`",
            path.display()
        )
    });
    let (pos, message) = rest.split_once(' ').unwrap();
    let (line, column) = pos.split_once(':').unwrap();
    let hint = lines
        .next()
        .and_then(|l| l.strip_prefix("# hint: "))
        .map(str::to_owned);
    Expectation {
        line: line.parse().unwrap(),
        column: column.parse().unwrap(),
        message: message.to_owned(),
        hint,
    }
}

#[test]
fn every_broken_config_fails_where_its_header_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    paths.sort();
    assert!(
        paths.len() >= 8,
        "expected at least 8 broken configs, found {}",
        paths.len()
    );
    let mut failures = Vec::new();
    for path in &paths {
        let want = expectation(path);
        let errors = match Config::load(path) {
            Ok(_) => {
                failures.push(format!("{}: loaded without errors", path.display()));
                continue;
            }
            Err(e) => e,
        };
        let found = errors.iter().find(|d| {
            d.line == Some(want.line)
                && d.column == Some(want.column)
                && d.message.contains(&want.message)
        });
        match (found, &want.hint) {
            (None, _) => failures.push(format!(
                "{}: no error at {}:{} containing {:?}; got:\n{errors}",
                path.display(),
                want.line,
                want.column,
                want.message
            )),
            (Some(d), Some(h)) if !d.hint.as_deref().unwrap_or_default().contains(h.as_str()) => {
                failures.push(format!(
                    "{}: hint {:?} does not contain {h:?}",
                    path.display(),
                    d.hint
                ))
            }
            _ => {}
        }
        // The file name is the origin, so the CLI prints `FILE:LINE:COL`.
        assert!(errors.to_string().starts_with(&path.display().to_string()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn missing_file_is_a_clear_error() {
    let err = Config::load(Path::new("/nonexistent/loghaul.yaml")).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("/nonexistent/loghaul.yaml: error: cannot read config file:"),
        "{text}"
    );
    assert!(text.contains("hint: check the path"), "{text}");
}

#[test]
fn buffers_retries_and_the_memory_limit() {
    use loghaul_config::{BufferKind, SyncMode, WhenFull};
    let c = ok(r#"
limits: { memory: 64MiB }
sources:
  in: { type: syslog, mode: tcp, address: "127.0.0.1:5514" }
sinks:
  a: { type: file, inputs: [in], path: /tmp/a, buffer: { type: disk, max_size: 2GiB, sync: 50ms, when_full: drop_newest } }
  b: { type: http, inputs: [in], uri: "http://127.0.0.1:1/", buffer: { max_events: 1000 }, retry: { initial: 1s, max: 1m, max_attempts: 5 } }
  c: { type: file, inputs: [in], path: /tmp/c, buffer: { type: disk, sync: never } }
"#);
    assert_eq!(c.limits.memory, 64 << 20);
    let a = &c.sinks[0];
    assert_eq!(
        a.buffer.kind,
        BufferKind::Disk {
            max_size: 2 << 30,
            sync: SyncMode::Interval(std::time::Duration::from_millis(50))
        }
    );
    assert_eq!(a.buffer.when_full, WhenFull::DropNewest);
    assert_eq!(a.retry, None, "each sink type's own default");
    let b = &c.sinks[1];
    assert_eq!(
        b.buffer.kind,
        BufferKind::Memory {
            max_events: Some(1000)
        }
    );
    let retry = b.retry.expect("retry");
    assert_eq!(retry.max_attempts, Some(5));
    assert_eq!(retry.max, std::time::Duration::from_secs(60));
    assert!(matches!(
        c.sinks[2].buffer.kind,
        BufferKind::Disk { sync: SyncMode::Never, max_size } if max_size == 1 << 30
    ));
    assert_eq!(ok(VALID_YAML).limits.memory, 256 << 20);

    let e = errs(
        r#"limits: { memory: 1MiB }
sources:
  in: { type: syslog, mode: tcp, address: "127.0.0.1:5514" }
sinks:
  a: { type: file, inputs: [in], path: /tmp/a, buffer: { type: tape } }
  b: { type: file, inputs: [in], path: /tmp/b, buffer: { type: disk, sync: sometimes, max_size: 10KiB } }
  c: { type: file, inputs: [in], path: /tmp/c, buffer: { max_size: 1GiB, when_full: drop_oldest } }
  d: { type: file, inputs: [in], path: /tmp/d, retry: { initial: 1s, max: 1ms, max_attempts: 0 } }
  e: { type: file, inputs: [in], path: /tmp/e, buffer: { type: disk, max_events: 5, colour: red } }
"#,
    );
    at(&e, 1, 19, "`limits.memory` must be at least 16MiB");
    let tape = at(&e, 5, 64, "unknown buffer type `tape`");
    assert!(
        tape.hint
            .as_deref()
            .is_some_and(|h| h.contains("memory, disk")),
        "{tape}"
    );
    at(&e, 6, 76, "unknown `sync` value `sometimes`");
    at(&e, 6, 97, "at least 1MiB");
    at(&e, 7, 58, "`max_size` is for disk buffers");
    at(&e, 7, 85, "unknown `when_full` value `drop_oldest`");
    at(&e, 8, 94, "positive count or `forever`");
    assert!(e.iter().any(|d| d.message.contains("colour")), "{e}");
    let e = errs(
        r#"sources:
  in: { type: syslog, mode: tcp, address: "127.0.0.1:5514" }
sinks:
  d: { type: file, inputs: [in], path: /tmp/d, retry: { initial: 1s, max: 1ms } }
  e: { type: file, inputs: [in], path: /tmp/e, buffer: { type: disk, max_events: 5 } }
"#,
    );
    at(&e, 4, 75, "`retry.max` is shorter than `retry.initial`");
    at(&e, 5, 70, "`max_events` is for memory buffers");
}

/// One mistake, one error: a misspelt required key is its unknown key (naming the right one),
/// not also a missing field; `inputs` given as a string is its type error, not also "no inputs".
#[test]
fn one_mistake_makes_one_error() {
    let e = errs(
        "sources:\n  syslog_tcp: { type: syslog, mode: tcp, adress: \"127.0.0.1:5514\" }\nsinks:\n  out: { type: file, inputs: syslog_tcp, path: /tmp/x.jsonl }\n",
    );
    assert_eq!(e.len(), 2, "{e}");
    let typo = at(&e, 2, 42, "unknown key `adress`");
    assert_eq!(typo.hint.as_deref(), Some("did you mean 'address'?"));
    at(&e, 4, 30, "`inputs`: expected a list");
}
