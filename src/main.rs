//! The `loghaul` binary: parses the command line and calls the library ([`loghaul::server`],
//! the buffer and bench crates); the allocator and its options are chosen here.

mod cli;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use loghaul::{config, server};

use cli::{BufferCommand, Cli, Command, ConfigCommand, DlqCommand, GenerateCommand};

/// jemalloc for Rust and, through its unprefixed `malloc`, for librdkafka: its per-thread caches
/// take a block freed on another thread than the one that allocated it without a lock, where
/// glibc's arenas serialize both threads (the kafka source's reader waited on that lock for
/// most of its idle time).
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (the `MALLOC_CONF` variable still overrides them): a
/// freed page goes back to the system within a second instead of ten. Under a churn of large
/// request bodies the ten seconds kept RSS some 50 MiB above what the memory budget holds; the
/// syslog benchmark's rate did not move (1.018 of the default's, same run). jemalloc's
/// background purging thread would do it off the hot threads, but cost 7% of that rate on two
/// cores.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code)]
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(c"dirty_decay_ms:1000".as_ptr());

/// jemalloc reads `malloc_conf` as a C `const char *`.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a static, immutable C string.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run { .. }) {
        loghaul::logging::quiet_broken_pipe();
    }
    loghaul::logging::init(
        cli.verbose,
        cli.quiet,
        cli.log_format == cli::LogFormat::Json,
    );
    let result = match cli.command {
        Command::Run {
            config,
            config_dir,
            watch_config,
        } => server::run(
            server::ConfigPaths {
                files: config,
                dir: config_dir,
            },
            watch_config,
        ),
        Command::Validate {
            config,
            config_dir,
            paths,
            check,
        } => {
            let files = if paths.is_empty() { config } else { paths };
            if files.is_empty() && config_dir.is_none() {
                eprintln!(
                    "error: no configuration to validate: give its path, -c PATH, --config-dir DIR, or LOGHAUL_CONFIG"
                );
                return ExitCode::from(2);
            }
            return server::validate(
                &server::ConfigPaths {
                    files,
                    dir: config_dir,
                },
                check,
            );
        }
        Command::Test { config, files } => return loghaul::unit_test::command(&config, &files),
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            print!("{}", config::DEFAULT_YAML);
            Ok(())
        }
        Command::Dlq {
            command: DlqCommand::Stats { config },
        } => server::dlq_stats(config.as_deref()),
        Command::Dlq {
            command: DlqCommand::Replay { sink, config },
        } => server::dlq_replay(&sink, config.as_deref()),
        Command::Buffer {
            command: BufferCommand::Inspect { path },
        } => loghaul_buffer::inspect(&loghaul_buffer::RealFs, &path)
            .map(|report| print!("{report}"))
            .with_context(|| format!("cannot inspect {}", path.display())),
        Command::Bench { command } => loghaul_bench::cli::run(command),
        Command::Generate { what } => generate(what),
        Command::Top { api } => loghaul::top::run(&api.into()),
        Command::Tap(args) => loghaul::tap_client::run(&args.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `loghaul generate`: the man pages or a completion script, from the command line's own
/// definition (so they never disagree with `--help`).
fn generate(what: GenerateCommand) -> anyhow::Result<()> {
    use clap::CommandFactory as _;
    match what {
        GenerateCommand::Man { dir } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))
        }
        GenerateCommand::Completions { shell, dir } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let path = clap_complete::generate_to(shell, &mut Cli::command(), "loghaul", &dir)
                .with_context(|| format!("cannot write the completions into {}", dir.display()))?;
            println!("{}", path.display());
            Ok(())
        }
    }
}
