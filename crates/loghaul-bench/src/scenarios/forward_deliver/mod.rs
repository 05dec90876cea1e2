//! `forward_deliver`: Fluentd's peer-deliver tree, tailing agents (file source → fluent sink) →
//! delivers (fluent → fluent) → receivers (fluent → JSON-lines file), driven by rate steps
//! ([`run`]); the subject is the whole tree, and the report a row per step ([`report`]).

pub mod report;
pub mod run;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{Scenario, forward, variant_reason};
use crate::payload::{Format, Framing};
use crate::runner::Plan;
use crate::subjects::{
    self, Companion, Input, Peers, Ready, Setup, SubjectKind, fluentd, free_port,
};

/// The tree of processes, climbed one rate step at a time.
pub struct ForwardDeliver;

/// The scenario's name, in its configs' first lines.
const NAME: &str = "forward_deliver";

impl Scenario for ForwardDeliver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn about(&self) -> &'static str {
        "Fluentd's peer-deliver tree: tailing agents (file source → fluent sink) → delivers \
         (fluent → fluent) → receivers (fluent → JSON-lines file), driven by rate steps; the \
         subject is the whole tree"
    }

    /// Its load is rate × step duration per agent, not a count ([`run`]).
    fn default_events(&self) -> u64 {
        0
    }

    /// About the published peer-deliver run's dummer lines (LTSV: id, time, level, method, uri,
    /// status, ...).
    fn default_message_size(&self) -> usize {
        128
    }

    fn payload(&self) -> (Format, Framing) {
        (Format::Raw, Framing::Newline)
    }

    fn input(&self) -> Option<Input> {
        None
    }

    fn subjects(&self) -> &'static [SubjectKind] {
        &[SubjectKind::Loghaul, SubjectKind::Fluentd]
    }

    fn unsupported(&self, kind: SubjectKind) -> &'static str {
        if let Some(why) = variant_reason(kind) {
            return why;
        }
        if kind.is_http_peer() {
            return "n/a: a peer of the HTTP experiments only";
        }
        if kind == SubjectKind::Bare {
            return "n/a: no bare tree: the bare loop is one receiving process";
        }
        "n/a: no file-tailing agent speaking the forward protocol (loghaul and fluentd only)"
    }

    fn rounds(
        &self,
        runs: Option<usize>,
        warmup: Option<usize>,
        events: Option<u64>,
    ) -> (usize, usize) {
        if runs.is_some() || warmup.is_some() || events.is_some() {
            // Said, not refused: bench/run-all.sh passes its extra options to every scenario.
            eprintln!(
                "forward_deliver climbs its rate steps once per subject, with no warm-up round, \
                 and writes rate × --step-duration lines per step: --runs, --warmup and --events \
                 do not apply and are ignored"
            );
        }
        (1, 0)
    }

    fn check(&self, plan: &Plan) -> Result<()> {
        forward::check_generator(plan)
    }

    fn run(&self, plan: &Plan, peers: &Peers) -> Result<String> {
        run::run(plan, peers)
    }
}

/// The shape of `forward_deliver`'s tree: processes per tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TreeShape {
    /// Tailing agents, each with its own log file.
    pub agents: usize,
    /// Delivers (aggregators) between the agents and the receivers.
    pub delivers: usize,
    /// Receivers, each writing its own output file.
    pub receivers: usize,
}

impl std::fmt::Display for TreeShape {
    /// `10 agents → 2 delivers → 1 receiver`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |count: usize, what: &str| {
            format!("{count} {what}{}", if count == 1 { "" } else { "s" })
        };
        write!(
            f,
            "{} → {} → {}",
            n(self.agents, "agent"),
            n(self.delivers, "deliver"),
            n(self.receivers, "receiver")
        )
    }
}

/// How to start `forward_deliver`'s tree (see [`run`]): the processes of each tier,
/// to be started receivers first (each tier connects to the one after it) and stopped agents
/// first (each drains into the one after it).
#[derive(Clone, Debug)]
pub struct TreeLaunch {
    /// Receivers: forward in, a JSON-lines file out. Their `port` is the forward port.
    pub receivers: Vec<Companion>,
    /// Delivers: forward in, forward out to every receiver.
    pub delivers: Vec<Companion>,
    /// Agents: a file tailed, forward out to every deliver. They listen on no input: their
    /// `port` is the one their readiness is probed on (loghaul's API, fluentd's monitor_agent).
    pub agents: Vec<Companion>,
    /// The file each agent tails and its generator appends to, by agent.
    pub agent_files: Vec<PathBuf>,
    /// The file each receiver writes, by receiver.
    pub outputs: Vec<PathBuf>,
}

