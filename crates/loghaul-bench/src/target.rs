//! Where the generator sends: one small [`Target`] implementation per transport.
//!
//! Adding a target means one `impl Target` and one arm in [`open`] (and in [`build_blocks`] if its
//! frames are not the stream framings); the generator knows nothing else about transports. A
//! target is opened once per connection before the clock starts and then only ever receives
//! whole frames of a [`Block`]. The forward protocol's target lives in [`crate::fluent`], OTLP's
//! in [`crate::otlp`]; the stream targets' connections, plain or TLS, in [`crate::connect`].
//!
//! With `--connect-per-message` a stream target opens a new connection for every message
//! (connect, TLS handshake, the one message, close, the server's close), and asks the generator
//! for one message per send, so each message's send time is stamped just before its own
//! connection: it measures how many connections (handshakes) a server takes per second. A
//! connection that fails (refused, a handshake the server broke off, a reset) costs its one
//! message, which the meter then finds missing; it is counted, its first error kept, and the
//! next message gets a new connection, as the next client would.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::connect::{Connector, Stream, TlsClientOptions};
use crate::fluent::{self, FluentOptions, FluentTarget};
use crate::payload::{self, Block, PayloadSpec};

/// A destination for generated frames.
///
/// Contract: `send` delivers the first `n` messages of `block` completely (or fails) and returns
/// the bytes it put on the wire; it never splits a message, and it changes nothing in the block
/// but what its own protocol stamps per send (the fluent target's chunk ids); `finish` flushes
/// whatever the target buffers (and waits for what the protocol still owes) and is called once at
/// the end.
pub trait Target: Send {
    /// Sends the first `n` messages of `block`; returns the bytes sent.
    ///
    /// # Errors
    /// An I/O error of the transport; the generator stops that connection.
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64>;

    /// Flushes and closes cleanly.
    ///
    /// # Errors
    /// An I/O error while flushing.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// What the target did to get past failed connections, if it tries to (`fluent://` with
    /// `--reconnect`); read after `finish`.
    fn recovery(&self) -> Option<Recovery> {
        None
    }

    /// The most messages one `send` may carry (`--connect-per-message`: one, so that each is
    /// stamped with the time of its own connection).
    fn max_per_send(&self) -> usize {
        usize::MAX
    }

    /// The TLS protocol version and cipher suite the server agreed to, for a TLS target that has
    /// connected.
    fn tls(&self) -> Option<String> {
        None
    }

    /// Connections that failed and the first one's error, for a target that goes on past them
    /// (`--connect-per-message`); `None` for the others, whose failures end the run.
    fn failures(&self) -> Option<(u64, String)> {
        None
    }
}

/// What a target did to get past failed connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// New connections made after one failed.
    pub reconnects: u64,
    /// Requests sent again on a new connection, having gone unacknowledged on the old one.
    pub resent_requests: u64,
    /// The events of those requests: each may have reached the server twice.
    pub resent_events: u64,
}

impl std::ops::Add for Recovery {
    type Output = Recovery;

    /// The sum of two connections' figures.
    fn add(self, other: Recovery) -> Recovery {
        Recovery {
            reconnects: self.reconnects + other.reconnects,
            resent_requests: self.resent_requests + other.resent_requests,
            resent_events: self.resent_events + other.resent_events,
        }
    }
}

/// A parsed `--target` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetUrl {
    /// `tcp://HOST:PORT`
    Tcp(String),
    /// `udp://HOST:PORT`
    Udp(String),
    /// `file://PATH`
    File(PathBuf),
    /// `fluent://HOST:PORT`: the Fluentd forward protocol over TCP.
    Fluent(String),
    /// `tls://HOST:PORT`: syslog over TLS (RFC 5425), framed as over `tcp://`.
    Tls(String),
    /// `fluent+tls://HOST:PORT`: the forward protocol over TLS.
    FluentTls(String),
    /// `otlp://HOST:PORT`: OTLP/HTTP, binary protobuf log export requests (`POST /v1/logs`).
    Otlp(String),
}

