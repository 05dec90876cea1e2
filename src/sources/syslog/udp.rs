//! Syslog over UDP: one datagram is one message, or several when separated by newlines.
//!
//! Datagrams are received back to back into one arena until the socket has nothing more ready or
//! the arena is full, so a busy socket produces large batches. UDP cannot push back on senders:
//! a full downstream queue is waited for at most [`QUEUE_WAIT`] (the socket's receive buffer
//! holds what arrives meanwhile), then the batch is dropped for that downstream and counted
//! (`component_discarded_events_total{reason="queue_full"}`), never buffered without bound.
//!
//! Datagrams the kernel drops because the socket's receive buffer is full never reach loghaul;
//! the source reads the kernel's count for its socket every second ([`KernelDrops`]) and reports
//! them as `component_kernel_dropped_datagrams_total`, with a rate-limited warning.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use loghaul_codec::framing::{Frame, Framer, FramingMode, FramingStats};
use loghaul_codec::syslog::{DecodeStats, Decoder};
use loghaul_core::{EventBatch, Timestamp};
use tokio::net::UdpSocket;

use super::SyslogContext;
use crate::metrics::{ErrorKind, Health};
use crate::pipeline::Shedding;
use crate::pipeline::ShutdownSignal;

/// Arena size per batch.
const ARENA_SIZE: usize = 512 * 1024;
/// Largest UDP payload: the arena must have this much room before each receive.
const MAX_DATAGRAM: usize = 65_536;
/// During shutdown, the socket is considered drained after this long without a datagram.
const DRAIN_IDLE: std::time::Duration = std::time::Duration::from_millis(200);
/// Batches smaller than this are copied out of the receive buffer so it can be reused.
const SMALL_BATCH: usize = 64 * 1024;
/// Most datagrams gathered into one batch.
const MAX_DATAGRAMS: usize = 2048;
/// How long a batch waits for a full downstream queue before it is dropped. Long enough to ride
/// out a sink thread that is briefly descheduled or rotating a file (a quiet socket's batches
/// hold one datagram each, so 32 queued batches are no backlog at all); short enough that the
/// kernel buffer (about 10,000 small datagrams at the default 4MiB) rarely overflows unseen.
const QUEUE_WAIT: std::time::Duration = std::time::Duration::from_millis(250);
/// How often the kernel's drop count for the socket is read.
const DROPS_INTERVAL: Duration = Duration::from_secs(1);

