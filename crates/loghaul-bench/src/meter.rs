//! The meter: what arrived, exactly.
//!
//! It reads what a subject wrote (a JSON-lines or text file being appended to, or a TCP stream where
//! the meter is the subject's destination), finds every marker `gen=G seq=S t=T` (see
//! [`crate::payload`]) and keeps, per generator, a bitmap of the sequence numbers seen. From that it
//! reports exact loss (holes in `0..expected`) and exact duplicates (a bit already set), the
//! per-second flow, and end-to-end latency (arrival clock minus the embedded send time).
//!
//! Markers are found with a SIMD substring search over whole buffers rather than by parsing lines in
//! the subject's format, so one meter reads every format and keeps up with a fast subject. Only
//! complete lines are scanned: the tail after the last `\n` waits for the next read.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use memchr::memmem;
use serde::Serialize;

use crate::histogram::Histogram;
use crate::payload::{SEQ_DIGITS, TIME_DIGITS, now_micros, share};

/// Highest generator id accepted; anything above is treated as a corrupt marker (it would otherwise
/// make the per-generator table huge).
const MAX_GEN_ID: usize = 65_535;
/// At most this many sequence numbers are listed per generator for duplicates.
const SAMPLE_LIMIT: usize = 1000;

#[derive(Clone, Debug, Default)]
struct GenTrack {
    bits: Vec<u64>,
    unique: u64,
    dups: u64,
    dup_samples: Vec<u64>,
    max_seq: Option<u64>,
}

impl GenTrack {
    #[inline]
    fn mark(&mut self, seq: u64) {
        let word = (seq / 64) as usize;
        if word >= self.bits.len() {
            self.bits.resize((word + 1).next_power_of_two(), 0);
        }
        let bit = 1u64 << (seq % 64);
        if self.bits[word] & bit != 0 {
            self.dups += 1;
            if self.dup_samples.len() < SAMPLE_LIMIT {
                self.dup_samples.push(seq);
            }
        } else {
            self.bits[word] |= bit;
            self.unique += 1;
        }
        self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq)));
    }

    /// Adds `other`'s sequence numbers: one seen by both is a duplicate, as if read twice.
    fn merge(&mut self, other: &GenTrack) {
        if self.bits.len() < other.bits.len() {
            self.bits.resize(other.bits.len(), 0);
        }
        for (word, (mine, &theirs)) in self.bits.iter_mut().zip(&other.bits).enumerate() {
            let mut both = *mine & theirs;
            self.dups += u64::from(both.count_ones());
            while both != 0 && self.dup_samples.len() < SAMPLE_LIMIT {
                self.dup_samples
                    .push(word as u64 * 64 + u64::from(both.trailing_zeros()));
                both &= both - 1;
            }
            self.unique += u64::from((theirs & !*mine).count_ones());
            *mine |= theirs;
        }
        self.dups += other.dups;
        for &seq in &other.dup_samples {
            if self.dup_samples.len() < SAMPLE_LIMIT {
                self.dup_samples.push(seq);
            }
        }
        self.max_seq = match (self.max_seq, other.max_seq) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    fn has(&self, seq: u64) -> bool {
        let word = (seq / 64) as usize;
        word < self.bits.len() && self.bits[word] & (1u64 << (seq % 64)) != 0
    }

    /// Missing sequence numbers in `0..end`, as inclusive ranges.
    fn missing(&self, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut run: Option<u64> = None;
        let mut seq = 0;
        while seq < end {
            // Skip full words quickly: the common case is "nothing missing".
            if seq % 64 == 0 && seq + 64 <= end && run.is_none() {
                let word = (seq / 64) as usize;
                if word < self.bits.len() && self.bits[word] == u64::MAX {
                    seq += 64;
                    continue;
                }
            }
            if self.has(seq) {
                if let Some(s) = run.take() {
                    out.push((s, seq - 1));
                }
            } else if run.is_none() {
                run = Some(seq);
            }
            seq += 1;
        }
        if let Some(s) = run {
            out.push((s, end - 1));
        }
        out
    }
}

