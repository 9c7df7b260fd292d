//! The gateway's error type: every variant names what failed (which file, source or sink)
//! and keeps the cause as its source, so the whole chain can be shown (see [`ErrorChain`]).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::gateway::base::delivery::DeliveryError;

/// Why the gateway could not start, reload or finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A pipeline file could not be read.
    #[error("reading {}", path.display())]
    ReadProgram {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The pipeline files do not check: every error found, one per line, each naming its
    /// file, line and column.
    #[error(transparent)]
    Check(#[from] penstock_dialect::DialectErrors),
    /// A pipeline does not compile (the error names the statement).
    #[error(transparent)]
    Compile(#[from] penstock_pipeline::PipelineError),
    /// A reload would change what only a restart may change.
    #[error(
        "the sources or sinks differ from the running ones (or a source gains its first \
         pipeline); restart the gateway to change them"
    )]
    EndpointsChanged,
    /// The journal of a pipeline's held spans could not be opened or read.
    #[error("pipeline {pipeline}: opening the journal of held spans {}", path.display())]
    Journal {
        /// The pipeline.
        pipeline: String,
        /// The journal's directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A sink's disk buffer could not be opened.
    #[error("sink {sink_name}: opening the disk buffer {}", path.display())]
    Buffer {
        /// The sink.
        sink_name: String,
        /// The buffer's directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A runtime or a thread could not be started.
    #[error("starting {what}")]
    Start {
        /// The runtime or thread.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A signal handler could not be installed.
    #[error("listening for {signal}")]
    Signal {
        /// The signal.
        signal: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A worker thread ended before it was ready.
    #[error("worker {worker}: the thread ended during start-up")]
    WorkerLost {
        /// The worker's number.
        worker: usize,
    },
    /// A worker could not compile the pipelines.
    #[error("worker {worker}: compiling pipelines")]
    WorkerCompile {
        /// The worker's number.
        worker: usize,
        /// Why.
        source: penstock_pipeline::PipelineError,
    },
    /// A listening source's `listen` address could not be resolved.
    #[error("source {source_name}: resolving '{listen}'")]
    Resolve {
        /// The source.
        source_name: String,
        /// Its `listen` option.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// A listening source's `listen` address resolves to no address.
    #[error("source {source_name}: '{listen}' resolves to nothing")]
    NoAddress {
        /// The source.
        source_name: String,
        /// Its `listen` option.
        listen: String,
    },
    /// A listening source could not listen.
    #[error("source {source_name}: listening on {address}")]
    Listen {
        /// The source.
        source_name: String,
        /// The address it was to listen on.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The query service could not listen.
    #[error("query service on {address}")]
    QueryListen {
        /// The address it was to listen on.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The query service's TLS certificate or key was refused.
    #[error("query service TLS: {0}")]
    QueryTls(String),
    /// The query service's principals could not be read.
    #[error("query service: {0}")]
    QueryPrincipals(#[from] crate::query::access::AccessError),
    /// The admin endpoint could not listen.
    #[error("admin endpoint on {address}")]
    AdminListen {
        /// The address it was to listen on.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Only one of `tls_cert` and `tls_key` was given.
    #[error("{owner}: tls_cert and tls_key must be given together")]
    TlsPair {
        /// `source NAME`.
        owner: String,
    },
    /// A PEM file named by a TLS option could not be read.
    #[error("{owner}: reading {}", path.display())]
    ReadTlsFile {
        /// `source NAME` or `sink NAME`.
        owner: String,
        /// The file, resolved.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `tls_cert` does not hold valid PEM certificates.
    #[error("{owner}: tls_cert '{path}'")]
    TlsCertificate {
        /// `source NAME`.
        owner: String,
        /// The option's value.
        path: String,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// `tls_cert` holds no certificate.
    #[error("{owner}: tls_cert '{path}' holds no certificate")]
    NoCertificate {
        /// `source NAME`.
        owner: String,
        /// The option's value.
        path: String,
    },
    /// `tls_key` does not hold a valid PEM private key.
    #[error("{owner}: tls_key '{path}'")]
    TlsKey {
        /// `source NAME`.
        owner: String,
        /// The option's value.
        path: String,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// `tls_ca` does not hold valid PEM certificates.
    #[error("{owner}: tls_ca '{path}'")]
    TlsCa {
        /// `sink NAME`.
        owner: String,
        /// The option's value.
        path: String,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// A sink has no certificate to trust: `tls_ca` holds none, or the system has none.
    #[error("{owner}: no trusted root certificates (tls_ca holds none, or the system has none)")]
    NoTrustedRoots {
        /// `sink NAME`.
        owner: String,
    },
    /// rustls refused the TLS settings of a listening source or a sink.
    #[error("{owner}: {what}")]
    TlsConfig {
        /// `source NAME` or `sink NAME`.
        owner: String,
        /// What was being set up.
        what: &'static str,
        /// Why.
        source: tokio_rustls::rustls::Error,
    },
    /// A sink has `tls_ca` with a plain `http://` endpoint.
    #[error("sink {sink_name}: tls_ca needs an https:// endpoint")]
    TlsCaWithoutHttps {
        /// The sink.
        sink_name: String,
    },
    /// A Kafka client of a source or sink could not be created.
    #[error("{role} {name}: the Kafka client: {source}")]
    KafkaClient {
        /// `source` or `sink`.
        role: &'static str,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A sink's `auth_token` cannot be sent as a header.
    #[error("sink {sink_name}: auth_token must be printable ASCII")]
    AuthToken {
        /// The sink.
        sink_name: String,
    },
    /// A sink's `endpoint` is not a usable URL.
    #[error("sink {sink_name}: bad endpoint '{endpoint}'")]
    Endpoint {
        /// The sink.
        sink_name: String,
        /// The option's value.
        endpoint: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// An OTLP/HTTP sink's URL (its `endpoint` and a signal's path) is not a valid URI.
    #[error("sink {sink_name}: bad URL '{url}'")]
    SinkUrl {
        /// The sink.
        sink_name: String,
        /// The URL.
        url: String,
        /// Why.
        source: http::uri::InvalidUri,
    },
    /// An OTLP/HTTP sink's `headers` cannot be sent.
    #[error("sink {sink_name}: headers: {message}")]
    SinkHeaders {
        /// The sink.
        sink_name: String,
        /// What is wrong.
        message: String,
    },
    /// A sink's TLS settings were refused.
    #[error("sink {sink_name}: TLS")]
    SinkTls {
        /// The sink.
        sink_name: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// A FILE sink's directory could not be created.
    #[error("sink {sink_name}: creating {}", path.display())]
    CreateDirectory {
        /// The sink.
        sink_name: String,
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A FILE sink's file could not be opened.
    #[error("sink {sink_name}: opening {}", path.display())]
    OpenSinkFile {
        /// The sink.
        sink_name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A batch could not be written as OTLP JSON for the console.
    #[error("encoding the batch as OTLP JSON")]
    RenderEncode {
        /// Why.
        source: penstock_engine::Error,
    },
    /// The OTLP JSON of a batch could not be read back for the console.
    #[error("reading the batch's OTLP JSON")]
    RenderParse {
        /// Why.
        source: serde_json::Error,
    },
    /// A GENERATOR source could not turn what it made into batches.
    #[error("source {source_name}: decoding generated telemetry")]
    Generate {
        /// The source.
        source_name: String,
        /// Why.
        source: penstock_engine::Error,
    },
    /// A GENERATOR source with a record count could not deliver some batches.
    #[error("source {source_name}: {count} batch(es) not delivered")]
    Undelivered {
        /// The source.
        source_name: String,
        /// Batches not delivered.
        count: u64,
    },
    /// A FILE source's batch was not delivered.
    #[error("source {source_name}")]
    Delivery {
        /// The source.
        source_name: String,
        /// Why.
        source: DeliveryError,
    },
    /// A FILE source's input could not be read.
    #[error("source {source_name}: reading {}", path.display())]
    ReadInput {
        /// The source.
        source_name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A FILE source's input is not OTLP JSON lines.
    #[error("source {source_name}: reading {}", path.display())]
    DecodeInput {
        /// The source.
        source_name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: penstock_engine::Error,
    },
    /// A task of the gateway panicked or was cancelled.
    #[error("{task}")]
    Task {
        /// Which task (`source NAME: ...`).
        task: String,
        /// Why.
        source: tokio::task::JoinError,
    },
    /// The drain after a signal was cut short: what was in flight was not acknowledged.
    #[error(
        "{cause} ended the drain: {in_flight_bytes} request bytes in flight and \
         {queued_batches} queued batches were not acknowledged (their senders see the \
         connection close)"
    )]
    DrainCutShort {
        /// What ended it.
        cause: DrainCut,
        /// Request bytes admitted and not acknowledged.
        in_flight_bytes: u64,
        /// Batches waiting for a worker.
        queued_batches: u64,
    },
}

/// What cuts a drain short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainCut {
    /// A second SIGTERM or Ctrl-C.
    SecondSignal,
    /// `--drain-timeout` passed.
    Timeout,
}

impl fmt::Display for DrainCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DrainCut::SecondSignal => "a second signal",
            DrainCut::Timeout => "the drain timeout",
        })
    }
}

/// Shows an error followed by each of its causes, separated by `: `.
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_shows_each_cause_after_the_context() {
        let error = GatewayError::ReadInput {
            source_name: "replay".into(),
            path: PathBuf::from("in.jsonl"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        };
        assert_eq!(error.to_string(), "source replay: reading in.jsonl");
        assert_eq!(
            ErrorChain(&error).to_string(),
            "source replay: reading in.jsonl: no such file"
        );
    }
}
