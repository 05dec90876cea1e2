//! The load generator: one OS thread per connection, each cycling through its own pre-built blocks.
//!
//! Why threads and blocking sockets rather than tokio: a generator connection has nothing to wait for
//! but its own socket, and a blocking `write_all` of a 128KiB block is the cheapest way to push bytes.
//! Generator `i` of a run stamps `gen=base+i` and sequence numbers `0..share(count, connections, i)`,
//! so the meter can tell exactly which messages of which connection are missing.
//!
//! Throttling (`--rate`): each connection sends `rate / connections` messages per second, as a
//! catch-up budget `floor(elapsed × rate) − sent` recomputed before every send; so counts over any
//! interval stay within one block of the target, whatever the scheduler does. Between sends it
//! sleeps until the next message is due, but at least 1ms: above 1,000 messages per second a
//! send is then a batch of what fell due meanwhile (one `write` of whole lines to a file, as a
//! buffering application logger does), not a wake-up and a system call every few messages,
//! which at 50,000 lines/s per file cost the generator more CPU than the agents reading them.
//! Each message still carries the time it was sent.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::payload::{PayloadSpec, SeqCounter, now_micros, share, time_digits};
use crate::progress::Progress;
use crate::target::{self, Recovery, TargetOptions, TargetUrl};

/// Everything a generator run needs.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Where to send.
    pub target: TargetUrl,
    /// Target-specific options.
    pub target_options: TargetOptions,
    /// Payload shape.
    pub payload: PayloadSpec,
    /// Total messages over all connections (`None`: until `duration` ends).
    pub count: Option<u64>,
    /// Stop after this long (`None`: until `count` is sent).
    pub duration: Option<Duration>,
    /// Messages per second over all connections; 0 = as fast as possible.
    pub rate: u64,
    /// Parallel connections (generators).
    pub connections: usize,
    /// Generator id of the first connection.
    pub gen_id_base: u32,
}

/// What a generator run did.
#[derive(Clone, Debug, Serialize)]
pub struct GenStats {
    /// Messages sent over all connections.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Seconds from the start signal to the last send returning.
    pub elapsed_secs: f64,
    /// Messages per connection, indexed by connection.
    pub per_connection: Vec<u64>,
    /// Wall-clock start (µs since the epoch), taken when the connections were released.
    pub start_unix_us: u64,
    /// CPU seconds the sending threads used from the start signal to their last send, summed
    /// (`None` where the kernel does not report per-thread run time; for loggen, its whole
    /// process's CPU): how much of the machine the load itself took.
    pub cpu_secs: Option<f64>,
    /// Reconnections and what was sent again, summed over the connections whose target tries to
    /// get past failed connections (`fluent://` with `--reconnect`); `None` when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// The TLS protocol version and cipher suite the server agreed to (`None`: no TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// With `--connect-per-message`: connections that failed, each costing its one message
    /// (counted in `sent`, missing at the meter), over all threads (`None`: none failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_connections: Option<u64>,
    /// The first of those failures' errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

impl GenStats {
    /// Messages per second.
    pub fn rate(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.sent as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }
}

/// What one connection's thread returns.
struct LaneTotals {
    sent: u64,
    bytes: u64,
    /// CPU nanoseconds of the thread (`None`: not measurable).
    cpu_ns: Option<u64>,
    recovery: Option<Recovery>,
    tls: Option<String>,
    failures: Option<(u64, String)>,
}

/// Runs the generator to completion. `progress` (if any) is updated as blocks go out; `stop` ends
/// the run early when set.
///
/// # Errors
/// An invalid configuration, a target that cannot be opened, or an I/O error on any connection.
pub fn run(cfg: &GenConfig, progress: Option<&Progress>, stop: &AtomicBool) -> Result<GenStats> {
    if cfg.count.is_none() && cfg.duration.is_none() {
        bail!("give --count or --duration (or both)");
    }
    if cfg.connections == 0 {
        bail!("--connections must be at least 1");
    }
    if cfg.connections > 1 && !cfg.target.allows_connections() {
        bail!("a file target takes one connection");
    }
    if cfg.target_options.connect_per_message && !cfg.target.is_syslog_stream() {
        bail!("--connect-per-message applies to tcp:// and tls:// targets");
    }
    // Everything that costs time happens before the clock: blocks, then connections.
    let mut lanes = Vec::with_capacity(cfg.connections);
    for i in 0..cfg.connections {
        let gen_id = cfg.gen_id_base + i as u32;
        let blocks = target::build_blocks(&cfg.target, &cfg.target_options, &cfg.payload, gen_id)?;
        let target = target::open(&cfg.target, &cfg.target_options, gen_id)
            .with_context(|| format!("opening connection {i}"))?;
        let quota = cfg.count.map(|c| share(c, cfg.connections, i));
        let rate = if cfg.rate == 0 {
            0.0
        } else {
            share(cfg.rate, cfg.connections, i) as f64
        };
        lanes.push((blocks, target, quota, rate));
    }
    let sent_total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(cfg.connections + 1));
    // The clock starts when the first lane starts sending, as that lane reads it: the thread that
    // releases the lanes may be descheduled on a busy machine until a short run is over.
    let first_start_us = AtomicU64::new(u64::MAX);
    let results = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (blocks, mut target, quota, rate) in lanes {
            let sent_total = Arc::clone(&sent_total);
            let barrier = Arc::clone(&barrier);
            let duration = cfg.duration;
            let first_start_us = &first_start_us;
            handles.push(scope.spawn(move || -> Result<LaneTotals> {
                barrier.wait();
                let cpu0 = thread_cpu_ns();
                let start = Instant::now();
                first_start_us.fetch_min(now_micros(), Ordering::Relaxed);
                let r = lane(
                    blocks,
                    target.as_mut(),
                    quota,
                    rate,
                    duration,
                    start,
                    &sent_total,
                    stop,
                );
                let fin = target.finish();
                let cpu = cpu0.zip(thread_cpu_ns()).map(|(a, b)| b.saturating_sub(a));
                let (sent, bytes) = r?;
                fin?;
                Ok(LaneTotals {
                    sent,
                    bytes,
                    cpu_ns: cpu,
                    recovery: target.recovery(),
                    tls: target.tls(),
                    failures: target.failures(),
                })
            }));
        }
        barrier.wait();
        if let Some(p) = progress {
            p.start(Arc::clone(&sent_total), cfg.count);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a generator thread panicked")))
            })
            .collect::<Vec<_>>()
    });
    let end_unix_us = now_micros();
    let start_unix_us = first_start_us.into_inner().min(end_unix_us);
    if let Some(p) = progress {
        p.finish();
    }
    let mut stats = GenStats {
        sent: 0,
        bytes: 0,
        elapsed_secs: (end_unix_us - start_unix_us) as f64 / 1e6,
        per_connection: Vec::new(),
        start_unix_us,
        cpu_secs: Some(0.0),
        recovery: None,
        tls: None,
        failed_connections: None,
        first_failure: None,
    };
    for r in results {
        let lane = r?;
        if let Some(r) = lane.recovery {
            stats.recovery = Some(stats.recovery.unwrap_or_default() + r);
        }
        stats.sent += lane.sent;
        stats.bytes += lane.bytes;
        stats.per_connection.push(lane.sent);
        stats.cpu_secs = stats
            .cpu_secs
            .zip(lane.cpu_ns)
            .map(|(sum, ns)| sum + ns as f64 / 1e9);
        stats.tls = stats.tls.or(lane.tls);
        if let Some((n, first)) = lane.failures {
            stats.failed_connections = Some(stats.failed_connections.unwrap_or(0) + n);
            stats.first_failure.get_or_insert(first);
        }
    }
    Ok(stats)
}