/// The meter's state: feed it bytes, read a [`MeterReport`] from it.
#[derive(Clone, Debug)]
pub struct Tracker {
    gens: Vec<GenTrack>,
    markers: u64,
    malformed: u64,
    latency: Histogram,
    /// Arrivals per second since `start_us`.
    flow: Vec<u64>,
    start_us: u64,
    first_us: Option<u64>,
    last_us: Option<u64>,
    finder: memmem::Finder<'static>,
    loggen: bool,
    /// Only these generators' markers are read (others are skipped, not counted as malformed).
    only: Option<std::ops::Range<usize>>,
    /// When kept: each latency sample as (arrival, latency), both in µs, the arrival counted
    /// from `start_us`, for the delay within a window of the run (around a reload).
    samples: Option<Vec<(u32, u32)>>,
}

/// The most samples a [`Tracker`] keeps (8 bytes each).
const MAX_SAMPLES: usize = 4 << 20;

/// One generator's counts in a [`Tracker`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GenCounts {
    /// Distinct sequence numbers seen.
    pub unique: u64,
    /// Extra copies seen.
    pub duplicates: u64,
}

impl Tracker {
    /// A tracker whose flow seconds count from `start_us` (µs since the epoch).
    pub fn new(start_us: u64) -> Self {
        Self {
            gens: Vec::new(),
            markers: 0,
            malformed: 0,
            latency: Histogram::default(),
            flow: Vec::new(),
            start_us,
            first_us: None,
            last_us: None,
            finder: memmem::Finder::new(b"gen="),
            loggen: false,
            only: None,
            samples: None,
        }
    }

    /// This tracker, keeping every latency sample with its arrival time (see
    /// [`Tracker::latency_between`]).
    pub fn keeping_samples(self) -> Self {
        Self {
            samples: Some(Vec::new()),
            ..self
        }
    }

    /// The `q` quantile of the latency (µs) of the samples that arrived between `from_us` and
    /// `to_us` (µs since the epoch); `None` without kept samples in the window.
    pub fn latency_between(&self, from_us: u64, to_us: u64, q: f64) -> Option<u64> {
        let samples = self.samples.as_ref()?;
        let from = from_us.saturating_sub(self.start_us);
        let to = to_us.saturating_sub(self.start_us);
        let mut window: Vec<u32> = samples
            .iter()
            .filter(|(at, _)| (from..to).contains(&u64::from(*at)))
            .map(|&(_, l)| l)
            .collect();
        if window.is_empty() {
            return None;
        }
        window.sort_unstable();
        let i = ((window.len() - 1) as f64 * q).round() as usize;
        window.get(i).map(|&l| u64::from(l))
    }

    /// This tracker, reading only the markers of generators `gens` (a later phase of a run whose
    /// earlier phases' lines are still in the same file: see `forward_deliver`).
    pub fn only_generators(self, gens: std::ops::Range<usize>) -> Self {
        Self {
            only: Some(gens),
            ..self
        }
    }

    /// Generator `gen_id`'s counts so far.
    pub fn counts(&self, gen_id: usize) -> GenCounts {
        self.gens
            .get(gen_id)
            .map_or_else(GenCounts::default, |g| GenCounts {
                unique: g.unique,
                duplicates: g.dups,
            })
    }

