//! How many requests may be in flight: a fixed number, or one found by an AIMD controller in the
//! manner of TCP congestion control (and of Vector's adaptive request concurrency).
//!
//! ```text
//! limit starts at 1, stays in 1..=max
//! window = one baseline RTT of responses; at its end:
//!   back pressure (408, 429, 5xx, timeout, connection error)    ─► limit / 2
//!   or window mean RTT > baseline + max(2.5 dev, baseline/4, 1ms) ─► limit / 2
//!   else if the limit was reached (requests waited for a slot)
//!        and window mean RTT <= baseline + dev/2                  ─► limit + 1
//!   baseline, dev ◄─ EWMA (α 0.4) of the window mean RTTs
//! ```
//!
//! Only successful attempts are RTT samples (a 503 answered at once says nothing of how fast
//! the server takes events). Back pressure from a request sent before the last decrease is
//! not counted again: it was sent under the old limit, which has already been cut (TCP reduces
//! once per window of data in the same way). The limit grows only while it is reached, so an
//! idle sink does not climb to `max` without evidence that it helps.
//!
//! [`Controller`] is pure (time comes in as arguments) so its decisions are tested with
//! synthetic sequences; [`Limiter`] wraps it with the in-flight count, the wake-ups of workers
//! waiting for a slot, and the gauges.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::config::Concurrency;
use crate::metrics::ComponentMetrics;

/// Weight of the newest window in the baseline.
const EWMA_ALPHA: f64 = 0.4;
/// Deviations above the baseline that count as a clear RTT rise.
const SHRINK_DEVIATIONS: f64 = 2.5;
/// The smallest clear rise, as a fraction of the baseline and in absolute terms: without them
/// a very steady RTT (deviation near 0) would halve the limit on a blip of scheduling noise.
const SHRINK_FRACTION: f64 = 0.25;
const SHRINK_MIN: Duration = Duration::from_millis(1);
/// Deviations above the baseline a window may be and still let the limit grow.
const GROW_DEVIATIONS: f64 = 0.5;

/// What an attempt said about the server's load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Signal {
    /// Answered 2xx after this round trip.
    Success(Duration),
    /// Asked to slow down or failed in a way load can cause: 408, 429, 5xx, a timeout, a
    /// connection error.
    BackPressure,
    /// Neither (a 4xx refusal for good): no RTT, no pressure.
    Neutral,
}

/// An exponentially weighted mean and variance, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ewma {
    mean: f64,
    var: f64,
}

impl Ewma {
    fn update(&mut self, x: f64) {
        let diff = x - self.mean;
        let incr = EWMA_ALPHA * diff;
        self.mean += incr;
        self.var = (1.0 - EWMA_ALPHA) * (self.var + diff * incr);
    }

    fn dev(&self) -> f64 {
        self.var.max(0.0).sqrt()
    }
}

/// The responses of the current window.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    ends: Option<Instant>,
    rtt_sum: Duration,
    rtt_count: u32,
    back_pressure: bool,
    reached_limit: bool,
}

/// The concurrency limit and how it moves.
#[derive(Clone, Debug)]
pub struct Controller {
    limit: usize,
    max: usize,
    adaptive: bool,
    baseline: Option<Ewma>,
    window: Window,
    last_decrease: Option<Instant>,
}

impl Controller {
    /// A limit that never moves.
    pub fn fixed(n: usize) -> Controller {
        Controller {
            limit: n.max(1),
            max: n.max(1),
            adaptive: false,
            baseline: None,
            window: Window::default(),
            last_decrease: None,
        }
    }

    /// An adaptive limit: 1 at first, at most `max`.
    pub fn adaptive(max: usize) -> Controller {
        Controller {
            limit: 1,
            max: max.max(1),
            adaptive: true,
            ..Controller::fixed(1)
        }
    }

    pub fn new(concurrency: Concurrency) -> Controller {
        match concurrency {
            Concurrency::Fixed(n) => Controller::fixed(n),
            Concurrency::Adaptive { max } => Controller::adaptive(max),
        }
    }

