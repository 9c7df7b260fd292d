//! TLS end to end: a gateway serving gRPC over TLS with a bearer token (a fresh self-signed
//! certificate for `localhost`) receives from another gateway's OTLP and OTAP sinks, which
//! trust that certificate through `tls_ca` and send the token; clients in the clear or
//! without the token are turned away and serving goes on.

#![allow(clippy::unwrap_used)]

mod common;

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use penstock_engine::datagen::DataGen;
use penstock_engine::equiv;
use tonic::codegen::http::uri::PathAndQuery;

use common::{
    Gateway, assert_same_records, block_on, export_otap, export_otlp, received, temp_dir,
};

#[test]
fn gateways_talk_over_tls_with_tokens_and_refuse_plaintext() {
    let dir = temp_dir("tls");
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), certified.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), certified.signing_key.serialize_pem()).unwrap();

    let back = Gateway::start(
        &dir,
        "back",
        &format!(
            "CREATE SOURCE secure FROM GRPC WITH (listen = '127.0.0.1:0',
               tls_cert = 'cert.pem', tls_key = 'key.pem', auth_token = 'tls-token');
             CREATE SINK received TO FILE WITH (path = '{}');
             CREATE PIPELINE keep FROM secure AS BEGIN INSERT INTO received SELECT * FROM logs; END;",
            dir.join("received.jsonl").display()
        ),
    );
    let port = back.addr.rsplit(':').next().unwrap().to_string();
    let secure = format!("https://localhost:{port}");
    let front = Gateway::start(
        &dir,
        "front",
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0');
             CREATE SINK errors TO OTAP WITH (endpoint = '{secure}', tls_ca = 'cert.pem', auth_token = 'tls-token');
             CREATE SINK rest TO OTLP WITH (endpoint = '{secure}', tls_ca = 'cert.pem', auth_token = 'tls-token');
             CREATE PIPELINE p FROM edge AS BEGIN
               INSERT INTO errors SELECT * FROM logs WHERE severity_number >= 17;
               INSERT INTO rest SELECT * FROM logs WHERE severity_number < 17;
             END;"
        ),
    );
    let mut data = DataGen::new(71);
    let requests = [data.logs(300), data.logs(300)];
    block_on(export_otlp(&front.url(), requests[0].clone())).unwrap();
    let statuses = block_on(export_otap(&front.url(), &requests[1..]));
    assert!(statuses.iter().all(|s| s.status_code == 0), "{statuses:?}");
    let want: Vec<String> = requests.iter().flat_map(equiv::logs).collect();
    assert_same_records(want, received(&dir));

    // Over TLS but without the token: UNAUTHENTICATED.
    let request = data.logs(5);
    let status = block_on(async {
        let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(
            tonic::transport::Certificate::from_pem(certified.cert.pem()),
        );
        let channel = tonic::transport::Endpoint::from_shared(secure.clone())
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let codec =
            tonic_prost::ProstCodec::<ExportLogsServiceRequest, ExportLogsServiceResponse>::default(
            );
        let path =
            PathAndQuery::from_static("/opentelemetry.proto.collector.logs.v1.LogsService/Export");
        grpc.unary(tonic::Request::new(request), path, codec)
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");

    // A client in the clear gets no service from the TLS port, and the gateway goes on.
    let plain = format!("http://127.0.0.1:{port}");
    assert!(block_on(export_otlp(&plain, data.logs(5))).is_err());
    let before = received(&dir).len();
    block_on(export_otlp(&front.url(), data.logs(20))).unwrap();
    assert_eq!(received(&dir).len(), before + 20);
}
