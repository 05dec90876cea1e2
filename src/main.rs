//! The `loghaul` binary: parses the command line, then runs the pipeline or a tool.

mod api;
mod cli;
mod config;
mod metrics;
mod net;
mod pipeline;
mod sinks;
mod sources;
mod topology;
mod transforms;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use clap::Parser as _;
use config::Config;
use tokio::signal::unix::{SignalKind, signal};

use cli::{BufferCommand, Cli, Command, ConfigCommand, DlqCommand};

/// jemalloc for Rust and, through its unprefixed `malloc`, for librdkafka: its per-thread caches
/// take a block freed on another thread than the one that allocated it without a lock, where
/// glibc's arenas serialize both threads (the kafka source's reader waited on that lock for
/// most of its idle time).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (the `MALLOC_CONF` variable still overrides them): a
/// freed page goes back to the system within a second instead of ten. Under a churn of large
/// request bodies the ten seconds kept RSS some 50 MiB above what the memory budget holds; the
/// syslog benchmark's rate did not move (1.018 of the default's, same run). jemalloc's
/// background purging thread would do it off the hot threads, but cost 7% of that rate on two
/// cores.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code)]
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"dirty_decay_ms:1000".as_ptr());

/// jemalloc reads `malloc_conf` as a C `const char *`.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable C string.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Run { config } => run(config),
        Command::Validate { config } => return validate(&config),
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            print!("{}", config::DEFAULT_YAML);
            Ok(())
        }
        Command::Dlq { command } => dlq(command),
        Command::Buffer {
            command: BufferCommand::Inspect { path },
        } => loghaul_buffer::inspect(&loghaul_buffer::RealFs, &path)
            .map(|report| print!("{report}"))
            .with_context(|| format!("cannot inspect {}", path.display())),
        Command::Bench { command } => loghaul_bench::cli::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "info",
        1 => "info,loghaul=debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("LOGHAUL_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// The configuration at `path`, or the embedded default.
fn load_config(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("invalid configuration:\n{e}")),
        None => config::default_config()
            .map_err(|e| anyhow::anyhow!("the embedded default configuration is invalid:\n{e}")),
    }
}

fn dlq(command: DlqCommand) -> anyhow::Result<()> {
    match command {
        DlqCommand::Stats { config } => {
            let config = load_config(config.as_deref())?;
            let dir = sinks::dlq::dir(&config.data_dir);
            let stats = sinks::dlq::stats(&dir)
                .with_context(|| format!("cannot read {}", dir.display()))?;
            print!("{stats}");
            Ok(())
        }
        DlqCommand::Replay { sink, config } => {
            let config = load_config(config.as_deref())?;
            println!("{}", sinks::dlq::replay_command(&config, &sink)?);
            Ok(())
        }
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    match Config::load(path) {
        Ok(config) => {
            for warning in config.warnings() {
                eprintln!("{warning}");
            }
            println!("{}: ok", path.display());
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

fn run(path: Option<std::path::PathBuf>) -> anyhow::Result<()> {
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

async fn serve(config: Config, path: Option<std::path::PathBuf>) -> anyhow::Result<()> {
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