    /// Adds what `other` saw, as if this tracker had read it too: a marker both saw counts as a
    /// duplicate (the same event written by two receivers), latency and flow add up. Both must
    /// count flow seconds from the same start.
    pub fn merge(&mut self, other: &Tracker) {
        if self.gens.len() < other.gens.len() {
            self.gens.resize_with(other.gens.len(), GenTrack::default);
        }
        for (mine, theirs) in self.gens.iter_mut().zip(&other.gens) {
            mine.merge(theirs);
        }
        self.markers += other.markers;
        self.malformed += other.malformed;
        self.latency.merge(&other.latency);
        if let (Some(mine), Some(theirs)) = (&mut self.samples, &other.samples) {
            mine.extend_from_slice(theirs);
        }
        if self.flow.len() < other.flow.len() {
            self.flow.resize(other.flow.len(), 0);
        }
        for (a, b) in self.flow.iter_mut().zip(&other.flow) {
            *a += b;
        }
        self.first_us = match (self.first_us, other.first_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_us = self.last_us.max(other.last_us);
    }

    /// A tracker that reads syslog-ng `loggen`'s markers instead (`seq: S, thread: T,`, thread as the
    /// generator id), for cross-checks with an independent generator. loggen's send stamp has only
    /// second resolution, so no latency is recorded.
    pub fn for_loggen(start_us: u64) -> Self {
        Self {
            finder: memmem::Finder::new(b"seq: "),
            loggen: true,
            ..Self::new(start_us)
        }
    }

    /// Markers seen, counting duplicates.
    pub fn events(&self) -> u64 {
        self.markers
    }

    /// Distinct (generator, sequence) pairs seen.
    pub fn unique(&self) -> u64 {
        self.gens.iter().map(|g| g.unique).sum()
    }

    /// Arrival time (µs since the epoch) of the last marker.
    pub fn last_arrival_us(&self) -> Option<u64> {
        self.last_us
    }

    /// The highest sequence number seen per generator, plus one, summed: how far the generators'
    /// streams have got, whatever was skipped on the way (a progress estimate from samples).
    pub fn frontier(&self) -> u64 {
        self.gens
            .iter()
            .map(|g| g.max_seq.map_or(0, |m| m + 1))
            .sum()
    }

    /// The latency histogram (µs).
    pub fn latency(&self) -> &Histogram {
        &self.latency
    }

    /// Scans `data` for markers, all arrived at `now_us`.
    pub fn feed(&mut self, data: &[u8], now_us: u64) {
        let mut arrived: u64 = 0;
        let finder = self.finder.clone();
        for pos in finder.find_iter(data) {
            let parsed = if self.loggen {
                parse_loggen(&data[pos + 5..]).map(|(g, s)| (g, s, None))
            } else {
                parse_marker(&data[pos + 4..]).map(|(g, s, t)| (g, s, Some(t)))
            };
            match parsed {
                Some((gen_id, ..)) if self.only.as_ref().is_some_and(|r| !r.contains(&gen_id)) => {}
                Some((gen_id, seq, t)) => {
                    self.gens
                        .resize_with(self.gens.len().max(gen_id + 1), GenTrack::default);
                    self.gens[gen_id].mark(seq);
                    if let Some(t) = t {
                        let latency = now_us.saturating_sub(t);
                        self.latency.record_n(latency, 1);
                        if let Some(samples) = &mut self.samples
                            && samples.len() < MAX_SAMPLES
                        {
                            let at = now_us.saturating_sub(self.start_us);
                            samples.push((
                                u32::try_from(at).unwrap_or(u32::MAX),
                                u32::try_from(latency).unwrap_or(u32::MAX),
                            ));
                        }
                    }
                    arrived += 1;
                }
                None => self.malformed += 1,
            }
        }
        if arrived > 0 {
            self.markers += arrived;
            let sec = (now_us.saturating_sub(self.start_us) / 1_000_000) as usize;
            if self.flow.len() <= sec {
                self.flow.resize(sec + 1, 0);
            }
            self.flow[sec] += arrived;
            self.first_us.get_or_insert(now_us);
            self.last_us = Some(now_us);
        }
    }

    /// Builds the report. `expected` is the total the generators sent, split over `generators` as the
    /// generator splits it; without it, each generator's range ends at its highest sequence seen.
    pub fn report(&self, expected: Option<u64>, generators: Option<usize>) -> MeterReport {
        let n_gens = generators.unwrap_or(self.gens.len()).max(self.gens.len());
        let mut per_gen = BTreeMap::new();
        let mut missing_total = 0;
        let mut dups_total = 0;
        for g in 0..n_gens {
            let empty = GenTrack::default();
            let track = self.gens.get(g).unwrap_or(&empty);
            let end = match (expected, generators) {
                (Some(e), Some(n)) if g < n => share(e, n, g),
                _ => track.max_seq.map_or(0, |m| m + 1),
            };
            let missing = track.missing(end);
            let missing_count: u64 = missing.iter().map(|(a, b)| b - a + 1).sum();
            // Sequence numbers beyond the expected range are neither loss nor duplicates: count them
            // as unexpected so nothing disappears from the books.
            let beyond = track.max_seq.map_or(0, |m| (m + 1).saturating_sub(end));
            missing_total += missing_count;
            dups_total += track.dups;
            if track.unique == 0 && missing_count == 0 {
                continue;
            }
            per_gen.insert(
                g.to_string(),
                GenReport {
                    received: track.unique + track.dups,
                    unique: track.unique,
                    expected: end,
                    missing: missing_count,
                    missing_ranges: missing.into_iter().take(SAMPLE_LIMIT).collect(),
                    duplicates: track.dups,
                    duplicate_seqs: track.dup_samples.clone(),
                    beyond_expected: beyond,
                },
            );
        }
        let span = match (self.first_us, self.last_us) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e6,
            _ => 0.0,
        };
        let q = |p| self.latency.quantile(p).map(|v| v as f64 / 1000.0);
        MeterReport {
            events: self.markers,
            unique: self.unique(),
            missing: missing_total,
            duplicates: dups_total,
            malformed: self.malformed,
            latency_ms: Latency {
                p50: q(0.5),
                p99: q(0.99),
                p999: q(0.999),
                max: q(1.0),
            },
            arrival_span_secs: span,
            flow_per_sec: self.flow.clone(),
            generators: per_gen,
        }
    }
}

