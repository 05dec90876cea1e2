//! The `fluent` sink: events to Fluentd forward-protocol servers (Fluentd, Fluent Bit, another
//! loghaul) as PackedForward requests, acknowledged, balanced over several servers with
//! failover to standbys.
//!
//! ```text
//! senders (Prepare) ─► entries per batch ─► sink task: requests by tag, ≤ max_events/max_bytes
//!   ─► ready queue ─► a server picked by load_balance ─► link task ─► server
//!   ◄─ Acked: the requests' acks are committed  /  Failed: back to the front of the ready queue
//! ```
//!
//! Encoding entries is the senders' work (the sink's [`Prepare`] step, on the runtime's
//! workers); the sink task only cuts them into requests and routes them. A request carries the
//! acks of every batch with events in it, so a batch counts as delivered only once every
//! request holding its events was acknowledged by a server (`require_ack`), and a request that
//! was not is sent again, to another server if its own is down: at least once, never lost while
//! loghaul runs. When every server is down, requests wait, the input queue fills, and
//! back-pressure reaches the sources.

pub mod config;
mod link;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use loghaul_codec::forward::{PackedStart, begin_packed, encode_entry, entry_as_is, finish_packed};
use loghaul_core::finalizer::Ack;
use loghaul_core::{BatchStatus, EventBatch};
use tokio::sync::mpsc;

pub use config::FluentSinkConfig;
use config::{Compression, LoadBalance};
use link::{LinkEvent, Outgoing};

use super::encoder::BufferPool;
use super::{BuildSink, BuiltSink, SinkContext, SinkThread};
use crate::metrics::{ComponentMetrics, Health};
use crate::pipeline::{Delivery, Input, Prepare, Prepared, QUEUE_BATCHES};

/// Requests filled at once, one per tag; a new tag beyond this closes the oldest.
const MAX_OPEN_TAGS: usize = 32;
/// The most a new request reserves up front for its entries, and beyond that for the last one.
const REQUEST_ROOM: usize = 1 << 20;
const ENTRY_ROOM: usize = 64 << 10;
/// Closed requests waiting for a server beyond which the sink stops taking batches (they wait
/// in its input queue instead, and back-pressure reaches the sources).
const MAX_READY: usize = 2;

/// The senders' part: a batch's entries, and where each event's entry ends.
pub struct FluentEncoder {
    time_as_integer: bool,
    /// Whether records are passed on as they arrived (no tag template reads them).
    raw: bool,
    /// Events whose records were passed on so.
    passed: Arc<std::sync::atomic::AtomicI64>,
    pool: BufferPool,
}

impl Prepare for FluentEncoder {
    /// Every event's entry, but those that go out as they are in the arena
    /// ([`entry_as_is`]): their entries here are empty, and the sink copies them from the
    /// arena.
    fn prepare(&self, batch: &EventBatch) -> Prepared {
        let mut bytes = self.pool.take();
        let mut ends = Vec::with_capacity(batch.len());
        if batch.raw_records {
            self.passed
                .fetch_add(batch.len() as i64, std::sync::atomic::Ordering::Relaxed);
        } else {
            bytes.reserve(batch.arena.len() + 64 * batch.len());
        }
        for event in &batch.events {
            if entry_as_is(batch, event, self.time_as_integer).is_none() {
                encode_entry(batch, event, self.time_as_integer, &mut bytes);
            }
            ends.push(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
        }
        Prepared { bytes, ends }
    }

    /// A record that came by forward goes out as it came (see `encode_entry`), unless a tag
    /// template must read it.
    fn takes_raw_records(&self) -> bool {
        self.raw
    }
}

impl BuildSink for FluentSinkConfig {
    /// Every server accepts a TCP connection.
    fn check(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter_map(|s| super::reachable(&s.address).err())
            .collect()
    }

