//! The gateway's own counters, exported by the admin endpoint as Prometheus text: per source
//! and sink, batch latency, what is held now, and totals. The running program's counters are
//! in [`crate::gateway::base::running`], the memory budget's in [`crate::gateway::base::memory`].

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use penstock_dialect::Program;

use crate::gateway::base::buffer_metrics::BufferCounters;
use crate::gateway::base::memory::Memory;
use crate::gateway::base::report;
use crate::gateway::base::running::Running;
use tracing::Level;

/// Records, bytes and batches through a source or sink.
#[derive(Debug, Default)]
pub struct Flow {
    /// Records.
    pub records: AtomicU64,
    /// Encoded bytes (as received or sent).
    pub bytes: AtomicU64,
    /// Batches (requests or OTAP batches).
    pub batches: AtomicU64,
    /// Batches refused or failed.
    pub failures: AtomicU64,
    /// Records a backend accepted the request of but rejected (OTLP partial success).
    pub rejected: AtomicU64,
    /// Responses a backend sent with status OK that could not be read (the request counts
    /// as delivered).
    pub unreadable: AtomicU64,
    /// A sink's last batch failed (reported when it starts and when it stops).
    failing: std::sync::atomic::AtomicBool,
}

impl Flow {
    /// Counts one batch.
    pub fn add(&self, records: usize, bytes: usize) {
        self.records.fetch_add(records as u64, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
        self.batches.fetch_add(1, Relaxed);
    }

    /// Counts one failure.
    pub fn fail(&self) {
        self.failures.fetch_add(1, Relaxed);
    }

    /// Counts a batch sink `name` failed to deliver; reports it when the sink starts failing
    /// (then at most once per [`report::INTERVAL`] while it goes on, or as it flaps).
    pub fn sink_failed(&self, name: &str, error: &dyn std::fmt::Display) {
        self.fail();
        let subject = format!("sink {name}");
        let error = error.to_string();
        let error = error
            .strip_prefix(&format!("{subject}: "))
            .unwrap_or(&error);
        if self.failing.swap(true, Relaxed) {
            let message = format_args!("still failing: {error}");
            report::throttled(Level::WARN, &subject, "failing", message);
        } else {
            let message = format_args!("failing: {error}");
            report::throttled(Level::WARN, &subject, "failing", message);
        }
    }

    /// Notes that sink `name` delivered a batch; reports it when the sink was failing.
    pub fn sink_delivered(&self, name: &str) {
        if self.failing.load(Relaxed) && self.failing.swap(false, Relaxed) {
            report::throttled(
                Level::INFO,
                &format!("sink {name}"),
                "recovered",
                "recovered: delivering again",
            );
        }
    }
}

/// Picks one of a sink's counters.
type SinkCounter = fn(&Flow) -> &AtomicU64;

/// Upper bounds (seconds) of the batch latency histogram.
const LATENCY_BOUNDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Every counter of a running gateway.
#[derive(Debug)]
pub struct Telemetry {
    /// Per source.
    pub sources: BTreeMap<String, Flow>,
    /// Per sink.
    pub sinks: BTreeMap<String, Flow>,
    latency_buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    latency_sum_micros: AtomicU64,
    /// Request bytes admitted and not yet acknowledged.
    pub in_flight_bytes: AtomicU64,
    /// Batches waiting in the workers' pipeline queues.
    pub queued_batches: AtomicU64,
    /// Bytes held by OTAP stream decoders.
    pub stream_state_bytes: AtomicU64,
    /// OTAP streams being served.
    pub otap_streams: AtomicU64,
    /// OTAP streams refused a slot (past `max_streams` or a peer's or connection's share).
    pub otap_streams_refused: AtomicU64,
    /// Idle OTAP streams closed to give their slots to new ones.
    pub otap_streams_evicted: AtomicU64,
    /// OTAP batches forwarded as received, and decoded.
    pub otap_batches: [AtomicU64; 2],
    /// Batches of forwarded OTAP streams decoded instead, by [`FALLBACK_REASONS`].
    pub otap_fallbacks: [AtomicU64; FALLBACK_REASONS.len()],
    /// OTLP export requests received: spliced as received, decoded.
    pub otlp_requests: [AtomicU64; 2],
    /// Routed copies of forwarded OTAP batches whose pipelines may remove rows: forwarded
    /// (with the rows left), encoded again.
    pub otap_narrowed: [AtomicU64; 2],
    /// Batches of derived metrics (closed aggregation windows) a sink failed to deliver.
    pub derived_failures: AtomicU64,
    /// Connections closed on arrival because a source had its most.
    pub connections_refused: AtomicU64,
    /// Body bytes of refused requests read and thrown away.
    pub discarded_body_bytes: AtomicU64,
    /// Client connections open on the listening sources.
    pub connections: AtomicU64,
    /// OTLP requests being received or waiting for admission.
    pub receiving_requests: AtomicU64,
    /// Reloads of the pipeline files: accepted, refused.
    pub reloads: [AtomicU64; 2],
    /// Lookup tables whose file did not read on a reload (the table read before was kept).
    pub lookup_reload_failures: AtomicU64,
    /// The disk buffers, by sink.
    pub buffers: BTreeMap<String, Arc<BufferCounters>>,
    /// The consumer lag of KAFKA sources, by source.
    pub kafka_lag: BTreeMap<String, Arc<crate::gateway::base::kafka::ConsumerLag>>,
}

/// Why a batch of a forwarded OTAP stream is decoded instead: the program was reloaded (the
/// stream is decoded from then on), a live query watches it, or the batch's own reason ([`penstock_engine::otap::raw::Fallback`]).
pub const FALLBACK_REASONS: [&str; 6] = [
    "reloaded",
    "watched",
    "state_bound",
    "keys_not_dictionary",
    "null_keys",
    "rename_merges_keys",
];

impl Telemetry {
    /// Counters for the sources and sinks of `program` (pipeline counters live in
    /// [`Running`], replaced on reload).
    pub fn new(program: &Program) -> Self {
        Telemetry {
            buffers: program
                .sinks
                .iter()
                .filter(|s| s.disk_buffered())
                .map(|s| (s.name.clone(), Arc::default()))
                .collect(),
            sources: program
                .sources
                .iter()
                .map(|s| (s.name.clone(), Flow::default()))
                .collect(),
            kafka_lag: program
                .sources
                .iter()
                .filter(|s| s.kind == penstock_dialect::ast::SourceKind::Kafka)
                .map(|s| (s.name.clone(), Arc::default()))
                .collect(),
            sinks: program
                .sinks
                .iter()
                .map(|s| (s.name.clone(), Flow::default()))
                .collect(),
            latency_buckets: Default::default(),
            latency_sum_micros: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            queued_batches: AtomicU64::new(0),
            derived_failures: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            discarded_body_bytes: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            receiving_requests: AtomicU64::new(0),
            reloads: Default::default(),
            lookup_reload_failures: AtomicU64::new(0),
            stream_state_bytes: AtomicU64::new(0),
            otap_streams: AtomicU64::new(0),
            otap_streams_refused: AtomicU64::new(0),
            otap_streams_evicted: AtomicU64::new(0),
            otap_batches: [AtomicU64::new(0), AtomicU64::new(0)],
            otap_fallbacks: Default::default(),
            otap_narrowed: [AtomicU64::new(0), AtomicU64::new(0)],
            otlp_requests: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Records the time from receiving a batch to acknowledging it.
    pub fn observe_latency(&self, elapsed: std::time::Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.latency_buckets[bucket].fetch_add(1, Relaxed);
        self.latency_sum_micros
            .fetch_add(elapsed.as_micros() as u64, Relaxed);
    }

    /// The Prometheus text exposition of every counter, with those of the `running` program
    /// and the `memory` budget.
    pub fn prometheus(&self, running: &Running, memory: &Memory) -> String {
        let mut out = String::new();
        self.write_flows(&mut out);
        running.write_metrics(&mut out);
        self.write_latency(&mut out);
        self.write_gauges(&mut out);
        self.write_totals(&mut out);
        crate::gateway::base::buffer_metrics::write(&mut out, &self.buffers);
        memory.write_metrics(&mut out);
        crate::gateway::base::kafka::ConsumerLag::write_metrics(&mut out, &self.kafka_lag);
        out
    }

    /// Records, bytes, batches and failures per source and per sink, and the sinks' own
    /// counters.
    fn write_flows(&self, out: &mut String) {
        let flows = [
            ("source", &self.sources, "received"),
            ("sink", &self.sinks, "sent"),
        ];
        for (kind, flows, verb) in flows {
            for (metric, help, pick) in [
                ("records", "records", 0),
                ("bytes", "encoded bytes", 1),
                ("batches", "batches", 2),
                ("failures", "batches refused or failed", 3),
            ] {
                let name = format!("penstock_{kind}_{metric}_total");
                let _ = writeln!(out, "# HELP {name} {help} {verb} per {kind}");
                let _ = writeln!(out, "# TYPE {name} counter");
                for (label, flow) in flows.iter() {
                    let value = [&flow.records, &flow.bytes, &flow.batches, &flow.failures][pick]
                        .load(Relaxed);
                    let _ = writeln!(out, "{name}{{{kind}=\"{label}\"}} {value}");
                }
            }
        }
        let per_sink: [(&str, &str, SinkCounter); 2] = [
            (
                "penstock_sink_rejected_records_total",
                "records a backend rejected in an accepted request (partial success)",
                |f| &f.rejected,
            ),
            (
                "penstock_sink_unreadable_responses_total",
                "responses a backend sent with status OK that could not be read",
                |f| &f.unreadable,
            ),
        ];
        for (name, help, counter) in per_sink {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (label, flow) in self.sinks.iter() {
                let value = counter(flow).load(Relaxed);
                let _ = writeln!(out, "{name}{{sink=\"{label}\"}} {value}");
            }
        }
    }

    /// The histogram of the time from a batch's receipt to its acknowledgement.
    fn write_latency(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP penstock_batch_latency_seconds from receipt to acknowledgement\n# TYPE penstock_batch_latency_seconds histogram"
        );
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BOUNDS.iter().enumerate() {
            cumulative += self.latency_buckets[i].load(Relaxed);
            let _ = writeln!(
                out,
                "penstock_batch_latency_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.latency_buckets[LATENCY_BOUNDS.len()].load(Relaxed);
        let _ = writeln!(
            out,
            "penstock_batch_latency_seconds_bucket{{le=\"+Inf\"}} {cumulative}\npenstock_batch_latency_seconds_sum {}\npenstock_batch_latency_seconds_count {cumulative}",
            self.latency_sum_micros.load(Relaxed) as f64 / 1e6
        );
    }

    /// What is held now: bytes in flight, queued batches, streams, connections.
    fn write_gauges(&self, out: &mut String) {
        for (name, help, value) in [
            (
                "penstock_in_flight_bytes",
                "request bytes admitted and not yet acknowledged",
                &self.in_flight_bytes,
            ),
            (
                "penstock_receiving_requests",
                "OTLP requests being received or waiting for admission",
                &self.receiving_requests,
            ),
            (
                "penstock_queued_batches",
                "batches waiting for a pipeline",
                &self.queued_batches,
            ),
            (
                "penstock_stream_state_bytes",
                "memory held by OTAP stream decoders",
                &self.stream_state_bytes,
            ),
            (
                "penstock_otap_streams",
                "OTAP streams being served",
                &self.otap_streams,
            ),
            (
                "penstock_connections",
                "client connections open on the listening sources",
                &self.connections,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
                value.load(Relaxed)
            );
        }
    }

    /// Derived batches failed, reloads, connections refused, OTAP batches by path.
    fn write_totals(&self, out: &mut String) {
        for (name, help, paths, counts) in [
            (
                "penstock_otap_batches_total",
                "OTAP batches received, by whether they were forwarded as received or decoded",
                ["forwarded", "decoded"],
                &self.otap_batches,
            ),
            (
                "penstock_otlp_requests_total",
                "OTLP export requests received, by whether they were spliced as received or decoded",
                ["spliced", "decoded"],
                &self.otlp_requests,
            ),
            (
                "penstock_otap_narrowed_total",
                "Routed copies of forwarded OTAP batches whose pipelines may remove rows, by whether they were forwarded with the rows left or encoded again",
                ["forwarded", "encoded"],
                &self.otap_narrowed,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (path, count) in paths.iter().zip(counts) {
                let _ = writeln!(out, "{name}{{path=\"{path}\"}} {}", count.load(Relaxed));
            }
        }
        let _ = writeln!(
            out,
            "# HELP penstock_derived_batches_failed_total batches of derived metrics a sink failed to deliver\n# TYPE penstock_derived_batches_failed_total counter\npenstock_derived_batches_failed_total {}",
            self.derived_failures.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP penstock_reloads_total reloads of the pipeline files (SIGHUP) by result\n# TYPE penstock_reloads_total counter"
        );
        for (result, count) in ["accepted", "refused"].iter().zip(&self.reloads) {
            let _ = writeln!(
                out,
                "penstock_reloads_total{{result=\"{result}\"}} {}",
                count.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP penstock_lookup_reload_failures_total lookup tables whose file did not read on a reload (the table read before was kept)\n# TYPE penstock_lookup_reload_failures_total counter\npenstock_lookup_reload_failures_total {}",
            self.lookup_reload_failures.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP penstock_otap_fallbacks_total batches of OTAP streams forwarded as received that were decoded instead, by why\n# TYPE penstock_otap_fallbacks_total counter"
        );
        for (reason, count) in FALLBACK_REASONS.iter().zip(&self.otap_fallbacks) {
            let _ = writeln!(
                out,
                "penstock_otap_fallbacks_total{{reason=\"{reason}\"}} {}",
                count.load(Relaxed)
            );
        }
        for (name, help, count) in [
            (
                "penstock_otap_streams_refused_total",
                "OTAP streams refused a slot: past max_streams with no idle stream to close, or past the share of their peer address or connection",
                &self.otap_streams_refused,
            ),
            (
                "penstock_discarded_body_bytes_total",
                "body bytes of refused requests read and thrown away (so that the refusal follows the request)",
                &self.discarded_body_bytes,
            ),
            (
                "penstock_otap_streams_evicted_total",
                "idle OTAP streams closed (UNAVAILABLE) to give their slots to new streams",
                &self.otap_streams_evicted,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                count.load(Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP penstock_connections_refused_total connections closed on arrival past a source's max_connections\n# TYPE penstock_connections_refused_total counter\npenstock_connections_refused_total {}",
            self.connections_refused.load(Relaxed)
        );
    }
}

#[cfg(test)]
mod fallback_tests {
    #[test]
    fn the_fallback_reasons_name_the_engine_reasons_in_its_order() {
        assert_eq!(
            super::FALLBACK_REASONS[2..],
            penstock_engine::otap::raw::Fallback::NAMES
        );
    }
}
