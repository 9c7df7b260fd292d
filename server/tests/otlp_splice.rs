//! OTLP requests that the pipelines only rename keys in and route whole are spliced: sent on
//! as received, with the renamed keys rewritten in the protobuf. A real grpc-go OTLP receiver
//! (`otap-interop serve-otlp`, the pdata services the Collector's receiver serves) and a real
//! OTLP/HTTP one (`serve-otlp-http`, net/http with the pdata types) get, record for record, what the
//! decoding path (`pass_through = false`) sends them for the same requests, renames of keys
//! onto keys a record already has included. The requests come compressed with zstd.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use penstock_engine::datagen::DataGen;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::codegen::http::uri::PathAndQuery;

use common::go::interop_binary;
use common::otlp_go::{OtlpReceiver, Received, assert_same, series};
use common::raw_codec::RawCodec;
use common::{Gateway, block_on, connect, temp_dir};

/// Renames of record, resource and data point attributes; `http.route` goes onto `url.path`,
/// which some log records already have.
const RENAMES: &str = "
    ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
    ALTER TABLE logs RENAME ATTRIBUTE 'http.route' TO 'url.path';
    ALTER TABLE logs RENAME RESOURCE ATTRIBUTE 'service.name' TO 'svc';
    INSERT INTO out SELECT * FROM logs;
    ALTER TABLE spans RENAME ATTRIBUTE 'http.request.method' TO 'method';
    INSERT INTO out SELECT * FROM spans;
    ALTER TABLE metrics RENAME ATTRIBUTE 'http.request.method' TO 'method';
    ALTER TABLE metrics RENAME SCOPE ATTRIBUTE 'otel.scope.type' TO 'scope.type';
    INSERT INTO out SELECT * FROM metrics;";

/// A gateway renaming as [`RENAMES`] says into `CREATE SINK out TO {sink}`.
fn gateway(dir: &Path, name: &str, sink: &str) -> Gateway {
    Gateway::start_with(
        dir,
        name,
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK out TO {sink};
             CREATE PIPELINE p FROM edge AS BEGIN {RENAMES} END;"
        ),
        &["--admin-listen", "127.0.0.1:0"],
    )
}

/// Sends `requests` zstd-compressed Exports of each signal (seeded) to `url`; every one must
/// be acknowledged OK. Returns the items sent per signal.
fn send(url: &str, requests: usize) -> [usize; 3] {
    let mut data = DataGen::new(5);
    let mut items = [0; 3];
    block_on(async {
        for _ in 0..requests {
            let logs = data.logs(300);
            items[0] += common::otlp_go::log_records(&logs);
            export(url, "logs.v1.LogsService", logs).await;
            let traces = data.traces(200);
            items[1] += common::otlp_go::spans(&traces);
            export(url, "trace.v1.TraceService", traces).await;
            let metrics = data.metrics(200);
            items[2] += common::otlp_go::data_points(&metrics);
            export(url, "metrics.v1.MetricsService", metrics).await;
        }
    });
    items
}

/// One Export of `request` to `service`, compressed with zstd; it must be answered OK.
async fn export<Req: Message + Send + Sync + 'static>(url: &str, service: &str, request: Req) {
    let path = format!("/opentelemetry.proto.collector.{service}/Export");
    let mut grpc = connect(url)
        .await
        .unwrap()
        .send_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Zstd);
    // Every Export response is a partial success at most: none is expected.
    let codec = tonic_prost::ProstCodec::<Req, AnyResponse>::default();
    let answer = grpc
        .unary(
            tonic::Request::new(request),
            PathAndQuery::try_from(path.clone()).unwrap(),
            codec,
        )
        .await;
    let response = answer.unwrap_or_else(|s| panic!("{path}: {s:?}"));
    assert_eq!(response.into_inner(), AnyResponse::default(), "{path}");
}

/// An Export response of any signal: its partial success, as bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct AnyResponse {
    #[prost(bytes = "vec", optional, tag = "1")]
    partial_success: Option<Vec<u8>>,
}

/// What the receiver got once `items` arrived, and the gateway's OTLP request counters
/// (spliced, decoded).
fn run(name: &str, sink: &str, receiver: OtlpReceiver, requests: usize) -> (Received, [f64; 2]) {
    let dir = temp_dir(name);
    let gateway = gateway(&dir, name, sink);
    let items = send(&gateway.url(), requests);
    let got = receiver.wait_for(items);
    assert_eq!(got.items, items, "{name}: items received");
    let text = gateway.metrics_text();
    let counted = ["spliced", "decoded"].map(|path| {
        series(
            &text,
            &format!("penstock_otlp_requests_total{{path=\"{path}\"}}"),
        )
        .unwrap()
    });
    let (ok, output) = gateway.terminate();
    assert!(ok, "{name}: the gateway did not exit cleanly: {output:?}");
    (got, counted)
}

