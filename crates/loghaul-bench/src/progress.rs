//! A progress line on a terminal, nothing otherwise.
//!
//! Drawn by a background thread from a shared counter every 200ms, so the hot loops only do a relaxed
//! atomic add per block. When stderr is not a terminal nothing is drawn: callers print one summary line.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A progress display bound to a label.
#[derive(Debug)]
pub struct Progress {
    label: String,
    enabled: bool,
    done: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Progress {
    /// A progress display that draws only when stderr is a terminal.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            enabled: std::io::stderr().is_terminal(),
            done: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
        }
    }

    /// Whether anything is drawn.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Starts drawing `counter` against `total` (if known).
    pub fn start(&self, counter: Arc<AtomicU64>, total: Option<u64>) {
        if !self.enabled {
            return;
        }
        let done = Arc::clone(&self.done);
        let label = self.label.clone();
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let mut last = (Instant::now(), 0u64);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let n = counter.load(Ordering::Relaxed);
                let now = Instant::now();
                let dt = now.duration_since(last.0).as_secs_f64();
                let rate = if dt > 0.0 {
                    (n - last.1) as f64 / dt
                } else {
                    0.0
                };
                last = (now, n);
                let bar = match total {
                    Some(t) if t > 0 => {
                        let filled = ((n as f64 / t as f64) * 30.0).min(30.0) as usize;
                        format!(
                            "[{}{}] {}/{}",
                            "#".repeat(filled),
                            " ".repeat(30 - filled),
                            human(n as f64),
                            human(t as f64)
                        )
                    }
                    _ => human(n as f64),
                };
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r{label} {bar} {}/s {:.1}s   ",
                    human(rate),
                    start.elapsed().as_secs_f64()
                );
                let _ = err.flush();
            }
            let _ = writeln!(std::io::stderr());
        });
        if let Ok(mut slot) = self.thread.lock() {
            *slot = Some(handle);
        }
    }

    /// Stops drawing and leaves the cursor on a fresh line.
    pub fn finish(&self) {
        self.done.store(true, Ordering::Relaxed);
        if let Ok(mut slot) = self.thread.lock()
            && let Some(h) = slot.take()
        {
            let _ = h.join();
        }
    }
}

/// `1234567` → `1.23M`.
pub fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
