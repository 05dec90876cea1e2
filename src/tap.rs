//! Live events for `loghaul tap` and the console: a copy of what a source's or transform's
//! output sends, sampled into a bounded channel the API streams from.
//!
//! ```text
//!  Fanout::send ─► TapPoint::offer (one atomic load when nobody taps)
//!                      └─► each Tap: tokens left? condition holds? ─► try_send JSON line ─► API
//!                          otherwise: skipped += n (shown to the viewer once a second)
//! ```
//!
//! Tapping never waits: a tap that is busy on another thread (`try_lock`), out of tokens
//! (`rate`), or whose channel is full skips the events and counts them. The work per batch is
//! bounded by the tap's rate, not by the pipeline's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use loghaul_core::EventBatch;
use tokio::sync::mpsc;

use crate::transforms::vrl::{Program, Runner};

/// Lines a viewer may fall behind by before events are skipped for it.
const CHANNEL: usize = 256;
/// At most this many events a second are tested against a tap's condition (each test may
/// build a VRL value), whatever its rate.
const LOOKS_PER_SECOND: f64 = 10_000.0;

/// Every tappable output of the running graph, by `ID` or `ID.NAME`, and the taps open now.
#[derive(Default)]
pub struct TapHub {
    points: Mutex<HashMap<String, Weak<TapPoint>>>,
    taps: Mutex<Vec<Arc<Tap>>>,
}

impl std::fmt::Debug for TapHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TapHub")
    }
}

/// One output's tap point, held by its fan-out.
pub struct TapPoint {
    key: Arc<str>,
    active: AtomicBool,
    taps: RwLock<Vec<Arc<Tap>>>,
}

impl TapHub {
    /// The tap point of output `key` (`ID` or `ID.NAME`); the open taps that ask for it are
    /// attached.
    pub fn point(&self, key: &str) -> Arc<TapPoint> {
        let mut points = lock(&self.points);
        if let Some(point) = points.get(key).and_then(Weak::upgrade) {
            return point;
        }
        let point = Arc::new(TapPoint {
            key: key.into(),
            active: AtomicBool::new(false),
            taps: RwLock::new(Vec::new()),
        });
        for tap in lock(&self.taps).iter() {
            if tap.wants(key) {
                point.attach(tap.clone());
            }
        }
        points.insert(key.to_owned(), Arc::downgrade(&point));
        point
    }

    /// The outputs running now, sorted.
    pub fn outputs(&self) -> Vec<String> {
        let mut points = lock(&self.points);
        points.retain(|_, p| p.strong_count() > 0);
        let mut keys: Vec<String> = points.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Opens a tap; it is closed when the returned [`TapStream`] is dropped.
    ///
    /// # Errors
    ///
    /// A pattern matches no running output: the message lists them.
    pub fn open(&self, options: TapOptions) -> Result<TapStream, String> {
        let outputs = self.outputs();
        for pattern in &options.outputs {
            if !outputs.iter().any(|o| matches(pattern, o)) {
                return Err(format!(
                    "no output matches `{pattern}`; running outputs: {}",
                    outputs.join(", ")
                ));
            }
        }
        let (tx, rx) = mpsc::channel(CHANNEL);
        let rate = options.rate.max(0.1);
        let tap = Arc::new(Tap {
            patterns: options.outputs,
            condition: options.condition,
            limit: options.limit,
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            state: Mutex::new(State {
                tx: Some(tx.clone()),
                runner: Runner::new(vrl_local_time()),
                rate,
                tokens: rate,
                looks: LOOKS_PER_SECOND,
                last: Instant::now(),
            }),
        });
        lock(&self.taps).push(tap.clone());
        for (key, point) in lock(&self.points).iter() {
            if let Some(point) = point.upgrade()
                && tap.wants(key)
            {
                point.attach(tap.clone());
            }
        }
        Ok(TapStream {
            rx,
            notices: tx,
            tap,
            reported: 0,
            next_notice: tokio::time::Instant::now() + Duration::from_secs(1),
        })
    }

    fn close(&self, tap: &Arc<Tap>) {
        lock(&self.taps).retain(|t| !Arc::ptr_eq(t, tap));
        for point in lock(&self.points).values().filter_map(Weak::upgrade) {
            point.detach(tap);
        }
    }
}

fn vrl_local_time() -> ::vrl::compiler::TimeZone {
    ::vrl::compiler::TimeZone::Local
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// `pattern` names `key`: equal, the component of a named output (`route` for
/// `route.errors`), or a glob with `*`.
fn matches(pattern: &str, key: &str) -> bool {
    let component = key.split_once('.').map_or(key, |(c, _)| c);
    glob(pattern, key) || glob(pattern, component)
}

fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(text) = text.strip_prefix(head) else {
                return false;
            };
            (0..=text.len())
                .filter(|&i| text.is_char_boundary(i))
                .any(|i| glob(rest, &text[i..]))
        }
    }
}

