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

/// Where a configuration comes from: files given one by one (`-c`, several merge) and a folder
/// whose `*.yaml`, `*.yml`, `*.toml` and `*.json` files are read in name order
/// (`--config-dir`); neither means the embedded default.
#[derive(Clone, Debug, Default)]
pub struct ConfigPaths {
    pub files: Vec<PathBuf>,
    pub dir: Option<PathBuf>,
}

impl ConfigPaths {
    /// One file, or the embedded default.
    pub fn single(path: Option<PathBuf>) -> ConfigPaths {
        ConfigPaths {
            files: path.into_iter().collect(),
            dir: None,
        }
    }

    /// Every file, the folder's read now (a reload reads it again, so a file added to it is
    /// taken).
    ///
    /// # Errors
    ///
    /// The folder cannot be listed, or holds no configuration file.
    pub fn resolve(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = self.files.clone();
        if let Some(dir) = &self.dir {
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .with_context(|| format!("cannot list --config-dir {}", dir.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .and_then(|e| e.to_str())
                            .is_some_and(|e| matches!(e, "yaml" | "yml" | "toml" | "json"))
                })
                .collect();
            if found.is_empty() {
                anyhow::bail!(
                    "--config-dir {} holds no configuration file (*.yaml, *.yml, *.toml, *.json)",
                    dir.display()
                );
            }
            found.sort();
            files.extend(found);
        }
        Ok(files)
    }

