//! Watching a subject's output file during a timed run without competing with the subject.
//!
//! Reading and checking every line as it is written costs the meter about as much CPU as a fast
//! subject spends producing it; on a 2-core machine that would measure the meter. So during a run
//! the watcher only:
//!
//! - `stat`s the file every millisecond: the last growth time is when the last event arrived;
//! - reads the newest few KiB whenever the file grew, and takes those lines' markers as latency
//!   samples (they arrived within the last millisecond) and as a progress estimate (the highest
//!   sequence number per generator);
//! - records the file size every 100ms: the per-second flow is the growth in bytes, converted to
//!   events with the run's average bytes per event once the books are complete.
//!
//! The exact books (every sequence number, loss, duplicates) are kept by a [`FileFollower`] that the
//! runner calls only when the file has gone quiet, i.e. when the subject is idle or done.
//!
//! A subject that writes many events to a line (the OpenTelemetry Collector: an OTLP/JSON request
//! of hundreds of records per line) outgrows the window: its newest complete line rarely fits,
//! and the newest bytes are the end of a line whose newline may not be written yet. For it the
//! watcher samples markers, not lines ([`Sampling::Markers`]): every complete marker in the newest
//! bytes, wherever the lines end. Markers are fixed-width, so one that parses is whole; one cut
//! by the end of what is written is left for the next look, and none is sampled twice. Other
//! subjects keep the line sampling, which never feeds a marker of a line still being written.
//!
//! [`FileFollower`]: crate::meter::FileFollower

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::meter::Tracker;
use crate::payload::now_micros;

/// How much of the newest output is sampled per growth.
const WINDOW: u64 = 16 * 1024;

/// How the watcher takes its samples from the newest bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sampling {
    /// Whole lines: a line of one event (or a few) at a time.
    #[default]
    Lines,
    /// Complete markers wherever they lie: lines of many events each (see the module doc).
    Markers,
}

/// What the watcher saw.
#[derive(Clone, Debug)]
pub struct WatchState {
    /// Latency samples and the progress frontier, from the newest lines.
    pub samples: Tracker,
    /// Size of the file at the last look.
    pub size: u64,
    /// When the file last grew (µs since the epoch).
    pub last_growth_us: Option<u64>,
    /// (time µs, file size) points, at most one per 100ms, for the per-second flow.
    pub progress: Vec<(u64, u64)>,
    start_us: u64,
    /// The size the file had when watching started.
    base: u64,
}

impl WatchState {
    /// Events per second of the run: bytes written each second × `events` / bytes written in all.
    pub fn flow_per_sec(&self, events: u64) -> Vec<u64> {
        flow_per_sec(std::slice::from_ref(self), events)
    }

    /// Bytes written since watching started.
    fn written(&self) -> u64 {
        self.progress
            .last()
            .map_or(0, |p| p.1.saturating_sub(self.base))
    }

    fn byte_flow(&self) -> Vec<u64> {
        let mut flow = Vec::new();
        let mut prev = self.base;
        let mut sec = 1u64;
        let mut last = self.base;
        for &(t, f) in &self.progress {
            while t >= self.start_us + sec * 1_000_000 {
                flow.push(last.saturating_sub(prev));
                prev = last;
                sec += 1;
            }
            last = f;
        }
        if last > prev {
            flow.push(last - prev);
        }
        flow
    }
}

/// Events per second of a run that wrote `events` into the files `states` watched (a subject
/// that routes its events into several): their bytes written each second, summed, × `events` /
/// their bytes written in all. Their seconds count from the same start.
pub fn flow_per_sec(states: &[WatchState], events: u64) -> Vec<u64> {
    let total: u64 = states.iter().map(WatchState::written).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut bytes: Vec<u64> = Vec::new();
    for state in states {
        for (sec, b) in state.byte_flow().into_iter().enumerate() {
            if bytes.len() <= sec {
                bytes.resize(sec + 1, 0);
            }
            bytes[sec] += b;
        }
    }
    let per_byte = events as f64 / total as f64;
    bytes
        .into_iter()
        .map(|b| (b as f64 * per_byte).round() as u64)
        .collect()
}

