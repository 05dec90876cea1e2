//! Fuzz the framer in all its modes (Newline, OctetCounting, Auto): the first bytes choose
//! max_length and a chunk pattern, the rest is the stream. Any chunking must give the same frames
//! as one big buffer, consumption must stay in bounds, the buffered partial frame must stay near
//! max_length, and no frame may be empty or longer than max_length allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul_codec::FramingMode;
use loghaul_codec::framing::frame_in_chunks as run;

/// Auto mode keeps a bare number (at most 10 digits and a space) left at EOF as a line of text,
/// whatever max_length is, so its frames may reach this length.
const AUTO_BARE_NUMBER: usize = 11;

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
    for mode in [
        FramingMode::Newline,
        FramingMode::OctetCounting,
        FramingMode::Auto,
    ] {
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
        let longest = match mode {
            FramingMode::Auto => max.max(AUTO_BARE_NUMBER),
            _ => max.max(1),
        };
        for (frame, truncated) in &whole.0 {
            assert!(!frame.is_empty(), "an empty frame in {mode:?} mode");
            assert!(
                frame.len() <= longest,
                "a frame of {} bytes in {mode:?} mode with max_length {max}",
                frame.len()
            );
            if *truncated {
                assert!(
                    frame.len() <= max.max(1),
                    "a cut frame longer than max_length"
                );
            }
        }
        // Frames are cut from the stream: together they are never longer than it.
        let total: usize = whole.0.iter().map(|(f, _)| f.len()).sum();
        assert!(total <= stream.len());
    }
});