    /// How the configuration is named in logs.
    pub fn label(&self) -> String {
        match (self.files.as_slice(), &self.dir) {
            ([], None) => "<embedded default>".to_owned(),
            (files, dir) => files
                .iter()
                .map(|f| f.display().to_string())
                .chain(dir.iter().map(|d| format!("{}/", d.display())))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Loads the configuration: the embedded default when there is no file.
    ///
    /// # Errors
    ///
    /// As [`load_config`], for every file; and conflicts between them.
    pub fn load(&self) -> anyhow::Result<Config> {
        let files = self.resolve()?;
        if files.is_empty() {
            return load_config(None);
        }
        Config::load_all(&files).map_err(|e| anyhow::anyhow!("invalid configuration:\n{e}"))
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

/// `loghaul validate`: loads the configuration at `path` and says what is wrong with it; with
/// `check`, also tries what each sink needs (see [`crate::sinks::BuildSink::check`]).
pub fn validate(paths: &ConfigPaths, check: bool) -> ExitCode {
    let files = match paths.resolve() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let label = paths.label();
    let path = Path::new(&label);
    match Config::load_all(&files) {
        Ok(config) => {
            for warning in config.warnings() {
                eprintln!("{warning}");
            }
            let mut problems = Vec::new();
            if check {
                for sink in &config.sinks {
                    for problem in sink.config.component().check() {
                        problems.push(format!("sink `{}`: {problem}", sink.id));
                    }
                }
            }
            if !problems.is_empty() {
                for p in &problems {
                    eprintln!("{}: error: {p}", path.display());
                }
                return ExitCode::FAILURE;
            }
            println!(
                "{}: ok{}",
                path.display(),
                if check { " (sinks checked)" } else { "" }
            );
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
pub fn run(paths: ConfigPaths, watch: bool) -> anyhow::Result<()> {
    let config = paths.load()?;
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
    runtime.block_on(serve(config, paths, watch))
}

/// A reload asked for through the API; its outcome is sent back.
pub type ReloadRequest = tokio::sync::oneshot::Sender<metrics::ReloadOutcome>;

/// Loads the configuration again and moves the running graph to it (see
/// [`topology::Topology::reload`]); the outcome is logged, counted and kept for `/health`.
async fn reload(
    topology: &mut topology::Topology,
    paths: &ConfigPaths,
    trigger: &'static str,
    registry: &metrics::Registry,
) -> metrics::ReloadOutcome {
    crate::systemd::reloading();
    tracing::info!(trigger, "Reloading the configuration.");
    let result = match paths.load() {
        Ok(next) => {
            for warning in next.warnings() {
                tracing::warn!("{warning}");
            }
            topology.reload(next).await
        }
        Err(error) => Err(error),
    };
    let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let outcome = match result {
        Ok(changes) => {
            let result = if changes.is_empty() {
                "unchanged"
            } else {
                "applied"
            };
            tracing::info!(
                result,
                added = ?changes.added,
                changed = ?changes.changed,
                removed = ?changes.removed,
                rewired = ?changes.rewired,
                "Reloaded the configuration."
            );
            metrics::ReloadOutcome {
                time,
                result,
                trigger,
                error: None,
                added: changes.added,
                changed: changes.changed,
                removed: changes.removed,
            }
        }
        Err(error) => {
            let error = format!("{error:#}");
            tracing::error!(
                "The reload was refused; the running configuration is unchanged: {error}"
            );
            metrics::ReloadOutcome {
                time,
                result: "failed",
                trigger,
                error: Some(error),
                added: Vec::new(),
                changed: Vec::new(),
                removed: Vec::new(),
            }
        }
    };
    registry.reloaded(outcome.clone());
    crate::systemd::notify("READY=1");
    outcome
}

/// The files a running configuration was read from: its files (and their folder, whose
/// listing changes when a file is added), and the files its components name (VRL programs).
/// Certificates are watched by their own listeners.
fn watched_files(config: &Config, paths: &ConfigPaths) -> Vec<PathBuf> {
    let mut files = paths.resolve().unwrap_or_else(|_| paths.files.clone());
    files.extend(paths.dir.iter().cloned());
    for t in &config.transforms {
        files.extend(t.config.component().files());
    }
    files
}

async fn serve(config: Config, paths: ConfigPaths, watch: bool) -> anyhow::Result<()> {
    let registry = Arc::new(metrics::Registry::default());
    let reopen = Arc::new(AtomicU64::new(0));
    let mut sigterm = signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("cannot install SIGHUP handler")?;
    let mut sigusr1 =
        signal(SignalKind::user_defined1()).context("cannot install SIGUSR1 handler")?;

    let api_listener = match &config.api {
        Some(api) => Some(
            api::bind(api.address)
                .await
                .with_context(|| format!("api: cannot listen on {}", api.address))?,
        ),
        None => None,
    };
    let mut topology = topology::start(&config, &registry, reopen.clone()).await?;
    let (reload_tx, mut reload_rx) = tokio::sync::mpsc::channel::<ReloadRequest>(4);
    if let (Some(listener), Some(api)) = (api_listener, &config.api) {
        tokio::spawn(
            api::serve(
                listener,
                registry.clone(),
                api::Access::of(api),
                topology.shutdown_signal(),
                Some(reload_tx),
            )
            .context("api")?,
        );
    }
    let embedded = paths.files.is_empty() && paths.dir.is_none();
    let mut watcher = match (embedded, watch) {
        (false, true) => Some(crate::watch::Watcher::new(watched_files(&config, &paths))),
        (true, true) => {
            tracing::warn!("--watch-config has no file to watch: the embedded default runs.");
            None
        }
        _ => None,
    };
    tracing::info!(
        config = %paths.label(),
        sources = config.sources.len(),
        transforms = config.transforms.len(),
        sinks = config.sinks.len(),
        api = %config.api.as_ref().map_or("off".to_owned(), |a| {
            let scheme = if a.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}", a.address)
        }),
        "loghaul started."
    );
    crate::systemd::notify("READY=1");
    loop {
        let changed = async {
            match watcher.as_mut() {
                Some(w) => w.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = sighup.recv() => {
                // What logrotate's postrotate sends: output files are reopened too.
                reopen.fetch_add(1, Ordering::AcqRel);
                reload(&mut topology, &paths, "signal", &registry).await;
            }
            _ = sigusr1.recv() => {
                tracing::info!("SIGUSR1: reopening output files.");
                reopen.fetch_add(1, Ordering::AcqRel);
            }
            Some(answer) = reload_rx.recv() => {
                let outcome = reload(&mut topology, &paths, "api", &registry).await;
                let _ = answer.send(outcome);
            }
            () = changed => {
                reload(&mut topology, &paths, "watch", &registry).await;
            }
        }
        if let Some(w) = watcher.as_mut() {
            w.set_files(watched_files(topology.config(), &paths));
        }
    }
    crate::systemd::notify("STOPPING=1");
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
