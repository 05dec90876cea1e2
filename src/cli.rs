//! Command-line interface: `run`, `validate`, `test`, `top`, `tap`, `config default`, `dlq`,
//! `buffer`, `bench`, and the hidden `generate` the package build uses.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  loghaul run                          # syslog on 127.0.0.1:5514 (TCP+UDP) -> ./loghaul-data/
  loghaul config default > loghaul.yaml
  loghaul validate -c loghaul.yaml
  loghaul test -c loghaul.yaml tests/*.yaml
  loghaul run -c loghaul.yaml -v
  loghaul dlq stats -c loghaul.yaml
  loghaul dlq replay --sink out -c loghaul.yaml
  loghaul buffer inspect ./loghaul-data/buffers/out
  logger --server 127.0.0.1 --port 5514 --tcp \"hello\"
  loghaul bench run syslog --subjects loghaul,rsyslog --runs 3";

const TEST_HELP: &str = "\
Tests run the configuration's transforms (not its sources' sockets, nor its sinks) on the
events they insert, and check what comes out: exit 0 when every test passed, 1 when one
failed, 2 when the configuration or a tests file is invalid (or holds no test).

Example (in the configuration, or in a file given after it that holds `tests:` only):

  tests:
    - name: parses the status
      inputs:
        - insert_at: parse                  # a transform: the event by its fields
          type: log
          log_fields: { message: \"status=404\", hostname: web1 }
      outputs:
        - extract_from: parse
          conditions:
            - type: vrl
              source: |
                assert!(exists(.status))
                assert_eq!(.status, 404)
    - name: a 503 over syslog is an error
      inputs:
        - insert_at: syslog_in              # a source: bytes its decoder reads
          type: raw
          value: \"<11>Oct 11 22:14:15 host app: status=503\"
      outputs:
        - extract_from: by_level.errors     # a named output (a route's route)
          conditions:
            - type: vrl
              source: 'assert_eq!(.appname, \"app\")'
      no_outputs_from: [by_level._unmatched]

Output: `test NAME ... passed` or `... failed`, then for each failure the assertion that
failed (for assert_eq!, both sides' values) and the event that came out, as JSON.
See docs/configuration.md, \"Unit tests\".";

/// `--version`: the version, the commit and the target it was built for.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LOGHAUL_BUILD"), ")");

/// A log ingestion and forwarding server: syslog in, JSON lines out, without losing an event.
#[derive(Parser, Debug)]
#[command(name = "loghaul", version = VERSION, about, after_help = EXAMPLES)]
pub struct Cli {
    /// More of loghaul's own logging (-v debug, -vv trace); LOGHAUL_LOG overrides (e.g. `info,loghaul=debug`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Less of loghaul's own logging (-q warnings and errors only, -qq errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub quiet: u8,

    /// How loghaul's own log lines are written on stderr: `text` (colored on a terminal) or
    /// `json` (one object per line, for a log collector).
    #[arg(long, value_enum, env = "LOGHAUL_LOG_FORMAT", default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size of the bench variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the pipeline (the embedded default configuration when no -c is given). SIGHUP,
    /// `POST /reload` on the API, or a change of a watched file reloads the configuration.
    Run {
        /// Configuration file (.yaml/.yml, .toml or .json); several merge (the components of
        /// all, each global setting from one).
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: Vec<PathBuf>,
        /// A folder of configuration files, read in name order after the -c ones.
        #[arg(long, env = "LOGHAUL_CONFIG_DIR")]
        config_dir: Option<PathBuf>,
        /// Reload when the configuration file, or a file it names (a VRL program), changes.
        #[arg(long, env = "LOGHAUL_WATCH_CONFIG", value_parser = clap::builder::BoolishValueParser::new())]
        watch_config: bool,
    },
    /// Check a configuration: exit 0 when valid, otherwise print every error with its location.
    Validate {
        /// Configuration file (.yaml/.yml, .toml or .json), as `run` takes it; several merge.
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: Vec<PathBuf>,
        /// A folder of configuration files, as `run` takes it.
        #[arg(long, env = "LOGHAUL_CONFIG_DIR")]
        config_dir: Option<PathBuf>,
        /// Configuration files given without -c (they win over LOGHAUL_CONFIG).
        paths: Vec<PathBuf>,
        /// Also try what the sinks need: their directories writable, their servers reachable.
        #[arg(long)]
        check: bool,
    },
    /// Run the configuration's unit tests: insert events at sources or transforms, run the
    /// transforms, check what comes out with VRL assertions.
    #[command(after_help = TEST_HELP)]
    Test {
        /// Configuration file (.yaml/.yml, .toml or .json); its `tests:` run too.
        #[arg(short, long, env = "LOGHAUL_CONFIG")]
        config: PathBuf,
        /// Files holding more tests (a `tests:` list and nothing else), checked against the
        /// configuration's components.
        files: Vec<PathBuf>,
    },
    /// Print configuration helpers.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// A live view of a running server in the terminal: rates, errors, drops, buffers and
    /// health per component (through its API). `q` quits.
    Top {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Live events from a running server's outputs, through its API (sampled: the pipeline
    /// never waits for a viewer; what is skipped is counted and shown).
    Tap(TapArgs),
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
    /// Files the package ships, made from this command line: the man pages, shell completions.
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        what: GenerateCommand,
    },
    /// The benchmark lab: load generator, meter and scenarios against peers.
    Bench {
        #[command(subcommand)]
        command: loghaul_bench::cli::BenchCommand,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// How to reach a running server's API.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiArgs {
    /// The API's URL; by default the `api.address` of the configuration (-c), else
    /// http://127.0.0.1:8686.
    #[arg(long, env = "LOGHAUL_API")]
    pub api: Option<String>,
    /// The API's bearer token; by default the configuration's `api.token`.
    #[arg(long, env = "LOGHAUL_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The running server's configuration file, for its API's address and token.
    #[arg(short, long, env = "LOGHAUL_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct TapArgs {
    /// Outputs to watch: `ID` (a source or transform, all its outputs), `ID.OUTPUT`, or a glob
    /// (`syslog_*`). Every output when none is given.
    pub outputs: Vec<String>,
    /// Only events for which this VRL condition holds (e.g. `.severity == "err"`).
    #[arg(long)]
    pub condition: Option<String>,
    /// Stop after this many events.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Events a second at most (`100` or `100/s`).
    #[arg(long, default_value = "100/s")]
    pub rate: String,
    /// How events are printed.
    #[arg(long, value_enum, default_value_t = loghaul::tap_client::Format::Json)]
    pub format: loghaul::tap_client::Format,
    #[command(flatten)]
    pub api: ApiArgs,
}

impl From<ApiArgs> for loghaul::tap_client::Api {
    fn from(a: ApiArgs) -> Self {
        loghaul::tap_client::Api {
            url: a.api,
            token: a.token,
            config: a.config,
        }
    }
}

impl From<TapArgs> for loghaul::tap_client::Request {
    fn from(a: TapArgs) -> Self {
        loghaul::tap_client::Request {
            outputs: a.outputs,
            condition: a.condition,
            limit: a.limit,
            rate: a.rate,
            format: a.format,
            api: a.api.into(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum GenerateCommand {
    /// `loghaul.1` and a page per subcommand (`loghaul-run.1`...) into DIR.
    Man { dir: PathBuf },
    /// The completion script for SHELL into DIR.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
        dir: PathBuf,
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