/// Receives until shutdown, then drains what the socket already holds.
pub async fn run(socket: UdpSocket, ctx: Arc<SyslogContext>, mut shutdown: ShutdownSignal) {
    let mut decoder = Decoder::new(ctx.decode);
    let mut frames: Vec<Frame> = Vec::with_capacity(MAX_DATAGRAMS);
    // (first frame index, frame count, sender) per datagram.
    let mut datagrams: Vec<(usize, usize, IpAddr)> = Vec::with_capacity(MAX_DATAGRAMS);
    let mut fstats = FramingStats::default();
    let mut dstats = DecodeStats::default();
    let max_length = ctx.config.max_length;
    ctx.metrics.set_health(Health::Running, None);
    let mut arena = BytesMut::new();
    let mut drops = KernelDrops::open(&socket);
    let mut socket = Receiver::Live(socket);
    // Set once draining: when the socket was last seen empty with nothing received since.
    let mut quiet_since: Option<std::time::Instant> = None;
    let mut scratch = Vec::new();
    let mut fanout = Shedding::new(ctx.fanout.clone(), QUEUE_WAIT);
    match &drops {
        Ok(_) => ctx.metrics.track_kernel_drops(),
        Err(error) => tracing::debug!(
            component = %ctx.id,
            %error,
            "Kernel drop counts for the UDP socket are unavailable."
        ),
    }
    let mut tick = tokio::time::interval(DROPS_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let Receiver::Live(live) = &socket {
            tokio::select! {
                _ = tick.tick(), if drops.is_ok() => {
                    count_kernel_drops(&mut drops, &ctx);
                    continue;
                }
                ready = live.readable() => {
                    if let Err(error) = ready {
                        ctx.metrics.error(ErrorKind::Io, 1);
                        crate::warn_limited!(ctx.metrics, %error, "Failed to poll the UDP socket.");
                        continue;
                    }
                }
                _ = shutdown.wait() => {
                    socket = match socket.into_draining() {
                        Ok(draining) => draining,
                        Err(error) => {
                            crate::warn_limited!(ctx.metrics, %error, "Failed to drain the UDP socket.");
                            break;
                        }
                    };
                    scratch = vec![0; MAX_DATAGRAM];
                }
            }
        }
        if arena.capacity() < ARENA_SIZE {
            arena = BytesMut::with_capacity(ARENA_SIZE);
        }
        // Gather what is ready without waiting.
        while datagrams.len() < MAX_DATAGRAMS && arena.capacity() - arena.len() >= MAX_DATAGRAM {
            let start = arena.len();
            match socket.try_recv(&mut arena, &mut scratch) {
                Ok((len, peer)) => {
                    let first = frames.len();
                    split_datagram(
                        &arena[start..start + len],
                        start,
                        max_length,
                        &mut frames,
                        &mut fstats,
                    );
                    datagrams.push((first, frames.len() - first, peer.ip()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    // ICMP errors surface here on some systems; they concern one peer only.
                    ctx.metrics.error(ErrorKind::Io, 1);
                    crate::warn_limited!(ctx.metrics, %error, "Failed to receive a datagram.");
                    break;
                }
            }
        }
        if datagrams.is_empty() {
            if let Receiver::Draining(_) = socket {
                // Draining polls with real recv(2) calls: the socket is empty once it has stayed
                // empty for DRAIN_IDLE.
                let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= DRAIN_IDLE {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            continue;
        }
        quiet_since = None;
        let bytes = arena.len();
        // A quiet socket yields a few small datagrams per wake-up: copy them out and keep the
        // large buffer, rather than pinning half a megabyte per batch in the sink's queue.
        let frozen = if bytes < SMALL_BATCH {
            let copy = bytes::Bytes::copy_from_slice(&arena);
            arena.clear();
            copy
        } else {
            arena.split().freeze()
        };
        let mut batch = EventBatch::new(frozen, ctx.id.clone(), "syslog");
        batch.events.reserve(frames.len());
        let received = Timestamp::now();
        for &(first, count, ip) in &datagrams {
            decoder.decode_batch(
                &mut batch,
                &frames[first..first + count],
                received,
                Some(ip),
                &mut dstats,
            );
        }
        frames.clear();
        datagrams.clear();
        ctx.metrics.received(batch.len(), bytes);
        ctx.account_errors(&mut fstats, &mut dstats, &"udp");
        match socket {
            Receiver::Live(_) => fanout.send(batch).await,
            // Shutting down: nothing new arrives after the drain, so waiting for queue space
            // costs nothing and drops nothing.
            Receiver::Draining(_) => fanout.fanout().send(batch).await,
        }
    }
    // Drops during the drain, too: the last warning says what was lost at the end.
    count_kernel_drops(&mut drops, &ctx);
    ctx.metrics.set_health(Health::Stopped, None);
}

/// The kernel's count of datagrams it dropped on one socket because the receive buffer was full
/// (`sk_drops`): the `drops` column of /proc/net/udp (udp6 for IPv6 sockets), on the row with
/// the socket's inode. Reading a table of a few sockets once a second costs nothing measurable,
/// and needs no socket option or ancillary data on the receive path.
struct KernelDrops {
    table: &'static str,
    inode: u64,
    /// The column's value at the last reading (a 32-bit counter in the kernel: it wraps).
    last: u32,
}

impl KernelDrops {
    fn open(socket: &UdpSocket) -> std::io::Result<KernelDrops> {
        let table = if socket.local_addr()?.is_ipv6() {
            "/proc/net/udp6"
        } else {
            "/proc/net/udp"
        };
        // `stat` on the descriptor's /proc link gives the socket's own inode.
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", socket.as_raw_fd()))?.ino();
        let last = read_drops(table, inode)?;
        Ok(KernelDrops { table, inode, last })
    }

    /// Datagrams dropped since the last call.
    fn poll(&mut self) -> std::io::Result<u64> {
        let now = read_drops(self.table, self.inode)?;
        let new = now.wrapping_sub(self.last);
        self.last = now;
        Ok(u64::from(new))
    }
}

/// Counts new kernel drops and warns about them (rate-limited). A failed reading (the table
/// vanished, which only a changed /proc does) stops the counting with one warning.
fn count_kernel_drops(drops: &mut std::io::Result<KernelDrops>, ctx: &SyslogContext) {
    let Ok(counter) = drops else {
        return;
    };
    match counter.poll() {
        Ok(0) => {}
        Ok(dropped) => {
            ctx.metrics.kernel_dropped(dropped);
            crate::warn_limited!(
                ctx.metrics,
                dropped,
                address = %ctx.config.address,
                "The kernel dropped datagrams before loghaul could read them: the socket's \
                 receive buffer was full. Raise `receive_buffer` (and net.core.rmem_max); if a \
                 sink is slow, discarded_events_total{{reason=\"queue_full\"}} grows as well."
            );
        }
        Err(error) => {
            tracing::warn!(component = %ctx.id, %error, "Stopped counting kernel drops for the UDP socket.");
            *drops = Err(error);
        }
    }
}

/// The socket's current `drops` value in `table` (a /proc/net/udp file).
fn read_drops(table: &str, inode: u64) -> std::io::Result<u32> {
    let text = std::fs::read_to_string(table)?;
    drops_of(&text, inode)
        .ok_or_else(|| std::io::Error::other(format!("no row for inode {inode} in {table}")))
}

/// The `drops` column of the row of a /proc/net/udp table whose `inode` column is `inode`.
fn drops_of(table: &str, inode: u64) -> Option<u32> {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    // ref pointer drops
    table.lines().skip(1).find_map(|line| {
        let mut cols = line.split_whitespace();
        let row_inode: u64 = cols.nth(9)?.parse().ok()?;
        if row_inode != inode {
            return None;
        }
        cols.nth(2)?.parse().ok()
    })
}

/// The socket, first served by the reactor, then (once shutdown starts) drained with plain
/// non-blocking `recv(2)` calls. The reactor's cached readiness can say "nothing to read" while
/// datagrams that arrived around the shutdown signal are still queued; a real syscall cannot.
enum Receiver {
    Live(UdpSocket),
    Draining(std::net::UdpSocket),
}

impl Receiver {
    fn into_draining(self) -> std::io::Result<Receiver> {
        match self {
            Receiver::Live(socket) => Ok(Receiver::Draining(socket.into_std()?)),
            draining => Ok(draining),
        }
    }

    /// One datagram appended to `arena` (via `scratch` when draining), without waiting.
    fn try_recv(
        &self,
        arena: &mut BytesMut,
        scratch: &mut [u8],
    ) -> std::io::Result<(usize, SocketAddr)> {
        match self {
            Receiver::Live(socket) => socket.try_recv_buf_from(arena),
            Receiver::Draining(socket) => {
                let (len, peer) = socket.recv_from(scratch)?;
                arena.extend_from_slice(&scratch[..len]);
                Ok((len, peer))
            }
        }
    }
}

/// Frames of one datagram (newline-separated messages), rebased to the datagram's arena offset.
fn split_datagram(
    datagram: &[u8],
    base: usize,
    max_length: usize,
    frames: &mut Vec<Frame>,
    stats: &mut FramingStats,
) {
    let mut framer = Framer::new(FramingMode::Newline, max_length);
    let first = frames.len();
    let consumed = framer.decode(datagram, frames, stats);
    let tail_first = frames.len();
    framer.finish(&datagram[consumed.min(datagram.len())..], frames, stats);
    // `finish` saw only the unconsumed tail, so its frames are relative to `consumed`.
    for f in &mut frames[tail_first..] {
        f.start += consumed as u32;
        f.end += consumed as u32;
    }
    for f in &mut frames[first..] {
        f.start += base as u32;
        f.end += base as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::udp::{bind, set_receive_buffer};

    /// Regression: with SO_REUSEADDR a second socket could bind the same UDP port and silently
    /// take the datagrams; a busy port must fail instead.
    #[tokio::test]
    async fn a_busy_udp_port_fails_the_bind() -> std::io::Result<()> {
        let first = bind("127.0.0.1:0".parse().map_err(std::io::Error::other)?, None)?;
        let addr = first.local_addr()?;
        let second = bind(addr, None);
        assert!(second.is_err(), "a second socket bound {addr}");
        Ok(())
    }

    #[test]
    fn drops_are_read_from_the_row_with_the_sockets_inode() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
             \x20 711: 0100007F:A3E5 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 58261 2 0000000000000000 0\n\
             \x20 919: 0100007F:8CA5 00000000:0000 07 00000000:00012C00 00:00000000 00000000     0        0 91022 2 0000000000000000 4711\n";
        assert_eq!(drops_of(table, 91022), Some(4711));
        assert_eq!(drops_of(table, 58261), Some(0));
        assert_eq!(drops_of(table, 1), None);
    }

    /// The live table has the socket's row, and a fresh socket has dropped nothing.
    #[tokio::test]
    async fn a_fresh_socket_has_a_row_and_no_drops() -> std::io::Result<()> {
        let socket = bind("127.0.0.1:0".parse().map_err(std::io::Error::other)?, None)?;
        let mut drops = KernelDrops::open(&socket)?;
        assert_eq!(drops.poll()?, 0);
        Ok(())
    }

    /// Asking for more than net.core.rmem_max is reported (loghaul warns at start), asking for
    /// less is not.
    #[test]
    fn a_receive_buffer_above_rmem_max_is_reported_as_capped() -> std::io::Result<()> {
        use socket2::{Domain, Protocol, Socket, Type};
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")?
            .trim()
            .parse()
            .map_err(std::io::Error::other)?;
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        assert_eq!(set_receive_buffer(&socket, 2 * max + 4096)?, Some(max));
        assert_eq!(set_receive_buffer(&socket, 64 * 1024)?, None);
        Ok(())
    }
}
