//! syslog-ng's config: network() (or syslog() for octet counting) → file() with format-json.
//! The template is `bench/peers/syslog-ng/syslog-ng.conf`; the output templates beside it are
//! what differs between inputs. Key=value input (`transform`) has a config of its own,
//! `bench/peers/syslog-ng/transform.conf`: kv-parser(), rewrite rules, a file per severity
//! class.

use super::{Input, Setup, routed_outputs};
use crate::template::{fragment, render};

const CONFIG: &str = include_str!("../../../../bench/peers/syslog-ng/syslog-ng.conf");
const TRANSFORM: &str = include_str!("../../../../bench/peers/syslog-ng/transform.conf");
const TEMPLATE_TRANSFORM: &str =
    include_str!("../../../../bench/peers/syslog-ng/template-transform.conf");
const TEMPLATE_LINES: &str = include_str!("../../../../bench/peers/syslog-ng/template-lines.conf");
const TEMPLATE_RAW: &str = include_str!("../../../../bench/peers/syslog-ng/template-raw.conf");
const TEMPLATE_RFC3164: &str =
    include_str!("../../../../bench/peers/syslog-ng/template-rfc3164.conf");
const TEMPLATE_RFC5424: &str =
    include_str!("../../../../bench/peers/syslog-ng/template-rfc5424.conf");

/// syslog-ng reading `setup`'s input on `port` into `out`.
pub fn config(setup: &Setup<'_>, port: u16, out: &str) -> String {
    // No forward or OTLP input in syslog-ng either (no scenario with one lists it): the raw
    // lines' config, never run.
    let (driver, flags, template) = match setup.input {
        Input::CountedLines => ("network", "flags(no-parse)", TEMPLATE_LINES),
        Input::RawLines | Input::Forward | Input::Otlp => {
            ("network", "flags(no-parse)", TEMPLATE_RAW)
        }
        Input::Rfc3164 => ("network", "", TEMPLATE_RFC3164),
        Input::Rfc5424 => ("syslog", "", TEMPLATE_RFC5424),
        Input::KeyValue => {
            let [errors, other] = routed_outputs(out);
            return render(
                TRANSFORM,
                &[
                    ("scenario", setup.name),
                    ("port", &port.to_string()),
                    ("errors", &errors),
                    ("other", &other),
                    ("template", fragment(TEMPLATE_TRANSFORM)),
                ],
            );
        }
    };
    render(
        CONFIG,
        &[
            ("scenario", setup.name),
            ("driver", driver),
            ("port", &port.to_string()),
            ("flags", flags),
            ("out", out),
            ("template", fragment(template)),
        ],
    )
}
