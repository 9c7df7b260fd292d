//! Starting a program's sources: each kind through its driver, listed once in [`driver`].
//! Sources no pipeline reads are not started.

use penstock_dialect::Program;
use penstock_dialect::ast::SourceKind;
use tokio::task::JoinSet;

use super::contract::{SourceDriver, SourceSetup, SourceStart, Started};
use super::{file, generator, grpc, http, kafka};
use crate::gateway::base::error::GatewayError;

/// The driver of each source kind: adding a kind is its file and its line here.
pub fn driver(kind: SourceKind) -> &'static dyn SourceDriver {
    match kind {
        SourceKind::Grpc => &grpc::GrpcSource,
        SourceKind::Http => &http::HttpSource,
        SourceKind::Generator => &generator::GeneratorSource,
        SourceKind::File => &file::FileSource,
        SourceKind::Kafka => &kafka::KafkaSource,
    }
}

/// Starts every source of `program` that a pipeline reads; reports where listeners listen.
pub async fn start(program: &Program, setup: &SourceSetup<'_>) -> Result<Started, GatewayError> {
    let mut started = Started {
        acceptors: JoinSet::new(),
        tasks: JoinSet::new(),
        endless: false,
    };
    for (index, source) in program.sources.iter().enumerate() {
        if !program.pipelines.iter().any(|p| p.source == source.name) {
            continue;
        }
        let start = SourceStart {
            source,
            index,
            setup,
            started: &mut started,
        };
        driver(source.kind).start(start).await?;
    }
    Ok(started)
}