    fn build(&self, cx: SinkContext) -> anyhow::Result<BuiltSink> {
        if cx.retry.is_some() {
            // Its requests go back to the queue and are sent again on the next connection, with
            // reconnects paced by `reconnect_max_interval`: there is no attempt count to bound.
            anyhow::bail!(
                "the fluent sink retries until its server takes the events; `retry` does not apply \
                 (pace reconnects with `reconnect_max_interval`)"
            );
        }
        let encoder = Arc::new(FluentEncoder {
            time_as_integer: self.time_as_integer,
            raw: self.tag.is_none(),
            passed: cx.metrics.counter(
                "loghaul_fluent_sink_passed_through_events_total",
                "Events whose records went on as they arrived, neither decoded nor encoded again.",
                &[],
            ),
            pool: BufferPool::default(),
        });
        let prepare: Arc<dyn Prepare> = encoder.clone();
        let config = Arc::new(self.clone());
        let tls = cx.tls_client(false, true)?;
        let metrics = cx.metrics;
        Ok(BuiltSink {
            prepare: Some(prepare),
            queue_batches: QUEUE_BATCHES,
            // Network I/O only: a task on the main runtime.
            thread: SinkThread::Shared,
            run: Box::new(move |input| Box::pin(run(config, tls, metrics, encoder, input))),
        })
    }
}

/// A request being filled.
struct Open {
    tag: Vec<u8>,
    request: Vec<u8>,
    start: PackedStart,
    events: usize,
    acks: Vec<Ack>,
    /// The delivery whose ack this request holds last, so each gets one ack per request.
    last_delivery: u64,
}

/// A request ready to send (or to send again).
struct Chunk {
    id: Bytes,
    request: Bytes,
    events: usize,
    acks: Vec<Ack>,
}

/// What the sink knows of one server.
struct LinkState {
    tx: mpsc::Sender<Outgoing>,
    up: bool,
    in_flight: usize,
    weight: i64,
    standby: bool,
    /// Smooth weighted round robin's running weight.
    current: i64,
}

struct Sink {
    config: Arc<FluentSinkConfig>,
    metrics: Arc<ComponentMetrics>,
    encoder: Arc<FluentEncoder>,
    /// Requests being filled, one per tag seen in this round (oldest first).
    open: Vec<Open>,
    ready: VecDeque<Chunk>,
    /// Requests handed to a link, by sequence number, until acked or handed back.
    in_flight: HashMap<u64, Chunk>,
    links: Vec<LinkState>,
    next_seq: u64,
    deliveries: u64,
    tags: Tags,
}

/// How an event's tag is found.
struct Tags {
    template: Option<loghaul_config::PathTemplate>,
    scratch: String,
    default: Vec<u8>,
}

impl Tags {
    /// The tag of `event`: the configured template, else its own, else `loghaul.SOURCE_TYPE`.
    fn of<'b>(&'b mut self, batch: &'b EventBatch, event: &loghaul_core::Event) -> &'b [u8] {
        if let Some(template) = &self.template {
            super::template::render(template, batch, event, &mut self.scratch);
            return self.scratch.as_bytes();
        }
        if let Some(tag) = event.tag.get() {
            return batch.str(tag);
        }
        self.default.clear();
        self.default.extend_from_slice(b"loghaul.");
        self.default.extend_from_slice(batch.source_type.as_bytes());
        &self.default
    }
}

async fn run(
    config: Arc<FluentSinkConfig>,
    tls: Option<Arc<crate::net::tls::TlsClient>>,
    metrics: Arc<ComponentMetrics>,
    encoder: Arc<FluentEncoder>,
    mut input: Input,
) {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut links = Vec::new();
    // Dropped with this future: a sink stopped where it is leaves no link retrying.
    let mut tasks = crate::pipeline::TaskGroup::default();
    for (i, server) in config.servers.iter().enumerate() {
        let (tx, rx) = mpsc::channel(config.max_in_flight);
        tasks.push(tokio::spawn(link::run(
            i,
            config.clone(),
            tls.clone(),
            rx,
            events_tx.clone(),
        )));
        links.push(LinkState {
            tx,
            up: false,
            in_flight: 0,
            weight: i64::from(server.weight),
            standby: server.standby,
            current: 0,
        });
    }
    drop(events_tx);
    let config_tag = config.tag.clone();
    let mut sink = Sink {
        config,
        metrics,
        encoder,
        open: Vec::new(),
        ready: VecDeque::new(),
        in_flight: HashMap::new(),
        links,
        next_seq: 0,
        deliveries: 0,
        tags: Tags {
            template: config_tag,
            scratch: String::new(),
            default: Vec::new(),
        },
    };
    sink.metrics.set_health(Health::Running, None);
    let mut input_open = true;
    loop {
        sink.dispatch();
        if !input_open && sink.ready.is_empty() && sink.in_flight.is_empty() {
            break;
        }
        let take = input_open && sink.ready.len() < MAX_READY;
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => sink.on_link(event),
                None => break,
            },
            delivery = input.recv(), if take => match delivery {
                Some(delivery) => {
                    sink.add(delivery);
                    // Take what is queued now into the same request (bounded by max_events
                    // and max_bytes), then send: large requests under load, no wait when quiet.
                    while sink.ready.len() < MAX_READY && let Some(d) = input.try_recv() {
                        sink.add(d);
                    }
                    sink.close_open();
                }
                None => {
                    input_open = false;
                    sink.close_open();
                }
            },
        }
    }
    // Dropping the senders ends the links.
    sink.links.clear();
    tasks.join().await;
    sink.metrics.set_health(Health::Stopped, None);
}

