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
pub mod dlq;
pub mod fanout;
pub mod queue;
pub mod shutdown;
pub mod spill;

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

/// Tasks a component spawned for its own work (an HTTP sink's request workers), aborted when
/// the component's future is dropped (a sink stopped where it is), so no orphan goes on
/// retrying batches whose acknowledgements died with the component.
#[derive(Default)]
pub struct TaskGroup(Vec<tokio::task::JoinHandle<()>>);

impl TaskGroup {
    pub fn push(&mut self, task: tokio::task::JoinHandle<()>) {
        self.0.push(task);
    }

    /// Waits for every task to end (the component's normal end).
    pub async fn join(mut self) {
        for task in std::mem::take(&mut self.0) {
            let _ = task.await;
        }
    }
}

impl Drop for TaskGroup {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Stops a task made [`abortable`] at its next await, dropping what it holds.
#[derive(Clone)]
pub struct Abort(std::sync::Arc<AbortState>);

struct AbortState {
    aborted: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Abort {
    pub fn abort(self) {
        self.0
            .aborted
            .store(true, std::sync::atomic::Ordering::Release);
        // A permit, if the task is not waiting yet: it sees it at its next poll.
        self.0.notify.notify_one();
    }
}

/// `task`, made to end early when its [`Abort`] is used (and to run to its end otherwise, also
/// when the `Abort` is dropped unused).
///
/// Polled by hand rather than with `tokio::select!`: `select!` answers `Pending` without polling
/// anything once the task's cooperative budget is spent, and a sink spends its budget on every
/// busy stretch, so the wrapper cost the file sink a fifth of its throughput. `Notify` takes no
/// budget.
pub fn abortable(
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    Abort,
) {
    let state = std::sync::Arc::new(AbortState {
        aborted: std::sync::atomic::AtomicBool::new(false),
        notify: tokio::sync::Notify::new(),
    });
    let watch = state.clone();
    let run = async move {
        let aborted = async {
            while !watch.aborted.load(std::sync::atomic::Ordering::Acquire) {
                watch.notify.notified().await;
            }
        };
        let mut task = std::pin::pin!(task);
        let mut aborted = std::pin::pin!(aborted);
        std::future::poll_fn(|cx| {
            if task.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            aborted.as_mut().poll(cx)
        })
        .await;
    };
    (run, Abort(state))
}

/// Runs `task` to completion on a new OS thread named `thread` with a current-thread runtime of
/// its own (what blocking writers get: file sinks, a disk buffer's writer), then fires `done`.
/// `component` names the owner in the error logged if the runtime cannot start (`done` is then
/// dropped unfired, which tells the waiter the task did not finish).
///
/// # Errors
///
/// The thread could not be started.
pub fn spawn_on_own_thread(
    thread: String,
    component: String,
    task: impl std::future::Future<Output = ()> + Send + 'static,
    done: tokio::sync::oneshot::Sender<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new().name(thread).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(error) => {
                tracing::error!(%error, %component, "Failed to start a thread's runtime.");
                return;
            }
        };
        rt.block_on(task);
        let _ = done.send(());
    })?;
    Ok(())
}
