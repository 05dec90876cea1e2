//! [`SinkError`]: why a sink could not deliver events, and whether trying again can help.
//!
//! Every sink judges its failures into this one type, so what follows from the judgement is the
//! same everywhere: a retryable error is retried (with backoff, under the sink's `retry`
//! policy, or by the sink's client library) and never drops events; a permanent one sends the
//! events to the dead-letter file ([`crate::pipeline::dlq::DeadLetters::write`]) with the
//! error's text as the reason. Retries that run out turn a retryable error into a permanent one
//! ([`SinkError::exhausted`]).
//!
//! Its text (`Display`) is the whole reason, as users see it in logs, `/health` and dead-letter
//! records: the context, then the cause's own text (`cannot write /x: No space left on device`).
//! Like `std::io::Error`, it shows its cause in its text, so `source()` skips the cause and
//! returns the cause's own source: printing the chain (`{:#}`) does not repeat it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Any error a [`SinkError`] may keep as its cause.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Whether trying again can deliver what failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The failure may pass (the peer is down or busy, the disk is full): keep the events and
    /// try again.
    Retryable,
    /// No retry can help (the peer refused these events, the path can never exist): the events
    /// go to the dead letters.
    Permanent,
}

/// A failure to deliver events: what failed (context), why (the cause), and whether a retry
/// can help. Cheap to clone (the cause is shared): a failed request's error is every one of its
/// events' reason.
#[derive(Debug, Clone)]
pub struct SinkError {
    retry: Retry,
    /// What failed, in words (`cannot write /var/log/x`); empty when the cause says it all.
    context: String,
    cause: Option<Arc<dyn StdError + Send + Sync + 'static>>,
    /// How long the peer asked to be left alone before the next attempt (HTTP `Retry-After`).
    retry_after: Option<Duration>,
}

impl SinkError {
    /// A failure that may pass; `context` says what failed.
    pub fn retryable(context: impl Into<String>) -> SinkError {
        SinkError::new(Retry::Retryable, context)
    }

    /// A failure no retry can help; `context` says what failed.
    pub fn permanent(context: impl Into<String>) -> SinkError {
        SinkError::new(Retry::Permanent, context)
    }

    pub fn new(retry: Retry, context: impl Into<String>) -> SinkError {
        SinkError {
            retry,
            context: context.into(),
            cause: None,
            retry_after: None,
        }
    }

    /// A failure whose cause says what failed by itself (no context of its own).
    pub fn from_cause(retry: Retry, cause: impl Into<BoxError>) -> SinkError {
        SinkError::new(retry, String::new()).with_cause(cause)
    }

    /// An I/O failure of `context` (`cannot write /x`), retryable when the error may go away by
    /// itself (see [`io_may_pass`]).
    pub fn io(context: impl Into<String>, error: std::io::Error) -> SinkError {
        let retry = if io_may_pass(&error) {
            Retry::Retryable
        } else {
            Retry::Permanent
        };
        SinkError::new(retry, context).with_cause(error)
    }

    /// The same error, caused by `cause` (shown after the context).
    #[must_use]
    pub fn with_cause(mut self, cause: impl Into<BoxError>) -> SinkError {
        self.cause = Some(Arc::from(cause.into()));
        self
    }

    /// The same error, with the wait the peer asked for before the next attempt.
    #[must_use]
    pub fn with_retry_after(mut self, wait: Option<Duration>) -> SinkError {
        self.retry_after = wait;
        self
    }

    /// Retries ran out: the same failure, now permanent, its text followed by `note` (which
    /// says so: ` (after 3 attempts)`). The cause lives on in the text.
    #[must_use]
    pub fn exhausted(self, note: impl fmt::Display) -> SinkError {
        SinkError {
            retry: Retry::Permanent,
            context: format!("{self}{note}"),
            cause: None,
            retry_after: None,
        }
    }

    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// Whether trying again may deliver the events.
    pub fn is_retryable(&self) -> bool {
        self.retry == Retry::Retryable
    }

    /// Whether no retry can help: the events belong in the dead letters.
    pub fn is_permanent(&self) -> bool {
        self.retry == Retry::Permanent
    }

    /// The wait the peer asked for, if it asked.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// What failed, without the cause.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// The cause, if it is a `T` (an `std::io::Error`, a sink's own refusal type).
    pub fn cause<T: StdError + 'static>(&self) -> Option<&T> {
        self.cause.as_deref()?.downcast_ref::<T>()
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.context[..], &self.cause) {
            ("", Some(cause)) => write!(f, "{cause}"),
            (context, Some(cause)) => write!(f, "{context}: {cause}"),
            (context, None) => f.write_str(context),
        }
    }
}

impl StdError for SinkError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        // The cause is in the text already (see the module's doc).
        self.cause.as_deref()?.source()
    }
}

/// Whether an I/O error may go away by itself (space freed, a device back, a slow peer): what
/// a sink writing to files or pipes keeps and tries again rather than gives up on.
pub fn io_may_pass(error: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        error.kind(),
        K::StorageFull | K::QuotaExceeded | K::WouldBlock | K::TimedOut | K::WriteZero
    ) || error.raw_os_error() == Some(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_context_then_cause() {
        let e = SinkError::io(
            "cannot write /x",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(e.is_retryable());
        assert!(
            e.to_string()
                .starts_with("cannot write /x: No space left on device"),
            "{e}"
        );
        assert_eq!(e.context(), "cannot write /x");
        assert!(e.cause::<std::io::Error>().is_some());
        assert_eq!(SinkError::permanent("refused").to_string(), "refused");
        let bare = SinkError::from_cause(Retry::Permanent, "the server answered 400: no");
        assert_eq!(bare.to_string(), "the server answered 400: no");
    }

    #[test]
    fn io_errors_that_may_pass_are_retryable_and_others_permanent() {
        for code in [libc::ENOSPC, libc::EDQUOT, libc::EIO, libc::EAGAIN] {
            let e = SinkError::io("w", std::io::Error::from_raw_os_error(code));
            assert!(e.is_retryable(), "{code}: {e}");
        }
        for code in [libc::EACCES, libc::EBADF, libc::EROFS, libc::EPIPE] {
            let e = SinkError::io("w", std::io::Error::from_raw_os_error(code));
            assert!(e.is_permanent(), "{code}: {e}");
        }
    }

    #[test]
    fn exhausted_turns_permanent_and_keeps_the_text() {
        let e = SinkError::retryable("the server answered 503: busy")
            .with_retry_after(Some(Duration::from_secs(2)));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
        let e = e.exhausted(" (after 3 attempts)");
        assert!(e.is_permanent());
        assert_eq!(e.retry_after(), None);
        assert_eq!(
            e.to_string(),
            "the server answered 503: busy (after 3 attempts)"
        );
    }

    #[test]
    fn the_chain_does_not_repeat_the_cause() {
        let e = SinkError::io("cannot write /x", std::io::Error::other("disk gone"));
        let chain = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(chain, "cannot write /x: disk gone");
    }
}
