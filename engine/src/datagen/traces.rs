//! Realistic traces: trees of 5-20 spans sharing a trace id, crossing services, with
//! HTTP/DB/messaging attributes, statuses, events and links.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use super::common::plan;
use super::generator::DataGen;
use super::spans::{FLAGS_LOCAL, FLAGS_REMOTE, Op, describe, event, link};
use super::vocab::{ERROR_MESSAGES, SERVICES};

/// Builds a traces request with exactly `spans` spans.
pub(super) fn generate(g: &mut DataGen, spans: usize) -> ExportTraceServiceRequest {
    let groups = plan(&mut g.rng, &g.profiles, spans);
    let slots: Vec<(usize, usize)> = groups
        .iter()
        .flatten()
        .map(|s| (s.service, s.scope))
        .collect();
    let mut buckets: Vec<Vec<Span>> = vec![Vec::new(); slots.len()];
    let mut remaining = spans;
    while remaining > 0 {
        let n = g.rng.range_usize(5, 20).min(remaining);
        trace(g, n, &slots, &mut buckets);
        remaining -= n;
    }
    let mut buckets = buckets.into_iter();
    let mut resource_spans = Vec::with_capacity(groups.len());
    for group in &groups {
        let profile = &g.profiles[group[0].service];
        let scope_spans: Vec<ScopeSpans> = group
            .iter()
            .zip(buckets.by_ref())
            .filter(|(_, spans)| !spans.is_empty())
            .map(|(slot, spans)| {
                let (scope, schema_url) = profile.scopes[slot.scope].clone();
                ScopeSpans {
                    scope: Some(scope),
                    spans,
                    schema_url,
                }
            })
            .collect();
        if !scope_spans.is_empty() {
            resource_spans.push(ResourceSpans {
                resource: Some(profile.resource.clone()),
                scope_spans,
                schema_url: profile.schema_url.clone(),
            });
        }
    }
    ExportTraceServiceRequest { resource_spans }
}

/// Generates one trace of `n` spans and appends each span to its slot's bucket.
fn trace(g: &mut DataGen, n: usize, slots: &[(usize, usize)], buckets: &mut [Vec<Span>]) {
    let root_start = g.tick(10_000, 5_000_000);
    let rng = &mut g.rng;
    let trace_id = rng.id::<16>();
    let trace_state = if rng.chance(0.1) {
        format!("rojo=00f067aa0ba902b7,congo={}", rng.alnum(11))
    } else {
        String::new()
    };
    let use_flags = rng.chance(0.6);
    // (span id, start, end, slot index)
    let mut nodes: Vec<(Vec<u8>, u64, u64, usize)> = Vec::with_capacity(n);
    for i in 0..n {
        let (parent, start, end, slot, op) = if i == 0 {
            let dur = (rng.log_uniform(0.5, 500.0) * 1e6) as u64;
            let remote = rng.chance(0.15).then(|| rng.id::<8>());
            (
                remote,
                root_start,
                root_start + dur,
                rng.index(slots.len()),
                Op::Server,
            )
        } else {
            let p = if rng.chance(0.5) { i - 1 } else { rng.index(i) };
            let (ref pid, ps, pe, pslot) = nodes[p];
            let start = ps + ((pe - ps) as f64 * rng.f64_range(0.0, 0.6)) as u64;
            let dur = (((pe - start) as f64 * rng.f64_range(0.1, 0.95)) as u64).max(100_000);
            let slot = if rng.chance(0.7) {
                pslot
            } else {
                rng.index(slots.len())
            };
            let op = if slot != pslot {
                Op::Server
            } else {
                const OPS: [Op; 5] = [
                    Op::HttpClient,
                    Op::Db,
                    Op::Internal,
                    Op::Producer,
                    Op::Consumer,
                ];
                OPS[rng.weighted(&[30, 25, 27, 9, 9])]
            };
            (Some(pid.clone()), start, start + dur, slot, op)
        };
        let span_id = rng.id::<8>();
        let service = SERVICES[slots[slot].0].name;
        let (name, kind, attributes, http_status) = describe(rng, op, service);
        let is_error =
            http_status.is_some_and(|s| s >= 500) || (http_status.is_none() && rng.chance(0.04));
        let status = if is_error {
            Some(Status {
                message: (*rng.pick(ERROR_MESSAGES)).to_owned(),
                code: 2,
            })
        } else if rng.chance(0.05) {
            Some(Status {
                message: String::new(),
                code: 1,
            })
        } else if rng.chance(0.5) {
            Some(Status::default())
        } else {
            None
        };
        let n_events = rng.weighted(&[60, 25, 10, 5]).max(usize::from(is_error));
        let events = (0..n_events)
            .map(|e| event(rng, start, end, is_error && e == 0))
            .collect();
        let link_w: &[u32] = if op == Op::Consumer {
            &[40, 40, 20]
        } else {
            &[85, 10, 5]
        };
        let links = (0..rng.weighted(link_w)).map(|_| link(rng)).collect();
        let remote_root = i == 0 && parent.is_some();
        let flags = match (use_flags, remote_root) {
            (false, _) => 0,
            (true, false) => FLAGS_LOCAL,
            (true, true) => FLAGS_REMOTE,
        };
        let dropped = rng.chance(0.03);
        let span = Span {
            trace_id: trace_id.clone(),
            span_id: span_id.clone(),
            trace_state: trace_state.clone(),
            parent_span_id: parent.unwrap_or_default(),
            flags,
            name,
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            dropped_attributes_count: if dropped { rng.range(1, 5) as u32 } else { 0 },
            events,
            dropped_events_count: if dropped { rng.range(0, 2) as u32 } else { 0 },
            links,
            dropped_links_count: if dropped { rng.range(0, 1) as u32 } else { 0 },
            status,
        };
        buckets[slot].push(span);
        nodes.push((span_id, start, end, slot));
    }
}
