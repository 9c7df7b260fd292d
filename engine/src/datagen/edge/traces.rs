//! Edge-case spans: parentless, end-before-start, empty events/links, odd statuses.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use super::odd::{ODD_STRINGS, empty_name_scope, odd_attributes, odd_resource};
use crate::datagen::common::kv_str;
use crate::datagen::generator::DataGen;

/// Spans: parentless, end-before-start, empty events/links, odd statuses.
pub(crate) fn traces(g: &mut DataGen, now: u64) -> ExportTraceServiceRequest {
    let trace_id = g.rng.id::<16>();
    let root_id = g.rng.id::<8>();
    let root = Span {
        trace_id: trace_id.clone(),
        span_id: root_id.clone(),
        name: "🔥 GET /café/日本".to_owned(),
        kind: 5,
        // end before start
        start_time_unix_nano: now + 1_000,
        end_time_unix_nano: now,
        attributes: odd_attributes(),
        dropped_attributes_count: u32::MAX,
        events: vec![
            Event::default(),
            Event {
                time_unix_nano: now,
                name: "nan".to_owned(),
                attributes: odd_attributes(),
                dropped_attributes_count: 0,
            },
        ],
        dropped_events_count: u32::MAX,
        links: vec![
            Link::default(),
            Link {
                trace_id: vec![0; 16],
                span_id: vec![0; 8],
                trace_state: "a=b,,c=".to_owned(),
                attributes: odd_attributes(),
                dropped_attributes_count: 7,
                flags: u32::MAX,
            },
        ],
        dropped_links_count: u32::MAX,
        status: Some(Status {
            message: String::new(),
            code: 2,
        }),
        ..Default::default()
    };
    let child = Span {
        trace_id: trace_id.clone(),
        span_id: g.rng.id::<8>(),
        parent_span_id: root_id,
        trace_state: "🔥=\u{0}".to_owned(),
        name: String::new(),
        start_time_unix_nano: now,
        end_time_unix_nano: now,
        attributes: vec![kv_str("dup", "x"), kv_str("dup", "y")],
        status: Some(Status {
            message: ODD_STRINGS[1].to_owned(),
            code: 1,
        }),
        ..Default::default()
    };
    let minimal = Span {
        trace_id,
        span_id: g.rng.id::<8>(),
        ..Default::default()
    };
    let scope_spans = vec![
        ScopeSpans {
            scope: Some(empty_name_scope()),
            spans: vec![Span::default(), root, child],
            schema_url: String::new(),
        },
        ScopeSpans::default(),
    ];
    let resource_spans = vec![
        ResourceSpans {
            resource: Some(odd_resource()),
            scope_spans,
            schema_url: String::new(),
        },
        ResourceSpans {
            resource: Some(Resource::default()),
            scope_spans: Vec::new(),
            schema_url: String::new(),
        },
        ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                scope: None,
                spans: vec![minimal],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        },
    ];
    ExportTraceServiceRequest { resource_spans }
}
