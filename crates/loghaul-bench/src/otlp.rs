//! The OTLP/HTTP target (`--target otlp://HOST:PORT`): the generator's numbered messages as the
//! bodies of OpenTelemetry log records, exported as an SDK's or a Collector's `otlp_http`
//! exporter does: `POST /v1/logs`, binary protobuf (`application/x-protobuf`),
//! [`RECORDS_PER_REQUEST`] records a request, over one keep-alive HTTP/1.1 connection per
//! generator, each request waiting for its `200` before the next goes.
//!
//! The bodies are the same seeded ones every target sends (see [`crate::payload`]). Before the
//! clock starts they are wrapped into encoded `LogRecord`s, each a `log_records` field of a
//! `ScopeLogs`, with the marker's fixed-width slots inside the body string: stamping a block is
//! the same in-place patch as for the other targets (the lengths never change), and a request is
//! a few bytes of header, the same for every request of the connection, then a run of a block's
//! records:
//!
//! ```text
//! ExportLogsServiceRequest
//! └ resource_logs (1)                          header: built once per request, from the lengths
//!   ├ resource (1): service.name, host.name     (constant per connection)
//!   └ scope_logs (2)
//!     ├ scope (1): name, version                (constant)
//!     └ log_records (2) × n                     records i..i+n of a block, as they lie there:
//!         time_unix_nano (1), severity_number (2), severity_text (3),
//!         body (5) {string_value: "gen=G seq=S t=T words"},
//!         attributes (6): http.status_code (int), thread.name, logger
//! ```
//!
//! The HTTP client is hyper's HTTP/1.1 connection on a current-thread tokio runtime owned by the
//! generator's thread: `send` drives it only while a request is out, so the thread does nothing
//! else, as the other targets' blocking writes.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use loghaul_codec::otlp::wire::Writer;

use crate::payload::{Block, PayloadSpec, Rng, build_blocks_with};
use crate::target::{Target, resolve};

/// Log records in a request: a typical SDK batch processor's export is a few hundred at most,
/// a busy service's a hundred or so.
pub const RECORDS_PER_REQUEST: usize = 100;

/// The resource every request carries.
pub const SERVICE_NAME: &str = "loghaul-bench";
/// The resource's `host.name`.
pub const HOST_NAME: &str = "bench-host";

/// Severities of the records: (number, text), drawn with the seed.
const SEVERITIES: [(u64, &str); 5] = [
    (9, "INFO"),
    (9, "INFO"),
    (13, "WARN"),
    (17, "ERROR"),
    (5, "DEBUG"),
];
const STATUSES: [i64; 5] = [200, 200, 201, 404, 503];
const LOGGERS: [&str; 4] = ["app.http.handler", "app.db.pool", "app.auth", "app.cache"];

/// Builds generator `gen_id`'s blocks of encoded log records (see the module doc). A block holds
/// a whole number of requests.
///
/// # Errors
/// An invalid spec.
pub fn build_blocks(spec: &PayloadSpec, gen_id: u32) -> Result<Vec<Block>> {
    // Like the syslog headers' timestamps, the records' time is fixed when the blocks are built:
    // it only has to decode, while the marker carries the real send time.
    let now = chrono::Utc::now();
    let time = u64::try_from(now.timestamp_nanos_opt().unwrap_or(0)).unwrap_or(0);
    // The attributes' own stream: the bodies stay those of every other target.
    let mut rng = Rng::new(spec.seed ^ 0x6f74_6c70);
    let mut record = Writer::default();
    let mut field = Writer::default();
    build_blocks_with(spec, gen_id, RECORDS_PER_REQUEST, |block, body, slot| {
        let (number, text) = SEVERITIES[rng.below(SEVERITIES.len())];
        record.buf.clear();
        record.fixed64(1, time);
        record.uint(2, number);
        record.bytes(3, text.as_bytes());
        // body (5): AnyValue { string_value (1) }, written flat so that the body's offset is
        // known: it ends the record so far.
        field.buf.clear();
        field.bytes(1, body);
        record.bytes(5, &field.buf);
        let body_end = record.buf.len();
        let status = STATUSES[rng.below(STATUSES.len())];
        record.message(6, |kv| {
            kv.bytes(1, b"http.status_code");
            kv.message(2, |v| v.int(3, status));
        });
        let thread = format!("worker-{}", rng.below(8));
        attribute(&mut record, "thread.name", &thread);
        attribute(&mut record, "logger", LOGGERS[rng.below(LOGGERS.len())]);
        // The record as a `log_records` field of ScopeLogs.
        field.buf.clear();
        field.bytes(2, &record.buf);
        let record_at = block.bytes.len() + field.buf.len() - record.buf.len();
        block.bytes.extend_from_slice(&field.buf);
        let body_start = record_at + body_end - body.len();
        block.end_frame((body_start, record_at + body_end), body_start + slot);
    })
}