    /// Requests that may be in flight now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The baseline RTT, once there is one.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
            .map(|b| Duration::from_secs_f64(b.mean.max(0.0)))
    }

    /// Requests wanted more than the limit in this window (all slots taken, or one waited):
    /// evidence that a higher limit would be used.
    pub fn note_limit_reached(&mut self) {
        self.window.reached_limit = true;
    }

    /// Takes in the outcome of an attempt that started at `started` and ended at `now`.
    pub fn record(&mut self, now: Instant, started: Instant, signal: Signal) {
        match signal {
            Signal::Success(rtt) => {
                self.window.rtt_sum += rtt;
                self.window.rtt_count += 1;
            }
            Signal::BackPressure => {
                if self.last_decrease.is_none_or(|d| started >= d) {
                    self.window.back_pressure = true;
                }
            }
            Signal::Neutral => {}
        }
        if !self.adaptive {
            return;
        }
        // Divided as a Duration (whole nanoseconds), so equal RTTs average to exactly themselves.
        let current = (self.window.rtt_count > 0)
            .then(|| (self.window.rtt_sum / self.window.rtt_count).as_secs_f64());
        let Some(mut baseline) = self.baseline else {
            // No baseline yet: the first window is the first response that has an RTT.
            if let Some(rtt) = current {
                self.baseline = Some(Ewma {
                    mean: rtt,
                    var: 0.0,
                });
                self.next_window(now, rtt);
            } else if self.window.back_pressure && self.limit > 1 {
                self.decrease(now);
                self.window = Window::default();
            }
            return;
        };
        if self.window.ends.is_some_and(|end| now < end) {
            return;
        }
        let w = self.window;
        if w.back_pressure {
            self.decrease(now);
        } else if let Some(rtt) = current {
            let dev = baseline.dev();
            let clear_rise = (SHRINK_DEVIATIONS * dev)
                .max(SHRINK_FRACTION * baseline.mean)
                .max(SHRINK_MIN.as_secs_f64());
            if rtt > baseline.mean + clear_rise {
                self.decrease(now);
            } else if w.reached_limit && rtt <= baseline.mean + GROW_DEVIATIONS * dev {
                self.limit = (self.limit + 1).min(self.max);
            }
        }
        if let Some(rtt) = current {
            baseline.update(rtt);
            self.baseline = Some(baseline);
        }
        self.next_window(now, baseline.mean);
    }

    fn decrease(&mut self, now: Instant) {
        self.limit = (self.limit / 2).max(1);
        self.last_decrease = Some(now);
    }

    fn next_window(&mut self, now: Instant, length: f64) {
        self.window = Window {
            ends: Some(now + Duration::from_secs_f64(length.max(0.0))),
            ..Window::default()
        };
    }
}

/// Gates attempts: at most [`Controller::limit`] in flight; others wait for a slot.
pub struct Limiter {
    state: Mutex<State>,
    /// Wakes waiting workers when a slot frees up (or the limit grows).
    freed: Notify,
    limit_gauge: Arc<AtomicI64>,
    in_flight_gauge: Arc<AtomicI64>,
    rtt_gauge: Arc<AtomicI64>,
}

struct State {
    controller: Controller,
    in_flight: usize,
}

