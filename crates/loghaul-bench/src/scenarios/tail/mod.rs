//! `tail`: one file of numbered lines, written before the subject starts, tailed from its
//! beginning into a JSON-lines file: what reading costs ([`run`]). There is no port: the subject
//! reads the file the lab wrote before starting it ([`prepare_tail`]), and its clock starts when
//! the process does.

pub mod run;

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use super::{Scenario, variant_reason};
use crate::payload::{Format, Framing};
use crate::report::RunRecord;
use crate::runner::{self, Driver, Plan};
use crate::subjects::{
    Input, Peers, SubjectKind, free_port, otelcol, write_bare_conf, write_config,
};

/// A file read from its beginning.
pub struct Tail;

/// The scenario's name (the bare loop's `--scenario`).
const NAME: &str = "tail";

impl Scenario for Tail {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "One file of numbered lines, written before the subject starts, tailed from its beginning \
         into a JSON-lines file: what reading costs"
    }

    /// 5M lines of about 100 bytes: a 506MB file read into 1.1GB of JSON, 0.5–1s of loghaul.
    fn default_events(&self) -> u64 {
        5_000_000
    }

    /// A tailed line: a typical application log line.
    fn default_message_size(&self) -> usize {
        100
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        None
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul, SubjectKind::Bare, SubjectKind::Otelcol]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        if let Some(why) = variant_reason(kind) {
            return why;
        }
        if kind.is_http_peer() {
            return "n/a: a peer of the HTTP experiments only";
        }
        "n/a: not configured to tail a file (yet): loghaul, the bare loop and the Collector only"
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        if plan.driver == Driver::Loggen {
            bail!(
                "`tail` reads a file the lab writes before the subject starts: no generator runs"
            );
        }
        Ok(())
    }

    fn platform(&self, kind: SubjectKind, peers: &Peers, loghaul: &Path) -> String {
        if kind == SubjectKind::Bare {
            run::bare_platform(peers, loghaul)
        } else {
            peers.platform(kind, loghaul)
        }
    }

    /// The runner's rounds, each subject reading the one input written before the first.
    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        let work = runner::work_dir(plan)?;
        runner::announce(plan, &format!("{} lines in one file", plan.events));
        // The one input, written (and on disk) before any subject runs: the runs read it.
        let input = match run::write_input(plan, &work) {
            Ok(input) => input,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&work);
                return Err(e);
            }
        };
        runner::run_rounds(
            plan,
            peers,
            &work,
            &|kind, dir, label| run::run_one(plan, kind, peers, dir, &input.path, label),
            &|records: &[RunRecord], names: &[String]| run::notes(plan, &input, records, names),
        )
    }
}

/// How to start one subject of `tail` (see [`run`]). There is no port and no readiness
/// probe: the subject starts reading as soon as it runs, and its clock starts with the process.
#[derive(Clone, Debug)]
pub struct TailLaunch {
    /// Program to execute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The JSON-lines file it writes.
    pub output: PathBuf,
    /// Whether it writes many events to a line (the Collector: see `subjects::Output::Records`).
    pub records: bool,
}

/// Writes `kind`'s config for `tail` into `dir`: the subject reads `input` from its beginning
/// and writes JSON lines to `dir/out.log`. Returns how to start it.
///
/// # Errors
/// The subject does not do `tail`, its config cannot be written, or its program is missing.
pub fn prepare_tail(
    kind: SubjectKind,
    dir: &Path,
    input: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<TailLaunch> {
    let s = |p: &Path| p.display().to_string();
    let out = dir.join("out.log");
    let write = |name: &str, text: &str| write_config(dir, name, text);
    match kind {
        SubjectKind::Loghaul => {
            let program = peers.program(kind, loghaul)?;
            let api = free_port()?;
            let conf = write(
                "loghaul.yaml",
                &tail_config(&s(input), &s(&dir.join("state")), api, &s(&out)),
            )?;
            Ok(TailLaunch {
                program,
                args: vec!["run".into(), "-c".into(), s(&conf)],
                output: out,
                records: false,
            })
        }
        SubjectKind::Otelcol => {
            if let Some(why) = peers.unavailable(kind) {
                bail!("{why}");
            }
            let program = peers.program(kind, loghaul)?;
            let conf = write(
                "otelcol.yaml",
                &otelcol::tail_config(NAME, &s(input), &s(&out)),
            )?;
            Ok(TailLaunch {
                program,
                args: vec!["--config".into(), s(&conf)],
                output: out,
                records: true,
            })
        }
        SubjectKind::Bare => {
            let program = peers.program(kind, loghaul)?;
            let args: Vec<String> = vec![
                "bench".into(),
                "bare".into(),
                "--scenario".into(),
                NAME.into(),
                "--input".into(),
                s(input),
                "--out".into(),
                s(&out),
            ];
            // It has no config: its command line goes with loghaul's config.
            write_bare_conf(dir, &args)?;
            Ok(TailLaunch {
                program,
                args,
                output: out,
                records: false,
            })
        }
        other => bail!("{}", Tail.unsupported(other)),
    }
}

/// loghaul in `tail`: a `file` source reading `input` from its beginning into a `file` sink
/// writing JSON lines, both on their defaults (acknowledgements on: the source's checkpoint
/// moves once the sink wrote). Its checkpoints go to `state`, a folder of the run, so every run
/// starts without one and reads the whole file.
pub fn tail_config(input: &str, state: &str, api: u16, out: &str) -> String {
    format!(
        "# loghaul bench: scenario tail: one file read from its beginning, a JSON-lines file out\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in:\n    \
             type: file\n    \
             include: [\"{input}\"]\n    \
             read_from: beginning\n    \
             data_dir: \"{state}\"\n\
         sinks:\n  \
           out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json }}\n"
    )
}