/// `ports` starting at the `i`-th (modulo its length): the order one process of a tier lists the
/// next tier's servers in, so that whatever a sink does with the first server of its list, the
/// processes of a tier do not all do it to the same one.
fn rotated(ports: &[u16], i: usize) -> Vec<u16> {
    let k = i % ports.len().max(1);
    ports[k..].iter().chain(&ports[..k]).copied().collect()
}

/// Writes the configs of `kind`'s `forward_deliver` tree into `dir` and returns how to start it.
///
/// # Errors
/// A config cannot be written, a tier is empty, or the program is missing.
pub fn prepare_tree(
    kind: SubjectKind,
    shape: TreeShape,
    dir: &Path,
    peers: &Peers,
    loghaul: &Path,
) -> Result<TreeLaunch> {
    if shape.agents == 0 || shape.delivers == 0 || shape.receivers == 0 {
        bail!("every tier needs at least one process: {shape:?}");
    }
    let program = peers.program(kind, loghaul)?;
    let s = |p: &Path| p.display().to_string();
    let write = |name: &str, text: &str| subjects::write_config(dir, name, text);
    let state = dir.join("state");
    std::fs::create_dir_all(&state).context("creating the agents' state folder")?;
    let ports = |n: usize| (0..n).map(|_| free_port()).collect::<Result<Vec<u16>>>();
    let (receiver_ports, deliver_ports, agent_ports) = (
        ports(shape.receivers)?,
        ports(shape.delivers)?,
        ports(shape.agents)?,
    );
    let agent_files: Vec<PathBuf> = (0..shape.agents)
        .map(|i| dir.join(format!("agent-{i}.log")))
        .collect();
    let mut launch = TreeLaunch {
        receivers: Vec::new(),
        delivers: Vec::new(),
        agents: Vec::new(),
        agent_files: agent_files.clone(),
        outputs: Vec::new(),
    };
    let process = |name: String, conf: &Path, port: u16, ready: Ready| -> Companion {
        let args = if kind == SubjectKind::Fluentd {
            let words = peers.fluentd.clone().unwrap_or_default();
            let mut args: Vec<String> = words.into_iter().skip(1).collect();
            args.extend(["-c".into(), s(conf), "--no-supervisor".into()]);
            args
        } else {
            vec!["run".into(), "-c".into(), s(conf)]
        };
        Companion {
            name,
            program: program.clone(),
            args,
            port,
            ready,
        }
    };
    let receiver = Setup {
        role: "; a receiver: the delivers' requests in, a JSON-lines file out",
        ..Setup::new(NAME, Input::Forward)
    };
    match kind {
        SubjectKind::Loghaul => {
            for (r, &port) in receiver_ports.iter().enumerate() {
                let (api, out) = (free_port()?, dir.join(format!("out-{r}.log")));
                let conf = write(
                    &format!("receiver-{r}.yaml"),
                    &subjects::loghaul::config(&receiver, port, api, &s(&out)),
                )?;
                launch.receivers.push(process(
                    format!("receiver-{r}"),
                    &conf,
                    port,
                    Ready::Health(api),
                ));
                launch.outputs.push(out);
            }
            for (d, &port) in deliver_ports.iter().enumerate() {
                let api = free_port()?;
                let conf = write(
                    &format!("deliver-{d}.yaml"),
                    &deliver_config(d, port, api, &rotated(&receiver_ports, d)),
                )?;
                launch.delivers.push(process(
                    format!("deliver-{d}"),
                    &conf,
                    port,
                    Ready::Health(api),
                ));
            }
            for (i, &api) in agent_ports.iter().enumerate() {
                let conf = write(
                    &format!("agent-{i}.yaml"),
                    &agent_config(
                        i,
                        &s(&agent_files[i]),
                        &s(&state.join(format!("agent-{i}"))),
                        api,
                        &rotated(&deliver_ports, i),
                    ),
                )?;
                launch.agents.push(process(
                    format!("agent-{i}"),
                    &conf,
                    api,
                    Ready::Health(api),
                ));
            }
        }
        SubjectKind::Fluentd => {
            for (r, &port) in receiver_ports.iter().enumerate() {
                let out_dir = dir.join(format!("receiver-{r}"));
                std::fs::create_dir_all(&out_dir).context("creating a receiver's folder")?;
                let conf = write(
                    &format!("receiver-{r}.conf"),
                    &fluentd::receiver(
                        &format!("scenario {NAME}; receiver {r}"),
                        port,
                        &s(&out_dir),
                        // A line waits for no timer: the tree's delay is what is measured.
                        fluentd::Flush::Immediate,
                    ),
                )?;
                launch.receivers.push(process(
                    format!("receiver-{r}"),
                    &conf,
                    port,
                    Ready::Connect,
                ));
                launch
                    .outputs
                    .push(out_dir.join(format!("out.{}.log", crate::fluent::DEFAULT_TAG)));
            }
            for (d, &port) in deliver_ports.iter().enumerate() {
                let conf = write(
                    &format!("deliver-{d}.conf"),
                    &fluentd::deliver(NAME, d, port, &rotated(&receiver_ports, d)),
                )?;
                launch
                    .delivers
                    .push(process(format!("deliver-{d}"), &conf, port, Ready::Connect));
            }
            for (i, &monitor) in agent_ports.iter().enumerate() {
                let conf = write(
                    &format!("agent-{i}.conf"),
                    &fluentd::agent(
                        NAME,
                        i,
                        &s(&agent_files[i]),
                        &s(&state.join(format!("agent-{i}.pos"))),
                        crate::fluent::DEFAULT_TAG,
                        monitor,
                        &rotated(&deliver_ports, i),
                    ),
                )?;
                launch.agents.push(process(
                    format!("agent-{i}"),
                    &conf,
                    monitor,
                    Ready::Connect,
                ));
            }
        }
        other => bail!("{}", ForwardDeliver.unsupported(other)),
    }
    Ok(launch)
}