impl TapPoint {
    fn attach(&self, tap: Arc<Tap>) {
        let mut taps = match self.taps.write() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        taps.push(tap);
        self.active.store(true, Ordering::Release);
    }

    fn detach(&self, tap: &Arc<Tap>) {
        let mut taps = match self.taps.write() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        taps.retain(|t| !Arc::ptr_eq(t, tap));
        self.active.store(!taps.is_empty(), Ordering::Release);
    }

    /// Whether a viewer may want what passes here.
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Offers `batch` to the taps on this output. Never waits.
    #[inline]
    pub fn offer(&self, batch: &EventBatch) {
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        let Ok(taps) = self.taps.try_read() else {
            return;
        };
        for tap in taps.iter() {
            tap.offer(&self.key, batch);
        }
    }
}

/// What a viewer asked for.
#[derive(Default)]
pub struct TapOptions {
    /// Output patterns (`ID`, `ID.NAME`, globs with `*`); empty: every output.
    pub outputs: Vec<String>,
    pub condition: Option<Program>,
    /// Stop after this many events.
    pub limit: Option<u64>,
    /// Events a second at most.
    pub rate: f64,
}

/// One open tap.
pub struct Tap {
    patterns: Vec<String>,
    condition: Option<Program>,
    limit: Option<u64>,
    sent: AtomicU64,
    skipped: AtomicU64,
    state: Mutex<State>,
}

struct State {
    /// `None` once the limit is reached.
    tx: Option<mpsc::Sender<Bytes>>,
    runner: Runner,
    rate: f64,
    /// Events that may still be sent, refilled at `rate` a second (a bucket of one second).
    tokens: f64,
    /// Condition tests that may still run, refilled at [`LOOKS_PER_SECOND`].
    looks: f64,
    last: Instant,
}

impl Tap {
    fn wants(&self, key: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| matches(p, key))
    }

    fn offer(&self, key: &str, batch: &EventBatch) {
        let n = batch.events.len() as u64;
        // Busy on another thread: this batch is skipped rather than waited for.
        let Ok(mut state) = self.state.try_lock() else {
            self.skipped.fetch_add(n, Ordering::Relaxed);
            return;
        };
        let state = &mut *state;
        let Some(tx) = state.tx.clone() else {
            return;
        };
        let now = Instant::now();
        let elapsed = now.duration_since(state.last).as_secs_f64();
        state.last = now;
        state.tokens = (state.tokens + elapsed * state.rate).min(state.rate.max(1.0));
        state.looks = (state.looks + elapsed * LOOKS_PER_SECOND).min(LOOKS_PER_SECOND);
        let mut skipped = 0u64;
        let mut target = None;
        for (i, event) in batch.events.iter().enumerate() {
            if state.tokens < 1.0 || (self.condition.is_some() && state.looks < 1.0) {
                skipped += n - i as u64;
                break;
            }
            if let Some(condition) = &self.condition {
                state.looks -= 1.0;
                target = None;
                match state.runner.condition(condition, batch, event, &mut target) {
                    Ok(true) => {}
                    // Not a match (a failing condition is no match either).
                    Ok(false) | Err(_) => continue,
                }
            }
            let mut line = Vec::with_capacity(256);
            line.extend_from_slice(b"{\"output\":\"");
            loghaul_codec::encode::escape_json(key.as_bytes(), &mut line);
            line.extend_from_slice(b"\",\"event\":");
            let start = line.len();
            loghaul_codec::encode::encode_json(batch, event, &mut line);
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            if line.len() == start {
                line.extend_from_slice(b"null");
            }
            line.extend_from_slice(b"}\n");
            match tx.try_send(Bytes::from(line)) {
                Ok(()) => {
                    state.tokens -= 1.0;
                    let sent = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
                    if self.limit.is_some_and(|l| sent >= l) {
                        state.tx = None;
                        break;
                    }
                }
                Err(mpsc::error::TrySendError::Full(_)) => skipped += 1,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    state.tx = None;
                    break;
                }
            }
        }
        drop(target);
        if skipped > 0 {
            self.skipped.fetch_add(skipped, Ordering::Relaxed);
        }
    }
}

