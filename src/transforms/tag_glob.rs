//! Fluentd's tag match patterns: `*`, `**`, `{a,b}` and space-separated alternatives, as Fluentd's
//! `<match>` and `<filter>` select events by tag.
//!
//! The semantics are those of Fluentd's `lib/fluent/match.rb` (`GlobMatchPattern`,
//! `OrMatchPattern`), which translates each pattern into a Ruby regular expression. This module
//! compiles the same translation into a small program of byte tests and jumps and runs it as a set
//! of states over the tag, so a match costs O(pattern × tag) whatever the pattern (no
//! backtracking blow-up) and no regex engine is needed.
//!
//! What Fluentd's translation means, and so what a [`TagPattern`] matches:
//!
//! - The pattern is split on whitespace; a tag matches if any piece matches. A piece that is
//!   exactly `**` matches every tag.
//! - `*` is any run of bytes within one tag part, an empty one included: `a.*` matches `a.b` and
//!   `a.`, `a.b*` matches `a.b` and `a.bc`, `*` matches the empty tag, and none crosses a `.`.
//! - `**` is any run of bytes, dots included (`a**` matches `ab.c`). Right after a `.`, that dot
//!   becomes optional: `a.**` is `a` followed by the tag's end or a `.` (`a`, `a.b`, not `ab`).
//!   Right before a `.`, `**.` is the tag's start or anything ending in a dot (`**.a` matches `a`
//!   and `b.a`, not `ba`); `a.**.z` thus matches `a.z` and `a.b.z`. Only one dot is absorbed
//!   per `**`, and only the tag's start is exempt from the other: `a.**.**.z` does not match `a.z`,
//!   and `a.{**,b}` does not match `a`.
//! - `{X,Y}` matches X or Y, each a pattern in its own right (`a.{b.**,c}`), and may nest; an
//!   empty alternative matches empty text (`a{,b}` matches `a` and `ab`). A `,` outside braces is
//!   a literal.
//! - `\` makes the next character literal (`a\*` matches only `a*`); a `\` ending a piece is
//!   ignored, and so is a `.` ending one (`a.` is the pattern `a`).
//! - Every other character is literal, case included.
//! - Ruby's anchors and `.` show through: a tag ending in one `\n` matches as it would without it,
//!   and a `**` inside a piece does not cross a `\n`.
//!
//! Where this module departs from Fluentd: `/regex/` pieces (Fluentd 1.11.2+) are rejected; so is
//! a `{` left open or a `}` closing nothing, which Fluentd accepts as garbage (a stray `}` is a
//! literal, and the alternatives of an unclosed `{` become the literal text of their regex
//! translation); and so is an empty pattern (Fluentd's `<match>` without an argument means `**`,
//! which is the caller's to supply).

use std::fmt;

/// A compiled tag pattern: one or more whitespace-separated Fluentd match patterns.
#[derive(Clone, Debug)]
pub struct TagPattern {
    /// The pattern as written.
    source: String,
    /// A piece was exactly `**`, which Fluentd matches without a regex (so even tags the glob
    /// translation would reject, such as ones holding a newline).
    match_all: bool,
    /// Every glob piece, one after the other, each ending in [`Inst::Match`].
    program: Vec<Inst>,
    /// Where each glob piece starts in `program`; a tag matches if any of them accepts it.
    entries: Vec<usize>,
}

/// One instruction of a compiled piece. The byte tests consume one byte of the tag; the rest are
/// taken without consuming anything, and jump targets are indexes into the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inst {
    /// This byte.
    Byte(u8),
    /// Any byte but `.` (Fluentd's `[^\.]`, from `*`).
    NotDot,
    /// Any byte but `\n` (Ruby's `.`, from `**`).
    NotNewline,
    /// Both ways.
    Split(usize, usize),
    /// Only this way.
    Jump(usize),
    /// Only at the tag's start (Ruby's `\A`, from a leading `**.`).
    AtStart,
    /// Only at the tag's end or before a `.` (Fluentd's `(?![^\.])`, from `.**`).
    BeforeDotOrEnd,
    /// Accepts at the tag's end, or before a final `\n` (Ruby's `\Z`).
    Match,
}