impl Limiter {
    pub fn new(concurrency: Concurrency, metrics: &ComponentMetrics) -> Limiter {
        let controller = Controller::new(concurrency);
        let limit_gauge = metrics.gauge(
            "loghaul_http_sink_concurrency_limit",
            "Requests the http sink may have in flight now (fixed, or found by concurrency: adaptive).",
            &[],
        );
        limit_gauge.store(controller.limit() as i64, Ordering::Relaxed);
        Limiter {
            state: Mutex::new(State {
                controller,
                in_flight: 0,
            }),
            freed: Notify::new(),
            limit_gauge,
            in_flight_gauge: metrics.gauge(
                "loghaul_http_sink_in_flight_requests",
                "Requests the http sink has sent and not yet had an answer to.",
                &[],
            ),
            rtt_gauge: metrics.gauge(
                "loghaul_http_sink_rtt_baseline_microseconds",
                "The http sink's moving average of request round trips (2xx only), which concurrency: adaptive compares new ones with.",
                &[],
            ),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent between statements, so a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot.
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a slot freed between the check and the wait
            // still wakes this worker.
            freed.as_mut().enable();
            {
                let mut s = self.state();
                if s.in_flight < s.controller.limit() {
                    s.in_flight += 1;
                    if s.in_flight >= s.controller.limit() {
                        s.controller.note_limit_reached();
                    }
                    self.in_flight_gauge
                        .store(s.in_flight as i64, Ordering::Relaxed);
                    return Permit {
                        limiter: self.clone(),
                        started: Instant::now(),
                        signal: None,
                    };
                }
                s.controller.note_limit_reached();
            }
            freed.await;
        }
    }

    fn release(&self, started: Instant, signal: Option<Signal>) {
        {
            let mut s = self.state();
            s.in_flight = s.in_flight.saturating_sub(1);
            if let Some(signal) = signal {
                s.controller.record(Instant::now(), started, signal);
            }
            self.in_flight_gauge
                .store(s.in_flight as i64, Ordering::Relaxed);
            self.limit_gauge
                .store(s.controller.limit() as i64, Ordering::Relaxed);
            if let Some(rtt) = s.controller.baseline() {
                self.rtt_gauge.store(
                    i64::try_from(rtt.as_micros()).unwrap_or(i64::MAX),
                    Ordering::Relaxed,
                );
            }
        }
        self.freed.notify_waiters();
    }
}

/// One slot, held for one attempt; say how it went with [`Permit::finish`]. Dropped without
/// it (the attempt was cancelled), the slot is freed and nothing is learnt.
pub struct Permit {
    limiter: Arc<Limiter>,
    started: Instant,
    signal: Option<Signal>,
}

