//! Running the server: load a configuration, start its topology and API on a runtime, and
//! stop on a signal; and the small tools over a configuration (`validate`, `dlq`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::{self, Config};
use crate::pipeline::dlq;
use crate::{api, metrics, topology};

/// The configuration at `path`, or the embedded default.
///
/// # Errors
///
/// The file cannot be read or is not a valid configuration; the message lists every problem.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("invalid configuration:\n{e}")),
        None => config::default_config()
            .map_err(|e| anyhow::anyhow!("the embedded default configuration is invalid:\n{e}")),
    }
}

/// `loghaul dlq stats`: what the dead-letter directory of the configuration holds.
///
/// # Errors
///
/// The configuration is invalid or the directory cannot be read.
pub fn dlq_stats(config: Option<&Path>) -> anyhow::Result<()> {
    let config = load_config(config)?;
    let dir = dlq::dir(&config.data_dir);
    let stats = dlq::stats(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
    print!("{stats}");
    Ok(())
}

/// `loghaul dlq replay`: the command that sends a sink's dead letters again.
///
/// # Errors
///
/// The configuration is invalid or names no such sink.
pub fn dlq_replay(sink: &str, config: Option<&Path>) -> anyhow::Result<()> {
    let config = load_config(config)?;
    println!("{}", dlq::replay_command(&config, sink)?);
    Ok(())
}

/// `loghaul validate`: loads the configuration at `path` and says what is wrong with it.
pub fn validate(path: &Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            for warning in config.warnings() {
                eprintln!("{warning}");
            }
            println!("{}: ok", path.display());
            for t in &config.transforms {
                for note in t.config.component().notes() {
                    println!("  transform `{}`: {note}", t.id);
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}

/// Keeps glibc malloc from handing freed batch memory back to the kernel.
///
/// Batches allocate 100-300 KiB buffers on the worker threads and free them on the sink threads,
/// thousands of times a second. With the default settings glibc trims a worker arena's heap as
/// soon as those frees leave its top free (`madvise(MADV_DONTNEED)` from the sink thread), so the
/// next batch takes page faults and zeroes fresh pages: about 9% of the `basic` benchmark's CPU.
/// Peak RSS is set by the memory in flight (bounded queues), so keeping freed memory costs none.
#[allow(unsafe_code)]
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; it is called once, before the runtime
        // starts any thread, and the values are in the ranges glibc documents.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 4 * 1024 * 1024);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 * 1024 * 1024);
        }
    }
}

/// `loghaul run`: starts the pipeline of the configuration at `path` (or the embedded default)
/// and serves until SIGTERM or SIGINT.
///
/// # Errors
///
/// The configuration is invalid, a component cannot start (a port in use, a directory that
/// cannot be written), or the stop did not flush every sink in time.
pub fn run(path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = load_config(path.as_deref())?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    raise_fd_limit();
    tune_malloc();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("loghaul-worker")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config, path))
}

async fn serve(config: Config, path: Option<PathBuf>) -> anyhow::Result<()> {
    let registry = Arc::new(metrics::Registry::default());
    let reopen = Arc::new(AtomicU64::new(0));
    let mut sigterm = signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot install SIGHUP handler")?;

    let api_listener = match &config.api {
        Some(api) => Some(
            api::bind(api.address)
                .await
                .with_context(|| format!("api: cannot listen on {}", api.address))?,
        ),
        None => None,
    };
    let topology = topology::start(&config, &registry, reopen.clone()).await?;
    if let (Some(listener), Some(api)) = (api_listener, &config.api) {
        tokio::spawn(
            api::serve(
                listener,
                registry.clone(),
                api::Access::of(api),
                topology.shutdown_signal(),
            )
            .context("api")?,
        );
    }
    tracing::info!(
        config = %path.as_ref().map_or("<embedded default>".to_string(), |p| p.display().to_string()),
        sources = config.sources.len(),
        transforms = config.transforms.len(),
        sinks = config.sinks.len(),
        api = ?config.api.as_ref().map(|a| a.address),
        "loghaul started."
    );
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: reopening output files.");
                reopen.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    tracing::info!(timeout = ?config.shutdown_timeout, "Shutting down: draining connections and flushing sinks.");
    // A second SIGINT/SIGTERM while draining means "now": exit without waiting (as Vector and
    // most daemons do), saying what that may cost.
    let stopped = tokio::select! {
        clean = topology.stop(config.shutdown_timeout) => clean,
        _ = sigterm.recv() => false,
        _ = sigint.recv() => false,
    };
    if stopped {
        tracing::info!("loghaul stopped.");
        Ok(())
    } else {
        anyhow::bail!(
            "stopped before every sink flushed or saved its buffer to disk (shutdown_timeout {:?} passed, a buffer could not be written, or a second signal asked to stop now); some events may not have been written",
            config.shutdown_timeout
        )
    }
}

/// Thousands of clients need thousands of descriptors: lift the soft limit to the hard one,
/// as rsyslog and nginx do. Failure is harmless (we run with what we have).
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!(limit = n, "Raised the open-files limit."),
        Err(error) => tracing::warn!(%error, "Could not raise the open-files limit."),
    }
}
