//! Fuzz the configuration loader with the server's own component registry: arbitrary text, in
//! the format the first byte picks (YAML, TOML, JSON), goes through `${VAR}` interpolation, the
//! parsers, the located tree, serde into each component's raw schema, and validation, exactly as
//! `loghaul validate` runs them, for every source, transform and sink type the server has
//! (`loghaul::config::Components`). The fuzz crate builds `loghaul` without its default
//! features: no librdkafka and no jemalloc, which only matter at run time; the kafka source and
//! sink keep their schemas and validation in that build (librdkafka's own check of
//! `librdkafka_options` aside), so they are fuzzed like the rest.
//!
//! Nothing is read from the machine, so a run does not depend on its files: the loader takes its
//! outside world as a `loghaul_config::Environment`. `${VAR}` and `${file:PATH}` come from the
//! fixed table in [`vars`], and `tls` maps are checked by [`tls_files`], a small fake file system
//! of three names (`/fuzz/cert.pem`, `/fuzz/key.pem`, `/fuzz/ca.pem`) that stands for a working
//! certificate, key and CA, while any other path "cannot be read". The loader's own TLS logic
//! (which keys each end of a connection takes, `cert` without `key`, `verify_client` without
//! `ca`, versions, handshake timeouts, the key a file error is reported at) runs unchanged;
//! only the reading of PEM files (and of the system's trust store) is replaced.
//!
//! Invariants: the loader never panics, never overflows the stack, and ends; an error result holds
//! at least one error, each positioned at a 1-based line of the text (or its end); an accepted
//! config has sources and sinks, unique ids, inputs that name sources or transforms, only
//! warnings in `warnings`, TLS only where its files are the fake ones, and components whose
//! validated values keep their promises (non-zero sizes, counts and durations, known severity
//! and facility codes, `/`-rooted paths).
#![no_main]

use std::collections::HashSet;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use loghaul::config::Config;
use loghaul::sinks::SinkConfig;
use loghaul::sources::SourceConfig;
use loghaul::transforms::TransformConfig;
use loghaul_config::{ConfigFormat, Environment, TimeZoneSetting, TlsConfig, TlsError, TlsRole};

/// The environment the fuzzed configs see: a few set variables (one empty, one holding a
/// reference that must stay text) and one secret file, everything else unset.
fn vars(name: &str) -> Option<String> {
    match name {
        "file:/run/secrets/token" => Some("s3cr3t".to_owned()),
        "HOST" => Some("127.0.0.1".to_owned()),
        "PORT" => Some("5514".to_owned()),
        "DIR" => Some("./loghaul-data".to_owned()),
        "SIZE" => Some("64KiB".to_owned()),
        "EMPTY" => Some(String::new()),
        "NESTED" => Some("${HOST}".to_owned()),
        _ => None,
    }
}

/// The files the fake file system has.
const FILES: [&str; 3] = ["/fuzz/cert.pem", "/fuzz/key.pem", "/fuzz/ca.pem"];

/// Checks a `tls` map's files against the fake file system: the three [`FILES`] make a working
/// config at either end, any other path cannot be read. Deterministic, and as cheap as the rest
/// of the loader (the real check parses PEM and may load the system's trust store).
fn tls_files(config: &TlsConfig, _: TlsRole) -> Result<Vec<String>, TlsError> {
    for path in [&config.cert, &config.key, &config.ca].into_iter().flatten() {
        if !FILES.iter().any(|f| Path::new(f) == path) {
            return Err(TlsError {
                path: Some(path.clone()),
                message: "cannot read: not a file of the fuzz target's file system".to_owned(),
            });
        }
    }
    Ok(Vec::new())
}

fn check_tls(tls: &Option<TlsConfig>) {
    if let Some(t) = tls {
        for path in [&t.cert, &t.key, &t.ca].into_iter().flatten() {
            assert!(FILES.iter().any(|f| Path::new(f) == path), "{path:?}");
        }
        assert_eq!(t.cert.is_some(), t.key.is_some());
        assert!(!t.verify_client || t.ca.is_some());
        assert!(!t.handshake_timeout.is_zero());
    }
}