impl TargetUrl {
    /// Parses `tcp://HOST:PORT`, `tls://HOST:PORT`, `udp://HOST:PORT`, `file://PATH`,
    /// `fluent://HOST:PORT`, `fluent+tls://HOST:PORT` or `otlp://HOST:PORT`.
    ///
    /// # Errors
    /// An unknown scheme, or a network target without a port.
    pub fn parse(url: &str) -> Result<Self> {
        let network = |rest: &str| -> Result<String> {
            match rest.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    Ok(rest.to_string())
                }
                _ => bail!("target {url:?}: expected HOST:PORT after the scheme"),
            }
        };
        if let Some(rest) = url.strip_prefix("tcp://") {
            Ok(Self::Tcp(network(rest)?))
        } else if let Some(rest) = url.strip_prefix("tls://") {
            Ok(Self::Tls(network(rest)?))
        } else if let Some(rest) = url.strip_prefix("udp://") {
            Ok(Self::Udp(network(rest)?))
        } else if let Some(rest) = url.strip_prefix("file://") {
            Ok(Self::File(PathBuf::from(rest)))
        } else if let Some(rest) = url.strip_prefix("fluent://") {
            Ok(Self::Fluent(network(rest)?))
        } else if let Some(rest) = url.strip_prefix("fluent+tls://") {
            Ok(Self::FluentTls(network(rest)?))
        } else if let Some(rest) = url.strip_prefix("otlp://") {
            Ok(Self::Otlp(network(rest)?))
        } else {
            bail!(
                "unknown target {url:?}: expected tcp://HOST:PORT, tls://HOST:PORT, \
                 udp://HOST:PORT, file://PATH, fluent://HOST:PORT, fluent+tls://HOST:PORT or \
                 otlp://HOST:PORT"
            )
        }
    }

    /// Whether several connections may share this target.
    pub fn allows_connections(&self) -> bool {
        !matches!(self, Self::File(_))
    }

    /// Whether the target speaks TLS (and takes the `--tls-*` options).
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_) | Self::FluentTls(_))
    }

    /// Whether the target is a stream of syslog frames (`tcp://`, `tls://`): the targets that can
    /// open a connection per message.
    pub fn is_syslog_stream(&self) -> bool {
        matches!(self, Self::Tcp(_) | Self::Tls(_))
    }
}

/// Options that apply to some targets only.
#[derive(Clone, Debug, Default)]
pub struct TargetOptions {
    /// For `file://`: rename the file and start a new one every this many lines (0 = never).
    pub rotate_lines: u64,
    /// For `fluent://` and `fluent+tls://`: request mode, events per request, acks, tag.
    pub fluent: FluentOptions,
    /// For `tls://` and `fluent+tls://`: the CA, the client certificate, the server name.
    pub tls: TlsClientOptions,
    /// For `tcp://` and `tls://`: a new connection for every message (see the module doc).
    pub connect_per_message: bool,
}

/// Opens the connection of generator `gen_id` to `url`.
///
/// # Errors
/// The address does not resolve, the connection is refused, the TLS files or handshake fail,
/// or the file cannot be opened.
pub fn open(url: &TargetUrl, opts: &TargetOptions, gen_id: u32) -> Result<Box<dyn Target>> {
    let per_message = opts.connect_per_message;
    match url {
        TargetUrl::Tcp(addr) => Ok(Box::new(StreamTarget::open(
            Connector::new("tcp", addr, None)?,
            per_message,
        )?)),
        TargetUrl::Tls(addr) => Ok(Box::new(StreamTarget::open(
            Connector::new("tls", addr, Some(&opts.tls))?,
            per_message,
        )?)),
        TargetUrl::Udp(addr) => Ok(Box::new(UdpTarget::connect(addr)?)),
        TargetUrl::File(path) => Ok(Box::new(FileTarget::open(path.clone(), opts.rotate_lines)?)),
        TargetUrl::Fluent(addr) => Ok(Box::new(FluentTarget::connect(
            Connector::new("fluent", addr, None)?,
            &opts.fluent,
            gen_id,
        )?)),
        TargetUrl::FluentTls(addr) => Ok(Box::new(FluentTarget::connect(
            Connector::new("fluent+tls", addr, Some(&opts.tls))?,
            &opts.fluent,
            gen_id,
        )?)),
        TargetUrl::Otlp(addr) => Ok(Box::new(crate::otlp::OtlpTarget::connect(addr)?)),
    }
}

/// Generator `gen_id`'s pre-built blocks, framed as `url`'s transport needs them: the stream
/// framings of [`payload::build_blocks`], forward-protocol frames for `fluent://`, or encoded
/// log records for `otlp://`.
///
/// # Errors
/// An invalid payload spec or target option.
pub fn build_blocks(
    url: &TargetUrl,
    opts: &TargetOptions,
    spec: &PayloadSpec,
    gen_id: u32,
) -> Result<Vec<Block>> {
    match url {
        TargetUrl::Fluent(_) | TargetUrl::FluentTls(_) => {
            fluent::build_blocks(spec, &opts.fluent, gen_id)
        }
        TargetUrl::Otlp(_) => crate::otlp::build_blocks(spec, gen_id),
        _ => payload::build_blocks(spec, gen_id),
    }
}

pub(crate) fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))
}