/// A viewer's end of a tap: lines of JSON, `{"output":..,"event":{..}}` for events and
/// `{"skipped":N}` (the total so far) once a second while events are being skipped.
pub struct TapStream {
    rx: mpsc::Receiver<Bytes>,
    /// Kept to send notices; dropped once the limit is reached and every event is out.
    notices: mpsc::Sender<Bytes>,
    tap: Arc<Tap>,
    reported: u64,
    /// When the skipped count is next looked at: once a second, events flowing or not.
    next_notice: tokio::time::Instant,
}

impl TapStream {
    /// The next line; `None` once the tap is over (its limit reached).
    pub async fn next(&mut self) -> Option<Bytes> {
        loop {
            let over = self
                .tap
                .limit
                .is_some_and(|l| self.tap.sent.load(Ordering::Relaxed) >= l);
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(self.next_notice) => {
                    self.next_notice = tokio::time::Instant::now() + Duration::from_secs(1);
                    if over && self.rx.is_empty() {
                        return None;
                    }
                    let skipped = self.tap.skipped.load(Ordering::Relaxed);
                    if skipped != self.reported {
                        self.reported = skipped;
                        return Some(Bytes::from(format!("{{\"skipped\":{skipped}}}\n")));
                    }
                }
                line = self.rx.recv() => return line,
            }
        }
    }

    /// Closes the tap (also done when the stream is dropped, through [`TapHub::close`] by the
    /// owner).
    pub fn close(self, hub: &TapHub) {
        hub.close(&self.tap);
        drop(self.notices);
    }

    /// Events skipped so far.
    pub fn skipped(&self) -> u64 {
        self.tap.skipped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loghaul_core::{Event, Span};

    fn batch(n: usize) -> EventBatch {
        let text = "hello";
        let mut b = EventBatch::new(Bytes::from_static(b"hello"), "s".into(), "t");
        b.events = vec![
            Event {
                message: Span::new(0, text.len()).into(),
                ..Event::default()
            };
            n
        ];
        b
    }

    #[test]
    fn patterns_name_outputs_components_and_globs() {
        assert!(matches("route", "route.errors"));
        assert!(matches("route.errors", "route.errors"));
        assert!(!matches("route.other", "route.errors"));
        assert!(matches("syslog_*", "syslog_tcp"));
        assert!(matches("*", "anything.at_all"));
        assert!(!matches("sys", "syslog"));
    }

    #[tokio::test]
    async fn a_tap_takes_its_rate_and_counts_the_rest_skipped() -> Result<(), String> {
        let hub = TapHub::default();
        let point = hub.point("in");
        let mut stream = hub.open(TapOptions {
            outputs: vec!["in".into()],
            rate: 5.0,
            ..TapOptions::default()
        })?;
        point.offer(&batch(100));
        for _ in 0..5 {
            let line = stream.next().await.ok_or("a line")?;
            let v: serde_json::Value = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
            assert_eq!(v["output"], "in");
            assert_eq!(v["event"]["message"], "hello");
        }
        assert_eq!(stream.skipped(), 95);
        let notice = stream.next().await.ok_or("a notice")?;
        assert_eq!(&notice[..], b"{\"skipped\":95}\n");
        stream.close(&hub);
        assert!(
            !point.active.load(Ordering::Relaxed),
            "closed: nothing is offered"
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_output_is_refused_with_the_running_ones() {
        let hub = TapHub::default();
        let _point = hub.point("in");
        let Err(why) = hub.open(TapOptions {
            outputs: vec!["nope".into()],
            rate: 1.0,
            ..TapOptions::default()
        }) else {
            panic!("refused");
        };
        assert!(why.contains("running outputs: in"), "{why}");
    }
}
