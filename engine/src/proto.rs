//! OTAP protobuf messages (`opentelemetry.proto.experimental.arrow.v1`), generated at build time
//! from `proto/arrow_service.proto` with a vendored `protoc`.

#![allow(missing_docs, clippy::all, unused_qualifications)]

include!(concat!(
    env!("OUT_DIR"),
    "/opentelemetry.proto.experimental.arrow.v1.rs"
));
