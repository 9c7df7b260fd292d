//! The `WITH (...)` options of sources and sinks: which exist per kind, their types, and the
//! typed values after validation.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlparser::ast::Spanned;
use sqlparser::ast::{Expr, UnaryOperator, Value};

use crate::ast::{OptionEntry, SinkKind, SourceKind};
use crate::error::Located;

mod buffer;
mod kafka;
mod size;
mod url;

pub use kafka::{ENCODINGS as KAFKA_ENCODINGS, KEY_TABLES, PartitionKey, resolve_key};
pub use size::parse_size;
pub use url::{check_base_url, check_endpoint};

/// What values an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionType {
    /// A string.
    Str,
    /// A non-negative integer.
    Count,
    /// A duration string: `'500ms'`, `'10s'`, `'2m'`, `'1h'`.
    Duration,
    /// A boolean.
    Bool,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A gRPC endpoint URL: `http://host:port` or `https://host:port`.
    Endpoint,
    /// An OTLP/HTTP base URL: `http://host:port` or `https://host:port`, with an optional
    /// path prefix; the sink appends each signal's path (`/v1/logs`, ...).
    BaseUrl,
    /// HTTP headers sent with every request: `'name=value,name=value'` (see
    /// [`parse_headers`]).
    Headers,
    /// A size in bytes: a count, or a string with a unit such as `'512MiB'` or `'10GB'` (see
    /// [`parse_size`]); read with [`Options::count`].
    Size,
}

/// One option a source or sink kind accepts.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub ty: OptionType,
    /// Whether it must be given.
    pub required: bool,
    /// What it does (for `docs/dialect.md` and error messages).
    pub doc: &'static str,
}

const fn opt(name: &'static str, ty: OptionType, required: bool, doc: &'static str) -> OptionSpec {
    OptionSpec {
        name,
        ty,
        required,
        doc,
    }
}

use OptionType::*;

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
        specs.extend(buffer::BUFFER);
    }
    specs
}

/// A validated option value.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// A string (also choices).
    Str(String),
    /// A count.
    Count(u64),
    /// A duration.
    Duration(Duration),
    /// A boolean.
    Bool(bool),
}

/// Validated options, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options(BTreeMap<String, OptionValue>);