fn check_source(c: &SourceConfig) {
    match c {
        SourceConfig::Syslog(s) => {
            assert!(s.max_length > 0 && s.max_connections > 0);
            assert_ne!(s.receive_buffer, Some(0));
            assert_ne!(s.max_connections_per_client, Some(0));
            if let TimeZoneSetting::Fixed(secs) = s.timezone {
                assert!(secs.abs() < 24 * 3600, "a zone offset of {secs}s");
            }
        }
        SourceConfig::Fluent(s) => {
            assert!(s.max_request_size > 0 && s.max_decompressed_size > 0);
            assert!(s.max_connections > 0 && s.max_events_per_request > 0);
        }
        SourceConfig::File(s) => {
            assert!(!s.include.is_empty());
            assert!(s.max_open_files > 0 && s.max_read_size > 0);
            assert!(!s.checkpoint_interval.is_zero() && !s.glob_interval.is_zero());
        }
        SourceConfig::HttpServer(s) => {
            assert!(s.max_body_size > 0 && s.max_decompressed_size > 0);
            assert!(s.max_connections > 0 && s.max_events_per_request > 0);
            assert!(!s.request_timeout.is_zero() && !s.ack_timeout.is_zero());
            assert!(s.paths.iter().all(|p| p.starts_with('/')));
        }
        SourceConfig::Opentelemetry(o) => {
            let s = &o.0;
            assert!(s.max_body_size > 0 && s.max_decompressed_size > 0);
            assert!(s.max_connections > 0 && s.max_events_per_request > 0);
            assert!(!s.request_timeout.is_zero() && !s.ack_timeout.is_zero());
            assert_eq!(s.paths, ["/v1/logs"]);
        }
        SourceConfig::Kafka(s) => {
            assert!(!s.bootstrap_servers.trim().is_empty() && !s.group_id.trim().is_empty());
            assert!(!s.topics.is_empty() && s.topics.iter().all(|t| !t.trim().is_empty()));
            assert!(s.max_batch_events > 0);
        }
    }
}

fn check_transform(c: &TransformConfig) {
    match c {
        TransformConfig::Filter(f) => {
            assert!(f.min_severity.is_none_or(|s| s < 8));
            assert!(f.facilities.iter().flatten().all(|f| *f < 24));
        }
        // A program that loaded compiled; its text is what was given.
        TransformConfig::Remap(r) => assert!(!r.program.source.is_empty()),
        TransformConfig::Route(r) => {
            assert!(!r.rules.is_empty());
            for rule in &r.rules {
                assert!(!rule.name.is_empty() && !rule.name.contains('.'));
                assert!(rule.name != "_unmatched");
                assert!(rule.condition.is_some() || !rule.tags.is_empty());
            }
        }
        TransformConfig::Sample(s) => match s.mode {
            loghaul::transforms::sample::Mode::Rate(n) => assert!(n > 0),
            loghaul::transforms::sample::Mode::Ratio(r) => assert!(r > 0.0 && r <= 1.0),
        },
        TransformConfig::Throttle(t) => {
            assert!(t.threshold > 0 && !t.window.is_zero() && t.max_keys > 0);
        }
        TransformConfig::Dedupe(d) => assert!(d.num_events > 0),
        TransformConfig::Reduce(r) => {
            assert!(r.max_groups > 0 && !r.flush_period.is_zero());
            assert!(r.max_events.is_none_or(|n| n > 0));
        }
    }
}

