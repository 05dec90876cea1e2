//! The `fluent` source: the Fluentd forward protocol (v1 and its v1.5 additions) over TCP, and
//! the UDP heartbeat on the same port number.
//!
//! Each connection is served by the shared listener ([`crate::net::listener`]); what one
//! connection does (handshake, requests, acknowledgements) is [`connection`]. Decoding is
//! `loghaul_codec::forward`'s.

pub mod config;
mod connection;

use std::sync::Arc;

use anyhow::Context as _;
use loghaul_codec::forward::Limits;

pub use config::FluentSourceConfig;

use super::{BuildSource, RunningSource, SourceContext};
use crate::metrics::{ComponentMetrics, Health};
use crate::pipeline::{BoxFuture, Fanout, ShutdownSignal};

/// What every connection of one `fluent` source shares.
pub struct FluentContext {
    pub id: Arc<str>,
    pub config: FluentSourceConfig,
    pub metrics: Arc<ComponentMetrics>,
    pub fanout: Fanout,
    /// Answer a request's `chunk` only once every sink committed its events (`true`), or once
    /// they are queued (`false`).
    pub acknowledgements: bool,
    pub limits: Limits,
}

impl BuildSource for FluentSourceConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async move {
            let options = cx.serve_options(self.limits(), &[])?;
            let listener = cx.listen(self.address, self.receive_buffer).await?;
            // Heartbeats are one byte each: the smallest buffer the kernel gives is plenty.
            let heartbeat = if self.heartbeat {
                Some((
                    cx.bind_udp(self.address, Some(64 * 1024))
                        .context("the heartbeat's socket")?,
                    cx.shutdown_or_retire(),
                ))
            } else {
                None
            };
            let ctx = Arc::new(FluentContext {
                id: cx.id,
                config: self.clone(),
                metrics: cx.metrics,
                fanout: cx.fanout,
                acknowledgements: cx.acknowledgements,
                limits: Limits {
                    max_decompressed_size: self.max_decompressed_size,
                },
            });
            let running: RunningSource =
                Box::pin(run(listener, options, heartbeat, ctx, cx.shutdown));
            Ok(running)
        })
    }

    fn hands_over(&self) -> bool {
        true
    }
}

async fn run(
    listener: tokio::net::TcpListener,
    options: crate::net::listener::ServeOptions,
    heartbeat: Option<(tokio::net::UdpSocket, ShutdownSignal)>,
    ctx: Arc<FluentContext>,
    shutdown: ShutdownSignal,
) {
    ctx.metrics.set_health(Health::Running, None);
    let udp = heartbeat.map(|(socket, stop)| tokio::spawn(answer_heartbeats(socket, stop)));
    let handler_ctx = ctx.clone();
    crate::net::listener::serve(
        listener,
        options,
        Some(ctx.metrics.clone()),
        shutdown,
        move |conn| connection::serve(conn, handler_ctx.clone()),
    )
    .await;
    if let Some(udp) = udp {
        let _ = udp.await;
    }
    ctx.metrics.set_health(Health::Stopped, None);
}

/// Answers every UDP datagram with one `0x00` byte, as in_forward does: a sender's
/// `heartbeat_type udp` learns the server is up. The reply is no larger than the datagram, so
/// the port cannot amplify a spoofed flood.
async fn answer_heartbeats(socket: tokio::net::UdpSocket, mut shutdown: ShutdownSignal) {
    let mut buf = [0u8; 128];
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            received = socket.recv_from(&mut buf) => {
                if let Ok((_, peer)) = received {
                    let _ = socket.send_to(&[0], peer).await;
                }
            }
        }
    }
}
