//! Events into requests: each event is encoded into the request being filled for its target,
//! and a request is handed on once it holds `max_events` or `max_bytes`, or has waited
//! `timeout`.
//!
//! ```text
//! nothing templated:  every event ─► the one request being filled     (no rendering, no lookup)
//! templated:          event ─► render key (uri \n header values) ─► request being filled for
//!                     that key (at most MAX_OPEN of them; the target is built once per key)
//! ```
//!
//! Each request holds one `Ack` of every batch with events in it, so a batch split over several
//! requests (or targets) is delivered only once all of them were.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use loghaul_config::PathTemplate;
use loghaul_core::finalizer::Ack;
use loghaul_core::{BatchStatus, Event, EventBatch};

use super::config::{Encoding, HttpSinkConfig};
use super::target::{Target, key_templates, render_key};
use crate::metrics::ComponentMetrics;

/// The most requests filled at once for different keys. Past it, the empty ones are forgotten
/// and, if that is not enough, all are sent as they are: a key of high cardinality makes small
/// requests rather than unbounded memory.
pub const MAX_OPEN: usize = 64;

/// A request being filled.
#[derive(Default)]
pub struct Filling {
    pub buf: Vec<u8>,
    pub events: usize,
    pub acks: Vec<Ack>,
    pub since: Option<tokio::time::Instant>,
    /// The delivery whose `Ack` was pushed last, so each batch adds one per request.
    ack_of: u64,
    /// OTLP's open group of records (its closed ones are in `buf`).
    pub otlp: loghaul_codec::otlp::encode::LogsWriter,
}

impl Filling {
    fn push(
        &mut self,
        config: &HttpSinkConfig,
        ack: Option<&Ack>,
        batch: &EventBatch,
        event: &Event,
        delivery: u64,
    ) {
        if self.ack_of != delivery {
            // A fork of the delivery's own ack: its queue counts the batch in hand until every
            // request with its events is settled.
            self.acks
                .push(ack.map_or_else(|| batch.finalizer.ack(), Ack::fork));
            self.ack_of = delivery;
        }
        if self.events == 0 {
            self.since = Some(tokio::time::Instant::now());
            if config.encoding == Encoding::JsonArray {
                self.buf.push(b'[');
            }
        } else if config.encoding == Encoding::JsonArray {
            self.buf.push(b',');
        }
        match config.encoding {
            Encoding::Text => loghaul_codec::encode::encode_text(batch, event, &mut self.buf),
            Encoding::Ndjson => loghaul_codec::encode::encode_json(batch, event, &mut self.buf),
            Encoding::JsonArray => {
                loghaul_codec::encode::encode_json(batch, event, &mut self.buf);
                if self.buf.last() == Some(&b'\n') {
                    self.buf.pop();
                }
            }
            // Built as protobuf either way; JSON is written from it when the request is sent.
            Encoding::Otlp | Encoding::OtlpJson | Encoding::OtlpGrpc => {
                self.otlp.push(batch, event, &mut self.buf);
            }
        }
        self.events += 1;
    }

    fn is_full(&self, config: &HttpSinkConfig) -> bool {
        self.events >= config.max_events || self.buf.len() + self.otlp.pending() >= config.max_bytes
    }

    fn expires(&self, timeout: Duration) -> Option<tokio::time::Instant> {
        self.since.map(|t| t + timeout)
    }
}

/// A filled request and where it goes.
pub struct Ready {
    pub filling: Filling,
    pub target: Arc<Target>,
}

/// The request being filled for one target; `target` is `None` when the key renders no valid
/// request (its events are refused).
struct Part {
    target: Option<Arc<Target>>,
    filling: Filling,
}

impl Part {
    fn take(&mut self) -> Option<Ready> {
        let target = self.target.clone()?;
        (self.filling.events > 0).then(|| Ready {
            filling: std::mem::take(&mut self.filling),
            target,
        })
    }
}

/// What one delivery's events did besides filling requests; counted once per delivery.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events with a template field that had nothing to render (sent with `-` in its place).
    pub missing: u64,
    /// Events whose rendered target is no valid request: refused.
    pub invalid: u64,
}

