//! OTAP stream slots shared fairly: one client opening 10,000 streams over 10 connections (from
//! 127.0.0.2), holding each a second without a message and abandoning it, never keeps another
//! client (the reference Go producer, from 127.0.0.1) from streaming meanwhile: with the
//! default shares the greedy peer holds at most half the slots, and abandoned streams give
//! their slots back at once. When one peer may hold them all and leaves them open, a new
//! stream takes the slot of one that has been idle, which ends with UNAVAILABLE.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use penstock_engine::datagen::DataGen;
use penstock_engine::proto::{BatchArrowRecords, BatchStatus};
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Streaming};

use common::go::interop_binary;
use common::{Gateway, block_on, temp_dir};

/// The greedy client: connections, and streams it opens on each (as many as a connection
/// carries at once, HTTP/2's limit the GRPC source sets).
const CONNECTIONS: usize = 10;
const STREAMS_PER_CONNECTION: usize = 128;

/// One worker's slots by default: `max_streams` 1024, a peer half of them.
const SLOTS: usize = 1024;

fn gateway(name: &str, options: &str) -> Gateway {
    let dir = temp_dir(name);
    Gateway::start_with(
        &dir,
        name,
        &format!(
            "CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:0'{options});
             CREATE SINK out TO CONSOLE WITH (limit = 0);
             CREATE PIPELINE p FROM edge AS BEGIN INSERT INTO out SELECT * FROM logs; END;"
        ),
        &["--workers", "1", "--admin-listen", "127.0.0.1:0"],
    )
    .keeping(dir)
}

/// A connection to `url` from address `local`.
async fn connect_from(url: &str, local: IpAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .local_address(Some(local))
        .connect()
        .await
        .unwrap()
}

/// Opens an OTAP logs stream on `channel` that sends `requests`.
async fn arrow_logs<S>(
    channel: tonic::transport::Channel,
    requests: S,
) -> Result<Streaming<BatchStatus>, tonic::Status>
where
    S: futures::Stream<Item = BatchArrowRecords> + Send + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<BatchArrowRecords, BatchStatus>::default();
    let path = PathAndQuery::from_static(
        "/opentelemetry.proto.experimental.arrow.v1.ArrowLogsService/ArrowLogs",
    );
    let opened = grpc
        .streaming(tonic::Request::new(requests), path, codec)
        .await;
    opened.map(tonic::Response::into_inner)
}

/// What the greedy client got: the streams it holds open, how many it opened and abandoned,
/// and how many were refused.
#[derive(Default)]
struct Greedy {
    held: Vec<(Streaming<BatchStatus>, tokio::sync::oneshot::Sender<()>)>,
    abandoned: usize,
    refused: usize,
    /// Streams the client gave up opening (none of its connection's streams to spare).
    given_up: usize,
}

/// How the greedy client treats the streams the gateway accepts.
#[derive(Clone, Copy)]
enum Treat {
    /// Keeps them open, sending nothing; a stream it could not open within a few seconds
    /// (its connection's concurrent streams are all held) is given up.
    Hold,
    /// Keeps each open a second without sending, then drops it.
    AbandonAfterASecond,
}

/// Opens [`CONNECTIONS`] connections from `local` and `streams` OTAP log streams on each,
/// none of which sends a message.
async fn greedy_client(url: &str, local: IpAddr, streams: usize, treat: Treat) -> Greedy {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let channel = connect_from(url, local).await;
        for _ in 0..streams {
            let channel = channel.clone();
            tasks.spawn(async move {
                // Nothing is sent; the request ends (as a client's does when it gives a
                // stream up) once `stop` is dropped.
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let never = futures::stream::pending::<BatchArrowRecords>().take_until(stopped);
                let opening = arrow_logs(channel, never);
                let Ok(stream) = tokio::time::timeout(Duration::from_secs(5), opening).await else {
                    return None;
                };
                match (stream, treat) {
                    (Ok(stream), Treat::AbandonAfterASecond) => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        drop((stream, stop));
                        Some(Ok(None))
                    }
                    (Ok(stream), Treat::Hold) => Some(Ok(Some((stream, stop)))),
                    (Err(status), _) => Some(Err(status)),
                }
            });
        }
    }
    let mut greedy = Greedy::default();
    while let Some(opened) = tasks.join_next().await {
        match opened.unwrap() {
            None => greedy.given_up += 1,
            Some(Ok(Some(stream))) => greedy.held.push(stream),
            Some(Ok(None)) => greedy.abandoned += 1,
            Some(Err(status)) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                greedy.refused += 1;
            }
        }
    }
    greedy
}