impl Sink {
    /// Cuts one delivery's entries into requests by tag and size.
    fn add(&mut self, delivery: Delivery) {
        let Delivery {
            batch,
            prepared,
            ack,
        } = delivery;
        let prepared = match prepared {
            Some(p) if p.ends.len() == batch.len() => p,
            _ => self.encoder.prepare(&batch),
        };
        self.deliveries += 1;
        let delivery_id = self.deliveries;
        let time_as_integer = self.encoder.time_as_integer;
        let no_template = self.tags.template.is_none();
        let (max_events, max_bytes) = (self.config.max_events, self.config.max_bytes);
        let full = |open: &Open, events: usize, bytes: usize| {
            open.events + events >= max_events
                || open.request.len() + bytes - open.start_len() >= max_bytes
        };
        let events = &batch.events;
        let mut start = 0usize;
        let mut i = 0;
        while let Some(event) = events.get(i) {
            let end = prepared.ends.get(i).map_or(start, |e| *e as usize);
            let encoded = prepared.bytes.get(start..end).unwrap_or_default();
            // No entry is empty: the prepare step left this one in the arena.
            let as_is = encoded.is_empty();
            let entry = match encoded {
                [] => entry_as_is(&batch, event, time_as_integer).unwrap_or_default(),
                entry => entry,
            };
            start = end;
            let tag = self.tags.of(&batch, event);
            // Events of a round are grouped by tag, so interleaved tags (a `tag` template over
            // syslog apps) still make a few large requests, not one per event.
            let at = match self.open.iter().position(|o| o.tag == tag) {
                Some(at) => at,
                None => {
                    let tag = tag.to_vec();
                    if self.open.len() >= MAX_OPEN_TAGS {
                        self.close_request(0);
                    }
                    self.open_request(tag);
                    self.open.len() - 1
                }
            };
            let Some(open) = self.open.get_mut(at) else {
                i += 1;
                continue;
            };
            if open.last_delivery != delivery_id {
                open.last_delivery = delivery_id;
                // Forks of the delivery's ack: its queue counts the batch in hand until every
                // request with its events is settled.
                open.acks.push(ack.fork());
            }
            // The entries that follow this one as they came, right after it in the arena and
            // under the same tag (a forward request's), go in with it in one copy: the same
            // requests as entry by entry, without a tag lookup and a copy call for each. That
            // they came as they go is the prepare step's word (it left them out of `prepared`),
            // so their bytes are not read here: in the arena, written on another core, each
            // first read was a cache miss.
            let mut run = entry;
            let mut count = 1;
            if as_is && no_template && !entry.is_empty() {
                let first = event.fields.0 as usize - 1;
                let mut next = event.fields.1 as usize;
                while let Some(e) = events.get(i + count) {
                    if full(open, count, next - first)
                        || e.tag != event.tag
                        || prepared.ends.get(i + count).map(|e| *e as usize) != Some(start)
                        || e.fields.0 as usize != next + 1
                    {
                        break;
                    }
                    next = e.fields.1 as usize;
                    count += 1;
                }
                run = batch.arena.get(first..next).unwrap_or(entry);
            }
            open.request.extend_from_slice(run);
            open.events += count;
            i += count;
            if full(open, 0, 0) {
                self.close_request(at);
            }
        }
        // The requests' forks carry the batch's fate (and a batch with no events is done).
        ack.commit(BatchStatus::Delivered);
        self.encoder.pool.put(prepared.bytes);
    }

