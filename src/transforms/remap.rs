//! The `remap` transform: a Vector Remap Language program run on every event, as Vector runs
//! it (`drop_on_error`, `drop_on_abort`, `reroute_dropped` and its `dropped` output).
//!
//! The output batch is built from the program's results ([`super::vrl::convert::Builder`]) and
//! carries the input's finalizer, so acknowledgements wait for the sinks of the new batch.
//! Events the program drops on purpose count as `discarded{reason="program_dropped"}` and are
//! settled as delivered (the user's intent); each failure is counted in
//! `component_errors_total{kind="program"}` and logged, rate-limited, with the error.

use std::sync::Arc;

use loghaul_config::{ComponentConfig, Validator};
use loghaul_core::{BatchStatus, Event, EventBatch};
use serde::Deserialize;
use vrl::value::{ObjectMap, Value as Vrl};

use super::vrl::convert::{Builder, to_vrl};
use super::vrl::{Expect, Outcome, Program, Runner, fast};
use super::{BuildTransform, TransformContext, send_on};
use crate::metrics::{ComponentMetrics, DiscardReason, ErrorKind, Health};
use crate::pipeline::{BoxFuture, Fanout};

/// `type: remap`, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRemap {
    /// The program, inline.
    #[serde(default)]
    pub source: Option<String>,
    /// A file holding the program.
    #[serde(default)]
    pub file: Option<String>,
    /// Files whose programs run one after the other (their texts joined in order).
    #[serde(default)]
    pub files: Option<Vec<String>>,
    /// Drop an event on which the program fails (default: pass it on unchanged).
    #[serde(default)]
    pub drop_on_error: Option<bool>,
    /// Drop an event on which the program runs `abort` (default: true).
    #[serde(default)]
    pub drop_on_abort: Option<bool>,
    /// Send dropped events to the `dropped` output, with a `dropped` field saying why,
    /// instead of discarding them.
    #[serde(default)]
    pub reroute_dropped: Option<bool>,
    /// The time zone of functions given no time zone: `local` (default) or an IANA name.
    #[serde(default)]
    pub timezone: Option<String>,
    /// Run the program on the fast path when all of it is in its subset (default); `false`
    /// runs it on the VRL runtime whatever it holds.
    #[serde(default)]
    pub fast_path: Option<bool>,
}

/// A remap transform.
#[derive(Clone, Debug, PartialEq)]
pub struct RemapConfig {
    pub program: Program,
    /// The files the program was read from (`file`, `files`).
    pub files: Vec<std::path::PathBuf>,
    pub drop_on_error: bool,
    pub drop_on_abort: bool,
    pub reroute_dropped: bool,
    pub timezone: Option<String>,
    pub fast_path: bool,
}

impl ComponentConfig for RemapConfig {
    const TYPE: &'static str = "remap";
    type Raw = RawRemap;

    fn validate(r: RawRemap, cx: &mut Validator<'_, '_>) -> Option<RemapConfig> {
        let given = [r.source.is_some(), r.file.is_some(), r.files.is_some()];
        let (source, key): (String, &str) = match (&r.source, &r.file, &r.files) {
            _ if given.iter().filter(|g| **g).count() > 1 => {
                cx.error_at_key(
                    &[],
                    "`source`, `file` and `files` exclude each other",
                    Some("give the program one way".to_owned()),
                );
                return None;
            }
            (Some(source), _, _) => (source.clone(), "source"),
            (_, Some(file), _) => (read_program(file, cx, &["file"])?, "file"),
            (_, _, Some(files)) => {
                if files.is_empty() {
                    cx.error(&["files"], "`files: []` holds no program", None);
                    return None;
                }
                let mut text = String::new();
                for (i, file) in files.iter().enumerate() {
                    text.push_str(&read_program(file, cx, &["files", &i.to_string()])?);
                    text.push('\n');
                }
                (text, "files")
            }
            _ => {
                cx.error_at_key(
                    &[],
                    "`type: remap` needs a program",
                    Some(
                        "add `source: |` with the program, or `file: path/to/program.vrl`"
                            .to_owned(),
                    ),
                );
                return None;
            }
        };
        let timezone_ok = match super::vrl::timezone(r.timezone.as_deref()) {
            Ok(_) => true,
            Err(e) => {
                cx.error(
                    &["timezone"],
                    e,
                    Some("`local`, or an IANA name such as `Europe/Paris`".to_owned()),
                );
                false
            }
        };
        let program = if key == "source" {
            super::vrl::compile(&source, Expect::Any, cx, &[key])
        } else {
            // A file's diagnostic cannot point into the configuration: it names the file's lines
            // in its rendering, at the key that names the file.
            super::vrl::compile_elsewhere(&source, Expect::Any, cx, &[key])
        }?;
        timezone_ok.then_some(())?;
        let files = r
            .file
            .iter()
            .chain(r.files.iter().flatten())
            .map(std::path::PathBuf::from)
            .collect();
        Some(RemapConfig {
            program,
            files,
            drop_on_error: r.drop_on_error.unwrap_or(false),
            drop_on_abort: r.drop_on_abort.unwrap_or(true),
            reroute_dropped: r.reroute_dropped.unwrap_or(false),
            timezone: r.timezone,
            fast_path: r.fast_path.unwrap_or(true),
        })
    }