fn check_sink(c: &SinkConfig) {
    match c {
        SinkConfig::File(s) => {
            assert!(!s.flush_interval.is_zero() && !s.idle_timeout.is_zero());
            assert!(s.max_open_files > 0);
        }
        SinkConfig::Console(_) | SinkConfig::Blackhole(_) => {}
        SinkConfig::Fluent(s) => {
            assert!(!s.servers.is_empty());
            assert!(s.max_events > 0 && s.max_bytes > 0 && s.max_in_flight > 0);
            assert!(!s.connect_timeout.is_zero());
        }
        SinkConfig::Http(s) => {
            assert!(s.max_events > 0 && s.max_bytes > 0);
            assert!(!s.timeout.is_zero() && !s.request_timeout.is_zero());
            assert!(!s.encoding.is_otlp(), "OTLP is the opentelemetry sink's own");
        }
        SinkConfig::Opentelemetry(o) => {
            let s = &o.0;
            assert!(s.max_events > 0 && s.max_bytes > 0);
            assert!(!s.timeout.is_zero() && !s.request_timeout.is_zero());
            assert!(s.encoding.is_otlp());
        }
        SinkConfig::Kafka(s) => {
            assert!(!s.bootstrap_servers.trim().is_empty());
            assert!(!s.topic.parts.is_empty());
            assert!(matches!(s.acks, "all" | "1" | "0"));
            assert!(!s.idempotence || s.acks == "all");
            assert!(s.batch_max_events > 0 && s.batch_max_bytes > 0 && s.queue_max_bytes > 0);
            assert!(s.headers.iter().all(|(name, _)| !name.is_empty()));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let format = match first % 3 {
        0 => ConfigFormat::Yaml,
        1 => ConfigFormat::Toml,
        _ => ConfigFormat::Json,
    };
    let text = String::from_utf8_lossy(rest);
    let env = Environment {
        vars: &vars,
        tls: &tls_files,
    };
    match Config::from_str_in(&text, format, "fuzz", env) {
        Err(errors) => {
            assert!(
                errors.iter().any(|d| d.is_error()),
                "an Err without an error"
            );
            // The variables hold no line break, so interpolation keeps the text's lines. YAML
            // also breaks lines at a lone CR, and reports an error at the end of the text on the
            // line after the last one even when the text does not end with a line break; so a
            // position may be on any line up to one past the last break.
            let lines = text.bytes().filter(|b| matches!(b, b'\n' | b'\r')).count() + 2;
            for d in errors.iter() {
                assert_eq!(d.origin, "fuzz");
                assert!(!d.message.is_empty());
                if let Some(line) = d.line {
                    assert!(line >= 1 && line <= lines, "line {line} of {lines}: {d}");
                }
                assert!(d.column.is_none_or(|c| c >= 1), "column 0: {d}");
                assert!(!d.to_string().is_empty());
            }
        }
        Ok(config) => {
            assert!(!config.sources.is_empty() && !config.sinks.is_empty());
            assert!(config.warnings.iter().all(|w| !w.is_error()));
            let mut ids = HashSet::new();
            for id in config
                .sources
                .iter()
                .map(|c| &c.id)
                .chain(config.transforms.iter().map(|c| &c.id))
                .chain(config.sinks.iter().map(|c| &c.id))
            {
                assert!(ids.insert(id.as_str()), "id `{id}` twice");
            }
            let readable: HashSet<&str> = config
                .sources
                .iter()
                .map(|c| c.id.as_str())
                .chain(config.transforms.iter().map(|c| c.id.as_str()))
                .collect();
            for (id, inputs) in config
                .transforms
                .iter()
                .map(|c| (&c.id, &c.inputs))
                .chain(config.sinks.iter().map(|c| (&c.id, &c.inputs)))
            {
                assert!(!inputs.is_empty(), "`{id}` has no inputs");
                for input in inputs {
                    assert!(readable.contains(input.as_str()), "`{id}` reads `{input}`");
                }
            }
            if let Some(api) = &config.api {
                check_tls(&api.tls);
            }
            for c in &config.sources {
                check_tls(&c.tls);
                check_source(&c.config);
            }
            for c in &config.transforms {
                check_transform(&c.config);
            }
            for c in &config.sinks {
                check_tls(&c.tls);
                check_sink(&c.config);
            }
        }
    }
});
