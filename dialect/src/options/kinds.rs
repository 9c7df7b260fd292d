//! The options each kind of source and sink accepts.

use super::buffer::BUFFER;
use super::kafka;
use super::spec::OptionType::{
    BaseUrl, Bool, Choice, Count, Duration, Endpoint, Headers, Size, Str,
};
use super::spec::{OptionSpec, opt};
use crate::ast::{SinkKind, SourceKind};

const SIGNALS: &[&str] = &["logs", "spans", "metrics"];

const ADMISSION: [OptionSpec; 3] = [
    opt(
        "max_connections",
        Count,
        false,
        "concurrent client connections; more are closed at once",
    ),
    opt(
        "max_in_flight_bytes",
        Count,
        false,
        "admission limit on request bytes in flight",
    ),
    opt(
        "admission",
        Choice(&["wait", "refuse"]),
        false,
        "past the admission limit: wait or refuse (RESOURCE_EXHAUSTED, HTTP 429)",
    ),
];

const TLS_SERVER: [OptionSpec; 3] = [
    opt("tls_cert", Str, false, "PEM certificate chain: serve TLS"),
    opt("tls_key", Str, false, "PEM private key of tls_cert"),
    opt(
        "auth_token",
        Str,
        false,
        "bearer token every request must carry",
    ),
];

const TLS_CLIENT: [OptionSpec; 2] = [
    opt(
        "tls_ca",
        Str,
        false,
        "PEM CA certificates to trust (https endpoints)",
    ),
    opt(
        "auth_token",
        Str,
        false,
        "bearer token sent with every request",
    ),
];

/// The `endpoint` of the gRPC sinks (OTAP, OTLP).
const ENDPOINT: OptionSpec = opt(
    "endpoint",
    Endpoint,
    true,
    "http://host:port or https://host:port",
);

/// The options of the sinks that send OTLP export requests (OTLP, OTLP_HTTP).
const EXPORT: [OptionSpec; 6] = [
    opt("timeout", Duration, false, "deadline of one export"),
    opt("retries", Count, false, "retries of a failed export"),
    opt("batch", Count, false, "target records per request"),
    opt(
        "linger",
        Duration,
        false,
        "how long a request waits for more batches to reach its target",
    ),
    opt(
        "max_request_bytes",
        Count,
        false,
        "largest merged request body before compression",
    ),
    opt(
        "pass_through",
        Bool,
        false,
        "send OTLP requests the pipelines only rename keys in as received, spliced (default true)",
    ),
];

/// The options of `CREATE TABLE name FROM FILE` (a lookup table).
pub fn table_options() -> Vec<OptionSpec> {
    vec![
        opt(
            "path",
            Str,
            true,
            "the file: CSV with a header, JSON lines or Parquet (relative: to the working directory, else beside the pipeline file)",
        ),
        opt(
            "format",
            Choice(&["csv", "jsonl", "parquet"]),
            false,
            "how the file is read (default: by its extension; .json and .ndjson are JSON lines)",
        ),
        opt(
            "key",
            Str,
            false,
            "the column rows are found by (default: the first); its values are unique",
        ),
        opt(
            "max_rows",
            Count,
            false,
            "rows at most (default 1000000); a larger file is refused",
        ),
        opt(
            "max_bytes",
            Size,
            false,
            "size at most, of the file and of the table in memory (default 64MiB); a larger one is refused",
        ),
    ]
}

/// The options of a source kind.
pub fn source_options(kind: SourceKind) -> Vec<OptionSpec> {
    let mut specs = match kind {
        SourceKind::Grpc => vec![
            opt("listen", Str, true, "address to listen on, host:port"),
            opt(
                "max_message_bytes",
                Count,
                false,
                "largest request or OTAP message",
            ),
            opt(
                "max_stream_memory_bytes",
                Count,
                false,
                "OTAP decoder state per stream",
            ),
            opt("max_streams", Count, false, "concurrent OTAP streams"),
            opt(
                "max_streams_per_peer",
                Count,
                false,
                "concurrent OTAP streams of one peer address",
            ),
            opt(
                "max_streams_per_connection",
                Count,
                false,
                "concurrent OTAP streams of one connection",
            ),
            opt(
                "max_in_flight_bytes_per_peer",
                Count,
                false,
                "OTAP bytes in flight of one peer address",
            ),
        ],
        SourceKind::Http => vec![
            opt("listen", Str, true, "address to listen on, host:port"),
            opt(
                "max_body_bytes",
                Count,
                false,
                "largest request body (after decompression)",
            ),
            opt(
                "cors_origins",
                Str,
                false,
                "comma-separated origins browsers may send from ('*': any)",
            ),
        ],
        SourceKind::Generator => vec![
            opt("signal", Choice(SIGNALS), true, "what to generate"),
            opt(
                "rate",
                Count,
                false,
                "records per second (0: as fast as possible)",
            ),
            opt("batch", Count, false, "records per batch"),
            opt("records", Count, false, "stop after this many records"),
            opt("seed", Count, false, "random seed"),
            opt(
                "distinct",
                Count,
                false,
                "batches made once per worker and sent in turn (0: every batch is new)",
            ),
        ],
        SourceKind::File => vec![
            opt("path", Str, true, "OTLP JSON lines file"),
            opt("batch", Count, false, "most records per batch"),
        ],
        SourceKind::Kafka => kafka::source(),
    };
    if matches!(kind, SourceKind::Grpc | SourceKind::Http) {
        specs.extend(ADMISSION);
        specs.extend(TLS_SERVER);
    }
    specs
}

