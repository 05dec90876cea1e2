//! `loghaul tap`: streams `GET /tap` from a running server's API and prints each event as
//! JSON, YAML or logfmt; skipped-event notices go to stderr.

use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

/// How `tap` prints events.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `{"output": ..., "event": {...}}`, one per line.
    Json,
    /// One YAML document per event, its output in a comment.
    Yaml,
    /// `output=... key=value ...`, one line per event, nested keys joined by dots.
    Logfmt,
}

/// What `loghaul tap` was asked.
#[derive(Debug)]
pub struct Request {
    pub outputs: Vec<String>,
    pub condition: Option<String>,
    pub limit: Option<u64>,
    pub rate: String,
    pub format: Format,
    pub api: Api,
}

/// Where the API is: given, or read from the server's configuration.
#[derive(Clone, Debug, Default)]
pub struct Api {
    pub url: Option<String>,
    pub token: Option<String>,
    pub config: Option<PathBuf>,
}

impl Api {
    /// The API's `host:port` and its token.
    ///
    /// # Errors
    ///
    /// The configuration cannot be loaded, has no API, or the URL is not `http://HOST:PORT`.
    pub fn resolve(&self) -> anyhow::Result<(String, Option<String>)> {
        let mut token = self.token.clone();
        let url = match (&self.url, &self.config) {
            (Some(url), _) => url.clone(),
            (None, Some(path)) => {
                let config = crate::server::load_config(Some(path))?;
                let api = config
                    .api
                    .with_context(|| format!("{} has no `api`", path.display()))?;
                if token.is_none() {
                    token = api.token.clone();
                }
                let scheme = if api.tls.is_some() { "https" } else { "http" };
                format!("{scheme}://{}", api.address)
            }
            (None, None) => "http://127.0.0.1:8686".to_owned(),
        };
        let Some(authority) = url.strip_prefix("http://") else {
            anyhow::bail!(
                "`{url}`: only plain http:// APIs can be reached by this command; run it on the \
                 server's machine against an API on 127.0.0.1"
            );
        };
        Ok((authority.trim_end_matches('/').to_owned(), token))
    }
}

/// Connects to the API at `authority` and sends `GET path` (with the bearer `token`, closing
/// after the answer); the answer is read from the returned stream.
///
/// # Errors
///
/// The API cannot be reached or the request cannot be written.
pub(crate) fn send_get(
    authority: &str,
    token: Option<&str>,
    path: &str,
) -> anyhow::Result<TcpStream> {
    let mut stream = TcpStream::connect(authority)
        .with_context(|| format!("cannot reach the API at {authority}"))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\n{auth}Connection: close\r\n\r\n"
    )
    .context("cannot send the request")?;
    Ok(stream)
}

/// Runs `loghaul tap` until the limit is reached, the server stops, or the user interrupts.
///
/// # Errors
///
/// The API cannot be reached or refuses the request (the message says why).
pub fn run(request: &Request) -> anyhow::Result<()> {
    let (authority, token) = request.api.resolve()?;
    let mut query = form_urlencoded::Serializer::new(String::new());
    if !request.outputs.is_empty() {
        query.append_pair("outputs", &request.outputs.join(","));
    }
    if let Some(c) = &request.condition {
        query.append_pair("condition", c);
    }
    if let Some(l) = request.limit {
        query.append_pair("limit", &l.to_string());
    }
    query.append_pair("rate", &request.rate);
    let query = query.finish();
    let stream = send_get(&authority, token.as_deref(), &format!("/tap?{query}"))?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status)?;
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP answer from {authority}: {status:?}"))?;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body: Box<dyn std::io::BufRead> = if chunked {
        Box::new(BufReader::new(Chunked {
            inner: reader,
            left: 0,
            done: false,
        }))
    } else {
        Box::new(reader)
    };
    if code != 200 {
        let mut text = String::new();
        let _ = body.read_to_string(&mut text);
        let why = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        anyhow::bail!("the API answered {code}: {why}");
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut line = String::new();
    loop {
        line.clear();
        if body.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let Ok(v) = serde_json::from_str::<Value>(line.trim_end()) else {
            continue;
        };
        if let Some(n) = v.get("skipped") {
            eprintln!("(skipped {n} events so far: more than --rate, or the viewer fell behind)");
            continue;
        }
        let text = render(&v, request.format);
        // A closed pipe (`| head`) ends the command quietly.
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(());
        }
    }
}