    fn open_request(&mut self, tag: Vec<u8>) {
        let mut request = self.encoder.pool.take();
        // Room for a full request at once, and the entry that fills it past `max_bytes`: grown
        // by doubling, a 1 MiB request was copied about twice over on its way there. (Pages
        // not written to cost no memory.)
        request.reserve(self.config.max_bytes.min(REQUEST_ROOM) + ENTRY_ROOM + tag.len());
        let start = begin_packed(&mut request, &tag);
        self.open.push(Open {
            tag,
            request,
            start,
            events: 0,
            acks: Vec::new(),
            last_delivery: 0,
        });
    }

    /// Finishes every open request and queues them.
    fn close_open(&mut self) {
        while !self.open.is_empty() {
            self.close_request(0);
        }
    }

    /// Finishes the open request at `at` and queues it.
    fn close_request(&mut self, at: usize) {
        if at >= self.open.len() {
            return;
        }
        let open = self.open.remove(at);
        if open.events == 0 {
            self.encoder.pool.put(open.request);
            for ack in open.acks {
                ack.commit(BatchStatus::Delivered);
            }
            return;
        }
        let mut id = Vec::new();
        if self.config.require_ack {
            id = chunk_id();
        }
        let chunk = (!id.is_empty()).then_some(&id[..]);
        let gzip = self.config.compression == Compression::Gzip;
        let entries_at = open.start_len();
        let mut request = open.request;
        if gzip {
            let entries = request.get(entries_at..).unwrap_or_default();
            let compressed = crate::pipeline::cpu_heavy(|| gzip_bytes(entries));
            request.truncate(entries_at);
            request.extend_from_slice(&compressed);
        }
        finish_packed(&mut request, open.start, open.events, chunk, gzip);
        self.ready.push_back(Chunk {
            id: Bytes::from(id),
            request: Bytes::from(request),
            events: open.events,
            acks: open.acks,
        });
    }

    /// Hands ready requests to servers with room, as `load_balance` says.
    fn dispatch(&mut self) {
        while !self.ready.is_empty() {
            let Some(i) = self.pick() else {
                return;
            };
            let Some(chunk) = self.ready.pop_front() else {
                return;
            };
            let seq = self.next_seq;
            self.next_seq += 1;
            let out = Outgoing {
                seq,
                chunk: chunk.id.clone(),
                bytes: chunk.request.clone(),
            };
            match self.links.get(i).map(|l| l.tx.try_send(out)) {
                Some(Ok(())) => {
                    if let Some(l) = self.links.get_mut(i) {
                        l.in_flight += 1;
                    }
                    self.in_flight.insert(seq, chunk);
                }
                _ => {
                    // The link is busy handing back requests: try again on its next event.
                    self.ready.push_front(chunk);
                    return;
                }
            }
        }
    }

