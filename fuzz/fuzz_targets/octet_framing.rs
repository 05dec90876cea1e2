//! Fuzz the framer in OctetCounting and Auto mode: the first bytes choose max_length and a chunk
//! pattern, the rest is the stream. Any chunking must give the same frames as one big buffer,
//! consumption must stay in bounds, and the buffered partial frame must stay near max_length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul_codec::{Framer, FramingMode, FramingStats};

type Out = (Vec<(Vec<u8>, bool)>, FramingStats);

fn run(mode: FramingMode, max: usize, input: &[u8], chunks: &[usize]) -> Out {
    let mut framer = Framer::new(mode, max);
    let mut stats = FramingStats::default();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut at = 0;
    let mut sizes = chunks.iter().copied().cycle();
    while at < input.len() {
        let n = sizes.next().unwrap_or(1).clamp(1, input.len() - at);
        buf.extend_from_slice(&input[at..at + n]);
        at += n;
        frames.clear();
        let consumed = framer.decode(&buf, &mut frames, &mut stats);
        assert!(consumed <= buf.len());
        for f in &frames {
            assert!(f.start <= f.end && f.end as usize <= consumed);
            out.push((buf[f.start as usize..f.end as usize].to_vec(), f.truncated));
        }
        buf.drain(..consumed);
        assert!(buf.len() <= max.max(1) + 12, "buffered too much");
    }
    frames.clear();
    assert_eq!(framer.finish(&buf, &mut frames, &mut stats), buf.len());
    for f in &frames {
        out.push((buf[f.start as usize..f.end as usize].to_vec(), f.truncated));
    }
    (out, stats)
}

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