/// Why a pattern does not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPatternError {
    pub message: String,
}

impl TagPatternError {
    fn new(message: String) -> TagPatternError {
        TagPatternError { message }
    }
}

impl fmt::Display for TagPatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TagPatternError {}

impl TagPattern {
    /// Compiles a pattern (may hold several space-separated patterns).
    pub fn parse(pattern: &str) -> Result<TagPattern, TagPatternError> {
        let mut compiled = TagPattern {
            source: pattern.to_owned(),
            match_all: false,
            program: Vec::new(),
            entries: Vec::new(),
        };
        let mut pieces = 0;
        for (start, piece) in split_pieces(pattern) {
            pieces += 1;
            if piece == "**" {
                compiled.match_all = true;
            } else {
                compiled.entries.push(compiled.program.len());
                compile_piece(piece, start, &mut compiled.program)?;
            }
        }
        if pieces == 0 {
            return Err(TagPatternError::new("empty tag pattern".to_owned()));
        }
        Ok(compiled)
    }

    /// Whether `tag` matches.
    pub fn matches(&self, tag: &[u8]) -> bool {
        if self.match_all {
            return true;
        }
        let mut run = Run {
            program: &self.program,
            tag,
            seen: vec![0; self.program.len()],
            pending: Vec::new(),
        };
        // The byte tests waiting for the tag's next byte, over every piece at once.
        let mut current = Vec::new();
        let mut next = Vec::new();
        for &entry in &self.entries {
            if run.follow(entry, 0, &mut current) {
                return true;
            }
        }
        for (pos, &byte) in tag.iter().enumerate() {
            if current.is_empty() {
                return false;
            }
            next.clear();
            for &pc in &current {
                let takes = match self.program[pc] {
                    Inst::Byte(b) => byte == b,
                    Inst::NotDot => byte != b'.',
                    Inst::NotNewline => byte != b'\n',
                    _ => false,
                };
                if takes && run.follow(pc + 1, pos + 1, &mut next) {
                    return true;
                }
            }
            std::mem::swap(&mut current, &mut next);
        }
        false
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

/// The pieces of a pattern and their byte offsets. Ruby's `\s` is the separator Fluentd splits
/// on; empty pieces are skipped (Fluentd's config parser strips the argument, so it never sees
/// them).
fn split_pieces(pattern: &str) -> impl Iterator<Item = (usize, &str)> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let bytes = pattern.as_bytes();
    let mut pos = 0;
    std::iter::from_fn(move || {
        while pos < bytes.len() && is_space(bytes[pos]) {
            pos += 1;
        }
        if pos == bytes.len() {
            return None;
        }
        let start = pos;
        while pos < bytes.len() && !is_space(bytes[pos]) {
            pos += 1;
        }
        // Both ends sit on ASCII bytes or the string's ends, so they are char boundaries.
        pattern.get(start..pos).map(|piece| (start, piece))
    })
}

/// An open `{`: where it is, and the jumps to patch once its `}` is found.
struct Brace {
    /// Its offset in the whole pattern, for the error if it is never closed.
    offset: usize,
    /// The `Split` before the current alternative, whose second branch goes to the next one.
    split: usize,
    /// The `Jump`s ending the earlier alternatives, to point past the group.
    exits: Vec<usize>,
}

/// A jump target not known yet; every one is patched before the piece ends.
const UNPATCHED: usize = usize::MAX;

/// Compiles one piece (`offset` is where it starts in the whole pattern) onto `program`, following
/// `GlobMatchPattern#initialize` character for character: the same escape, the same deferred
/// `.` (which `**` absorbs), the same brace stack.
fn compile_piece(
    piece: &str,
    offset: usize,
    program: &mut Vec<Inst>,
) -> Result<(), TagPatternError> {
    if piece.starts_with('/') {
        return Err(TagPatternError::new(format!(
            "regular-expression patterns (`/.../`) are not supported: `{piece}` at {offset}"
        )));
    }
    let bytes = piece.as_bytes();
    let mut braces: Vec<Brace> = Vec::new();
    let mut escape = false;
    // A `.` is held back one character, because what follows decides its meaning: before `**`
    // it turns into the "end or dot" test, at the piece's end it is dropped.
    let mut dot = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if escape {
            program.push(Inst::Byte(c));
            escape = false;
            i += 1;
            continue;
        }
        if c == b'*' && bytes.get(i + 1) == Some(&b'*') {
            if dot {
                program.push(Inst::BeforeDotOrEnd);
                dot = false;
            }
            if bytes.get(i + 2) == Some(&b'.') {
                // `(?:.*\.|\A)`: anything ending in a dot, or nothing at the tag's start.
                let at = program.len();
                program.push(Inst::Split(at + 1, at + 6));
                push_loop(program, Inst::NotNewline);
                program.push(Inst::Byte(b'.'));
                program.push(Inst::Jump(at + 7));
                program.push(Inst::AtStart);
                i += 3;
            } else {
                push_loop(program, Inst::NotNewline);
                i += 2;
            }
            continue;
        }
        if dot {
            program.push(Inst::Byte(b'.'));
            dot = false;
        }
        match c {
            b'\\' => escape = true,
            b'.' => dot = true,
            b'*' => push_loop(program, Inst::NotDot),
            b'{' => {
                braces.push(Brace {
                    offset: offset + i,
                    split: program.len(),
                    exits: Vec::new(),
                });
                program.push(Inst::Split(program.len() + 1, UNPATCHED));
            }
            // Outside braces a `,` is a literal, as Fluentd has it.
            b',' => match braces.last_mut() {
                Some(brace) => {
                    brace.exits.push(program.len());
                    program.push(Inst::Jump(UNPATCHED));
                    program[brace.split] = Inst::Split(brace.split + 1, program.len());
                    brace.split = program.len();
                    program.push(Inst::Split(program.len() + 1, UNPATCHED));
                }
                None => program.push(Inst::Byte(c)),
            },
            b'}' => {
                let Some(brace) = braces.pop() else {
                    return Err(TagPatternError::new(format!(
                        "unmatched `}}` at {} (`\\}}` matches a literal `}}`)",
                        offset + i
                    )));
                };
                // The last alternative has nothing after it to branch to: it just runs on.
                program[brace.split] = Inst::Jump(brace.split + 1);
                let end = program.len();
                for exit in brace.exits {
                    program[exit] = Inst::Jump(end);
                }
            }
            _ => program.push(Inst::Byte(c)),
        }
        i += 1;
    }
    if let Some(brace) = braces.last() {
        return Err(TagPatternError::new(format!(
            "unclosed `{{` at {}",
            brace.offset
        )));
    }
    program.push(Inst::Match);
    Ok(())
}