/// A stream of frames, plain or TLS: one `write_all` per block, so a send costs one system call
/// or a few (TLS: one encryption pass and one `writev`, see [`crate::connect`]). With
/// `per_message`, a new connection for every message instead, closed once the server closed its
/// end.
struct StreamTarget {
    connector: Connector,
    /// The connection of a long-lived target (`None` with `per_message`).
    stream: Option<Stream>,
    per_message: bool,
    /// What the first TLS handshake agreed to.
    tls: Option<String>,
    /// Per-message connections that failed, and the first one's error.
    failed: u64,
    first_failure: Option<String>,
}

impl StreamTarget {
    fn open(connector: Connector, per_message: bool) -> Result<Self> {
        let stream = if per_message {
            None
        } else {
            Some(connector.connect(None)?)
        };
        let tls = stream.as_ref().and_then(Stream::tls_description);
        Ok(Self {
            connector,
            stream,
            per_message,
            tls,
            failed: 0,
            first_failure: None,
        })
    }

    /// One message on a connection of its own: connect (and handshake), write, close, and wait
    /// for the server's close.
    fn one_connection(&mut self, message: &[u8]) -> Result<()> {
        let mut stream = self.connector.connect(None)?;
        if self.tls.is_none() {
            self.tls = stream.tls_description();
        }
        stream
            .write_all(message)
            .and_then(|()| stream.flush())
            .with_context(|| format!("writing to {}", self.connector.url()))?;
        stream.close()?;
        stream.wait_closed()
    }
}

impl Target for StreamTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let bytes = block.prefix(n);
        if let Some(stream) = &mut self.stream {
            stream
                .write_all(bytes)
                .with_context(|| format!("writing to {}", self.connector.url()))?;
            return Ok(bytes.len() as u64);
        }
        // `max_per_send` keeps `n` at 1; a larger one still gets a connection each.
        let mut sent = 0;
        for i in 0..n {
            let start = if i == 0 { 0 } else { block.frame_ends[i - 1] };
            let message = &block.bytes[start..block.frame_ends[i]];
            match self.one_connection(message) {
                Ok(()) => sent += message.len() as u64,
                Err(e) => {
                    self.failed += 1;
                    self.first_failure.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
        Ok(sent)
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(stream) = &mut self.stream {
            stream
                .finish()
                .with_context(|| format!("closing {}", self.connector.url()))?;
        }
        Ok(())
    }

    fn max_per_send(&self) -> usize {
        if self.per_message { 1 } else { usize::MAX }
    }

    fn tls(&self) -> Option<String> {
        self.tls.clone()
    }

    fn failures(&self) -> Option<(u64, String)> {
        self.first_failure.clone().map(|first| (self.failed, first))
    }
}

/// One datagram per message, without framing (a syslog datagram carries exactly one message).
struct UdpTarget {
    socket: UdpSocket,
}

impl UdpTarget {
    fn connect(addr: &str) -> Result<Self> {
        let sa = resolve(addr)?;
        let local = if sa.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
        let socket = UdpSocket::bind(local).context("binding a UDP socket")?;
        socket
            .connect(sa)
            .with_context(|| format!("connecting to udp://{sa}"))?;
        Ok(Self { socket })
    }
}

impl Target for UdpTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let mut bytes = 0;
        for &(start, end) in &block.bodies[..n] {
            bytes += self
                .socket
                .send(&block.bytes[start..end])
                .context("sending a UDP datagram")? as u64;
        }
        Ok(bytes)
    }
}

/// Appends lines to a file, like Fluentd's `dummer`; with `rotate_lines`, rotates it like
/// logrotate's default (`create`, one old file kept): every `rotate_lines` lines `PATH` is renamed
/// to `PATH.1`, replacing the older `PATH.1`, and writing goes on in a new `PATH`. Tailing sources
/// are tested against rotation with it.
///
/// Each send is one `write` of whole lines (a send that reaches the rotation point is one before
/// the rename and one after), so a reader of the file never finds a partial line at a write
/// boundary: an `O_APPEND` write to a regular file is never short but on a full disk or a file
/// size limit, where `write_all` retries the rest. No fsync: the page cache is what a tailer
/// reads, as it is for a real application's log.
struct FileTarget {
    path: PathBuf,
    rotated: PathBuf,
    file: File,
    rotate_lines: u64,
    lines_in_file: u64,
}

impl FileTarget {
    fn open(path: PathBuf, rotate_lines: u64) -> Result<Self> {
        let file = Self::open_append(&path)?;
        let mut rotated = path.clone().into_os_string();
        rotated.push(".1");
        Ok(Self {
            path,
            rotated: PathBuf::from(rotated),
            file,
            rotate_lines,
            lines_in_file: 0,
        })
    }