impl Permit {
    pub fn finish(mut self, signal: Signal) {
        self.signal = Some(signal);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release(self.started, self.signal.take());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// One round trip at full demand: as many requests as the limit start at `t`, all end after
    /// `rtt` with `signal` (its RTT replaced by `rtt` for successes). Returns the limit after.
    fn round(c: &mut Controller, t: &mut Instant, rtt: Duration, signal: Signal) -> usize {
        let started = *t;
        let n = c.limit();
        c.note_limit_reached();
        *t += rtt;
        for _ in 0..n {
            let signal = match signal {
                Signal::Success(_) => Signal::Success(rtt),
                s => s,
            };
            c.record(*t, started, signal);
        }
        c.limit()
    }

    fn ok() -> Signal {
        Signal::Success(Duration::ZERO)
    }

    #[test]
    fn grows_by_one_per_round_under_steady_low_latency() {
        let mut c = Controller::adaptive(64);
        let mut t = Instant::now();
        assert_eq!(c.limit(), 1);
        let limits: Vec<usize> = (0..20)
            .map(|_| round(&mut c, &mut t, 10 * MS, ok()))
            .collect();
        // The first round sets the baseline; every later one adds one.
        assert_eq!(limits[0], 1);
        for pair in limits.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "{limits:?}");
        }
        assert_eq!(c.baseline(), Some(10 * MS));
    }

    #[test]
    fn does_not_grow_without_demand() {
        let mut c = Controller::adaptive(64);
        let mut t = Instant::now();
        for _ in 0..20 {
            // One request per round trip, never waiting for a slot.
            let started = t;
            t += 10 * MS;
            c.record(t, started, Signal::Success(10 * MS));
        }
        assert_eq!(c.limit(), 1);
    }

    #[test]
    fn halves_on_503_and_recovers() {
        let mut c = Controller::adaptive(64);
        let mut t = Instant::now();
        while c.limit() < 16 {
            round(&mut c, &mut t, 10 * MS, ok());
        }
        assert_eq!(round(&mut c, &mut t, 10 * MS, Signal::BackPressure), 8);
        assert_eq!(round(&mut c, &mut t, 10 * MS, Signal::BackPressure), 4);
        let floor: Vec<usize> = (0..10)
            .map(|_| round(&mut c, &mut t, 10 * MS, Signal::BackPressure))
            .collect();
        assert_eq!(floor[..3], [2, 1, 1]);
        assert!(
            floor[1..].iter().all(|&l| l == 1),
            "never below 1: {floor:?}"
        );
        // The server recovers: the limit climbs again, one per round.
        let after: Vec<usize> = (0..10)
            .map(|_| round(&mut c, &mut t, 10 * MS, ok()))
            .collect();
        assert_eq!(after.last(), Some(&11), "{after:?}");
    }

    #[test]
    fn a_clear_rtt_rise_halves_and_noise_does_not() {
        let mut c = Controller::adaptive(64);
        let mut t = Instant::now();
        while c.limit() < 10 {
            round(&mut c, &mut t, 10 * MS, ok());
        }
        // 10% slower: within the tolerance, no decrease (and no growth above the baseline).
        assert_eq!(round(&mut c, &mut t, 11 * MS, ok()), 10);
        // Four times the baseline: the server is queueing.
        assert_eq!(round(&mut c, &mut t, 40 * MS, ok()), 5);
    }

    #[test]
    fn back_pressure_from_before_a_decrease_counts_once() {
        let mut c = Controller::adaptive(64);
        let mut t = Instant::now();
        while c.limit() < 16 {
            round(&mut c, &mut t, 10 * MS, ok());
        }
        // 16 requests sent together all fail, their answers spread over three windows.
        let started = t;
        for i in 0..16u32 {
            c.record(t + 5 * MS * i, started, Signal::BackPressure);
        }
        assert_eq!(c.limit(), 8, "one cut for one burst");
        // A request sent after the cut that fails too cuts again.
        let later = t + 100 * MS;
        c.record(later + 20 * MS, later, Signal::BackPressure);
        assert_eq!(c.limit(), 4);
    }

    #[test]
    fn stays_within_bounds_whatever_happens() {
        let mut c = Controller::adaptive(5);
        let mut t = Instant::now();
        // A fixed pseudo-random walk over RTTs and outcomes.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let rtt = MS * (1 + (x % 50) as u32);
            let signal = match x % 7 {
                0 => Signal::BackPressure,
                1 => Signal::Neutral,
                _ => Signal::Success(rtt),
            };
            let l = round(&mut c, &mut t, rtt, signal);
            assert!((1..=5).contains(&l), "{l}");
        }
        // Steady again: it reaches the maximum and stays there.
        for _ in 0..20 {
            round(&mut c, &mut t, 10 * MS, ok());
        }
        assert_eq!(c.limit(), 5);
    }

    #[test]
    fn a_fixed_limit_never_moves() {
        let mut c = Controller::fixed(4);
        let mut t = Instant::now();
        for signal in [ok(), Signal::BackPressure, ok(), Signal::Neutral] {
            assert_eq!(round(&mut c, &mut t, 10 * MS, signal), 4);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_limiter_keeps_attempts_within_the_limit() {
        let metrics = crate::metrics::Registry::default().register(
            "up",
            crate::metrics::ComponentKind::Sink,
            "http",
        );
        let limiter = Arc::new(Limiter::new(Concurrency::Fixed(3), &metrics));
        let now = Arc::new(AtomicI64::new(0));
        let peak = Arc::new(AtomicI64::new(0));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (limiter, now, peak) = (limiter.clone(), now.clone(), peak.clone());
                tokio::spawn(async move {
                    for _ in 0..5 {
                        let permit = limiter.acquire().await;
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        permit.finish(Signal::Success(MS));
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(peak.load(Ordering::SeqCst), 3);
        assert_eq!(limiter.in_flight_gauge.load(Ordering::SeqCst), 0);
        assert_eq!(limiter.limit_gauge.load(Ordering::SeqCst), 3);
    }
}
