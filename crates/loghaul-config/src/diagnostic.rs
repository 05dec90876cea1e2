//! Diagnostics: what the loader reports about a configuration, located at `FILE:LINE:COL`.
//!
//! Every problem is collected rather than returned at the first one, so a user fixing a config
//! sees all of its errors in one run. Errors and warnings share one type; only errors stop a load.

use std::fmt;

/// A position in a configuration file: 1-based line and 1-based column (in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

impl Pos {
    /// A position from a 1-based line and column.
    pub fn new(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }
}

/// Whether a diagnostic stops the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The configuration cannot be used.
    Error,
    /// The configuration works, but probably not as intended.
    Warning,
}

/// One problem found in a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the configuration came from: a file path, or a name given to `Config::from_str`.
    pub origin: String,
    /// 1-based line, when the format gives positions.
    pub line: Option<usize>,
    /// 1-based column, when the format gives positions.
    pub column: Option<usize>,
    /// What is wrong, in one sentence.
    pub message: String,
    /// How to fix it, when we can tell.
    pub hint: Option<String>,
    /// Error or warning.
    pub severity: Severity,
}

impl Diagnostic {
    /// An error at `pos` (if known).
    pub fn error(origin: &str, pos: Option<Pos>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            origin: origin.to_owned(),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message: message.into(),
            hint: None,
            severity: Severity::Error,
        }
    }

    /// A warning at `pos` (if known).
    pub fn warning(origin: &str, pos: Option<Pos>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(origin, pos, message)
        }
    }

    /// The same diagnostic with a hint.
    pub fn with_hint(mut self, hint: Option<impl Into<String>>) -> Diagnostic {
        self.hint = hint.map(Into::into);
        self
    }

    /// True for errors, false for warnings.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The position, when both line and column are known.
    pub fn pos(&self) -> Option<Pos> {
        Some(Pos::new(self.line?, self.column?))
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, ": {kind}: {}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every error found while loading a configuration (never empty when returned as an `Err`).
///
/// Displayed one diagnostic per line, `FILE:LINE:COL: error: MESSAGE`, each followed by an
/// indented `hint:` line when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<Diagnostic>);

impl ConfigErrors {
    /// The diagnostics, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// How many diagnostics there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// The candidate closest to `word`, if any is close enough to be a plausible typo.
///
/// Close means one edit (a transposition counts as one) per three characters, or a Jaro-Winkler
/// similarity of at least 0.8 (which forgives a dropped suffix); the fewest edits win.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word_l = word.to_ascii_lowercase();
    let budget = (word_l.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| {
            let c_l = c.to_ascii_lowercase();
            (
                strsim::osa_distance(&word_l, &c_l),
                strsim::jaro_winkler(&word_l, &c_l),
                c,
            )
        })
        .filter(|(edits, similarity, _)| *edits <= budget || *similarity >= 0.8)
        .min_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)))
        .map(|(_, _, c)| c)
}

/// A hint for a misspelled name: the closest candidate, else the list of valid ones.
pub(crate) fn did_you_mean(word: &str, candidates: &[&str], what: &str) -> String {
    match closest(word, candidates.iter().copied()) {
        Some(c) => format!("did you mean '{c}'?"),
        None => format!("{what}: {}", candidates.join(", ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn display_with_and_without_position() {
        let d = Diagnostic::error("a.yaml", Some(Pos::new(3, 5)), "bad").with_hint(Some("fix"));
        assert_eq!(d.to_string(), "a.yaml:3:5: error: bad\n  hint: fix");
        let w = Diagnostic::warning("a.yaml", None, "meh");
        assert_eq!(w.to_string(), "a.yaml: warning: meh");
        let all = ConfigErrors(vec![d, w]);
        assert_eq!(all.to_string().lines().count(), 3);
    }

    #[test]
    fn closest_names() {
        let keys = ["address", "mode", "max_length", "inputs"];
        assert_eq!(closest("adress", keys), Some("address"));
        assert_eq!(closest("max_lenght", keys), Some("max_length"));
        assert_eq!(closest("inptus", keys), Some("inputs"));
        assert_eq!(closest("zzz", keys), None);
        assert_eq!(closest("tpc", ["tcp", "udp"]), Some("tcp"));
        assert_eq!(closest("warnin", ["warn", "warning"]), Some("warning"));
        assert_eq!(
            did_you_mean("zzz", &keys, "valid keys"),
            "valid keys: address, mode, max_length, inputs"
        );
    }
}
