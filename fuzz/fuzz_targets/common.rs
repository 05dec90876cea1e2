//! Shared harness: decode one frame in strict and lenient mode, check the invariants, and encode
//! the event to JSON and text (the encoders must survive whatever the decoders produce).

use bytes::Bytes;
use loghaul_codec::{
    DecodeOptions, DecodeStats, Decoder, Format, Frame, TimeZone, encode_json, encode_text,
};
use loghaul_core::{EventBatch, Timestamp};

pub fn decode_and_encode(data: &[u8], format: Format) {
    let frames = [Frame {
        start: 0,
        end: data.len() as u32,
        truncated: false,
    }];
    for strict in [false, true] {
        let mut batch = EventBatch::new(Bytes::copy_from_slice(data), "fuzz".into(), "syslog");
        let opts = DecodeOptions {
            format,
            strict,
            timezone: TimeZone::Fixed(3600),
        };
        let mut stats = DecodeStats::default();
        let received = Timestamp::from_nanos(1_700_000_000_000_000_000, 6);
        Decoder::new(opts).decode_batch(&mut batch, &frames, received, None, &mut stats);
        assert_eq!(batch.events.len(), 1, "one event per frame");
        let event = batch.events[0];
        for span in [
            event.message.get(),
            event.hostname.get(),
            event.appname.get(),
            event.procid.get(),
            event.msgid.get(),
        ]
        .into_iter()
        .flatten()
        {
            assert!(
                span.start <= span.end && span.end as usize <= data.len(),
                "span inside the frame"
            );
        }
        let mut out = Vec::new();
        encode_json(&batch, &event, &mut out);
        assert!(std::str::from_utf8(&out).is_ok(), "JSON output is UTF-8");
        assert_eq!(out.last(), Some(&b'\n'));
        out.clear();
        encode_text(&batch, &event, &mut out);
        assert!(std::str::from_utf8(&out).is_ok(), "text output is UTF-8");
    }
}
