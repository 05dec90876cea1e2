//! `loghaul dlq replay` for the HTTP sink: dead letters are sent again in requests built as the
//! sink builds them (its encoding, compression, headers and credentials), to the target each
//! letter recorded, `max_events` per request, with the sink's retry policy bounded to a few
//! attempts (an operator is waiting).

use std::sync::Arc;

use bytes::Bytes;

use super::config::{Encoding, HttpSinkConfig};
use super::target::Target;
use super::{Pool, Request, attempt, compress, jitter, next_backoff};
use crate::net::tls::TlsClient;
use crate::pipeline::dlq::DeadLetter;
use crate::sinks::{Replayed, SinkError};

/// Attempts per request when the sink's policy says `forever`.
const REPLAY_ATTEMPTS: u32 = 5;

pub async fn replay(
    config: Arc<HttpSinkConfig>,
    tls: Option<Arc<TlsClient>>,
    letters: Vec<DeadLetter>,
) -> Replayed {
    let mut replayed = Replayed::default();
    let pool = Pool::new(1, tls);
    let attempts = config.retry.max_attempts.unwrap_or(REPLAY_ATTEMPTS);
    // Consecutive letters for the same target share requests, in the order they died.
    let mut start = 0;
    while start < letters.len() {
        let key = letters[start].target.clone().unwrap_or_default();
        let mut end = start + 1;
        while end < letters.len()
            && end - start < config.max_events
            && letters[end].target.as_deref().unwrap_or_default() == key
        {
            end += 1;
        }
        let chunk = &letters[start..end];
        start = end;
        let outcome = match Target::build(&config, &key) {
            Ok(target) => send(&config, &pool, Arc::new(target), chunk, attempts).await,
            Err(why) => Err(SinkError::permanent(format!(
                "the recorded target is not valid: {why}"
            ))),
        };
        match outcome {
            Ok(()) => replayed.delivered += chunk.len(),
            Err(why) => replayed
                .failed
                .extend(chunk.iter().map(|l| (l.clone(), why.clone()))),
        }
    }
    replayed
}

async fn send(
    config: &HttpSinkConfig,
    pool: &Pool,
    target: Arc<Target>,
    letters: &[DeadLetter],
    attempts: u32,
) -> Result<(), SinkError> {
    let request = Request {
        body: Bytes::from(compress(config, body(config, letters))),
        events: letters.len(),
        acks: Vec::new(),
        target,
        // A one-shot replay of dead letters runs outside any pipeline's budget.
        _charge: None,
    };
    let mut backoff = config.retry.initial;
    let mut tried = 0;
    loop {
        tried += 1;
        let error = match attempt(config, pool, &request).await {
            Ok(_) => return Ok(()),
            Err(error) if error.is_permanent() => return Err(error),
            Err(error) => error,
        };
        if tried >= attempts {
            return Err(error.exhausted(format_args!(" (after {tried} replay attempts)")));
        }
        tokio::time::sleep(jitter(backoff)).await;
        backoff = next_backoff(backoff, config.retry.max);
    }
}

/// The request body for `letters` in the sink's encoding. A text sink's letters hold each line
/// as a JSON string; JSON sinks' letters hold the objects as sent.
fn body(config: &HttpSinkConfig, letters: &[DeadLetter]) -> Vec<u8> {
    let mut out = Vec::new();
    match config.encoding {
        Encoding::Ndjson => {
            for l in letters {
                out.extend_from_slice(l.event.as_bytes());
                out.push(b'\n');
            }
        }
        Encoding::JsonArray => {
            out.push(b'[');
            for (i, l) in letters.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(l.event.as_bytes());
            }
            out.push(b']');
        }
        Encoding::Otlp | Encoding::OtlpJson | Encoding::OtlpGrpc => {
            // Each letter is an event's JSON line: its keys become the record (the OTLP-mapped
            // ones, `attributes`, `resources`, `severity_number`..., fill the log record as
            // before; loghaul's own fields as written, `timestamp`, `hostname`..., come back as
            // attributes of those names).
            let mut b = loghaul_codec::record::RecordBuilder::default();
            for l in letters {
                if b.json_record(l.event.as_bytes(), loghaul_core::Event::default(), &[])
                    .is_err()
                {
                    b.text_event(l.event.as_bytes(), loghaul_core::Event::default(), &[]);
                }
            }
            let batch = b.finish("replay".into(), "dlq");
            let mut w = loghaul_codec::otlp::encode::LogsWriter::default();
            for e in &batch.events {
                w.push(&batch, e, &mut out);
            }
            w.finish(&mut out);
            if config.encoding == Encoding::OtlpJson
                && let Ok(json) = loghaul_codec::otlp::json::from_logs_request(&out)
            {
                out = json;
            }
        }
        Encoding::Text => {
            for l in letters {
                match serde_json::from_str::<String>(&l.event) {
                    Ok(line) => out.extend_from_slice(line.as_bytes()),
                    Err(_) => out.extend_from_slice(l.event.as_bytes()),
                }
                out.push(b'\n');
            }
        }
    }
    out
}