/// Whether `s` begins with a whole marker `gen=G seq=S t=T` (one cut short is not).
pub(crate) fn is_marker(s: &[u8]) -> bool {
    s.strip_prefix(b"gen=").and_then(parse_marker).is_some()
}

/// Parses `G seq=SSSSSSSSSS t=TTTTTTTTTTTTTTTT` (what follows `gen=`).
fn parse_marker(s: &[u8]) -> Option<(usize, u64, u64)> {
    let mut i = 0;
    let mut gen_id: usize = 0;
    while i < s.len() && s[i].is_ascii_digit() && i < 6 {
        gen_id = gen_id * 10 + usize::from(s[i] - b'0');
        i += 1;
    }
    if i == 0 || gen_id > MAX_GEN_ID {
        return None;
    }
    let rest = s.get(i..)?.strip_prefix(b" seq=")?;
    let seq = digits(rest.get(..SEQ_DIGITS)?)?;
    let rest = rest.get(SEQ_DIGITS..)?.strip_prefix(b" t=")?;
    let t = digits(rest.get(..TIME_DIGITS)?)?;
    Some((gen_id, seq, t))
}

/// Parses `SSSSSSSSSS, thread: TTTT,` (what follows loggen's `seq: `).
fn parse_loggen(s: &[u8]) -> Option<(usize, u64)> {
    let seq = digits(s.get(..SEQ_DIGITS)?)?;
    let rest = s.get(SEQ_DIGITS..)?.strip_prefix(b", thread: ")?;
    let end = rest.iter().take(7).position(|&c| c == b',')?;
    let thread = usize::try_from(digits(&rest[..end])?).ok()?;
    (end > 0 && thread <= MAX_GEN_ID).then_some((thread, seq))
}

fn digits(s: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(c - b'0');
    }
    Some(v)
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// 99.9th percentile.
    pub p999: Option<f64>,
    /// Maximum.
    pub max: Option<f64>,
}

/// One generator's books.
#[derive(Clone, Debug, Serialize)]
pub struct GenReport {
    /// Markers received, duplicates included.
    pub received: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Size of the expected range `0..expected`.
    pub expected: u64,
    /// Sequence numbers of the expected range never seen.
    pub missing: u64,
    /// The missing ones as inclusive ranges (at most 1000 listed).
    pub missing_ranges: Vec<(u64, u64)>,
    /// Extra copies received.
    pub duplicates: u64,
    /// Sequence numbers of the extra copies (at most 1000 listed).
    pub duplicate_seqs: Vec<u64>,
    /// Distinct sequence numbers above the expected range.
    pub beyond_expected: u64,
}