    /// The server for the next request: among the primaries that are up (or, when none is,
    /// the standbys that are up), one with room, by weighted round robin or by fewest
    /// requests outstanding. `None` when none has room.
    fn pick(&mut self) -> Option<usize> {
        let any_primary_up = self.links.iter().any(|l| l.up && !l.standby);
        let max = self.config.max_in_flight;
        let candidates: Vec<usize> = (0..self.links.len())
            .filter(|&i| {
                let l = &self.links[i];
                l.up && l.standby != any_primary_up && l.in_flight < max
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        match self.config.load_balance {
            LoadBalance::RoundRobin => {
                // Smooth weighted round robin (nginx's): each pick adds every weight to its
                // running total and takes the largest, which then pays the sum back.
                let total: i64 = candidates.iter().map(|&i| self.links[i].weight).sum();
                let mut best = candidates[0];
                for &i in &candidates {
                    self.links[i].current += self.links[i].weight;
                    if self.links[i].current > self.links[best].current {
                        best = i;
                    }
                }
                self.links[best].current -= total;
                Some(best)
            }
            LoadBalance::LeastOutstanding => candidates
                .iter()
                .copied()
                .min_by_key(|&i| (self.links[i].in_flight, self.links[i].current))
                .inspect(|&i| self.links[i].current += 1),
        }
    }

    fn on_link(&mut self, event: LinkEvent) {
        match event {
            LinkEvent::Up(i) => {
                if let Some(l) = self.links.get_mut(i) {
                    l.up = true;
                }
                let address = self.address(i);
                tracing::info!(component = %self.metrics.id, server = %address, "Connected to forward server.");
                self.metrics.set_health(Health::Running, None);
            }
            LinkEvent::Down(i, kind, reason) => {
                let was_up = self.links.get(i).is_some_and(|l| l.up);
                if let Some(l) = self.links.get_mut(i) {
                    l.up = false;
                }
                self.metrics.error(kind, 1);
                let address = self.address(i);
                if was_up {
                    crate::warn_limited!(self.metrics, server = %address, %reason, "Forward server is down; its requests go to the others.");
                } else {
                    crate::warn_limited!(self.metrics, server = %address, %reason, "Cannot reach forward server.");
                }
                if !self.links.iter().any(|l| l.up) {
                    self.metrics.set_health(
                        Health::Degraded,
                        Some(format!("no forward server is up (last: {reason})")),
                    );
                }
            }
            LinkEvent::Acked(i, seq) => {
                if let Some(l) = self.links.get_mut(i) {
                    l.in_flight = l.in_flight.saturating_sub(1);
                }
                if let Some(chunk) = self.in_flight.remove(&seq) {
                    self.metrics.sent(chunk.events, chunk.request.len());
                    for ack in chunk.acks {
                        ack.commit(BatchStatus::Delivered);
                    }
                }
            }
            LinkEvent::Failed(i, seqs) => {
                if let Some(l) = self.links.get_mut(i) {
                    l.in_flight = l.in_flight.saturating_sub(seqs.len());
                }
                // Back to the front, in the order they were sent.
                for seq in seqs.iter().rev() {
                    if let Some(chunk) = self.in_flight.remove(seq) {
                        self.ready.push_front(chunk);
                    }
                }
            }
        }
    }

    fn address(&self, i: usize) -> &str {
        self.config
            .servers
            .get(i)
            .map_or("?", |s| s.address.as_str())
    }
}

impl Open {
    /// Where the entries start in `request`.
    fn start_len(&self) -> usize {
        self.start.entries_at()
    }
}

/// A fresh chunk id: base64 of 16 random bytes, as fluentd's and Fluent Bit's.
fn chunk_id() -> Vec<u8> {
    let mut raw = [0u8; 16];
    if getrandom::fill(&mut raw).is_err() {
        // Ids only need to differ between requests in flight on one connection.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        raw = nanos.to_le_bytes();
    }
    loghaul_codec::forward::chunk_id(&raw).to_vec()
}

fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(data);
    encoder.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ComponentKind, Registry};
    use loghaul_core::{BatchNotifier, Event, Span};