impl Options {
    /// The string option `name`, if given.
    pub fn str(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(OptionValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The count option `name`, if given.
    pub fn count(&self, name: &str) -> Option<u64> {
        match self.0.get(name) {
            Some(OptionValue::Count(n)) => Some(*n),
            _ => None,
        }
    }

    /// The duration option `name`, if given.
    pub fn duration(&self, name: &str) -> Option<Duration> {
        match self.0.get(name) {
            Some(OptionValue::Duration(d)) => Some(*d),
            _ => None,
        }
    }

    /// The boolean option `name`, if given.
    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.0.get(name) {
            Some(OptionValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// All options, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &OptionValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// A literal of an option value.
enum Literal {
    Str(String),
    Number(String),
    Bool(bool),
}

fn literal(expr: &Expr) -> Option<Literal> {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Some(Literal::Str(s.clone()))
            }
            Value::Number(n, _) => Some(Literal::Number(n.to_string())),
            Value::Boolean(b) => Some(Literal::Bool(*b)),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match literal(expr)? {
            Literal::Number(n) => Some(Literal::Number(format!("-{n}"))),
            _ => None,
        },
        _ => None,
    }
}

/// The longest duration an option takes.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The counts an option accepts: sizes that would exhaust memory or make no sense are
/// refused at `check` time rather than failing at run time.
fn count_range(name: &str) -> (u64, u64) {
    match name {
        "streams" => (1, 256),
        "max_streams" | "max_connections" | "max_streams_per_connection" => (1, 1_000_000),
        "retries" => (0, 100),
        "batch" => (1, 1 << 20),
        "limit" => (0, 1_000_000),
        "rate" => (0, 1_000_000_000),
        "buffer_max_bytes" => (1 << 20, 1 << 50),
        _ if name.ends_with("_bytes") => (1, 1 << 40),
        _ => (0, u64::MAX),
    }
}

/// Parses `'10s'`, `'250ms'`, `'2m'`, `'1h'`, `'1500us'` (up to [`MAX_DURATION`]).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ns" => number / 1e9,
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    let limit = MAX_DURATION.as_secs_f64();
    (seconds.is_finite() && (0.0..=limit).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}

/// Checks `entries` against `specs` (`what`: e.g. "GRPC source").
pub(crate) fn validate(
    entries: &[OptionEntry],
    specs: &[OptionSpec],
    what: &str,
    statement: crate::error::Location,
) -> Result<Options, Located> {
    let mut options = BTreeMap::new();
    for entry in entries {
        let name = entry.key.value.to_lowercase();
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
            return Err(Located::at(
                entry.key.span,
                format!(
                    "unknown option '{}' for {what}s; expected one of: {}",
                    entry.key.value,
                    known.join(", ")
                ),
            ));
        };
        if options.contains_key(&name) {
            return Err(Located::at(
                entry.key.span,
                format!("option '{name}' is given twice"),
            ));
        }
        let value = value(spec.ty, &name, &entry.value)?;
        options.insert(name, value);
    }
    if let Some(missing) = specs
        .iter()
        .find(|s| s.required && !options.contains_key(s.name))
    {
        return Err(Located::new(
            statement,
            format!(
                "{what}s need the option '{}' ({}): WITH ({} = ...)",
                missing.name, missing.doc, missing.name
            ),
        ));
    }
    buffer::check(entries, &options, statement)?;
    if let Some(role) = what.strip_prefix("KAFKA ") {
        kafka::check(entries, &options, statement, role == "source")?;
    }
    Ok(Options(options))
}

/// The value of option `name` of type `ty` from its literal; errors point at the literal.
fn value(ty: OptionType, name: &str, expr: &Expr) -> Result<OptionValue, Located> {
    let at = expr.span();
    let bad = |expected: &str| {
        Located::at(
            at,
            format!("option '{name}' expects {expected}, found {expr}"),
        )
    };
    let refused =
        |what: &str, why: String| Located::at(at, format!("option '{name}' {what}: {why}"));
    Ok(match (ty, literal(expr)) {
        (Str, Some(Literal::Str(s))) => OptionValue::Str(s),
        (Str, _) => return Err(bad("a 'string'")),
        (Count, Some(Literal::Number(n))) => {
            let count: u64 = n.parse().map_err(|_| bad("a non-negative integer"))?;
            let (low, high) = count_range(name);
            if !(low..=high).contains(&count) {
                return Err(bad(&format!("a count from {low} to {high}")));
            }
            OptionValue::Count(count)
        }
        (Count, _) => return Err(bad("a non-negative integer")),
        (Duration, Some(Literal::Str(s))) => {
            let duration = parse_duration(&s).ok_or_else(|| {
                bad("a duration such as '500ms', '10s' or '2m' (at most 30 days)")
            })?;
            if duration.is_zero() {
                return Err(bad("a duration greater than zero"));
            }
            OptionValue::Duration(duration)
        }
        (Duration, _) => {
            return Err(bad(
                "a duration such as '500ms', '10s' or '2m' (at most 30 days)",
            ));
        }
        (Bool, Some(Literal::Bool(b))) => OptionValue::Bool(b),
        (Bool, _) => return Err(bad("true or false")),
        (Choice(choices), Some(Literal::Str(s))) => {
            let lower = s.to_lowercase();
            if !choices.contains(&lower.as_str()) {
                return Err(bad(&quoted_choices(choices)));
            }
            OptionValue::Str(lower)
        }
        (Choice(choices), _) => return Err(bad(&quoted_choices(choices))),
        (Endpoint, Some(Literal::Str(s))) => {
            check_endpoint(&s).map_err(|why| refused(&format!("'{s}' is not an endpoint"), why))?;
            OptionValue::Str(s)
        }
        (Endpoint, _) => return Err(bad("a 'http://host:port' or 'https://host:port'")),
        (BaseUrl, Some(Literal::Str(s))) => {
            check_base_url(&s)
                .map_err(|why| refused(&format!("'{s}' is not an OTLP/HTTP base URL"), why))?;
            OptionValue::Str(s)
        }
        (BaseUrl, _) => return Err(bad("a 'http://host:port' or 'https://host:port' URL")),
        (Headers, Some(Literal::Str(s))) => {
            parse_headers(&s).map_err(|why| refused("('name=value,name=value')", why))?;
            OptionValue::Str(s)
        }
        (Headers, _) => return Err(bad("a 'name=value,name=value' string")),
        (Size, Some(Literal::Number(n))) => sized(name, n.parse().ok(), &bad)?,
        (Size, Some(Literal::Str(s))) => sized(name, parse_size(&s), &bad)?,
        (Size, _) => return Err(bad(size::EXPECTED)),
    })
}

/// A size option's value, within the range of its name.
fn sized(
    name: &str,
    bytes: Option<u64>,
    bad: &dyn Fn(&str) -> Located,
) -> Result<OptionValue, Located> {
    let bytes = bytes.ok_or_else(|| bad(size::EXPECTED))?;
    let (low, high) = count_range(name);
    if !(low..=high).contains(&bytes) {
        return Err(bad(&format!("a size from {low} to {high} bytes")));
    }
    Ok(OptionValue::Count(bytes))
}

/// Headers an OTLP/HTTP sink sets itself, which the `headers` option may not set.
const RESERVED_HEADERS: [&str; 9] = [
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
];

/// Parses a `headers` option: comma-separated `name=value` pairs, as in
/// `OTEL_EXPORTER_OTLP_HEADERS` (spaces around names and values are trimmed, values are
/// percent-decoded, so `%2C` is a comma). Names are HTTP tokens, returned in lower case, and
/// may not be headers the sink sets itself; values are printable ASCII. `''` is no headers.
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    if text.trim().is_empty() {
        return Ok(headers);
    }
    for entry in text.split(',') {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("'{}' has no '=' between name and value", entry.trim()))?;
        let name = name.trim().to_ascii_lowercase();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            return Err(format!("'{name}' is not a header name"));
        }
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(format!("the sink sets '{name}' itself"));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            format!(
                "the value of '{name}' has a '%' not followed by two hex digits or is not UTF-8"
            )
        })?;
        if !value.chars().all(|c| c == '\t' || (' '..='~').contains(&c)) {
            return Err(format!("the value of '{name}' is not printable ASCII"));
        }
        headers.push((name, value));
    }
    Ok(headers)
}