/// What the meter saw.
#[derive(Clone, Debug, Serialize)]
pub struct MeterReport {
    /// Markers received, duplicates included.
    pub events: u64,
    /// Distinct markers.
    pub unique: u64,
    /// Expected markers never seen.
    pub missing: u64,
    /// Extra copies.
    pub duplicates: u64,
    /// `gen=` occurrences that did not parse as a marker.
    pub malformed: u64,
    /// End-to-end latency.
    pub latency_ms: Latency,
    /// Seconds between the first and the last arrival.
    pub arrival_span_secs: f64,
    /// Markers arrived in each second of the run.
    pub flow_per_sec: Vec<u64>,
    /// Books per generator id.
    pub generators: BTreeMap<String, GenReport>,
}

impl MeterReport {
    /// A human summary, several lines.
    pub fn to_text(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}ms"));
        let mut s = format!(
            "events {} (unique {}), missing {}, duplicates {}, malformed {}\n\
             latency p50 {} p99 {} p99.9 {} max {}\n",
            self.events,
            self.unique,
            self.missing,
            self.duplicates,
            self.malformed,
            ms(self.latency_ms.p50),
            ms(self.latency_ms.p99),
            ms(self.latency_ms.p999),
            ms(self.latency_ms.max),
        );
        let flow: Vec<String> = self.flow_per_sec.iter().map(|n| n.to_string()).collect();
        s.push_str(&format!("flow/s [{}]\n", flow.join(", ")));
        for (g, r) in &self.generators {
            if r.missing == 0 && r.duplicates == 0 {
                continue;
            }
            let ranges: Vec<String> = r
                .missing_ranges
                .iter()
                .take(20)
                .map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            let dups: Vec<String> = r
                .duplicate_seqs
                .iter()
                .take(20)
                .map(u64::to_string)
                .collect();
            s.push_str(&format!(
                "gen {g}: missing {} [{}], duplicates {} [{}]\n",
                r.missing,
                ranges.join(", "),
                r.duplicates,
                dups.join(", ")
            ));
        }
        s
    }
}

/// A tracker shared between a reading thread and whoever waits for it.
#[derive(Clone, Debug)]
pub struct SharedTracker {
    inner: Arc<Mutex<Tracker>>,
    /// Distinct markers so far, readable without the lock.
    pub unique: Arc<AtomicU64>,
}

impl SharedTracker {
    /// A fresh tracker counting flow from now.
    pub fn new() -> Self {
        Self::from_tracker(Tracker::new(now_micros()))
    }

    /// Shares `tracker`.
    pub fn from_tracker(tracker: Tracker) -> Self {
        Self {
            unique: Arc::new(AtomicU64::new(tracker.unique())),
            inner: Arc::new(Mutex::new(tracker)),
        }
    }

    /// Feeds bytes that arrived now.
    pub fn feed(&self, data: &[u8]) {
        let now = now_micros();
        if let Ok(mut t) = self.inner.lock() {
            t.feed(data, now);
            self.unique.store(t.unique(), Ordering::Relaxed);
        }
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> Tracker {
        match self.inner.lock() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Arrival time of the last marker.
    pub fn last_arrival_us(&self) -> Option<u64> {
        self.inner.lock().ok().and_then(|t| t.last_arrival_us())
    }
}

impl Default for SharedTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// Splits `buf` into (complete lines, tail) and feeds the complete part.
fn feed_lines(tracker: &SharedTracker, buf: &mut Vec<u8>) {
    if let Some(last_nl) = memchr::memrchr(b'\n', buf) {
        tracker.feed(&buf[..=last_nl]);
        buf.drain(..=last_nl);
    }
}

/// Reads a file that is being appended to, from where it left off, feeding complete lines only.
/// Truncation or replacement (rotation) of the file restarts from the new file's beginning.
#[derive(Debug)]
pub struct FileFollower {
    path: PathBuf,
    file: Option<(File, u64)>,
    pos: u64,
    pending: Vec<u8>,
    buf: Vec<u8>,
}

impl FileFollower {
    /// A follower of `path` (which may not exist yet).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file: None,
            pos: 0,
            pending: Vec::with_capacity(1 << 20),
            buf: vec![0u8; 1 << 20],
        }
    }

