//! Fuzzes the OTAP stream decoder. The input is a sequence of `BatchArrowRecords` messages
//! (4-byte little-endian length prefixes) forming one stream of the signal chosen by the first
//! byte. Any input must give batches or errors, never a panic; whatever decodes must encode to
//! OTLP and OTAP.

#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::encode;
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::Signal;
use prost::Message;

static QUIET_CAUGHT_PANICS: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    // The decoder contains panics of the Arrow IPC reader (catch_unwind) and turns them into
    // errors; libFuzzer's hook would abort on those too. With a silent hook, a panic that escapes
    // the decoder still unwinds into libFuzzer's C frames and aborts, so it is still reported.
    QUIET_CAUGHT_PANICS.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let Some((&first, mut rest)) = data.split_first() else { return };
    let signal = Signal::ALL[usize::from(first) % 3];
    let mut decoder = OtapDecoder::new(signal);
    let mut encoder = OtapEncoder::new(signal, EncodeOptions::default()).expect("encoder");
    while rest.len() >= 4 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(message) = rest.get(4..4 + len) else { return };
        rest = &rest[4 + len..];
        let Ok(bar) = BatchArrowRecords::decode(message) else { return };
        match decoder.decode(&bar) {
            Ok(batch) => {
                encode::encode(&batch).expect("a decoded batch encodes as OTLP");
                let _ = encoder.encode(&batch);
            }
            Err(_) => return,
        }
    }
});
