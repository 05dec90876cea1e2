//! Fuzz the RFC 5424 decoder (structured data, timestamps, escapes), strict and lenient.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loghaul_codec::Format;

fuzz_target!(|data: &[u8]| {
    common::decode_and_encode(data, Format::Rfc5424);
});
