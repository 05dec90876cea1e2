//! rsyslog's config: imptcp (or imtcp with a TLS stream driver) → omfile with a JSON string
//! template carrying loghaul's field names. The template is `bench/peers/rsyslog/rsyslog.conf`;
//! the fragments beside it are what differs between the rsyslog subjects and inputs. Key=value
//! input (`transform`) has a config of its own, `bench/peers/rsyslog/transform.conf`: mmnormalize
//! with a liblognorm rule, RainerScript for the fields, an omfile action per severity class.
//!
//! Tuning, measured on a 2-core machine: one imptcp thread (two input threads only contend with
//! the main queue worker), a string template with `:::json` escaping (cheaper than a `list`
//! template with `jsonf`), a 64KiB write buffer; the main queue keeps rsyslog's defaults.

use clap::ValueEnum;
use serde::Serialize;

use super::{Input, Setup, routed_outputs};
use crate::pki::ServerPki;
use crate::template::{fragment, render};

const CONFIG: &str = include_str!("../../../../bench/peers/rsyslog/rsyslog.conf");
const TRANSFORM: &str = include_str!("../../../../bench/peers/rsyslog/transform.conf");
const TLS_FILES: &str = include_str!("../../../../bench/peers/rsyslog/tls-files.conf");
const MODULE_IMPTCP: &str = include_str!("../../../../bench/peers/rsyslog/module-imptcp.conf");
const MODULE_IMTCP_TLS: &str =
    include_str!("../../../../bench/peers/rsyslog/module-imtcp-tls.conf");
const QUEUE_DISK_ASSISTED: &str =
    include_str!("../../../../bench/peers/rsyslog/queue-disk-assisted.conf");
const TEMPLATE_LINES: &str = include_str!("../../../../bench/peers/rsyslog/template-lines.conf");
const TEMPLATE_RAW: &str = include_str!("../../../../bench/peers/rsyslog/template-raw.conf");
const TEMPLATE_RFC3164: &str =
    include_str!("../../../../bench/peers/rsyslog/template-rfc3164.conf");
const TEMPLATE_RFC5424: &str =
    include_str!("../../../../bench/peers/rsyslog/template-rfc5424.conf");
const TEMPLATE_TRANSFORM: &str =
    include_str!("../../../../bench/peers/rsyslog/template-transform.conf");

/// The queue of rsyslog's omfile action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionQueue {
    /// rsyslog's default: none, the action runs on the main queue's worker.
    Direct,
    /// A LinkedList queue with a file name, which makes it disk-assisted: in memory until its
    /// high watermark (90% of `queue.size`, 1,000 messages by default for an action), then
    /// spooled to files in the work directory, and saved there at shutdown. The parameters are
    /// those rsyslog's docs give for reliable forwarding (infinite retries, a 1g disk limit),
    /// the rest rsyslog's defaults: among them `queue.syncQueueFiles="off"`, so the spool is
    /// written but not fsynced.
    DiskAssisted,
}

/// The stream driver (TLS library) `rsyslog-tls`'s imtcp reads with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsDriver {
    /// GnuTLS (`lmnsd_gtls`, Debian's rsyslog-gnutls): the faster of the two on the lab's
    /// machines (BENCHMARKS.md).
    #[default]
    Gtls,
    /// OpenSSL (`lmnsd_ossl`, Debian's rsyslog-openssl).
    Ossl,
}

impl TlsDriver {
    /// rsyslog's name for the driver (`StreamDriver.Name`).
    pub fn name(self) -> &'static str {
        match self {
            TlsDriver::Gtls => "gtls",
            TlsDriver::Ossl => "ossl",
        }
    }

    /// The driver and its library, for the platform column.
    pub fn describe(self) -> &'static str {
        match self {
            TlsDriver::Gtls => "gtls (GnuTLS)",
            TlsDriver::Ossl => "ossl (OpenSSL)",
        }
    }
}

/// TLS for `rsyslog-tls`: the driver, and the PKI whose server certificate it presents.
#[derive(Clone, Copy, Debug)]
pub struct RsyslogTls<'a> {
    /// GnuTLS or OpenSSL.
    pub driver: TlsDriver,
    /// Its CA, certificate and key.
    pub pki: &'a ServerPki,
}

/// rsyslog reading `setup`'s input on `port` into `out`, with its spool in `work` and the
/// action's `queue`.
pub fn config(setup: &Setup<'_>, port: u16, work: &str, out: &str, queue: ActionQueue) -> String {
    config_with(setup, port, work, out, queue, None)
}

/// [`config`], reading with `imtcp` over TLS when `tls` is given: the driver set on the module in
/// anonymous mode (`StreamDriver.Mode="1"`, `StreamDriver.AuthMode="anon"`: the server shows its
/// certificate and asks clients for none, as `loghaul-tls` does) and the files given as the
/// global defaults. imtcp takes rsyslog's defaults otherwise; `imptcp` has no TLS.
pub fn config_with(
    setup: &Setup<'_>,
    port: u16,
    work: &str,
    out: &str,
    queue: ActionQueue,
    tls: Option<&RsyslogTls<'_>>,
) -> String {
    // rsyslog has no forward or OTLP input (no scenario with one lists it): those inputs would
    // get the raw lines' template.
    let template = match setup.input {
        Input::CountedLines => TEMPLATE_LINES,
        Input::RawLines | Input::Forward | Input::Otlp => TEMPLATE_RAW,
        Input::Rfc3164 => TEMPLATE_RFC3164,
        Input::Rfc5424 => TEMPLATE_RFC5424,
        Input::KeyValue => TEMPLATE_TRANSFORM,
    };
    // A disk-assisted queue's files are named after its action.
    let queue = |file: &str| match queue {
        ActionQueue::Direct => String::new(),
        ActionQueue::DiskAssisted => format!(
            "\n{}",
            render(fragment(QUEUE_DISK_ASSISTED), &[("queue_file", file)])
        ),
    };
    let (files, module, input) = match tls {
        None => (String::new(), fragment(MODULE_IMPTCP).to_string(), "imptcp"),
        Some(t) => {
            let (ca, cert, key) = (
                t.pki.ca.display().to_string(),
                t.pki.cert.display().to_string(),
                t.pki.key.display().to_string(),
            );
            let files = render(
                fragment(TLS_FILES),
                &[("ca", &ca), ("cert", &cert), ("key", &key)],
            );
            (
                format!("\n{files}"),
                render(fragment(MODULE_IMTCP_TLS), &[("driver", t.driver.name())]),
                "imtcp",
            )
        }
    };
    if setup.input == Input::KeyValue {
        let [errors, other] = routed_outputs(out);
        return render(
            TRANSFORM,
            &[
                ("scenario", setup.name),
                ("work", work),
                ("tls_files", &files),
                ("module", &module),
                ("template", fragment(template)),
                ("errors", &errors),
                ("errors_queue", &queue("errors")),
                ("other", &other),
                ("other_queue", &queue("other")),
                ("input", input),
                ("port", &port.to_string()),
            ],
        );
    }
    render(
        CONFIG,
        &[
            ("scenario", setup.name),
            ("work", work),
            ("tls_files", &files),
            ("module", &module),
            ("template", fragment(template)),
            ("out", out),
            ("queue", &queue("out")),
            ("input", input),
            ("port", &port.to_string()),
        ],
    )
}