/// Sorts events into requests by target.
pub struct Batcher {
    config: Arc<HttpSinkConfig>,
    metrics: Arc<ComponentMetrics>,
    /// The only request being filled when nothing is templated.
    single: Option<Part>,
    templates: Vec<PathTemplate>,
    parts: HashMap<String, Part>,
    scratch: String,
    delivery: u64,
    /// The current delivery's ack, which every request with its events gets a fork of.
    ack: Option<Ack>,
    /// Whether this delivery's batch was already reported rejected (for an invalid target).
    rejected: bool,
    stats: Stats,
}

impl Batcher {
    /// # Errors
    ///
    /// The static target cannot be built (validation builds it first, so only on a bug).
    pub fn new(
        config: Arc<HttpSinkConfig>,
        metrics: Arc<ComponentMetrics>,
    ) -> Result<Batcher, String> {
        let single = if config.is_templated() {
            None
        } else {
            Some(Part {
                target: Some(Arc::new(Target::build(&config, "")?)),
                filling: Filling::default(),
            })
        };
        Ok(Batcher {
            templates: key_templates(&config),
            config,
            metrics,
            single,
            parts: HashMap::new(),
            scratch: String::new(),
            delivery: 0,
            ack: None,
            rejected: false,
            stats: Stats::default(),
        })
    }

    /// Starts a new delivery (its events add a fork of `ack` to each request they go to; with
    /// none, an ack of their batch's finalizer).
    pub fn begin(&mut self, ack: Option<&Ack>) {
        self.delivery += 1;
        self.ack = ack.map(Ack::fork);
        self.rejected = false;
    }

    /// Ends the delivery: the counts of it, reset.
    pub fn take_stats(&mut self) -> Stats {
        // The requests' forks carry the batch's fate; this one only lent them its hold.
        if let Some(ack) = self.ack.take() {
            ack.commit(BatchStatus::Delivered);
        }
        std::mem::take(&mut self.stats)
    }

    /// Adds `event` to its target's request; requests that filled up go to `ready`.
    pub fn add(&mut self, batch: &EventBatch, event: &Event, ready: &mut Vec<Ready>) {
        let part = match self.single.as_mut() {
            // The hot path: nothing to render, nothing to look up.
            Some(part) => part,
            None => {
                if !render_key(&self.templates, batch, event, &mut self.scratch) {
                    self.stats.missing += 1;
                }
                if !self.parts.contains_key(self.scratch.as_str()) {
                    self.open(ready);
                }
                let Some(part) = self.parts.get_mut(self.scratch.as_str()) else {
                    return;
                };
                part
            }
        };
        if part.target.is_none() {
            self.stats.invalid += 1;
            if !self.rejected {
                self.rejected = true;
                batch.finalizer.ack().commit(BatchStatus::Rejected);
            }
            return;
        }
        part.filling
            .push(&self.config, self.ack.as_ref(), batch, event, self.delivery);
        if part.filling.is_full(&self.config) {
            ready.extend(part.take());
        }
    }

    /// Makes a part for the key in `scratch`, keeping at most [`MAX_OPEN`].
    fn open(&mut self, ready: &mut Vec<Ready>) {
        if self.parts.len() >= MAX_OPEN {
            self.parts.retain(|_, p| p.filling.events > 0);
        }
        if self.parts.len() >= MAX_OPEN {
            ready.extend(self.parts.values_mut().filter_map(Part::take));
            self.parts.clear();
        }
        let target = match Target::build(&self.config, &self.scratch) {
            Ok(t) => Some(Arc::new(t)),
            Err(why) => {
                crate::warn_limited!(self.metrics, reason = %why, "Events render no valid request; they are refused.");
                None
            }
        };
        self.parts.insert(
            self.scratch.clone(),
            Part {
                target,
                filling: Filling::default(),
            },
        );
    }

    /// When the oldest request being filled has waited `timeout`.
    pub fn next_deadline(&self) -> Option<tokio::time::Instant> {
        let timeout = self.config.timeout;
        match &self.single {
            Some(part) => part.filling.expires(timeout),
            None => self
                .parts
                .values()
                .filter_map(|p| p.filling.expires(timeout))
                .min(),
        }
    }

