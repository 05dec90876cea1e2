//! The harness every integration test drives loghaul through: free ports, a private temporary
//! directory, the real `loghaul` binary as a child process, and small wire-level clients.
//!
//! Invariants, so that a failing test never hangs CI or leaves anything behind:
//! - every wait is bounded by an explicit timeout and every loop by a count;
//! - a [`Server`] kills its child on drop, and when the test is panicking it prints the child's
//!   stderr and stdout (loghaul's own log) so the failure can be read without rerunning;
//! - all traffic goes to 127.0.0.1.
//!
//! Timeouts are deliberately generous: tests assert on behaviour (what arrives, what is counted,
//! how the process exits), never on wall-clock speed.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use loghaul_bench::subjects::port_candidates;
use serde_json::Value;

/// The binary under test, built by cargo for this test target.
pub const BIN: &str = env!("CARGO_BIN_EXE_loghaul");

/// How long loghaul may take to answer `/health` with 200 after it was spawned.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long loghaul may take to exit after SIGTERM (its own default shutdown_timeout is 30s).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(45);
/// Default bound for "this event should show up in the file".
pub const ARRIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Ports this test process already handed out, so two tests running in parallel never get the
/// same one (the kernel may return a port we just released to the next `bind(:0)`).
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn claim(port: u16) -> bool {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    taken.insert(port)
}

/// A TCP port on 127.0.0.1 that nothing listens on right now, taken from the lab's candidates
/// (below the kernel's ephemeral range first: `port_candidates` says why).
pub fn free_tcp_port() -> u16 {
    for port in port_candidates() {
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(port) {
            return port;
        }
    }
    panic!("could not find a free TCP port in 400 tries");
}

/// A port on 127.0.0.1 that is free for both TCP and UDP.
pub fn free_port_pair() -> u16 {
    for port in port_candidates() {
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && claim(port)
        {
            return port;
        }
    }
    panic!("could not find a port free for both TCP and UDP in 400 tries");
}

/// The ports one server uses. `tcp` and `udp` are the same number (a syslog pair).
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub tcp: u16,
    pub udp: u16,
    pub api: u16,
}

impl Ports {
    pub fn new() -> Ports {
        let pair = free_port_pair();
        Ports {
            tcp: pair,
            udp: pair,
            api: free_tcp_port(),
        }
    }
}

/// Replaces `{TCP}`, `{UDP}`, `{API}` and `{DIR}` in a config template.
pub fn render(template: &str, ports: &Ports, dir: &Path) -> String {
    template
        .replace("{TCP}", &ports.tcp.to_string())
        .replace("{UDP}", &ports.udp.to_string())
        .replace("{API}", &ports.api.to_string())
        .replace("{DIR}", &dir.display().to_string())
}

/// The usual test configuration: syslog over TCP and UDP into `{DIR}/out.jsonl`.
/// `tcp_options` is appended inside the TCP source's mapping, e.g. `", max_length: 1KiB"`.
pub fn syslog_config(tcp_options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}" }}
sources:
  tcp_in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}"{tcp_options} }}
  udp_in: {{ type: syslog, mode: udp, address: "127.0.0.1:{{UDP}}" }}
sinks:
  out: {{ type: file, inputs: [tcp_in, udp_in], path: "{{DIR}}/out.jsonl", encoding: json, flush_interval: 100ms }}
"#
    )
}

/// The routed pipeline the live-operation tests (tap, top, the console) watch: a syslog TCP
/// source, a `route` sending `err` to `sev.errors`, both of its outputs into one file.
/// `api_options` is appended inside the API's mapping, e.g. `", token: \"t\""`.
pub fn routed_config(api_options: &str) -> String {
    format!(
        r#"api: {{ address: "127.0.0.1:{{API}}"{api_options} }}
sources:
  in: {{ type: syslog, mode: tcp, address: "127.0.0.1:{{TCP}}" }}
transforms:
  sev:
    type: route
    inputs: [in]
    route:
      errors: '.severity == "err"'
sinks:
  out: {{ type: file, inputs: [sev.errors, sev._unmatched], path: "{{DIR}}/out.jsonl", encoding: json, flush_interval: 100ms }}
"#
    )
}

/// A running `loghaul run -c CONFIG` child process.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub ports: Ports,
    pub config_path: PathBuf,
    child: Option<Child>,
    stderr_path: PathBuf,
    stdout_path: PathBuf,
}

impl Server {
    /// Starts loghaul with `template` (see [`render`]) and waits until `/health` answers 200.
    /// Retries with fresh ports when a port was taken between our check and loghaul's bind.
    pub fn start(template: &str) -> Server {
        Server::start_with_env(template, &[])
    }

    /// As [`Server::start`], with extra environment variables for loghaul (`${VAR}` in configs).
    pub fn start_with_env(template: &str, env: &[(&str, &str)]) -> Server {
        Server::start_full(template, "loghaul.yaml", env)
    }

