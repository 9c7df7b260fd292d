//! OTLP export requests sent on as received (see [`crate::gateway::base::forwarding`]): each route
//! gets the request's protobuf with its key renames spliced in, without decoding it into
//! Arrow and encoding it again.

use std::sync::Arc;

use bytes::Bytes;
use penstock_engine::Signal;
use penstock_engine::otap::raw::KeyRenames;
use penstock_engine::otlp::splice::{self, Spliced};

use super::listener::SourceContext;
use crate::gateway::base::delivery::AsReceived;
use crate::gateway::base::job::ForwardedJob;

/// The request `bytes` of `signal` spliced for every route, when the running program lets
/// this source's requests through so and no query watches them; None to decode it instead.
/// Fails on a request whose framing is not valid protobuf.
pub fn job(
    context: &SourceContext,
    signal: Signal,
    bytes: &Bytes,
) -> Result<Option<ForwardedJob>, penstock_engine::Error> {
    let running = Arc::clone(&context.worker.running.borrow());
    let Some(routes) = running.forwarding.spliced(context.index, signal) else {
        return Ok(None);
    };
    if context.taps.watching() {
        return Ok(None);
    }
    // Routes with the same renames share one splice.
    let mut made: Vec<(&KeyRenames, Spliced)> = Vec::new();
    let mut outputs = Vec::with_capacity(routes.len());
    for (sink, renames) in routes.iter() {
        let spliced = match made.iter().find(|(r, _)| *r == renames) {
            Some((_, spliced)) => spliced.clone(),
            None => {
                let spliced = splice::splice(signal, bytes, renames)?;
                made.push((renames, spliced.clone()));
                spliced
            }
        };
        let copy = AsReceived::Otlp {
            signal,
            request: spliced,
        };
        outputs.push((sink.clone(), copy));
    }
    let items = match made.first() {
        Some((_, spliced)) => spliced.items,
        // Routed nowhere: only counted.
        None => splice::splice(signal, bytes, &KeyRenames::default())?.items,
    };
    Ok(Some(ForwardedJob {
        signal,
        items,
        outputs,
        decoded: None,
    }))
}