/// The options of a sink kind.
pub fn sink_options(kind: SinkKind) -> Vec<OptionSpec> {
    let mut specs = match kind {
        SinkKind::Otap => vec![
            ENDPOINT,
            opt(
                "compression",
                Choice(&["zstd", "none"]),
                false,
                "Arrow IPC compression",
            ),
            opt("streams", Count, false, "concurrent OTAP streams"),
            opt(
                "stream_lifetime",
                Duration,
                false,
                "reopen streams after this long",
            ),
            opt("timeout", Duration, false, "deadline for a batch's status"),
            opt("retries", Count, false, "retries of a failed batch"),
            opt("batch", Count, false, "target items per merged batch"),
            opt(
                "linger",
                Duration,
                false,
                "how long a merged batch waits for more batches to reach its target",
            ),
            opt(
                "pass_through",
                Bool,
                false,
                "forward OTAP batches the pipelines leave untouched as received (default true)",
            ),
            opt(
                "max_streams_per_connection",
                Count,
                false,
                "forwarded streams per connection before another is opened (default 100)",
            ),
        ],
        SinkKind::Otlp => {
            let mut specs = vec![
                ENDPOINT,
                opt(
                    "compression",
                    Choice(&["gzip", "zstd", "none"]),
                    false,
                    "gRPC compression",
                ),
            ];
            specs.extend(EXPORT);
            specs
        }
        SinkKind::OtlpHttp => {
            let mut specs = vec![
                opt(
                    "endpoint",
                    BaseUrl,
                    true,
                    "base URL, http(s)://host:port[/prefix], to which /v1/logs etc. are appended",
                ),
                opt(
                    "encoding",
                    Choice(&["protobuf", "json"]),
                    false,
                    "request body: application/x-protobuf or application/json",
                ),
                opt(
                    "compression",
                    Choice(&["gzip", "zstd", "none"]),
                    false,
                    "Content-Encoding of request bodies",
                ),
                opt(
                    "headers",
                    Headers,
                    false,
                    "headers sent with every request, 'name=value,name=value'",
                ),
            ];
            specs.extend(EXPORT);
            specs
        }
        SinkKind::File => vec![opt("path", Str, true, "OTLP JSON lines file to write")],
        SinkKind::Console => vec![opt("limit", Count, false, "records shown per batch")],
        SinkKind::Kafka => kafka::sink(),
    };
    if matches!(kind, SinkKind::Otap | SinkKind::Otlp | SinkKind::OtlpHttp) {
        specs.extend(TLS_CLIENT);
        specs.extend(BUFFER);
    }
    specs
}

/// The options of a pipeline: those of its trace decisions, and (named `metric_...`) those of
/// its merges of metric series.
pub fn pipeline_options() -> Vec<OptionSpec> {
    vec![
        opt(
            "metric_interval",
            Duration,
            false,
            "merged metric series get one data point per interval (default 10s)",
        ),
        opt(
            "metric_gauge",
            Choice(&["last", "min", "max", "avg", "sum"]),
            false,
            "how the gauges of merged series combine in an interval (default 'last': the latest point)",
        ),
        opt(
            "metric_temporality",
            Choice(&["kept", "delta"]),
            false,
            "'delta': merged cumulative sums and histograms are sent as deltas per interval (default 'kept')",
        ),
        opt(
            "metric_max_series",
            Count,
            false,
            "series tracked at most, received and merged (default 100000); past it, points of new series are refused, counted",
        ),
        opt(
            "decision_wait",
            Duration,
            false,
            "how long after its first span a trace is decided (default 10s)",
        ),
        opt(
            "max_traces",
            Count,
            false,
            "traces held undecided at most; past it the oldest are decided early (default 100000)",
        ),
        opt(
            "max_held_bytes",
            Size,
            false,
            "bytes of spans held undecided at most; past it the oldest traces are decided early (default 256MiB)",
        ),
        opt(
            "decision_cache",
            Count,
            false,
            "decided traces remembered, so that their late spans follow the decision (default 100000)",
        ),
        opt(
            "max_spans_per_second",
            Count,
            false,
            "spans of kept traces per second at most, over all workers; past it, kept traces are dropped in decision order (default: no limit)",
        ),
        opt(
            "hold",
            Choice(&["memory", "disk"]),
            false,
            "'disk': held spans are written to a journal and fsynced before they are acknowledged; a restart (clean or after kill -9) holds them again with their first arrival times (default 'memory')",
        ),
        opt(
            "hold_path",
            Str,
            false,
            "directory of the journal of held spans, created if missing; one pipeline per directory",
        ),
    ]
}