/// A background watcher of one output file.
#[derive(Debug)]
pub struct Watcher {
    state: Arc<Mutex<WatchState>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `path` (which may not exist yet), feeding samples into `samples` (a fresh
    /// tracker for the markers expected); flow seconds count from `start_us`.
    pub fn start(path: &Path, samples: Tracker, start_us: u64) -> Self {
        Self::start_at(path, samples, start_us, 0)
    }

    /// As [`Watcher::start`], for a file that already holds `from` bytes of earlier output: only
    /// growth past them counts (arrival, samples, flow), so one output file can be watched phase
    /// by phase.
    pub fn start_at(path: &Path, samples: Tracker, start_us: u64, from: u64) -> Self {
        Self::start_sampling(path, samples, start_us, from, Sampling::Lines)
    }

    /// As [`Watcher::start_at`], sampling as `sampling` says.
    pub fn start_sampling(
        path: &Path,
        samples: Tracker,
        start_us: u64,
        from: u64,
        sampling: Sampling,
    ) -> Self {
        let state = Arc::new(Mutex::new(WatchState {
            samples,
            size: from,
            last_growth_us: None,
            progress: Vec::new(),
            start_us,
            base: from,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let (state, stop, path) = (Arc::clone(&state), Arc::clone(&stop), path.to_path_buf());
            std::thread::spawn(move || watch(&path, &state, &stop, from, sampling))
        };
        Self {
            state,
            stop,
            handle: Some(handle),
        }
    }

    /// When the file last grew.
    pub fn last_growth_us(&self) -> Option<u64> {
        self.state.lock().ok().and_then(|s| s.last_growth_us)
    }

    /// Estimated events written so far.
    pub fn frontier(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.samples.frontier())
    }

    /// Stops watching and returns what was seen.
    pub fn finish(mut self) -> WatchState {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        match self.state.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn watch(
    path: &PathBuf,
    state: &Mutex<WatchState>,
    stop: &AtomicBool,
    from: u64,
    sampling: Sampling,
) {
    let mut file: Option<File> = None;
    let mut size = from;
    // Offset of the first line not sampled yet: a line may be written in several pieces, so the
    // next window starts there rather than at the old end of file (which may be mid-line).
    let mut next_line = from;
    let mut buf = vec![0u8; WINDOW as usize];
    let mut last_point = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let len = meta.len();
        if len < size {
            // Truncated or replaced: start over.
            file = None;
            size = 0;
            next_line = 0;
        }
        if len == size {
            continue;
        }
        let now = now_micros();
        if file.is_none() {
            file = File::open(path).ok();
        }
        let Some(f) = file.as_ref() else { continue };
        // Only the newest WINDOW bytes; if that cuts into a line, skip to the next line start.
        let (from, mid_line) = if len.saturating_sub(WINDOW) > next_line {
            (len - WINDOW, true)
        } else {
            (next_line, false)
        };
        let want = (len - from) as usize;
        let got = f.read_at(&mut buf[..want], from).unwrap_or(0);
        size = len;
        let window = &buf[..got];
        let (start, end) = match sampling {
            Sampling::Lines => {
                let start = if mid_line {
                    memchr::memchr(b'\n', window).map_or(got, |i| i + 1)
                } else {
                    0
                };
                (start, memchr::memrchr(b'\n', window).map_or(0, |i| i + 1))
            }
            // A marker cut at the window's start is not found (its `gen=` is outside); one cut
            // at its end is left for the next look, which starts there.
            Sampling::Markers => (0, complete_markers_end(window)),
        };
        if end > 0 {
            next_line = from + end as u64;
        }
        let Ok(mut st) = state.lock() else { return };
        if start < end {
            st.samples.feed(&window[start..end], now);
        }
        st.size = len;
        st.last_growth_us = Some(now);
        if now.saturating_sub(last_point) >= 100_000 {
            last_point = now;
            st.progress.push((now, len));
        }
    }
    // A final point so the flow covers the end of the run.
    if let Ok(mut st) = state.lock()
        && let Some(t) = st.last_growth_us
    {
        let size = st.size;
        st.progress.push((t, size));
    }
}

/// How much of `window` holds only complete markers: all of it, or up to its last marker when
/// that one is not all written yet.
fn complete_markers_end(window: &[u8]) -> usize {
    match memchr::memmem::rfind(window, b"gen=") {
        Some(at) if !crate::meter::is_marker(&window[at..]) => at,
        _ => window.len(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn samples_newest_lines_and_growth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let start = now_micros();
        let w = Watcher::start(&path, Tracker::new(start), start);
        let mut f = std::fs::File::create(&path).unwrap();
        for s in 0..2000u64 {
            writeln!(f, "{{\"message\":\"gen=0 seq={s:010} t={:016} x\"}}", start).unwrap();
        }
        f.flush().unwrap();
        // The watcher polls every millisecond; allow a loaded machine plenty of time.
        for _ in 0..500 {
            if w.frontier() == 2000 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(w.frontier(), 2000);
        let st = w.finish();
        assert!(st.last_growth_us.is_some());
        assert!(!st.samples.latency().is_empty());
        assert_eq!(st.flow_per_sec(2000).iter().sum::<u64>(), 2000);
    }

    /// Lines of many records, each larger than the window, the last one without its newline
    /// yet (the Collector's file exporter): markers are sampled all the same, and a marker cut
    /// by the end of what is written is sampled once it is whole, never twice.
    #[test]
    fn marker_sampling_reads_lines_larger_than_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let start = now_micros();
        let w = Watcher::start_sampling(&path, Tracker::new(start), start, 0, Sampling::Markers);
        let record = |s: u64| {
            format!("{{\"body\":{{\"stringValue\":\"gen=0 seq={s:010} t={start:016} x\"}}}},")
        };
        let mut f = std::fs::File::create(&path).unwrap();
        let line: String = (0..1000).map(record).collect();
        assert!(line.len() as u64 > 2 * WINDOW);
        writeln!(f, "{{\"logRecords\":[{line}]}}").unwrap();
        // The next line, cut inside a marker, then completed without its newline.
        let next: String = (1000..1010).map(record).collect();
        let cut = next.len() - 30;
        write!(f, "{}", &next[..cut]).unwrap();
        f.flush().unwrap();
        let wait_for = |n: u64| {
            for _ in 0..500 {
                if w.frontier() == n {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            w.frontier()
        };
        assert_eq!(wait_for(1009), 1009);
        write!(f, "{}", &next[cut..]).unwrap();
        f.flush().unwrap();
        assert_eq!(wait_for(1010), 1010);
        let st = w.finish();
        assert_eq!(st.samples.counts(0).duplicates, 0);
        assert_eq!(st.samples.report(None, None).malformed, 0);
        // A marker cut short ends what is complete; without one, all of it is.
        assert_eq!(complete_markers_end(b"x gen=0 seq=00"), 2);
        assert_eq!(complete_markers_end(b"x y"), 3);
    }

    #[test]
    fn started_at_an_offset_only_growth_past_it_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let start = now_micros();
        let mut f = std::fs::File::create(&path).unwrap();
        for s in 0..500u64 {
            writeln!(f, "{{\"message\":\"gen=0 seq={s:010} t={:016} x\"}}", start).unwrap();
        }
        let from = f.metadata().unwrap().len();
        let w = Watcher::start_at(&path, Tracker::new(start), start, from);
        std::thread::sleep(Duration::from_millis(50));
        // Nothing grew yet: no arrival, no sample of the earlier lines.
        assert_eq!((w.last_growth_us(), w.frontier()), (None, 0));
        for s in 0..300u64 {
            writeln!(f, "{{\"message\":\"gen=1 seq={s:010} t={:016} x\"}}", start).unwrap();
        }
        for _ in 0..500 {
            if w.frontier() == 300 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = w.finish();
        assert!(st.last_growth_us.is_some());
        // Samples, not books: a burst larger than the window is sampled at its newest lines.
        assert_eq!(st.samples.counts(0).unique, 0);
        assert_eq!(st.samples.frontier(), 300);
        assert_eq!(st.flow_per_sec(300).iter().sum::<u64>(), 300);
    }
}
