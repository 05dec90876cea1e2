//! Where the HTTP experiments' peers live and how each is started: the echo servers of
//! `http_echo`, the clients of `http_client`, and the load tools `ab` and `wrk`. The programs are
//! the project's own small files under `bench/peers/http/`, run by runtimes that
//! `scripts/install-peers.sh` installs (paths overridable with the `LOGHAUL_*` variables it writes
//! to its env file).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::subjects::SubjectKind;

/// The folder holding `echo/` and `clients/`: `LOGHAUL_HTTP_PEERS`, else the repository's
/// `bench/peers/http` (found from this crate's source folder, then from the working folder).
pub fn dir() -> PathBuf {
    if let Ok(d) = std::env::var("LOGHAUL_HTTP_PEERS") {
        return PathBuf::from(d);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers/http");
    if built.is_dir() {
        return built;
    }
    PathBuf::from("bench/peers/http")
}

fn env_or(key: &str, default: &str) -> PathBuf {
    PathBuf::from(std::env::var(key).unwrap_or_else(|_| default.to_string()))
}

/// A program found by name on `PATH`, or the name itself (so that the error names it).
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(name))
}

/// `ab` (Debian apache2-utils).
pub fn ab() -> PathBuf {
    std::env::var("LOGHAUL_AB").map_or_else(|_| on_path("ab"), PathBuf::from)
}

/// `wrk` (Debian wrk).
pub fn wrk() -> PathBuf {
    std::env::var("LOGHAUL_WRK").map_or_else(|_| on_path("wrk"), PathBuf::from)
}

fn node() -> PathBuf {
    std::env::var("LOGHAUL_NODE").map_or_else(|_| on_path("node"), PathBuf::from)
}

/// The Python of the HTTP peers' venv (tornado, requests, urllib3).
fn python() -> PathBuf {
    env_or(
        "LOGHAUL_HTTP_PYTHON",
        "/opt/loghaul-peers/http-venv/bin/python",
    )
}

fn finagle() -> PathBuf {
    env_or(
        "LOGHAUL_FINAGLE_ECHO",
        "/opt/loghaul-peers/bin/finagle-echo",
    )
}

fn ruby() -> PathBuf {
    env_or("LOGHAUL_RUBY", "/usr/bin/ruby")
}

fn need(program: &Path, what: &str) -> Result<()> {
    if !program.is_file() {
        bail!(
            "{what}: {} not found (run scripts/install-peers.sh as root, or set its LOGHAUL_* \
             variable)",
            program.display()
        );
    }
    Ok(())
}

/// The program and arguments of an echo server listening on `127.0.0.1:port` (loghaul's own
/// command is built by the runner: it needs a config file).
///
/// # Errors
/// The peer is not installed.
pub fn echo_server(kind: SubjectKind, port: u16, loghaul: &Path) -> Result<(PathBuf, Vec<String>)> {
    let script = |name: &str| dir().join("echo").join(name).display().to_string();
    let port = port.to_string();
    let (program, args) = match kind {
        SubjectKind::Node => (node(), vec![script("node_echo.js"), port]),
        SubjectKind::Tornado => (python(), vec![script("tornado_echo.py"), port]),
        SubjectKind::Eventmachine => (ruby(), vec![script("em_echo.rb"), port]),
        SubjectKind::Finagle => (finagle(), vec![port]),
        SubjectKind::Ceiling => (
            loghaul.to_path_buf(),
            vec![
                "bench".into(),
                "httpd".into(),
                "--port".into(),
                port,
                "--download-bytes".into(),
                "0".into(),
            ],
        ),
        k => bail!("{} is not an echo server", k.name()),
    };
    need(&program, kind.name())?;
    for a in &args {
        if a.ends_with(".js") || a.ends_with(".py") || a.ends_with(".rb") {
            need(Path::new(a), kind.name())?;
        }
    }
    Ok((program, args))
}

/// The program and leading arguments of a client of `http_client`; the runner appends
/// `download URL OUTFILE` or `upload URL LISTFILE`.
///
/// # Errors
/// The client is not installed.
pub fn client(kind: SubjectKind) -> Result<(PathBuf, Vec<String>)> {
    let script = |name: &str| dir().join("clients").join(name);
    let (program, args) = match kind {
        SubjectKind::Curl => (script("curl.sh"), vec![]),
        SubjectKind::NetHttp => (ruby(), vec![script("net_http.rb")]),
        SubjectKind::Curb => (ruby(), vec![script("curb.rb")]),
        SubjectKind::EmHttp => (ruby(), vec![script("em_http.rb")]),
        SubjectKind::Requests => (python(), vec![script("py_requests.py")]),
        SubjectKind::Urllib3 => (python(), vec![script("py_urllib3.py")]),
        k => bail!("{} is not a client of the client experiment", k.name()),
    };
    need(&program, kind.name())?;
    for a in &args {
        need(a, kind.name())?;
    }
    Ok((
        program,
        args.iter().map(|a| a.display().to_string()).collect(),
    ))
}

/// One line of a command's output (stdout, else stderr), if it runs.
fn first_line(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// A short description of a peer: framework, version, language.
pub fn platform(kind: SubjectKind, _ruby: &Path) -> String {
    let py = |dist: &str, label: &str| {
        let v = first_line(
            &python(),
            &[
                "-c",
                &format!(
                    "import sys; from importlib.metadata import version; \
                     print(version('{dist}'), sys.version.split()[0])"
                ),
            ],
        )
        .unwrap_or_default();
        let mut p = v.split_whitespace();
        format!(
            "{label} {} (Python {})",
            p.next().unwrap_or("?"),
            p.next().unwrap_or("?")
        )
    };
    let rb = |lib: &str, expr: &str, label: &str| {
        let v = first_line(
            &ruby(),
            &[
                &format!("-r{lib}"),
                "-e",
                &format!("print RUBY_VERSION, ' ', {expr}"),
            ],
        )
        .unwrap_or_default();
        let mut p = v.split_whitespace();
        let ruby = p.next().unwrap_or("?").to_string();
        format!("{label} {} (Ruby {ruby})", p.next().unwrap_or("?"))
    };
    match kind {
        SubjectKind::Node => format!(
            "Node.js {} http",
            first_line(&node(), &["--version"]).unwrap_or_else(|| "?".into())
        ),
        SubjectKind::Tornado => py("tornado", "Tornado"),
        SubjectKind::Finagle => "Finagle (Java, finagle-http_2.13)".to_string(),
        SubjectKind::Ceiling => "the lab's hand-written HTTP/1 server (Rust, tokio)".to_string(),
        SubjectKind::Curl => first_line(&on_path("curl"), &["--version"])
            .and_then(|l| {
                l.split_whitespace()
                    .take(2)
                    .last()
                    .map(|v| format!("curl {v} (libcurl)"))
            })
            .unwrap_or_else(|| "curl".into()),
        SubjectKind::NetHttp => rb("net/http", "Net::HTTP::VERSION rescue '-'", "Net::HTTP"),
        SubjectKind::Curb => rb("curb", "Curl::CURB_VERSION", "curb"),
        SubjectKind::EmHttp => rb(
            "em-http",
            "(Gem.loaded_specs['em-http-request']&.version || EventMachine::HttpRequest::VERSION rescue '?')",
            "em-http-request",
        ),
        SubjectKind::Requests => py("requests", "requests"),
        SubjectKind::Urllib3 => py("urllib3", "urllib3"),
        k => k.name().to_string(),
    }
}