/// The reference Go producer sends one stream of one logs request to `addr`, from 127.0.0.1:
/// Ok with its batch status code, or Err with what the stream ended with.
fn reference_producer_sends(binary: &std::path::Path, addr: &str) -> Result<i64, String> {
    let request = DataGen::new(5).logs(100).encode_to_vec();
    let mut child = Command::new(binary)
        .args(["send", "-signal", "logs", "-addr", addr])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(&(request.len() as u32).to_le_bytes())
        .unwrap();
    stdin.write_all(&request).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let stdout = String::from_utf8(output.stdout).unwrap();
    let status: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    Ok(status["code"].as_i64().unwrap())
}

/// The reference producer sends one stream to `addr` again, as exporters do, while it is
/// refused RESOURCE_EXHAUSTED (at most 30 s), until its batch is acknowledged; how many times
/// it was refused.
async fn retrying_until_accepted(go: &std::path::Path, addr: &str) -> usize {
    let started = Instant::now();
    let mut refusals = 0;
    loop {
        let (go, addr) = (go.to_path_buf(), addr.to_string());
        let sent = tokio::task::spawn_blocking(move || reference_producer_sends(&go, &addr));
        match sent.await.unwrap() {
            Ok(code) => {
                assert_eq!(code, 0);
                return refusals;
            }
            Err(why) => {
                assert!(why.contains("ResourceExhausted"), "{why}");
                refusals += 1;
                assert!(started.elapsed() < Duration::from_secs(30), "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[test]
fn a_greedy_peer_holds_half_the_stream_slots_and_another_peer_streams_meanwhile() {
    let Some(go) = interop_binary() else {
        return;
    };
    let gateway = gateway("slots-shares", "");
    let url = gateway.url();
    let greedy = std::thread::spawn(move || {
        block_on(greedy_client(
            &url,
            IpAddr::from([127, 0, 0, 2]),
            STREAMS_PER_CONNECTION,
            Treat::AbandonAfterASecond,
        ))
    });
    // While the greedy client holds every slot it may: its share, half of them.
    gateway.wait_until("the greedy client holds its share", |g| {
        g.metric("penstock_otap_streams_refused_total") > 0.0
    });
    let open = gateway.metric("penstock_otap_streams");
    assert!(open <= (SLOTS / 2) as f64, "{open} streams open");
    // Meanwhile, another client's first stream is accepted, its batch acknowledged.
    assert_eq!(reference_producer_sends(&go, &gateway.addr), Ok(0));

    let greedy = greedy.join().unwrap();
    println!(
        "the greedy client: {} streams opened and abandoned, {} refused, {} given up",
        greedy.abandoned, greedy.refused, greedy.given_up
    );
    assert_eq!(
        greedy.abandoned + greedy.refused,
        CONNECTIONS * STREAMS_PER_CONNECTION,
        "every stream was answered"
    );
    assert!(greedy.abandoned >= SLOTS / 2, "it held its share");
    assert_eq!(
        gateway.metric("penstock_otap_streams_refused_total"),
        greedy.refused as f64
    );
    // Abandoned streams give their slots back at once.
    gateway.wait_until("the abandoned streams are freed", |g| {
        g.metric("penstock_otap_streams") == 0.0
    });
}

#[test]
fn a_new_stream_takes_the_slot_of_an_idle_one_when_one_peer_holds_them_all() {
    let Some(go) = interop_binary() else {
        return;
    };
    let gateway = gateway("slots-evicted", ", max_streams_per_peer = 1024");
    let url = gateway.url();
    block_on(async {
        // Enough streams to take every slot, held open.
        let streams = 2 * SLOTS / CONNECTIONS;
        let local = IpAddr::from([127, 0, 0, 2]);
        let mut greedy = greedy_client(&url, local, streams, Treat::Hold).await;
        assert!(greedy.held.len() >= SLOTS, "{} held", greedy.held.len());
        assert!(
            gateway.metric("penstock_otap_streams") <= SLOTS as f64,
            "never more than max_streams"
        );

        // A sender that retries what is refused, as exporters do: it is refused only while
        // every stream holding a slot has been idle less than a second, then takes the slot
        // of one that has.
        let refusals = retrying_until_accepted(&go, &gateway.addr).await;
        println!("the other client's stream got a slot after {refusals} refusals");
        assert!(gateway.metric("penstock_otap_streams_evicted_total") >= 1.0);

        // The streams whose slots were taken ended with UNAVAILABLE, saying why.
        let mut ended = 0;
        for (stream, _) in &mut greedy.held {
            let next = tokio::time::timeout(Duration::from_millis(1), stream.message()).await;
            if let Ok(Err(status)) = next {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(status.message().contains("idle"), "{status:?}");
                ended += 1;
            }
        }
        assert!(ended >= 1, "an evicted stream was told");
    });
}

/// Opens an OTAP logs stream from `local`, sends one batch on it and waits for its status;
/// the stream is then left open without another message.
async fn send_one_then_idle(
    url: &str,
    local: IpAddr,
) -> (
    Streaming<BatchStatus>,
    tokio::sync::mpsc::Sender<BatchArrowRecords>,
) {
    use penstock_engine::otap::{EncodeOptions, OtapEncoder};
    let (outgoing, requests) = tokio::sync::mpsc::channel(1);
    let requests = tokio_stream::wrappers::ReceiverStream::new(requests);
    let mut statuses = arrow_logs(connect_from(url, local).await, requests)
        .await
        .unwrap();
    let request = DataGen::new(8).logs(50).encode_to_vec();
    let batch = penstock_engine::otlp::decode::decode_logs(&request)
        .unwrap()
        .remove(0);
    let mut encoder =
        OtapEncoder::new(penstock_engine::Signal::Logs, EncodeOptions::default()).unwrap();
    outgoing
        .send(encoder.encode(&batch).unwrap())
        .await
        .unwrap();
    let status = statuses.message().await.unwrap().unwrap();
    assert_eq!(status.status_code, 0, "{status:?}");
    (statuses, outgoing)
}

#[test]
fn a_stream_that_sent_a_batch_and_went_idle_gives_its_slot_up() {
    let Some(go) = interop_binary() else {
        return;
    };
    // Two slots, both of which one peer may take.
    let gateway = gateway(
        "slots-idle-after-a-batch",
        ", max_streams = 2, max_streams_per_peer = 2",
    );
    let url = gateway.url();
    block_on(async {
        let local = IpAddr::from([127, 0, 0, 2]);
        let mut held = vec![
            send_one_then_idle(&url, local).await,
            send_one_then_idle(&url, local).await,
        ];
        assert_eq!(gateway.metric("penstock_otap_streams"), 2.0);
        // Another client retries as exporters do until an idle stream's slot is its own.
        retrying_until_accepted(&go, &gateway.addr).await;
        assert_eq!(gateway.metric("penstock_otap_streams_evicted_total"), 1.0);
        // The stream whose slot was taken was told why.
        let mut told = 0;
        for (statuses, _) in &mut held {
            let next = tokio::time::timeout(Duration::from_millis(200), statuses.message()).await;
            if let Ok(Err(status)) = next {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                told += 1;
            }
        }
        assert_eq!(told, 1);
    });
}
