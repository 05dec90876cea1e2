//! A real Kafka broker for the tests and the lab: Apache Kafka from Maven Central (installed by
//! `scripts/install-kafka.sh`), one node in KRaft mode (broker and controller, no ZooKeeper), on
//! free loopback ports, its storage formatted in a folder of its own.
//!
//! ```text
//! Broker::start(dir) ─► server.properties ─► StorageTool format ─► java kafka.Kafka (child)
//!                       ─► ready when its port accepts; stop() / kill() / start_again()
//! ```
//!
//! Topics are made and removed with the broker's own `TopicCommand` ([`Broker::create_topics`],
//! [`Broker::delete_topics`]), and its other tools (the producer and consumer perf tests, the
//! log dump) run through [`Broker::tool`].
//!
//! The broker's jars are found in `$LOGHAUL_KAFKA_LIB`, else `/opt/loghaul-peers/kafka/lib`.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::subjects::free_port;

/// How long a broker may take to accept connections after it was started.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// The Apache Kafka release `scripts/install-kafka.sh` installs.
pub const VERSION: &str = "4.3.1";

/// Where the broker's jars are.
pub fn lib_dir() -> PathBuf {
    std::env::var_os("LOGHAUL_KAFKA_LIB").map_or_else(
        || PathBuf::from("/opt/loghaul-peers/kafka/lib"),
        PathBuf::from,
    )
}

/// Whether the broker is installed.
pub fn installed() -> bool {
    lib_dir().join(format!("kafka_2.13-{VERSION}.jar")).exists()
}

/// A running single-node broker.
pub struct Broker {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("port", &self.port)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A Java program from the broker's jars.
fn java(class: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(format!("{}/*", lib_dir().display()))
        .arg(class);
    cmd
}

impl Broker {
    /// Formats a broker's storage under `dir` and starts it, with `extra` lines added to its
    /// `server.properties` (`auto.create.topics.enable=false`, `message.max.bytes=...`, or
    /// listeners of other protocols beside `PLAINTEXT://127.0.0.1:{port}`); waits until it
    /// accepts connections on its plaintext port.
    ///
    /// # Errors
    ///
    /// The jars are missing (run scripts/install-kafka.sh), or the broker does not come up.
    pub fn start(dir: &Path, extra: &[&str]) -> anyhow::Result<Broker> {
        anyhow::ensure!(
            installed(),
            "no Kafka broker in {} (run scripts/install-kafka.sh)",
            lib_dir().display()
        );
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let controller_port = free_port()?;
        let data = dir.join("data");
        let mut props = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller_port}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\n\
             num.partitions=4\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=4\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             share.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n",
            data.display()
        );
        // A later line overrides an earlier one: `extra` may redefine the listeners, naming the
        // broker's ports as `{port}` and `{controller_port}`.
        for line in extra {
            let line = line
                .replace("{port}", &port.to_string())
                .replace("{controller_port}", &controller_port.to_string());
            props.push_str(&line);
            props.push('\n');
        }
        std::fs::write(dir.join("server.properties"), props)?;
        let id = java("kafka.tools.StorageTool")
            .arg("random-uuid")
            .stderr(Stdio::null())
            .output()
            .context("running kafka.tools.StorageTool (is Java installed?)")?;
        let id = String::from_utf8_lossy(&id.stdout).trim().to_owned();
        let formatted = java("kafka.tools.StorageTool")
            .args(["format", "-t", &id, "-c"])
            .arg(dir.join("server.properties"))
            .output()
            .context("formatting the broker's storage")?;
        anyhow::ensure!(
            formatted.status.success(),
            "cannot format the broker's storage: {}",
            String::from_utf8_lossy(&formatted.stderr)
        );
        let mut broker = Broker {
            port,
            dir: dir.to_path_buf(),
            child: None,
        };
        broker.spawn()?;
        Ok(broker)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("broker.log"))?;
        let child = java("kafka.Kafka")
            .arg(self.dir.join("server.properties"))
            .env("KAFKA_HEAP_OPTS", "-Xmx512m")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the broker (java kafka.Kafka)")?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                anyhow::bail!("the broker exited with {status}:\n{}", self.log_tail());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the broker does not accept connections after {READY_WITHIN:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// `HOST:PORT` for `bootstrap_servers`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's process id while it runs: the lab charges it CPU.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Creates `topics` with `partitions` partitions each (one `TopicCommand` per topic, all at
    /// once: each is a JVM that takes a second or two to start).
    ///
    /// # Errors
    ///
    /// A tool cannot be started, or fails (its output says why), or takes over a minute.
    pub fn create_topics(&self, topics: &[&str], partitions: u32) -> anyhow::Result<()> {
        let mut running = Vec::with_capacity(topics.len());
        for topic in topics {
            let mut cmd = Broker::tool("org.apache.kafka.tools.TopicCommand");
            cmd.args(["--bootstrap-server", &self.address(), "--create", "--topic"])
                .arg(topic)
                .args(["--partitions", &partitions.to_string()]);
            match spawn_captured(cmd, &self.dir.join(format!("create-{topic}.log"))) {
                Ok(child) => running.push((*topic, child)),
                Err(e) => {
                    for (_, (mut child, _)) in running {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                    return Err(e);
                }
            }
        }
        let mut first_error = None;
        for (topic, child) in running {
            // Every tool is waited for, even after one failed: none is left running.
            if let Err(e) = finish_captured(child, Duration::from_secs(60)) {
                first_error.get_or_insert(e.context(format!("creating the topic {topic}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes every topic whose name matches the regular expression `pattern`.
    ///
    /// # Errors
    ///
    /// The tool cannot be started, or fails, or takes over a minute.
    pub fn delete_topics(&self, pattern: &str) -> anyhow::Result<()> {
        let mut cmd = Broker::tool("org.apache.kafka.tools.TopicCommand");
        cmd.args(["--bootstrap-server", &self.address(), "--delete", "--topic"])
            .arg(pattern);
        let child = spawn_captured(cmd, &self.dir.join("delete-topics.log"))?;
        finish_captured(child, Duration::from_secs(60))
            .with_context(|| format!("deleting the topics {pattern}"))
    }

    /// The broker's log folder (its topics' segment files).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The end of the broker's own log.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.join("broker.log")) {
            let _ = f.read_to_string(&mut text);
        }
        let start = text.len().saturating_sub(4000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    /// Stops the broker (SIGTERM, then SIGKILL after 30 s) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !matches!(child.try_wait(), Ok(Some(_))) {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Starts the stopped broker again, on the same ports and storage.
    ///
    /// # Errors
    ///
    /// The broker does not come up.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "the broker is running");
        self.spawn()
    }

    /// A Java tool of the broker's (`org.apache.kafka.tools.DumpLogSegments`, the producer perf test),
    /// ready for its arguments.
    pub fn tool(class: &str) -> Command {
        java(class)
    }
}

/// Starts `cmd` with its output in the file `log` (a pipe could fill and stall it).
fn spawn_captured(mut cmd: Command, log: &Path) -> anyhow::Result<(Child, PathBuf)> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out.try_clone()?)
        .spawn()
        .context("starting a Kafka tool (is Java installed?)")?;
    Ok((child, log.to_path_buf()))
}

/// Waits up to `limit` for a tool started by [`spawn_captured`]; fails with its output unless it
/// exits with success.
fn finish_captured((mut child, log): (Child, PathBuf), limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("it did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    anyhow::bail!("it exited with {status}: {}", text.trim())
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