    /// Hands on the requests that have waited `timeout` by `now`.
    pub fn expire(&mut self, now: tokio::time::Instant, ready: &mut Vec<Ready>) {
        let timeout = self.config.timeout;
        let due = |p: &Part| p.filling.expires(timeout).is_some_and(|t| t <= now);
        if let Some(part) = self.single.as_mut() {
            if due(part) {
                ready.extend(part.take());
            }
            return;
        }
        for part in self.parts.values_mut() {
            if due(part) {
                ready.extend(part.take());
            }
        }
    }

    /// Hands on every request that holds events.
    pub fn flush(&mut self, ready: &mut Vec<Ready>) {
        ready.extend(self.single.as_mut().and_then(Part::take));
        ready.extend(self.parts.values_mut().filter_map(Part::take));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use bytes::Bytes;
    use hyper::header::HeaderName;
    use loghaul_config::ConfigFormat;
    use loghaul_core::{BatchNotifier, Span};

    use super::*;
    use crate::config::Config;
    use crate::metrics::{ComponentKind, Registry};
    use crate::sinks::SinkConfig;

    pub(crate) fn config(options: &str) -> HttpSinkConfig {
        let text = format!(
            "sources:\n  in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:5514\" }}\nsinks:\n  up: {{ type: http, inputs: [in], {options} }}\n"
        );
        let config = Config::from_str_with_vars(&text, ConfigFormat::Yaml, "t.yaml", &|_| None)
            .unwrap_or_else(|e| panic!("{e}"));
        match &config.sink("up").unwrap().config {
            SinkConfig::Http(c) => c.clone(),
            _ => panic!("not an http sink"),
        }
    }

    fn metrics() -> Arc<ComponentMetrics> {
        Registry::default().register("up", ComponentKind::Sink, "http")
    }

    /// Events with these app names (`None`: no app name), in one batch over "alpha beta".
    fn batch(apps: &[Option<&str>]) -> EventBatch {
        let mut b = EventBatch::new(Bytes::from_static(b"alpha beta"), "src".into(), "test");
        for app in apps {
            let span = match app {
                Some("alpha") => Some(Span::new(0, 5)),
                Some("beta") => Some(Span::new(6, 10)),
                _ => None,
            };
            b.events.push(Event {
                appname: span.into(),
                message: Span::new(0, 10).into(),
                ..Event::default()
            });
        }
        b
    }

    fn run(batcher: &mut Batcher, batch: &EventBatch) -> Vec<Ready> {
        let mut ready = Vec::new();
        batcher.begin(None);
        for event in &batch.events {
            batcher.add(batch, event, &mut ready);
        }
        batcher.flush(&mut ready);
        ready
    }

    fn header<'a>(r: &'a Ready, name: &str) -> &'a str {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        r.target.headers.get(name).unwrap().to_str().unwrap()
    }

    #[test]
    fn a_static_target_is_one_request_and_renders_nothing() {
        let config = Arc::new(config(
            r#"uri: "http://127.0.0.1:9/in", headers: { Content-Type: "application/json; charset=utf-8" }"#,
        ));
        let mut batcher = Batcher::new(config, metrics()).unwrap();
        assert!(batcher.single.is_some() && batcher.templates.is_empty());
        let ready = run(&mut batcher, &batch(&[Some("alpha"), Some("beta"), None]));
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].filling.events, 3);
        assert_eq!(ready[0].target.uri, "http://127.0.0.1:9/in");
        // A configured header replaces the sink's default instead of adding a second one.
        let types: Vec<_> = ready[0]
            .target
            .headers
            .get_all("content-type")
            .iter()
            .collect();
        assert_eq!(types, ["application/json; charset=utf-8"]);
        assert_eq!(batcher.take_stats(), Stats::default());
        assert!(batcher.scratch.is_empty(), "no key was rendered");
    }

    #[test]
    fn templated_uri_and_headers_split_a_batch_by_target() {
        let config = Arc::new(config(
            r#"uri: "http://127.0.0.1:9/logs/{{ appname }}", headers: { X-App: "app-{{ appname }}", X-Env: prod }, max_events: 2"#,
        ));
        let mut batcher = Batcher::new(config, metrics()).unwrap();
        let (notifier, status) = BatchNotifier::new_with_receiver();
        let mut b = batch(&[
            Some("alpha"),
            Some("beta"),
            Some("alpha"),
            None,
            Some("alpha"),
        ]);
        b.finalizer = notifier;
        let mut ready = run(&mut batcher, &b);
        ready.sort_by_key(|r| (r.target.uri.to_string(), r.filling.events));
        let seen: Vec<_> = ready
            .iter()
            .map(|r| {
                (
                    r.target.uri.to_string(),
                    header(r, "x-app").to_owned(),
                    header(r, "x-env").to_owned(),
                    r.filling.events,
                )
            })
            .collect();
        let row = |uri: &str, app: &str, n| (uri.to_owned(), app.to_owned(), "prod".to_owned(), n);
        assert_eq!(
            seen,
            [
                // A missing field renders `-`, as in file paths and fluent tags.
                row("http://127.0.0.1:9/logs/-", "app--", 1),
                // Two alphas filled one request (max_events: 2), the third went on alone.
                row("http://127.0.0.1:9/logs/alpha", "app-alpha", 1),
                row("http://127.0.0.1:9/logs/alpha", "app-alpha", 2),
                row("http://127.0.0.1:9/logs/beta", "app-beta", 1),
            ]
        );
        assert_eq!(
            batcher.take_stats(),
            Stats {
                missing: 1,
                invalid: 0
            }
        );
        // Every request holds an ack of the batch: delivered once all of them are.
        assert!(ready.iter().all(|r| r.filling.acks.len() == 1));
        drop(b);
        for r in ready {
            for ack in r.filling.acks {
                ack.commit(BatchStatus::Delivered);
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(status), BatchStatus::Delivered);
    }

    #[test]
    fn a_key_that_renders_no_valid_request_is_refused_and_counted() {
        // A field in the port: an app name is no number.
        let config = Arc::new(config(r#"uri: "http://127.0.0.1:{{ appname }}/in""#));
        let mut batcher = Batcher::new(config, metrics()).unwrap();
        let (notifier, status) = BatchNotifier::new_with_receiver();
        let mut b = batch(&[Some("alpha"), Some("beta"), Some("alpha")]);
        b.finalizer = notifier;
        let ready = run(&mut batcher, &b);
        assert!(ready.is_empty());
        assert_eq!(
            batcher.take_stats(),
            Stats {
                missing: 0,
                invalid: 3
            }
        );
        drop(b);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(status), BatchStatus::Rejected);
    }

    #[test]
    fn open_targets_stay_bounded() {
        let config = Arc::new(config(r#"uri: "http://127.0.0.1:9/{{ n }}""#));
        let mut batcher = Batcher::new(config, metrics()).unwrap();
        // Events whose `n` field is their index: one key each.
        let mut b = EventBatch::new(Bytes::from_static(b"n"), "src".into(), "test");
        for i in 0..(MAX_OPEN as i64 * 3) {
            b.fields.push(loghaul_core::Field {
                name: Span::new(0, 1),
                value: loghaul_core::Value::Int(i),
            });
            let at = b.fields.len() as u32;
            b.events.push(Event {
                fields: (at - 1, at),
                ..Event::default()
            });
        }
        let mut ready = Vec::new();
        batcher.begin(None);
        for event in &b.events {
            batcher.add(&b, event, &mut ready);
            assert!(batcher.parts.len() <= MAX_OPEN);
        }
        batcher.flush(&mut ready);
        assert_eq!(ready.len(), MAX_OPEN * 3, "each event in its own request");
        assert!(ready.iter().all(|r| r.filling.events == 1));
    }

    /// A batch of `n` events with the message "alpha beta".
    fn events(n: usize) -> EventBatch {
        batch(&vec![None; n])
    }

    #[test]
    fn a_request_is_handed_on_at_max_events() {
        let mut batcher = Batcher::new(
            Arc::new(config("uri: \"http://h:1/x\", max_events: 3")),
            metrics(),
        )
        .unwrap();
        let ready = run(&mut batcher, &events(7));
        let sizes: Vec<usize> = ready.iter().map(|r| r.filling.events).collect();
        assert_eq!(
            sizes,
            [3, 3, 1],
            "full requests as they fill, the rest at the flush"
        );
    }

    #[test]
    fn a_request_is_handed_on_once_it_reaches_max_bytes() {
        let config = config("uri: \"http://h:1/x\", encoding: text, max_bytes: 25");
        let mut batcher = Batcher::new(Arc::new(config), metrics()).unwrap();
        // Each event is "alpha beta\n", 11 bytes: the third reaches 33 >= 25.
        let ready = run(&mut batcher, &events(7));
        let sizes: Vec<(usize, usize)> = ready
            .iter()
            .map(|r| (r.filling.events, r.filling.buf.len()))
            .collect();
        assert_eq!(sizes, [(3, 33), (3, 33), (1, 11)]);
        assert!(
            ready
                .iter()
                .all(|r| r.filling.buf.starts_with(b"alpha beta\n"))
        );
    }

    #[test]
    fn a_json_array_request_is_one_array_of_its_events() {
        let config = config("uri: \"http://h:1/x\", encoding: json_array, max_events: 2");
        let mut batcher = Batcher::new(Arc::new(config), metrics()).unwrap();
        let ready = run(&mut batcher, &events(2));
        assert_eq!(ready.len(), 1);
        let mut body = ready[0].filling.buf.clone();
        // The sink closes the array when it sends the request.
        body.push(b']');
        let items: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["message"], "alpha beta");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_at_most_timeout_from_its_first_event() {
        let config = config("uri: \"http://h:1/x\", timeout: 2s");
        let mut batcher = Batcher::new(Arc::new(config), metrics()).unwrap();
        assert_eq!(batcher.next_deadline(), None, "nothing waits");
        let start = tokio::time::Instant::now();
        let b = events(1);
        let mut ready = Vec::new();
        batcher.begin(None);
        batcher.add(&b, &b.events[0], &mut ready);
        tokio::time::advance(Duration::from_millis(1500)).await;
        // A later event does not move the deadline.
        batcher.add(&b, &b.events[0], &mut ready);
        assert_eq!(
            batcher.next_deadline(),
            Some(start + Duration::from_secs(2))
        );
        batcher.expire(start + Duration::from_millis(1999), &mut ready);
        assert!(ready.is_empty(), "not due yet");
        tokio::time::advance(Duration::from_millis(500)).await;
        batcher.expire(tokio::time::Instant::now(), &mut ready);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].filling.events, 2);
        assert_eq!(
            batcher.next_deadline(),
            None,
            "the next request starts empty"
        );
    }

    #[tokio::test]
    async fn each_request_holds_one_ack_of_every_batch_in_it() {
        let mut batcher = Batcher::new(
            Arc::new(config("uri: \"http://h:1/x\", max_events: 2")),
            metrics(),
        )
        .unwrap();
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let mut b = events(3);
        b.finalizer = finalizer;
        let ack = b.finalizer.ack();
        let mut ready = Vec::new();
        batcher.begin(Some(&ack));
        for event in &b.events {
            batcher.add(&b, event, &mut ready);
        }
        batcher.flush(&mut ready);
        // The batcher lends its fork of the delivery's ack until the delivery ends.
        assert_eq!(batcher.take_stats(), Stats::default());
        ack.commit(BatchStatus::Delivered);
        drop(b);
        assert_eq!(ready.len(), 2);
        assert!(ready.iter().all(|r| r.filling.acks.len() == 1));
        let mut ready = ready.into_iter();
        for ack in ready.next().unwrap().filling.acks {
            ack.commit(BatchStatus::Delivered);
        }
        // The second request's ack is dropped uncommitted: its events were not delivered.
        drop(ready);
        assert_eq!(status.await, BatchStatus::Errored);
    }
}
