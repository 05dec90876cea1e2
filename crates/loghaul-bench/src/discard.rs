//! A discarding TCP listener: reads and counts, writes nothing. It measures the generator alone
//! (`bench discard`, hidden), and gives tests a subject that can never be the bottleneck.

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};

/// What a discarding listener received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Bytes read.
    pub bytes: u64,
    /// `\n` bytes read (lines, for newline framing).
    pub lines: u64,
    /// Connections served.
    pub connections: u64,
}

/// Serves `connections` connections on `listener` (each until its peer closes), then returns the
/// totals. Counting lines costs a SIMD scan; pass `count_lines = false` to only count bytes.
///
/// # Errors
/// Accepting a connection fails.
pub fn serve(listener: &TcpListener, connections: usize, count_lines: bool) -> Result<Discarded> {
    let bytes = AtomicU64::new(0);
    let lines = AtomicU64::new(0);
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..connections {
            let (mut stream, _) = listener.accept().context("accepting a connection")?;
            let (bytes, lines) = (&bytes, &lines);
            scope.spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let (mut b, mut l) = (0u64, 0u64);
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    b += n as u64;
                    if count_lines {
                        l += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
                    }
                }
                bytes.fetch_add(b, Ordering::Relaxed);
                lines.fetch_add(l, Ordering::Relaxed);
            });
        }
        Ok(())
    })?;
    Ok(Discarded {
        bytes: bytes.into_inner(),
        lines: lines.into_inner(),
        connections: connections as u64,
    })
}

/// Serves forever (until killed), printing totals every `every` when they change.
///
/// # Errors
/// Accepting a connection fails.
pub fn serve_forever(listener: TcpListener, every: Duration) -> Result<()> {
    let bytes = std::sync::Arc::new(AtomicU64::new(0));
    let lines = std::sync::Arc::new(AtomicU64::new(0));
    {
        let (bytes, lines) = (bytes.clone(), lines.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            loop {
                std::thread::sleep(every);
                let l = lines.load(Ordering::Relaxed);
                if l != last {
                    eprintln!(
                        "discard: {} lines ({}/s), {} bytes",
                        l,
                        (l - last) as f64 / every.as_secs_f64(),
                        bytes.load(Ordering::Relaxed)
                    );
                    last = l;
                }
            }
        });
    }
    loop {
        let (mut stream, _) = listener.accept().context("accepting a connection")?;
        let (bytes, lines) = (bytes.clone(), lines.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                lines.fetch_add(
                    memchr::memchr_iter(b'\n', &buf[..n]).count() as u64,
                    Ordering::Relaxed,
                );
            }
        });
    }
}
