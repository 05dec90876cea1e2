//! Fuzz the framer in OctetCounting and Auto mode: the first bytes choose max_length and a chunk
//! pattern, the rest is the stream. Any chunking must give the same frames as one big buffer,
//! consumption must stay in bounds, and the buffered partial frame must stay near max_length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul_codec::FramingMode;
use loghaul_codec::framing::frame_in_chunks as run;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let max = usize::from(u16::from_le_bytes([data[0], data[1]]) % 512);
    let chunks: Vec<usize> = [data[2], data[3]]
        .iter()
        .map(|&c| usize::from(c % 64) + 1)
        .collect();
    let stream = &data[4..];
    for mode in [FramingMode::OctetCounting, FramingMode::Auto] {
        let whole = run(mode, max, stream, &[usize::MAX]);
        assert_eq!(
            run(mode, max, stream, &chunks),
            whole,
            "chunking changed the frames"
        );
        assert_eq!(
            run(mode, max, stream, &[1]),
            whole,
            "byte by byte changed the frames"
        );
    }
});
