//! The `syslog` source: RFC 3164, RFC 5424 or raw lines over TCP (newline or octet-counted
//! framing, RFC 6587) or UDP (one datagram, possibly several lines).
//!
//! Both transports share the shape: read a large chunk, frame it, freeze the framed prefix into a
//! batch arena, decode every frame in place (no per-event allocation), fan the batch out. Bad input
//! never ends a connection's service to anyone else: it is counted, logged at a limited rate, and
//! (except for empty frames) still delivered as an event flagged for what was wrong.

pub mod config;
pub mod tcp;
pub mod udp;

use std::sync::Arc;

use loghaul_codec::framing::{Framer, FramingMode, FramingStats};
use loghaul_codec::syslog::{DecodeOptions, DecodeStats, Decoder, Format, TimeZone};
use loghaul_config::TimeZoneSetting;
use loghaul_core::{EventBatch, Timestamp};

pub use config::{Framing, SyslogFormat, SyslogMode, SyslogSourceConfig};

use super::{BuildSource, RunningSource, SourceContext};
use crate::metrics::{ComponentMetrics, ErrorKind};
use crate::pipeline::{BoxFuture, Fanout};

impl BuildSource for SyslogSourceConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async move {
            let options = match self.mode {
                SyslogMode::Tcp => Some(cx.serve_options(self.limits(), &[])?),
                SyslogMode::Udp => None,
            };
            let running: RunningSource = match (self.mode, options) {
                (SyslogMode::Tcp, Some(options)) => {
                    let listener = cx.listen(self.address, self.receive_buffer).await?;
                    let ctx = Arc::new(SyslogContext::new(
                        cx.id,
                        self.clone(),
                        cx.metrics,
                        cx.fanout,
                    ));
                    Box::pin(tcp::run(listener, options, ctx, cx.shutdown))
                }
                _ => {
                    let socket = cx.bind_udp(self.address, self.receive_buffer)?;
                    let stop = cx.shutdown_or_retire();
                    let ctx = Arc::new(SyslogContext::new(
                        cx.id,
                        self.clone(),
                        cx.metrics,
                        cx.fanout,
                    ));
                    Box::pin(udp::run(socket, ctx, stop))
                }
            };
            Ok(running)
        })
    }

    fn hands_over(&self) -> bool {
        true
    }

    /// A datagram's lines (UDP), or a stream framed as the source frames it (TCP), decoded in
    /// the configured format; the events have no sender address.
    fn decode_raw(&self, id: Arc<str>, bytes: &[u8]) -> Option<EventBatch> {
        let mode = match self.mode {
            SyslogMode::Udp => FramingMode::Newline,
            SyslogMode::Tcp => framing_mode(self),
        };
        let mut frames = Vec::new();
        let mut stats = FramingStats::default();
        let mut framer = Framer::new(mode, self.max_length);
        let consumed = framer
            .decode(bytes, &mut frames, &mut stats)
            .min(bytes.len());
        let tail = frames.len();
        framer.finish(&bytes[consumed..], &mut frames, &mut stats);
        // `finish` saw only the unconsumed tail: its frames are relative to `consumed`.
        for f in &mut frames[tail..] {
            f.start += consumed as u32;
            f.end += consumed as u32;
        }
        let mut batch = EventBatch::new(bytes::Bytes::copy_from_slice(bytes), id, "syslog");
        Decoder::new(decode_options(self)).decode_batch(
            &mut batch,
            &frames,
            Timestamp::now(),
            None,
            &mut DecodeStats::default(),
        );
        Some(batch)
    }
}

/// What every connection (or the datagram loop) of one syslog source shares.
pub struct SyslogContext {
    pub id: Arc<str>,
    pub config: SyslogSourceConfig,
    pub metrics: Arc<ComponentMetrics>,
    pub fanout: Fanout,
    /// Decoding options from the configuration (each decoder looks a `local` zone up itself).
    pub decode: DecodeOptions,
}

impl SyslogContext {
    pub fn new(
        id: Arc<str>,
        config: SyslogSourceConfig,
        metrics: Arc<ComponentMetrics>,
        fanout: Fanout,
    ) -> SyslogContext {
        let decode = decode_options(&config);
        SyslogContext {
            id,
            config,
            metrics,
            fanout,
            decode,
        }
    }

    pub fn framing_mode(&self) -> FramingMode {
        framing_mode(&self.config)
    }

    /// Moves framing and decoding counts into the metrics, and warns (rate-limited) about them.
    pub fn account_errors(
        &self,
        framing: &mut FramingStats,
        decode: &mut DecodeStats,
        peer: &dyn std::fmt::Display,
    ) {
        let f = std::mem::take(framing);
        let d = std::mem::take(decode);
        let m = &self.metrics;
        m.error(ErrorKind::Oversized, f.truncated);
        m.error(ErrorKind::Framing, f.invalid_octet_count + f.empty_frames);
        m.error(ErrorKind::Parse, d.parse_errors);
        m.error(ErrorKind::InvalidUtf8, d.invalid_utf8);
        if f.truncated > 0 {
            crate::warn_limited!(m, %peer, max_length = self.config.max_length, "Truncated frames longer than max_length.");
        }
        if f.invalid_octet_count > 0 {
            crate::warn_limited!(m, %peer, "Discarded bytes after an invalid octet count.");
        }
        if d.parse_errors > 0 {
            crate::warn_limited!(m, %peer, count = d.parse_errors, "Kept unparseable messages as raw text.");
        }
        if d.invalid_utf8 > 0 {
            crate::warn_limited!(m, %peer, count = d.invalid_utf8, "Received messages that are not valid UTF-8.");
        }
    }
}

/// How a TCP stream of this source is framed.
fn framing_mode(config: &SyslogSourceConfig) -> FramingMode {
    match config.framing {
        // Raw text is one event per line by definition: a line starting with digits (`200
        // OK`) must never be read as an RFC 6587 octet count.
        Framing::Auto if config.format == SyslogFormat::Raw => FramingMode::Newline,
        Framing::Auto => FramingMode::Auto,
        Framing::Newline => FramingMode::Newline,
        Framing::OctetCounting => FramingMode::OctetCounting,
    }
}

fn decode_options(config: &SyslogSourceConfig) -> DecodeOptions {
    DecodeOptions {
        format: match config.format {
            SyslogFormat::Auto => Format::Auto,
            SyslogFormat::Rfc3164 => Format::Rfc3164,
            SyslogFormat::Rfc5424 => Format::Rfc5424,
            SyslogFormat::Raw => Format::Raw,
        },
        strict: config.strict,
        timezone: match config.timezone {
            TimeZoneSetting::Utc => TimeZone::Utc,
            TimeZoneSetting::Fixed(secs) => TimeZone::Fixed(secs),
            TimeZoneSetting::Local => TimeZone::Local,
        },
    }
}