/// One `{"output":..,"event":..}` line as the format prints it.
pub fn render(line: &Value, format: Format) -> String {
    let output = line["output"].as_str().unwrap_or("?");
    let event = &line["event"];
    match format {
        Format::Json => format!("{line}\n"),
        Format::Yaml => {
            let mut s = format!("--- # {output}\n");
            yaml(event, 0, &mut s);
            s
        }
        Format::Logfmt => {
            let mut s = format!("output={}", logfmt_value(output));
            logfmt(event, "", &mut s);
            s.push('\n');
            s
        }
    }
}

fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                match v {
                    Value::Object(m) if !m.is_empty() => {
                        out.push_str(&format!("{pad}{}:\n", scalar(&Value::String(k.clone()))));
                        yaml(v, indent + 2, out);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push_str(&format!("{pad}{}:\n", scalar(&Value::String(k.clone()))));
                        yaml(v, indent + 2, out);
                    }
                    _ => out.push_str(&format!(
                        "{pad}{}: {}\n",
                        scalar(&Value::String(k.clone())),
                        scalar(v)
                    )),
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        out.push_str(&format!("{pad}-\n"));
                        yaml(item, indent + 2, out);
                    }
                    _ => out.push_str(&format!("{pad}- {}\n", scalar(item))),
                }
            }
        }
        _ => out.push_str(&format!("{pad}{}\n", scalar(v))),
    }
}

/// A YAML scalar: JSON's quoting is valid YAML for strings; plain when unambiguous.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let plain = !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./@".contains(c))
                && !matches!(
                    s.as_str(),
                    "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
                )
                && s.parse::<f64>().is_err();
            if plain { s.clone() } else { v.to_string() }
        }
        Value::Object(_) => "{}".to_owned(),
        Value::Array(_) => "[]".to_owned(),
        other => other.to_string(),
    }
}

fn logfmt(v: &Value, prefix: &str, out: &mut String) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                logfmt(v, &key, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                logfmt(v, &format!("{prefix}[{i}]"), out);
            }
        }
        Value::String(s) => out.push_str(&format!(" {prefix}={}", logfmt_value(s))),
        Value::Null => out.push_str(&format!(" {prefix}=")),
        other => out.push_str(&format!(" {prefix}={other}")),
    }
}

/// A logfmt value: bare when it has no space, quote or `=`; quoted (JSON escapes) otherwise.
fn logfmt_value(s: &str) -> String {
    if !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control())
    {
        s.to_owned()
    } else {
        Value::String(s.to_owned()).to_string()
    }
}

/// An HTTP/1.1 chunked body, read as a plain stream.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: std::io::BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            // The CRLF after the previous chunk's data, then the size line.
            while size.trim().is_empty() {
                size.clear();
                if self.inner.read_line(&mut size)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            let hex = size.trim().split(';').next().unwrap_or("0");
            self.left = usize::from_str_radix(hex, 16).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size")
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..n])?;
        if n == 0 {
            self.done = true;
        }
        self.left -= n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_render_an_event() {
        let line = serde_json::json!({
            "output": "route.errors",
            "event": {"message": "disk full", "severity": "err", "sd": {"a": {"b": "c d"}}, "n": 3}
        });
        assert_eq!(
            render(&line, Format::Logfmt),
            "output=route.errors message=\"disk full\" n=3 sd.a.b=\"c d\" severity=err\n"
        );
        assert_eq!(
            render(&line, Format::Yaml),
            "--- # route.errors\nmessage: \"disk full\"\nn: 3\nsd:\n  a:\n    b: \"c d\"\nseverity: err\n"
        );
    }

    #[test]
    fn a_chunked_body_reads_as_its_data() -> std::io::Result<()> {
        let raw = b"5\r\nhello\r\n7\r\n world\n\r\n0\r\n\r\n";
        let mut text = String::new();
        Chunked {
            inner: &raw[..],
            left: 0,
            done: false,
        }
        .read_to_string(&mut text)?;
        assert_eq!(text, "hello world\n");
        Ok(())
    }
}