/// Pushes `class*`: a loop over one byte test.
fn push_loop(program: &mut Vec<Inst>, class: Inst) {
    let at = program.len();
    program.push(Inst::Split(at + 1, at + 3));
    program.push(class);
    program.push(Inst::Jump(at));
}

/// The state of one [`TagPattern::matches`].
struct Run<'a> {
    program: &'a [Inst],
    tag: &'a [u8],
    /// `seen[pc] == pos + 1` once `pc` was reached at tag position `pos`: each instruction is
    /// visited at most once per position, which bounds the match at O(program × tag).
    seen: Vec<usize>,
    /// The instructions still to visit at the current position.
    pending: Vec<usize>,
}

impl Run<'_> {
    /// Follows every non-consuming path from `start` at tag position `pos`, adding the byte
    /// tests it reaches to `tests`; true if it reaches an accepting [`Inst::Match`].
    fn follow(&mut self, start: usize, pos: usize, tests: &mut Vec<usize>) -> bool {
        self.pending.clear();
        self.pending.push(start);
        while let Some(pc) = self.pending.pop() {
            if self.seen[pc] == pos + 1 {
                continue;
            }
            self.seen[pc] = pos + 1;
            match self.program[pc] {
                Inst::Byte(_) | Inst::NotDot | Inst::NotNewline => tests.push(pc),
                Inst::Split(a, b) => {
                    self.pending.push(b);
                    self.pending.push(a);
                }
                Inst::Jump(to) => self.pending.push(to),
                Inst::AtStart => {
                    if pos == 0 {
                        self.pending.push(pc + 1);
                    }
                }
                Inst::BeforeDotOrEnd => {
                    if self.tag.get(pos).is_none_or(|&b| b == b'.') {
                        self.pending.push(pc + 1);
                    }
                }
                Inst::Match => {
                    let rest = &self.tag[pos..];
                    if rest.is_empty() || rest == b"\n" {
                        return true;
                    }
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts each `(pattern, tag, expected)`.
    fn check(cases: &[(&str, &str, bool)]) {
        for &(pattern, tag, expected) in cases {
            let compiled = match TagPattern::parse(pattern) {
                Ok(compiled) => compiled,
                Err(e) => panic!("`{pattern}` does not compile: {e}"),
            };
            assert_eq!(
                compiled.matches(tag.as_bytes()),
                expected,
                "pattern `{pattern}` against tag {tag:?}"
            );
        }
    }

    fn error(pattern: &str) -> String {
        match TagPattern::parse(pattern) {
            Ok(compiled) => panic!("`{pattern}` compiled: {compiled:?}"),
            Err(e) => e.to_string(),
        }
    }

    // The examples of Fluentd's documentation, "How do the match patterns work?" and "Note on
    // Match Order" (docs.fluentd.org/configuration/config-file). Where the docs name a pattern
    // without tags (`a.{b,c}.*`, `a.{b,c.**}`), the tags are ours, checked against match.rb.
    #[test]
    fn fluentd_docs() {
        check(&[
            ("a.*", "a.b", true),
            ("a.*", "a", false),
            ("a.*", "a.b.c", false),
            ("a.**", "a", true),
            ("a.**", "a.b", true),
            ("a.**", "a.b.c", true),
            ("{a,b}", "a", true),
            ("{a,b}", "b", true),
            ("{a,b}", "c", false),
            ("a.{b,c}.*", "a.b.x", true),
            ("a.{b,c}.*", "a.c.y", true),
            ("a.{b,c}.*", "a.d.x", false),
            ("a.{b,c}.*", "a.b", false),
            ("a.{b,c}.*", "a.b.x.y", false),
            ("a.{b,c.**}", "a.b", true),
            ("a.{b,c.**}", "a.c", true),
            ("a.{b,c.**}", "a.c.d.e", true),
            ("a.{b,c.**}", "a.b.c", false),
            ("a.{b,c.**}", "a.d", false),
            ("a b", "a", true),
            ("a b", "b", true),
            ("a b", "c", false),
            ("a.** b.*", "a", true),
            ("a.** b.*", "a.b", true),
            ("a.** b.*", "a.b.c", true),
            ("a.** b.*", "b.d", true),
            ("a.** b.*", "b", false),
            ("a.** b.*", "b.d.e", false),
            ("**", "myapp.access", true),
            ("myapp.access", "myapp.access", true),
            ("myapp.access", "myapp.error", false),
        ]);
        // `/(?!a\.).*/`, the docs' regular-expression example.
        assert!(error(r"/(?!a\.).*/").contains("not supported"));
    }

    // Cases from Fluentd's test/test_match.rb, Apache-2.0: test_simple, test_wildcard,
    // test_recursive_wildcard, test_or (GlobMatchPattern) and test_multi_pattern_or
    // (EventRouter::Rule, whitespace-separated patterns).
    #[test]
    fn fluentd_test_simple() {
        check(&[
            ("a", "a", true),
            ("a.b", "a.b", true),
            ("a", "b", false),
            ("a.b", "aab", false),
        ]);
    }

    #[test]
    fn fluentd_test_wildcard() {
        check(&[
            ("a*", "a", true),
            ("a*", "ab", true),
            ("a*", "abc", true),
            ("*a", "a", true),
            ("*a", "ba", true),
            ("*a", "cba", true),
            ("*a*", "a", true),
            ("*a*", "ba", true),
            ("*a*", "ac", true),
            ("*a*", "bac", true),
            ("a*", "a.b", false),
            ("a*", "ab.c", false),
            ("a*", "ba", false),
            ("*a", "ab", false),
            ("a.*", "a.b", true),
            ("a.*", "a.c", true),
            ("a.*", "ab", false),
            ("a.*.c", "a.b.c", true),
            ("a.*.c", "a.c.c", true),
            ("a.*.c", "a.c", false),
        ]);
    }

    #[test]
    fn fluentd_test_recursive_wildcard() {
        check(&[
            ("a.**", "a", true),
            ("a.**", "ab", false),
            ("a.**", "abc", false),
            ("a.**", "a.b", true),
            ("a.**", "ab.c", false),
            ("a.**", "ab.d.e", false),
            ("a**", "a", true),
            ("a**", "ab", true),
            ("a**", "abc", true),
            ("a**", "a.b", true),
            ("a**", "ab.c", true),
            ("a**", "ab.d.e", true),
            ("**.a", "a", true),
            ("**.a", "ba", false),
            ("**.a", "c.ba", false),
            ("**.a", "b.a", true),
            ("**.a", "cb.a", true),
            ("**.a", "d.e.a", true),
            ("**a", "a", true),
            ("**a", "ba", true),
            ("**a", "c.ba", true),
            ("**a", "b.a", true),
            ("**a", "cb.a", true),
            ("**a", "d.e.a", true),
        ]);
    }

    #[test]
    fn fluentd_test_or() {
        check(&[
            ("a.{b,c}", "a.b", true),
            ("a.{b,c}", "a.c", true),
            ("a.{b,c}", "a.d", false),
            ("a.{b,c}.**", "a.b", true),
            ("a.{b,c}.**", "a.c", true),
            ("a.{b,c}.**", "a.d", false),
            ("a.{b,c}.**", "a.cd", false),
            ("a.{b.**,c}", "a.b", true),
            ("a.{b.**,c}", "a.b.c", true),
            ("a.{b.**,c}", "a.c", true),
            ("a.{b.**,c}", "a.c.d", false),
        ]);
    }

    #[test]
    fn fluentd_test_multi_pattern_or() {
        check(&[
            ("a.b a.c", "a.b", true),
            ("a.b a.c", "a.c", true),
            ("a.b a.c", "a.d", false),
            ("a.b.** a.c.**", "a.b", true),
            ("a.b.** a.c.**", "a.c", true),
            ("a.b.** a.c.**", "a.d", false),
            ("a.b.** a.c.**", "a.cd", false),
            ("a.b.** a.c", "a.b", true),
            ("a.b.** a.c", "a.b.c", true),
            ("a.b.** a.c", "a.c", true),
            ("a.b.** a.c", "a.c.d", false),
        ]);
    }

    // test_regex_pattern's patterns: Fluentd compiles them, this module refuses them.
    #[test]
    fn fluentd_test_regex_pattern_is_refused() {
        for pattern in ["/a/", "/a.*/", "/b.*/", r"/a\..*/", r"/(?!a\.).*/"] {
            assert_eq!(
                error(pattern),
                format!(
                    "regular-expression patterns (`/.../`) are not supported: `{pattern}` at 0"
                )
            );
        }
    }

    // The corners of match.rb's translation that its tests do not cover, each checked against
    // match.rb itself.
    #[test]
    fn translation_corners() {
        check(&[
            // `*` is `[^\.]*`: within one part, possibly empty.
            ("a.b*", "a.bc", true),
            ("a.b*", "a.b", true),
            ("a.b*", "a.b.c", false),
            ("a.*", "a.", true),
            ("*", "", true),
            ("*", "a", true),
            ("*", "a.b", false),
            ("*.*", ".", true),
            ("a*b", "a.b", false),
            ("a*b", "axxb", true),
            // `**` is `.*`, but after a `.` it also accepts the tag's end, and before one the
            // tag's start.
            ("a.**", "a.", true),
            ("a.**b", "a.b", true),
            ("a.**b", "a.x.yb", true),
            ("a.**b", "ab", false),
            ("**.a", ".a", true),
            ("**.**.a", "a", true),
            ("**.**.a", "b.c.a", true),
            ("a.**.z", "a.z", true),
            ("a.**.z", "a.b.z", true),
            ("a.**.z", "a.b.c.z", true),
            ("a.**.z", "az", false),
            ("a.**.z", "a.bz", false),
            ("a.**.z", "ab.z", false),
            // Each `**.` after the first needs a dot of its own: only a leading one may be empty.
            ("a.**.**.z", "a.z", false),
            ("a.**.**.z", "a.b.z", true),
            ("***", "a.b", true),
            ("x.***", "x", true),
            // `**` alone matches everything; within a piece it does not cross a newline.
            ("**", "", true),
            ("**", "a\nb", true),
            ("a**", "a\nb", false),
            ("a.** **", "b", true),
            // A trailing `.` or `\` is dropped.
            ("a.", "a", true),
            ("a.", "a.", false),
            ("a.b.", "a.b", true),
            ("a\\", "a", true),
            // Ruby's `\Z` accepts a tag ending in one newline.
            ("a", "a\n", true),
            ("a", "a\n\n", false),
            ("a.*", "a.b\n", true),
            // `\` escapes.
            (r"a\*", "a*", true),
            (r"a\*", "ab", false),
            (r"a\.b", "a.b", true),
            (r"a\.**", "a.b", true),
            (r"a\.**", "a", false),
            (r"\**", "*", true),
            (r"\**", "*ab", true),
            (r"\**", "a", false),
            (r"\{a,b\}", "{a,b}", true),
            (r"\{a,b\}", "a", false),
            (r"a\}", "a}", true),
            // A `,` outside braces and other punctuation are literals; case matters.
            ("a,b", "a,b", true),
            ("a,b", "a", false),
            ("a?", "a?", true),
            ("a?", "ab", false),
            ("a-b_c:d", "a-b_c:d", true),
            ("A", "a", false),
            ("ä.*", "ä.ö", true),
            // Braces: alternatives are patterns, may be empty, and nest.
            ("a{,b}", "a", true),
            ("a{,b}", "ab", true),
            ("a{,b}", "ac", false),
            ("{}", "", true),
            ("{}a", "a", true),
            ("{a,b}.**", "a", true),
            ("{a,b}.**", "b.c.d", true),
            ("{a,b}.**", "c", false),
            ("{a,{b,c}.d}", "c.d", true),
            ("{a,{b,c}.d}", "a", true),
            ("{a,{b,c}.d}", "b", false),
            ("{a.{b,{c,d}}}.e", "a.d.e", true),
            ("{a.{b,{c,d}}}.e", "a.e", false),
            ("{**.x,y}", "a.b.x", true),
            ("{**.x,y}", "x", true),
            ("{**.x,y}", "y", true),
            ("b{**.x,y}", "bx", false),
            ("b{**.x,y}", "b.x", true),
            // A `.` before `{` is a plain dot: the `**` inside cannot absorb it.
            ("a.{**,b}", "a", false),
            ("a.{**,b}", "a.", true),
            ("a.{**,b}", "a.q.r", true),
            ("a.{b.,c}", "a.b.", true),
            ("a.{b.,c}", "a.b", false),
            // Any whitespace separates pieces.
            ("a\tb\n c", "c", true),
            ("  a  ", "a", true),
        ]);
    }

    #[test]
    fn errors() {
        assert_eq!(error(""), "empty tag pattern");
        assert_eq!(error(" \t "), "empty tag pattern");
        assert_eq!(error("a.{b"), "unclosed `{` at 2");
        assert_eq!(error("a.{b,{c}"), "unclosed `{` at 2");
        assert_eq!(error("{{a}"), "unclosed `{` at 0");
        assert_eq!(error("x a.{b"), "unclosed `{` at 4");
        // Whitespace splits the pattern before braces are read, as in Fluentd.
        assert_eq!(error("{a, b}"), "unclosed `{` at 0");
        assert_eq!(
            error("a}"),
            "unmatched `}` at 1 (`\\}` matches a literal `}`)"
        );
        assert_eq!(
            error("a.b {c}}"),
            "unmatched `}` at 7 (`\\}` matches a literal `}`)"
        );
        assert_eq!(
            error("a.** /b.*/"),
            "regular-expression patterns (`/.../`) are not supported: `/b.*/` at 5"
        );
        assert_eq!(
            error("/unterminated"),
            "regular-expression patterns (`/.../`) are not supported: `/unterminated` at 0"
        );
        // Only a leading `/` makes a regular expression.
        check(&[("a/b", "a/b", true)]);
        let e = TagPattern::parse("{").err();
        assert_eq!(
            e.as_ref().map(|e| e.message.as_str()),
            Some("unclosed `{` at 0")
        );
        let boxed: Option<Box<dyn std::error::Error>> = e.map(|e| e.into());
        assert!(boxed.is_some());
    }

    #[test]
    fn as_str_is_the_pattern_as_written() {
        let pattern = TagPattern::parse(" a.**\tb.* ");
        assert_eq!(pattern.as_ref().map(TagPattern::as_str), Ok(" a.**\tb.* "));
        let cloned = pattern.clone();
        assert_eq!(cloned.map(|p| p.matches(b"b.c")), Ok(true));
    }

    // Patterns that make a backtracking matcher take exponential time; each must finish (the
    // match visits each instruction at most once per tag position).
    #[test]
    fn pathological_patterns_finish() {
        let parts = vec!["p"; 200].join(".");
        check(&[
            ("**.**.**.**.x", &parts, false),
            ("**.**.**.**.x", &format!("{parts}.x"), true),
            ("**.**.**.**.x", &format!("x.{parts}"), false),
            ("a.**.**.**.**.**.**.**.**.z", &format!("a.{parts}"), false),
            ("a.**.**.**.**.**.**.**.**.z", &format!("a.{parts}.z"), true),
        ]);
        let long = "a".repeat(5000);
        let stars = "*a".repeat(30) + "b";
        let doubles = "**a".repeat(30) + "b";
        check(&[
            (&stars, &long, false),
            (&doubles, &long, false),
            (&doubles, &format!("{long}b"), true),
        ]);
        // Deep nesting compiles and matches without recursion.
        let deep = "{".repeat(10_000) + "a" + &"}".repeat(10_000);
        check(&[(&deep, "a", true), (&deep, "b", false)]);
        let alternatives = (0..2000).map(|n| format!("t{n}")).collect::<Vec<_>>();
        let braces = format!("x.{{{}}}.**", alternatives.join(","));
        let spaces = alternatives.join(" ");
        check(&[
            (&braces, "x.t1999.y.z", true),
            (&braces, "x.t2000", false),
            (&spaces, "t1500", true),
            (&spaces, "t2000", false),
        ]);
    }
}