/// A string attribute (a `KeyValue` in field 6 of a log record, or 1 of a resource).
fn attribute(w: &mut Writer, key: &str, value: &str) {
    attribute_in(w, 6, key, value);
}

fn attribute_in(w: &mut Writer, number: u32, key: &str, value: &str) {
    w.message(number, |kv| {
        kv.bytes(1, key.as_bytes());
        kv.message(2, |v| v.bytes(1, value.as_bytes()));
    });
}

/// The header of a request of `records` bytes of `log_records` fields: `resource_logs` and
/// `scope_logs` opened, the resource and scope written (`resource` and `scope` are those fields,
/// whole).
fn request_header(resource: &[u8], scope: &[u8], records: usize, out: &mut Vec<u8>) {
    let scope_logs = scope.len() + records;
    let mut w = Writer::default();
    w.varint(scope_logs as u64);
    let scope_logs_len = w.buf.len();
    let resource_logs = resource.len() + 1 + scope_logs_len + scope_logs;
    w.buf.clear();
    // resource_logs (1), length-delimited.
    w.buf.push(0x0a);
    w.varint(resource_logs as u64);
    w.buf.extend_from_slice(resource);
    // scope_logs (2), length-delimited.
    w.buf.push(0x12);
    w.varint(scope_logs as u64);
    w.buf.extend_from_slice(scope);
    out.extend_from_slice(&w.buf);
}

/// One keep-alive HTTP/1.1 connection exporting a generator's records.
pub struct OtlpTarget {
    runtime: tokio::runtime::Runtime,
    sender: SendRequest<Full<Bytes>>,
    /// `HOST:PORT`, for the `Host` header and messages.
    authority: String,
    /// The `resource` and `scope` fields every request starts with.
    resource: Vec<u8>,
    scope: Vec<u8>,
}

impl OtlpTarget {
    /// Connects to `addr` (`HOST:PORT`) and opens the HTTP/1.1 connection.
    ///
    /// # Errors
    /// The address does not resolve or the connection is refused.
    pub fn connect(addr: &str) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the OTLP target's runtime")?;
        let socket = resolve(addr)?;
        let (sender, connection) = runtime
            .block_on(async {
                let tcp = tokio::net::TcpStream::connect(socket).await?;
                tcp.set_nodelay(true)?;
                hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(std::io::Error::other)
            })
            .with_context(|| format!("connecting to otlp://{addr}"))?;
        // The connection's task runs whenever `send` drives the runtime; it ends with the sender.
        drop(runtime.spawn(connection));
        let mut resource = Writer::default();
        resource.message(1, |r| {
            attribute_in(r, 1, "service.name", SERVICE_NAME);
            attribute_in(r, 1, "host.name", HOST_NAME);
        });
        let mut scope = Writer::default();
        scope.message(1, |s| {
            s.bytes(1, SERVICE_NAME.as_bytes());
            s.bytes(2, env!("CARGO_PKG_VERSION").as_bytes());
        });
        Ok(Self {
            runtime,
            sender,
            authority: addr.to_string(),
            resource: resource.buf,
            scope: scope.buf,
        })
    }

    /// Posts one request and waits for its answer, which must be `200`.
    fn post(&mut self, body: Vec<u8>) -> Result<()> {
        let request = hyper::Request::post("/v1/logs")
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .context("building an OTLP request")?;
        let (runtime, sender, authority) = (&self.runtime, &mut self.sender, &self.authority);
        runtime.block_on(async {
            sender
                .ready()
                .await
                .with_context(|| format!("otlp://{authority} closed the connection"))?;
            let response = sender
                .send_request(request)
                .await
                .with_context(|| format!("posting to otlp://{authority}/v1/logs"))?;
            let status = response.status();
            // Read the whole answer: the connection is kept for the next request.
            let answer = response
                .into_body()
                .collect()
                .await
                .with_context(|| format!("reading otlp://{authority}'s answer"))?
                .to_bytes();
            if status != hyper::StatusCode::OK {
                bail!(
                    "otlp://{authority}/v1/logs answered {status}: {}",
                    String::from_utf8_lossy(&answer[..answer.len().min(200)])
                );
            }
            Ok(())
        })
    }
}

