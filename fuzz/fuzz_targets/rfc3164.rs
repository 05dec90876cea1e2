//! Fuzz the RFC 3164 decoder (forced format and auto-detection), strict and lenient.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use loghaul_codec::Format;

fuzz_target!(|data: &[u8]| {
    common::decode_and_encode(data, Format::Rfc3164);
    common::decode_and_encode(data, Format::Auto);
});
