//! Every configuration example in the README and docs/ loads. A block of YAML with top-level
//! configuration keys is validated as the server would validate it; one that shows part of a
//! configuration (a transform reading `syslog_tcp`, sinks without sources) is completed with
//! stubs for what it leaves out, and nothing else. What an example cannot carry is tolerated:
//! the certificate files it names (an operator's, not in this repository); the secrets it reads
//! from the environment or files are given placeholder values.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use loghaul_config::ConfigFormat;

use super::Config;

/// Top-level keys that make a block a configuration (not a fragment of one component).
const CONFIG_KEYS: [&str; 7] = [
    "sources:",
    "transforms:",
    "sinks:",
    "api:",
    "limits:",
    "data_dir:",
    "shutdown_timeout:",
];

/// The variables examples use without a default: secrets, given placeholders here.
fn vars(name: &str) -> Option<String> {
    match name {
        "FLUENT_SHARED_KEY"
        | "FLUENT_AGENT_PASSWORD"
        | "COLLECTOR_TOKEN"
        | "HTTP_TOKEN"
        | "KAFKA_PASSWORD"
        | "API_TOKEN" => Some("example-secret".to_owned()),
        n if n.starts_with("file:") => Some("example-secret".to_owned()),
        _ => None,
    }
}

fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The fenced YAML blocks of a Markdown text, with the line each starts on.
fn yaml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```yaml" || line.trim_start() == "```yml" => {
                current = Some((i + 2, String::new()));
            }
            Some(_) if line.trim_start().starts_with("```") => out.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The ids the block defines under `sources:` and `transforms:`.
fn producers(text: &str) -> Vec<String> {
    let mut section = "";
    let mut out = Vec::new();
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':');
            continue;
        }
        if !line.starts_with(' ') {
            section = line.split(':').next().unwrap_or("");
        }
        if matches!(section, "sources" | "transforms")
            && let Some(rest) = line.strip_prefix("  ")
            && !rest.starts_with(' ')
            && !rest.starts_with('#')
            && let Some((id, _)) = rest.split_once(':')
        {
            out.push(id.trim().to_owned());
        }
    }
    out
}

/// A stub source named `id` on UDP port `port` (validation binds nothing), in `text`'s
/// `sources:` (made when there is none).
fn add_source(text: &str, id: &str, port: u16) -> String {
    let stub = format!("  {id}: {{ type: syslog, mode: udp, address: \"127.0.0.9:{port}\" }}\n");
    match text
        .find("\nsources:\n")
        .map(|at| at + 1)
        .or_else(|| text.starts_with("sources:\n").then_some(0))
    {
        Some(at) => {
            let after = at + "sources:\n".len();
            format!("{}{stub}{}", &text[..after], &text[after..])
        }
        None => format!("{text}sources:\n{stub}"),
    }
}

/// Loads `text` as the server does, completing a partial example; returns the errors left.
fn check(text: &str) -> Vec<String> {
    let mut text = text.to_owned();
    let mut port = 1;
    for _ in 0..8 {
        let errors =
            match Config::from_str_with_vars(&text, ConfigFormat::Yaml, "example.yaml", &vars) {
                Ok(_) => return Vec::new(),
                Err(e) => e,
            };
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let mut completed = false;
        for d in errors.iter() {
            if d.message == "no sources defined"
                && !text.contains("\nsources:\n")
                && !text.starts_with("sources:\n")
            {
                text = add_source(&text, "docs_in", port);
                port += 1;
                completed = true;
            } else if let Some(id) = d
                .message
                .strip_prefix("unknown input `")
                .and_then(|r| r.split_once('`'))
                .map(|(id, _)| id.to_owned())
                && !id.contains('.')
            {
                text = add_source(&text, &id, port);
                port += 1;
                completed = true;
            }
        }
        if errors.iter().any(|d| d.message == "no sinks defined") {
            let inputs = producers(&text).join(", ");
            text.push_str(&format!(
                "sinks:\n  docs_out: {{ type: blackhole, inputs: [{inputs}] }}\n"
            ));
            completed = true;
        }
        if !completed {
            // An operator's certificate files are not in the repository.
            return messages
                .into_iter()
                .filter(|m| {
                    !(m.contains(".crt") || m.contains(".key") || m.contains(".pem"))
                        || !m.contains("cannot read")
                })
                .collect();
        }
    }
    vec![format!("could not complete the example:\n{text}")]
}

#[test]
fn every_configuration_example_in_the_readme_and_docs_loads() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read a document");
        for (line, block) in yaml_blocks(&text) {
            let top: Vec<&str> = block
                .lines()
                .filter(|l| !l.starts_with([' ', '#', '-']) && !l.is_empty())
                .collect();
            if !top
                .iter()
                .any(|l| CONFIG_KEYS.iter().any(|k| l.starts_with(k)))
            {
                continue;
            }
            checked += 1;
            let errors = check(&block);
            if !errors.is_empty() {
                failures.push(format!(
                    "{}:{line}:\n  {}",
                    doc.display(),
                    errors.join("\n  ")
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} examples found: is the scan right?"
    );
    assert!(
        failures.is_empty(),
        "examples that do not load:\n{}",
        failures.join("\n")
    );
}
