//! Which batches go through as received. A source's batches of one signal may when every
//! pipeline reading the source only renames attribute keys and routes whole batches
//! ([`penstock_pipeline::forwarding_routes`]):
//!
//! - OTAP batches (pass-through, see [`penstock_engine::otap::raw`]) when every sink they
//!   reach is an OTAP sink that sends what it is given as it is: no disk buffer (its records
//!   are re-encoded), compressed bodies (a forwarded body stays as it came), and no `linger`
//!   (forwarded batches are not merged), and `pass_through` not turned off. Pipelines that
//!   also delete log records or spans qualify too: such a stream is decoded beside, the
//!   pipelines run on it, and the rows left go on in the batch's own IPC streams (see
//!   [`penstock_engine::otap::raw::RawBatch::narrowed`]);
//! - OTLP requests (spliced, see [`penstock_engine::otlp::splice`]) when every sink they reach
//!   is an OTLP sink or an OTLP_HTTP sink sending protobuf, without a disk buffer, without
//!   `linger` (spliced requests are not merged) and with `pass_through` not turned off, and
//!   the renames are of attributes a splice rewrites.

use std::sync::Arc;

use penstock_dialect::ast::SinkKind;
use penstock_dialect::{Program, Sink};
use penstock_engine::Signal;
use penstock_engine::otap::Reads;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otlp::splice;
use penstock_pipeline::{forwarding_routes, narrowing_reads, narrowing_routes};

/// The sinks a forwarded batch goes to, each with its key renames.
pub type Routes = Arc<Vec<(String, KeyRenames)>>;

/// The pipelines' statements for a signal, as far as forwarding goes: its routes, or None
/// when it does something forwarding cannot do.
type RoutesOf = fn(&penstock_dialect::Pipeline, Signal) -> Option<Vec<(String, KeyRenames)>>;

/// Per source and signal, the routes of its forwarded batches (None: decoded).
#[derive(Debug, Default)]
pub struct Forwarding {
    otap: Vec<[Option<Routes>; 3]>,
    /// Per source and signal, when its OTAP batches are decoded beside (see
    /// [`narrowing_routes`]): what its pipelines read of them.
    narrowing: Vec<[Option<Arc<Reads>>; 3]>,
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
        && !sink.disk_buffered()
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
        && !sink.disk_buffered()
        && sink.options.duration("linger").is_none_or(|l| l.is_zero())
        && sink.options.bool("pass_through").unwrap_or(true)
}

/// Per source and signal, the routes when every sink they reach takes them (`takes`) and
/// every route's renames qualify (`renames_qualify`).
fn plan(
    program: &Program,
    routes_of: RoutesOf,
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
                    routes.extend(routes_of(pipeline, signal)?);
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
        // Narrowing routes accept every pipeline forwarding routes do, with the same routes:
        // a signal is decoded beside when only the former take it.
        let otap = plan(program, narrowing_routes, takes_forwarded, |_, _| true);
        let whole = plan(program, forwarding_routes, takes_forwarded, |_, _| true);
        let narrowing = otap
            .iter()
            .zip(&whole)
            .zip(&program.sources)
            .map(|((n, w), source)| {
                [Signal::Logs, Signal::Traces, Signal::Metrics].map(|signal| {
                    let i = slot(signal);
                    (n[i].is_some() && w[i].is_none()).then(|| {
                        let mut reads = Reads::default();
                        program
                            .pipelines
                            .iter()
                            .filter(|p| p.source == source.name)
                            .for_each(|p| reads.extend(&narrowing_reads(p, signal)));
                        Arc::new(reads)
                    })
                })
            })
            .collect();
        Forwarding {
            otap,
            narrowing,
            otlp: plan(program, forwarding_routes, takes_spliced, splice::supports),
        }
    }

    /// When forwarded OTAP batches of `signal` from source `source` are decoded beside, for
    /// pipelines that remove rows: what those pipelines read of them.
    pub fn narrowing(&self, source: usize, signal: Signal) -> Option<&Arc<Reads>> {
        self.narrowing.get(source)?[slot(signal)].as_ref()
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
