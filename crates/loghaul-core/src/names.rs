//! Syslog facility and severity names, as loghaul writes them and as configs may name them.

/// Facility names indexed by code (RFC 5424 table 1, with the names rsyslog and syslog-ng use).
pub const FACILITIES: [&str; 24] = [
    "kern",
    "user",
    "mail",
    "daemon",
    "auth",
    "syslog",
    "lpr",
    "news",
    "uucp",
    "cron",
    "authpriv",
    "ftp",
    "ntp",
    "security",
    "console",
    "solaris-cron",
    "local0",
    "local1",
    "local2",
    "local3",
    "local4",
    "local5",
    "local6",
    "local7",
];

/// Severity names indexed by code (RFC 5424 table 2).
pub const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

/// The name of a facility code, if it is one.
pub fn facility_name(code: u8) -> Option<&'static str> {
    FACILITIES.get(code as usize).copied()
}

/// The name of a severity code, if it is one.
pub fn severity_name(code: u8) -> Option<&'static str> {
    SEVERITIES.get(code as usize).copied()
}

/// The code for a severity name; also accepts the common aliases (`error`, `warn`, `panic`...).
pub fn severity_code(name: &str) -> Option<u8> {
    let n = name.to_ascii_lowercase();
    let code = match n.as_str() {
        "emerg" | "emergency" | "panic" => 0,
        "alert" => 1,
        "crit" | "critical" => 2,
        "err" | "error" => 3,
        "warning" | "warn" => 4,
        "notice" => 5,
        "info" | "informational" => 6,
        "debug" => 7,
        _ => return None,
    };
    Some(code)
}

/// The code for a facility name.
pub fn facility_code(name: &str) -> Option<u8> {
    let n = name.to_ascii_lowercase();
    FACILITIES.iter().position(|f| *f == n).map(|p| p as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for code in 0..24u8 {
            let name = facility_name(code).unwrap_or_default();
            assert_eq!(facility_code(name), Some(code));
        }
        for code in 0..8u8 {
            let name = severity_name(code).unwrap_or_default();
            assert_eq!(severity_code(name), Some(code));
        }
        assert_eq!(severity_code("WARN"), Some(4));
        assert_eq!(facility_name(24), None);
    }
}