/// The calling thread's CPU time so far, in nanoseconds: the first field of
/// `/proc/thread-self/schedstat` (the scheduler's run-time account, which unlike the 10ms ticks
/// of `/proc/*/stat` resolves a one-second run of several threads).
fn thread_cpu_ns() -> Option<u64> {
    // The account is brought up to date when the thread passes through the scheduler; without
    // this, the running slice (up to a tick) would be missing.
    std::thread::yield_now();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One connection's send loop; returns (messages, bytes).
#[allow(clippy::too_many_arguments)]
fn lane(
    mut blocks: Vec<crate::payload::Block>,
    target: &mut dyn target::Target,
    quota: Option<u64>,
    rate: f64,
    duration: Option<Duration>,
    start: Instant,
    sent_total: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(u64, u64)> {
    let quota = quota.unwrap_or(u64::MAX);
    let per_send = target.max_per_send().max(1) as u64;
    let mut seq = SeqCounter::new(0);
    let mut sent: u64 = 0;
    let mut bytes: u64 = 0;
    let mut which = 0;
    while sent < quota {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let elapsed = start.elapsed();
        if duration.is_some_and(|d| elapsed >= d) {
            break;
        }
        let block = &mut blocks[which];
        let mut n = (block.len() as u64).min(quota - sent).min(per_send);
        if rate > 0.0 {
            let due = (elapsed.as_secs_f64() * rate) as u64;
            if due <= sent {
                // Sleep until the next message is due (at least 1ms, see the module doc), but
                // wake at least every 50ms to notice the deadline and stop requests.
                let next = (sent + 1) as f64 / rate;
                let wait = (next - elapsed.as_secs_f64()).clamp(0.001, 0.05);
                std::thread::sleep(Duration::from_secs_f64(wait));
                continue;
            }
            n = n.min(due - sent);
        }
        let n = n as usize;
        block.stamp(n, &mut seq, &time_digits(now_micros()));
        bytes += target.send(block, n)?;
        sent += n as u64;
        sent_total.fetch_add(n as u64, Ordering::Relaxed);
        which = (which + 1) % blocks.len();
    }
    Ok((sent, bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::payload::Format;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn count_is_split_and_sequences_start_at_zero() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).unwrap();
                all.push(String::from_utf8(buf).unwrap());
            }
            all
        });
        let cfg = GenConfig {
            target: TargetUrl::Tcp(addr.to_string()),
            target_options: TargetOptions::default(),
            payload: PayloadSpec {
                format: Format::Rfc3164,
                block_bytes: 1000,
                ..PayloadSpec::default()
            },
            count: Some(100),
            duration: None,
            rate: 0,
            connections: 3,
            gen_id_base: 0,
        };
        let stats = run(&cfg, None, &AtomicBool::new(false)).unwrap();
        assert_eq!(stats.sent, 100);
        // Each sending thread's CPU is at most its wall time.
        let cpu = stats
            .cpu_secs
            .expect("this kernel reports per-thread run time");
        assert!(
            cpu > 0.0 && cpu <= 3.0 * stats.elapsed_secs + 0.01,
            "{cpu} {stats:?}"
        );
        assert_eq!(stats.per_connection, vec![34, 33, 33]);
        let texts = reader.join().unwrap();
        let lines: usize = texts.iter().map(|t| t.lines().count()).sum();
        assert_eq!(lines, 100);
        assert!(texts.iter().any(|t| t.contains(" seq=0000000033 ")));
    }
}
