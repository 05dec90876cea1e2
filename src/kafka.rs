//! What the `kafka` sink and source share (their librdkafka client's errors: the reason
//! `/health` shows).

use std::sync::Mutex;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// The reasons a client gives for being degraded. librdkafka follows the error that says why
/// (an authentication refused, a TLS handshake failed, a name that does not resolve) with
/// "N/N brokers are down", which says only that; the cause is kept and shown beside it.
#[derive(Debug, Default)]
pub struct Reasons {
    cause: Mutex<Option<String>>,
}

impl Reasons {
    /// The health reason for `error` (librdkafka's `reason` text).
    pub fn describe(&self, error: &KafkaError, reason: &str) -> String {
        let Ok(mut cause) = self.cause.lock() else {
            return format!("kafka: {reason}");
        };
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            match cause.as_deref() {
                Some(c) => format!("kafka: {reason} (last error: {c})"),
                None => format!("kafka: {reason}"),
            }
        } else {
            *cause = Some(reason.to_owned());
            format!("kafka: {reason}")
        }
    }

    /// The client works again: an old cause no longer explains anything.
    pub fn clear(&self) {
        if let Ok(mut cause) = self.cause.lock() {
            *cause = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn all_brokers_down_keeps_the_cause_until_cleared() {
        let r = Reasons::default();
        let down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        assert_eq!(
            r.describe(&down, "1/1 brokers are down"),
            "kafka: 1/1 brokers are down"
        );
        let auth = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert_eq!(
            r.describe(&auth, "SASL authentication error"),
            "kafka: SASL authentication error"
        );
        assert_eq!(
            r.describe(&down, "1/1 brokers are down"),
            "kafka: 1/1 brokers are down (last error: SASL authentication error)"
        );
        r.clear();
        assert_eq!(
            r.describe(&down, "1/1 brokers are down"),
            "kafka: 1/1 brokers are down"
        );
    }
}