    fn config() -> FluentSinkConfig {
        FluentSinkConfig {
            servers: Vec::new(),
            load_balance: LoadBalance::RoundRobin,
            require_ack: true,
            ack_timeout: std::time::Duration::from_secs(1),
            connect_timeout: std::time::Duration::from_secs(1),
            reconnect_max_interval: std::time::Duration::from_secs(1),
            compression: Compression::None,
            time_as_integer: false,
            tag: None,
            security: None,
            self_hostname: "test".into(),
            max_events: 1000,
            max_bytes: 1 << 20,
            max_in_flight: 8,
        }
    }

    fn sink() -> Sink {
        sink_with(config())
    }

    fn sink_with(config: FluentSinkConfig) -> Sink {
        let config = Arc::new(config);
        Sink {
            tags: Tags {
                template: None,
                scratch: String::new(),
                default: Vec::new(),
            },
            config,
            metrics: Registry::default().register("fwd", ComponentKind::Sink, "fluent"),
            encoder: Arc::new(FluentEncoder {
                time_as_integer: false,
                raw: true,
                passed: Arc::default(),
                pool: BufferPool::default(),
            }),
            open: Vec::new(),
            ready: VecDeque::new(),
            in_flight: HashMap::new(),
            links: Vec::new(),
            next_seq: 0,
            deliveries: 0,
        }
    }

    /// A batch of `n` events whose tags alternate between `a` and `b`, tracked.
    fn interleaved(n: usize) -> (Delivery, loghaul_core::BatchStatusReceiver) {
        let (finalizer, status) = BatchNotifier::new_with_receiver();
        let mut batch = EventBatch::new(bytes::Bytes::from_static(b"abm"), "s".into(), "fluent");
        batch.events = (0..n)
            .map(|i| Event {
                tag: Span::new(i % 2, i % 2 + 1).into(),
                message: Span::new(2, 3).into(),
                ..Event::default()
            })
            .collect();
        batch.finalizer = finalizer;
        let ack = batch.finalizer.ack();
        let delivery = Delivery {
            batch: Arc::new(batch),
            prepared: None,
            ack,
        };
        (delivery, status)
    }

    /// Regression: alternating tags made one request per event.
    #[tokio::test]
    async fn interleaved_tags_make_one_request_per_tag_and_the_batch_waits_for_both() {
        let mut sink = sink();
        let (delivery, mut status) = interleaved(100);
        sink.add(delivery);
        sink.close_open();
        assert_eq!(sink.ready.len(), 2, "one request per tag");
        assert_eq!(sink.ready.iter().map(|c| c.events).sum::<usize>(), 100);
        // The batch is delivered only once both requests are acknowledged.
        let first = sink
            .ready
            .pop_front()
            .unwrap_or_else(|| panic!("a request"));
        for ack in first.acks {
            ack.commit(BatchStatus::Delivered);
        }
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(std::pin::Pin::new(&mut status).poll(&mut cx).is_pending());
        let second = sink
            .ready
            .pop_front()
            .unwrap_or_else(|| panic!("a request"));
        for ack in second.acks {
            ack.commit(BatchStatus::Delivered);
        }
        assert_eq!(status.await, BatchStatus::Delivered);
    }

    /// Forward requests as a deliver reads them: tags `a`, `b`, `a`, each entry's time an
    /// EventTime (passed on as it came) or whole seconds (written again, as an EventTime).
    fn forwarded() -> EventBatch {
        let mut wire = Vec::new();
        for (tag, n) in [(&b"a"[..], 10u32), (b"b", 6), (b"a", 7)] {
            let mut entries = Vec::new();
            for i in 0..n {
                entries.push(0x92);
                if i % 4 == 3 {
                    entries.push(0xce);
                    entries.extend_from_slice(&(1_700_000_000 + i).to_be_bytes());
                } else {
                    entries.extend_from_slice(&[0xd7, 0x00]);
                    entries.extend_from_slice(&(1_700_000_000 + i).to_be_bytes());
                    entries.extend_from_slice(&(i * 1000).to_be_bytes());
                }
                // {"k": "v…"}, of a length that varies with i.
                entries.extend_from_slice(&[0x81, 0xa1, b'k', 0xa0 | (i as u8 % 8)]);
                entries.extend(std::iter::repeat_n(b'v', i as usize % 8));
            }
            let start = begin_packed(&mut wire, tag);
            wire.extend_from_slice(&entries);
            finish_packed(&mut wire, start, n as usize, None, false);
        }
        let mut batch = EventBatch::new(bytes::Bytes::new(), "in".into(), "fluent");
        batch.raw_records = true;
        let mut arena = bytes::BytesMut::from(&wire[..]);
        let mut decoder = loghaul_codec::forward::Decoder::new(loghaul_codec::forward::Limits {
            max_decompressed_size: 1 << 20,
        });
        let mut at = 0;
        while at < wire.len() {
            let mut splitter = loghaul_codec::forward::Splitter::new(1 << 20);
            let n = match splitter.split(&wire[at..]) {
                Ok(Some(n)) => n,
                other => panic!("{other:?}"),
            };
            decoder
                .decode(&mut arena, at, at + n, &mut batch, 0)
                .unwrap_or_else(|e| panic!("{e:?}"));
            at += n;
        }
        batch.arena = arena.freeze();
        assert_eq!(batch.len(), 23);
        batch
    }