/// The spliced and the decoded gateway, each in front of its own receiver (Go helper
/// `subcommand`), with a sink of `kind` and `options`; the receivers get the same records.
fn spliced_equals_decoded(name: &str, subcommand: &str, kind: &str, options: &str) {
    let Some(binary) = interop_binary() else {
        return;
    };
    let requests = 3;
    let [spliced, decoded] =
        [("spliced", ""), ("decoded", ", pass_through = false")].map(|(path, pass_through)| {
            let receiver = OtlpReceiver::start(&binary, subcommand, &[]);
            let url = format!("http://{}", receiver.addr);
            let sink = format!("{kind} WITH (endpoint = '{url}'{options}{pass_through})");
            let (got, counted) = run(&format!("{name}-{path}"), &sink, receiver, requests);
            let all = 3.0 * requests as f64;
            let want = if path == "spliced" {
                [all, 0.0]
            } else {
                [0.0, all]
            };
            assert_eq!(counted, want, "{name}: {path}");
            got
        });

    // The renames were made (and not only equally left out).
    let key = |k: &str| format!("key: {k:?}");
    let logs = spliced.lines[0].join("\n");
    assert!(logs.contains(&key("error.type")) && !logs.contains(&key("exception.type")));
    assert!(logs.contains(&key("svc")) && !logs.contains(&key("service.name")));
    assert!(!logs.contains(&key("http.route")));
    let spans = spliced.lines[1].join("\n");
    assert!(spans.contains(&key("method")) && !spans.contains(&key("http.request.method")));
    assert_same(decoded.lines, spliced.lines);
}

#[test]
fn spliced_requests_reach_grpc_go_as_the_decoded_ones_do() {
    spliced_equals_decoded("splice-grpc", "serve-otlp", "OTLP", "");
}

#[test]
fn spliced_requests_reach_an_otlp_http_receiver_as_the_decoded_ones_do() {
    spliced_equals_decoded(
        "splice-http",
        "serve-otlp-http",
        "OTLP_HTTP",
        ", compression = 'gzip'",
    );
}

/// A request whose framing is broken is refused as the decoding path refuses it, and the
/// gateway goes on splicing.
#[test]
fn a_request_with_broken_framing_is_refused_and_splicing_goes_on() {
    let Some(binary) = interop_binary() else {
        return;
    };
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let dir = temp_dir("splice-broken");
    let sink = format!("OTLP WITH (endpoint = 'http://{}')", receiver.addr);
    let gateway = gateway(&dir, "splice-broken", &sink);
    let request = DataGen::new(9).logs(50).encode_to_vec();
    let url = gateway.url();
    let status = block_on(async {
        let mut grpc = connect(&url).await.unwrap();
        let path =
            PathAndQuery::from_static("/opentelemetry.proto.collector.logs.v1.LogsService/Export");
        let cut = request[..request.len() - 7].to_vec();
        grpc.unary(tonic::Request::new(cut), path, RawCodec)
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    let items = send(&url, 1);
    let got = receiver.wait_for(items);
    assert_eq!(got.items, items);
    let text = gateway.metrics_text();
    let failures = series(&text, "penstock_source_failures_total{source=\"edge\"}");
    assert_eq!(failures, Some(1.0));
    let spliced = series(&text, "penstock_otlp_requests_total{path=\"spliced\"}");
    assert_eq!(spliced, Some(3.0), "the 3 good requests");
    let (ok, _) = gateway.terminate();
    assert!(ok);
}

/// A metrics request whose metrics have no data points is sent on, as the decoding path
/// sends it; spliced requests are counted.
#[test]
fn metrics_without_data_points_are_sent_on() {
    use opentelemetry_proto::tonic::metrics::v1::{Gauge, Metric, metric::Data};
    let Some(binary) = interop_binary() else {
        return;
    };
    let receiver = OtlpReceiver::start(&binary, "serve-otlp", &[]);
    let dir = temp_dir("splice-empty-metrics");
    let sink = format!("OTLP WITH (endpoint = 'http://{}')", receiver.addr);
    let gateway = gateway(&dir, "splice-empty-metrics", &sink);
    let mut request = DataGen::new(3).metrics(10);
    let scope = &mut request.resource_metrics[0].scope_metrics[0];
    scope.metrics = vec![Metric {
        name: "no.points".into(),
        data: Some(Data::Gauge(Gauge::default())),
        ..Metric::default()
    }];
    request.resource_metrics.truncate(1);
    request.resource_metrics[0].scope_metrics.truncate(1);
    let url = gateway.url();
    block_on(export(&url, "metrics.v1.MetricsService", request));
    let (signal, frame) = receiver
        .frames()
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap();
    assert_eq!(signal, 2);
    let got =
        opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest::decode(
            frame.as_slice(),
        )
        .unwrap();
    let metrics = &got.resource_metrics[0].scope_metrics[0].metrics;
    assert_eq!(metrics.len(), 1);
    assert_eq!(metrics[0].name, "no.points");
    let text = gateway.metrics_text();
    let spliced = series(&text, "penstock_otlp_requests_total{path=\"spliced\"}");
    assert_eq!(spliced, Some(1.0));
    let (ok, _) = gateway.terminate();
    assert!(ok);
}
