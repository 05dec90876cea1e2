//! loghaul's config as a one-process subject: one source reading the input into one sink, on
//! their defaults, with the variants' disk buffer or TLS written in where they have one.

use super::{Input, Setup};
use crate::pki::ServerPki;

/// A disk buffer in front of a loghaul subject's sink (see docs/durability.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskBuffer {
    /// Its `sync`: `every_batch`, an interval such as `50ms`, or `never`.
    pub sync: &'static str,
    /// loghaul's `data_dir`, a folder of the run: the buffer is `DATA_DIR/buffers/out/`.
    pub data_dir: String,
}

/// loghaul: one source on `port` (`syslog` over TCP, or `fluent` for the forward protocol) into
/// one file sink writing `out`, on their defaults (like the peers, the file sink writes whenever
/// its queue runs empty; the fluent source acks once the sink wrote). Lines that are only
/// counted go to a `blackhole` sink, the equivalent of EventMachine's line counter.
pub fn config(setup: &Setup<'_>, port: u16, api: u16, out: &str) -> String {
    subject_config(setup, port, api, out, None, None)
}

/// [`config`], with the sink `out` behind `disk` when given, and TLS on the source's listener
/// when `tls` is given. The buffer takes the documented defaults but `sync` (1GiB,
/// `when_full: block`), written out so the saved config shows them; blocking keeps the run
/// lossless, as the memory buffer's backpressure does. TLS takes the certificate and key,
/// everything else on the defaults (no client certificates asked for, as rsyslog's anonymous
/// mode).
pub fn subject_config(
    setup: &Setup<'_>,
    port: u16,
    api: u16,
    out: &str,
    disk: Option<&DiskBuffer>,
    tls: Option<&ServerPki>,
) -> String {
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
        Input::CountedLines => ("raw", "newline", "text"),
        Input::RawLines => ("raw", "newline", "json"),
        Input::Rfc3164 => ("rfc3164", "newline", "json"),
        Input::Rfc5424 => ("rfc5424", "octet_counting", "json"),
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
