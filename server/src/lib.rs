//! `penstock-server`: Penstock's gateway and the `penstock` command-line tool.
//!
//! The crate owns:
//! - [`gateway`]: `penstock run`, the telemetry gateway, in layers: a foundation
//!   ([`gateway::base`]), sources and sinks each behind one contract, per-core workers that
//!   run the compiled pipelines, and on top how it is started and operated. Sources (OTLP/gRPC
//!   and OTAP, OTLP/HTTP, Kafka, generators, files) feed the workers; sinks (OTAP, OTLP,
//!   OTLP/HTTP, Kafka, files, console) acknowledge what they accepted; the admin endpoint,
//!   reloads on SIGHUP and the drain after SIGTERM are how it is operated. It loads and
//!   compiles pipeline files itself ([`gateway::base::program`]), reports while it runs
//!   through `tracing` events, and fails with [`gateway::GatewayError`].
//! - [`query`]: live SQL over the running gateway (Arrow Flight SQL on `--query-listen`) and
//!   the taps on the data path it reads.
//! - [`cli`]: the other commands (`penstock check`, `penstock replay`, `penstock loadgen`) and
//!   how `penstock run` sets up its log output.
//!
//! What it must not depend on: the gateway never uses [`cli`] (the commands use the gateway,
//! never the reverse), and library code under [`gateway`] returns typed errors, not `anyhow`.
//! It builds on `penstock-engine` (batches, codecs), `penstock-dialect` (the pipeline
//! language) and `penstock-pipeline` (compiled pipelines); none of those depends on it. The
//! `penstock` binary (`src/main.rs`) only parses arguments and dispatches here.

pub mod cli;
pub mod gateway;
pub mod query;