/// Decodes `%XX` escapes; `None` for a malformed escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

fn quoted_choices(choices: &[&str]) -> String {
    let quoted: Vec<String> = choices.iter().map(|c| format!("'{c}'")).collect();
    format!("one of {}", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::{check_base_url, check_endpoint, parse_headers};

    /// Asserts `check` accepts each of `good` and refuses each of `bad`.
    fn sorts(check: fn(&str) -> Result<(), String>, good: &[&str], bad: &[&str]) {
        for url in good {
            assert_eq!(check(url), Ok(()), "{url}");
        }
        for url in bad {
            assert!(check(url).is_err(), "{url} was accepted");
        }
    }

    #[test]
    fn endpoints_need_a_scheme_a_host_and_a_valid_port() {
        let good = [
            "http://127.0.0.1:4317",
            "https://collector.example.com:443",
            "https://collector.example.com",
            "http://[::1]:4317",
            "http://localhost:4317/",
        ];
        let bad = [
            "127.0.0.1:4317",
            "localhost",
            "grpc://h:1",
            "http://",
            "http://:4317",
            "http://h:0",
            "http://h:65536",
            "http://h:port",
            "http://h:4317/v1/logs",
            "http://user:pw@h:4317",
            "http://[::1:4317",
            "http://h h:1",
        ];
        sorts(check_endpoint, &good, &bad);
    }

    #[test]
    fn base_urls_take_a_path_prefix_but_no_signal_path() {
        let good = [
            "http://127.0.0.1:4318",
            "https://otlp.example.com",
            "https://otlp.example.com:443/",
            "https://gateway.example.com/otlp",
            "https://gateway.example.com/tenant-1/otlp/",
        ];
        let bad = [
            "127.0.0.1:4318",
            "ftp://h:1",
            "http://:4318",
            "http://h:4318?x=1",
            "http://h:4318/a b",
            "http://user@h:4318",
        ];
        sorts(check_base_url, &good, &bad);
        assert_eq!(
            check_base_url("https://h:4318/otlp/v1/traces/"),
            Err(
                "the sink appends /v1/traces (and the other signals' paths) itself: \
                 write 'https://h:4318/otlp'"
                    .into()
            )
        );
    }

    #[test]
    fn headers_are_name_value_pairs_with_percent_decoded_values() {
        assert_eq!(
            parse_headers(" X-Api-Key = abc%2C123= , tenant=a b").unwrap(),
            vec![
                ("x-api-key".to_string(), "abc,123=".to_string()),
                ("tenant".to_string(), "a b".to_string())
            ]
        );
        assert_eq!(parse_headers("").unwrap(), vec![]);
        for (bad, why) in [
            ("a=1,,b=2", "has no '='"),
            ("novalue", "has no '='"),
            ("=v", "is not a header name"),
            ("a b=1", "is not a header name"),
            ("Content-Type=text/plain", "sets 'content-type' itself"),
            ("a=%zz", "two hex digits"),
            ("a=%0a", "not printable ASCII"),
        ] {
            let error = parse_headers(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }
}
