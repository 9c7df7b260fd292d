//! Which batches go through as received. A source's batches of one signal may when every
//! pipeline reading the source only renames attribute keys and routes whole batches
//! ([`penstock_pipeline::forwarding_routes`]):
//!
//! - OTAP batches (pass-through, see [`penstock_engine::otap::raw`]) when every sink they
//!   reach is an OTAP sink that sends what it is given as it is: no disk buffer (its records
//!   are re-encoded), compressed bodies (a forwarded body stays as it came), and no `linger`
//!   (forwarded batches are not merged), and `pass_through` not turned off;
//! - OTLP requests (spliced, see [`penstock_engine::otlp::splice`]) when every sink they reach
//!   is an OTLP sink or an OTLP_HTTP sink sending protobuf, without a disk buffer, without
//!   `linger` (spliced requests are not merged) and with `pass_through` not turned off, and
//!   the renames are of attributes a splice rewrites.

use std::sync::Arc;

use penstock_dialect::ast::SinkKind;
use penstock_dialect::{Program, Sink};
use penstock_engine::Signal;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otlp::splice;
use penstock_pipeline::forwarding_routes;

/// The sinks a forwarded batch goes to, each with its key renames.
pub type Routes = Arc<Vec<(String, KeyRenames)>>;

/// Per source and signal, the routes of its forwarded batches (None: decoded).
#[derive(Debug, Default)]
pub struct Forwarding {
    otap: Vec<[Option<Routes>; 3]>,
    otlp: Vec<[Option<Routes>; 3]>,
}

fn slot(signal: Signal) -> usize {
    match signal {
        Signal::Logs => 0,
        Signal::Traces => 1,
        Signal::Metrics => 2,
    }
}

/// Whether `sink` sends forwarded OTAP batches as they are.
fn takes_forwarded(sink: &Sink) -> bool {
    sink.kind == SinkKind::Otap
        && sink.options.str("buffer") != Some("disk")
        && sink.options.str("compression").unwrap_or("zstd") == "zstd"
        && sink.options.duration("linger").is_none_or(|l| l.is_zero())
        && sink.options.bool("pass_through").unwrap_or(true)
}

/// Whether `sink` sends spliced OTLP requests: an OTLP sink, or an OTLP_HTTP one sending
/// protobuf (one sending JSON decodes every request to write it), that does not wait to merge
/// requests (`linger`: spliced requests go alone).
fn takes_spliced(sink: &Sink) -> bool {
    let protobuf = match sink.kind {
        SinkKind::Otlp => true,
        SinkKind::OtlpHttp => sink.options.str("encoding").unwrap_or("protobuf") == "protobuf",
        _ => false,
    };
    protobuf
        && sink.options.str("buffer") != Some("disk")
        && sink.options.duration("linger").is_none_or(|l| l.is_zero())
        && sink.options.bool("pass_through").unwrap_or(true)
}

/// Per source and signal, the routes when every sink they reach takes them (`takes`) and
/// every route's renames qualify (`renames_qualify`).
fn plan(
    program: &Program,
    takes: fn(&Sink) -> bool,
    renames_qualify: fn(Signal, &KeyRenames) -> bool,
) -> Vec<[Option<Routes>; 3]> {
    program
        .sources
        .iter()
        .map(|source| {
            [Signal::Logs, Signal::Traces, Signal::Metrics].map(|signal| {
                let mut routes = Vec::new();
                for pipeline in program.pipelines.iter().filter(|p| p.source == source.name) {
                    routes.extend(forwarding_routes(pipeline, signal)?);
                }
                let qualify = routes.iter().all(|(name, renames)| {
                    renames_qualify(signal, renames)
                        && program
                            .sinks
                            .iter()
                            .find(|s| &s.name == name)
                            .is_some_and(takes)
                });
                qualify.then(|| Arc::new(routes))
            })
        })
        .collect()
}

impl Forwarding {
    /// The plan for `program`.
    pub fn of(program: &Program) -> Forwarding {
        Forwarding {
            otap: plan(program, takes_forwarded, |_, _| true),
            otlp: plan(program, takes_spliced, splice::supports),
        }
    }

    /// The routes of forwarded OTAP batches of `signal` from source `source`, if they are.
    pub fn routes(&self, source: usize, signal: Signal) -> Option<&Routes> {
        self.otap.get(source)?[slot(signal)].as_ref()
    }

    /// The routes of spliced OTLP requests of `signal` from source `source`, if they are.
    pub fn spliced(&self, source: usize, signal: Signal) -> Option<&Routes> {
        self.otlp.get(source)?[slot(signal)].as_ref()
    }
}
