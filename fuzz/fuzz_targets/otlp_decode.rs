//! Fuzzes the OTLP protobuf decoders: any input must give a batch or an error, never a panic;
//! whatever decodes must encode back to OTLP and decode again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use penstock_engine::otlp::{encode, json};
use penstock_engine::Signal;

fuzz_target!(|data: &[u8]| {
    for signal in Signal::ALL {
        if let Ok(batches) = penstock_engine::otlp::decode::decode(signal, data) {
            for batch in &batches {
                let bytes = encode::encode(batch).expect("a decoded batch encodes");
                penstock_engine::otlp::decode::decode(signal, &bytes).expect("re-encoded OTLP decodes");
            }
        }
    }
});
