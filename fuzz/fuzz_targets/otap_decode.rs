//! Fuzzes the OTAP stream decoder. The input is a sequence of `BatchArrowRecords` messages
//! (4-byte little-endian length prefixes) forming one stream of the signal chosen by the first
//! byte. Any input must give batches or errors, never a panic; whatever decodes must encode to
//! OTLP and OTAP.

#![no_main]

use libfuzzer_sys::fuzz_target;
use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::otlp::encode;
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::Signal;
use prost::Message;

fuzz_target!(|data: &[u8]| {
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