    fn open_append(path: &PathBuf) -> Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))
    }

    fn rotate(&mut self) -> Result<()> {
        // rename(2) replaces the older PATH.1 atomically: a tailer sees PATH.1 change identity,
        // never a moment without it.
        std::fs::rename(&self.path, &self.rotated)
            .with_context(|| format!("rotating {}", self.path.display()))?;
        self.file = Self::open_append(&self.path)?;
        self.lines_in_file = 0;
        Ok(())
    }
}

impl Target for FileTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let mut done = 0;
        while done < n {
            let room = if self.rotate_lines == 0 {
                (n - done) as u64
            } else {
                self.rotate_lines - self.lines_in_file
            };
            let take = room.min((n - done) as u64) as usize;
            let start = if done == 0 {
                0
            } else {
                block.frame_ends[done - 1]
            };
            let end = block.frame_ends[done + take - 1];
            self.file
                .write_all(&block.bytes[start..end])
                .with_context(|| format!("appending to {}", self.path.display()))?;
            done += take;
            self.lines_in_file += take as u64;
            if self.rotate_lines > 0 && self.lines_in_file >= self.rotate_lines {
                self.rotate()?;
            }
        }
        Ok(block.prefix(n).len() as u64)
    }

    fn finish(&mut self) -> Result<()> {
        self.file.flush().context("flushing the file target")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::payload::{PayloadSpec, build_blocks};

    #[test]
    fn parses_urls() {
        assert_eq!(
            TargetUrl::parse("tcp://127.0.0.1:5514").unwrap(),
            TargetUrl::Tcp("127.0.0.1:5514".into())
        );
        assert_eq!(
            TargetUrl::parse("fluent://127.0.0.1:24224").unwrap(),
            TargetUrl::Fluent("127.0.0.1:24224".into())
        );
        assert_eq!(
            TargetUrl::parse("tls://localhost:6514").unwrap(),
            TargetUrl::Tls("localhost:6514".into())
        );
        assert_eq!(
            TargetUrl::parse("fluent+tls://127.0.0.1:24224").unwrap(),
            TargetUrl::FluentTls("127.0.0.1:24224".into())
        );
        assert_eq!(
            TargetUrl::parse("tls://[::1]:6514").unwrap(),
            TargetUrl::Tls("[::1]:6514".into())
        );
        assert!(TargetUrl::parse("tls://[::1]:6514").unwrap().is_tls());
        assert!(TargetUrl::parse("fluent+tls://h:1").unwrap().is_tls());
        assert!(!TargetUrl::parse("fluent://h:1").unwrap().is_tls());
        assert!(!TargetUrl::parse("tcp://h:1").unwrap().is_tls());
        // Only syslog streams can open a connection per message.
        assert!(TargetUrl::parse("tls://h:1").unwrap().is_syslog_stream());
        assert!(
            !TargetUrl::parse("fluent+tls://h:1")
                .unwrap()
                .is_syslog_stream()
        );
        assert!(TargetUrl::parse("http://x").is_err());
        // A network target needs a port; the scheme is spelled exactly.
        for bad in [
            "tls://localhost",
            "tls://:6514",
            "tls://host:port",
            "fluent+tls://h",
            "tcp://h:70000",
            "TLS://h:1",
            "tls+fluent://h:1",
            "ssl://h:1",
        ] {
            assert!(TargetUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_target_rotates_every_n_lines_keeping_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let mut blocks = build_blocks(
            &PayloadSpec {
                block_bytes: 2000,
                ..PayloadSpec::default()
            },
            0,
        )
        .unwrap();
        let n = blocks[0].len();
        assert!(n > 7, "{n}");
        let mut t = FileTarget::open(path.clone(), 7).unwrap();
        let mut seq = crate::payload::SeqCounter::new(0);
        for _ in 0..3 {
            blocks[0].stamp(n, &mut seq, &crate::payload::time_digits(1));
            t.send(&mut blocks[0], n).unwrap();
        }
        t.finish().unwrap();
        // Only PATH and PATH.1 exist; PATH.1 holds the 7 lines before PATH's, every line whole.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["out.log", "out.log.1"]);
        let seqs = |name: &str| -> Vec<u64> {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert!(text.ends_with('\n'), "{name}");
            text.lines()
                .map(|l| {
                    let at = l.find(" seq=").unwrap() + 5;
                    l[at..at + 10].parse().unwrap()
                })
                .collect()
        };
        let total = 3 * n as u64;
        let current = total % 7;
        let old = seqs("out.log.1");
        let new = seqs("out.log");
        assert_eq!(new.len() as u64, current);
        assert_eq!(
            old,
            (total - current - 7..total - current).collect::<Vec<_>>()
        );
        assert_eq!(new, (total - current..total).collect::<Vec<_>>());
    }
}
