//! The OTAP source's HPACK decoder against the blocks golang.org/x/net/http2/hpack writes
//! (the encoder the Collector's otelarrow exporter writes batch headers with): every field
//! decoded, in order, across blocks that share one dynamic table.

mod common;

use std::process::Command;

use penstock_server::gateway::sources::grpc::headers::HeaderDecoder;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn blocks_from_the_go_encoder_decode_to_their_fields() {
    let Some(binary) = common::go::interop_binary() else {
        return;
    };
    let output = Command::new(binary)
        .arg("hpack")
        .output()
        .expect("run hpack");
    assert!(output.status.success(), "{output:?}");
    let mut decoder = HeaderDecoder::default();
    let mut blocks = 0;
    let mut huffman_octets = std::collections::BTreeSet::new();
    for line in String::from_utf8(output.stdout).expect("utf-8").lines() {
        let line: serde_json::Value = serde_json::from_str(line).expect("json");
        let block = unhex(line["block"].as_str().expect("block"));
        let expected: Vec<(Vec<u8>, Vec<u8>)> = line["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|f| {
                (
                    unhex(f[0].as_str().expect("name")),
                    unhex(f[1].as_str().expect("value")),
                )
            })
            .collect();
        let decoded = decoder
            .decode(&block)
            .unwrap_or_else(|e| panic!("block {blocks}: {e}"));
        let got: Vec<(Vec<u8>, Vec<u8>)> = decoded
            .fields()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(got, expected, "block {blocks}");
        if got.len() == 1 && got[0].0 == b"h" {
            huffman_octets.extend(got[0].1.iter().copied());
        }
        blocks += 1;
    }
    assert!(blocks > 500, "only {blocks} blocks");
    assert_eq!(huffman_octets.len(), 256, "every octet Huffman-coded");
}
