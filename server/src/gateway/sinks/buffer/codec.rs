//! A batch as a buffer record: its signal, then a self-contained OTAP `BatchArrowRecords`
//! (each table an Arrow IPC stream with its schema and dictionaries, bodies zstd-compressed),
//! so a record decodes on its own, whatever was written before it.

use penstock_engine::otap::{EncodeOptions, OtapDecoder, OtapEncoder};
use penstock_engine::proto::BatchArrowRecords;
use penstock_engine::{OtapBatch, Signal};
use prost::Message;

const SIGNALS: [Signal; 3] = [Signal::Logs, Signal::Traces, Signal::Metrics];

/// How records are written: every table kept (metric metadata too), zstd level 1.
fn options() -> EncodeOptions {
    EncodeOptions {
        metric_metadata: true,
        ..EncodeOptions::default()
    }
}

/// The record of `batch`.
pub fn encode(batch: &OtapBatch) -> Result<Vec<u8>, penstock_engine::Error> {
    let signal = batch.signal();
    let records = OtapEncoder::new(signal, options())?.encode(batch)?;
    let tag = SIGNALS.iter().position(|s| *s == signal).unwrap_or(0) as u8;
    let mut bytes = Vec::with_capacity(1 + records.encoded_len());
    bytes.push(tag);
    records.encode_raw(&mut bytes);
    Ok(bytes)
}

/// The batch of a record.
pub fn decode(bytes: &[u8]) -> Result<OtapBatch, String> {
    let (&tag, body) = bytes.split_first().ok_or("an empty record")?;
    let signal = *SIGNALS
        .get(tag as usize)
        .ok_or_else(|| format!("signal tag {tag}"))?;
    let records = BatchArrowRecords::decode(body).map_err(|e| e.to_string())?;
    OtapDecoder::new(signal)
        .decode(&records)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use penstock_engine::datagen::DataGen;
    use penstock_engine::otlp::{decode, encode};
    use penstock_engine::{OtapBatch, Signal, equiv};
    use prost::Message;

    /// The batches of an OTLP request of `signal`, and their records compared canonically.
    fn canonical(signal: Signal, batch: &OtapBatch) -> Vec<String> {
        let bytes = encode::encode(batch).expect("encodes as OTLP");
        match signal {
            Signal::Logs => equiv::logs(&ExportLogsServiceRequest::decode(&*bytes).unwrap()),
            Signal::Traces => equiv::traces(&ExportTraceServiceRequest::decode(&*bytes).unwrap()),
            Signal::Metrics => {
                equiv::metrics(&ExportMetricsServiceRequest::decode(&*bytes).unwrap())
            }
        }
    }

    #[test]
    fn a_record_decodes_to_its_batch_for_every_signal() {
        let mut data = DataGen::new(7);
        let requests = [
            (Signal::Logs, data.logs(300).encode_to_vec()),
            (Signal::Traces, data.traces(300).encode_to_vec()),
            (Signal::Metrics, data.metrics(300).encode_to_vec()),
        ];
        for (signal, request) in requests {
            for batch in decode::decode(signal, &request).expect("decodes") {
                let record = super::encode(&batch).expect("encodes");
                let back = super::decode(&record).expect("decodes");
                assert_eq!(back.signal(), signal);
                assert_eq!(canonical(signal, &back), canonical(signal, &batch));
            }
        }
        assert!(super::decode(&[9, 1, 2]).is_err());
        assert!(super::decode(&[0, 0xff, 0xff]).is_err());
        assert!(super::decode(&[]).is_err());
    }
}