    fn outputs(&self) -> Vec<String> {
        if self.reroute_dropped {
            vec!["dropped".to_owned()]
        } else {
            Vec::new()
        }
    }
}

/// A program file's text; an error at `key` when it cannot be read.
fn read_program(path: &str, cx: &mut Validator<'_, '_>, key: &[&str]) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) => {
            cx.error(key, format!("cannot read the program `{path}`: {e}"), None);
            None
        }
    }
}

impl BuildTransform for RemapConfig {
    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.clone()
    }

    fn notes(&self) -> Vec<String> {
        if self.fast_path {
            vec![self.program.path_note()]
        } else {
            vec!["VRL runtime (`fast_path: false`)".to_owned()]
        }
    }

    fn build(&self, cx: TransformContext) -> anyhow::Result<BoxFuture<'static, ()>> {
        let timezone =
            super::vrl::timezone(self.timezone.as_deref()).map_err(|e| anyhow::anyhow!(e))?;
        let mut outputs = cx.outputs;
        let dropped = outputs.remove("dropped");
        Ok(Box::pin(run(
            self.clone(),
            Runner::new(timezone),
            cx.metrics,
            cx.input,
            cx.fanout,
            dropped,
        )))
    }
}

/// What one batch became.
pub struct Remapped {
    pub out: EventBatch,
    pub dropped: Option<EventBatch>,
    /// Events dropped on purpose and not rerouted.
    pub discarded: usize,
}

/// Runs the program on every event of `batch`.
pub fn remap_batch(
    config: &RemapConfig,
    id: &str,
    runner: &mut Runner,
    batch: &EventBatch,
    metrics: &ComponentMetrics,
) -> Remapped {
    let mut out = Builder::new(batch);
    let mut dropped = config.reroute_dropped.then(|| Builder::new(batch));
    let mut discarded = 0;
    let fast = match &config.program.fast {
        Ok(fp) if config.fast_path => Some(fp),
        _ => None,
    };
    for event in &batch.events {
        if let Some(fp) = fast {
            let mut cx = fast::Cx {
                program: fp,
                batch,
                event,
                arena: out.arena(),
            };
            match runner.machine.run(&mut cx) {
                Ok(fast::Done::Event) => {
                    out.push_fast(event, &runner.machine, &fp.literals);
                    runner.fast_runs += 1;
                    continue;
                }
                // Without a message to carry on, an abort that drops needs no runtime.
                Ok(fast::Done::Aborted) if config.drop_on_abort && !config.reroute_dropped => {
                    metrics.error(ErrorKind::Program, 1);
                    crate::warn_limited!(
                        metrics,
                        reason = "abort",
                        "remap program aborted on an event"
                    );
                    discarded += 1;
                    continue;
                }
                // Everything else is the VRL runtime's, whole.
                Ok(fast::Done::Aborted) | Err(fast::Bail) => runner.bails += 1,
            }
        }
        let (reason, message, drop) = match runner.run(&config.program, batch, event) {
            Outcome::Done { event: value, .. } => {
                out.push(event, &value);
                continue;
            }
            Outcome::Aborted(e) => ("abort", e, config.drop_on_abort),
            Outcome::Failed(e) => ("error", e, config.drop_on_error),
        };
        metrics.error(ErrorKind::Program, 1);
        crate::warn_limited!(metrics, reason, error = %message, "remap program failed on an event");
        if !drop {
            out.push_unchanged(event);
        } else if let Some(d) = dropped.as_mut() {
            d.push(event, &with_dropped(batch, event, id, reason, &message));
        } else {
            discarded += 1;
        }
    }
    Remapped {
        out: out.finish(),
        dropped: dropped.map(Builder::finish),
        discarded,
    }
}

