//! What every component uses to move batches: the bounded input queues ([`queue`]), the fan-out
//! that feeds them ([`fanout`]) and the shutdown signal ([`shutdown`]).
//!
//! This layer sits below the components and the topology: sources, transforms and sinks import
//! it, the topology wires it, and nothing here knows any component type.
//!
//! ```text
//!  source ──Fanout::send──► InputSender ─(bounded queue)─► Input::recv ──► sink
//!                      └──► InputSender ─(bounded queue)─► Input::recv ──► transform ──Fanout──► …
//!  each Delivery { batch: Arc<EventBatch>, prepared, ack }: the sink commits `ack` when done
//! ```

pub mod disk;
pub mod fanout;
pub mod queue;
pub mod shutdown;

pub use fanout::{Fanout, Shedding};
pub use queue::{
    Delivery, Input, InputSender, Prepare, Prepared, QUEUE_BATCHES, QueueLimits, bounded_queue,
    input_queue,
};
pub use shutdown::{ShutdownSignal, ShutdownTrigger, shutdown_pair};

/// A boxed, sendable future: what component builders return, since traits used as objects
/// cannot have `async fn`s.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Runs CPU-heavy work (inflating or deflating megabytes) without stalling the other tasks of
/// the worker it runs on: on the multi-threaded runtime the worker hands its other tasks on first
/// (`block_in_place`); elsewhere (a sink's own current-thread runtime, tests) it just runs.
pub fn cpu_heavy<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