    /// Reads everything appended since the last call; returns whether anything was read.
    ///
    /// # Errors
    /// An I/O error other than the file not existing yet.
    pub fn read_available(&mut self, tracker: &SharedTracker) -> Result<bool> {
        let mut progressed = false;
        loop {
            if self.file.is_none() {
                match File::open(&self.path) {
                    Ok(f) => {
                        let ino = inode(&f);
                        self.file = Some((f, ino));
                        self.pos = 0;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(progressed),
                    Err(e) => {
                        return Err(e).with_context(|| format!("opening {}", self.path.display()));
                    }
                }
            }
            let Some((f, ino)) = self.file.as_mut() else {
                return Ok(progressed);
            };
            loop {
                let n = f
                    .read(&mut self.buf)
                    .with_context(|| format!("reading {}", self.path.display()))?;
                if n == 0 {
                    break;
                }
                progressed = true;
                self.pos += n as u64;
                self.pending.extend_from_slice(&self.buf[..n]);
                feed_lines(tracker, &mut self.pending);
            }
            let replaced = std::fs::metadata(&self.path)
                .map(|m| inode_of(&m) != *ino || m.len() < self.pos)
                .unwrap_or(false);
            if !replaced {
                return Ok(progressed);
            }
            self.file = None;
            self.pending.clear();
        }
    }

    /// Feeds a last line that has no newline (at the very end, when the writer is gone).
    pub fn flush_partial(&mut self, tracker: &SharedTracker) {
        if !self.pending.is_empty() {
            tracker.feed(&self.pending);
            self.pending.clear();
        }
    }
}

/// The exact books of several output files that together hold one load (the receivers of a
/// tree, the members of a consumer group): a follower and a tracker per file, read on demand.
#[derive(Debug)]
pub struct Books {
    followers: Vec<FileFollower>,
    trackers: Vec<SharedTracker>,
}

impl Books {
    /// Books of `outputs` (which may not exist yet).
    pub fn new(outputs: &[PathBuf]) -> Self {
        Self {
            followers: outputs.iter().map(|p| FileFollower::new(p)).collect(),
            trackers: outputs
                .iter()
                .map(|_| SharedTracker::from_tracker(Tracker::new(now_micros())))
                .collect(),
        }
    }

    /// Reads everything written since the last call.
    ///
    /// # Errors
    /// A file cannot be read.
    pub fn read(&mut self) -> Result<()> {
        for (f, t) in self.followers.iter_mut().zip(&self.trackers) {
            f.read_available(t)?;
        }
        Ok(())
    }

    /// Reads what is left once the writers are gone, a last line without its newline included.
    ///
    /// # Errors
    /// A file cannot be read.
    pub fn finish(&mut self) -> Result<()> {
        self.read()?;
        for (f, t) in self.followers.iter_mut().zip(&self.trackers) {
            f.flush_partial(t);
        }
        Ok(())
    }

    /// Every file's books, and their union (a line in two files is a duplicate).
    pub fn snapshot(&self) -> (Vec<Tracker>, Tracker) {
        let each: Vec<Tracker> = self.trackers.iter().map(SharedTracker::snapshot).collect();
        let mut all = Tracker::new(0);
        for t in &each {
            all.merge(t);
        }
        (each, all)
    }
}

/// Follows `path` as it is appended to (waiting for it to appear) until `stop` is set, then reads what
/// is left and returns.
///
/// # Errors
/// An I/O error other than the file not existing yet.
pub fn tail_file(path: &Path, tracker: &SharedTracker, stop: &AtomicBool) -> Result<()> {
    let mut follower = FileFollower::new(path);
    loop {
        // Read `stop` before reading the file: a final pass after the stop request sees everything
        // written before it.
        let stopping = stop.load(Ordering::Acquire);
        let progressed = follower.read_available(tracker)?;
        if stopping {
            follower.flush_partial(tracker);
            return Ok(());
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(unix)]
fn inode(f: &File) -> u64 {
    f.metadata().map(|m| inode_of(&m)).unwrap_or(0)
}

#[cfg(unix)]
fn inode_of(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.ino()
}

/// Accepts connections on `listener` and meters every byte they send, until `stop` is set.
///
/// # Errors
/// The listener fails.
pub fn listen_tcp(listener: TcpListener, tracker: &SharedTracker, stop: &AtomicBool) -> Result<()> {
    listener
        .set_nonblocking(true)
        .context("making the meter's listener non-blocking")?;
    std::thread::scope(|scope| -> Result<()> {
        while !stop.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .context("making a metered connection blocking")?;
                    // Wake up now and then to notice `stop` even on an idle connection.
                    stream
                        .set_read_timeout(Some(Duration::from_millis(100)))
                        .context("setting a read timeout")?;
                    let tracker = tracker.clone();
                    scope.spawn(move || {
                        let mut pending = Vec::with_capacity(1 << 20);
                        let mut buf = vec![0u8; 1 << 18];
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    pending.extend_from_slice(&buf[..n]);
                                    feed_lines(&tracker, &mut pending);
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                    ) =>
                                {
                                    if stop.load(Ordering::Acquire) {
                                        break;
                                    }
                                }
                                Err(_) => break,
                            }
                        }
                        if !pending.is_empty() {
                            tracker.feed(&pending);
                        }
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e).context("accepting a metered connection"),
            }
        }
        Ok(())
    })
}

