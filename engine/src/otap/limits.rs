//! The bounds on what one OTAP stream may make the decoder allocate.

/// Limits that bound what one stream may make the decoder allocate.
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Most decompressed bytes the compressed buffers of one payload may declare.
    pub max_payload_decompressed_bytes: u64,
    /// Most rows one table (record batch or dictionary) may declare.
    pub max_rows: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_payload_decompressed_bytes: 256 << 20,
            max_rows: 1 << 20,
        }
    }
}
