//! What a run with TLS subjects needs said under its table, the section the connection
//! scenarios' reports share (`tls_handshake` with its handshakes' table).

use std::fmt::Write as _;

use crate::report::{RunRecord, count, fmt_spread, summarize};
use crate::subjects::SubjectKind;

/// What a run with TLS subjects needs said under its table (empty when it has none): in
/// `tls_handshake`, handshakes per second and CPU per handshake; elsewhere, each TLS subject's
/// rate against its plaintext self and loghaul's TLS rate against rsyslog's, from the medians of
/// the same run; and the protocol and cipher suite agreed.
pub fn notes(handshakes: bool, events: u64, records: &[RunRecord], subjects: &[String]) -> String {
    use clap::ValueEnum as _;
    let is_tls =
        |name: &str| SubjectKind::from_str(name, false).is_ok_and(|k: SubjectKind| k.tls());
    if !handshakes && !subjects.iter().any(|n| is_tls(n)) {
        return String::new();
    }
    let summaries = summarize(records, subjects);
    let rate_of = |name: &str| {
        summaries
            .iter()
            .find(|m| m.subject == name)
            .and_then(|m| m.events_per_sec)
            .map(|s| s.median)
    };
    let tls_of = |name: &str| {
        records
            .iter()
            .filter(|r| r.subject == name && !r.warmup)
            .find_map(|r| r.tls.clone())
    };
    let mut s = String::new();
    if handshakes {
        let _ = writeln!(
            s,
            "Every event is a connection of its own: connect, the TLS handshake (the `-tls` \
             subjects; the others plain TCP), one line, close, and the server's close; no \
             session resumption, so every handshake is a full one. The rate is handshakes \
             (connections) per second, {} connections per run.\n",
            count(events as f64),
        );
        let _ = writeln!(
            s,
            "| subject | handshakes/s | server CPU-ms per handshake | generator CPU/wall | \
             failed | TLS |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---|");
        for m in &summaries {
            if m.runs == 0 {
                continue;
            }
            let failed: u64 = records
                .iter()
                .filter(|r| r.subject == m.subject && !r.warmup)
                .filter_map(|r| r.failed_connections)
                .sum();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {failed} | {} |",
                m.subject,
                fmt_spread(m.events_per_sec, &|v| count(v)),
                // CPU-s per 1M events is CPU-µs per event: ÷ 1000 for milliseconds.
                fmt_spread(m.cpu_secs_per_million, &|v| format!("{:.3}", v / 1000.0)),
                fmt_spread(m.gen_cores, &|v| format!("{v:.2}")),
                tls_of(&m.subject).unwrap_or_else(|| "plain TCP".into()),
            );
        }
        s.push('\n');
    }
    let mut ratios = Vec::new();
    for (tls, plain) in [("loghaul-tls", "loghaul"), ("rsyslog-tls", "rsyslog")] {
        if let (Some(a), Some(b)) = (rate_of(tls), rate_of(plain))
            && b > 0.0
        {
            ratios.push(format!("{tls} ÷ {plain}: **{:.2}**", a / b));
        }
    }
    if let (Some(a), Some(b)) = (rate_of("loghaul-tls"), rate_of("rsyslog-tls"))
        && b > 0.0
    {
        ratios.push(format!("loghaul-tls ÷ rsyslog-tls: **{:.2}×**", a / b));
    }
    if !ratios.is_empty() {
        let what = if handshakes {
            "handshakes/s"
        } else {
            "events/s"
        };
        let _ = writeln!(
            s,
            "Ratios of the medians ({what}, same run): {}.\n",
            ratios.join("; ")
        );
    }
    if !handshakes {
        let mut agreed: Vec<String> = subjects
            .iter()
            .filter_map(|n| tls_of(n).map(|t| format!("{n}: {t}")))
            .collect();
        agreed.dedup();
        if !agreed.is_empty() {
            let _ = writeln!(s, "TLS agreed: {}.\n", agreed.join("; "));
        }
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::report::{Status, markdown};

    fn tls_run(subject: &str, rate: f64, tls: Option<&str>) -> RunRecord {
        let mut r = RunRecord::empty("syslog", subject, "p", 1, Status::Complete);
        r.events_seen = 2000;
        r.events_per_sec = rate;
        r.cpu_secs_per_million = 400.0;
        r.gen_cores = Some(0.5);
        r.tls = tls.map(str::to_string);
        r
    }

    #[test]
    fn tls_runs_say_their_ratios_and_what_was_agreed() {
        let suite = "TLSv1_3 TLS13_AES_256_GCM_SHA384";
        let records = vec![
            tls_run("loghaul", 4e6, None),
            tls_run("loghaul-tls", 3e6, Some(suite)),
            tls_run("rsyslog", 8e5, None),
            tls_run("rsyslog-tls", 6e5, Some("TLSv1_2 X")),
        ];
        let names: Vec<String> = records.iter().map(|r| r.subject.clone()).collect();
        let said = notes(false, 2000, &records, &names);
        for want in [
            "loghaul-tls ÷ loghaul: **0.75**",
            "rsyslog-tls ÷ rsyslog: **0.75**",
            "loghaul-tls ÷ rsyslog-tls: **5.00×**",
            &format!("loghaul-tls: {suite}; rsyslog-tls: TLSv1_2 X"),
        ] {
            assert!(said.contains(want), "{want:?} in {said}");
        }
        assert!(!said.contains("handshakes/s"), "{said}");
        // Without a TLS subject there is nothing to say.
        let plain = notes(false, 2000, &records[..1], &names[..1]);
        assert_eq!(plain, "");
        // In tls_handshake, a row per subject with the rate as handshakes/s and the CPU per
        // handshake in ms; a plain subject says so.
        let shakes = vec![
            tls_run("loghaul-tls", 3000.0, Some(suite)),
            tls_run("rsyslog-tls", 1200.0, Some("TLSv1_2 X")),
            {
                let mut r = tls_run("loghaul", 25000.0, None);
                r.failed_connections = Some(3);
                r.loss = 3;
                r
            },
        ];
        let names: Vec<String> = shakes.iter().map(|r| r.subject.clone()).collect();
        let shaken = notes(true, 2000, &shakes, &names);
        assert!(
            shaken.contains(&format!(
                "| loghaul-tls | 3,000 | 0.400 | 0.50 | 0 | {suite} |"
            )),
            "{shaken}"
        );
        assert!(
            shaken.contains("| loghaul | 25,000 | 0.400 | 0.50 | 3 | plain TCP |"),
            "{shaken}"
        );
        // Failed connections are losses the table names.
        let m = summarize(&shakes, &names);
        assert_eq!(m[2].note.as_deref(), Some("3 connections failed"));
        assert!(
            shaken.contains("loghaul-tls ÷ rsyslog-tls: **2.50×**"),
            "{shaken}"
        );
        assert!(shaken.contains("(handshakes/s, same run)"), "{shaken}");
        // The main table prints a handshake rate whole.
        let t = markdown("tls_handshake", 2000, 1, 0, &summarize(&shakes, &names));
        assert!(t.contains("| 1200/s |"), "{t}");
    }
}