/// The event as it came, with `dropped` saying why (Vector's fields).
fn with_dropped(batch: &EventBatch, event: &Event, id: &str, reason: &str, message: &str) -> Vrl {
    let mut value = to_vrl(batch, event);
    let mut why = ObjectMap::new();
    why.insert("reason".into(), Vrl::from(reason));
    why.insert("message".into(), Vrl::from(message));
    why.insert("component_id".into(), Vrl::from(id));
    why.insert("component_type".into(), Vrl::from("remap"));
    why.insert("component_kind".into(), Vrl::from("transform"));
    if let Vrl::Object(obj) = &mut value {
        obj.insert("dropped".into(), Vrl::Object(why));
    }
    value
}

/// How many batches one remap works on at once: one per core (up to 4). Results go on in the
/// order the batches came, so a connection's events keep their order.
fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

async fn run(
    config: RemapConfig,
    runner: Runner,
    metrics: Arc<ComponentMetrics>,
    mut input: crate::pipeline::Input,
    fanout: Fanout,
    dropped: Option<Fanout>,
) {
    metrics.set_health(Health::Running, None);
    let id: Arc<str> = metrics.id.as_str().into();
    let bails = metrics.counter(
        "loghaul_remap_runtime_fallbacks_total",
        "Events a remap on the fast path ran on the VRL runtime instead (a value or an error the fast path leaves to it).",
        &[],
    );
    let fast = config.fast_path && config.program.fast.is_ok();
    let config = Arc::new(config);
    let workers = workers();
    // Runners (their VRL runtime and fast-path state) are reused, one per batch in work.
    let mut idle: Vec<Runner> = vec![runner];
    let timezone = config.timezone.clone();
    let mut pending: std::collections::VecDeque<
        tokio::task::JoinHandle<(crate::pipeline::Delivery, Remapped, Runner)>,
    > = std::collections::VecDeque::new();
    let mut closed = false;
    loop {
        // Take more work while a worker is free; otherwise (or once the input ended) hand on
        // the oldest batch's result.
        let take = !closed && pending.len() < workers;
        tokio::select! {
            biased;
            next = input.recv(), if take => match next {
                Some(delivery) => {
                    let mut runner = idle.pop().unwrap_or_else(|| {
                        Runner::new(
                            super::vrl::timezone(timezone.as_deref())
                                .unwrap_or(vrl::compiler::TimeZone::Local),
                        )
                    });
                    let (config, metrics, id) = (config.clone(), metrics.clone(), id.clone());
                    let work = move || {
                        let done = remap_batch(&config, &id, &mut runner, &delivery.batch, &metrics);
                        (delivery, done, runner)
                    };
                    // The fast path takes about a microsecond an event: on the runtime's
                    // workers, where waking a blocking-pool thread for each batch cost more than
                    // the batch. The VRL runtime takes several: on the blocking pool, so that
                    // the sources' connections are not kept waiting.
                    pending.push_back(if fast {
                        tokio::spawn(async move { work() })
                    } else {
                        tokio::task::spawn_blocking(work)
                    });
                }
                None => closed = true,
            },
            result = async {
                match pending.front_mut() {
                    Some(work) => work.await,
                    None => std::future::pending().await,
                }
            }, if !pending.is_empty() => {
                pending.pop_front();
                let Ok((delivery, done, mut runner)) = result else {
                    // The work panicked: its batch's ack is dropped, reporting it failed.
                    metrics.error(ErrorKind::Program, 1);
                    continue;
                };
                bails.fetch_add(runner.bails as i64, std::sync::atomic::Ordering::Relaxed);
                runner.bails = 0;
                idle.push(runner);
                metrics.discarded(DiscardReason::ProgramDropped, done.discarded as u64);
                send_on(&fanout, done.out, &metrics).await;
                if let (Some(batch), Some(output)) = (done.dropped, &dropped) {
                    send_on(output, batch, &metrics).await;
                }
                delivery.ack.commit(BatchStatus::Delivered);
            }
            else => break,
        }
    }
    metrics.set_health(Health::Stopped, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The configuration errors, each at the line (and, for VRL, the column) of its cause.

    use crate::config::testing::{error_at, load, ok, transform};

    #[test]
    fn program_errors_point_into_the_program() {
        let t = transform("type: remap\nsource: |\n  .a = 1\n  .b = upcase(.c)");
        error_at(
            &t,
            ".b = upcase",
            "VRL error[E103]: unhandled fallible assignment",
        );
        let e = load(&t).unwrap_err().to_string();
        // `upcase` starts at column 10 of its line (4 of indentation under `x:`, 2 in the block).
        let line = t.lines().position(|l| l.contains("upcase")).unwrap() + 1;
        assert!(e.contains(&format!("t.yaml:{line}:12:")), "{e}");
        assert!(e.contains("upcase!(.c)"), "VRL's own hint is shown: {e}");
        let t = transform("type: remap\nsource: 'nope(.a)'");
        error_at(&t, "source:", "VRL error[E105]: call to undefined function");
        let t = transform("type: remap\nsource: '.a = parse_regex!(.m, r''(unclosed'')'");
        error_at(&t, "source:", "VRL error");
        let t = transform("type: remap\nsource: '.a = '");
        error_at(&t, "source:", "syntax error");
    }

    #[test]
    fn one_program_and_a_known_time_zone() {
        error_at(&transform("type: remap"), "  x:", "needs a program");
        let t = transform("type: remap\nsource: 'true'\nfile: x.vrl");
        error_at(&t, "  x:", "exclude each other");
        let t = transform("type: remap\nfile: /nonexistent/p.vrl");
        error_at(&t, "file:", "cannot read the program `/nonexistent/p.vrl`");
        let t = transform("type: remap\nsource: 'true'\ntimezone: Mars/Olympus");
        error_at(&t, "timezone:", "unknown time zone `Mars/Olympus`");
        ok(&transform(
            "type: remap\nsource: 'true'\ntimezone: Europe/Paris",
        ));
        let t = transform("type: remap\nsource: 'true'\ndrop_on_eror: true");
        error_at(&t, "drop_on_eror", "unknown key `drop_on_eror`");
    }

    #[test]
    fn a_program_file_reports_its_own_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.vrl");
        std::fs::write(&path, ".a = 1\n.b = upcase(.c)\n").unwrap();
        let t = transform(&format!("type: remap\nfile: {}", path.display()));
        error_at(&t, "file:", "(the program's line 2, column 6)");
        std::fs::write(&path, ".b = upcase!(.c)\n").unwrap();
        ok(&t);
    }

    #[test]
    fn dropped_is_an_output_only_when_rerouted() {
        let body = "type: remap\nsource: 'true'";
        let with = |reroute: bool| {
            format!(
                "sources:\n  in: {{ type: syslog, mode: udp, address: \"127.0.0.1:5514\" }}\n\
                 transforms:\n  x: {{ type: remap, inputs: [in], source: 'true', reroute_dropped: {reroute} }}\n\
                 sinks:\n  out: {{ type: blackhole, inputs: [x, x.dropped] }}\n"
            )
        };
        ok(&with(true));
        error_at(&with(false), "x.dropped", "`x` has no output `dropped`");
        ok(&transform(body));
    }
}