impl Target for OtlpTarget {
    fn send(&mut self, block: &mut Block, n: usize) -> Result<u64> {
        let mut wire = 0;
        let mut done = 0;
        while done < n {
            let count = RECORDS_PER_REQUEST.min(n - done);
            let start = match done {
                0 => 0,
                i => block.frame_ends[i - 1],
            };
            let end = block.frame_ends[done + count - 1];
            let mut body = Vec::with_capacity(end - start + 64);
            request_header(&self.resource, &self.scope, end - start, &mut body);
            body.extend_from_slice(&block.bytes[start..end]);
            wire += body.len() as u64;
            self.post(body)?;
            done += count;
        }
        Ok(wire)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::payload::{Format, SeqCounter, time_digits};
    use std::sync::Arc;

    /// Requests cut from a stamped block decode, with loghaul's OTLP decoder, to the numbered
    /// messages, one marker per record, with the resource and attributes.
    #[test]
    fn requests_decode_to_the_numbered_records() {
        let spec = PayloadSpec {
            format: Format::Raw,
            message_size: 128,
            ..PayloadSpec::default()
        };
        let mut blocks = build_blocks(&spec, 3).unwrap();
        let block = &mut blocks[0];
        assert!(block.len() >= RECORDS_PER_REQUEST);
        assert_eq!(block.len() % RECORDS_PER_REQUEST, 0);
        let mut seq = SeqCounter::new(0);
        block.stamp(block.len(), &mut seq, &time_digits(1_234));
        let mut resource = Writer::default();
        resource.message(1, |r| attribute_in(r, 1, "host.name", HOST_NAME));
        let mut scope = Writer::default();
        scope.message(1, |s| s.bytes(1, b"s"));
        // A short request (the end of a quota) and a whole one.
        for (from, count) in [(0, 7), (7, RECORDS_PER_REQUEST)] {
            let start = if from == 0 {
                0
            } else {
                block.frame_ends[from - 1]
            };
            let end = block.frame_ends[from + count - 1];
            let mut body = Vec::new();
            request_header(&resource.buf, &scope.buf, end - start, &mut body);
            body.extend_from_slice(&block.bytes[start..end]);
            let decoded =
                loghaul_codec::otlp::logs::decode(&Bytes::from(body), Arc::from("o")).unwrap();
            let batch = &decoded.batch;
            assert_eq!(batch.events.len(), count);
            for (i, event) in batch.events.iter().enumerate() {
                let message = batch.str(event.message.get().unwrap());
                let want = format!("gen=3 seq={:010} t={:016} ", from + i, 1_234);
                assert!(message.starts_with(want.as_bytes()), "{message:?}");
                assert_eq!(memchr::memmem::find_iter(message, b"gen=").count(), 1);
                assert_eq!(
                    batch.str(event.hostname.get().unwrap()),
                    HOST_NAME.as_bytes()
                );
            }
        }
    }
}
