//! A batch into Kafka messages: split by the partition of its records' key, encoded, and
//! halved until every message fits `max_message_bytes`.

use penstock_engine::OtapBatch;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::otlp::{encode, json};
use penstock_pipeline::partition::{Part, halve, split_by_key};
use prost::Message as _;

use super::config::KafkaSinkConfig;
use crate::gateway::base::kafka::MessageEncoding;

/// One message of a batch (all of a batch's messages go to its signal's topic): its partition
/// and what it holds.
pub(super) struct Message {
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// The messages of `batch`, whose topic has `partitions` partitions when the sink has a key
/// (and the count is known).
pub(super) fn messages(
    config: &KafkaSinkConfig,
    batch: &OtapBatch,
    partitions: Option<u32>,
) -> Result<Vec<Message>, String> {
    if batch.num_items() == 0 {
        return Ok(Vec::new());
    }
    let parts = match (&config.key, partitions) {
        (Some(key), Some(count)) => split_by_key(batch, key, count).map_err(|e| {
            let key = config.key_text.as_deref().unwrap_or_default();
            format!("partitioning by {key}: {e}")
        })?,
        _ => vec![Part {
            partition: None,
            key: None,
            batch: batch.clone(),
        }],
    };
    let mut messages = Vec::new();
    for part in parts {
        let mut payloads = Vec::new();
        bounded(config, part.batch, &mut payloads)?;
        // A part cut in pieces no longer has one key per message: the partition says it all.
        let key = part.key.filter(|_| payloads.len() == 1);
        for payload in payloads {
            messages.push(Message {
                partition: part.partition.map(|p| p as i32),
                key: key.clone(),
                payload,
            });
        }
    }
    Ok(messages)
}

/// Encodes `batch` into `payloads`, halving it until each piece fits.
fn bounded(
    config: &KafkaSinkConfig,
    batch: OtapBatch,
    payloads: &mut Vec<Vec<u8>>,
) -> Result<(), String> {
    let payload = payload(config, &batch)?;
    if payload.len() <= config.max_message_bytes {
        payloads.push(payload);
        return Ok(());
    }
    match halve(&batch).map_err(|e| format!("splitting a batch: {e}"))? {
        Some((first, second)) => {
            bounded(config, first, payloads)?;
            bounded(config, second, payloads)
        }
        None => Err(format!(
            "one record encodes to {} bytes, more than max_message_bytes ({})",
            payload.len(),
            config.max_message_bytes
        )),
    }
}

/// One message's bytes in the sink's encoding.
fn payload(config: &KafkaSinkConfig, batch: &OtapBatch) -> Result<Vec<u8>, String> {
    let signal = batch.signal();
    match config.encoding {
        MessageEncoding::OtlpProto => {
            encode::encode(batch).map_err(|e| format!("encoding OTLP: {e}"))
        }
        MessageEncoding::OtlpJson => encode::encode(batch)
            .and_then(|proto| json::protobuf_to_json(signal, &proto))
            .map_err(|e| format!("encoding OTLP JSON: {e}")),
        MessageEncoding::Otap => {
            let options = EncodeOptions {
                zstd: !config.compressed,
                ..EncodeOptions::default()
            };
            let mut encoder =
                OtapEncoder::new(signal, options).map_err(|e| format!("encoding OTAP: {e}"))?;
            let records = encoder
                .encode(batch)
                .map_err(|e| format!("encoding OTAP: {e}"))?;
            Ok(records.encode_to_vec())
        }
    }
}
