//! The `file` source: tails log files matched by globs, across rotation and restarts, without
//! losing or repeating a line.
//!
//! The work is blocking file I/O, so each source runs its [`tailer::Tailer`] on a thread of its
//! own and hands batches to the async pipeline through the runtime's handle (waiting there when
//! the sinks push back). Lines and multiline groups are cut by [`lines`]; what survives a
//! restart is [`checkpoint`]'s.

pub mod checkpoint;
mod closer;
pub mod config;
mod events;
pub mod lines;
mod tailer;

use anyhow::Context as _;

pub use config::FileSourceConfig;

use super::{BuildSource, RunningSource, SourceContext};
use crate::pipeline::BoxFuture;

impl BuildSource for FileSourceConfig {
    fn build(&self, cx: SourceContext) -> BoxFuture<'_, anyhow::Result<RunningSource>> {
        Box::pin(async move {
            let data_dir = self
                .data_dir
                .clone()
                .unwrap_or_else(|| cx.data_dir.join(&*cx.id));
            if let Err(e) = std::fs::create_dir_all(&data_dir) {
                // Not fatal: tailing works without checkpoints, and their writes keep trying
                // (and are reported) until the directory can be made.
                tracing::warn!(component = %cx.id, path = %data_dir.display(), error = %e, "Cannot create the checkpoint directory; tailing starts anyway.");
            }
            let mut shutdown = cx.shutdown.clone();
            let id = cx.id.clone();
            let tailer = tailer::Tailer::new(self.clone(), cx, data_dir)
                .context("cannot start the file source's helper threads")?;
            let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("file:{id}"))
                .spawn(move || {
                    tailer.run();
                    let _ = done_tx.send(());
                })
                .context("cannot start the file source's thread")?;
            let running: RunningSource = Box::pin(async move {
                let mut done_rx = done_rx;
                tokio::select! {
                    _ = &mut done_rx => return,
                    () = shutdown.wait() => {}
                }
                // The tailer may be sleeping between polls: wake it to see the signal now.
                thread.thread().unpark();
                let _ = done_rx.await;
            });
            Ok(running)
        })
    }
}
