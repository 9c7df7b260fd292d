//! A small OTLP/gRPC logs backend for fault tests, on real HTTP/2: it answers each Export
//! after `delay` (a slow backend), keeps the records it acknowledged, and can be stopped
//! abruptly (connections cut, as in a crash) and started again on the same port. Records whose
//! body is [`REJECTED_BODY`] are refused with a partial success.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use penstock_engine::equiv;
use prost::Message;
use tokio::sync::oneshot;

/// The body of a record the backend rejects (in an otherwise accepted request).
pub const REJECTED_BODY: &str = "reject me";

/// Records acknowledged by a backend (equivalence lines), shared across its restarts.
pub type Received = Arc<Mutex<Vec<String>>>;

/// A running backend; stopped when dropped.
pub struct Backend {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Body = StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

impl Backend {
    /// Listens on `addr` (port 0: any) and serves until stopped.
    pub fn start(addr: &str, delay: Duration, received: Received) -> Backend {
        let listener = std::net::TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // Leaving block_on drops the runtime and with it every connection.
            runtime.block_on(serve(listener, delay, received, stopped));
        });
        Backend {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    delay: Duration,
    received: Received,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = &mut stopped => return,
        };
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let received = Arc::clone(&received);
                async move { Ok::<_, Infallible>(export(request, delay, &received).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Removes the records whose body is [`REJECTED_BODY`]; returns how many there were.
fn reject(export: &mut ExportLogsServiceRequest) -> i64 {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let mut rejected = 0;
    for scope in export
        .resource_logs
        .iter_mut()
        .flat_map(|r| r.scope_logs.iter_mut())
    {
        scope.log_records.retain(|record| {
            let refuse = matches!(
                record.body.as_ref().and_then(|b| b.value.as_ref()),
                Some(Value::StringValue(s)) if s == REJECTED_BODY
            );
            rejected += i64::from(refuse);
            !refuse
        });
    }
    rejected
}

/// One Export: an uncompressed gRPC message in, an empty response and `grpc-status` out.
async fn export(
    request: Request<Incoming>,
    delay: Duration,
    received: &Received,
) -> Response<Body> {
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let mut rejected = 0;
    let status = match body {
        Ok(bytes) if bytes.len() >= 5 && bytes[0] == 0 => {
            match ExportLogsServiceRequest::decode(&bytes[5..]) {
                Ok(mut export) => {
                    tokio::time::sleep(delay).await;
                    rejected = reject(&mut export);
                    received.lock().unwrap().extend(equiv::logs(&export));
                    0
                }
                Err(_) => 3,
            }
        }
        _ => 3,
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(status));
    let mut frames = Vec::new();
    if status == 0 {
        let response = ExportLogsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportLogsPartialSuccess {
                rejected_log_records: rejected,
                error_message: "rejected on request".into(),
            }),
        }
        .encode_to_vec();
        let mut frame = vec![0];
        frame.extend_from_slice(&(response.len() as u32).to_be_bytes());
        frame.extend_from_slice(&response);
        frames.push(Ok(Frame::data(Bytes::from(frame))));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap()
}
