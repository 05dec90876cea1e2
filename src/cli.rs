//! Command-line interface: `run`, `validate`, `config default`, `dlq`, `buffer`, `bench`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  loghaul run                          # syslog on 127.0.0.1:5514 (TCP+UDP) -> ./loghaul-data/
  loghaul config default > loghaul.yaml
  loghaul validate -c loghaul.yaml
  loghaul run -c loghaul.yaml -v
  loghaul dlq stats -c loghaul.yaml
  loghaul dlq replay --sink out -c loghaul.yaml
  loghaul buffer inspect ./loghaul-data/buffers/out
  logger --server 127.0.0.1 --port 5514 --tcp \"hello\"
  loghaul bench run syslog --subjects loghaul,rsyslog --runs 3";

/// A log ingestion and forwarding server: syslog in, JSON lines out, without losing an event.
#[derive(Parser, Debug)]
#[command(name = "loghaul", version, about, after_help = EXAMPLES)]
pub struct Cli {
    /// More of loghaul's own logging (-v debug, -vv trace); LOGHAUL_LOG overrides (e.g. `info,loghaul=debug`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size of the bench variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the pipeline (the embedded default configuration when no -c is given).
    Run {
        /// Configuration file (.yaml/.yml, .toml or .json).
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Check a configuration: exit 0 when valid, otherwise print every error with its location.
    Validate {
        /// Configuration file (.yaml/.yml, .toml or .json).
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Print configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Dead letters: events sinks could never deliver.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Disk buffers.
    Buffer {
        #[command(subcommand)]
        command: BufferCommand,
    },
    /// The benchmark lab: load generator, meter and scenarios against peers.
    Bench {
        #[command(subcommand)]
        command: loghaul_bench::cli::BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum DlqCommand {
    /// Count the dead letters of every sink, by reason.
    Stats {
        /// Configuration file (its `data_dir` holds `dlq/`); the embedded default without it.
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Send a sink's dead letters again (once the cause is fixed); what fails again stays.
    Replay {
        /// The sink's id.
        #[arg(long)]
        sink: String,
        /// Configuration file; the embedded default without it.
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum BufferCommand {
    /// Show a disk buffer's segments, records, cursor and damage (read-only).
    Inspect {
        /// The buffer's directory (`<data_dir>/buffers/<sink>`).
        path: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the embedded default configuration (what `loghaul run` without -c uses).
    Default,
}