/// Where the `meter` subcommand reads from.
#[derive(Clone, Debug)]
pub enum MeterSource {
    /// A file being appended to.
    File(PathBuf),
    /// A TCP address to listen on.
    Tcp(String),
}

/// When the `meter` subcommand stops.
#[derive(Clone, Debug)]
pub struct StopRule {
    /// Stop once this many distinct markers arrived.
    pub expected: Option<u64>,
    /// Stop after this long without a new marker (once at least one arrived, or from the start if
    /// `expected` is unknown).
    pub idle: Duration,
    /// Stop after this long in any case.
    pub max: Option<Duration>,
    /// After reaching `expected`, keep reading this long to catch late duplicates.
    pub grace: Duration,
}

/// Runs a meter over `source` until `rule` says stop; prints a live flow line per second to stderr
/// when `live` is set; reads loggen's markers instead of ours when `loggen` is set.
///
/// # Errors
/// The source cannot be read or bound.
pub fn run_meter(
    source: &MeterSource,
    rule: &StopRule,
    live: bool,
    loggen: bool,
) -> Result<Tracker> {
    let tracker = if loggen {
        SharedTracker::from_tracker(Tracker::for_loggen(now_micros()))
    } else {
        SharedTracker::new()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let tracker = tracker.clone();
        let stop = Arc::clone(&stop);
        let source = source.clone();
        match &source {
            MeterSource::Tcp(addr) => {
                let addr = addr.strip_prefix("tcp://").unwrap_or(addr).to_string();
                let listener = TcpListener::bind(&addr)
                    .with_context(|| format!("binding the meter to {addr}"))?;
                eprintln!(
                    "meter: listening on tcp://{}",
                    listener
                        .local_addr()
                        .context("reading the meter's address")?
                );
                std::thread::spawn(move || listen_tcp(listener, &tracker, &stop))
            }
            MeterSource::File(path) => {
                let path = path.clone();
                std::thread::spawn(move || tail_file(&path, &tracker, &stop))
            }
        }
    };
    let start = Instant::now();
    let mut last_change = Instant::now();
    let mut last_unique = 0;
    let mut last_tick = (Instant::now(), 0u64);
    let mut reached: Option<Instant> = None;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let unique = tracker.unique.load(Ordering::Relaxed);
        if unique != last_unique {
            last_unique = unique;
            last_change = Instant::now();
        }
        if live && last_tick.0.elapsed() >= Duration::from_secs(1) {
            let snap = tracker.snapshot();
            let events = snap.events();
            eprintln!(
                "meter: {:>8.1}s {:>12} events {:>12}/s",
                start.elapsed().as_secs_f64(),
                events,
                events - last_tick.1
            );
            last_tick = (Instant::now(), events);
        }
        if reader.is_finished() {
            break;
        }
        if let Some(e) = rule.expected
            && unique >= e
        {
            let at = *reached.get_or_insert_with(Instant::now);
            if at.elapsed() >= rule.grace {
                break;
            }
            continue;
        }
        let idle_armed = unique > 0 || rule.expected.is_none();
        if idle_armed && last_change.elapsed() >= rule.idle {
            break;
        }
        if rule.max.is_some_and(|m| start.elapsed() >= m) {
            break;
        }
    }
    stop.store(true, Ordering::Release);
    match reader.join() {
        Ok(r) => r?,
        Err(_) => anyhow::bail!("the meter's reader thread panicked"),
    }
    Ok(tracker.snapshot())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn line(g: u32, s: u64) -> String {
        format!("{{\"message\":\"gen={g} seq={s:010} t=0000000000000001 filler\"}}\n")
    }

    #[test]
    fn exact_loss_and_duplicates() {
        let mut t = Tracker::new(0);
        let mut data = String::new();
        for s in 0..1000u64 {
            if s == 10 || (500..=502).contains(&s) {
                continue;
            }
            data.push_str(&line(0, s));
            if s == 77 || s == 999 {
                data.push_str(&line(0, s));
            }
        }
        for s in 0..999u64 {
            data.push_str(&line(1, s));
        }
        t.feed(data.as_bytes(), 5);
        let r = t.report(Some(2000), Some(2));
        assert_eq!(r.missing, 4 + 1);
        assert_eq!(r.duplicates, 2);
        assert_eq!(r.generators["0"].missing_ranges, vec![(10, 10), (500, 502)]);
        assert_eq!(r.generators["0"].duplicate_seqs, vec![77, 999]);
        assert_eq!(r.generators["1"].missing_ranges, vec![(999, 999)]);
    }

    #[test]
    fn reads_loggen_markers() {
        let mut t = Tracker::for_loggen(0);
        t.feed(
            b"<38>2026-11-22T03:31:35 localhost prg00000[1234]: seq: 0000000004, thread: 0002, \
              runid: 1795318295, stamp: 2026-11-22T03:31:35 PADDPADD\n",
            0,
        );
        let r = t.report(None, None);
        assert_eq!(r.events, 1);
        assert_eq!(r.generators["2"].missing_ranges, vec![(0, 3)]);
    }

    #[test]
    fn merged_trackers_count_what_both_saw_as_duplicates() {
        let mut a = Tracker::new(0);
        let mut b = Tracker::new(0);
        let lines = |g, seqs: std::ops::Range<u64>| seqs.map(|s| line(g, s)).collect::<String>();
        a.feed(lines(0, 0..100).as_bytes(), 5);
        // b saw 50..150 of generator 0 (50 of them also in a), and 7 (also in a).
        b.feed(
            (lines(0, 50..150) + &line(0, 7) + &lines(1, 0..10)).as_bytes(),
            7,
        );
        a.merge(&b);
        let zero = a.counts(0);
        assert_eq!((zero.unique, zero.duplicates), (150, 51));
        assert_eq!(a.counts(1).unique, 10);
        assert_eq!(a.counts(2), GenCounts::default());
        assert_eq!(a.events(), 100 + 111);
        assert_eq!(a.latency().len(), 211);
        let r = a.report(Some(300), Some(2));
        assert!(r.generators["0"].missing_ranges.is_empty());
        assert_eq!(r.generators["1"].missing_ranges, vec![(10, 149)]);
        let dups = &r.generators["0"].duplicate_seqs;
        assert_eq!(dups.len(), 51);
        assert_eq!(&dups[..3], &[7, 50, 51]);
    }

    #[test]
    fn a_tracker_of_some_generators_skips_the_others() {
        let mut t = Tracker::new(0).only_generators(2..4);
        let text: String = (0..6).map(|g| line(g, 0)).collect();
        t.feed(text.as_bytes(), 1);
        assert_eq!((t.events(), t.unique()), (2, 2));
        assert_eq!(t.counts(1).unique, 0);
        assert_eq!(t.counts(3).unique, 1);
        let r = t.report(None, None);
        assert_eq!(r.malformed, 0);
        assert_eq!(t.latency().len(), 2);
    }

    #[test]
    fn malformed_markers_are_counted_not_trusted() {
        let mut t = Tracker::new(0);
        t.feed(b"gen=1 seq=12 t=3\ngen=x\n", 0);
        assert_eq!(t.events(), 0);
        assert_eq!(t.report(None, None).malformed, 2);
    }
}