/// `[{ address: "127.0.0.1:P" }, ...]`: a `fluent` sink's `servers`.
fn loghaul_servers(ports: &[u16]) -> String {
    let servers: Vec<String> = ports
        .iter()
        .map(|p| format!("{{ address: \"127.0.0.1:{p}\" }}"))
        .collect();
    format!("[{}]", servers.join(", "))
}

/// loghaul agent `i` of `forward_deliver`: a `file` source tailing `file` (and what it is rotated
/// to, `file.1`) from the beginning, its checkpoints in `state`, into a `fluent` sink to every
/// deliver (round robin, acks required: the defaults). The file source's timing options are its
/// defaults, written out so the config shows them.
pub fn agent_config(i: usize, file: &str, state: &str, api: u16, delivers: &[u16]) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; agent {i}: tails its own file, forwards to \
         the delivers\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           tail:\n    \
             type: file\n    \
             include: [\"{file}*\"]\n    \
             read_from: beginning\n    \
             data_dir: \"{state}\"\n    \
             checkpoint_interval: 1s\n    \
             glob_interval: 1s\n    \
             rotate_wait: 5s\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [tail], servers: {servers} }}\n",
        servers = loghaul_servers(delivers),
    )
}

/// loghaul deliver `d` of `forward_deliver`: a `fluent` source into a `fluent` sink to every
/// receiver (round robin, acks required), on their defaults: as `forward_relay`'s A.
pub fn deliver_config(d: usize, port: u16, api: u16, receivers: &[u16]) -> String {
    format!(
        "# loghaul bench: scenario forward_deliver; deliver {d}: the agents' requests in, \
         forwarded to the receivers\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         sources:\n  \
           in: {{ type: fluent, address: \"127.0.0.1:{port}\" }}\n\
         sinks:\n  \
           out: {{ type: fluent, inputs: [in], servers: {servers} }}\n",
        servers = loghaul_servers(receivers),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn peers() -> Peers {
        let me = std::env::current_exe().unwrap().display().to_string();
        Peers {
            fluentd: Some(vec![me, "wrapped".into()]),
            ..Peers::locate()
        }
    }

    fn port_of(c: &Companion) -> String {
        format!("127.0.0.1:{}", c.port)
    }

    #[test]
    fn loghaul_tree_chains_the_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let shape = TreeShape {
            agents: 3,
            delivers: 2,
            receivers: 2,
        };
        let me = std::env::current_exe().unwrap();
        let t = prepare_tree(SubjectKind::Loghaul, shape, dir.path(), &peers(), &me).unwrap();
        assert_eq!(
            (t.agents.len(), t.delivers.len(), t.receivers.len()),
            (3, 2, 2)
        );
        assert_eq!((t.agent_files.len(), t.outputs.len()), (3, 2));
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        // Receivers write their own files; delivers list every receiver, each from another one.
        for r in 0..2 {
            let conf = read(&format!("receiver-{r}.yaml"));
            assert!(conf.contains("type: fluent"), "{conf}");
            assert!(conf.contains(&port_of(&t.receivers[r])), "{conf}");
            assert!(
                conf.contains(&format!("path: \"{}\"", t.outputs[r].display())),
                "{conf}"
            );
        }
        // Every address of a config, in order: the API's first.
        let addresses = |conf: &str| -> Vec<String> {
            conf.split("address: \"")
                .skip(1)
                .map(|s| s.split('"').next().unwrap().to_string())
                .collect()
        };
        let d1 = read("deliver-1.yaml");
        assert_eq!(
            addresses(&d1)[1..],
            [
                port_of(&t.delivers[1]),
                port_of(&t.receivers[1]),
                port_of(&t.receivers[0])
            ]
        );
        for (i, first) in [(0, 0), (1, 1), (2, 0)] {
            let conf = read(&format!("agent-{i}.yaml"));
            assert!(conf.contains("type: file"), "{conf}");
            assert!(
                conf.contains(&format!("include: [\"{}*\"]", t.agent_files[i].display())),
                "{conf}"
            );
            assert!(conf.contains(&format!("state/agent-{i}\"")), "{conf}");
            assert!(conf.contains("read_from: beginning"), "{conf}");
            // The API's address comes first, then the delivers, starting at agent i's share.
            let all = addresses(&conf);
            assert_eq!(
                all[0],
                port_of(&t.agents[i]),
                "readiness is probed on the API"
            );
            assert_eq!(all[1], port_of(&t.delivers[first]), "{conf}");
            assert_eq!(all.len(), 3, "{conf}");
        }
        assert!(matches!(t.agents[0].ready, Ready::Health(p) if p == t.agents[0].port));
        assert_eq!(
            t.agents[2].args,
            [
                "run",
                "-c",
                &*dir.path().join("agent-2.yaml").display().to_string()
            ]
        );
    }

    #[test]
    fn fluentd_tree_chains_the_tiers() {
        let dir = tempfile::tempdir().unwrap();
        let shape = TreeShape {
            agents: 2,
            delivers: 1,
            receivers: 2,
        };
        let me = std::env::current_exe().unwrap();
        let t = prepare_tree(SubjectKind::Fluentd, shape, dir.path(), &peers(), &me).unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let agent = read("agent-1.conf");
        for want in [
            "@type tail".to_string(),
            format!("path {}\n", t.agent_files[1].display()),
            "read_from_head true".into(),
            "@type none".into(),
            "@type monitor_agent".into(),
            format!("port {}\n", t.agents[1].port),
            "require_ack_response true".into(),
            format!("port {}\n", t.delivers[0].port),
            "overflow_action block".into(),
        ] {
            assert!(agent.contains(&want), "{want:?} in {agent}");
        }
        let deliver = read("deliver-0.conf");
        assert!(deliver.contains(&format!("port {}\n", t.delivers[0].port)));
        let first = deliver
            .find(&format!("port {}\n", t.receivers[0].port))
            .unwrap();
        let second = deliver
            .find(&format!("port {}\n", t.receivers[1].port))
            .unwrap();
        assert!(first < second, "{deliver}");
        let receiver = read("receiver-1.conf");
        assert!(receiver.contains("@type file") && receiver.contains("@type json"));
        assert!(receiver.contains("flush_mode immediate"), "{receiver}");
        assert_eq!(
            t.outputs[1],
            dir.path().join("receiver-1").join("out.bench.gen.log")
        );
        assert_eq!(t.agents[0].args[0], "wrapped");
        assert_eq!(
            &t.agents[0].args[2..],
            [
                &*dir.path().join("agent-0.conf").display().to_string(),
                "--no-supervisor"
            ]
        );
        assert!(matches!(t.receivers[0].ready, Ready::Connect));
    }
}
