//! Generates the OTAP protobuf messages from `proto/arrow_service.proto` with a vendored
//! `protoc`, so building needs no protobuf compiler on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/arrow_service.proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    // Payload bytes stay reference-counted slices of the received message: no copies.
    config.bytes(["."]);
    config.compile_protos(&["proto/arrow_service.proto"], &["proto"])?;
    Ok(())
}