    /// As [`Server::start`], naming the config file (its extension picks the format) and adding
    /// environment variables.
    pub fn start_full(template: &str, file_name: &str, env: &[(&str, &str)]) -> Server {
        Server::start_wrapped(template, file_name, env, &[])
    }

    /// As [`Server::start_full`], with loghaul run through `wrapper` (a command and its
    /// arguments that end by executing the command line after them), e.g.
    /// `["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]` to run it without
    /// root's rights. With a wrapper the server's directory is made world-readable, so that a
    /// process under another uid can read its config.
    pub fn start_wrapped(
        template: &str,
        file_name: &str,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> Server {
        let mut last = String::new();
        for _attempt in 0..3 {
            let mut server = Server::spawn_wrapped(template, file_name, env, wrapper);
            match server.wait_healthy(START_TIMEOUT) {
                Ok(()) => return server,
                Err(why) => {
                    let stderr = server.stderr();
                    let in_use = stderr.contains("in use") || stderr.contains("AddrInUse");
                    last = format!("{why}\n--- loghaul stderr ---\n{stderr}");
                    server.kill();
                    if !in_use {
                        break;
                    }
                }
            }
        }
        panic!("loghaul did not become healthy: {last}");
    }

    /// As [`Server::start`], for a server that may be degraded from its first second (or whose
    /// `/health` needs a token): waits until its API answers at all. Retries with fresh ports
    /// when a port was taken between our check and loghaul's bind.
    pub fn start_answering(template: &str) -> Server {
        let mut last = String::new();
        for _attempt in 0..3 {
            let mut server = Server::spawn(template);
            match server.wait_answering(START_TIMEOUT) {
                Ok(()) => return server,
                Err(why) => {
                    let stderr = server.stderr();
                    let in_use = stderr.contains("in use") || stderr.contains("AddrInUse");
                    last = format!("{why}\n--- loghaul stderr ---\n{stderr}");
                    server.kill();
                    if !in_use {
                        break;
                    }
                }
            }
        }
        panic!("loghaul's API did not answer: {last}");
    }

    /// Spawns loghaul without waiting for it.
    pub fn spawn(template: &str) -> Server {
        Server::spawn_with_env(template, &[])
    }

    /// As [`Server::spawn`], with extra environment variables.
    pub fn spawn_with_env(template: &str, env: &[(&str, &str)]) -> Server {
        Server::spawn_full(template, "loghaul.yaml", env)
    }

    /// As [`Server::spawn`], naming the config file and adding environment variables.
    pub fn spawn_full(template: &str, file_name: &str, env: &[(&str, &str)]) -> Server {
        Server::spawn_wrapped(template, file_name, env, &[])
    }

    /// As [`Server::spawn_full`], through `wrapper` (see [`Server::start_wrapped`]).
    pub fn spawn_wrapped(
        template: &str,
        file_name: &str,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> Server {
        remember_panics();
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-")
            .tempdir()
            .expect("create temp dir");
        let ports = Ports::new();
        let config_path = dir.path().join(file_name);
        fs::write(&config_path, render(template, &ports, dir.path())).expect("write config");
        let stderr_path = dir.path().join("loghaul.stderr");
        let stdout_path = dir.path().join("loghaul.stdout");
        let mut cmd = match wrapper.split_first() {
            None => Command::new(BIN),
            Some((program, args)) => {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
                    .expect("make the server's directory readable to other users");
                let mut cmd = Command::new(program);
                cmd.args(args).arg(BIN);
                cmd
            }
        };
        let child = cmd
            .arg("run")
            .arg("-c")
            .arg(&config_path)
            .current_dir(dir.path())
            .env_remove("LOGHAUL_CONFIG")
            // LOGHAUL_IT_LOG=debug (for example) turns up loghaul's own log in failing tests.
            .env(
                "LOGHAUL_LOG",
                std::env::var("LOGHAUL_IT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout_path).expect("create stdout file"))
            .stderr(fs::File::create(&stderr_path).expect("create stderr file"))
            .spawn()
            .expect("spawn loghaul");
        Server {
            dir,
            ports,
            config_path,
            child: Some(child),
            stderr_path,
            stdout_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server already stopped").id()
    }

    /// The names of the server's threads now (`/proc/PID/task/*/comm`).
    pub fn thread_names(&self) -> Vec<String> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|name| name.trim_end().to_string())
            .collect()
    }

    /// `{DIR}/NAME`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `{DIR}/out.jsonl`, the file of [`syslog_config`].
    pub fn out(&self) -> PathBuf {
        self.path("out.jsonl")
    }

    pub fn stderr(&self) -> String {
        fs::read(&self.stderr_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        fs::read(&self.stdout_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Polls `/health` until it answers 200, the child exits, or `timeout` passes.
    pub fn wait_healthy(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no answer");
        for _ in 0..100_000 {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("loghaul exited during start with {status}"));
            }
            match http_get(self.ports.api, "/health") {
                Some((200, _)) => return Ok(()),
                Some((code, body)) => last = format!("{code} {body}"),
                None => {}
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "/health not 200 after {timeout:?}; last answer: {last}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("health poll loop bound reached".into())
    }

    /// Waits until the API answers anything; an error if loghaul exits first or `timeout`
    /// passes.
    fn wait_answering(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("loghaul exited during start with {status}"));
            }
            if http_get(self.ports.api, "/metrics").is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("the API did not answer within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET /health`: (status, body).
    pub fn health(&self) -> (u16, String) {
        http_get(self.ports.api, "/health").expect("GET /health: no HTTP answer")
    }

    /// Asserts `/health` is 200 `{"status":"ok"}`, with at most the last reload beside it (not
    /// a failed one).
    pub fn assert_healthy(&self) {
        let (code, body) = self.health();
        assert_eq!(code, 200, "GET /health answered {code}: {body}");
        let mut v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/health body is not JSON ({e}): {body}"));
        if let Some(reload) = v.as_object_mut().and_then(|o| o.remove("last_reload")) {
            assert_ne!(reload["result"], "failed", "/health: {body}");
        }
        assert_eq!(v, serde_json::json!({"status": "ok"}), "/health body");
    }

    /// Waits until the API answers at all (healthy or not): for servers that may be degraded
    /// from their first second.
    pub fn wait_api(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while http_get(self.ports.api, "/metrics").is_none() {
            assert!(
                Instant::now() < deadline,
                "the API did not answer within {timeout:?}\n{}",
                tail(&self.stderr(), 4000)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        let (code, body) =
            http_get(self.ports.api, "/metrics").expect("GET /metrics: no HTTP answer");
        assert_eq!(code, 200, "GET /metrics answered {code}: {body}");
        body
    }

    /// The value of metric `name` (e.g. `loghaul_component_errors_total`) for `component_id`,
    /// summed over every series that also carries `extra` (e.g. `kind="oversized"`; `None` sums
    /// every series of the component). Panics when no series matches: a missing metric is a bug.
    pub fn metric(&self, name: &str, component: &str, extra: Option<&str>) -> u64 {
        let text = self.metrics_text();
        match parse_metric(&text, name, component, extra) {
            Some(v) => v,
            None => panic!(
                "no series {name}{{component_id=\"{component}\"{}}} in /metrics:\n{}",
                extra.map(|e| format!(",{e}")).unwrap_or_default(),
                text.lines()
                    .filter(|l| l.starts_with(name))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }

    /// Waits until [`Server::metric`] reaches at least `at_least`; returns the value it read.
    /// Metrics are updated asynchronously, so tests wait for them rather than read once.
    pub fn wait_metric(
        &self,
        name: &str,
        component: &str,
        extra: Option<&str>,
        at_least: u64,
    ) -> u64 {
        let deadline = Instant::now() + ARRIVE_TIMEOUT;
        let mut v = 0;
        for _ in 0..10_000 {
            v = self.metric(name, component, extra);
            if v >= at_least || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            v >= at_least,
            "{name}{{component_id=\"{component}\"{}}} = {v}, expected at least {at_least} within {ARRIVE_TIMEOUT:?}",
            extra.map(|e| format!(",{e}")).unwrap_or_default()
        );
        v
    }

    /// Waits until [`Server::metric`] equals `want` (gauges go down as well as up).
    pub fn wait_metric_eq(&self, name: &str, component: &str, extra: Option<&str>, want: u64) {
        let deadline = Instant::now() + ARRIVE_TIMEOUT;
        let mut v = 0;
        for _ in 0..10_000 {
            v = self.metric(name, component, extra);
            if v == want || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            v,
            want,
            "{name}{{component_id=\"{component}\"{}}} did not reach {want} within {ARRIVE_TIMEOUT:?}",
            extra.map(|e| format!(",{e}")).unwrap_or_default()
        );
    }

    /// Sends `sig` (e.g. "HUP") to the child with kill(1).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid());
    }

    /// Sends SIGTERM and waits (at most [`STOP_TIMEOUT`]) for the exit; asserts exit status 0.
    pub fn stop(&mut self) {
        self.stop_within(STOP_TIMEOUT);
    }

    /// As [`Server::stop`], with an explicit bound on how long the exit may take.
    pub fn stop_within(&mut self, timeout: Duration) {
        self.signal("TERM");
        let status = self.wait_exit(timeout);
        match status {
            Some(s) => assert!(
                s.success(),
                "loghaul exited with {s} after SIGTERM (expected 0)\n--- stderr ---\n{}",
                tail(&self.stderr(), 8000)
            ),
            None => panic!(
                "loghaul did not exit within {timeout:?} of SIGTERM\n--- stderr ---\n{}",
                tail(&self.stderr(), 8000)
            ),
        }
    }

    /// Waits for the child to exit by itself (at most `timeout`).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        for _ in 0..1_000_000 {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Peak resident set size of the child, in KiB (VmHWM).
    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    /// Starts sampling the child's anonymous resident memory (`RssAnon`) every 20 ms: what it
    /// allocated, without the pages of its program file (a debug build maps some 40 MiB of them,
    /// more or less depending on the kernel's fault-around, which VmHWM counts).
    pub fn watch_anon(&self) -> AnonWatch {
        let pid = self.pid();
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
                    return;
                };
                if let Some(kib) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("RssAnon:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    p.fetch_max(kib, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        AnonWatch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The common end of every test: still healthy, then a clean exit.
    pub fn finish(mut self) {
        self.assert_healthy();
        self.stop();
    }

    /// Starts loghaul again after it exited or was killed: the same config file, ports and
    /// folder, so it finds the files the previous run left (outputs, data_dir); its log goes on
    /// in the same files. Waits until `/health` answers 200, retrying while a port the old
    /// process held is not free yet. Runs the binary directly, without the wrapper or the
    /// environment the first start may have had.
    pub fn restart(&mut self) {
        if let Some(child) = self.child.as_mut() {
            assert!(
                matches!(child.try_wait(), Ok(Some(_))),
                "restart: loghaul (pid {}) is still running",
                child.id()
            );
            self.child = None;
        }
        let mut last = String::new();
        for _attempt in 0..5 {
            let append = |path: &Path| {
                fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .expect("open a log file of the server for appending")
            };
            let child = Command::new(BIN)
                .arg("run")
                .arg("-c")
                .arg(&self.config_path)
                .current_dir(self.dir.path())
                .env_remove("LOGHAUL_CONFIG")
                .env(
                    "LOGHAUL_LOG",
                    std::env::var("LOGHAUL_IT_LOG").unwrap_or_else(|_| "info".into()),
                )
                .stdin(Stdio::null())
                .stdout(append(&self.stdout_path))
                .stderr(append(&self.stderr_path))
                .spawn()
                .expect("spawn loghaul");
            self.child = Some(child);
            match self.wait_healthy(START_TIMEOUT) {
                Ok(()) => return,
                Err(why) => {
                    let stderr = self.stderr();
                    let in_use = stderr.contains("in use") || stderr.contains("AddrInUse");
                    last = format!("{why}\n--- loghaul stderr ---\n{}", tail(&stderr, 8000));
                    self.kill();
                    if !in_use {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        panic!("loghaul did not become healthy again after a restart: {last}");
    }

    /// Holds the server's TCP ports (`{TCP}` and `{API}`) while it is down, until the value
    /// returned is dropped: call it as soon as the server has exited, and drop it after
    /// [`Server::restart`]. Other test processes on this machine take ports with
    /// `bind(127.0.0.1:0)`, which would hand out a port the dead server left free, and its
    /// clients would reconnect to another test's server. A socket bound to the port that does
    /// not listen keeps `bind(:0)` away from it, while connections to it are refused as with no
    /// server at all, and loghaul (SO_REUSEADDR) binds it again beside the held socket.
    pub fn hold_ports(&self) -> PortHold {
        use socket2::{Domain, Socket, Type};
        let hold = |port: u16| {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("create a socket");
            // Bound beside what the dead server left in TIME_WAIT, and beside its restart.
            socket.set_reuse_address(true).expect("set SO_REUSEADDR");
            socket
                .bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())
                .unwrap_or_else(|e| panic!("hold port {port} of the stopped server: {e}"));
            socket
        };
        PortHold(vec![hold(self.ports.tcp), hold(self.ports.api)])
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let running = self.child.is_some();
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- loghaul stderr ({}, server {}) ---\n{}\n--- loghaul stdout (tail) ---\n{}",
                self.dir.path().display(),
                if running { "killed" } else { "had exited" },
                tail(&self.stderr(), 16_000),
                tail(&self.stdout(), 4000)
            );
            // CI shows the head and the tail of a long output: the reason goes last too.
            PANIC_MESSAGE.with(|m| {
                if let Some(message) = m.borrow().as_deref() {
                    eprintln!("--- the test failed at: {message}");
                }
            });
        }
    }
}

thread_local! {
    /// The last panic of this test's thread, as the panic hook printed it.
    static PANIC_MESSAGE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs (once per process) a panic hook that keeps the panic's place and message for the
/// servers' log dumps, then prints it as the default hook does.
fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            let place = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            // At most a few lines: the message may carry whole logs, printed above already.
            let short: String = message.chars().take(1500).collect();
            PANIC_MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{place}: {short}")));
            default(info);
        }));
    });
}

/// Ports held while their server is down (see [`Server::hold_ports`]); dropping it lets them go.
pub struct PortHold(Vec<socket2::Socket>);

/// The peak anonymous memory of a server, sampled (see [`Server::watch_anon`]).
pub struct AnonWatch {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AnonWatch {
    /// Stops sampling; the highest `RssAnon` seen, in MiB.
    pub fn peak_mib(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(std::sync::atomic::Ordering::Relaxed) / 1024
    }
}

fn proc_status_kib(pid: u32, key: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// The last `max` bytes of `s` (on a char boundary).
pub fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Parses Prometheus text: the sum of the series of `name` with `component_id="component"` and,
/// when given, the label `extra`. `None` when no series matches.
pub fn parse_metric(text: &str, name: &str, component: &str, extra: Option<&str>) -> Option<u64> {
    let id = format!("component_id=\"{component}\"");
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix('{') else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let labels: Vec<&str> = labels.split(',').collect();
        if !labels.contains(&id.as_str()) {
            continue;
        }
        if let Some(e) = extra
            && !labels.contains(&e)
        {
            continue;
        }
        let v: f64 = value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("bad metric value in {line:?}"));
        *found.get_or_insert(0) += v.max(0.0) as u64;
    }
    found
}

/// A raw HTTP/1.1 GET to 127.0.0.1:`port`: `Some((status, body))`, or `None` when nothing
/// answered (not listening yet, connection reset...).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:")
            && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    for _ in 0..100_000 {
        let Some((size, rest)) = body.split_once("\r\n") else {
            break;
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

/// A TCP connection to 127.0.0.1:`port` with bounded read/write timeouts.
pub fn connect(port: u16) -> TcpStream {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_write_timeout(Some(Duration::from_secs(60)))
        .expect("set_write_timeout");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set_read_timeout");
    s
}

/// A slow client (slowloris): connects and writes `bytes` one at a time, every `every`, reading
/// whatever comes back, until the server closes the connection or `timeout` passes. Sends
/// nothing at all when `bytes` is empty; once `bytes` are all sent it waits without writing.
/// Returns whether the server closed the connection in time.
pub fn slow_client(port: u16, bytes: &[u8], every: Duration, timeout: Duration) -> bool {
    let mut s = connect(port);
    s.set_read_timeout(Some(every)).expect("set_read_timeout");
    let deadline = Instant::now() + timeout;
    let mut rest = bytes.iter();
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        if let Some(b) = rest.next()
            && s.write_all(&[*b]).is_err()
        {
            return true;
        }
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Connects, writes `bytes`, and closes (FIN after the data).
pub fn send_tcp(port: u16, bytes: &[u8]) {
    let mut s = connect(port);
    s.write_all(bytes)
        .unwrap_or_else(|e| panic!("write {} bytes to 127.0.0.1:{port}: {e}", bytes.len()));
    let _ = s.shutdown(Shutdown::Write);
}

/// Sends one UDP datagram.
pub fn send_udp(port: u16, bytes: &[u8]) {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind UDP client");
    s.send_to(bytes, ("127.0.0.1", port))
        .expect("send datagram");
}

/// A well-formed RFC 3164 line (with LF) whose message is `msg`.
pub fn line3164(msg: &str) -> String {
    format!("<13>Oct 11 22:14:15 host app: {msg}\n")
}

/// A deterministic pseudo-random byte stream (xorshift64*), so failures reproduce.
pub fn pseudo_random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------------------------
// Output files
// ---------------------------------------------------------------------------------------------

/// Reads a file's complete lines incrementally (the sink may be mid-write: a trailing partial
/// line is left for the next call).
pub struct LineReader {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LineReader {
    pub fn new(path: &Path) -> LineReader {
        LineReader {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// New complete lines since the last call (without their LF).
    pub fn read_new(&mut self) -> Vec<Vec<u8>> {
        use std::io::{Seek, SeekFrom};
        let Ok(mut f) = fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        self.offset += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(last_nl + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        complete[..complete.len() - 1]
            .split(|&b| b == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    }
}

/// Parses one output line as a JSON object, with a readable panic when it is not one.
pub fn parse_line(line: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
        panic!(
            "output line is not JSON ({e}): {:?}",
            String::from_utf8_lossy(line)
        )
    });
    assert!(v.is_object(), "output line is not a JSON object: {v}");
    v
}

/// Waits until `path` holds at least `n` lines; returns every line (parsed). After reaching
/// `n` it waits a little longer and rereads, so that extra (duplicate) lines have a chance to
/// show up and the caller can assert an exact count.
pub fn wait_lines(path: &Path, n: usize, timeout: Duration) -> Vec<Value> {
    let lines = wait_raw_lines(path, n, timeout);
    lines.iter().map(|l| parse_line(l)).collect()
}

/// As [`wait_lines`], without parsing.
pub fn wait_raw_lines(path: &Path, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let mut reader = LineReader::new(path);
    let mut lines = Vec::new();
    let deadline = Instant::now() + timeout;
    for _ in 0..1_000_000 {
        lines.extend(reader.read_new());
        if lines.len() >= n || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if lines.len() >= n {
        // Settle: a few flush intervals for any extra line.
        std::thread::sleep(Duration::from_millis(400));
        lines.extend(reader.read_new());
    }
    assert!(
        lines.len() >= n,
        "{} holds {} lines after {timeout:?}, expected {n}; last lines:\n{}",
        path.display(),
        lines.len(),
        lines
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(400)]).into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    );
    lines
}

/// Waits until a line of `path` satisfies `pred`; returns every line read so far (parsed).
pub fn wait_for_line(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut reader = LineReader::new(path);
    let mut lines: Vec<Value> = Vec::new();
    let deadline = Instant::now() + ARRIVE_TIMEOUT;
    for _ in 0..1_000_000 {
        lines.extend(reader.read_new().iter().map(|l| parse_line(l)));
        if lines.iter().any(&pred) {
            std::thread::sleep(Duration::from_millis(300));
            lines.extend(reader.read_new().iter().map(|l| parse_line(l)));
            return lines;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "no line matching {what} in {} within {ARRIVE_TIMEOUT:?}; it holds {} lines:\n{}",
        path.display(),
        lines.len(),
        lines
            .iter()
            .rev()
            .take(10)
            .map(|v| truncate_json(v, 400))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// `bytes` up to and including their last newline: the whole lines of a file a running server
/// may be writing (a last line without its newline yet is still being written).
pub fn whole_lines(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)]
}

/// The [`whole_lines`] of the file at `path`, as text (a missing file is empty).
pub fn written_text(path: &Path) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(whole_lines(&bytes)).into_owned()
}

/// Every line of `path` right now (parsed).
pub fn read_lines(path: &Path) -> Vec<Value> {
    LineReader::new(path)
        .read_new()
        .iter()
        .map(|l| parse_line(l))
        .collect()
}

/// [`for_each_line`] for a file a running server is writing: a last line without its newline
/// yet is being written, and is left for the next read.
pub fn for_each_written_line(path: &Path, f: impl FnMut(Value)) -> usize {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    for_each_json_line(whole_lines(&bytes), f)
}

/// Calls `f` with every line's JSON, one at a time (for files too large to hold parsed). A
/// file still being written may end in part of a line: see [`for_each_written_line`].
pub fn for_each_line(path: &Path, f: impl FnMut(Value)) -> usize {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    for_each_json_line(&bytes, f)
}

/// Calls `f` with the JSON of every non-empty line of `bytes`; returns how many.
fn for_each_json_line(bytes: &[u8], mut f: impl FnMut(Value)) -> usize {
    let mut n = 0;
    for line in bytes.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        f(parse_line(line));
        n += 1;
    }
    n
}

/// `v` as JSON text, cut to `max` bytes.
pub fn truncate_json(v: &Value, max: usize) -> String {
    let s = v.to_string();
    if s.len() <= max {
        s
    } else {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

/// The `message` of an event, or a panic naming the event.
pub fn message(v: &Value) -> &str {
    v.get("message")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("event has no string message: {}", truncate_json(v, 400)))
}

/// The event whose message equals `msg` (exactly one), or a panic listing what is there.
pub fn find_message<'a>(events: &'a [Value], msg: &str) -> &'a Value {
    let found: Vec<&Value> = events
        .iter()
        .filter(|v| v.get("message").and_then(Value::as_str) == Some(msg))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one event with message {msg:?}, found {}; events:\n{}",
        found.len(),
        events
            .iter()
            .map(|v| truncate_json(v, 300))
            .collect::<Vec<_>>()
            .join("\n")
    );
    found[0]
}

/// The event's `flags` array as strings (empty when absent).
pub fn flags(v: &Value) -> Vec<String> {
    match v.get("flags") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|f| {
                f.as_str()
                    .unwrap_or_else(|| panic!("non-string flag in {v}"))
                    .to_string()
            })
            .collect(),
        Some(other) => panic!("flags is not an array: {other} in {v}"),
    }
}

/// Asserts no field of the event is JSON null (absent fields must be omitted).
pub fn assert_no_nulls(v: &Value) {
    if let Value::Object(map) = v {
        for (k, val) in map {
            assert!(
                !val.is_null(),
                "field {k:?} is null (absent fields must be omitted): {v}"
            );
        }
    }
}

/// Asserts the event has exactly the keys `keys`.
pub fn assert_keys(v: &Value, keys: &[&str]) {
    let have: BTreeSet<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(
        have, want,
        "event keys differ from the expected set; event: {v}"
    );
}

/// How often each value of `0..n` occurs in `numbers`, and the numbers outside that range.
pub fn tally(numbers: &[u64], n: u64) -> (Vec<u32>, Vec<u64>) {
    let mut counts = vec![0u32; n as usize];
    let mut out_of_range = Vec::new();
    for &x in numbers {
        match counts.get_mut(x as usize) {
            Some(c) => *c += 1,
            None => out_of_range.push(x),
        }
    }
    (counts, out_of_range)
}

/// Checks that `numbers` holds every value in `0..n` exactly once; the panic lists the first
/// missing and duplicated numbers.
pub fn assert_each_once(numbers: &[u64], n: u64, what: &str) {
    let (counts, out_of_range) = tally(numbers, n);
    let missing: Vec<u64> = (0..n).filter(|&i| counts[i as usize] == 0).collect();
    let dup: Vec<u64> = (0..n).filter(|&i| counts[i as usize] > 1).collect();
    if missing.is_empty() && dup.is_empty() && out_of_range.is_empty() && numbers.len() as u64 == n
    {
        return;
    }
    let mut msg = String::new();
    let _ = write!(
        msg,
        "{what}: {} events for {n} numbers; {} missing (first {:?}), {} duplicated (first {:?}), {} out of range (first {:?})",
        numbers.len(),
        missing.len(),
        &missing[..missing.len().min(10)],
        dup.len(),
        &dup[..dup.len().min(10)],
        out_of_range.len(),
        &out_of_range[..out_of_range.len().min(10)]
    );
    panic!("{msg}");
}

/// The number after the last space of `msg` (`"... seq 123"` -> 123).
/// The trailing sequence number of every event's message in the JSON-lines file at `path`.
pub fn sequence_numbers(path: &Path) -> Vec<u64> {
    read_lines(path)
        .iter()
        .map(|e| trailing_number(message(e)))
        .collect()
}

pub fn trailing_number(msg: &str) -> u64 {
    msg.rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("message does not end with a number: {msg:?}"))
}

// ---------------------------------------------------------------------------------------------
// Processes and environment
// ---------------------------------------------------------------------------------------------

/// Runs `loghaul ARGS` to completion (bounded) and returns its output.
pub fn loghaul(args: &[&str]) -> Output {
    run_bounded(
        Command::new(BIN).args(args).env_remove("LOGHAUL_CONFIG"),
        Duration::from_secs(30),
    )
}

/// util-linux `logger`, installed by scripts/install-peers.sh (Debian package bsdutils).
pub const LOGGER: &str = "/usr/bin/logger";

/// `logger` set to send to loghaul on `127.0.0.1:port` over TCP; the caller adds the rest.
pub fn logger_tcp(port: u16) -> Command {
    assert!(
        Path::new(LOGGER).exists(),
        "{LOGGER} is missing: run scripts/install-peers.sh (util-linux logger, Debian package bsdutils)"
    );
    let mut cmd = Command::new(LOGGER);
    cmd.args([
        "--server",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--tcp",
    ]);
    cmd
}

/// Runs a command with stdout/stderr captured, killing it after `timeout`.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).expect("stdout file"))
        .stderr(fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let deadline = Instant::now() + timeout;
    let mut status = None;
    for _ in 0..1_000_000 {
        if let Ok(Some(s)) = child.try_wait() {
            status = Some(s);
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} did not finish within {timeout:?}");
    };
    Output {
        status,
        stdout: fs::read(&out_path).unwrap_or_default(),
        stderr: fs::read(&err_path).unwrap_or_default(),
    }
}

/// stdout + stderr as one string.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff...]Z` (the form loghaul writes: RFC 3339 in UTC) into
/// (unix seconds with fraction, number of fractional digits). Panics on any other form.
pub fn parse_rfc3339_utc(s: &str) -> (f64, usize) {
    let bad = || -> ! { panic!("timestamp {s:?} is not RFC 3339 UTC (YYYY-MM-DDTHH:MM:SS[.f]Z)") };
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[b.len() - 1] != b'Z'
    {
        bad();
    }
    let num = |r: std::ops::Range<usize>| -> i64 { s[r].parse().unwrap_or_else(|_| bad()) };
    let (y, mo, d, h, mi, se) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    );
    let mut frac = 0.0;
    let mut digits = 0;
    if b[19] == b'.' {
        let f = &s[20..s.len() - 1];
        if f.is_empty() || !f.bytes().all(|c| c.is_ascii_digit()) {
            bad();
        }
        digits = f.len();
        frac = format!("0.{f}").parse().unwrap_or_else(|_| bad());
    } else if b.len() != 20 {
        bad();
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (
        (days * 86_400 + h * 3600 + mi * 60 + se) as f64 + frac,
        digits,
    )
}

/// The machine's host name as the kernel has it (what `hostname` prints).
pub fn kernel_hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read hostname")
        .trim()
        .to_string()
}

/// The soft RLIMIT_NOFILE of this process; tries to lift it to the hard limit first with
/// util-linux `prlimit` (std has no setrlimit). Returns (soft, hard).
pub fn raise_nofile_limit() -> (u64, u64) {
    let read = || -> (u64, u64) {
        let limits = fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("Max open files in /proc/self/limits");
        let nums: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| {
                if w == "unlimited" {
                    Some(u64::MAX)
                } else {
                    w.parse().ok()
                }
            })
            .collect();
        (nums[0], nums[1])
    };
    let (soft, hard) = read();
    if soft < hard {
        let target = hard.min(65_536);
        let hard_arg = if hard == u64::MAX {
            "unlimited".to_string()
        } else {
            hard.to_string()
        };
        let _ = Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={target}:{hard_arg}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    read()
}

/// Bytes queued on the UDP socket bound to 127.0.0.1:`port`, from /proc/net/udp (`rx_queue`).
pub fn udp_rx_queue(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.get(1) != Some(&local.as_str()) {
            return None;
        }
        let (_, rx) = cols.get(4)?.split_once(':')?;
        u64::from_str_radix(rx, 16).ok()
    })
}

/// Waits (at most 5 s) until the socket's receive queue has not changed for 100 ms: every
/// datagram sent has then been delivered (loghaul may have read some before SIGSTOP took hold,
/// so the queue may hold fewer than were sent, or none).
pub fn wait_udp_queue_settled(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = None;
    let mut stable_since = Instant::now();
    while Instant::now() < deadline {
        let now = udp_rx_queue(port);
        if now != last {
            last = now;
            stable_since = Instant::now();
        } else if now.is_some() && stable_since.elapsed() >= Duration::from_millis(100) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("loghaul's UDP receive queue never settled (rx_queue {last:?})");
}

/// An output path a file sink cannot write to until [`BlockedOutput::unblock`]: a regular file
/// stands where the sink wants a directory.
pub struct BlockedOutput {
    _dir: tempfile::TempDir,
    blocker: PathBuf,
    /// The sink's `path`.
    pub out: PathBuf,
}

impl BlockedOutput {
    pub fn new() -> BlockedOutput {
        let dir = tempfile::Builder::new()
            .prefix("loghaul-it-block-")
            .tempdir()
            .expect("temp dir");
        let blocker = dir.path().join("blocked");
        fs::write(
            &blocker,
            "a regular file where the sink wants a directory\n",
        )
        .expect("write the blocking file");
        let out = blocker.join("out.jsonl");
        BlockedOutput {
            _dir: dir,
            blocker,
            out,
        }
    }

    /// Removes the blocking file: the sink can create its directory and write.
    pub fn unblock(&self) {
        fs::remove_file(&self.blocker).expect("remove the blocking file");
    }
}

/// Raw lines `TAG N` for every N in `range`, newline-terminated: numbered events whose loss or
/// repetition [`tally`] counts from the output's trailing numbers.
pub fn numbered(tag: &str, range: std::ops::Range<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity((range.end - range.start) as usize * 24);
    for i in range {
        out.extend_from_slice(format!("{tag} {i}\n").as_bytes());
    }
    out
}

/// A tmpfs mount (a small disk that fills up) that is unmounted (lazily) when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` at a new folder, or `None` where mounting is not allowed.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        static MOUNTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MOUNTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "loghaul-it-tmpfs-{}-{n}-{size}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_parses_prometheus_series() {
        let text = "# TYPE x counter\n\
            x{component_id=\"a\",component_kind=\"source\",kind=\"parse\"} 3\n\
            x{component_id=\"a\",component_kind=\"source\",kind=\"io\"} 4\n\
            x{component_id=\"ab\",component_kind=\"source\",kind=\"io\"} 100\n\
            xy{component_id=\"a\"} 1000\n";
        assert_eq!(parse_metric(text, "x", "a", None), Some(7));
        assert_eq!(parse_metric(text, "x", "a", Some("kind=\"io\"")), Some(4));
        assert_eq!(parse_metric(text, "x", "b", None), None);
        assert_eq!(parse_metric(text, "y", "a", None), None);
    }

    #[test]
    fn harness_parses_rfc3339_utc() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), (0.0, 0));
        assert_eq!(
            parse_rfc3339_utc("2026-01-02T03:04:05.5Z"),
            (1_767_323_045.5, 1)
        );
        assert_eq!(parse_rfc3339_utc("2000-03-01T00:00:00.000001Z").1, 6);
    }

    #[test]
    #[should_panic(expected = "1 duplicated")]
    fn harness_each_once_catches_a_duplicate() {
        assert_each_once(&[0, 1, 1, 2], 3, "dup");
    }

    #[test]
    #[should_panic(expected = "1 missing")]
    fn harness_each_once_catches_a_gap() {
        assert_each_once(&[0, 2], 3, "gap");
    }

    #[test]
    fn harness_line_reader_keeps_partial_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let p = dir.path().join("f");
        fs::write(&p, "a\nb").expect("write");
        let mut r = LineReader::new(&p);
        assert_eq!(r.read_new(), vec![b"a".to_vec()]);
        fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .expect("open")
            .write_all(b"c\nd\n")
            .expect("append");
        assert_eq!(r.read_new(), vec![b"bc".to_vec(), b"d".to_vec()]);
    }
}
