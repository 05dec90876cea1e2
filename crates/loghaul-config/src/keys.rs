//! The keys a raw schema takes, as serde lists them: the same list the located deserializer
//! checks a map's keys against (`unknown key ... did you mean`), read without any input, so
//! that tools and tests (the check that `docs/configuration.md` documents every key) use the
//! loader's own notion of what is accepted.

use serde::de::{self, DeserializeOwned, Visitor};

/// The keys `T` takes: the field list serde's derive hands the deserializer for a struct
/// (renamed keys as written, e.g. `type`). Empty for a type that is not a struct.
pub fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut probe = Probe(&[]);
    // The probe fails every call on purpose: only the field list it was shown matters.
    let _ = T::deserialize(&mut probe);
    probe.0
}

/// A deserializer that records the field list of the struct asked for and stops there.
struct Probe(&'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Stop {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for &mut Probe {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_a_structs_keys_as_written() {
        assert_eq!(
            keys_of::<crate::delivery::RawBuffer>(),
            ["type", "max_events", "max_size", "when_full", "sync"]
        );
        assert!(keys_of::<String>().is_empty());
    }
}
