//! Which OTAP batches go through as received (pass-through, see
//! [`penstock_engine::otap::raw`]): a source's batches of one signal do when every pipeline
//! reading the source only renames attribute keys and routes whole batches
//! ([`penstock_pipeline::forwarding_routes`]), and every sink they reach is an OTAP sink that
//! sends what it is given as it is: no disk buffer (its records are re-encoded), compressed
//! bodies (a forwarded body stays as it came), and no `linger` (forwarded batches are not
//! merged), and `pass_through` not turned off.

use std::sync::Arc;

use penstock_dialect::ast::SinkKind;
use penstock_dialect::{Program, Sink};
use penstock_engine::Signal;
use penstock_engine::otap::raw::KeyRenames;
use penstock_pipeline::forwarding_routes;

/// The sinks a forwarded batch goes to, each with its key renames.
pub type Routes = Arc<Vec<(String, KeyRenames)>>;

/// Per source and signal, the routes of its forwarded batches (None: decoded).
#[derive(Debug, Default)]
pub struct Forwarding {
    by_source: Vec<[Option<Routes>; 3]>,
}

fn slot(signal: Signal) -> usize {
    match signal {
        Signal::Logs => 0,
        Signal::Traces => 1,
        Signal::Metrics => 2,
    }
}

/// Whether `sink` sends forwarded batches as they are.
fn takes_forwarded(sink: &Sink) -> bool {
    sink.kind == SinkKind::Otap
        && sink.options.str("buffer") != Some("disk")
        && sink.options.str("compression").unwrap_or("zstd") == "zstd"
        && sink.options.duration("linger").is_none_or(|l| l.is_zero())
        && sink.options.bool("pass_through").unwrap_or(true)
}

impl Forwarding {
    /// The plan for `program`.
    pub fn of(program: &Program) -> Forwarding {
        let by_source = program
            .sources
            .iter()
            .map(|source| {
                [Signal::Logs, Signal::Traces, Signal::Metrics].map(|signal| {
                    let mut routes = Vec::new();
                    for pipeline in program.pipelines.iter().filter(|p| p.source == source.name) {
                        routes.extend(forwarding_routes(pipeline, signal)?);
                    }
                    let sinks_take_them = routes.iter().all(|(name, _)| {
                        program
                            .sinks
                            .iter()
                            .find(|s| &s.name == name)
                            .is_some_and(takes_forwarded)
                    });
                    sinks_take_them.then(|| Arc::new(routes))
                })
            })
            .collect();
        Forwarding { by_source }
    }

    /// The routes of forwarded batches of `signal` from source `source`, if they are.
    pub fn routes(&self, source: usize, signal: Signal) -> Option<&Routes> {
        self.by_source.get(source)?[slot(signal)].as_ref()
    }
}
