//! Snapshots of the Arrow schemas: the canonical schema of every OTAP table, and the schemas
//! Penstock actually sends on the wire for realistic data (after omitting all-null columns and
//! dictionary-encoding).

#![allow(clippy::unwrap_used)]

use std::fmt::Write;

use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::StreamDecoder;
use penstock_engine::datagen::DataGen;
use penstock_engine::otap::{EncodeOptions, OtapEncoder};
use penstock_engine::schema::canonical_schema;
use penstock_engine::{PayloadType, Signal};
use prost::Message;

fn describe_field(out: &mut String, field: &Field, depth: usize) {
    let nullable = if field.is_nullable() { "" } else { " NOT NULL" };
    let indent = "  ".repeat(depth);
    match field.data_type() {
        DataType::Struct(children) => {
            writeln!(out, "{indent}{}: Struct{nullable}", field.name()).unwrap();
            for child in children {
                describe_field(out, child, depth + 1);
            }
        }
        DataType::List(item) => {
            writeln!(out, "{indent}{}: List{nullable}", field.name()).unwrap();
            describe_field(out, item, depth + 1);
        }
        other => writeln!(out, "{indent}{}: {other}{nullable}", field.name()).unwrap(),
    }
}

fn describe(schema: &Schema) -> String {
    let mut out = String::new();
    for field in schema.fields() {
        describe_field(&mut out, field, 0);
    }
    out
}

/// Scenario: the canonical schema of each of the 26 tables.
/// Guarantees: any change to a table's columns or types shows up as a snapshot diff.
#[test]
fn canonical_schemas() {
    for table in PayloadType::ALL {
        insta::assert_snapshot!(
            format!("canonical_{table:?}"),
            describe(&canonical_schema(table))
        );
    }
}

/// Scenario: realistic batches of each signal encoded with the default options.
/// Guarantees: the wire layout of every payload (column set, dictionary keys, id types) is pinned.
#[test]
fn wire_schemas() {
    let mut data = DataGen::new(9);
    for signal in Signal::ALL {
        let request = match signal {
            Signal::Logs => data.logs(2000).encode_to_vec(),
            Signal::Traces => data.traces(2000).encode_to_vec(),
            Signal::Metrics => data.metrics(2000).encode_to_vec(),
        };
        let batch = penstock_engine::otlp::decode::decode(signal, &request)
            .unwrap()
            .remove(0);
        let bar = OtapEncoder::new(signal, EncodeOptions::default())
            .unwrap()
            .encode(&batch)
            .unwrap();
        let mut described = String::new();
        for payload in &bar.arrow_payloads {
            let table = PayloadType::from_wire(payload.r#type).unwrap();
            let mut decoder = StreamDecoder::new();
            let batch = decoder
                .decode(&mut Buffer::from(payload.record.clone()))
                .unwrap()
                .unwrap();
            writeln!(described, "== {table:?} (schema_id {})", payload.schema_id).unwrap();
            described.push_str(&describe(&batch.schema()));
        }
        insta::assert_snapshot!(format!("wire_{}", signal.name()), described);
    }
}