    /// The tag and the entries of a request as `begin_packed` writes it.
    fn tag_and_entries(request: &[u8]) -> (&[u8], &[u8]) {
        let tag_len = usize::from(request[1] & 0x1f);
        let at = 2 + tag_len;
        assert_eq!(request[at], 0xc6);
        let len = u32::from_be_bytes([
            request[at + 1],
            request[at + 2],
            request[at + 3],
            request[at + 4],
        ]) as usize;
        (&request[2..at], &request[at + 5..at + 5 + len])
    }

    /// Entries that came as they go out are copied in runs; the requests are exactly those of
    /// taking the entries one by one: by tag, closed at `max_events` or once past `max_bytes`.
    #[test]
    fn runs_of_entries_as_they_came_make_the_requests_entry_by_entry_would() {
        let batch = Arc::new(forwarded());
        for (max_events, max_bytes) in [(1000, 1 << 20), (4, 1 << 20), (1000, 60), (3, 45), (1, 1)]
        {
            // The model: one entry at a time.
            let mut open: Vec<(Vec<u8>, Vec<u8>, usize)> = Vec::new();
            let mut expected = Vec::new();
            for event in &batch.events {
                let tag = batch.str(event.tag.get().unwrap_or(Span::EMPTY)).to_vec();
                let mut entry = Vec::new();
                match entry_as_is(&batch, event, false) {
                    Some(e) => entry.extend_from_slice(e),
                    None => encode_entry(&batch, event, false, &mut entry),
                }
                let at = match open.iter().position(|o| o.0 == tag) {
                    Some(at) => at,
                    None => {
                        open.push((tag, Vec::new(), 0));
                        open.len() - 1
                    }
                };
                open[at].1.extend_from_slice(&entry);
                open[at].2 += 1;
                if open[at].2 >= max_events || open[at].1.len() >= max_bytes {
                    expected.push(open.remove(at));
                }
            }
            expected.append(&mut open);
            let mut sink = sink_with(FluentSinkConfig {
                max_events,
                max_bytes,
                ..config()
            });
            let (finalizer, _status) = BatchNotifier::new_with_receiver();
            let ack = finalizer.ack();
            sink.add(Delivery {
                batch: batch.clone(),
                prepared: None,
                ack,
            });
            sink.close_open();
            let got: Vec<(Vec<u8>, Vec<u8>, usize)> = sink
                .ready
                .iter()
                .map(|c| {
                    let (tag, entries) = tag_and_entries(&c.request);
                    (tag.to_vec(), entries.to_vec(), c.events)
                })
                .collect();
            assert_eq!(
                got, expected,
                "max_events {max_events}, max_bytes {max_bytes}"
            );
        }
    }

    #[test]
    fn chunk_ids_are_fresh_base64_of_16_bytes() {
        let id = chunk_id();
        assert_eq!(id.len(), 24);
        assert!(id.ends_with(b"=="));
        assert_ne!(chunk_id(), id);
    }
}
