//! loghaul's config as a one-process subject: one source reading the input into one sink, on
//! their defaults, with the variants' disk buffer or TLS written in where they have one. For
//! key=value input (`transform`), a `remap` and a `route` between them, and a sink per route.

use super::{Input, Setup, routed_outputs};
use crate::pki::ServerPki;

/// A disk buffer in front of a loghaul subject's sink (see docs/durability.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskBuffer {
    /// Its `sync`: `every_batch`, an interval such as `50ms`, or `never`.
    pub sync: &'static str,
    /// loghaul's `data_dir`, a folder of the run: the buffer is `DATA_DIR/buffers/out/`.
    pub data_dir: String,
}

/// loghaul: one source on `port` (`syslog` over TCP, `fluent` for the forward protocol,
/// `opentelemetry` for OTLP) into
/// one file sink writing `out`, on their defaults (like the peers, the file sink writes whenever
/// its queue runs empty; the fluent source acks once the sink wrote). Lines that are only
/// counted go to a `blackhole` sink, the equivalent of EventMachine's line counter.
pub fn config(setup: &Setup<'_>, port: u16, api: u16, out: &str) -> String {
    subject_config(setup, port, api, out, &Variant::default())
}

/// What a loghaul variant's config differs in.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant<'a> {
    /// A disk buffer in front of the sink(s).
    pub disk: Option<&'a DiskBuffer>,
    /// TLS on the source's listener.
    pub tls: Option<&'a ServerPki>,
    /// The `remap` on the VRL runtime (`fast_path: false`), where there is one.
    pub vrl_runtime: bool,
}

/// The id of the `remap` of key=value input.
pub const REMAP_ID: &str = "kv";

/// The `remap` program of key=value input (`transform`): parse the pairs into fields, rename
/// one, delete one, add one. The peers' configs do the same (bench/peers/*/transform*).
pub const KV_PROGRAM: &str = "\
. |= parse_key_value!(.message)
.user_name = del(.user)
del(.session)
.pipeline = \"lab\"
";

/// The `route` condition of the errors file: severity `err` or more severe.
pub const ERRORS_CONDITION: &str =
    r#".severity == "emerg" || .severity == "alert" || .severity == "crit" || .severity == "err""#;

/// [`config`], with the sink `out` behind the variant's disk buffer when it has one, and TLS on
/// the source's listener when it has it. The buffer takes the documented defaults but `sync`
/// (1GiB, `when_full: block`), written out so the saved config shows them; blocking keeps the
/// run lossless, as the memory buffer's backpressure does. TLS takes the certificate and key,
/// everything else on the defaults (no client certificates asked for, as rsyslog's anonymous
/// mode).
pub fn subject_config(
    setup: &Setup<'_>,
    port: u16,
    api: u16,
    out: &str,
    variant: &Variant<'_>,
) -> String {
    let (disk, tls) = (variant.disk, variant.tls);
    let tls = tls.map_or(String::new(), |p| {
        format!(
            ", tls: {{ cert: \"{}\", key: \"{}\" }}",
            p.cert.display(),
            p.key.display()
        )
    });
    let (data_dir, buffer) = match disk {
        Some(d) => (
            format!("data_dir: \"{}\"\n", d.data_dir),
            format!(
                ", buffer: {{ type: disk, max_size: 1GiB, sync: {}, when_full: block }}",
                d.sync
            ),
        ),
        None => (String::new(), String::new()),
    };
    let (name, role) = (setup.name, setup.role);
    let (format, framing, encoding) = match setup.input {
        Input::Forward => {
            return format!(
                "# loghaul bench: scenario {name}{role}\n\
                 api: {{ address: \"127.0.0.1:{api}\" }}\n\
                 {data_dir}\
                 sources:\n  \
                   in: {{ type: fluent, address: \"127.0.0.1:{port}\"{tls} }}\n\
                 sinks:\n  \
                   out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json{buffer} }}\n",
            );
        }
        Input::Otlp => {
            return format!(
                "# loghaul bench: scenario {name}{role}\n\
                 api: {{ address: \"127.0.0.1:{api}\" }}\n\
                 {data_dir}\
                 sources:\n  \
                   in: {{ type: opentelemetry, address: \"127.0.0.1:{port}\"{tls} }}\n\
                 sinks:\n  \
                   out: {{ type: file, inputs: [in], path: \"{out}\", encoding: json{buffer} }}\n",
            );
        }
        Input::CountedLines => ("raw", "newline", "text"),
        Input::RawLines => ("raw", "newline", "json"),
        Input::Rfc3164 => ("rfc3164", "newline", "json"),
        Input::Rfc5424 => ("rfc5424", "octet_counting", "json"),
        Input::KeyValue => {
            return key_value_config(
                setup,
                port,
                api,
                out,
                variant.vrl_runtime,
                (&data_dir, &buffer, &tls),
            );
        }
    };
    let sink = if setup.input == Input::CountedLines {
        format!("{{ type: blackhole, inputs: [in]{buffer} }}")
    } else {
        format!("{{ type: file, inputs: [in], path: \"{out}\", encoding: {encoding}{buffer} }}")
    };
    format!(
        "# loghaul bench: scenario {name}{role}\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         {data_dir}\
         sources:\n  \
           in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{port}\", format: {format}, framing: {framing}{tls} }}\n\
         sinks:\n  \
           out: {sink}\n",
    )
}

/// loghaul reading key=value RFC3164 (`transform`): the `syslog` source as in `syslog`, a
/// `remap` running [`KV_PROGRAM`] (on the VRL runtime for `loghaul-vrl`), a `route` sending
/// [`ERRORS_CONDITION`]'s events to `errors` and the rest (`_unmatched`) to `other`, and a file
/// sink for each, JSON. Everything else on its defaults.
fn key_value_config(
    setup: &Setup<'_>,
    port: u16,
    api: u16,
    out: &str,
    vrl_runtime: bool,
    (data_dir, buffer, tls): (&str, &str, &str),
) -> String {
    let (name, role) = (setup.name, setup.role);
    let [errors, other] = routed_outputs(out);
    let fast_path = if vrl_runtime {
        "\n    fast_path: false"
    } else {
        ""
    };
    let program: String = KV_PROGRAM.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "# loghaul bench: scenario {name}{role}\n\
         api: {{ address: \"127.0.0.1:{api}\" }}\n\
         {data_dir}\
         sources:\n  \
           in: {{ type: syslog, mode: tcp, address: \"127.0.0.1:{port}\", format: rfc3164, framing: newline{tls} }}\n\
         transforms:\n  \
           {REMAP_ID}:\n    \
             type: remap\n    \
             inputs: [in]{fast_path}\n    \
             source: |\n\
         {program}  \
           by_severity:\n    \
             type: route\n    \
             inputs: [{REMAP_ID}]\n    \
             route:\n      \
               errors: '{ERRORS_CONDITION}'\n\
         sinks:\n  \
           errors: {{ type: file, inputs: [by_severity.errors], path: \"{errors}\", encoding: json{buffer} }}\n  \
           other: {{ type: file, inputs: [by_severity._unmatched], path: \"{other}\", encoding: json{buffer} }}\n",
    )
}
